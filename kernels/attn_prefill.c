/* Prefill attention: causal attention of a block of query tokens over the KV cache, in
 * the style of flash attention, with f32 SIMT arithmetic (no cooperative matrices).
 *
 * A workgroup takes R query rows: Hw query heads of one GQA group (they share the kv
 * head, so one K/V tile in workgroup memory serves all of them) times Bt consecutive
 * tokens, R = Hw * Bt. Its q rows are staged once in workgroup memory. It then walks the
 * keys 0 .. (its last token's position) in tiles of Bk positions, each tile in four
 * steps separated by barriers:
 *   1. stage the K tile;
 *   2. scores: each invocation owns TR rows x TK keys and sums q . k over d in order
 *      (products of two 16-bit values are exact, so this is the oracle's sum bit for
 *      bit), times scale; keys past a row's position get -inf;
 *   3. the V tile overwrites the K tile while Wr invocations per row run the online
 *      softmax on the row's Bk scores: m_new = max(m, tile max), alpha = exp(m - m_new)
 *      (0 on the first tile), e = exp(s - m_new) written back, l = l * alpha + sum e;
 *      the Wr partial maxima and sums meet through subgroup shuffles (Wr = 1 without);
 *   4. output: each invocation owns TR2 rows x TD columns of the R x hd accumulator and
 *      does acc = acc * alpha + sum_k e_k v_k[d], keys in order.
 * At the end out = acc / l, rounded to dtype once. This is kn_attn_decode's arithmetic
 * (f32 scores, max subtracted, f32 sums, one division) with the rescale applied before
 * the tile's terms are added; tests/test_kernels_attn_prefill.c bounds the difference
 * from the oracle.
 *
 * The q and K/V tiles hold the 16-bit values two to a u32 word (a workgroup array of
 * bf16 would take 4 bytes an element without native bf16), unpacked with a shift or a
 * mask (bf16) or a conversion (f16, where the caps have f16 arithmetic; f32 tiles
 * otherwise): half the workgroup memory and half the shared-memory loads of f32 tiles,
 * which bound the inner loops. Tile rows are padded by one word so strided reads hit
 * distinct banks.
 *
 * Balance: the work of a token block grows with its position, so a workgroup takes two
 * blocks, b and nb - 1 - b (the longer first), and all workgroups do about the same work.
 * Tokens past n (or at positions at or past n_ctx) produce no output; a workgroup whose
 * tokens all do returns before any barrier. Keys are staged only below the block's last
 * valid position + 1, so nothing past the causal limit (or the cache) is read.
 *
 * Sizes: R = 32 rows, Bk = 32 keys, 256 invocations where the caps allow: per invocation
 * 2 x 2 scores, 4 rows x 8 dims of output (hd = 128), a row's softmax on 8 invocations;
 * the tiles take 8.1 (q) + 8.1 (K/V) + 4.1 (scores) KiB. Fewer rows, keys or invocations
 * where caps.shared_bytes or the workgroup limit ask for it (spec minimum, hd = 128:
 * R = 32, Bk = 16, 128 invocations).
 *
 * Measured on the H200 (Vulkan, bf16, 512 tokens from position 0, qwen3-0.6b's 16 / 8
 * heads of 128): 67 us a layer, 1.9 ms for its 28 layers; qwen3-8b's 32 / 8: 114 us a
 * layer. f16 takes ~30% longer (its unpacking converts). Tried and slower: Bk = 64 (as
 * fast for 0.6b, 15% slower for 8b), 128 invocations (20%), R = 16 or 64 (40-70%), f32
 * tiles (~12%, at 128 invocations), one token block per workgroup (3%). */
#include "kernels/kn_common.h"

#include <math.h>

#define MAX_S 64     /* scores per invocation */
#define MAX_O 256    /* output accumulators per invocation */
#define MAX_STAGE 64 /* staged vectors per invocation */

