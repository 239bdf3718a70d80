/* Quantization mixes (modelgen/quant_mix.h): names and general.file_type values as
 * llama.cpp has them, the per-tensor rules of llama_tensor_get_type spelled out here from
 * llama-quant.cpp layer by layer, and the types of llama-quantize's own files (testdata's
 * dense-TYPE.gguf) reproduced tensor for tensor. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "modelgen/quant_mix.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static quant_mix mix(const char *name) {
    quant_mix q;
    kiln_err e = {0};
    cr_assert_eq(quant_mix_parse(name, &q, &e), 0, "%s: %s", name, e.msg);
    return q;
}

/* The type of a tensor named by fmt (with layer l) under mix name. */
static uint32_t type_of(const char *name, const quant_model *m, const char *fmt, int l, uint64_t ne0, uint64_t ne1) {
    quant_mix q = mix(name);
    char tn[96];
    snprintf(tn, sizeof tn, fmt, l);
    uint32_t t = 9999;
    kiln_err e = {0};
    cr_assert_eq(quant_mix_type(&q, m, tn, ne0, ne1, GGUF_T_BF16, &t, &e), 0, "%s %s: %s", name, tn, e.msg);
    return t;
}

#define EXPECT(want, got, ...)                                                                                         \
    do {                                                                                                               \
        uint32_t g_ = (got);                                                                                           \
        cr_assert_eq(g_, (uint32_t)(want), "%s: got %s", __VA_ARGS__, gguf_type_info_of(g_)->name);                    \
    } while (0)

Test(quant_mix, names_and_file_types) {
    /* llama.cpp's include/llama.h LLAMA_FTYPE_MOSTLY_*, and llama-quantize's aliases */
    const struct { const char *name, *canon; uint32_t ftype, base; } want[] = {
        {"Q4_0", "Q4_0", 2, GGUF_T_Q4_0},       {"q4_1", "Q4_1", 3, GGUF_T_Q4_1},     {"Q5_0", "Q5_0", 8, GGUF_T_Q5_0},
        {"q5_1", "Q5_1", 9, GGUF_T_Q5_1},       {"Q8_0", "Q8_0", 7, GGUF_T_Q8_0},     {"q2_k", "Q2_K", 10, GGUF_T_Q2_K},
        {"Q3_K", "Q3_K_M", 12, GGUF_T_Q3_K},    {"Q3_k_m", "Q3_K_M", 12, GGUF_T_Q3_K}, {"Q4_K", "Q4_K_M", 15, GGUF_T_Q4_K},
        {"q4_k_m", "Q4_K_M", 15, GGUF_T_Q4_K},  {"Q5_K", "Q5_K_M", 17, GGUF_T_Q5_K},  {"Q5_K_M", "Q5_K_M", 17, GGUF_T_Q5_K},
        {"Q6_K", "Q6_K", 18, GGUF_T_Q6_K},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        quant_mix q = mix(want[i].name);
        cr_assert_str_eq(q.name, want[i].canon);
        cr_assert_eq(q.ftype, want[i].ftype, "%s: file_type %u", want[i].name, q.ftype);
        cr_assert_eq(q.base, want[i].base, "%s", want[i].name);
    }
    const char *bad[] = {"Q4", "Q4_K_S", "IQ4_NL", "F16", "bf16", "", "Q4_0 ", "Q8_K"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        quant_mix q;
        kiln_err e = {0};
        cr_assert_eq(quant_mix_parse(bad[i], &q, &e), -1, "'%s' accepted", bad[i]);
        cr_assert(strstr(e.msg, "Q4_K(_M)") && strstr(e.msg, bad[i]), "%s", e.msg);
    }
}

/* Q4_K_M and Q5_K_M on 32 layers: attn_v and ffn_down get Q6_K on the "more bits" layers
 * (the first and last eighth, 0-3 and 28-31, and every third between: 6, 9, ..., 27),
 * the rest the base type; output Q6_K; token_embd the base type, or Q6_K when it is also
 * the output (tied); 1-D tensors, norms and ssm_conv1d as they were. */
