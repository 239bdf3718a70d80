/* A mixture of experts' feed-forward on the device (qwen3moe), as the oracle computes it
 * (oracle/moe.c), in four launches for n tokens, the router's choice never leaving the
 * device:
 *
 *   kn_moe_scores    scores s_x = router_x . h_t in f32 (the router stays f32), a subgroup
 *                    an expert (every expert's row once, spread over the device);
 *   kn_moe_route     workgroup t: e_x = exp(s_x - max), the k largest e_x (largest first, a tie to the
 *                    lower expert) into sel[t][0..k), and their weights e_j / sum of the
 *                    chosen e into wt[t][..]. The oracle chooses on p = e / sum(e) and
 *                    divides by the sum of the chosen p: the same order, and weights equal
 *                    up to a few f32 roundings. Its shared form (qwen35moe) routes over
 *                    all experts but the last, the shared one, which every token takes as
 *                    its last choice with weight sigmoid(its score);
 *   kn_moe_gate_up   grid y = t, x = (choice j, rows): act[t k + j][r] = round(silu(round(gate_e[r] . h_t))
 *                    * round(up_e[r] . h_t)) for expert e = sel[t][j] (the dense SwiGLU's
 *                    rounding points);
 *   kn_moe_down      grid y = t: y[t][r] = round(res[t][r] + round(sum_j wt[t][j] *
 *                    round(down_e[r] . act[t k + j]))), the weighted sum in f32 in the
 *                    order of the choice, a multiply then an add (the oracle's), the
 *                    residual as every FFN's.
 *
 * Rows are one subgroup's each where the device has subgroup arithmetic (the lanes split
 * the columns and reduce), else one invocation's. The experts' matrices are the file's 3-D
 * tensors, expert e's rows from e * rows; an expert index past the last (never written by
 * the router) is clamped so that no read leaves the tensor. */
#include "base/error.h"
#include "kernels/kn_common.h"
#include "kernels/matvec_internal.h"
#include "kernels/moe_internal.h"

#include <math.h>

#define MOE_MAX_EXPERTS 1024
#define MOE_MISS KN_MOE_MISS
#define MOE_MAX_USED 64

/* sum over c < cols of w[w0 + c] * x[x0 + c] in f32 (w of type wt, x of type xt), in
 * vectors of kn_vec_width(cols) (w0 and x0 multiples of it): the subgroup's lanes split the
 * columns and reduce (per_sg; every lane gets the sum), or the invocation walks them alone.
 * The walk is unrolled by ROW_UNROLL, every load of a step issued before its sums (one
 * load in flight a lane left a decode step's expert products at half the bandwidth); the
 * sums stay one chain in column order, so the result is the plain loop's. */
#define ROW_UNROLL 4
static ir_val row_dot(kx k, bool per_sg, ir_buf w, ir_scalar wt, ir_val w0, ir_buf x, ir_scalar xt, ir_val x0,
                      uint32_t cols) {
    uint32_t v = kn_vec_width(cols), lanes = per_sg ? k.caps->subgroup_size : 1;
    ir_type fv = kx_t(k, IR_F32, v);
    ir_val start = per_sg ? kx_mul_c(k, kx_sg_lane(k), v) : kx_u32(k, 0);
    uint32_t stride = lanes * v, main_end = cols - cols % (stride * ROW_UNROLL);
    ir_val acc = kx_splat(k, kx_f32(k, 0.0f), v);
    if (main_end) {
        ir_for *l = ir_for_begin(k.ir, start, kx_u32(k, main_end), kx_u32(k, stride * ROW_UNROLL), 1, &acc);
        ir_val a = ir_for_arg(l, 0), wv[ROW_UNROLL], xv[ROW_UNROLL];
        for (uint32_t u = 0; u < ROW_UNROLL; u++) {
            ir_val c = kx_add_c(k, ir_for_iv(l), u * stride);
            wv[u] = kx_load(k, w, kx_add(k, w0, c), v), xv[u] = kx_load(k, x, kx_add(k, x0, c), v);
        }
        for (uint32_t u = 0; u < ROW_UNROLL; u++) {
            ir_val a_w = wt != IR_F32 ? kx_convert(k, wv[u], fv) : wv[u];
            ir_val a_x = xt != IR_F32 ? kx_convert(k, xv[u], fv) : xv[u];
            a = kx_add(k, a, kx_mul(k, a_w, a_x));
        }
        ir_for_end(k.ir, l, &a);
        acc = ir_for_result(l, 0);
    }
    if (main_end < cols) {
        ir_for *l = ir_for_begin(k.ir, kx_add_c(k, start, main_end), kx_u32(k, cols), kx_u32(k, stride), 1, &acc);
        ir_val c = ir_for_iv(l), a = ir_for_arg(l, 0);
        ir_val wv = kx_load(k, w, kx_add(k, w0, c), v), xv = kx_load(k, x, kx_add(k, x0, c), v);
        if (wt != IR_F32) wv = kx_convert(k, wv, fv);
        if (xt != IR_F32) xv = kx_convert(k, xv, fv);
        a = kx_add(k, a, kx_mul(k, wv, xv));
        ir_for_end(k.ir, l, &a);
        acc = ir_for_result(l, 0);
    }
    ir_val s = kn_lane_sum(k, acc, v);
    return per_sg ? kx_sg_sum(k, s) : s;
}

