/* kn_matvec_q on the matrix units (CUDA: 16x8x16 fragments whose registers the target
 * exposes). The decode step's products are bound by the bytes of the weights, and a
 * matrix-vector product decoded on the general lanes spends about five instructions on
 * each 4-bit code (extract, make an f32, subtract the offset, multiply-add, and the
 * scales): more than the lanes can issue at the memory's rate. Here a code pair becomes
 * the two 16-bit halves of a fragment register in two instructions, OR-ed into a float's
 * mantissa (1.0 * 2^7 + code in bf16, 2^10 + code in f16: exact), and the matrix units do
 * the multiply-adds. In f16 the magic float's pair is subtracted before (frag.pair_sub:
 * exact, a small integer); in bf16 its share of each sub-block's sum, (2^7 + offset) times
 * the sub-block's sum of x, is subtracted after, in f32: one instruction a code pair fewer
 * (the decode step's products are bound by their instructions' latency and phases, not by
 * their bytes: see the streamed form below).
 *
 * The product per sub-block stays the contract's s * sum((code - offset) x) + m * sum(x),
 * summed in f32 by the units: the eight columns of the 16x8 accumulator are eight sub-
 * blocks, not eight tokens. B's column n holds x where k falls in sub-block n of the pass
 * and zeros elsewhere, so column n of A * B sums sub-block n's products alone:
 *
 *   A (16 rows x 16 k): lane (g, t) holds rows g and g + 8 at k slots 2t, 2t + 1 (two codes
 *     of sub-block t of the pass) and 2t + 8, 2t + 9 (two of sub-block t + 4); a pass of
 *     sub / 2 products walks all of the eight sub-blocks' codes;
 *   B (16 k x 8): lane (g, t)'s slots carry x at the same codes' columns where its column
 *     g is that sub-block (g == t, or g == t + 4), else zeros (read from a zero area of
 *     workgroup memory: the address is chosen once a pass);
 *   C: lane (g, t) ends with rows g, g + 8 x sub-blocks 2t, 2t + 1, scaled in f32 by their
 *     s and m (m times the sub-block's sum of x, summed once a workgroup in the prologue).
 *
 * A pass is 8 sub-blocks of a row (256 columns of a K-quant with sub-blocks of 32, 128
 * with 16). A workgroup of nw subgroups owns 16 rows (SwiGLU: 16 of gate and the same 16
 * of up, sharing B) and its subgroups split the passes, then meet in workgroup memory.
 * x is staged once a workgroup as the code pairs' words (normalised first in the fused
 * norm form). Chosen by kn_matvec_q where every part fits (kn_matvec_q_mma_pick). */
#include "base/error.h"
#include "kernels/kn_common.h"
#include "kernels/matvec_internal.h"
#include "kernels/matvec_q_mma.h"
#include "kernels/quant_ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MQ_ROWS 16      /* rows a workgroup owns (a part's rows are whole groups of them) */
#define MQ_MAX_TILES 2  /* SwiGLU's gate and up */
#define MQ_MAX_UNROLL 4 /* passes a subgroup loads at once */
#define MQ_MAX_WARPS 16
#define MQ_MAX_CHAINS 4 /* accumulators a tile's pass deals its products round */
#define MQ_MAX_LO 8     /* lo words of a sub-block (Q8_0: 32 bytes) */
#define MQ_ZERO_WORDS 16

static uint32_t align_up(uint32_t v, uint32_t a) { return (v + a - 1) / a * a; }

/* The ring words a tile's pass of type f takes per invocation from word `at` of a slot:
 * pass_words' loads in their order, each on a multiple of its size. */
static uint32_t ring_words_of(const kn_qformat *f, uint32_t at) {
    uint32_t n_lo = f->sub * f->lo_bits / 32, n_hi = f->sub * f->hi_bits / 32;
    uint32_t n_scale = 1 + f->has_min + f->k_quant + (f->k_quant && f->has_min);
    for (uint32_t r = 0; r < 2; r++) {
        for (uint32_t h = 0; h < 2; h++) {
            for (uint32_t i = 0; i < n_lo; i += 4) {
                uint32_t n = n_lo - i >= 4 ? 4 : n_lo - i;
                at = align_up(at, n) + n;
            }
            at += n_hi;
        }
        at += n_scale;
    }
    return at;
}

