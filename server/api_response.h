/* The OpenAI-compatible API's response side: builders returning malloc'ed JSON text
 * (NULL only when out of memory), Server-Sent Events framing for streams, and the
 * log-probabilities a caller reports per generated token. */
#ifndef KILN_SERVER_API_RESPONSE_H
#define KILN_SERVER_API_RESPONSE_H

#include "generate/generate.h"
#include "server/api.h"
#include "server/tools.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_SSE_DONE "data: [DONE]\n\n"

/* ---- log-probabilities -------------------------------------------------------------------- */

/* Token texts point at the caller's bytes (a tokenizer's pieces): any bytes, a piece may
 * be part of a UTF-8 character; "bytes" in the JSON gives them exactly. */
typedef struct srv_logprob_alt {
    const char *text;
    size_t len;
    double logprob; /* -inf is written as -9999.0, as OpenAI does */
} srv_logprob_alt;

typedef struct srv_token_logprob {
    srv_logprob_alt tok;                     /* the generated token */
    srv_logprob_alt top[SRV_MAX_TOP_LOGPROBS]; /* the best alternatives, best first */
    uint32_t n_top;
} srv_token_logprob;

/* Log-softmax of logits[n] in f64, for the chosen id and the k (<= 20) largest logits
 * (best first, ties to the lower id). Only finite logits take part, as in the sampler: a
 * NaN or infinite one has logprob -inf and is never an alternative. Writes *chosen_lp,
 * top_ids[*n_top], top_lps[*n_top] (*n_top = k, or fewer finite logits). 0, or -1 when
 * no logit is finite or chosen is out of range. */
int srv_logprobs(const float *logits, uint32_t n, int32_t chosen, uint32_t k, double *chosen_lp, int32_t *top_ids,
                 double *top_lps, uint32_t *n_top);

/* Where a generated token's text lies in the output: [start, end) in the bytes the
 * generation loop's detokenizer produces. A token that ends inside a UTF-8 character has
 * start == end: the character's bytes count for the token that completes it. */
typedef struct srv_token_span {
    size_t start, end;
} srv_token_span;

/* Streaming: how many of the unreported tokens span[0..n) go with the output's first
 * `emitted` bytes: up to the last one with bytes of its own that ends by then (a token
 * waiting for the rest of its character, or whose text is held back, waits). */
size_t srv_spans_ready(const srv_token_span *span, size_t n, size_t emitted);
/* When generation ended: how many of the unreported span[0..n) to report still: all of
 * them, or, when a stop string cut the output at `emitted` bytes, those that start before
 * the cut (the text of the others was dropped). */
size_t srv_spans_rest(const srv_token_span *span, size_t n, bool stopped, size_t emitted);

/* ---- complete responses ------------------------------------------------------------------- */

typedef struct srv_usage {
    uint32_t prompt_tokens, completion_tokens;
    uint32_t cached_tokens; /* prompt tokens the prefix cache already held */
} srv_usage;

typedef struct srv_completion {
    const char *id;            /* "chatcmpl-..." or "cmpl-..." */
    int64_t created;           /* Unix seconds */
    const char *model;
    const char *text;          /* the generated text */
    size_t text_len;
    const char *finish_reason; /* srv_finish_reason */
    const srv_token_logprob *logprobs; /* NULL: "logprobs": null */
    size_t n_logprobs;
    size_t text_offset;        /* completions' legacy text_offset of the first token */
    srv_usage usage;
    const char *reasoning;     /* chat: the think block's text (NULL: no reasoning_content) */
    size_t reasoning_len;
    const srv_call *calls;     /* chat: the tool calls (content is null when text_len is 0) */
    size_t n_calls;
} srv_completion;

/* "stop" (end of generation, a stop string, a cancelled request) or "length" (max_tokens,
 * the end of the context). */
const char *srv_finish_reason(gen_finish f);

char *srv_chat_response(const srv_completion *c); /* object "chat.completion" */
char *srv_text_response(const srv_completion *c); /* object "text_completion" */
/* GET /v1/models: ids[n], each owned by "kiln". */
char *srv_models_response(const char *const *ids, size_t n, int64_t created);
/* GET /v1/models/ID: the one model object. */
char *srv_model_response(const char *id, int64_t created);

/* ---- streams: each returns one whole SSE event, "data: {...}\n\n" ------------------------- */

typedef struct srv_chunk {
    const char *id;
    int64_t created;
    const char *model;
    bool role;                 /* the first chunk: delta {role: "assistant", content: ""} */
    const char *text;          /* a content delta (NULL: none) */
    size_t text_len;
    const char *finish_reason; /* the last chunk: empty delta and this reason */
    const srv_token_logprob *logprobs; /* of the tokens behind text; NULL: null */
    size_t n_logprobs;
    size_t text_offset;
    bool include_usage;        /* the request asked for a usage chunk: "usage": null here */
    const char *reasoning;     /* chat: a reasoning_content delta (NULL: none) */
    size_t reasoning_len;
    const srv_call *call;      /* chat: a tool_calls delta for call number call_index: */
    uint32_t call_index;
    bool call_head;            /* its id, type and name (arguments ""), else */
    const char *call_args;     /* a fragment of its arguments */
    size_t call_args_len;
} srv_chunk;

char *srv_chat_chunk(const srv_chunk *c); /* object "chat.completion.chunk" */
char *srv_text_chunk(const srv_chunk *c); /* object "text_completion" */
/* The usage chunk that ends a stream with include_usage (choices: []); chat selects the
 * object name. */
char *srv_usage_chunk(bool chat, const char *id, int64_t created, const char *model, const srv_usage *u);
/* An error that ends a stream after its 200 (the generation failed): the error object,
 * {"error":{...}} as srv_error_json writes it, as one event. */
char *srv_error_chunk(const srv_error *e);

#endif
