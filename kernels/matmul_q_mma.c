/* kn_matmul_q on the matrix units (CUDA sm_80+: 16x8x16 fragments of dtype whose elements
 * the target exposes, and asynchronous copies), keeping the numerical contract of block-
 * quantized weights exact: a weight is s * (code - offset) + m, and (code - offset) is a
 * small integer every 16-bit float holds exactly, so the matrix units multiply the codes
 * themselves and each sub-block's sums are scaled in f32 afterwards:
 *
 *   Y[t][r] += s[r][b] * sum_{c in b} (code[r][c] - offset) X[t][c] + m[r][b] * sum_{c in b} X[t][c]
 *
 * which is kn_matmul_q's (and the oracle's) s * sum(q x) + m * sum(x) per sub-block, the
 * sums in the tensor cores' order. A = X (16 tokens a fragment, loaded from workgroup
 * memory as whole fragments), B = W (8 rows a fragment, built in registers from the codes:
 * lane (g = lane / 4, t = lane % 4) decodes row g's codes at k = 2t, 2t + 1, 2t + 8, 2t + 9
 * of each 16 columns). Every sub-block's products go into a fresh accumulator, whose 4
 * elements (tokens g, g + 8 x rows 2t, 2t + 1) are then added into the lane's f32 sums
 * with the rows' s and m. sum(x) comes from the same units: a product of the X fragment
 * with a B of ones (only for types with a min).
 *
 * A workgroup of warps_t x warps_r subgroups owns tile_t tokens x tile_r rows of Y; cols
 * is walked in chunks of 64 columns ring-buffered in workgroup memory, each arriving by
 * asynchronous copies issued stages - 1 chunks ahead (as matmul_pipe.c): X's rows and the
 * W planes' words of the tile's rows (lo and hi codes, kn_quant.h). The chunk's s and m
 * (f32, one per row and sub-block) are decoded from the scale planes one chunk ahead into
 * two slots: loaded at the top of a chunk's iteration, stored after its products, seen by
 * all after the next barrier. The parts of a stacked product (q, k, v of their own types)
 * each start on a whole tile, so a workgroup's rows are one part's: a uniform branch runs
 * that part's code. Rows past the part and tokens past n are clamped into the buffers and
 * never stored. */
#include "kernels/matmul_internal.h"
#include "kernels/quant_ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QM_KC 64       /* columns per chunk */
#define QM_PAD 8       /* dtype elements after each staged row of X */
#define QM_MAX_SPC 4   /* sub-blocks per chunk at most (sub 16) */
#define QM_MAX_ACC 64  /* accumulators per subgroup at most */
#define QM_MAX_ITEMS 4 /* scales an invocation decodes a chunk at most */


/* One W plane staged: bits per code, words per row of a chunk, the padded pitch. */
typedef struct qm_plane {
    uint32_t bits, words, pitch;
    uint64_t at; /* the plane's first word in the part's buffer */
} qm_plane;

typedef struct qm {
    mm m; /* X, Y, info, b, res, n, lid and the epilogue's helpers */
    qm_cfg g;
    uint32_t tile_t, tile_r, chunks, pitch_x, stage_x, stage_lo, stage_hi;
    ir_shm xs, wlo, whi, ss, ms;
    ir_type ta, tb, tc;
    ir_val t0, r0, sub_t, sub_r, lane_g, lane_t, zero_acc, ones;
} qm;

/* What a part's code needs: its layout, buffer and first row among the stacked rows. */
typedef struct qm_part {
    const kn_qlayout *L;
    const kn_qformat *f;
    ir_buf w;
    uint32_t first;
    qm_plane lo, hi;
    uint32_t spc; /* sub-blocks per chunk */
} qm_part;

static qm_plane plane_of(uint32_t bits, uint64_t at) {
    uint32_t words = QM_KC * bits / 32;
    return (qm_plane){bits, words, words + (words >= 8 ? 4 : 0), at}; /* 8 rows of a fragment in distinct banks */
}

static uint32_t shared_bytes(const qm_cfg *g, uint32_t lo_pitch, uint32_t hi_pitch) {
    uint32_t tt = g->warps_t * g->frags_t * 16, tr = g->warps_r * g->frags_r * 8;
    uint32_t x = tt * (QM_KC + QM_PAD) * 2, w = tr * (lo_pitch + hi_pitch) * 4;
    return g->stages * (x + w) + 2 * 2 * QM_MAX_SPC * tr * 4;
}