bool kn_matvec_q_mma_pick(const rt_caps *c, const kn_qlayout *L, uint32_t n_parts, bool swi, bool norm,
                          ir_scalar dt, uint32_t cols, mvq_mma_cfg *out) {
    if (c->backend != RT_CUDA || c->subgroup_size != 32 || (dt != IR_BF16 && dt != IR_F16)) return false;
    bool shape = false;
    for (uint32_t i = 0; i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->mma[i];
        shape |= s->m == 16 && s->n == 8 && s->k == 16 && s->ab_type == (uint32_t)dt && s->acc_type == IR_F32;
    }
    if (!shape) return false;
    mvq_mma_cfg g = {.warps = 8, .unroll = 1, .occupancy = 0, .chains = 2};
    const char *e = getenv("KILN_MATVEC_Q_MMA");
    unsigned a, b, o = g.occupancy, ch = g.chains;
    if (e && e[0] == '0' && !e[1]) return false;
    if (e && sscanf(e, "%u,%u,%u,%u", &a, &b, &o, &ch) >= 2 && a >= 1 && a <= MQ_MAX_WARPS && b >= 1 &&
        b <= MQ_MAX_UNROLL && o <= 16 && ch >= 1 && ch <= MQ_MAX_CHAINS)
        g.warps = a, g.unroll = b, g.occupancy = o, g.chains = ch;
    uint32_t code_bits = dt == IR_BF16 ? 7 : 10; /* codes the magic float's mantissa holds exactly */
    /* in f16 the magic float is 1024 code units: its share of a sub-block's sum would cost
     * the f32 sums about ten of their bits, so f16 keeps the subtraction per pair */
    const char *fold = getenv("KILN_MATVEC_Q_FOLD");
    g.fold = dt == IR_BF16 && !(fold && !strcmp(fold, "0"));
    const kn_qformat *f0 = kn_qformat_of(L[0].type);
    for (uint32_t p = 0; p < n_parts; p++) {
        const kn_qformat *f = kn_qformat_of(L[p].type);
        if (f->lo_bits + f->hi_bits > code_bits || f->lo_bits != f0->lo_bits || (f->sub * f->hi_bits) % 32 ||
            f->sub * f->lo_bits / 32 > MQ_MAX_LO || L[p].rows % MQ_ROWS || cols % (8 * f->sub))
            return false;
        /* sums of x at the finest sub-block a part needs them for (16 or 32: a part of 32
         * adds two) */
        if ((f->has_min || g.fold) && (!g.xs_sub || f->sub < g.xs_sub)) g.xs_sub = f->sub;
        if (swi && L[p].type != L[0].type) return false;
    }
    const char *st = getenv("KILN_MATVEC_Q_STREAM");
    unsigned depth = 0, per_cu = 1;
    if (st && sscanf(st, "%u,%u", &depth, &per_cu) >= 1 && depth >= 2 && depth <= 8 && per_cu >= 1 && per_cu <= 8 &&
        c->async_copy && (n_parts == 1 || swi) && (cols / (8 * f0->sub)) % g.warps == 0)
        g.stream = depth, g.per_cu = per_cu;
    uint32_t ring = 0;
    for (uint32_t p = 0; g.stream && p < n_parts; p++) ring = ring_words_of(kn_qformat_of(L[p].type), ring);
    uint64_t bytes = (uint64_t)(cols / 2 + MQ_ZERO_WORDS) * 4 + (g.xs_sub ? cols / g.xs_sub * 4 : 0) +
                     (uint64_t)g.warps * MQ_ROWS * MQ_MAX_TILES * 4 + (norm ? (uint64_t)cols * 4 + 512 : 0);
    if (c->shared_bytes && bytes > c->shared_bytes) return false;
    if (c->shared_bytes && bytes + (uint64_t)g.stream * ring * g.warps * 32 * 4 > c->shared_bytes) g.stream = 0;
    if (c->max_workgroup && g.warps * 32 > c->max_workgroup) return false;
    *out = g;
    return true;
}

/* ---- the prologue: x as the code pairs' words, and the sub-blocks' sums -------------------- */

typedef struct mq {
    kx k;
    mvq_mma_cfg g;
    uint32_t cols, lo_bits, per_word; /* codes a lo word holds */
    ir_scalar dt;
    ir_shm xw, xs, red;
    ir_type ta, tb, tc;
    ir_val warp, lane_g, lane_t, magic2;
} mq;

/* x's value at column col as f32: from hx (the normalised row) or x */
static ir_val x_at(kx k, ir_buf x, uint32_t hx, ir_val col, uint32_t lanes) {
    if (hx != UINT32_MAX) return kx_shm_load(k, hx, col, lanes);
    return kx_convert(k, kx_load(k, x, col, lanes), kx_t(k, IR_F32, lanes));
}

/* xw[q * per_word / 2 + i] = (x[per_word q + i], x[per_word q + i + per_word / 2]) as dt's
 * bits, the pairs in the order the codes' pairs are decoded (pair_word); xs[b] = the sum of
 * sub-block b's x in f32, in column order. Ends with a barrier. */
