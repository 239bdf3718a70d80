/* Chat templates without a Jinja interpreter: a template's family is recognized by the
 * markers only that family writes (as llama.cpp's llm_chat_detect_template does), and
 * each family is rendered by C that reproduces, byte for byte, the reference template
 * named beside it below, as transformers renders it (Jinja's trim and Python's strip
 * remove Unicode whitespace, not just ASCII).
 *
 * Known differences from real templates:
 *  - Tools only for the families that were trained with them (chat_has_tools). Mistral
 *    v7's tool tokens are written as v7-tekken's reference for tools (Mistral-Small-3.1-
 *    24B-Instruct-2503: a space after [AVAILABLE_TOOLS], [TOOL_CALLS] and [TOOL_RESULTS],
 *    its parallel-call prompt before the system message), v3-tekken's without spaces.
 *  - Where a template silently drops or renders a system message after the first
 *    (Llama 2 drops it, Gemma writes a "system" turn), this refuses it.
 *  - Llama 3.2 writes today's date where 3.1 and 3.3 write "26 Jul 2024"; this writes the
 *    latter. Mistral Small 3's template writes a dated default system prompt when the
 *    conversation has none; this writes none.
 *  - Default system prompts of ChatML templates come from chat_default_system().
 *  - Templates detected as a family but not its reference differ in details: QwQ's and
 *    Qwen3-Thinking-2507's generation prompt adds "<think>\n"; Phi-3-small's and
 *    Phi-3-mini's first template write BOS and keep an empty system message. */
#include "text/chat.h"

#include "text/chat_buf.h"

#include "base/error.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ----------------------------------------------------------------------------- */

static const char *const family_names[CHAT_COUNT] = {
    [CHAT_CHATML] = "chatml",
    [CHAT_QWEN3] = "qwen3",
    [CHAT_LLAMA3] = "llama3",
    [CHAT_LLAMA2] = "llama2",
    [CHAT_MISTRAL] = "mistral",
    [CHAT_GEMMA] = "gemma",
    [CHAT_PHI3] = "phi3",
    [CHAT_LLAMA3_ALWAYS_GEN] = "llama3-always-gen",
    [CHAT_LLAMA31] = "llama3.1",
    [CHAT_MISTRAL_V1] = "mistral-v1",
    [CHAT_MISTRAL_V3] = "mistral-v3",
    [CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [CHAT_MISTRAL_V7] = "mistral-v7",
    [CHAT_MISTRAL_V7_TEKKEN] = "mistral-v7-tekken",
    [CHAT_GEMMA3] = "gemma3",
};

static bool valid_family(chat_family f) { return (unsigned)f < (unsigned)CHAT_COUNT; }

const char *chat_family_name(chat_family f) { return valid_family(f) ? family_names[f] : "unknown"; }

int chat_family_from_name(const char *name) {
    if (!name) return -1;
    for (int f = 0; f < CHAT_COUNT; f++)
        if (!strcmp(name, family_names[f])) return f;
    return -1;
}

const char *chat_end_of_turn(chat_family f) {
    switch (f) {
    case CHAT_CHATML:
    case CHAT_QWEN3: return "<|im_end|>";
    case CHAT_LLAMA3:
    case CHAT_LLAMA3_ALWAYS_GEN:
    case CHAT_LLAMA31: return "<|eot_id|>";
    case CHAT_LLAMA2:
    case CHAT_MISTRAL:
    case CHAT_MISTRAL_V1:
    case CHAT_MISTRAL_V3:
    case CHAT_MISTRAL_V3_TEKKEN:
    case CHAT_MISTRAL_V7:
    case CHAT_MISTRAL_V7_TEKKEN: return "</s>";
    case CHAT_GEMMA:
    case CHAT_GEMMA3: return "<end_of_turn>";
    case CHAT_PHI3: return "<|end|>";
    case CHAT_COUNT: break;
    }
    return NULL;
}

/* ---- detection ------------------------------------------------------------------------- */

static bool has(const char *s, const char *marker) { return strstr(s, marker) != NULL; }

int chat_detect(const char *t) {
    if (!t) return -1;
    int named = chat_family_from_name(t); /* a family's name stands for its template */
    if (named >= 0) return named;

    if (has(t, "<|im_start|>")) {
        /* Phi-4 (<|im_sep|>), SmolVLM (<|im_start|> is its BOS) and SmolLM3 (a metadata
         * system block) use the token but not ChatML's layout. */
        if (has(t, "<|im_sep|>") || has(t, "<end_of_utterance>") || has(t, "## Metadata")) return -1;
        return has(t, "</think>") ? CHAT_QWEN3 : CHAT_CHATML;
    }
    if (has(t, "[INST]")) {
        if (has(t, "[SYSTEM_PROMPT]"))
            /* v7 writes "[SYSTEM_PROMPT] " with a space, Tekken's v7 without. */
            return has(t, "[SYSTEM_PROMPT] ") ? CHAT_MISTRAL_V7 : CHAT_MISTRAL_V7_TEKKEN;
        if (has(t, "' [INST] ' + system_message") || has(t, "[AVAILABLE_TOOLS]")) {
            if (has(t, " [INST]")) return CHAT_MISTRAL_V1;
            if (has(t, "\"[INST]\"") || has(t, "'[INST]'")) return CHAT_MISTRAL_V3_TEKKEN;
            return CHAT_MISTRAL_V3;
        }
        return has(t, "<<SYS>>") ? CHAT_LLAMA2 : CHAT_MISTRAL;
    }
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) {
        if (has(t, "Cutting Knowledge Date")) return CHAT_LLAMA31;
        return has(t, "add_generation_prompt") ? CHAT_LLAMA3 : CHAT_LLAMA3_ALWAYS_GEN;
    }
    if (has(t, "<start_of_turn>"))
        return has(t, "first_user_prefix") || has(t, "<start_of_image>") ? CHAT_GEMMA3 : CHAT_GEMMA;
    if (has(t, "<|assistant|>") && has(t, "<|end|>")) {
        /* Phi-4-mini: the same tokens with no newline after the role, and <|tool|>. */
        if (has(t, "<|tool|>")) return -1;
        return CHAT_PHI3;
    }
    return -1;
}

