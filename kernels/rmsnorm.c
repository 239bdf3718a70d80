/* RMSNorm, one workgroup per row: a strided pass sums x^2 in f32, a workgroup reduce
 * gives every invocation the same scale, and a second strided pass writes
 * (x * scale) * w rounded to dtype (the oracle's order of operations). */
#include "kernels/kn_common.h"

#include <math.h>

static ir_kernel *build(const rt_caps *c, const char *name, uint32_t n, ir_scalar dtype, float eps, uint32_t wg,
                        char *err, size_t errlen) {
    if (kn_check_dtype(c, dtype, err, errlen)) return NULL;
    if (n == 0 || !(eps >= 0.0f) || !isfinite(eps)) {
        kn_fail(err, errlen, "%s: bad shape (n %u, eps %g)", name, n, (double)eps);
        return NULL;
    }
    ir_kernel *k = kn_create(name, err, errlen);
    if (!k) return NULL;
    ir_buf x = ir_param_buffer(k, "x", dtype, IR_READ), w = ir_param_buffer(k, "w", dtype, IR_READ);
    ir_buf y = ir_param_buffer(k, "y", dtype, IR_WRITE);
    ir_buffer_extent_per_group(k, x, 0, n); /* one row per workgroup */
    ir_buffer_extent(k, w, n);
    ir_buffer_extent_per_group(k, y, 0, n);
    ir_set_workgroup(k, wg, 1, 1);
    uint32_t v = kn_vec_width(n);
    ir_type f32 = ir_t_scalar(k, IR_F32), fv = v == 1 ? f32 : ir_t_vector(k, IR_F32, v);
    ir_type out_t = v == 1 ? ir_t_scalar(k, dtype) : ir_t_vector(k, dtype, v);
    ir_val lid = ir_id(k, IR_ID_LOCAL, 0);
    /* rows * n may pass 2^32 only for absurd batches; the row base is u32 like every index */
    ir_val base = ir_bin(k, IR_OP_MUL, ir_id(k, IR_ID_GROUP, 0), ir_const_u32(k, n));
    /* pass 1 (kn_rms_scale): sum of squares at lid * v, lid * v + wg * v, ... */
    ir_val scale = kn_rms_scale(k, c, wg, x, base, n, eps, "ss_part");
    ir_val start = ir_bin(k, IR_OP_MUL, lid, ir_const_u32(k, v));
    ir_val end = ir_const_u32(k, n), step = ir_const_u32(k, wg * v);
    ir_val sv = scale;
    if (v > 1) {
        ir_val s4[4] = {scale, scale, scale, scale};
        sv = ir_vec(k, s4, v);
    }

    /* pass 2: the same elements this invocation read, so no other invocation's data */
    ir_for *l2 = ir_for_begin(k, start, end, step, 0, NULL);
    ir_val col = ir_for_iv(l2), at = ir_bin(k, IR_OP_ADD, base, col);
    ir_val xs = ir_bin(k, IR_OP_MUL, ir_convert(k, ir_load(k, x, at, v), fv), sv);
    ir_val o = ir_bin(k, IR_OP_MUL, xs, ir_convert(k, ir_load(k, w, col, v), fv));
    ir_store(k, y, at, ir_convert(k, o, out_t));
    ir_for_end(k, l2, NULL);
    return kn_finish(k, err, errlen);
}

ir_kernel *kn_rmsnorm(const rt_caps *c, uint32_t n, ir_scalar dtype, float eps, char *err, size_t errlen) {
    return build(c, "kn_rmsnorm", n, dtype, eps, c ? kn_workgroup(c, 256) : 1, err, errlen);
}

ir_kernel *kn_rmsnorm_heads(const rt_caps *c, uint32_t head_dim, ir_scalar dtype, float eps, char *err,
                            size_t errlen) {
    /* short rows: about one vector per invocation, but at least a subgroup */
    uint32_t want = 1;
    if (c) {
        uint32_t per = head_dim / kn_vec_width(head_dim ? head_dim : 1);
        want = per < c->subgroup_size ? c->subgroup_size : per;
    }
    return build(c, "kn_rmsnorm_heads", head_dim, dtype, eps, c ? kn_workgroup(c, want) : 1, err, errlen);
}