/* ---- the shape ----------------------------------------------------------------------------- */

/* The tiles tried, largest first: the largest whose grid still covers nine tenths of the
 * compute units (qwen3-0.6b's 1024-row products at 512 tokens take the second). */
static const qm_cfg tiles[] = {
    {2, 2, 4, 4, 4}, /* 128 tokens x 64 rows */
    {2, 2, 2, 4, 4}, /* 64 x 64 */
};

/* Short blocks (64 tokens at most, the plan's small blocks): one subgroup along tokens, so
 * each weight fragment is decoded once a workgroup, and narrow tiles, so the grid is wide;
 * the long rows (down's) take 32 rows by 64 tokens, the rest 64 by 32. Measured on the H100
 * (qwen3-8b Q4_K_M, a 24-token block): 27.6 ms with the 128 x 64 tile, 13.5 with 32 x 64
 * everywhere, 13.6 with 64 x 32; the split by row length was the best of each product. */
static const qm_cfg short_tiles[] = {
    {1, 4, 2, 2, 4}, /* 32 tokens x 64 rows */
    {1, 2, 4, 2, 4}, /* 64 x 32 */
};
#define QM_SHORT 64       /* the blocks short_tiles serve, in tokens */
#define QM_LONG_ROW 8192  /* columns from which a row is long */

/* A shape the kernel takes: tile_r * (sub-blocks a chunk: 2 or 4) a multiple of the
 * invocations and at most 4 of them each (the scales' items). */
static bool cfg_ok(const qm_cfg *g) {
    uint32_t warps = g->warps_t * g->warps_r, inv = warps * 32, tile_r = g->warps_r * g->frags_r * 8;
    return warps >= 1 && warps <= 8 && g->frags_t >= 1 && g->frags_t <= 8 && g->frags_r >= 1 && g->frags_r <= 8 &&
           g->frags_t * g->frags_r <= QM_MAX_ACC && g->stages >= 2 && g->stages <= 6 && (tile_r * 2) % inv == 0 &&
           tile_r <= inv;
}

/* KILN_MATMUL_Q_MMA=warps_t,warps_r,frags_t,frags_r,stages overrides the shape (measuring);
 * KILN_MATMUL_Q_MMA=0 turns the variant off. A malformed value is ignored. */
static bool env_cfg(qm_cfg *g) {
    const char *e = getenv("KILN_MATMUL_Q_MMA");
    if (e && strcmp(e, "0") == 0) return false;
    unsigned v[5];
    if (!e || sscanf(e, "%u,%u,%u,%u,%u", &v[0], &v[1], &v[2], &v[3], &v[4]) != 5) return true;
    qm_cfg want = {v[0], v[1], v[2], v[3], v[4]};
    if (cfg_ok(&want)) *g = want;
    return true;
}

bool kn_matmul_q_mma_pick(const rt_caps *c, const kn_qlayout *L, uint32_t n_parts, uint32_t rows, uint32_t cols,
                          uint32_t n_max, ir_scalar dt, qm_cfg *out) {
    if (c->backend != RT_CUDA || !c->async_copy || c->subgroup_size != 32 || cols % QM_KC) return false;
    bool shape = false;
    for (uint32_t i = 0; i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->mma[i];
        shape |= s->m == 16 && s->n == 8 && s->k == 16 && s->ab_type == (uint32_t)dt && s->acc_type == IR_F32;
    }
    size_t n_tiles = sizeof tiles / sizeof tiles[0], t = 0;
    uint64_t cu = c->compute_units ? c->compute_units : 1;
    for (; t + 1 < n_tiles; t++) {
        uint64_t tt = tiles[t].warps_t * tiles[t].frags_t * 16, tr = tiles[t].warps_r * tiles[t].frags_r * 8;
        if ((rows + tr - 1) / tr * ((n_max + tt - 1) / tt) * 10 >= cu * 9) break;
    }
    qm_cfg g = n_max <= QM_SHORT ? short_tiles[cols >= QM_LONG_ROW] : tiles[t];
    if (!shape || !env_cfg(&g)) return false;
    uint32_t tile_r = g.warps_r * g.frags_r * 8, lo = 0, hi = 0;
    for (uint32_t p = 0; p < n_parts; p++) {
        const kn_qformat *f = kn_qformat_of(L[p].type);
        if (p + 1 < n_parts && L[p].rows % tile_r) return false; /* every part starts on a whole tile */
        uint32_t pl = plane_of(f->lo_bits, 0).pitch, ph = f->hi_bits ? plane_of(f->hi_bits, 0).pitch : 0;
        lo = pl > lo ? pl : lo, hi = ph > hi ? ph : hi;
    }
    if (c->max_workgroup && g.warps_t * g.warps_r * 32 > c->max_workgroup) return false;
    while (g.stages > 2 && c->shared_bytes && shared_bytes(&g, lo, hi) > c->shared_bytes) g.stages--;
    if (c->shared_bytes && shared_bytes(&g, lo, hi) > c->shared_bytes) return false;
    *out = g;
    return true;
}

