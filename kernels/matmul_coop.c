/* The prefill product on cooperative matrices (kn_matmul's variant where the caps offer a
 * dtype x dtype -> f32 fragment shape but no asynchronous copies: Vulkan). A = the X chunk
 * (tokens x k, row-major), B[k][n] = W[r0 + n][c0 + k] (the W chunk read column-major).
 * Chunks of columns are staged in dtype through workgroup memory (the cols tail
 * zero-padded to K), rows padded by 8 elements (16 bytes) against bank conflicts. Two
 * tiles:
 *
 *   small: 64 x 64 a workgroup of 4 subgroups (2 x 2), each 32 tokens x 32 rows, chunks of
 *   64 columns (fewer where caps.shared_bytes is smaller), one chunk staged at a time;
 *
 *   large: 128 x 128 a workgroup of 8 subgroups (2 along tokens x 4 along rows), each 64
 *   tokens x 32 rows, chunks of 32 columns with the next chunk's loads in flight (in
 *   registers) during the math. Each staged value feeds twice the products of the small
 *   tile's, and W's rows are read from memory half as often. Taken where its grid still
 *   fills the device's compute units (a product of few outputs keeps the small tile).
 *
 * The sums leave through an f32 array of workgroup memory, a region per subgroup, one
 * round per band of its tokens (the large tile's whole sums would not fit 48 KiB), so
 * every invocation applies the epilogue to its share with plain (vector) stores.
 *
 * On the H200 (qwen3-0.6b's projections, n = 512) the small tile did 70-77 TFLOP/s in bf16,
 * ~100 in f16. On an H100's Vulkan (NVIDIA 580.159.04, bf16) `kiln probe --measure`'s
 * product did 72.6 TFLOP/s with the small tile, 114 with the large; qwen3-8b pp512 4,616
 * and 7,416 tok/s. Where VK_NV_cooperative_matrix2 is offered, matmul_coop2.c comes first
 * (156 TFLOP/s, 8,934 tok/s there). KILN_MATMUL_COOP=small|large forces a tile
 * (measuring). */
#include "kernels/matmul_internal.h"

#include <stdlib.h>
#include <string.h>

#define COOP_PAD 8                 /* dtype elements after each staged row */
#define COOP_LARGE_BY_DEFAULT true /* measured: bench/results/2026-12-07-sessions48-49.md */
#define OUT_PAD 4                  /* f32 words after each row of a subgroup's sums */

typedef struct coop_tile {
    uint32_t sg_t, sg_r;   /* subgroups along tokens and rows */
    uint32_t sub_t, sub_r; /* tokens and rows per subgroup */
    uint32_t kc_max;       /* the widest chunk tried */
    uint32_t kc_min;       /* the narrowest (the large tile's barriers cost too much below 32) */
    uint32_t band;         /* tokens of a subgroup's sums stored per output round */
    bool pipelined;        /* the next chunk's loads in flight during the math */
} coop_tile;

static const coop_tile SMALL = {2, 2, 32, 32, 64, 16, 32, false};
static const coop_tile LARGE = {2, 4, 64, 32, 32, 32, 16, true};

static uint32_t tile_t(const coop_tile *t) { return t->sg_t * t->sub_t; }
static uint32_t tile_r(const coop_tile *t) { return t->sg_r * t->sub_r; }
static uint32_t subgroups(const coop_tile *t) { return t->sg_t * t->sg_r; }

/* The staged chunks, the sums' rounds of band tokens, and a quantized W's scales and mins
 * (f32, a pair per row and sub-step of q_step columns; q_step 0: plain W). */
static uint32_t shared_bytes(const coop_tile *t, uint32_t kc, uint32_t band, uint32_t q_step) {
    uint32_t staged = (tile_t(t) + tile_r(t)) * (kc + COOP_PAD) * 2u;
    uint32_t scales = q_step ? 2u * 4u * (kc / q_step) * tile_r(t) : 0;
    return staged + subgroups(t) * band * (t->sub_r + OUT_PAD) * 4u + scales;
}

