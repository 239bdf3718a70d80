/* Rotary position embedding in place, one invocation per rotated pair. The angle
 * follows the oracle (and llama.cpp) step for step so both round alike:
 * theta_0 = pos, theta_{i+1} = theta_i * base^(-2/n_rot) in f32, where base^(-2/n_rot)
 * is computed here, on the host, with the same powf. sin and cos come from kn_sincos
 * (reduction by pi/2 and f32 polynomials, about an ulp), not the device's, which Vulkan
 * specifies only to 2^-11 absolute on [-pi, pi]. */
#include "kernels/kn_common.h"

#include <math.h>

ir_kernel *kn_rope(const rt_caps *c, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, bool neox, float base,
                   ir_scalar dtype, uint32_t *groups_x, char *err, size_t errlen) {
    if (kn_check_dtype(c, dtype, err, errlen)) return NULL;
    if (n_heads == 0 || head_dim == 0 || n_rot == 0 || n_rot % 2 || n_rot > head_dim || !(base > 0.0f) ||
        !isfinite(base) || (uint64_t)n_heads * head_dim > UINT32_MAX / 65536u) {
        kn_fail(err, errlen, "kn_rope: bad shape (heads %u, head_dim %u, n_rot %u, base %g)", n_heads, head_dim, n_rot,
                (double)base);
        return NULL;
    }
    ir_kernel *k = kn_create("kn_rope", err, errlen);
    if (!k) return NULL;
    ir_buf x = ir_param_buffer(k, "x", dtype, IR_READ | IR_WRITE), pb = ir_param_buffer(k, "pos", IR_U32, IR_READ);
    ir_buffer_extent_per_group(k, x, 1, (uint64_t)n_heads * head_dim); /* token t is grid row y */
    ir_buffer_extent(k, pb, 1);
    uint32_t wg = kn_workgroup(c, 256), half = n_rot / 2, pairs = n_heads * half;
    ir_set_workgroup(k, wg, 1, 1);
    ir_type f32 = ir_t_scalar(k, IR_F32), dt = ir_t_scalar(k, dtype);
    float theta_scale = powf(base, -2.0f / (float)n_rot);

    ir_val i = ir_id(k, IR_ID_GLOBAL, 0), t = ir_id(k, IR_ID_GROUP, 1);
    ir_if *in = ir_if_begin(k, ir_compare(k, IR_LT, i, ir_const_u32(k, pairs)), 0);
    ir_val hs = ir_const_u32(k, half);
    ir_val head = ir_bin(k, IR_OP_DIV, i, hs), j = ir_bin(k, IR_OP_REM, i, hs);
    ir_val pos = ir_bin(k, IR_OP_ADD, ir_load(k, pb, ir_const_u32(k, 0), 1), t);

    ir_val th = kn_rope_theta(k, ir_convert(k, pos, f32), ir_const_u32(k, 0), j, theta_scale);
    ir_val cs, sn;
    kn_sincos(k, th, &sn, &cs);

    /* rows of the token, then the head, then the pair's two dims */
    ir_val row = ir_bin(k, IR_OP_MUL, ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_MUL, t, ir_const_u32(k, n_heads)), head),
                        ir_const_u32(k, head_dim));
    ir_val a = neox ? j : ir_bin(k, IR_OP_MUL, j, ir_const_u32(k, 2));
    ir_val b = ir_bin(k, IR_OP_ADD, a, ir_const_u32(k, neox ? half : 1));
    ir_val ia = ir_bin(k, IR_OP_ADD, row, a), ib = ir_bin(k, IR_OP_ADD, row, b);
    ir_val x0 = ir_convert(k, ir_load(k, x, ia, 1), f32), x1 = ir_convert(k, ir_load(k, x, ib, 1), f32);
    ir_val o0 = ir_bin(k, IR_OP_SUB, ir_bin(k, IR_OP_MUL, x0, cs), ir_bin(k, IR_OP_MUL, x1, sn));
    ir_val o1 = ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_MUL, x0, sn), ir_bin(k, IR_OP_MUL, x1, cs));
    ir_store(k, x, ia, ir_convert(k, o0, dt));
    ir_store(k, x, ib, ir_convert(k, o1, dt));
    ir_if_end(k, in, NULL);
    if (groups_x) *groups_x = (pairs + wg - 1) / wg;
    return kn_finish(k, err, errlen);
}
