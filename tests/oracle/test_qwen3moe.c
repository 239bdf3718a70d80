/* The oracle on a mixture of experts (qwen3moe-tiny: 4 layers of 8 SwiGLU experts of 64,
 * top-2 of a softmax router, renormalised) against llama.cpp's goldens: f32 mode against
 * the exact-math golden, contract mode (f16) against both; a prompt evaluated at once
 * equals token by token (the experts' tokens gathered per call). The GPU plans' run of it:
 * tests/plan/test_plan_moe.c. */
#include "base/error.h"
#include "model/engine.h"
#include "model/model.h"
#include "oracle/oracle.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_golden.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TINY "models/qwen3moe-tiny.gguf"

static engine *engine_of(const model *m, orc_mode mode) {
    kiln_err err = {0};
    orc_options o = {.mode = mode, .dtype = 0, .n_ctx = 256, .threads = 2};
    engine *e = orc_create(m, &o, &err);
    cr_assert_not_null(e, "%s", err.msg);
    return e;
}

static engine *open_engine(orc_mode mode, model **m) {
    kiln_err err = {0};
    *m = model_load(tu_data_file(TINY), &err);
    cr_assert_not_null(*m, "%s", err.msg);
    return engine_of(*m, mode);
}

static tu_golden_result run_golden(const char *golden, orc_mode mode, double near_tie) {
    model *m;
    engine *e = open_engine(mode, &m);
    tu_golden_result r = tu_golden_run(e, golden, near_tie, orc_mode_name(mode));
    engine_destroy(e);
    model_free(m);
    return r;
}

Test(oracle, qwen3moe_hparams_and_experts) {
    kiln_err err = {0};
    model *m = model_load(tu_data_file(TINY), &err);
    cr_assert_not_null(m, "%s", err.msg);
    const arch_hparams *hp = &m->hp;
    cr_assert_eq(hp->arch, ARCH_QWEN3MOE);
    cr_assert(hp->n_expert == 8 && hp->n_expert_used == 2 && hp->n_ff_exp == 64 && hp->qk_norm && hp->rope_neox);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        cr_assert(L->ffn_gate_inp && L->ffn_gate_exps && L->ffn_up_exps && L->ffn_down_exps && !L->w_gate);
        cr_assert_eq(L->ffn_down_exps->ne[2], 8);
    }
    cr_assert_eq(m->n_converted, 0);
    model_free(m);
}

Test(oracle, qwen3moe_f32_matches_llamacpp_exact_math, .timeout = 120) {
    tu_golden_result r = run_golden("models/qwen3moe-tiny.f32dequant-kvf32-nofa.llamacpp.json", ORC_F32, 0.05);
    cr_log_info("qwen3moe-tiny f32 vs llama.cpp f32dequant: %d/%d cases identical, max |dlogprob| %.2e, %d near-tie "
                "differences", r.identical, r.cases, r.worst_dlogprob, r.near_tie_diffs);
    cr_assert_eq(r.cases, 6);
    cr_assert_lt(r.worst_dlogprob, 1e-4, "f32 mode must follow llama.cpp's exact math, got %.2e nats",
                 r.worst_dlogprob);
}

/* Contract mode rounds every stored activation and each expert's products to f16: measured
 * 0.016-0.019 nats from either golden, every case identical (the dense F16 file: 0.018);
 * held to 0.05. */
Test(oracle, qwen3moe_contract_f16_against_llamacpp, .timeout = 120) {
    tu_golden_result p = run_golden("models/qwen3moe-tiny.llamacpp.json", ORC_CONTRACT, 0.1);
    tu_golden_result x = run_golden("models/qwen3moe-tiny.f32dequant-kvf32-nofa.llamacpp.json", ORC_CONTRACT, 0.1);
    cr_log_info("qwen3moe-tiny contract f16: vs llama.cpp as run %d/%d identical, max |dlogprob| %.4f; vs its "
                "exact math %d/%d, %.4f", p.identical, p.cases, p.worst_dlogprob, x.identical, x.cases,
                x.worst_dlogprob);
    cr_assert_eq(p.cases, 6);
    cr_assert_gt(x.worst_dlogprob, 0, "contract mode must round something");
    cr_assert_lt(p.worst_dlogprob, 0.05);
    cr_assert_lt(x.worst_dlogprob, 0.05);
}

/* Twelve tokens at once (each expert's chosen rows gathered) equal twelve one at a time, bit
 * for bit: a token's route and sums do not depend on the others of its call. */
Test(oracle, qwen3moe_prompt_at_once_equals_steps) {
    static const int32_t toks[12] = {1, 403, 407, 261, 378, 282, 260, 196, 212, 432, 477, 57};
    for (int mode = 0; mode < 2; mode++) {
        model *m;
        engine *a = open_engine(mode ? ORC_CONTRACT : ORC_F32, &m), *b = engine_of(m, mode ? ORC_CONTRACT : ORC_F32);
        uint32_t nv = a->n_vocab;
        float *la = malloc(12 * nv * sizeof *la), *lb = malloc(nv * sizeof *lb);
        kiln_err err = {0};
        cr_assert_eq(engine_eval(a, toks, 12, 0, la, true, &err), 0, "%s", err.msg);
        for (uint32_t t = 0; t < 12; t++) {
            cr_assert_eq(engine_eval(b, &toks[t], 1, t, lb, false, &err), 0, "%s", err.msg);
            cr_assert_eq(memcmp(la + (size_t)t * nv, lb, nv * sizeof *lb), 0, "mode %d token %u", mode, t);
        }
        free(la), free(lb);
        engine_destroy(a), engine_destroy(b);
        model_free(m);
    }
}
