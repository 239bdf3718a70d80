/* Element-wise kernels: the residual add and SwiGLU. Each invocation takes one vector
 * (the widest that divides n) per step of a grid-stride loop, computes in f32 and rounds
 * once on store. */
#include "kernels/kn_common.h"

/* Vulkan guarantees only 65535 workgroups in x: more work loops instead. */
#define KN_MAX_GROUPS 65535u

typedef enum { OP_ADD, OP_SWIGLU } eltwise_op;

static ir_kernel *build(const rt_caps *c, const char *name, eltwise_op op, uint32_t n, ir_scalar dtype,
                        uint32_t *groups_x, char *err, size_t errlen) {
    if (kn_check_dtype(c, dtype, err, errlen)) return NULL;
    if (n == 0) {
        kn_fail(err, errlen, "%s: n is 0", name);
        return NULL;
    }
    ir_kernel *k = kn_create(name, err, errlen);
    if (!k) return NULL;
    const char *an = op == OP_ADD ? "a" : "g", *bn = op == OP_ADD ? "b" : "u";
    ir_buf a = ir_param_buffer(k, an, dtype, IR_READ), b = ir_param_buffer(k, bn, dtype, IR_READ);
    ir_buf o = ir_param_buffer(k, "out", dtype, IR_WRITE);
    ir_buffer_extent(k, a, n);
    ir_buffer_extent(k, b, n);
    ir_buffer_extent(k, o, n);
    uint32_t wg = kn_workgroup(c, 256), v = kn_vec_width(n), nv = n / v;
    ir_set_workgroup(k, wg, 1, 1);
    ir_type fv = v == 1 ? ir_t_scalar(k, IR_F32) : ir_t_vector(k, IR_F32, v);
    ir_type ov = v == 1 ? ir_t_scalar(k, dtype) : ir_t_vector(k, dtype, v);
    ir_val stride = ir_bin(k, IR_OP_MUL, ir_id(k, IR_ID_NUM_GROUPS, 0), ir_const_u32(k, wg));
    ir_for *l = ir_for_begin(k, ir_id(k, IR_ID_GLOBAL, 0), ir_const_u32(k, nv), stride, 0, NULL);
    ir_val at = ir_bin(k, IR_OP_MUL, ir_for_iv(l), ir_const_u32(k, v));
    ir_val av = ir_convert(k, ir_load(k, a, at, v), fv), bv = ir_convert(k, ir_load(k, b, at, v), fv);
    ir_val r;
    if (op == OP_ADD) {
        r = ir_bin(k, IR_OP_ADD, av, bv);
    } else {
        /* g / (1 + exp(-g)) * u, the oracle's expression, lane by lane */
        ir_val lane[4];
        for (uint32_t i = 0; i < v; i++)
            lane[i] = kn_silu_mul(k, v == 1 ? av : ir_extract(k, av, i), v == 1 ? bv : ir_extract(k, bv, i));
        r = v == 1 ? lane[0] : ir_vec(k, lane, v);
    }
    ir_store(k, o, at, ir_convert(k, r, ov));
    ir_for_end(k, l, NULL);
    if (groups_x) {
        uint32_t g = (nv + wg - 1) / wg;
        *groups_x = g < KN_MAX_GROUPS ? g : KN_MAX_GROUPS;
    }
    return kn_finish(k, err, errlen);
}

ir_kernel *kn_add(const rt_caps *c, uint32_t n, ir_scalar dtype, uint32_t *groups_x, char *err, size_t errlen) {
    return build(c, "kn_add", OP_ADD, n, dtype, groups_x, err, errlen);
}

ir_kernel *kn_swiglu(const rt_caps *c, uint32_t n, ir_scalar dtype, uint32_t *groups_x, char *err, size_t errlen) {
    return build(c, "kn_swiglu", OP_SWIGLU, n, dtype, groups_x, err, errlen);
}
