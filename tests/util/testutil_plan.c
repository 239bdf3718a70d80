/* Whole-model checks shared by the Vulkan and CUDA plan tests. */
#include "tests/util/testutil_plan.h"

#include "base/error.h"
#include "diverge/diverge.h"
#include "model/engine.h"
#include "model/model.h"
#include "oracle/oracle.h"
#include "modelgen/quant_mix.h"
#include "modelgen/synth.h"
#include "modelgen/vocab.h"
#include "plan/plan.h"
#include "tests/util/testutil.h"
#include "text/tok.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void top2(const float *l, uint32_t n, int32_t *a, int32_t *b) {
    *a = 0, *b = 1;
    if (l[1] > l[0]) *a = 1, *b = 0;
    for (uint32_t i = 2; i < n; i++) {
        if (l[i] > l[*a]) *b = *a, *a = (int32_t)i;
        else if (l[i] > l[*b]) *b = (int32_t)i;
    }
}

/* Greedy decoding on both engines, teacher-forced on the oracle's tokens after a
 * divergence so logits stay comparable. */
/* Returns the worst logits relative error (asserted by the caller, after every variant
 * has reported). */

double tu_plan_compare(rt_device *d, const char *caps, const char *path, uint32_t dtype, uint32_t steps,
                       const int32_t *prompt, uint32_t n_prompt, uint32_t n_block, double *f32_worst) {
    kiln_err err = {0};
    model *m = model_load(path, &err);
    cr_assert_not_null(m, "%s", err.msg);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN); /* the oracle on qwen3-8b wants every core */
    /* 256 positions, or what a longer prompt and its steps need */
    uint32_t n_ctx = n_prompt + steps > 256 ? (n_prompt + steps + 63) / 64 * 64 : 256;
    orc_options oo = {.mode = ORC_CONTRACT, .dtype = dtype, .n_ctx = n_ctx,
                      .threads = ncpu < 2 ? 2 : ncpu > 32 ? 32 : (uint32_t)ncpu};
    engine *orc = orc_create(m, &oo, &err);
    cr_assert_not_null(orc, "%s", err.msg);
    engine *gpu = plan_create(m, d, dtype, n_ctx, n_block, &err);
    cr_assert_not_null(gpu, "%s", err.msg);
    engine *f32 = NULL; /* the f32 oracle beside, for the contract's own distance */
    if (f32_worst) {
        orc_options of = oo;
        of.mode = ORC_F32;
        f32 = orc_create(m, &of, &err);
        cr_assert_not_null(f32, "%s", err.msg);
        *f32_worst = 0;
    }
    uint32_t nk, nl;
    plan_counts(gpu, &nk, &nl);
    uint32_t nv = m->hp.n_vocab;
    float *lo = malloc((size_t)nv * 4), *lg = malloc((size_t)nv * 4), *lf = malloc((size_t)nv * 4);
    cr_assert_eq(engine_eval(orc, prompt, n_prompt, 0, lo, false, &err), 0, "%s", err.msg);
    cr_assert_eq(engine_eval(gpu, prompt, n_prompt, 0, lg, false, &err), 0, "%s", err.msg);
    if (f32) cr_assert_eq(engine_eval(f32, prompt, n_prompt, 0, lf, false, &err), 0, "%s", err.msg);
    double worst = 0;
    int first_div = -1, worst_step = 0;
    for (uint32_t s = 0; s < steps; s++) {
        double maxabs = 0, err_abs = 0;
        for (uint32_t v = 0; v < nv; v++) {
            cr_assert(isfinite(lg[v]), "%s step %u: logit %u is %g", path, s, v, lg[v]);
            if (fabs(lo[v]) > maxabs) maxabs = fabs(lo[v]);
            if (fabs(lg[v] - lo[v]) > err_abs) err_abs = fabs(lg[v] - lo[v]);
        }
        double rel = err_abs / (maxabs > 0 ? maxabs : 1);
        if (rel > worst) worst = rel, worst_step = (int)s;
        double fe = 0; /* the f32 oracle's largest logit difference from the contract's at this step */
        if (f32) {
            for (uint32_t v = 0; v < nv; v++)
                if (fabs(lf[v] - lo[v]) > fe) fe = fabs(lf[v] - lo[v]);
            if (fe / (maxabs > 0 ? maxabs : 1) > *f32_worst) *f32_worst = fe / (maxabs > 0 ? maxabs : 1);
        }
        int32_t oa, ob, ga, gb;
        top2(lo, nv, &oa, &ob);
        top2(lg, nv, &ga, &gb);
        if (ga != oa) {
            /* diverge's near-tie rule: each side's pick over the other's within DV_NEAR_TIE_QUANTA */
            double gap_o = dv_gap_quanta(lo, oa, ga, dtype), gap_g = dv_gap_quanta(lg, ga, oa, dtype);
            cr_log_info("%s step %u: gpu picks %d (%g), oracle %d (%g); oracle's top two %d %g / %d %g; gaps %.2f "
                        "quanta on the oracle's side, %.2f on the gpu's",
                        path, s, ga, lg[ga], oa, lg[oa], oa, lo[oa], ob, lo[ob], gap_o, gap_g);
            if (first_div < 0) {
                first_div = (int)s;
                /* with the f32 oracle beside: also explained when the contract's own rounding
                 * noise at this step (f32 vs contract) covers the contract's margin of its
                 * pick over the GPU's */
                bool noise = f32 && lo[oa] - lo[ga] <= fe;
                if (f32)
                    cr_log_info("%s step %u: contract margin over the gpu's pick %g, f32-vs-contract noise %g", path, s,
                                lo[oa] - lo[ga], fe);
                cr_assert(dv_is_near_tie(gap_o, gap_g) || noise,
                          "%s: first divergence at step %u is not a near-tie (%.2f / %.2f quanta)%s", path, s, gap_o,
                          gap_g, f32 ? " nor within the contract's own rounding noise" : "");
            }
        }
        int32_t next = oa;
        uint32_t pos = n_prompt + s;
        cr_assert_eq(engine_eval(orc, &next, 1, pos, lo, false, &err), 0, "%s", err.msg);
        cr_assert_eq(engine_eval(gpu, &next, 1, pos, lg, false, &err), 0, "%s", err.msg);
        if (f32) cr_assert_eq(engine_eval(f32, &next, 1, pos, lf, false, &err), 0, "%s", err.msg);
    }
    cr_log_info("%s on %s caps=%s, %u-token prompt in blocks of %u: %u kernels, %u launches per decode step; worst "
                "logits relative error %.2e (step %d); %s",
                path, gpu->name, caps ? caps : "device", n_prompt, plan_block(gpu), nk, nl, worst, worst_step,
                first_div < 0 ? "greedy tokens identical" : "diverged at a near-tie");
    if (f32) cr_log_info("%s: the f32 oracle's worst logits relative distance from the contract oracle %.2e", path,
                         *f32_worst);
    free(lo);
    free(lg);
    free(lf);
    engine_destroy(f32);
    engine_destroy(gpu);
    engine_destroy(orc);
    model_free(m);
    return worst;
}