/* Whether rows go one a subgroup, and the rows a workgroup of wg takes. */
static bool per_subgroup(const rt_caps *c, uint32_t wg, uint32_t *rows) {
    uint32_t sg = c->subgroup_size;
    bool on = c->subgroup_arith && sg >= 4 && sg <= wg && wg % sg == 0 && (!c->subgroup_min || c->subgroup_min == sg) &&
              (!c->subgroup_max || c->subgroup_max == sg);
    *rows = on ? wg / sg : wg;
    return on;
}

/* The row this invocation (or its subgroup) takes in a grid of `rows` rows a workgroup. */
static ir_val my_row(kx k, bool per_sg, uint32_t rows) {
    return kx_add(k, kx_group_times(k, 0, rows), per_sg ? kx_sg_id(k) : kx_local(k));
}

/* n_expert: the cache's slots where cached (fewer than a token's choices is fine then) */
static int check(const char *who, const rt_caps *c, ir_scalar dtype, uint32_t n_in, uint32_t n_out, uint32_t n_expert,
                 uint32_t k_used, bool cached, kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return -1;
    if (!n_in || !n_out || !n_expert || n_expert > MOE_MAX_EXPERTS || !k_used || (k_used > n_expert && !cached) ||
        k_used > MOE_MAX_USED || (uint64_t)n_expert * n_in * n_out > UINT32_MAX)
        return kiln_fail(err, KILN_ERR_INVALID,
                         "%s: %u experts of %u x %u, %u a token (1 <= used <= %u, experts <= %u, u32 indices)", who,
                         n_expert, n_out, n_in, k_used, MOE_MAX_USED, MOE_MAX_EXPERTS);
    return 0;
}

/* ---- the router ---------------------------------------------------------------------------- */

/* The workgroup's best (v, i) of every invocation's (larger v, or as large and a lower i)
 * into bv[0], bi[0]; barriers in uniform control flow. */
static void wg_best(kx k, uint32_t wg, ir_shm bv, ir_shm bi, ir_val v, ir_val i) {
    ir_val lid = kx_local(k);
    kx_shm_store(k, bv, lid, v);
    kx_shm_store(k, bi, lid, i);
    kx_barrier(k);
    uint32_t h = 1;
    while (h * 2 <= wg) h *= 2;
    if (h < wg) { /* fold the invocations past the largest power of two in first */
        ir_if *f = kx_if(k, kx_lt_c(k, lid, wg - h));
        ir_val o = kx_add_c(k, lid, h);
        ir_val v1 = kx_shm_load(k, bv, lid, 1), i1 = kx_shm_load(k, bi, lid, 1);
        ir_val v2 = kx_shm_load(k, bv, o, 1), i2 = kx_shm_load(k, bi, o, 1);
        ir_val take = kx_or(k, kx_gt(k, v2, v1), kx_and(k, kx_eq(k, v2, v1), kx_lt(k, i2, i1)));
        kx_shm_store(k, bv, lid, kx_select(k, take, v2, v1));
        kx_shm_store(k, bi, lid, kx_select(k, take, i2, i1));
        kx_end_if(k, f);
        kx_barrier(k);
    }
    for (h /= 2; h >= 1; h /= 2) {
        ir_if *f = kx_if(k, kx_lt_c(k, lid, h));
        ir_val o = kx_add_c(k, lid, h);
        ir_val v1 = kx_shm_load(k, bv, lid, 1), i1 = kx_shm_load(k, bi, lid, 1);
        ir_val v2 = kx_shm_load(k, bv, o, 1), i2 = kx_shm_load(k, bi, o, 1);
        ir_val take = kx_or(k, kx_gt(k, v2, v1), kx_and(k, kx_eq(k, v2, v1), kx_lt(k, i2, i1)));
        kx_shm_store(k, bv, lid, kx_select(k, take, v2, v1));
        kx_shm_store(k, bi, lid, kx_select(k, take, i2, i1));
        kx_end_if(k, f);
        kx_barrier(k);
    }
}

/* The invocation's best (v, i) over experts x = lid, lid + wg, .. < n with ok(x): e[x] from
 * workgroup memory, a strict > in increasing x (the first of equals stays); (-inf, none)
 * where it has none. */
static void my_best(kx k, uint32_t wg, uint32_t n, ir_shm e, ir_shm taken, ir_val *v, ir_val *i) {
    ir_val init[2] = {kx_f32(k, -INFINITY), kx_u32(k, UINT32_MAX)};
    ir_for *l = ir_for_begin(k.ir, kx_local(k), kx_u32(k, n), kx_u32(k, wg), 2, init);
    ir_val x = ir_for_iv(l), bv = ir_for_arg(l, 0), bi = ir_for_arg(l, 1);
    ir_val ex = kx_shm_load(k, e, x, 1);
    ir_val free_ = taken ? kx_eq_c(k, kx_shm_load(k, taken, x, 1), 0) : IR_NONE;
    ir_val take = kx_or(k, kx_gt(k, ex, bv), kx_eq_c(k, bi, UINT32_MAX));
    if (taken) take = kx_and(k, take, free_);
    ir_val nx[2] = {kx_select(k, take, ex, bv), kx_select(k, take, x, bi)};
    ir_for_end(k.ir, l, nx);
    *v = ir_for_result(l, 0), *i = ir_for_result(l, 1);
}