typedef struct cfg {
    uint32_t W, R, Bk, Hw, Bt; /* invocations, rows, keys per tile, heads and tokens per block */
    uint32_t KX, RY, TK, TR;   /* scores: invocations across keys and rows, keys and rows each */
    uint32_t DX, RY2, TD, TR2; /* output: the same across columns (words) and rows */
    uint32_t Wr;               /* softmax invocations per row */
    uint32_t E, hw;            /* elements per tile word (2: packed 16-bit pairs, 1: f32), words per row */
    uint32_t QP, KP, PP;       /* row strides (words) of the q, K/V and score tiles */
    uint32_t u, UW;            /* elements per global load; words per step of the score loop */
} cfg;

static uint32_t floor_pow2(uint32_t x) {
    uint32_t p = 1;
    while (p * 2 <= x) p *= 2;
    return p;
}

/* Fills g for R rows and Bk keys per tile on at most Wmax invocations; false when the
 * caps cannot hold it. */
static bool plan(const rt_caps *c, uint32_t G, uint32_t hd, uint32_t u, uint32_t E, uint32_t R, uint32_t Bk,
                 uint32_t Wmax, cfg *g) {
    *g = (cfg){0};
    g->R = R, g->Bk = Bk, g->u = u, g->E = E, g->hw = hd / E;
    g->QP = g->hw + 1, g->KP = g->hw + 1, g->PP = Bk + 1;
    g->UW = E == 2 ? (g->hw % 2 == 0 ? 2 : 1) : u;
    uint64_t words = (uint64_t)R * g->QP + (uint64_t)Bk * g->KP + (uint64_t)R * g->PP + 2ull * R;
    if (c->shared_bytes && 4 * words > c->shared_bytes) return false;
    uint32_t W = kn_workgroup(c, Wmax);
    if (W > R * Bk) W = R * Bk;
    g->W = W;
    /* heads sharing the tile: the largest power of two dividing the group, at most R */
    g->Hw = 1;
    while (g->Hw * 2 <= R && G % (g->Hw * 2) == 0) g->Hw *= 2;
    g->Bt = R / g->Hw;
    /* scores: about square micro-tiles */
    uint32_t ns = R * Bk / W;
    g->TK = 1;
    while (g->TK * g->TK * 4 <= ns) g->TK *= 2;
    if (g->TK > Bk) g->TK = Bk;
    g->TR = ns / g->TK;
    if (g->TR > R) g->TR = R, g->TK = ns / R;
    g->KX = Bk / g->TK, g->RY = R / g->TR;
    if (g->KX * g->RY != W || g->TR * g->TK > MAX_S) return false;
    /* output: the widest DX (<= 32) that wastes at most 1/8 of the columns, else the least waste */
    uint32_t hw = g->hw, best = 0, best_cost = UINT32_MAX;
    for (uint32_t dx = 1; dx <= W; dx *= 2) {
        if (W / dx > R) continue;
        uint32_t cost = dx * ((hw + dx - 1) / dx);
        if (dx <= 32 && cost * 8 <= hw * 9) best = dx, best_cost = 0;
        else if (best_cost && cost < best_cost) best = dx, best_cost = cost;
    }
    if (!best) return false;
    g->DX = best, g->RY2 = W / best, g->TD = (hw + best - 1) / best, g->TR2 = R / g->RY2;
    if (g->TR2 * g->TD * E > MAX_O) return false;
    /* softmax: invocations per row within one subgroup, meeting through shuffles */
    g->Wr = 1;
    if (c->subgroup_shuffle && c->subgroup_min > 1) {
        uint32_t wr = W / R;
        if (wr > c->subgroup_min) wr = c->subgroup_min;
        if (wr > Bk) wr = Bk;
        g->Wr = floor_pow2(wr);
    }
    uint32_t stage = (R > Bk ? R : Bk) * (hd / u);
    return (stage + W - 1) / W <= MAX_STAGE;
}

/* The builder's state. */
typedef struct kb {
    ir_kernel *k;
    const cfg *g;
    ir_scalar dtype;
    uint32_t hd, q_stride, kv_dim, n_head;
    float scale;
    ir_buf qb, kc, vc, ob;
    ir_shm sh_q, sh_kv, sh_p, sh_a, sh_l;
    ir_val lid, u0, f0, ninf, pos0, nv, hq0, kvoff;
} kb;

