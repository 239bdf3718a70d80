/* Steps over a group of engines (engine_batch.h). Each caller enqueues its call and
 * waits; whichever waiting thread finds the group ready and no step running becomes the
 * step's leader: it picks the step's share of every waiting call under the lock, runs
 * them without it, and hands the results back. A caller is driven by one thread, so a
 * wrapper has at most one call waiting, and waits on the wrapper's own condition: a step
 * wakes exactly the callers it finished, and the oldest call's (which times the gather and
 * leads next); one condition for the group woke every waiter at every call and step
 * (32 slots: a thousand wakeups a step, milliseconds of a step's time on the H200). */
#include "model/engine_batch.h"

#include "base/error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_STEP_TOKENS 2048
#define DEFAULT_GATHER_US 500
#define TOGETHER_PROMPT 64 /* a prompt's chunk of at most this many tokens joins the step's eval_step */

typedef struct wrap wrap;

typedef struct call {
    wrap *w;
    const int32_t *tokens;
    uint32_t n, pos, done; /* done: tokens evaluated by earlier steps */
    float *logits;
    bool all;
    int32_t *best; /* eval_argmax's call */
    const uint32_t *allow; /* eval_argmax_masked's mask */
    uint64_t since_us;
    uint32_t take; /* tokens this step evaluates (the leader's, while a step runs) */
    bool together; /* this step's tokens went to eval_step with the others' (the leader's) */
    uint32_t item0; /* its first item in the step's eval_step */
    bool finished; /* the leader's mark, under the lock */
    atomic_bool released; /* set last, once the group no longer touches the call (a spinning caller returns) */
    int rc;
    kiln_err err;
    struct call *next;
} call;

typedef struct group {
    pthread_mutex_t mu;
    call *head; /* waiting calls, oldest first */
    uint32_t busy, busy_waiting; /* busy wrappers; of them, those with a call waiting */
    atomic_bool running;
    uint64_t idle_since_us; /* when the last step ended */
    engine_batch_opts o;
    engine_batch_stats st;
    call **step;    /* the step's calls in the order they run (one per wrapper at most) */
    engine_step *items; /* the step's tokens that go to eval_step together (TOGETHER_PROMPT a wrapper) */
    float *scratch; /* logits nobody wants: a prompt's chunks before its last (the leader's) */
    atomic_uint refs;
} group;

struct wrap {
    engine base;
    engine_ops ops;
    engine *inner;
    group *g;
    pthread_cond_t cv; /* its caller's: the call finished, or the group wants a leader */
    bool busy, waiting;
    call sub;       /* a submitted call (batch_submit_argmax), until its wait */
    bool submitted;
};

/* The oldest call's caller re-checks the group (the lock held): it times the gather and
 * leads the next step. */
static void wake_head(group *g) {
    if (g->head) pthread_cond_signal(&g->head->w->cv);
}

static uint64_t now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

/* When a step may start without every busy wrapper's call: the gather time after the
 * oldest call came, or after the last step ended, whichever is later. Counted from the
 * call alone, calls that came during a step were past it when the step ended, so the
 * next step took them before the step's own callers came back: on the H200 32 slots
 * split into two groups of 28 and 4 whose steps alternated for good. */
static uint64_t gather_due(const group *g) {
    uint64_t from = g->head->since_us > g->idle_since_us ? g->head->since_us : g->idle_since_us;
    return from + g->o.gather_us;
}

/* Every busy wrapper has a call waiting, or the gather time is over. */
static bool ready(const group *g, uint64_t now) {
    return g->head && (g->busy_waiting >= g->busy || now >= gather_due(g));
}

/* The histogram bucket of v: the first b with v <= unit * 2^b, the last past them all. */
static int bucket(uint64_t v, uint64_t unit) {
    int b = 0;
    while (b + 1 < ENGINE_BATCH_BUCKETS && v > unit << b) b++;
    return b;
}

/* The step's share of each waiting call, into g->step in running order: decoding calls
 * (one token left) first, then the others, oldest first, each cut to the budget left (a
 * step takes at least one call). Returns the calls taken. */
