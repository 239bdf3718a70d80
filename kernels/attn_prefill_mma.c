/* Prefill attention on matrix fragments (kn_attn_prefill's variant where the caps offer
 * 16x8x16 fragments of dtype, CUDA sm_80+): Q·Kᵀ and P·V on the tensor cores, the
 * softmax in f32 between them, without a new rounding point in the numerical contract.
 *
 * A workgroup of 4 subgroups takes 64 query rows: hpt heads of one kv head (they share
 * the K/V tiles) times 64 / hpt consecutive tokens; each subgroup 16 rows, kept as Q
 * fragments in registers. Keys come in tiles of 64 positions (K and V double-buffered in
 * workgroup memory by asynchronous copies, the next tile in flight during the math;
 * positions past the block's causal limit are zero-filled). Two passes over the tiles:
 *
 *   1. S = Q Kᵀ per tile (8 accumulators of 16x8 per subgroup), through workgroup
 *      memory to the lanes, two lanes a row: each row's max m and sum l = sum exp(s - m),
 *      online over the tiles (masked keys, past the row's position, count nothing);
 *   2. S again, e = exp(s - m) with the final m, and O += E V with E split into 16-bit
 *      parts, each the rounding of what the others leave (O += E1 V + E2 V [+ E3 V]):
 *      three bf16 parts (8 bits each) hold e's 24 bits exactly, two f16 parts (11 each)
 *      carry it to 2^-22 (2^-25 absolute below f16's normal range), about exp's own
 *      error: P·V is f32 arithmetic up to summation order (and that error), so the oracle's
 *      softmax needs no new rounding point.
 *
 * At the end out = O / l, rounded to dtype once, as kn_attn_prefill's SIMT kernel and the
 * oracle: scores are (q . k) * scale, the division kn_fdiv; exp is kn_exp_nonpositive (its
 * arguments are s - m <= 0: within about 2^-22, at a third of kn_exp's cost). The work is
 * four or five products per tile where flash attention does two (the price of not
 * rescaling fragments, whose elements the IR does not expose, and of an exact P), on
 * units some 40 times the f32 rate.
 *
 * Balance: the workgroups along y take token blocks from the last (the longest) down. */
#include "kernels/kn_common.h"

#include <math.h>

#define AT_ROWS 64 /* query rows per workgroup: 4 subgroups of 16 */
#define AT_KEYS 64 /* keys per K/V tile */
#define AT_PAD 8   /* 16-bit elements after each staged row */
#define SC_PAD 4   /* f32 words after each row of a subgroup's scores */
#define COPY 8     /* elements per asynchronous copy */
#define MAX_HD 256

typedef struct at {
    kx k;
    ir_scalar dt;
    uint32_t hd, q_stride, kv_dim, n_head, n_ctx, n_max, hpt, tpt;
    float scale;
    ir_buf qb, kc, vc, ob;
    ir_shm qs, ks, vs, sc, pp_[3]; /* pp_: the parts of e, rows of 64 + 8 */
    uint32_t parts;
    uint32_t pitch; /* of qs, ks, vs rows: hd + 8 */
    uint32_t sp;    /* of sc rows (f32): max(64, hd) + 4 */
    uint32_t pp;    /* of the parts' rows: 64 + 8 */
    ir_type ta, tb, tc;
    ir_val lid, sid, lane, u0, f0, ninf;
    ir_val pos0, n_valid, t0, head0, kv_off, n_keys, n_tiles;
} at;

static uint32_t parts_of(ir_scalar dt) { return dt == IR_BF16 ? 3 : 2; }

static uint32_t shared_bytes(uint32_t hd, ir_scalar dt) {
    uint32_t pitch = hd + AT_PAD, sp = (hd > AT_KEYS ? hd : AT_KEYS) + SC_PAD, pp = AT_KEYS + AT_PAD;
    return AT_ROWS * pitch * 2 * 5 + 4 * 16 * sp * 4 + parts_of(dt) * 4 * 16 * pp * 2;
}

