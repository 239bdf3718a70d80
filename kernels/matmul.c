/* The prefill projections: Y[t][r] = sum_c W[r][c] * X[t][c] for a block of tokens, then
 * the fused epilogue (kn_epilogue: bias, one rounding, residual). Each workgroup owns a
 * tile of tokens x rows of Y (x: row tiles, y: token tiles; a tile of tokens all at
 * t >= n returns at once) and walks cols in chunks staged in workgroup memory, so the
 * tails (rows, cols, tokens) are masked while staging, never in the inner loop, and any
 * shape works. Two variants:
 *
 *   cooperative matrices (where the caps offer a dtype x dtype -> f32 shape, 16x16x16
 *   first, and dtype is usable in fragments): a 64 x 64 tile per workgroup of 4
 *   subgroups, each 32 tokens x 32 rows as (32/M) x (32/N) accumulators. A = the X chunk
 *   (tokens x k, row-major), B[k][n] = W[r0 + n][c0 + k] (the W chunk read column-major).
 *   Chunks of 64 columns (fewer where caps.shared_bytes is smaller; the cols tail
 *   zero-padded to K) are copied in dtype, rows padded by 8 elements (16 bytes) against
 *   bank conflicts. At the end the accumulators go through an f32 workgroup array so
 *   every invocation applies the epilogue to its share with plain (vector) stores.
 *
 *   tiled (any caps): the chunk is stored transposed in f32 (xs[c][token], ws[c][row]) and
 *   each invocation keeps an rt x 4 block of outputs (tokens x consecutive rows) in f32
 *   registers, one fma per product: 256 invocations 64 x 64 (4 x 4 each), 128 (the spec
 *   minimum) 64 x 64 (8 x 4), fewer 64 rows x fewer tokens; chunks of 32 columns, 16 in
 *   16 KiB. The next chunk's loads are in flight during the math (run_chunks).
 *
 * On the H200 (qwen3-0.6b's projections, n = 512): cooperative matrices 70-77 TFLOP/s in
 * bf16, ~100 in f16; the tiled kernel 20-24.
 *
 * Rows of X at t >= n are garbage: loads clamp the token to n_max - 1 (rows of W to
 * rows - 1) so they stay inside the buffers; what they read only reaches outputs that are
 * not stored. Columns past cols read zero in both matrices (0 * garbage could be NaN).
 * Products of two 16-bit values are exact in f32, so only the summation order differs
 * from a plain loop. */
#include "kernels/kn_common.h"

typedef struct mm {
    ir_kernel *k;
    const rt_caps *c;
    uint32_t rows, cols, n_max, wg;
    ir_scalar dt;
    unsigned epi;
    ir_buf w, x, y, info, b, res;
    ir_val lid, n; /* n = min(info[1], n_max) */
} mm;

static ir_val cu(mm *m, uint32_t v) { return ir_const_u32(m->k, v); }
static ir_val add(mm *m, ir_val a, ir_val b) { return ir_bin(m->k, IR_OP_ADD, a, b); }
static ir_val mul(mm *m, ir_val a, ir_val b) { return ir_bin(m->k, IR_OP_MUL, a, b); }
static ir_val umin(mm *m, ir_val a, ir_val b) { return ir_bin(m->k, IR_OP_MIN, a, b); }
static ir_val lt(mm *m, ir_val a, ir_val b) { return ir_compare(m->k, IR_LT, a, b); }

/* Y[t][r .. r + lanes) = the epilogue of sum[0..lanes), one vector store when lanes > 1
 * (t * rows + r is then a multiple of lanes: lanes divides rows and r). */
static void store_y(mm *m, ir_val t, ir_val r, const ir_val *sum, uint32_t lanes) {
    ir_val yi = add(m, mul(m, t, cu(m, m->rows)), r), o[4];
    for (uint32_t l = 0; l < lanes; l++)
        o[l] = kn_epilogue(m->k, m->epi, sum[l], m->b, add(m, r, cu(m, l)), m->res, add(m, yi, cu(m, l)), m->dt);
    ir_store(m->k, m->y, yi, lanes == 1 ? o[0] : ir_vec(m->k, o, lanes));
}

/* Work item i = lid + j * wg for i < count, unrolled when there are few per invocation
 * (the usual case: the counts are whole tiles) and a loop otherwise. body gets i. */
