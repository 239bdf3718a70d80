/* model/engine_batch.h: engines grouped into steps. Fake engines log every call they get
 * (who, tokens, position, whether logits were wanted) and check that no two of a group
 * run at once; the oracle shows that grouped engines give each sequence what it gets
 * alone. */
#include "base/error.h"
#include "generate/generate.h"
#include "generate/sampler.h"
#include "model/engine.h"
#include "model/engine_batch.h"
#include "model/model.h"
#include "oracle/oracle.h"
#include "text/tok.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LOG_MAX 4096

typedef struct entry { int who; uint32_t n, pos; bool argmax; } entry;

typedef struct fake {
    engine base;
    int who, destroyed;
    uint32_t delay_us;
    entry *log;
    int *n_log, *running;
} fake;

static int record(fake *f, uint32_t n, uint32_t pos, bool argmax) {
    int now = __atomic_add_fetch(f->running, 1, __ATOMIC_SEQ_CST);
    if (f->delay_us) nanosleep(&(struct timespec){.tv_nsec = (long)f->delay_us * 1000}, NULL);
    int at = __atomic_fetch_add(f->n_log, 1, __ATOMIC_SEQ_CST);
    if (at < LOG_MAX) f->log[at] = (entry){f->who, n, pos, argmax};
    __atomic_sub_fetch(f->running, 1, __ATOMIC_SEQ_CST);
    f->base.n_past = pos + n;
    return now == 1 ? 0 : -1; /* two engines of a group inside at once: an error */
}

/* logits row t (token pos + t) holds pos + t in every element */
static int fake_eval(engine *e, const int32_t *tok, uint32_t n, uint32_t pos, float *logits, bool all, kiln_err *err) {
    (void)tok;
    fake *f = (fake *)e;
    if (pos > e->n_past) return kiln_fail(err, KILN_ERR_INVALID, "position %u past %u", pos, e->n_past), -1;
    for (uint32_t t = all ? 0 : n - 1; t < n; t++)
        for (uint32_t v = 0; v < e->n_vocab; v++) logits[(size_t)(all ? t : 0) * e->n_vocab + v] = (float)(pos + t);
    return record(f, n, pos, false) ? (kiln_fail(err, KILN_ERR_INTERNAL, "two at once"), -1) : 0;
}

static int fake_argmax(engine *e, const int32_t *tok, uint32_t n, uint32_t pos, int32_t *best, kiln_err *err) {
    (void)tok;
    *best = (int32_t)(pos + n);
    return record((fake *)e, n, pos, true) ? (kiln_fail(err, KILN_ERR_INTERNAL, "two at once"), -1) : 0;
}

static void fake_destroy(engine *e) { ((fake *)e)->destroyed = 1; }

static const engine_ops fake_ops = {fake_eval, fake_destroy, fake_argmax};

/* eval_step over fakes: one entry per item (n 1), an engine's items at consecutive
 * positions from its cache's end or before; outputs as fake_eval's and fake_argmax's */
static int fake_step(engine_step *it, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        bool first = true;
        for (uint32_t j = i; j-- > 0 && first;)
            if (it[j].e == it[i].e) {
                if (it[i].pos != it[j].pos + 1) return -1;
                first = false;
            }
        if (first && it[i].pos > it[i].e->n_past) return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        fake *f = (fake *)it[i].e;
        it[i].rc = record(f, 1, it[i].pos, it[i].best != NULL);
        if (it[i].rc) kiln_fail(&it[i].err, KILN_ERR_INTERNAL, "two at once");
        if (it[i].best) *it[i].best = (int32_t)(it[i].pos + 1);
        if (it[i].logits)
            for (uint32_t v = 0; v < f->base.n_vocab; v++) it[i].logits[v] = (float)it[i].pos;
    }
    return 0;
}

static const engine_ops fake_step_ops = {fake_eval, fake_destroy, fake_argmax, fake_step};

static entry logbuf[LOG_MAX];
static int n_log, running;

static void fakes(fake *f, engine **e, int n, uint32_t delay_us) {
    n_log = 0, running = 0;
    for (int i = 0; i < n; i++) {
        f[i] = (fake){{&fake_ops, "fake", 4, 1 << 20, 0}, i, 0, delay_us, logbuf, &n_log, &running};
        e[i] = &f[i].base;
    }
}

