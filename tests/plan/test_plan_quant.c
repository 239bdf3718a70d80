/* Block-quantized weights kept in their blocks on the Vulkan device (lavapipe in CI), on
 * llama.cpp's own quantized files (testdata's dense-TYPE.gguf, written by llama-quantize
 * with its per-tensor mixes): every type against the contract oracle (which computes the
 * same exact dequantized values: greedy tokens equal or a near-tie, logits within the
 * contract's own noise), through the prefill blocks and the decode step, under the caps
 * variants that change the kernels; against llama.cpp's exact-math goldens in f16; the
 * weights take their quantized size on the device; a Qwen3.5 synth's products in their
 * blocks. Skipped by name without Vulkan. */
#include "base/error.h"
#include "model/engine.h"
#include "model/model.h"
#include "modelgen/quant_mix.h"
#include "modelgen/synth.h"
#include "modelgen/vocab.h"
#include "plan/plan.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_golden.h"
#include "tests/util/testutil_plan.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>

static const char *const types[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"};
#define N_TYPES (sizeof types / sizeof types[0])

static const char *model_path(const char *type) {
    static char rel[64];
    snprintf(rel, sizeof rel, "models/dense-%s.gguf", type);
    return tu_data_file(rel);
}

/* A prompt of 70 tokens through a block of 64 and a partial one, then decode steps; the
 * bound is the contract's own noise where that is larger (bf16: the f32 oracle's distance
 * from the contract oracle, 0.88-1.28e-2 on these models; the H200's CUDA path measured
 * 1.01e-2 on Q5_K_M where that distance is 0.93e-2, lavapipe 0.5-0.93e-2). */
static double compare(const char *type, const char *caps, uint32_t dtype, uint32_t steps) {
    const char *path = model_path(type);
    int32_t ids[256];
    uint32_t n = tu_story_ids(path, ids, 256);
    cr_assert_geq(n, 70, "%s: a story of %u tokens", type, n);
    rt_device *d = tu_vk_open_or_skip(caps);
    double f32 = 0, worst = tu_plan_compare(d, caps, path, dtype, steps, ids, 70, 64, &f32);
    d->ops->destroy(d);
    cr_log_info("%s caps=%s %s: logits relative error %.3e (the f32 oracle's distance from the contract: %.3e)", type,
                caps ? caps : "device", dtype == GGUF_T_F16 ? "f16" : "bf16", worst, f32);
    cr_assert_lt(worst, fmax(1e-2, 1.25 * f32), "%s caps=%s: logits relative error %.3e (f32 oracle's %.3e)", type,
                 caps ? caps : "device", worst, f32);
    return worst;
}

Test(plan_quant, every_type_against_the_oracle, .timeout = 900) {
    for (size_t i = 0; i < N_TYPES; i++) compare(types[i], NULL, GGUF_T_BF16, 8);
}

/* f16 keeps three more bits of every activation: the plan follows the oracle closer (the
 * 16-bit files measure 1e-3 here). */
Test(plan_quant, f16_activations_closer, .timeout = 600) {
    const char *some[] = {"Q4_K_M", "Q8_0", "Q5_1"};
    for (int i = 0; i < 3; i++) cr_assert_lt(compare(some[i], NULL, GGUF_T_F16, 8), 3e-3, "%s", some[i]);
}

/* The kernels' other paths: sums through workgroup memory, small workgroups. */
Test(plan_quant, caps_variants, .timeout = 900) {
    const char *some[] = {"Q4_K_M", "Q3_K_M", "Q4_1"};
    for (int i = 0; i < 3; i++) {
        compare(some[i], "no-subgroup-arith", GGUF_T_BF16, 6);
        compare(some[i], "workgroup=64", GGUF_T_BF16, 6);
    }
}

/* The prompt's blocks on cooperative matrices (matmul_q_coop.c), emulated on lavapipe in
 * f16 (debug-emulate-coopmat: the real ones where the device has them): a K-quant mix with
 * sub-blocks of 16 and 32 in stacked parts, and a type with mins. */
Test(plan_quant, cooperative_matrices_in_f16, .timeout = 900) {
    const char *some[] = {"Q4_K_M", "Q4_1"};
    setenv("KILN_MATMUL_Q_COOP", "1", 1); /* opt-in on a GPU until it is right on one */
    for (int i = 0; i < 2; i++) cr_assert_lt(compare(some[i], "debug-emulate-coopmat", GGUF_T_F16, 4), 3e-3, "%s", some[i]);
    unsetenv("KILN_MATMUL_Q_COOP");
}

/* llama.cpp's greedy goldens with its exact dequantized math (f32 activations and cache):
 * the plan in f16 differs from them only at near-ties of 0.05 nats (the oracle's contract
 * f16 measures at most 0.019 nats). */
Test(plan_quant, llamacpp_goldens_in_f16, .timeout = 900) {
    for (size_t i = 0; i < N_TYPES; i++) {
        kiln_err err = {0};
        model *m = model_load(model_path(types[i]), &err);
        cr_assert_not_null(m, "%s", err.msg);
        rt_device *d = tu_vk_open_or_skip(NULL);
        engine *e = plan_create(m, d, GGUF_T_F16, 256, 64, &err);
        cr_assert_not_null(e, "%s: %s", types[i], err.msg);
        char golden[96], what[64];
        snprintf(golden, sizeof golden, "models/dense-%s.f32dequant-kvf32-nofa.llamacpp.json", types[i]);
        snprintf(what, sizeof what, "%s f16 on %s", d->label, types[i]);
        tu_golden_result r = tu_golden_run(e, golden, 0.05, what);
        cr_log_info("%s: %d/%d cases identical, max |dlogprob| %.2e, %d near-tie differences", what, r.identical,
                    r.cases, r.worst_dlogprob, r.near_tie_diffs);
        cr_assert_eq(r.cases, 6, "%s", types[i]);
        cr_expect_lt(r.worst_dlogprob, 0.1, "%s: off by %.3f nats", what, r.worst_dlogprob);
        engine_destroy(e);
        d->ops->destroy(d);
        model_free(m);
    }
}

/* Every matrix of these files stays in its blocks: nothing converted, and the weights on
 * the device take about the file's bytes, well under the F16 file's. The planes keep a
 * K-quant's sub-block scales and mins a byte each where ggml packs them in 4 or 6 bits
 * (Q2_K's 84-byte block takes 100, Q4_K's 144 takes 148); the 1-D norms go from f32 to
 * 16 bits. */
Test(plan_quant, weights_stay_in_their_blocks, .timeout = 300) {
    kiln_err err = {0};
    rt_device *d = tu_vk_open_or_skip(NULL);
    model *f16 = model_load(model_path("F16"), &err);
    cr_assert_not_null(f16, "%s", err.msg);
    engine *e16 = plan_create(f16, d, GGUF_T_F16, 256, 64, &err);
    cr_assert_not_null(e16, "%s", err.msg);
    uint64_t full = plan_weight_bytes(e16);
    const char *some[] = {"Q4_K_M", "Q8_0", "Q2_K"};
    for (int i = 0; i < 3; i++) {
        model *m = model_load(model_path(some[i]), &err);
        cr_assert_not_null(m, "%s", err.msg);
        cr_assert_eq(m->n_converted, 0, "%s: %u matrices converted", some[i], m->n_converted);
        engine *e = plan_create(m, d, GGUF_T_BF16, 256, 64, &err);
        cr_assert_not_null(e, "%s", err.msg);
        uint64_t w = plan_weight_bytes(e), file = gguf_file_size(m->file);
        cr_log_info("%s: %llu bytes of weights on the device (the file %llu, F16's %llu)", some[i],
                    (unsigned long long)w, (unsigned long long)file, (unsigned long long)full);
        cr_assert(w < file + file / 4 && w > file - file / 20, "%s: %llu bytes on the device for a file of %llu",
                  some[i], (unsigned long long)w, (unsigned long long)file);
        cr_assert_lt(w, full * 0.6, "%s", some[i]);
        engine_destroy(e);
        model_free(m);
    }
    engine_destroy(e16);
    model_free(f16);
    d->ops->destroy(d);
}

/* Qwen3.5 keeps in their blocks every product but the ones the plan stacks in 16 bits (the
 * gated attention's q/k/v and the DeltaNet inputs): the FFN, the attention and DeltaNet
 * outputs, the embedding and the head, against the contract oracle through blocks and
 * decode steps (layers 0 and 2 DeltaNet, 1 and 3 attention; ssm_out's 128 columns take a
 * 32-element type of the mix's fallback). */
Test(plan_quant, qwen35_products_in_blocks_against_the_oracle, .timeout = 600) {
    synth_config c;
    kiln_err err = {0};
    cr_assert_eq(synth_preset("qwen3.5-tiny-odd", &c), 0);
    c.n_layer = 4, c.full_attn_interval = 2, c.n_embd = 256, c.n_head = 4, c.n_head_kv = 2, c.head_dim = 64;
    c.ssm_state = 32, c.ssm_k_heads = 2, c.ssm_v_heads = 4, c.n_ff = 512, c.n_vocab = 512;
    synth_qwen35_rope(&c);
    cr_assert_eq(quant_mix_parse("Q4_K_M", &c.quant, &err), 0, "%s", err.msg);
    tok_vocab v;
    tok_vocab_init(&v);
    cr_assert_eq(tok_vocab_bytelevel(c.n_vocab, &v, &err), 0, "%s", err.msg);
    const char *path = tu_tmp("plan-q35-q4km.gguf");
    cr_assert_eq(synth_write(&c, &v, NULL, path, NULL, &err), 0, "%s", err.msg);
    tok_vocab_free(&v);
    model *m = model_load(path, &err);
    cr_assert_not_null(m, "%s", err.msg);
    /* converted: q, k, v of the 2 attention layers; qkv, z, beta, alpha of the 2 DeltaNet ones */
    cr_assert_eq(m->n_converted, 14, "%u matrices converted", m->n_converted);
    cr_assert(m->q_embd && m->layers[0].q_dn_out && m->layers[0].q_ffn && m->layers[1].q_o && m->layers[3].q_down);
    model_free(m);
    int32_t ids[512]; /* byte-level tokens: the story takes 345 */
    uint32_t n = tu_story_ids(path, ids, 512);
    cr_assert_geq(n, 70, "a story of %u tokens", n);
    rt_device *d = tu_vk_open_or_skip(NULL);
    double f32 = 0, worst = tu_plan_compare(d, NULL, path, GGUF_T_BF16, 8, ids, 70, 64, &f32);
    d->ops->destroy(d);
    cr_log_info("qwen35 Q4_K_M: logits relative error %.3e (the f32 oracle's distance from the contract: %.3e)", worst,
                f32);
    cr_assert_lt(worst, fmax(1e-2, 1.25 * f32), "logits relative error %.3e (f32 oracle's %.3e)", worst, f32);
}
