#include "model/arch.h"

#include "base/error.h"

#include <stdio.h>
#include <string.h>

static const char *const names[ARCH_COUNT] = {"llama", "qwen2", "qwen3", "qwen35", "qwen3moe", "qwen35moe"};

const char *arch_name(arch_id a) { return a < ARCH_COUNT ? names[a] : "?"; }

int arch_from_name(const char *name) {
    for (int i = 0; i < ARCH_COUNT; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

int arch_get_u32(const gguf_file *g, const char *arch, const char *suffix, uint32_t *out, bool required,
                   kiln_err *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!gguf_find(g, key) && !required) return 0;
    int64_t v;
    if (gguf_get_int(g, key, &v, err)) return -1;
    if (v < 0 || v > UINT32_MAX) {
        kiln_fail(err, KILN_ERR_INVALID, "metadata key '%s' value %lld is out of range", key, (long long)v);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int get_f32(const gguf_file *g, const char *arch, const char *suffix, float *out, bool required,
                   kiln_err *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!gguf_find(g, key) && !required) return 0;
    double v;
    if (gguf_get_float(g, key, &v, err)) return -1;
    *out = (float)v;
    return 0;
}

static int positive(const char *what, uint32_t v, kiln_err *err) {
    if (v) return 0;
    kiln_fail(err, KILN_ERR_INVALID, "hyperparameter %s is zero", what);
    return -1;
}

/* expert_count, expert_used_count, expert_feed_forward_length: all required, 1 <= used <=
 * count <= ARCH_MAX_EXPERTS; qwen35moe's shared expert: expert_shared_feed_forward_length,
 * by default feed_forward_length as llama.cpp's loader has it (n_ff_shexp = n_ff). */
static int read_experts(const gguf_file *g, const char *arch, arch_hparams *hp, kiln_err *err) {
    if (arch_get_u32(g, arch, "expert_count", &hp->n_expert, true, err) ||
        arch_get_u32(g, arch, "expert_used_count", &hp->n_expert_used, true, err) ||
        arch_get_u32(g, arch, "expert_feed_forward_length", &hp->n_ff_exp, true, err))
        return -1;
    if (positive("expert_count", hp->n_expert, err) || positive("expert_used_count", hp->n_expert_used, err) ||
        positive("expert_feed_forward_length", hp->n_ff_exp, err))
        return -1;
    if (hp->n_expert > ARCH_MAX_EXPERTS || hp->n_expert_used > hp->n_expert)
        return kiln_fail(err, KILN_ERR_INVALID, "%s: %u experts with %u used a token (at most %u experts, used <= count)",
                         arch, hp->n_expert, hp->n_expert_used, ARCH_MAX_EXPERTS);
    if (hp->arch != ARCH_QWEN35MOE) return 0;
    hp->n_ff_shexp = hp->n_ff;
    if (arch_get_u32(g, arch, "expert_shared_feed_forward_length", &hp->n_ff_shexp, false, err)) return -1;
    return positive("expert_shared_feed_forward_length", hp->n_ff_shexp, err);
}

int arch_read_hparams(const gguf_file *g, arch_hparams *hp, kiln_err *err) {
    memset(hp, 0, sizeof *hp);
    gguf_str s;
    if (gguf_get_str(g, "general.architecture", &s, err)) return -1;
    char arch[64];
    snprintf(arch, sizeof arch, "%.*s", (int)(s.len < 63 ? s.len : 63), s.ptr);
    int a = arch_from_name(arch);
    if (a < 0) {
        kiln_fail(err, KILN_ERR_INVALID,
                  "architecture '%s' is not supported (kiln runs llama, qwen2, qwen3, qwen35, qwen3moe, qwen35moe)",
                  arch);
        return -1;
    }
    hp->arch = (arch_id)a;
    if (arch_get_u32(g, arch, "block_count", &hp->n_layer, true, err) ||
        arch_get_u32(g, arch, "embedding_length", &hp->n_embd, true, err) ||
        arch_get_u32(g, arch, "attention.head_count", &hp->n_head, true, err) ||
        arch_get_u32(g, arch, "feed_forward_length", &hp->n_ff, true, err) ||
        arch_get_u32(g, arch, "context_length", &hp->n_ctx_train, true, err))
        return -1;
    if (positive("block_count", hp->n_layer, err) || positive("embedding_length", hp->n_embd, err) ||
        positive("attention.head_count", hp->n_head, err) || positive("feed_forward_length", hp->n_ff, err))
        return -1;
    hp->n_head_kv = hp->n_head;
    if (arch_get_u32(g, arch, "attention.head_count_kv", &hp->n_head_kv, false, err)) return -1;
    if (positive("attention.head_count_kv", hp->n_head_kv, err)) return -1;
    if (hp->n_head % hp->n_head_kv) {
        kiln_fail(err, KILN_ERR_INVALID, "head_count %u is not a multiple of head_count_kv %u", hp->n_head,
                  hp->n_head_kv);
        return -1;
    }
    hp->head_dim_k = hp->head_dim_v = hp->n_embd / hp->n_head;
    if (arch_get_u32(g, arch, "attention.key_length", &hp->head_dim_k, false, err) ||
        arch_get_u32(g, arch, "attention.value_length", &hp->head_dim_v, false, err))
        return -1;
    if (positive("attention.key_length", hp->head_dim_k, err) ||
        positive("attention.value_length", hp->head_dim_v, err))
        return -1;
    hp->n_rot = hp->head_dim_k;
    if (arch_get_u32(g, arch, "rope.dimension_count", &hp->n_rot, false, err)) return -1;
    if (hp->n_rot > hp->head_dim_k || hp->n_rot % 2) {
        kiln_fail(err, KILN_ERR_INVALID, "rope.dimension_count %u is odd or exceeds the head size %u", hp->n_rot,
                  hp->head_dim_k);
        return -1;
    }
    hp->rope_base = 10000.0f;
    hp->rms_eps = 1e-5f;
    if (get_f32(g, arch, "rope.freq_base", &hp->rope_base, false, err) ||
        get_f32(g, arch, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, err))
        return -1;
    if (!(hp->rope_base > 0 && hp->rope_base < 1e30f) || !(hp->rms_eps > 0 && hp->rms_eps < 1)) {
        kiln_fail(err, KILN_ERR_INVALID, "rope.freq_base %g or layer_norm_rms_epsilon %g is out of range",
                  (double)hp->rope_base, (double)hp->rms_eps);
        return -1;
    }
    hp->rope_neox = hp->arch != ARCH_LLAMA;

    char key[160];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_find(g, key)) {
        if (gguf_get_str(g, key, &s, err)) return -1;
        if (gguf_str_eq(s, "none")) hp->rope_scaling = ROPE_SCALING_NONE;
        else if (gguf_str_eq(s, "linear")) hp->rope_scaling = ROPE_SCALING_LINEAR;
        else if (gguf_str_eq(s, "yarn")) hp->rope_scaling = ROPE_SCALING_YARN;
        else if (gguf_str_eq(s, "llama3")) hp->rope_scaling = ROPE_SCALING_LLAMA3;
        else {
            kiln_fail(err, KILN_ERR_INVALID, "rope scaling type '%.*s' is not supported",
                      (int)(s.len > 32 ? 32 : s.len), s.ptr);
            return -1;
        }
    }
    if (get_f32(g, arch, "rope.scaling.factor", &hp->rope_scale_factor, false, err) ||
        arch_get_u32(g, arch, "rope.scaling.original_context_length", &hp->rope_orig_ctx, false, err))
        return -1;
    hp->has_rope_freqs = gguf_find_tensor(g, "rope_freqs.weight") != NULL;
    if (hp->has_rope_freqs && hp->rope_scaling == ROPE_SCALING_NONE) hp->rope_scaling = ROPE_SCALING_LLAMA3;

    /* vocab: metadata, else the tokenizer's token list, else the embedding's rows */
    const gguf_array *toks;
    const gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
    if (arch_get_u32(g, arch, "vocab_size", &hp->n_vocab, false, err)) return -1;
    if (!hp->n_vocab && gguf_find(g, "tokenizer.ggml.tokens") &&
        gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STR, &toks, NULL) == 0 && toks->n <= UINT32_MAX)
        hp->n_vocab = (uint32_t)toks->n;
    if (!hp->n_vocab && emb && emb->ne[1] <= UINT32_MAX) hp->n_vocab = (uint32_t)emb->ne[1];
    if (positive("vocab size", hp->n_vocab, err)) return -1;
    hp->tied_output = gguf_find_tensor(g, "output.weight") == NULL;
    hp->qkv_bias = hp->arch == ARCH_QWEN2;
    hp->qk_norm = hp->arch == ARCH_QWEN3 || arch_is_qwen35(hp->arch) || hp->arch == ARCH_QWEN3MOE;
    if (arch_is_qwen35(hp->arch) && arch_read_qwen35(g, arch, hp, err)) return -1;
    if (hp->arch == ARCH_QWEN3MOE || hp->arch == ARCH_QWEN35MOE) return read_experts(g, arch, hp, err);
    return 0;
}
