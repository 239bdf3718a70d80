/* Matrix-vector product, the decode step's projections and the logits head. Each row
 * is one dot product over cols: lanes stride the row with vector loads (16 bytes of bf16
 * where a row is whole 16-byte words, else the widest 16-bit vector that divides cols),
 * each keeps an f32 accumulator, and a reduce sums the lanes. Products of two 16-bit
 * values are exact in f32, so only the summation order differs from a loop. */
#include "base/error.h"
#include "kernels/kn_common.h"
#include "kernels/matvec_internal.h"

#include <math.h>

/* Lanes of one group of invocations walk a row: c = first, first + stride, ... < cols.
 * The walk is unrolled by 4 (independent loads in flight per lane, which a decode step's
 * bandwidth needs: one 8-byte load at a time per lane leaves the memory system idle),
 * with a plain loop for the columns past the last whole unrolled step. */
#define UNROLL 4
#define MAX_ROWS 4 /* rows a subgroup takes at most (rows_per_subgroup) */
/* x[c] (v lanes) as f32: from the x buffer, or from the workgroup copy of the normalized
 * row (hx != UINT32_MAX), which holds f32 values of dtype numbers. */
static ir_val x_at(kx k, ir_buf x, uint32_t hx, ir_val c, uint32_t v, ir_type fv) {
    return hx != UINT32_MAX ? kx_shm_load(k, hx, c, v) : kx_convert(k, kx_load(k, x, c, v), fv);
}

/* sum_c w[row][c] * x[c] over this lane's columns c = first, first + stride, .. (v-wide
 * vectors), lanes summed at the end */
static ir_val row_dot(kx k, ir_buf w, ir_buf x, uint32_t hx, ir_val row, ir_val first, uint32_t stride, uint32_t cols,
                      uint32_t v) {
    ir_type fv = kx_t(k, IR_F32, v);
    ir_val z[4];
    for (uint32_t i = 0; i < v; i++) z[i] = kx_f32(k, 0.0f);
    ir_val zero = v == 1 ? z[0] : kx_vec(k, z, v);
    ir_val base = kx_mul_c(k, row, cols);
    uint32_t main_end = cols - cols % (stride * UNROLL);
    ir_val acc = zero;
    if (main_end) {
        ir_val step = kx_u32(k, stride * UNROLL);
        ir_for *l = ir_for_begin(k.ir, first, kx_u32(k, main_end), step, 1, &zero);
        ir_val a = ir_for_arg(l, 0), wv[UNROLL], xv[UNROLL];
        for (uint32_t u = 0; u < UNROLL; u++) { /* all loads first, then the sums */
            ir_val c = kx_add_c(k, ir_for_iv(l), u * stride);
            wv[u] = kx_load(k, w, kx_add(k, base, c), v);
            xv[u] = x_at(k, x, hx, c, v, fv);
        }
        for (uint32_t u = 0; u < UNROLL; u++) a = kx_fma(k, kx_convert(k, wv[u], fv), xv[u], a);
        ir_for_end(k.ir, l, &a);
        acc = ir_for_result(l, 0);
    }
    if (main_end < cols) {
        ir_val from = kx_add_c(k, first, main_end), step = kx_u32(k, stride);
        ir_for *l = ir_for_begin(k.ir, from, kx_u32(k, cols), step, 1, &acc);
        ir_val c = ir_for_iv(l);
        ir_val wv = kx_convert(k, kx_load(k, w, kx_add(k, base, c), v), fv);
        ir_val a = kx_fma(k, wv, x_at(k, x, hx, c, v, fv), ir_for_arg(l, 0));
        ir_for_end(k.ir, l, &a);
        acc = ir_for_result(l, 0);
    }
    return kn_lane_sum(k, acc, v);
}

