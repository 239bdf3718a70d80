/* Rotary position embedding in place, one invocation per rotated pair. The angle
 * follows the oracle (and llama.cpp) step for step so both round alike:
 * theta_0 = pos, theta_{i+1} = theta_i * base^(-2/n_rot) in f32, where base^(-2/n_rot)
 * is computed here, on the host, with the same powf. sin and cos come from kn_sincos
 * (reduction by pi/2 and f32 polynomials, about an ulp), not the device's, which Vulkan
 * specifies only to 2^-11 absolute on [-pi, pi]. */
#include "base/error.h"
#include "kernels/kn_common.h"

#include <math.h>

ir_kernel *kn_rope(const rt_caps *c, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, bool neox, float base,
                   ir_scalar dtype, uint32_t *groups_x, kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (n_heads == 0 || head_dim == 0 || n_rot == 0 || n_rot % 2 || n_rot > head_dim || !(base > 0.0f) ||
        !isfinite(base) || (uint64_t)n_heads * head_dim > UINT32_MAX / 65536u) {
        kiln_fail(err, KILN_ERR_INVALID, "kn_rope: bad shape (heads %u, head_dim %u, n_rot %u, base %g)", n_heads,
                  head_dim, n_rot, (double)base);
        return NULL;
    }
    kx k = {kn_create("kn_rope", err), c};
    if (!k.ir) return NULL;
    /* token t is grid row y */
    ir_buf x = kx_buffer_per_group(k, "x", dtype, IR_READ | IR_WRITE, 1, (uint64_t)n_heads * head_dim);
    ir_buf pb = kx_buffer(k, "pos", IR_U32, IR_READ, 1);
    uint32_t wg = kn_workgroup(c, 256), half = n_rot / 2, pairs = n_heads * half;
    kx_workgroup(k, wg);
    float theta_scale = powf(base, -2.0f / (float)n_rot);

    /* invocation i: pair j of head i / half of token t */
    ir_val i = kx_global(k), t = kx_group(k, 1);
    ir_if *in = kx_if(k, kx_lt_c(k, i, pairs));
    ir_val hs = kx_u32(k, half);
    ir_val head = kx_div(k, i, hs), j = kx_rem(k, i, hs);
    ir_val pos = kx_add(k, kx_load_c(k, pb, 0), t);

    ir_val from = kx_u32(k, 0);
    ir_val th = kn_rope_theta(k, kx_as(k, pos, IR_F32), from, j, theta_scale);
    ir_val cs, sn;
    kn_sincos(k, th, &sn, &cs);

    /* rows of the token, then the head, then the pair's two dims */
    ir_val hd = kx_u32(k, head_dim);
    ir_val row = kx_mul(k, kx_idx(k, t, n_heads, head), hd);
    ir_val a = neox ? j : kx_mul_c(k, j, 2);
    ir_val b = kx_add_c(k, a, neox ? half : 1);
    ir_val ia = kx_add(k, row, a), ib = kx_add(k, row, b);
    ir_val x0 = kx_as(k, kx_load(k, x, ia, 1), IR_F32), x1 = kx_as(k, kx_load(k, x, ib, 1), IR_F32);
    ir_val o0, o1;
    kn_rotate(k, x0, x1, cs, sn, &o0, &o1);
    kx_store(k, x, ia, kx_as(k, o0, dtype));
    kx_store(k, x, ib, kx_as(k, o1, dtype));
    kx_end_if(k, in);
    if (groups_x) *groups_x = (pairs + wg - 1) / wg;
    return kn_finish(k.ir, err);
}
