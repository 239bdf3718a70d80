#include "modelgen/synth.h"

#include "base/error.h"
#include "base/rng.h"
#include "gguf/half.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *const synth_preset_names[] = {"tiny",          "qwen3-0.6b",        "qwen3-4b",        "qwen3-8b",
                                          "llama-3.2-1b",  "qwen3.5-0.8b",      "qwen3.5-4b",      "qwen3.5-tiny-odd",
                                          "qwen3-30b-a3b", "qwen3moe-tiny-odd", "qwen3.5-35b-a3b", "qwen35moe-tiny-odd",
                                          NULL};

void synth_qwen35_rope(synth_config *c) {
    c->n_rot = c->head_dim / 4 / 2 * 2;
    uint32_t half = c->n_rot / 2, t = (half + 2) / 3, h = (half - t + 1) / 2;
    c->rope_sections[0] = t, c->rope_sections[1] = h, c->rope_sections[2] = half - t - h, c->rope_sections[3] = 0;
}

/* Qwen3.5's text tower (Qwen3_5ForConditionalGeneration's text_config; kiln writes it as
 * llama.cpp's `qwen35`, without the vision tower or the multi-token-prediction block).
 * Common to the published checkpoints (mirrors of Qwen/Qwen3.5-0.8B's and -4B's
 * config.json): head_dim 256, linear_key_head_dim = linear_value_head_dim = 128,
 * linear_conv_kernel_dim 4, full_attention_interval 4, rms_norm_eps 1e-6,
 * rope_theta 10,000,000, partial_rotary_factor 0.25 with mrope_section [11, 11, 10]
 * (rope.dimension_count 64), vocab_size 248,320, max_position_embeddings 262,144, and
 * tied embeddings on these two sizes (tie_word_embeddings true in the 0.8B config; the
 * 4B's Megatron recipe in THUDM/slime, scripts/models/qwen3.5-4B.sh, keeps them tied
 * where its 27B recipe passes --untie-embeddings-and-output-weights). */
static void qwen35_common(synth_config *c) {
    c->arch = ARCH_QWEN35;
    c->head_dim = 256, c->ssm_state = 128, c->ssm_conv_kernel = 4, c->full_attn_interval = 4;
    c->n_vocab = 248320, c->n_ctx = 262144, c->tied = true;
    c->rope_base = 10000000.0f, c->rms_eps = 1e-6f;
    synth_qwen35_rope(c);
}

