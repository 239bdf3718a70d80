/* The prefill projections on block-quantized weights (kn_quant.h): kn_matmul's
 * parameters, epilogues (BIAS, RESIDUAL) and results up to summation order, on the
 * general-purpose lanes. A subgroup (or, without subgroup sums, a workgroup) owns a row
 * and a tile of KN_MMQ_TOKENS tokens; each lane decodes a chunk of KN_Q_CHUNK codes and
 * its sub-blocks' scales once and applies them to every token of the tile, each sub-block
 * summed as s * sum(q x) + m * sum(x) in f32. The exact path every device has; blocks of
 * 64 tokens or more take the cooperative matrices where the device has them (matmul_q_coop.c;
 * CUDA's matrix units their own, matmul_q_mma.c), else the tiled kernel (matmul_q_tiled.c)
 * where it fits. KILN_MATMUL_Q_TILED=0 keeps this one where no matrix units serve. */
#include "base/error.h"
#include "kernels/matmul_internal.h"
#include "kernels/quant_ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KN_MMQ_TOKENS 8
/* Blocks of this many tokens or more take the tiled kernel (matmul_q_tiled.c) where it
 * fits: its 64-token tiles reuse each staged value (the plan's short block of 64 among
 * them: here X is read again for every row, the weights once per 8 tokens); fewer keep
 * this kernel's grid of a subgroup a row. */
#define KN_MMQ_TILED_FROM 64

/* KILN_MATMUL_Q_TILED=0: the per-row kernel whatever the block (measuring) */
static bool tiled_off(void) {
    const char *e = getenv("KILN_MATMUL_Q_TILED");
    return e && !strcmp(e, "0");
}

static void token_dots(kx k, const kn_qformat *f, const ir_val *q, const ir_val *s, const ir_val *m, const ir_val *xv,
                       ir_val *acc) {
    for (uint32_t b = 0; b < KN_Q_CHUNK / f->sub; b++) {
        const ir_val *qb = q + b * f->sub, *xb = xv + b * f->sub;
        ir_val dot = kx_mul(k, qb[0], xb[0]);
        for (uint32_t j = 1; j < f->sub; j++) dot = kx_fma(k, qb[j], xb[j], dot);
        *acc = kx_fma(k, s[b], dot, *acc);
        if (m[b] != IR_NONE) {
            ir_val xs = xb[0];
            for (uint32_t j = 1; j < f->sub; j++) xs = kx_add(k, xs, xb[j]);
            *acc = kx_fma(k, m[b], xs, *acc);
        }
    }
}

/* The tile's sums for row of one part (layout L, weight w): acc[t] for token t0 + t, this
 * lane's chunks. */
static void tile_sums(kx k, const kn_qlayout *L, ir_buf w, ir_buf x, ir_val row, ir_val t0, ir_val lane,
                      uint32_t lanes, uint32_t cols, ir_val *out) {
    const kn_qformat *f = kn_qformat_of(L->type);
    ir_val zero = kx_f32(k, 0.0f), init[KN_MMQ_TOKENS];
    for (uint32_t t = 0; t < KN_MMQ_TOKENS; t++) init[t] = zero;
    ir_for *l = ir_for_begin(k.ir, lane, kx_u32(k, cols / KN_Q_CHUNK), kx_u32(k, lanes), KN_MMQ_TOKENS, init);
    ir_val c0 = kx_mul_c(k, ir_for_iv(l), KN_Q_CHUNK);
    ir_val e0 = kx_add(k, kx_mul_c(k, row, cols), c0);
    ir_val q[KN_Q_CHUNK], s[2], m[2], acc[KN_MMQ_TOKENS];
    kn_q_chunk(k, L, w, e0, q);
    ir_val sub0 = kx_shr_c(k, e0, f->sub == 16 ? 4 : 5);
    for (uint32_t sb = 0; sb < KN_Q_CHUNK / f->sub; sb++)
        kn_q_sub_scale(k, L, w, sb ? kx_add_c(k, sub0, sb) : sub0, &s[sb], &m[sb]);
    for (uint32_t t = 0; t < KN_MMQ_TOKENS; t++) {
        ir_val xv[KN_Q_CHUNK];
        ir_val xrow = kx_add_c(k, t0, t); /* rows of X past n hold anything: their sums are not stored */
        kn_q_x_chunk(k, x, UINT32_MAX, kx_add(k, kx_mul_c(k, xrow, cols), c0), xv);
        acc[t] = ir_for_arg(l, t);
        token_dots(k, f, q, s, m, xv, &acc[t]);
    }
    ir_for_end(k.ir, l, acc);
    for (uint32_t t = 0; t < KN_MMQ_TOKENS; t++) out[t] = ir_for_result(l, t);
}

/* tile_sums for row of the parts stacked: a branch per part, uniform within the row's lanes. */
static void parts_sums(kx k, const kn_qlayout *L, const ir_buf *w, uint32_t n_parts, ir_buf x, ir_val row, ir_val t0,
                       ir_val lane, uint32_t lanes, uint32_t cols, ir_val *out) {
    if (n_parts == 1) {
        tile_sums(k, L, w[0], x, row, t0, lane, lanes, cols, out);
        return;
    }
    ir_val in0 = kx_lt_c(k, row, L[0].rows), a[KN_MMQ_TOKENS], b[KN_MMQ_TOKENS];
    ir_if *f = ir_if_begin(k.ir, in0, KN_MMQ_TOKENS);
    tile_sums(k, L, w[0], x, row, t0, lane, lanes, cols, a);
    ir_if_else(k.ir, f, a);
    parts_sums(k, L + 1, w + 1, n_parts - 1, x, kx_sub_c(k, row, L[0].rows), t0, lane, lanes, cols, b);
    ir_if_end(k.ir, f, b);
    for (uint32_t t = 0; t < KN_MMQ_TOKENS; t++) out[t] = ir_if_result(f, t);
}