static uint32_t pick(group *g) {
    uint32_t left = g->o.step_tokens, taken = 0;
    for (int pass = 0; pass < 2; pass++)
        for (call *c = g->head; c; c = c->next) {
            uint32_t rest = c->n - c->done;
            if ((pass == 0) != (rest == 1) || !left) continue;
            c->take = rest < left ? rest : left;
            left -= c->take;
            g->step[taken++] = c;
        }
    return taken;
}

/* One call's share, on its own engine (the leader's thread, without the lock). */
static void run_share(group *g, call *c) {
    engine *in = c->w->inner;
    uint32_t k = c->take;
    bool last = c->done + k == c->n;
    /* the caller may have truncated; the engine's cache, where pooled, may have lost its tail */
    if (c->done == 0 && c->w->base.n_past < in->n_past) in->n_past = c->w->base.n_past;
    const int32_t *tok = c->tokens + c->done;
    uint32_t pos = c->pos + c->done;
    if (last && c->best && c->allow) {
        c->rc = in->ops->eval_argmax_masked(in, tok, k, pos, c->allow, c->best, &c->err);
    } else if (last && c->best) {
        c->rc = in->ops->eval_argmax(in, tok, k, pos, c->best, &c->err);
    } else if (c->all) {
        c->rc = engine_eval(in, tok, k, pos, c->logits + (size_t)c->done * in->n_vocab, true, &c->err);
    } else if (last) {
        c->rc = engine_eval(in, tok, k, pos, c->logits, false, &c->err);
    } else if (in->ops->eval_argmax) { /* a chunk before the last: no logits wanted */
        int32_t ignored;
        c->rc = in->ops->eval_argmax(in, tok, k, pos, &ignored, &c->err);
    } else {
        c->rc = engine_eval(in, tok, k, pos, g->scratch, false, &c->err);
    }
    c->done += k;
}

/* The step's tokens that go to one eval_step, where the engines offer it and take each
 * other's: every decoding call's token, and the chunks of prompts of up to TOGETHER_PROMPT
 * tokens (as items of consecutive positions; only a call's last token has an output), so a
 * short prompt's tokens share the pass over the weights with the decoding ones instead of
 * taking one of their own. Marks the calls taken (together); returns the tokens, 0 where
 * fewer than two calls could go (each then runs alone). */
static uint32_t run_together(group *g, uint32_t taken) {
    uint32_t n = 0, calls = 0;
    int (*op)(engine_step *, uint32_t) = NULL;
    for (uint32_t i = 0; i < taken; i++) {
        call *c = g->step[i];
        engine *in = c->w->inner;
        bool decoding = c->take == 1 && c->done + 1 == c->n; /* a call for every row's logits too */
        c->together = (decoding || (!c->all && c->take <= TOGETHER_PROMPT)) && in->ops->eval_step &&
                      (!op || in->ops->eval_step == op);
        if (!c->together) continue;
        op = in->ops->eval_step;
        calls++;
        if (c->done == 0) in->n_past = c->w->base.n_past; /* the caller may have truncated */
        c->item0 = n;
        bool last_chunk = c->done + c->take == c->n;
        for (uint32_t t = 0; t < c->take; t++) {
            bool out = last_chunk && t + 1 == c->take;
            uint32_t at = c->done + t;
            g->items[n++] = (engine_step){
                .e = in, .token = c->tokens[at], .pos = c->pos + at,
                .logits = !out || c->best ? NULL : c->logits + (c->all ? (size_t)at * in->n_vocab : 0),
                .best = out ? c->best : NULL, .allow = out ? c->allow : NULL};
        }
    }
    if (calls < 2 || op(g->items, n)) {
        for (uint32_t i = 0; i < taken; i++) g->step[i]->together = false;
        return 0;
    }
    for (uint32_t i = 0; i < taken; i++) {
        call *c = g->step[i];
        if (!c->together) continue;
        c->rc = 0;
        for (uint32_t t = 0; t < c->take && !c->rc; t++) /* the first failure (the rest follow it) */
            if ((c->rc = g->items[c->item0 + t].rc)) c->err = g->items[c->item0 + t].err;
        c->done += c->take;
    }
    return n;
}

