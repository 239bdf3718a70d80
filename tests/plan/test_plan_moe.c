/* A mixture of experts on the Vulkan device (lavapipe in CI): testdata's qwen3moe-tiny (4
 * layers of 8 experts, 2 a token; llama.cpp's file) and kiln synth's qwen3moe-tiny-odd
 * (nothing a multiple of 32) against the contract-mode oracle through the prefill blocks
 * and the decode step, under the caps variants that change the kernels; and qwen3moe-tiny
 * against llama.cpp's own greedy goldens. Skipped by name without Vulkan. */
#include "base/error.h"
#include "model/engine.h"
#include "model/model.h"
#include "oracle/oracle.h"
#include "plan/plan.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_golden.h"
#include "tests/util/testutil_plan.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>

#define TINY "models/qwen3moe-tiny.gguf"

static double compare(const char *path, const char *caps, uint32_t dtype, const int32_t *ids, uint32_t n) {
    rt_device *d = tu_vk_open_or_skip(caps);
    double worst = tu_plan_compare(d, caps, path, dtype, 8, ids, n, 64, NULL);
    d->ops->destroy(d);
    cr_log_info("%s caps=%s: logits relative error %.3e", path, caps ? caps : "device", worst);
    cr_assert_lt(worst, 1e-2, "%s caps=%s: logits relative error %.3e", path, caps ? caps : "device", worst);
    return worst;
}

/* a prompt of 70 tokens: a block of 64 and a partial one, then decode steps */
Test(plan_moe, tiny_against_the_oracle, .timeout = 600) {
    const char *path = tu_data_file(TINY);
    int32_t ids[256];
    uint32_t n = tu_story_ids(path, ids, 256);
    cr_assert_geq(n, 70, "a story of %u tokens", n);
    const char *variants[] = {NULL, "no-subgroup-arith", "workgroup=64"};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) compare(path, variants[v], 0, ids, 70);
    compare(path, NULL, GGUF_T_BF16, ids, 70);
}

Test(plan_moe, synth_odd_sizes_against_the_oracle, .timeout = 600) {
    uint32_t nv;
    const char *path = tu_synth_moe("plan-moe-odd.gguf", NULL, false, &nv);
    int32_t ids[70];
    for (uint32_t i = 0; i < 70; i++) ids[i] = (int32_t)((i * 7919u + 13u) % nv);
    compare(path, NULL, GGUF_T_BF16, ids, 70);
    compare(path, "no-subgroup-arith", GGUF_T_F16, ids, 70);
}

/* qwen35moe: Qwen3.5's DeltaNet and gated attention layers with experts and a shared
 * expert (the plan's one more expert, every token's last choice) */
Test(plan_moe, qwen35moe_odd_sizes_against_the_oracle, .timeout = 600) {
    uint32_t nv;
    const char *path = tu_synth_preset_file("qwen35moe-tiny-odd", "plan-q35moe-odd.gguf", NULL, false, &nv);
    int32_t ids[70];
    for (uint32_t i = 0; i < 70; i++) ids[i] = (int32_t)((i * 7919u + 13u) % nv);
    const char *caps[] = {NULL, "no-subgroup-arith"};
    for (int i = 0; i < 2; i++) {
        rt_device *d = tu_vk_open_or_skip(caps[i]);
        double f32 = 0, worst = tu_plan_compare(d, caps[i], path, i ? GGUF_T_F16 : GGUF_T_BF16, 8, ids, 70, 64, &f32);
        d->ops->destroy(d);
        cr_log_info("caps=%s: logits relative error %.3e (the f32 oracle's distance: %.3e)",
                    caps[i] ? caps[i] : "device", worst, f32);
        /* as qwen35's odd synth (test_plan_qwen35.c), the bound grows with the contract's own
         * noise, a little more here: a choice of experts between near-equal scores moves the
         * output by more than the sums' rounding does (1.67e-2 against 3.09e-2 on lavapipe).
         * A wrong shared expert (weighted ~0.5 beside two routed ones) is off by far more. */
        cr_assert_lt(worst, fmax(1e-2, 0.6 * f32), "caps=%s: logits relative error %.3e (f32 oracle's %.3e)",
                     caps[i] ? caps[i] : "device", worst, f32);
    }
}

/* llama.cpp's own qwen35moe (34af94cd on the CPU, tools/peer_golden.c) on kiln synth's
 * qwen35moe-tiny-odd (seed 42; the golden names its sha256): the oracle in both modes and
 * the plan leave its greedy ids only at near-ties. Runs the oracle without Vulkan. */
