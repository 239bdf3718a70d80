/* The prefill projections: Y[t][r] = sum_c W[r][c] * X[t][c] for a block of tokens, then
 * the fused epilogue (kn_epilogue: bias, one rounding, residual). Each workgroup owns a
 * tile of tokens x rows of Y (x: row tiles, y: token tiles; a tile of tokens all at
 * t >= n returns at once) and walks cols in chunks staged in workgroup memory, so the
 * tails (rows, cols, tokens) are masked while staging, never in the inner loop, and any
 * shape works. Three variants:
 *
 *   the pipeline (matmul_pipe.c), where the caps offer asynchronous copies (sm_80+) and
 *   cols is a multiple of 8: 128 x 128 tiles, chunks ring-buffered through workgroup
 *   memory with the next ones in flight during the math;
 *
 *   cooperative matrices (matmul_coop.c, where the caps offer a dtype x dtype -> f32
 *   shape but no asynchronous copies: Vulkan): 64 x 64 or 128 x 128 tiles of subgroups'
 *   fragments, chunks staged in dtype;
 *
 *   tiled (any caps): the chunk is stored transposed in f32 (xs[c][token], ws[c][row]) and
 *   each invocation keeps an rt x 4 block of outputs (tokens x consecutive rows) in f32
 *   registers, one fma per product: 256 invocations 64 x 64 (4 x 4 each), 128 (the spec
 *   minimum) 64 x 64 (8 x 4), fewer 64 rows x fewer tokens; chunks of 32 columns, 16 in
 *   16 KiB. The next chunk's loads are in flight during the math (mm_run_chunks).
 *
 * On the H200 (qwen3-0.6b's projections, n = 512) the tiled kernel did 20-24 TFLOP/s.
 *
 * Rows of X at t >= n are garbage: loads clamp the token to n_max - 1 (rows of W to
 * rows - 1) so they stay inside the buffers; what they read only reaches outputs that are
 * not stored. Columns past cols read zero in both matrices (0 * garbage could be NaN).
 * Products of two 16-bit values are exact in f32, so only the summation order differs
 * from a plain loop. */
#include "kernels/matmul_internal.h"

#include "base/error.h"

void mm_params(mm *m) {
    kx k = m->k;
    uint32_t rows = m->rows, cols = m->cols, n_max = m->n_max;
    m->w = kx_buffer(k, "W", m->dtype, IR_READ, (uint64_t)rows * cols);
    if (m->epi & KN_EPI_SWIGLU) m->wu = kx_buffer(k, "Wu", m->dtype, IR_READ, (uint64_t)rows * cols);
    m->x = kx_buffer(k, "X", m->dtype, IR_READ, (uint64_t)n_max * cols);
    m->y = kx_buffer(k, "Y", m->epi & KN_EPI_F32 ? IR_F32 : m->dtype, IR_WRITE, (uint64_t)n_max * rows);
    m->info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    if (m->epi & KN_EPI_BIAS) m->b = kx_buffer(k, "b", m->dtype, IR_READ, rows);
    if (m->epi & KN_EPI_RESIDUAL) m->res = kx_buffer(k, "res", m->dtype, IR_READ, (uint64_t)n_max * rows);
    m->lid = kx_local(k);
    ir_val n_max_c = kx_u32(k, n_max);
    m->n = kx_min(k, kx_load_c(k, m->info, 1), n_max_c);
}

void mm_params_q(mm *m, const kn_qlayout *L, uint32_t n_parts, ir_buf w[KN_Q_PARTS]) {
    static const char *const names[KN_Q_PARTS] = {"W", "W1", "W2"};
    kx k = m->k;
    uint32_t rows = m->rows, cols = m->cols, n_max = m->n_max;
    for (uint32_t i = 0; i < n_parts; i++) w[i] = kx_buffer(k, names[i], IR_U32, IR_READ, L[i].words);
    m->x = kx_buffer(k, "X", m->dtype, IR_READ, (uint64_t)n_max * cols);
    m->y = kx_buffer(k, "Y", m->epi & KN_EPI_F32 ? IR_F32 : m->dtype, IR_WRITE, (uint64_t)n_max * rows);
    m->info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    if (m->epi & KN_EPI_BIAS) m->b = kx_buffer(k, "b", m->dtype, IR_READ, rows);
    if (m->epi & KN_EPI_RESIDUAL) m->res = kx_buffer(k, "res", m->dtype, IR_READ, (uint64_t)n_max * rows);
    ir_grid_wait(k.ir);
    m->lid = kx_local(k);
    m->n = kx_min(k, kx_load_c(k, m->info, 1), kx_u32(k, n_max));
}