/* The fragment shape: dtype x dtype -> f32 with M and N dividing 32 and K dividing 64,
 * 16x16x16 first (the caps list only shapes the device's kernels can use: the Vulkan probe
 * checks the component types' features; --caps no-f16/no-bf16 drop their shapes). */
static const rt_mma_shape *pick_shape(const rt_caps *c, ir_scalar dt) {
    const rt_mma_shape *best = NULL;
    for (uint32_t i = 0; i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->mma[i];
        if (s->ab_type != (uint32_t)dt || s->acc_type != IR_F32) continue;
        /* M, N in 8..32 (at most 4 x 4 fragments per subgroup); K >= 8: 16-byte steps */
        if (s->m < 8 || s->n < 8 || s->k < 8 || 32 % s->m || 32 % s->n || 64 % s->k) continue;
        if (s->m == 16 && s->n == 16 && s->k == 16) return s;
        if (!best) best = s;
    }
    return best;
}

/* The widest chunk (kc_max down to the fragments' K and kc_min; a quantized W's whole
 * KN_Q_CHUNK at least) the tile's staging and sums fit caps.shared_bytes with, the sums
 * in rounds of the tile's band of tokens or, where that is too big, half of it (a device
 * with less workgroup memory: lavapipe's emulated fragments); 0 where none does, or where
 * its workgroup is too big. */
static uint32_t fit(const rt_caps *c, const coop_tile *t, const rt_mma_shape *s, uint32_t q_step, uint32_t *band) {
    uint32_t inv = subgroups(t) * c->subgroup_size, kc_min = q_step ? 32 : t->kc_min;
    if (inv > 1024 || (c->max_workgroup && inv > c->max_workgroup)) return 0;
    if (t->band % s->m || t->sub_t % s->m || t->sub_r % s->n) return 0;
    if (t->sub_t / s->m > 4 || t->sub_r / s->n > 4) return 0; /* the math's 4 x 4 fragments at most */
    for (uint32_t b = t->band; b >= s->m && b % s->m == 0; b /= 2)
        for (uint32_t kc = t->kc_max; kc >= s->k && kc >= kc_min; kc /= 2)
            if (!c->shared_bytes || shared_bytes(t, kc, b, q_step) <= c->shared_bytes) return *band = b, kc;
    return 0;
}

/* KILN_MATMUL_COOP: "small" or "large" forces that tile where it fits; anything else is
 * ignored. */
static const coop_tile *forced(void) {
    const char *e = getenv("KILN_MATMUL_COOP");
    if (!e) return NULL;
    return !strcmp(e, "small") ? &SMALL : !strcmp(e, "large") ? &LARGE : NULL;
}

bool mm_coop_pick(const rt_caps *c, ir_scalar dt, uint32_t rows, uint32_t n_max, mm_coop_cfg *cfg) {
    return mm_coop_pick_q(c, dt, rows, n_max, 0, cfg);
}

bool mm_coop_pick_q(const rt_caps *c, ir_scalar dt, uint32_t rows, uint32_t n_max, uint32_t q_step,
                    mm_coop_cfg *cfg) {
    if (!c->n_mma || !c->subgroup_size) return false;
    const rt_mma_shape *s = pick_shape(c, dt);
    if (!s || (q_step && (s->m != 16 || s->n != 16 || s->k != 16 || q_step % s->k))) return false;
    const coop_tile *want = forced(), *t = want ? want : COOP_LARGE_BY_DEFAULT ? &LARGE : &SMALL;
    uint32_t band = 0, kc = fit(c, t, s, q_step, &band);
    /* the large tile where its grid fills the compute units (unknown: where it has 64
     * workgroups) */
    uint64_t grid = (uint64_t)((rows + tile_r(t) - 1) / tile_r(t)) * (n_max / tile_t(t) + (n_max % tile_t(t) != 0));
    uint32_t units = c->compute_units ? c->compute_units : 64;
    if (!want && t == &LARGE && kc && grid < units) kc = 0;
    if (!kc) t = &SMALL, kc = fit(c, t, s, q_step, &band);
    if (!kc) return false;
    cfg->shape = s, cfg->tile = t, cfg->kc = kc, cfg->band = band;
    return true;
}

