/* Element-wise kernels: the residual add, SwiGLU and the output gate. Each invocation takes one vector
 * (the widest that divides n) per step of a grid-stride loop, computes in f32 and rounds
 * once on store. */
#include "base/error.h"
#include "kernels/kn_common.h"

/* Vulkan guarantees only 65535 workgroups in x: more work loops instead. */
#define KN_MAX_GROUPS 65535u

typedef enum { OP_ADD, OP_SWIGLU, OP_GATE } eltwise_op;

static ir_kernel *build(const rt_caps *c, const char *name, eltwise_op op, uint32_t n, ir_scalar dtype,
                        uint32_t *groups_x, kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (n == 0) {
        kiln_fail(err, KILN_ERR_INVALID, "%s: n is 0", name);
        return NULL;
    }
    kx k = {kn_create(name, err), c};
    if (!k.ir) return NULL;
    const char *an = op == OP_ADD ? "a" : op == OP_GATE ? "x" : "g", *bn = op == OP_ADD ? "b" : op == OP_GATE ? "gate" : "u";
    ir_buf a = kx_buffer(k, an, dtype, IR_READ, n), b = kx_buffer(k, bn, dtype, IR_READ, n);
    ir_buf o = kx_buffer(k, "out", dtype, IR_WRITE, n);
    uint32_t wg = kn_workgroup(c, 256), v = kn_vec_width(n), n_vec = n / v;
    kx_workgroup(k, wg);
    ir_type fv = kx_t(k, IR_F32, v), ov = kx_t(k, dtype, v);
    ir_val grid = kx_n_groups_times(k, wg), end = kx_u32(k, n_vec), i;
    ir_for *l = kx_for(k, kx_global(k), end, grid, &i);
    ir_val at = kx_mul_c(k, i, v);
    ir_val av = kx_convert(k, kx_load(k, a, at, v), fv), bv = kx_convert(k, kx_load(k, b, at, v), fv);
    ir_val r;
    if (op == OP_ADD) {
        r = kx_add(k, av, bv);
    } else if (op == OP_GATE) {
        /* x * (1 / (1 + exp(-gate))), the oracle's expression, lane by lane */
        ir_val lane[4];
        for (uint32_t j = 0; j < v; j++) {
            ir_val x = v == 1 ? av : kx_lane(k, av, j), g = v == 1 ? bv : kx_lane(k, bv, j);
            ir_val sig = kn_fdiv(k, kx_f32(k, 1.0f), kx_add_f(k, kn_exp(k, kx_neg(k, g)), 1.0f));
            lane[j] = kx_mul(k, x, sig);
        }
        r = v == 1 ? lane[0] : kx_vec(k, lane, v);
    } else {
        /* g / (1 + exp(-g)) * u, the oracle's expression, lane by lane */
        ir_val lane[4];
        for (uint32_t j = 0; j < v; j++) {
            ir_val u = v == 1 ? bv : kx_lane(k, bv, j), g = v == 1 ? av : kx_lane(k, av, j);
            lane[j] = kn_silu_mul(k, g, u);
        }
        r = v == 1 ? lane[0] : kx_vec(k, lane, v);
    }
    kx_store(k, o, at, kx_convert(k, r, ov));
    kx_end_for(k, l);
    if (groups_x) {
        uint32_t g = (n_vec + wg - 1) / wg;
        *groups_x = g < KN_MAX_GROUPS ? g : KN_MAX_GROUPS;
    }
    return kn_finish(k.ir, err);
}

ir_kernel *kn_add(const rt_caps *c, uint32_t n, ir_scalar dtype, uint32_t *groups_x, kiln_err *err) {
    return build(c, "kn_add", OP_ADD, n, dtype, groups_x, err);
}

ir_kernel *kn_swiglu(const rt_caps *c, uint32_t n, ir_scalar dtype, uint32_t *groups_x, kiln_err *err) {
    return build(c, "kn_swiglu", OP_SWIGLU, n, dtype, groups_x, err);
}

ir_kernel *kn_sigmoid_gate(const rt_caps *c, uint32_t n, ir_scalar dtype, uint32_t *groups_x, kiln_err *err) {
    return build(c, "kn_sigmoid_gate", OP_GATE, n, dtype, groups_x, err);
}