ir_kernel *mm_make(const char *name, const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype,
                   unsigned epi, mm_build_fn build, const void *cfg, uint32_t groups[2], kiln_err *err) {
    mm m = {.k = {kn_create(name, err), c}, .rows = rows, .cols = cols, .n_max = n_max, .dtype = dtype, .epi = epi};
    if (!m.k.ir) return NULL;
    mm_params(&m);
    uint32_t g[2];
    build(&m, cfg, g);
    if (groups) groups[0] = g[0], groups[1] = g[1];
    return kn_finish(m.k.ir, err);
}

bool mm_shape_ok(uint32_t rows, uint32_t cols, uint32_t n_max) {
    return rows && cols && n_max && n_max % 64 == 0 && (uint64_t)n_max * cols <= UINT32_MAX &&
           (uint64_t)n_max * rows <= UINT32_MAX && (uint64_t)rows * cols <= UINT32_MAX;
}

/* t < n and r < rows: an output that exists */
ir_val mm_exists(const mm *m, ir_val t, ir_val r) {
    ir_val row_ok = kx_lt_c(m->k, r, m->rows);
    return kx_and(m->k, kx_lt(m->k, t, m->n), row_ok);
}

/* Y[t][r .. r + lanes) = the epilogue of sum[0..lanes), one vector store when lanes > 1
 * (t * rows + r is then a multiple of lanes: lanes divides rows and r). */
void mm_store_y(const mm *m, ir_val t, ir_val r, const ir_val *sum, uint32_t lanes) {
    kx k = m->k;
    ir_val yi = kx_idx(k, t, m->rows, r), o[4];
    for (uint32_t l = 0; l < lanes; l++) {
        ir_val res_at = kx_add_c(k, yi, l), b_at = kx_add_c(k, r, l);
        o[l] = kn_epilogue(k, m->epi, sum[l], m->b, b_at, m->res, res_at, m->dtype);
    }
    kx_store(k, m->y, yi, lanes == 1 ? o[0] : kx_vec(k, o, lanes));
}

/* Work item i = lid + j * invocations for i < count, unrolled when there are few per
 * invocation (the usual case: the counts are whole tiles) and a loop otherwise. body gets i. */
void mm_for_items(const mm *m, uint32_t count, mm_item_fn body, const void *arg) {
    kx k = m->k;
    uint32_t wg = m->invocations, per = (count + wg - 1) / wg;
    if (per > 32) {
        ir_val step = kx_u32(k, wg), i;
        ir_for *l = kx_for(k, m->lid, kx_u32(k, count), step, &i);
        body(m, i, arg);
        kx_end_for(k, l);
        return;
    }
    for (uint32_t j = 0; j < per; j++) {
        ir_val i = kx_add_c(k, m->lid, j * wg);
        if ((j + 1) * wg <= count) {
            body(m, i, arg);
        } else {
            ir_if *f = kx_if(k, kx_lt_c(k, i, count));
            body(m, i, arg);
            kx_end_if(k, f);
        }
    }
}

/* Item i of a chunk: row i / (n_cols / lanes) of the tile, the lanes columns at col. */
static void stage_pos(const mm *m, const stage_arg *a, ir_val i, ir_val *row, ir_val *col) {
    kx k = m->k;
    uint32_t per_row = a->n_cols / a->lanes;
    *row = kx_div_c(k, i, per_row);
    ir_val lanes = kx_u32(k, a->lanes);
    *col = kx_mul(k, kx_rem_c(k, i, per_row), lanes);
}

/* Item i's place in workgroup memory. */
static ir_val stage_dst(const mm *m, const stage_arg *a, ir_val i) {
    ir_val row, col;
    stage_pos(m, a, i, &row, &col);
    ir_val col_at = kx_mul_c(m->k, col, a->col_stride);
    return kx_idx(m->k, row, a->row_stride, col_at);
}

