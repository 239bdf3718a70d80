/* Prefill attention on cooperative matrices whose elements the target does not expose
 * (kn_attn_prefill's variant for Vulkan's KHR cooperative matrices: 16x16x16 fragments of
 * dtype into f32 at subgroup scope, where attn_prefill_mma.c needs CUDA's 16x8x16 with
 * every lane's elements known). Q·Kᵀ and P·V run on the matrix units; the softmax between
 * them runs on plain invocations, through workgroup memory, because a KHR fragment's
 * elements belong to lanes in an order the driver does not tell.
 *
 * A workgroup of 4 subgroups takes 64 query rows: hpt heads of one kv head (they share the
 * K/V tiles) times 64 / hpt consecutive tokens; each subgroup 16 rows, kept as Q fragments
 * in registers (staged once through the K/V array). Keys come in tiles of 32 positions
 * (K and V staged in workgroup memory, positions past the block's causal limit zero). A
 * tile:
 *
 *   S = Q Kᵀ (2 accumulators of 16x16 a subgroup), stored to the subgroup's f32 region;
 *   barrier; each row's 16 / lanes_per_row lanes read its 32 scores, scale and mask them
 *   (keys past the row's position count nothing), take the tile's maximum mt; where mt
 *   passes the row's reference r (the running maximum plus a headroom of 8 ln 2, so that a
 *   row whose maximum grows by less than that keeps its reference and its sums), r becomes
 *   mt + 8 ln 2 and the row's l and O are to be scaled by alpha = exp(r_old - r_new); e =
 *   256 exp(s - r) (at most 256, and the row's maximum at least 1: f16 parts keep their
 *   precision), split into 16-bit parts as attn_prefill_mma.c does (three truncated bf16
 *   parts hold e's 24 bits exactly, two rounded f16 parts carry it to 2^-22), written to
 *   the subgroup's part arrays; barrier; where some row's O needs its alpha (a workgroup
 *   flag: rare once the first tiles set the references), O goes through the f32 region
 *   32 columns a round and comes back scaled; then O += sum over parts of E_p V.
 *
 * So P·V is f32 arithmetic up to summation order, as the CUDA variant's: the contract
 * gains no rounding point. The references differ from the running maximum only by a
 * factor common to a row's numerator and denominator. At the end the lanes of a row add
 * their l, and O / l (kn_fdiv) leaves through the f32 region, rounded to dtype once.
 *
 * Workgroup memory at head_dim 128 and bf16: K and V 17 KiB, scores 10 KiB, parts 15 KiB
 * (43 KiB: the NVIDIA driver's Vulkan offers 48). Head dims above 128 keep the SIMT
 * kernel (the registers of 16 Q and 16 O fragments). */
#include "kernels/kn_common.h"

#include <math.h>
#include <string.h>

#define AC_ROWS 64 /* query rows per workgroup: 4 subgroups of 16 */
#define AC_SG 4
#define AC_KEYS 32      /* keys per K/V tile */
#define AC_PAD 8        /* 16-bit elements after each staged row */
#define AC_S_PITCH 40   /* f32 words per row of a subgroup's scores (32 keys, or 32 O columns) */
#define AC_P_PITCH 40   /* 16-bit elements per row of a part of e */
#define AC_SHIFT 8      /* e = 2^AC_SHIFT exp(s - r): the headroom, AC_SHIFT ln 2 */
#define AC_MAX_HD 128

typedef struct ac {
    kx k;
    ir_scalar dt;
    uint32_t hd, q_stride, kv_dim, n_head, n_ctx, n_max, hpt, tpt;
    uint32_t sg, lpr, inv; /* subgroup size, lanes per row (sg / 16), invocations */
    uint32_t parts, pitch;
    float scale;
    ir_buf qb, kc, vc, ob;
    ir_shm kv, sc, pp, flag;
    ir_type ta, tb, tc;
    ir_val lid, sid, lane, u0, f0, ninf;
    ir_val row, seg; /* the lane's row within its subgroup's 16, its segment of the row */
    ir_val pos;      /* the lane's row's position */
    ir_val pos0, n_valid, t0, head0, kv_off, n_keys, n_tiles;
    const kn_pages *pg;
    ir_buf tab;
} ac;

