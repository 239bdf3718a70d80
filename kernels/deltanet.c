/* Qwen3.5's Gated DeltaNet on the device: the causal depthwise convolution with its
 * rolling state (kn_ssm_conv) and the gated delta rule with its gated output norm
 * (kn_deltanet), token by token, in the oracle's arithmetic (oracle/deltanet.c) up to the order of sums.
 *
 * kn_ssm_conv: an invocation a channel c walks the block's tokens in order, holding the
 * window of its last K-1 inputs in registers: s = 0 + in_0 w_0 + ... + in_{K-1} w_{K-1}
 * (tap K-1 is the current token), x = silu(s) = s / (1 + exp(-s)) rounded to dtype; at
 * the end the window (the K-1 latest inputs, which are the 16-bit projections, exact in
 * f32) goes back to the state.
 *
 * kn_deltanet: a workgroup a value head j (k head j % k_heads, ggml's tiled broadcast) and
 * a block of up to 32 of its value dims (the heads' columns spread over more of the
 * device than a workgroup a head), P (up to 4) invocations a value dim c in adjacent lanes,
 * each holding a quarter of column c of the head's state S (S[i][c] at (j dk + i) dv + c)
 * in registers for the whole block. Per token: the q and k of head kh staged in workgroup
 * memory; their l2 norms, S . k and S . q summed over each quarter in order, the quarters
 * added by xor shuffles (the same sum in every lane), divided by max(|.|, eps);
 * g = softplus(a + dt_bias) ssm_a, decay = exp(g), beta = sigmoid(b); S[.][c] = decay
 * S[.][c]; d = beta (v_c - S[.][c] . k); S[.][c] += k d; o_c = (S[.][c] . q) / sqrt(dk),
 * stored in f32. The head's RMSNorm of o times ssm_norm and silu(z) is kn_deltanet_norm's
 * (kernels/deltanet_chunk.c), launched after. exp and division to the oracle's precision
 * (kn_exp, kn_fdiv); softplus's log is the device's (IR log), so the decay may differ from
 * the oracle's by a few ulps, and the sums' order differs from the oracle's (which adds
 * i = 0 .. dk-1) where P > 1.
 *
 * Both walk the tokens one after another: decode's step, and the reference the prefill
 * block's kernels are checked against: kn_ssm_conv_block (an invocation 8 tokens of one or
 * two channels, the same sums) with kn_ssm_conv_state after it (the window moved on), and the
 * chunked delta rule (kernels/deltanet_chunk.c). Tokens past n = info[1] are neither read
 * into the state nor written. */
#include "base/error.h"
#include "kernels/kn_common.h"

#include <math.h>

#define CONV_MAX_K 8       /* taps of the convolution at most */

static ir_val silu(kx k, ir_val s) { return kn_fdiv(k, s, kx_add_f(k, kn_exp(k, kx_neg(k, s)), 1.0f)); }