/* ---- staging ------------------------------------------------------------------------------- */

/* One plane's words of chunk `chunk` for the tile's rows into ring slot `slot`. */
static void issue_plane(const qm *q, const qm_part *p, const qm_plane *pl, ir_shm dst, uint32_t stage, ir_val chunk,
                        ir_val slot) {
    kx k = q->m.k;
    uint32_t count = pl->words < 4 ? pl->words : 4, per_row = pl->words / count, n = q->tile_r * per_row;
    uint32_t wg = q->m.invocations, row_words = q->m.cols * pl->bits / 32;
    ir_val first = kx_sub_c(k, q->r0, p->first), limit = kx_u32(k, (uint32_t)(pl->at + (uint64_t)p->L->rows * row_words));
    ir_val col_words = kx_mul_c(k, chunk, pl->words), dst0 = kx_mul_c(k, slot, stage);
    for (uint32_t j = 0; j * wg < n; j++) {
        ir_val i = kx_add_c(k, q->m.lid, j * wg);
        ir_if *f = (j + 1) * wg <= n ? NULL : kx_if(k, kx_lt_c(k, i, n));
        ir_val row = kx_div_c(k, i, per_row), piece = kx_mul_c(k, kx_rem_c(k, i, per_row), count);
        ir_val src_row = kx_min_c(k, kx_add(k, first, row), p->L->rows - 1);
        ir_val src = kx_add_c(k, kx_mul_c(k, src_row, row_words), (uint32_t)pl->at);
        src = kx_add(k, kx_add(k, src, col_words), piece);
        ir_val at = kx_add(k, kx_mul_c(k, row, pl->pitch), piece);
        ir_async_copy(k.ir, dst, kx_add(k, dst0, at), p->w, src, count, limit);
        if (f) kx_end_if(k, f);
    }
}

static void issue_chunk(const qm *q, const qm_part *p, ir_val chunk) {
    kx k = q->m.k;
    ir_val slot = kx_rem_c(k, chunk, q->g.stages);
    mm_stage ox = {q->m.x, q->xs, q->tile_t, q->m.n_max - 1, q->stage_x, QM_KC, q->pitch_x, MM_ROWS, q->t0, 0};
    mm_issue_stage(&q->m, &ox, chunk, slot);
    issue_plane(q, p, &p->lo, q->wlo, q->stage_lo, chunk, slot);
    if (p->f->hi_bits) issue_plane(q, p, &p->hi, q->whi, q->stage_hi, chunk, slot);
}

/* ---- the scales, one chunk ahead ------------------------------------------------------------ */

/* Item j of this invocation's share of a chunk's scales: sub-block i / tile_r of row
 * i % tile_r, i = lid + j * invocations (tile_r * spc is a multiple of the invocations). */
typedef struct qm_scales {
    uint32_t n;
    ir_val si[QM_MAX_ITEMS], raw[QM_MAX_ITEMS][KN_Q_SCALE_WORDS];
} qm_scales;

static uint32_t scale_items(const qm *q, const qm_part *p) { return q->tile_r * p->spc / q->m.invocations; }

