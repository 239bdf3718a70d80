/* The decode step's products on block-quantized weights (kn_quant.h): kn_matvec's rows,
 * epilogues and fused norm, the weights read as their planes and decoded in registers.
 * Each lane takes chunks of KN_Q_CHUNK columns (16 bytes of 4-bit codes: consecutive
 * lanes read consecutive words), sums each sub-block as s * sum(q x) + m * sum(x) in f32,
 * and the lanes' sums meet in a subgroup (or workgroup) reduce. */
#include "base/error.h"
#include "kernels/kn_common.h"
#include "kernels/matvec_internal.h"
#include "kernels/quant_ir.h"

#include <math.h>

void kn_q_x_chunk(kx k, ir_buf x, uint32_t hx, ir_val c0, ir_val *xv) {
    ir_type f4 = kx_t(k, IR_F32, 4);
    for (uint32_t i = 0; i < KN_Q_CHUNK; i += 4) {
        ir_val at = i ? kx_add_c(k, c0, i) : c0;
        ir_val v = hx != UINT32_MAX ? kx_shm_load(k, hx, at, 4) : kx_convert(k, kx_load(k, x, at, 4), f4);
        for (uint32_t l = 0; l < 4; l++) xv[i + l] = kx_lane(k, v, l);
    }
}

ir_val kn_q_chunk_dot(kx k, const kn_qlayout *L, ir_buf w, ir_val e0, const ir_val *xv, ir_val *xs, ir_val acc) {
    const kn_qformat *f = kn_qformat_of(L->type);
    ir_val q[KN_Q_CHUNK];
    kn_q_chunk(k, L, w, e0, q);
    uint32_t log_sub = f->sub == 16 ? 4 : 5;
    ir_val sub0 = kx_shr_c(k, e0, log_sub);
    for (uint32_t b = 0; b < KN_Q_CHUNK / f->sub; b++) {
        const ir_val *qb = q + b * f->sub, *xb = xv + b * f->sub;
        ir_val dot = kx_mul(k, qb[0], xb[0]);
        for (uint32_t j = 1; j < f->sub; j++) dot = kx_fma(k, qb[j], xb[j], dot);
        ir_val s, m;
        kn_q_sub_scale(k, L, w, b ? kx_add_c(k, sub0, b) : sub0, &s, &m);
        acc = kx_fma(k, s, dot, acc);
        if (m != IR_NONE) {
            if (xs[b] == IR_NONE) {
                xs[b] = xb[0];
                for (uint32_t j = 1; j < f->sub; j++) xs[b] = kx_add(k, xs[b], xb[j]);
            }
            acc = kx_fma(k, m, xs[b], acc);
        }
    }
    return acc;
}

/* This lane's part of row's dot product with x (chunks lane, lane + lanes, ...), and of
 * wu's where two (SwiGLU's up into *up; Lu its layout). */
static ir_val row_dot_q(kx k, const kn_qlayout *L, ir_buf w, const kn_qlayout *Lu, ir_buf wu, ir_val *up, ir_buf x,
                        uint32_t hx, ir_val row, ir_val lane, uint32_t lanes) {
    bool two = up != NULL;
    ir_val zero = kx_f32(k, 0.0f), init[2] = {zero, zero};
    ir_for *l = ir_for_begin(k.ir, lane, kx_u32(k, L->cols / KN_Q_CHUNK), kx_u32(k, lanes), two ? 2 : 1, init);
    ir_val c0 = kx_mul_c(k, ir_for_iv(l), KN_Q_CHUNK);
    ir_val e0 = kx_add(k, kx_mul_c(k, row, L->cols), c0);
    ir_val xv[KN_Q_CHUNK], xs[KN_Q_CHUNK / 16] = {IR_NONE, IR_NONE};
    kn_q_x_chunk(k, x, hx, c0, xv);
    ir_val a[2] = {kn_q_chunk_dot(k, L, w, e0, xv, xs, ir_for_arg(l, 0)), IR_NONE};
    if (two) a[1] = kn_q_chunk_dot(k, Lu, wu, e0, xv, xs, ir_for_arg(l, 1));
    ir_for_end(k.ir, l, a);
    if (two) *up = ir_for_result(l, 1);
    return ir_for_result(l, 0);
}

ir_val kn_q_parts_dot(kx k, const kn_qlayout *L, const ir_buf *w, uint32_t n_parts, ir_val row, ir_val lane,
                      uint32_t lanes, ir_buf x, uint32_t hx) {
    if (n_parts == 1) return row_dot_q(k, &L[0], w[0], NULL, 0, NULL, x, hx, row, lane, lanes);
    /* rows of part 0, else of the parts after it: a branch uniform within the row's lanes */
    ir_val in0 = kx_lt_c(k, row, L[0].rows);
    ir_if *f = ir_if_begin(k.ir, in0, 1);
    ir_val d0 = row_dot_q(k, &L[0], w[0], NULL, 0, NULL, x, hx, row, lane, lanes);
    ir_if_else(k.ir, f, &d0);
    ir_val d1 = kn_q_parts_dot(k, L + 1, w + 1, n_parts - 1, kx_sub_c(k, row, L[0].rows), lane, lanes, x, hx);
    ir_if_end(k.ir, f, &d1);
    return ir_if_result(f, 0);
}

static const char *const part_names[KN_Q_PARTS] = {"W", "W1", "W2"};

