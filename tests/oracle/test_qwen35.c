/* The oracle on Qwen3.5 (qwen35-tiny: Gated DeltaNet layers 0-2, 4-6, gated attention in
 * 3, 7) against llama.cpp's goldens, f32 mode against the exact-math golden and contract
 * mode (f16) against llama.cpp as users run it; a prompt evaluated at once equals token
 * by token; rewinds (an eval before the recurrent state's end, engine_truncate) replay
 * from a snapshot or position 0 and agree with a fresh run. */
#include "base/error.h"
#include "model/engine.h"
#include "model/model.h"
#include "oracle/oracle.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_golden.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TINY "models/qwen35-tiny.gguf"
/* A first difference must come at a near-tie of llama.cpp's: top-1 minus top-2 at most
 * 0.05 nats (the testdata README's rule) for f32 mode. Contract mode rounds every stored
 * activation (the residual stream too) to f16, and this random model magnifies rounding:
 * llama.cpp's own f16 rounding of matmul inputs alone moves its logprobs by up to 0.087
 * nats here (the dense F16 file: 0.010), and the contract moves them by up to ~0.18
 * (dense F16: 0.018), with no single DeltaNet rounding point dominating (each one left
 * out in turn changed the worst by less than 0.05). Contract mode is held to 0.1. */
#define NEAR_TIE_F32 0.05
#define NEAR_TIE_CONTRACT 0.1

static engine *open_engine(orc_mode mode, uint32_t n_ctx, model **m) {
    kiln_err err = {0};
    *m = model_load(tu_data_file(TINY), &err);
    cr_assert_not_null(*m, "%s", err.msg);
    orc_options o = {.mode = mode, .dtype = 0, .n_ctx = n_ctx, .threads = 2};
    engine *e = orc_create(*m, &o, &err);
    cr_assert_not_null(e, "%s", err.msg);
    return e;
}

/* Greedy decoding of every case of a golden, one engine for all. */
static tu_golden_result run_golden(const char *golden, orc_mode mode) {
    model *m;
    engine *e = open_engine(mode, 256, &m);
    tu_golden_result r = tu_golden_run(e, golden, mode == ORC_F32 ? NEAR_TIE_F32 : NEAR_TIE_CONTRACT,
                                       orc_mode_name(mode));
    engine_destroy(e);
    model_free(m);
    return r;
}

Test(oracle, qwen35_f32_matches_llamacpp_exact_math, .timeout = 120) {
    tu_golden_result r = run_golden("models/qwen35-tiny.f32dequant-kvf32-nofa.llamacpp.json", ORC_F32);
    cr_log_info("qwen35-tiny f32 vs llama.cpp f32dequant: %d/%d cases identical, max |dlogprob| %.2e, "
                "%d near-tie differences (worst gap %.4f)",
                r.identical, r.cases, r.worst_dlogprob, r.near_tie_diffs, r.worst_tie_gap);
    cr_assert_eq(r.cases, 6);
    cr_assert_lt(r.worst_dlogprob, 1e-4, "f32 mode must follow llama.cpp's exact math to ~1e-4 nats, got %.2e",
                 r.worst_dlogprob);
}

Test(oracle, qwen35_contract_f16_against_llamacpp, .timeout = 120) {
    tu_golden_result p = run_golden("models/qwen35-tiny.llamacpp.json", ORC_CONTRACT);
    tu_golden_result x = run_golden("models/qwen35-tiny.f32dequant-kvf32-nofa.llamacpp.json", ORC_CONTRACT);
    cr_log_info("qwen35-tiny contract f16 vs llama.cpp as run: %d/%d identical, max |dlogprob| %.4f, %d near-tie "
                "differences (worst gap %.4f)",
                p.identical, p.cases, p.worst_dlogprob, p.near_tie_diffs, p.worst_tie_gap);
    cr_log_info("qwen35-tiny contract f16 vs llama.cpp f32dequant: %d/%d identical, max |dlogprob| %.4f, %d near-tie "
                "differences (worst gap %.4f)",
                x.identical, x.cases, x.worst_dlogprob, x.near_tie_diffs, x.worst_tie_gap);
    cr_assert_eq(p.cases, 6);
    cr_assert_gt(x.worst_dlogprob, 0, "contract mode must round something");
    /* llama.cpp's own two goldens are 0.087 apart; the contract rounds more (every
     * stored activation to f16), so it is held to a few times that */
    cr_assert_lt(p.worst_dlogprob, 0.3);
    cr_assert_lt(x.worst_dlogprob, 0.3);
}

