/* Qwen3.5's Gated DeltaNet over a prefill block in chunks of C tokens (the chunked form
 * of the delta rule, as flash-linear-attention computes it): three launches where the
 * token recurrence (kernels/deltanet.c) takes n sequential steps per head.
 *
 * Per value head j and chunk (tokens t, s in 0..C, S0 the state before the chunk, q and k
 * l2-normed, q also scaled by 1/sqrt(dk)): lg_t = softplus(a_t + dt_bias) ssm_a, g the
 * inclusive cumulative sum of lg in the chunk, beta_t = sigmoid(b_t). With
 *   A[t][s] = beta_t exp(g_t - g_s) (k_t . k_s) for s < t,
 *   (I + A) U = diag(beta) V and (I + A) W = diag(beta exp(g)) K   (forward substitution),
 * the deltas are D = U - W S0, the outputs O = diag(exp(g)) Q S0 + P D with
 * P[t][s] = exp(g_t - g_s) (q_t . k_s) for s <= t, and the state after the chunk is
 * S = exp(g_last) S0 + sum_s exp(g_last - g_s) k_s D_s^T. Tokens past n are padding:
 * beta = 0 and lg = 0 with q = k = v = 0, so they change nothing.
 *
 * kn_deltanet_prep (a workgroup per (head, chunk), all chunks at once): the gates, the
 * norms, A in workgroup memory, P, exp(g) q and exp(g_last - g) k, exp(g_last), and the
 * forward substitution, an invocation a column of [U | W] in registers.
 * kn_deltanet_scan (a workgroup per (head, block of CB state columns), the chunks in
 * order): its S slice in workgroup memory, D, O and the state update per chunk.
 * kn_deltanet_norm (a workgroup per (token, head)): y = rmsnorm(o) norm silu(z), after
 * the scan here and after kn_deltanet's decode step.
 * The sums run in another order than the oracle's token steps: the results agree to f32
 * rounding, not bit for bit (tests/kernels/test_kernels_deltanet_chunk.c). */
#include "base/error.h"
#include "kernels/kn_common.h"

#include <math.h>

#define CHUNK_MAX 64
#define CHUNK_MIN 8

/* workgroup memory of each kernel, in bytes */
static uint64_t prep_bytes(uint32_t C, uint32_t dk) {
    return 4ull * (2ull * C * (dk + 4) + (uint64_t)C * C + 7ull * C);
}
static uint32_t col_block(uint32_t dv) { return dv < 16 ? dv : 16; }
static uint64_t scan_bytes(uint32_t C, uint32_t dk, uint32_t cb) {
    return 4ull * ((uint64_t)dk * cb + (uint64_t)C * (dk + 4) + (uint64_t)C * cb + (uint64_t)C * (C + 4));
}

static bool shape_ok(const kn_deltanet_shape *s) {
    uint64_t X = 2ull * s->k_heads * s->state + (uint64_t)s->v_heads * s->state;
    return s->k_heads && s->v_heads && s->state && s->state <= KN_DELTANET_MAX_STATE && s->n_max &&
           X * s->n_max <= UINT32_MAX / 4 &&
           (!s->chunk || (s->chunk >= CHUNK_MIN && s->chunk <= CHUNK_MAX && !(s->chunk & (s->chunk - 1))));
}

int kn_deltanet_scratch_of(const rt_caps *c, const kn_deltanet_shape *s, kn_deltanet_scratch *out, kiln_err *err) {
    if (!s || !shape_ok(s))
        return kiln_fail(err, KILN_ERR_INVALID,
                         "kn_deltanet (chunked): bad shape (%u k heads, %u v heads, state %u (1..%d), %u tokens, "
                         "chunk %u (0 or a power of two in %d..%d))",
                         s ? s->k_heads : 0, s ? s->v_heads : 0, s ? s->state : 0, KN_DELTANET_MAX_STATE, s ? s->n_max : 0,
                         s ? s->chunk : 0, CHUNK_MIN, CHUNK_MAX);
    uint32_t dk = s->state, C = s->chunk;
    uint64_t lim = c && c->shared_bytes ? c->shared_bytes : UINT32_MAX;
    if (!C) {
        uint32_t fit = 1, cap = kn_deltanet_mma_chunk(c, s); /* the fragment scan's staging, where it applies */
        if (!cap) cap = CHUNK_MAX;
        while (fit < s->n_max && fit < cap) fit *= 2; /* no longer than the block needs */
        for (C = fit < CHUNK_MIN ? CHUNK_MIN : fit; C >= CHUNK_MIN; C /= 2)
            if (prep_bytes(C, dk) <= lim && scan_bytes(C, dk, col_block(dk)) <= lim) break;
    }
    if (C < CHUNK_MIN || prep_bytes(C, dk) > lim || scan_bytes(C, dk, col_block(dk)) > lim)
        return kiln_fail(err, KILN_ERR_UNSUPPORTED,
                         "kn_deltanet (chunked): chunks of %u tokens at state %u need %llu bytes of workgroup memory; "
                         "the device has %llu",
                         C ? C : CHUNK_MIN, dk, (unsigned long long)prep_bytes(C ? C : CHUNK_MIN, dk),
                         (unsigned long long)lim);
    uint32_t nc = (s->n_max + C - 1) / C, nv = s->v_heads;
    uint64_t np = (uint64_t)nc * C;
    *out = (kn_deltanet_scratch){.chunk = C,
                                 .n_chunks = nc,
                                 .qk = nv * np * 2 * dk,
                                 .uw = nv * np * 2 * dk,
                                 .p = nv * np * C,
                                 .gl = (uint64_t)nv * nc,
                                 .o = (uint64_t)s->n_max * nv * dk};
    if (out->qk > UINT32_MAX || out->o > UINT32_MAX)
        return kiln_fail(err, KILN_ERR_INVALID, "kn_deltanet (chunked): %u tokens of %u heads overflow 32-bit indices",
                         s->n_max, nv);
    return 0;
}

