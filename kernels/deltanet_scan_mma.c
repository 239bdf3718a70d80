/* kn_deltanet_scan's variant on 16x8x16 matrix fragments (CUDA sm_80+): the chunk's four
 * products on the tensor cores, f32 operands split into bf16 parts.
 *
 * The SIMT scan (kernels/deltanet_chunk.c) spends its time on f32 FMAs staged through
 * workgroup memory behind barriers (the H200, qwen3.5-4b, 512 tokens: 176 us a layer).
 * Here a subgroup takes 16 value dims c of one head (a workgroup 1 or 2 subgroups of one
 * head), its slice of the state held transposed in registers as accumulators: Sᵀ[c][i],
 * 16 x dk, dk / 8 of them. A chunk's operands (what prep wrote: W, U's columns of the
 * workgroup, exp(g) Q, exp(g_last - g) K, P) are staged into workgroup memory by
 * asynchronous copies, the next chunk's in flight while this one's products run (two
 * slots; the fragments' reads of global memory straight from the scratch had left each
 * product waiting on a load: 460 us a layer on qwen3.5-4b at 512 tokens). Per chunk:
 *   Dᵀ = Uᵀ - Sᵀ Wᵀ and Oᵀ = Sᵀ Qᵀ   (A: Sᵀ from its accumulators; B: rows of W and of Q)
 *   Oᵀ += Dᵀ Pᵀ                      (A: Dᵀ from its accumulators; B: rows of P, causal
 *                                     tiles only: P is 0 above the diagonal)
 *   Sᵀ = exp(g_last) Sᵀ + Dᵀ K       (B: the columns of exp(g_last - g) k)
 * An accumulator of columns 0..7 and one of 8..15 are, element for element, the A
 * fragment of the 16 columns (ir_frag_from_elems), so Sᵀ and Dᵀ never leave registers.
 *
 * Each f32 operand x is split into bf16 parts, x1 = rn(x), x2 = rn(x - x1) [, x3 =
 * rn(x - x1 - x2)]: with parts P a product takes the P (P + 1) / 2 part products whose
 * parts' ranks sum below P (P = 2: a1 b1 + a1 b2 + a2 b1, three mma; the parts hold 16
 * bits of each operand and the dropped terms are below 2^-16 of |a||b|; P = 3: six, to
 * about f32's 2^-24). The sums are f32 in the accumulators. bf16, not f16, for its
 * exponent range: a state value's part is never subnormal. The default is 2: the chunked
 * form's results agree with the token recurrence to about 2^-16 of the terms' size, 256
 * times below the bf16 quantum of the block's outputs (KILN_DN_PARTS=3 takes three). */
#include "base/error.h"
#include "kernels/kn_common.h"

#include <stdlib.h>
#include <string.h>

#define MMA_MAX_STATE 128 /* the slice's accumulators: dk / 2 registers an invocation */
#define MMA_MIN_CHUNK 16  /* K of a product along the chunk's tokens */
#define MAX_PARTS 3
#define MMA_MAX_TILES 8 /* a chunk's 8-token tiles: chunks of up to 64 */

/* The staged arrays, each in two slots: W, Q, K, P and the workgroup's U columns */
enum { AR_W, AR_Q, AR_K, AR_P, AR_U, AR_COUNT };

typedef struct smma {
    kx k;
    kn_deltanet_shape s;
    kn_deltanet_scratch sz;
    uint32_t C, NP, dk, dv, parts, W; /* W: subgroups a workgroup */
    uint32_t pitch[AR_COUNT], slot[AR_COUNT];
    ir_type ta, tb, tc, f4, h4;
    ir_buf qk, uw, p, gl, S, o;
    ir_shm sh[AR_COUNT];
    ir_val j, c0, cw, ul, n, g, t4, f0, lid;
} smma;

static uint32_t parts_of(void) {
    const char *e = getenv("KILN_DN_PARTS");
    if (e && (strcmp(e, "1") == 0 || strcmp(e, "3") == 0)) return (uint32_t)(e[0] - '0');
    return 2;
}

static bool has_bf16_mma(const rt_caps *c) {
    for (uint32_t i = 0; i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *m = &c->mma[i];
        if (m->m == 16 && m->n == 8 && m->k == 16 && m->ab_type == IR_BF16 && m->acc_type == IR_F32) return true;
    }
    return false;
}

/* Row pitches of the staged arrays (f32): 8 past a multiple of 32 where a B fragment's 8
 * rows read 2 words a lane along the row (W, Q, P), 4 where they read 1 down a column (K),
 * so the subgroup's reads fall in distinct banks. */