static uint32_t parts_of(ir_scalar dt) { return dt == IR_BF16 ? 3 : 2; }

static uint32_t shared_bytes(uint32_t hd, uint32_t parts) {
    return 2 * AC_KEYS * (hd + AC_PAD) * 2 + AC_SG * 16 * AC_S_PITCH * 4 + parts * AC_SG * 16 * AC_P_PITCH * 2 + 4;
}

static uint32_t heads_per_tile(uint32_t n_head, uint32_t n_head_kv) {
    uint32_t group = n_head / n_head_kv, hpt = 1;
    while (hpt * 2 <= 16 && group % (hpt * 2) == 0) hpt *= 2;
    return hpt;
}

bool kn_attn_prefill_coop_ok(const rt_caps *c, ir_scalar dt, uint32_t n_head, uint32_t n_head_kv, uint32_t hd,
                             uint32_t n_max) {
    uint32_t sg = c->subgroup_size;
    if (sg != 16 && sg != 32 && sg != 64) return false;
    if (sg > 16 && !c->subgroup_shuffle) return false;
    if (hd % 16 || hd > AC_MAX_HD) return false;
    if (c->max_workgroup && c->max_workgroup < AC_SG * sg) return false;
    if (c->shared_bytes && shared_bytes(hd, parts_of(dt)) > c->shared_bytes) return false;
    /* a block of few workgroups (a short prompt's) keeps the SIMT kernel's many */
    uint32_t hpt = heads_per_tile(n_head, n_head_kv),
             grid = n_head / hpt * ((n_max + AC_ROWS / hpt - 1) / (AC_ROWS / hpt));
    if (c->compute_units && grid * 2 < c->compute_units) return false;
    for (uint32_t i = 0; i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->mma[i];
        if (s->m == 16 && s->n == 16 && s->k == 16 && s->ab_type == (uint32_t)dt && s->acc_type == IR_F32)
            return true;
    }
    return false;
}

/* ---- staging ------------------------------------------------------------------------------ */

/* The block's 64 q rows into the K/V array: row R is token t0 + R / hpt (clamped into the
 * buffer: rows past n only reach rows that are not stored), head head0 + R % hpt. */
static void stage_q(const ac *a) {
    kx k = a->k;
    uint32_t per_row = a->hd / 8, n = AC_ROWS * per_row;
    for (uint32_t j = 0; j * a->inv < n; j++) {
        ir_val i = kx_add_c(k, a->lid, j * a->inv);
        ir_if *in = n % a->inv ? kx_if(k, kx_lt_c(k, i, n)) : NULL;
        ir_val row = kx_div_c(k, i, per_row), c8 = kx_mul_c(k, kx_rem_c(k, i, per_row), 8);
        ir_val t = kx_min_c(k, kx_add(k, a->t0, kx_div_c(k, row, a->hpt)), a->n_max - 1);
        ir_val head = kx_add(k, a->head0, kx_rem_c(k, row, a->hpt));
        ir_val src = kx_add(k, kx_add(k, kx_mul_c(k, t, a->q_stride), kx_mul_c(k, head, a->hd)), c8);
        ir_async_copy(k.ir, a->kv, kx_idx(k, row, a->pitch, c8), a->qb, src, 8, kx_add_c(k, src, 8));
        if (in) kx_end_if(k, in);
    }
}

/* Keys kb0 .. kb0 + 31 of the kv head: K at rows 0.., V at rows AC_KEYS.. of the array;
 * positions at or past n_keys are zero (their cache rows may hold anything). */
