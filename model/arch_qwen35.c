/* Qwen3.5's hyperparameters (llama.cpp's `qwen35`, src/models/qwen35.cpp): a stack of
 * Gated DeltaNet layers (linear attention, a recurrent state per value head) with a gated
 * full-attention layer every full_attention_interval-th layer, or wherever the per-layer
 * attention.recurrent_layers says. block_count counts nextn_predict_layers
 * multi-token-prediction blocks past the trunk as well; kiln runs the trunk only and
 * never reads those blocks. */
#include "base/error.h"
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

static int key_name(char *key, size_t n, const char *arch, const char *suffix) {
    return snprintf(key, n, "%s.%s", arch, suffix);
}

/* An optional (or required) non-negative integer key. */
static int read_u32(const gguf_file *g, const char *arch, const char *suffix, uint32_t *out, bool required,
                    kiln_err *err) {
    return arch_get_u32(g, arch, suffix, out, required, err);
}

/* Element i of an integer or bool array as a non-negative integer; -1 (with err) else. */
static int arr_u32(const char *key, const gguf_array *a, uint64_t i, uint32_t *out, kiln_err *err) {
    gguf_value v = gguf_arr_at(a, i);
    int64_t x;
    switch (v.type) {
    case GGUF_VT_U8: case GGUF_VT_U16: case GGUF_VT_U32: case GGUF_VT_U64:
        x = v.v.u > INT64_MAX ? -1 : (int64_t)v.v.u;
        break;
    case GGUF_VT_I8: case GGUF_VT_I16: case GGUF_VT_I32: case GGUF_VT_I64: x = v.v.i; break;
    case GGUF_VT_BOOL: x = v.v.b; break;
    default:
        kiln_fail(err, KILN_ERR_INVALID, "metadata key '%s' is an array of %s, expected integers", key,
                  gguf_vtype_name(v.type));
        return -1;
    }
    if (x < 0 || x > UINT32_MAX) {
        kiln_fail(err, KILN_ERR_INVALID, "metadata key '%s' element %llu is out of range", key,
                  (unsigned long long)i);
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}

/* llama.cpp's get_key_or_arr: a scalar given for all n entries, or an array of exactly n. */
static int read_scalar_or_array(const gguf_file *g, const char *arch, const char *suffix, uint32_t *out, uint32_t n,
                                kiln_err *err) {
    char key[96];
    key_name(key, sizeof key, arch, suffix);
    const gguf_value *v = gguf_find(g, key);
    if (v && v->type != GGUF_VT_ARR) {
        uint32_t x = 0;
        if (read_u32(g, arch, suffix, &x, true, err)) return -1;
        for (uint32_t i = 0; i < n; i++) out[i] = x;
        return 0;
    }
    const gguf_array *a;
    if (gguf_get_arr(g, key, GGUF_VT_COUNT, &a, err)) return -1;
    if (a->n != n) {
        kiln_fail(err, KILN_ERR_INVALID, "metadata key '%s' has %llu elements, expected %u", key,
                  (unsigned long long)a->n, n);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        if (arr_u32(key, a, i, &out[i], err)) return -1;
    return 0;
}

static int bad(kiln_err *err, const char *what) {
    kiln_fail(err, KILN_ERR_INVALID, "qwen35: %s", what);
    return -1;
}

int arch_read_qwen35(const gguf_file *g, const char *arch, arch_hparams *hp, kiln_err *err) {
    uint32_t n_all = hp->n_layer; /* block_count: trunk plus nextn blocks */
    if (read_u32(g, arch, "ssm.conv_kernel", &hp->ssm_conv_kernel, true, err) ||
        read_u32(g, arch, "ssm.inner_size", &hp->ssm_inner, true, err) ||
        read_u32(g, arch, "ssm.state_size", &hp->ssm_state, true, err) ||
        read_u32(g, arch, "ssm.time_step_rank", &hp->ssm_v_heads, true, err) ||
        read_u32(g, arch, "ssm.group_count", &hp->ssm_k_heads, true, err) ||
        read_u32(g, arch, "nextn_predict_layers", &hp->n_nextn, false, err))
        return -1;
    char msg[160];
    if (!hp->ssm_conv_kernel || !hp->ssm_state || !hp->ssm_v_heads || !hp->ssm_k_heads)
        return bad(err, "ssm.conv_kernel, ssm.state_size, ssm.time_step_rank and ssm.group_count must be positive");
    if (hp->ssm_v_heads % hp->ssm_k_heads) {
        snprintf(msg, sizeof msg, "ssm.time_step_rank %u (value heads) is not a multiple of ssm.group_count %u",
                 hp->ssm_v_heads, hp->ssm_k_heads);
        return bad(err, msg);
    }
    if ((uint64_t)hp->ssm_state * hp->ssm_v_heads != hp->ssm_inner) {
        snprintf(msg, sizeof msg, "ssm.inner_size %u is not ssm.state_size %u x ssm.time_step_rank %u", hp->ssm_inner,
                 hp->ssm_state, hp->ssm_v_heads);
        return bad(err, msg);
    }
    if (hp->n_nextn >= n_all) {
        snprintf(msg, sizeof msg, "nextn_predict_layers %u leaves no trunk of the %u blocks", hp->n_nextn, n_all);
        return bad(err, msg);
    }
    if (n_all > ARCH_MAX_LAYERS) {
        snprintf(msg, sizeof msg, "block_count %u exceeds %u", n_all, ARCH_MAX_LAYERS);
        return bad(err, msg);
    }
    if (hp->head_dim_k != hp->head_dim_v) {
        snprintf(msg, sizeof msg, "attention key_length %u differs from value_length %u", hp->head_dim_k,
                 hp->head_dim_v);
        return bad(err, msg);
    }
    hp->n_layer = n_all - hp->n_nextn;

    /* which layers are DeltaNet layers */
    char key[96];
    key_name(key, sizeof key, arch, "attention.recurrent_layers");
    if (gguf_find(g, key)) {
        uint32_t k[ARCH_MAX_LAYERS];
        if (read_scalar_or_array(g, arch, "attention.recurrent_layers", k, n_all, err)) return -1;
        for (uint32_t l = 0; l < hp->n_layer; l++) hp->recurrent[l] = k[l] != 0;
    } else {
        uint32_t interval = 4;
        if (read_u32(g, arch, "full_attention_interval", &interval, false, err)) return -1;
        if (!interval) return bad(err, "full_attention_interval is zero");
        for (uint32_t l = 0; l < hp->n_layer; l++) hp->recurrent[l] = (l + 1) % interval != 0;
    }
    hp->n_recurrent = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) hp->n_recurrent += hp->recurrent[l];

    /* rope: IMROPE over rope.dimension_count dims, pairs (i, i + n_rot/2) as neox */
    uint32_t sec[4];
    if (read_scalar_or_array(g, arch, "rope.dimension_sections", sec, 4, err)) return -1;
    uint64_t sum = (uint64_t)sec[0] + sec[1] + sec[2] + sec[3];
    if (!sec[0] && !sec[1] && !sec[2]) return bad(err, "rope.dimension_sections gives no t, h or w section");
    if (sum > hp->head_dim_k) {
        snprintf(msg, sizeof msg, "rope.dimension_sections sum to %llu, more than the head size %u",
                 (unsigned long long)sum, hp->head_dim_k);
        return bad(err, msg);
    }
    memcpy(hp->rope_sections, sec, sizeof sec);
    hp->rope_neox = true;
    if (hp->rope_scaling != ROPE_SCALING_NONE || hp->has_rope_freqs)
        return bad(err, "rope scaling (or rope_freqs) is not supported with IMROPE");
    return 0;
}