static void stage_x(const mq *q, uint32_t wg, ir_buf x, uint32_t hx) {
    kx k = q->k;
    uint32_t n = q->per_word, half = n / 2;
    ir_type u32 = kx_t(k, IR_U32, 1);
    ir_val word;
    ir_for *l = kx_for(k, kx_local(k), kx_u32(k, q->cols / n), kx_u32(k, wg), &word);
    ir_val v[16], c0 = kx_mul_c(k, word, n), out0 = kx_mul_c(k, word, half);
    for (uint32_t i = 0; i < n; i += 4) {
        ir_val xv = x_at(k, x, hx, i ? kx_add_c(k, c0, i) : c0, 4);
        for (uint32_t j = 0; j < 4; j++) v[i + j] = kx_lane(k, xv, j);
    }
    for (uint32_t i = 0; i < half; i++) {
        ir_val lo = ir_convert_exact(k.ir, v[i], ir_t_scalar(k.ir, q->dt));
        ir_val hi = ir_convert_exact(k.ir, v[i + half], ir_t_scalar(k.ir, q->dt));
        ir_val pair[2] = {lo, hi};
        ir_val w = kx_bitcast(k, kx_vec(k, pair, 2), u32);
        kx_shm_store(k, q->xw, i ? kx_add_c(k, out0, i) : out0, w);
    }
    kx_end_for(k, l);
    ir_if *z = kx_if(k, kx_lt_c(k, kx_local(k), MQ_ZERO_WORDS));
    kx_shm_store(k, q->xw, kx_add_c(k, kx_local(k), q->cols / 2), kx_u32(k, 0));
    kx_end_if(k, z);
    if (q->g.xs_sub) {
        ir_val b;
        ir_for *s = kx_for(k, kx_local(k), kx_u32(k, q->cols / q->g.xs_sub), kx_u32(k, wg), &b);
        ir_val c = kx_mul_c(k, b, q->g.xs_sub), sum = IR_NONE;
        for (uint32_t i = 0; i < q->g.xs_sub; i += 4) {
            ir_val xv = x_at(k, x, hx, i ? kx_add_c(k, c, i) : c, 4);
            for (uint32_t j = 0; j < 4; j++) sum = sum == IR_NONE ? kx_lane(k, xv, j) : kx_add(k, sum, kx_lane(k, xv, j));
        }
        kx_shm_store(k, q->xs, b, sum);
        kx_end_for(k, s);
    }
    kx_barrier(k);
}

/* ---- a subgroup's passes --------------------------------------------------------------------- */

/* A tile: 16 rows of one weight (its layout and buffer), from row `row` of it. */
typedef struct mq_tile {
    const kn_qlayout *L;
    ir_buf w;
    ir_val row;
} mq_tile;

/* One pass's global loads for a tile: the four sub-blocks' code words (rows g, g + 8 x
 * sub-blocks t, t + 4 of the pass) and the two rows' scale words. */
typedef struct mq_loads {
    ir_val lo[2][2][MQ_MAX_LO], hi[2][2][2];
    ir_val raw[2][KN_Q_SCALE_WORDS], si[2];
} mq_loads;

/* One load of a pass: n (1, 2 or 4) consecutive words of the buffer from word `at`, into
 * the mq_loads slots dst[0 .. n). */
typedef struct mq_word {
    ir_val at;
    uint32_t n;
    ir_val *dst[4];
} mq_word;
#define MQ_MAX_WORDS (4 * (MQ_MAX_LO + 2) + 2 * KN_Q_SCALE_WORDS) /* a tile's pass at most */

/* A tile's pass as its loads, in one fixed order for its type (the direct loads and the
 * streamed form's ring both walk it); fills ld->si. Returns the count. */
static uint32_t pass_words(const mq *q, const mq_tile *tl, ir_val pass, mq_loads *ld, mq_word *out) {
    kx k = q->k;
    const kn_qformat *f = kn_qformat_of(tl->L->type);
    ir_val col0 = kx_mul_c(k, pass, 8 * f->sub);
    uint32_t n_words = 0;
    for (uint32_t r = 0; r < 2; r++) {
        ir_val row = kx_add(k, tl->row, r ? kx_add_c(k, q->lane_g, 8) : q->lane_g);
        ir_val base = kx_add(k, kx_mul_c(k, row, q->cols), col0);
        for (uint32_t h = 0; h < 2; h++) {
            ir_val sb = h ? kx_add_c(k, q->lane_t, 4) : q->lane_t;
            ir_val e0 = kx_add(k, base, kx_mul_c(k, sb, f->sub));
            /* a sub-block's codes start on a whole word of each plane (sub * bits % 32 == 0) */
            ir_val sbi = kx_shr_c(k, e0, f->sub == 16 ? 4 : 5);
            ir_val lo0 = kx_add_c(k, kx_mul_c(k, sbi, f->sub * f->lo_bits / 32), (uint32_t)tl->L->lo);
            uint32_t n_lo = f->sub * f->lo_bits / 32;
            for (uint32_t i = 0; i < n_lo; i += 4) {
                mq_word *o = &out[n_words++];
                o->at = i ? kx_add_c(k, lo0, i) : lo0, o->n = n_lo - i >= 4 ? 4 : n_lo - i;
                for (uint32_t j = 0; j < o->n; j++) o->dst[j] = &ld->lo[r][h][i + j];
            }
            if (f->hi_bits) {
                uint32_t n_hi = f->sub * f->hi_bits / 32;
                ir_val hi0 = kx_add_c(k, kx_mul_c(k, sbi, n_hi), (uint32_t)tl->L->hi);
                for (uint32_t i = 0; i < n_hi; i++)
                    out[n_words++] = (mq_word){i ? kx_add_c(k, hi0, i) : hi0, 1, {&ld->hi[r][h][i]}};
            }
        }
        /* sub-blocks 2t and 2t + 1 share their scale words (an even sub-block index) */
        ld->si[r] = kx_add(k, kx_shr_c(k, base, f->sub == 16 ? 4 : 5), kx_shl_c(k, q->lane_t, 1));
        ir_val at[KN_Q_SCALE_WORDS];
        kn_q_scale_words(k, tl->L, ld->si[r], at);
        for (uint32_t i = 0; i < KN_Q_SCALE_WORDS; i++) {
            ld->raw[r][i] = IR_NONE;
            if (at[i] != IR_NONE) out[n_words++] = (mq_word){at[i], 1, {&ld->raw[r][i]}};
        }
    }
    return n_words;
}