int synth_preset(const char *name, synth_config *c) {
    memset(c, 0, sizeof *c);
    c->dtype = GGUF_T_BF16;
    c->seed = 42;
    c->rms_eps = 1e-6f;
    c->rope_base = 1000000.0f;
    c->name = name;
    c->arch = ARCH_QWEN3;
    if (strcmp(name, "tiny") == 0) {
        /* deliberately odd sizes: nothing is a multiple of 32 or 64 */
        c->n_layer = 3, c->n_embd = 200, c->n_head = 5, c->n_head_kv = 1, c->head_dim = 40;
        c->n_ff = 520, c->n_vocab = 1000, c->n_ctx = 512, c->tied = false;
        c->rope_base = 10000.0f;
    } else if (strcmp(name, "qwen3-0.6b") == 0) {
        c->n_layer = 28, c->n_embd = 1024, c->n_head = 16, c->n_head_kv = 8, c->head_dim = 128;
        c->n_ff = 3072, c->n_vocab = 151936, c->n_ctx = 40960, c->tied = true;
    } else if (strcmp(name, "qwen3-4b") == 0) {
        c->n_layer = 36, c->n_embd = 2560, c->n_head = 32, c->n_head_kv = 8, c->head_dim = 128;
        c->n_ff = 9728, c->n_vocab = 151936, c->n_ctx = 40960, c->tied = true;
    } else if (strcmp(name, "qwen3-8b") == 0) {
        c->n_layer = 36, c->n_embd = 4096, c->n_head = 32, c->n_head_kv = 8, c->head_dim = 128;
        c->n_ff = 12288, c->n_vocab = 151936, c->n_ctx = 40960, c->tied = false;
    } else if (strcmp(name, "llama-3.2-1b") == 0) {
        c->arch = ARCH_LLAMA;
        c->n_layer = 16, c->n_embd = 2048, c->n_head = 32, c->n_head_kv = 8, c->head_dim = 64;
        c->n_ff = 8192, c->n_vocab = 128256, c->n_ctx = 131072, c->tied = true;
        c->rope_base = 500000.0f, c->rms_eps = 1e-5f;
        c->llama3_rope = true, c->rope_factor = 32.0f, c->rope_low_freq = 1.0f, c->rope_high_freq = 4.0f;
        c->rope_orig_ctx = 8192;
    } else if (strcmp(name, "qwen3.5-0.8b") == 0) {
        /* Qwen/Qwen3.5-0.8B text_config: hidden_size 1024, num_hidden_layers 24,
         * intermediate_size 3584, num_attention_heads 8, num_key_value_heads 2,
         * linear_num_key_heads 16, linear_num_value_heads 16 (llama.cpp's qwen35 loader
         * names 24 layers at width 1024 LLM_TYPE_0_8B) */
        qwen35_common(c);
        c->n_layer = 24, c->n_embd = 1024, c->n_ff = 3584, c->n_head = 8, c->n_head_kv = 2;
        c->ssm_k_heads = 16, c->ssm_v_heads = 16;
    } else if (strcmp(name, "qwen3.5-4b") == 0) {
        /* Qwen/Qwen3.5-4B text_config: hidden_size 2560, num_hidden_layers 32,
         * intermediate_size 9216, num_attention_heads 16, num_key_value_heads 4,
         * linear_num_key_heads 16, linear_num_value_heads 32 (llama.cpp: 32 layers at
         * width 2560 is LLM_TYPE_4B) */
        qwen35_common(c);
        c->n_layer = 32, c->n_embd = 2560, c->n_ff = 9216, c->n_head = 16, c->n_head_kv = 4;
        c->ssm_k_heads = 16, c->ssm_v_heads = 32;
    } else if (strcmp(name, "qwen3.5-tiny-odd") == 0) {
        /* for CI: 6 layers, full attention at 2 and 5 (interval 3), and nothing a multiple
         * of 32: width 200, 5 query heads of 44 (220, not the width) over 1 KV head, rope
         * on 10 dims as [2, 2, 1, 0], DeltaNet heads of 28 with 2 key heads shared by 6
         * value heads (inner 168, conv channels 280), ffn 456, vocab 641 */
        c->arch = ARCH_QWEN35;
        c->n_layer = 6, c->full_attn_interval = 3;
        c->n_embd = 200, c->n_head = 5, c->n_head_kv = 1, c->head_dim = 44, c->n_ff = 456;
        c->ssm_state = 28, c->ssm_k_heads = 2, c->ssm_v_heads = 6, c->ssm_conv_kernel = 4;
        c->n_vocab = 641, c->n_ctx = 512, c->tied = true;
        c->rope_base = 10000000.0f, c->rms_eps = 1e-6f;
        synth_qwen35_rope(c);
    } else if (strcmp(name, "qwen3-30b-a3b") == 0) {
        /* Qwen/Qwen3-30B-A3B config.json: hidden_size 2048, num_hidden_layers 48, 32 heads
         * over 4 KV heads of 128, intermediate_size 6144, 128 experts of
         * moe_intermediate_size 768, 8 a token, untied */
        c->arch = ARCH_QWEN3MOE;
        c->n_layer = 48, c->n_embd = 2048, c->n_head = 32, c->n_head_kv = 4, c->head_dim = 128;
        c->n_ff = 6144, c->n_vocab = 151936, c->n_ctx = 40960, c->tied = false;
        c->n_expert = 128, c->n_expert_used = 8, c->n_ff_exp = 768;
    } else if (strcmp(name, "qwen3moe-tiny-odd") == 0) {
        /* for CI: nothing a multiple of 32 (width 200, 5 heads of 40 over 1, experts of 72),
         * 6 experts of which 2 a token */
        c->arch = ARCH_QWEN3MOE;
        c->n_layer = 3, c->n_embd = 200, c->n_head = 5, c->n_head_kv = 1, c->head_dim = 40;
        c->n_ff = 520, c->n_vocab = 1000, c->n_ctx = 512, c->tied = false, c->rope_base = 10000.0f;
        c->n_expert = 6, c->n_expert_used = 2, c->n_ff_exp = 72;
    } else if (strcmp(name, "qwen3.5-35b-a3b") == 0) {
        /* Qwen/Qwen3.5-35B-A3B text_config: hidden_size 2048, num_hidden_layers 40,
         * num_attention_heads 16, num_key_value_heads 2, linear_num_key_heads 16,
         * linear_num_value_heads 32, 256 experts of moe_intermediate_size 512 with 8 a token
         * and a shared expert of shared_expert_intermediate_size 512 (llama.cpp's qwen35moe
         * loader names 40 layers LLM_TYPE_35B_A3B); untied */
        qwen35_common(c);
        c->arch = ARCH_QWEN35MOE;
        c->n_layer = 40, c->n_embd = 2048, c->n_ff = 512, c->n_head = 16, c->n_head_kv = 2;
        c->ssm_k_heads = 16, c->ssm_v_heads = 32, c->tied = false;
        c->n_expert = 256, c->n_expert_used = 8, c->n_ff_exp = 512, c->n_ff_shexp = 512;
    } else if (strcmp(name, "qwen35moe-tiny-odd") == 0) {
        /* for CI: qwen3.5-tiny-odd's trunk (4 layers here, full attention at 2; untied) with
         * 6 experts of 72, 2 a token, and a shared expert of 72 (nothing a multiple of 32) */
        synth_preset("qwen3.5-tiny-odd", c);
        c->name = name, c->arch = ARCH_QWEN35MOE, c->n_layer = 4, c->tied = false;
        c->n_expert = 6, c->n_expert_used = 2, c->n_ff_exp = 72, c->n_ff_shexp = 72;
    } else {
        return -1;
    }
    return 0;
}