/* The subgroup's best (v, i) of its lanes' (larger v, or as large and a lower i), in every
 * lane: a butterfly of shuffles, then lane 0's pair broadcast (so that the lanes agree even
 * where a NaN leaves the order partial). No barrier: the workgroup is this one subgroup. */
static void sg_best(kx k, uint32_t lanes, ir_val *v, ir_val *i) {
    for (uint32_t m = lanes / 2; m >= 1; m /= 2) {
        ir_val v2 = kx_sg_xor(k, *v, m), i2 = kx_sg_xor(k, *i, m);
        ir_val take = kx_or(k, kx_gt(k, v2, *v), kx_and(k, kx_eq(k, v2, *v), kx_lt(k, i2, *i)));
        *v = kx_select(k, take, v2, *v), *i = kx_select(k, take, i2, *i);
    }
    *v = ir_sg_broadcast(k.ir, *v, kx_u32(k, 0)), *i = ir_sg_broadcast(k.ir, *i, kx_u32(k, 0));
}

ir_kernel *kn_moe_scores(const rt_caps *c, uint32_t n_embd, uint32_t n_expert, ir_scalar dtype, uint32_t *groups_x,
                         kiln_err *err) {
    if (check("kn_moe_scores", c, dtype, n_embd, 1, n_expert, 1, false, err)) return NULL;
    kx k = {kn_create("kn_moe_scores", err), c};
    if (!k.ir) return NULL;
    ir_buf h = kx_buffer_per_group(k, "h", dtype, IR_READ, 1, n_embd);
    ir_buf router = kx_buffer(k, "router", IR_F32, IR_READ, (uint64_t)n_expert * n_embd);
    ir_buf scores = kx_buffer_per_group(k, "scores", IR_F32, IR_WRITE, 1, n_expert);
    uint32_t wg = kn_workgroup(c, 256), rows;
    kx_workgroup(k, wg);
    bool per_sg = per_subgroup(c, wg, &rows);
    ir_val t = kx_group(k, 1), x = my_row(k, per_sg, rows);
    ir_if *in = kx_if(k, kx_lt_c(k, x, n_expert));
    ir_val s = row_dot(k, per_sg, router, IR_F32, kx_mul_c(k, x, n_embd), h, dtype, kx_mul_c(k, t, n_embd), n_embd);
    ir_if *one = per_sg ? kx_if(k, kx_eq_c(k, kx_sg_lane(k), 0)) : NULL;
    kx_store(k, scores, kx_add(k, kx_mul_c(k, t, n_expert), x), s);
    if (one) kx_end_if(k, one);
    kx_end_if(k, in);
    if (groups_x) *groups_x = (n_expert + rows - 1) / rows;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_moe_route(const rt_caps *c, uint32_t n_expert, uint32_t k_used, bool shared, kiln_err *err) {
    if (!c || !n_expert || n_expert > MOE_MAX_EXPERTS || !k_used || k_used > n_expert || k_used > MOE_MAX_USED ||
        (shared && (n_expert < 2 || k_used < 2)))
        return kiln_fail(
                   err, KILN_ERR_INVALID,
                   "kn_moe_route: %u of %u experts a token (1 <= used <= %u, experts <= %u; 2 each with a shared one)",
                   k_used, n_expert, MOE_MAX_USED, MOE_MAX_EXPERTS),
               NULL;
    /* the routed experts and choices: all, or all but the shared expert (the last) */
    uint32_t ne = shared ? n_expert - 1 : n_expert, kr = shared ? k_used - 1 : k_used;
    kx k = {kn_create("kn_moe_route", err), c};
    if (!k.ir) return NULL;
    ir_buf scores = kx_buffer_per_group(k, "scores", IR_F32, IR_READ, 1, n_expert);
    ir_buf sel = kx_buffer_per_group(k, "sel", IR_U32, IR_WRITE, 1, k_used);
    ir_buf wt = kx_buffer_per_group(k, "wt", IR_F32, IR_WRITE, 1, k_used);
    /* 32 invocations: k + 1 reductions of a few experts each, whose barriers cost more the
     * wider the workgroup (256 took 9.5 us a token on the H100, a decode step's 8%); the
     * choice is the same whatever the width (the lowest index among equals). Where the
     * device has shuffles, the workgroup is one subgroup, the reductions butterflies and expert x
     * stays lane x % wg's (its e and taken entries never cross lanes): no barrier but the
     * last (14.4 us a token with the barriers' tree on the H100, 48 layers a step). */
    uint32_t sg = c->subgroup_size, wg = kn_workgroup(c, 32);
    bool one_sg = c->subgroup_shuffle && sg >= 4 && sg <= 128 && kn_workgroup(c, sg) == sg &&
                  (!c->subgroup_min || c->subgroup_min == sg) && (!c->subgroup_max || c->subgroup_max == sg);
    if (one_sg) wg = sg;
    kx_workgroup(k, wg);
    ir_shm e = kx_shared(k, "e", IR_F32, n_expert), taken = kx_shared(k, "taken", IR_U32, n_expert);
    ir_shm chosen = kx_shared(k, "chosen", IR_U32, k_used);
    ir_shm bv = one_sg ? 0 : kx_shared(k, "best_v", IR_F32, wg), bi = one_sg ? 0 : kx_shared(k, "best_i", IR_U32, wg);
    ir_val t = kx_group(k, 1), lid = kx_local(k), x;
    ir_val s0 = kx_mul_c(k, t, n_expert), out0 = kx_mul_c(k, t, k_used);
    ir_for *l = kx_for(k, lid, kx_u32(k, ne), kx_u32(k, wg), &x);
    kx_shm_store(k, e, x, kx_load(k, scores, kx_add(k, s0, x), 1));
    kx_shm_store(k, taken, x, kx_u32(k, 0));
    kx_end_for(k, l);
    if (!one_sg) kx_barrier(k);
    /* e_x = exp(s_x - max) */
    ir_val v, i, max;
    my_best(k, wg, ne, e, 0, &v, &i);
    if (one_sg) {
        sg_best(k, wg, &v, &i);
        max = v;
    } else {
        wg_best(k, wg, bv, bi, v, i);
        max = kx_shm_load(k, bv, kx_u32(k, 0), 1);
        kx_barrier(k); /* everyone has read the max before best_v is reused */
    }
    l = kx_for(k, lid, kx_u32(k, ne), kx_u32(k, wg), &x);
    kx_shm_store(k, e, x, kn_exp(k, kx_sub(k, kx_shm_load(k, e, x, 1), max)));
    kx_end_for(k, l);
    if (!one_sg) kx_barrier(k);
    /* the k largest in turn */
    ir_val j;
    ir_for *round = kx_for(k, kx_u32(k, 0), kx_u32(k, kr), kx_u32(k, 1), &j);
    my_best(k, wg, ne, e, taken, &v, &i);
    if (one_sg) {
        sg_best(k, wg, &v, &i);
        ir_val won = kx_min_c(k, i, ne - 1);
        ir_if *first = kx_if(k, kx_eq_c(k, lid, 0));
        kx_store(k, sel, kx_add(k, out0, j), won);
        kx_shm_store(k, chosen, j, won);
        kx_end_if(k, first);
        ir_if *owner = kx_if(k, kx_eq(k, kx_rem_c(k, won, wg), lid)); /* the lane that reads taken[won] */
        kx_shm_store(k, taken, won, kx_u32(k, 1));
        kx_end_if(k, owner);
    } else {
        wg_best(k, wg, bv, bi, v, i);
        ir_if *first = kx_if(k, kx_eq_c(k, lid, 0));
        ir_val won = kx_min_c(k, kx_shm_load(k, bi, kx_u32(k, 0), 1), ne - 1);
        kx_store(k, sel, kx_add(k, out0, j), won);
        kx_shm_store(k, chosen, j, won);
        kx_shm_store(k, taken, won, kx_u32(k, 1));
        kx_end_if(k, first);
        kx_barrier(k);
    }
    kx_end_for(k, round);
    if (one_sg) kx_barrier(k); /* chosen (lane 0's) and every lane's e, read across lanes below */
    /* their weights: e_j over the chosen e's sum (in the order chosen); choice j is lane
     * j % wg's (k may exceed the workgroup) */
    ir_val zero = kx_f32(k, 0.0f);
    ir_for *sum = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, kr), kx_u32(k, 1), 1, &zero);
    ir_val acc = ir_for_arg(sum, 0);
    ir_val ej = kx_shm_load(k, e, kx_shm_load(k, chosen, ir_for_iv(sum), 1), 1);
    acc = kx_add(k, acc, ej);
    ir_for_end(k.ir, sum, &acc);
    ir_val total = ir_for_result(sum, 0);
    ir_for *mine = kx_for(k, lid, kx_u32(k, kr), kx_u32(k, wg), &j);
    ir_val ej_mine = kx_shm_load(k, e, kx_shm_load(k, chosen, j, 1), 1);
    kx_store(k, wt, kx_add(k, out0, j), kn_fdiv(k, ej_mine, total));
    kx_end_for(k, mine);
    if (shared) { /* the shared expert last, weighted by the sigmoid of its gate's score */
        ir_if *first = kx_if(k, kx_eq_c(k, lid, 0));
        kx_store(k, sel, kx_add_c(k, out0, kr), kx_u32(k, ne));
        kx_store(k, wt, kx_add_c(k, out0, kr), kn_sigmoid(k, kx_load(k, scores, kx_add_c(k, s0, ne), 1)));
        kx_end_if(k, first);
    }
    return kn_finish(k.ir, err);
}