typedef struct coop_ctx {
    const coop_tile *tile;
    ir_shm xs, ws;                   /* the staged chunks: tokens x cols, rows x cols */
    ir_type ta, tb;                  /* the A and B fragments */
    ir_val sub_t0, sub_r0;           /* the subgroup's first token and row in the tile */
    uint32_t frag_m, frag_n, frag_k; /* the fragments' shape */
    uint32_t frags_m, frags_n;       /* fragments per subgroup along tokens and rows */
    uint32_t row_stride;             /* of the staged chunks, in elements */
    const mm_coop_q *q;              /* a quantized W's scales, or NULL */
    ir_type tc;                      /* the accumulators */
    ir_val zero, ones;               /* an accumulator of 0, a B of 1 (quantized) */
    uint32_t tile_rows;
} coop_ctx;

/* fragment (16-bit) from the staged chunk: X's row-major rows from token row0, or W's rows
 * from row0 as B's columns */
static ir_val staged(const mm *m, const coop_ctx *q, bool x, ir_val row0, uint32_t col) {
    kx k = m->k;
    ir_val st = kx_u32(k, q->row_stride), at = kx_add_c(k, kx_mul(k, row0, st), col);
    return ir_frag_load(k.ir, x ? q->ta : q->tb, true, x ? q->xs : q->ws, at, st, x);
}

/* A quantized W's chunk (codes less their offset, exact in the 16-bit type; see
 * mm_coop_q): per sub-step of q->step columns a fresh product of X and the codes, then
 * acc += d * s + xs * m element by element, s and m broadcast down the tokens (loaded with
 * stride 0 from the staged [sub-step][row] arrays) and xs the tokens' sums of x over the
 * sub-step (X times a B of ones). The contract's s * sum(q x) + m * sum(x) per sub-block in
 * another order: matmul_q.c's sums. */
static void coop_math_q(const mm *m, const void *p, ir_val *acc, uint32_t n_cols) {
    const coop_ctx *q = p;
    const mm_coop_q *z = q->q;
    kx k = m->k;
    uint32_t hs = z->step / q->frag_k;
    ir_val zero_stride = kx_u32(k, 0);
    for (uint32_t s0 = 0; s0 < n_cols; s0 += z->step) {
        ir_val a[4][2], b[4][2], sc[4], mn[4], xs[4];
        for (uint32_t i = 0; i < q->frags_m; i++)
            for (uint32_t h = 0; h < hs; h++)
                a[i][h] = staged(m, q, true, kx_add_c(k, q->sub_t0, i * q->frag_m), s0 + h * q->frag_k);
        for (uint32_t j = 0; j < q->frags_n; j++) {
            ir_val r = kx_add_c(k, q->sub_r0, j * q->frag_n), at = kx_add_c(k, r, s0 / z->step * q->tile_rows);
            for (uint32_t h = 0; h < hs; h++) b[j][h] = staged(m, q, false, r, s0 + h * q->frag_k);
            sc[j] = ir_frag_load(k.ir, q->tc, true, z->ss, at, zero_stride, true);
            if (z->has_min) mn[j] = ir_frag_load(k.ir, q->tc, true, z->ms, at, zero_stride, true);
        }
        for (uint32_t i = 0; z->has_min && i < q->frags_m; i++) {
            xs[i] = q->zero;
            for (uint32_t h = 0; h < hs; h++) xs[i] = ir_frag_mma(k.ir, a[i][h], q->ones, xs[i]);
        }
        for (uint32_t i = 0; i < q->frags_m; i++)
            for (uint32_t j = 0; j < q->frags_n; j++) {
                ir_val d = q->zero, *c = &acc[i * q->frags_n + j];
                for (uint32_t h = 0; h < hs; h++) d = ir_frag_mma(k.ir, a[i][h], b[j][h], d);
                *c = ir_frag_mul_add(k.ir, d, sc[j], *c);
                if (z->has_min) *c = ir_frag_mul_add(k.ir, xs[i], mn[j], *c);
            }
    }
}