int synth_check(const synth_config *c, kiln_err *err) {
    const struct { const char *what; uint32_t v; } must[] = {
        {"--layers", c->n_layer}, {"--hidden", c->n_embd}, {"--heads", c->n_head}, {"--kv-heads", c->n_head_kv},
        {"--head-dim", c->head_dim}, {"--ffn", c->n_ff}, {"--vocab", c->n_vocab}, {"--ctx", c->n_ctx}};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        if (must[i].v == 0) {
            kiln_fail(err, KILN_ERR_INVALID, "%s must be positive", must[i].what);
            return -1;
        }
    if (c->n_head % c->n_head_kv) {
        kiln_fail(err, KILN_ERR_INVALID, "--heads %u is not a multiple of --kv-heads %u", c->n_head, c->n_head_kv);
        return -1;
    }
    if (c->head_dim % 2) {
        kiln_fail(err, KILN_ERR_INVALID, "--head-dim %u must be even (rope rotates pairs)", c->head_dim);
        return -1;
    }
    if (arch_is_qwen35(c->arch)) {
        const struct { const char *what; uint32_t v; } q35[] = {
            {"full_attention_interval", c->full_attn_interval}, {"ssm.conv_kernel", c->ssm_conv_kernel},
            {"ssm.state_size", c->ssm_state}, {"ssm.group_count", c->ssm_k_heads},
            {"ssm.time_step_rank", c->ssm_v_heads}};
        for (size_t i = 0; i < sizeof q35 / sizeof q35[0]; i++)
            if (q35[i].v == 0) {
                kiln_fail(err, KILN_ERR_INVALID, "qwen35: %s must be positive", q35[i].what);
                return -1;
            }
        if (c->ssm_v_heads % c->ssm_k_heads) {
            kiln_fail(err, KILN_ERR_INVALID, "qwen35: %u value heads are not a multiple of %u key heads",
                      c->ssm_v_heads, c->ssm_k_heads);
            return -1;
        }
        uint32_t sum = c->rope_sections[0] + c->rope_sections[1] + c->rope_sections[2] + c->rope_sections[3];
        if (c->n_rot < 2 || c->n_rot % 2 || c->n_rot > c->head_dim || 2 * sum != c->n_rot) {
            kiln_fail(err, KILN_ERR_INVALID,
                      "qwen35: rope over %u of the head's %u dims with sections summing to %u (--head-dim must "
                      "be at least 8)",
                      c->n_rot, c->head_dim, sum);
            return -1;
        }
        if ((uint64_t)c->ssm_state * c->ssm_v_heads > (1u << 20) || c->ssm_conv_kernel > 64 ||
            c->n_layer > ARCH_MAX_LAYERS) {
            kiln_fail(err, KILN_ERR_INVALID, "qwen35: sizes are beyond any real model");
            return -1;
        }
        if (c->llama3_rope) {
            kiln_fail(err, KILN_ERR_INVALID, "qwen35: Llama 3 rope factors do not apply");
            return -1;
        }
    }
    if (c->arch == ARCH_QWEN3MOE || c->arch == ARCH_QWEN35MOE) {
        if (!c->n_expert || !c->n_expert_used || !c->n_ff_exp || c->n_expert_used > c->n_expert ||
            c->n_expert > ARCH_MAX_EXPERTS || c->n_ff_exp > (1u << 22) || c->n_ff_shexp > (1u << 22) ||
            (c->arch == ARCH_QWEN35MOE && !c->n_ff_shexp)) {
            kiln_fail(err, KILN_ERR_INVALID, "qwen3moe: %u experts of %u, %u a token (1 <= used <= experts <= %u)",
                      c->n_expert, c->n_ff_exp, c->n_expert_used, ARCH_MAX_EXPERTS);
            return -1;
        }
        /* llama-quantize has rules of its own for 8 experts (Mixtral's) that quant_mix leaves out */
        if (c->quant.ftype && c->n_expert == 8) {
            kiln_fail(err, KILN_ERR_UNSUPPORTED, "quant: llama-quantize's mixes for 8 experts are not written here");
            return -1;
        }
    }
    if (c->dtype != GGUF_T_BF16 && c->dtype != GGUF_T_F16) {
        kiln_fail(err, KILN_ERR_INVALID, "dtype must be bf16 or f16");
        return -1;
    }
    if (c->quant.ftype && (!c->quant.name || !gguf_type_quantizable(c->quant.base))) {
        kiln_fail(err, KILN_ERR_INVALID, "quant: file type %u over %s is not a mix kiln writes (quant_mix_parse)",
                  c->quant.ftype, gguf_type_info_of(c->quant.base) ? gguf_type_info_of(c->quant.base)->name : "?");
        return -1;
    }
    uint64_t big = (uint64_t)c->n_head * c->head_dim;
    if (big > (1u << 20) || c->n_embd > (1u << 20) || c->n_ff > (1u << 22) || c->n_vocab > (1u << 24) ||
        c->n_layer > 4096) {
        kiln_fail(err, KILN_ERR_INVALID, "sizes are beyond any real model (check --hidden/--heads/--ffn/--vocab)");
        return -1;
    }
    return 0;
}

/* ---- the tensor plan ------------------------------------------------------------------ */

/* FILL_WEIGHT: normal, std 0.02 (matrices and biases); FILL_NORM: normal around 1, std
 * 0.02; FILL_CONV: qwen35's depthwise filter, normal with std 1/sqrt(taps) (the scale
 * PyTorch's Conv1d init gives, and one that keeps the qkv's size through the filter);
 * FILL_SSM_A and FILL_DT_BIAS: qwen35's decay rates and dt bias (fill_chunk). */
typedef enum fill_kind { FILL_WEIGHT, FILL_NORM, FILL_ROPE_FREQS, FILL_CONV, FILL_SSM_A, FILL_DT_BIAS } fill_kind;

typedef struct plan_tensor {
    char name[GGUF_MAX_TENSOR_NAME + 1];
    uint32_t type, n_dims;
    uint32_t src_type; /* the type without quantization: values are rounded to it first */
    uint64_t ne[3]; /* ne[2]: the experts of a 3-D tensor, else 1 */
    fill_kind kind;
} plan_tensor;

static uint64_t plan_nel(const plan_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2]; }

typedef struct plan {
    plan_tensor *t;
    size_t n, cap;
} plan;