/* for (e = tid; e < n; e += wg): the block-strided loop every staging step uses */
static ir_for *each(kx k, ir_val tid, uint64_t n, uint32_t wg, ir_val *e) {
    return kx_for(k, tid, kx_u32(k, (uint32_t)n), kx_u32(k, wg), e);
}

#define SCAN_MAX_OUT 64 /* values an invocation carries through a loop at most */

/* for (j = 0; j < len; j += step) carrying n values, as a loop of blocks of 4 steps around
 * a loop of 4 (where 4 steps divide len): the backend unrolls an inner loop whole, and
 * these bodies unrolled 16-64 times over made ptxas give up on registers (32 of them and
 * kilobytes of spills). */
typedef struct nest {
    ir_for *outer, *inner;
    ir_val j, arg[SCAN_MAX_OUT];
    uint32_t n;
} nest;

static nest nest_begin(kx k, uint32_t len, uint32_t step, uint32_t n, const ir_val *init) {
    nest t = {.n = n};
    uint32_t blk = 4 * step;
    if (len % blk || len == blk) {
        t.inner = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, len), kx_u32(k, step), n, init);
        t.j = ir_for_iv(t.inner);
    } else {
        t.outer = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, len), kx_u32(k, blk), n, init);
        ir_val in[SCAN_MAX_OUT];
        for (uint32_t m = 0; m < n; m++) in[m] = ir_for_arg(t.outer, m);
        t.inner = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, blk), kx_u32(k, step), n, in);
        t.j = kx_add(k, ir_for_iv(t.outer), ir_for_iv(t.inner));
    }
    for (uint32_t m = 0; m < n; m++) t.arg[m] = ir_for_arg(t.inner, m);
    return t;
}

static void nest_end(kx k, nest *t, const ir_val *y, ir_val *out) {
    ir_for_end(k.ir, t->inner, y);
    ir_val r[SCAN_MAX_OUT];
    for (uint32_t m = 0; m < t->n; m++) r[m] = ir_for_result(t->inner, m);
    if (t->outer) {
        ir_for_end(k.ir, t->outer, r);
        for (uint32_t m = 0; m < t->n; m++) r[m] = ir_for_result(t->outer, m);
    }
    for (uint32_t m = 0; m < t->n; m++) out[m] = r[m];
}

/* lane v of a vector load of w lanes (the value itself for one) */
static ir_val lane_of(kx k, ir_val v, uint32_t w, uint32_t l) { return w == 1 ? v : kx_lane(k, v, l); }

/* ---- kn_deltanet_prep -------------------------------------------------------------------- */

typedef struct prep {
    kx k;
    kn_deltanet_shape s;
    kn_deltanet_scratch sz;
    uint32_t C, NP, X, ST, wg;
    float eps;
    ir_buf x, ba, dt_bias, ssm_a, qk, uw, p, gl;
    ir_shm qs, ks, As, lg, cg, bs, eg, el, iq, ik;
    ir_val j, ch, kh, tid, n, t0;
} prep;

/* row r of the chunk: token t0 + r, whether it is in the block, and its row clamped into it */
static ir_val chunk_row(const prep *q, ir_val r, ir_val *ok) {
    kx k = q->k;
    ir_val t = kx_add(k, q->t0, r);
    *ok = kx_lt(k, t, q->n);
    return kx_select(k, *ok, t, kx_u32(k, 0));
}

static void prep_gates(const prep *q) {
    kx k = q->k;
    ir_val e, ok;
    ir_for *f = each(k, q->tid, q->C, q->wg, &e);
    ir_val t = chunk_row(q, e, &ok);
    uint32_t nv = q->s.v_heads;
    ir_val at = kx_add(k, kx_mul_c(k, t, 2 * nv), q->j); /* beta's logit; alpha's nv further */
    ir_val sp = kx_add(k, kx_as(k, kx_load(k, q->ba, kx_add_c(k, at, nv), 1), IR_F32), kx_load(k, q->dt_bias, q->j, 1));
    ir_val lg = kx_mul(k, kn_softplus(k, sp), kx_load(k, q->ssm_a, q->j, 1));
    ir_val beta = kn_sigmoid(k, kx_as(k, kx_load(k, q->ba, at, 1), IR_F32));
    ir_val zero = kx_f32(k, 0.0f);
    kx_shm_store(k, q->lg, e, kx_select(k, ok, lg, zero));
    kx_shm_store(k, q->bs, e, kx_select(k, ok, beta, zero));
    kx_end_for(k, f);
    /* q and k of the chunk's tokens, f32, rows of dk + 1 (no bank conflicts across rows) */
    uint32_t dk = q->s.state, nk = q->s.k_heads;
    f = each(k, q->tid, (uint64_t)q->C * dk, q->wg, &e);
    ir_val r = kx_div_c(k, e, dk), i = kx_rem_c(k, e, dk);
    ir_val row = kx_mul_c(k, chunk_row(q, r, &ok), q->X);
    ir_val qi = kx_add(k, row, kx_add(k, kx_mul_c(k, q->kh, dk), i));
    ir_val ki = kx_add(k, row, kx_add(k, kx_mul_c(k, kx_add_c(k, q->kh, nk), dk), i));
    ir_val qv = kx_as(k, kx_load(k, q->x, qi, 1), IR_F32), kv = kx_as(k, kx_load(k, q->x, ki, 1), IR_F32);
    ir_val si = kx_add(k, kx_mul_c(k, r, q->ST), i);
    zero = kx_f32(k, 0.0f);
    kx_shm_store(k, q->qs, si, kx_select(k, ok, qv, zero));
    kx_shm_store(k, q->ks, si, kx_select(k, ok, kv, zero));
    kx_end_for(k, f);
}