/* ---- Python's str.strip() on UTF-8 ----------------------------------------------------- */

/* Jinja's trim and Python's strip() remove what str.isspace() calls whitespace: ASCII
 * \t\n\v\f\r, \x1c-\x1f and space, plus U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028,
 * U+2029, U+202F, U+205F and U+3000. ws_seq: whether the n bytes at u are one of them
 * (then its length); ws_front, ws_back: the length of one opening (ending) s, or 0. */
static size_t ws_seq(const unsigned char *u, size_t n) {
    if (n == 1) return (u[0] >= 0x09 && u[0] <= 0x0d) || (u[0] >= 0x1c && u[0] <= 0x20) ? 1 : 0;
    if (n == 2) return u[0] == 0xc2 && (u[1] == 0x85 || u[1] == 0xa0) ? 2 : 0;
    if (u[0] == 0xe1) return u[1] == 0x9a && u[2] == 0x80 ? 3 : 0;
    if (u[0] == 0xe2) {
        if (u[1] == 0x80) return u[2] <= 0x8a || u[2] == 0xa8 || u[2] == 0xa9 || u[2] == 0xaf ? 3 : 0;
        return u[1] == 0x81 && u[2] == 0x9f ? 3 : 0;
    }
    return u[0] == 0xe3 && u[1] == 0x80 && u[2] == 0x80 ? 3 : 0;
}

static size_t ws_front(span s) {
    const unsigned char *u = (const unsigned char *)s.p;
    for (size_t k = 1; k <= 3 && k <= s.n; k++)
        if (ws_seq(u, k)) return k;
    return 0;
}

static size_t ws_back(span s) {
    const unsigned char *u = (const unsigned char *)s.p;
    for (size_t k = 1; k <= 3 && k <= s.n; k++)
        if (ws_seq(u + s.n - k, k)) return k;
    return 0;
}

static span py_strip(span s) {
    size_t k;
    while (s.n && (k = ws_front(s))) s.p += k, s.n -= k;
    while (s.n && (k = ws_back(s))) s.n -= k;
    return s;
}

/* strip('\n') and its one-sided forms, as Qwen3's template calls them. */
static span lstrip_nl(span s) {
    while (s.n && s.p[0] == '\n') s.p++, s.n--;
    return s;
}
static span rstrip_nl(span s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}

/* First (or last) occurrence of a NUL-free needle in a span; NULL if none. */
static const char *find_first(span s, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= s.n; i++)
        if (!memcmp(s.p + i, needle, k)) return s.p + i;
    return NULL;
}
static const char *find_last(span s, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = s.n >= k ? s.n - k + 1 : 0; i-- > 0;)
        if (!memcmp(s.p + i, needle, k)) return s.p + i;
    return NULL;
}