/* Item i's vector from global memory (row clamped, columns past cols zero when masked). */
static ir_val stage_load(const mm *m, const stage_arg *a, ir_val i) {
    kx k = m->k;
    ir_val row, col;
    stage_pos(m, a, i, &row, &col);
    ir_val cols = kx_u32(k, m->cols), last_row = kx_u32(k, a->last_row);
    ir_val base = kx_mul(k, kx_min(k, kx_add(k, a->first_row, row), last_row), cols);
    ir_val at = kx_add(k, base, kx_add(k, a->first_col, col));
    if (!a->masked) return kx_load(k, a->src, at, a->lanes);
    ir_val zero = kx_as(k, kx_f32(k, 0.0f), m->dtype);
    return kx_load_masked(k, a->src, at, a->lanes, kx_add_c(k, base, m->cols), zero);
}

/* A loaded vector into its place (one word per lane when transposed), converted to the
 * array's type. */
static void stage_store(const mm *m, const stage_arg *a, ir_val dst, ir_val val) {
    kx k = m->k;
    if (a->to_f32) val = kx_convert(k, val, kx_t(k, IR_F32, a->lanes));
    if (a->col_stride == 1) {
        kx_shm_store(k, a->dst, dst, val);
        return;
    }
    for (uint32_t l = 0; l < a->lanes; l++) {
        ir_val e = a->lanes == 1 ? val : kx_lane(k, val, l);
        kx_shm_store(k, a->dst, kx_add_c(k, dst, l * a->col_stride), e);
    }
}

static void stage_item(const mm *m, ir_val i, const void *p) {
    ir_val v = stage_load(m, p, i);
    stage_store(m, p, stage_dst(m, p, i), v);
}

static void stage(const mm *m, stage_arg *a, uint32_t tile) {
    mm_for_items(m, tile * (a->n_cols / a->lanes), stage_item, a);
}

/* The chunk of W: by the stager where there is one, else as sw says. */
static void stage_w(const mm *m, chunker *ch) {
    if (!ch->wq) {
        stage(m, &ch->sw, ch->w_tile);
        return;
    }
    const stage_arg *a = &ch->sw;
    ch->wq->stage(m, ch->wq, a->dst, a->col_stride, a->first_row, ch->w_tile, a->first_col, a->n_cols);
}

#define MAX_CARRY 96

/* acc = the math over all of cols: a loop over the full chunks, then the tail. Barriers:
 * before a chunk is stored (the last math is done reading) and after (it is complete).
 * Pipelined (where every invocation stages the same number of whole vectors): the next
 * chunk's loads are issued before this chunk's math and carried to the next iteration in
 * registers, so their latency hides behind the math. On the H200 that made the tiled
 * kernel 5-25% faster and the cooperative-matrix one a few % slower. */