/* The words holding chunk `chunk`'s scales (their loads in flight until decode_scales). */
static qm_scales load_scales(const qm *q, const qm_part *p, ir_val chunk) {
    kx k = q->m.k;
    qm_scales sc = {scale_items(q, p)};
    uint32_t per_row = q->m.cols / p->f->sub;
    ir_val first = kx_sub_c(k, q->r0, p->first), chunk_sub = kx_mul_c(k, chunk, p->spc);
    for (uint32_t j = 0; j < sc.n; j++) {
        ir_val i = kx_add_c(k, q->m.lid, j * q->m.invocations);
        ir_val b = kx_div_c(k, i, q->tile_r), row = kx_rem_c(k, i, q->tile_r);
        ir_val src_row = kx_min_c(k, kx_add(k, first, row), p->L->rows - 1);
        ir_val sub = kx_add(k, chunk_sub, b);
        sc.si[j] = kx_add(k, kx_mul_c(k, src_row, per_row), sub);
        kn_q_scale_load(k, p->L, p->w, sc.si[j], sc.raw[j]);
    }
    return sc;
}

/* s and m from the words, into scale slot `slot` ([slot][sub-block][row]). */
static void store_scales(const qm *q, const qm_part *p, const qm_scales *sc, ir_val slot) {
    kx k = q->m.k;
    ir_val slot0 = kx_mul_c(k, slot, QM_MAX_SPC * q->tile_r);
    for (uint32_t j = 0; j < sc->n; j++) {
        ir_val s, m, at = kx_add(k, slot0, kx_add_c(k, q->m.lid, j * q->m.invocations));
        kn_q_scale_decode(k, p->L, sc->si[j], sc->raw[j], &s, &m);
        kx_shm_store(k, q->ss, at, s);
        if (m != IR_NONE) kx_shm_store(k, q->ms, at, m);
    }
}

/* The scales' values as loop-carried values (pack: into v from *n on; unpack: back). */
static void scales_pack(const qm_scales *sc, ir_val *v, uint32_t *n) {
    for (uint32_t j = 0; j < sc->n; j++) {
        v[(*n)++] = sc->si[j];
        for (uint32_t w = 0; w < KN_Q_SCALE_WORDS; w++)
            if (sc->raw[j][w] != IR_NONE) v[(*n)++] = sc->raw[j][w];
    }
}

static void scales_unpack(qm_scales *sc, const ir_val *v, uint32_t *n) {
    for (uint32_t j = 0; j < sc->n; j++) {
        sc->si[j] = v[(*n)++];
        for (uint32_t w = 0; w < KN_Q_SCALE_WORDS; w++)
            if (sc->raw[j][w] != IR_NONE) sc->raw[j][w] = v[(*n)++];
    }
}

/* ---- the products -------------------------------------------------------------------------- */

/* Two codes (k = 2t + base, + 1 of row g) of a plane: bits 2 * bits wide. */
static ir_val code_pair(const qm *q, const qm_plane *pl, ir_shm s, ir_val row_at, uint32_t kcol) {
    kx k = q->m.k;
    ir_val bit = kx_add_c(k, kx_mul_c(k, q->lane_t, 2 * pl->bits), kcol * pl->bits);
    ir_val word = kx_shm_load(k, s, kx_add(k, row_at, kx_shr_c(k, bit, 5)), 1);
    ir_val v = kx_shr(k, word, kx_and_c(k, bit, 31));
    return 2 * pl->bits == 32 ? v : kx_and_c(k, v, (1u << (2 * pl->bits)) - 1);
}

/* w_frag for codes wider than the magic float's mantissa (Q8_0 in bf16, no high bits):
 * each code - offset made an f32 (exact), then dtype (exact: at most 8 bits). */
static ir_val w_frag_wide(const qm *q, const qm_part *p, ir_val lo_at, uint32_t kc) {
    kx k = q->m.k;
    uint32_t bl = p->lo.bits;
    ir_val e[4];
    for (uint32_t h = 0; h < 2; h++) {
        ir_val lo = code_pair(q, &p->lo, q->wlo, lo_at, kc + 8 * h), c[2];
        c[0] = kx_and_c(k, lo, (1u << bl) - 1), c[1] = kx_shr_c(k, lo, bl);
        for (uint32_t i = 0; i < 2; i++) {
            ir_val f = kx_bitcast(k, kx_or(k, c[i], kx_u32(k, 0x4b000000u)), kx_t(k, IR_F32, 1));
            ir_val v = kx_sub(k, f, kx_f32(k, 8388608.0f + (float)p->f->offset));
            e[2 * h + i] = ir_convert_exact(k.ir, v, kx_t(k, q->m.dtype, 1));
        }
    }
    return ir_frag_from_elems(k.ir, q->tb, kx_vec(k, e, 4), IR_NONE);
}