/* query heads per workgroup: the largest power of two dividing the group, at most 16 */
static uint32_t heads_per_tile(uint32_t n_head, uint32_t n_head_kv) {
    uint32_t group = n_head / n_head_kv, hpt = 1;
    while (hpt * 2 <= 16 && group % (hpt * 2) == 0) hpt *= 2;
    return hpt;
}

bool kn_attn_prefill_mma_ok(const rt_caps *c, ir_scalar dt, uint32_t n_head, uint32_t n_head_kv, uint32_t hd,
                            uint32_t n_max) {
    if (c->subgroup_size != 32 || !c->subgroup_shuffle || hd % 16 || hd > MAX_HD) return false;
    /* a block of few workgroups (a short prompt's) runs faster on the SIMT kernel's many
     * (the H200, qwen3-0.6b pp24: 7,586 tok/s on fragments, 9,020 without) */
    uint32_t hpt = heads_per_tile(n_head, n_head_kv),
             grid = n_head / hpt * ((n_max + AT_ROWS / hpt - 1) / (AT_ROWS / hpt));
    if (c->compute_units && grid * 2 < c->compute_units) return false;
    if (c->max_workgroup && c->max_workgroup < 128) return false;
    if (c->shared_bytes && shared_bytes(hd, dt) > c->shared_bytes) return false;
    for (uint32_t i = 0; i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->mma[i];
        if (s->m == 16 && s->n == 8 && s->k == 16 && s->ab_type == (uint32_t)dt && s->acc_type == IR_F32) return true;
    }
    return false;
}

/* ---- staging ------------------------------------------------------------------------------ */

/* The block's 64 q rows: row R is token t0 + R / hpt (clamped into the buffer: rows past
 * n only reach rows that are not stored), head head0 + R % hpt. */
static void stage_q(const at *a) {
    kx k = a->k;
    uint32_t per_row = a->hd / COPY, n = AT_ROWS * per_row;
    for (uint32_t j = 0; j * 128 < n; j++) {
        ir_val i = kx_add_c(k, a->lid, j * 128);
        ir_val row = kx_div_c(k, i, per_row), c8 = kx_mul_c(k, kx_rem_c(k, i, per_row), COPY);
        ir_val t = kx_min_c(k, kx_add(k, a->t0, kx_div_c(k, row, a->hpt)), a->n_max - 1);
        ir_val head = kx_add(k, a->head0, kx_rem_c(k, row, a->hpt));
        ir_val src = kx_add(k, kx_add(k, kx_mul_c(k, t, a->q_stride), kx_mul_c(k, head, a->hd)), c8);
        ir_async_copy(k.ir, a->qs, kx_idx(k, row, a->pitch, c8), a->qb, src, COPY, kx_add_c(k, src, COPY));
    }
}

/* Keys kb0 .. kb0 + 63 of the kv head into slot `slot` of dst; positions at or past n_keys
 * are zero (their cache rows may hold anything). */
static void stage_kv(const at *a, ir_buf src_buf, ir_shm dst, ir_val slot, ir_val kb0) {
    kx k = a->k;
    uint32_t per_row = a->hd / COPY, n = AT_KEYS * per_row;
    ir_val dst0 = kx_mul_c(k, slot, AT_KEYS * a->pitch);
    for (uint32_t j = 0; j * 128 < n; j++) {
        ir_val i = kx_add_c(k, a->lid, j * 128);
        ir_val key = kx_div_c(k, i, per_row), c8 = kx_mul_c(k, kx_rem_c(k, i, per_row), COPY);
        ir_val p = kx_add(k, kb0, key);
        ir_val src = kx_add(k, kx_add(k, kx_mul_c(k, kx_min_c(k, p, a->n_ctx - 1), a->kv_dim), a->kv_off), c8);
        ir_val limit = kx_select(k, kx_lt(k, p, a->n_keys), kx_add_c(k, src, COPY), a->u0);
        ir_async_copy(k.ir, dst, kx_add(k, dst0, kx_idx(k, key, a->pitch, c8)), src_buf, src, COPY, limit);
    }
}

/* ---- the products ----------------------------------------------------------------------------- */