static const char *const part_names[KN_Q_PARTS] = {"W", "W1", "W2"};

ir_kernel *kn_matmul_q(const rt_caps *c, const kn_qpart *parts, uint32_t n_parts, uint32_t cols, uint32_t n_max,
                       ir_scalar dtype, unsigned epi, uint32_t groups[2], kiln_err *err) {
    kn_qlayout L[KN_Q_PARTS];
    uint32_t rows;
    if (kn_check_dtype(c, dtype, err) || kn_q_part_layouts("kn_matmul_q", parts, n_parts, cols, false, L, &rows, err) ||
        kn_check_epi("kn_matmul_q", epi, epi & KN_EPI_F32 ? KN_EPI_F32 : KN_EPI_BIAS | KN_EPI_RESIDUAL, err))
        return NULL;
    if (!n_max || n_max % KN_MMQ_TOKENS || (uint64_t)n_max * (rows > cols ? rows : cols) > UINT32_MAX) {
        kiln_fail(err, KILN_ERR_INVALID, "kn_matmul_q: %u tokens (a multiple of %u) of %u x %u", n_max,
                  KN_MMQ_TOKENS, rows, cols);
        return NULL;
    }
    qm_cfg mma;
    if (kn_matmul_q_mma_pick(c, L, n_parts, rows, cols, n_max, dtype, &mma))
        return kn_matmul_q_mma(c, L, n_parts, rows, cols, n_max, dtype, epi, &mma, groups, err);
    mm_coop_cfg cc = {0};
    if (n_max >= KN_MMQ_TILED_FROM && kn_matmul_q_coop_pick(c, L, n_parts, rows, n_max, dtype, &cc))
        return kn_matmul_q_coop(c, L, n_parts, rows, cols, n_max, dtype, epi, &cc, groups, err);
    if (n_max >= KN_MMQ_TILED_FROM && !tiled_off()) {
        kiln_err e = {0};
        ir_kernel *t = kn_matmul_q_tiled(c, L, n_parts, rows, cols, n_max, dtype, epi, groups, &e);
        if (t || e.code) {
            if (!t && err) *err = e;
            return t;
        }
    }
    kx k = {kn_create("kn_matmul_q", err), c};
    if (!k.ir) return NULL;
    ir_buf w[KN_Q_PARTS];
    for (uint32_t i = 0; i < n_parts; i++) w[i] = kx_buffer(k, part_names[i], IR_U32, IR_READ, L[i].words);
    bool f32 = epi & KN_EPI_F32;
    ir_buf x = kx_buffer(k, "X", dtype, IR_READ, (uint64_t)n_max * cols);
    ir_buf y = kx_buffer(k, "Y", f32 ? IR_F32 : dtype, IR_WRITE, (uint64_t)n_max * rows);
    ir_buf info = kx_buffer(k, "info", IR_U32, IR_READ, 2), b = 0, res = 0;
    if (epi & KN_EPI_BIAS) b = kx_buffer(k, "b", dtype, IR_READ, rows);
    if (epi & KN_EPI_RESIDUAL) res = kx_buffer(k, "res", dtype, IR_READ, (uint64_t)n_max * rows);
    uint32_t sg = c->subgroup_size, wg = kn_workgroup(c, 128);
    bool per_subgroup = c->subgroup_arith && sg >= 8 && sg <= wg;
    kx_workgroup(k, wg);
    uint32_t rpw = per_subgroup ? wg / sg : 1, lanes = per_subgroup ? sg : wg;
    ir_grid_wait(k.ir);
    /* the tile's tokens t0 .. t0 + KN_MMQ_TOKENS; a workgroup past the block's n returns */
    ir_val n = kx_min(k, kx_load_c(k, info, 1), kx_u32(k, n_max));
    ir_val t0 = kx_group_times(k, 1, KN_MMQ_TOKENS);
    ir_if *live = kx_if(k, kx_lt(k, t0, n));
    ir_val row = per_subgroup ? kx_add(k, kx_group_times(k, 0, rpw), kx_sg_id(k)) : kx_group(k, 0);
    ir_val lane = per_subgroup ? kx_sg_lane(k) : kx_local(k);
    /* rows past the end (the last workgroup's spare subgroups) read row 0 and store nothing */
    ir_val in_rows = kx_lt_c(k, row, rows);
    ir_val wrow = kx_select(k, in_rows, row, kx_u32(k, 0)), acc[KN_MMQ_TOKENS];
    parts_sums(k, L, w, n_parts, x, wrow, t0, lane, lanes, cols, acc);
    for (uint32_t t = 0; t < KN_MMQ_TOKENS; t++) {
        char part[16];
        snprintf(part, sizeof part, "dot_part%u", t); /* one workgroup array a sum */
        ir_val sum = per_subgroup ? kx_sg_sum(k, acc[t]) : kn_wg_sum(k, wg, acc[t], part);
        ir_val tok = kx_add_c(k, t0, t);
        ir_val ok = kx_and(k, kx_lt(k, tok, n), in_rows);
        ir_if *st = kx_if(k, kx_and(k, ok, kx_eq_c(k, lane, 0)));
        ir_val at = kx_idx(k, tok, rows, row);
        kx_store(k, y, at, f32 ? sum : kn_epilogue(k, epi, sum, b, row, res, at, dtype));
        kx_end_if(k, st);
    }
    kx_end_if(k, live);
    groups[0] = (rows + rpw - 1) / rpw;
    groups[1] = n_max / KN_MMQ_TOKENS;
    return kn_finish(k.ir, err);
}