typedef void (*item_fn)(mm *m, ir_val i, const void *arg);
static void for_items(mm *m, uint32_t count, item_fn body, const void *arg) {
    uint32_t per = (count + m->wg - 1) / m->wg;
    if (per > 32) {
        ir_for *l = ir_for_begin(m->k, m->lid, cu(m, count), cu(m, m->wg), 0, NULL);
        body(m, ir_for_iv(l), arg);
        ir_for_end(m->k, l, NULL);
        return;
    }
    for (uint32_t j = 0; j < per; j++) {
        ir_val i = add(m, m->lid, cu(m, j * m->wg));
        if ((j + 1) * m->wg <= count) {
            body(m, i, arg);
        } else {
            ir_if *f = ir_if_begin(m->k, lt(m, i, cu(m, count)), 0);
            body(m, i, arg);
            ir_if_end(m->k, f, NULL);
        }
    }
}

/* One chunk of X or W into workgroup memory: `tile` rows from row0 (clamped to
 * last_row), columns c0 .. c0 + ncols in vectors of v; columns past cols read zero when
 * masked. Element (row, col) lands at row * row_stride + col * col_stride; the values are
 * stored as the array's type (f32 converts). */
typedef struct stage_arg {
    ir_buf src;
    ir_shm dst;
    ir_val row0, c0;
    uint32_t last_row, ncols, v, row_stride, col_stride;
    bool masked, to_f32;
} stage_arg;

/* Item i of a chunk: row i / (ncols / v) of the tile, the v columns at col. */
static void stage_pos(mm *m, const stage_arg *a, ir_val i, ir_val *row, ir_val *col) {
    uint32_t nv = a->ncols / a->v;
    *row = ir_bin(m->k, IR_OP_DIV, i, cu(m, nv));
    *col = mul(m, ir_bin(m->k, IR_OP_REM, i, cu(m, nv)), cu(m, a->v));
}

/* Item i's place in workgroup memory. */
static ir_val stage_dst(mm *m, const stage_arg *a, ir_val i) {
    ir_val row, col;
    stage_pos(m, a, i, &row, &col);
    return add(m, mul(m, row, cu(m, a->row_stride)), mul(m, col, cu(m, a->col_stride)));
}

/* Item i's vector from global memory (row clamped, columns past cols zero when masked). */
static ir_val stage_load(mm *m, const stage_arg *a, ir_val i) {
    ir_kernel *k = m->k;
    ir_val row, col;
    stage_pos(m, a, i, &row, &col);
    ir_val base = mul(m, umin(m, add(m, a->row0, row), cu(m, a->last_row)), cu(m, m->cols));
    ir_val at = add(m, base, add(m, a->c0, col));
    if (!a->masked) return ir_load(k, a->src, at, a->v);
    ir_val zero = ir_convert(k, ir_const_f32(k, 0.0f), ir_t_scalar(k, m->dt));
    return ir_load_masked(k, a->src, at, a->v, add(m, base, cu(m, m->cols)), zero);
}

/* A loaded vector into its place (one word per lane when transposed), converted to the
 * array's type. */
static void stage_store(mm *m, const stage_arg *a, ir_val dst, ir_val val) {
    ir_kernel *k = m->k;
    if (a->to_f32) val = ir_convert(k, val, a->v == 1 ? ir_t_scalar(k, IR_F32) : ir_t_vector(k, IR_F32, a->v));
    if (a->col_stride == 1) {
        ir_shm_store(k, a->dst, dst, val);
        return;
    }
    for (uint32_t l = 0; l < a->v; l++)
        ir_shm_store(k, a->dst, add(m, dst, cu(m, l * a->col_stride)), a->v == 1 ? val : ir_extract(k, val, l));
}

static void stage_item(mm *m, ir_val i, const void *p) { stage_store(m, p, stage_dst(m, p, i), stage_load(m, p, i)); }

static void stage(mm *m, stage_arg *a, uint32_t tile) { for_items(m, tile * (a->ncols / a->v), stage_item, a); }

/* How a variant walks cols: the X and W chunks it stages (x_tile tokens, w_tile rows;
 * c0, ncols and masked are set per chunk), and its math on a staged chunk of ncols
 * columns (the tail is zero-padded to a multiple of kstep); pipelined or not. */
typedef struct chunker {
    stage_arg sx, sw;
    uint32_t x_tile, w_tile, kc, kstep, nacc;
    bool pipe;
    void (*math)(mm *m, const void *q, ir_val *acc, uint32_t ncols);
    const void *q;
} chunker;