/* bf16 rows 16 bytes at a time: a lane loads 4 u32 words, 8 bf16 weights, per step (and
 * the same of x, or 8 f32 of the normalized row from workgroup memory). A bf16 is the high
 * half of its f32, so the even elements are (word << 16) and the odd ones (word &
 * 0xffff0000), exact. Twice the bytes in flight per lane of the 8-byte loads above, which
 * a decode step on a large GPU needs to approach its bandwidth. Lane sums run over even
 * then odd elements (a summation order, as the contract allows). */
static ir_val u32x4(kx k, uint32_t c) {
    ir_val l[4];
    for (int i = 0; i < 4; i++) l[i] = kx_u32(k, c);
    return kx_vec(k, l, 4);
}

/* (even, odd) f32 vectors of 8 bf16 packed in a u32x4 */
static void unpack8(kx k, ir_val words, ir_val *even, ir_val *odd) {
    ir_type f4 = kx_t(k, IR_F32, 4);
    *even = kx_bitcast(k, kx_shl(k, words, u32x4(k, 16)), f4);
    *odd = kx_bitcast(k, kx_and(k, words, u32x4(k, 0xffff0000u)), f4);
}

/* acc + the 8 products at column c (a multiple of 8) of the row at word base wbase */
static ir_val dot8(kx k, ir_buf w, ir_buf x, uint32_t hx, ir_val wbase, ir_val c, ir_val acc) {
    ir_val half = kx_shr_c(k, c, 1); /* the column's word */
    ir_val we, wo, xe, xo;
    unpack8(k, kx_load(k, w, kx_add(k, wbase, half), 4), &we, &wo);
    if (hx != UINT32_MAX) {
        ir_val a = kx_shm_load(k, hx, c, 4), b = kx_shm_load(k, hx, kx_add_c(k, c, 4), 4);
        ir_val e[4], o[4]; /* the even elements 0, 2 of a, then of b; the odd ones */
        for (uint32_t i = 0; i < 4; i++) e[i] = kx_lane(k, i < 2 ? a : b, i % 2 * 2);
        for (uint32_t i = 0; i < 4; i++) o[i] = kx_lane(k, i < 2 ? a : b, i % 2 * 2 + 1);
        xe = kx_vec(k, e, 4), xo = kx_vec(k, o, 4);
    } else {
        unpack8(k, kx_load(k, x, half, 4), &xe, &xo);
    }
    return kx_fma(k, wo, xo, kx_fma(k, we, xe, acc));
}

/* The wide dot product of one row of w (and, with w2, of the same row of w2 in the same
 * loop: SwiGLU's gate and up rows, twice the loads in flight) against x; the second sum
 * goes to *sum2. */
static ir_val row_dot_wide(kx k, ir_buf w, ir_buf w2, ir_val *sum2, ir_buf x, uint32_t hx, ir_val row, ir_val first,
                           uint32_t stride, uint32_t cols) {
    bool two = sum2 != NULL; /* w2 is a buffer index (0 is a buffer): sum2 says whether there is one */
    ir_val zero = kx_splat(k, kx_f32(k, 0.0f), 4);
    ir_val wbase = kx_mul_c(k, row, cols / 2);
    uint32_t main_end = cols - cols % (stride * UNROLL), nacc = two ? 2 : 1;
    ir_val acc[2] = {zero, zero};
    if (main_end) {
        ir_val step = kx_u32(k, stride * UNROLL);
        ir_for *l = ir_for_begin(k.ir, first, kx_u32(k, main_end), step, nacc, acc);
        ir_val a[2] = {ir_for_arg(l, 0), two ? ir_for_arg(l, 1) : IR_NONE};
        for (uint32_t u = 0; u < UNROLL; u++) {
            ir_val c = kx_add_c(k, ir_for_iv(l), u * stride);
            a[0] = dot8(k, w, x, hx, wbase, c, a[0]);
            if (two) a[1] = dot8(k, w2, x, hx, wbase, c, a[1]);
        }
        ir_for_end(k.ir, l, a);
        for (uint32_t i = 0; i < nacc; i++) acc[i] = ir_for_result(l, i);
    }
    if (main_end < cols) {
        ir_val from = kx_add_c(k, first, main_end), step = kx_u32(k, stride);
        ir_for *l = ir_for_begin(k.ir, from, kx_u32(k, cols), step, nacc, acc);
        ir_val a[2] = {dot8(k, w, x, hx, wbase, ir_for_iv(l), ir_for_arg(l, 0)), IR_NONE};
        if (two) a[1] = dot8(k, w2, x, hx, wbase, ir_for_iv(l), ir_for_arg(l, 1));
        ir_for_end(k.ir, l, a);
        for (uint32_t i = 0; i < nacc; i++) acc[i] = ir_for_result(l, i);
    }
    if (two) *sum2 = kn_lane_sum(k, acc[1], 4);
    return kn_lane_sum(k, acc[0], 4);
}