/* A prompt longer than the budget goes in chunks at the right positions; rows land where
 * they belong; only the last chunk's output reaches the caller. */
Test(engine_batch, chunks_a_long_prompt) {
    fake f[1];
    engine *e[1];
    fakes(f, e, 1, 0);
    kiln_err err = {0};
    engine_batch_opts o = {.step_tokens = 32};
    cr_assert_eq(engine_batch_group(e, 1, &o, &err), 0, "%s", err.msg);
    int32_t tok[100] = {0};
    float *rows = malloc(100 * 4 * sizeof *rows);
    cr_assert_eq(engine_eval(e[0], tok, 100, 0, rows, true, &err), 0, "%s", err.msg);
    cr_assert_eq(n_log, 4);
    static const uint32_t n[4] = {32, 32, 32, 4}, pos[4] = {0, 32, 64, 96};
    for (int i = 0; i < 4; i++) cr_assert(logbuf[i].n == n[i] && logbuf[i].pos == pos[i], "chunk %d: %u at %u", i, logbuf[i].n, logbuf[i].pos);
    for (uint32_t t = 0; t < 100; t++) cr_assert_eq(rows[t * 4 + 3], (float)t, "row %u", t);
    cr_assert_eq(e[0]->n_past, 100);
    /* the last row only: earlier chunks take argmax (no logits wanted), the last writes */
    float last[4] = {-1, -1, -1, -1};
    engine_truncate(e[0], 10);
    n_log = 0;
    cr_assert_eq(engine_eval(e[0], tok, 70, 10, last, false, &err), 0, "%s", err.msg);
    cr_assert(n_log == 3 && logbuf[0].argmax && logbuf[1].argmax && !logbuf[2].argmax);
    cr_assert(logbuf[0].pos == 10 && logbuf[2].pos == 74 && logbuf[2].n == 6);
    cr_assert_eq(last[0], 79.0f);
    int32_t best = -1;
    n_log = 0;
    cr_assert_eq(e[0]->ops->eval_argmax(e[0], tok, 40, 80, &best, &err), 0, "%s", err.msg);
    cr_assert(n_log == 2 && best == 120 && e[0]->n_past == 120);
    /* an error comes back to its caller; the cache state follows the engine */
    n_log = 0;
    cr_assert_eq(engine_eval(e[0], tok, 1, 500, last, false, &err), -1);
    cr_assert(strstr(err.msg, "position 500"), "%s", err.msg);
    engine_batch_stats st;
    cr_assert(engine_batch_stats_of(e[0], &st));
    cr_assert(st.steps == 10 && st.chunks == 6 && st.tokens == 211, /* the refused call's token too */ "%llu steps, %llu chunks, %llu tokens",
              (unsigned long long)st.steps, (unsigned long long)st.chunks, (unsigned long long)st.tokens);
    free(rows);
    engine_destroy(e[0]);
    cr_assert_eq(f[0].destroyed, 1);
    cr_assert_not(engine_batch_stats_of(&f[0].base, &st), "not a wrapper");
}

typedef struct worker {
    engine *e;
    uint32_t tokens, prompt; /* decode this many single tokens after a prompt of that many */
    bool mark;               /* mark busy around the work */
    int rc;
    uint64_t done_at;
    uint32_t think_us; /* between calls (a server's slot emits its token) */
} worker;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void *work(void *arg) {
    worker *w = arg;
    kiln_err err = {0};
    int32_t *tok = calloc(w->prompt + 1, sizeof *tok);
    float logits[4];
    if (w->mark) engine_batch_busy(w->e, true);
    uint32_t pos = 0;
    if (w->prompt) w->rc = engine_eval(w->e, tok, w->prompt, 0, logits, false, &err), pos = w->prompt;
    if (!w->rc && w->prompt && logits[3] != (float)(w->prompt - 1)) w->rc = -2; /* the prompt's last row */
    for (uint32_t i = 0; i < w->tokens && !w->rc; i++) {
        if (w->think_us) nanosleep(&(struct timespec){.tv_nsec = (long)w->think_us * 1000}, NULL);
        w->rc = engine_eval(w->e, tok, 1, pos + i, logits, false, &err);
        if (!w->rc && logits[3] != (float)(pos + i)) w->rc = -2;
    }
    w->done_at = now_ns();
    if (w->mark) engine_batch_busy(w->e, false);
    free(tok);
    return NULL;
}