Test(quant_mix, k_m_more_bits_layers) {
    const quant_model m = {ARCH_QWEN3, 32, 32, 8, false};
    const bool more[32] = {1, 1, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1};
    const char *names[] = {"Q4_K_M", "Q5_K_M"};
    const uint32_t base[] = {GGUF_T_Q4_K, GGUF_T_Q5_K};
    for (int k = 0; k < 2; k++) {
        for (int l = 0; l < 32; l++) {
            uint32_t v = type_of(names[k], &m, "blk.%d.attn_v.weight", l, 4096, 1024);
            EXPECT(more[l] ? GGUF_T_Q6_K : base[k], v, names[k]);
            EXPECT(more[l] ? GGUF_T_Q6_K : base[k], type_of(names[k], &m, "blk.%d.ffn_down.weight", l, 12288, 4096),
                   names[k]);
            const char *same[] = {"blk.%d.attn_q.weight", "blk.%d.attn_k.weight", "blk.%d.attn_output.weight",
                                  "blk.%d.ffn_gate.weight", "blk.%d.ffn_up.weight"};
            for (int s = 0; s < 5; s++) EXPECT(base[k], type_of(names[k], &m, same[s], l, 4096, 4096), same[s]);
            EXPECT(GGUF_T_BF16, type_of(names[k], &m, "blk.%d.attn_norm.weight", l, 4096, 1), "norm");
            EXPECT(GGUF_T_BF16, type_of(names[k], &m, "blk.%d.attn_q_norm.weight", l, 128, 1), "q norm");
        }
        EXPECT(GGUF_T_Q6_K, type_of(names[k], &m, "output.weight", 0, 4096, 151936), "output");
        EXPECT(base[k], type_of(names[k], &m, "token_embd.weight", 0, 4096, 151936), "token_embd (untied)");
        const quant_model tied = {ARCH_QWEN3, 32, 32, 8, true};
        EXPECT(GGUF_T_Q6_K, type_of(names[k], &tied, "token_embd.weight", 0, 4096, 151936), "token_embd (tied)");
        EXPECT(GGUF_T_BF16, type_of(names[k], &m, "blk.%d.ssm_conv1d.weight", 0, 4, 8192), "ssm_conv1d");
        EXPECT(GGUF_T_BF16, type_of(names[k], &m, "blk.%d.attn_q.bias", 0, 4096, 1), "a bias");
    }
    /* Qwen3.5: the DeltaNet layers' attn_qkv counts as attn_v; the other new matrices are
     * the base type */
    const quant_model q35 = {ARCH_QWEN35, 24, 8, 2, true};
    EXPECT(GGUF_T_Q6_K, type_of("Q4_K_M", &q35, "blk.%d.attn_qkv.weight", 0, 1024, 6144), "attn_qkv 0");
    EXPECT(GGUF_T_Q4_K, type_of("Q4_K_M", &q35, "blk.%d.attn_qkv.weight", 4, 1024, 6144), "attn_qkv 4");
    EXPECT(GGUF_T_Q6_K, type_of("Q4_K_M", &q35, "blk.%d.attn_v.weight", 23, 1024, 512), "attn_v 23");
    const char *other[] = {"blk.%d.attn_gate.weight", "blk.%d.ssm_out.weight", "blk.%d.ssm_alpha.weight",
                           "blk.%d.ssm_beta.weight"};
    for (int s = 0; s < 4; s++) EXPECT(GGUF_T_Q4_K, type_of("Q4_K_M", &q35, other[s], 0, 2048, 1024), other[s]);
}