static void expect_same(const float *a, const float *b, uint32_t n, const char *what) {
    cr_assert_eq(memcmp(a, b, n * sizeof *a), 0, "%s", what);
}

/* Evaluating n tokens at once, in pieces, or one at a time gives bit-identical logits:
 * the recurrence runs token by token whatever the grouping. */
static void prefill_equals_steps(orc_mode mode) {
    model *ma, *mb;
    engine *a = open_engine(mode, 512, &ma), *b = open_engine(mode, 512, &mb);
    uint32_t nv = a->n_vocab, n = 23;
    int32_t toks[23];
    for (uint32_t i = 0; i < n; i++) toks[i] = (int32_t)((i * 7919u + 3) % nv);
    float *all = malloc((size_t)n * nv * sizeof *all), *one = malloc(nv * sizeof *one);
    kiln_err err = {0};
    cr_assert_eq(engine_eval(a, toks, n, 0, all, true, &err), 0, "%s", err.msg);
    for (uint32_t i = 0; i < n; i++) {
        cr_assert_eq(engine_eval(b, &toks[i], 1, i, one, false, &err), 0, "%s", err.msg);
        char what[96];
        snprintf(what, sizeof what, "%s: position %u: token by token differs from at once", orc_mode_name(mode), i);
        expect_same(one, all + (size_t)i * nv, nv, what);
    }
    cr_assert_eq(orc_replayed_positions(b), 0, "stepping forward replays nothing");
    /* in pieces of 10 and 13, the second piece's rows equal the whole prompt's */
    float *piece = malloc((size_t)13 * nv * sizeof *piece);
    cr_assert_eq(engine_eval(b, toks, 10, 0, piece, true, &err), 0, "%s", err.msg); /* a rewind to 0 */
    cr_assert_eq(engine_eval(b, toks + 10, 13, 10, piece, true, &err), 0, "%s", err.msg);
    expect_same(piece, all + (size_t)10 * nv, 13 * nv, "10 + 13 tokens differ from 23 at once");
    free(piece);
    free(all);
    free(one);
    engine_destroy(a);
    engine_destroy(b);
    model_free(ma);
    model_free(mb);
}

Test(oracle, qwen35_prefill_equals_steps, .timeout = 120) {
    prefill_equals_steps(ORC_F32);
    prefill_equals_steps(ORC_CONTRACT);
}

/* Rewinds as documented in forward.c: an eval at pos < the state's end (or after
 * engine_truncate) restores the latest snapshot at or before pos (the state at the start
 * of one of the last few evals), else the zero state, and replays the remembered tokens
 * from there; the result is bit-identical to a fresh run of the same path, and differs
 * from carrying on with the stale state (so the check could fail). */
