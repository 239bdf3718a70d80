/* A model as the engines see it: hyperparameters plus a view of every weight tensor,
 * checked for presence and shape against llama.cpp's names before anything runs. */
#ifndef KILN_MODEL_MODEL_H
#define KILN_MODEL_MODEL_H

#include "base/error.h"
#include "gguf/gguf.h"
#include "model/arch.h"

typedef struct model_layer {
    /* attention (a qwen35 full-attention layer's wq is 2x wide: per head the query, then
     * its output gate); all NULL in a qwen35 DeltaNet layer */
    const gguf_tensor *attn_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv, *q_norm, *k_norm;
    /* the FFN; qwen35 names its norm post_attention_norm */
    const gguf_tensor *ffn_norm, *w_gate, *w_up, *w_down;
    /* a mixture of experts' feed-forward (qwen3moe; NULL elsewhere): the router
     * (ffn_gate_inp, [n_embd, n_expert]) and the experts' gate, up ([n_embd, n_ff_exp,
     * n_expert]) and down ([n_ff_exp, n_embd, n_expert]) */
    const gguf_tensor *ffn_gate_inp, *ffn_gate_exps, *ffn_up_exps, *ffn_down_exps;
    /* qwen35moe's shared expert: its gate's row (ffn_gate_inp_shexp, [n_embd]) and its
     * SwiGLU matrices (ffn_{gate,up}_shexp [n_embd, n_ff_shexp], ffn_down_shexp) */
    const gguf_tensor *ffn_gate_inp_shexp, *ffn_gate_shexp, *ffn_up_shexp, *ffn_down_shexp;
    /* a qwen35 Gated DeltaNet layer (NULL elsewhere): attn_qkv, attn_gate (z), ssm_conv1d,
     * ssm_dt.bias, ssm_a, ssm_beta, ssm_alpha, ssm_norm, ssm_out */
    const gguf_tensor *ssm_qkv, *ssm_z, *ssm_conv, *ssm_dt_bias, *ssm_a, *ssm_beta, *ssm_alpha, *ssm_norm, *ssm_out;
    /* which products take their weights in their quantized blocks (model_quant_groups):
     * q/k/v, the output, gate and up, down, a DeltaNet layer's output (ssm_out), the
     * experts' gate, up and down (all three, or none; with a shared expert only where its
     * matrices have the experts' types, as the plan stacks it after them) */
    bool q_qkv, q_o, q_ffn, q_down, q_dn_out, q_exps;
} model_layer;

typedef struct model {
    gguf_file *file;      /* owned */
    arch_hparams hp;
    const gguf_tensor *tok_embd, *output_norm, *output, *rope_freqs; /* output == tok_embd when tied */
    model_layer *layers;  /* hp.n_layer */
    uint32_t file_dtype;  /* GGUF_T_BF16 or GGUF_T_F16 when the matrices are stored so, else GGUF_T_F32 */
    /* The embedding table and the logits head in their quantized blocks (as q_* above).
     * A product's weights stay in their blocks (gguf_type_is_block_quant) where all of them
     * are so and the architecture's kernels take them (llama, qwen2, qwen3; qwen35's all but
     * the gated q/k/v and the DeltaNet input products, whose weights the plan stacks in 16
     * bits); elsewhere they are converted to the plan's 16-bit type at load, and the
     * oracle's contract mode rounds them the same way. n_converted counts the matrices of
     * block-quantized types converted so. */
    bool q_embd, q_output;
    uint32_t n_converted;
} model;

/* Opens and validates the file; NULL with err naming the file's problem, the missing
 * key or the missing / misshapen tensor. */
model *model_load(const char *path, kiln_err *err);
void model_free(model *m);

/* Expert e's matrix of a kind (0 gate, 1 up, 2 down) in layer L: the tensor and the row
 * its rows start at. e == n_expert names the shared expert (qwen35moe; NULL where there is
 * none), whose own 2-D tensor the plan treats as one more expert. */
const gguf_tensor *model_expert_matrix(const model_layer *L, int kind, uint32_t e, uint64_t *row0);

/* Whether t is one of the model's weights kept in its quantized blocks (the q_* flags). */
bool model_keeps_blocks(const model *m, const gguf_tensor *t);

/* The model's Jinja chat template (tokenizer.chat_template) as a malloc'ed C string, or
 * NULL when it has none (or out of memory). */
char *model_chat_template(const model *m);

#endif
