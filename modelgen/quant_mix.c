/* llama.cpp's per-tensor quantization types (llama_tensor_get_type in src/llama-quant.cpp,
 * 34af94cd), for the mixes llama-quantize names and the dense and Qwen3.5 tensors kiln
 * writes; checked against testdata's dense-TYPE.gguf, which llama-quantize wrote.
 *
 * llama.cpp counts attn_v-like tensors (attn_v, attn_qkv) and ffn_down ones as it meets
 * them in layer order; in these architectures every layer has exactly one of each, so the
 * count is the layer index in the name. The rules for MoE models (n_expert 8), Falcon and
 * the IQ mixes, and the importance-matrix ones, are left out: nothing kiln writes meets
 * them. */
#include "modelgen/quant_mix.h"

#include "gguf/gguf.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* llama.cpp's LLAMA_FTYPE_MOSTLY_* (include/llama.h) */
enum {
    FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9, FT_Q2_K = 10,
    FT_Q3_K_M = 12, FT_Q4_K_M = 15, FT_Q5_K_M = 17, FT_Q6_K = 18,
};

static const struct {
    const char *name, *alias; /* alias: llama-quantize's other name for the same mix */
    quant_mix mix;
} mixes[] = {
    {"Q4_0", NULL, {"Q4_0", FT_Q4_0, GGUF_T_Q4_0}},       {"Q4_1", NULL, {"Q4_1", FT_Q4_1, GGUF_T_Q4_1}},
    {"Q5_0", NULL, {"Q5_0", FT_Q5_0, GGUF_T_Q5_0}},       {"Q5_1", NULL, {"Q5_1", FT_Q5_1, GGUF_T_Q5_1}},
    {"Q8_0", NULL, {"Q8_0", FT_Q8_0, GGUF_T_Q8_0}},       {"Q2_K", NULL, {"Q2_K", FT_Q2_K, GGUF_T_Q2_K}},
    {"Q3_K_M", "Q3_K", {"Q3_K_M", FT_Q3_K_M, GGUF_T_Q3_K}}, {"Q4_K_M", "Q4_K", {"Q4_K_M", FT_Q4_K_M, GGUF_T_Q4_K}},
    {"Q5_K_M", "Q5_K", {"Q5_K_M", FT_Q5_K_M, GGUF_T_Q5_K}}, {"Q6_K", NULL, {"Q6_K", FT_Q6_K, GGUF_T_Q6_K}},
};
#define N_MIXES (sizeof mixes / sizeof mixes[0])

const char quant_mix_list[] =
    "Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q2_K | Q3_K(_M) | Q4_K(_M) | Q5_K(_M) | Q6_K";

static bool eq_nocase(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return false;
    return *a == *b;
}

int quant_mix_parse(const char *name, quant_mix *out, kiln_err *err) {
    for (size_t i = 0; name && i < N_MIXES; i++)
        if (eq_nocase(name, mixes[i].name) || (mixes[i].alias && eq_nocase(name, mixes[i].alias))) {
            *out = mixes[i].mix;
            return 0;
        }
    return kiln_fail(err, KILN_ERR_INVALID, "'%s' is not a quantization kiln writes (%s)", name ? name : "",
                     quant_mix_list);
}

/* ---- the rules ------------------------------------------------------------------------ */

typedef enum role { R_OTHER, R_TOKEN_EMBD, R_OUTPUT, R_ATTN_V, R_ATTN_K, R_ATTN_Q, R_ATTN_OUT, R_FFN_UP, R_FFN_GATE,
                    R_FFN_DOWN } role;

/* llama.cpp's tensor_get_category: whole names for the two ends, substrings elsewhere
 * (attn_qkv and attn_kv_b count as attn_v: they hold the values). */