/* The B fragment of 8 rows (row 8j + g of the subgroup's) at the chunk's 16 columns from
 * kc: each register two adjacent codes (k = 2t, 2t + 1; then 2t + 8, 2t + 9) OR-ed into
 * the halves of a magic pair (2^7 + code in bf16, 2^10 + code in f16, exact), less the
 * magic plus the offset (frag.pair_sub: exact small integers). */
static ir_val w_frag(const qm *q, const qm_part *p, ir_val slot, uint32_t j, uint32_t kc) {
    kx k = q->m.k;
    ir_val row = kx_add(k, q->sub_r, kx_add_c(k, q->lane_g, 8 * j));
    ir_val lo_at = kx_add(k, kx_mul_c(k, slot, q->stage_lo), kx_mul_c(k, row, p->lo.pitch)), hi_at = IR_NONE;
    if (p->f->hi_bits) hi_at = kx_add(k, kx_mul_c(k, slot, q->stage_hi), kx_mul_c(k, row, p->hi.pitch));
    uint32_t bl = p->lo.bits, bh = p->hi.bits, magic = q->m.dtype == IR_BF16 ? 0x4300u : 0x6400u;
    uint32_t z = magic + p->f->offset;
    if (bl + bh > (q->m.dtype == IR_BF16 ? 7u : 10u)) return w_frag_wide(q, p, lo_at, kc);
    ir_val e[2];
    for (uint32_t h = 0; h < 2; h++) { /* k = 2t, 2t + 1, then 2t + 8, 2t + 9 */
        ir_val lo = code_pair(q, &p->lo, q->wlo, lo_at, kc + 8 * h);
        /* code 0 at bit 0, code 1 at bit 16 */
        ir_val c0 = kx_and_c(k, lo, (1u << bl) - 1);
        ir_val v = kx_or(k, c0, kx_and_c(k, kx_shl_c(k, lo, 16 - bl), ((1u << bl) - 1) << 16));
        if (bh) {
            ir_val hi = code_pair(q, &p->hi, q->whi, hi_at, kc + 8 * h);
            ir_val h0 = kx_and_c(k, kx_shl_c(k, hi, bl), ((1u << bh) - 1) << bl);
            ir_val h1 = kx_and_c(k, kx_shl_c(k, hi, 16 + bl - bh), ((1u << bh) - 1) << (16 + bl));
            v = kx_or(k, v, kx_or(k, h0, h1));
        }
        v = kx_or(k, v, kx_u32(k, magic | magic << 16));
        e[h] = ir_frag_pair_sub(k.ir, q->m.dtype, v, kx_u32(k, z | z << 16));
    }
    return ir_frag_from_elems(k.ir, q->tb, kx_vec(k, e, 2), IR_NONE);
}

/* (v[0], v[1], v[0], v[1]): a pair of rows' values over an accumulator's elements */
static ir_val rows_vec(kx k, ir_val pair) {
    ir_val v0 = kx_lane(k, pair, 0), v1 = kx_lane(k, pair, 1), e[4] = {v0, v1, v0, v1};
    return kx_vec(k, e, 4);
}

