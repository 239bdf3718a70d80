/* Greedy sampling's argmax over f32 logits in one workgroup: each invocation scans a
 * strided slice keeping the first largest value (strict >), then the workgroup keeps the
 * largest value and, among equals, the lowest index. A NaN counts as -inf (as the host's
 * samp_argmax skips it); the maximum is written beside the index, so a caller sees when
 * there was nothing but -inf and NaN. The masked variant skips the entries whose bit in
 * `allow` is clear (a grammar's mask, so constrained greedy decoding keeps its logits on
 * the device); with none allowed the index is UINT32_MAX. */
#include "base/error.h"
#include "kernels/kn_common.h"

#include <math.h>

/* (v2, i2) beats (v1, i1): larger, or as large and earlier */
static ir_val better(kx k, ir_val v2, ir_val i2, ir_val v1, ir_val i1) {
    ir_val larger = kx_gt(k, v2, v1);
    ir_val earlier = kx_lt(k, i2, i1);
    ir_val tie = kx_and(k, kx_eq(k, v2, v1), earlier);
    return kx_or(k, larger, tie);
}

#define UNROLL 4

/* A scan's state: the kernel, and where masked the row's first word of allow. */
typedef struct scan {
    kx k;
    bool masked;
    ir_buf allow;
    ir_val mbase;
} scan;

/* allow's word holding element i's bit */
static ir_val mask_word(const scan *s, ir_val i) {
    return kx_load(s->k, s->allow, kx_add(s->k, s->mbase, kx_shr_c(s->k, i, 5)), 1);
}

/* whether element i's bit is set in its word w */
static ir_val mask_bit(const scan *s, ir_val w, ir_val i) {
    kx k = s->k;
    ir_val sh = kx_shr(k, w, kx_and_c(k, i, 31));
    return kx_ne(k, kx_and_c(k, sh, 1), kx_u32(k, 0));
}

/* b = (best value, its index) after element i of value raw (w: its mask word where
 * masked): a NaN counts as -inf; the first of equal values stays (strict >), and any
 * element beats the empty (-inf, none); a masked-out element changes nothing */
static void scan1(const scan *s, ir_val raw, ir_val i, ir_val w, ir_val *b) {
    kx k = s->k;
    ir_val none = kx_u32(k, UINT32_MAX);
    ir_val v = kx_select(k, kx_eq(k, raw, raw), raw, kx_f32(k, -INFINITY));
    ir_val take = kx_or(k, kx_gt(k, v, b[0]), kx_eq(k, b[1], none));
    if (s->masked) take = kx_and(k, take, mask_bit(s, w, i));
    b[0] = kx_select(k, take, v, b[0]);
    b[1] = kx_select(k, take, i, b[1]);
}

/* the same for the 4 elements of v at i .. i + 3 (one mask word: i is a multiple of 4), in order */
static void scan4(const scan *s, ir_val v, ir_val i, ir_val *b) {
    ir_val w = s->masked ? mask_word(s, i) : IR_NONE;
    for (uint32_t e = 0; e < 4; e++) scan1(s, kx_lane(s->k, v, e), kx_add_c(s->k, i, e), w, b);
}

/* rows > 1: workgroup y takes row y (logits from y * n, out from 2y); masked: allow's row
 * y from y * ceil(n / 32) */
