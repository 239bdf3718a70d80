/* Chat templates: the family is detected from tokenizer.chat_template (or named with
 * --chat-template), and conversations are rendered exactly as the model's own Jinja
 * template renders them. */
#ifndef KILN_TEXT_CHAT_H
#define KILN_TEXT_CHAT_H

#include "base/error.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum chat_family {
    CHAT_CHATML,   /* <|im_start|>role\n...<|im_end|>\n (Qwen2, SmolLM, generic) */
    CHAT_QWEN3,    /* ChatML with Qwen3's <think> handling of assistant turns */
    CHAT_LLAMA3,   /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_LLAMA2,   /* [INST] <<SYS>> ... [/INST] */
    CHAT_MISTRAL,  /* [INST] ... [/INST]: Mistral 7B v0.1/v0.2's first template, no system role */
    CHAT_GEMMA,    /* <start_of_turn>user ... <end_of_turn> (Gemma 1 and 2: no system role) */
    CHAT_PHI3,     /* <|user|>\n...<|end|>\n<|assistant|>\n */
    /* Variants that render differently from the families above (appended, so the values
     * above keep their numbers). */
    CHAT_LLAMA3_ALWAYS_GEN, /* Meta-Llama-3-Instruct's first template: the assistant header
                               is written even without add_generation_prompt */
    CHAT_LLAMA31,           /* Llama 3.1-3.3: a system turn always, opening with "Cutting
                               Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" */
    CHAT_MISTRAL_V1,        /* " [INST] sys\n\nuser [/INST] answer</s>" */
    CHAT_MISTRAL_V3,        /* "[INST] user[/INST] answer</s>", the system message joins the
                               last user turn (Mistral 7B v0.3, Large 2407) */
    CHAT_MISTRAL_V3_TEKKEN, /* v3 without the spaces (Mistral Nemo) */
    CHAT_MISTRAL_V7,        /* "[SYSTEM_PROMPT] sys[/SYSTEM_PROMPT][INST] user[/INST] answer</s>" */
    CHAT_MISTRAL_V7_TEKKEN, /* v7 without the spaces (Mistral Small 3) */
    CHAT_GEMMA3,            /* Gemma 3: the system message opens the first user turn */
    CHAT_COUNT
} chat_family;

/* A call the assistant made: arguments is its JSON object's text. */
typedef struct chat_tool_call {
    const char *id, *name, *arguments;
} chat_tool_call;

typedef struct chat_msg {
    const char *role;    /* "system", "user", "assistant", "tool" */
    const char *content;
    const chat_tool_call *tool_calls; /* an assistant's calls */
    size_t n_tool_calls;
    const char *tool_call_id;         /* a tool result's call */
} chat_msg;

/* What a request adds to the conversation. */
typedef struct chat_opts {
    const char *const *tools; /* each tool's JSON text ({"type": "function", "function": {...}}, Python's
                                 json.dumps spacing, as templates' tojson writes it) */
    const char *const *tools_indented; /* the same indented by 4 (Llama 3.1's tojson(indent=4)) */
    size_t n_tools;
    bool no_thinking;         /* Qwen3's enable_thinking=false: an empty think block opens the reply */
} chat_opts;

const char *chat_family_name(chat_family f); /* "chatml", "qwen3", "llama3", ... */
int chat_family_from_name(const char *name); /* -1 if unknown */
/* Detects the family of a Jinja template; -1 if unrecognized (the caller then names
 * the --chat-template flag in its message). */
int chat_detect(const char *template_src);

/* Renders the conversation plus, when add_generation_prompt, the assistant header.
 * bos is the BOS token's text, written where the template writes bos_token (Llama 3 and 2,
 * Mistral, Gemma); "" or NULL writes none.
 * Returns a malloc'ed NUL-terminated string, or NULL with err (unknown role, a role
 * order the template refuses, out of memory). */
char *chat_render(chat_family f, const chat_msg *msgs, size_t n, bool add_generation_prompt, const char *bos,
                  kiln_err *err);
/* chat_render with tools, tool calls and tool results, and template options (o may be
 * NULL). Tools render as the families were trained: Qwen/ChatML (Hermes) in the system
 * turn with <tool_call> replies and <tool_response> turns; Llama 3.1 in the first user
 * turn with JSON replies and ipython turns; Mistral v3/v7 as [AVAILABLE_TOOLS],
 * [TOOL_CALLS] and [TOOL_RESULTS]. Other families refuse tools. */
char *chat_render_opts(chat_family f, const chat_msg *msgs, size_t n, bool add_generation_prompt, const char *bos,
                       const chat_opts *o, kiln_err *err);
/* Whether the family renders tools. */
bool chat_has_tools(chat_family f);

/* The system message a ChatML template writes when the conversation starts without one
 * (Qwen2's "You are a helpful assistant.", Qwen2.5's, SmolLM2's), read from the template.
 * 0 with *out a malloc'ed string, or *out NULL when the template writes none; -1 with err
 * (out of memory). Pass it as a leading system message to render as such a template does. */
int chat_default_system(const char *template_src, char **out, kiln_err *err);

/* The text of the token that ends an assistant turn in this family ("<|im_end|>",
 * "<|eot_id|>", "</s>", "<end_of_turn>", "<|end|>"). */
const char *chat_end_of_turn(chat_family f);

#endif