/* The subgroup's fragments over a staged chunk: acc[i][j] += A_i x B_j per K columns. */
static void coop_math(const mm *m, const void *p, ir_val *acc, uint32_t n_cols) {
    const coop_ctx *q = p;
    kx k = m->k;
    ir_val st = kx_u32(k, q->row_stride);
    for (uint32_t kk = 0; kk < n_cols; kk += q->frag_k) {
        ir_val a[4], b[4];
        for (uint32_t i = 0; i < q->frags_m; i++) { /* X rows: row-major */
            ir_val col = kx_u32(k, kk), at = kx_add(k, kx_mul(k, kx_add_c(k, q->sub_t0, i * q->frag_m), st), col);
            a[i] = ir_frag_load(k.ir, q->ta, true, q->xs, at, st, true);
        }
        for (uint32_t j = 0; j < q->frags_n; j++) { /* W rows are B's columns */
            ir_val col = kx_u32(k, kk), at = kx_add(k, kx_mul(k, kx_add_c(k, q->sub_r0, j * q->frag_n), st), col);
            b[j] = ir_frag_load(k.ir, q->tb, true, q->ws, at, st, false);
        }
        for (uint32_t i = 0; i < q->frags_m; i++)
            for (uint32_t j = 0; j < q->frags_n; j++) {
                ir_val *c = &acc[i * q->frags_n + j];
                *c = ir_frag_mma(k.ir, a[i], b[j], *c);
            }
    }
}

typedef struct out_arg {
    const coop_tile *tile;
    ir_shm src;
    ir_val t0, r0;  /* the tile's first token and row */
    uint32_t round; /* the band of every subgroup's tokens stored: round * band .. */
    uint32_t band;
    uint32_t lanes; /* outputs per store */
} out_arg;

/* Output item i of a round: subgroup s = i / (band * sub_r / lanes), then its band's
 * tokens and rows in vectors; the epilogue of the f32 sums in s's region, for t < n and
 * r < rows only. */
static void out_item(const mm *m, ir_val i, const void *p) {
    const out_arg *a = p;
    const coop_tile *t = a->tile;
    kx k = m->k;
    uint32_t per_row = t->sub_r / a->lanes, per_sub = a->band * per_row, stride = t->sub_r + OUT_PAD;
    ir_val s = kx_div_c(k, i, per_sub), in_sub = kx_rem_c(k, i, per_sub);
    ir_val tl = kx_div_c(k, in_sub, per_row), rl = kx_mul_c(k, kx_rem_c(k, in_sub, per_row), a->lanes);
    ir_val st = kx_mul_c(k, kx_div_c(k, s, t->sg_r), t->sub_t), sr = kx_mul_c(k, kx_rem_c(k, s, t->sg_r), t->sub_r);
    ir_val tok = kx_add(k, kx_add(k, a->t0, st), kx_add_c(k, tl, a->round * a->band));
    ir_val row = kx_add(k, kx_add(k, a->r0, sr), rl);
    ir_if *f = kx_if(k, mm_exists(m, tok, row));
    ir_val v[4], at = kx_add(k, kx_mul_c(k, s, a->band * stride), kx_idx(k, tl, stride, rl));
    for (uint32_t l = 0; l < a->lanes; l++) v[l] = kx_shm_load(k, a->src, kx_add_c(k, at, l), 1);
    mm_store_y(m, tok, row, v, a->lanes);
    kx_end_if(k, f);
}