static void run_workers(worker *w, int n) {
    pthread_t th[8];
    for (int i = 0; i < n; i++) cr_assert_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++)
        cr_assert_eq(w[i].rc, 0, "worker %d: %s", i, w[i].rc == -2 ? "a wrong row" : "two engines of the group ran at once");
}

/* Busy sequences step together: nearly every step takes one token of each, and no two
 * engines ever run at once. */
Test(engine_batch, busy_sequences_step_together) {
    fake f[4];
    engine *e[4];
    fakes(f, e, 4, 200);
    kiln_err err = {0};
    engine_batch_opts o = {.gather_us = 200000}; /* a slow machine still gathers all four */
    cr_assert_eq(engine_batch_group(e, 4, &o, &err), 0);
    for (int i = 0; i < 4; i++) engine_batch_busy(e[i], true);
    worker w[4];
    for (int i = 0; i < 4; i++) w[i] = (worker){e[i], 40, 0, false, 0, 0};
    run_workers(w, 4);
    engine_batch_stats st;
    cr_assert(engine_batch_stats_of(e[1], &st));
    cr_assert_eq(st.calls, 160);
    cr_assert(st.steps <= 44, "160 calls in %llu steps: the busy sequences did not step together",
              (unsigned long long)st.steps);
    cr_assert(st.by_calls[2] >= 36, "%llu steps of 3-4 calls", (unsigned long long)st.by_calls[2]);
    for (int i = 0; i < 4; i++) cr_assert_eq(e[i]->n_past, 40);
    for (int i = 0; i < 4; i++) engine_destroy(e[i]);
}

/* Short prompts' tokens go to eval_step with the decoding ones (as items at consecutive
 * positions, only the last with an output); a prompt longer than 64 tokens runs alone. */
Test(engine_batch, short_prompts_join_the_step) {
    fake f[3];
    engine *e[3];
    fakes(f, e, 3, 0);
    for (int i = 0; i < 3; i++) f[i].base.ops = &fake_step_ops;
    kiln_err err = {0};
    engine_batch_opts o = {.gather_us = 200000};
    cr_assert_eq(engine_batch_group(e, 3, &o, &err), 0);
    for (int i = 0; i < 3; i++) engine_batch_busy(e[i], true);
    worker w[3] = {{e[0], 20, 10, false, 0, 0}, {e[1], 20, 30, false, 0, 0}, {e[2], 20, 100, false, 0, 0}};
    run_workers(w, 3);
    engine_batch_stats st;
    cr_assert(engine_batch_stats_of(e[0], &st));
    cr_assert_eq(st.tokens, 60 + 140);
    /* the first step: the two short prompts together (40 items), the long one alone (one entry of 100) */
    int items = 0, long_alone = 0;
    for (int i = 0; i < n_log && i < LOG_MAX; i++) {
        items += logbuf[i].n == 1 && logbuf[i].who < 2 && logbuf[i].pos < 30 && !(logbuf[i].who == 0 && logbuf[i].pos >= 10);
        long_alone += logbuf[i].who == 2 && logbuf[i].n == 100;
    }
    cr_assert_eq(items, 40, "%d of the short prompts' tokens went as items", items);
    cr_assert_eq(long_alone, 1);
    cr_assert_geq(st.together, 40 + 3 * 15, "%llu tokens together", (unsigned long long)st.together);
    for (int i = 0; i < 3; i++) cr_assert_eq(e[i]->n_past, w[i].prompt + 20);
    for (int i = 0; i < 3; i++) engine_destroy(e[i]);
}

/* The same with callers polling while a step runs (engine_batch_opts.spin_busy, as kiln
 * serve sets it for a GPU), and two of them with prompts cut into chunks over several
 * steps: every call still comes back with its own result, once, and steps take them all. */
