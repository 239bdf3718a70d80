/* The decode step's products on block-quantized weights (kn_quant.h): kn_matvec's rows,
 * epilogues and fused norm, the weights read as their planes and decoded in registers.
 * Each lane takes chunks of KN_Q_CHUNK columns (16 bytes of 4-bit codes: consecutive
 * lanes read consecutive words), sums each sub-block as s * sum(q x) + m * sum(x) in f32,
 * and the lanes' sums meet in a subgroup (or workgroup) reduce. */
#include "base/error.h"
#include "kernels/kn_common.h"
#include "kernels/matvec_internal.h"
#include "kernels/matvec_q_mma.h"
#include "kernels/quant_ir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define MVQ_MAX_ROWS 4   /* rows a subgroup takes at most */
#define MVQ_MAX_SLOTS 8  /* rows with SwiGLU's up rows */
#define MVQ_MAX_UNROLL 4 /* chunks a lane loads at once at most */

void kn_q_x_chunk(kx k, ir_buf x, uint32_t hx, ir_val c0, ir_val *xv) {
    ir_type f4 = kx_t(k, IR_F32, 4);
    for (uint32_t i = 0; i < KN_Q_CHUNK; i += 4) {
        ir_val at = i ? kx_add_c(k, c0, i) : c0;
        ir_val v = hx != UINT32_MAX ? kx_shm_load(k, hx, at, 4) : kx_convert(k, kx_load(k, x, at, 4), f4);
        for (uint32_t l = 0; l < 4; l++) xv[i + l] = kx_lane(k, v, l);
    }
}

typedef kn_q_row mvq_row;

/* One chunk's loads for every row (codes' and scales' words) and x's values. */
typedef struct mvq_loads {
    kn_q_words c[MVQ_MAX_SLOTS];
    ir_val si[MVQ_MAX_SLOTS][2], raw[MVQ_MAX_SLOTS][2][KN_Q_SCALE_WORDS];
    ir_val xv[KN_Q_CHUNK];
} mvq_loads;

static void chunk_loads(kx k, const mvq_row *r, uint32_t n, ir_buf x, uint32_t hx, ir_val chunk, mvq_loads *ld) {
    ir_val c0 = kx_mul_c(k, chunk, KN_Q_CHUNK);
    for (uint32_t i = 0; i < n; i++) {
        const kn_qformat *f = kn_qformat_of(r[i].L->type);
        ir_val e0 = kx_add(k, kx_mul_c(k, r[i].row, r[i].L->cols), c0);
        kn_q_codes_load(k, r[i].L, r[i].w, e0, &ld->c[i]);
        ir_val sub0 = kx_shr_c(k, e0, f->sub == 16 ? 4 : 5);
        for (uint32_t b = 0; b < KN_Q_CHUNK / f->sub; b++) {
            ld->si[i][b] = b ? kx_add_c(k, sub0, b) : sub0;
            kn_q_scale_load(k, r[i].L, r[i].w, ld->si[i][b], ld->raw[i][b]);
        }
    }
    kn_q_x_chunk(k, x, hx, c0, ld->xv);
}

/* acc[i] += row i's chunk . x, each sub-block s * sum(q x) + m * sum(x) (sums of x built
 * once for the rows that share them) */
static void chunk_sums(kx k, const mvq_row *r, uint32_t n, const mvq_loads *ld, ir_val *acc) {
    ir_val xs16[2] = {IR_NONE, IR_NONE}, xs32[1] = {IR_NONE};
    for (uint32_t i = 0; i < n; i++) {
        const kn_qformat *f = kn_qformat_of(r[i].L->type);
        ir_val q[KN_Q_CHUNK], *xs = f->sub == 16 ? xs16 : xs32;
        kn_q_codes_decode(k, r[i].L, &ld->c[i], q);
        for (uint32_t b = 0; b < KN_Q_CHUNK / f->sub; b++) {
            const ir_val *qb = q + b * f->sub, *xb = ld->xv + b * f->sub;
            ir_val dot = kx_mul(k, qb[0], xb[0]), s, m;
            for (uint32_t j = 1; j < f->sub; j++) dot = kx_fma(k, qb[j], xb[j], dot);
            kn_q_scale_decode(k, r[i].L, ld->si[i][b], ld->raw[i][b], &s, &m);
            acc[i] = kx_fma(k, s, dot, acc[i]);
            if (m != IR_NONE) {
                if (xs[b] == IR_NONE) {
                    xs[b] = xb[0];
                    for (uint32_t j = 1; j < f->sub; j++) xs[b] = kx_add(k, xs[b], xb[j]);
                }
                acc[i] = kx_fma(k, m, xs[b], acc[i]);
            }
        }
    }
}

/* The lanes' walk over the chunks, from chunk `from` to `to` in steps of lanes * unroll
 * (every step whole): all of a step's loads first, then its sums. */