static void stage_kv(const ac *a, ir_val kb0) {
    kx k = a->k;
    uint32_t per_row = a->hd / 8, n = AC_KEYS * per_row;
    for (uint32_t half = 0; half < 2; half++)
        for (uint32_t j = 0; j * a->inv < n; j++) {
            ir_val i = kx_add_c(k, a->lid, j * a->inv);
            ir_if *in = n % a->inv ? kx_if(k, kx_lt_c(k, i, n)) : NULL;
            ir_val key = kx_div_c(k, i, per_row), c8 = kx_mul_c(k, kx_rem_c(k, i, per_row), 8);
            ir_val p = kx_add(k, kb0, key);
            ir_val row = kn_cache_row(k, a->pg, a->tab, a->u0, IR_NONE, kx_min_c(k, p, a->n_ctx - 1));
            ir_val src = kx_add(k, kx_add(k, kx_mul_c(k, row, a->kv_dim), a->kv_off), c8);
            ir_val limit = kx_select(k, kx_lt(k, p, a->n_keys), kx_add_c(k, src, 8), a->u0);
            ir_val dst = kx_idx(k, kx_add_c(k, key, half ? AC_KEYS : 0), a->pitch, c8);
            ir_async_copy(k.ir, a->kv, dst, half ? a->vc : a->kc, src, 8, limit);
            if (in) kx_end_if(k, in);
        }
    ir_async_commit(k.ir);
    ir_async_wait(k.ir, 0);
}

/* ---- the lanes' rows ------------------------------------------------------------------------ */

/* exp(s - r), 0 where s is -inf (s - r <= 0 where s is live) */
static ir_val exp_live(const ac *a, ir_val s, ir_val r) {
    kx k = a->k;
    ir_val live = kx_gt(k, s, a->ninf);
    return kx_select(k, live, kn_exp_nonpositive(k, kx_select(k, live, kx_sub(k, s, r), a->f0)), a->f0);
}

/* the maximum (add: the sum) over the lanes of a row (lpr consecutive lanes) */
static ir_val row_reduce(const ac *a, ir_val v, bool add) {
    kx k = a->k;
    for (uint32_t m = 1; m < a->lpr; m *= 2) {
        ir_val o = kx_sg_xor(k, v, m);
        v = add ? kx_add(k, v, o) : kx_max(k, v, o);
    }
    return v;
}

/* where the lane's share of its row lies in the subgroup's f32 region (cols: the row's
 * width shared by its lanes) */
static ir_val region_at(const ac *a, uint32_t cols) {
    kx k = a->k;
    ir_val base = kx_mul_c(k, kx_add(k, kx_mul_c(k, a->sid, 16), a->row), AC_S_PITCH);
    return kx_add(k, base, kx_mul_c(k, a->seg, cols / a->lpr));
}

/* O fragments d0, d0 + 1 (those below hd / 16) into the subgroup's region, for a round of
 * 32 columns (16 in a last odd one) that its lanes then share row by row. */
static void o_store(const ac *a, const ir_val *o, uint32_t d0) {
    kx k = a->k;
    ir_val st = kx_u32(k, AC_S_PITCH), base = kx_mul_c(k, a->sid, 16 * AC_S_PITCH);
    for (uint32_t d = d0; d < d0 + 2 && d < a->hd / 16; d++)
        ir_frag_store(k.ir, o[d], true, a->sc, kx_add_c(k, base, (d - d0) * 16), st, true);
    kx_barrier(k);
}

static void o_reload(const ac *a, ir_val *o, uint32_t d0) {
    kx k = a->k;
    ir_val st = kx_u32(k, AC_S_PITCH), base = kx_mul_c(k, a->sid, 16 * AC_S_PITCH);
    for (uint32_t d = d0; d < d0 + 2 && d < a->hd / 16; d++)
        o[d] = ir_frag_load(k.ir, a->tc, true, a->sc, kx_add_c(k, base, (d - d0) * 16), st, true);
    kx_barrier(k);
}

