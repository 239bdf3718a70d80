/* Quantization mixes: which type each tensor of a model gets under a name llama-quantize
 * takes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_M, Q4_K_M, Q5_K_M, Q6_K; Q3_K, Q4_K and
 * Q5_K are its aliases of the _M mixes), following llama.cpp's llama_tensor_get_type
 * (src/llama-quant.cpp, 34af94cd) without an importance matrix, so a model kiln writes
 * quantized has the per-tensor types llama-quantize gives the same model. */
#ifndef KILN_MODELGEN_QUANT_MIX_H
#define KILN_MODELGEN_QUANT_MIX_H

#include "base/error.h"
#include "model/arch.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct quant_mix {
    const char *name; /* canonical: "Q4_K_M" for "q4_k" too */
    uint32_t ftype;   /* general.file_type: llama.cpp's LLAMA_FTYPE_MOSTLY_* (7 Q8_0, 15 Q4_K_M, ...); 0 = none */
    uint32_t base;    /* the type of most matrices (gguf_ttype) */
} quant_mix;

/* "Q4_0 | Q4_1 | ... | Q5_K_M", for usage text. */
extern const char quant_mix_list[];

/* The mix a name (case-insensitive) stands for; -1 with err listing the names. */
int quant_mix_parse(const char *name, quant_mix *out, kiln_err *err);

/* What the per-tensor rules look at. */
typedef struct quant_model {
    arch_id arch;
    uint32_t n_layer, n_head, n_head_kv;
    bool tied; /* no output.weight: token_embd is the output too */
} quant_model;

/* The type the mix gives a tensor of ne0 x ne1 (ne0 the row length, ne1 the product of
 * the other dimensions) stored as src_type before quantization: src_type for what
 * llama.cpp leaves alone (1-D tensors, norms, ssm_conv1d), else the mix's choice for the
 * tensor's role and layer (blk.N. in the name), moved to a type whose block divides the
 * row when the chosen one's does not (F16 when none does). -1 with err where llama.cpp
 * refuses too: a row that no type of the mix fits (Q4_0..Q8_0 need rows of 32s). */
int quant_mix_type(const quant_mix *mix, const quant_model *m, const char *name, uint64_t ne0, uint64_t ne1,
                   uint32_t src_type, uint32_t *type, kiln_err *err);

#endif