Test(engine_batch, polling_callers_step_together) {
    fake f[4];
    engine *e[4];
    fakes(f, e, 4, 200);
    kiln_err err = {0};
    engine_batch_opts o = {.gather_us = 200000, .step_tokens = 16, .spin_busy = 8};
    cr_assert_eq(engine_batch_group(e, 4, &o, &err), 0);
    for (int i = 0; i < 4; i++) engine_batch_busy(e[i], true);
    worker w[4];
    for (int i = 0; i < 4; i++) w[i] = (worker){e[i], 40, i < 2 ? 50 : 0, false, 0, 0};
    run_workers(w, 4);
    engine_batch_stats st;
    cr_assert(engine_batch_stats_of(e[1], &st));
    /* the prompts' chunks share each step's 16 tokens with the decoding ones: 4 or more each */
    cr_assert_geq(st.calls, 160 + 2 * 4, "%llu calls", (unsigned long long)st.calls);
    cr_assert_eq(st.tokens, 160 + 2 * 50);
    cr_assert(st.steps <= 60, "%llu steps: the busy sequences did not step together", (unsigned long long)st.steps);
    for (int i = 0; i < 4; i++) cr_assert_eq(e[i]->n_past, i < 2 ? 90 : 40);
    for (int i = 0; i < 4; i++) engine_destroy(e[i]);
}

/* A call that comes while a step runs waits for the step's own callers to come back (the
 * gather time counts from the step's end): a sequence that started late joins the others'
 * steps instead of taking steps of its own between them for good. */
Test(engine_batch, a_late_sequence_joins_the_others) {
    fake f[4];
    engine *e[4];
    /* a step of four calls: 80 ms, past the gather time; the gather 250x a caller's think
     * time, so a loaded machine's scheduling does not split steps the way the bug this
     * catches does (a 5 ms gather did, under ASan beside three busy loops: 38 steps) */
    fakes(f, e, 4, 20000);
    kiln_err err = {0};
    engine_batch_opts o = {.gather_us = 50000};
    cr_assert_eq(engine_batch_group(e, 4, &o, &err), 0);
    for (int i = 0; i < 4; i++) engine_batch_busy(e[i], true);
    worker w[4];
    for (int i = 0; i < 4; i++) w[i] = (worker){e[i], 30, 0, false, 0, 0, 200}; /* back within the gather */
    pthread_t th[4];
    for (int i = 0; i < 3; i++) cr_assert_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
    while (__atomic_load_n(&running, __ATOMIC_SEQ_CST) == 0) nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
    cr_assert_eq(pthread_create(&th[3], NULL, work, &w[3]), 0); /* during the first step */
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) cr_assert_eq(w[i].rc, 0);
    engine_batch_stats st;
    cr_assert(engine_batch_stats_of(e[0], &st));
    cr_assert_eq(st.calls, 120);
    cr_assert(st.steps <= 36, "120 calls in %llu steps: the late sequence stepped apart", (unsigned long long)st.steps);
    for (int i = 0; i < 4; i++) engine_destroy(e[i]);
}

/* A busy sequence that does not call holds a step no longer than the gather time. */
Test(engine_batch, an_idle_busy_sequence_is_not_waited_for_long) {
    fake f[2];
    engine *e[2];
    fakes(f, e, 2, 0);
    kiln_err err = {0};
    engine_batch_opts o = {.gather_us = 5000}; /* 5 ms: far above a loaded machine's scheduling noise */
    cr_assert_eq(engine_batch_group(e, 2, &o, &err), 0);
    engine_batch_busy(e[1], true); /* marked, never calls */
    uint64_t t0 = now_ns();
    worker w = {e[0], 20, 0, false, 0, 0};
    run_workers(&w, 1);
    double ms = (double)(w.done_at - t0) / 1e6;
    cr_assert(ms >= 99.0, "20 steps of a 5 ms gather in %.2f ms", ms);
    cr_assert(ms < 4000.0, "20 steps took %.2f ms", ms);
    engine_batch_busy(e[1], false);
    t0 = now_ns();
    run_workers(&w, 1);
    cr_assert((double)(w.done_at - t0) / 1e6 < 99.0, "nobody else busy: no gathering");
    engine_destroy(e[0]);
    engine_destroy(e[1]);
}

/* A long prompt does not hold a decoding sequence for its whole length: the decoder's
 * tokens go between the prompt's chunks and it finishes first. */