/* ---- messages -------------------------------------------------------------------------- */

typedef enum role { R_SYSTEM, R_USER, R_ASSISTANT, R_TOOL } role;

typedef struct conv {
    const chat_msg *m;
    const role *r;
    size_t n;
    const char *fam; /* for messages */
    kiln_err *err;
    const chat_opts *o; /* never NULL */
} conv;

/* Tool results and the assistant turns that made calls: outside the user/assistant
 * alternation (as Mistral's templates filter them out before checking it). */
static bool tool_turn(const conv *c, size_t i) { return c->r[i] == R_TOOL || c->m[i].n_tool_calls; }

/* Llama 2, Mistral (but v7) and Gemma take user, assistant, user, ... from index `from`,
 * after an optional system message where the template has a system role. */
static int check_alternating(const conv *c, size_t from, bool system_role) {
    for (size_t i = from, k = 0; i < c->n; i++) {
        if (tool_turn(c, i)) continue;
        role want = k++ % 2 == 0 ? R_USER : R_ASSISTANT;
        if (c->r[i] == R_SYSTEM) {
            if (system_role)
                kiln_fail(c->err, KILN_ERR_INVALID,
                          "%s: message %zu: a system message is allowed only as the first message", c->fam, i);
            else
                kiln_fail(c->err, KILN_ERR_INVALID, "%s: the template has no system role (message %zu)", c->fam, i);
            return -1;
        }
        if (c->r[i] != want) {
            kiln_fail(c->err, KILN_ERR_INVALID,
                      "%s: message %zu is '%s': %sroles must alternate user/assistant/user/... starting with user",
                      c->fam, i, c->m[i].role, system_role ? "after the optional system message, " : "");
            return -1;
        }
    }
    return 0;
}


/* ---- tools ----------------------------------------------------------------------------- */

/* Qwen2.5's and Qwen3's (Hermes-style) tool block, closing the system turn. */
static void hermes_system(const conv *c, cbuf *b) {
    puts_(b, "<|im_start|>system\n");
    if (c->r[0] == R_SYSTEM) {
        puts_(b, c->m[0].content);
        puts_(b, "\n\n");
    }
    puts_(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
             "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for (size_t t = 0; t < c->o->n_tools; t++) {
        puts_(b, "\n");
        puts_(b, c->o->tools[t]);
    }
    puts_(b, "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
             "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
             "<args-json-object>}\n</tool_call><|im_end|>\n");
}

/* An assistant turn's calls; a newline before each but a first one that opens the turn. */
static void hermes_calls(const chat_msg *m, bool after_text, cbuf *b) {
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        if (k || after_text) puts_(b, "\n");
        puts_(b, "<tool_call>\n{\"name\": \"");
        puts_(b, m->tool_calls[k].name);
        puts_(b, "\", \"arguments\": ");
        puts_(b, m->tool_calls[k].arguments);
        puts_(b, "}\n</tool_call>");
    }
}

/* Consecutive tool results share one user turn. */
static void hermes_result(const conv *c, size_t i, cbuf *b) {
    if (i == 0 || c->r[i - 1] != R_TOOL) puts_(b, "<|im_start|>user");
    puts_(b, "\n<tool_response>\n");
    puts_(b, c->m[i].content);
    puts_(b, "\n</tool_response>");
    if (i + 1 == c->n || c->r[i + 1] != R_TOOL) puts_(b, "<|im_end|>\n");
}

/* A JSON string of s, as Python's json.dumps(ensure_ascii=False) writes it. */
static void put_json_string(cbuf *b, const char *s) {
    puts_(b, "\"");
    for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
        char esc[8];
        if (*u == '"' || *u == '\\') esc[0] = '\\', esc[1] = (char)*u, esc[2] = 0;
        else if (*u == '\n') strcpy(esc, "\\n");
        else if (*u == '\t') strcpy(esc, "\\t");
        else if (*u == '\r') strcpy(esc, "\\r");
        else if (*u == '\b') strcpy(esc, "\\b");
        else if (*u == '\f') strcpy(esc, "\\f");
        else if (*u < 0x20) snprintf(esc, sizeof esc, "\\u%04x", *u);
        else esc[0] = (char)*u, esc[1] = 0;
        puts_(b, esc);
    }
    puts_(b, "\"");
}