static int plan_add(plan *p, fill_kind kind, uint32_t type, uint64_t ne0, uint64_t ne1, const char *fmt, int layer) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        plan_tensor *t = realloc(p->t, cap * sizeof *t);
        if (!t) return -1;
        p->t = t;
        p->cap = cap;
    }
    plan_tensor *t = &p->t[p->n++];
    snprintf(t->name, sizeof t->name, fmt, layer);
    t->type = t->src_type = type;
    t->n_dims = ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    t->ne[2] = 1;
    t->kind = kind;
    return 0;
}

/* A 3-D tensor: n experts' ne0 x ne1 matrices (ffn_*_exps). */
static int plan_add_experts(plan *p, uint32_t type, uint64_t ne0, uint64_t ne1, uint64_t n, const char *fmt, int layer) {
    if (plan_add(p, FILL_WEIGHT, type, ne0, ne1, fmt, layer)) return -1;
    p->t[p->n - 1].ne[2] = n;
    p->t[p->n - 1].n_dims = 3;
    return 0;
}

/* A mixture of experts' feed-forward: the router (f32, as llama.cpp's converter keeps
 * it), the experts' 3-D tensors, and qwen35moe's shared expert (its 1-D gate f32, as
 * every 1-D tensor). */
static int plan_moe_ffn(const synth_config *c, plan *p, int L) {
    uint32_t w = c->dtype, f = GGUF_T_F32, e = c->n_expert, x = c->n_ff_exp, s = c->n_ff_shexp;
    uint64_t d = c->n_embd;
    int r = plan_add(p, FILL_WEIGHT, f, d, e, "blk.%d.ffn_gate_inp.weight", L);
    r |= plan_add_experts(p, w, d, x, e, "blk.%d.ffn_gate_exps.weight", L);
    r |= plan_add_experts(p, w, d, x, e, "blk.%d.ffn_up_exps.weight", L);
    r |= plan_add_experts(p, w, x, d, e, "blk.%d.ffn_down_exps.weight", L);
    if (!s) return r;
    r |= plan_add(p, FILL_WEIGHT, f, d, 0, "blk.%d.ffn_gate_inp_shexp.weight", L);
    r |= plan_add(p, FILL_WEIGHT, w, d, s, "blk.%d.ffn_gate_shexp.weight", L);
    r |= plan_add(p, FILL_WEIGHT, w, d, s, "blk.%d.ffn_up_shexp.weight", L);
    r |= plan_add(p, FILL_WEIGHT, w, s, d, "blk.%d.ffn_down_shexp.weight", L);
    return r;
}

bool synth_layer_recurrent(const synth_config *c, uint32_t l) {
    return arch_is_qwen35(c->arch) && (l + 1) % c->full_attn_interval != 0;
}

/* Qwen3.5 in the order and with the names, shapes and types of llama.cpp's converter
 * (the layout of testdata's qwen35-tiny.gguf; the loader is llama.cpp's
 * src/models/qwen35.cpp): per layer attn_norm, the mixer, post_attention_norm, the ffn.
 * The 1-D tensors and the depthwise filter ssm_conv1d stay F32. Checked by hand on
 * 2026-12-02 against llama.cpp 34af94cd's CPU backend (libllama, greedy over a
 * 12-token prompt): it loads qwen3.5-tiny-odd (seeds 42, 7, 1234) and qwen3.5-0.8b
 * ("model type 0.8B") and its tokens equal kiln's oracle in f32 mode on every one. */
static int plan_qwen35(const synth_config *c, plan *p) {
    uint32_t w = c->dtype, f = GGUF_T_F32;
    uint64_t d = c->n_embd, q = (uint64_t)c->n_head * c->head_dim, kv = (uint64_t)c->n_head_kv * c->head_dim,
             ks = (uint64_t)c->ssm_k_heads * c->ssm_state, vs = (uint64_t)c->ssm_v_heads * c->ssm_state;
    int r = plan_add(p, FILL_WEIGHT, w, d, c->n_vocab, "token_embd.weight", 0);
    for (uint32_t l = 0; l < c->n_layer && !r; l++) {
        int L = (int)l;
        r |= plan_add(p, FILL_NORM, f, d, 0, "blk.%d.attn_norm.weight", L);
        if (synth_layer_recurrent(c, l)) {
            r |= plan_add(p, FILL_WEIGHT, w, d, 2 * ks + vs, "blk.%d.attn_qkv.weight", L);
            r |= plan_add(p, FILL_WEIGHT, w, d, vs, "blk.%d.attn_gate.weight", L);
            r |= plan_add(p, FILL_CONV, f, c->ssm_conv_kernel, 2 * ks + vs, "blk.%d.ssm_conv1d.weight", L);
            r |= plan_add(p, FILL_DT_BIAS, f, c->ssm_v_heads, 0, "blk.%d.ssm_dt.bias", L);
            r |= plan_add(p, FILL_SSM_A, f, c->ssm_v_heads, 0, "blk.%d.ssm_a", L);
            r |= plan_add(p, FILL_WEIGHT, w, d, c->ssm_v_heads, "blk.%d.ssm_beta.weight", L);
            r |= plan_add(p, FILL_WEIGHT, w, d, c->ssm_v_heads, "blk.%d.ssm_alpha.weight", L);
            r |= plan_add(p, FILL_NORM, f, c->ssm_state, 0, "blk.%d.ssm_norm.weight", L);
            r |= plan_add(p, FILL_WEIGHT, w, vs, d, "blk.%d.ssm_out.weight", L);
        } else {
            r |= plan_add(p, FILL_WEIGHT, w, d, 2 * q, "blk.%d.attn_q.weight", L); /* query and gate */
            r |= plan_add(p, FILL_WEIGHT, w, d, kv, "blk.%d.attn_k.weight", L);
            r |= plan_add(p, FILL_WEIGHT, w, d, kv, "blk.%d.attn_v.weight", L);
            r |= plan_add(p, FILL_NORM, f, c->head_dim, 0, "blk.%d.attn_q_norm.weight", L);
            r |= plan_add(p, FILL_NORM, f, c->head_dim, 0, "blk.%d.attn_k_norm.weight", L);
            r |= plan_add(p, FILL_WEIGHT, w, q, d, "blk.%d.attn_output.weight", L);
        }
        r |= plan_add(p, FILL_NORM, f, d, 0, "blk.%d.post_attention_norm.weight", L);
        if (c->arch == ARCH_QWEN35MOE) {
            r |= plan_moe_ffn(c, p, L);
            continue;
        }
        r |= plan_add(p, FILL_WEIGHT, w, d, c->n_ff, "blk.%d.ffn_gate.weight", L);
        r |= plan_add(p, FILL_WEIGHT, w, d, c->n_ff, "blk.%d.ffn_up.weight", L);
        r |= plan_add(p, FILL_WEIGHT, w, c->n_ff, d, "blk.%d.ffn_down.weight", L);
    }
    r |= plan_add(p, FILL_NORM, f, d, 0, "output_norm.weight", 0);
    if (!c->tied) r |= plan_add(p, FILL_WEIGHT, w, d, c->n_vocab, "output.weight", 0);
    return r ? -1 : 0;
}