Test(engine_batch, decoding_goes_between_a_prompts_chunks) {
    fake f[2];
    engine *e[2];
    /* 2 ms a call: the prompt's 64 chunks take 130 ms or more, so a decoder thread that a
     * loaded machine (ASan, two test processes on two cores) starts late still joins them
     * (300 us failed once so under ASan: the prompt was through before the decoder came) */
    fakes(f, e, 2, 2000);
    kiln_err err = {0};
    engine_batch_opts o = {.step_tokens = 16, .gather_us = 50000};
    cr_assert_eq(engine_batch_group(e, 2, &o, &err), 0);
    worker w[2] = {{e[0], 12, 0, true, 0, 0}, {e[1], 0, 16 * 64, true, 0, 0}};
    pthread_t th[2]; /* the prompt first; the decoder once its first chunk has run */
    cr_assert_eq(pthread_create(&th[1], NULL, work, &w[1]), 0);
    while (__atomic_load_n(&n_log, __ATOMIC_SEQ_CST) == 0) nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
    cr_assert_eq(pthread_create(&th[0], NULL, work, &w[0]), 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    cr_assert(w[0].rc == 0 && w[1].rc == 0, "two engines of the group ran at once");
    cr_assert(w[0].done_at < w[1].done_at, "the decoder waited for the whole prompt");
    int chunks = 0, decoder_between = 0;
    uint32_t prompt = 0;
    for (int i = 0; i < n_log && i < LOG_MAX; i++) {
        if (logbuf[i].who == 1) chunks++, prompt += logbuf[i].n;
        else if (chunks > 0 && prompt < 16 * 64) decoder_between++;
        cr_assert(logbuf[i].n <= 16, "a call of %u tokens in a step of 16", logbuf[i].n);
    }
    cr_assert(prompt == 16 * 64 && chunks >= 64, "%u prompt tokens in %d chunks", prompt, chunks);
    cr_assert_eq(decoder_between, 12, "%d decoder tokens between the prompt's chunks", decoder_between);
    engine_destroy(e[0]);
    engine_destroy(e[1]);
}

/* Whole model: sequences generated together in steps (with prompts cut into chunks) give
 * each the tokens it gets alone. */
typedef struct gen_arg {
    gen_session *s;
    tokenizer *t;
    const int32_t *prompt;
    uint32_t n;
    int32_t *out;
    uint32_t n_out;
    engine *e;
    int rc;
} gen_arg;

static int ignore(void *ctx, const char *text, size_t len) {
    (void)ctx, (void)text, (void)len;
    return 0;
}

static void *gen_thread(void *arg) {
    gen_arg *a = arg;
    kiln_err err = {0};
    samp_params sp;
    samp_params_default(&sp);
    sampler *smp = samp_create(&sp, a->e->n_vocab);
    gen_params p = {.max_tokens = 12, .extra_eog = -1};
    gen_result r = {0};
    engine_batch_busy(a->e, true);
    a->rc = smp ? gen_run(a->s, smp, a->prompt, a->n, &p, ignore, NULL, &r, &err) : -1;
    engine_batch_busy(a->e, false);
    a->n_out = r.n_generated;
    if (r.ids) memcpy(a->out, r.ids, r.n_generated * sizeof *r.ids);
    free(r.ids);
    samp_free(smp);
    return NULL;
}

Test(engine_batch, oracle_sequences_match_alone, .timeout = 300) {
    kiln_err err = {0};
    model *m = model_load(tu_data_file("models/stories260K.gguf"), &err);
    cr_assert_not_null(m, "%s", err.msg);
    tokenizer *t = tok_load(m->file, &err);
    cr_assert_not_null(t, "%s", err.msg);
    orc_options oo = {.n_ctx = 256, .threads = 1};
    static const int32_t prompts[3][9] = {{1, 400, 29, 7, 300}, {1, 11, 12, 13, 14, 15, 16, 17, 18}, {1, 9}};
    static const uint32_t lens[3] = {5, 9, 2};
    int32_t alone[3][16], together[3][16];
    engine *e[3];
    for (int i = 0; i < 3; i++) {
        e[i] = orc_create(m, &oo, &err);
        cr_assert_not_null(e[i], "%s", err.msg);
    }
    for (int i = 0; i < 3; i++) { /* alone, one after another */
        gen_session *s = gen_session_create(e[i], t);
        gen_arg a = {s, t, prompts[i], lens[i], alone[i], 0, e[i], 0};
        gen_thread(&a);
        cr_assert(a.rc == 0 && a.n_out == 12, "alone %d: rc %d, %u tokens", i, a.rc, a.n_out);
        gen_session_free(s);
        engine_truncate(e[i], 0);
    }
    engine_batch_opts o = {.step_tokens = 3}; /* every prompt in chunks */
    cr_assert_eq(engine_batch_group(e, 3, &o, &err), 0);
    gen_session *s[3];
    gen_arg a[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        s[i] = gen_session_create(e[i], t);
        a[i] = (gen_arg){s[i], t, prompts[i], lens[i], together[i], 0, e[i], 0};
        cr_assert_eq(pthread_create(&th[i], NULL, gen_thread, &a[i]), 0);
    }
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        cr_assert(a[i].rc == 0 && a[i].n_out == 12, "together %d", i);
        cr_assert_arr_eq(alone[i], together[i], 12 * sizeof(int32_t), "sequence %d differs in a step", i);
    }
    engine_batch_stats st;
    cr_assert(engine_batch_stats_of(e[0], &st));
    cr_assert(st.chunks > 0, "no prompt was cut into chunks");
    for (int i = 0; i < 3; i++) {
        gen_session_free(s[i]);
        engine_destroy(e[i]);
    }
    tok_free(t);
    model_free(m);
}