#define MAX_CARRY 96

/* acc = the math over all of cols: a loop over the full chunks, then the tail. Barriers:
 * before a chunk is stored (the last math is done reading) and after (it is complete).
 * Pipelined (where every invocation stages the same number of whole vectors): the next
 * chunk's loads are issued before this chunk's math and carried to the next iteration in
 * registers, so their latency hides behind the math. On the H200 that made the tiled
 * kernel 5-25% faster and the cooperative-matrix one a few % slower. */
static void run_chunks(mm *m, chunker *ch, ir_val *acc) {
    ir_kernel *k = m->k;
    uint32_t kc = ch->kc, full = m->cols / kc * kc, tail = m->cols - full, v = ch->sx.v;
    uint32_t nx = ch->x_tile * kc / v, nw = ch->w_tile * kc / v, px = nx / m->wg, pw = nw / m->wg;
    bool pipe = ch->pipe && full > kc && nx % m->wg == 0 && nw % m->wg == 0 && ch->nacc + px + pw <= MAX_CARRY;
    ch->sx.ncols = ch->sw.ncols = kc, ch->sx.masked = ch->sw.masked = false;
    if (full && pipe) {
        /* item j: X's for j < px, then W's; invocation lid takes lid + j' * wg */
        ir_val init[MAX_CARRY], cur[MAX_CARRY], it[MAX_CARRY];
        const stage_arg *as[MAX_CARRY];
        for (uint32_t j = 0; j < px + pw; j++)
            as[j] = j < px ? &ch->sx : &ch->sw, it[j] = add(m, m->lid, cu(m, (j < px ? j : j - px) * m->wg));
        for (uint32_t i = 0; i < ch->nacc; i++) init[i] = acc[i];
        ch->sx.c0 = ch->sw.c0 = cu(m, 0);
        for (uint32_t j = 0; j < px + pw; j++) init[ch->nacc + j] = stage_load(m, as[j], it[j]);
        ir_for *l = ir_for_begin(k, cu(m, 0), cu(m, full), cu(m, kc), ch->nacc + px + pw, init);
        for (uint32_t i = 0; i < ch->nacc + px + pw; i++) cur[i] = ir_for_arg(l, i);
        ir_barrier(k);
        for (uint32_t j = 0; j < px + pw; j++) stage_store(m, as[j], stage_dst(m, as[j], it[j]), cur[ch->nacc + j]);
        ir_barrier(k);
        /* the next chunk (the last iteration reloads the last one, unused) */
        ch->sx.c0 = ch->sw.c0 = umin(m, add(m, ir_for_iv(l), cu(m, kc)), cu(m, full - kc));
        for (uint32_t j = 0; j < px + pw; j++) cur[ch->nacc + j] = stage_load(m, as[j], it[j]);
        ch->math(m, ch->q, cur, kc);
        ir_for_end(k, l, cur);
        for (uint32_t i = 0; i < ch->nacc; i++) acc[i] = ir_for_result(l, i);
    } else if (full) {
        ir_for *l = ir_for_begin(k, cu(m, 0), cu(m, full), cu(m, kc), ch->nacc, acc);
        ir_val cur[MAX_CARRY];
        for (uint32_t i = 0; i < ch->nacc; i++) cur[i] = ir_for_arg(l, i);
        ch->sx.c0 = ch->sw.c0 = ir_for_iv(l);
        ir_barrier(k);
        stage(m, &ch->sx, ch->x_tile);
        stage(m, &ch->sw, ch->w_tile);
        ir_barrier(k);
        ch->math(m, ch->q, cur, kc);
        ir_for_end(k, l, cur);
        for (uint32_t i = 0; i < ch->nacc; i++) acc[i] = ir_for_result(l, i);
    }
    if (tail) {
        uint32_t pad = (tail + ch->kstep - 1) / ch->kstep * ch->kstep;
        ch->sx.c0 = ch->sw.c0 = cu(m, full);
        ch->sx.ncols = ch->sw.ncols = pad, ch->sx.masked = ch->sw.masked = pad != tail;
        ir_barrier(k);
        stage(m, &ch->sx, ch->x_tile);
        stage(m, &ch->sw, ch->w_tile);
        ir_barrier(k);
        ch->math(m, ch->q, acc, pad);
    }
}

/* ---- cooperative matrices -------------------------------------------------------------- */