ir_kernel *kn_ssm_conv(const rt_caps *c, uint32_t channels, uint32_t taps, uint32_t n_max, ir_scalar dtype,
                       uint32_t groups[2], kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (!channels || taps < 2 || taps > CONV_MAX_K || !n_max || (uint64_t)n_max * channels > UINT32_MAX) {
        kiln_fail(err, KILN_ERR_INVALID, "kn_ssm_conv: bad shape (%u channels, %u taps (2..%d), %u tokens)", channels,
                  taps, CONV_MAX_K, n_max);
        return NULL;
    }
    kx k = {kn_create("kn_ssm_conv", err), c};
    if (!k.ir) return NULL;
    uint32_t C = channels, K = taps, wg = kn_workgroup(c, 256);
    ir_buf qkv = kx_buffer(k, "qkv", dtype, IR_READ, (uint64_t)n_max * C);
    ir_buf w = kx_buffer(k, "w", IR_F32, IR_READ, (uint64_t)C * K);
    ir_buf state = kx_buffer(k, "state", IR_F32, IR_READ | IR_WRITE, (uint64_t)(K - 1) * C);
    ir_buf x = kx_buffer(k, "x", dtype, IR_WRITE, (uint64_t)n_max * C);
    ir_buf info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    kx_workgroup(k, wg);
    ir_val ch = kx_global(k);
    ir_if *in = kx_if(k, kx_lt_c(k, ch, C));
    ir_val n = kx_min(k, kx_load_c(k, info, 1), kx_u32(k, n_max));
    ir_val wt[CONV_MAX_K], win[CONV_MAX_K], next[CONV_MAX_K];
    for (uint32_t i = 0; i < K; i++) wt[i] = kx_load(k, w, kx_add_c(k, kx_mul_c(k, ch, K), i), 1);
    for (uint32_t r = 0; r + 1 < K; r++) win[r] = kx_load(k, state, kx_add_c(k, ch, r * C), 1);
    ir_for *l = ir_for_begin(k.ir, kx_u32(k, 0), n, kx_u32(k, 1), K - 1, win);
    ir_val t = ir_for_iv(l), at = kx_idx(k, t, C, ch);
    for (uint32_t r = 0; r + 1 < K; r++) next[r] = ir_for_arg(l, r);
    ir_val cur = kx_as(k, kx_load(k, qkv, at, 1), IR_F32), s = kx_f32(k, 0.0f);
    for (uint32_t i = 0; i < K; i++) s = kx_add(k, s, kx_mul(k, i + 1 < K ? next[i] : cur, wt[i]));
    kx_store(k, x, at, kx_as(k, silu(k, s), dtype));
    for (uint32_t r = 0; r + 1 < K; r++) next[r] = r + 2 < K ? next[r + 1] : cur;
    ir_for_end(k.ir, l, next);
    for (uint32_t r = 0; r + 1 < K; r++) kx_store(k, state, kx_add_c(k, ch, r * C), ir_for_result(l, r));
    kx_end_if(k, in);
    if (groups) groups[0] = (C + wg - 1) / wg, groups[1] = 1;
    return kn_finish(k.ir, err);
}

/* -1 with err where the block kernels cannot take the shape */
static int conv_block_check(const char *who, const rt_caps *c, uint32_t channels, uint32_t taps, uint32_t n_max,
                            ir_scalar dtype, kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return -1;
    if (!channels || taps < 2 || taps > CONV_MAX_K || !n_max || (uint64_t)n_max * channels > UINT32_MAX / 2)
        return kiln_fail(err, KILN_ERR_INVALID, "%s: bad shape (%u channels, %u taps (2..%d), %u tokens)", who,
                         channels, taps, CONV_MAX_K, n_max);
    return 0;
}

/* Row r of [state ; block] in channel ch, as f32: the state's (K-1 rows) before the block's. */
static ir_val window_row(kx k, ir_buf qkv, ir_buf state, ir_val r, uint32_t C, uint32_t K, ir_val ch) {
    ir_val from_block = kx_ge(k, r, kx_u32(k, K - 1));
    ir_val br = kx_select(k, from_block, kx_sub_c(k, r, K - 1), kx_u32(k, 0));
    ir_val sr = kx_select(k, from_block, kx_u32(k, 0), r);
    ir_val bv = kx_as(k, kx_load(k, qkv, kx_idx(k, br, C, ch), 1), IR_F32);
    return kx_select(k, from_block, bv, kx_load(k, state, kx_idx(k, sr, C, ch), 1));
}

/* An invocation T consecutive tokens of v adjacent channels (2 where the channels pair
 * up: 4-byte loads), T = CONV_TOKENS past a short block (else 2, which keeps a short
 * block's few tokens spread over the device): the window of rows t0 .. t0 + T + K - 2 of
 * [state ; block] read once into registers, each token's sum over its K rows of it. One
 * token and channel an invocation read K rows and K taps for each output and spent more
 * on the index arithmetic than on the sums (qwen3.5-4b on the H200 at 512 tokens: 28.7 us a
 * layer, 20.3 with T = 8; at 24 tokens 4.9, 6.2 with T = 8). The sums are the same, in the
 * same order. */
#define CONV_TOKENS 8

/* v lanes of row r of [state ; block] at channel ch, as f32 scalars into out[]: the
 * state's (r < K - 1, only in the first group of tokens) or the block's row (clamped to
 * n_max - 1: rows past n reach only outputs that are not stored). */