/* Names and shapes as llama.cpp's converter writes them (ne[0] is the input size). */
static int make_plan(const synth_config *c, plan *p) {
    if (arch_is_qwen35(c->arch)) return plan_qwen35(c, p);
    uint32_t w = c->dtype, f = GGUF_T_F32;
    uint64_t q = (uint64_t)c->n_head * c->head_dim, kv = (uint64_t)c->n_head_kv * c->head_dim;
    int r = plan_add(p, FILL_WEIGHT, w, c->n_embd, c->n_vocab, "token_embd.weight", 0);
    if (c->llama3_rope) r |= plan_add(p, FILL_ROPE_FREQS, f, c->head_dim / 2, 0, "rope_freqs.weight", 0);
    for (uint32_t l = 0; l < c->n_layer && !r; l++) {
        int L = (int)l;
        r |= plan_add(p, FILL_NORM, f, c->n_embd, 0, "blk.%d.attn_norm.weight", L);
        r |= plan_add(p, FILL_WEIGHT, w, c->n_embd, q, "blk.%d.attn_q.weight", L);
        r |= plan_add(p, FILL_WEIGHT, w, c->n_embd, kv, "blk.%d.attn_k.weight", L);
        r |= plan_add(p, FILL_WEIGHT, w, c->n_embd, kv, "blk.%d.attn_v.weight", L);
        if (c->arch == ARCH_QWEN2) {
            r |= plan_add(p, FILL_WEIGHT, f, q, 0, "blk.%d.attn_q.bias", L);
            r |= plan_add(p, FILL_WEIGHT, f, kv, 0, "blk.%d.attn_k.bias", L);
            r |= plan_add(p, FILL_WEIGHT, f, kv, 0, "blk.%d.attn_v.bias", L);
        }
        if (c->arch == ARCH_QWEN3 || c->arch == ARCH_QWEN3MOE) {
            r |= plan_add(p, FILL_NORM, f, c->head_dim, 0, "blk.%d.attn_q_norm.weight", L);
            r |= plan_add(p, FILL_NORM, f, c->head_dim, 0, "blk.%d.attn_k_norm.weight", L);
        }
        r |= plan_add(p, FILL_WEIGHT, w, q, c->n_embd, "blk.%d.attn_output.weight", L);
        r |= plan_add(p, FILL_NORM, f, c->n_embd, 0, "blk.%d.ffn_norm.weight", L);
        if (c->arch == ARCH_QWEN3MOE) {
            r |= plan_moe_ffn(c, p, L);
            continue;
        }
        r |= plan_add(p, FILL_WEIGHT, w, c->n_embd, c->n_ff, "blk.%d.ffn_gate.weight", L);
        r |= plan_add(p, FILL_WEIGHT, w, c->n_embd, c->n_ff, "blk.%d.ffn_up.weight", L);
        r |= plan_add(p, FILL_WEIGHT, w, c->n_ff, c->n_embd, "blk.%d.ffn_down.weight", L);
    }
    r |= plan_add(p, FILL_NORM, f, c->n_embd, 0, "output_norm.weight", 0);
    if (!c->tied) r |= plan_add(p, FILL_WEIGHT, w, c->n_embd, c->n_vocab, "output.weight", 0);
    return r ? -1 : 0;
}

/* The mix's type for every tensor, llama-quantize's for this model. */
static int plan_quantize(const synth_config *c, plan *p, kiln_err *err) {
    if (!c->quant.ftype) return 0;
    const quant_model m = {c->arch, c->n_layer, c->n_head, c->n_head_kv, c->tied};
    for (size_t i = 0; i < p->n; i++) {
        plan_tensor *t = &p->t[i];
        if (quant_mix_type(&c->quant, &m, t->name, t->ne[0], t->ne[1] * t->ne[2], t->src_type, &t->type, err))
            return kiln_err_prefix(err, "--quant %s", c->quant.name);
    }
    return 0;
}