void mm_run_chunks(const mm *m, chunker *ch, ir_val *acc) {
    kx k = m->k;
    uint32_t kc = ch->cols_per_chunk, full = m->cols / kc * kc, tail = m->cols - full, v = ch->sx.lanes;
    uint32_t wg = m->invocations, nacc = ch->n_acc;
    /* vectors per chunk of X and W, and per invocation */
    uint32_t nx = ch->x_tile * kc / v, nw = ch->w_tile * kc / v, px = nx / wg, pw = nw / wg;
    bool pipe = ch->pipelined && !ch->wq && full > kc && nx % wg == 0 && nw % wg == 0 && nacc + px + pw <= MAX_CARRY;
    ch->sx.n_cols = ch->sw.n_cols = kc, ch->sx.masked = ch->sw.masked = false;
    if (full && pipe) {
        /* item j: X's for j < px, then W's; invocation lid takes lid + j' * wg */
        ir_val init[MAX_CARRY], cur[MAX_CARRY], it[MAX_CARRY];
        const stage_arg *as[MAX_CARRY];
        for (uint32_t j = 0; j < px + pw; j++) {
            as[j] = j < px ? &ch->sx : &ch->sw;
            it[j] = kx_add_c(k, m->lid, (j < px ? j : j - px) * wg);
        }
        for (uint32_t i = 0; i < nacc; i++) init[i] = acc[i];
        ch->sx.first_col = ch->sw.first_col = kx_u32(k, 0);
        for (uint32_t j = 0; j < px + pw; j++) init[nacc + j] = stage_load(m, as[j], it[j]);
        ir_val step = kx_u32(k, kc), end = kx_u32(k, full);
        ir_for *l = ir_for_begin(k.ir, kx_u32(k, 0), end, step, nacc + px + pw, init);
        for (uint32_t i = 0; i < nacc + px + pw; i++) cur[i] = ir_for_arg(l, i);
        kx_barrier(k);
        for (uint32_t j = 0; j < px + pw; j++) stage_store(m, as[j], stage_dst(m, as[j], it[j]), cur[nacc + j]);
        kx_barrier(k);
        /* the next chunk (the last iteration reloads the last one, unused) */
        ir_val last_chunk = kx_u32(k, full - kc);
        ch->sx.first_col = ch->sw.first_col = kx_min(k, kx_add_c(k, ir_for_iv(l), kc), last_chunk);
        for (uint32_t j = 0; j < px + pw; j++) cur[nacc + j] = stage_load(m, as[j], it[j]);
        ch->math(m, ch->q, cur, kc);
        ir_for_end(k.ir, l, cur);
        for (uint32_t i = 0; i < nacc; i++) acc[i] = ir_for_result(l, i);
    } else if (full) {
        ir_val step = kx_u32(k, kc), end = kx_u32(k, full);
        ir_for *l = ir_for_begin(k.ir, kx_u32(k, 0), end, step, nacc, acc);
        ir_val cur[MAX_CARRY];
        for (uint32_t i = 0; i < nacc; i++) cur[i] = ir_for_arg(l, i);
        ch->sx.first_col = ch->sw.first_col = ir_for_iv(l);
        kx_barrier(k);
        stage(m, &ch->sx, ch->x_tile);
        stage_w(m, ch);
        kx_barrier(k);
        ch->math(m, ch->q, cur, kc);
        ir_for_end(k.ir, l, cur);
        for (uint32_t i = 0; i < nacc; i++) acc[i] = ir_for_result(l, i);
    }
    if (tail) {
        uint32_t pad = (tail + ch->col_step - 1) / ch->col_step * ch->col_step;
        ch->sx.first_col = ch->sw.first_col = kx_u32(k, full);
        ch->sx.n_cols = ch->sw.n_cols = pad, ch->sx.masked = ch->sw.masked = pad != tail;
        kx_barrier(k);
        stage(m, &ch->sx, ch->x_tile);
        stage_w(m, ch);
        kx_barrier(k);
        ch->math(m, ch->q, acc, pad);
    }
}

/* ---- tiled kernel in workgroup memory ------------------------------------------------------ */

#define ROWS_PER_INV 4 /* consecutive rows of Y per invocation */
#define SIMT_PAD 4     /* f32 words after each staged column */

typedef struct simt_ctx {
    ir_shm xs, ws;           /* the staged chunks, transposed: xs[c][token], ws[c][row] */
    ir_val row_blk, tok_blk; /* the invocation's block: rows row_blk * 4 .., tokens tok_blk * tokens_per_inv .. */
    uint32_t tokens_per_inv;
    uint32_t x_stride, w_stride; /* of xs's and ws's columns, in words */
} simt_ctx;

/* The invocation's tokens_per_inv x 4 block over a staged chunk, k steps in a loop of 4
 * unrolled (drivers unroll further; lavapipe compiles much faster than fully unrolled). */
static void simt_math(const mm *m, const void *p, ir_val *acc, uint32_t n_cols) {
    const simt_ctx *q = p;
    kx k = m->k;
    uint32_t rt = q->tokens_per_inv, nacc = rt * ROWS_PER_INV, unroll = n_cols % 4 ? 1 : 4;
    ir_val step = kx_u32(k, unroll), end = kx_u32(k, n_cols);
    ir_for *l = ir_for_begin(k.ir, kx_u32(k, 0), end, step, nacc, acc);
    ir_val cur[8 * ROWS_PER_INV];
    for (uint32_t i = 0; i < nacc; i++) cur[i] = ir_for_arg(l, i);
    ir_val kk = ir_for_iv(l);
    /* column kk of the invocation's tokens in xs and of its rows in ws */
    ir_val xo = kx_idx(k, kk, q->x_stride, kx_mul_c(k, q->tok_blk, rt));
    ir_val wo = kx_idx(k, kk, q->w_stride, kx_mul_c(k, q->row_blk, ROWS_PER_INV));
    for (uint32_t u = 0; u < unroll; u++) {
        ir_val xv[8], wv[ROWS_PER_INV];
        for (uint32_t i = 0; i < rt; i++) xv[i] = kx_shm_load(k, q->xs, kx_add_c(k, xo, u * q->x_stride + i), 1);
        for (uint32_t j = 0; j < ROWS_PER_INV; j++)
            wv[j] = kx_shm_load(k, q->ws, kx_add_c(k, wo, u * q->w_stride + j), 1);
        for (uint32_t i = 0; i < rt; i++)
            for (uint32_t j = 0; j < ROWS_PER_INV; j++) {
                ir_val *c = &cur[i * ROWS_PER_INV + j];
                *c = kx_fma(k, xv[i], wv[j], *c);
            }
    }
    ir_for_end(k.ir, l, cur);
    for (uint32_t i = 0; i < nacc; i++) acc[i] = ir_for_result(l, i);
}