/* the lane's columns of a 32-column round (cols of them valid: 16 in a last odd round) */
static uint32_t round_cols(const ac *a, uint32_t d0) { return (a->hd / 16 - d0 >= 2 ? 32 : 16) / a->lpr; }

static void o_scale(const ac *a, ir_val *o, ir_val alpha) {
    kx k = a->k;
    for (uint32_t d0 = 0; d0 < a->hd / 16; d0 += 2) {
        o_store(a, o, d0);
        uint32_t n = round_cols(a, d0);
        ir_val at = region_at(a, n * a->lpr);
        for (uint32_t c = 0; c < n; c += 4) {
            ir_val v = kx_shm_load(k, a->sc, kx_add_c(k, at, c), 4), s[4];
            for (uint32_t i = 0; i < 4; i++) s[i] = kx_mul(k, kx_lane(k, v, i), alpha);
            kx_shm_store(k, a->sc, kx_add_c(k, at, c), kx_vec(k, s, 4));
        }
        kx_barrier(k);
        o_reload(a, o, d0);
    }
}

/* where the lane's row's output starts in out; *valid: its token is one of the block's */
static ir_val out_row(const ac *a, ir_val *valid) {
    kx k = a->k;
    ir_val rw = kx_add(k, kx_mul_c(k, a->sid, 16), a->row);
    ir_val t = kx_add(k, a->t0, kx_div_c(k, rw, a->hpt));
    ir_val head = kx_add(k, a->head0, kx_rem_c(k, rw, a->hpt));
    *valid = kx_lt(k, t, a->n_valid);
    return kx_add(k, kx_mul_c(k, t, a->n_head * a->hd), kx_mul_c(k, head, a->hd));
}

/* out = O / l for the rows of valid tokens */
static void o_out(const ac *a, const ir_val *o, ir_val l) {
    kx k = a->k;
    ir_val valid, to = out_row(a, &valid);
    ir_type ot = kx_t(k, a->dt, 4);
    for (uint32_t d0 = 0; d0 < a->hd / 16; d0 += 2) {
        o_store(a, o, d0);
        uint32_t n = round_cols(a, d0);
        ir_val at = region_at(a, n * a->lpr);
        ir_val col = kx_add_c(k, kx_mul_c(k, a->seg, n), d0 * 16);
        ir_if *f = kx_if(k, valid);
        for (uint32_t c = 0; c < n; c += 4) {
            ir_val v = kx_shm_load(k, a->sc, kx_add_c(k, at, c), 4), q[4];
            for (uint32_t i = 0; i < 4; i++) q[i] = kn_fdiv(k, kx_lane(k, v, i), l);
            kx_store(k, a->ob, kx_add(k, to, kx_add_c(k, col, c)), kx_convert(k, kx_vec(k, q, 4), ot));
        }
        kx_end_if(k, f);
        kx_barrier(k);
    }
}

/* ---- a tile of 32 keys ----------------------------------------------------------------------- */

/* S = Q Kᵀ into the subgroup's region */
static void scores(const ac *a, const ir_val *qf) {
    kx k = a->k;
    ir_val st = kx_u32(k, a->pitch), sst = kx_u32(k, AC_S_PITCH), base = kx_mul_c(k, a->sid, 16 * AC_S_PITCH);
    ir_val zero = ir_frag_fill(k.ir, a->tc, a->f0);
    for (uint32_t jj = 0; jj < AC_KEYS / 16; jj++) {
        ir_val acc = zero;
        for (uint32_t i = 0; i < a->hd / 16; i++) {
            ir_val b = ir_frag_load(k.ir, a->tb, true, a->kv, kx_u32(k, jj * 16 * a->pitch + i * 16), st,
                                    false);
            acc = ir_frag_mma(k.ir, qf[i], b, acc);
        }
        ir_frag_store(k.ir, acc, true, a->sc, kx_add_c(k, base, jj * 16), sst, true);
    }
}