/* The wide dot products of nr consecutive rows from row against x in one loop (their
 * loads together in flight: rows of a few KiB leave a lane too few loads otherwise);
 * the lane sums to sums[]. */
static void rows_dot_wide(kx k, ir_buf w, ir_buf x, uint32_t hx, ir_val row, uint32_t nr, ir_val first,
                          uint32_t stride, uint32_t cols, ir_val *sums) {
    ir_val zero = kx_splat(k, kx_f32(k, 0.0f), 4), acc[MAX_ROWS], wbase[MAX_ROWS];
    uint32_t main_end = cols - cols % (stride * UNROLL);
    for (uint32_t r = 0; r < nr; r++) acc[r] = zero, wbase[r] = kx_mul_c(k, kx_add_c(k, row, r), cols / 2);
    if (main_end) {
        ir_for *l = ir_for_begin(k.ir, first, kx_u32(k, main_end), kx_u32(k, stride * UNROLL), nr, acc);
        ir_val a[MAX_ROWS];
        for (uint32_t r = 0; r < nr; r++) a[r] = ir_for_arg(l, r);
        for (uint32_t u = 0; u < UNROLL; u++)
            for (uint32_t r = 0; r < nr; r++) a[r] = dot8(k, w, x, hx, wbase[r], kx_add_c(k, ir_for_iv(l), u * stride), a[r]);
        ir_for_end(k.ir, l, a);
        for (uint32_t r = 0; r < nr; r++) acc[r] = ir_for_result(l, r);
    }
    if (main_end < cols) {
        ir_for *l = ir_for_begin(k.ir, kx_add_c(k, first, main_end), kx_u32(k, cols), kx_u32(k, stride), nr, acc);
        ir_val a[MAX_ROWS];
        for (uint32_t r = 0; r < nr; r++) a[r] = dot8(k, w, x, hx, wbase[r], ir_for_iv(l), ir_for_arg(l, r));
        ir_for_end(k.ir, l, a);
        for (uint32_t r = 0; r < nr; r++) acc[r] = ir_for_result(l, r);
    }
    for (uint32_t r = 0; r < nr; r++) sums[r] = kn_lane_sum(k, acc[r], 4);
}

/* Rows a subgroup takes: where a bf16 row is short (qwen3-0.6b's 1024 columns: its logits
 * head's 18,992 workgroups of 8 rows spent most of their time in the norm prologue and in
 * starting), as many as keep a subgroup's rows within 4096 columns, the rows a whole
 * number of workgroups and the grid at least two workgroups a compute unit. */
static uint32_t rows_per_subgroup(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t rpw, bool wide, bool swi) {
    uint32_t units = c->compute_units ? c->compute_units : 1;
    uint32_t r = MAX_ROWS;
    if (!wide || swi) return 1;
    while (r > 1 && (r * cols > 4096 || rows % (rpw * r) || rows / (rpw * r) < 2 * units)) r /= 2;
    return r;
}

/* sum + 0.5 * (row % 7): the planted error of KN_EPI_FAULT. */
static ir_val fault(kx k, ir_val row, ir_val sum) {
    ir_val r7 = kx_as(k, kx_rem_c(k, row, 7), IR_F32);
    return kx_fma(k, r7, kx_f32(k, 0.5f), sum);
}