static void chunk_math(const qm *q, const qm_part *p, ir_val slot, ir_val sslot, ir_val *acc) {
    kx k = q->m.k;
    const qm_cfg *g = &q->g;
    uint32_t ks = p->f->sub / 16; /* 16-column products per sub-block */
    ir_val xb = kx_add(k, kx_mul_c(k, slot, q->stage_x), kx_mul_c(k, q->sub_t, q->pitch_x));
    ir_val pitch = kx_u32(k, q->pitch_x);
    ir_val s_at = kx_add(k, kx_mul_c(k, sslot, QM_MAX_SPC * q->tile_r), kx_add(k, q->sub_r, kx_shl_c(k, q->lane_t, 1)));
    for (uint32_t b = 0; b < p->spc; b++) {
        ir_val a[8][2], w[8][2], sv[8], mv[8], xsum[8];
        for (uint32_t i = 0; i < g->frags_t; i++)
            for (uint32_t h = 0; h < ks; h++)
                a[i][h] = ir_frag_load(k.ir, q->ta, true, q->xs, kx_add_c(k, xb, i * 16 * q->pitch_x + (b * ks + h) * 16),
                                       pitch, true);
        for (uint32_t j = 0; j < g->frags_r; j++) {
            for (uint32_t h = 0; h < ks; h++) w[j][h] = w_frag(q, p, slot, j, (b * ks + h) * 16);
            ir_val at = kx_add_c(k, s_at, b * q->tile_r + 8 * j);
            sv[j] = rows_vec(k, kx_shm_load(k, q->ss, at, 2));
            if (p->f->has_min) mv[j] = rows_vec(k, kx_shm_load(k, q->ms, at, 2));
        }
        if (p->f->has_min)
            for (uint32_t i = 0; i < g->frags_t; i++) { /* the tokens' sums of x: (g, g, g + 8, g + 8) */
                ir_val s = q->zero_acc;
                for (uint32_t h = 0; h < ks; h++) s = ir_frag_mma(k.ir, a[i][h], q->ones, s);
                xsum[i] = ir_frag_elems(k.ir, s);
            }
        for (uint32_t i = 0; i < g->frags_t; i++)
            for (uint32_t j = 0; j < g->frags_r; j++) {
                ir_val d = q->zero_acc, *c = &acc[i * g->frags_r + j];
                for (uint32_t h = 0; h < ks; h++) d = ir_frag_mma(k.ir, a[i][h], w[j][h], d);
                *c = kx_fma(k, ir_frag_elems(k.ir, d), sv[j], *c);
                if (p->f->has_min) *c = kx_fma(k, xsum[i], mv[j], *c);
            }
    }
}

/* The ring (prologue, then one loop over the chunks), for one part. The scales run ahead
 * of the math: chunk c + 2's words are loaded during chunk c's iteration and carried into
 * the next, where chunk c + 1's (loaded an iteration before) are decoded into their slot
 * after the products (past the last chunk, the last chunk's again: a slot no one reads). */
static void run_part(const qm *q, const qm_part *p, ir_val *acc, uint32_t n_acc) {
    kx k = q->m.k;
    uint32_t s = q->g.stages, last = q->chunks - 1;
    for (uint32_t c = 0; c + 1 < s; c++) {
        if (c < q->chunks) issue_chunk(q, p, kx_u32(k, c));
        ir_async_commit(k.ir); /* empty groups keep the count uniform */
    }
    qm_scales first = load_scales(q, p, kx_u32(k, 0));
    store_scales(q, p, &first, kx_u32(k, 0));
    qm_scales ahead = load_scales(q, p, kx_u32(k, q->chunks > 1 ? 1 : 0));
    ir_val init[QM_MAX_ACC + QM_MAX_ITEMS * (KN_Q_SCALE_WORDS + 1)], cur[QM_MAX_ACC + QM_MAX_ITEMS * (KN_Q_SCALE_WORDS + 1)];
    uint32_t n_init = n_acc;
    memcpy(init, acc, n_acc * sizeof *acc);
    scales_pack(&ahead, init, &n_init);
    ir_for *l = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, q->chunks), kx_u32(k, 1), n_init, init);
    for (uint32_t i = 0; i < n_init; i++) cur[i] = ir_for_arg(l, i);
    uint32_t at = n_acc;
    scales_unpack(&ahead, cur, &at); /* chunk c + 1's words */
    ir_val c = ir_for_iv(l);
    ir_async_wait(k.ir, s - 2);
    kx_barrier(k); /* chunk c and its scales are everyone's; chunk c - 1's slots are free */
    ir_val next = kx_add_c(k, c, s - 1);
    ir_if *f = kx_if(k, kx_lt_c(k, next, q->chunks));
    issue_chunk(q, p, next);
    kx_end_if(k, f);
    ir_async_commit(k.ir);
    qm_scales after = load_scales(q, p, kx_min_c(k, kx_add_c(k, c, 2), last));
    ir_val sslot = kx_and_c(k, c, 1);
    chunk_math(q, p, kx_rem_c(k, c, s), sslot, cur);
    store_scales(q, p, &ahead, kx_xor(k, sslot, kx_u32(k, 1)));
    uint32_t n_next = n_acc;
    scales_pack(&after, cur, &n_next);
    ir_for_end(k.ir, l, cur);
    for (uint32_t i = 0; i < n_acc; i++) acc[i] = ir_for_result(l, i);
}