static void layout(smma *q) {
    uint32_t C = q->C, dk = q->dk;
    uint32_t pitch[AR_COUNT] = {dk + 8, dk + 8, dk + 4, C + 8, 16 * q->W + 4};
    for (uint32_t a = 0; a < AR_COUNT; a++) q->pitch[a] = pitch[a], q->slot[a] = C * pitch[a];
}

static uint64_t staged_bytes(uint32_t C, uint32_t dk, uint32_t W) {
    smma q = {.C = C, .dk = dk, .W = W};
    layout(&q);
    uint64_t n = 0;
    for (uint32_t a = 0; a < AR_COUNT; a++) n += q.slot[a];
    return 2 * 4 * n;
}

/* Subgroups a workgroup: 2 (one staging for both) where the slices outnumber the SMs */
static uint32_t warps_of(const rt_caps *c, const kn_deltanet_shape *s) {
    uint32_t slices = s->v_heads * (s->state / 16);
    return slices % 2 == 0 && c->compute_units && slices > c->compute_units ? 2 : 1;
}

static bool mma_caps_ok(const rt_caps *c, const kn_deltanet_shape *s) {
    return c && s && c->backend == RT_CUDA && c->subgroup_size == 32 && has_bf16_mma(c) && s->state &&
           s->state % 16 == 0 && s->state <= MMA_MAX_STATE;
}

uint32_t kn_deltanet_mma_chunk(const rt_caps *c, const kn_deltanet_shape *s) {
    if (!mma_caps_ok(c, s)) return 0;
    uint32_t C = 64;
    while (C >= MMA_MIN_CHUNK && c->shared_bytes && staged_bytes(C, s->state, warps_of(c, s)) > c->shared_bytes) C /= 2;
    return C >= MMA_MIN_CHUNK ? C : 0;
}

bool kn_deltanet_scan_mma_ok(const rt_caps *c, const kn_deltanet_shape *s) {
    kn_deltanet_scratch sz;
    if (!mma_caps_ok(c, s)) return false;
    if (kn_deltanet_scratch_of(c, s, &sz, NULL) || sz.chunk < MMA_MIN_CHUNK) return false;
    return !c->shared_bytes || staged_bytes(sz.chunk, s->state, warps_of(c, s)) <= c->shared_bytes;
}

/* x (a vector of 4 f32) as its bf16 parts, each the rounding of what those before leave */
static void split(const smma *q, ir_val x, ir_val *part) {
    kx k = q->k;
    for (uint32_t p = 0; p < q->parts; p++) {
        part[p] = kx_convert(k, x, q->h4);
        if (p + 1 < q->parts) x = kx_sub(k, x, kx_convert(k, part[p], q->f4));
    }
}

/* The A fragments (parts) of the 16 columns whose accumulators are lo (0..7) and hi */
static void a_parts(const smma *q, ir_val lo, ir_val hi, ir_val *a) {
    ir_val pl[MAX_PARTS], ph[MAX_PARTS];
    split(q, ir_frag_elems(q->k.ir, lo), pl);
    split(q, ir_frag_elems(q->k.ir, hi), ph);
    for (uint32_t p = 0; p < q->parts; p++) a[p] = ir_frag_from_elems(q->k.ir, q->ta, pl[p], ph[p]);
}

/* The B fragments (parts) from the lane's 4 elements (k rows 2t, 2t + 1, 2t + 8, 2t + 9) */
static void b_parts(const smma *q, ir_val e4, ir_val *b) {
    ir_val pt[MAX_PARTS];
    split(q, e4, pt);
    for (uint32_t p = 0; p < q->parts; p++) b[p] = ir_frag_from_elems(q->k.ir, q->tb, pt[p], IR_NONE);
}

/* B elements from staged array a of slot base sb: row (n) row, k columns col + 2t + {0, 1, 8, 9} */
static ir_val b_row_elems(const smma *q, uint32_t a, ir_val sb, ir_val row, uint32_t col) {
    kx k = q->k;
    ir_val at = kx_add(k, kx_add(k, sb, kx_mul_c(k, row, q->pitch[a])), kx_add_c(k, kx_mul_c(k, q->t4, 2), col));
    ir_val lo = kx_shm_load(k, q->sh[a], at, 2), hi = kx_shm_load(k, q->sh[a], kx_add_c(k, at, 8), 2);
    ir_val e[4] = {kx_lane(k, lo, 0), kx_lane(k, lo, 1), kx_lane(k, hi, 0), kx_lane(k, hi, 1)};
    return kx_vec(k, e, 4);
}