/* per token: g (in order), the l2 norms' inverses, exp(g), exp(g_last - g) */
static void prep_tokens(const prep *q) {
    kx k = q->k;
    uint32_t dk = q->s.state, C = q->C;
    ir_val e;
    ir_for *f = each(k, q->tid, C, q->wg, &e);
    ir_val init[2] = {kx_f32(k, 0.0f), kx_f32(k, 0.0f)};
    ir_for *l = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, C), kx_u32(k, 1), 2, init);
    ir_val s = ir_for_iv(l), v = kx_shm_load(k, q->lg, s, 1);
    ir_val tot = kx_add(k, ir_for_arg(l, 1), v), upto = kx_add(k, ir_for_arg(l, 0), v);
    ir_val y[2] = {kx_select(k, kx_le(k, s, e), upto, ir_for_arg(l, 0)), tot};
    ir_for_end(k.ir, l, y);
    ir_val g = ir_for_result(l, 0), glast = ir_for_result(l, 1);
    ir_val z2[2] = {kx_f32(k, 0.0f), kx_f32(k, 0.0f)};
    ir_for *m = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, dk), kx_u32(k, 1), 2, z2);
    ir_val si = kx_add(k, kx_mul_c(k, e, q->ST), ir_for_iv(m));
    ir_val qv = kx_shm_load(k, q->qs, si, 1), kv = kx_shm_load(k, q->ks, si, 1);
    ir_val ss[2] = {kx_add(k, ir_for_arg(m, 0), kx_mul(k, qv, qv)), kx_add(k, ir_for_arg(m, 1), kx_mul(k, kv, kv))};
    ir_for_end(k.ir, m, ss);
    ir_val iq = kx_mul_f(k, kn_l2_inv(k, ir_for_result(m, 0), q->eps), 1.0f / sqrtf((float)dk));
    kx_shm_store(k, q->iq, e, iq);
    kx_shm_store(k, q->ik, e, kn_l2_inv(k, ir_for_result(m, 1), q->eps));
    kx_shm_store(k, q->cg, e, g);
    kx_shm_store(k, q->eg, e, kn_exp(k, g));
    kx_shm_store(k, q->el, e, kn_exp(k, kx_sub(k, glast, g)));
    ir_if *first = kx_if(k, kx_eq_c(k, e, 0));
    kx_store(k, q->gl, kx_add(k, kx_mul_c(k, q->j, q->sz.n_chunks), q->ch), kn_exp(k, glast));
    kx_end_if(k, first);
    kx_end_for(k, f);
}

/* q and k normed in place; exp(g) q and exp(g_last - g) k to the scratch rows [q | k] */
static void prep_norm(const prep *q) {
    kx k = q->k;
    uint32_t dk = q->s.state;
    ir_val e;
    ir_for *f = each(k, q->tid, (uint64_t)q->C * dk, q->wg, &e);
    ir_val r = kx_div_c(k, e, dk), i = kx_rem_c(k, e, dk), si = kx_add(k, kx_mul_c(k, r, q->ST), i);
    ir_val qn = kx_mul(k, kx_shm_load(k, q->qs, si, 1), kx_shm_load(k, q->iq, r, 1));
    ir_val kn = kx_mul(k, kx_shm_load(k, q->ks, si, 1), kx_shm_load(k, q->ik, r, 1));
    kx_shm_store(k, q->qs, si, qn);
    kx_shm_store(k, q->ks, si, kn);
    ir_val row = kx_mul_c(k, kx_add(k, kx_add(k, kx_mul_c(k, q->j, q->NP), q->t0), r), 2 * dk);
    kx_store(k, q->qk, kx_add(k, row, i), kx_mul(k, qn, kx_shm_load(k, q->eg, r, 1)));
    kx_store(k, q->qk, kx_add_c(k, kx_add(k, row, i), dk), kx_mul(k, kn, kx_shm_load(k, q->el, r, 1)));
    kx_end_for(k, f);
}

/* P to the scratch, A to workgroup memory: 4 x 4 pairs an iteration, t = tb + R u and
 * s = sb + R v for R = C / 4 (rows R apart: the vector loads of a quarter-warp fall in
 * distinct banks), both dot products over i in order, read four i at a time. */
static void prep_pairs(const prep *q) {
    kx k = q->k;
    uint32_t dk = q->s.state, C = q->C, R = C / 4, w = q->ST % 4 || dk % 4 ? 1 : 4;
    ir_val e;
    ir_for *f = each(k, q->tid, (uint64_t)R * R, q->wg, &e);
    ir_val tb = kx_div_c(k, e, R), sb = kx_rem_c(k, e, R), t[4], sr[4], tr[4], init[32];
    for (uint32_t u = 0; u < 4; u++) {
        t[u] = kx_add_c(k, tb, u * R);
        tr[u] = kx_mul_c(k, t[u], q->ST);
        sr[u] = kx_mul_c(k, kx_add_c(k, sb, u * R), q->ST);
    }
    for (uint32_t m = 0; m < 32; m++) init[m] = kx_f32(k, 0.0f);
    nest nt = nest_begin(k, dk, w, 32, init); /* [0, 16): q_t . k_s, [16, 32): k_t . k_s */
    ir_val y[32], qt[4], kt[4], ks[4];
    for (uint32_t m = 0; m < 32; m++) y[m] = nt.arg[m];
    for (uint32_t u = 0; u < 4; u++) {
        qt[u] = kx_shm_load(k, q->qs, kx_add(k, tr[u], nt.j), w);
        kt[u] = kx_shm_load(k, q->ks, kx_add(k, tr[u], nt.j), w);
        ks[u] = kx_shm_load(k, q->ks, kx_add(k, sr[u], nt.j), w);
    }
    for (uint32_t l = 0; l < w; l++)
        for (uint32_t u = 0; u < 4; u++)
            for (uint32_t v = 0; v < 4; v++) {
                ir_val kv = lane_of(k, ks[v], w, l);
                y[u * 4 + v] = kx_fma(k, lane_of(k, qt[u], w, l), kv, y[u * 4 + v]);
                y[16 + u * 4 + v] = kx_fma(k, lane_of(k, kt[u], w, l), kv, y[16 + u * 4 + v]);
            }
    ir_val d[32];
    nest_end(k, &nt, y, d);
    for (uint32_t u = 0; u < 4; u++) {
        ir_val gt = kx_shm_load(k, q->cg, t[u], 1), bt = kx_shm_load(k, q->bs, t[u], 1);
        ir_val prow = kx_mul_c(k, kx_add(k, kx_add(k, kx_mul_c(k, q->j, q->NP), q->t0), t[u]), C);
        for (uint32_t v = 0; v < 4; v++) {
            ir_val sv = kx_add_c(k, sb, v * R), zero = kx_f32(k, 0.0f);
            ir_val dec = kn_exp(k, kx_sub(k, gt, kx_shm_load(k, q->cg, sv, 1)));
            ir_val pv = kx_select(k, kx_le(k, sv, t[u]), kx_mul(k, dec, d[u * 4 + v]), zero);
            ir_val av = kx_select(k, kx_lt(k, sv, t[u]), kx_mul(k, kx_mul(k, bt, dec), d[16 + u * 4 + v]), zero);
            kx_store(k, q->p, kx_add(k, prow, sv), pv);
            kx_shm_store(k, q->As, kx_add(k, kx_mul_c(k, t[u], C), sv), av);
        }
    }
    kx_end_for(k, f);
}