static ir_val cu(kb *b, uint32_t v) { return ir_const_u32(b->k, v); }
static ir_val add(kb *b, ir_val x, ir_val y) { return ir_bin(b->k, IR_OP_ADD, x, y); }
static ir_val mul(kb *b, ir_val x, ir_val y) { return ir_bin(b->k, IR_OP_MUL, x, y); }

/* The E f32 values of a tile word. */
static void unpack(kb *b, ir_val w, ir_val *out) {
    ir_kernel *k = b->k;
    ir_type f32 = ir_t_scalar(k, IR_F32);
    if (b->g->E == 1) {
        out[0] = w;
    } else if (b->dtype == IR_BF16) { /* a bf16 is the top half of its f32 */
        out[0] = ir_bitcast(k, ir_bin(k, IR_OP_SHL, w, cu(b, 16)), f32);
        out[1] = ir_bitcast(k, ir_bin(k, IR_OP_AND, w, cu(b, 0xffff0000u)), f32);
    } else {
        ir_val h2 = ir_bitcast(k, w, ir_t_vector(k, IR_F16, 2));
        ir_val f2 = ir_convert(k, h2, ir_t_vector(k, IR_F32, 2));
        out[0] = ir_extract(k, f2, 0), out[1] = ir_extract(k, f2, 1);
    }
}

/* The block's first token, and a K/V tile's first position and end (the rows of q and
 * K/V tiles are found from them). */
typedef struct rows {
    ir_val t0, b0, n_keys;
} rows;

/* Copies n_rows rows of hd values into a tile with row stride `pitch` words: vector i
 * (u elements; row i / (hd / u)) from buf at base(row) + column when ok(row), else 0. */
typedef struct src {
    ir_buf buf;
    ir_val (*base)(kb *b, const rows *w, ir_val row);
    ir_val (*ok)(kb *b, const rows *w, ir_val row);
    const rows *w;
} src;

static void stage(kb *b, ir_shm dst, uint32_t n_rows, uint32_t pitch, const src *s) {
    ir_kernel *k = b->k;
    const cfg *g = b->g;
    uint32_t u = g->u, per_row = b->hd / u, nvec = n_rows * per_row, reps = (nvec + g->W - 1) / g->W;
    uint32_t nwd = u / g->E; /* words per vector */
    ir_type wt = g->E == 2 ? ir_t_scalar(k, IR_U32) : ir_t_scalar(k, IR_F32);
    ir_type wv = nwd == 1 ? wt : ir_t_vector(k, g->E == 2 ? IR_U32 : IR_F32, nwd);
    ir_val z[4], zs = g->E == 2 ? b->u0 : b->f0;
    for (uint32_t i = 0; i < nwd; i++) z[i] = zs;
    ir_val zero = nwd == 1 ? zs : ir_vec(k, z, nwd);
    for (uint32_t c = 0; c < reps; c++) {
        ir_val idx = add(b, b->lid, cu(b, c * g->W));
        ir_if *in = NULL;
        if ((c + 1) * g->W > nvec) in = ir_if_begin(k, ir_compare(k, IR_LT, idx, cu(b, nvec)), 0);
        ir_val row = ir_bin(k, IR_OP_DIV, idx, cu(b, per_row));
        ir_val vcol = ir_bin(k, IR_OP_REM, idx, cu(b, per_row));
        ir_if *ld = ir_if_begin(k, s->ok(b, s->w, row), 1);
        ir_val v = ir_load(k, s->buf, add(b, s->base(b, s->w, row), mul(b, vcol, cu(b, u))), u);
        v = g->E == 2 ? ir_bitcast(k, v, wv) : ir_convert(k, v, wv); /* 16-bit pairs as words, or f32 */
        ir_if_else(k, ld, &v);
        ir_if_end(k, ld, &zero);
        ir_shm_store(k, dst, add(b, mul(b, row, cu(b, pitch)), mul(b, vcol, cu(b, nwd))), ir_if_result(ld, 0));
        if (in) ir_if_end(k, in, NULL);
    }
}

/* q row r: head hq0 + r / Bt of token t0 + r % Bt; K/V tile row j: position b0 + j */
static ir_val row_token(kb *b, ir_val t0, ir_val r) { return add(b, t0, ir_bin(b->k, IR_OP_REM, r, cu(b, b->g->Bt))); }
static ir_val row_head(kb *b, ir_val r) { return add(b, b->hq0, ir_bin(b->k, IR_OP_DIV, r, cu(b, b->g->Bt))); }