#define MMA_TILE 64 /* tokens and rows per workgroup: 2 x 2 subgroups of 32 x 32 */
#define MMA_PAD 8   /* dtype elements after each staged row */
#define ACC_STRIDE (MMA_TILE + 4)

typedef struct mma_cfg {
    const rt_mma_shape *s;
    uint32_t kc; /* columns per chunk */
} mma_cfg;

static uint32_t mma_shared_bytes(uint32_t kc) {
    return 2u * MMA_TILE * (kc + MMA_PAD) * 2u + MMA_TILE * ACC_STRIDE * 4u;
}

/* The shape and chunk the cooperative-matrix variant would use, or false (then the tiled
 * kernel runs): dtype x dtype -> f32 with M and N dividing 32 and K dividing 64
 * (16x16x16 first), the component type usable in fragments, 4 subgroups per workgroup,
 * and the staging within caps.shared_bytes. */
static bool mma_pick(const rt_caps *c, ir_scalar dt, mma_cfg *cfg) {
    /* the caps list only shapes the device's kernels can use (the Vulkan probe checks the
     * component types' features; --caps no-f16/no-bf16 drop their shapes) */
    if (!c->n_mma) return false;
    uint32_t sg = c->subgroup_size;
    if (!sg || 4 * sg > 1024 || (c->max_workgroup && 4 * sg > c->max_workgroup)) return false;
    const rt_mma_shape *best = NULL;
    for (uint32_t i = 0; i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->mma[i];
        if (s->ab_type != (uint32_t)dt || s->acc_type != IR_F32) continue;
        /* M, N in 8..32 (at most 4 x 4 fragments per subgroup); K >= 8: 16-byte steps */
        if (s->m < 8 || s->n < 8 || s->k < 8 || 32 % s->m || 32 % s->n || 64 % s->k) continue;
        if (s->m == 16 && s->n == 16 && s->k == 16) {
            best = s;
            break;
        }
        if (!best) best = s;
    }
    if (!best) return false;
    for (uint32_t kc = 64; kc >= best->k && kc >= 16; kc /= 2)
        if (!c->shared_bytes || mma_shared_bytes(kc) <= c->shared_bytes) {
            cfg->s = best, cfg->kc = kc;
            return true;
        }
    return false;
}

typedef struct mma_ctx {
    ir_shm xs, ws;
    ir_type ta, tb;
    ir_val tm, rn; /* the subgroup's offsets in the tile */
    uint32_t m, n, k, fm, fn, stride;
} mma_ctx;

/* The subgroup's fragments over a staged chunk: acc[i][j] += A_i x B_j per K columns. */
static void mma_math(mm *m, const void *p, ir_val *acc, uint32_t ncols) {
    const mma_ctx *q = p;
    ir_kernel *k = m->k;
    ir_val st = cu(m, q->stride);
    for (uint32_t kk = 0; kk < ncols; kk += q->k) {
        ir_val a[4], b[4];
        for (uint32_t i = 0; i < q->fm; i++) {
            ir_val at = add(m, mul(m, add(m, q->tm, cu(m, i * q->m)), st), cu(m, kk));
            a[i] = ir_frag_load(k, q->ta, true, q->xs, at, st, true); /* X rows: row-major */
        }
        for (uint32_t j = 0; j < q->fn; j++) {
            ir_val at = add(m, mul(m, add(m, q->rn, cu(m, j * q->n)), st), cu(m, kk));
            b[j] = ir_frag_load(k, q->tb, true, q->ws, at, st, false); /* W rows are B's columns */
        }
        for (uint32_t i = 0; i < q->fm; i++)
            for (uint32_t j = 0; j < q->fn; j++) acc[i * q->fn + j] = ir_frag_mma(k, a[i], b[j], acc[i * q->fn + j]);
    }
}

typedef struct out_arg {
    ir_shm src;
    ir_val t0, r0;
    uint32_t tile_rows, src_stride, lanes; /* outputs per token in the tile; lanes per store */
} out_arg;

/* Output item i of the tile (token i / (tile_rows / lanes), rows in vectors): the
 * epilogue of the f32 sums in workgroup memory, for t < n and r < rows only. */