/* The subgroup's 16 x 64 scores of the K tile in slot, stored (unscaled) to its rows of sc. */
static void scores(const at *a, const ir_val *qf, ir_val slot) {
    kx k = a->k;
    ir_val st = kx_u32(k, a->pitch), kb = kx_mul_c(k, slot, AT_KEYS * a->pitch);
    ir_val zero = ir_frag_fill(k.ir, a->tc, a->f0), sc0 = kx_mul_c(k, a->sid, 16 * a->sp);
    for (uint32_t j = 0; j < AT_KEYS / 8; j++) {
        ir_val s = zero;
        for (uint32_t i = 0; i < a->hd / 16; i++) {
            ir_val b = ir_frag_load(k.ir, a->tb, true, a->ks, kx_add_c(k, kb, j * 8 * a->pitch + i * 16), st, false);
            s = ir_frag_mma(k.ir, qf[i], b, s);
        }
        ir_frag_store(k.ir, s, true, a->sc, kx_add_c(k, sc0, j * 8), kx_u32(k, a->sp), true);
    }
}

/* O += sum over the parts E_i V, over the V tile in slot (the subgroup's rows of the parts). */
static void accumulate(const at *a, ir_val slot, ir_val *o) {
    kx k = a->k;
    ir_val st = kx_u32(k, a->pitch), pst = kx_u32(k, a->pp), vb = kx_mul_c(k, slot, AT_KEYS * a->pitch);
    ir_val p0 = kx_mul_c(k, a->sid, 16 * a->pp);
    for (uint32_t kk = 0; kk < AT_KEYS / 16; kk++) {
        ir_val e[3];
        for (uint32_t i = 0; i < a->parts; i++)
            e[i] = ir_frag_load(k.ir, a->ta, true, a->pp_[i], kx_add_c(k, p0, kk * 16), pst, true);
        for (uint32_t d = 0; d < a->hd / 8; d++) {
            ir_val b = ir_frag_load(k.ir, a->tb, true, a->vs, kx_add_c(k, vb, kk * 16 * a->pitch + d * 8), st, true);
            for (uint32_t i = 0; i < a->parts; i++) o[d] = ir_frag_mma(k.ir, e[i], b, o[d]);
        }
    }
}

/* ---- the softmax, two lanes a row ---------------------------------------------------------------- */

typedef struct lanes {
    ir_val r;     /* the lane's row within the subgroup */
    ir_val half;  /* which 32 keys of a tile */
    ir_val pos;   /* the row's position */
    ir_val at_sc; /* the lane's first score in sc */
    ir_val at_p;  /* and in ph / pl */
} lanes;

/* The lane's 32 scaled scores of tile j, -inf where the key is past the row's position. */
static void lane_scores(const at *a, const lanes *ln, ir_val j, ir_val *s) {
    kx k = a->k;
    ir_val key0 = kx_add(k, kx_mul_c(k, j, AT_KEYS), kx_mul_c(k, ln->half, 32));
    for (uint32_t v = 0; v < 8; v++) {
        ir_val w = kx_shm_load(k, a->sc, kx_add_c(k, ln->at_sc, v * 4), 4);
        for (uint32_t l = 0; l < 4; l++) {
            ir_val key = kx_add_c(k, key0, v * 4 + l);
            ir_val x = kx_mul_f(k, kx_lane(k, w, l), a->scale);
            s[v * 4 + l] = kx_select(k, kx_le(k, key, ln->pos), x, a->ninf);
        }
    }
}

/* exp(s - m), 0 where s is -inf (exp(-inf) is left to no device) */
static ir_val exp_live(const at *a, ir_val s, ir_val m) {
    kx k = a->k;
    ir_val live = kx_gt(k, s, a->ninf);
    return kx_select(k, live, kn_exp_nonpositive(k, kx_select(k, live, kx_sub(k, s, m), a->f0)), a->f0);
}