static role role_of(const char *name) {
    if (!strcmp(name, "output.weight")) return R_OUTPUT;
    if (!strcmp(name, "token_embd.weight")) return R_TOKEN_EMBD;
    if (strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight") || strstr(name, "attn_v.weight"))
        return R_ATTN_V;
    if (strstr(name, "attn_k.weight")) return R_ATTN_K;
    if (strstr(name, "attn_q.weight")) return R_ATTN_Q;
    if (strstr(name, "attn_output.weight")) return R_ATTN_OUT;
    if (strstr(name, "ffn_up")) return R_FFN_UP;
    if (strstr(name, "ffn_gate")) return R_FFN_GATE;
    if (strstr(name, "ffn_down")) return R_FFN_DOWN;
    return R_OTHER;
}

/* llama.cpp's tensor_allows_quantization, for the names kiln writes: matrices whose name
 * ends in "weight", but norms, the depthwise filter ssm_conv1d and a MoE router. */
static bool quantizable(const char *name, uint64_t ne1) {
    size_t n = strlen(name);
    return ne1 > 1 && n >= 6 && !strcmp(name + n - 6, "weight") && !strstr(name, "_norm.weight") &&
           !strstr(name, "ssm_conv1d") && !strstr(name, "ffn_gate_inp.weight");
}

/* The layers that get more bits: the first and last eighth, and every third between. */
static bool more_bits(int layer, int n_layer) {
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

/* llama.cpp's model type 70B (models/llama.cpp, models/qwen2.cpp): 80 layers, and for
 * llama grouped-query attention (the 65B has none). Its attn_v gets 5 bits (see below). */
static bool is_70b(const quant_model *m) {
    return m->n_layer == 80 && (m->arch == ARCH_QWEN2 || (m->arch == ARCH_LLAMA && m->n_head != m->n_head_kv));
}

static uint32_t block_of(uint32_t type) { return gguf_type_info_of(type)->block; }

/* llama_tensor_get_type_impl for the mixes above. */
static uint32_t chosen(const quant_mix *mix, const quant_model *m, role r, int layer, uint64_t ne0) {
    const uint32_t ft = mix->ftype, n_gqa = m->n_head_kv ? m->n_head / m->n_head_kv : 0;
    const int n = (int)m->n_layer;
    uint32_t t = mix->base;
    if (r == R_OUTPUT || (r == R_TOKEN_EMBD && m->tied)) {
        /* the logits' matrix: 6 bits, or Q8_0 where the row is not a whole block */
        if (ne0 % block_of(t)) return GGUF_T_Q8_0;
        return t == GGUF_T_Q8_0 ? t : GGUF_T_Q6_K;
    }
    switch (r) {
    case R_ATTN_V:
        if (ft == FT_Q2_K) t = n_gqa >= 4 ? GGUF_T_Q4_K : GGUF_T_Q3_K;
        else if (ft == FT_Q3_K_M) t = layer < 2 ? GGUF_T_Q5_K : GGUF_T_Q4_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && more_bits(layer, n)) t = GGUF_T_Q6_K;
        /* a 70B's attn_v is 8x smaller than attn_q (8 query heads per KV head): more bits are cheap */
        if (is_70b(m) && (t == GGUF_T_Q3_K || t == GGUF_T_Q4_K)) t = GGUF_T_Q5_K;
        return t;
    case R_FFN_DOWN:
        if (ft == FT_Q2_K) t = GGUF_T_Q3_K;
        else if (ft == FT_Q3_K_M) t = layer < n / 16 ? GGUF_T_Q5_K : GGUF_T_Q4_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && more_bits(layer, n)) t = GGUF_T_Q6_K;
        return t;
    case R_ATTN_OUT:
        if (ft == FT_Q2_K) t = GGUF_T_Q3_K;
        else if (ft == FT_Q3_K_M) t = GGUF_T_Q4_K;
        return t;
    default: return t; /* token_embd (untied), attn_q, attn_k, ffn_gate, ffn_up, the rest */
    }
}

int quant_mix_type(const quant_mix *mix, const quant_model *m, const char *name, uint64_t ne0, uint64_t ne1,
                   uint32_t src_type, uint32_t *type, kiln_err *err) {
    if (!mix->ftype || !quantizable(name, ne1)) {
        *type = src_type;
        return 0;
    }
    int layer = -1;
    if (sscanf(name, "blk.%d.", &layer) != 1) layer = -1;
    uint32_t t = chosen(mix, m, role_of(name), layer, ne0);
    if (ne0 % block_of(t) == 0) {
        *type = t;
        return 0;
    }
    /* llama.cpp's tensor_type_fallback: a 32-element type of about the same size */
    uint32_t f;
    switch (t) {
    case GGUF_T_Q2_K: case GGUF_T_Q3_K: f = GGUF_T_Q4_0; break;
    case GGUF_T_Q4_K: f = GGUF_T_Q5_0; break;
    case GGUF_T_Q5_K: f = GGUF_T_Q5_1; break;
    case GGUF_T_Q6_K: f = GGUF_T_Q8_0; break;
    default:
        return kiln_fail(err, KILN_ERR_UNSUPPORTED,
                         "%s: rows of %llu are not whole %s blocks of %u and %s has no other type for them "
                         "(llama-quantize refuses it too)",
                         name, (unsigned long long)ne0, gguf_type_info_of(t)->name, block_of(t), mix->name);
    }
    *type = ne0 % block_of(f) ? GGUF_T_F16 : f;
    return 0;
}
