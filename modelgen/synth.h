/* `kiln synth`: models with random weights and exactly llama.cpp's tensor names, shapes
 * and metadata keys, so one file runs in kiln and in llama.cpp. Weights are streamed
 * to disk as they are drawn; the same seed gives the same file on any machine and any
 * number of threads. */
#ifndef KILN_MODELGEN_SYNTH_H
#define KILN_MODELGEN_SYNTH_H

#include "base/error.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "modelgen/quant_mix.h"
#include "modelgen/vocab.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct synth_config {
    const char *name;       /* general.name */
    arch_id arch;
    uint32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    bool tied;              /* no output.weight */
    float rope_base, rms_eps;
    bool llama3_rope;       /* write rope_freqs.weight as Llama 3.x's converter does */
    float rope_factor, rope_low_freq, rope_high_freq;
    uint32_t rope_orig_ctx;
    /* qwen35 (Qwen3.5): n_head, n_head_kv and head_dim describe the gated full-attention
     * layers (attn_q holds the query and its gate: 2 x n_head x head_dim rows); every
     * full_attn_interval-th layer is one, the rest are Gated DeltaNet layers. */
    uint32_t full_attn_interval;
    uint32_t ssm_conv_kernel, ssm_state, ssm_k_heads, ssm_v_heads; /* state = k and v head size */
    uint32_t n_rot;            /* rope.dimension_count (partial rotary); 0 for the other archs */
    /* qwen3moe, qwen35moe: every layer's feed-forward is n_expert SwiGLU experts of n_ff_exp
     * (a router, ffn_gate_inp, picks n_expert_used a token); n_ff is only the key llama.cpp
     * writes; qwen35moe adds a shared expert of n_ff_shexp with its sigmoid gate */
    uint32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    uint32_t rope_sections[4]; /* rope.dimension_sections (IMROPE t, h, w, e), summing to n_rot / 2 */
    uint32_t dtype;         /* GGUF_T_BF16 or GGUF_T_F16 for matrices; 1-D tensors stay F32 */
    /* A mix (quant_mix.h; ftype 0 = none): the matrices take the types llama-quantize gives
     * this model, quantized from the values the dtype file holds (each drawn in f32, rounded
     * to dtype), so the file is what llama-quantize writes from the dtype one. */
    quant_mix quant;
    uint64_t seed;
    int threads;            /* 0 = one per core */
} synth_config;

extern const char *const synth_preset_names[]; /* NULL-terminated */

/* Fills c from a preset; -1 if the name is unknown. */
int synth_preset(const char *name, synth_config *c);
/* qwen35: n_rot and rope_sections from head_dim as Qwen3.5 has them: partial rotary
 * factor 0.25 (n_rot = head_dim / 4, rounded down to even) and the pairs split t, h, w
 * as evenly as they go, t and h taking the remainder first (256 gives 64 and [11, 11, 10, 0],
 * the published mrope_section). */
void synth_qwen35_rope(synth_config *c);
/* qwen35: layer l is a Gated DeltaNet layer (else full attention); false for other archs. */
bool synth_layer_recurrent(const synth_config *c, uint32_t l);
/* Checks the sizes are consistent (e.g. heads divisible by kv heads); message in err.
 * A quantization that leaves some tensor no type (rows llama-quantize refuses) is
 * found by synth_write, before it creates the file. */
int synth_check(const synth_config *c, kiln_err *err);
/* Writes the model. The tokenizer is vocab (n_tokens must equal c->n_vocab) or, when
 * vocab_from is given, the tokenizer.* keys of that file. */
typedef struct synth_stats { uint64_t bytes, params; double seconds; } synth_stats;
int synth_write(const synth_config *c, const tok_vocab *vocab, const gguf_file *vocab_from, const char *path,
                synth_stats *stats, kiln_err *err);

#endif