bool mm_build_simt(mm *m, const mm_w_stager *wq, uint32_t groups[2]) {
    kx k = m->k;
    simt_ctx q;
    m->invocations = kn_workgroup(k.caps, 256);
    uint32_t wg = m->invocations;
    /* invocations across rows and across tokens */
    uint32_t row_blks = wg < 16 ? wg : 16, tok_blks = wg / row_blks;
    /* 16 or 32 outputs per invocation (8 x 4 at 256 was slower on the H200 for 1024 rows:
     * half the workgroups) */
    q.tokens_per_inv = wg >= 256 ? 4 : 8;
    uint32_t tile_rows = row_blks * ROWS_PER_INV, tile_tokens = tok_blks * q.tokens_per_inv;
    q.x_stride = tile_tokens + SIMT_PAD, q.w_stride = tile_rows + SIMT_PAD;
    /* the widest chunk that fits (16 KiB, the minimum, holds 16 columns of 64 + 64) */
    uint32_t kc = 32, limit = k.caps->shared_bytes ? k.caps->shared_bytes : 16384;
    while (kc > 4 && (q.x_stride + q.w_stride) * kc * 4 > limit) kc /= 2;
    if ((q.x_stride + q.w_stride) * kc * 4 > limit) return false;
    if (wq && (kc % wq->kc_unit || m->cols % kc)) return false;
    kx_workgroup(k, wg);
    q.xs = kx_shared(k, "xs", IR_F32, kc * q.x_stride);
    q.ws = kx_shared(k, "ws", IR_F32, kc * q.w_stride);
    q.row_blk = kx_rem_c(k, m->lid, row_blks);
    q.tok_blk = kx_div_c(k, m->lid, row_blks);
    ir_val t0 = kx_group_times(k, 1, tile_tokens);
    ir_val r0 = kx_group_times(k, 0, tile_rows);

    ir_if *live = kx_if(k, kx_lt(k, t0, m->n));
    uint32_t v = kn_vec_width(m->cols);
    /* staged transposed (xs[c][token], ws[c][row]) so the math reads consecutive words */
    chunker ch = {.sx = {m->x, q.xs, t0, IR_NONE, m->n_max - 1, 0, v, 1, q.x_stride, false, true},
                  .sw = {m->w, q.ws, r0, IR_NONE, m->rows - 1, 0, v, 1, q.w_stride, false, true},
                  .wq = wq,
                  .x_tile = tile_tokens,
                  .w_tile = tile_rows,
                  .cols_per_chunk = kc,
                  .col_step = 1,
                  .n_acc = q.tokens_per_inv * ROWS_PER_INV,
                  .pipelined = true,
                  .math = simt_math,
                  .q = &q};
    ir_val acc[8 * ROWS_PER_INV];
    for (uint32_t i = 0; i < ch.n_acc; i++) acc[i] = kx_f32(k, 0.0f);
    mm_run_chunks(m, &ch, acc);

    /* the invocation's block: tokens t0 + tok_blk * tokens_per_inv + i, rows r0 + row_blk * 4 + j */
    uint32_t lanes = kn_vec_width(m->rows);
    for (uint32_t i = 0; i < q.tokens_per_inv; i++) {
        ir_val ic = kx_u32(k, i);
        ir_val t = kx_add(k, t0, kx_add(k, kx_mul_c(k, q.tok_blk, q.tokens_per_inv), ic));
        for (uint32_t j = 0; j < ROWS_PER_INV; j += lanes) {
            ir_val jc = kx_u32(k, j);
            ir_val r = kx_add(k, r0, kx_add(k, kx_mul_c(k, q.row_blk, ROWS_PER_INV), jc));
            ir_if *f = kx_if(k, mm_exists(m, t, r));
            mm_store_y(m, t, r, &acc[i * ROWS_PER_INV + j], lanes);
            kx_end_if(k, f);
        }
    }
    kx_end_if(k, live);
    groups[0] = (m->rows + tile_rows - 1) / tile_rows;
    groups[1] = (m->n_max + tile_tokens - 1) / tile_tokens;
    return true;
}

