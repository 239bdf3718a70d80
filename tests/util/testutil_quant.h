/* Block-quantized matrices for the kernel tests: random blocks of ggml's types (finite,
 * small f16 fields, subnormals included), their exact dequantized values, and the planes
 * the device reads (plan_quant_pack). */
#ifndef KILN_TESTS_UTIL_TESTUTIL_QUANT_H
#define KILN_TESTS_UTIL_TESTUTIL_QUANT_H

#include "kernels/kn_quant.h"

#include <stdint.h>

/* ggml's type of each kn_qtype */
extern const uint32_t tu_qtypes[KN_Q_COUNT];

/* n_blocks random blocks of ggml type gt (malloc'ed), their f16 fields finite and small
 * (exponents 0, subnormal, to 6), either sign. */
uint8_t *tu_rand_blocks(uint32_t gt, uint64_t n_blocks);

typedef struct tu_qmat {
    kn_qlayout L;
    uint8_t *blocks;
    float *w;        /* the exact values, rows x cols */
    uint32_t *words; /* the planes */
} tu_qmat;

tu_qmat tu_qmat_make(kn_qtype q, uint32_t rows, uint32_t cols);
/* The same of the given blocks (malloc'ed, rows x cols of q's ggml type; the matrix owns them). */
tu_qmat tu_qmat_from_blocks(kn_qtype q, uint32_t rows, uint32_t cols, uint8_t *blocks);
void tu_qmat_free(tu_qmat *m);
/* The exact dot product of m's row r with x (f32 values), and its tolerance against a
 * kernel's: sub-blocks summed as s * sum(q x) + m * sum(x), each of the 2n + few terms
 * rounded once in f32: (3n + 8) 2^-24 sum|w x|. */
double tu_qref_dot(const tu_qmat *m, uint32_t r, const float *x, double *tol);

#endif