/* The row's result, stored by one invocation: the epilogue applied to the dot product(s). */
void kn_mv_store_row(kx k, unsigned epi, ir_buf y, ir_buf b, ir_buf res, ir_val row, ir_val sum, ir_val up,
                      ir_scalar dtype, ir_scalar out) {
    if (epi & KN_EPI_SWIGLU) {
        /* silu(round(g)) * round(u) */
        ir_val g = kx_as(k, kx_as(k, sum, dtype), IR_F32), u = kx_as(k, kx_as(k, up, dtype), IR_F32);
        kx_store(k, y, row, kx_as(k, kn_silu_mul(k, g, u), dtype));
    } else if (out == IR_F32) {
        kx_store(k, y, row, epi & KN_EPI_FAULT ? fault(k, row, sum) : sum);
    } else {
        kx_store(k, y, row, kn_epilogue(k, epi, sum, b, row, res, row, dtype));
    }
}

/* The RMSNorm of x into workgroup memory, every workgroup its own copy: hx[c] = round((x[c]
 * * scale) * wn[c]) with the scale of kn_rmsnorm (same sums for the same workgroup size),
 * as f32 values. Barriers: called in uniform control flow. */
uint32_t kn_mv_norm_prologue(kx k, uint32_t wg, ir_buf x, ir_buf wn, uint32_t cols, ir_scalar dtype, float eps) {
    uint32_t v = kn_vec_width(cols), hx = kx_shared(k, "hx", IR_F32, cols);
    ir_type fv = kx_t(k, IR_F32, v), dv = kx_t(k, dtype, v);
    ir_val scale = kn_rms_scale(k, wg, x, kx_u32(k, 0), cols, eps, "ss_part");
    ir_val sv = kx_splat(k, scale, v);
    ir_val start = kx_local_times(k, v), step = kx_u32(k, wg * v), col;
    ir_for *l = kx_for(k, start, kx_u32(k, cols), step, &col);
    ir_val xs = kx_mul(k, kx_convert(k, kx_load(k, x, col, v), fv), sv);
    ir_val o = kx_mul(k, xs, kx_convert(k, kx_load(k, wn, col, v), fv));
    kx_shm_store(k, hx, col, kx_convert(k, kx_convert(k, o, dv), fv));
    kx_end_for(k, l);
    kx_barrier(k);
    return hx;
}

/* CUDA's build of the strided loop cost a quarter of qwen3-8b's decode on the H200 (206
 * -> 151 tok/s at the full grid; driver 580.159.04), so there each workgroup keeps its
 * fixed rows and the grid stays full; elsewhere (Vulkan) plan_tune picks the grid. */
bool kn_matvec_strided(const rt_caps *c) { return c->compute_capability == 0; }