/* One pass's global loads for a tile: the four sub-blocks' code words (rows g, g + 8 x
 * sub-blocks t, t + 4 of the pass) and the two rows' scale words. */
static void pass_loads(const mq *q, const mq_tile *tl, ir_val pass, mq_loads *ld) {
    kx k = q->k;
    mq_word words[MQ_MAX_WORDS];
    uint32_t n = pass_words(q, tl, pass, ld, words);
    for (uint32_t i = 0; i < n; i++) {
        ir_val v = kx_load(k, tl->w, words[i].at, words[i].n);
        for (uint32_t j = 0; j < words[i].n; j++) *words[i].dst[j] = words[i].n == 1 ? v : kx_lane(k, v, j);
    }
}

/* Code c's high bits moved to bit `to` of a word (the rest zero). */
static ir_val hi_bits_at(kx k, const kn_qformat *f, const ir_val *hw, uint32_t c, uint32_t to) {
    uint32_t bit = c * f->hi_bits, s = bit % 32;
    ir_val v = hw[bit / 32];
    v = s > to ? kx_shr_c(k, v, s - to) : s < to ? kx_shl_c(k, v, to - s) : v;
    return kx_and_c(k, v, ((1u << f->hi_bits) - 1) << to);
}

/* Pair p of a sub-block as a fragment word: codes (per_word qw + i, per_word qw + i +
 * per_word / 2), qw = p / (per_word / 2), i = p % (per_word / 2), each (code - offset) in
 * dt, the first in the low half. */
static ir_val pair_word(const mq *q, const kn_qformat *f, const ir_val *lo, const ir_val *hi, uint32_t p,
                        ir_val zero2) {
    kx k = q->k;
    uint32_t half = q->per_word / 2, qw = p / half, i = p % half, b = f->lo_bits;
    ir_val v = i ? kx_shr_c(k, lo[qw], b * i) : lo[qw];
    v = kx_and_c(k, v, ((1u << b) - 1) * 0x10001u);
    if (f->hi_bits) {
        uint32_t c = q->per_word * qw + i;
        v = kx_or(k, v, hi_bits_at(k, f, hi, c, b));
        v = kx_or(k, v, hi_bits_at(k, f, hi, c + half, 16 + b));
    }
    v = kx_or(k, v, q->magic2);
    return q->g.fold ? v : ir_frag_pair_sub(k.ir, q->dt, v, zero2);
}