/* warpgroup products where their tiles keep half the SMs busy: an SM's rate on them is
 * about 2.4 times the mma.sync pipeline's (the H200, qwen3-8b's products: 540-680 TFLOP/s
 * in a full wave against 200-275), so half a wave of them still wins */
static bool wg_takes(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype, unsigned epi,
                     mm_wg_cfg *cfg) {
    if (!c || !mm_wg_pick(c, dtype, rows, cols, n_max, epi, cfg)) return false;
    return mm_wg_forced() || mm_wg_grid(cfg, rows, n_max, epi) * 2 >= (c->compute_units ? c->compute_units : 1);
}

bool kn_matmul_swiglu_ok(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype) {
    mm_wg_cfg cfg;
    mm_tma_cfg tcfg;
    return mm_shape_ok(rows, cols, n_max) && (mm_tma_takes(c, dtype, rows, cols, n_max, KN_EPI_SWIGLU, &tcfg) ||
            wg_takes(c, rows, cols, n_max, dtype, KN_EPI_SWIGLU, &cfg));
}

ir_kernel *kn_matmul(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype, unsigned epi,
                     uint32_t groups[2], kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (kn_check_epi("kn_matmul", epi, KN_EPI_BIAS | KN_EPI_RESIDUAL | KN_EPI_SWIGLU | KN_EPI_F32, err)) return NULL;
    if (!mm_shape_ok(rows, cols, n_max)) {
        kiln_fail(
            err, KILN_ERR_INVALID,
            "kn_matmul: bad shape (rows %u, cols %u, n_max %u; n_max a multiple of 64, u32 indices: n_max * cols, "
            "n_max * rows and rows * cols < 2^32)",
            rows, cols, n_max);
        return NULL;
    }
    uint32_t g[2];
    mm_coop_cfg cfg = {0};
    mm_pipe_cfg pcfg = {0};
    mm_wg_cfg wcfg = {0};
    mm_tma_cfg tcfg = {0};
    bool use_tma = mm_tma_takes(c, dtype, rows, cols, n_max, epi, &tcfg);
    bool use_wg = !use_tma && wg_takes(c, rows, cols, n_max, dtype, epi, &wcfg);
    if (!use_tma && !use_wg && (epi & KN_EPI_SWIGLU)) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED,
                  "kn_matmul: the SwiGLU epilogue needs the warpgroup variant (wgmma; rows %u, cols %u, n_max %u)",
                  rows, cols, n_max);
        return NULL;
    }
    mm_coop2_cfg c2cfg = {0};
    bool use_pipe = !use_tma && !use_wg && mm_pipe_pick(c, dtype, rows, cols, n_max, &pcfg);
    bool use_cm2 = !use_tma && !use_wg && !use_pipe && mm_coop2_pick(c, dtype, rows, n_max, &c2cfg);
    bool use_mma = !use_pipe && !use_cm2 && mm_coop_pick(c, dtype, rows, n_max, &cfg);
    mm m = {
        .k = {kn_create("kn_matmul", err), c}, .rows = rows, .cols = cols, .n_max = n_max, .dtype = dtype, .epi = epi};
    kx k = m.k;
    if (!k.ir) return NULL;
    mm_params(&m);
    if (use_tma) {
        mm_build_tma(&m, &tcfg, g);
    } else if (use_wg) {
        mm_build_wg(&m, &wcfg, g);
    } else if (use_pipe) {
        mm_build_pipe(&m, &pcfg, g);
    } else if (use_cm2) {
        mm_build_coop2(&m, &c2cfg, g);
    } else if (use_mma) {
        mm_build_coop(&m, &cfg, g);
    } else if (!mm_build_simt(&m, NULL, g)) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "kn_matmul: caps.shared_bytes %u holds no tile", c->shared_bytes);
        ir_kernel_destroy(k.ir);
        return NULL;
    }
    if (groups) groups[0] = g[0], groups[1] = g[1];
    return kn_finish(k.ir, err);
}