/* Leads one step: called with the lock held and the group ready; returns with it held. */
static void lead(group *g) {
    uint32_t taken = pick(g);
    g->running = true;
    pthread_mutex_unlock(&g->mu);
    uint64_t t0 = now_us(), tokens = 0, cut = 0, waited = t0 - g->step[0]->since_us;
    uint32_t together = run_together(g, taken);
    uint64_t t1 = now_us();
    for (uint32_t i = 0; i < taken; i++) { /* the queue itself may grow meanwhile: not walked */
        call *c = g->step[i];
        tokens += c->take;
        cut += (c->together ? c->done : c->done + c->take) < c->n; /* a chunk before the call's last */
        if (!c->together) run_share(g, c);
    }
    uint64_t us = now_us() - t0;
    if (g->o.log)
        fprintf(g->o.log, "step %llu at %llu us: %u calls, %u together, %llu tokens; first call waited %llu us; "
                          "together %llu us, the rest %llu us\n",
                (unsigned long long)g->st.steps, (unsigned long long)t0, taken, together, (unsigned long long)tokens,
                (unsigned long long)waited, (unsigned long long)(t1 - t0), (unsigned long long)(t0 + us - t1));
    pthread_mutex_lock(&g->mu);
    g->running = false;
    g->idle_since_us = now_us();
    for (uint32_t i = 0; i < taken; i++) {
        call *c = g->step[i];
        c->take = 0;
        c->finished = c->rc || c->done == c->n;
    }
    for (call **p = &g->head; *p;) { /* finished calls leave the queue, their callers woken */
        call *c = *p;
        if (!c->finished) {
            p = &c->next;
            continue;
        }
        *p = c->next;
        wrap *w = c->w;
        w->waiting = false;
        if (w->busy) g->busy_waiting--;
        atomic_store_explicit(&c->released, true, memory_order_release); /* the call's last touch here */
        pthread_cond_signal(&w->cv);
    }
    g->st.steps++, g->st.calls += taken, g->st.tokens += tokens, g->st.chunks += cut, g->st.together += together;
    g->st.busy_s += us / 1e6;
    g->st.by_calls[bucket(taken, 1)]++;
    g->st.by_ms[bucket(us, 1000)]++;
    wake_head(g);
}

/* Whether a caller waiting for a running step polls (the lock released) rather than sleeps
 * (engine_batch_opts.spin_busy): a woken thread takes tens to hundreds of microseconds to
 * run again, and a step waits for the last of its callers, so on a fast model (qwen3-0.6b
 * on the H100: steps of 1.2 ms, the next one 40-250 us later) the wakes cost a tenth. */
static bool may_spin(const group *g) { return g->busy && g->busy <= g->o.spin_busy; }

#define SPIN_MAX_US 8000 /* then sleep: a long prompt's step */

/* Polls until the call is released or the step it waits for ends; true: released (the
 * lock not taken again). Called with the lock held; returns with it held unless done. */