static void out_item(mm *m, ir_val i, const void *p) {
    const out_arg *a = p;
    uint32_t per = a->tile_rows / a->lanes;
    ir_val tl = ir_bin(m->k, IR_OP_DIV, i, cu(m, per));
    ir_val rl = mul(m, ir_bin(m->k, IR_OP_REM, i, cu(m, per)), cu(m, a->lanes));
    ir_val t = add(m, a->t0, tl), r = add(m, a->r0, rl);
    ir_if *f = ir_if_begin(m->k, ir_bin(m->k, IR_OP_AND, lt(m, t, m->n), lt(m, r, cu(m, m->rows))), 0);
    ir_val s[4], at = add(m, mul(m, tl, cu(m, a->src_stride)), rl);
    for (uint32_t l = 0; l < a->lanes; l++) s[l] = ir_shm_load(m->k, a->src, add(m, at, cu(m, l)), 1);
    store_y(m, t, r, s, a->lanes);
    ir_if_end(m->k, f, NULL);
}

static void build_mma(mm *m, const mma_cfg *cfg, uint32_t groups[2]) {
    ir_kernel *k = m->k;
    const rt_mma_shape *s = cfg->s;
    mma_ctx q = {.m = s->m, .n = s->n, .k = s->k, .fm = 32 / s->m, .fn = 32 / s->n, .stride = cfg->kc + MMA_PAD};
    m->wg = 4 * m->c->subgroup_size;
    ir_set_workgroup(k, m->wg, 1, 1);
    q.xs = ir_shared_array(k, "xs", m->dt, MMA_TILE * q.stride);
    q.ws = ir_shared_array(k, "ws", m->dt, MMA_TILE * q.stride);
    ir_shm cs = ir_shared_array(k, "cs", IR_F32, MMA_TILE * ACC_STRIDE);
    q.ta = ir_t_frag(k, IR_FRAG_A, m->dt, s->m, s->n, s->k);
    q.tb = ir_t_frag(k, IR_FRAG_B, m->dt, s->m, s->n, s->k);
    ir_type tc = ir_t_frag(k, IR_FRAG_ACC, IR_F32, s->m, s->n, s->k);
    ir_val sid = ir_id(k, IR_ID_SG_ID, 0);
    ir_val t0 = mul(m, ir_id(k, IR_ID_GROUP, 1), cu(m, MMA_TILE));
    ir_val r0 = mul(m, ir_id(k, IR_ID_GROUP, 0), cu(m, MMA_TILE));
    q.tm = mul(m, ir_bin(k, IR_OP_SHR, sid, cu(m, 1)), cu(m, 32));
    q.rn = mul(m, ir_bin(k, IR_OP_AND, sid, cu(m, 1)), cu(m, 32));

    /* a tile of tokens all at t >= n does nothing (uniform: group id and a loaded value) */
    ir_if *live = ir_if_begin(k, lt(m, t0, m->n), 0);
    uint32_t v = kn_vec_width(m->cols);
    chunker ch = {.sx = {m->x, q.xs, t0, IR_NONE, m->n_max - 1, 0, v, q.stride, 1, false, false},
                  .sw = {m->w, q.ws, r0, IR_NONE, m->rows - 1, 0, v, q.stride, 1, false, false},
                  .x_tile = MMA_TILE, .w_tile = MMA_TILE, .kc = cfg->kc, .kstep = s->k, .nacc = q.fm * q.fn,
                  .pipe = false, .math = mma_math, .q = &q};
    ir_val acc[16];
    ir_val zero = ir_frag_fill(k, tc, ir_const_f32(k, 0.0f));
    for (uint32_t i = 0; i < ch.nacc; i++) acc[i] = zero;
    run_chunks(m, &ch, acc);

    /* accumulators -> f32 workgroup memory (tokens x rows), then the epilogue by all */
    for (uint32_t i = 0; i < q.fm; i++)
        for (uint32_t j = 0; j < q.fn; j++) {
            ir_val at = add(m, mul(m, add(m, q.tm, cu(m, i * s->m)), cu(m, ACC_STRIDE)), add(m, q.rn, cu(m, j * s->n)));
            ir_frag_store(k, acc[i * q.fn + j], true, cs, at, cu(m, ACC_STRIDE), true);
        }
    ir_barrier(k);
    uint32_t lanes = kn_vec_width(m->rows);
    out_arg o = {cs, t0, r0, MMA_TILE, ACC_STRIDE, lanes};
    for_items(m, MMA_TILE * MMA_TILE / lanes, out_item, &o);
    ir_if_end(k, live, NULL);
    groups[0] = (m->rows + MMA_TILE - 1) / MMA_TILE;
    groups[1] = m->n_max / MMA_TILE;
}