/* tight: no space after the tool tokens (v3-tekken, Mistral-Nemo-Instruct-2407) */
static void mistral_calls(const chat_msg *m, bool tight, cbuf *b) {
    puts_(b, tight ? "[TOOL_CALLS][" : "[TOOL_CALLS] [");
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        puts_(b, k ? ", {\"name\": \"" : "{\"name\": \"");
        puts_(b, m->tool_calls[k].name);
        puts_(b, "\", \"arguments\": ");
        puts_(b, m->tool_calls[k].arguments);
        puts_(b, ", \"id\": \"");
        puts_(b, m->tool_calls[k].id ? m->tool_calls[k].id : "");
        puts_(b, "\"}");
    }
    puts_(b, "]");
}

static void mistral_result(const chat_msg *m, bool tight, cbuf *b) {
    puts_(b, tight ? "[TOOL_RESULTS]{\"content\": " : "[TOOL_RESULTS] {\"content\": ");
    puts_(b, m->content);
    puts_(b, ", \"call_id\": \"");
    puts_(b, m->tool_call_id ? m->tool_call_id : "");
    puts_(b, "\"}[/TOOL_RESULTS]");
}

static void mistral_tools(const conv *c, bool tight, cbuf *b) {
    puts_(b, tight ? "[AVAILABLE_TOOLS][" : "[AVAILABLE_TOOLS] [");
    for (size_t t = 0; t < c->o->n_tools; t++) {
        if (t) puts_(b, ", ");
        puts_(b, c->o->tools[t]);
    }
    puts_(b, "][/AVAILABLE_TOOLS]");
}

/* A tool result or an assistant's calls (true: written), or the tools before the turn at
 * tools_at. */
static bool mistral_tool_turn(const conv *c, size_t i, bool tight, size_t tools_at, cbuf *b) {
    if (c->r[i] == R_TOOL) {
        mistral_result(&c->m[i], tight, b);
        return true;
    }
    if (c->m[i].n_tool_calls) {
        mistral_calls(&c->m[i], tight, b);
        puts_(b, "</s>");
        return true;
    }
    if (i == tools_at) mistral_tools(c, tight, b);
    return false;
}

/* Mistral writes the tools before the last user message. */
static size_t last_user(const conv *c) {
    for (size_t i = c->n; i-- > 0;)
        if (c->r[i] == R_USER) return i;
    return c->n;
}

/* ---- the families ---------------------------------------------------------------------- */

/* OpenHermes-2.5's (and Qwen2's, SmolLM2's once their default system message is added). */
static int render_chatml(const conv *c, bool gen, cbuf *b) {
    bool tools = c->o->n_tools > 0;
    if (tools) hermes_system(c, b);
    for (size_t i = tools && c->r[0] == R_SYSTEM ? 1 : 0; i < c->n; i++) {
        if (c->r[i] == R_TOOL) {
            hermes_result(c, i, b);
            continue;
        }
        if (c->m[i].n_tool_calls) { /* Qwen2.5's: the text, then each call after a newline */
            puts_(b, "<|im_start|>assistant");
            if (c->m[i].content[0]) puts_(b, "\n"), puts_(b, c->m[i].content);
            hermes_calls(&c->m[i], true, b);
            puts_(b, "<|im_end|>\n");
            continue;
        }
        puts_(b, "<|im_start|>");
        puts_(b, c->m[i].role);
        puts_(b, "\n");
        puts_(b, c->m[i].content);
        puts_(b, "<|im_end|>\n");
    }
    if (gen) puts_(b, "<|im_start|>assistant\n");
    return 0;
}

static bool is_tool_response(const char *s) {
    static const char head[] = "<tool_response>", tail[] = "</tool_response>";
    size_t n = strlen(s), kt = sizeof tail - 1;
    return !strncmp(s, head, sizeof head - 1) && n >= kt && !memcmp(s + n - kt, tail, kt);
}

/* Qwen3's: assistant turns after the last real user query keep their reasoning in a
 * <think> block (always for the final message, which gets an empty one if it had none);
 * earlier assistant turns keep only the text after their last </think>. */