/* acc[tile][r] += the pass's products for rows g + 8r of each tile. */
static void pass_math(const mq *q, const mq_tile *tl, uint32_t n_tiles, ir_val pass, const mq_loads *ld, ir_val *acc) {
    kx k = q->k;
    const kn_qformat *f = kn_qformat_of(tl[0].L->type);
    uint32_t steps = f->sub / 2;
    uint32_t magic = q->dt == IR_BF16 ? 0x4300u : 0x6400u, z = magic + f->offset;
    ir_val zero2 = kx_u32(k, z | z << 16);
    /* B's words: sub-block t's pairs where g == t, t + 4's where g == t + 4, else zeros */
    ir_val sb0 = kx_add(k, kx_mul_c(k, pass, 8), q->lane_t), sb1 = kx_add_c(k, sb0, 4), zero_at = kx_u32(k, q->cols / 2);
    ir_val at0 = kx_select(k, kx_eq(k, q->lane_g, q->lane_t), kx_mul_c(k, sb0, steps), zero_at);
    ir_val t4 = kx_add_c(k, q->lane_t, 4);
    ir_val at1 = kx_select(k, kx_eq(k, q->lane_g, t4), kx_mul_c(k, sb1, steps), zero_at);
    ir_val xb[2][16];
    for (uint32_t s = 0; s < steps; s += 4)
        for (uint32_t h = 0; h < 2; h++) {
            ir_val at = h ? at1 : at0;
            ir_val v = kx_shm_load(k, q->xw, s ? kx_add_c(k, at, s) : at, 4);
            for (uint32_t j = 0; j < 4; j++) xb[h][s + j] = kx_lane(k, v, j);
        }
    ir_val xs0 = IR_NONE, xs1 = IR_NONE;
    if (f->has_min || q->g.fold) { /* sub-blocks 2t, 2t + 1 of the pass: R sums each */
        uint32_t R = f->sub / q->g.xs_sub;
        ir_val xi = kx_mul_c(k, kx_add(k, kx_mul_c(k, pass, 8), kx_shl_c(k, q->lane_t, 1)), R);
        ir_val v = kx_shm_load(k, q->xs, xi, 2 * R);
        xs0 = kx_lane(k, v, 0), xs1 = kx_lane(k, v, R);
        if (R == 2) xs0 = kx_add(k, xs0, kx_lane(k, v, 1)), xs1 = kx_add(k, xs1, kx_lane(k, v, 3));
    }
    /* folded: each code was magic + code, so a sub-block's sum holds (magic + offset) * its
     * sum of x beyond the contract's sum of (code - offset) x */
    float fold_k;
    uint32_t fold_bits = z << 16;
    memcpy(&fold_k, &fold_bits, sizeof fold_k);
    for (uint32_t t = 0; t < n_tiles; t++) {
        const mq_loads *l = &ld[t];
        /* the steps dealt round q->g.chains accumulators: products in independent chains,
         * which the matrix units overlap, where one chain waits out each product's latency */
        ir_val c[MQ_MAX_CHAINS] = {0};
        uint32_t nc = q->g.chains < steps ? q->g.chains : steps;
        for (uint32_t i = 0; i < nc; i++) c[i] = ir_frag_fill(k.ir, q->tc, kx_f32(k, 0.0f));
        for (uint32_t p = 0; p < steps; p++) {
            ir_val aw[4], bw[2] = {xb[0][p], xb[1][p]};
            for (uint32_t e = 0; e < 4; e++) /* rows g, g + 8 of sub-block t; then of t + 4 */
                aw[e] = pair_word(q, f, l->lo[e & 1][e >> 1], l->hi[e & 1][e >> 1], p, zero2);
            ir_val a = ir_frag_from_elems(k.ir, q->ta, kx_vec(k, aw, 4), IR_NONE);
            ir_val b = ir_frag_from_elems(k.ir, q->tb, kx_vec(k, bw, 2), IR_NONE);
            c[p % nc] = ir_frag_mma(k.ir, a, b, c[p % nc]);
        }
        ir_val e = ir_frag_elems(k.ir, c[0]);
        for (uint32_t i = 1; i < nc; i++) e = kx_add(k, e, ir_frag_elems(k.ir, c[i]));
        for (uint32_t r = 0; r < 2; r++) {
            ir_val *a = &acc[2 * t + r];
            for (uint32_t j = 0; j < 2; j++) {
                ir_val s, m;
                kn_q_scale_decode(k, tl[t].L, j ? kx_add_c(k, l->si[r], 1) : l->si[r], l->raw[r], &s, &m);
                ir_val sum = kx_lane(k, e, 2 * r + j);
                if (q->g.fold) sum = kx_fma(k, kx_f32(k, -fold_k), j ? xs1 : xs0, sum);
                *a = kx_fma(k, s, sum, *a);
                if (m != IR_NONE) *a = kx_fma(k, m, j ? xs1 : xs0, *a);
            }
        }
    }
}

/* The subgroup's passes from `from` to `to` in steps of warps * unroll (every step whole):
 * all of a step's global loads first, then its products. */
static void walk(const mq *q, const mq_tile *tl, uint32_t n_tiles, ir_val from, uint32_t to, uint32_t unroll,
                 ir_val *acc) {
    kx k = q->k;
    uint32_t n = 2 * n_tiles;
    ir_for *l = ir_for_begin(k.ir, from, kx_u32(k, to), kx_u32(k, q->g.warps * unroll), n, acc);
    ir_val a[2 * MQ_MAX_TILES];
    for (uint32_t i = 0; i < n; i++) a[i] = ir_for_arg(l, i);
    mq_loads ld[MQ_MAX_UNROLL][MQ_MAX_TILES];
    ir_val pass[MQ_MAX_UNROLL];
    for (uint32_t u = 0; u < unroll; u++) {
        pass[u] = u ? kx_add_c(k, ir_for_iv(l), u * q->g.warps) : ir_for_iv(l);
        for (uint32_t t = 0; t < n_tiles; t++) pass_loads(q, &tl[t], pass[u], &ld[u][t]);
    }
    for (uint32_t u = 0; u < unroll; u++) pass_math(q, tl, n_tiles, pass[u], ld[u], a);
    ir_for_end(k.ir, l, a);
    for (uint32_t i = 0; i < n; i++) acc[i] = ir_for_result(l, i);
}

/* The prologue: x normalised (the fused norm) and staged as pair words (stage_x). */
typedef struct mq_pro {
    uint32_t wg;
    ir_buf x, wn;
    bool norm;
    float eps;
} mq_pro;

static void prologue(const mq *q, const mq_pro *pro) {
    kx k = q->k;
    uint32_t hx = pro->norm ? kn_mv_norm_prologue(k, pro->wg, pro->x, pro->wn, q->cols, q->dt, pro->eps) : UINT32_MAX;
    stage_x(q, pro->wg, pro->x, hx);
}