/* ---- metadata ------------------------------------------------------------------------- */

static int add_arch_u32(gguf_writer *w, const synth_config *c, const char *suffix, uint32_t v, kiln_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch_name(c->arch), suffix);
    return gguf_writer_add_u32(w, key, v, err);
}

static int add_arch_f32(gguf_writer *w, const synth_config *c, const char *suffix, float v, kiln_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch_name(c->arch), suffix);
    return gguf_writer_add_f32(w, key, v, err);
}

static int write_metadata(gguf_writer *w, const synth_config *c, kiln_err *err) {
    if (gguf_writer_add_str(w, "general.architecture", arch_name(c->arch), err) ||
        gguf_writer_add_str(w, "general.type", "model", err) ||
        gguf_writer_add_str(w, "general.name", c->name ? c->name : "kiln-synth", err) ||
        gguf_writer_add_u32(w, "general.file_type", c->quant.ftype ? c->quant.ftype : c->dtype == GGUF_T_BF16 ? 32 : 1,
                            err) ||
        /* ggml's block layouts' version, which llama-quantize writes (GGML_QNT_VERSION) */
        (c->quant.ftype && gguf_writer_add_u32(w, "general.quantization_version", 2, err)) ||
        add_arch_u32(w, c, "block_count", c->n_layer, err) || add_arch_u32(w, c, "context_length", c->n_ctx, err) ||
        add_arch_u32(w, c, "embedding_length", c->n_embd, err) ||
        add_arch_u32(w, c, "feed_forward_length", c->n_ff, err) ||
        add_arch_u32(w, c, "attention.head_count", c->n_head, err) ||
        add_arch_u32(w, c, "attention.head_count_kv", c->n_head_kv, err) ||
        add_arch_f32(w, c, "rope.freq_base", c->rope_base, err) ||
        add_arch_f32(w, c, "attention.layer_norm_rms_epsilon", c->rms_eps, err) ||
        add_arch_u32(w, c, "attention.key_length", c->head_dim, err) ||
        add_arch_u32(w, c, "attention.value_length", c->head_dim, err))
        return -1;
    if (c->arch == ARCH_LLAMA && (add_arch_u32(w, c, "vocab_size", c->n_vocab, err) ||
                                  add_arch_u32(w, c, "rope.dimension_count", c->head_dim, err)))
        return -1;
    bool moe = c->arch == ARCH_QWEN3MOE || c->arch == ARCH_QWEN35MOE;
    if (moe && (add_arch_u32(w, c, "expert_count", c->n_expert, err) ||
                add_arch_u32(w, c, "expert_used_count", c->n_expert_used, err) ||
                add_arch_u32(w, c, "expert_feed_forward_length", c->n_ff_exp, err) ||
                (c->n_ff_shexp && add_arch_u32(w, c, "expert_shared_feed_forward_length", c->n_ff_shexp, err))))
        return -1;
    if (arch_is_qwen35(c->arch)) {
        char sections[64];
        snprintf(sections, sizeof sections, "%s.rope.dimension_sections", arch_name(c->arch));
        /* the keys (and value types: u32, and an i32 array for the sections) of
         * llama.cpp's converter, as qwen35-tiny.gguf holds them */
        int32_t sec[4];
        for (int i = 0; i < 4; i++) sec[i] = (int32_t)c->rope_sections[i];
        if (add_arch_u32(w, c, "rope.dimension_count", c->n_rot, err) ||
            gguf_writer_add_arr(w, sections, GGUF_VT_I32, sec, 4, err) ||
            add_arch_u32(w, c, "full_attention_interval", c->full_attn_interval, err) ||
            add_arch_u32(w, c, "ssm.conv_kernel", c->ssm_conv_kernel, err) ||
            add_arch_u32(w, c, "ssm.state_size", c->ssm_state, err) ||
            add_arch_u32(w, c, "ssm.group_count", c->ssm_k_heads, err) ||
            add_arch_u32(w, c, "ssm.time_step_rank", c->ssm_v_heads, err) ||
            add_arch_u32(w, c, "ssm.inner_size", c->ssm_state * c->ssm_v_heads, err) ||
            add_arch_u32(w, c, "vocab_size", c->n_vocab, err))
            return -1;
    }
    return 0;
}

static int write_tokenizer(gguf_writer *w, const synth_config *c, const tok_vocab *v, const gguf_file *from,
                           kiln_err *err) {
    if (from) {
        const gguf_array *toks;
        if (gguf_get_arr(from, "tokenizer.ggml.tokens", GGUF_VT_STR, &toks, err)) return -1;
        if (toks->n != c->n_vocab) {
            kiln_fail(err, KILN_ERR_INVALID, "--vocab-from has %llu tokens but the model's vocab is %u",
                      (unsigned long long)toks->n, c->n_vocab);
            return -1;
        }
        for (uint64_t i = 0; i < gguf_n_kv(from); i++)
            if (strncmp(gguf_kv_key(from, i), "tokenizer.", 10) == 0 &&
                gguf_writer_add_kv(w, gguf_kv_key(from, i), gguf_kv_value(from, i), err))
                return -1;
        return 0;
    }
    if (v->n_tokens != c->n_vocab) {
        kiln_fail(err, KILN_ERR_INVALID, "tokenizer has %llu tokens but the model's vocab is %u",
                  (unsigned long long)v->n_tokens, c->n_vocab);
        return -1;
    }
    return tok_vocab_write(v, w, err);
}