Test(quant_mix, plain_and_low_bit_mixes) {
    const quant_model m = {ARCH_LLAMA, 16, 32, 8, false};
    /* Q4_0 .. Q6_K: the base type everywhere but the logits' matrix: Q6_K, or Q8_0 in Q8_0 */
    const char *plain[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q6_K"};
    const uint32_t pb[] = {GGUF_T_Q4_0, GGUF_T_Q4_1, GGUF_T_Q5_0, GGUF_T_Q5_1, GGUF_T_Q8_0, GGUF_T_Q6_K};
    for (int k = 0; k < 6; k++) {
        EXPECT(pb[k] == GGUF_T_Q8_0 ? GGUF_T_Q8_0 : GGUF_T_Q6_K, type_of(plain[k], &m, "output.weight", 0, 2048, 1000),
               plain[k]);
        EXPECT(pb[k], type_of(plain[k], &m, "token_embd.weight", 0, 2048, 1000), plain[k]);
        for (int l = 0; l < 16; l++) {
            EXPECT(pb[k], type_of(plain[k], &m, "blk.%d.attn_v.weight", l, 2048, 512), plain[k]);
            EXPECT(pb[k], type_of(plain[k], &m, "blk.%d.ffn_down.weight", l, 8192, 2048), plain[k]);
        }
    }
    /* Q2_K: attn_v Q3_K (Q4_K from 4 query heads per KV head), ffn_down and attn_output Q3_K */
    EXPECT(GGUF_T_Q4_K, type_of("Q2_K", &m, "blk.%d.attn_v.weight", 3, 2048, 512), "Q2_K attn_v, gqa 4");
    const quant_model mha = {ARCH_LLAMA, 16, 32, 16, false};
    EXPECT(GGUF_T_Q3_K, type_of("Q2_K", &mha, "blk.%d.attn_v.weight", 3, 2048, 1024), "Q2_K attn_v, gqa 2");
    EXPECT(GGUF_T_Q3_K, type_of("Q2_K", &m, "blk.%d.ffn_down.weight", 3, 8192, 2048), "Q2_K ffn_down");
    EXPECT(GGUF_T_Q3_K, type_of("Q2_K", &m, "blk.%d.attn_output.weight", 3, 2048, 2048), "Q2_K attn_output");
    EXPECT(GGUF_T_Q2_K, type_of("Q2_K", &m, "blk.%d.ffn_up.weight", 3, 2048, 8192), "Q2_K ffn_up");
    /* Q3_K_M: attn_v Q5_K on the first two, then Q4_K; ffn_down Q5_K on the first 16th
     * (layer 0 of 16); attn_output Q4_K */
    for (int l = 0; l < 16; l++) {
        EXPECT(l < 2 ? GGUF_T_Q5_K : GGUF_T_Q4_K, type_of("Q3_K_M", &m, "blk.%d.attn_v.weight", l, 2048, 512), "attn_v");
        EXPECT(l < 1 ? GGUF_T_Q5_K : GGUF_T_Q4_K, type_of("Q3_K_M", &m, "blk.%d.ffn_down.weight", l, 8192, 2048),
               "ffn_down");
        EXPECT(GGUF_T_Q4_K, type_of("Q3_K", &m, "blk.%d.attn_output.weight", l, 2048, 2048), "attn_output");
        EXPECT(GGUF_T_Q3_K, type_of("Q3_K", &m, "blk.%d.attn_q.weight", l, 2048, 2048), "attn_q");
    }
}

/* llama.cpp's model type 70B (llama with 80 layers and grouped KV heads, qwen2 with 80):
 * a Q3_K or Q4_K attn_v becomes Q5_K. */
Test(quant_mix, seventy_b_attn_v) {
    const quant_model l70 = {ARCH_LLAMA, 80, 64, 8, false}, l65 = {ARCH_LLAMA, 80, 64, 64, false},
                      q70 = {ARCH_QWEN2, 80, 64, 8, false}, q3 = {ARCH_QWEN3, 80, 64, 8, false};
    EXPECT(GGUF_T_Q5_K, type_of("Q4_K_M", &l70, "blk.%d.attn_v.weight", 20, 8192, 1024), "llama 70B");
    EXPECT(GGUF_T_Q6_K, type_of("Q4_K_M", &l70, "blk.%d.attn_v.weight", 21, 8192, 1024), "a more-bits layer");
    EXPECT(GGUF_T_Q5_K, type_of("Q2_K", &l70, "blk.%d.attn_v.weight", 20, 8192, 1024), "llama 70B Q2_K");
    EXPECT(GGUF_T_Q4_K, type_of("Q4_K_M", &l65, "blk.%d.attn_v.weight", 20, 8192, 8192), "llama 65B");
    EXPECT(GGUF_T_Q5_K, type_of("Q4_K_M", &q70, "blk.%d.attn_v.weight", 20, 8192, 1024), "qwen2 70B");
    EXPECT(GGUF_T_Q4_K, type_of("Q4_K_M", &q3, "blk.%d.attn_v.weight", 20, 8192, 1024), "qwen3 at 80 layers");
    EXPECT(GGUF_T_Q5_K, type_of("Q5_K_M", &l70, "blk.%d.attn_v.weight", 20, 8192, 1024), "Q5_K stays");
}

/* Rows that are not whole blocks: a K type moves to the 32-element type of about its size
 * (Q2_K, Q3_K -> Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0), the logits' matrix to
 * Q8_0, and to F16 when not even 32 divides the row; Q4_0..Q8_0 then have nothing, and
 * the mix refuses the tensor as llama-quantize does. */
Test(quant_mix, fallbacks_for_odd_rows) {
    const quant_model m = {ARCH_QWEN3, 4, 5, 1, false};
    EXPECT(GGUF_T_Q5_0, type_of("Q4_K_M", &m, "blk.%d.attn_q.weight", 0, 160, 180), "Q4_K at 160");
    EXPECT(GGUF_T_Q8_0, type_of("Q4_K_M", &m, "blk.%d.attn_v.weight", 3, 160, 36), "Q6_K at 160");
    EXPECT(GGUF_T_Q5_1, type_of("Q5_K_M", &m, "blk.%d.attn_q.weight", 0, 160, 180), "Q5_K at 160");
    EXPECT(GGUF_T_Q4_0, type_of("Q2_K", &m, "blk.%d.ffn_up.weight", 0, 160, 416), "Q2_K at 160");
    EXPECT(GGUF_T_Q4_0, type_of("Q3_K_M", &m, "blk.%d.ffn_up.weight", 0, 160, 416), "Q3_K at 160");
    EXPECT(GGUF_T_Q8_0, type_of("Q4_K_M", &m, "output.weight", 0, 160, 500), "output at 160");
    EXPECT(GGUF_T_Q5_0, type_of("Q4_K_M", &m, "token_embd.weight", 0, 160, 500), "token_embd at 160");
    EXPECT(GGUF_T_F16, type_of("Q4_K_M", &m, "blk.%d.attn_output.weight", 0, 180, 160), "Q4_K at 180");
    EXPECT(GGUF_T_F16, type_of("Q6_K", &m, "blk.%d.attn_output.weight", 0, 180, 160), "Q6_K at 180");
    EXPECT(GGUF_T_Q4_0, type_of("Q4_0", &m, "blk.%d.attn_q.weight", 0, 160, 180), "Q4_0 at 160");
    EXPECT(GGUF_T_Q8_0, type_of("Q4_0", &m, "output.weight", 0, 160, 500), "Q4_0's output at 160");
    const char *refuse[][2] = {{"Q4_0", "blk.0.attn_output.weight"}, {"Q8_0", "blk.1.attn_output.weight"},
                               {"Q5_1", "blk.0.attn_output.weight"}, {"Q4_K_M", "output.weight"}};
    for (int i = 0; i < 4; i++) {
        quant_mix q = mix(refuse[i][0]);
        uint32_t t = 0;
        kiln_err e = {0};
        cr_assert_eq(quant_mix_type(&q, &m, refuse[i][1], 180, 160, GGUF_T_BF16, &t, &e), -1, "%s %s", refuse[i][0],
                     refuse[i][1]);
        cr_assert(strstr(e.msg, refuse[i][1]) && strstr(e.msg, "rows of 180"), "%s", e.msg);
        cr_assert_eq(e.code, KILN_ERR_UNSUPPORTED);
    }
    /* a 1-D tensor of any length stays */
    quant_mix q = mix("Q8_0");
    uint32_t t = 0;
    cr_assert_eq(quant_mix_type(&q, &m, "blk.0.attn_norm.weight", 180, 1, GGUF_T_F32, &t, NULL), 0);
    EXPECT(GGUF_T_F32, t, "norm");
}

/* testdata's dense-TYPE.gguf: llama-quantize's mixes of one F16 llama (3 layers, 2 KV
 * heads of 4, untied). */
Test(quant_mix, types_of_llama_quantize_files) {
    const char *files[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"};
    kiln_err e = {0};
    gguf_file *src = gguf_open(tu_data_file("models/dense-F16.gguf"), &e);
    cr_assert_not_null(src, "%s", e.msg);
    arch_hparams hp;
    cr_assert_eq(arch_read_hparams(src, &hp, &e), 0, "%s", e.msg);
    const quant_model m = {hp.arch, hp.n_layer, hp.n_head, hp.n_head_kv, gguf_find_tensor(src, "output.weight") == NULL};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char rel[64];
        snprintf(rel, sizeof rel, "models/dense-%s.gguf", files[f]);
        gguf_file *g = gguf_open(tu_data_file(rel), &e);
        cr_assert_not_null(g, "%s", e.msg);
        quant_mix q = mix(files[f]);
        uint32_t ft;
        cr_assert_eq(gguf_get_u32(g, "general.file_type", &ft, &e), 0, "%s", e.msg);
        cr_assert_eq(ft, q.ftype, "%s: file_type %u, the mix says %u", rel, ft, q.ftype);
        cr_assert_eq(gguf_n_tensors(g), gguf_n_tensors(src));
        for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i), *s = gguf_find_tensor(src, t->name);
            cr_assert_not_null(s);
            uint32_t want = 0;
            cr_assert_eq(quant_mix_type(&q, &m, t->name, s->ne[0], gguf_tensor_nrows(s), s->type, &want, &e), 0, "%s",
                         e.msg);
            cr_assert_eq(t->type, want, "%s: %s is %s, the mix says %s", rel, t->name, gguf_type_info_of(t->type)->name,
                         gguf_type_info_of(want)->name);
        }
        gguf_close(g);
    }
    gguf_close(src);
}