/* The tiles' products. With a prologue (pro), its subgroup's first step of passes is
 * loaded before it: the weights' latency then runs under the staging of x (and its norm),
 * which a workgroup otherwise spends with no weight bytes in flight. */
static void tiles_dot(const mq *q, const mq_tile *tl, uint32_t n_tiles, ir_val *acc, const mq_pro *pro) {
    kx k = q->k;
    const kn_qformat *f = kn_qformat_of(tl[0].L->type);
    uint32_t passes = q->cols / (8 * f->sub), step = q->g.warps * q->g.unroll, main_end = passes - passes % step;
    for (uint32_t i = 0; i < 2 * n_tiles; i++) acc[i] = kx_f32(k, 0.0f);
    uint32_t from = 0;
    if (pro && main_end) {
        mq_loads ld[MQ_MAX_UNROLL][MQ_MAX_TILES];
        ir_val pass[MQ_MAX_UNROLL];
        for (uint32_t u = 0; u < q->g.unroll; u++) {
            pass[u] = u ? kx_add_c(k, q->warp, u * q->g.warps) : q->warp;
            for (uint32_t t = 0; t < n_tiles; t++) pass_loads(q, &tl[t], pass[u], &ld[u][t]);
        }
        prologue(q, pro);
        for (uint32_t u = 0; u < q->g.unroll; u++) pass_math(q, tl, n_tiles, pass[u], ld[u], acc);
        from = step;
    } else if (pro) {
        prologue(q, pro);
    }
    if (from < main_end) walk(q, tl, n_tiles, from ? kx_add_c(k, q->warp, from) : q->warp, main_end, q->g.unroll, acc);
    if (main_end < passes) walk(q, tl, n_tiles, kx_add_c(k, q->warp, main_end), passes, 1, acc);
}

/* The parts stacked: the branch of the part holding the workgroup's rows (uniform). */
static void parts_dot(const mq *q, const kn_qlayout *L, const ir_buf *w, uint32_t n_parts, ir_val row0, ir_val *acc) {
    kx k = q->k;
    if (n_parts == 1) {
        mq_tile t = {L, w[0], row0};
        tiles_dot(q, &t, 1, acc, NULL);
        return;
    }
    ir_if *f = ir_if_begin(k.ir, kx_lt_c(k, row0, L[0].rows), 2);
    ir_val a[2], b[2];
    parts_dot(q, L, w, 1, row0, a);
    ir_if_else(k.ir, f, a);
    parts_dot(q, L + 1, w + 1, n_parts - 1, kx_sub_c(k, row0, L[0].rows), b);
    ir_if_end(k.ir, f, b);
    for (uint32_t i = 0; i < 2; i++) acc[i] = ir_if_result(f, i);
}

static void reduce_store(const mq *q, const mvq_mma_args *a, ir_val row0, const ir_val *acc);

/* 16 rows from row0: the products (the prologue after the first step's loads where there
 * is one), the reduction over subgroups, the stores. (Several such tiles a workgroup, x
 * staged once for them, measured slower: fewer workgroups; bench/results 2026-12-05.) */
static void row_tile(const mq *q, const mvq_mma_args *a, ir_val row0, const mq_pro *pro) {
    ir_val acc[2 * MQ_MAX_TILES];
    if (a->swi) {
        mq_tile t[2] = {{&a->L[0], a->w[0], row0}, {&a->L[1], a->wu, row0}};
        tiles_dot(q, t, 2, acc, pro);
    } else if (a->n_parts == 1) {
        mq_tile t = {a->L, a->w[0], row0};
        tiles_dot(q, &t, 1, acc, pro);
    } else { /* the parts' branch comes after the prologue, which has one place */
        prologue(q, pro);
        parts_dot(q, a->L, a->w, a->n_parts, row0, acc);
    }
    reduce_store(q, a, row0, acc);
}

/* The tile's sums (each lane's rows g, g + 8 over its passes) added over the four lanes of
 * a row (t = 0..3), then over the subgroups through workgroup memory, and stored. */
static void reduce_store(const mq *q, const mvq_mma_args *a, ir_val row0, const ir_val *acc) {
    kx k = q->k;
    uint32_t n_tiles = a->swi ? 2 : 1;
    ir_val first = kx_eq_c(k, q->lane_t, 0);
    ir_val slot0 = kx_add(k, kx_mul_c(k, q->warp, MQ_ROWS * MQ_MAX_TILES), q->lane_g);
    for (uint32_t i = 0; i < 2 * n_tiles; i++) {
        ir_val v = acc[i];
        v = kx_add(k, v, kx_sg_xor(k, v, 1));
        v = kx_add(k, v, kx_sg_xor(k, v, 2));
        ir_if *st = kx_if(k, first);
        kx_shm_store(k, q->red, kx_add_c(k, slot0, (i >> 1) * MQ_ROWS + (i & 1) * 8), v);
        kx_end_if(k, st);
    }
    kx_barrier(k);
    ir_val lid = kx_local(k);
    ir_if *out = kx_if(k, kx_lt_c(k, lid, MQ_ROWS));
    ir_val sum[MQ_MAX_TILES];
    for (uint32_t t = 0; t < n_tiles; t++) {
        sum[t] = kx_shm_load(k, q->red, t ? kx_add_c(k, lid, t * MQ_ROWS) : lid, 1);
        for (uint32_t w = 1; w < q->g.warps; w++)
            sum[t] = kx_add(k, sum[t], kx_shm_load(k, q->red, kx_add_c(k, lid, w * MQ_ROWS * MQ_MAX_TILES + t * MQ_ROWS), 1));
    }
    kn_mv_store_row(k, a->epi, a->y, a->b, a->res, kx_add(k, row0, lid), sum[0], a->swi ? sum[1] : IR_NONE, a->dtype,
                    a->out);
    kx_end_if(k, out);
}