static void window_lanes(kx k, ir_buf qkv, ir_buf state, ir_val r, bool maybe_state, uint32_t C, uint32_t K,
                         uint32_t n_max, ir_val ch, uint32_t v, ir_val *out) {
    ir_val from_block = maybe_state ? kx_ge(k, r, kx_u32(k, K - 1)) : IR_NONE;
    ir_val row = maybe_state ? kx_select(k, from_block, kx_sub_c(k, r, K - 1), kx_u32(k, 0)) : kx_sub_c(k, r, K - 1);
    ir_val br = kx_min(k, row, kx_u32(k, n_max - 1));
    ir_val bv = kx_load(k, qkv, kx_idx(k, br, C, ch), v);
    ir_val sr = maybe_state ? kx_select(k, from_block, kx_u32(k, 0), r) : IR_NONE;
    ir_val sv = maybe_state ? kx_load(k, state, kx_idx(k, sr, C, ch), v) : IR_NONE;
    for (uint32_t l = 0; l < v; l++) {
        ir_val b = kx_as(k, v > 1 ? kx_lane(k, bv, l) : bv, IR_F32);
        out[l] = maybe_state ? kx_select(k, from_block, b, v > 1 ? kx_lane(k, sv, l) : sv) : b;
    }
}

ir_kernel *kn_ssm_conv_block(const rt_caps *c, uint32_t channels, uint32_t taps, uint32_t n_max, ir_scalar dtype,
                             uint32_t groups[2], kiln_err *err) {
    if (conv_block_check("kn_ssm_conv_block", c, channels, taps, n_max, dtype, err)) return NULL;
    kx k = {kn_create("kn_ssm_conv_block", err), c};
    if (!k.ir) return NULL;
    uint32_t C = channels, K = taps, wg = kn_workgroup(c, 256), v = C % 2 ? 1 : 2, cv = C / v;
    uint32_t T = n_max > 64 ? CONV_TOKENS : 2;
    uint32_t n_groups = (n_max + T - 1) / T;
    ir_buf qkv = kx_buffer(k, "qkv", dtype, IR_READ, (uint64_t)n_max * C);
    ir_buf w = kx_buffer(k, "w", IR_F32, IR_READ, (uint64_t)C * K);
    ir_buf state = kx_buffer(k, "state", IR_F32, IR_READ, (uint64_t)(K - 1) * C);
    ir_buf x = kx_buffer(k, "x", dtype, IR_WRITE, (uint64_t)n_max * C);
    ir_buf info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    kx_workgroup(k, wg);
    ir_val e = kx_global(k), n = kx_min(k, kx_load_c(k, info, 1), kx_u32(k, n_max));
    ir_val t0 = kx_mul_c(k, kx_div_c(k, e, cv), T), ch = kx_mul_c(k, kx_rem_c(k, e, cv), v);
    ir_if *in = kx_if(k, kx_lt(k, t0, n));
    ir_val wt[2][CONV_MAX_K], win[CONV_TOKENS + CONV_MAX_K - 1][2];
    for (uint32_t l = 0; l < v; l++)
        for (uint32_t i = 0; i < K; i++)
            wt[l][i] = kx_load(k, w, kx_add_c(k, kx_mul_c(k, kx_add_c(k, ch, l), K), i), 1);
    for (uint32_t i = 0; i < T + K - 1; i++) /* rows t0 + i; only t0 = 0 reads the state */
        window_lanes(k, qkv, state, kx_add_c(k, t0, i), i + 1 < K, C, K, n_max, ch, v, win[i]);
    for (uint32_t j = 0; j < T; j++) {
        ir_val t = kx_add_c(k, t0, j), o[2];
        ir_if *live = j ? kx_if(k, kx_lt(k, t, n)) : NULL;
        for (uint32_t l = 0; l < v; l++) {
            ir_val s = kx_f32(k, 0.0f);
            for (uint32_t i = 0; i < K; i++) s = kx_add(k, s, kx_mul(k, win[j + i][l], wt[l][i]));
            o[l] = kx_as(k, silu(k, s), dtype);
        }
        kx_store(k, x, kx_idx(k, t, C, ch), v > 1 ? kx_vec(k, o, v) : o[0]);
        if (live) kx_end_if(k, live);
    }
    kx_end_if(k, in);
    if (groups) groups[0] = (uint32_t)(((uint64_t)n_groups * cv + wg - 1) / wg), groups[1] = 1;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_ssm_conv_state(const rt_caps *c, uint32_t channels, uint32_t taps, uint32_t n_max, ir_scalar dtype,
                             uint32_t groups[2], kiln_err *err) {
    if (conv_block_check("kn_ssm_conv_state", c, channels, taps, n_max, dtype, err)) return NULL;
    kx k = {kn_create("kn_ssm_conv_state", err), c};
    if (!k.ir) return NULL;
    uint32_t C = channels, K = taps, wg = kn_workgroup(c, 256);
    ir_buf qkv = kx_buffer(k, "qkv", dtype, IR_READ, (uint64_t)n_max * C);
    ir_buf state = kx_buffer(k, "state", IR_F32, IR_READ | IR_WRITE, (uint64_t)(K - 1) * C);
    ir_buf info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    kx_workgroup(k, wg);
    ir_val ch = kx_global(k), n = kx_min(k, kx_load_c(k, info, 1), kx_u32(k, n_max));
    ir_if *in = kx_if(k, kx_lt_c(k, ch, C));
    ir_val v[CONV_MAX_K];
    for (uint32_t r = 0; r + 1 < K; r++) /* row n + r of [state ; block]: all read before any is written */
        v[r] = window_row(k, qkv, state, kx_add_c(k, n, r), C, K, ch);
    for (uint32_t r = 0; r + 1 < K; r++) kx_store(k, state, kx_add_c(k, ch, r * C), v[r]);
    kx_end_if(k, in);
    if (groups) groups[0] = (C + wg - 1) / wg, groups[1] = 1;
    return kn_finish(k.ir, err);
}

typedef struct dn {
    kx k;
    kn_deltanet_shape s;
    uint32_t C, vdim, P, L, CB; /* P invocations a column, each L of its dk state values; CB columns a workgroup */
    float eps;
    ir_buf x, ba, dt_bias, ssm_a, S, o;
    ir_shm qk;
    ir_val j, c, cl, p, kh, col_ok; /* c the column, cl c clamped into the head (where a block runs past dv) */
} dn;

/* the sum of v over the P invocations of a column (adjacent lanes): a butterfly of xor
 * shuffles, the same in each of them (every addition has the same two operands) */
static ir_val parts_sum(const dn *q, ir_val v) {
    for (uint32_t m = 1; m < q->P; m *= 2) v = kx_add(q->k, v, kx_sg_xor(q->k, v, m));
    return v;
}

/* element m of the invocation's part: i = p L + m, whether it is one (< n) and i clamped */
static ir_val part_index(const dn *q, uint32_t m, uint32_t n, ir_val *ok) {
    kx k = q->k;
    ir_val i = kx_add_c(k, kx_mul_c(k, q->p, q->L), m);
    *ok = q->P * q->L > n ? kx_lt_c(k, i, n) : IR_NONE;
    return q->P * q->L > n ? kx_select(k, *ok, i, kx_u32(k, 0)) : i;
}

/* shm[base + i] for element e of the part (0 past n) */
static ir_val part_load(const dn *q, ir_shm m, uint32_t base, uint32_t n, uint32_t e) {
    kx k = q->k;
    ir_val ok, i = part_index(q, e, n, &ok);
    ir_val v = kx_shm_load(k, m, kx_add_c(k, i, base), 1);
    return ok != IR_NONE ? kx_select(k, ok, v, kx_f32(k, 0.0f)) : v;
}

/* the sum of the squares of shm[base .. base + n) over the column's parts */
static ir_val part_sumsq(const dn *q, ir_shm m, uint32_t base, uint32_t n) {
    kx k = q->k;
    ir_val s = kx_f32(k, 0.0f);
    for (uint32_t e = 0; e < q->L; e++) {
        ir_val v = part_load(q, m, base, n, e);
        s = kx_add(k, s, kx_mul(k, v, v));
    }
    return parts_sum(q, s);
}

/* where the invocation stores (its part's first lane, its column in the head), or NULL: all do */
static ir_if *if_storer(const dn *q) {
    kx k = q->k;
    ir_val c = q->P > 1 ? kx_eq_c(k, q->p, 0) : IR_NONE;
    if (q->col_ok != IR_NONE) c = c != IR_NONE ? kx_and(k, c, q->col_ok) : q->col_ok;
    return c != IR_NONE ? kx_if(k, c) : NULL;
}

/* One token t of the head: S (the part's L values of column c) updated in place, o stored. */
static void token_step(const dn *q, ir_val t, ir_val *S) {
    kx k = q->k;
    uint32_t dk = q->s.state, dv = q->s.state, nk = q->s.k_heads, nv = q->s.v_heads, L = q->L;
    ir_val row = kx_mul_c(k, t, q->C), e;
    kx_barrier(k); /* the previous token's reads of qk are done */
    ir_for *f = kx_for(k, kx_local(k), kx_u32(k, dk), kx_u32(k, q->CB * q->P), &e); /* q then k of head kh, f32 */
    ir_val qi = kx_add(k, row, kx_add(k, kx_mul_c(k, q->kh, dk), e));
    ir_val ki = kx_add(k, row, kx_add(k, kx_mul_c(k, kx_add_c(k, q->kh, nk), dk), e));
    kx_shm_store(k, q->qk, e, kx_as(k, kx_load(k, q->x, qi, 1), IR_F32));
    kx_shm_store(k, q->qk, kx_add_c(k, e, dk), kx_as(k, kx_load(k, q->x, ki, 1), IR_F32));
    kx_end_for(k, f);
    kx_barrier(k);
    ir_val kn[KN_DELTANET_MAX_STATE]; /* q and k read again where they are used: fewer live registers */
    ir_val inv_q = kn_l2_inv(k, part_sumsq(q, q->qk, 0, dk), q->eps);
    ir_val inv_k = kn_l2_inv(k, part_sumsq(q, q->qk, dk, dk), q->eps);
    ir_val at = kx_add(k, kx_mul_c(k, t, 2 * nv), q->j); /* beta's logit; alpha's nv further */
    ir_val sp = kx_add(k, kx_as(k, kx_load(k, q->ba, kx_add_c(k, at, nv), 1), IR_F32), kx_load(k, q->dt_bias, q->j, 1));
    ir_val decay = kn_exp(k, kx_mul(k, kn_softplus(k, sp), kx_load(k, q->ssm_a, q->j, 1)));
    ir_val beta = kn_sigmoid(k, kx_as(k, kx_load(k, q->ba, at, 1), IR_F32));
    ir_val v_at = kx_add(k, row, kx_add(k, kx_mul_c(k, q->j, dv), q->cl));
    ir_val v = kx_as(k, kx_load(k, q->x, kx_add_c(k, v_at, 2 * nk * dk), 1), IR_F32);
    ir_val sk = kx_f32(k, 0.0f);
    for (uint32_t m = 0; m < L; m++) {
        S[m] = kx_mul(k, S[m], decay);
        kn[m] = kx_mul(k, part_load(q, q->qk, dk, dk, m), inv_k);
        sk = kx_add(k, sk, kx_mul(k, S[m], kn[m]));
    }
    ir_val d = kx_mul(k, kx_sub(k, v, parts_sum(q, sk)), beta), oq = kx_f32(k, 0.0f);
    for (uint32_t m = 0; m < L; m++) {
        S[m] = kx_add(k, S[m], kx_mul(k, kn[m], d));
        oq = kx_add(k, oq, kx_mul(k, S[m], kx_mul(k, part_load(q, q->qk, 0, dk, m), inv_q)));
    }
    ir_val o = kx_mul_f(k, parts_sum(q, oq), 1.0f / sqrtf((float)dk));
    ir_if *st = if_storer(q);
    kx_store(k, q->o, kx_add(k, kx_mul_c(k, t, q->vdim), kx_add(k, kx_mul_c(k, q->j, dv), q->c)), o);
    if (st) kx_end_if(k, st);
}

/* Invocations a column: up to 4, adjacent lanes of a subgroup, where the device shuffles
 * and the workgroup holds them (the sums then run over four quarters of the state,
 * reduced by shuffles: fewer registers and shorter chains than a column alone). */
static uint32_t column_parts(const rt_caps *c, uint32_t cols) {
    uint32_t P = 1;
    while (c && c->subgroup_shuffle && P < 4 && 2 * P <= c->subgroup_min && 2 * P * cols <= c->max_workgroup &&
           2 * P * cols <= 1024)
        P *= 2;
    /* shuffles want whole subgroups (CUDA refuses a partial warp): a block of 28 stays at one */
    return c && c->subgroup_max && (P * cols) % c->subgroup_max ? 1 : P;
}

ir_kernel *kn_deltanet(const rt_caps *c, const kn_deltanet_shape *shape, ir_scalar dtype, float eps,
                       uint32_t groups[2], kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    kn_deltanet_shape s = shape ? *shape : (kn_deltanet_shape){0};
    uint64_t C = 2ull * s.k_heads * s.state + (uint64_t)s.v_heads * s.state;
    uint32_t CB = s.state < 32 ? s.state : 32;
    if (!s.k_heads || !s.v_heads || !s.state || s.state > KN_DELTANET_MAX_STATE || !s.n_max ||
        (c && c->max_workgroup && CB > c->max_workgroup) || C * s.n_max > UINT32_MAX || !(eps >= 0.0f) ||
        !isfinite(eps)) {
        kiln_fail(err, KILN_ERR_INVALID,
                  "kn_deltanet: bad shape (%u k heads, %u v heads, state %u (1..%d, within the workgroup limit), "
                  "%u tokens, eps %g)",
                  s.k_heads, s.v_heads, s.state, KN_DELTANET_MAX_STATE, s.n_max, (double)eps);
        return NULL;
    }
    uint32_t dk = s.state, dv = s.state, nv = s.v_heads, P = column_parts(c, CB);
    dn q = {.s = s, .C = (uint32_t)C, .vdim = nv * dk, .P = P, .L = (dk + P - 1) / P, .CB = CB, .eps = eps};
    q.k = (kx){kn_create("kn_deltanet", err), c};
    if (!q.k.ir) return NULL;
    kx k = q.k;
    q.x = kx_buffer(k, "x", dtype, IR_READ, C * s.n_max);
    q.ba = kx_buffer(k, "ba", dtype, IR_READ, (uint64_t)2 * nv * s.n_max);
    q.dt_bias = kx_buffer(k, "dt_bias", IR_F32, IR_READ, nv);
    q.ssm_a = kx_buffer(k, "ssm_a", IR_F32, IR_READ, nv);
    q.S = kx_buffer(k, "S", IR_F32, IR_READ | IR_WRITE, (uint64_t)nv * dk * dk);
    q.o = kx_buffer(k, "o", IR_F32, IR_WRITE, (uint64_t)q.vdim * s.n_max);
    ir_buf info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    kx_workgroup(k, CB * P);
    q.qk = kx_shared(k, "qk", IR_F32, 2 * dk);
    q.j = kx_group(k, 0);
    ir_val c0 = kx_group_times(k, 1, CB), tid = kx_local(k);
    q.c = kx_add(k, c0, P > 1 ? kx_div_c(k, tid, P) : tid);
    q.p = P > 1 ? kx_rem_c(k, tid, P) : kx_u32(k, 0);
    q.col_ok = dv % CB ? kx_lt_c(k, q.c, dv) : IR_NONE;
    q.cl = dv % CB ? kx_select(k, q.col_ok, q.c, kx_u32(k, 0)) : q.c;
    q.kh = kx_rem_c(k, q.j, s.k_heads);
    ir_val n = kx_min(k, kx_load_c(k, info, 1), kx_u32(k, s.n_max));
    ir_val S[KN_DELTANET_MAX_STATE], col = kx_add(k, kx_mul_c(k, q.j, dk * dk), q.cl);
    for (uint32_t e = 0; e < q.L; e++) { /* S[i][c] at (j dk + i) dk + c; 0 past dk */
        ir_val ok, i = part_index(&q, e, dk, &ok);
        S[e] = kx_load(k, q.S, kx_add(k, col, kx_mul_c(k, i, dk)), 1);
        if (ok != IR_NONE) S[e] = kx_select(k, ok, S[e], kx_f32(k, 0.0f));
    }
    ir_for *l = ir_for_begin(k.ir, kx_u32(k, 0), n, kx_u32(k, 1), q.L, S);
    ir_val cur[KN_DELTANET_MAX_STATE];
    for (uint32_t e = 0; e < q.L; e++) cur[e] = ir_for_arg(l, e);
    token_step(&q, ir_for_iv(l), cur);
    ir_for_end(k.ir, l, cur);
    for (uint32_t e = 0; e < q.L; e++) { /* the addresses again: not live across the tokens */
        ir_val ok, i = part_index(&q, e, dk, &ok);
        if (q.col_ok != IR_NONE) ok = ok != IR_NONE ? kx_and(k, ok, q.col_ok) : q.col_ok;
        ir_if *f = ok != IR_NONE ? kx_if(k, ok) : NULL;
        kx_store(k, q.S, kx_add(k, col, kx_mul_c(k, i, dk)), ir_for_result(l, e));
        if (f) kx_end_if(k, f);
    }
    if (groups) groups[0] = nv, groups[1] = (dv + CB - 1) / CB;
    return kn_finish(k.ir, err);
}
