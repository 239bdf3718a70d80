/* Architectures kiln runs and their hyperparameters, read from GGUF metadata with
 * llama.cpp's key names ("{arch}.block_count", ...). */
#ifndef KILN_MODEL_ARCH_H
#define KILN_MODEL_ARCH_H

#include "base/error.h"
#include "gguf/gguf.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum arch_id {
    ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_QWEN35, ARCH_QWEN3MOE, ARCH_QWEN35MOE, ARCH_COUNT
} arch_id;

#define ARCH_MAX_LAYERS 512  /* llama.cpp's LLAMA_MAX_LAYERS */
#define ARCH_MAX_EXPERTS 512 /* llama.cpp's LLAMA_MAX_EXPERTS */

typedef enum arch_rope_scaling { ROPE_SCALING_NONE, ROPE_SCALING_LINEAR, ROPE_SCALING_YARN,
                                 ROPE_SCALING_LLAMA3 } arch_rope_scaling;

typedef struct arch_hparams {
    arch_id arch;
    uint32_t n_layer, n_embd, n_head, n_head_kv, head_dim_k, head_dim_v, n_ff, n_vocab, n_ctx_train;
    uint32_t n_rot;          /* rope.dimension_count (defaults to head_dim) */
    float rope_base;
    bool rope_neox;          /* qwen2/qwen3 pair (i, i+d/2); llama pairs (2i, 2i+1) */
    arch_rope_scaling rope_scaling;
    float rope_scale_factor; /* 0 when none */
    uint32_t rope_orig_ctx;  /* rope.scaling.original_context_length, 0 when absent */
    bool has_rope_freqs;     /* a rope_freqs.weight tensor (llama3 scaling factors) */
    float rms_eps;
    bool tied_output;        /* no output.weight: logits use token_embd */
    bool qkv_bias;           /* qwen2 */
    bool qk_norm;            /* qwen3, qwen35, qwen3moe */

    /* a mixture of experts (qwen3moe, qwen35moe; 0 experts elsewhere): every layer's
     * feed-forward is n_expert SwiGLU experts of n_ff_exp, of which a router picks
     * n_expert_used a token (softmax over all, the top ones, their weights renormalised to
     * sum to 1); qwen35moe adds a shared expert (n_ff_shexp wide, every token's) whose
     * output is weighted by sigmoid(ffn_gate_inp_shexp . h) and added after the routed ones */
    uint32_t n_expert, n_expert_used, n_ff_exp;
    uint32_t n_ff_shexp; /* 0: no shared expert */

    /* qwen35 (Qwen3.5: Gated DeltaNet layers mixed with gated full-attention layers; see
     * model/arch_qwen35.c). n_layer counts the trunk only: block_count minus n_nextn. */
    uint32_t n_nextn;          /* nextn_predict_layers: multi-token-prediction blocks past the trunk (not run) */
    uint32_t ssm_conv_kernel;  /* ssm.conv_kernel: taps of the causal depthwise convolution */
    uint32_t ssm_state;        /* ssm.state_size: the k (and v) head size of a DeltaNet layer */
    uint32_t ssm_k_heads;      /* ssm.group_count */
    uint32_t ssm_v_heads;      /* ssm.time_step_rank; v head j reads k head j % ssm_k_heads */
    uint32_t ssm_inner;        /* ssm.inner_size = ssm_state * ssm_v_heads */
    uint32_t rope_sections[4]; /* rope.dimension_sections (IMROPE): t, h, w, e */
    uint32_t n_recurrent;      /* how many trunk layers are DeltaNet layers */
    bool recurrent[ARCH_MAX_LAYERS]; /* layer l is a DeltaNet layer (else full attention) */
} arch_hparams;

const char *arch_name(arch_id a);
/* Qwen3.5's hybrid trunk (qwen35, and qwen35moe with experts for its feed-forward). */
static inline bool arch_is_qwen35(arch_id a) { return a == ARCH_QWEN35 || a == ARCH_QWEN35MOE; }
int arch_from_name(const char *name); /* -1 if kiln does not run it */

/* Reads the architecture and every hyperparameter. On failure err names the missing or
 * wrong key (or the unsupported architecture). Tensors are consulted for the vocab size
 * (when the metadata lacks it) and for tied output. */
int arch_read_hparams(const gguf_file *g, arch_hparams *hp, kiln_err *err);

/* "{arch}.{suffix}" as a non-negative 32-bit integer into *out; a missing optional key
 * leaves *out alone. 0, or -1 with err naming the key (missing when required, not an
 * integer, out of range). */
int arch_get_u32(const gguf_file *g, const char *arch, const char *suffix, uint32_t *out, bool required,
                 kiln_err *err);

/* The qwen35 / qwen35moe keys (ssm.*, full_attention_interval or
 * attention.recurrent_layers, rope.dimension_sections, nextn_predict_layers) under the
 * prefix arch, read by arch_read_hparams after the common ones. */
int arch_read_qwen35(const gguf_file *g, const char *arch, arch_hparams *hp, kiln_err *err);

#endif
