/* Prefill attention on matrix fragments (kn_attn_prefill's variant where the caps offer
 * 16x8x16 fragments of dtype whose elements the target exposes, CUDA sm_80+): Q·Kᵀ and
 * P·V on the tensor cores, the softmax in registers between them (flash attention 2),
 * without a new rounding point in the numerical contract.
 *
 * A workgroup of 4 subgroups takes 64 query rows: hpt heads of one kv head (they share
 * the K/V tiles) times 64 / hpt consecutive tokens; each subgroup 16 rows, kept as Q
 * fragments in registers (staged through V's second slot, which tile 1 takes after). Keys
 * come in tiles of 64 positions (K and V double-buffered in workgroup memory by
 * asynchronous copies, the next tile in flight during the math; positions past the
 * block's causal limit are zero-filled): 70 KiB of workgroup memory at head_dim 128.
 * ptxas gives it 254 registers (two workgroups an SM); asked for three (ir_set_occupancy
 * 3: 168 registers, no spills, and the memory fits) it ran no faster on the H200 (qwen3-8b,
 * 2048 tokens: 292 us a layer against 278), so it asks nothing. One pass over the tiles:
 *
 *   S = Q Kᵀ (8 accumulators of 16x8 per subgroup); each lane reads its own elements
 *   (ir_frag_elems: rows g and g + 8, two keys of every 8), scales and masks them (keys
 *   past the row's position count nothing), takes the rows' maxima with the 3 other lanes
 *   of its rows; m_new = max(m, the tile's), alpha = exp(m - m_new), e = exp(s - m_new),
 *   l = l alpha + sum e (the lane's part of the row), O *= alpha; then O += E V with E
 *   split into 16-bit parts, each the rounding of what the others leave (O += E1 V +
 *   E2 V [+ E3 V]), made into A fragments straight from the lanes' elements
 *   (ir_frag_from_elems: the accumulators of keys 0..7 and 8..15 are, element for
 *   element, the A fragment of those 16 keys): three bf16 parts (8 bits each, each the
 *   truncation of what the others leave: one AND, where rounding takes a dozen integer
 *   ops) hold e's 24 bits exactly (to 2^-133 absolute, bf16's subnormal grid), two f16
 *   parts (11 each, rounded) carry it to 2^-22 (2^-25 absolute below f16's normal
 *   range), about exp's own error. So P·V is f32 arithmetic up to summation order
 *   (and that error): the online softmax is kn_attn_prefill's SIMT kernel's (rescaled once
 *   a tile), and the oracle's softmax needs no new rounding point.
 *
 * At the end the 4 lanes of a row add their l, out = O / l, rounded to dtype once and
 * stored from the lanes' elements, as kn_attn_prefill's SIMT kernel and the oracle:
 * scores are (q . k) * scale, the division kn_fdiv; exp is kn_exp_nonpositive (its
 * arguments are s - m <= 0: within about 2^-22, at a third of kn_exp's cost). The work
 * is 1 + parts products per tile where flash attention with a rounded P does two.
 * KILN_ATTN_PARTS=2 takes two bf16 parts (e to 2^-16: below a 16-bit quantum of the
 * output, not exact; for measuring what the third costs).
 *
 * Balance: the workgroups along y take token blocks from the last (the longest) down. */
#include "kernels/kn_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define AT_ROWS 64 /* query rows per workgroup: 4 subgroups of 16 */
#define AT_KEYS 64 /* keys per K/V tile */
#define AT_PAD 8   /* 16-bit elements after each staged row */
#define COPY 8     /* elements per asynchronous copy */
#define MAX_HD 256

typedef struct at {
    kx k;
    ir_scalar dt;
    uint32_t hd, q_stride, kv_dim, n_head, n_ctx, n_max, hpt, tpt;
    float scale;
    ir_buf qb, kc, vc, ob;
    ir_shm qs, ks, vs;
    uint32_t parts; /* 16-bit parts of e */
    uint32_t pitch; /* of qs, ks, vs rows: hd + 8 */
    ir_type ta, tb, tc;
    ir_val lid, sid, lane, u0, f0, ninf;
    ir_val pos0, n_valid, t0, head0, kv_off, n_keys, n_tiles;
    const kn_pages *pg; /* or NULL: unpaged */
    ir_buf tab;         /* paged: the sequence's page table */
} at;