/* ---- tiled kernel in workgroup memory ------------------------------------------------------ */

#define RR 4 /* consecutive rows per invocation */
#define SIMT_PAD 4

typedef struct simt_ctx {
    ir_shm xs, ws;
    ir_val tx, ty;
    uint32_t rt, sx, sw;
} simt_ctx;

/* The invocation's rt x 4 block over a staged chunk, k steps in a loop of 4 unrolled
 * (drivers unroll further; lavapipe compiles much faster than fully unrolled). */
static void simt_math(mm *m, const void *p, ir_val *acc, uint32_t ncols) {
    const simt_ctx *q = p;
    ir_kernel *k = m->k;
    uint32_t nacc = q->rt * RR, un = ncols % 4 ? 1 : 4;
    ir_for *l = ir_for_begin(k, cu(m, 0), cu(m, ncols), cu(m, un), nacc, acc);
    ir_val cur[8 * RR];
    for (uint32_t i = 0; i < nacc; i++) cur[i] = ir_for_arg(l, i);
    ir_val kk = ir_for_iv(l);
    ir_val xo = add(m, mul(m, kk, cu(m, q->sx)), mul(m, q->ty, cu(m, q->rt)));
    ir_val wo = add(m, mul(m, kk, cu(m, q->sw)), mul(m, q->tx, cu(m, RR)));
    for (uint32_t u = 0; u < un; u++) {
        ir_val xv[8], wv[RR];
        for (uint32_t i = 0; i < q->rt; i++) xv[i] = ir_shm_load(k, q->xs, add(m, xo, cu(m, u * q->sx + i)), 1);
        for (uint32_t j = 0; j < RR; j++) wv[j] = ir_shm_load(k, q->ws, add(m, wo, cu(m, u * q->sw + j)), 1);
        for (uint32_t i = 0; i < q->rt; i++)
            for (uint32_t j = 0; j < RR; j++) cur[i * RR + j] = ir_fma(k, xv[i], wv[j], cur[i * RR + j]);
    }
    ir_for_end(k, l, cur);
    for (uint32_t i = 0; i < nacc; i++) acc[i] = ir_for_result(l, i);
}

/* false when even 4-column chunks do not fit caps.shared_bytes */
static bool build_simt(mm *m, uint32_t groups[2]) {
    ir_kernel *k = m->k;
    simt_ctx q;
    m->wg = kn_workgroup(m->c, 256);
    uint32_t ntx = m->wg < 16 ? m->wg : 16, nty = m->wg / ntx;
    /* 16 or 32 outputs per invocation (8 x 4 at 256 was slower on the H200 for 1024 rows:
     * half the workgroups) */
    q.rt = m->wg >= 256 ? 4 : 8;
    uint32_t tn = ntx * RR, tm = nty * q.rt;
    q.sx = tm + SIMT_PAD, q.sw = tn + SIMT_PAD;
    /* the widest chunk that fits (16 KiB, the minimum, holds 16 columns of 64 + 64) */
    uint32_t kc = 32, limit = m->c->shared_bytes ? m->c->shared_bytes : 16384;
    while (kc > 4 && (q.sx + q.sw) * kc * 4 > limit) kc /= 2;
    if ((q.sx + q.sw) * kc * 4 > limit) return false;
    ir_set_workgroup(k, m->wg, 1, 1);
    q.xs = ir_shared_array(k, "xs", IR_F32, kc * q.sx);
    q.ws = ir_shared_array(k, "ws", IR_F32, kc * q.sw);
    q.tx = ir_bin(k, IR_OP_REM, m->lid, cu(m, ntx));
    q.ty = ir_bin(k, IR_OP_DIV, m->lid, cu(m, ntx));
    ir_val t0 = mul(m, ir_id(k, IR_ID_GROUP, 1), cu(m, tm));
    ir_val r0 = mul(m, ir_id(k, IR_ID_GROUP, 0), cu(m, tn));

    ir_if *live = ir_if_begin(k, lt(m, t0, m->n), 0);
    uint32_t v = kn_vec_width(m->cols);
    /* staged transposed (xs[c][token], ws[c][row]) so the math reads consecutive words */
    chunker ch = {.sx = {m->x, q.xs, t0, IR_NONE, m->n_max - 1, 0, v, 1, q.sx, false, true},
                  .sw = {m->w, q.ws, r0, IR_NONE, m->rows - 1, 0, v, 1, q.sw, false, true},
                  .x_tile = tm, .w_tile = tn, .kc = kc, .kstep = 1, .nacc = q.rt * RR, .pipe = true,
                  .math = simt_math, .q = &q};
    ir_val acc[8 * RR];
    for (uint32_t i = 0; i < ch.nacc; i++) acc[i] = ir_const_f32(k, 0.0f);
    run_chunks(m, &ch, acc);

    /* the invocation's block: tokens t0 + ty * rt + i, rows r0 + tx * 4 + j */
    uint32_t lanes = kn_vec_width(m->rows);
    for (uint32_t i = 0; i < q.rt; i++) {
        ir_val t = add(m, t0, add(m, mul(m, q.ty, cu(m, q.rt)), cu(m, i)));
        for (uint32_t j = 0; j < RR; j += lanes) {
            ir_val r = add(m, r0, add(m, mul(m, q.tx, cu(m, RR)), cu(m, j)));
            ir_if *f = ir_if_begin(k, ir_bin(k, IR_OP_AND, lt(m, t, m->n), lt(m, r, cu(m, m->rows))), 0);
            store_y(m, t, r, &acc[i * RR + j], lanes);
            ir_if_end(k, f, NULL);
        }
    }
    ir_if_end(k, live, NULL);
    groups[0] = (m->rows + tn - 1) / tn;
    groups[1] = (m->n_max + tm - 1) / tm;
    return true;
}

