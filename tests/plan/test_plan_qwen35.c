/* Qwen3.5 (qwen35: Gated DeltaNet layers beside gated full attention) through a GPU plan
 * on the Vulkan device (lavapipe in CI), against the contract-mode oracle: a story prompt
 * in prefill blocks (several and a partial one) and through the short block, then decode
 * steps; rewinds replay the recurrent state from zero and give the logits of the first
 * pass; sections the GPU's rope cannot follow are refused by name. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "model/engine.h"
#include "model/model.h"
#include "plan/plan.h"
#include "plan/plan_internal.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_plan.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Test(plan_qwen35, shape_and_roles) {
    kiln_err err = {0};
    model *m = model_load(tu_data_file("models/qwen35-tiny.gguf"), &err);
    cr_assert_not_null(m, "%s", err.msg);
    plan_shape s;
    cr_assert_eq(plan_shape_of(m, 0, 0, 0, &s, &err), 0, "%s", err.msg);
    cr_assert_eq(s.conv_dim, 2 * 2 * 32 + 4 * 32, "q and k of 2 k heads, v of 4 v heads, state 32");
    cr_assert_eq(s.dn_v_dim, 4 * 32);
    /* the stacked input weight: z and beta on 128-row boundaries (views on RT_VIEW_ALIGN) */
    cr_assert(s.dn_z_row == 256 && s.dn_ba_row == 384 && s.dn_in_rows == 392, "%u %u %u", s.dn_z_row, s.dn_ba_row,
              s.dn_in_rows);
    s.conv_dim = 280, s.dn_v_dim = 168; /* the odd synth's: zero rows after each */
    plan_dn_rows(&s);
    cr_assert(s.dn_z_row == 384 && s.dn_ba_row == 640 && s.dn_in_rows == 648, "%u %u %u", s.dn_z_row, s.dn_ba_row,
              s.dn_in_rows);
    cr_assert(plan_role_used(&s, K_DELTANET) && plan_role_used(&s, K_GATE) && plan_role_used(&s, K_MM_QKV));
    /* IMROPE's 4th section leaves pairs unturned: the GPU refuses such sections */
    uint32_t sec[4] = {3, 3, 2, 0};
    for (uint32_t i = 0; i < 8; i++) cr_assert(!plan_imrope_pair_still(sec, i), "pair %u", i);
    uint32_t with_e[4] = {2, 2, 2, 2};
    cr_assert(plan_imrope_pair_still(with_e, 6) && plan_imrope_pair_still(with_e, 7));
    memcpy(m->hp.rope_sections, with_e, sizeof with_e);
    cr_assert_eq(plan_shape_of(m, 0, 0, 0, &s, &err), -1);
    cr_assert(strstr(err.msg, "qwen35") && strstr(err.msg, "--device cpu"), "%s", err.msg);
    /* a dense model has none of the qwen35 roles */
    model_free(m);
}

Test(plan_qwen35, whole_model_against_the_oracle, .timeout = 600) {
    const char *path = tu_data_file("models/qwen35-tiny.gguf");
    int32_t ids[256];
    uint32_t n = tu_story_ids(path, ids, 256);
    cr_assert_geq(n, 70, "a story of %u tokens", n);
    static const struct {
        const char *caps;
        uint32_t dtype, block, n_prompt;
    } runs[] = {{NULL, GGUF_T_F16, 64, 70}, {NULL, GGUF_T_BF16, 0, 23}, {"workgroup=64", GGUF_T_F16, 64, 9}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        rt_device *d = tu_vk_open_or_skip(runs[i].caps);
        double f32 = 0, worst = tu_plan_compare(d, runs[i].caps, path, runs[i].dtype, 12, ids, runs[i].n_prompt,
                                                runs[i].block, &f32);
        d->ops->destroy(d);
        cr_log_info("caps=%s: logits relative error %.3e (the f32 oracle's distance from the contract: %.3e)",
                    runs[i].caps ? runs[i].caps : "device", worst, f32);
        /* bf16 runs on CUDA come to 1.2e-2 where the f32 oracle itself is 7e-2 away: the
         * bound grows with the contract's own rounding noise, as in odd_synth below */
        cr_assert_lt(worst, fmax(1e-2, 0.5 * f32), "caps=%s: logits relative error %.3e (f32 oracle's %.3e)",
                     runs[i].caps ? runs[i].caps : "device", worst, f32);
    }
}

/* kiln synth's odd-sized Qwen3.5 (heads of 44, DeltaNet states of 28, 2 k heads under 6 v
 * heads, rope on 10 dims): every kernel at shapes no real model has. */
