/* The prefill projections on block-quantized weights as matmul.c's tiled kernel: each
 * chunk of W is decoded into workgroup memory as its exact f32 values (s * (code - offset),
 * plus m where the type has a min: ggml's dequantization, bit for bit), X's chunk beside it,
 * and each invocation keeps a block of outputs in f32 registers, one fma per product. Every
 * staged value serves a whole tile (64 tokens or rows), where kn_matmul_q's per-row kernel
 * reads X again for each row: the general-purpose path of devices without a matrix-unit
 * variant for these weights (Vulkan, older CUDA). The sums are the contract's (products of
 * the dequantized values, summed in f32) in another order.
 *
 * A chunk's W items are 8 codes of a row each (tile rows x chunk / 8 of them): the planes'
 * words holding them, the sub-block's s and m, 8 values stored down a column of the
 * transposed array. Stacked parts (q, k, v of their own types) branch per item on the row.
 * Chunks are whole sub-blocks (32 columns), so devices whose workgroup memory holds only
 * narrower chunks keep the per-row kernel. */
#include "base/error.h"
#include "kernels/matmul_internal.h"
#include "kernels/quant_ir.h"

#define GROUP 8 /* codes an item decodes */

typedef struct tq {
    const kn_qlayout *L;
    const ir_buf *w;
    uint32_t n_parts;
} tq;

/* Code j (0..7) of the group of 8 from element e0 (a multiple of 8) in a plane of bits-bit
 * codes at word `at`: the group's bits start on a word where bits >= 4, else inside one. */
static void group_codes(kx k, ir_buf w, uint64_t at, uint32_t bits, ir_val e0, ir_val *codes) {
    uint32_t nw = bits >= 4 ? bits / 4 : 1;
    ir_val b0 = kx_mul_c(k, kx_and_c(k, kx_shr_c(k, e0, 3), 3), GROUP * bits);
    ir_val first = kx_add_c(k, kx_add(k, kx_mul_c(k, kx_shr_c(k, e0, 5), bits), kx_shr_c(k, b0, 5)), (uint32_t)at);
    ir_val v = kx_load(k, w, first, nw), words[2];
    for (uint32_t i = 0; i < nw; i++) words[i] = nw == 1 ? v : kx_lane(k, v, i);
    if (bits < 4) words[0] = kx_shr(k, words[0], kx_and_c(k, b0, 31));
    for (uint32_t j = 0; j < GROUP; j++) {
        uint32_t bit = j * bits, sh = bit % 32;
        ir_val c = sh ? kx_shr_c(k, words[bit / 32], sh) : words[bit / 32];
        codes[j] = bits == 32 - sh ? c : kx_and_c(k, c, (1u << bits) - 1);
    }
}

/* The 8 values of part L's row at columns col .. col + 7. */
static void group_values(kx k, const kn_qlayout *L, ir_buf w, ir_val row, ir_val col, uint32_t cols, ir_val *out) {
    const kn_qformat *f = kn_qformat_of(L->type);
    ir_val e0 = kx_add(k, kx_mul_c(k, row, cols), col), lo[GROUP], hi[GROUP];
    group_codes(k, w, L->lo, f->lo_bits, e0, lo);
    if (f->hi_bits) group_codes(k, w, L->hi, f->hi_bits, e0, hi);
    ir_val s, m;
    kn_q_sub_scale(k, L, w, f->sub == 16 ? kx_shr_c(k, e0, 4) : kx_shr_c(k, e0, 5), &s, &m);
    ir_type ft = kx_t(k, IR_F32, 1);
    ir_val zero = kx_f32(k, 8388608.0f + (float)f->offset); /* 2^23 + offset: exact */
    for (uint32_t j = 0; j < GROUP; j++) {
        ir_val code = f->hi_bits ? kx_or(k, lo[j], kx_shl_c(k, hi[j], f->lo_bits)) : lo[j];
        /* 2^23 + code as an f32's bits, less 2^23 + offset: code - offset exactly */
        ir_val q = kx_sub(k, kx_bitcast(k, kx_or(k, code, kx_u32(k, 0x4b000000u)), ft), zero);
        /* ggml's order: s * q, then + m (a separate rounding) */
        ir_val v = kx_mul(k, s, q);
        out[j] = m == IR_NONE ? v : kx_add(k, v, m);
    }
}

typedef struct stage_ctx {
    const tq *t;
    ir_shm ws;
    uint32_t stride, per_row;
    ir_val r0, first_col;
} stage_ctx;

static void stage_item(const mm *m, ir_val i, const void *p) {
    const stage_ctx *a = p;
    kx k = m->k;
    ir_val rl = kx_div_c(k, i, a->per_row), cl = kx_mul_c(k, kx_rem_c(k, i, a->per_row), GROUP);
    /* rows past the product read its last (their outputs are not stored) */
    ir_val row = kx_min(k, kx_add(k, a->r0, rl), kx_u32(k, m->rows - 1)), v[GROUP];
    kn_q_parts_values(k, a->t->L, a->t->w, a->t->n_parts, row, kx_add(k, a->first_col, cl), m->cols, group_values, GROUP, v);
    ir_val at = kx_idx(k, cl, a->stride, rl);
    for (uint32_t j = 0; j < GROUP; j++) kx_shm_store(k, a->ws, j ? kx_add_c(k, at, j * a->stride) : at, v[j]);
}

static void stage(const mm *m, const mm_w_stager *q, ir_shm ws, uint32_t stride, ir_val r0, uint32_t tile,
                  ir_val first_col, uint32_t n_cols) {
    stage_ctx a = {q->arg, ws, stride, n_cols / GROUP, r0, first_col};
    mm_for_items(m, tile * a.per_row, stage_item, &a);
}

ir_kernel *kn_matmul_q_tiled(const rt_caps *c, const kn_qlayout *L, uint32_t n_parts, uint32_t rows, uint32_t cols,
                             uint32_t n_max, ir_scalar dtype, unsigned epi, uint32_t groups[2], kiln_err *err) {
    mm m = {.k = {kn_create("kn_matmul_q", err), c},
            .rows = rows,
            .cols = cols,
            .n_max = n_max,
            .dtype = dtype,
            .epi = epi};
    kx k = m.k;
    if (!k.ir) return NULL;
    ir_buf w[KN_Q_PARTS];
    mm_params_q(&m, L, n_parts, w);
    tq t = {L, w, n_parts};
    mm_w_stager q = {stage, &t, KN_Q_CHUNK};
    uint32_t g[2];
    if (!mm_build_simt(&m, &q, g)) {
        ir_kernel_destroy(k.ir);
        return NULL; /* no whole sub-blocks fit: the caller takes the per-row kernel */
    }
    if (groups) groups[0] = g[0], groups[1] = g[1];
    return kn_finish(k.ir, err);
}
