/* What the 16-bit and the quantized matrix-vector products share (matvec.c). */
#ifndef KILN_KERNELS_MATVEC_INTERNAL_H
#define KILN_KERNELS_MATVEC_INTERNAL_H

#include "kernels/kn_expr.h"

/* The row's result, stored by one invocation: the epilogue applied to the dot product(s)
 * (SWIGLU: silu(round(sum)) * round(up); an f32 output: the sum, KN_EPI_FAULT's error
 * planted; else kn_epilogue). */
void kn_mv_store_row(kx k, unsigned epi, ir_buf y, ir_buf b, ir_buf res, ir_val row, ir_val sum, ir_val up,
                     ir_scalar dtype, ir_scalar out);
/* The RMSNorm of x into workgroup memory, every workgroup its own copy: hx[c] = round((x[c]
 * * scale) * wn[c]) as f32 values, with kn_rmsnorm's sums. Barriers: uniform control flow.
 * Returns the workgroup array. */
uint32_t kn_mv_norm_prologue(kx k, uint32_t wg, ir_buf x, ir_buf wn, uint32_t cols, ir_scalar dtype, float eps);

#endif