/* Each lane's elements straight to Y: tokens g, g + 8 of each token fragment, rows 2t, 2t + 1
 * of each row fragment (a pair of rows in one store where rows is even). */
static void epilogue(const qm *q, const ir_val *acc) {
    kx k = q->m.k;
    const mm *m = &q->m;
    const qm_cfg *g = &q->g;
    bool pairs = m->rows % 2 == 0;
    for (uint32_t i = 0; i < g->frags_t; i++)
        for (uint32_t j = 0; j < g->frags_r; j++) {
            ir_val e = acc[i * g->frags_r + j];
            ir_val r = kx_add(k, kx_add(k, q->r0, q->sub_r), kx_add_c(k, kx_shl_c(k, q->lane_t, 1), 8 * j));
            for (uint32_t h = 0; h < 2; h++) {
                ir_val t = kx_add(k, kx_add(k, q->t0, q->sub_t), kx_add_c(k, q->lane_g, 16 * i + 8 * h));
                ir_val v[2] = {kx_lane(k, e, 2 * h), kx_lane(k, e, 2 * h + 1)};
                if (pairs) {
                    ir_if *f = kx_if(k, mm_exists(m, t, r));
                    mm_store_y(m, t, r, v, 2);
                    kx_end_if(k, f);
                    continue;
                }
                for (uint32_t l = 0; l < 2; l++) {
                    ir_val rl = kx_add_c(k, r, l);
                    ir_if *f = kx_if(k, mm_exists(m, t, rl));
                    mm_store_y(m, t, rl, &v[l], 1);
                    kx_end_if(k, f);
                }
            }
        }
}

/* The part whose rows start the workgroup's tile: a uniform branch per part. */
static void parts_run(const qm *q, qm_part *parts, uint32_t n_parts, ir_val *acc, uint32_t n_acc) {
    kx k = q->m.k;
    if (n_parts == 1) {
        run_part(q, parts, acc, n_acc);
        return;
    }
    ir_if *f = ir_if_begin(k.ir, kx_lt_c(k, q->r0, parts[1].first), n_acc);
    ir_val a[QM_MAX_ACC], b[QM_MAX_ACC];
    memcpy(a, acc, n_acc * sizeof *a);
    run_part(q, parts, a, n_acc);
    ir_if_else(k.ir, f, a);
    memcpy(b, acc, n_acc * sizeof *b);
    parts_run(q, parts + 1, n_parts - 1, b, n_acc);
    ir_if_end(k.ir, f, b);
    for (uint32_t i = 0; i < n_acc; i++) acc[i] = ir_if_result(f, i);
}

static const char *const part_names[KN_Q_PARTS] = {"W", "W1", "W2"};