/* ---- the experts' products ------------------------------------------------------------------ */

ir_kernel *kn_moe_gate_up(const rt_caps *c, uint32_t n_embd, uint32_t n_ff, uint32_t n_expert, uint32_t k_used,
                          ir_scalar dtype, bool cached, uint32_t *groups_x, kiln_err *err) {
    if (check("kn_moe_gate_up", c, dtype, n_embd, n_ff, n_expert, k_used, cached, err)) return NULL;
    kx k = {kn_create("kn_moe_gate_up", err), c};
    if (!k.ir) return NULL;
    uint64_t w_elems = (uint64_t)(cached ? 1 : n_expert) * n_ff * n_embd;
    /* grid y = t, grid x = (choice j, row group): each workgroup's rows of one expert */
    ir_buf h = kx_buffer_per_group(k, "h", dtype, IR_READ, 1, n_embd);
    ir_buf wg_ = kx_buffer(k, "gate", dtype, IR_READ, w_elems), wu = kx_buffer(k, "up", dtype, IR_READ, w_elems);
    ir_buf sel = kx_buffer_per_group(k, "sel", IR_U32, IR_READ, 1, k_used);
    ir_buf act = kx_buffer_per_group(k, "act", dtype, IR_WRITE, 1, (uint64_t)k_used * n_ff);
    ir_buf slots = cached ? moe_slots_param(k) : (ir_buf){0};
    uint32_t wg = kn_workgroup(c, 256), rows;
    kx_workgroup(k, wg);
    bool per_sg = per_subgroup(c, wg, &rows);
    uint32_t groups_r = (n_ff + rows - 1) / rows;
    ir_val t = kx_group(k, 1), gx = kx_group(k, 0), j = kx_div_c(k, gx, groups_r);
    ir_val r = kx_add(k, kx_mul_c(k, kx_rem_c(k, gx, groups_r), rows), per_sg ? kx_sg_id(k) : kx_local(k));
    ir_val h0 = kx_mul_c(k, t, n_embd);
    ir_if *in = kx_if(k, kx_lt_c(k, r, n_ff));
    ir_val cj = kx_add(k, kx_mul_c(k, t, k_used), j);
    ir_val s = kx_load(k, sel, cj, 1);
    ir_if *hit = cached ? kx_if(k, kx_ne(k, s, kx_u32(k, MOE_MISS))) : NULL; /* a miss: the host's */
    ir_val ex = cached ? moe_clamp_slot(k, slots, s, n_expert) : kx_min_c(k, s, n_expert - 1);
    ir_val w0 = kx_mul_c(k, kx_add(k, kx_mul_c(k, ex, n_ff), r), n_embd);
    ir_val g = row_dot(k, per_sg, wg_, dtype, w0, h, dtype, h0, n_embd);
    ir_val u = row_dot(k, per_sg, wu, dtype, w0, h, dtype, h0, n_embd);
    ir_if *one = per_sg ? kx_if(k, kx_eq_c(k, kx_sg_lane(k), 0)) : NULL;
    kn_mv_store_row(k, KN_EPI_SWIGLU, act, 0, 0, kx_add(k, kx_mul_c(k, cj, n_ff), r), g, u, dtype, dtype);
    if (one) kx_end_if(k, one);
    if (hit) kx_end_if(k, hit);
    kx_end_if(k, in);
    if (groups_x) *groups_x = groups_r * k_used;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_moe_down(const rt_caps *c, uint32_t n_ff, uint32_t n_embd, uint32_t n_expert, uint32_t k_used,
                       ir_scalar dtype, bool cached, uint32_t *groups_x, kiln_err *err) {
    if (check("kn_moe_down", c, dtype, n_ff, n_embd, n_expert, k_used, cached, err)) return NULL;
    kx k = {kn_create("kn_moe_down", err), c};
    if (!k.ir) return NULL;
    /* grid y = t */
    ir_buf act = kx_buffer_per_group(k, "act", dtype, IR_READ, 1, k_used * n_ff);
    ir_buf wd = kx_buffer(k, "down", dtype, IR_READ, (uint64_t)(cached ? 1 : n_expert) * n_embd * n_ff);
    ir_buf sel = kx_buffer_per_group(k, "sel", IR_U32, IR_READ, 1, k_used);
    ir_buf wt = kx_buffer_per_group(k, "wt", IR_F32, IR_READ, 1, k_used);
    ir_buf res = kx_buffer_per_group(k, "res", dtype, IR_READ, 1, n_embd);
    ir_buf y = kx_buffer_per_group(k, "y", dtype, IR_WRITE, 1, n_embd);
    ir_buf miss = cached ? kx_buffer_per_group(k, "miss", dtype, IR_READ, 1, (uint64_t)k_used * n_embd) : (ir_buf){0};
    ir_buf slots = cached ? moe_slots_param(k) : (ir_buf){0};
    uint32_t wg = kn_workgroup(c, 256), rows;
    kx_workgroup(k, wg);
    bool per_sg = per_subgroup(c, wg, &rows);
    ir_val t = kx_group(k, 1), r = my_row(k, per_sg, rows);
    ir_val c0 = kx_mul_c(k, t, k_used);
    ir_if *in = kx_if(k, kx_lt_c(k, r, n_embd));
    ir_val o = IR_NONE;
    for (uint32_t j = 0; j < k_used; j++) {
        ir_val cj = kx_add_c(k, c0, j), s = kx_load(k, sel, cj, 1);
        /* a miss: the host's rounded product (uniform over the workgroup: one token's choice) */
        ir_if *hit = cached ? ir_if_begin(k.ir, kx_ne(k, s, kx_u32(k, MOE_MISS)), 1) : NULL;
        ir_val ex = cached ? moe_clamp_slot(k, slots, s, n_expert) : kx_min_c(k, s, n_expert - 1);
        ir_val w0 = kx_mul_c(k, kx_add(k, kx_mul_c(k, ex, n_embd), r), n_ff);
        ir_val yj = kx_as(k, kx_as(k, row_dot(k, per_sg, wd, dtype, w0, act, dtype, kx_mul_c(k, cj, n_ff), n_ff), dtype),
                          IR_F32);
        if (hit) {
            ir_if_else(k.ir, hit, &yj);
            ir_val m = kx_as(k, kx_load(k, miss, kx_add(k, kx_mul_c(k, cj, n_embd), r), 1), IR_F32);
            ir_if_end(k.ir, hit, &m);
            yj = ir_if_result(hit, 0);
        }
        ir_val p = kx_mul(k, kx_load(k, wt, cj, 1), yj);
        o = j ? kx_add(k, o, p) : p;
    }
    ir_if *one = per_sg ? kx_if(k, kx_eq_c(k, kx_sg_lane(k), 0)) : NULL;
    ir_val at = kx_add(k, kx_mul_c(k, t, n_embd), r);
    kx_store(k, y, at, kn_epilogue(k, KN_EPI_RESIDUAL, o, 0, IR_NONE, res, at, dtype));
    if (one) kx_end_if(k, one);
    kx_end_if(k, in);
    if (groups_x) *groups_x = (n_embd + rows - 1) / rows;
    return kn_finish(k.ir, err);
}

/* ---- a block's tokens grouped by expert ------------------------------------------------------ *
 *
 * A block of nb tokens reads each expert once for all the tokens that chose it, where the
 * per-token kernels above would read it once a token:
 *   kn_moe_group      one workgroup: the choices c = t k + j of the block's first n = info[1]
 *                     tokens listed by expert (list[off[e] .. off[e + 1]), a counting sort;
 *                     rank is its scratch);
 *   kn_moe_gate_up_g  workgroup (e, row group): act[c][r] for every c on e's list;
 *   kn_moe_down_g     workgroup (e, row group): yc[c][r] = round(down_e[r] . act[c]);
 *   kn_moe_combine    y[t][r] = round(res[t][r] + round(sum_j wt[t k + j] * yc[t k + j][r]))
 *                     for t < n, the decode step's sum in the same order. */

ir_kernel *kn_moe_group(const rt_caps *c, uint32_t n_expert, uint32_t k_used, uint32_t nb, bool cached, kiln_err *err) {
    if (!nb || !n_expert || n_expert > MOE_MAX_EXPERTS || !k_used || (k_used > n_expert && !cached) || k_used > MOE_MAX_USED ||
        (uint64_t)nb * k_used > (1u << 24))
        return kiln_fail(err, KILN_ERR_INVALID, "kn_moe_group: %u tokens of %u of %u experts", nb, k_used, n_expert),
               NULL;
    kx k = {kn_create("kn_moe_group", err), c};
    if (!k.ir) return NULL;
    uint32_t n_c = nb * k_used;
    /* cached: the host's misses (MOE_MISS) in a bin past the last expert, which no
     * product reads */
    uint32_t bins = n_expert + cached;
    ir_buf sel = kx_buffer(k, "sel", IR_U32, IR_READ, n_c), info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    ir_buf rank = kx_buffer(k, "rank", IR_U32, IR_READ | IR_WRITE, n_c);
    ir_buf off = kx_buffer(k, "off", IR_U32, IR_WRITE, bins + 1), list = kx_buffer(k, "list", IR_U32, IR_WRITE, n_c);
    uint32_t wg = kn_workgroup(c, 256);
    kx_workgroup(k, wg);
    ir_shm cnt = kx_shared(k, "cnt", IR_U32, bins + 1);
    ir_val lid = kx_local(k), x, i;
    ir_val n = kx_mul_c(k, kx_min_c(k, kx_load_c(k, info, 1), nb), k_used); /* the live tokens' choices */
    ir_for *l = kx_for(k, lid, kx_u32(k, bins + 1), kx_u32(k, wg), &x);
    kx_shm_store(k, cnt, x, kx_u32(k, 0));
    kx_end_for(k, l);
    kx_barrier(k);
    l = kx_for(k, lid, n, kx_u32(k, wg), &i);
    ir_val e = kx_min_c(k, kx_load(k, sel, i, 1), bins - 1);
    kx_store(k, rank, i, ir_atomic(k.ir, IR_ATOMIC_ADD, true, cnt, e, kx_u32(k, 1)));
    kx_end_for(k, l);
    kx_barrier(k);
    /* the exclusive prefix sums, in order, by one invocation */
    ir_if *one = kx_if(k, kx_eq_c(k, lid, 0));
    ir_val zero = kx_u32(k, 0);
    ir_for *scan = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, bins + 1), kx_u32(k, 1), 1, &zero);
    ir_val at = ir_for_arg(scan, 0), ex = ir_for_iv(scan);
    ir_val here = kx_shm_load(k, cnt, ex, 1);
    kx_shm_store(k, cnt, ex, at);
    kx_store(k, off, ex, at);
    ir_val next = kx_add(k, at, here);
    ir_for_end(k.ir, scan, &next);
    kx_end_if(k, one);
    kx_barrier(k);
    l = kx_for(k, lid, n, kx_u32(k, wg), &i);
    e = kx_min_c(k, kx_load(k, sel, i, 1), bins - 1);
    kx_store(k, list, kx_add(k, kx_shm_load(k, cnt, e, 1), kx_load(k, rank, i, 1)), i);
    kx_end_for(k, l);
    return kn_finish(k.ir, err);
}

