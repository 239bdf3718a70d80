/* RMSNorm, one workgroup per row: a strided pass sums x^2 in f32, a workgroup reduce
 * gives every invocation the same scale, and a second strided pass writes
 * (x * scale) * w rounded to dtype (the oracle's order of operations). */
#include "kn_common.h"

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
    ir_set_workgroup(k, wg, 1, 1);
    uint32_t v = kn_vec_width(n);
    ir_type f32 = ir_t_scalar(k, IR_F32), fv = v == 1 ? f32 : ir_t_vector(k, IR_F32, v);
    ir_type out_t = v == 1 ? ir_t_scalar(k, dtype) : ir_t_vector(k, dtype, v);
    ir_val lid = ir_id(k, IR_ID_LOCAL, 0);
    /* rows * n may pass 2^32 only for absurd batches; the row base is u32 like every index */
    ir_val base = ir_bin(k, IR_OP_MUL, ir_id(k, IR_ID_GROUP, 0), ir_const_u32(k, n));
    ir_val start = ir_bin(k, IR_OP_MUL, lid, ir_const_u32(k, v));
    ir_val end = ir_const_u32(k, n), step = ir_const_u32(k, wg * v);

    /* pass 1: per-invocation sum of squares (vector lanes summed at the end) */
    ir_val zero = v == 1 ? ir_const_f32(k, 0.0f) : IR_NONE;
    if (v > 1) {
        ir_val z[4];
        for (uint32_t i = 0; i < v; i++) z[i] = ir_const_f32(k, 0.0f);
        zero = ir_vec(k, z, v);
    }
    ir_for *l1 = ir_for_begin(k, start, end, step, 1, &zero);
    ir_val xv = ir_convert(k, ir_load(k, x, ir_bin(k, IR_OP_ADD, base, ir_for_iv(l1)), v), fv);
    ir_val ss = ir_fma(k, xv, xv, ir_for_arg(l1, 0));
    ir_for_end(k, l1, &ss);
    ir_val total = kn_wg_sum(k, c, wg, kn_lane_sum(k, ir_for_result(l1, 0), v), "ss_part");

    ir_val mean = ir_bin(k, IR_OP_DIV, total, ir_const_f32(k, (float)n));
    /* 1/sqrt rather than rsqrt: device rsqrt is often approximate */
    ir_val scale = ir_bin(k, IR_OP_DIV, ir_const_f32(k, 1.0f),
                          ir_un(k, IR_OP_SQRT, ir_bin(k, IR_OP_ADD, mean, ir_const_f32(k, eps))));
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