static uint32_t parts_of(ir_scalar dt) {
    const char *e = getenv("KILN_ATTN_PARTS");
    if (dt == IR_BF16 && e && strcmp(e, "2") == 0) return 2;
    return dt == IR_BF16 ? 3 : 2;
}

static uint32_t shared_bytes(uint32_t hd) { return AT_KEYS * (hd + AT_PAD) * 2 * 4; }

/* query heads per workgroup: the largest power of two dividing the group, at most 16 */
static uint32_t heads_per_tile(uint32_t n_head, uint32_t n_head_kv) {
    uint32_t group = n_head / n_head_kv, hpt = 1;
    while (hpt * 2 <= 16 && group % (hpt * 2) == 0) hpt *= 2;
    return hpt;
}

bool kn_attn_prefill_mma_ok(const rt_caps *c, ir_scalar dt, uint32_t n_head, uint32_t n_head_kv, uint32_t hd,
                            uint32_t n_max) {
    /* the lanes' elements (frag.elems) exist on PTX's fragments only: a Vulkan driver's
     * 16x8x16 shape (NVIDIA's f16) has no defined layout */
    if (c->backend != RT_CUDA) return false;
    if (c->subgroup_size != 32 || !c->subgroup_shuffle || hd % 16 || hd > MAX_HD) return false;
    /* a block of few workgroups (a short prompt's) runs faster on the SIMT kernel's many
     * (the H200, qwen3-0.6b pp24: 7,586 tok/s on fragments, 9,020 without) */
    uint32_t hpt = heads_per_tile(n_head, n_head_kv),
             grid = n_head / hpt * ((n_max + AT_ROWS / hpt - 1) / (AT_ROWS / hpt));
    if (c->compute_units && grid * 2 < c->compute_units) return false;
    if (c->max_workgroup && c->max_workgroup < 128) return false;
    if (c->shared_bytes && shared_bytes(hd) > c->shared_bytes) return false;
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
        ir_val row = kn_cache_row(k, a->pg, a->tab, a->u0, IR_NONE, kx_min_c(k, p, a->n_ctx - 1));
        ir_val src = kx_add(k, kx_add(k, kx_mul_c(k, row, a->kv_dim), a->kv_off), c8);
        ir_val limit = kx_select(k, kx_lt(k, p, a->n_keys), kx_add_c(k, src, COPY), a->u0);
        ir_async_copy(k.ir, dst, kx_add(k, dst0, kx_idx(k, key, a->pitch, c8)), src_buf, src, COPY, limit);
    }
}

/* ---- one lane's rows ---------------------------------------------------------------------------- */

typedef struct lanes {
    ir_val row[2]; /* the lane's rows within the workgroup's 64: g and g + 8 of its subgroup's */
    ir_val pos[2]; /* their positions */
    ir_val key;    /* the lane's first key within 8: 2 (lane % 4) */
} lanes;

/* exp(s - m), 0 where s is -inf (exp(-inf) is left to no device) */
static ir_val exp_live(const at *a, ir_val s, ir_val m) {
    kx k = a->k;
    ir_val live = kx_gt(k, s, a->ninf);
    return kx_select(k, live, kn_exp_nonpositive(k, kx_select(k, live, kx_sub(k, s, m), a->f0)), a->f0);
}

/* the maximum over the 4 lanes of a row (lanes 4g .. 4g + 3) */
static ir_val row_max(kx k, ir_val v) {
    v = kx_max(k, v, kx_sg_xor(k, v, 1));
    return kx_max(k, v, kx_sg_xor(k, v, 2));
}

/* x * (a0, a0, a1, a1): the lane's two rows of an accumulator scaled */
static ir_val scale_rows(const at *a, ir_val f, const ir_val al[2]) {
    kx k = a->k;
    ir_val e = ir_frag_elems(k.ir, f), v[4];
    for (uint32_t i = 0; i < 4; i++) v[i] = kx_mul(k, kx_lane(k, e, i), al[i >> 1]);
    return ir_frag_from_elems(k.ir, a->tc, kx_vec(k, v, 4), IR_NONE);
}

/* ---- a tile of 64 keys ----------------------------------------------------------------------------- */

/* The subgroup's 16 rows over the K/V tile in slot (keys kb0 ..): m, l (the lane's part)
 * and the O accumulators updated. */