static ir_val q_base(kb *b, const rows *w, ir_val r) {
    return add(b, mul(b, row_token(b, w->t0, r), cu(b, b->q_stride)), mul(b, row_head(b, r), cu(b, b->hd)));
}
static ir_val q_ok(kb *b, const rows *w, ir_val r) {
    return ir_compare(b->k, IR_LT, row_token(b, w->t0, r), b->nv);
}
static ir_val kv_base(kb *b, const rows *w, ir_val j) {
    return add(b, mul(b, add(b, w->b0, j), cu(b, b->kv_dim)), b->kvoff);
}
static ir_val kv_ok(kb *b, const rows *w, ir_val j) {
    return ir_compare(b->k, IR_LT, add(b, w->b0, j), w->n_keys);
}

/* One block of Bt tokens from t0 (< nv): everything from staging q to the stores. */
static void block(kb *b, ir_val t0) {
    ir_kernel *k = b->k;
    const cfg *g = b->g;
    uint32_t E = g->E;
    ir_val lid = b->lid, u0 = b->u0, f0 = b->f0, ninf = b->ninf;
    /* keys 0 .. the last valid token's position */
    ir_val n_keys = add(b, b->pos0, ir_bin(k, IR_OP_MIN, add(b, t0, cu(b, g->Bt)), b->nv));
    rows rw = {t0, IR_NONE, n_keys};
    src qsrc = {b->qb, q_base, q_ok, &rw};
    stage(b, b->sh_q, g->R, g->QP, &qsrc);

    /* scores: rows ry + i * RY, keys kx + j * KX; a row's last key is its position (0 for
     * rows without a valid token, which are never stored) */
    ir_val kx = ir_bin(k, IR_OP_REM, lid, cu(b, g->KX)), ry = ir_bin(k, IR_OP_DIV, lid, cu(b, g->KX));
    ir_val s_qrow[MAX_S], s_krow[MAX_S], s_key[MAX_S], s_lim[MAX_S], s_at[MAX_S];
    for (uint32_t i = 0; i < g->TR; i++) {
        ir_val r = add(b, ry, cu(b, i * g->RY)), t = row_token(b, t0, r);
        s_qrow[i] = mul(b, r, cu(b, g->QP));
        s_lim[i] = ir_select(k, ir_compare(k, IR_LT, t, b->nv), add(b, b->pos0, t), u0);
        s_at[i] = mul(b, r, cu(b, g->PP));
    }
    for (uint32_t j = 0; j < g->TK; j++) {
        s_key[j] = add(b, kx, cu(b, j * g->KX));
        s_krow[j] = mul(b, s_key[j], cu(b, g->KP));
    }
    /* softmax: row vid / Wr, part vid % Wr, vid the invocation's place in its subgroup
     * when Wr > 1 (so the shuffles stay within the row) */
    ir_val vid = lid;
    if (g->Wr > 1)
        vid = add(b, mul(b, ir_id(k, IR_ID_SG_ID, 0), ir_id(k, IR_ID_SG_SIZE, 0)), ir_id(k, IR_ID_SG_LANE, 0));
    ir_val sm_row = ir_bin(k, IR_OP_DIV, vid, cu(b, g->Wr)), sm_part = ir_bin(k, IR_OP_REM, vid, cu(b, g->Wr));
    uint32_t sm_n = g->Bk / g->Wr;
    ir_val sm_at = add(b, mul(b, sm_row, cu(b, g->PP)), mul(b, sm_part, cu(b, sm_n)));
    ir_val sm_active = ir_compare(k, IR_LT, vid, cu(b, g->R * g->Wr));
    /* output: rows ry2 + i * RY2, words dx + j * DX (read clamped to the row) */
    ir_val dx = ir_bin(k, IR_OP_REM, lid, cu(b, g->DX)), ry2 = ir_bin(k, IR_OP_DIV, lid, cu(b, g->DX));
    ir_val o_row[MAX_O], o_prow[MAX_O], o_wc[MAX_O], o_lwc[MAX_O];
    for (uint32_t i = 0; i < g->TR2; i++) {
        o_row[i] = add(b, ry2, cu(b, i * g->RY2));
        o_prow[i] = mul(b, o_row[i], cu(b, g->PP));
    }
    for (uint32_t j = 0; j < g->TD; j++) {
        o_wc[j] = add(b, dx, cu(b, j * g->DX));
        o_lwc[j] = (j + 1) * g->DX > g->hw ? ir_bin(k, IR_OP_MIN, o_wc[j], cu(b, g->hw - 1)) : o_wc[j];
    }

    /* the key tiles; carried: the softmax row's m and l, then the accumulators */
    uint32_t no = g->TR2 * g->TD * E;
    ir_val init[2 + MAX_O];
    init[0] = ninf, init[1] = f0;
    for (uint32_t i = 0; i < no; i++) init[2 + i] = f0;
    ir_for *tl = ir_for_begin(k, u0, n_keys, cu(b, g->Bk), 2 + no, init);
    ir_val b0 = ir_for_iv(tl), m_old = ir_for_arg(tl, 0), l_old = ir_for_arg(tl, 1);
    rw.b0 = b0;
    src ksrc = {b->kc, kv_base, kv_ok, &rw}, vsrc = {b->vc, kv_base, kv_ok, &rw};
    ir_barrier(k); /* the last tile's output step is done with the tiles (the first: q staged) */
    stage(b, b->sh_kv, g->Bk, g->KP, &ksrc);
    ir_barrier(k);

    /* 2. scores, d in order; masked past each row's position */
    {
        uint32_t ns = g->TR * g->TK;
        ir_val si[MAX_S];
        for (uint32_t i = 0; i < ns; i++) si[i] = f0;
        ir_for *dl = ir_for_begin(k, u0, cu(b, g->hw), cu(b, g->UW), ns, si);
        ir_val w = ir_for_iv(dl), acc[MAX_S];
        for (uint32_t i = 0; i < ns; i++) acc[i] = ir_for_arg(dl, i);
        for (uint32_t e = 0; e < g->UW; e++) {
            ir_val we = e ? add(b, w, cu(b, e)) : w, qv[MAX_S][2], kv[MAX_S][2];
            for (uint32_t i = 0; i < g->TR; i++) unpack(b, ir_shm_load(k, b->sh_q, add(b, s_qrow[i], we), 1), qv[i]);
            for (uint32_t j = 0; j < g->TK; j++) unpack(b, ir_shm_load(k, b->sh_kv, add(b, s_krow[j], we), 1), kv[j]);
            for (uint32_t h = 0; h < E; h++)
                for (uint32_t i = 0; i < g->TR; i++)
                    for (uint32_t j = 0; j < g->TK; j++)
                        acc[i * g->TK + j] = ir_fma(k, qv[i][h], kv[j][h], acc[i * g->TK + j]);
        }
        ir_for_end(k, dl, acc);
        ir_val sc = ir_const_f32(k, b->scale);
        for (uint32_t j = 0; j < g->TK; j++) {
            ir_val pos = add(b, b0, s_key[j]);
            for (uint32_t i = 0; i < g->TR; i++) {
                ir_val s = ir_bin(k, IR_OP_MUL, ir_for_result(dl, i * g->TK + j), sc);
                s = ir_select(k, ir_compare(k, IR_LE, pos, s_lim[i]), s, ninf);
                ir_shm_store(k, b->sh_p, add(b, s_at[i], s_key[j]), s);
            }
        }
    }
    ir_barrier(k);

    /* 3. the V tile over the K tile, and the online softmax of each row */
    stage(b, b->sh_kv, g->Bk, g->KP, &vsrc);
    ir_val m_new, l_new;
    {
        ir_if *act = ir_if_begin(k, sm_active, 2);
        ir_val s[MAX_S], mx = ninf;
        for (uint32_t c2 = 0; c2 < sm_n; c2++) {
            s[c2] = ir_shm_load(k, b->sh_p, add(b, sm_at, cu(b, c2)), 1);
            mx = ir_bin(k, IR_OP_MAX, mx, s[c2]);
        }
        for (uint32_t x = 1; x < g->Wr; x *= 2) mx = ir_bin(k, IR_OP_MAX, mx, ir_sg_shuffle_xor(k, mx, cu(b, x)));
        ir_val mn = ir_bin(k, IR_OP_MAX, m_old, mx); /* finite: key 0 is in every row's first tile */
        /* the first tile has nothing to rescale (and exp(-inf) is left to no device) */
        ir_val first = ir_compare(k, IR_EQ, b0, u0);
        ir_val alpha =
            ir_select(k, first, f0, kn_exp(k, ir_bin(k, IR_OP_SUB, ir_select(k, first, mn, m_old), mn)));
        ir_val sum = f0;
        for (uint32_t c2 = 0; c2 < sm_n; c2++) {
            ir_val live = ir_compare(k, IR_GT, s[c2], ninf);
            ir_val e = kn_exp(k, ir_select(k, live, ir_bin(k, IR_OP_SUB, s[c2], mn), f0));
            e = ir_select(k, live, e, f0);
            ir_shm_store(k, b->sh_p, add(b, sm_at, cu(b, c2)), e);
            sum = ir_bin(k, IR_OP_ADD, sum, e);
        }
        for (uint32_t x = 1; x < g->Wr; x *= 2) sum = ir_bin(k, IR_OP_ADD, sum, ir_sg_shuffle_xor(k, sum, cu(b, x)));
        ir_val ln = ir_fma(k, l_old, alpha, sum);
        ir_if *p0 = ir_if_begin(k, ir_compare(k, IR_EQ, sm_part, u0), 0);
        ir_shm_store(k, b->sh_a, sm_row, alpha);
        ir_if_end(k, p0, NULL);
        ir_val y[2] = {mn, ln}, keep[2] = {m_old, l_old};
        ir_if_else(k, act, y);
        ir_if_end(k, act, keep);
        m_new = ir_if_result(act, 0), l_new = ir_if_result(act, 1);
    }
    ir_barrier(k);

    /* 4. acc = acc * alpha + sum_k e_k v_k, keys in order; acc[(i * TD + j) * E + h] is
     * row i, dim E * word_j + h */
    ir_val nx[2 + MAX_O];
    nx[0] = m_new, nx[1] = l_new;
    {
        ir_val ai[MAX_O], a0[MAX_O];
        for (uint32_t i = 0; i < g->TR2; i++) ai[i] = ir_shm_load(k, b->sh_a, o_row[i], 1);
        for (uint32_t i = 0; i < no; i++) a0[i] = ir_bin(k, IR_OP_MUL, ir_for_arg(tl, 2 + i), ai[i / (g->TD * E)]);
        uint32_t unroll = g->Bk >= 4 ? 4 : g->Bk;
        ir_for *kl = ir_for_begin(k, u0, cu(b, g->Bk), cu(b, unroll), no, a0);
        ir_val kk = ir_for_iv(kl), acc[MAX_O];
        for (uint32_t i = 0; i < no; i++) acc[i] = ir_for_arg(kl, i);
        for (uint32_t e = 0; e < unroll; e++) {
            ir_val key = e ? add(b, kk, cu(b, e)) : kk, pv[MAX_O], vv[MAX_O][2];
            ir_val vrow = mul(b, key, cu(b, g->KP));
            for (uint32_t i = 0; i < g->TR2; i++) pv[i] = ir_shm_load(k, b->sh_p, add(b, o_prow[i], key), 1);
            for (uint32_t j = 0; j < g->TD; j++) unpack(b, ir_shm_load(k, b->sh_kv, add(b, vrow, o_lwc[j]), 1), vv[j]);
            for (uint32_t i = 0; i < g->TR2; i++)
                for (uint32_t j = 0; j < g->TD; j++)
                    for (uint32_t h = 0; h < E; h++) {
                        uint32_t a = (i * g->TD + j) * E + h;
                        acc[a] = ir_fma(k, pv[i], vv[j][h], acc[a]);
                    }
        }
        ir_for_end(k, kl, acc);
        for (uint32_t i = 0; i < no; i++) nx[2 + i] = ir_for_result(kl, i);
    }
    ir_for_end(k, tl, nx);

    /* out = acc / l, rounded once; rows of valid tokens only */
    ir_if *lw = ir_if_begin(k, ir_bin(k, IR_OP_AND, sm_active, ir_compare(k, IR_EQ, sm_part, u0)), 0);
    ir_shm_store(k, b->sh_l, sm_row, ir_for_result(tl, 1));
    ir_if_end(k, lw, NULL);
    ir_barrier(k);
    ir_type ot = E == 1 ? ir_t_scalar(k, b->dtype) : ir_t_vector(k, b->dtype, E);
    for (uint32_t i = 0; i < g->TR2; i++) {
        ir_val r = o_row[i], t = row_token(b, t0, r);
        ir_val base = add(b, mul(b, t, cu(b, b->n_head * b->hd)), mul(b, row_head(b, r), cu(b, b->hd)));
        ir_val l = ir_shm_load(k, b->sh_l, r, 1);
        ir_if *tv = ir_if_begin(k, ir_compare(k, IR_LT, t, b->nv), 0);
        for (uint32_t j = 0; j < g->TD; j++) {
            ir_if *dv = NULL;
            if ((j + 1) * g->DX > g->hw) dv = ir_if_begin(k, ir_compare(k, IR_LT, o_wc[j], cu(b, g->hw)), 0);
            ir_val o[2];
            for (uint32_t h = 0; h < E; h++) o[h] = kn_fdiv(k, ir_for_result(tl, 2 + (i * g->TD + j) * E + h), l);
            ir_val ov = E == 1 ? o[0] : ir_vec(k, o, E);
            ir_store(k, b->ob, add(b, base, mul(b, o_wc[j], cu(b, E))), ir_convert(k, ov, ot));
            if (dv) ir_if_end(k, dv, NULL);
        }
        ir_if_end(k, tv, NULL);
    }
}