/* acc + a b over the part products whose ranks sum below parts, the smallest first */
static ir_val mma_parts(const smma *q, const ir_val *a, const ir_val *b, ir_val acc) {
    for (int r = (int)q->parts - 1; r >= 0; r--)
        for (int pa = r; pa >= 0; pa--) acc = ir_frag_mma(q->k.ir, a[pa], b[r - pa], acc);
    return acc;
}

/* The lane's 4 accumulator elements: value dim c0 + g + 8 (e >> 1), column 2t + (e & 1) */
static ir_val acc_row(const smma *q, uint32_t e) { return kx_add(q->k, q->c0, kx_add_c(q->k, q->g, 8 * (e >> 1))); }
static ir_val acc_col(const smma *q, uint32_t e, uint32_t base) {
    return kx_add_c(q->k, kx_mul_c(q->k, q->t4, 2), base + (e & 1));
}

/* The chunk ch's operands into slot sl (copies of 4 f32; the scratch holds every row of
 * the chunks a block has, padding rows 0): W, Q and K rows of dk, P rows of C, the
 * workgroup's 16 W columns of U. */
static void stage(const smma *q, ir_val ch, ir_val sl) {
    kx k = q->k;
    uint32_t C = q->C, dk = q->dk, dv = q->dv, wg = 32 * q->W;
    ir_val base = kx_add(k, kx_mul_c(k, q->j, q->NP), kx_mul_c(k, ch, C));
    for (uint32_t a = 0; a < AR_COUNT; a++) {
        uint32_t width = a == AR_P ? C : a == AR_U ? 16 * q->W : dk, per = width / 4;
        uint32_t src_w = a == AR_P ? C : a == AR_W || a == AR_U ? dv + dk : 2 * dk;
        uint32_t from = a == AR_W ? dv : a == AR_K ? dk : 0;
        ir_buf src = a == AR_P ? q->p : a == AR_W || a == AR_U ? q->uw : q->qk;
        ir_val sb = kx_mul_c(k, sl, q->slot[a]);
        for (uint32_t m = 0; m * wg < C * per; m++) {
            ir_val e = kx_add_c(k, q->lid, m * wg), r = kx_div_c(k, e, per), c4 = kx_mul_c(k, kx_rem_c(k, e, per), 4);
            ir_if *in = (m + 1) * wg > C * per ? kx_if(k, kx_lt_c(k, e, C * per)) : NULL;
            ir_val col = a == AR_U ? kx_add(k, q->cw, c4) : kx_add_c(k, c4, from);
            ir_val at = kx_add(k, kx_mul_c(k, kx_add(k, base, r), src_w), col);
            ir_async_copy(k.ir, q->sh[a], kx_add(k, sb, kx_idx(k, r, q->pitch[a], c4)), src, at, 4, kx_add_c(k, at, 4));
            if (in) kx_end_if(k, in);
        }
    }
}

/* One chunk from slot sl: S (dk / 8 accumulators, updated in place). The tokens go 16 at
 * a time (a pair of 8-token tiles), so few accumulators are live at once: Sᵀ Wᵀ and Sᵀ Qᵀ
 * for the pair (Sᵀ's parts made again for each: a few dozen conversions against ptxas
 * spilling what it cannot hold), Dᵀ's A fragments of the pair, then the pair's Oᵀ
 * completed with every Dᵀ on or below the diagonal and stored. */