/* (I + A) X = B, a column of B = [beta v | beta exp(g) k] an invocation, X in registers */
static void prep_solve(const prep *q) {
    kx k = q->k;
    uint32_t dk = q->s.state, dv = q->s.state, C = q->C, nk = q->s.k_heads;
    ir_val col;
    ir_for *f = each(k, q->tid, dv + dk, q->wg, &col);
    ir_val isv = kx_lt_c(k, col, dv), zero = kx_u32(k, 0);
    ir_val vc = kx_select(k, isv, col, zero), kc = kx_select(k, isv, zero, kx_sub_c(k, col, dv));
    ir_val vbase = kx_add_c(k, kx_add(k, kx_mul_c(k, q->j, dv), vc), 2 * nk * dk);
    ir_val head = kx_add(k, kx_mul_c(k, q->j, q->NP), q->t0);
    ir_val X[CHUNK_MAX];
    for (uint32_t r = 0; r < C; r++) {
        ir_val ok, rr = kx_u32(k, r);
        ir_val t = chunk_row(q, rr, &ok);
        ir_val vv = kx_as(k, kx_load(k, q->x, kx_add(k, kx_mul_c(k, t, q->X), vbase), 1), IR_F32);
        ir_val kk = kx_mul(k, kx_shm_load(k, q->ks, kx_add_c(k, kc, r * q->ST), 1), kx_shm_load(k, q->eg, rr, 1));
        ir_val bv = kx_mul(k, kx_select(k, isv, vv, kk), kx_shm_load(k, q->bs, rr, 1));
        bv = kx_select(k, ok, bv, kx_f32(k, 0.0f)); /* padding may hold anything, NaN included */
        ir_val sum = kx_f32(k, 0.0f);
        for (uint32_t s0 = 0; s0 < r; s0 += 4) { /* A's row read four at a time (C is a multiple of 8) */
            ir_val a4 = kx_shm_load(k, q->As, kx_u32(k, r * C + s0), 4);
            for (uint32_t s = s0; s < r && s < s0 + 4; s++) sum = kx_fma(k, kx_lane(k, a4, s - s0), X[s], sum);
        }
        X[r] = kx_sub(k, bv, sum);
        kx_store(k, q->uw, kx_add(k, kx_mul_c(k, kx_add_c(k, head, r), dv + dk), col), X[r]);
    }
    kx_end_for(k, f);
}

ir_kernel *kn_deltanet_prep(const rt_caps *c, const kn_deltanet_shape *shape, ir_scalar dtype, float eps,
                            uint32_t groups[2], kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    prep q = {.eps = eps};
    if (!shape || kn_deltanet_scratch_of(c, shape, &q.sz, err)) return NULL;
    if (!(eps >= 0.0f) || !isfinite(eps)) {
        kiln_fail(err, KILN_ERR_INVALID, "kn_deltanet_prep: bad eps %g", (double)eps);
        return NULL;
    }
    q.s = *shape;
    q.C = q.sz.chunk, q.NP = q.sz.n_chunks * q.C, q.wg = kn_workgroup(c, 256);
    q.ST = shape->state + (shape->state % 4 ? 1 : 4); /* rows 16-byte aligned where they can be */
    uint32_t dk = q.s.state, nv = q.s.v_heads, C = q.C;
    q.X = 2 * q.s.k_heads * dk + nv * dk;
    q.k = (kx){kn_create("kn_deltanet_prep", err), c};
    if (!q.k.ir) return NULL;
    kx k = q.k;
    q.x = kx_buffer(k, "x", dtype, IR_READ, (uint64_t)q.X * q.s.n_max);
    q.ba = kx_buffer(k, "ba", dtype, IR_READ, (uint64_t)2 * nv * q.s.n_max);
    q.dt_bias = kx_buffer(k, "dt_bias", IR_F32, IR_READ, nv);
    q.ssm_a = kx_buffer(k, "ssm_a", IR_F32, IR_READ, nv);
    q.qk = kx_buffer(k, "qk", IR_F32, IR_WRITE, q.sz.qk);
    q.uw = kx_buffer(k, "uw", IR_F32, IR_WRITE, q.sz.uw);
    q.p = kx_buffer(k, "p", IR_F32, IR_WRITE, q.sz.p);
    q.gl = kx_buffer(k, "gl", IR_F32, IR_WRITE, q.sz.gl);
    ir_buf info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    kx_workgroup(k, q.wg);
    q.qs = kx_shared(k, "qs", IR_F32, C * q.ST), q.ks = kx_shared(k, "ks", IR_F32, C * q.ST);
    q.As = kx_shared(k, "A", IR_F32, C * C);
    q.lg = kx_shared(k, "lg", IR_F32, C), q.cg = kx_shared(k, "g", IR_F32, C), q.bs = kx_shared(k, "beta", IR_F32, C);
    q.eg = kx_shared(k, "eg", IR_F32, C), q.el = kx_shared(k, "el", IR_F32, C);
    q.iq = kx_shared(k, "iq", IR_F32, C), q.ik = kx_shared(k, "ik", IR_F32, C);
    q.j = kx_group(k, 0), q.ch = kx_group(k, 1), q.tid = kx_local(k);
    q.kh = kx_rem_c(k, q.j, q.s.k_heads);
    q.n = kx_min(k, kx_load_c(k, info, 1), kx_u32(k, q.s.n_max));
    q.t0 = kx_mul_c(k, q.ch, C);
    ir_if *live = kx_if(k, kx_lt(k, q.t0, q.n)); /* the chunks past the block's tokens do nothing */
    prep_gates(&q);
    kx_barrier(k);
    prep_tokens(&q);
    kx_barrier(k);
    prep_norm(&q);
    kx_barrier(k);
    prep_pairs(&q);
    kx_barrier(k);
    prep_solve(&q);
    kx_end_if(k, live);
    if (groups) groups[0] = nv, groups[1] = q.sz.n_chunks;
    return kn_finish(k.ir, err);
}