Test(oracle, qwen35_rewind_replays_from_a_snapshot_or_zero, .timeout = 180) {
    model *ma, *mb;
    engine *a = open_engine(ORC_F32, 512, &ma), *b = open_engine(ORC_F32, 512, &mb);
    uint32_t nv = a->n_vocab, n = 300;
    int32_t *toks = malloc(n * sizeof *toks), *path = malloc(n * sizeof *path);
    for (uint32_t i = 0; i < n; i++) toks[i] = (int32_t)((i * 131u + 17) % nv);
    float *lb = malloc(nv * sizeof *lb), *la = malloc(nv * sizeof *la), *orig = malloc(nv * sizeof *orig);
    kiln_err err = {0};
    int32_t alt[5] = {5, 6, 7, 8, 9};

    /* b: 23 tokens, then the last 5 replaced: a rewind to position 18 */
    cr_assert_eq(engine_eval(b, toks, 23, 0, orig, false, &err), 0, "%s", err.msg);
    cr_assert_eq(engine_eval(b, alt, 5, 18, lb, false, &err), 0, "%s", err.msg);
    cr_assert_eq(b->n_past, 23);
    cr_assert_eq(orc_replayed_positions(b), 18);
    memcpy(path, toks, 18 * sizeof *toks);
    memcpy(path + 18, alt, sizeof alt);
    cr_assert_eq(engine_eval(a, path, 23, 0, la, false, &err), 0, "%s", err.msg);
    expect_same(lb, la, nv, "a rewind to 18 differs from a fresh run of the same path");
    cr_assert_neq(memcmp(lb, orig, nv * sizeof *lb), 0, "the other path gives the same logits");

    /* the same 5 tokens at 18 without rewinding the state would be wrong: evaluate them
     * at 23 (state past 23) and see they differ from the rewound result */
    cr_assert_eq(engine_eval(a, alt, 5, 23, la, false, &err), 0, "%s", err.msg);
    cr_assert_neq(memcmp(lb, la, nv * sizeof *lb), 0, "the state does not matter?");

    /* engine_truncate, then carry on from there */
    engine_truncate(b, 4);
    cr_assert_eq(engine_eval(b, alt, 3, 4, lb, false, &err), 0, "%s", err.msg);
    cr_assert_eq(orc_replayed_positions(b), 18 + 4);
    memcpy(path + 4, alt, 3 * sizeof *alt);
    cr_assert_eq(engine_eval(a, path, 7, 0, la, false, &err), 0, "%s", err.msg);
    expect_same(lb, la, nv, "after engine_truncate to 4, the result differs from a fresh run");
    /* the step after a rewind continues without replaying again */
    cr_assert_eq(engine_eval(b, &toks[0], 1, 7, lb, false, &err), 0, "%s", err.msg);
    cr_assert_eq(orc_replayed_positions(b), 22);

    /* a replay longer than the oracle's replay block (256): 300 tokens, rewind to 290 */
    cr_assert_eq(engine_eval(b, toks, n, 0, lb, false, &err), 0, "%s", err.msg);
    cr_assert_eq(engine_eval(b, alt, 5, 290, lb, false, &err), 0, "%s", err.msg);
    cr_assert_eq(orc_replayed_positions(b), 22 + 290);
    memcpy(path, toks, 290 * sizeof *toks);
    memcpy(path + 290, alt, sizeof alt);
    cr_assert_eq(engine_eval(a, path, 295, 0, la, false, &err), 0, "%s", err.msg);
    expect_same(lb, la, nv, "a rewind to 290 differs from a fresh run");

    /* snapshots (the state at the start of each of the last few evals): the same 5 tokens
     * at 290 again restore the one at 290 and replay nothing; 2 tokens at 292 restore it
     * and replay 2; re-evaluating the last token (generate's way to get the logits of a
     * fully cached prompt) restores the one its eval took */
    memcpy(orig, lb, nv * sizeof *lb);
    cr_assert_eq(engine_eval(b, alt, 5, 290, lb, false, &err), 0, "%s", err.msg);
    cr_assert_eq(orc_replayed_positions(b), 312);
    expect_same(lb, orig, nv, "the snapshot at 290 gives other logits than the replay did");
    int32_t two[2] = {11, 12};
    cr_assert_eq(engine_eval(b, two, 2, 292, lb, false, &err), 0, "%s", err.msg);
    cr_assert_eq(orc_replayed_positions(b), 314);
    memcpy(path + 292, two, sizeof two);
    cr_assert_eq(engine_eval(a, path, 294, 0, la, false, &err), 0, "%s", err.msg);
    expect_same(lb, la, nv, "a snapshot at 290 plus a replay of 2 differs from a fresh run");
    cr_assert_eq(engine_eval(b, &two[1], 1, 293, lb, false, &err), 0, "%s", err.msg);
    cr_assert_eq(orc_replayed_positions(b), 314);
    expect_same(lb, la, nv, "re-evaluating the last token differs");

    /* a position past the cache is still refused */
    cr_assert_eq(engine_eval(b, alt, 1, 296, lb, false, &err), -1);
    cr_assert(strstr(err.msg, "past the 294 cached positions"), "%s", err.msg);
    free(toks);
    free(path);
    free(lb);
    free(la);
    free(orig);
    engine_destroy(a);
    engine_destroy(b);
    model_free(ma);
    model_free(mb);
}