/* (m, l) after tile j: m_new = max(m, the tile's), l = l exp(m - m_new) + sum exp(s - m_new) */
static void stats_step(const at *a, const lanes *ln, ir_val j, ir_val *m, ir_val *l) {
    kx k = a->k;
    ir_val s[32], mt = a->ninf;
    lane_scores(a, ln, j, s);
    for (uint32_t i = 0; i < 32; i++) mt = kx_max(k, mt, s[i]);
    ir_val mn = kx_max(k, *m, mt), sum = a->f0;
    for (uint32_t i = 0; i < 32; i++) sum = kx_add(k, sum, exp_live(a, s[i], mn));
    ir_val alpha = exp_live(a, *m, mn); /* 0 while m is -inf */
    *l = kx_fma(k, *l, alpha, sum), *m = mn;
}

/* The row's (m, l) from its two lanes. */
static void stats_merge(const at *a, ir_val *m, ir_val *l) {
    kx k = a->k;
    ir_val mo = kx_sg_xor(k, *m, 1), lo = kx_sg_xor(k, *l, 1);
    ir_val mx = kx_max(k, *m, mo); /* finite: key 0 is every row's */
    *l = kx_fma(k, *l, exp_live(a, *m, mx), kx_mul(k, lo, exp_live(a, mo, mx)));
    *m = mx;
}

/* e = exp(s - m) for the lane's 32 keys of tile j, as its 16-bit parts */
static void write_p(const at *a, const lanes *ln, ir_val j, ir_val m) {
    kx k = a->k;
    ir_val s[32];
    lane_scores(a, ln, j, s);
    ir_type t4 = kx_t(k, a->dt, 4), f4 = kx_t(k, IR_F32, 4);
    for (uint32_t v = 0; v < 8; v++) {
        ir_val e[4];
        for (uint32_t l = 0; l < 4; l++) e[l] = exp_live(a, s[v * 4 + l], m);
        ir_val left = kx_vec(k, e, 4); /* what the parts so far leave (exact in f32) */
        for (uint32_t i = 0; i < a->parts; i++) {
            ir_val part = kx_convert(k, left, t4);
            kx_shm_store(k, a->pp_[i], kx_add_c(k, ln->at_p, v * 4), part);
            if (i + 1 < a->parts) left = kx_sub(k, left, kx_convert(k, part, f4));
        }
    }
}

/* ---- the block --------------------------------------------------------------------------------- */

static void out_rows(const at *a, const lanes *ln, const ir_val *o, ir_val l) {
    kx k = a->k;
    ir_val sc0 = kx_mul_c(k, a->sid, 16 * a->sp);
    for (uint32_t d = 0; d < a->hd / 8; d++)
        ir_frag_store(k.ir, o[d], true, a->sc, kx_add_c(k, sc0, d * 8), kx_u32(k, a->sp), true);
    kx_barrier(k);
    ir_val row = kx_add(k, kx_mul_c(k, a->sid, 16), ln->r);
    ir_val t = kx_add(k, a->t0, kx_div_c(k, row, a->hpt)), head = kx_add(k, a->head0, kx_rem_c(k, row, a->hpt));
    ir_if *f = kx_if(k, kx_lt(k, t, a->n_valid));
    uint32_t half = a->hd / 2, w = kn_vec_width(half);
    ir_val d0 = kx_mul_c(k, ln->half, half);
    ir_val from = kx_add(k, kx_add(k, sc0, kx_mul_c(k, ln->r, a->sp)), d0);
    ir_val to = kx_add(k, kx_add(k, kx_mul_c(k, t, a->n_head * a->hd), kx_mul_c(k, head, a->hd)), d0);
    ir_type ot = kx_t(k, a->dt, w);
    for (uint32_t i = 0; i < half; i += w) {
        ir_val v = kx_shm_load(k, a->sc, kx_add_c(k, from, i), w), q[4];
        for (uint32_t e = 0; e < w; e++) q[e] = kn_fdiv(k, w == 1 ? v : kx_lane(k, v, e), l);
        kx_store(k, a->ob, kx_add_c(k, to, i), kx_convert(k, w == 1 ? q[0] : kx_vec(k, q, w), ot));
    }
    kx_end_if(k, f);
}