/* ---- kn_deltanet_scan -------------------------------------------------------------------- */

typedef struct scan {
    kx k;
    kn_deltanet_shape s;
    kn_deltanet_scratch sz;
    uint32_t C, NP, CB, XT, PT, wg;
    uint32_t VX;  /* lanes of the vector loads along a row of Xs (4 where dk allows, else 1) */
    bool same_c; /* every output of an invocation is in one column (wg a multiple of CB) */
    ir_buf qk, uw, p, gl, S, o;
    ir_shm Ss, Xs, Ds, Ps;
    ir_val j, c0, tid, n;
} scan;

/* Xs rows r of the chunk (dk + 1 apart) from the scratch rows at base + r, row width w,
 * columns from `from` */
static void stage_rows(const scan *q, ir_buf src, ir_val base, uint32_t w, uint32_t from) {
    kx k = q->k;
    uint32_t dk = q->s.state;
    ir_val e;
    ir_for *f = each(k, q->tid, (uint64_t)q->C * dk, q->wg, &e);
    ir_val r = kx_div_c(k, e, dk), i = kx_rem_c(k, e, dk);
    ir_val at = kx_add_c(k, kx_add(k, kx_mul_c(k, kx_add(k, base, r), w), i), from);
    kx_shm_store(k, q->Xs, kx_add(k, kx_mul_c(k, r, q->XT), i), kx_load(k, src, at, 1));
    kx_end_for(k, f);
}

/* An invocation's outputs of a C x CB tile: e = tid + wg m (m < *n), row e / CB (clamped
 * into the tile: a clamped one is computed and not stored), column e % CB. */
static uint32_t tile_outputs(const scan *q, uint32_t rows, ir_val *e, ir_val *r, ir_val *cc) {
    kx k = q->k;
    uint32_t n = (rows * q->CB + q->wg - 1) / q->wg;
    for (uint32_t m = 0; m < n; m++) {
        e[m] = kx_add_c(k, q->tid, m * q->wg);
        r[m] = kx_min_c(k, kx_div_c(k, e[m], q->CB), rows - 1);
        cc[m] = kx_rem_c(k, e[m], q->CB);
    }
    return n;
}

/* acc[m] (from init) plus the sum over j < len of A[row_m][j] B[j][cc_m], in order of j:
 * A rows of a_stride in a (read VX lanes at a time along j), B rows of CB in b. The B
 * values are read once for all outputs where they share a column. */
static void row_times_cols(const scan *q, ir_shm a, uint32_t a_stride, ir_shm b, uint32_t len, uint32_t n,
                           const ir_val *row, const ir_val *cc, const ir_val *init, ir_val *acc) {
    kx k = q->k;
    uint32_t w = len % q->VX ? 1 : q->VX;
    nest nt = nest_begin(k, len, w, n, init);
    ir_val j = nt.j, y[SCAN_MAX_OUT], bv[4];
    for (uint32_t m = 0; m < n; m++) y[m] = nt.arg[m];
    for (uint32_t m = 0; m < n; m++) {
        if (!m || !q->same_c)
            for (uint32_t v = 0; v < w; v++) bv[v] = kx_shm_load(k, b, kx_add(k, kx_mul_c(k, kx_add_c(k, j, v), q->CB), cc[m]), 1);
        ir_val av = kx_shm_load(k, a, kx_add(k, kx_mul_c(k, row[m], a_stride), j), w);
        for (uint32_t v = 0; v < w; v++) y[m] = kx_fma(k, lane_of(k, av, w, v), bv[v], y[m]);
    }
    nest_end(k, &nt, y, acc);
}

/* acc[m] = sum over i < dk of Xs[r_m][i] Ss[i][cc_m], in order */
static void xs_times_s(const scan *q, uint32_t n, const ir_val *r, const ir_val *cc, ir_val *acc) {
    ir_val init[SCAN_MAX_OUT];
    for (uint32_t m = 0; m < n; m++) init[m] = kx_f32(q->k, 0.0f);
    row_times_cols(q, q->Xs, q->XT, q->Ss, q->s.state, n, r, cc, init, acc);
}

/* Whether output m of a tile of `rows` may fall past its end in some invocation, and the
 * if that then keeps it from being stored (NULL where it cannot). */
static ir_if *if_in_tile(const scan *q, uint32_t m, ir_val e, uint32_t rows) {
    return (m + 1) * q->wg > rows * q->CB ? kx_if(q->k, kx_lt_c(q->k, e, rows * q->CB)) : NULL;
}