uint32_t tu_story_ids(const char *path, int32_t *ids, uint32_t cap) {
    /* text the model was trained on the like of; a salad of random ids drives it far
     * outside its range */
    static const char story[] =
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. One day, "
        "she saw a big red ball in the park. She ran to the ball and kicked it very hard. The ball went up into the "
        "sky and landed in a tree. Lily was sad because she could not reach the ball. Then her friend Tom came to "
        "the park. Tom was tall and strong. He climbed the tree and got the ball for Lily. Lily was so happy. She "
        "said thank you to Tom and they played with the ball all day long. When the sun went down, they";
    kiln_err err = {0};
    model *m = model_load(path, &err);
    cr_assert_not_null(m, "%s", err.msg);
    tokenizer *t = tok_load(m->file, &err);
    cr_assert_not_null(t, "%s", err.msg);
    int64_t n = tok_encode(t, story, sizeof story - 1, true, false, ids, cap, &err);
    cr_assert(n > 128 && n <= (int64_t)cap, "%lld tokens: %s", (long long)n, err.msg);
    tok_free(t);
    model_free(m);
    return (uint32_t)n;
}

const char *tu_synth_moe(const char *file, const char *mix, bool wide, uint32_t *n_vocab) {
    return tu_synth_preset_file("qwen3moe-tiny-odd", file, mix, wide, n_vocab);
}

const char *tu_synth_preset_file(const char *preset, const char *file, const char *mix, bool wide, uint32_t *n_vocab) {
    synth_config c;
    cr_assert_eq(synth_preset(preset, &c), 0, "preset %s", preset);
    c.threads = 2;
    if (wide) c.n_embd = 256, c.n_head = 4, c.head_dim = 64, c.n_ff_exp = 256, c.n_ff_shexp = c.n_ff_shexp ? 256 : 0;
    if (wide && arch_is_qwen35(c.arch)) synth_qwen35_rope(&c);
    kiln_err e = {0};
    if (mix) cr_assert_eq(quant_mix_parse(mix, &c.quant, &e), 0, "%s", e.msg);
    tok_vocab v;
    tok_vocab_init(&v);
    cr_assert_eq(tok_vocab_bytelevel(c.n_vocab, &v, &e), 0, "%s", e.msg);
    const char *path = tu_tmp(file);
    synth_stats st;
    cr_assert_eq(synth_write(&c, &v, NULL, path, &st, &e), 0, "%s", e.msg);
    tok_vocab_free(&v);
    *n_vocab = c.n_vocab;
    return path;
}
