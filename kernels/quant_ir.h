/* Decoding block-quantized weights (kn_quant.h's planes) inside a kernel: what the
 * quantized products and the embedding share (quant.c). */
#ifndef KILN_KERNELS_QUANT_IR_H
#define KILN_KERNELS_QUANT_IR_H

#include "kernels/kn_expr.h"
#include "kernels/kn_quant.h"

#define KN_Q_CHUNK 32 /* elements a lane decodes at once: whole sub-blocks */

/* The f32 value of the f16 bits in the low half of a u32 (exact: subnormals by integer
 * arithmetic, infinities and NaNs kept). */
ir_val kn_q_f16_bits(kx k, ir_val bits);
/* The codes of the chunk of KN_Q_CHUNK elements from element e0 (a multiple of
 * KN_Q_CHUNK) of W, each as the f32 (code - offset): q[0 .. KN_Q_CHUNK). */
void kn_q_chunk(kx k, const kn_qlayout *L, ir_buf w, ir_val e0, ir_val *q);
/* kn_q_chunk in two steps (the loads first, so many are in flight): the planes' words of
 * the chunk, then the codes from them. */
typedef struct kn_q_words {
    ir_val lo[8], hi[2];
} kn_q_words;
void kn_q_codes_load(kx k, const kn_qlayout *L, ir_buf w, ir_val e0, kn_q_words *c);
void kn_q_codes_decode(kx k, const kn_qlayout *L, const kn_q_words *c, ir_val *q);
/* The scale s and min m (IR_NONE where the type has none) of sub-block si (element e0 / sub). */
void kn_q_sub_scale(kx k, const kn_qlayout *L, ir_buf w, ir_val si, ir_val *s, ir_val *m);
/* kn_q_sub_scale in two steps, so the loads can be issued well before their values are
 * used: the words holding sub-block si's d, dm, sc and mn (IR_NONE where the type has no
 * such plane), then s and m from them. */
#define KN_Q_SCALE_WORDS 4
void kn_q_scale_load(kx k, const kn_qlayout *L, ir_buf w, ir_val si, ir_val raw[KN_Q_SCALE_WORDS]);
/* The indices of those words in the buffer (IR_NONE where the type has no such plane). */
void kn_q_scale_words(kx k, const kn_qlayout *L, ir_val si, ir_val at[KN_Q_SCALE_WORDS]);
void kn_q_scale_decode(kx k, const kn_qlayout *L, ir_val si, const ir_val raw[KN_Q_SCALE_WORDS], ir_val *s, ir_val *m);

/* x[c0 .. c0 + KN_Q_CHUNK) as f32 (matvec_q.c): from workgroup array hx where it is not
 * UINT32_MAX (a normalized row's f32 values), else from x in 4-element loads. */
void kn_q_x_chunk(kx k, ir_buf x, uint32_t hx, ir_val c0, ir_val *xv);
/* A row the lanes walk together with the others of their subgroup: its weight's layout
 * and buffer and its index there. */
typedef struct kn_q_row {
    const kn_qlayout *L;
    ir_buf w;
    ir_val row;
} kn_q_row;
#define KN_Q_MAX_ROWS 8 /* rows one walk takes at most */
/* This lane's parts of the n rows' dot products with x (as kn_q_x_chunk reads it): chunks
 * lane, lane + lanes, ..., the whole steps of lanes * unroll chunks unrolled, the rest one
 * at a time (matvec_q.c; the lanes' parts still to be summed). */
void kn_q_rows_dot(kx k, const kn_q_row *r, uint32_t n, ir_buf x, uint32_t hx, ir_val lane, uint32_t lanes,
                   uint32_t unroll, ir_val *acc);
/* fn's n values (at most KN_Q_PART_VALS) for row of the parts stacked (L[0]'s rows first,
 * then the next part's, row made the part's own): a branch per part, uniform where a
 * row's lanes or a tile's items share a part. */
#define KN_Q_PART_VALS 40
typedef void (*kn_q_part_fn)(kx k, const kn_qlayout *L, ir_buf w, ir_val row, ir_val col, uint32_t cols,
                             ir_val *out);
void kn_q_parts_values(kx k, const kn_qlayout *L, const ir_buf *w, uint32_t n_parts, ir_val row, ir_val col,
                       uint32_t cols, kn_q_part_fn fn, uint32_t n, ir_val *out);
/* The layouts of a product's parts (checked: 1 to KN_Q_PARTS, or with swi the two of
 * SwiGLU, of equal rows) and the rows it produces. 0, or -1 with err naming who. */
int kn_q_part_layouts(const char *who, const kn_qpart *parts, uint32_t n_parts, uint32_t cols, bool swi,
                      kn_qlayout *L, uint32_t *rows, kiln_err *err);

#endif