/* ---- the streamed form: workgroups that stay, the weights through a ring of copies -------- */

/* The decode products' workgroups load a pass, multiply it and end in a barrier: a compute
 * unit's few workgroups alternate between waiting for their bytes and computing with none
 * in flight, and the H200 decodes no faster than the H100 (321 against 318 tok/s, 8B
 * Q4_K_M) although its memory is 1.4x as fast. Here a grid of a few workgroups a compute
 * unit walks the tiles (tile g, g + G, ...), each invocation copying its own words of the
 * pass `stream - 1` passes ahead into workgroup memory (cp.async) and reading back the ones
 * due, so the copies stay in flight through the products, the tiles' ends and the barriers;
 * x is staged once a workgroup. The math and the sums are the direct form's. */

typedef struct mq_stream {
    const mq_tile *tl; /* the tiles' layouts and buffers (rows set per item) */
    uint32_t n_tiles, per_warp, wpt, nt; /* passes of a tile per subgroup; ring words per invocation a slot */
    ir_shm ring;
    ir_val n_items, group, n_groups;
} mq_stream;

/* Item s of the subgroup: its tiles (rows from the workgroup's tile s / per_warp) and pass. */
static ir_val item_tiles(const mq *q, const mq_stream *st, ir_val s, mq_tile *tl) {
    kx k = q->k;
    ir_val j = kx_div_c(k, s, st->per_warp), qq = kx_rem_c(k, s, st->per_warp);
    ir_val row0 = kx_mul_c(k, kx_add(k, st->group, kx_mul(k, j, st->n_groups)), MQ_ROWS);
    for (uint32_t t = 0; t < st->n_tiles; t++) tl[t] = st->tl[t], tl[t].row = row0;
    return kx_add(k, q->warp, kx_mul_c(k, qq, q->g.warps));
}

/* The ring index of a load of n words at word `off` of slot `slot`, for this invocation. */
static ir_val ring_at(const mq *q, const mq_stream *st, ir_val slot, uint32_t off, uint32_t n) {
    kx k = q->k;
    ir_val base = kx_mul_c(k, kx_add_c(k, kx_mul_c(k, slot, st->wpt), off), st->nt);
    return kx_add(k, base, kx_mul_c(k, kx_local(k), n));
}

/* Walks item s's loads: copies them into slot s % stream (copy) or reads them from it into
 * ld (returning the pass). */
static ir_val item_ring(const mq *q, const mq_stream *st, ir_val s, bool copy, mq_loads *ld) {
    kx k = q->k;
    mq_tile tl[MQ_MAX_TILES];
    ir_val pass = item_tiles(q, st, s, tl), slot = kx_rem_c(k, s, q->g.stream);
    uint32_t off = 0;
    for (uint32_t t = 0; t < st->n_tiles; t++) {
        mq_word words[MQ_MAX_WORDS];
        uint32_t n = pass_words(q, &tl[t], pass, &ld[t], words);
        for (uint32_t i = 0; i < n; i++) {
            uint32_t c = words[i].n;
            off = align_up(off, c);
            ir_val at = ring_at(q, st, slot, off, c);
            if (copy) {
                ir_async_copy(k.ir, st->ring, at, tl[t].w, words[i].at, c, kx_add_c(k, words[i].at, c));
            } else {
                ir_val v = kx_shm_load(k, st->ring, at, c);
                for (uint32_t j = 0; j < c; j++) *words[i].dst[j] = c == 1 ? v : kx_lane(k, v, j);
            }
            off += c;
        }
    }
    return pass;
}

/* Item s's copies where it is one of the subgroup's, then a commit either way (every
 * invocation commits the same groups). */
static void item_copy(const mq *q, const mq_stream *st, ir_val s) {
    kx k = q->k;
    mq_loads ld[MQ_MAX_TILES];
    ir_if *in = kx_if(k, kx_lt(k, s, st->n_items));
    item_ring(q, st, s, true, ld);
    kx_end_if(k, in);
    ir_async_commit(k.ir);
}