static ir_kernel *build(const rt_caps *c, uint32_t rows, uint32_t cols, ir_scalar dtype, ir_scalar out, unsigned epi,
                        bool norm, float eps, uint32_t *groups_x, kiln_err *err) {
    const char *name = norm ? "kn_matvec_norm" : "kn_matvec";
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (out != dtype && out != IR_F32) {
        kiln_fail(err, KILN_ERR_INVALID, "%s: output must be %s or f32, not %s", name, ir_scalar_name(dtype),
                  ir_scalar_name(out));
        return NULL;
    }
    unsigned allowed = out == IR_F32 ? KN_EPI_FAULT : KN_EPI_BIAS | KN_EPI_RESIDUAL | KN_EPI_SWIGLU;
    if (kn_check_epi(name, epi, allowed, err))
        return NULL;
    if (rows == 0 || cols == 0 || (uint64_t)rows * cols > UINT32_MAX) {
        kiln_fail(err, KILN_ERR_INVALID, "%s: bad shape %u x %u (u32 indices: rows * cols < 2^32)", name, rows, cols);
        return NULL;
    }
    if (norm && (!(eps >= 0.0f) || !isfinite(eps))) {
        kiln_fail(err, KILN_ERR_INVALID, "%s: bad eps %g", name, (double)eps);
        return NULL;
    }
    /* the normalized row in workgroup memory, and the reductions' few words */
    if (norm && (uint64_t)cols * 4 + 512 > c->shared_bytes) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "%s: a row of %u needs %u bytes of workgroup memory; the device has %u",
                  name, cols, cols * 4 + 512, c->shared_bytes);
        return NULL;
    }
    kx k = {kn_create(name, err), c};
    if (!k.ir) return NULL;
    /* bf16 rows of whole 16-byte words go 8 elements per load (row_dot_wide), the
     * weights (and x, unless normalized into workgroup memory) read as u32 words */
    bool wide = dtype == IR_BF16 && cols % 8 == 0;
    ir_scalar wt = wide ? IR_U32 : dtype, xt = wide && !norm ? IR_U32 : dtype;
    uint32_t w_per = wt == IR_U32 ? 2 : 1, x_per = xt == IR_U32 ? 2 : 1; /* 16-bit elements per word */
    ir_buf w = kx_buffer(k, "W", wt, IR_READ, (uint64_t)rows * cols / w_per);
    ir_buf x = kx_buffer(k, "x", xt, IR_READ, cols / x_per);
    ir_buf y = kx_buffer(k, "y", out, IR_WRITE, rows), b = 0, res = 0, wu = 0, wn = 0;
    if (epi & KN_EPI_BIAS) b = kx_buffer(k, "b", dtype, IR_READ, rows);
    if (epi & KN_EPI_RESIDUAL) res = kx_buffer(k, "res", dtype, IR_READ, rows);
    if (epi & KN_EPI_SWIGLU) wu = kx_buffer(k, "Wu", wt, IR_READ, (uint64_t)rows * cols / w_per);
    if (norm) wn = kx_buffer(k, "wn", dtype, IR_READ, cols);
    bool swi = epi & KN_EPI_SWIGLU, strided = kn_matvec_strided(c);
    uint32_t v = kn_vec_width(cols), sg = c->subgroup_size;
    uint32_t gx, wg = kn_workgroup(c, 256);
    /* narrower subgroups would leave too few lanes per row */
    bool per_subgroup = c->subgroup_arith && sg >= 8 && sg <= wg;
    if (!per_subgroup) wg = kn_workgroup(c, 128);
    kx_workgroup(k, wg);
    /* each workgroup's rows: rpw * nr from group * rpw * nr (one subgroup a row), or one */
    uint32_t rpw = per_subgroup ? wg / sg : 1, nr = per_subgroup ? rows_per_subgroup(c, rows, cols, rpw, wide, swi) : 1;
    if (!strided) { /* the weights while the kernel before ends (kn_early.c) */
        ir_val r0 = kx_group_times(k, 0, rpw * nr);
        kn_prefetch_rows(k, w, r0, rpw * nr, rows, cols, w_per, swi ? 2 : 1);
        if (swi) kn_prefetch_rows(k, wu, r0, rpw * nr, rows, cols, w_per, 2);
    }
    ir_grid_wait(k.ir);
    uint32_t hx = norm ? kn_mv_norm_prologue(k, wg, x, wn, cols, dtype, eps) : UINT32_MAX;
    if (per_subgroup) {
        /* one subgroup per row, wg / sg rows per workgroup, rows strided over the grid
         * where kn_matvec_strided (a grid smaller than *groups_x amortizes the prologue
         * over more rows), else a subgroup past the last row skips its row: no barrier
         * past the prologue */
        ir_val sg_id = kx_sg_id(k);
        ir_val row0 = kx_mul_c(k, kx_add(k, kx_group_times(k, 0, rpw), sg_id), nr);
        ir_val stride = kx_n_groups_times(k, rpw * nr), row = row0;
        ir_for *each = strided ? kx_for(k, row0, kx_u32(k, rows), stride, &row) : NULL;
        ir_if *in = strided ? NULL : kx_if(k, kx_lt_c(k, row0, rows));
        ir_val lane = kx_sg_lane(k);
        ir_val first = kx_mul_c(k, lane, v);
        if (wide) first = kx_mul_c(k, lane, 8);
        ir_val up = IR_NONE, sums[MAX_ROWS];
        if (nr > 1) {
            rows_dot_wide(k, w, x, hx, row, nr, first, sg * 8, cols, sums);
            for (uint32_t r = 0; r < nr; r++) sums[r] = kx_sg_sum(k, sums[r]);
        } else if (wide) {
            sums[0] = kx_sg_sum(k, row_dot_wide(k, w, wu, swi ? &up : NULL, x, hx, row, first, sg * 8, cols));
            if (swi) up = kx_sg_sum(k, up);
        } else {
            sums[0] = kx_sg_sum(k, row_dot(k, w, x, hx, row, first, sg * v, cols, v));
            if (swi) up = kx_sg_sum(k, row_dot(k, wu, x, hx, row, first, sg * v, cols, v));
        }
        ir_if *l0 = kx_if(k, kx_eq_c(k, lane, 0));
        for (uint32_t r = 0; r < nr; r++)
            kn_mv_store_row(k, epi, y, b, res, r ? kx_add_c(k, row, r) : row, sums[r], up, dtype, out);
        kx_end_if(k, l0);
        if (strided) kx_end_for(k, each);
        else kx_end_if(k, in);
        gx = (rows + rpw * nr - 1) / (rpw * nr); /* nr > 1 only where it divides rows */
    } else {
        /* one workgroup per row (strided over the grid as above), summed through workgroup
         * memory (rows workgroups in x: past Vulkan's guaranteed 65535 for a vocabulary
         * head, but within what NVIDIA, AMD, Intel and lavapipe offer) */
        /* one row per workgroup: its barriers stay uniform */
        ir_val lid = kx_local(k), group = kx_group(k, 0), row = group;
        ir_for *each = NULL;
        if (strided) {
            ir_val n_groups = kx_n_groups(k);
            each = kx_for(k, group, kx_u32(k, rows), n_groups, &row);
        }
        ir_val first = kx_mul_c(k, lid, v);
        if (wide) first = kx_mul_c(k, lid, 8);
        ir_val up = IR_NONE, d0;
        if (wide) d0 = row_dot_wide(k, w, wu, swi ? &up : NULL, x, hx, row, first, wg * 8, cols);
        else {
            d0 = row_dot(k, w, x, hx, row, first, wg * v, cols, v);
            if (swi) up = row_dot(k, wu, x, hx, row, first, wg * v, cols, v);
        }
        ir_val sum = kn_wg_sum(k, wg, d0, "dot_part");
        if (swi) up = kn_wg_sum(k, wg, up, "up_part");
        ir_if *l0 = kx_if(k, kx_eq_c(k, lid, 0));
        kn_mv_store_row(k, epi, y, b, res, row, sum, up, dtype, out);
        kx_end_if(k, l0);
        if (strided) kx_end_for(k, each);
        gx = rows;
    }
    if (groups_x) *groups_x = gx;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_matvec(const rt_caps *c, uint32_t rows, uint32_t cols, ir_scalar dtype, ir_scalar out, unsigned epi,
                     uint32_t *groups_x, kiln_err *err) {
    return build(c, rows, cols, dtype, out, epi, false, 0.0f, groups_x, err);
}

ir_kernel *kn_matvec_norm(const rt_caps *c, uint32_t rows, uint32_t cols, ir_scalar dtype, ir_scalar out,
                          unsigned epi, float eps, uint32_t *groups_x, kiln_err *err) {
    return build(c, rows, cols, dtype, out, epi, true, eps, groups_x, err);
}
