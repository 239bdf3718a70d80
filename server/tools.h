/* A model's output split into what the API returns apart: the think block
 * (reasoning_content) and the tool calls (tool_calls), per chat template family. Pure
 * functions over text; the streaming splitter holds back only what could still be the
 * start of a tag. */
#ifndef KILN_SERVER_TOOLS_H
#define KILN_SERVER_TOOLS_H

#include "text/chat.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- tool calls ---------------------------------------------------------------------------- */

typedef struct srv_call {
    char id[16];      /* 9 letters and digits (Mistral's templates require exactly that) */
    char *name;
    char *arguments;  /* the arguments object's compact JSON text */
} srv_call;

typedef struct srv_calls {
    srv_call *call;
    size_t n;
    size_t content_len; /* the output's text before the calls (trailing whitespace cut) */
} srv_calls;

/* Finds the calls in text[len] in the family's syntax (Hermes <tool_call> blocks for
 * chatml and qwen3; a {"name", "parameters"} object for llama3.1; a [TOOL_CALLS] array
 * for mistral). 1 with out filled (ids from seed), 0 when the text is no well-formed
 * call (then it is plain content), -1 when out of memory. */
int srv_calls_parse(chat_family f, const char *text, size_t len, uint64_t seed, srv_calls *out);
void srv_calls_free(srv_calls *c);
/* Where a family's calls may start in streamed text: the opening tag ("<tool_call>"), or
 * NULL where a call is the whole output (llama3.1, mistral: streamed text is held to the
 * end when tools are offered). */
const char *srv_calls_tag(chat_family f);

/* ---- think blocks ------------------------------------------------------------------------ */

typedef enum srv_part { SRV_REASONING, SRV_CONTENT } srv_part;

/* Splits streamed text into reasoning and content: a leading "<think>...</think>" (or,
 * when the prompt opened the block, everything up to "</think>") is reasoning; the
 * whitespace after "</think>" is dropped. */
typedef struct srv_think {
    int state;
    char hold[16]; /* a possible tag's start */
    size_t n_hold;
} srv_think;

/* opened: the prompt ends inside a think block. */
void srv_think_init(srv_think *t, bool opened);
/* Feeds text; out(ctx, part, bytes, n) receives the pieces in order (nonzero stops: the
 * value is returned). final: flush what is held. */
typedef int (*srv_think_out)(void *ctx, srv_part part, const char *s, size_t n);
int srv_think_feed(srv_think *t, const char *s, size_t n, bool final, srv_think_out out, void *ctx);
/* Whether a rendered prompt leaves a think block open (DeepSeek-R1's generation prompt). */
bool srv_think_opened(const char *prompt);

#endif
