/* Engines that share one device (plans on one GPU, or oracles on one CPU), driven from one
 * thread each (the server's slots), taking part in steps: every evaluation a wrapped
 * engine is asked for joins the next step, and a step evaluates every call waiting when
 * it starts. A prompt longer than the step's token budget is cut into chunks that go into
 * successive steps, so a long prompt never holds the sequences that are decoding for
 * more than one chunk's time (chunked prefill); a decoding sequence's token always joins
 * the next step. A step starts once every engine marked busy (engine_batch_busy: a slot
 * with a request) has a call waiting, or once the oldest call has waited the gather time
 * (a busy sequence that is sampling its next token is not waited for longer than that).
 *
 * A step's decoding tokens and its chunks of short prompts (up to 64 tokens) go to their
 * engines' eval_step together where the engines offer it and accept each other (the slots
 * of one plan_create_slots: every weight read once for all of them); the rest (longer
 * chunks, engines without it) run one after another, each on its own cache, in the order
 * calls arrived in, decoding tokens first. Replaces one
 * fair lock per call, under which the engines took turns and a long prompt went in one
 * piece. */
#ifndef KILN_MODEL_ENGINE_BATCH_H
#define KILN_MODEL_ENGINE_BATCH_H

#include "base/error.h"
#include "model/engine.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct engine_batch_opts {
    uint32_t step_tokens; /* the token budget of a step (a chunk of a prompt is cut to what is left;
                           * a step always takes at least one call); 0: 2048 */
    uint32_t gather_us;   /* how long a step waits for busy engines' calls; 0: 500 (a sequence
                           * samples its next token in tens to hundreds of microseconds; one
                           * whose client stalls costs the others no more than this a step) */
    uint32_t spin_busy;   /* callers poll while a step runs where at most this many engines are busy
                           * (0: never; a device with cores of its own, not lavapipe, whose
                           * threads need the host's; half the host's cores leave the rest some) */
    FILE *log;            /* NULL, or a line a step: its calls, tokens, how long its oldest call waited
                           * and how long its parts ran (kiln serve --step-log) */
} engine_batch_opts;

/* Counters of the group's steps (every wrapper of a group reports the same). */
#define ENGINE_BATCH_BUCKETS 8
typedef struct engine_batch_stats {
    uint64_t steps, calls, tokens, chunks; /* chunks: calls cut by the budget */
    uint64_t together;                      /* tokens evaluated in one eval_step with others */
    double busy_s;                          /* time steps ran */
    /* steps by how many calls they took: 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64, more */
    uint64_t by_calls[ENGINE_BATCH_BUCKETS];
    /* steps by their time: <= 1, 2, 4, 8, 16, 32, 64 ms, more */
    uint64_t by_ms[ENGINE_BATCH_BUCKETS];
} engine_batch_stats;

/* Replaces e[0..n) with wrappers in one group; each wrapper owns its engine (destroying
 * it destroys the engine) and has its name, sizes, cache state and eval_argmax where the
 * engine has one. opts may be NULL (the defaults). 0, or -1 with err (out of memory) and
 * e[] unchanged. */
int engine_batch_group(engine **e, uint32_t n, const engine_batch_opts *opts, kiln_err *err);
/* Marks a wrapper's sequence busy (a request is being served: its next call is worth
 * waiting for) or idle. A no-op on an engine that is not a wrapper. */
void engine_batch_busy(engine *e, bool busy);
/* The group's counters; false (and zeros) for an engine that is not a wrapper. */
bool engine_batch_stats_of(engine *e, engine_batch_stats *out);

#endif