static int render_qwen3(const conv *c, bool gen, cbuf *b) {
    if (c->o->n_tools) hermes_system(c, b);
    else if (c->r[0] == R_SYSTEM) {
        puts_(b, "<|im_start|>system\n");
        puts_(b, c->m[0].content);
        puts_(b, "<|im_end|>\n");
    }
    size_t last_query = c->n - 1; /* the template's default when no user message qualifies */
    for (size_t i = c->n; i-- > 0;)
        if (c->r[i] == R_USER && !is_tool_response(c->m[i].content)) {
            last_query = i;
            break;
        }
    for (size_t i = 0; i < c->n; i++) {
        if (c->r[i] == R_USER || (c->r[i] == R_SYSTEM && i > 0)) {
            puts_(b, "<|im_start|>");
            puts_(b, c->m[i].role);
            puts_(b, "\n");
            puts_(b, c->m[i].content);
            puts_(b, "<|im_end|>\n");
            continue;
        }
        if (c->r[i] == R_TOOL) {
            hermes_result(c, i, b);
            continue;
        }
        if (c->r[i] != R_ASSISTANT) continue;
        span content = whole(c->m[i].content), reasoning = {"", 0};
        const char *end_think = find_first(content, "</think>");
        if (end_think) {
            /* content.split('</think>')[-1].lstrip('\n') and
             * content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
            const char *last = find_last(content, "</think>") + strlen("</think>");
            span before = {content.p, (size_t)(end_think - content.p)};
            const char *think = find_last(before, "<think>");
            if (think) {
                const char *o = think + strlen("<think>");
                before = (span){o, (size_t)(before.p + before.n - o)};
            }
            reasoning = lstrip_nl(rstrip_nl(before));
            content = lstrip_nl((span){last, (size_t)(content.p + content.n - last)});
        }
        puts_(b, "<|im_start|>assistant\n");
        if (i > last_query && (i == c->n - 1 || reasoning.n)) {
            puts_(b, "<think>\n");
            put_span(b, lstrip_nl(rstrip_nl(reasoning)));
            puts_(b, "\n</think>\n\n");
            put_span(b, lstrip_nl(content));
        } else {
            put_span(b, content);
        }
        hermes_calls(&c->m[i], content.n > 0, b);
        puts_(b, "<|im_end|>\n");
    }
    if (gen) puts_(b, c->o->no_thinking ? "<|im_start|>assistant\n<think>\n\n</think>\n\n" : "<|im_start|>assistant\n");
    return 0;
}

static void llama3_turn(cbuf *b, const char *role_name, span content) {
    puts_(b, "<|start_header_id|>");
    puts_(b, role_name);
    puts_(b, "<|end_header_id|>\n\n");
    put_span(b, py_strip(content));
    puts_(b, "<|eot_id|>");
}

/* Meta-Llama-3-Instruct's (both revisions). */
static int render_llama3(const conv *c, bool gen, bool always_gen, const char *bos, cbuf *b) {
    puts_(b, bos);
    for (size_t i = 0; i < c->n; i++) llama3_turn(b, c->m[i].role, whole(c->m[i].content));
    if (gen || always_gen) puts_(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

/* Llama-3.1-8B-Instruct's and Llama-3.3-70B-Instruct's. */
static int render_llama31(const conv *c, bool gen, const char *bos, cbuf *b) {
    size_t from = c->r[0] == R_SYSTEM ? 1 : 0;
    bool tools = c->o->n_tools > 0;
    puts_(b, bos);
    puts_(b, "<|start_header_id|>system<|end_header_id|>\n\n");
    if (tools) puts_(b, "Environment: ipython\n");
    puts_(b, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    if (from) put_span(b, py_strip(whole(c->m[0].content)));
    puts_(b, "<|eot_id|>");
    if (tools) { /* the tools open the first user message */
        if (from == c->n || c->r[from] != R_USER)
            return kiln_fail(c->err, KILN_ERR_INVALID, "%s: with tools, the first message after the system "
                                                       "message must be the user's", c->fam);
        puts_(b, "<|start_header_id|>user<|end_header_id|>\n\n"
                 "Given the following functions, please respond with a JSON for a function call with its proper "
                 "arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, "
                 "\"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n");
        for (size_t t = 0; t < c->o->n_tools; t++) {
            puts_(b, c->o->tools_indented ? c->o->tools_indented[t] : c->o->tools[t]);
            puts_(b, "\n\n");
        }
        put_span(b, py_strip(whole(c->m[from].content)));
        puts_(b, "<|eot_id|>");
        from++;
    }
    for (size_t i = from; i < c->n; i++) {
        if (c->r[i] == R_TOOL) {
            puts_(b, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            put_json_string(b, c->m[i].content); /* a string is "iterable" to the template: tojson */
            puts_(b, "<|eot_id|>");
        } else if (c->m[i].n_tool_calls) {
            if (c->m[i].n_tool_calls > 1)
                return kiln_fail(c->err, KILN_ERR_INVALID, "%s: message %zu: this template takes one tool call per "
                                                           "message", c->fam, i);
            puts_(b, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"");
            puts_(b, c->m[i].tool_calls[0].name);
            puts_(b, "\", \"parameters\": ");
            puts_(b, c->m[i].tool_calls[0].arguments);
            puts_(b, "}<|eot_id|>");
        } else {
            llama3_turn(b, c->m[i].role, whole(c->m[i].content));
        }
    }
    if (gen) puts_(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

/* Llama-2-7b-chat-hf's. The system message opens the first user turn inside <<SYS>>; the
 * template strips the joined text, and every user turn starts with BOS. There is no
 * generation prompt: the [/INST] that closes the last user turn is one. */
static int render_llama2(const conv *c, const char *bos, cbuf *b) {
    size_t from = c->r[0] == R_SYSTEM ? 1 : 0;
    if (check_alternating(c, from, true)) return -1;
    cbuf joined = {0};
    for (size_t i = from; i < c->n; i++) {
        span content = whole(c->m[i].content);
        if (from && i == from) {
            joined.n = 0;
            puts_(&joined, "<<SYS>>\n");
            puts_(&joined, c->m[0].content);
            puts_(&joined, "\n<</SYS>>\n\n");
            puts_(&joined, c->m[i].content);
            if (joined.oom) {
                b->oom = true;
                break;
            }
            content = (span){joined.p, joined.n};
        }
        if (c->r[i] == R_USER) {
            puts_(b, bos);
            puts_(b, "[INST] ");
            put_span(b, py_strip(content));
            puts_(b, " [/INST]");
        } else {
            puts_(b, " ");
            put_span(b, py_strip(content));
            puts_(b, " </s>");
        }
    }
    free(joined.p);
    return 0;
}

/* Mistral-7B-Instruct-v0.2's first template (also v0.1's and Mixtral's): no system role. */
static int render_mistral(const conv *c, const char *bos, cbuf *b) {
    if (check_alternating(c, 0, false)) return -1;
    puts_(b, bos);
    for (size_t i = 0; i < c->n; i++) {
        if (c->r[i] == R_USER) {
            puts_(b, "[INST] ");
            puts_(b, c->m[i].content);
            puts_(b, " [/INST]");
        } else {
            puts_(b, c->m[i].content);
            puts_(b, "</s>");
        }
    }
    return 0;
}

/* Mistral's v1 (Mistral-7B-Instruct-v0.2, later revision), v3 (Mistral-7B-Instruct-v0.3,
 * Mistral-Large-Instruct-2407) and v3-tekken (Mistral-Nemo-Instruct-2407). v1 puts the
 * system message in the first user turn, v3 in the last one, and only when that user
 * turn ends the conversation. */
static int render_mistral_v1_v3(const conv *c, chat_family f, const char *bos, cbuf *b) {
    size_t from = c->r[0] == R_SYSTEM ? 1 : 0;
    if (check_alternating(c, from, true)) return -1;
    bool v1 = f == CHAT_MISTRAL_V1, tekken = f == CHAT_MISTRAL_V3_TEKKEN;
    const char *inst = v1 ? " [INST] " : tekken ? "[INST]" : "[INST] ";
    const char *end_inst = v1 ? " [/INST]" : "[/INST]";
    puts_(b, bos);
    size_t tools_at = c->o->n_tools ? last_user(c) : c->n;
    for (size_t i = from; i < c->n; i++) {
        if (mistral_tool_turn(c, i, tekken, tools_at, b)) continue;
        if (c->r[i] == R_USER) {
            puts_(b, inst);
            if (from && (v1 ? i == from : i == c->n - 1)) {
                puts_(b, c->m[0].content);
                puts_(b, "\n\n");
            }
            puts_(b, c->m[i].content);
            puts_(b, end_inst);
        } else {
            if (!tekken) puts_(b, " ");
            put_span(b, f == CHAT_MISTRAL_V3 ? py_strip(whole(c->m[i].content)) : whole(c->m[i].content));
            puts_(b, "</s>");
        }
    }
    return 0;
}

/* What Mistral-Small-3.1's template writes before the system message when there are tools
 * (its "\n\n" after it is a line continuation inside a Jinja string: nothing). */
#define MISTRAL_PARALLEL_TOOLS                                                                                      \
    "You are a helpful assistant that can call tools. If you call one or more tools, format them in a single "     \
    "JSON array or objects, where each object is a tool call, not as separate objects outside of an array or "     \
    "multiple arrays. Use the format [{\"name\": tool call name, \"arguments\": tool call arguments}, additional " \
    "tool calls] if you call more than one tool. If you call tools, do not attempt to interpret them or otherwise " \
    "provide a response until you receive a tool call result that you can interpret for the user."

/* Mistral's v7 (Mistral-Large-Instruct-2411, as Mistral documents it) and v7-tekken
 * (Mistral-Small-24B-Instruct-2501; with tools, Mistral-Small-3.1-24B-Instruct-2503): any
 * order, a system message anywhere. */
static int render_mistral_v7(const conv *c, bool tekken, const char *bos, cbuf *b) {
    puts_(b, bos);
    size_t tools_at = c->o->n_tools ? last_user(c) : c->n;
    for (size_t i = 0; i < c->n; i++) {
        if (mistral_tool_turn(c, i, false, tools_at, b)) continue;
        switch (c->r[i]) {
        case R_TOOL: break;
        case R_SYSTEM:
            puts_(b, tekken ? "[SYSTEM_PROMPT]" : "[SYSTEM_PROMPT] ");
            if (tekken && c->o->n_tools && i == 0) puts_(b, MISTRAL_PARALLEL_TOOLS);
            break;
        case R_USER: puts_(b, tekken ? "[INST]" : "[INST] "); break;
        case R_ASSISTANT: puts_(b, tekken ? "" : " "); break;
        }
        puts_(b, c->m[i].content);
        puts_(b, c->r[i] == R_SYSTEM ? "[/SYSTEM_PROMPT]" : c->r[i] == R_USER ? "[/INST]" : "</s>");
    }
    return 0;
}

/* gemma-2-2b-it's (gemma-7b-it's is the same) and gemma-3-4b-it's: "model" for the
 * assistant, contents trimmed; Gemma 3 opens the first turn with the system message. */
static int render_gemma(const conv *c, bool gen, bool gemma3, const char *bos, cbuf *b) {
    size_t from = gemma3 && c->r[0] == R_SYSTEM ? 1 : 0;
    if (check_alternating(c, from, gemma3)) return -1;
    puts_(b, bos);
    for (size_t i = from; i < c->n; i++) {
        puts_(b, c->r[i] == R_USER ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (from && i == from) {
            puts_(b, c->m[0].content);
            puts_(b, "\n\n");
        }
        put_span(b, py_strip(whole(c->m[i].content)));
        puts_(b, "<end_of_turn>\n");
    }
    if (gen) puts_(b, "<start_of_turn>model\n");
    return 0;
}

/* Phi-3.5-mini-instruct's (and Phi-3-mini's July 2024 revision): an empty system message
 * is left out, and without a generation prompt the text ends with EOS. */
static int render_phi3(const conv *c, bool gen, cbuf *b) {
    for (size_t i = 0; i < c->n; i++) {
        if (c->r[i] == R_SYSTEM && !c->m[i].content[0]) continue;
        puts_(b, "<|");
        puts_(b, c->m[i].role);
        puts_(b, "|>\n");
        puts_(b, c->m[i].content);
        puts_(b, "<|end|>\n");
    }
    puts_(b, gen ? "<|assistant|>\n" : "<|endoftext|>");
    return 0;
}

bool chat_has_tools(chat_family f) {
    return f == CHAT_CHATML || f == CHAT_QWEN3 || f == CHAT_LLAMA31 || f == CHAT_MISTRAL_V3 ||
           f == CHAT_MISTRAL_V3_TEKKEN || f == CHAT_MISTRAL_V7 || f == CHAT_MISTRAL_V7_TEKKEN;
}

char *chat_render(chat_family f, const chat_msg *msgs, size_t n, bool add_generation_prompt, const char *bos,
                  kiln_err *err) {
    return chat_render_opts(f, msgs, n, add_generation_prompt, bos, NULL, err);
}

char *chat_render_opts(chat_family f, const chat_msg *msgs, size_t n, bool add_generation_prompt, const char *bos,
                       const chat_opts *o, kiln_err *err) {
    static const chat_opts none;
    if (!o) o = &none;
    if (!valid_family(f)) {
        kiln_fail(err, KILN_ERR_INVALID, "unknown chat template family %d", (int)f);
        return NULL;
    }
    const char *fam = family_names[f];
    if (n == 0 || !msgs) {
        kiln_fail(err, KILN_ERR_INVALID, "%s: the conversation has no messages", fam);
        return NULL;
    }
    if (n > SIZE_MAX / sizeof(role)) {
        kiln_fail(err, KILN_ERR_NOMEM, "%s: out of memory", fam);
        return NULL;
    }
    role *roles = malloc(n * sizeof *roles);
    if (!roles) {
        kiln_fail(err, KILN_ERR_NOMEM, "%s: out of memory", fam);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r) {
            kiln_fail(err, KILN_ERR_INVALID, "%s: message %zu has no role", fam, i);
            free(roles);
            return NULL;
        }
        if (!strcmp(r, "system")) roles[i] = R_SYSTEM;
        else if (!strcmp(r, "user")) roles[i] = R_USER;
        else if (!strcmp(r, "assistant")) roles[i] = R_ASSISTANT;
        else if (!strcmp(r, "tool") && chat_has_tools(f)) roles[i] = R_TOOL;
        else if (!strcmp(r, "tool")) {
            kiln_fail(err, KILN_ERR_INVALID, "%s: message %zu: this template has no tool role", fam, i);
            free(roles);
            return NULL;
        } else {
            kiln_fail(err, KILN_ERR_INVALID,
                      "%s: message %zu has unknown role '%s' (expected system, user, assistant or tool)", fam, i, r);
            free(roles);
            return NULL;
        }
        if (!msgs[i].content) {
            kiln_fail(err, KILN_ERR_INVALID, "%s: message %zu (%s) has no content", fam, i, r);
            free(roles);
            return NULL;
        }
    }
    bool calls = false;
    for (size_t i = 0; i < n; i++) calls |= msgs[i].n_tool_calls > 0 && roles[i] == R_ASSISTANT;
    if ((o->n_tools || calls) && !chat_has_tools(f)) {
        kiln_fail(err, KILN_ERR_INVALID, "%s: this template has no tools (families with tools: chatml, qwen3, "
                                         "llama3.1, mistral-v3, mistral-v7 and their tekken forms)", fam);
        free(roles);
        return NULL;
    }
    if (!bos) bos = "";
    conv c = {msgs, roles, n, fam, err, o};
    cbuf b = {0};
    bool gen = add_generation_prompt;
    int rc = 0;
    switch (f) {
    case CHAT_CHATML: rc = render_chatml(&c, gen, &b); break;
    case CHAT_QWEN3: rc = render_qwen3(&c, gen, &b); break;
    case CHAT_LLAMA3: rc = render_llama3(&c, gen, false, bos, &b); break;
    case CHAT_LLAMA3_ALWAYS_GEN: rc = render_llama3(&c, gen, true, bos, &b); break;
    case CHAT_LLAMA31: rc = render_llama31(&c, gen, bos, &b); break;
    case CHAT_LLAMA2: rc = render_llama2(&c, bos, &b); break;
    case CHAT_MISTRAL: rc = render_mistral(&c, bos, &b); break;
    case CHAT_MISTRAL_V1:
    case CHAT_MISTRAL_V3:
    case CHAT_MISTRAL_V3_TEKKEN: rc = render_mistral_v1_v3(&c, f, bos, &b); break;
    case CHAT_MISTRAL_V7: rc = render_mistral_v7(&c, false, bos, &b); break;
    case CHAT_MISTRAL_V7_TEKKEN: rc = render_mistral_v7(&c, true, bos, &b); break;
    case CHAT_GEMMA: rc = render_gemma(&c, gen, false, bos, &b); break;
    case CHAT_GEMMA3: rc = render_gemma(&c, gen, true, bos, &b); break;
    case CHAT_PHI3: rc = render_phi3(&c, gen, &b); break;
    case CHAT_COUNT: break;
    }
    free(roles);
    if (rc == 0 && !b.oom && !b.p) { /* a template may write nothing (Llama 2 given only a system message) */
        b.p = calloc(1, 1);
        b.oom = !b.p;
    }
    if (rc || b.oom) {
        if (!rc) kiln_fail(err, KILN_ERR_NOMEM, "%s: out of memory", fam);
        free(b.p);
        return NULL;
    }
    return b.p;
}
