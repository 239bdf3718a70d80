/* A plain copy of u32 words: what `kiln probe --measure` times for the memory bandwidth
 * the decode floor is computed from (and the plan's state snapshots). Each invocation
 * moves one vector (the widest that divides n, so the loop bound alone masks the tail)
 * per step of a grid-stride loop. kn_zero: the same walk storing zeros (a recurrent
 * state reset on the device). */
#include "base/error.h"
#include "kernels/kn_common.h"

/* Vulkan guarantees only 65535 workgroups in x: more work loops instead. */
#define KN_MAX_GROUPS 65535u

/* zero: kn_zero (no src) */
static ir_kernel *build(const rt_caps *c, bool zero, uint32_t n, uint32_t *groups_x, kiln_err *err) {
    const char *name = zero ? "kn_zero" : "kn_copy";
    if (!c || n == 0) {
        kiln_fail(err, KILN_ERR_INVALID, c ? "%s: n is 0" : "no caps", name);
        return NULL;
    }
    kx k = {kn_create(name, err), c};
    if (!k.ir) return NULL;
    ir_buf src = zero ? 0 : kx_buffer(k, "src", IR_U32, IR_READ, n), dst = kx_buffer(k, "dst", IR_U32, IR_WRITE, n);
    uint32_t wg = kn_workgroup(c, 256), v = kn_vec_width(n), n_vec = n / v;
    kx_workgroup(k, wg);
    /* vector i = global id, global id + the grid's invocations, ... */
    ir_val grid = kx_n_groups_times(k, wg), end = kx_u32(k, n_vec), i;
    ir_for *l = kx_for(k, kx_global(k), end, grid, &i);
    ir_val at = kx_mul_c(k, i, v);
    kx_store(k, dst, at, zero ? kx_splat(k, kx_u32(k, 0), v) : kx_load(k, src, at, v));
    kx_end_for(k, l);
    if (groups_x) {
        uint32_t g = (n_vec + wg - 1) / wg;
        *groups_x = g < KN_MAX_GROUPS ? g : KN_MAX_GROUPS;
    }
    return kn_finish(k.ir, err);
}

ir_kernel *kn_copy(const rt_caps *c, uint32_t n, uint32_t *groups_x, kiln_err *err) {
    return build(c, false, n, groups_x, err);
}

ir_kernel *kn_zero(const rt_caps *c, uint32_t n, uint32_t *groups_x, kiln_err *err) {
    return build(c, true, n, groups_x, err);
}