static void tile(const at *a, const lanes *ln, const ir_val *qf, ir_val slot, ir_val kb0, ir_val m[2], ir_val l[2],
                 ir_val *o) {
    kx k = a->k;
    ir_val st = kx_u32(k, a->pitch), kb = kx_mul_c(k, slot, AT_KEYS * a->pitch);
    ir_val zero = ir_frag_fill(k.ir, a->tc, a->f0);
    ir_val s[AT_KEYS / 8][4];
    ir_val mt[2] = {a->ninf, a->ninf};
    for (uint32_t jj = 0; jj < AT_KEYS / 8; jj++) {
        ir_val acc = zero;
        for (uint32_t i = 0; i < a->hd / 16; i++) {
            ir_val b = ir_frag_load(k.ir, a->tb, true, a->ks, kx_add_c(k, kb, jj * 8 * a->pitch + i * 16), st, false);
            acc = ir_frag_mma(k.ir, qf[i], b, acc);
        }
        ir_val e = ir_frag_elems(k.ir, acc);
        for (uint32_t i = 0; i < 4; i++) {
            ir_val key = kx_add(k, kb0, kx_add_c(k, ln->key, jj * 8 + (i & 1)));
            ir_val x = kx_mul_f(k, kx_lane(k, e, i), a->scale);
            s[jj][i] = kx_select(k, kx_le(k, key, ln->pos[i >> 1]), x, a->ninf);
            mt[i >> 1] = kx_max(k, mt[i >> 1], s[jj][i]);
        }
    }
    ir_val mn[2], al[2], sum[2] = {a->f0, a->f0};
    for (uint32_t r = 0; r < 2; r++) {
        mn[r] = kx_max(k, m[r], row_max(k, mt[r])); /* finite: key 0 is in every row's first tile */
        al[r] = exp_live(a, m[r], mn[r]);           /* 0 while m is -inf */
    }
    ir_type t4 = kx_t(k, a->dt, 4), f4 = kx_t(k, IR_F32, 4), u4 = kx_t(k, IR_U32, 4);
    ir_val m16 = kx_u32(k, 0xffff0000u), mask = kx_vec(k, (ir_val[]){m16, m16, m16, m16}, 4);
    uint32_t n_o = a->hd / 8;
    for (uint32_t d = 0; d < n_o; d++) o[d] = scale_rows(a, o[d], al);
    /* 16 keys at a time: their e, its parts as A fragments, their products (so only one
     * group's parts are live, and the products overlap the next group's arithmetic) */
    ir_val vb = kx_mul_c(k, slot, AT_KEYS * a->pitch);
    for (uint32_t kk = 0; kk < AT_KEYS / 16; kk++) {
        ir_val parts[2][3];
        for (uint32_t h = 0; h < 2; h++) {
            uint32_t jj = 2 * kk + h;
            ir_val e[4];
            for (uint32_t i = 0; i < 4; i++) {
                e[i] = exp_live(a, s[jj][i], mn[i >> 1]);
                sum[i >> 1] = kx_add(k, sum[i >> 1], e[i]);
            }
            ir_val left = kx_vec(k, e, 4); /* what the parts so far leave (exact in f32) */
            for (uint32_t p = 0; p < a->parts; p++) {
                if (a->dt == IR_BF16) { /* truncated: a bf16 value with one AND, so the parts cost little */
                    ir_val part = kx_bitcast(k, kx_and(k, kx_bitcast(k, left, u4), mask), f4);
                    parts[h][p] = ir_convert_exact(k.ir, part, t4);
                    if (p + 1 < a->parts) left = kx_sub(k, left, part);
                } else {
                    parts[h][p] = kx_convert(k, left, t4);
                    if (p + 1 < a->parts) left = kx_sub(k, left, kx_convert(k, parts[h][p], f4));
                }
            }
        }
        ir_val ef[3];
        for (uint32_t p = 0; p < a->parts; p++) ef[p] = ir_frag_from_elems(k.ir, a->ta, parts[0][p], parts[1][p]);
        for (uint32_t d = 0; d < n_o; d++) {
            ir_val b = ir_frag_load(k.ir, a->tb, true, a->vs, kx_add_c(k, vb, kk * 16 * a->pitch + d * 8), st, true);
            for (uint32_t p = 0; p < a->parts; p++) o[d] = ir_frag_mma(k.ir, ef[p], b, o[d]);
        }
    }
    for (uint32_t r = 0; r < 2; r++) l[r] = kx_fma(k, l[r], al[r], sum[r]), m[r] = mn[r];
}

/* ---- the block --------------------------------------------------------------------------------- */