static void block(at *a) {
    kx k = a->k;
    lanes ln;
    ln.r = kx_shr_c(k, a->lane, 1), ln.half = kx_and_c(k, a->lane, 1);
    ir_val row = kx_add(k, kx_mul_c(k, a->sid, 16), ln.r);
    ln.pos = kx_add(k, a->pos0, kx_add(k, a->t0, kx_div_c(k, row, a->hpt)));
    ln.at_sc = kx_add(k, kx_mul_c(k, row, a->sp), kx_mul_c(k, ln.half, 32));
    ln.at_p = kx_add(k, kx_mul_c(k, row, a->pp), kx_mul_c(k, ln.half, 32));
    ir_val one = kx_u32(k, 1);

    stage_q(a);
    stage_kv(a, a->kc, a->ks, a->u0, a->u0);
    ir_async_commit(k.ir);
    ir_async_wait(k.ir, 0);
    kx_barrier(k);
    ir_val qf[MAX_HD / 16];
    ir_val qb = kx_mul_c(k, a->sid, 16 * a->pitch), st = kx_u32(k, a->pitch);
    for (uint32_t i = 0; i < a->hd / 16; i++)
        qf[i] = ir_frag_load(k.ir, a->ta, true, a->qs, kx_add_c(k, qb, i * 16), st, true);

    /* pass 1: each row's max and sum */
    ir_val init[2] = {a->ninf, a->f0};
    ir_for *p1 = ir_for_begin(k.ir, a->u0, a->n_tiles, one, 2, init);
    ir_val j = ir_for_iv(p1), m = ir_for_arg(p1, 0), l = ir_for_arg(p1, 1);
    ir_val next = kx_add_c(k, j, 1);
    ir_if *more = kx_if(k, kx_lt(k, next, a->n_tiles));
    stage_kv(a, a->kc, a->ks, kx_and_c(k, next, 1), kx_mul_c(k, next, AT_KEYS));
    kx_end_if(k, more);
    ir_async_commit(k.ir);
    scores(a, qf, kx_and_c(k, j, 1));
    kx_barrier(k);
    stats_step(a, &ln, j, &m, &l);
    ir_async_wait(k.ir, 0);
    kx_barrier(k);
    ir_val y1[2] = {m, l};
    ir_for_end(k.ir, p1, y1);
    m = ir_for_result(p1, 0), l = ir_for_result(p1, 1);
    stats_merge(a, &m, &l);

    /* pass 2: O = sum e v */
    stage_kv(a, a->kc, a->ks, a->u0, a->u0);
    stage_kv(a, a->vc, a->vs, a->u0, a->u0);
    ir_async_commit(k.ir);
    ir_async_wait(k.ir, 0);
    kx_barrier(k);
    uint32_t n_o = a->hd / 8;
    ir_val o[MAX_HD / 8], zero = ir_frag_fill(k.ir, a->tc, a->f0);
    for (uint32_t d = 0; d < n_o; d++) o[d] = zero;
    ir_for *p2 = ir_for_begin(k.ir, a->u0, a->n_tiles, one, n_o, o);
    j = ir_for_iv(p2);
    for (uint32_t d = 0; d < n_o; d++) o[d] = ir_for_arg(p2, d);
    next = kx_add_c(k, j, 1);
    more = kx_if(k, kx_lt(k, next, a->n_tiles));
    stage_kv(a, a->kc, a->ks, kx_and_c(k, next, 1), kx_mul_c(k, next, AT_KEYS));
    stage_kv(a, a->vc, a->vs, kx_and_c(k, next, 1), kx_mul_c(k, next, AT_KEYS));
    kx_end_if(k, more);
    ir_async_commit(k.ir);
    scores(a, qf, kx_and_c(k, j, 1));
    kx_barrier(k);
    write_p(a, &ln, j, m);
    kx_barrier(k);
    accumulate(a, kx_and_c(k, j, 1), o);
    ir_async_wait(k.ir, 0);
    kx_barrier(k);
    ir_for_end(k.ir, p2, o);
    for (uint32_t d = 0; d < n_o; d++) o[d] = ir_for_result(p2, d);
    out_rows(a, &ln, o, l);
}