static void walk(kx k, const mvq_row *r, uint32_t n, ir_buf x, uint32_t hx, ir_val from, uint32_t to, uint32_t lanes,
                 uint32_t unroll, ir_val *acc) {
    ir_for *l = ir_for_begin(k.ir, from, kx_u32(k, to), kx_u32(k, lanes * unroll), n, acc);
    ir_val a[MVQ_MAX_SLOTS];
    for (uint32_t i = 0; i < n; i++) a[i] = ir_for_arg(l, i);
    mvq_loads ld[MVQ_MAX_UNROLL];
    for (uint32_t u = 0; u < unroll; u++) chunk_loads(k, r, n, x, hx, kx_add_c(k, ir_for_iv(l), u * lanes), &ld[u]);
    for (uint32_t u = 0; u < unroll; u++) chunk_sums(k, r, n, &ld[u], a);
    ir_for_end(k.ir, l, a);
    for (uint32_t i = 0; i < n; i++) acc[i] = ir_for_result(l, i);
}

void kn_q_rows_dot(kx k, const mvq_row *r, uint32_t n, ir_buf x, uint32_t hx, ir_val lane, uint32_t lanes,
                       uint32_t unroll, ir_val *acc) {
    uint32_t chunks = r[0].L->cols / KN_Q_CHUNK, main_end = chunks - chunks % (lanes * unroll);
    ir_val zero = kx_f32(k, 0.0f);
    for (uint32_t i = 0; i < n; i++) acc[i] = zero;
    if (main_end) walk(k, r, n, x, hx, lane, main_end, lanes, unroll, acc);
    if (main_end < chunks) walk(k, r, n, x, hx, kx_add_c(k, lane, main_end), chunks, lanes, 1, acc);
}

/* rows_dot_q for rows row0 .. row0 + nr of the parts stacked (all in one part: the parts'
 * rows are whole groups of nr; rows past the last are clamped to it): a branch per part,
 * uniform within the subgroup. */
static void parts_dot_q(kx k, const kn_qlayout *L, const ir_buf *w, uint32_t n_parts, ir_val row0, uint32_t nr,
                        ir_buf x, uint32_t hx, ir_val lane, uint32_t lanes, uint32_t unroll, ir_val *acc) {
    if (n_parts == 1) {
        mvq_row r[MVQ_MAX_SLOTS] = {{0}};
        for (uint32_t i = 0; i < nr; i++) r[i] = (mvq_row){L, w[0], kx_min_c(k, kx_add_c(k, row0, i), L->rows - 1)};
        kn_q_rows_dot(k, r, nr, x, hx, lane, lanes, unroll, acc);
        return;
    }
    ir_if *f = ir_if_begin(k.ir, kx_lt_c(k, row0, L[0].rows), nr);
    ir_val a[MVQ_MAX_SLOTS], b[MVQ_MAX_SLOTS];
    parts_dot_q(k, L, w, 1, row0, nr, x, hx, lane, lanes, unroll, a);
    ir_if_else(k.ir, f, a);
    parts_dot_q(k, L + 1, w + 1, n_parts - 1, kx_sub_c(k, row0, L[0].rows), nr, x, hx, lane, lanes, unroll, b);
    ir_if_end(k.ir, f, b);
    for (uint32_t i = 0; i < nr; i++) acc[i] = ir_if_result(f, i);
}

/* Rows per subgroup and chunks unrolled: KILN_MATVEC_Q=rows,unroll (measuring), else 2 and
 * 2; one row where a part's rows are not whole groups of them. */
static void shape_of(const kn_qlayout *L, uint32_t n_parts, uint32_t *nr, uint32_t *unroll) {
    *nr = 2, *unroll = 2;
    const char *e = getenv("KILN_MATVEC_Q");
    unsigned a, b;
    if (e && sscanf(e, "%u,%u", &a, &b) == 2 && a >= 1 && a <= MVQ_MAX_ROWS && b >= 1 && b <= MVQ_MAX_UNROLL)
        *nr = a, *unroll = b;
    for (uint32_t i = 0; i + 1 < n_parts; i++)
        if (L[i].rows % *nr) *nr = 1;
}

static const char *const part_names[KN_Q_PARTS] = {"W", "W1", "W2"};