/* The lane's scores: the tile's e into the part arrays, r and l updated; returns the row's
 * alpha (1 where r stays). */
static ir_val softmax(const ac *a, ir_val kb0, ir_val *r, ir_val *l) {
    kx k = a->k;
    uint32_t kpl = AC_KEYS / a->lpr;
    ir_val at = region_at(a, AC_KEYS), key0 = kx_add(k, kb0, kx_mul_c(k, a->seg, kpl));
    ir_val s[AC_KEYS] = {0}, mt = a->ninf;
    for (uint32_t c = 0; c < kpl; c += 4) {
        ir_val v = kx_shm_load(k, a->sc, kx_add_c(k, at, c), 4);
        for (uint32_t i = 0; i < 4; i++) {
            ir_val x = kx_mul_f(k, kx_lane(k, v, i), a->scale);
            s[c + i] = kx_select(k, kx_le(k, kx_add_c(k, key0, c + i), a->pos), x, a->ninf);
            mt = kx_max(k, mt, s[c + i]);
        }
    }
    mt = row_reduce(a, mt, false);
    /* where the tile's maximum passes the reference: mt + the headroom (-inf > -inf: not) */
    ir_val grow = kx_gt(k, mt, *r);
    ir_val rn = kx_select(k, grow, kx_add_f(k, mt, (float)(AC_SHIFT * 0.69314718055994530942)), *r);
    ir_val alpha = exp_live(a, *r, rn); /* 0 while r is -inf (O and l are 0 then) */
    ir_if *f = kx_if(k, kx_and(k, grow, kx_gt(k, *r, a->ninf)));
    ir_atomic(k.ir, IR_ATOMIC_MAX, true, a->flag, a->u0, kx_u32(k, 1));
    kx_end_if(k, f);
    ir_type t4 = kx_t(k, a->dt, 4), f4 = kx_t(k, IR_F32, 4), u4 = kx_t(k, IR_U32, 4);
    ir_val m16 = kx_u32(k, 0xffff0000u), mask = kx_vec(k, (ir_val[]){m16, m16, m16, m16}, 4);
    ir_val sum = a->f0, two = kx_f32(k, (float)(1u << AC_SHIFT));
    ir_val pb = kx_add(k, kx_mul_c(k, kx_add(k, kx_mul_c(k, a->sid, 16), a->row), AC_P_PITCH), kx_mul_c(k, a->seg, kpl));
    for (uint32_t c = 0; c < kpl; c += 4) {
        ir_val e[4];
        for (uint32_t i = 0; i < 4; i++) {
            e[i] = kx_mul(k, exp_live(a, s[c + i], rn), two);
            sum = kx_add(k, sum, e[i]);
        }
        ir_val left = kx_vec(k, e, 4); /* what the parts so far leave (exact in f32) */
        for (uint32_t p = 0; p < a->parts; p++) {
            ir_val part;
            if (a->dt == IR_BF16) { /* truncated: one AND */
                ir_val pf = kx_bitcast(k, kx_and(k, kx_bitcast(k, left, u4), mask), f4);
                part = ir_convert_exact(k.ir, pf, t4);
                if (p + 1 < a->parts) left = kx_sub(k, left, pf);
            } else {
                part = kx_convert(k, left, t4);
                if (p + 1 < a->parts) left = kx_sub(k, left, kx_convert(k, part, f4));
            }
            kx_shm_store(k, a->pp, kx_add_c(k, pb, p * AC_SG * 16 * AC_P_PITCH + c), part);
        }
    }
    *l = kx_fma(k, *l, alpha, sum);
    *r = rn;
    return alpha;
}