ir_kernel *kn_attn_prefill_mma(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t hd, uint32_t q_stride,
                               uint32_t n_ctx, uint32_t n_max, ir_scalar dt, uint32_t groups[2], kiln_err *err) {
    uint32_t group = n_head / n_head_kv, hpt = heads_per_tile(n_head, n_head_kv);
    at a = {.dt = dt,
            .hd = hd,
            .q_stride = q_stride,
            .kv_dim = n_head_kv * hd,
            .n_head = n_head,
            .n_ctx = n_ctx,
            .n_max = n_max,
            .hpt = hpt,
            .tpt = AT_ROWS / hpt};
    a.pitch = hd + AT_PAD, a.sp = (hd > AT_KEYS ? hd : AT_KEYS) + SC_PAD, a.pp = AT_KEYS + AT_PAD;
    a.scale = 1.0f / sqrtf((float)hd); /* the oracle's, computed the same way */
    kx k = {kn_create("kn_attn_prefill", err), c};
    if (!k.ir) return NULL;
    a.k = k;
    a.qb = kx_buffer(k, "q", dt, IR_READ, (uint64_t)n_max * q_stride);
    a.kc = kx_buffer(k, "kcache", dt, IR_READ, (uint64_t)n_ctx * a.kv_dim);
    a.vc = kx_buffer(k, "vcache", dt, IR_READ, (uint64_t)n_ctx * a.kv_dim);
    a.ob = kx_buffer(k, "out", dt, IR_WRITE, (uint64_t)n_max * n_head * hd);
    ir_buf ib = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    kx_workgroup(k, 128);
    a.qs = kx_shared(k, "qs", dt, AT_ROWS * a.pitch);
    a.ks = kx_shared(k, "ks", dt, 2 * AT_KEYS * a.pitch);
    a.vs = kx_shared(k, "vs", dt, 2 * AT_KEYS * a.pitch);
    a.sc = kx_shared(k, "sc", IR_F32, 4 * 16 * a.sp);
    a.parts = parts_of(dt);
    static const char *const part_names[3] = {"e1", "e2", "e3"};
    for (uint32_t i = 0; i < a.parts; i++) a.pp_[i] = kx_shared(k, part_names[i], dt, 4 * 16 * a.pp);
    a.ta = ir_t_frag(k.ir, IR_FRAG_A, dt, 16, 8, 16);
    a.tb = ir_t_frag(k.ir, IR_FRAG_B, dt, 16, 8, 16);
    a.tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, 16, 8, 16);
    a.lid = kx_local(k), a.sid = kx_sg_id(k), a.lane = kx_sg_lane(k);
    a.u0 = kx_u32(k, 0), a.f0 = kx_f32(k, 0.0f), a.ninf = kx_f32(k, -INFINITY);
    /* group x: hpt heads of one kv head; group y: token blocks, the last (longest) first */
    a.head0 = kx_group_times(k, 0, hpt);
    a.kv_off = kx_mul_c(k, kx_div_c(k, a.head0, group), hd);
    uint32_t nb = (n_max + a.tpt - 1) / a.tpt;
    a.t0 = kx_mul_c(k, kx_sub(k, kx_u32(k, nb - 1), kx_group(k, 1)), a.tpt);
    /* valid tokens: t < n, t < n_max, and pos0 + t < n_ctx (computed without wrapping) */
    a.pos0 = kx_load(k, ib, a.u0, 1);
    ir_val n = kx_load_c(k, ib, 1);
    ir_val room = kx_select(k, kx_lt_c(k, a.pos0, n_ctx), kx_sub(k, kx_u32(k, n_ctx), a.pos0), a.u0);
    a.n_valid = kx_min(k, kx_min_c(k, n, n_max), room);
    ir_if *live = kx_if(k, kx_lt(k, a.t0, a.n_valid)); /* uniform: group id and loaded values */
    /* keys 0 .. the block's last valid position */
    a.n_keys = kx_add(k, a.pos0, kx_min(k, kx_add_c(k, a.t0, a.tpt), a.n_valid));
    a.n_tiles = kx_div_c(k, kx_add_c(k, a.n_keys, AT_KEYS - 1), AT_KEYS);
    block(&a);
    kx_end_if(k, live);
    if (groups) groups[0] = n_head / hpt, groups[1] = nb;
    return kn_finish(k.ir, err);
}