/* ---- drawing and writing -------------------------------------------------------------- */

#define CHUNK (1u << 20) /* elements per independently seeded piece */

typedef struct chunk { uint32_t tensor; uint64_t index, start, count; } chunk;

typedef struct slot {
    uint8_t *buf;
    size_t bytes;
    uint64_t id;   /* the chunk it holds or will hold next */
    bool full;
} slot;

typedef struct pipeline {
    const synth_config *c;
    const plan *p;
    chunk *chunks;
    uint64_t n_chunks;
    slot *slots;
    size_t n_slots;
    int n_threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    kiln_err fail; /* why a worker stopped (empty: out of memory) */
} pipeline;

typedef struct worker { pipeline *pl; int tid; } worker;

static void rope_factors(const synth_config *c, float *out, uint64_t n) {
    double lo_wl = c->rope_orig_ctx / c->rope_low_freq, hi_wl = c->rope_orig_ctx / c->rope_high_freq;
    for (uint64_t i = 0; i < n; i++) {
        float freq = 1.0f / powf(c->rope_base, (float)(2 * i) / (float)c->head_dim);
        double wl = 2.0 * 3.14159265358979323846 / freq;
        if (wl < hi_wl) out[i] = 1.0f;
        else if (wl > lo_wl) out[i] = c->rope_factor;
        else {
            double smooth = (c->rope_orig_ctx / wl - c->rope_low_freq) / (c->rope_high_freq - c->rope_low_freq);
            out[i] = (float)(1.0 / ((1.0 - smooth) / c->rope_factor + smooth));
        }
    }
}

/* The chunk's values as the tensor's type: through its unquantized 16-bit type first
 * when it has one, so a quantized tensor holds what llama-quantize makes of that file. */
static int store_chunk(const plan_tensor *t, uint64_t count, float *tmp, slot *s, kiln_err *err) {
    uint16_t *h = (uint16_t *)s->buf;
    if (t->type != t->src_type && t->src_type == GGUF_T_BF16)
        for (uint64_t i = 0; i < count; i++) tmp[i] = gguf_bf16_to_f32(gguf_f32_to_bf16(tmp[i]));
    else if (t->type != t->src_type && t->src_type == GGUF_T_F16)
        for (uint64_t i = 0; i < count; i++) tmp[i] = gguf_f16_to_f32(gguf_f32_to_f16(tmp[i]));
    const gguf_type_info *ti = gguf_type_info_of(t->type);
    if (t->type == GGUF_T_F32) memcpy(s->buf, tmp, count * 4);
    else if (t->type == GGUF_T_BF16)
        for (uint64_t i = 0; i < count; i++) h[i] = gguf_f32_to_bf16(tmp[i]);
    else if (t->type == GGUF_T_F16)
        for (uint64_t i = 0; i < count; i++) h[i] = gguf_f32_to_f16(tmp[i]);
    else if (gguf_quantize_rows(t->type, tmp, s->buf, count, err)) /* a chunk holds whole rows' blocks */
        return kiln_err_prefix(err, "%s", t->name);
    s->bytes = count / ti->block * ti->block_bytes;
    return 0;
}

static int fill_chunk(const pipeline *pl, const chunk *ck, slot *s, float *tmp, kiln_err *err) {
    const plan_tensor *t = &pl->p->t[ck->tensor];
    const synth_config *c = pl->c;
    rng r;
    rng_seed(&r, c->seed, ck->tensor, ck->index);
    if (t->kind == FILL_ROPE_FREQS) rope_factors(c, tmp, ck->count);
    else if (t->kind == FILL_CONV) rng_normal_fill(&r, tmp, ck->count, 0.0f, 1.0f / sqrtf((float)t->ne[0]));
    else if (t->kind == FILL_SSM_A || t->kind == FILL_DT_BIAS) {
        /* Mamba-2's initialisation, which Qwen3-Next's (and so Qwen3.5's) A_log follows:
         * A log-uniform in [1, 16], stored as ssm_a = -A (the converter's -exp(A_log)),
         * and dt log-uniform in [0.001, 0.1], stored as the bias whose softplus it is.
         * A token's decay exp(-A softplus(alpha + dt_bias)) then spans about 0.2 to
         * 0.999 over the heads: short and long memories, never 0 or 1. */
        for (uint64_t i = 0; i < ck->count; i++) {
            double u = rng_uniform(&r);
            if (t->kind == FILL_SSM_A) tmp[i] = (float)-pow(16.0, u);
            else {
                double dt = 0.001 * pow(100.0, u);
                tmp[i] = (float)log(expm1(dt)); /* softplus^-1 */
            }
        }
    } else rng_normal_fill(&r, tmp, ck->count, t->kind == FILL_NORM ? 1.0f : 0.0f, 0.02f);
    return store_chunk(t, ck->count, tmp, s, err);
}

static void *generate(void *arg) {
    worker *wk = arg;
    pipeline *pl = wk->pl;
    float *tmp = malloc(CHUNK * sizeof *tmp);
    kiln_err err = {0};
    bool failed = !tmp;
    for (uint64_t g = (uint64_t)wk->tid; !failed && g < pl->n_chunks; g += (uint64_t)pl->n_threads) {
        slot *s = &pl->slots[g % pl->n_slots];
        pthread_mutex_lock(&pl->mu);
        while (!pl->stop && (s->full || s->id != g)) pthread_cond_wait(&pl->cv, &pl->mu);
        bool stop = pl->stop;
        pthread_mutex_unlock(&pl->mu);
        if (stop) break;
        if (fill_chunk(pl, &pl->chunks[g], s, tmp, &err)) {
            failed = true;
            break;
        }
        pthread_mutex_lock(&pl->mu);
        s->full = true;
        pthread_cond_broadcast(&pl->cv);
        pthread_mutex_unlock(&pl->mu);
    }
    if (failed) {
        pthread_mutex_lock(&pl->mu);
        if (!pl->stop && err.msg[0]) pl->fail = err; /* the first failure's reason */
        pl->stop = true;
        pthread_cond_broadcast(&pl->cv);
        pthread_mutex_unlock(&pl->mu);
    }
    free(tmp);
    return NULL;
}

