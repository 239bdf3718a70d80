/* The CPU oracle: an independent, readable forward pass (plain loops, f32 accumulation)
 * that every GPU result is measured against. It implements the engine interface.
 *
 * Modes (docs/ARCHITECTURE.md, "The numerical contract"):
 *   contract: weights in the 16-bit type (bf16 or f16), block-quantized ones (Q4_0..Q8_0,
 *             Q2_K..Q6_K: gguf_type_is_block_quant) at their exact dequantized values as
 *             the device plans keep them, and every activation a GPU plan
 *             stores between kernels rounded to that type at the same points (listed in
 *             forward.c); the KV cache holds 16-bit values. Contract oracle vs a GPU
 *             backend then differs by summation order only.
 *   f32:      nothing is rounded: weights as the file holds them widened to f32
 *             (quantized ones decoded to f32), activations and KV cache in f32. */
#ifndef KILN_ORACLE_ORACLE_H
#define KILN_ORACLE_ORACLE_H

#include "base/error.h"
#include "model/engine.h"
#include "model/model.h"

typedef enum orc_mode { ORC_CONTRACT, ORC_F32 } orc_mode;

typedef struct orc_options {
    orc_mode mode;
    uint32_t dtype;  /* GGUF_T_BF16 or GGUF_T_F16 for contract mode; 0 = the file's (bf16 for F32/quantized) */
    uint32_t n_ctx;  /* 0 = min(the model's context, 4096) */
    int threads;     /* 0 = one per core */
} orc_options;

/* The model must outlive the engine. NULL with err (out of memory, bad options). */
engine *orc_create(const model *m, const orc_options *o, kiln_err *err);

const char *orc_mode_name(orc_mode m);

/* Positions an oracle has re-evaluated to rewind a recurrent (qwen35) state, since it
 * was made: an eval before the state's end replays from the latest snapshot at or before
 * it, else from position 0 (forward.c). 0 for other engines. */
uint64_t orc_replayed_positions(const engine *e);

#endif
