/* RMSNorm, one workgroup per row: a strided pass sums x^2 in f32, a workgroup reduce
 * gives every invocation the same scale, and a second strided pass writes
 * (x * scale) * w rounded to dtype (the oracle's order of operations). */
#include "base/error.h"
#include "kernels/kn_common.h"

#include <math.h>

static ir_kernel *build(const rt_caps *c, const char *name, uint32_t n, ir_scalar dtype, float eps, uint32_t wg,
                        kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (n == 0 || !(eps >= 0.0f) || !isfinite(eps)) {
        kiln_fail(err, KILN_ERR_INVALID, "%s: bad shape (n %u, eps %g)", name, n, (double)eps);
        return NULL;
    }
    kx k = {kn_create(name, err), c};
    if (!k.ir) return NULL;
    kn_launch_early(k); /* a short kernel: the next may start (kn_early.c) */
    ir_buf x = kx_buffer_per_group(k, "x", dtype, IR_READ, 0, n); /* one row per workgroup */
    ir_buf w = kx_buffer(k, "w", dtype, IR_READ, n);
    ir_buf y = kx_buffer_per_group(k, "y", dtype, IR_WRITE, 0, n);
    kx_workgroup(k, wg);
    uint32_t v = kn_vec_width(n);
    ir_type fv = kx_t(k, IR_F32, v), out_t = kx_t(k, dtype, v);
    ir_val lid = kx_local(k);
    /* rows * n may pass 2^32 only for absurd batches; the row base is u32 like every index */
    ir_val base = kx_group_times(k, 0, n);
    /* pass 1 (kn_rms_scale): sum of squares at lid * v, lid * v + wg * v, ... */
    ir_val scale = kn_rms_scale(k, wg, x, base, n, eps, "ss_part");
    ir_val start = kx_mul_c(k, lid, v), end = kx_u32(k, n), step = kx_u32(k, wg * v);
    ir_val sv = kx_splat(k, scale, v);

    /* pass 2: the same elements this invocation read, so no other invocation's data */
    ir_val col;
    ir_for *l2 = kx_for(k, start, end, step, &col);
    ir_val at = kx_add(k, base, col);
    ir_val xs = kx_mul(k, kx_convert(k, kx_load(k, x, at, v), fv), sv);
    ir_val o = kx_mul(k, xs, kx_convert(k, kx_load(k, w, col, v), fv));
    kx_store(k, y, at, kx_convert(k, o, out_t));
    kx_end_for(k, l2);
    return kn_finish(k.ir, err);
}

ir_kernel *kn_rmsnorm(const rt_caps *c, uint32_t n, ir_scalar dtype, float eps, kiln_err *err) {
    return build(c, "kn_rmsnorm", n, dtype, eps, c ? kn_workgroup(c, 256) : 1, err);
}

ir_kernel *kn_rmsnorm_heads(const rt_caps *c, uint32_t head_dim, ir_scalar dtype, float eps, kiln_err *err) {
    /* short rows: about one vector per invocation, but at least a subgroup */
    uint32_t want = 1;
    if (c) {
        uint32_t per = head_dim / kn_vec_width(head_dim ? head_dim : 1);
        want = per < c->subgroup_size ? c->subgroup_size : per;
    }
    return build(c, "kn_rmsnorm_heads", head_dim, dtype, eps, c ? kn_workgroup(c, want) : 1, err);
}
