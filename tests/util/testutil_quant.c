/* Block-quantized matrices for the kernel tests (testutil_quant.h). */
#include "tests/util/testutil_quant.h"

#include "base/error.h"
#include "gguf/gguf.h"
#include "gguf/half.h"
#include "plan/plan_quant.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

const uint32_t tu_qtypes[KN_Q_COUNT] = {
    [KN_Q4_0] = GGUF_T_Q4_0, [KN_Q4_1] = GGUF_T_Q4_1, [KN_Q5_0] = GGUF_T_Q5_0, [KN_Q5_1] = GGUF_T_Q5_1,
    [KN_Q8_0] = GGUF_T_Q8_0, [KN_Q2_K] = GGUF_T_Q2_K, [KN_Q3_K] = GGUF_T_Q3_K, [KN_Q4_K] = GGUF_T_Q4_K,
    [KN_Q5_K] = GGUF_T_Q5_K, [KN_Q6_K] = GGUF_T_Q6_K};

/* Where each type keeps its f16 fields (d, and dm/dmin where it has one). */
static void f16_fields(uint32_t gt, int *at, int *n) {
    switch (gt) {
    case GGUF_T_Q4_1: case GGUF_T_Q5_1: case GGUF_T_Q4_K: case GGUF_T_Q5_K: at[0] = 0, at[1] = 2, *n = 2; return;
    case GGUF_T_Q2_K: at[0] = 80, at[1] = 82, *n = 2; return;
    case GGUF_T_Q3_K: at[0] = 108, *n = 1; return;
    case GGUF_T_Q6_K: at[0] = 208, *n = 1; return;
    default: at[0] = 0, *n = 1; return;
    }
}

/* Random blocks whose f16 fields are finite and small (exponents 0, subnormal, to 6: a
 * K-quant's d * sc * code stays near 1, so f16 sums do not overflow), either sign. */
uint8_t *tu_rand_blocks(uint32_t gt, uint64_t n_blocks) {
    const gguf_type_info *ti = gguf_type_info_of(gt);
    uint8_t *b = malloc(n_blocks * ti->block_bytes);
    for (uint64_t i = 0; i < n_blocks * ti->block_bytes; i++) b[i] = (uint8_t)tu_rnd32();
    int at[2], nf;
    f16_fields(gt, at, &nf);
    for (uint64_t i = 0; i < n_blocks; i++)
        for (int f = 0; f < nf; f++) {
            uint32_t r = tu_rnd32(), ex = r % 7, bits = (r >> 4 & 0x8000) | ex << 10 | (r >> 8 & 0x3ff);
            uint8_t *p = b + i * ti->block_bytes + at[f];
            p[0] = (uint8_t)bits, p[1] = (uint8_t)(bits >> 8);
        }
    return b;
}

tu_qmat tu_qmat_make(kn_qtype q, uint32_t rows, uint32_t cols) {
    const gguf_type_info *ti = gguf_type_info_of(tu_qtypes[q]);
    return tu_qmat_from_blocks(q, rows, cols, tu_rand_blocks(tu_qtypes[q], (uint64_t)rows * cols / ti->block));
}

tu_qmat tu_qmat_from_blocks(kn_qtype q, uint32_t rows, uint32_t cols, uint8_t *blocks) {
    tu_qmat m;
    kiln_err err = {0};
    uint32_t gt = tu_qtypes[q];
    cr_assert_eq(kn_qlayout_of(q, rows, cols, &m.L, &err), 0, "%s", err.msg);
    uint64_t n = (uint64_t)rows * cols;
    m.blocks = blocks;
    m.w = malloc(n * 4);
    cr_assert_eq(gguf_decode_f32(gt, m.blocks, m.w, n), 0);
    m.words = calloc(m.L.words, 4);
    gguf_tensor t = {.name = "w", .n_dims = 2, .ne = {cols, rows, 1, 1}, .type = gt, .data = m.blocks};
    cr_assert_eq(plan_quant_pack(&t, 0, rows, &m.L, 0, m.words, &err), 0, "%s", err.msg);
    return m;
}

void tu_qmat_free(tu_qmat *m) { free(m->blocks), free(m->w), free(m->words); }

/* The exact dot product of w's row r with x (f32 values), and its tolerance. */
double tu_qref_dot(const tu_qmat *m, uint32_t r, const float *x, double *tol) {
    double s = 0, mag = 0;
    for (uint32_t c = 0; c < m->L.cols; c++) {
        double p = (double)m->w[(size_t)r * m->L.cols + c] * x[c];
        s += p, mag += fabs(p);
    }
    *tol = (3.0 * m->L.cols + 8) * ldexp(1.0, -24) * mag;
    return s;
}