/* O += sum over parts of E_p V */
static void values(const ac *a, ir_val *o) {
    kx k = a->k;
    ir_val st = kx_u32(k, a->pitch), pst = kx_u32(k, AC_P_PITCH);
    ir_val ef[3][AC_KEYS / 16];
    for (uint32_t p = 0; p < a->parts; p++)
        for (uint32_t c = 0; c < AC_KEYS / 16; c++) {
            ir_val at = kx_add_c(k, kx_mul_c(k, a->sid, 16 * AC_P_PITCH), p * AC_SG * 16 * AC_P_PITCH + c * 16);
            ef[p][c] = ir_frag_load(k.ir, a->ta, true, a->pp, at, pst, true);
        }
    for (uint32_t d = 0; d < a->hd / 16; d++)
        for (uint32_t c = 0; c < AC_KEYS / 16; c++) {
            ir_val b =
                ir_frag_load(k.ir, a->tb, true, a->kv, kx_u32(k, (AC_KEYS + c * 16) * a->pitch + d * 16), st, true);
            for (uint32_t p = 0; p < a->parts; p++) o[d] = ir_frag_mma(k.ir, ef[p][c], b, o[d]);
        }
}

/* ---- the block --------------------------------------------------------------------------------- */

static void block(ac *a) {
    kx k = a->k;
    a->row = kx_div_c(k, a->lane, a->lpr), a->seg = kx_rem_c(k, a->lane, a->lpr);
    ir_val rw = kx_add(k, kx_mul_c(k, a->sid, 16), a->row);
    a->pos = kx_add(k, a->pos0, kx_add(k, a->t0, kx_div_c(k, rw, a->hpt)));
    ir_val one = kx_u32(k, 1);

    stage_q(a);
    ir_async_commit(k.ir);
    ir_async_wait(k.ir, 0);
    kx_barrier(k);
    ir_val qf[AC_MAX_HD / 16];
    ir_val st = kx_u32(k, a->pitch);
    for (uint32_t i = 0; i < a->hd / 16; i++)
        qf[i] = ir_frag_load(k.ir, a->ta, true, a->kv, kx_add_c(k, kx_mul_c(k, a->sid, 16 * a->pitch), i * 16), st,
                             true);

    /* carried: the lane's row's reference r and its part of l, then the O accumulators */
    uint32_t n_o = a->hd / 16, n_c = 2 + n_o;
    ir_val init[2 + AC_MAX_HD / 16], zero = ir_frag_fill(k.ir, a->tc, a->f0);
    init[0] = a->ninf, init[1] = a->f0;
    for (uint32_t d = 0; d < n_o; d++) init[2 + d] = zero;
    ir_for *lp = ir_for_begin(k.ir, a->u0, a->n_tiles, one, n_c, init);
    ir_val j = ir_for_iv(lp), r = ir_for_arg(lp, 0), l = ir_for_arg(lp, 1), o[AC_MAX_HD / 16];
    for (uint32_t d = 0; d < n_o; d++) o[d] = ir_for_arg(lp, 2 + d);
    kx_barrier(k); /* the last tile's (or q's) readers are done */
    ir_val kb0 = kx_mul_c(k, j, AC_KEYS);
    stage_kv(a, kb0);
    ir_if *first = kx_if(k, kx_eq_c(k, a->lid, 0));
    kx_shm_store(k, a->flag, a->u0, a->u0);
    kx_end_if(k, first);
    kx_barrier(k);
    scores(a, qf);
    kx_barrier(k);
    ir_val alpha = softmax(a, kb0, &r, &l);
    kx_barrier(k);
    /* uniform: read after a barrier */
    ir_val need = kx_ne(k, kx_shm_load(k, a->flag, a->u0, 1), a->u0);
    ir_if *rescale = ir_if_begin(k.ir, need, n_o);
    ir_val os[AC_MAX_HD / 16];
    memcpy(os, o, sizeof os);
    o_scale(a, os, alpha);
    ir_if_else(k.ir, rescale, os);
    ir_if_end(k.ir, rescale, o);
    for (uint32_t d = 0; d < n_o; d++) o[d] = ir_if_result(rescale, d);
    values(a, o);
    ir_val y[2 + AC_MAX_HD / 16] = {r, l};
    for (uint32_t d = 0; d < n_o; d++) y[2 + d] = o[d];
    ir_for_end(k.ir, lp, y);
    l = row_reduce(a, ir_for_result(lp, 1), true);
    for (uint32_t d = 0; d < n_o; d++) o[d] = ir_for_result(lp, 2 + d);
    kx_barrier(k); /* the region's last readers are done */
    o_out(a, o, l);
}