static void scan_chunk(const scan *q, ir_val ch) {
    kx k = q->k;
    uint32_t dk = q->s.state, dv = q->s.state, C = q->C, nv = q->s.v_heads;
    ir_val t0 = kx_mul_c(k, ch, C), base = kx_add(k, kx_mul_c(k, q->j, q->NP), t0);
    ir_val e[SCAN_MAX_OUT], r[SCAN_MAX_OUT], cc[SCAN_MAX_OUT], acc[SCAN_MAX_OUT];
    kx_barrier(k);                           /* the last chunk's reads of Xs and Ss are done */
    stage_rows(q, q->uw, base, dv + dk, dv); /* W */
    kx_barrier(k);
    uint32_t n = tile_outputs(q, C, e, r, cc);
    xs_times_s(q, n, r, cc, acc);
    for (uint32_t m = 0; m < n; m++) { /* D = U - W S0 (0 in the columns past dv) */
        ir_val col = kx_add(k, q->c0, cc[m]), ok = kx_lt_c(k, col, dv);
        ir_val ui = kx_add(k, kx_mul_c(k, kx_add(k, base, r[m]), dv + dk), kx_select(k, ok, col, kx_u32(k, 0)));
        ir_val d = kx_select(k, ok, kx_sub(k, kx_load(k, q->uw, ui, 1), acc[m]), kx_f32(k, 0.0f));
        ir_if *f = if_in_tile(q, m, e[m], C);
        kx_shm_store(k, q->Ds, e[m], d);
        if (f) kx_end_if(k, f);
    }
    kx_barrier(k);
    stage_rows(q, q->qk, base, 2 * dk, 0); /* exp(g) q */
    ir_val pe;
    ir_for *f = each(k, q->tid, (uint64_t)C * C, q->wg, &pe);
    ir_val pt = kx_div_c(k, pe, C), ps = kx_rem_c(k, pe, C);
    kx_shm_store(k, q->Ps, kx_add(k, kx_mul_c(k, pt, q->PT), ps),
                 kx_load(k, q->p, kx_add(k, kx_mul_c(k, base, C), pe), 1));
    kx_end_for(k, f);
    kx_barrier(k);
    xs_times_s(q, n, r, cc, acc);
    ir_val init[SCAN_MAX_OUT], out[SCAN_MAX_OUT];
    for (uint32_t m = 0; m < n; m++) init[m] = acc[m];
    row_times_cols(q, q->Ps, q->PT, q->Ds, C, n, r, cc, init, out); /* O = exp(g) Q S0 + P D */
    for (uint32_t m = 0; m < n; m++) {
        ir_val col = kx_add(k, q->c0, cc[m]), t = kx_add(k, t0, r[m]);
        ir_val ok = kx_and(k, kx_lt_c(k, col, dv), kx_lt(k, t, q->n));
        if ((m + 1) * q->wg > C * q->CB) ok = kx_and(k, ok, kx_lt_c(k, e[m], C * q->CB));
        ir_if *g = kx_if(k, ok);
        ir_val oi = kx_add(k, kx_mul_c(k, t, nv * dv), kx_add(k, kx_mul_c(k, q->j, dv), col));
        kx_store(k, q->o, oi, out[m]);
        kx_end_if(k, g);
    }
    kx_barrier(k);                          /* the reads of Xs and Ss above are done */
    stage_rows(q, q->qk, base, 2 * dk, dk); /* exp(g_last - g) k */
    kx_barrier(k);
    /* S = exp(g_last) S0 + sum_s Xs[s] D[s]^T: an invocation its own entries of the slice,
     * n consecutive state rows of one column where the tile divides evenly (a vector load
     * of Xs feeds VX of them), else strided as the tiles above */
    uint32_t per = dk * q->CB / q->wg, w = per % q->VX ? 1 : q->VX;
    bool packed = q->same_c && (dk * q->CB) % q->wg == 0 && per <= SCAN_MAX_OUT;
    if (packed) {
        n = per;
        ir_val i0 = kx_mul_c(k, kx_div_c(k, q->tid, q->CB), per), c1 = kx_rem_c(k, q->tid, q->CB);
        for (uint32_t m = 0; m < n; m++) r[m] = kx_add_c(k, i0, m), cc[m] = c1, e[m] = IR_NONE;
    } else {
        n = tile_outputs(q, dk, e, r, cc);
    }
    ir_val y[SCAN_MAX_OUT], upd[SCAN_MAX_OUT];
    for (uint32_t m = 0; m < n; m++) init[m] = kx_f32(k, 0.0f);
    nest nt = nest_begin(k, C, 1, n, init);
    ir_val s = nt.j, dd = IR_NONE, xv = IR_NONE;
    for (uint32_t m = 0; m < n; m++) y[m] = nt.arg[m];
    for (uint32_t m = 0; m < n; m++) {
        if (!m || !q->same_c) dd = kx_shm_load(k, q->Ds, kx_add(k, kx_mul_c(k, s, q->CB), cc[m]), 1);
        if (packed && m % w == 0) xv = kx_shm_load(k, q->Xs, kx_add(k, kx_mul_c(k, s, q->XT), r[m]), w);
        ir_val x = packed ? lane_of(k, xv, w, m % w) : kx_shm_load(k, q->Xs, kx_add(k, kx_mul_c(k, s, q->XT), r[m]), 1);
        y[m] = kx_fma(k, x, dd, y[m]);
    }
    nest_end(k, &nt, y, upd);
    ir_val decay = kx_load(k, q->gl, kx_add(k, kx_mul_c(k, q->j, q->sz.n_chunks), ch), 1);
    for (uint32_t m = 0; m < n; m++) {
        ir_if *g = packed ? NULL : if_in_tile(q, m, e[m], dk);
        ir_val si = kx_add(k, kx_mul_c(k, r[m], q->CB), cc[m]);
        kx_shm_store(k, q->Ss, si, kx_fma(k, decay, kx_shm_load(k, q->Ss, si, 1), upd[m]));
        if (g) kx_end_if(k, g);
    }
}