ir_kernel *kn_attn_prefill(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t q_stride,
                           uint32_t n_ctx, uint32_t n_max, ir_scalar dtype, uint32_t groups[2], char *err,
                           size_t errlen) {
    if (kn_check_dtype(c, dtype, err, errlen)) return NULL;
    uint32_t hd = head_dim;
    uint64_t q_dim = (uint64_t)n_head * hd, kv_dim64 = (uint64_t)n_head_kv * hd;
    if (n_head == 0 || n_head_kv == 0 || n_head % n_head_kv || hd == 0 || n_ctx == 0 || n_max == 0 ||
        q_stride < q_dim || (uint64_t)n_ctx * kv_dim64 > UINT32_MAX || (uint64_t)n_max * q_stride > UINT32_MAX ||
        n_ctx > (1u << 31)) {
        kn_fail(err, errlen,
                "kn_attn_prefill: bad shape (heads %u / %u kv, head_dim %u, q_stride %u, n_ctx %u, n_max %u; n_head a "
                "multiple of n_head_kv, q_stride >= n_head * head_dim, u32 indices: n_ctx * kv_dim, n_max * q_stride "
                "< 2^32, n_ctx <= 2^31)",
                n_head, n_head_kv, hd, q_stride, n_ctx, n_max);
        return NULL;
    }
    uint32_t G = n_head / n_head_kv;
    /* vector loads start at multiples of their width: head starts and q rows */
    uint32_t u = kn_vec_width(hd);
    while (q_stride % u) u /= 2;
    /* 16-bit pairs in the tiles where they can be unpacked (f16 needs f16 arithmetic) */
    uint32_t E = u % 2 == 0 && (dtype == IR_BF16 || c->f16_arith) ? 2 : 1;
    cfg g;
    bool ok = false;
    /* the most rows that fit (they share each K/V tile), then the most keys */
    for (uint32_t R = 32; R >= 1 && !ok; R /= 2)
        for (uint32_t Bk = 32; Bk >= 4 && !ok; Bk /= 2) ok = plan(c, G, hd, u, E, R, Bk, 256, &g);
    if (!ok) {
        kn_fail(err, errlen,
                "kn_attn_prefill: head_dim %u does not fit the caps (%u bytes of workgroup memory, %u invocations)",
                hd, c->shared_bytes, c->max_workgroup);
        return NULL;
    }
    ir_kernel *k = kn_create("kn_attn_prefill", err, errlen);
    if (!k) return NULL;
    kb b = {.k = k, .g = &g, .dtype = dtype, .hd = hd, .q_stride = q_stride, .kv_dim = (uint32_t)kv_dim64,
            .n_head = n_head};
    b.scale = 1.0f / sqrtf((float)hd); /* the oracle's, computed the same way */
    b.qb = ir_param_buffer(k, "q", dtype, IR_READ), b.kc = ir_param_buffer(k, "kcache", dtype, IR_READ);
    b.vc = ir_param_buffer(k, "vcache", dtype, IR_READ), b.ob = ir_param_buffer(k, "out", dtype, IR_WRITE);
    ir_buf ib = ir_param_buffer(k, "info", IR_U32, IR_READ);
    ir_buffer_extent(k, b.qb, (uint64_t)n_max * q_stride);
    ir_buffer_extent(k, b.kc, (uint64_t)n_ctx * kv_dim64);
    ir_buffer_extent(k, b.vc, (uint64_t)n_ctx * kv_dim64);
    ir_buffer_extent(k, b.ob, (uint64_t)n_max * n_head * hd);
    ir_buffer_extent(k, ib, 2);
    ir_set_workgroup(k, g.W, 1, 1);
    ir_scalar tile = E == 2 ? IR_U32 : IR_F32;
    b.sh_q = ir_shared_array(k, "q_tile", tile, g.R * g.QP);
    b.sh_kv = ir_shared_array(k, "kv_tile", tile, g.Bk * g.KP);
    b.sh_p = ir_shared_array(k, "scores", IR_F32, g.R * g.PP);
    b.sh_a = ir_shared_array(k, "alpha", IR_F32, g.R), b.sh_l = ir_shared_array(k, "lsum", IR_F32, g.R);
    b.lid = ir_id(k, IR_ID_LOCAL, 0), b.u0 = cu(&b, 0), b.f0 = ir_const_f32(k, 0.0f);
    b.ninf = ir_const_f32(k, -INFINITY);

    /* group x: Hw heads of one kv head; group y: token blocks */
    b.hq0 = mul(&b, ir_id(k, IR_ID_GROUP, 0), cu(&b, g.Hw));
    b.kvoff = mul(&b, ir_bin(k, IR_OP_DIV, b.hq0, cu(&b, G)), cu(&b, hd));
    /* valid tokens: t < n, t < n_max, and pos0 + t < n_ctx (computed without wrapping) */
    b.pos0 = ir_load(k, ib, b.u0, 1);
    ir_val n = ir_load(k, ib, cu(&b, 1), 1);
    ir_val room = ir_select(k, ir_compare(k, IR_LT, b.pos0, cu(&b, n_ctx)), ir_bin(k, IR_OP_SUB, cu(&b, n_ctx), b.pos0),
                            b.u0);
    b.nv = ir_bin(k, IR_OP_MIN, ir_bin(k, IR_OP_MIN, n, cu(&b, n_max)), room);
    uint32_t nb = (n_max + g.Bt - 1) / g.Bt, gy_n = (nb + 1) / 2;
    ir_val gy = ir_id(k, IR_ID_GROUP, 1);
    ir_val heavy = ir_bin(k, IR_OP_SUB, cu(&b, nb - 1), gy); /* the longer block first */
    /* blocks nb - 1 - y, then y (unless they are one) */
    ir_for *two = ir_for_begin(k, b.u0, cu(&b, 2), cu(&b, 1), 0, NULL);
    ir_val second = ir_compare(k, IR_EQ, ir_for_iv(two), cu(&b, 1));
    ir_val t0 = mul(&b, ir_select(k, second, gy, heavy), cu(&b, g.Bt));
    ir_val run = ir_bin(k, IR_OP_AND, ir_compare(k, IR_LT, t0, b.nv),
                        ir_bin(k, IR_OP_OR, ir_un(k, IR_OP_NOT, second), ir_compare(k, IR_LT, gy, heavy)));
    ir_if *live = ir_if_begin(k, run, 0);
    block(&b, t0);
    ir_if_end(k, live, NULL);
    ir_for_end(k, two, NULL);
    if (groups) groups[0] = n_head / g.Hw, groups[1] = gy_n;
    return kn_finish(k, err, errlen);
}
