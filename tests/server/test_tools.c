/* The agent API's pure parts: the think-block splitter over every split of its input,
 * tool calls read from each family's syntax (and malformed ones left as content), the
 * tool-call grammars against real calls, tools rendered by the templates, and the
 * request fields' refusals. */
#include "generate/grammar.h"
#include "server/api.h"
#include "server/tools.h"
#include "text/chat.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parts {
    char r[256], c[256];
    size_t nr, nc;
} parts;

static int collect(void *ctx, srv_part part, const char *s, size_t n) {
    parts *p = ctx;
    char *dst = part == SRV_REASONING ? p->r : p->c;
    size_t *len = part == SRV_REASONING ? &p->nr : &p->nc;
    cr_assert_lt(*len + n, sizeof p->r);
    memcpy(dst + *len, s, n);
    *len += n;
    dst[*len] = 0;
    return 0;
}

/* text fed in two pieces cut at every position, and byte by byte: the same split. */
static void split_every_way(const char *text, bool opened, const char *reasoning, const char *content) {
    size_t n = strlen(text);
    for (size_t cut = 0; cut <= n + 1; cut++) {
        parts p = {0};
        srv_think t;
        srv_think_init(&t, opened);
        if (cut <= n) {
            srv_think_feed(&t, text, cut, false, collect, &p);
            srv_think_feed(&t, text + cut, n - cut, false, collect, &p);
        } else {
            for (size_t i = 0; i < n; i++) srv_think_feed(&t, text + i, 1, false, collect, &p);
        }
        srv_think_feed(&t, "", 0, true, collect, &p);
        cr_assert_str_eq(p.r, reasoning, "'%s' cut at %zu: reasoning '%s'", text, cut, p.r);
        cr_assert_str_eq(p.c, content, "'%s' cut at %zu: content '%s'", text, cut, p.c);
    }
}