/* out = O / l for the lane's rows of valid tokens, two outputs a store */
static void out_rows(const at *a, const lanes *ln, const ir_val *o, const ir_val l[2]) {
    kx k = a->k;
    ir_type ot = kx_t(k, a->dt, 2);
    ir_val e[MAX_HD / 8];
    for (uint32_t d = 0; d < a->hd / 8; d++) e[d] = ir_frag_elems(k.ir, o[d]);
    for (uint32_t r = 0; r < 2; r++) {
        ir_val t = kx_add(k, a->t0, kx_div_c(k, ln->row[r], a->hpt));
        ir_val head = kx_add(k, a->head0, kx_rem_c(k, ln->row[r], a->hpt));
        ir_if *f = kx_if(k, kx_lt(k, t, a->n_valid));
        ir_val to = kx_add(k, kx_add(k, kx_mul_c(k, t, a->n_head * a->hd), kx_mul_c(k, head, a->hd)), ln->key);
        for (uint32_t d = 0; d < a->hd / 8; d++) {
            ir_val q[2] = {kn_fdiv(k, kx_lane(k, e[d], 2 * r), l[r]), kn_fdiv(k, kx_lane(k, e[d], 2 * r + 1), l[r])};
            kx_store(k, a->ob, kx_add_c(k, to, d * 8), kx_convert(k, kx_vec(k, q, 2), ot));
        }
        kx_end_if(k, f);
    }
}

static void block(at *a) {
    kx k = a->k;
    lanes ln;
    ir_val g = kx_shr_c(k, a->lane, 2);
    ln.key = kx_mul_c(k, kx_and_c(k, a->lane, 3), 2);
    for (uint32_t r = 0; r < 2; r++) {
        ln.row[r] = kx_add(k, kx_mul_c(k, a->sid, 16), kx_add_c(k, g, 8 * r));
        ln.pos[r] = kx_add(k, a->pos0, kx_add(k, a->t0, kx_div_c(k, ln.row[r], a->hpt)));
    }
    ir_val one = kx_u32(k, 1);

    stage_q(a);
    /* tile j in slot (j & 1) ^ 1: tile 0's slot is not the one q overlays */
    stage_kv(a, a->kc, a->ks, one, a->u0);
    stage_kv(a, a->vc, a->vs, one, a->u0);
    ir_async_commit(k.ir);
    ir_async_wait(k.ir, 0);
    kx_barrier(k);
    ir_val qf[MAX_HD / 16];
    ir_val qb = kx_mul_c(k, a->sid, 16 * a->pitch), st = kx_u32(k, a->pitch);
    for (uint32_t i = 0; i < a->hd / 16; i++)
        qf[i] = ir_frag_load(k.ir, a->ta, true, a->qs, kx_add_c(k, qb, i * 16), st, true);
    kx_barrier(k); /* q is in registers: tile 1 may take its slot */

    /* carried: m and l of the lane's two rows, then the O accumulators */
    uint32_t n_o = a->hd / 8, n_c = 4 + n_o;
    ir_val init[4 + MAX_HD / 8], zero = ir_frag_fill(k.ir, a->tc, a->f0);
    init[0] = init[1] = a->ninf, init[2] = init[3] = a->f0;
    for (uint32_t d = 0; d < n_o; d++) init[4 + d] = zero;
    ir_for *lp = ir_for_begin(k.ir, a->u0, a->n_tiles, one, n_c, init);
    ir_val j = ir_for_iv(lp), m[2], l[2], o[MAX_HD / 8];
    for (uint32_t r = 0; r < 2; r++) m[r] = ir_for_arg(lp, r), l[r] = ir_for_arg(lp, 2 + r);
    for (uint32_t d = 0; d < n_o; d++) o[d] = ir_for_arg(lp, 4 + d);
    ir_val next = kx_add_c(k, j, 1);
    ir_if *more = kx_if(k, kx_lt(k, next, a->n_tiles));
    ir_val nslot = kx_xor(k, kx_and_c(k, next, 1), one);
    stage_kv(a, a->kc, a->ks, nslot, kx_mul_c(k, next, AT_KEYS));
    stage_kv(a, a->vc, a->vs, nslot, kx_mul_c(k, next, AT_KEYS));
    kx_end_if(k, more);
    ir_async_commit(k.ir);
    tile(a, &ln, qf, kx_xor(k, kx_and_c(k, j, 1), one), kx_mul_c(k, j, AT_KEYS), m, l, o);
    ir_async_wait(k.ir, 0);
    kx_barrier(k); /* the next tile has landed; this one's slot is free */
    ir_val y[4 + MAX_HD / 8] = {m[0], m[1], l[0], l[1]};
    for (uint32_t d = 0; d < n_o; d++) y[4 + d] = o[d];
    ir_for_end(k.ir, lp, y);
    for (uint32_t r = 0; r < 2; r++) {
        ir_val lr = ir_for_result(lp, 2 + r);
        lr = kx_add(k, lr, kx_sg_xor(k, lr, 1));
        l[r] = kx_add(k, lr, kx_sg_xor(k, lr, 2));
    }
    for (uint32_t d = 0; d < n_o; d++) o[d] = ir_for_result(lp, 4 + d);
    out_rows(a, &ln, o, l);
}