ir_kernel *kn_deltanet_scan(const rt_caps *c, const kn_deltanet_shape *shape, uint32_t groups[2], kiln_err *err) {
    if (kn_deltanet_scan_mma_ok(c, shape)) return kn_deltanet_scan_mma(c, shape, groups, err);
    scan q = {0};
    if (!shape || kn_deltanet_scratch_of(c, shape, &q.sz, err)) return NULL;
    q.s = *shape;
    uint32_t dk = q.s.state, dv = q.s.state, nv = q.s.v_heads;
    q.C = q.sz.chunk, q.NP = q.sz.n_chunks * q.C, q.CB = col_block(dv), q.XT = dk + 4, q.PT = q.C + 4;
    q.VX = dk % 4 ? 1 : 4;
    q.wg = kn_workgroup(c, 256);
    q.same_c = q.wg % q.CB == 0;
    if ((dk * q.CB + q.wg - 1) / q.wg > SCAN_MAX_OUT) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "kn_deltanet_scan: workgroups of %u are too small for state %u", q.wg, dk);
        return NULL;
    }
    q.k = (kx){kn_create("kn_deltanet_scan", err), c};
    if (!q.k.ir) return NULL;
    kx k = q.k;
    q.qk = kx_buffer(k, "qk", IR_F32, IR_READ, q.sz.qk);
    q.uw = kx_buffer(k, "uw", IR_F32, IR_READ, q.sz.uw);
    q.p = kx_buffer(k, "p", IR_F32, IR_READ, q.sz.p);
    q.gl = kx_buffer(k, "gl", IR_F32, IR_READ, q.sz.gl);
    q.S = kx_buffer(k, "S", IR_F32, IR_READ | IR_WRITE, (uint64_t)nv * dk * dv);
    q.o = kx_buffer(k, "o", IR_F32, IR_WRITE, q.sz.o);
    ir_buf info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    kx_workgroup(k, q.wg);
    q.Ss = kx_shared(k, "S_slice", IR_F32, dk * q.CB), q.Xs = kx_shared(k, "rows", IR_F32, q.C * q.XT);
    q.Ds = kx_shared(k, "D", IR_F32, q.C * q.CB), q.Ps = kx_shared(k, "P_chunk", IR_F32, q.C * q.PT);
    q.j = kx_group(k, 0), q.c0 = kx_group_times(k, 1, q.CB), q.tid = kx_local(k);
    q.n = kx_min(k, kx_load_c(k, info, 1), kx_u32(k, q.s.n_max));
    /* the slice S[.][c0 .. c0 + CB) (0 past dv) */
    ir_val e;
    ir_for *f = each(k, q.tid, (uint64_t)dk * q.CB, q.wg, &e);
    ir_val i = kx_div_c(k, e, q.CB), col = kx_add(k, q.c0, kx_rem_c(k, e, q.CB)), ok = kx_lt_c(k, col, dv);
    ir_val gi = kx_add(k, kx_mul_c(k, kx_add(k, kx_mul_c(k, q.j, dk), i), dv), kx_select(k, ok, col, kx_u32(k, 0)));
    kx_shm_store(k, q.Ss, e, kx_select(k, ok, kx_load(k, q.S, gi, 1), kx_f32(k, 0.0f)));
    kx_end_for(k, f);
    ir_val chunks = kx_div_c(k, kx_add_c(k, q.n, q.C - 1), q.C), ch;
    ir_for *l = kx_for(k, kx_u32(k, 0), chunks, kx_u32(k, 1), &ch);
    scan_chunk(&q, ch);
    kx_end_for(k, l);
    kx_barrier(k);
    f = each(k, q.tid, (uint64_t)dk * q.CB, q.wg, &e);
    i = kx_div_c(k, e, q.CB), col = kx_add(k, q.c0, kx_rem_c(k, e, q.CB));
    ir_if *in = kx_if(k, kx_lt_c(k, col, dv));
    gi = kx_add(k, kx_mul_c(k, kx_add(k, kx_mul_c(k, q.j, dk), i), dv), col);
    kx_store(k, q.S, gi, kx_shm_load(k, q.Ss, e, 1));
    kx_end_if(k, in);
    kx_end_for(k, f);
    if (groups) groups[0] = nv, groups[1] = (dv + q.CB - 1) / q.CB;
    return kn_finish(k.ir, err);
}

/* ---- kn_deltanet_norm -------------------------------------------------------------------- */

/* A subgroup a (token, head) row, NORM_ROWS rows a workgroup: each lane dv / subgroup
 * values in vectors of up to 4 (16 bytes of o), their squares summed by the subgroup, no
 * barriers. A workgroup a row (128 invocations, a workgroup sum through memory) ran
 * qwen3.5-4b's 512-token block at 24.5 us a layer on the H200, ~4 us of bytes. */
#define NORM_ROWS 8
#define NORM_MAX_PER_LANE 16

/* kn_deltanet_norm's parameters, in order */
typedef struct norm_bufs { ir_buf o, z, norm, y, info; } norm_bufs;
static norm_bufs norm_buffers(kx k, const kn_deltanet_shape *shape, ir_scalar dtype) {
    uint64_t n = (uint64_t)shape->v_heads * shape->state * shape->n_max;
    norm_bufs b;
    b.o = kx_buffer(k, "o", IR_F32, IR_READ, n);
    b.z = kx_buffer(k, "z", dtype, IR_READ, n);
    b.norm = kx_buffer(k, "norm", dtype, IR_READ, shape->state);
    b.y = kx_buffer(k, "y", dtype, IR_WRITE, n);
    b.info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    return b;
}