Test(plan_moe, qwen35moe_against_llamacpp_golden, .timeout = 600) {
    const char *golden = KILN_SOURCE_DIR "/tests/data/qwen35moe-tiny-odd.llamacpp.json";
    uint32_t nv;
    const char *path = tu_synth_preset_file("qwen35moe-tiny-odd", "q35moe-golden.gguf", NULL, false, &nv);
    kiln_err err = {0};
    model *m = model_load(path, &err);
    cr_assert_not_null(m, "%s", err.msg);
    for (int mode = 0; mode < 2; mode++) {
        orc_options o = {.mode = mode ? ORC_CONTRACT : ORC_F32, .dtype = GGUF_T_BF16, .n_ctx = 256, .threads = 2};
        engine *e = orc_create(m, &o, &err);
        cr_assert_not_null(e, "%s", err.msg);
        tu_golden_result r = tu_golden_run_file(e, golden, 0.05, mode ? "oracle contract bf16" : "oracle f32");
        cr_log_info("oracle %s: %d/%d cases identical, max |dlogprob| %.4f", mode ? "contract bf16" : "f32",
                    r.identical, r.cases, r.worst_dlogprob);
        cr_assert_eq(r.cases, 6);
        /* 0.074 nats on 2026-12-07; without the shared expert 0.295 (0/6 identical) */
        cr_assert_lt(r.worst_dlogprob, 0.1, "off by %.3f nats", r.worst_dlogprob);
        engine_destroy(e);
    }
    rt_device *d = tu_vk_open_or_skip(NULL);
    engine *e = plan_create(m, d, GGUF_T_BF16, 256, 64, &err);
    cr_assert_not_null(e, "%s", err.msg);
    tu_golden_result r = tu_golden_run_file(e, golden, 0.05, d->label);
    cr_log_info("%s: %d/%d cases identical, max |dlogprob| %.4f", d->label, r.identical, r.cases, r.worst_dlogprob);
    cr_assert_eq(r.cases, 6);
    cr_assert_lt(r.worst_dlogprob, 0.1, "off by %.3f nats", r.worst_dlogprob);
    engine_destroy(e);
    d->ops->destroy(d);
    model_free(m);
}

/* Every layer of the model at path keeps its experts in their blocks; ids[70] a prompt. */
static void kept_in_blocks(const char *path, uint32_t nv, int32_t *ids) {
    kiln_err e = {0};
    model *m = model_load(path, &e);
    cr_assert_not_null(m, "%s", e.msg);
    for (uint32_t l = 0; l < m->hp.n_layer; l++) cr_assert(m->layers[l].q_exps, "layer %u's experts not kept", l);
    model_free(m);
    for (uint32_t i = 0; i < 70; i++) ids[i] = (int32_t)((i * 7919u + 13u) % nv);
}

/* Quantized experts kept in their blocks on the device (kernels/moe_q.c): a Q4_K_M mix of
 * a small qwen3moe (K-quant rows: widths of 256) against the oracle, every expert resident,
 * through blocks and decode steps */
Test(plan_moe, quantized_experts_against_the_oracle, .timeout = 600) {
    uint32_t nv;
    const char *path = tu_synth_moe("plan-moe-q4km.gguf", "Q4_K_M", true, &nv);
    int32_t ids[70];
    kept_in_blocks(path, nv, ids);
    compare(path, NULL, 0, ids, 70);
    compare(path, "no-subgroup-arith", 0, ids, 70);
}

/* qwen35moe's experts and shared expert in their blocks, one set of planes a kind (the
 * shared expert's rows after the experts'), against the oracle */
Test(plan_moe, qwen35moe_quantized_experts_against_the_oracle, .timeout = 600) {
    uint32_t nv;
    const char *path = tu_synth_preset_file("qwen35moe-tiny-odd", "plan-q35moe-q4km.gguf", "Q4_K_M", true, &nv);
    int32_t ids[70];
    kept_in_blocks(path, nv, ids);
    rt_device *d = tu_vk_open_or_skip(NULL);
    double f32 = 0, worst = tu_plan_compare(d, NULL, path, 0, 8, ids, 70, 64, &f32);
    d->ops->destroy(d);
    cr_log_info("logits relative error %.3e (the f32 oracle's distance: %.3e)", worst, f32);
    cr_assert_lt(worst, fmax(1e-2, 0.6 * f32), "logits relative error %.3e (f32 oracle's %.3e)", worst, f32);
}

/* llama.cpp's greedy goldens: the plan in f16 (the file's type) differs from them only at
 * near-ties, as the oracle's contract mode (0.016-0.019 nats, tests/oracle/test_qwen3moe.c) */
Test(plan_moe, tiny_against_llamacpp_goldens, .timeout = 600) {
    kiln_err err = {0};
    model *m = model_load(tu_data_file(TINY), &err);
    cr_assert_not_null(m, "%s", err.msg);
    rt_device *d = tu_vk_open_or_skip(NULL);
    engine *e = plan_create(m, d, GGUF_T_F16, 256, 64, &err);
    cr_assert_not_null(e, "%s", err.msg);
    const char *goldens[] = {"models/qwen3moe-tiny.llamacpp.json", "models/qwen3moe-tiny.f32dequant-kvf32-nofa.llamacpp.json"};
    for (int i = 0; i < 2; i++) {
        tu_golden_result r = tu_golden_run(e, goldens[i], 0.1, d->label);
        cr_log_info("%s on %s: %d/%d cases identical, max |dlogprob| %.4f", goldens[i], d->label, r.identical, r.cases,
                    r.worst_dlogprob);
        cr_assert_eq(r.cases, 6);
        cr_assert_lt(r.worst_dlogprob, 0.05, "%s: off by %.3f nats", goldens[i], r.worst_dlogprob);
    }
    engine_destroy(e);
    d->ops->destroy(d);
    model_free(m);
}