static bool spin(group *g, call *c) {
    pthread_mutex_unlock(&g->mu);
    uint64_t t0 = now_us();
    for (uint32_t i = 0;; i++) {
        if (atomic_load_explicit(&c->released, memory_order_acquire)) return true;
        if (!atomic_load_explicit(&g->running, memory_order_relaxed)) break;
        if ((i & 255) == 255 && now_us() - t0 > SPIN_MAX_US) break;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    pthread_mutex_lock(&g->mu);
    return false;
}

/* A call of no tokens: the inner engine's answer, as an unwrapped call. */
static int run_empty(engine *e, call *c, kiln_err *err) {
    wrap *w = (wrap *)e;
    engine *in = w->inner;
    in->n_past = e->n_past;
    int rc = c->allow  ? in->ops->eval_argmax_masked(in, c->tokens, 0, c->pos, c->allow, c->best, err)
             : c->best ? in->ops->eval_argmax(in, c->tokens, 0, c->pos, c->best, err)
                       : engine_eval(in, c->tokens, 0, c->pos, c->logits, c->all, err);
    e->n_past = in->n_past;
    return rc;
}

/* The call at the queue's tail; with wake, the oldest call's caller is told (a submitted
 * call's caller is not there to see that the group became ready). */
static void enqueue(wrap *w, call *c, bool wake) {
    group *g = w->g;
    c->w = w;
    pthread_mutex_lock(&g->mu);
    c->since_us = now_us();
    call **tail = &g->head;
    while (*tail) tail = &(*tail)->next;
    *tail = c;
    w->waiting = true;
    if (w->busy) g->busy_waiting++;
    atomic_init(&c->released, false);
    if (wake) wake_head(g);
    pthread_mutex_unlock(&g->mu);
}

/* Until the queued call c is done: leads steps while the group is ready and none runs. */
static int wait_call(engine *e, call *c, kiln_err *err) {
    wrap *w = (wrap *)e;
    group *g = w->g;
    pthread_mutex_lock(&g->mu);
    bool spun = false;
    while (!atomic_load_explicit(&c->released, memory_order_acquire)) {
        uint64_t now = now_us();
        if (!g->running && ready(g, now)) {
            lead(g);
            continue;
        }
        /* a step running (its end wakes this caller or the oldest's), or a call not the
         * oldest (the oldest's caller times the gather) */
        if (g->running || g->head != c) {
            if (g->running && may_spin(g) && !spun) {
                if (spin(g, c)) goto out; /* unlocked */
                spun = true;               /* once a step: the next end wakes this caller */
                continue;
            }
            pthread_cond_wait(&w->cv, &g->mu);
            spun = false;
            continue;
        }
        /* not ready: wake when this, the oldest call, has waited the gather time */
        uint64_t due = gather_due(g);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t wait = due > now ? due - now : 0, ns = (uint64_t)ts.tv_nsec + (wait % 1000000u) * 1000u;
        ts.tv_sec += (time_t)(wait / 1000000u + ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&w->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
out:
    e->n_past = w->inner->n_past;
    if (c->rc && err) *err = c->err;
    return c->rc;
}

static int run_call(engine *e, call *c, kiln_err *err) {
    if (c->n == 0) return run_empty(e, c, err);
    enqueue((wrap *)e, c, false);
    return wait_call(e, c, err);
}

static int batch_eval(engine *e, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits, bool all,
                      kiln_err *err) {
    call c = {.tokens = tokens, .n = n, .pos = pos, .logits = logits, .all = all};
    return run_call(e, &c, err);
}

static int batch_eval_argmax(engine *e, const int32_t *tokens, uint32_t n, uint32_t pos, int32_t *best,
                             kiln_err *err) {
    call c = {.tokens = tokens, .n = n, .pos = pos, .best = best};
    return run_call(e, &c, err);
}

static int batch_eval_argmax_masked(engine *e, const int32_t *tokens, uint32_t n, uint32_t pos, const uint32_t *allow,
                                    int32_t *best, kiln_err *err) {
    call c = {.tokens = tokens, .n = n, .pos = pos, .best = best, .allow = allow};
    return run_call(e, &c, err);
}

/* eval_argmax in halves (engine_ops.submit_argmax): the call lives in the wrapper until
 * batch_wait_argmax; a call of no tokens is answered at once and kept for the wait. */
static int batch_submit_argmax(engine *e, const int32_t *tokens, uint32_t n, uint32_t pos, int32_t *best,
                               kiln_err *err) {
    wrap *w = (wrap *)e;
    if (w->submitted) return kiln_fail(err, KILN_ERR_INVALID, "a submitted evaluation was not waited for"), -1;
    w->sub = (call){.tokens = tokens, .n = n, .pos = pos, .best = best};
    w->submitted = true;
    if (n == 0) {
        w->sub.rc = run_empty(e, &w->sub, &w->sub.err);
        return 0;
    }
    enqueue(w, &w->sub, true);
    return 0;
}

static int batch_wait_argmax(engine *e, kiln_err *err) {
    wrap *w = (wrap *)e;
    if (!w->submitted) return kiln_fail(err, KILN_ERR_INVALID, "no evaluation was submitted"), -1;
    w->submitted = false;
    if (w->sub.n == 0) {
        if (w->sub.rc && err) *err = w->sub.err;
        return w->sub.rc;
    }
    return wait_call(e, &w->sub, err);
}

static void group_release(group *g) {
    if (atomic_fetch_sub(&g->refs, 1) != 1) return;
    pthread_mutex_destroy(&g->mu);
    free(g->scratch);
    free(g->step);
    free(g->items);
    free(g);
}

static void batch_destroy(engine *e) {
    wrap *w = (wrap *)e;
    engine_destroy(w->inner);
    group_release(w->g);
    pthread_cond_destroy(&w->cv);
    free(w);
}

static bool batch_expert_stats(const engine *e, engine_expert_stats *st) {
    const engine *in = ((const wrap *)e)->inner;
    return engine_expert_stats_of(in, st);
}

static uint32_t batch_room(engine *e) { return engine_room(((wrap *)e)->inner); }

static wrap *as_wrap(engine *e) { return e && e->ops && e->ops->eval == batch_eval ? (wrap *)e : NULL; }

void engine_batch_busy(engine *e, bool busy) {
    wrap *w = as_wrap(e);
    if (!w) return;
    group *g = w->g;
    engine *in = w->inner;
    if (in->ops->set_busy) { /* a pooled cache: kept from now on; what an idle spell left of it */
        in->ops->set_busy(in, busy);
        if (busy && in->n_past < e->n_past) e->n_past = in->n_past;
    }
    pthread_mutex_lock(&g->mu);
    if (w->busy != busy) {
        w->busy = busy;
        g->busy += busy ? 1u : (uint32_t)-1;
        if (w->waiting) g->busy_waiting += busy ? 1u : (uint32_t)-1;
        wake_head(g); /* one fewer to wait for */
    }
    pthread_mutex_unlock(&g->mu);
}

bool engine_batch_stats_of(engine *e, engine_batch_stats *out) {
    wrap *w = as_wrap(e);
    memset(out, 0, sizeof *out);
    if (!w) return false;
    pthread_mutex_lock(&w->g->mu);
    *out = w->g->st;
    pthread_mutex_unlock(&w->g->mu);
    return true;
}

int engine_batch_group(engine **e, uint32_t n, const engine_batch_opts *opts, kiln_err *err) {
    group *g = calloc(1, sizeof *g);
    wrap **w = calloc(n ? n : 1, sizeof *w);
    uint32_t vocab = 1;
    for (uint32_t i = 0; i < n; i++)
        if (e[i]->n_vocab > vocab) vocab = e[i]->n_vocab;
    bool ok = g && w && (g->scratch = malloc((size_t)vocab * sizeof *g->scratch)) &&
              (g->step = calloc(n ? n : 1, sizeof *g->step)) &&
              (g->items = calloc((n ? n : 1) * (size_t)TOGETHER_PROMPT, sizeof *g->items));
    for (uint32_t i = 0; ok && i < n; i++) ok = (w[i] = calloc(1, sizeof *w[i])) != NULL;
    if (!ok) {
        for (uint32_t i = 0; w && i < n; i++) free(w[i]);
        free(w);
        if (g) free(g->scratch), free(g->step), free(g->items);
        free(g);
        return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), -1;
    }
    g->o.step_tokens = opts && opts->step_tokens ? opts->step_tokens : DEFAULT_STEP_TOKENS;
    g->o.gather_us = opts && opts->gather_us ? opts->gather_us : DEFAULT_GATHER_US;
    g->o.log = opts ? opts->log : NULL;
    g->o.spin_busy = opts ? opts->spin_busy : 0;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    atomic_init(&g->refs, n ? n : 1);
    for (uint32_t i = 0; i < n; i++) {
        wrap *x = w[i];
        pthread_cond_init(&x->cv, &ca);
        x->inner = e[i];
        x->g = g;
        x->ops = (engine_ops){batch_eval, batch_destroy, e[i]->ops->eval_argmax ? batch_eval_argmax : NULL, NULL,
                              e[i]->ops->eval_argmax_masked ? batch_eval_argmax_masked : NULL,
                              e[i]->ops->expert_stats ? batch_expert_stats : NULL, NULL,
                              e[i]->ops->room ? batch_room : NULL,
                              e[i]->ops->eval_argmax ? batch_submit_argmax : NULL,
                              e[i]->ops->eval_argmax ? batch_wait_argmax : NULL};
        x->base = *e[i];
        x->base.ops = &x->ops;
        e[i] = &x->base;
    }
    pthread_condattr_destroy(&ca);
    free(w);
    if (n == 0) group_release(g); /* nothing shares it */
    return 0;
}