/* The grouped products' shared part: workgroup (e, row group) of grid x = n_expert x
 * groups_r; *e, *r and e's list's [first, end), empty for a slot past those held now
 * where cached (slots: the buffer, NULL where not cached). */
static void grouped_ids(kx k, ir_buf off, const ir_buf *slots, uint32_t groups_r, uint32_t rows, bool per_sg, ir_val *e,
                        ir_val *r, ir_val *first, ir_val *end) {
    ir_val gx = kx_group(k, 0);
    *e = kx_div_c(k, gx, groups_r);
    *r = kx_add(k, kx_mul_c(k, kx_rem_c(k, gx, groups_r), rows), per_sg ? kx_sg_id(k) : kx_local(k));
    *first = kx_load(k, off, *e, 1);
    *end = kx_load(k, off, kx_add_c(k, *e, 1), 1);
    if (slots) *end = kx_select(k, kx_lt(k, *e, moe_slots_now(k, *slots)), *end, *first);
}

ir_kernel *kn_moe_gate_up_g(const rt_caps *c, uint32_t n_embd, uint32_t n_ff, uint32_t n_expert, uint32_t k_used,
                            uint32_t nb, ir_scalar dtype, bool cached, uint32_t *groups_x, kiln_err *err) {
    if (check("kn_moe_gate_up_g", c, dtype, n_embd, n_ff, n_expert, k_used, true, err)) return NULL;
    kx k = {kn_create("kn_moe_gate_up_g", err), c};
    if (!k.ir) return NULL;
    uint64_t w_elems = (uint64_t)(cached ? 1 : n_expert) * n_ff * n_embd, n_c = (uint64_t)nb * k_used;
    ir_buf h = kx_buffer(k, "h", dtype, IR_READ, (uint64_t)nb * n_embd);
    ir_buf wg_ = kx_buffer(k, "gate", dtype, IR_READ, w_elems), wu = kx_buffer(k, "up", dtype, IR_READ, w_elems);
    ir_buf off = kx_buffer(k, "off", IR_U32, IR_READ, n_expert + 1), list = kx_buffer(k, "list", IR_U32, IR_READ, n_c);
    ir_buf act = kx_buffer(k, "act", dtype, IR_WRITE, n_c * n_ff);
    ir_buf slots = cached ? moe_slots_param(k) : (ir_buf){0};
    uint32_t wg = kn_workgroup(c, 256), rows;
    kx_workgroup(k, wg);
    bool per_sg = per_subgroup(c, wg, &rows);
    uint32_t groups_r = (n_ff + rows - 1) / rows;
    ir_val e, r, first, end, i;
    grouped_ids(k, off, cached ? &slots : NULL, groups_r, rows, per_sg, &e, &r, &first, &end);
    ir_if *in = kx_if(k, kx_lt_c(k, r, n_ff));
    ir_val w0 = kx_mul_c(k, kx_add(k, kx_mul_c(k, e, n_ff), r), n_embd);
    ir_for *l = kx_for(k, first, kx_min_c(k, end, (uint32_t)n_c), kx_u32(k, 1), &i);
    ir_val cj = kx_min_c(k, kx_load(k, list, i, 1), (uint32_t)n_c - 1);
    ir_val h0 = kx_mul_c(k, kx_div_c(k, cj, k_used), n_embd);
    ir_val g = row_dot(k, per_sg, wg_, dtype, w0, h, dtype, h0, n_embd);
    ir_val u = row_dot(k, per_sg, wu, dtype, w0, h, dtype, h0, n_embd);
    ir_if *one = per_sg ? kx_if(k, kx_eq_c(k, kx_sg_lane(k), 0)) : NULL;
    kn_mv_store_row(k, KN_EPI_SWIGLU, act, 0, 0, kx_add(k, kx_mul_c(k, cj, n_ff), r), g, u, dtype, dtype);
    if (one) kx_end_if(k, one);
    kx_end_for(k, l);
    kx_end_if(k, in);
    if (groups_x) *groups_x = n_expert * groups_r;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_moe_down_g(const rt_caps *c, uint32_t n_ff, uint32_t n_embd, uint32_t n_expert, uint32_t k_used,
                         uint32_t nb, ir_scalar dtype, bool cached, uint32_t *groups_x, kiln_err *err) {
    if (check("kn_moe_down_g", c, dtype, n_ff, n_embd, n_expert, k_used, true, err)) return NULL;
    kx k = {kn_create("kn_moe_down_g", err), c};
    if (!k.ir) return NULL;
    uint64_t n_c = (uint64_t)nb * k_used;
    ir_buf act = kx_buffer(k, "act", dtype, IR_READ, n_c * n_ff);
    ir_buf wd = kx_buffer(k, "down", dtype, IR_READ, (uint64_t)(cached ? 1 : n_expert) * n_embd * n_ff);
    ir_buf off = kx_buffer(k, "off", IR_U32, IR_READ, n_expert + 1), list = kx_buffer(k, "list", IR_U32, IR_READ, n_c);
    ir_buf yc = kx_buffer(k, "yc", dtype, IR_WRITE, n_c * n_embd);
    ir_buf slots = cached ? moe_slots_param(k) : (ir_buf){0};
    uint32_t wg = kn_workgroup(c, 256), rows;
    kx_workgroup(k, wg);
    bool per_sg = per_subgroup(c, wg, &rows);
    uint32_t groups_r = (n_embd + rows - 1) / rows;
    ir_val e, r, first, end, i;
    grouped_ids(k, off, cached ? &slots : NULL, groups_r, rows, per_sg, &e, &r, &first, &end);
    ir_if *in = kx_if(k, kx_lt_c(k, r, n_embd));
    ir_val w0 = kx_mul_c(k, kx_add(k, kx_mul_c(k, e, n_embd), r), n_ff);
    ir_for *l = kx_for(k, first, kx_min_c(k, end, (uint32_t)n_c), kx_u32(k, 1), &i);
    ir_val cj = kx_min_c(k, kx_load(k, list, i, 1), (uint32_t)n_c - 1);
    ir_val s = row_dot(k, per_sg, wd, dtype, w0, act, dtype, kx_mul_c(k, cj, n_ff), n_ff);
    ir_if *one = per_sg ? kx_if(k, kx_eq_c(k, kx_sg_lane(k), 0)) : NULL;
    kx_store(k, yc, kx_add(k, kx_mul_c(k, cj, n_embd), r), kx_as(k, s, dtype));
    if (one) kx_end_if(k, one);
    kx_end_for(k, l);
    kx_end_if(k, in);
    if (groups_x) *groups_x = n_expert * groups_r;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_moe_combine(const rt_caps *c, uint32_t n_embd, uint32_t k_used, uint32_t nb, ir_scalar dtype,
                          bool cached, uint32_t *groups_x, kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (!n_embd || !nb || !k_used || k_used > MOE_MAX_USED || (uint64_t)nb * k_used * n_embd > UINT32_MAX)
        return kiln_fail(err, KILN_ERR_INVALID, "kn_moe_combine: %u tokens of %u x %u", nb, k_used, n_embd), NULL;
    kx k = {kn_create("kn_moe_combine", err), c};
    if (!k.ir) return NULL;
    uint64_t n_c = (uint64_t)nb * k_used;
    ir_buf yc = kx_buffer(k, "yc", dtype, IR_READ, n_c * n_embd), wt = kx_buffer(k, "wt", IR_F32, IR_READ, n_c);
    ir_buf res = kx_buffer(k, "res", dtype, IR_READ, (uint64_t)nb * n_embd);
    ir_buf y = kx_buffer(k, "y", dtype, IR_WRITE, (uint64_t)nb * n_embd);
    ir_buf info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    ir_buf sel = cached ? kx_buffer(k, "sel", IR_U32, IR_READ, n_c) : (ir_buf){0};
    ir_buf miss = cached ? kx_buffer(k, "miss", dtype, IR_READ, n_c * n_embd) : (ir_buf){0};
    uint32_t wg = kn_workgroup(c, 256);
    kx_workgroup(k, wg);
    /* grid x: n_embd's groups, y: the token */
    ir_val t = kx_group(k, 1), r = kx_add(k, kx_group_times(k, 0, wg), kx_local(k));
    ir_val live = kx_and(k, kx_lt_c(k, r, n_embd), kx_lt(k, t, kx_load_c(k, info, 1)));
    ir_if *in = kx_if(k, live);
    ir_val o = IR_NONE;
    for (uint32_t j = 0; j < k_used; j++) {
        ir_val cj = kx_add_c(k, kx_mul_c(k, t, k_used), j), at = kx_add(k, kx_mul_c(k, cj, n_embd), r);
        /* cached: a miss's product is the host's */
        ir_if *hit = cached ? ir_if_begin(k.ir, kx_ne(k, kx_load(k, sel, cj, 1), kx_u32(k, MOE_MISS)), 1) : NULL;
        ir_val yj = kx_as(k, kx_load(k, yc, at, 1), IR_F32);
        if (hit) {
            ir_if_else(k.ir, hit, &yj);
            ir_val m = kx_as(k, kx_load(k, miss, at, 1), IR_F32);
            ir_if_end(k.ir, hit, &m);
            yj = ir_if_result(hit, 0);
        }
        ir_val p = kx_mul(k, kx_load(k, wt, cj, 1), yj);
        o = j ? kx_add(k, o, p) : p;
    }
    ir_val at = kx_add(k, kx_mul_c(k, t, n_embd), r);
    kx_store(k, y, at, kn_epilogue(k, KN_EPI_RESIDUAL, o, 0, IR_NONE, res, at, dtype));
    kx_end_if(k, in);
    if (groups_x) *groups_x = (n_embd + wg - 1) / wg;
    return kn_finish(k.ir, err);
}
