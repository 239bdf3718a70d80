/* Matrix-vector product, the decode step's projections and the logits head. Each row
 * is one dot product over cols: lanes stride the row with vector loads (16 bytes of bf16
 * where a row is whole 16-byte words, else the widest 16-bit vector that divides cols),
 * each keeps an f32 accumulator, and a reduce sums the lanes. Products of two 16-bit
 * values are exact in f32, so only the summation order differs from a loop. */
#include "kernels/kn_common.h"

#include <math.h>

/* Lanes of one group of invocations walk a row: c = first, first + stride, ... < cols.
 * The walk is unrolled by 4 (independent loads in flight per lane, which a decode step's
 * bandwidth needs: one 8-byte load at a time per lane leaves the memory system idle),
 * with a plain loop for the columns past the last whole unrolled step. */
#define UNROLL 4
/* x[c] (v lanes) as f32: from the x buffer, or from the workgroup copy of the normalized
 * row (hx != UINT32_MAX), which holds f32 values of dtype numbers. */
static ir_val x_at(ir_kernel *k, ir_buf x, uint32_t hx, ir_val c, uint32_t v, ir_type fv) {
    return hx != UINT32_MAX ? ir_shm_load(k, hx, c, v) : ir_convert(k, ir_load(k, x, c, v), fv);
}