static void chunk(const smma *q, ir_val ch, ir_val sl, ir_val *S) {
    kx k = q->k;
    uint32_t C = q->C, dk = q->dk, dv = q->dv, nv = q->s.v_heads;
    ir_val t0 = kx_mul_c(k, ch, C), sb[AR_COUNT];
    for (uint32_t a = 0; a < AR_COUNT; a++) sb[a] = kx_mul_c(k, sl, q->slot[a]);
    ir_val zero = ir_frag_fill(k.ir, q->tc, q->f0), a[MAX_PARTS], b[MAX_PARTS];
    ir_val D[MMA_MAX_TILES / 2][MAX_PARTS]; /* Dᵀ's A fragments, tokens 16 ss .. 16 ss + 15 */
    ir_val ucol[2];                         /* the lane's U columns in the staged slice */
    for (uint32_t r = 0; r < 2; r++) ucol[r] = kx_add(k, q->ul, kx_u32(k, 8 * r));
    for (uint32_t ss = 0; ss < C / 16; ss++) {
        ir_val X[2] = {zero, zero}, O[2] = {zero, zero};
        for (uint32_t kk = 0; kk < dk / 16; kk++) {
            a_parts(q, S[2 * kk], S[2 * kk + 1], a);
            for (uint32_t h = 0; h < 2; h++) { /* B rows: tokens 16 ss + 8 h + g */
                ir_val row = kx_add_c(k, q->g, 16 * ss + 8 * h);
                b_parts(q, b_row_elems(q, AR_W, sb[AR_W], row, 16 * kk), b);
                X[h] = mma_parts(q, a, b, X[h]);
                b_parts(q, b_row_elems(q, AR_Q, sb[AR_Q], row, 16 * kk), b);
                O[h] = mma_parts(q, a, b, O[h]);
            }
        }
        /* Dᵀ = Uᵀ - Sᵀ Wᵀ, element for element (rows past the block are 0 in U and W) */
        for (uint32_t h = 0; h < 2; h++) {
            ir_val x = ir_frag_elems(k.ir, X[h]), d[4];
            for (uint32_t e = 0; e < 4; e++) {
                ir_val t = acc_col(q, e, 16 * ss + 8 * h);
                ir_val u = kx_shm_load(k, q->sh[AR_U], kx_add(k, sb[AR_U], kx_idx(k, t, q->pitch[AR_U], ucol[e >> 1])), 1);
                d[e] = kx_sub(k, u, kx_lane(k, x, e));
            }
            X[h] = ir_frag_from_elems(k.ir, q->tc, kx_vec(k, d, 4), IR_NONE);
        }
        a_parts(q, X[0], X[1], D[ss]);
        /* Oᵀ += Dᵀ Pᵀ over the tiles on or below the diagonal, the valid tokens stored */
        for (uint32_t h = 0; h < 2; h++) {
            uint32_t tt = 2 * ss + h;
            ir_val row = kx_add_c(k, q->g, 8 * tt);
            for (uint32_t s2 = 0; s2 <= ss; s2++) {
                b_parts(q, b_row_elems(q, AR_P, sb[AR_P], row, 16 * s2), b);
                O[h] = mma_parts(q, D[s2], b, O[h]);
            }
            ir_val o = ir_frag_elems(k.ir, O[h]);
            for (uint32_t e = 0; e < 4; e++) {
                ir_val t = kx_add(k, t0, acc_col(q, e, 8 * tt));
                ir_if *f = kx_if(k, kx_lt(k, t, q->n));
                ir_val oi = kx_add(k, kx_mul_c(k, t, nv * dv), kx_add(k, kx_mul_c(k, q->j, dv), acc_row(q, e)));
                kx_store(k, q->o, oi, kx_lane(k, o, e));
                kx_end_if(k, f);
            }
        }
    }
    /* Sᵀ = exp(g_last) Sᵀ + Dᵀ K: B (k: tokens s, n: state rows i = 8 it + g) is K's column */
    ir_val decay = kx_load(k, q->gl, kx_add(k, kx_mul_c(k, q->j, q->sz.n_chunks), ch), 1);
    for (uint32_t it = 0; it < dk / 8; it++) {
        ir_val s = ir_frag_elems(k.ir, S[it]), v[4];
        for (uint32_t e = 0; e < 4; e++) v[e] = kx_mul(k, kx_lane(k, s, e), decay);
        S[it] = ir_frag_from_elems(k.ir, q->tc, kx_vec(k, v, 4), IR_NONE);
        ir_val col = kx_add(k, sb[AR_K], kx_add_c(k, q->g, 8 * it));
        for (uint32_t ss = 0; ss < C / 16; ss++) {
            ir_val e4[4];
            for (uint32_t e = 0; e < 4; e++) {
                ir_val r = kx_add_c(k, kx_mul_c(k, q->t4, 2), 16 * ss + (e & 1) + 8 * (e >> 1));
                e4[e] = kx_shm_load(k, q->sh[AR_K], kx_idx(k, r, q->pitch[AR_K], col), 1);
            }
            b_parts(q, kx_vec(k, e4, 4), b);
            S[it] = mma_parts(q, D[ss], b, S[it]);
        }
    }
}

/* The lane's slice element e of accumulator it: S[i][c] at (j dk + i) dv + c */
static ir_val state_at(const smma *q, uint32_t it, uint32_t e) {
    kx k = q->k;
    ir_val i = acc_col(q, e, 8 * it);
    return kx_add(k, kx_mul_c(k, kx_add(k, kx_mul_c(k, q->j, q->dk), i), q->dv), acc_row(q, e));
}