static int stream_tensors(gguf_writer *w, const synth_config *c, const plan *p, kiln_err *err) {
    pipeline pl = {.c = c, .p = p};
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    pl.n_threads = c->threads > 0 ? c->threads : (cores > 0 ? (int)(cores < 64 ? cores : 64) : 1);
    for (size_t i = 0; i < p->n; i++) pl.n_chunks += (plan_nel(&p->t[i]) + CHUNK - 1) / CHUNK;
    pl.chunks = calloc(pl.n_chunks, sizeof *pl.chunks);
    pl.n_slots = 2 * (size_t)pl.n_threads + 2;
    pl.slots = calloc(pl.n_slots, sizeof *pl.slots);
    worker *wk = calloc((size_t)pl.n_threads, sizeof *wk);
    pthread_t *th = calloc((size_t)pl.n_threads, sizeof *th);
    int rc = -1, started = 0;
    if (!pl.chunks || !pl.slots || !wk || !th) goto out;
    uint64_t g = 0;
    for (size_t i = 0; i < p->n; i++) {
        uint64_t nel = plan_nel(&p->t[i]);
        for (uint64_t s = 0, k = 0; s < nel; s += CHUNK, k++)
            pl.chunks[g++] = (chunk){(uint32_t)i, k, s, nel - s < CHUNK ? nel - s : CHUNK};
    }
    for (size_t i = 0; i < pl.n_slots; i++) {
        pl.slots[i].buf = malloc(CHUNK * 4);
        pl.slots[i].id = i;
        if (!pl.slots[i].buf) goto out;
    }
    pthread_mutex_init(&pl.mu, NULL);
    pthread_cond_init(&pl.cv, NULL);
    for (; started < pl.n_threads; started++) {
        wk[started] = (worker){&pl, started};
        if (pthread_create(&th[started], NULL, generate, &wk[started])) break;
    }
    rc = 0;
    if (started < pl.n_threads) {
        kiln_fail(err, KILN_ERR_INVALID, "cannot start %d threads", pl.n_threads);
        rc = -1;
    }
    for (g = 0; g < pl.n_chunks && rc == 0; g++) {
        slot *s = &pl.slots[g % pl.n_slots];
        pthread_mutex_lock(&pl.mu);
        while (!pl.stop && !(s->full && s->id == g)) pthread_cond_wait(&pl.cv, &pl.mu);
        bool stop = pl.stop;
        pthread_mutex_unlock(&pl.mu);
        if (stop) {
            if (pl.fail.msg[0]) *err = pl.fail;
            else kiln_fail(err, KILN_ERR_NOMEM, "out of memory while drawing weights");
            rc = -1;
            break;
        }
        rc = gguf_writer_write(w, s->buf, s->bytes, err);
        pthread_mutex_lock(&pl.mu);
        s->full = false;
        s->id = g + pl.n_slots;
        pthread_cond_broadcast(&pl.cv);
        pthread_mutex_unlock(&pl.mu);
    }
    pthread_mutex_lock(&pl.mu);
    pl.stop = true;
    pthread_cond_broadcast(&pl.cv);
    pthread_mutex_unlock(&pl.mu);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&pl.mu);
    pthread_cond_destroy(&pl.cv);
out:
    if (rc && !err->msg[0]) kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    if (pl.slots)
        for (size_t i = 0; i < pl.n_slots; i++) free(pl.slots[i].buf);
    free(pl.slots);
    free(pl.chunks);
    free(wk);
    free(th);
    return rc;
}

int synth_write(const synth_config *c, const tok_vocab *vocab, const gguf_file *vocab_from, const char *path,
                synth_stats *stats, kiln_err *err) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    err->msg[0] = 0;
    if (synth_check(c, err)) return -1;
    plan p = {0};
    if (make_plan(c, &p)) {
        free(p.t);
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        return -1;
    }
    if (plan_quantize(c, &p, err)) {
        free(p.t);
        return -1;
    }
    gguf_writer *w = gguf_writer_create(path, err);
    int rc = -1;
    if (!w) goto out;
    if (write_metadata(w, c, err) || write_tokenizer(w, c, vocab, vocab_from, err)) goto out;
    for (size_t i = 0; i < p.n; i++)
        if (gguf_writer_add_tensor(w, p.t[i].name, p.t[i].type, p.t[i].n_dims, p.t[i].ne, err)) goto out;
    if (gguf_writer_begin_data(w, err) || stream_tensors(w, c, &p, err) || gguf_writer_finish(w, err)) goto out;
    rc = 0;
    if (stats) {
        memset(stats, 0, sizeof *stats);
        for (size_t i = 0; i < p.n; i++) {
            stats->params += plan_nel(&p.t[i]);
            stats->bytes += gguf_writer_tensor_nbytes(w, i);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        stats->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    }
out:
    gguf_writer_destroy(w);
    free(p.t);
    return rc;
}