/* eval_argmax in halves (engine_ops.submit_argmax / wait_argmax): each caller queues its
 * next token, then "works" (sleeps) before it waits, as kiln serve's slots do with a token's
 * text; the calls still step together and each gets its own answer; a second submit before
 * the wait, and a wait with nothing submitted, are refused; a call of no tokens is answered. */
typedef struct submitter {
    engine *e;
    uint32_t tokens, think_us;
    int rc;
} submitter;

static void *submit_work(void *arg) {
    submitter *w = arg;
    kiln_err err = {0};
    int32_t tok = 0, best = -1;
    for (uint32_t i = 0; i < w->tokens && !w->rc; i++) {
        if (w->e->ops->submit_argmax(w->e, &tok, 1, i, &best, &err)) w->rc = -1;
        else {
            nanosleep(&(struct timespec){.tv_nsec = (long)w->think_us * 1000}, NULL);
            w->rc = w->e->ops->wait_argmax(w->e, &err);
            if (!w->rc && (best != (int32_t)i + 1 || w->e->n_past != i + 1)) w->rc = -2;
        }
    }
    return NULL;
}

Test(engine_batch, submitted_calls_step_together) {
    fake f[4];
    engine *e[4];
    fakes(f, e, 4, 200);
    kiln_err err = {0};
    engine_batch_opts o = {.gather_us = 200000, .spin_busy = 8};
    cr_assert_eq(engine_batch_group(e, 4, &o, &err), 0);
    cr_assert(e[0]->ops->submit_argmax && e[0]->ops->wait_argmax);
    int32_t tok = 0, best = -1;
    cr_assert_neq(e[0]->ops->wait_argmax(e[0], &err), 0);
    cr_assert(strstr(err.msg, "no evaluation was submitted"), "%s", err.msg);
    cr_assert_eq(e[0]->ops->submit_argmax(e[0], &tok, 0, 0, &best, &err), 0); /* no tokens: the inner engine's */
    cr_assert_neq(e[0]->ops->submit_argmax(e[0], &tok, 1, 0, &best, &err), 0);
    cr_assert(strstr(err.msg, "not waited for"), "%s", err.msg);
    cr_assert_eq(e[0]->ops->wait_argmax(e[0], &err), 0, "%s", err.msg);
    cr_assert_eq(best, 0);
    for (int i = 0; i < 4; i++) engine_batch_busy(e[i], true);
    submitter w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (submitter){e[i], 40, 100 + 150 * (uint32_t)i, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, submit_work, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) cr_assert_eq(w[i].rc, 0, "caller %d: %s", i, w[i].rc == -2 ? "a wrong answer" : "failed");
    engine_batch_stats st;
    cr_assert(engine_batch_stats_of(e[1], &st));
    cr_assert_eq(st.calls, 160);
    cr_assert(st.steps <= 44, "160 calls in %llu steps: the submitted calls did not step together",
              (unsigned long long)st.steps);
    for (int i = 0; i < 4; i++) engine_destroy(e[i]);
}
