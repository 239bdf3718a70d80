/* The engine interface: what the generation loop, the server and the divergence tool
 * call, whichever engine (the CPU oracle, a GPU plan) runs underneath. An engine holds
 * a KV cache of n_ctx positions; eval writes the entries for [pos, pos + n) and drops
 * everything after them, so a caller rewinds (chat turns, prefix reuse) by evaluating
 * at an earlier position. */
#ifndef KILN_MODEL_ENGINE_H
#define KILN_MODEL_ENGINE_H

#include "base/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct engine engine;

typedef struct engine_ops {
    /* Evaluates tokens[0..n) at positions pos..pos+n-1 (pos <= n_past). logits gets
     * n_vocab floats for the last token, or n * n_vocab (row t for token t) when all is
     * true. 0, or -1 with err (a position past the context, a bad token id, ...). */
    int (*eval)(engine *e, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits, bool all, kiln_err *err);
    void (*destroy)(engine *e);
    /* Optional (NULL where not offered): eval with all = false, giving instead of the
     * logits the index of the last token's largest logit (ties to the lowest, NaN as
     * -inf: samp_argmax's pick), so a greedy loop moves 4 bytes per token, not the
     * vocabulary's logits. -1 in *best when no logit beats -inf (the caller then reads
     * the logits with eval to decide). 0, or -1 with err. */
    int (*eval_argmax)(engine *e, const int32_t *tokens, uint32_t n, uint32_t pos, int32_t *best, kiln_err *err);
} engine_ops;

struct engine {
    const engine_ops *ops;
    const char *name;  /* "cpu (oracle, contract bf16)", "vulkan:0", ... */
    uint32_t n_vocab;
    uint32_t n_ctx;    /* KV cache positions */
    uint32_t n_past;   /* positions the cache holds */
};

static inline int engine_eval(engine *e, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits, bool all,
                              kiln_err *err) {
    return e->ops->eval(e, tokens, n, pos, logits, all, err);
}

/* Forget cache entries at positions >= pos. */
static inline void engine_truncate(engine *e, uint32_t pos) {
    if (pos < e->n_past) e->n_past = pos;
}

static inline void engine_destroy(engine *e) {
    if (e) e->ops->destroy(e);
}

#endif