static ir_val row_dot(ir_kernel *k, ir_buf w, ir_buf x, uint32_t hx, ir_val row, ir_val first, uint32_t stride,
                      uint32_t cols, uint32_t v) {
    ir_type f32 = ir_t_scalar(k, IR_F32), fv = v == 1 ? f32 : ir_t_vector(k, IR_F32, v);
    ir_val z[4];
    for (uint32_t i = 0; i < v; i++) z[i] = ir_const_f32(k, 0.0f);
    ir_val zero = v == 1 ? z[0] : ir_vec(k, z, v);
    ir_val base = ir_bin(k, IR_OP_MUL, row, ir_const_u32(k, cols));
    uint32_t main_end = cols - cols % (stride * UNROLL);
    ir_val acc = zero;
    if (main_end) {
        ir_for *l = ir_for_begin(k, first, ir_const_u32(k, main_end), ir_const_u32(k, stride * UNROLL), 1, &zero);
        ir_val a = ir_for_arg(l, 0), wv[UNROLL], xv[UNROLL];
        for (uint32_t u = 0; u < UNROLL; u++) { /* all loads first, then the sums */
            ir_val c = ir_bin(k, IR_OP_ADD, ir_for_iv(l), ir_const_u32(k, u * stride));
            wv[u] = ir_load(k, w, ir_bin(k, IR_OP_ADD, base, c), v);
            xv[u] = x_at(k, x, hx, c, v, fv);
        }
        for (uint32_t u = 0; u < UNROLL; u++) a = ir_fma(k, ir_convert(k, wv[u], fv), xv[u], a);
        ir_for_end(k, l, &a);
        acc = ir_for_result(l, 0);
    }
    if (main_end < cols) {
        ir_val from = ir_bin(k, IR_OP_ADD, first, ir_const_u32(k, main_end));
        ir_for *l = ir_for_begin(k, from, ir_const_u32(k, cols), ir_const_u32(k, stride), 1, &acc);
        ir_val c = ir_for_iv(l);
        ir_val wv = ir_convert(k, ir_load(k, w, ir_bin(k, IR_OP_ADD, base, c), v), fv);
        ir_val a = ir_fma(k, wv, x_at(k, x, hx, c, v, fv), ir_for_arg(l, 0));
        ir_for_end(k, l, &a);
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
static ir_val u32v(ir_kernel *k, uint32_t c) {
    ir_val l[4] = {ir_const_u32(k, c), ir_const_u32(k, c), ir_const_u32(k, c), ir_const_u32(k, c)};
    return ir_vec(k, l, 4);
}

/* (even, odd) f32 vectors of 8 bf16 packed in a u32x4 */
static void unpack8(ir_kernel *k, ir_val words, ir_val *even, ir_val *odd) {
    ir_type f4 = ir_t_vector(k, IR_F32, 4);
    *even = ir_bitcast(k, ir_bin(k, IR_OP_SHL, words, u32v(k, 16)), f4);
    *odd = ir_bitcast(k, ir_bin(k, IR_OP_AND, words, u32v(k, 0xffff0000u)), f4);
}

/* acc + the 8 products at column c (a multiple of 8) of the row at word base wbase */
static ir_val dot8(ir_kernel *k, ir_buf w, ir_buf x, uint32_t hx, ir_val wbase, ir_val c, ir_val acc) {
    ir_val half = ir_bin(k, IR_OP_SHR, c, ir_const_u32(k, 1));
    ir_val we, wo, xe, xo;
    unpack8(k, ir_load(k, w, ir_bin(k, IR_OP_ADD, wbase, half), 4), &we, &wo);
    if (hx != UINT32_MAX) {
        ir_val a = ir_shm_load(k, hx, c, 4), b = ir_shm_load(k, hx, ir_bin(k, IR_OP_ADD, c, ir_const_u32(k, 4)), 4);
        ir_val e[4] = {ir_extract(k, a, 0), ir_extract(k, a, 2), ir_extract(k, b, 0), ir_extract(k, b, 2)};
        ir_val o[4] = {ir_extract(k, a, 1), ir_extract(k, a, 3), ir_extract(k, b, 1), ir_extract(k, b, 3)};
        xe = ir_vec(k, e, 4), xo = ir_vec(k, o, 4);
    } else {
        unpack8(k, ir_load(k, x, half, 4), &xe, &xo);
    }
    return ir_fma(k, wo, xo, ir_fma(k, we, xe, acc));
}

/* The wide dot product of one row of w (and, with w2, of the same row of w2 in the same
 * loop: SwiGLU's gate and up rows, twice the loads in flight) against x; the second sum
 * goes to *sum2. */
static ir_val row_dot_wide(ir_kernel *k, ir_buf w, ir_buf w2, ir_val *sum2, ir_buf x, uint32_t hx, ir_val row,
                           ir_val first, uint32_t stride, uint32_t cols) {
    bool two = sum2 != NULL; /* w2 is a buffer index (0 is a buffer): sum2 says whether there is one */
    ir_val z = ir_const_f32(k, 0.0f), zs[4] = {z, z, z, z}, zero = ir_vec(k, zs, 4);
    ir_val wbase = ir_bin(k, IR_OP_MUL, row, ir_const_u32(k, cols / 2));
    uint32_t main_end = cols - cols % (stride * UNROLL), nacc = two ? 2 : 1;
    ir_val acc[2] = {zero, zero};
    if (main_end) {
        ir_for *l = ir_for_begin(k, first, ir_const_u32(k, main_end), ir_const_u32(k, stride * UNROLL), nacc, acc);
        ir_val a[2] = {ir_for_arg(l, 0), two ? ir_for_arg(l, 1) : IR_NONE};
        for (uint32_t u = 0; u < UNROLL; u++) {
            ir_val c = ir_bin(k, IR_OP_ADD, ir_for_iv(l), ir_const_u32(k, u * stride));
            a[0] = dot8(k, w, x, hx, wbase, c, a[0]);
            if (two) a[1] = dot8(k, w2, x, hx, wbase, c, a[1]);
        }
        ir_for_end(k, l, a);
        for (uint32_t i = 0; i < nacc; i++) acc[i] = ir_for_result(l, i);
    }
    if (main_end < cols) {
        ir_val from = ir_bin(k, IR_OP_ADD, first, ir_const_u32(k, main_end));
        ir_for *l = ir_for_begin(k, from, ir_const_u32(k, cols), ir_const_u32(k, stride), nacc, acc);
        ir_val a[2] = {dot8(k, w, x, hx, wbase, ir_for_iv(l), ir_for_arg(l, 0)), IR_NONE};
        if (two) a[1] = dot8(k, w2, x, hx, wbase, ir_for_iv(l), ir_for_arg(l, 1));
        ir_for_end(k, l, a);
        for (uint32_t i = 0; i < nacc; i++) acc[i] = ir_for_result(l, i);
    }
    if (two) *sum2 = kn_lane_sum(k, acc[1], 4);
    return kn_lane_sum(k, acc[0], 4);
}

/* sum + 0.5 * (row % 7): the planted error of KN_EPI_FAULT. */
static ir_val fault(ir_kernel *k, ir_val row, ir_val sum) {
    ir_val r7 = ir_convert(k, ir_bin(k, IR_OP_REM, row, ir_const_u32(k, 7)), ir_t_scalar(k, IR_F32));
    return ir_fma(k, r7, ir_const_f32(k, 0.5f), sum);
}

/* The row's result, stored by one invocation: the epilogue applied to the dot product(s). */
static void store_row(ir_kernel *k, unsigned epi, ir_buf y, ir_buf b, ir_buf res, ir_val row,
                      ir_val sum, ir_val up, ir_scalar dtype, ir_scalar out) {
    if (epi & KN_EPI_SWIGLU) {
        ir_type f32 = ir_t_scalar(k, IR_F32), dt = ir_t_scalar(k, dtype);
        ir_val g = ir_convert(k, ir_convert(k, sum, dt), f32), u = ir_convert(k, ir_convert(k, up, dt), f32);
        ir_store(k, y, row, ir_convert(k, kn_silu_mul(k, g, u), dt));
    } else if (out == IR_F32) {
        ir_store(k, y, row, epi & KN_EPI_FAULT ? fault(k, row, sum) : sum);
    } else {
        ir_store(k, y, row, kn_epilogue(k, epi, sum, b, row, res, row, dtype));
    }
}

/* The RMSNorm of x into workgroup memory, every workgroup its own copy: hx[c] = round((x[c]
 * * scale) * wn[c]) with the scale of kn_rmsnorm (same sums for the same workgroup size),
 * as f32 values. Barriers: called in uniform control flow. */
static uint32_t norm_prologue(ir_kernel *k, const rt_caps *c, uint32_t wg, ir_buf x, ir_buf wn, uint32_t cols,
                              ir_scalar dtype, float eps) {
    uint32_t v = kn_vec_width(cols), hx = ir_shared_array(k, "hx", IR_F32, cols);
    ir_type f32 = ir_t_scalar(k, IR_F32), fv = v == 1 ? f32 : ir_t_vector(k, IR_F32, v);
    ir_type dv = v == 1 ? ir_t_scalar(k, dtype) : ir_t_vector(k, dtype, v);
    ir_val scale = kn_rms_scale(k, c, wg, x, ir_const_u32(k, 0), cols, eps, "ss_part"), sv = scale;
    if (v > 1) {
        ir_val s4[4] = {scale, scale, scale, scale};
        sv = ir_vec(k, s4, v);
    }
    ir_val start = ir_bin(k, IR_OP_MUL, ir_id(k, IR_ID_LOCAL, 0), ir_const_u32(k, v));
    ir_for *l = ir_for_begin(k, start, ir_const_u32(k, cols), ir_const_u32(k, wg * v), 0, NULL);
    ir_val col = ir_for_iv(l);
    ir_val xs = ir_bin(k, IR_OP_MUL, ir_convert(k, ir_load(k, x, col, v), fv), sv);
    ir_val o = ir_bin(k, IR_OP_MUL, xs, ir_convert(k, ir_load(k, wn, col, v), fv));
    ir_shm_store(k, hx, col, ir_convert(k, ir_convert(k, o, dv), fv));
    ir_for_end(k, l, NULL);
    ir_barrier(k);
    return hx;
}

/* CUDA's build of the strided loop cost a quarter of qwen3-8b's decode on the H200 (206
 * -> 151 tok/s at the full grid; driver 580.159.04), so there each workgroup keeps its
 * fixed rows and the grid stays full; elsewhere (Vulkan) plan_tune picks the grid. */
bool kn_matvec_strided(const rt_caps *c) { return c->compute_capability == 0; }

static ir_kernel *build(const rt_caps *c, uint32_t rows, uint32_t cols, ir_scalar dtype, ir_scalar out, unsigned epi,
                        bool norm, float eps, uint32_t *groups_x, char *err, size_t errlen) {
    const char *name = norm ? "kn_matvec_norm" : "kn_matvec";
    if (kn_check_dtype(c, dtype, err, errlen)) return NULL;
    if (out != dtype && out != IR_F32) {
        kn_fail(err, errlen, "%s: output must be %s or f32, not %s", name, ir_scalar_name(dtype), ir_scalar_name(out));
        return NULL;
    }
    if (kn_check_epi(name, epi, out == IR_F32 ? KN_EPI_FAULT : KN_EPI_BIAS | KN_EPI_RESIDUAL | KN_EPI_SWIGLU, err, errlen))
        return NULL;
    if (rows == 0 || cols == 0 || (uint64_t)rows * cols > UINT32_MAX) {
        kn_fail(err, errlen, "%s: bad shape %u x %u (u32 indices: rows * cols < 2^32)", name, rows, cols);
        return NULL;
    }
    if (norm && (!(eps >= 0.0f) || !isfinite(eps))) {
        kn_fail(err, errlen, "%s: bad eps %g", name, (double)eps);
        return NULL;
    }
    /* the normalized row in workgroup memory, and the reductions' few words */
    if (norm && (uint64_t)cols * 4 + 512 > c->shared_bytes) {
        kn_fail(err, errlen, "%s: a row of %u needs %u bytes of workgroup memory; the device has %u", name, cols,
                cols * 4 + 512, c->shared_bytes);
        return NULL;
    }
    ir_kernel *k = kn_create(name, err, errlen);
    if (!k) return NULL;
    /* bf16 rows of whole 16-byte words go 8 elements per load (row_dot_wide), the
     * weights (and x, unless normalized into workgroup memory) read as u32 words */
    bool wide = dtype == IR_BF16 && cols % 8 == 0;
    ir_scalar wt = wide ? IR_U32 : dtype, xt = wide && !norm ? IR_U32 : dtype;
    ir_buf w = ir_param_buffer(k, "W", wt, IR_READ), x = ir_param_buffer(k, "x", xt, IR_READ);
    ir_buf y = ir_param_buffer(k, "y", out, IR_WRITE), b = 0, res = 0, wu = 0, wn = 0;
    if (epi & KN_EPI_BIAS) b = ir_param_buffer(k, "b", dtype, IR_READ);
    if (epi & KN_EPI_RESIDUAL) res = ir_param_buffer(k, "res", dtype, IR_READ);
    if (epi & KN_EPI_SWIGLU) wu = ir_param_buffer(k, "Wu", wt, IR_READ);
    if (norm) wn = ir_param_buffer(k, "wn", dtype, IR_READ);
    uint32_t w_per = wt == IR_U32 ? 2 : 1, x_per = xt == IR_U32 ? 2 : 1; /* 16-bit elements per word */
    ir_buffer_extent(k, w, (uint64_t)rows * cols / w_per);
    ir_buffer_extent(k, x, cols / x_per);
    ir_buffer_extent(k, y, rows);
    if (epi & KN_EPI_BIAS) ir_buffer_extent(k, b, rows);
    if (epi & KN_EPI_RESIDUAL) ir_buffer_extent(k, res, rows);
    if (epi & KN_EPI_SWIGLU) ir_buffer_extent(k, wu, (uint64_t)rows * cols / w_per);
    if (norm) ir_buffer_extent(k, wn, cols);
    bool swi = epi & KN_EPI_SWIGLU, strided = kn_matvec_strided(c);
    uint32_t v = kn_vec_width(cols), sg = c->subgroup_size;
    uint32_t gx, wg = kn_workgroup(c, 256);
    /* narrower subgroups would leave too few lanes per row */
    bool per_subgroup = c->subgroup_arith && sg >= 8 && sg <= wg;
    if (!per_subgroup) wg = kn_workgroup(c, 128);
    ir_set_workgroup(k, wg, 1, 1);
    uint32_t hx = norm ? norm_prologue(k, c, wg, x, wn, cols, dtype, eps) : UINT32_MAX;
    if (per_subgroup) {
        /* one subgroup per row, wg / sg rows per workgroup, rows strided over the grid
         * where kn_matvec_strided (a grid smaller than *groups_x amortizes the prologue
         * over more rows), else a subgroup past the last row skips its row: no barrier
         * past the prologue */
        uint32_t rpw = wg / sg;
        ir_val row0 = ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_MUL, ir_id(k, IR_ID_GROUP, 0), ir_const_u32(k, rpw)),
                             ir_id(k, IR_ID_SG_ID, 0));
        ir_val stride = ir_bin(k, IR_OP_MUL, ir_id(k, IR_ID_NUM_GROUPS, 0), ir_const_u32(k, rpw));
        ir_for *each = strided ? ir_for_begin(k, row0, ir_const_u32(k, rows), stride, 0, NULL) : NULL;
        ir_if *in = strided ? NULL : ir_if_begin(k, ir_compare(k, IR_LT, row0, ir_const_u32(k, rows)), 0);
        ir_val row = strided ? ir_for_iv(each) : row0;
        ir_val lane = ir_id(k, IR_ID_SG_LANE, 0);
        ir_val first = ir_bin(k, IR_OP_MUL, lane, ir_const_u32(k, v));
        if (wide) first = ir_bin(k, IR_OP_MUL, lane, ir_const_u32(k, 8));
        ir_val up = IR_NONE, sum;
        if (wide) {
            sum = ir_sg_reduce(k, IR_REDUCE_ADD, row_dot_wide(k, w, wu, swi ? &up : NULL, x, hx, row, first, sg * 8, cols));
            if (swi) up = ir_sg_reduce(k, IR_REDUCE_ADD, up);
        } else {
            sum = ir_sg_reduce(k, IR_REDUCE_ADD, row_dot(k, w, x, hx, row, first, sg * v, cols, v));
            if (swi) up = ir_sg_reduce(k, IR_REDUCE_ADD, row_dot(k, wu, x, hx, row, first, sg * v, cols, v));
        }
        ir_if *l0 = ir_if_begin(k, ir_compare(k, IR_EQ, lane, ir_const_u32(k, 0)), 0);
        store_row(k, epi, y, b, res, row, sum, up, dtype, out);
        ir_if_end(k, l0, NULL);
        if (strided) ir_for_end(k, each, NULL);
        else ir_if_end(k, in, NULL);
        gx = (rows + rpw - 1) / rpw;
    } else {
        /* one workgroup per row (strided over the grid as above), summed through workgroup memory (rows workgroups in x:
         * past Vulkan's guaranteed 65535 for a vocabulary head, but within what
         * NVIDIA, AMD, Intel and lavapipe offer) */
        ir_val lid = ir_id(k, IR_ID_LOCAL, 0), group = ir_id(k, IR_ID_GROUP, 0);
        ir_for *each =
            strided ? ir_for_begin(k, group, ir_const_u32(k, rows), ir_id(k, IR_ID_NUM_GROUPS, 0), 0, NULL) : NULL;
        ir_val row = strided ? ir_for_iv(each) : group; /* one per workgroup: its barriers stay uniform */
        ir_val first = ir_bin(k, IR_OP_MUL, lid, ir_const_u32(k, v));
        if (wide) first = ir_bin(k, IR_OP_MUL, lid, ir_const_u32(k, 8));
        ir_val up = IR_NONE, d0;
        if (wide) d0 = row_dot_wide(k, w, wu, swi ? &up : NULL, x, hx, row, first, wg * 8, cols);
        else {
            d0 = row_dot(k, w, x, hx, row, first, wg * v, cols, v);
            if (swi) up = row_dot(k, wu, x, hx, row, first, wg * v, cols, v);
        }
        ir_val sum = kn_wg_sum(k, c, wg, d0, "dot_part");
        if (swi) up = kn_wg_sum(k, c, wg, up, "up_part");
        ir_if *l0 = ir_if_begin(k, ir_compare(k, IR_EQ, lid, ir_const_u32(k, 0)), 0);
        store_row(k, epi, y, b, res, row, sum, up, dtype, out);
        ir_if_end(k, l0, NULL);
        if (strided) ir_for_end(k, each, NULL);
        gx = rows;
    }
    if (groups_x) *groups_x = gx;
    return kn_finish(k, err, errlen);
}

ir_kernel *kn_matvec(const rt_caps *c, uint32_t rows, uint32_t cols, ir_scalar dtype, ir_scalar out, unsigned epi,
                     uint32_t *groups_x, char *err, size_t errlen) {
    return build(c, rows, cols, dtype, out, epi, false, 0.0f, groups_x, err, errlen);
}

ir_kernel *kn_matvec_norm(const rt_caps *c, uint32_t rows, uint32_t cols, ir_scalar dtype, ir_scalar out,
                          unsigned epi, float eps, uint32_t *groups_x, char *err, size_t errlen) {
    return build(c, rows, cols, dtype, out, epi, true, eps, groups_x, err, errlen);
}
