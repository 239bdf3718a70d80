/* Greedy sampling's argmax over f32 logits in one workgroup: each invocation scans a
 * strided slice keeping the first largest value (strict >), then the workgroup keeps the
 * largest value and, among equals, the lowest index. A NaN counts as -inf (as the host's
 * samp_argmax skips it); the maximum is written beside the index, so a caller sees when
 * there was nothing but -inf and NaN. */
#include "kernels/kn_common.h"

#include <math.h>

/* (v2, i2) beats (v1, i1): larger, or as large and earlier */
static ir_val better(ir_kernel *k, ir_val v2, ir_val i2, ir_val v1, ir_val i1) {
    ir_val gt = ir_compare(k, IR_GT, v2, v1);
    ir_val tie = ir_bin(k, IR_OP_AND, ir_compare(k, IR_EQ, v2, v1), ir_compare(k, IR_LT, i2, i1));
    return ir_bin(k, IR_OP_OR, gt, tie);
}

ir_kernel *kn_argmax(const rt_caps *c, uint32_t n, char *err, size_t errlen) {
    if (!c || n == 0 || n == UINT32_MAX) {
        kn_fail(err, errlen, c ? "kn_argmax: bad n %u" : "no caps", n);
        return NULL;
    }
    ir_kernel *k = kn_create("kn_argmax", err, errlen);
    if (!k) return NULL;
    ir_buf lg = ir_param_buffer(k, "logits", IR_F32, IR_READ), out = ir_param_buffer(k, "out", IR_U32, IR_WRITE);
    ir_buffer_extent(k, lg, n);
    ir_buffer_extent(k, out, 2);
    uint32_t wg = kn_workgroup(c, 1024);
    ir_set_workgroup(k, wg, 1, 1);
    ir_val lid = ir_id(k, IR_ID_LOCAL, 0), none = ir_const_u32(k, UINT32_MAX);
    /* an empty slice holds (-inf, none): it loses to any element, even -inf */
    ir_val init[2] = {ir_const_f32(k, -INFINITY), none};
    ir_for *l = ir_for_begin(k, lid, ir_const_u32(k, n), ir_const_u32(k, wg), 2, init);
    ir_val iv = ir_for_iv(l), raw = ir_load(k, lg, iv, 1);
    ir_val v = ir_select(k, ir_compare(k, IR_EQ, raw, raw), raw, ir_const_f32(k, -INFINITY)); /* NaN -> -inf */
    ir_val take = ir_bin(k, IR_OP_OR, ir_compare(k, IR_GT, v, ir_for_arg(l, 0)), ir_compare(k, IR_EQ, ir_for_arg(l, 1), none));
    ir_val nx[2] = {ir_select(k, take, v, ir_for_arg(l, 0)), ir_select(k, take, iv, ir_for_arg(l, 1))};
    ir_for_end(k, l, nx);
    ir_val bv = ir_for_result(l, 0), bi = ir_for_result(l, 1);

    ir_val zero = ir_const_u32(k, 0);
    if (c->subgroup_arith) {
        ir_val sg_size = ir_id(k, IR_ID_SG_SIZE, 0), lane = ir_id(k, IR_ID_SG_LANE, 0);
        uint32_t sg_min = c->subgroup_min ? c->subgroup_min : 1, cap = (wg + sg_min - 1) / sg_min;
        ir_shm sv = ir_shared_array(k, "best_v", IR_F32, cap), si = ir_shared_array(k, "best_i", IR_U32, cap);
        /* the subgroup's best: max value, then the lowest index holding it */
        ir_val m = ir_sg_reduce(k, IR_REDUCE_MAX, bv);
        ir_val mi = ir_sg_reduce(k, IR_REDUCE_MIN, ir_select(k, ir_compare(k, IR_EQ, bv, m), bi, none));
        ir_if *f = ir_if_begin(k, ir_compare(k, IR_EQ, lane, zero), 0);
        ir_shm_store(k, sv, ir_id(k, IR_ID_SG_ID, 0), m);
        ir_shm_store(k, si, ir_id(k, IR_ID_SG_ID, 0), mi);
        ir_if_end(k, f, NULL);
        ir_barrier(k);
        ir_val nsg = ir_bin(k, IR_OP_DIV, ir_bin(k, IR_OP_ADD, ir_const_u32(k, wg - 1), sg_size), sg_size);
        ir_for *l2 = ir_for_begin(k, lane, nsg, sg_size, 2, init);
        ir_val v2 = ir_shm_load(k, sv, ir_for_iv(l2), 1), i2 = ir_shm_load(k, si, ir_for_iv(l2), 1);
        ir_val t2 = better(k, v2, i2, ir_for_arg(l2, 0), ir_for_arg(l2, 1));
        ir_val nx2[2] = {ir_select(k, t2, v2, ir_for_arg(l2, 0)), ir_select(k, t2, i2, ir_for_arg(l2, 1))};
        ir_for_end(k, l2, nx2);
        ir_val fv = ir_for_result(l2, 0), fi = ir_for_result(l2, 1);
        m = ir_sg_reduce(k, IR_REDUCE_MAX, fv);
        bi = ir_sg_reduce(k, IR_REDUCE_MIN, ir_select(k, ir_compare(k, IR_EQ, fv, m), fi, none));
        bv = m;
    } else {
        ir_shm sv = ir_shared_array(k, "best_v", IR_F32, wg), si = ir_shared_array(k, "best_i", IR_U32, wg);
        ir_shm_store(k, sv, lid, bv);
        ir_shm_store(k, si, lid, bi);
        ir_barrier(k);
        for (uint32_t h = wg / 2; h >= 1; h /= 2) {
            ir_if *f = ir_if_begin(k, ir_compare(k, IR_LT, lid, ir_const_u32(k, h)), 0);
            ir_val o = ir_bin(k, IR_OP_ADD, lid, ir_const_u32(k, h));
            ir_val v1 = ir_shm_load(k, sv, lid, 1), i1 = ir_shm_load(k, si, lid, 1);
            ir_val v2 = ir_shm_load(k, sv, o, 1), i2 = ir_shm_load(k, si, o, 1);
            ir_val t2 = better(k, v2, i2, v1, i1);
            ir_shm_store(k, sv, lid, ir_select(k, t2, v2, v1));
            ir_shm_store(k, si, lid, ir_select(k, t2, i2, i1));
            ir_if_end(k, f, NULL);
            ir_barrier(k);
        }
        bi = ir_shm_load(k, si, zero, 1);
        bv = ir_shm_load(k, sv, zero, 1);
    }
    ir_if *st = ir_if_begin(k, ir_compare(k, IR_EQ, lid, zero), 0);
    ir_store(k, out, zero, bi);
    ir_store(k, out, ir_const_u32(k, 1), ir_bitcast(k, bv, ir_t_scalar(k, IR_U32)));
    ir_if_end(k, st, NULL);
    return kn_finish(k, err, errlen);
}