Test(plan_qwen35, odd_synth_against_the_oracle, .timeout = 600) {
    const char *path = tu_tmp("q35-odd.gguf");
    char e[4096];
    int rc = tu_run_kiln((const char *const[]){"synth", "--preset", "qwen3.5-tiny-odd", "-o", path, NULL}, NULL, 0, e,
                         sizeof e);
    cr_assert_eq(rc, 0, "%s", e);
    int32_t ids[48];
    for (uint32_t i = 0; i < 48; i++) ids[i] = (int32_t)((i * 131 + 7) % 600);
    rt_device *d = tu_vk_open_or_skip(NULL);
    double f32 = 0, worst = tu_plan_compare(d, NULL, path, GGUF_T_BF16, 10, ids, 48, 64, &f32);
    d->ops->destroy(d);
    /* this model crowds its logits: the bound grows with the contract's own rounding noise */
    cr_assert_lt(worst, fmax(1e-2, 0.5 * f32), "logits relative error %.3e (f32 oracle's distance %.3e)", worst, f32);
}

static double rel_err(const float *a, const float *b, uint32_t n) {
    double num = 0, den = 0;
    for (uint32_t i = 0; i < n; i++) num += fabs((double)a[i] - b[i]), den += fabs((double)b[i]);
    return den ? num / den : num;
}

/* Evaluating again at an earlier position restores a snapshot of the recurrent state or
 * zeroes it, and replays the remembered tokens from there: the logits are those of the
 * first pass (up to the summation order of the blocks taken). A prompt goes whole (no
 * snapshot before its last token): re-evaluating its last token replays it once, then
 * restores the snapshot that replay left. Single tokens take a snapshot only every
 * PLAN_SNAP_EVERY positions. A position past the state is refused. */
Test(plan_qwen35, rewinds_restore_or_replay_the_state, .timeout = 300) {
    const char *path = tu_data_file("models/qwen35-tiny.gguf");
    kiln_err err = {0};
    model *m = model_load(path, &err);
    cr_assert_not_null(m, "%s", err.msg);
    rt_device *d = tu_vk_open_or_skip(NULL);
    engine *e = plan_create(m, d, GGUF_T_F16, 256, 64, &err);
    cr_assert_not_null(e, "%s", err.msg);
    const plan_engine *pe = (const plan_engine *)e;
    int32_t ids[256];
    uint32_t n = 40, V = m->hp.n_vocab;
    cr_assert_geq(tu_story_ids(path, ids, 256), n);
    float *first = malloc((size_t)n * V * 4), *again = malloc((size_t)V * 4);
    cr_assert_eq(engine_eval(e, ids, n, 0, first, true, &err), 0, "%s", err.msg); /* one decode step a token */
    cr_assert_eq(pe->snapshots, 0, "an eval at 0 takes no snapshot");
    const float *want = first + (size_t)(n - 1) * V;
    static const struct { uint32_t from, replayed, snapshots; } back[] = {
        {0, 0, 0},    /* from the start: the state zeroed, the prompt whole */
        {39, 39, 1},  /* the last token again: 39 replayed, a snapshot at 39 after them */
        {39, 39, 1},  /* and again: that snapshot back */
        {17, 56, 2},  /* older than any snapshot: zero, 17 tokens again, a snapshot at 17 */
        {17, 56, 2},  /* the snapshot taken at 17 */
        {1, 57, 3}, {0, 57, 3}};
    for (size_t i = 0; i < sizeof back / sizeof back[0]; i++) {
        uint32_t p = back[i].from;
        cr_assert_eq(engine_eval(e, ids + p, n - p, p, again, false, &err), 0, "%s", err.msg);
        double r = rel_err(again, want, V);
        cr_assert_lt(r, 1e-2, "rewound to %u: logits relative error %.3e", p, r);
        cr_assert_eq(pe->replayed, back[i].replayed, "rewound to %u: %u positions replayed in all, not %u", p,
                     pe->replayed, back[i].replayed);
        cr_assert_eq(pe->snapshots, back[i].snapshots, "rewound to %u: %u snapshots, not %u", p, pe->snapshots,
                     back[i].snapshots);
    }
    /* decode steps from 40: a snapshot at 40 (none within PLAN_SNAP_EVERY), the next at 40 + 64 */
    int32_t next = ids[0];
    for (uint32_t t = n; t < n + PLAN_SNAP_EVERY + 2; t++) {
        cr_assert_eq(engine_eval(e, &next, 1, t, again, false, &err), 0, "%s", err.msg);
        uint32_t want_snaps = 3 + (t >= n) + (t >= n + PLAN_SNAP_EVERY);
        cr_assert_eq(pe->snapshots, want_snaps, "step at %u: %u snapshots, not %u", t, pe->snapshots, want_snaps);
    }
    /* back into the generated tokens: the snapshot at 40 + 64, then 1 token replayed */
    uint32_t before = pe->replayed;
    cr_assert_eq(engine_eval(e, &next, 1, n + PLAN_SNAP_EVERY + 1, again, false, &err), 0, "%s", err.msg);
    cr_assert_eq(pe->replayed, before + 1, "%u replayed, not 1", pe->replayed - before);
    cr_assert_eq(engine_eval(e, ids, 1, n + PLAN_SNAP_EVERY + 4, again, false, &err), -1);
    cr_assert(strstr(err.msg, "past"), "%s", err.msg);
    free(first), free(again);
    e->ops->destroy(e);
    d->ops->destroy(d);
    model_free(m);
}
