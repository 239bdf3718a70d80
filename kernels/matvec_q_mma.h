/* kn_matvec_q on the matrix units (matvec_q_mma.c): chosen by kn_matvec_q (matvec_q.c)
 * where the device and every part fit. */
#ifndef KILN_KERNELS_MATVEC_Q_MMA_H
#define KILN_KERNELS_MATVEC_Q_MMA_H

#include "kernels/kn_expr.h"
#include "kernels/kn_quant.h"

#include <stdbool.h>

typedef struct mvq_mma_cfg {
    uint32_t warps;  /* subgroups a workgroup (they split each row's passes) */
    uint32_t unroll; /* passes a subgroup loads at once */
    uint32_t xs_sub; /* the sub-block of the sums of x (the finest any part needs), 0 for none */
    uint32_t occupancy; /* workgroups a compute unit should hold (the registers' bound), 0: any */
    uint32_t chains;    /* independent accumulators a tile's pass deals its products round */
    bool fold; /* the magic float's offset taken off each sub-block's sum, not off each code pair */
    uint32_t stream; /* the streamed form's ring of passes (0: the direct form) */
    uint32_t per_cu; /* the streamed form's workgroups a compute unit */
} mvq_mma_cfg;

/* The product's parameters, declared by kn_matvec_q: the parts' layouts and buffers (or
 * SwiGLU's gate L[0] / w[0] and up L[1] / wu), x, y and the epilogue's. */
typedef struct mvq_mma_args {
    const kn_qlayout *L;
    const ir_buf *w;
    uint32_t n_parts, cols;
    ir_buf x, y, b, res, wu, wn;
    ir_scalar dtype, out;
    unsigned epi;
    bool swi, norm;
    float eps;
} mvq_mma_args;

/* Whether the mma form takes this product (CUDA, 16x8x16 fragments of dt; every part's
 * codes held exactly by dt's magic float, one code width, rows whole groups of 16, cols
 * whole passes; workgroup memory enough), and its shape (KILN_MATVEC_Q_MMA=0 turns it
 * off, =warps,unroll[,occupancy[,chains]] sets the shape for measuring; KILN_MATVEC_Q_FOLD=0
 * keeps the per-pair subtraction in bf16; KILN_MATVEC_Q_STREAM=depth[,per_cu] asks for the
 * streamed form where the product is one part or SwiGLU's pair). */
bool kn_matvec_q_mma_pick(const rt_caps *c, const kn_qlayout *L, uint32_t n_parts, bool swi, bool norm,
                          ir_scalar dt, uint32_t cols, mvq_mma_cfg *out);
/* The kernel's body after its parameters, for kn_matvec_q_mma_groups workgroups. */
void kn_matvec_q_mma_body(kx k, const mvq_mma_cfg *g, const mvq_mma_args *a);
/* Its grid: rows / 16 workgroups, or the streamed form's compute units x per_cu (at most
 * that). */
uint32_t kn_matvec_q_mma_groups(const rt_caps *c, const mvq_mma_cfg *g, uint32_t rows);

#endif