void mm_build_coop(mm *m, const mm_coop_cfg *cfg, uint32_t groups[2]) {
    kx k = m->k;
    const rt_mma_shape *s = cfg->shape;
    const coop_tile *t = cfg->tile;
    coop_ctx q = {.tile = t,
                  .frag_m = s->m,
                  .frag_n = s->n,
                  .frag_k = s->k,
                  .frags_m = t->sub_t / s->m,
                  .frags_n = t->sub_r / s->n,
                  .row_stride = cfg->kc + COOP_PAD,
                  .q = cfg->q,
                  .tile_rows = tile_r(t)};
    uint32_t tt = tile_t(t), tr = tile_r(t), out_stride = t->sub_r + OUT_PAD, band = cfg->band;
    m->invocations = subgroups(t) * k.caps->subgroup_size;
    kx_workgroup(k, m->invocations);
    q.xs = kx_shared(k, "xs", m->dtype, tt * q.row_stride);
    q.ws = kx_shared(k, "ws", m->dtype, tr * q.row_stride);
    ir_shm cs = kx_shared(k, "cs", IR_F32, subgroups(t) * band * out_stride);
    if (cfg->q) { /* the scales and mins of each chunk's sub-steps, [step][row] */
        cfg->q->ss = kx_shared(k, "ss", IR_F32, cfg->kc / cfg->q->step * tr);
        if (cfg->q->has_min) cfg->q->ms = kx_shared(k, "ms", IR_F32, cfg->kc / cfg->q->step * tr);
        cfg->q->w_stride = q.row_stride;
    }
    q.ta = ir_t_frag(k.ir, IR_FRAG_A, m->dtype, s->m, s->n, s->k);
    q.tb = ir_t_frag(k.ir, IR_FRAG_B, m->dtype, s->m, s->n, s->k);
    ir_type tc = q.tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, s->m, s->n, s->k);
    ir_val sid = kx_sg_id(k);
    /* workgroup (x, y): rows from r0, tokens from t0; subgroup sid: (sid / sg_r, sid % sg_r) */
    ir_val t0 = kx_group_times(k, 1, tt);
    ir_val r0 = kx_group_times(k, 0, tr);
    q.sub_t0 = kx_mul_c(k, kx_div_c(k, sid, t->sg_r), t->sub_t);
    q.sub_r0 = kx_mul_c(k, kx_rem_c(k, sid, t->sg_r), t->sub_r);

    /* a tile of tokens all at t >= n does nothing (uniform: group id and a loaded value) */
    ir_if *live = kx_if(k, kx_lt(k, t0, m->n));
    uint32_t v = kn_vec_width(m->cols);
    chunker ch = {.sx = {m->x, q.xs, t0, IR_NONE, m->n_max - 1, 0, v, q.row_stride, 1, false, false},
                  .sw = {m->w, q.ws, r0, IR_NONE, m->rows - 1, 0, v, q.row_stride, 1, false, false},
                  .x_tile = tt,
                  .w_tile = tr,
                  .cols_per_chunk = cfg->kc,
                  .col_step = s->k,
                  .n_acc = q.frags_m * q.frags_n,
                  .pipelined = t->pipelined,
                  .math = coop_math,
                  .q = &q};
    ir_val acc[16];
    ir_val zero = q.zero = ir_frag_fill(k.ir, tc, kx_f32(k, 0.0f));
    if (cfg->q) {
        ch.wq = cfg->q->wq, ch.col_step = cfg->q->step, ch.math = coop_math_q;
        ir_val one = ir_convert_exact(k.ir, kx_f32(k, 1.0f), kx_t(k, m->dtype, 1));
        q.ones = ir_frag_fill(k.ir, q.tb, one);
    }
    for (uint32_t i = 0; i < ch.n_acc; i++) acc[i] = zero;
    mm_run_chunks(m, &ch, acc);

    /* per round, each subgroup's band of tokens -> its f32 region, then the epilogue by all */
    uint32_t lanes = kn_vec_width(m->rows), band_frags = band / s->m;
    ir_val region = kx_mul_c(k, sid, band * out_stride), stride = kx_u32(k, out_stride);
    for (uint32_t round = 0; round * band < t->sub_t; round++) {
        if (round) kx_barrier(k); /* the last round's sums are read */
        for (uint32_t i = 0; i < band_frags; i++)
            for (uint32_t j = 0; j < q.frags_n; j++) {
                ir_val at = kx_add(k, region, kx_idx(k, kx_u32(k, i * s->m), out_stride, kx_u32(k, j * s->n)));
                ir_frag_store(k.ir, acc[(round * band_frags + i) * q.frags_n + j], true, cs, at, stride, true);
            }
        kx_barrier(k);
        out_arg o = {t, cs, t0, r0, round, band, lanes};
        mm_for_items(m, subgroups(t) * band * t->sub_r / lanes, out_item, &o);
    }
    kx_end_if(k, live);
    groups[0] = (m->rows + tr - 1) / tr;
    groups[1] = (m->n_max + tt - 1) / tt;
}