ir_kernel *kn_matmul_q_mma(const rt_caps *c, const kn_qlayout *L, uint32_t n_parts, uint32_t rows, uint32_t cols,
                           uint32_t n_max, ir_scalar dtype, unsigned epi, const qm_cfg *cfg, uint32_t groups[2],
                           kiln_err *err) {
    qm q = {.g = *cfg};
    const qm_cfg *g = &q.g;
    q.m = (mm){.k = {kn_create("kn_matmul_q_mma", err), c}, .rows = rows, .cols = cols, .n_max = n_max,
               .dtype = dtype, .epi = epi};
    kx k = q.m.k;
    if (!k.ir) return NULL;
    mm *m = &q.m;
    qm_part parts[KN_Q_PARTS];
    uint32_t first = 0, lo_pitch = 0, hi_pitch = 0;
    for (uint32_t i = 0; i < n_parts; i++) {
        const kn_qformat *f = kn_qformat_of(L[i].type);
        parts[i] = (qm_part){&L[i], f, kx_buffer(k, part_names[i], IR_U32, IR_READ, L[i].words), first,
                             plane_of(f->lo_bits, L[i].lo), plane_of(f->hi_bits, L[i].hi), QM_KC / f->sub};
        first += L[i].rows;
        lo_pitch = parts[i].lo.pitch > lo_pitch ? parts[i].lo.pitch : lo_pitch;
        hi_pitch = parts[i].hi.pitch > hi_pitch ? parts[i].hi.pitch : hi_pitch;
    }
    bool f32 = epi & KN_EPI_F32;
    m->x = kx_buffer(k, "X", dtype, IR_READ, (uint64_t)n_max * cols);
    m->y = kx_buffer(k, "Y", f32 ? IR_F32 : dtype, IR_WRITE, (uint64_t)n_max * rows);
    m->info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    if (epi & KN_EPI_BIAS) m->b = kx_buffer(k, "b", dtype, IR_READ, rows);
    if (epi & KN_EPI_RESIDUAL) m->res = kx_buffer(k, "res", dtype, IR_READ, (uint64_t)n_max * rows);
    q.tile_t = g->warps_t * g->frags_t * 16, q.tile_r = g->warps_r * g->frags_r * 8;
    q.chunks = cols / QM_KC;
    q.pitch_x = QM_KC + QM_PAD, q.stage_x = q.tile_t * q.pitch_x;
    q.stage_lo = q.tile_r * lo_pitch, q.stage_hi = q.tile_r * hi_pitch;
    m->invocations = g->warps_t * g->warps_r * 32;
    kx_workgroup(k, m->invocations);
    m->lid = kx_local(k);
    ir_grid_wait(k.ir);
    m->n = kx_min(k, kx_load_c(k, m->info, 1), kx_u32(k, n_max));
    q.xs = kx_shared(k, "xs", dtype, g->stages * q.stage_x);
    q.wlo = kx_shared(k, "wlo", IR_U32, g->stages * q.stage_lo);
    q.whi = hi_pitch ? kx_shared(k, "whi", IR_U32, g->stages * q.stage_hi) : 0;
    q.ss = kx_shared(k, "ss", IR_F32, 2 * QM_MAX_SPC * q.tile_r);
    q.ms = kx_shared(k, "ms", IR_F32, 2 * QM_MAX_SPC * q.tile_r);
    q.ta = ir_t_frag(k.ir, IR_FRAG_A, dtype, 16, 8, 16);
    q.tb = ir_t_frag(k.ir, IR_FRAG_B, dtype, 16, 8, 16);
    q.tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, 16, 8, 16);
    ir_val sid = kx_sg_id(k), lane = kx_sg_lane(k);
    q.lane_g = kx_shr_c(k, lane, 2), q.lane_t = kx_and_c(k, lane, 3);
    q.t0 = kx_group_times(k, 1, q.tile_t);
    q.r0 = kx_group_times(k, 0, q.tile_r);
    q.sub_t = kx_mul_c(k, kx_div_c(k, sid, g->warps_r), g->frags_t * 16);
    q.sub_r = kx_mul_c(k, kx_rem_c(k, sid, g->warps_r), g->frags_r * 8);
    q.zero_acc = ir_frag_fill(k.ir, q.tc, kx_f32(k, 0.0f));
    ir_val one = ir_convert_exact(k.ir, kx_f32(k, 1.0f), kx_t(k, dtype, 1)), ones[4] = {one, one, one, one};
    q.ones = ir_frag_from_elems(k.ir, q.tb, kx_vec(k, ones, 4), IR_NONE);

    ir_if *live = kx_if(k, kx_lt(k, q.t0, m->n)); /* uniform: group id and a loaded value */
    uint32_t n_acc = g->frags_t * g->frags_r;
    ir_val acc[QM_MAX_ACC], zero = kx_splat(k, kx_f32(k, 0.0f), 4);
    for (uint32_t i = 0; i < n_acc; i++) acc[i] = zero;
    parts_run(&q, parts, n_parts, acc, n_acc);
    epilogue(&q, acc);
    kx_end_if(k, live);
    groups[0] = (rows + q.tile_r - 1) / q.tile_r;
    groups[1] = (n_max + q.tile_t - 1) / q.tile_t;
    return kn_finish(k.ir, err);
}
