/* The experts' products (moe.c's kn_moe_gate_up, kn_moe_down, kn_moe_gate_up_g and
 * kn_moe_down_g) on block-quantized experts (kn_quant.h's planes of the file's 3-D tensors:
 * expert e's rows from e * rows), the weights decoded in registers as the quantized
 * matrix-vector products do (kn_q_rows_dot: a subgroup a row, its lanes over chunks of 32
 * columns). The input row a workgroup's rows share (a token's normed input, a choice's
 * SwiGLU row) is staged once in workgroup memory as f32. The same rounding points and
 * weighted sums as the 16-bit kernels; only the products' summation order differs. */
#include "base/error.h"
#include "kernels/kn_common.h"
#include "kernels/matvec_internal.h"
#include "kernels/moe_internal.h"
#include "kernels/quant_ir.h"

#include <stdio.h>

#define UNROLL 2

typedef struct qshape {
    bool per_sg;
    uint32_t wg, rows, lanes; /* rows a workgroup (one a subgroup, or one for the whole) */
} qshape;

static qshape shape_of(kx k) {
    const rt_caps *c = k.caps;
    qshape q = {.wg = kn_workgroup(c, 256)};
    uint32_t sg = c->subgroup_size;
    q.per_sg = c->subgroup_arith && sg >= 8 && sg <= q.wg && q.wg % sg == 0;
    if (!q.per_sg) q.wg = kn_workgroup(c, 128);
    q.rows = q.per_sg ? q.wg / sg : 1, q.lanes = q.per_sg ? sg : q.wg;
    kx_workgroup(k, q.wg);
    return q;
}

static ir_val lane_of(kx k, const qshape *q) { return q->per_sg ? kx_sg_lane(k) : kx_local(k); }
static ir_val row_in_group(kx k, const qshape *q) { return q->per_sg ? kx_sg_id(k) : kx_u32(k, 0); }

/* The lanes' parts summed: over the subgroup, or the workgroup (shm_name one a call). */
static ir_val reduce(kx k, const qshape *q, ir_val v, const char *shm_name) {
    return q->per_sg ? kx_sg_sum(k, v) : kn_wg_sum(k, q->wg, v, shm_name);
}

/* x[x0 .. x0 + n) into workgroup array hx as f32, then a barrier (uniform control flow). */
static void stage(kx k, const qshape *q, ir_shm hx, ir_buf x, ir_val x0, uint32_t n) {
    ir_val i;
    ir_for *l = kx_for(k, kx_local(k), kx_u32(k, n), kx_u32(k, q->wg), &i);
    kx_shm_store(k, hx, i, kx_as(k, kx_load(k, x, kx_add(k, x0, i), 1), IR_F32));
    kx_end_for(k, l);
    kx_barrier(k);
}

/* n_expert: the cache's slots where cached (fewer than a token's choices is fine then) */
/* The SwiGLU value of this subgroup's row r of expert e (gate and up, rows e * n_ff + r of
 * L[0], L[1]) on the staged input hx, stored at act[cj][r] by one lane (r < n_ff). */
static void gate_up_row(kx k, const qshape *q, const kn_qlayout *L, ir_buf wg_, ir_buf wu, ir_buf x, ir_shm hx,
                        ir_val e, ir_val r, ir_val cj, uint32_t n_ff, ir_buf act, ir_scalar dtype) {
    ir_val row = kx_add(k, kx_mul_c(k, e, n_ff), kx_min_c(k, r, n_ff - 1)), acc[2], lane = lane_of(k, q);
    kn_q_row rr[2] = {{&L[0], wg_, row}, {&L[1], wu, row}};
    kn_q_rows_dot(k, rr, 2, x, hx, lane, q->lanes, UNROLL, acc);
    ir_val g = reduce(k, q, acc[0], "sum_gate"), u = reduce(k, q, acc[1], "sum_up");
    ir_if *st = kx_if(k, kx_and(k, kx_eq_c(k, lane, 0), kx_lt_c(k, r, n_ff)));
    kn_mv_store_row(k, KN_EPI_SWIGLU, act, 0, 0, kx_add(k, kx_mul_c(k, cj, n_ff), r), g, u, dtype, dtype);
    kx_end_if(k, st);
}

/* The down product of this subgroup's row r of expert e (row e * n_embd + r of L) with the
 * staged SwiGLU row ax, summed over the lanes (shm_name: the workgroup sum's array). */
static ir_val down_row(kx k, const qshape *q, const kn_qlayout *L, ir_buf wd, ir_buf x, ir_shm ax, ir_val e, ir_val r,
                       uint32_t n_embd, const char *shm_name) {
    ir_val acc;
    kn_q_row rr = {L, wd, kx_add(k, kx_mul_c(k, e, n_embd), kx_min_c(k, r, n_embd - 1))};
    kn_q_rows_dot(k, &rr, 1, x, ax, lane_of(k, q), q->lanes, UNROLL, &acc);
    return reduce(k, q, acc, shm_name);
}

