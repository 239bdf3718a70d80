/* Architectures kiln runs and their hyperparameters, read from GGUF metadata with
 * llama.cpp's key names ("{arch}.block_count", ...). */
#ifndef KILN_MODEL_ARCH_H
#define KILN_MODEL_ARCH_H

#include "base/error.h"
#include "gguf/gguf.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum arch_id { ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_COUNT } arch_id;

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
    bool qk_norm;            /* qwen3 */
} arch_hparams;

const char *arch_name(arch_id a);
int arch_from_name(const char *name); /* -1 if kiln does not run it */

/* Reads the architecture and every hyperparameter. On failure err names the missing or
 * wrong key (or the unsupported architecture). Tensors are consulted for the vocab size
 * (when the metadata lacks it) and for tied output. */
int arch_read_hparams(const gguf_file *g, arch_hparams *hp, kiln_err *err);

#endif