ir_kernel *kn_deltanet_scan_mma(const rt_caps *c, const kn_deltanet_shape *shape, uint32_t groups[2], kiln_err *err) {
    if (!kn_deltanet_scan_mma_ok(c, shape)) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED,
                  "kn_deltanet_scan (fragments): needs CUDA's bf16 16x8x16 fragments, a state a multiple of 16 up to %d, "
                  "chunks of %d tokens or more and their two slots in workgroup memory",
                  MMA_MAX_STATE, MMA_MIN_CHUNK);
        return NULL;
    }
    smma q = {.s = *shape, .parts = parts_of(), .W = warps_of(c, shape)};
    if (kn_deltanet_scratch_of(c, shape, &q.sz, err)) return NULL;
    q.C = q.sz.chunk, q.NP = q.sz.n_chunks * q.C, q.dk = q.dv = shape->state;
    layout(&q);
    uint32_t nv = shape->v_heads, dk = q.dk, dv = q.dv;
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
    kx_workgroup(k, 32 * q.W);
    static const char *names[AR_COUNT] = {"W", "Q", "K", "P", "U"};
    for (uint32_t a = 0; a < AR_COUNT; a++) q.sh[a] = kx_shared(k, names[a], IR_F32, 2 * q.slot[a]);
    q.ta = ir_t_frag(k.ir, IR_FRAG_A, IR_BF16, 16, 8, 16);
    q.tb = ir_t_frag(k.ir, IR_FRAG_B, IR_BF16, 16, 8, 16);
    q.tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, 16, 8, 16);
    q.f4 = kx_t(k, IR_F32, 4), q.h4 = kx_t(k, IR_BF16, 4);
    q.f0 = kx_f32(k, 0.0f);
    q.lid = kx_local(k);
    ir_val lane = kx_sg_lane(k), sid = kx_sg_id(k);
    q.g = kx_shr_c(k, lane, 2), q.t4 = kx_and_c(k, lane, 3);
    q.j = kx_group(k, 0), q.cw = kx_group_times(k, 1, 16 * q.W);
    q.ul = kx_add(k, kx_mul_c(k, sid, 16), q.g); /* the lane's first U column in the staged slice */
    q.c0 = kx_add(k, q.cw, kx_mul_c(k, sid, 16));
    q.n = kx_min(k, kx_load_c(k, info, 1), kx_u32(k, shape->n_max));
    uint32_t ns = dk / 8;
    ir_val S[MMA_MAX_STATE / 8];
    for (uint32_t it = 0; it < ns; it++) {
        ir_val v[4];
        for (uint32_t e = 0; e < 4; e++) v[e] = kx_load(k, q.S, state_at(&q, it, e), 1);
        S[it] = ir_frag_from_elems(k.ir, q.tc, kx_vec(k, v, 4), IR_NONE);
    }
    ir_val chunks = kx_div_c(k, kx_add_c(k, q.n, q.C - 1), q.C), one = kx_u32(k, 1);
    stage(&q, kx_u32(k, 0), kx_u32(k, 0));
    ir_async_commit(k.ir);
    ir_for *l = ir_for_begin(k.ir, kx_u32(k, 0), chunks, one, ns, S);
    ir_val ch = ir_for_iv(l), St[MMA_MAX_STATE / 8];
    for (uint32_t it = 0; it < ns; it++) St[it] = ir_for_arg(l, it);
    ir_val next = kx_add_c(k, ch, 1);
    ir_if *more = kx_if(k, kx_lt(k, next, chunks)); /* the next chunk in flight */
    stage(&q, next, kx_and_c(k, next, 1));
    kx_end_if(k, more);
    ir_async_commit(k.ir);
    ir_async_wait(k.ir, 1);
    kx_barrier(k); /* this chunk has landed, every invocation's copies */
    chunk(&q, ch, kx_and_c(k, ch, 1), St);
    kx_barrier(k); /* its slot is free for the chunk after next */
    ir_for_end(k.ir, l, St);
    for (uint32_t it = 0; it < ns; it++) {
        ir_val s = ir_frag_elems(k.ir, ir_for_result(l, it));
        for (uint32_t e = 0; e < 4; e++) kx_store(k, q.S, state_at(&q, it, e), kx_lane(k, s, e));
    }
    if (groups) groups[0] = nv, groups[1] = dv / (16 * q.W);
    return kn_finish(k.ir, err);
}