ir_kernel *kn_attn_prefill_coop(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t hd,
                                uint32_t q_stride, uint32_t n_ctx, const kn_pages *pg, uint32_t n_max, ir_scalar dt,
                                uint32_t groups[2], kiln_err *err) {
    uint32_t group = n_head / n_head_kv, hpt = heads_per_tile(n_head, n_head_kv);
    ac a = {.dt = dt,
            .hd = hd,
            .q_stride = q_stride,
            .kv_dim = n_head_kv * hd,
            .n_head = n_head,
            .n_ctx = n_ctx,
            .n_max = n_max,
            .hpt = hpt,
            .tpt = AC_ROWS / hpt,
            .sg = c->subgroup_size,
            .lpr = c->subgroup_size / 16,
            .inv = AC_SG * c->subgroup_size,
            .parts = parts_of(dt),
            .pitch = hd + AC_PAD,
            .pg = pg};
    a.scale = 1.0f / sqrtf((float)hd); /* the oracle's, computed the same way */
    kx k = {kn_create("kn_attn_prefill", err), c};
    if (!k.ir) return NULL;
    a.k = k;
    kn_attn_bufs bufs;
    kn_attn_prefill_bufs(k, dt, n_max, q_stride, n_head, hd, a.kv_dim, n_ctx, pg, &bufs);
    a.qb = bufs.q, a.kc = bufs.kc, a.vc = bufs.vc, a.ob = bufs.out, a.tab = bufs.pages;
    ir_buf ib = bufs.info;
    kx_workgroup(k, a.inv);
    /* K then V (or, first, the 64 q rows: the same 64 rows of pitch) */
    a.kv = kx_shared(k, "kv", dt, 2 * AC_KEYS * a.pitch);
    a.sc = kx_shared(k, "scores", IR_F32, AC_SG * 16 * AC_S_PITCH);
    a.pp = kx_shared(k, "parts", dt, a.parts * AC_SG * 16 * AC_P_PITCH);
    a.flag = kx_shared(k, "rescale", IR_U32, 1);
    a.ta = ir_t_frag(k.ir, IR_FRAG_A, dt, 16, 16, 16);
    a.tb = ir_t_frag(k.ir, IR_FRAG_B, dt, 16, 16, 16);
    a.tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, 16, 16, 16);
    a.lid = kx_local(k), a.sid = kx_sg_id(k), a.lane = kx_sg_lane(k);
    a.u0 = kx_u32(k, 0), a.f0 = kx_f32(k, 0.0f), a.ninf = kx_f32(k, -INFINITY);
    kn_attn_place pl;
    kn_attn_place_of(k, ib, hpt, group, hd, a.tpt, n_max, n_ctx, &pl);
    a.head0 = pl.head0, a.kv_off = pl.kv_off, a.t0 = pl.t0, a.pos0 = pl.pos0, a.n_valid = pl.n_valid;
    uint32_t nb = pl.blocks;
    ir_if *live = kx_if(k, kx_lt(k, a.t0, a.n_valid)); /* uniform: group id and loaded values */
    /* keys 0 .. the block's last valid position */
    a.n_keys = kx_add(k, a.pos0, kx_min(k, kx_add_c(k, a.t0, a.tpt), a.n_valid));
    a.n_tiles = kx_div_c(k, kx_add_c(k, a.n_keys, AC_KEYS - 1), AC_KEYS);
    block(&a);
    kx_end_if(k, live);
    if (groups) groups[0] = n_head / hpt, groups[1] = nb;
    return kn_finish(k.ir, err);
}