static ir_kernel *build(const rt_caps *c, uint32_t n, uint32_t rows, bool masked, kiln_err *err) {
    if (!c || n == 0 || n == UINT32_MAX || rows == 0 || (uint64_t)n * rows > UINT32_MAX) {
        kiln_fail(err, KILN_ERR_INVALID, c ? "kn_argmax: bad shape (n %u, %u rows)" : "no caps", n, rows);
        return NULL;
    }
    kx k = {kn_create(masked ? "kn_argmax_masked" : rows > 1 ? "kn_argmax_rows" : "kn_argmax", err), c};
    if (!k.ir) return NULL;
    ir_buf lg = kx_buffer(k, "logits", IR_F32, IR_READ, (uint64_t)n * rows);
    ir_buf out = kx_buffer(k, "out", IR_U32, IR_WRITE, 2ull * rows);
    uint32_t words = (n + 31) / 32;
    scan sc = {k, masked, 0, IR_NONE};
    if (masked) {
        sc.allow = kx_buffer(k, "allow", IR_U32, IR_READ, (uint64_t)words * rows);
        sc.mbase = rows > 1 ? kx_group_times(k, 1, words) : kx_u32(k, 0);
    }
    uint32_t wg = kn_workgroup(c, 1024);
    kx_workgroup(k, wg);
    ir_val lid = kx_local(k), none = kx_u32(k, UINT32_MAX);
    /* the row's first element and first output word; vector loads only where every row
     * starts on a multiple of 4 */
    ir_val base = rows > 1 ? kx_group_times(k, 1, n) : kx_u32(k, 0);
    ir_val obase = rows > 1 ? kx_group_times(k, 1, 2) : kx_u32(k, 0);
    bool vec = rows == 1 || n % 4 == 0;
    /* an empty slice holds (-inf, none): it loses to any element, even -inf */
    ir_val best[2] = {kx_f32(k, -INFINITY), none};
    /* the invocation's elements in increasing index order: vectors of 4, UNROLL of them a
     * step with their loads first (one workgroup reads the whole vocabulary, so its loads
     * in flight set the time: one scalar load at a time took 50 us of a decode step on a
     * 151,936-entry vocabulary on the H200, four vectors 18, eight 17.5: past four the
     * loads are not the limit), then the vectors past the last whole step, then the
     * elements past the last whole vector */
    uint32_t n4 = vec ? n / 4 : 0, main4 = n4 - n4 % (wg * UNROLL);
    if (main4) {
        ir_for *l = ir_for_begin(k.ir, lid, kx_u32(k, main4), kx_u32(k, wg * UNROLL), 2, best);
        ir_val b[2] = {ir_for_arg(l, 0), ir_for_arg(l, 1)}, v[UNROLL];
        for (uint32_t u = 0; u < UNROLL; u++)
            v[u] = kx_load(k, lg, kx_add(k, base, kx_shl_c(k, kx_add_c(k, ir_for_iv(l), u * wg), 2)), 4);
        for (uint32_t u = 0; u < UNROLL; u++) scan4(&sc, v[u], kx_shl_c(k, kx_add_c(k, ir_for_iv(l), u * wg), 2), b);
        ir_for_end(k.ir, l, b);
        best[0] = ir_for_result(l, 0), best[1] = ir_for_result(l, 1);
    }
    if (main4 < n4) {
        ir_for *l = ir_for_begin(k.ir, kx_add_c(k, lid, main4), kx_u32(k, n4), kx_u32(k, wg), 2, best);
        ir_val b[2] = {ir_for_arg(l, 0), ir_for_arg(l, 1)}, at = kx_shl_c(k, ir_for_iv(l), 2);
        scan4(&sc, kx_load(k, lg, kx_add(k, base, at), 4), at, b);
        ir_for_end(k.ir, l, b);
        best[0] = ir_for_result(l, 0), best[1] = ir_for_result(l, 1);
    }
    if (n4 * 4 < n) {
        ir_for *l = ir_for_begin(k.ir, kx_add_c(k, lid, n4 * 4), kx_u32(k, n), kx_u32(k, wg), 2, best);
        ir_val b[2] = {ir_for_arg(l, 0), ir_for_arg(l, 1)};
        ir_val w = masked ? mask_word(&sc, ir_for_iv(l)) : IR_NONE;
        scan1(&sc, kx_load(k, lg, kx_add(k, base, ir_for_iv(l)), 1), ir_for_iv(l), w, b);
        ir_for_end(k.ir, l, b);
        best[0] = ir_for_result(l, 0), best[1] = ir_for_result(l, 1);
    }
    ir_val bv = best[0], bi = best[1];
    ir_val init[2] = {kx_f32(k, -INFINITY), none};

    ir_val zero = kx_u32(k, 0);
    if (c->subgroup_arith) {
        ir_val sg_size = kx_sg_size(k), lane = kx_sg_lane(k);
        uint32_t sg_min = c->subgroup_min ? c->subgroup_min : 1, cap = (wg + sg_min - 1) / sg_min;
        ir_shm sv = kx_shared(k, "best_v", IR_F32, cap), si = kx_shared(k, "best_i", IR_U32, cap);
        /* the subgroup's best: max value, then the lowest index holding it */
        ir_val m = kx_sg_max(k, bv);
        ir_val mi = kx_sg_min(k, kx_select(k, kx_eq(k, bv, m), bi, none));
        ir_if *f = kx_if(k, kx_eq(k, lane, zero));
        kx_shm_store(k, sv, kx_sg_id(k), m);
        kx_shm_store(k, si, kx_sg_id(k), mi);
        kx_end_if(k, f);
        kx_barrier(k);
        /* the subgroups' bests, read in one order by every subgroup */
        ir_val n_sg = kx_div(k, kx_add(k, kx_u32(k, wg - 1), sg_size), sg_size);
        ir_for *l2 = ir_for_begin(k.ir, lane, n_sg, sg_size, 2, init);
        ir_val s = ir_for_iv(l2), best2 = ir_for_arg(l2, 0), best2_i = ir_for_arg(l2, 1);
        ir_val v2 = kx_shm_load(k, sv, s, 1), i2 = kx_shm_load(k, si, s, 1);
        ir_val t2 = better(k, v2, i2, best2, best2_i);
        ir_val nx2[2];
        nx2[0] = kx_select(k, t2, v2, best2);
        nx2[1] = kx_select(k, t2, i2, best2_i);
        ir_for_end(k.ir, l2, nx2);
        ir_val fv = ir_for_result(l2, 0), fi = ir_for_result(l2, 1);
        m = kx_sg_max(k, fv);
        bi = kx_sg_min(k, kx_select(k, kx_eq(k, fv, m), fi, none));
        bv = m;
    } else {
        /* a tree over workgroup memory, log2(wg) halving steps */
        ir_shm sv = kx_shared(k, "best_v", IR_F32, wg), si = kx_shared(k, "best_i", IR_U32, wg);
        kx_shm_store(k, sv, lid, bv);
        kx_shm_store(k, si, lid, bi);
        kx_barrier(k);
        for (uint32_t h = wg / 2; h >= 1; h /= 2) {
            ir_if *f = kx_if(k, kx_lt_c(k, lid, h));
            ir_val o = kx_add_c(k, lid, h);
            ir_val v1 = kx_shm_load(k, sv, lid, 1), i1 = kx_shm_load(k, si, lid, 1);
            ir_val v2 = kx_shm_load(k, sv, o, 1), i2 = kx_shm_load(k, si, o, 1);
            ir_val t2 = better(k, v2, i2, v1, i1);
            kx_shm_store(k, sv, lid, kx_select(k, t2, v2, v1));
            kx_shm_store(k, si, lid, kx_select(k, t2, i2, i1));
            kx_end_if(k, f);
            kx_barrier(k);
        }
        bi = kx_shm_load(k, si, zero, 1);
        bv = kx_shm_load(k, sv, zero, 1);
    }
    ir_if *st = kx_if(k, kx_eq(k, lid, zero));
    kx_store(k, out, obase, bi);
    ir_val bits = kx_bitcast(k, bv, kx_t(k, IR_U32, 1));
    kx_store(k, out, kx_add_c(k, obase, 1), bits);
    kx_end_if(k, st);
    return kn_finish(k.ir, err);
}

ir_kernel *kn_argmax(const rt_caps *c, uint32_t n, kiln_err *err) { return build(c, n, 1, false, err); }

ir_kernel *kn_argmax_rows(const rt_caps *c, uint32_t n, uint32_t rows, kiln_err *err) {
    return build(c, n, rows, false, err);
}

ir_kernel *kn_argmax_masked(const rt_caps *c, uint32_t n, uint32_t rows, kiln_err *err) {
    return build(c, n, rows, true, err);
}
