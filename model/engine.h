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

/* One sequence's next token in a step of several (engine_ops.eval_step); a sequence's
 * several items (a short prompt's tokens) at consecutive positions, in order. */
typedef struct engine_step {
    engine *e;
    int32_t token;
    uint32_t pos;
    float *logits; /* its n_vocab logits, or NULL */
    int32_t *best; /* or the index of its largest logit, as eval_argmax gives it (-1 included) */
    const uint32_t *allow; /* with best: among the tokens whose bit is set (eval_argmax_masked); NULL: all */
    int rc;        /* set by eval_step: 0, or -1 with err */
    kiln_err err;
} engine_step;

/* A mixture of experts' cache of experts on the device, where not every expert fits it:
 * slots a layer, experts a layer, the evals and choices it served (hits on the device,
 * misses on the host), experts swapped in, times it changed its slots to follow memory. */
typedef struct engine_expert_stats {
    uint32_t slots, experts;
    uint64_t evals, hits, misses, swaps, resizes;
    uint64_t kept; /* experts that stayed on the device through the resizes (copied, not uploaded) */
    double resize_s;        /* seconds the resizes took (the evals that made them waited so long) */
    double resize_record_s; /* of which the steps' recordings made again */
} engine_expert_stats;

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
    /* Optional: n items of several engines at once, every weight read once for all of them
     * (the slots of one server on one device); an engine's items at consecutive positions,
     * in order, every engine of this kind. Sets every item's rc (a bad item fails alone, as
     * its eval would, and the same engine's later items with it) and returns 0; or returns
     * -1, having evaluated nothing, where these items cannot step together (they are then
     * evaluated one by one). */
    int (*eval_step)(engine_step *items, uint32_t n);
    /* Optional: eval_argmax over the tokens whose bit is set in allow (n_vocab bits, token v
     * at bit v % 32 of word v / 32; a grammar's mask, so constrained greedy decoding keeps
     * the logits on the device); -1 in *best when none of them beats -inf. */
    int (*eval_argmax_masked)(engine *e, const int32_t *tokens, uint32_t n, uint32_t pos, const uint32_t *allow,
                              int32_t *best, kiln_err *err);
    /* Optional: the expert cache's counters; false where the engine has none. */
    bool (*expert_stats)(const engine *e, engine_expert_stats *st);
    /* Optional, for engines whose caches share one pool (a GPU plan's slots): marks the
     * engine's sequence busy (a request is being served: its cache is not taken for
     * another's) or idle (its cache's tail may be taken, n_past then falling to what is
     * left); room: the positions it could hold now. Without them an engine's cache is its
     * own, n_ctx positions. */
    void (*set_busy)(engine *e, bool busy);
    uint32_t (*room)(engine *e);
    /* Optional, as a pair: eval_argmax in two halves, so a caller does its own work (the
     * last token's text, its stop strings, its stream) while the evaluation waits for or
     * runs in a step with other engines' (the slots of one server). submit_argmax queues
     * it and returns at once (0, or -1 with err where it could not be queued); wait_argmax
     * blocks until it is done and returns what eval_argmax would have. One call outstanding
     * at most; tokens and best stay the caller's until wait_argmax returns, and every
     * submitted call is waited for. */
    int (*submit_argmax)(engine *e, const int32_t *tokens, uint32_t n, uint32_t pos, int32_t *best, kiln_err *err);
    int (*wait_argmax)(engine *e, kiln_err *err);
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

static inline bool engine_expert_stats_of(const engine *e, engine_expert_stats *st) {
    return e && e->ops->expert_stats && e->ops->expert_stats(e, st);
}

static inline uint32_t engine_room(engine *e) { return e->ops->room ? e->ops->room(e) : e->n_ctx; }
/* Forget cache entries at positions >= pos. */
static inline void engine_truncate(engine *e, uint32_t pos) {
    if (pos < e->n_past) e->n_past = pos;
}

static inline void engine_destroy(engine *e) {
    if (e) e->ops->destroy(e);
}

#endif
