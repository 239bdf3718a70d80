/* Weights as the oracle holds them: rows of f32, bf16 or f16, either borrowed from the
 * file's mapping (when it already has the wanted type) or converted once at load; or,
 * for a block-quantized type (gguf_type_is_block_quant), the file's blocks, each row
 * decoded to its exact f32 values where it is used. */
#ifndef KILN_ORACLE_WEIGHTS_H
#define KILN_ORACLE_WEIGHTS_H

#include "base/error.h"
#include "gguf/gguf.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct orc_weight {
    uint32_t type;      /* GGUF_T_F32, GGUF_T_BF16, GGUF_T_F16 or a block-quantized type */
    uint64_t cols, rows; /* ne[0], ne[1] */
    uint64_t row_bytes; /* bytes of one row of blocks (a quantized type) */
    const void *data;
    void *owned;        /* non-NULL when converted (freed with the weight) */
} orc_weight;

/* Makes w hold t in type want (F32, BF16 or F16). Borrows when t already has that type
 * or, for want == F32, when t is BF16/F16 (widening is exact: dots widen as they go).
 * With keep (a block-quantized t the device plans keep in its blocks: model.h's q_*
 * flags) t is borrowed as it is whatever want is: its exact values are the contract's. */
int orc_weight_load(orc_weight *w, const gguf_tensor *t, uint32_t want, bool keep, kiln_err *err);
void orc_weight_free(orc_weight *w);

/* Row r as f32. */
void orc_weight_row(const orc_weight *w, uint64_t r, float *out);
/* Dot of row r with x[cols], accumulated in f32. */
float orc_weight_dot(const orc_weight *w, uint64_t r, const float *x);

#endif