static int layouts(const char *who, const rt_caps *c, ir_scalar dtype, const kn_qtype *qt, uint32_t n_qt,
                   uint32_t rows, uint32_t cols, uint32_t n_expert, uint32_t k_used, bool cached, kn_qlayout *L,
                   kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return -1;
    if (!n_expert || !k_used || (k_used > n_expert && !cached) || k_used > 64 || (uint64_t)n_expert * rows > UINT32_MAX ||
        (uint64_t)n_expert * rows * cols > UINT32_MAX || cols * 4ull + 1024 > c->shared_bytes)
        return kiln_fail(err, KILN_ERR_INVALID, "%s: %u experts of %u x %u, %u a token (u32 indices, a row in %u bytes)",
                         who, n_expert, rows, cols, k_used, c->shared_bytes),
               -1;
    for (uint32_t i = 0; i < n_qt; i++)
        if (kn_qlayout_of(qt[i], n_expert * rows, cols, &L[i], err)) return -1;
    return 0;
}

ir_kernel *kn_moe_gate_up_q(const rt_caps *c, uint32_t n_embd, uint32_t n_ff, uint32_t n_expert, uint32_t k_used,
                            kn_qtype qg, kn_qtype qu, ir_scalar dtype, bool cached, uint32_t *groups_x, kiln_err *err) {
    kn_qlayout L[2];
    if (layouts("kn_moe_gate_up_q", c, dtype, (kn_qtype[]){qg, qu}, 2, n_ff, n_embd, n_expert, k_used, cached, L, err))
        return NULL;
    kx k = {kn_create("kn_moe_gate_up_q", err), c};
    if (!k.ir) return NULL;
    ir_buf h = kx_buffer_per_group(k, "h", dtype, IR_READ, 1, n_embd);
    ir_buf wg_ = kx_buffer(k, "gate", IR_U32, IR_READ, L[0].words), wu = kx_buffer(k, "up", IR_U32, IR_READ, L[1].words);
    ir_buf sel = kx_buffer_per_group(k, "sel", IR_U32, IR_READ, 1, k_used);
    ir_buf act = kx_buffer_per_group(k, "act", dtype, IR_WRITE, 1, (uint64_t)k_used * n_ff);
    ir_buf slots = cached ? moe_slots_param(k) : (ir_buf){0};
    qshape q = shape_of(k);
    uint32_t groups_r = (n_ff + q.rows - 1) / q.rows;
    /* grid y = t, x = (choice j, row group) */
    ir_val t = kx_group(k, 1), gx = kx_group(k, 0), j = kx_div_c(k, gx, groups_r);
    ir_val r = kx_add(k, kx_mul_c(k, kx_rem_c(k, gx, groups_r), q.rows), row_in_group(k, &q));
    ir_shm hx = kx_shared(k, "hx", IR_F32, n_embd);
    stage(k, &q, hx, h, kx_mul_c(k, t, n_embd), n_embd);
    ir_val cj = kx_add(k, kx_mul_c(k, t, k_used), j), sl = kx_load(k, sel, cj, 1);
    /* cached: a miss is the host's (uniform over the workgroup: one choice) */
    ir_if *hit = cached ? kx_if(k, kx_ne(k, sl, kx_u32(k, KN_MOE_MISS))) : NULL;
    ir_val ex = cached ? moe_clamp_slot(k, slots, sl, n_expert) : kx_min_c(k, sl, n_expert - 1);
    gate_up_row(k, &q, L, wg_, wu, h, hx, ex, r, cj, n_ff, act, dtype);
    if (hit) kx_end_if(k, hit);
    if (groups_x) *groups_x = groups_r * k_used;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_moe_down_q(const rt_caps *c, uint32_t n_ff, uint32_t n_embd, uint32_t n_expert, uint32_t k_used,
                         kn_qtype qd, ir_scalar dtype, bool cached, uint32_t *groups_x, kiln_err *err) {
    kn_qlayout L;
    if (layouts("kn_moe_down_q", c, dtype, &qd, 1, n_embd, n_ff, n_expert, k_used, cached, &L, err)) return NULL;
    kx k = {kn_create("kn_moe_down_q", err), c};
    if (!k.ir) return NULL;
    ir_buf act = kx_buffer_per_group(k, "act", dtype, IR_READ, 1, (uint64_t)k_used * n_ff);
    ir_buf wd = kx_buffer(k, "down", IR_U32, IR_READ, L.words);
    ir_buf sel = kx_buffer_per_group(k, "sel", IR_U32, IR_READ, 1, k_used);
    ir_buf wt = kx_buffer_per_group(k, "wt", IR_F32, IR_READ, 1, k_used);
    ir_buf res = kx_buffer_per_group(k, "res", dtype, IR_READ, 1, n_embd);
    ir_buf y = kx_buffer_per_group(k, "y", dtype, IR_WRITE, 1, n_embd);
    ir_buf miss = cached ? kx_buffer_per_group(k, "miss", dtype, IR_READ, 1, (uint64_t)k_used * n_embd) : (ir_buf){0};
    ir_buf slots = cached ? moe_slots_param(k) : (ir_buf){0};
    qshape q = shape_of(k);
    ir_val t = kx_group(k, 1), r = kx_add(k, kx_group_times(k, 0, q.rows), row_in_group(k, &q)), lane = lane_of(k, &q);
    ir_shm ax = kx_shared(k, "ax", IR_F32, n_ff);
    ir_val o = IR_NONE;
    for (uint32_t j = 0; j < k_used; j++) {
        ir_val cj = kx_add_c(k, kx_mul_c(k, t, k_used), j);
        if (j) kx_barrier(k); /* every row done with the last choice's staged row */
        stage(k, &q, ax, act, kx_mul_c(k, cj, n_ff), n_ff);
        ir_val sl = kx_load(k, sel, cj, 1);
        /* cached: a miss's product is the host's (uniform over the workgroup: one choice) */
        ir_if *hit = cached ? ir_if_begin(k.ir, kx_ne(k, sl, kx_u32(k, KN_MOE_MISS)), 1) : NULL;
        char name[24];
        snprintf(name, sizeof name, "sum_down%u", j);
        ir_val ex = cached ? moe_clamp_slot(k, slots, sl, n_expert) : kx_min_c(k, sl, n_expert - 1);
        ir_val s = down_row(k, &q, &L, wd, act, ax, ex, r, n_embd, name);
        s = kx_as(k, kx_as(k, s, dtype), IR_F32);
        if (hit) {
            ir_if_else(k.ir, hit, &s);
            ir_val m = kx_as(k, kx_load(k, miss, kx_add(k, kx_mul_c(k, cj, n_embd), kx_min_c(k, r, n_embd - 1)), 1),
                             IR_F32);
            ir_if_end(k.ir, hit, &m);
            s = ir_if_result(hit, 0);
        }
        ir_val p = kx_mul(k, kx_load(k, wt, cj, 1), s);
        o = j ? kx_add(k, o, p) : p;
    }
    ir_if *st = kx_if(k, kx_and(k, kx_eq_c(k, lane, 0), kx_lt_c(k, r, n_embd)));
    ir_val at = kx_add(k, kx_mul_c(k, t, n_embd), r);
    kx_store(k, y, at, kn_epilogue(k, KN_EPI_RESIDUAL, o, 0, IR_NONE, res, at, dtype));
    kx_end_if(k, st);
    if (groups_x) *groups_x = (n_embd + q.rows - 1) / q.rows;
    return kn_finish(k.ir, err);
}

/* A block's grouped products: workgroup (e, row group) of grid x = n_expert x groups_r
 * walks e's list (uniform bounds: the barriers of each entry's staging are the whole
 * workgroup's), each entry's input row staged, then this subgroup's row of e; slots (the
 * cache's buffer, or NULL) leaves a slot past those held now with an empty list. */
static void walk_list(kx k, ir_buf off, ir_buf list, const ir_buf *slots, uint32_t n_c, uint32_t groups_r,
                      const qshape *q, ir_val *e, ir_val *r, ir_val *cj, ir_for **loop) {
    ir_val gx = kx_group(k, 0), i;
    *e = kx_div_c(k, gx, groups_r);
    *r = kx_add(k, kx_mul_c(k, kx_rem_c(k, gx, groups_r), q->rows), row_in_group(k, q));
    ir_val first = kx_load(k, off, *e, 1), end = kx_min_c(k, kx_load(k, off, kx_add_c(k, *e, 1), 1), n_c);
    if (slots) end = kx_select(k, kx_lt(k, *e, moe_slots_now(k, *slots)), end, first); /* a slot not held */
    *loop = kx_for(k, first, end, kx_u32(k, 1), &i);
    kx_barrier(k); /* every row done with the last entry's staged row */
    *cj = kx_min_c(k, kx_load(k, list, i, 1), n_c - 1);
}

ir_kernel *kn_moe_gate_up_g_q(const rt_caps *c, uint32_t n_embd, uint32_t n_ff, uint32_t n_expert, uint32_t k_used,
                              uint32_t nb, kn_qtype qg, kn_qtype qu, ir_scalar dtype, bool cached,
                              uint32_t *groups_x, kiln_err *err) {
    kn_qlayout L[2];
    if (layouts("kn_moe_gate_up_g_q", c, dtype, (kn_qtype[]){qg, qu}, 2, n_ff, n_embd, n_expert, k_used, true, L, err))
        return NULL;
    if (!nb || (uint64_t)nb * k_used * (n_ff > n_embd ? n_ff : n_embd) > UINT32_MAX)
        return kiln_fail(err, KILN_ERR_INVALID, "kn_moe_gate_up_g_q: a block of %u tokens", nb), NULL;
    kx k = {kn_create("kn_moe_gate_up_g_q", err), c};
    if (!k.ir) return NULL;
    uint32_t n_c = nb * k_used;
    ir_buf h = kx_buffer(k, "h", dtype, IR_READ, (uint64_t)nb * n_embd);
    ir_buf wg_ = kx_buffer(k, "gate", IR_U32, IR_READ, L[0].words), wu = kx_buffer(k, "up", IR_U32, IR_READ, L[1].words);
    ir_buf off = kx_buffer(k, "off", IR_U32, IR_READ, n_expert + 1), list = kx_buffer(k, "list", IR_U32, IR_READ, n_c);
    ir_buf act = kx_buffer(k, "act", dtype, IR_WRITE, (uint64_t)n_c * n_ff);
    ir_buf slots = cached ? moe_slots_param(k) : (ir_buf){0};
    qshape q = shape_of(k);
    uint32_t groups_r = (n_ff + q.rows - 1) / q.rows;
    ir_shm hx = kx_shared(k, "hx", IR_F32, n_embd);
    ir_val e, r, cj;
    ir_for *l;
    walk_list(k, off, list, cached ? &slots : NULL, n_c, groups_r, &q, &e, &r, &cj, &l);
    stage(k, &q, hx, h, kx_mul_c(k, kx_div_c(k, cj, k_used), n_embd), n_embd);
    gate_up_row(k, &q, L, wg_, wu, h, hx, e, r, cj, n_ff, act, dtype);
    kx_end_for(k, l);
    if (groups_x) *groups_x = n_expert * groups_r;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_moe_down_g_q(const rt_caps *c, uint32_t n_ff, uint32_t n_embd, uint32_t n_expert, uint32_t k_used,
                           uint32_t nb, kn_qtype qd, ir_scalar dtype, bool cached, uint32_t *groups_x,
                           kiln_err *err) {
    kn_qlayout L;
    if (layouts("kn_moe_down_g_q", c, dtype, &qd, 1, n_embd, n_ff, n_expert, k_used, true, &L, err)) return NULL;
    if (!nb || (uint64_t)nb * k_used * (n_ff > n_embd ? n_ff : n_embd) > UINT32_MAX)
        return kiln_fail(err, KILN_ERR_INVALID, "kn_moe_down_g_q: a block of %u tokens", nb), NULL;
    kx k = {kn_create("kn_moe_down_g_q", err), c};
    if (!k.ir) return NULL;
    uint32_t n_c = nb * k_used;
    ir_buf act = kx_buffer(k, "act", dtype, IR_READ, (uint64_t)n_c * n_ff);
    ir_buf wd = kx_buffer(k, "down", IR_U32, IR_READ, L.words);
    ir_buf off = kx_buffer(k, "off", IR_U32, IR_READ, n_expert + 1), list = kx_buffer(k, "list", IR_U32, IR_READ, n_c);
    ir_buf yc = kx_buffer(k, "yc", dtype, IR_WRITE, (uint64_t)n_c * n_embd);
    ir_buf slots = cached ? moe_slots_param(k) : (ir_buf){0};
    qshape q = shape_of(k);
    uint32_t groups_r = (n_embd + q.rows - 1) / q.rows;
    ir_shm ax = kx_shared(k, "ax", IR_F32, n_ff);
    ir_val e, r, cj, lane = lane_of(k, &q);
    ir_for *l;
    walk_list(k, off, list, cached ? &slots : NULL, n_c, groups_r, &q, &e, &r, &cj, &l);
    stage(k, &q, ax, act, kx_mul_c(k, cj, n_ff), n_ff);
    ir_val s = down_row(k, &q, &L, wd, act, ax, e, r, n_embd, "sum_down");
    ir_if *st = kx_if(k, kx_and(k, kx_eq_c(k, lane, 0), kx_lt_c(k, r, n_embd)));
    kx_store(k, yc, kx_add(k, kx_mul_c(k, cj, n_embd), r), kx_as(k, s, dtype));
    kx_end_if(k, st);
    kx_end_for(k, l);
    if (groups_x) *groups_x = n_expert * groups_r;
    return kn_finish(k.ir, err);
}