static ir_kernel *build(const rt_caps *c, const kn_qpart *parts, uint32_t n_parts, uint32_t cols, ir_scalar dtype,
                        ir_scalar out, unsigned epi, bool norm, float eps, uint32_t *groups_x, kiln_err *err) {
    const char *name = norm ? "kn_matvec_q_norm" : "kn_matvec_q";
    kn_qlayout L[KN_Q_PARTS];
    uint32_t rows;
    bool swi = epi & KN_EPI_SWIGLU;
    if (kn_check_dtype(c, dtype, err) || kn_q_part_layouts(name, parts, n_parts, cols, swi, L, &rows, err)) return NULL;
    if (out != dtype && out != IR_F32) {
        kiln_fail(err, KILN_ERR_INVALID, "%s: output must be %s or f32", name, ir_scalar_name(dtype));
        return NULL;
    }
    unsigned allowed = out == IR_F32 ? KN_EPI_FAULT : KN_EPI_BIAS | KN_EPI_RESIDUAL | KN_EPI_SWIGLU;
    if (kn_check_epi(name, epi, allowed, err)) return NULL;
    if (norm && (!(eps >= 0.0f) || !isfinite(eps))) {
        kiln_fail(err, KILN_ERR_INVALID, "%s: bad eps %g", name, (double)eps);
        return NULL;
    }
    if (norm && (uint64_t)cols * 4 + 512 > c->shared_bytes) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "%s: a row of %u needs %u bytes of workgroup memory; the device has %u",
                  name, cols, cols * 4 + 512, c->shared_bytes);
        return NULL;
    }
    kx k = {kn_create(name, err), c};
    if (!k.ir) return NULL;
    ir_buf w[KN_Q_PARTS];
    for (uint32_t i = 0; i < (swi ? 1 : n_parts); i++) w[i] = kx_buffer(k, part_names[i], IR_U32, IR_READ, L[i].words);
    ir_buf x = kx_buffer(k, "x", dtype, IR_READ, cols);
    ir_buf y = kx_buffer(k, "y", out, IR_WRITE, rows), b = 0, res = 0, wu = 0, wn = 0;
    if (epi & KN_EPI_BIAS) b = kx_buffer(k, "b", dtype, IR_READ, rows);
    if (epi & KN_EPI_RESIDUAL) res = kx_buffer(k, "res", dtype, IR_READ, rows);
    if (swi) wu = kx_buffer(k, "Wu", IR_U32, IR_READ, L[1].words);
    if (norm) wn = kx_buffer(k, "wn", dtype, IR_READ, cols);
    uint32_t sg = c->subgroup_size, wg = kn_workgroup(c, 256);
    bool per_subgroup = c->subgroup_arith && sg >= 8 && sg <= wg, strided = kn_matvec_strided(c);
    if (!per_subgroup) wg = kn_workgroup(c, 128);
    kx_workgroup(k, wg);
    ir_grid_wait(k.ir);
    uint32_t hx = norm ? kn_mv_norm_prologue(k, wg, x, wn, cols, dtype, eps) : UINT32_MAX;
    /* rows per workgroup: one a subgroup, or one for the whole workgroup; strided over the
     * grid as kn_matvec where kn_matvec_strided */
    uint32_t rpw = per_subgroup ? wg / sg : 1, lanes = per_subgroup ? sg : wg;
    ir_val row0 = per_subgroup ? kx_add(k, kx_group_times(k, 0, rpw), kx_sg_id(k)) : kx_group(k, 0), row = row0;
    ir_for *each = strided ? kx_for(k, row0, kx_u32(k, rows), kx_n_groups_times(k, rpw), &row) : NULL;
    /* a subgroup past the last row skips it (no barrier follows); a workgroup's row is
     * always in range (one workgroup a row) */
    ir_if *in = !strided && per_subgroup ? kx_if(k, kx_lt_c(k, row0, rows)) : NULL;
    ir_val lane = per_subgroup ? kx_sg_lane(k) : kx_local(k), up = IR_NONE;
    ir_val sum = swi ? row_dot_q(k, &L[0], w[0], &L[1], wu, &up, x, hx, row, lane, lanes)
                     : kn_q_parts_dot(k, L, w, n_parts, row, lane, lanes, x, hx);
    if (per_subgroup) {
        sum = kx_sg_sum(k, sum);
        if (swi) up = kx_sg_sum(k, up);
    } else {
        sum = kn_wg_sum(k, wg, sum, "dot_part");
        if (swi) up = kn_wg_sum(k, wg, up, "up_part");
    }
    ir_if *l0 = kx_if(k, kx_eq_c(k, lane, 0));
    kn_mv_store_row(k, epi, y, b, res, row, sum, up, dtype, out);
    kx_end_if(k, l0);
    if (in) kx_end_if(k, in);
    if (each) kx_end_for(k, each);
    if (groups_x) *groups_x = (rows + rpw - 1) / rpw;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_matvec_q(const rt_caps *c, const kn_qpart *parts, uint32_t n_parts, uint32_t cols, ir_scalar dtype,
                       ir_scalar out, unsigned epi, uint32_t *groups_x, kiln_err *err) {
    return build(c, parts, n_parts, cols, dtype, out, epi, false, 0.0f, groups_x, err);
}

ir_kernel *kn_matvec_q_norm(const rt_caps *c, const kn_qpart *parts, uint32_t n_parts, uint32_t cols,
                            ir_scalar dtype, ir_scalar out, unsigned epi, float eps, uint32_t *groups_x,
                            kiln_err *err) {
    return build(c, parts, n_parts, cols, dtype, out, epi, true, eps, groups_x, err);
}