static ir_kernel *norm_per_subgroup(const rt_caps *c, const kn_deltanet_shape *shape, ir_scalar dtype, float eps,
                                    uint32_t groups[2], kiln_err *err) {
    uint32_t dv = shape->state, nv = shape->v_heads, sg = c->subgroup_size, per = dv / sg;
    uint32_t v = per % 4 == 0 ? 4 : per % 2 == 0 ? 2 : 1, steps = per / v, rows = shape->n_max * nv;
    uint32_t rpw = kn_workgroup(c, NORM_ROWS * sg) / sg; /* rows a workgroup: NORM_ROWS, fewer where capped */
    kx k = {kn_create("kn_deltanet_norm", err), c};
    if (!k.ir) return NULL;
    norm_bufs b = norm_buffers(k, shape, dtype);
    ir_buf o = b.o, z = b.z, norm = b.norm, y = b.y, info = b.info;
    kx_workgroup(k, rpw * sg);
    ir_val r = kx_add(k, kx_group_times(k, 0, rpw), kx_sg_id(k)); /* token r / nv, head r % nv */
    ir_val n = kx_min(k, kx_load_c(k, info, 1), kx_u32(k, shape->n_max));
    ir_if *live = kx_if(k, kx_lt(k, kx_div_c(k, r, nv), n)); /* uniform in the subgroup */
    ir_val row = kx_mul_c(k, r, dv), lane = kx_mul_c(k, kx_sg_lane(k), v); /* [t][j][.] is row r's dv values */
    ir_val ov[NORM_MAX_PER_LANE], ss = kx_f32(k, 0.0f);
    for (uint32_t i = 0; i < steps; i++) {
        ir_val vec = kx_load(k, o, kx_add(k, row, kx_add_c(k, lane, i * sg * v)), v);
        for (uint32_t l = 0; l < v; l++) {
            ov[i * v + l] = v > 1 ? kx_lane(k, vec, l) : vec;
            ss = kx_fma(k, ov[i * v + l], ov[i * v + l], ss);
        }
    }
    ir_val scale = kn_rms_of_sum(k, kx_sg_sum(k, ss), dv, eps);
    for (uint32_t i = 0; i < steps; i++) {
        ir_val col = kx_add_c(k, lane, i * sg * v), at = kx_add(k, row, col);
        ir_val zv = kx_load(k, z, at, v), nv16 = kx_load(k, norm, col, v), out[4];
        for (uint32_t l = 0; l < v; l++) {
            ir_val zl = kx_as(k, v > 1 ? kx_lane(k, zv, l) : zv, IR_F32);
            ir_val nl = kx_as(k, v > 1 ? kx_lane(k, nv16, l) : nv16, IR_F32);
            ir_val yv = kx_mul(k, kx_mul(k, ov[i * v + l], scale), nl);
            out[l] = kx_as(k, kn_silu_mul(k, zl, yv), dtype);
        }
        kx_store(k, y, at, v > 1 ? kx_vec(k, out, v) : out[0]);
    }
    kx_end_if(k, live);
    if (groups) groups[0] = (rows + rpw - 1) / rpw, groups[1] = 1;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_deltanet_norm(const rt_caps *c, const kn_deltanet_shape *shape, ir_scalar dtype, float eps,
                            uint32_t groups[2], kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (!shape || !shape->v_heads || !shape->state || !shape->n_max ||
        (uint64_t)shape->n_max * shape->v_heads * shape->state > UINT32_MAX / 4 || !(eps >= 0.0f) ||
        !isfinite(eps)) {
        kiln_fail(err, KILN_ERR_INVALID, "kn_deltanet_norm: bad shape or eps (%u v heads, state %u, %u tokens, eps %g)",
                  shape ? shape->v_heads : 0, shape ? shape->state : 0, shape ? shape->n_max : 0, (double)eps);
        return NULL;
    }
    uint32_t dv = shape->state, nv = shape->v_heads, V = nv * dv, want = 1;
    if (c && c->subgroup_arith && c->subgroup_size >= 8 && dv % c->subgroup_size == 0 &&
        dv / c->subgroup_size <= NORM_MAX_PER_LANE && kn_workgroup(c, c->subgroup_size) == c->subgroup_size)
        return norm_per_subgroup(c, shape, dtype, eps, groups, err);
    /* whole subgroups for kn_wg_sum's reduce (CUDA refuses a partial warp) */
    while ((want < dv || (c && want < c->subgroup_max)) && want < 256) want *= 2;
    uint32_t wg = kn_workgroup(c, want);
    kx k = {kn_create("kn_deltanet_norm", err), c};
    if (!k.ir) return NULL;
    norm_bufs b = norm_buffers(k, shape, dtype);
    ir_buf o = b.o, z = b.z, norm = b.norm, y = b.y, info = b.info;
    kx_workgroup(k, wg);
    ir_val j = kx_group(k, 0), t = kx_group(k, 1), tid = kx_local(k);
    ir_val n = kx_min(k, kx_load_c(k, info, 1), kx_u32(k, shape->n_max));
    ir_if *live = kx_if(k, kx_lt(k, t, n));
    ir_val row = kx_add(k, kx_mul_c(k, t, V), kx_mul_c(k, j, dv));
    ir_val zero = kx_f32(k, 0.0f);
    ir_for *l = ir_for_begin(k.ir, tid, kx_u32(k, dv), kx_u32(k, wg), 1, &zero);
    ir_val ov = kx_load(k, o, kx_add(k, row, ir_for_iv(l)), 1);
    ir_val ss = kx_fma(k, ov, ov, ir_for_arg(l, 0));
    ir_for_end(k.ir, l, &ss);
    ir_val scale = kn_rms_of_sum(k, kn_wg_sum(k, wg, ir_for_result(l, 0), "ss"), dv, eps);
    ir_val cc;
    ir_for *f = kx_for(k, tid, kx_u32(k, dv), kx_u32(k, wg), &cc);
    ir_val at = kx_add(k, row, cc);
    ir_val yv = kx_mul(k, kx_mul(k, kx_load(k, o, at, 1), scale), kx_as(k, kx_load(k, norm, cc, 1), IR_F32));
    kx_store(k, y, at, kx_as(k, kn_silu_mul(k, kx_as(k, kx_load(k, z, at, 1), IR_F32), yv), dtype));
    kx_end_for(k, f);
    kx_end_if(k, live);
    if (groups) groups[0] = nv, groups[1] = shape->n_max;
    return kn_finish(k.ir, err);
}