static void stream_body(const mq *q, const mvq_mma_args *a, const mq_pro *pro) {
    kx k = q->k;
    const kn_qformat *f = kn_qformat_of(a->L[0].type);
    mq_tile tl[2] = {{&a->L[0], a->w[0], IR_NONE}, {&a->L[1], a->wu, IR_NONE}};
    uint32_t n_tiles = a->swi ? 2 : 1, tiles = a->L[0].rows / MQ_ROWS, depth = q->g.stream;
    mq_stream st = {.tl = tl, .n_tiles = n_tiles, .per_warp = q->cols / (8 * f->sub) / q->g.warps, .nt = q->g.warps * 32};
    for (uint32_t t = 0; t < n_tiles; t++) st.wpt = ring_words_of(kn_qformat_of(tl[t].L->type), st.wpt);
    st.ring = kx_shared(k, "ring", IR_U32, depth * st.wpt * st.nt);
    st.group = kx_group(k, 0), st.n_groups = kx_n_groups(k);
    /* the workgroup's tiles: group, group + G, ... below tiles (the grid is at most tiles) */
    ir_val mine = kx_add_c(k, kx_div(k, kx_sub(k, kx_u32(k, tiles - 1), st.group), st.n_groups), 1);
    st.n_items = kx_mul_c(k, mine, st.per_warp);
    for (uint32_t s = 0; s + 1 < depth; s++) item_copy(q, &st, kx_u32(k, s));
    prologue(q, pro); /* the first copies in flight under x's staging */
    ir_val j;
    ir_for *tiles_l = kx_for(k, kx_u32(k, 0), mine, kx_u32(k, 1), &j);
    ir_val acc[2 * MQ_MAX_TILES], zero = kx_f32(k, 0.0f);
    for (uint32_t i = 0; i < 2 * n_tiles; i++) acc[i] = zero;
    ir_for *passes = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, st.per_warp), kx_u32(k, 1), 2 * n_tiles, acc);
    ir_val c[2 * MQ_MAX_TILES];
    for (uint32_t i = 0; i < 2 * n_tiles; i++) c[i] = ir_for_arg(passes, i);
    ir_val s = kx_add(k, kx_mul_c(k, j, st.per_warp), ir_for_iv(passes));
    item_copy(q, &st, kx_add_c(k, s, depth - 1));
    ir_async_wait(k.ir, depth - 1);
    mq_loads ld[MQ_MAX_TILES];
    ir_val pass = item_ring(q, &st, s, false, ld);
    pass_math(q, tl, n_tiles, pass, ld, c);
    ir_for_end(k.ir, passes, c);
    for (uint32_t i = 0; i < 2 * n_tiles; i++) acc[i] = ir_for_result(passes, i);
    ir_val row0 = kx_mul_c(k, kx_add(k, st.group, kx_mul(k, j, st.n_groups)), MQ_ROWS);
    reduce_store(q, a, row0, acc);
    kx_barrier(k); /* the sums read before the next tile's are written */
    kx_end_for(k, tiles_l);
}

uint32_t kn_matvec_q_mma_groups(const rt_caps *c, const mvq_mma_cfg *g, uint32_t rows) {
    uint32_t tiles = rows / MQ_ROWS;
    if (!g->stream || !c->compute_units) return tiles;
    uint32_t grid = c->compute_units * g->per_cu;
    return grid < tiles ? grid : tiles;
}

void kn_matvec_q_mma_body(kx k, const mvq_mma_cfg *g, const mvq_mma_args *a) {
    const kn_qformat *f0 = kn_qformat_of(a->L[0].type);
    uint32_t wg = g->warps * 32;
    mq q = {.k = k, .g = *g, .cols = a->cols, .lo_bits = f0->lo_bits, .per_word = 32 / f0->lo_bits, .dt = a->dtype};
    kx_workgroup(k, wg);
    if (g->occupancy) ir_set_occupancy(k.ir, g->occupancy);
    ir_grid_wait(k.ir);
    q.xw = kx_shared(k, "xw", IR_U32, a->cols / 2 + MQ_ZERO_WORDS);
    q.xs = g->xs_sub ? kx_shared(k, "xsum", IR_F32, a->cols / g->xs_sub) : 0;
    q.red = kx_shared(k, "red", IR_F32, g->warps * MQ_ROWS * MQ_MAX_TILES);
    mq_pro pro = {wg, a->x, a->wn, a->norm, a->eps};
    q.ta = ir_t_frag(k.ir, IR_FRAG_A, a->dtype, 16, 8, 16);
    q.tb = ir_t_frag(k.ir, IR_FRAG_B, a->dtype, 16, 8, 16);
    q.tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, 16, 8, 16);
    uint32_t magic = a->dtype == IR_BF16 ? 0x4300u : 0x6400u;
    q.magic2 = kx_u32(k, magic | magic << 16);
    q.warp = kx_sg_id(k);
    ir_val lane = kx_sg_lane(k);
    q.lane_g = kx_shr_c(k, lane, 2), q.lane_t = kx_and_c(k, lane, 3);
    if (g->stream)
        stream_body(&q, a, &pro);
    else
        row_tile(&q, a, kx_group_times(k, 0, MQ_ROWS), &pro);
}