Test(tools, think_split) {
    split_every_way("<think>\nweigh it</think>\n\nThe answer.", false, "\nweigh it", "The answer.");
    split_every_way("plain <think>not at the start</think>", false, "", "plain <think>not at the start</think>");
    split_every_way("  <think>a</think>b", false, "a", "b");
    split_every_way("<thin", false, "", "<thin");
    split_every_way("<think>cut by max_tokens </thi", false, "cut by max_tokens </thi", "");
    split_every_way("already thinking</think>done", true, "already thinking", "done");
    cr_assert(srv_think_opened("<|im_start|>assistant\n<think>\n"));
    cr_assert(!srv_think_opened("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
}

static void calls_of(chat_family f, const char *text, int want, size_t n_calls, size_t content_len) {
    srv_calls c;
    int got = srv_calls_parse(f, text, strlen(text), 1, &c);
    cr_assert_eq(got, want, "%s: '%s' gave %d", chat_family_name(f), text, got);
    if (got == 1) {
        cr_assert_eq(c.n, n_calls);
        cr_assert_eq(c.content_len, content_len, "content %zu", c.content_len);
        for (size_t i = 0; i < c.n; i++) {
            cr_assert_eq(strlen(c.call[i].id), 9);
            cr_assert_eq(c.call[i].arguments[0], '{');
        }
    }
    srv_calls_free(&c);
}

Test(tools, parse_calls) {
    calls_of(CHAT_QWEN3, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", 1, 1, 0);
    calls_of(CHAT_CHATML, "Let me see.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n"
                          "<tool_call>\n{\"name\": \"g\", \"arguments\": \"{\\\"x\\\": 2}\"}\n</tool_call>\n",
             1, 2, 11);
    calls_of(CHAT_QWEN3, "no call here", 0, 0, 0);
    calls_of(CHAT_QWEN3, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": </tool_call>", 0, 0, 0); /* bad JSON */
    calls_of(CHAT_QWEN3, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}", 0, 0, 0);           /* unclosed */
    calls_of(CHAT_QWEN3, "<tool_call>{\"arguments\": {}}</tool_call>", 0, 0, 0);                 /* no name */
    calls_of(CHAT_QWEN3, "<tool_call>{\"name\": \"f\", \"arguments\": []}</tool_call>", 0, 0, 0); /* not an object */
    calls_of(CHAT_QWEN3, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> trailing", 0, 0, 0);
    calls_of(CHAT_LLAMA31, "{\"name\": \"f\", \"parameters\": {\"q\": \"x\"}}", 1, 1, 0);
    calls_of(CHAT_LLAMA31, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", 1, 1, 0);
    calls_of(CHAT_LLAMA31, "Sure: {\"name\": \"f\"}", 0, 0, 0);
    calls_of(CHAT_MISTRAL_V3, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": {}}]",
             1, 2, 0);
    calls_of(CHAT_MISTRAL_V7_TEKKEN, "[{\"name\": \"f\"}]", 0, 0, 0);
}

static srv_request tool_request(const char *choice) {
    char body[1024];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\",\"function\":"
             "{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
             "\"string\"}},\"required\":[\"city\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"noop\"}}],"
             "\"tool_choice\":%s}",
             choice);
    srv_request r;
    srv_error e;
    srv_limits lim = {.max_tokens = 100, .default_max_tokens = 10};
    cr_assert_eq(srv_request_parse(&r, SRV_CHAT, body, strlen(body), &lim, &e), 0, "%s", e.message);
    return r;
}

/* The forced call's grammar accepts the family's real call syntax and nothing else. */
static void grammar_takes(srv_request *r, chat_family f, const char *good, const char *bad) {
    srv_error e;
    cr_assert_eq(srv_tools_grammar(r, f, &e), 0, "%s", e.message);
    kiln_err err = {0};
    gram *g = gram_parse(r->grammar, &err);
    cr_assert_not_null(g, "%s\n%s", err.msg, r->grammar);
    static char b[256];
    const char *p[256];
    size_t len[256];
    for (int i = 0; i < 256; i++) b[i] = (char)i, p[i] = &b[i], len[i] = 1;
    gram_vocab *v = gram_vocab_from_pieces(p, len, 256, &err);
    gram_match *m = gram_match_create(g, v, &err);
    cr_assert_eq(gram_match_bytes(m, good, strlen(good)), 0, "%s refused '%s'", chat_family_name(f), good);
    cr_assert(gram_match_accepting(m), "'%s' is not complete", good);
    gram_match_reset(m);
    cr_assert(gram_match_bytes(m, bad, strlen(bad)) != 0 || !gram_match_accepting(m), "took '%s'", bad);
    gram_match_free(m);
    gram_vocab_free(v);
    gram_free(g);
}

Test(tools, forced_call_grammars) {
    srv_request r = tool_request("\"required\"");
    grammar_takes(&r, CHAT_QWEN3, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
                  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>");
    grammar_takes(&r, CHAT_LLAMA31, "{\"name\": \"noop\", \"parameters\": {\"any\": [1]}}", "{\"name\": \"other\"");
    grammar_takes(&r, CHAT_MISTRAL_V3,
                  "[{\"name\": \"noop\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"\"}}]",
                  "[]");
    srv_request_free(&r);
    r = tool_request("{\"type\":\"function\",\"function\":{\"name\":\"noop\"}}");
    cr_assert_eq(r.tool_choice, SRV_TOOLS_NAMED);
    grammar_takes(&r, CHAT_CHATML, "<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>",
                  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}\n</tool_call>");
    srv_error e;
    cr_assert_eq(srv_tools_grammar(&r, CHAT_GEMMA, &e), -1);
    cr_assert_eq(e.status, 400);
    srv_request_free(&r);
}

/* Qwen3's template with tools, a call and its result, as its Jinja writes them. */
Test(tools, qwen3_renders_tools) {
    const char *tools[] = {"{\"type\": \"function\", \"function\": {\"name\": \"f\"}}"};
    chat_tool_call call = {"abc123def", "f", "{\"x\": 1}"};
    chat_msg m[] = {{.role = "system", .content = "Be useful."},
                    {.role = "user", .content = "Do it."},
                    {.role = "assistant", .content = "", .tool_calls = &call, .n_tool_calls = 1},
                    {.role = "tool", .content = "42", .tool_call_id = "abc123def"},
                    {.role = "tool", .content = "43", .tool_call_id = "abc123def"}};
    chat_opts o = {.tools = tools, .n_tools = 1, .no_thinking = true};
    kiln_err err = {0};
    char *text = chat_render_opts(CHAT_QWEN3, m, 5, true, NULL, &o, &err);
    cr_assert_not_null(text, "%s", err.msg);
    const char *want =
        "<|im_start|>system\nBe useful.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"f\"}}\n</tools>\n\nFor each function call, return a json "
        "object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nDo it.<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<tool_response>\n43\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    cr_assert_str_eq(text, want);
    free(text);
    /* Llama 3.1: ipython results as JSON strings; a family without tools refuses them */
    text = chat_render_opts(CHAT_LLAMA31, m, 5, true, "<|begin_of_text|>", &o, &err);
    cr_assert_not_null(text, "%s", err.msg);
    cr_assert(strstr(text, "Environment: ipython\n"), "%s", text);
    cr_assert(strstr(text, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"f\", \"parameters\": "
                           "{\"x\": 1}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"42\"<|eot_id|>"),
              "%s", text);
    free(text);
    text = chat_render_opts(CHAT_MISTRAL_V3, m + 1, 4, true, "<s>", &o, &err);
    cr_assert_not_null(text, "%s", err.msg);
    cr_assert_str_eq(text, "<s>[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]"
                           "[/AVAILABLE_TOOLS][INST] Do it.[/INST][TOOL_CALLS] [{\"name\": \"f\", \"arguments\": "
                           "{\"x\": 1}, \"id\": \"abc123def\"}]</s>[TOOL_RESULTS] {\"content\": 42, \"call_id\": "
                           "\"abc123def\"}[/TOOL_RESULTS][TOOL_RESULTS] {\"content\": 43, \"call_id\": "
                           "\"abc123def\"}[/TOOL_RESULTS]");
    free(text);
    cr_assert_null(chat_render_opts(CHAT_GEMMA, m + 1, 3, true, "", &o, &err));
    cr_assert(strstr(err.msg, "no tool"), "%s", err.msg);
}

/* The conversation the template checks below render: a system message, a request, a
 * call of f, its result, a thanks; f's definition as the server writes it. */
static const char *const tool_f[] = {
    "{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"Do f.\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"integer\"}}}}}"};
static chat_tool_call call_f = {"abc123def", "f", "{\"x\": 1}"};
static const chat_msg turns_f[] = {{.role = "system", .content = "Be useful."},
                                   {.role = "user", .content = "Do it."},
                                   {.role = "assistant", .content = "", .tool_calls = &call_f, .n_tool_calls = 1},
                                   {.role = "tool", .content = "42", .tool_call_id = "abc123def"},
                                   {.role = "user", .content = "Thanks."}};

/* Mistral v7-tekken with tools as Mistral-Small-3.1-24B-Instruct-2503's template renders
 * them (transformers' Jinja; the expected text from a render of that template): spaced
 * tool tokens, the parallel-call prompt before the system message, the tools before the
 * last user message. */
Test(tools, mistral_v7_tekken_renders_tools_as_mistral_small_3_1) {
    chat_opts o = {.tools = tool_f, .n_tools = 1};
    kiln_err err = {0};
    char *text = chat_render_opts(CHAT_MISTRAL_V7_TEKKEN, turns_f, 5, true, "<s>", &o, &err);
    cr_assert_not_null(text, "%s", err.msg);
    cr_assert_str_eq(
        text,
        "<s>[SYSTEM_PROMPT]You are a helpful assistant that can call tools. If you call one or more tools, format "
        "them in a single JSON array or objects, where each object is a tool call, not as separate objects outside "
        "of an array or multiple arrays. Use the format [{\"name\": tool call name, \"arguments\": tool call "
        "arguments}, additional tool calls] if you call more than one tool. If you call tools, do not attempt to "
        "interpret them or otherwise provide a response until you receive a tool call result that you can interpret "
        "for the user.Be useful.[/SYSTEM_PROMPT][INST]Do it.[/INST][TOOL_CALLS] [{\"name\": \"f\", \"arguments\": "
        "{\"x\": 1}, \"id\": \"abc123def\"}]</s>[TOOL_RESULTS] {\"content\": 42, \"call_id\": \"abc123def\"}"
        "[/TOOL_RESULTS][AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": "
        "\"Do f.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"integer\"}}}}}]"
        "[/AVAILABLE_TOOLS][INST]Thanks.[/INST]");
    free(text);
}

/* f's definition indented by 4 (Llama 3.1's tojson(indent=4)) */
#define F_INDENTED                                                                                                     \
    "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"f\",\n        \"description\": \"Do "    \
    "f.\",\n        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                "  \
    "\"x\": {\n                    \"type\": \"integer\"\n                }\n            }\n        }\n    }\n}"

/* Llama 3.1 with tools as Meta-Llama-3.1-8B-Instruct's template renders them (transformers'
 * Jinja; the expected text from a render of that template): tools indented in the first
 * user turn, the call as JSON with "parameters", results in ipython turns. */
Test(tools, llama31_renders_tools_as_its_template) {
    const char *indented[] = {F_INDENTED};
    chat_opts o = {.tools = tool_f, .tools_indented = indented, .n_tools = 1};
    kiln_err err = {0};
    char *text = chat_render_opts(CHAT_LLAMA31, turns_f, 5, true, "<s>", &o, &err);
    cr_assert_not_null(text, "%s", err.msg);
    cr_assert_str_eq(text,
        "<s><|start_header_id|>system<|end_header_id|>\n"
        "\n"
        "Environment: ipython\n"
        "Cutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n"
        "\n"
        "Be useful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Given the following functions, please respond with a JSON for a function call with its proper argumen"
        "ts that best answers the given prompt.\n"
        "\n"
        "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its v"
        "alue}.Do not use variables.\n"
        "\n"
        F_INDENTED "\n"
        "\n"
        "Do it.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
        "{\"name\": \"f\", \"parameters\": {\"x\": 1}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
        "\n"
        "\"42\"<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Thanks.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n");
    free(text);
}

static void refused(const char *body, const char *param, const char *what) {
    srv_request r;
    srv_error e;
    srv_limits lim = {.max_tokens = 100, .default_max_tokens = 10};
    cr_assert_eq(srv_request_parse(&r, SRV_CHAT, body, strlen(body), &lim, &e), -1, "accepted %s", body);
    cr_assert_eq(e.status, 400);
    cr_assert_str_eq(e.param, param, "%s: param %s", body, e.param);
    cr_assert(strstr(e.message, what), "'%s' does not say '%s'", e.message, what);
}

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"

Test(tools, request_refusals) {
    refused("{" MSG ",\"response_format\":{\"type\":\"xml\"}}", "response_format.type", "json_schema");
    refused("{" MSG ",\"response_format\":{\"type\":\"json_schema\"}}", "response_format.json_schema", "object");
    refused("{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\"}}}",
            "response_format.json_schema.schema", "missing");
    refused("{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"uniqueItems\":true}}}}",
            "response_format.json_schema.schema", "'uniqueItems' is not supported");
    refused("{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", "tools[0]", "letters");
    refused("{" MSG ",\"tools\":[],\"tool_choice\":\"required\"}", "tool_choice", "empty");
    refused("{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":"
            "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}", "tool_choice", "not in 'tools'");
    refused("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"[]\"}}]}]}",
            "messages[0].tool_calls[0]", "JSON object");
    refused("{" MSG ",\"grammar\":\"root ::= x\",\"response_format\":{\"type\":\"json_object\"}}", "grammar", "both");
    refused("{" MSG ",\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}}", "chat_template_kwargs.enable_thinking",
            "boolean");
    refused("{" MSG ",\"functions\":[{\"name\":\"f\"}]}", "functions", "use 'tools'");
    refused("{" MSG ",\"function_call\":\"auto\"}", "function_call", "use 'tools'");
}
