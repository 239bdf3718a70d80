/* A plain copy of u32 words: what `kiln probe --measure` times for the memory bandwidth
 * the decode floor is computed from. Each invocation moves one vector (the widest that
 * divides n, so the loop bound alone masks the tail) per step of a grid-stride loop. */
#include "kernels/kn_common.h"

/* Vulkan guarantees only 65535 workgroups in x: more work loops instead. */
#define KN_MAX_GROUPS 65535u

ir_kernel *kn_copy(const rt_caps *c, uint32_t n, uint32_t *groups_x, char *err, size_t errlen) {
    if (!c || n == 0) {
        kn_fail(err, errlen, c ? "kn_copy: n is 0" : "no caps");
        return NULL;
    }
    ir_kernel *k = kn_create("kn_copy", err, errlen);
    if (!k) return NULL;
    ir_buf src = ir_param_buffer(k, "src", IR_U32, IR_READ), dst = ir_param_buffer(k, "dst", IR_U32, IR_WRITE);
    ir_buffer_extent(k, src, n);
    ir_buffer_extent(k, dst, n);
    uint32_t wg = kn_workgroup(c, 256), v = kn_vec_width(n), nv = n / v;
    ir_set_workgroup(k, wg, 1, 1);
    ir_val stride = ir_bin(k, IR_OP_MUL, ir_id(k, IR_ID_NUM_GROUPS, 0), ir_const_u32(k, wg));
    ir_for *l = ir_for_begin(k, ir_id(k, IR_ID_GLOBAL, 0), ir_const_u32(k, nv), stride, 0, NULL);
    ir_val at = ir_bin(k, IR_OP_MUL, ir_for_iv(l), ir_const_u32(k, v));
    ir_store(k, dst, at, ir_load(k, src, at, v));
    ir_for_end(k, l, NULL);
    if (groups_x) {
        uint32_t g = (nv + wg - 1) / wg;
        *groups_x = g < KN_MAX_GROUPS ? g : KN_MAX_GROUPS;
    }
    return kn_finish(k, err, errlen);
}
