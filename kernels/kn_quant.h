/* Block-quantized weights on the device (issue 18): ggml's types repacked at load into
 * planes that suit wide loads, read by the quantized products (matvec_q.c, matmul_q.c)
 * and the embedding (embed_q.c) with the values decoded in registers.
 *
 * A weight's value is ggml's dequantized value, s * (code - offset) + m, with the f32
 * operations of ggml's dequantize_row_*: s = d (Q4_0..Q8_0: an f16 per block of 32) or
 * d * sc (K-quants: an f16 d per 256 times a sub-block's integer scale), m = m (Q4_1,
 * Q5_1: an f16) or -(dmin * mn) (Q2_K, Q4_K, Q5_K), none elsewhere. The products sum each
 * sub-block as s * sum((code - offset) * x) + m * sum(x): the same value up to the f32
 * rounding of the terms' order (the contract's "summation order"); the embedding computes
 * each value itself.
 *
 * The planes, over the matrix's elements in row-major order (element e = row * cols +
 * col), each starting on 256 bytes of one buffer of u32 words:
 *   lo  the codes' low lo_bits (2, 4 or 8), 32 / lo_bits codes a word, code e at bit
 *       (e * lo_bits) % 32 of word e * lo_bits / 32;
 *   hi  the codes' high hi_bits (1 or 2; none where 0), the same way;
 *   d   f16 bits, one per scale unit (a 32-element block; a K-quant's 256), two a word,
 *       the even unit in the low half;
 *   dm  the same for the min (Q4_1, Q5_1: m; K-quants: dmin), where the type has one;
 *   sc  K-quants: a sub-block's scale as a signed byte, four a word, the first lowest;
 *   mn  K-quants with mins: a sub-block's min as an unsigned byte, the same way. */
#ifndef KILN_KERNELS_KN_QUANT_H
#define KILN_KERNELS_KN_QUANT_H

#include "base/error.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum kn_qtype {
    KN_Q4_0, KN_Q4_1, KN_Q5_0, KN_Q5_1, KN_Q8_0, KN_Q2_K, KN_Q3_K, KN_Q4_K, KN_Q5_K, KN_Q6_K, KN_Q_COUNT
} kn_qtype;

typedef struct kn_qformat {
    const char *name;           /* ggml's: "Q4_K" */
    uint32_t sub;               /* elements sharing s and m: 16 or 32 */
    uint32_t unit;              /* elements sharing a d (and dm): 32, or a K-quant's 256 */
    uint32_t lo_bits, hi_bits;
    uint32_t offset;            /* the code's zero */
    bool k_quant;               /* s = d * sc, m = -(dm * mn) */
    bool has_min;
} kn_qformat;

const kn_qformat *kn_qformat_of(kn_qtype q);

/* Where each plane of a rows x cols matrix begins (in u32 words; 0 for a plane the type
 * lacks, whose kernels never read it) and the words in all. */
typedef struct kn_qlayout {
    kn_qtype type;
    uint32_t rows, cols;
    uint64_t lo, hi, d, dm, sc, mn, words;
} kn_qlayout;

/* A product's weight as parts of rows stacked (q, k and v in one product, each of its own
 * type), at most KN_Q_PARTS. */
#define KN_Q_PARTS 3
typedef struct kn_qpart {
    kn_qtype type;
    uint32_t rows;
} kn_qpart;

/* The layout, or -1 with err where cols is not whole units or the words pass u32 indices. */
int kn_qlayout_of(kn_qtype q, uint32_t rows, uint32_t cols, kn_qlayout *out, kiln_err *err);

#endif