static ir_kernel *build(const rt_caps *c, const kn_qpart *parts, uint32_t n_parts, uint32_t cols, ir_scalar dtype,
                        ir_scalar out, unsigned epi, bool norm, float eps, uint32_t *groups_x, kiln_err *err) {
    const char *name = norm ? "kn_matvec_q_norm" : "kn_matvec_q";
    kn_qlayout L[KN_Q_PARTS];
    uint32_t rows;
    bool swi = epi & KN_EPI_SWIGLU;
    if (kn_check_dtype(c, dtype, err) || kn_q_part_layouts(name, parts, n_parts, cols, swi, L, &rows, err)) return NULL;
    mvq_mma_cfg mc;
    bool mma = kn_matvec_q_mma_pick(c, L, swi ? 2 : n_parts, swi, norm, dtype, cols, &mc);
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
    kx k = {kn_create(mma ? (norm ? "kn_matvec_q_mma_norm" : "kn_matvec_q_mma") : name, err), c};
    if (!k.ir) return NULL;
    ir_buf w[KN_Q_PARTS];
    for (uint32_t i = 0; i < (swi ? 1 : n_parts); i++) w[i] = kx_buffer(k, part_names[i], IR_U32, IR_READ, L[i].words);
    ir_buf x = kx_buffer(k, "x", dtype, IR_READ, cols);
    ir_buf y = kx_buffer(k, "y", out, IR_WRITE, rows), b = 0, res = 0, wu = 0, wn = 0;
    if (epi & KN_EPI_BIAS) b = kx_buffer(k, "b", dtype, IR_READ, rows);
    if (epi & KN_EPI_RESIDUAL) res = kx_buffer(k, "res", dtype, IR_READ, rows);
    if (swi) wu = kx_buffer(k, "Wu", IR_U32, IR_READ, L[1].words);
    if (norm) wn = kx_buffer(k, "wn", dtype, IR_READ, cols);
    if (mma) {
        mvq_mma_args a = {L, w, n_parts, cols, x, y, b, res, wu, wn, dtype, out, epi, swi, norm, eps};
        kn_matvec_q_mma_body(k, &mc, &a);
        if (groups_x) *groups_x = kn_matvec_q_mma_groups(c, &mc, rows);
        return kn_finish(k.ir, err);
    }
    uint32_t sg = c->subgroup_size, wg = kn_workgroup(c, 256);
    bool per_subgroup = c->subgroup_arith && sg >= 8 && sg <= wg, strided = kn_matvec_strided(c);
    if (!per_subgroup) wg = kn_workgroup(c, 128);
    kx_workgroup(k, wg);
    ir_grid_wait(k.ir);
    uint32_t hx = norm ? kn_mv_norm_prologue(k, wg, x, wn, cols, dtype, eps) : UINT32_MAX;
    /* rows per workgroup: nr a subgroup, or nr for the whole workgroup; strided over the
     * grid as kn_matvec where kn_matvec_strided */
    uint32_t nr, unroll;
    shape_of(L, swi ? 1 : n_parts, &nr, &unroll);
    uint32_t rpw = (per_subgroup ? wg / sg : 1) * nr, lanes = per_subgroup ? sg : wg;
    ir_val first = per_subgroup ? kx_add(k, kx_group_times(k, 0, rpw), kx_mul_c(k, kx_sg_id(k), nr))
                                : kx_group_times(k, 0, nr);
    ir_val row0 = first;
    ir_for *each = strided ? kx_for(k, first, kx_u32(k, rows), kx_n_groups_times(k, rpw), &row0) : NULL;
    /* a subgroup past the last row skips it (no barrier follows); a workgroup's first row is
     * always in range */
    ir_if *in = !strided && per_subgroup ? kx_if(k, kx_lt_c(k, first, rows)) : NULL;
    ir_val lane = per_subgroup ? kx_sg_lane(k) : kx_local(k), sum[MVQ_MAX_SLOTS];
    if (swi) {
        mvq_row r[MVQ_MAX_SLOTS] = {{0}};
        for (uint32_t i = 0; i < nr; i++) {
            ir_val row = kx_min_c(k, kx_add_c(k, row0, i), rows - 1);
            r[i] = (mvq_row){&L[0], w[0], row}, r[nr + i] = (mvq_row){&L[1], wu, row};
        }
        kn_q_rows_dot(k, r, 2 * nr, x, hx, lane, lanes, unroll, sum);
    } else {
        parts_dot_q(k, L, w, n_parts, row0, nr, x, hx, lane, lanes, unroll, sum);
    }
    for (uint32_t i = 0; i < (swi ? 2 * nr : nr); i++) {
        char part[24];
        snprintf(part, sizeof part, "dot_part%u", i); /* one workgroup array a sum */
        sum[i] = per_subgroup ? kx_sg_sum(k, sum[i]) : kn_wg_sum(k, wg, sum[i], part);
    }
    for (uint32_t i = 0; i < nr; i++) {
        ir_val row = kx_add_c(k, row0, i);
        ir_if *st = kx_if(k, kx_and(k, kx_eq_c(k, lane, 0), kx_lt_c(k, row, rows)));
        kn_mv_store_row(k, epi, y, b, res, row, sum[i], swi ? sum[nr + i] : IR_NONE, dtype, out);
        kx_end_if(k, st);
    }
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
