/* The generation loop shared by `kiln run`, `kiln chat` and the server: a session keeps
 * the tokens its engine's KV cache holds, so a new prompt that starts like the last
 * one evaluates only what is new; text streams out whole UTF-8 characters at a time
 * and never a part of a stop string. */
#ifndef KILN_GENERATE_GENERATE_H
#define KILN_GENERATE_GENERATE_H

#include "base/error.h"
#include "generate/grammar.h"
#include "generate/sampler.h"
#include "model/engine.h"
#include "text/tok.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gen_session gen_session;

gen_session *gen_session_create(engine *e, const tokenizer *t);
void gen_session_free(gen_session *s);
/* Tokens the cache holds (what a new prompt's common prefix is measured against). */
uint32_t gen_session_cached(const gen_session *s);
/* Leading tokens of prompt[n] that gen_run would reuse from the cache (at most n - 1:
 * the last prompt token is always evaluated for its logits); a server routes a request to
 * the session where this is largest. */
uint32_t gen_session_prefix(const gen_session *s, const int32_t *prompt, uint32_t n);

/* Called for each generated token that becomes part of the output (not an end-of-
 * generation token), before its text is emitted, with the logits row it was sampled from:
 * the model's raw logits (no penalties, temperature or truncation applied), because
 * OpenAI's logprobs are those of the model's distribution. A nonzero return stops
 * (GEN_CALLER). */
typedef int (*gen_on_token)(void *ctx, int32_t id, const float *logits, uint32_t n_vocab);

typedef struct gen_params {
    uint32_t max_tokens;        /* > 0 */
    const char *const *stop;    /* stop strings (not included in the output) */
    size_t n_stop;
    int32_t extra_eog;          /* another token that ends generation (a chat end-of-turn), or -1 */
    gen_on_token on_token;      /* NULL: none (and greedy decoding may skip the logits) */
    void *token_ctx;            /* on_token's ctx */
    /* NULL, or called with ctx = token_ctx after each generated token is accepted, with the
     * count so far: a clock for speed over time that, unlike on_token, keeps greedy
     * decoding on the device (no logits) */
    void (*on_step)(void *ctx, uint32_t n_generated);
    gram_match *grammar;        /* NULL, or constrained decoding: each token is sampled from the
                                   tokens the matcher allows (end of generation only where its
                                   text is complete), and generation ends when nothing may
                                   follow; the caller creates and resets it */
} gen_params;

/* Called with each piece of text as it becomes final; a nonzero return stops. */
typedef int (*gen_emit)(void *ctx, const char *text, size_t len);

typedef enum gen_finish { GEN_EOG, GEN_STOP_STRING, GEN_LENGTH, GEN_CALLER, GEN_CONTEXT } gen_finish;

typedef struct gen_result {
    gen_finish finish;
    uint32_t n_prompt;          /* prompt tokens */
    uint32_t n_reused;          /* of which the cache already held */
    uint32_t n_generated;
    double t_prompt, t_generate; /* seconds */
    int32_t *ids;               /* generated ids (malloc'ed; the caller frees) */
} gen_result;

const char *gen_finish_name(gen_finish f); /* "eog", "stop", "length", "cancelled", "context" */

/* Evaluates prompt (reusing the cached prefix), then samples until an end-of-generation
 * token, a stop string, max_tokens, the end of the context or (with a grammar) a complete
 * text nothing may extend, which finishes as GEN_EOG. 0, or -1 with err. */
int gen_run(gen_session *s, sampler *smp, const int32_t *prompt, uint32_t n_prompt, const gen_params *p, gen_emit emit,
            void *ctx, gen_result *r, kiln_err *err);

#endif