ir_kernel *kn_matmul(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype, unsigned epi,
                     uint32_t groups[2], char *err, size_t errlen) {
    if (kn_check_dtype(c, dtype, err, errlen)) return NULL;
    if (kn_check_epi("kn_matmul", epi, KN_EPI_BIAS | KN_EPI_RESIDUAL, err, errlen)) return NULL;
    if (rows == 0 || cols == 0 || n_max == 0 || n_max % 64 || (uint64_t)n_max * cols > UINT32_MAX ||
        (uint64_t)n_max * rows > UINT32_MAX || (uint64_t)rows * cols > UINT32_MAX) {
        kn_fail(err, errlen,
                "kn_matmul: bad shape (rows %u, cols %u, n_max %u; n_max a multiple of 64, u32 indices: n_max * cols, "
                "n_max * rows and rows * cols < 2^32)",
                rows, cols, n_max);
        return NULL;
    }
    uint32_t g[2];
    mma_cfg cfg;
    bool use_mma = mma_pick(c, dtype, &cfg);
    mm m = {.c = c, .rows = rows, .cols = cols, .n_max = n_max, .dt = dtype, .epi = epi};
    m.k = kn_create("kn_matmul", err, errlen);
    if (!m.k) return NULL;
    ir_kernel *k = m.k;
    m.w = ir_param_buffer(k, "W", dtype, IR_READ), m.x = ir_param_buffer(k, "X", dtype, IR_READ);
    m.y = ir_param_buffer(k, "Y", dtype, IR_WRITE), m.info = ir_param_buffer(k, "info", IR_U32, IR_READ);
    if (epi & KN_EPI_BIAS) m.b = ir_param_buffer(k, "b", dtype, IR_READ);
    if (epi & KN_EPI_RESIDUAL) m.res = ir_param_buffer(k, "res", dtype, IR_READ);
    ir_buffer_extent(k, m.w, (uint64_t)rows * cols);
    ir_buffer_extent(k, m.x, (uint64_t)n_max * cols);
    ir_buffer_extent(k, m.y, (uint64_t)n_max * rows);
    ir_buffer_extent(k, m.info, 2);
    if (epi & KN_EPI_BIAS) ir_buffer_extent(k, m.b, rows);
    if (epi & KN_EPI_RESIDUAL) ir_buffer_extent(k, m.res, (uint64_t)n_max * rows);
    m.lid = ir_id(k, IR_ID_LOCAL, 0);
    m.n = umin(&m, ir_load(k, m.info, cu(&m, 1), 1), cu(&m, n_max));
    if (use_mma) {
        build_mma(&m, &cfg, g);
    } else if (!build_simt(&m, g)) {
        kn_fail(err, errlen, "kn_matmul: caps.shared_bytes %u holds no tile", c->shared_bytes);
        ir_kernel_destroy(k);
        return NULL;
    }
    if (groups) groups[0] = g[0], groups[1] = g[1];
    return kn_finish(k, err, errlen);
}