static ir_kernel *build(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t hd, uint32_t q_stride,
                        uint32_t n_ctx, const kn_pages *pg, uint32_t n_max, ir_scalar dt, uint32_t groups[2],
                        kiln_err *err) {
    uint32_t group = n_head / n_head_kv, hpt = heads_per_tile(n_head, n_head_kv);
    at a = {.dt = dt,
            .hd = hd,
            .q_stride = q_stride,
            .kv_dim = n_head_kv * hd,
            .n_head = n_head,
            .n_ctx = n_ctx,
            .n_max = n_max,
            .hpt = hpt,
            .tpt = AT_ROWS / hpt,
            .pg = pg};
    a.pitch = hd + AT_PAD;
    a.scale = 1.0f / sqrtf((float)hd); /* the oracle's, computed the same way */
    kx k = {kn_create("kn_attn_prefill", err), c};
    if (!k.ir) return NULL;
    if (n_max <= 64) kn_launch_early(k); /* a short block's: the output product may start */
    a.k = k;
    kn_attn_bufs bufs;
    kn_attn_prefill_bufs(k, dt, n_max, q_stride, n_head, hd, a.kv_dim, n_ctx, pg, &bufs);
    a.qb = bufs.q, a.kc = bufs.kc, a.vc = bufs.vc, a.ob = bufs.out, a.tab = bufs.pages;
    ir_buf ib = bufs.info;
    kx_workgroup(k, 128);
    a.ks = kx_shared(k, "ks", dt, 2 * AT_KEYS * a.pitch);
    a.vs = kx_shared(k, "vs", dt, 2 * AT_KEYS * a.pitch);
    a.qs = ir_shared_overlay(k.ir, "qs", dt, AT_ROWS * a.pitch, a.vs); /* V's slot 0, free until tile 1 */
    a.parts = parts_of(dt);
    a.ta = ir_t_frag(k.ir, IR_FRAG_A, dt, 16, 8, 16);
    a.tb = ir_t_frag(k.ir, IR_FRAG_B, dt, 16, 8, 16);
    a.tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, 16, 8, 16);
    a.lid = kx_local(k), a.sid = kx_sg_id(k), a.lane = kx_sg_lane(k);
    a.u0 = kx_u32(k, 0), a.f0 = kx_f32(k, 0.0f), a.ninf = kx_f32(k, -INFINITY);
    kn_attn_place pl;
    kn_attn_place_of(k, ib, hpt, group, hd, a.tpt, n_max, n_ctx, &pl);
    a.head0 = pl.head0, a.kv_off = pl.kv_off, a.t0 = pl.t0, a.pos0 = pl.pos0, a.n_valid = pl.n_valid;
    uint32_t nb = pl.blocks;
    ir_if *live = kx_if(k, kx_lt(k, a.t0, a.n_valid)); /* uniform: group id and loaded values */
    /* keys 0 .. the block's last valid position */
    a.n_keys = kx_add(k, a.pos0, kx_min(k, kx_add_c(k, a.t0, a.tpt), a.n_valid));
    a.n_tiles = kx_div_c(k, kx_add_c(k, a.n_keys, AT_KEYS - 1), AT_KEYS);
    block(&a);
    kx_end_if(k, live);
    if (groups) groups[0] = n_head / hpt, groups[1] = nb;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_attn_prefill_mma(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t hd, uint32_t q_stride,
                               uint32_t n_ctx, const kn_pages *pg, uint32_t n_max, ir_scalar dt, uint32_t groups[2],
                               kiln_err *err) {
    return build(c, n_head, n_head_kv, hd, q_stride, n_ctx, pg, n_max, dt, groups, err);
}
