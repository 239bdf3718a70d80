/* The prefill projections for short blocks (at most 64 tokens): kn_matmul's math, but
 * each weight read once for all the block's tokens on the matrix units, so a short prompt
 * costs about one read of the weights, as a decode step does.
 *
 * A workgroup owns 16 or 32 rows of Y (one or two row fragments: two where the rows still
 * give half the compute units a workgroup) for every token of the block; its subgroups
 * (8, or 4 where the grid has over 1.4 workgroups a compute unit) split the columns (K)
 * into equal slices. Each subgroup walks its slice 32 columns a step, and
 * reads both operands 16 bytes a lane: lane (g = lane / 4, t = lane % 4) loads columns
 * 8t .. 8t + 7 of rows g and g + 8 of each row fragment and of token g of each token
 * fragment, as 4 words of 2 elements. Two 16x8x16 products consume them on a permutation
 * of the step's columns that A and B share (ir_frag_from_elems: product h takes words 2h
 * and 2h + 1, columns 8t + 4h .. 8t + 4h + 3, as its k = 2t, 2t + 1, 2t + 8, 2t + 9), so
 * the sums are the same products in another order. The kernel has one path per count
 * of live token fragments ((n + 7) / 8, a uniform branch: a 24-token block runs the path
 * of 3), so each loads and multiplies only what it needs, without branches in its loop,
 * and carries the loads of its next steps (weights and activations: the memory system
 * needs many loads in flight to reach its bandwidth, and the activations, which every
 * workgroup reads from the caches, would otherwise stall every step). The slices'
 * accumulators meet in f32 workgroup memory, are summed in slice order, and every
 * invocation applies the epilogue (kn_epilogue) to its share of the outputs. With
 * KN_EPI_SWIGLU the two row fragments are the same 16 rows of the gate (W) and of the up
 * (Wu), and Y gets silu(round(gate)) * round(up) rounded: the short block's feed-forward
 * in one launch, with the numbers of the separate products and kn_swiglu.
 *
 * Where the fragments' layout is the driver's (Vulkan's cooperative matrices) the same
 * walk loads whole fragments from the buffers instead (ir_frag_load: W's 16 x 16 row-major,
 * X's tokens as B's columns), 2 * wide of each a step, the next steps' in flight the same
 * way; token fragments are the shape's N (16 for the H200 driver's bf16, 8 where 16x8x16
 * is offered).
 *
 * kn_matmul_skinny_norm (CUDA's path only) takes X before the RMSNorm: after the grid wait
 * each subgroup sums the squares of its share of the block's live tokens (s, s + slices,
 * ..), and each token's scale goes to workgroup memory; the loop loads wn's columns with
 * each step's (in flight with them, shared by the token fragments) and makes each of X's
 * words h = round((x * scale) * wn) before the products, so the short block's norm costs
 * no launch and no round trip of h, and the results are the separate kernels' but for the
 * scale's summation order.
 *
 * Rows of X at t >= n hold anything: they only reach outputs that are not stored. The
 * shape must tile exactly (kn_matmul_skinny_ok): rows a multiple of 16, cols of 32 times
 * the slices, n_max of 8, no more than 64. `KILN_SKINNY=row_frags,slices,depth[,wide]`
 * forces a configuration where it fits (measuring; depth 0: by the registers; wide 2: a
 * step of 64 columns, each lane's two 16-byte loads of a row side by side, so four lanes
 * read 128 contiguous bytes of it). */
#include "base/error.h"
#include "kernels/kn_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define SKINNY_ROWS 16     /* rows of Y per row fragment: the fragments' M */
#define SKINNY_ROW_FRAGS 4 /* row fragments per workgroup at most (1, 2 or 4) */
#define SKINNY_TOKENS 8    /* tokens per B fragment: its N */
#define SKINNY_STEP 32     /* columns per step: two 16-deep products */
#define SKINNY_MAX 64      /* tokens per block at most (8 accumulators per lane) */
#define SKINNY_SLICES 8    /* subgroups per workgroup by default, each a slice of the columns */
#define SKINNY_MAX_SLICES 16
#define SKINNY_MAX_DEPTH 4 /* steps of loads in flight ahead of the products at most */
#define SKINNY_MAX_WIDE 2  /* 16-byte loads per row and token a step at most */

/* Where the fragments' elements per lane are known (CUDA's 16x8x16, ir_frag_from_elems), the
 * kernel loads both operands itself; elsewhere (Vulkan's cooperative matrices, whose
 * layout is the driver's) it loads whole fragments from the buffers (ir_frag_load). */
static bool skinny_opaque(const rt_caps *c) { return c->backend != RT_CUDA; }

/* The dtype x dtype -> f32 shape: 16x8x16 on CUDA; elsewhere 16 x n x 16 with n 8, or 16
 * where 8 is not offered (the H200's Vulkan driver has only 16x16x16 for bf16). NULL: none. */
static const rt_mma_shape *skinny_shape(const rt_caps *c, ir_scalar dtype) {
    const rt_mma_shape *best = NULL;
    for (uint32_t i = 0; c && i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->mma[i];
        bool n_ok = s->n == SKINNY_TOKENS || (skinny_opaque(c) && s->n == 2 * SKINNY_TOKENS);
        if (s->ab_type == (uint32_t)dtype && s->acc_type == IR_F32 && s->m == SKINNY_ROWS && n_ok && s->k == 16 &&
            (!best || s->n < best->n))
            best = s;
    }
    return best;
}

typedef struct skinny_cfg {
    uint32_t row_frags, slices, depth; /* depth 0: by the registers each path needs (depth_for) */
    uint32_t wide;                     /* 16-byte loads per row and token a step: 32 * wide columns */
} skinny_cfg;

/* the slices' f32 sums, and with the norm each token's scale */
static uint32_t sums_bytes(const skinny_cfg *g, uint32_t n_max, bool norm) {
    return g->slices * g->row_frags * SKINNY_ROWS * n_max * 4u + (norm ? n_max * 4u : 0);
}

/* swiglu: the gate's and the up's 16 rows, two fragments, for 16 rows of Y */
static bool cfg_fits(const rt_caps *c, const skinny_cfg *g, uint32_t rows, uint32_t cols, uint32_t n_max,
                     bool swiglu, bool norm) {
    uint32_t wg = g->slices * c->subgroup_size, out_rows = g->row_frags * SKINNY_ROWS / (swiglu ? 2 : 1);
    bool frags_ok = g->row_frags == 1 || g->row_frags == 2 || g->row_frags == 4;
    return frags_ok && (!swiglu || g->row_frags >= 2) &&
           rows % out_rows == 0 &&
           g->wide >= 1 && g->wide <= SKINNY_MAX_WIDE && g->slices >= 1 && g->slices <= SKINNY_MAX_SLICES &&
           cols % (g->slices * SKINNY_STEP * g->wide) == 0 &&
           g->depth <= SKINNY_MAX_DEPTH && wg <= 1024 && (!c->max_workgroup || wg <= c->max_workgroup) &&
           (!c->shared_bytes || sums_bytes(g, n_max, norm) <= c->shared_bytes);
}

/* Two row fragments where rows / 32 workgroups still cover the device; as many slices as
 * SKINNY_SLICES that split cols into whole steps and whose sums fit; or the forced
 * KILN_SKINNY configuration where it fits. False when nothing fits. */
static bool skinny_pick(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, bool swiglu, bool norm,
                        skinny_cfg *g) {
    uint32_t units = c->compute_units ? c->compute_units : 128;
    const char *e = getenv("KILN_SKINNY");
    unsigned v[4] = {0, 0, 0, 1};
    if (e && sscanf(e, "%u,%u,%u,%u", &v[0], &v[1], &v[2], &v[3]) >= 3) {
        skinny_cfg f = {v[0], v[1], v[2], v[3]};
        if (cfg_fits(c, &f, rows, cols, n_max, swiglu, norm)) {
            *g = f;
            return true;
        }
    }
    /* measured on the H200 (132 SMs), qwen3-8b's products at 24 tokens: two row fragments
     * (the activations, which every workgroup reads, are then 3/4 of the weights' bytes
     * where one gives 3/2) even at 128 workgroups; and at qwen3.5-4b's 2560 rows, 80
     * workgroups of two (every SM one or none) against 160 of one (28 SMs with two): the
     * down product 22.7 -> 16.6 us, the o and DeltaNet out products 12.0 -> 9.2. So two
     * wherever their grid covers half the compute units. 4 slices where the grid is over
     * 1.4 waves (two workgroups an SM), else 8 */
    g->row_frags = swiglu || (rows % (2 * SKINNY_ROWS) == 0 && rows / (2 * SKINNY_ROWS) * 2 >= units) ? 2 : 1;
    g->depth = 0; /* by the registers (depth_for) */
    uint32_t wgs = rows / (g->row_frags * SKINNY_ROWS / (swiglu ? 2 : 1));
    /* steps of 64 columns where the slices split into them (the H200, 24 tokens: qwen3-8b's
     * layer 132.8 -> 118.4 us, qwen3-4b's pp24 +12%) */
    for (g->slices = wgs * 10 >= units * 14 ? SKINNY_SLICES / 2 : SKINNY_SLICES; g->slices >= 1; g->slices /= 2)
        for (g->wide = SKINNY_MAX_WIDE; g->wide >= 1; g->wide--)
            if (cfg_fits(c, g, rows, cols, n_max, swiglu, norm)) return true;
    return false;
}

static bool skinny_ok(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_all, ir_scalar dtype, bool norm) {
    const rt_mma_shape *s = c ? skinny_shape(c, dtype) : NULL;
    /* past 64 tokens, blocks of 64 on the grid's y */
    uint32_t n_max = n_all > SKINNY_MAX && n_all % SKINNY_MAX == 0 ? SKINNY_MAX : n_all;
    /* CUDA's path reads the fragments' elements as subgroups of 32 hold them */
    if (!s || (!skinny_opaque(c) && c->subgroup_size != 32)) return false;
    if (rows == 0 || rows % SKINNY_ROWS || cols == 0 || cols % SKINNY_STEP || n_max == 0 || n_max % s->n ||
        n_max > SKINNY_MAX)
        return false;
    skinny_cfg g;
    if (!skinny_pick(c, rows, cols, n_max, false, norm, &g) || !skinny_pick(c, rows, cols, n_max, true, norm, &g))
        return false;
    return (uint64_t)rows * cols <= UINT32_MAX && (uint64_t)n_all * cols <= UINT32_MAX &&
           (uint64_t)n_all * rows <= UINT32_MAX;
}

bool kn_matmul_skinny_ok(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_all, ir_scalar dtype) {
    return skinny_ok(c, rows, cols, n_all, dtype, false);
}

/* The norm's prologue sums each token's squares across a subgroup's lanes (subgroup
 * reduce) and normalizes X's words as the kernel loads them: the non-opaque path only. */
bool kn_matmul_skinny_norm_ok(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_all, ir_scalar dtype) {
    return c && !skinny_opaque(c) && c->subgroup_arith && skinny_ok(c, rows, cols, n_all, dtype, true);
}

typedef struct skinny {
    kx k;
    uint32_t rows, cols, n_max, slices, depth, wide, invocations;
    uint32_t row_frags, frag_rows; /* row fragments per workgroup, and the rows of sums they hold */
    uint32_t tile_rows;            /* rows of Y a workgroup: frag_rows, or 16 for SwiGLU (gate and up) */
    uint32_t tok;                  /* tokens per B fragment: the shape's N */
    ir_scalar dtype;
    unsigned epi;
    bool swiglu, opaque;           /* opaque: whole fragments from the buffers (skinny_opaque) */
    bool norm;                     /* X un-normalized: its RMSNorm applied as it is loaded (wn, scale) */
    ir_type ta, tb;                /* the A and B fragment types */
    ir_buf w, wu, x, y, info, b, res; /* w, wu and x as u32 words of two elements (opaque: of dtype) */
    ir_buf wn;                        /* the norm's weight, u32 words */
    ir_shm sums; /* [slice][frag_rows rows][n_max tokens], f32 */
    ir_shm scale; /* the norm's scale of each live token of the block, f32 */
    ir_val r0, n;    /* the workgroup's first row, and its block's live tokens */
    ir_val t0;       /* the block's first token (blocks of 64 on y past 64 tokens) */
    ir_val w_lane, x_lane; /* the lane's first word of W (row r0 + g) and of X (token g) */
    ir_val lg, wn_lane;    /* the lane's g, and its first word of wn (X's columns) */
    ir_val sc[SKINNY_MAX / SKINNY_TOKENS]; /* the norm's scale of token g of each token fragment, splat to 4 */
} skinny;

#define W_LOADS (SKINNY_ROW_FRAGS * 2 * SKINNY_MAX_WIDE) /* loads of W a step: rows g, g + 8 of each row fragment */
#define X_LOADS (SKINNY_MAX / SKINNY_TOKENS * SKINNY_MAX_WIDE) /* of X: token g of each live token fragment */
#define FRAG_LOADS (2 * SKINNY_MAX_WIDE * (SKINNY_ROW_FRAGS + SKINNY_MAX / SKINNY_TOKENS)) /* opaque, a step */
#define N_LOADS (SKINNY_MAX_WIDE) /* of wn, with the norm */
#define U32_LOADS (W_LOADS + X_LOADS + N_LOADS)
#define STEP_LOADS (FRAG_LOADS > U32_LOADS ? FRAG_LOADS : U32_LOADS) /* either path */
#define MAX_ACC (SKINNY_ROW_FRAGS * SKINNY_MAX / SKINNY_TOKENS)
#define DEPTH_REGS 96 /* registers for the loads in flight, where the depth is not forced */

/* The step at word offset c: rows g and g + 8 of each row fragment of W, then token g of
 * each of the nf token fragments of X, wide loads of 4 words each (a row's or token's
 * loads next to each other: out[(row or token) * wide + v]); with the norm, then wn's same
 * columns (shared by every token fragment). */
static void load_step(const skinny *q, ir_val c, uint32_t nf, ir_val *out) {
    kx k = q->k;
    ir_val wat = kx_add(k, q->w_lane, c), xat = kx_add(k, q->x_lane, c);
    uint32_t nw = q->row_frags * 2, wd = q->wide;
    for (uint32_t i = 0; i < nw; i++) { /* SwiGLU: the gate's fragments' rows g, g + 8, then the up's */
        uint32_t f = i / 2, up = q->swiglu && f >= q->row_frags / 2, r8 = 2 * (up ? f - q->row_frags / 2 : f) + i % 2;
        for (uint32_t v = 0; v < wd; v++)
            out[i * wd + v] = kx_load(k, up ? q->wu : q->w, kx_add_c(k, wat, r8 * 8 * q->cols / 2 + 4 * v), 4);
    }
    for (uint32_t j = 0; j < nf; j++)
        for (uint32_t v = 0; v < wd; v++)
            out[(nw + j) * wd + v] = kx_load(k, q->x, kx_add_c(k, xat, j * SKINNY_TOKENS * q->cols / 2 + 4 * v), 4);
    if (!q->norm) return;
    ir_val nat = kx_add(k, q->wn_lane, c);
    for (uint32_t v = 0; v < wd; v++) out[(nw + nf) * wd + v] = kx_load(k, q->wn, kx_add_c(k, nat, 4 * v), 4);
}

/* 4 elements of the 16-bit type from words wa, wb (each two elements, low half first) */
static ir_val pair_elems(const skinny *q, ir_val wa, ir_val wb) {
    kx k = q->k;
    ir_val v[2] = {wa, wb};
    return kx_bitcast(k, kx_vec(k, v, 2), kx_t(k, q->dtype, 4));
}

/* Words 2h and 2h + 1 of the u32x4 v as 4 f32 elements (built in that order). */
static ir_val half_f32(const skinny *q, ir_val v, uint32_t h) {
    kx k = q->k;
    ir_val lo = kx_lane(k, v, 2 * h), hi = kx_lane(k, v, 2 * h + 1);
    return kx_convert(k, pair_elems(q, lo, hi), kx_t(k, IR_F32, 4));
}

/* 4 elements of X as the norm makes them: round((x * scale) * wn) to dtype, kn_rmsnorm's
 * order and rounding (sv: the token's scale, wf: wn's 4 elements, both f32 x 4). */
static ir_val norm_elems(const skinny *q, ir_val e, ir_val sv, ir_val wf) {
    kx k = q->k;
    ir_val xs = kx_mul(k, kx_convert(k, e, kx_t(k, IR_F32, 4)), sv);
    return kx_convert(k, kx_mul(k, xs, wf), kx_t(k, q->dtype, 4));
}

/* acc[i * nf + j] += the step's products (ld: its loads, load_step) */
static void step_products(const skinny *q, const ir_val *ld, uint32_t nf, ir_val *acc) {
    kx k = q->k;
    ir_type ta = q->ta, tb = q->tb;
    uint32_t wd = q->wide;
    const ir_val *xw = ld + q->row_frags * 2 * wd, *wnv = xw + nf * wd;
    for (uint32_t p = 0; p < 2 * wd; p++) { /* product p: load v = p / 2, its words 2h, 2h + 1 */
        uint32_t v = p / 2, h = p % 2;
        ir_val a[SKINNY_ROW_FRAGS];
        for (uint32_t i = 0; i < q->row_frags; i++) {
            /* A elements 0..3: rows g, g + 8 at k 2t, 2t + 1; 4..7 the same at 2t + 8, 2t + 9 */
            ir_val g0 = ld[2 * i * wd + v], g8 = ld[(2 * i + 1) * wd + v];
            ir_val lo = pair_elems(q, kx_lane(k, g0, 2 * h), kx_lane(k, g8, 2 * h));
            ir_val hi = pair_elems(q, kx_lane(k, g0, 2 * h + 1), kx_lane(k, g8, 2 * h + 1));
            a[i] = ir_frag_from_elems(k.ir, ta, lo, hi);
        }
        ir_val wf = IR_NONE; /* wn at the same columns */
        if (q->norm) wf = half_f32(q, wnv[v], h);
        for (uint32_t j = 0; j < nf; j++) {
            /* B elements: k 2t, 2t + 1 (word 2h), 2t + 8, 2t + 9 (word 2h + 1) of token g */
            ir_val xv = xw[j * wd + v];
            ir_val e = pair_elems(q, kx_lane(k, xv, 2 * h), kx_lane(k, xv, 2 * h + 1));
            if (q->norm) e = norm_elems(q, e, q->sc[j], wf);
            ir_val b = ir_frag_from_elems(k.ir, tb, e, IR_NONE);
            for (uint32_t i = 0; i < q->row_frags; i++) acc[i * nf + j] = ir_frag_mma(k.ir, a[i], b, acc[i * nf + j]);
        }
    }
}

/* Opaque fragments: the step at word offset c (column 2c of the slice) is 2 * wide
 * 16-column fragments of W (each row fragment: rows r0 + 16i, or SwiGLU's gate and up
 * rows r0) and of X (token fragment j: tokens j * tok.., X's rows read as B's columns),
 * loaded whole, 16 bytes a lane (every base and the stride are multiples of 32 elements:
 * cols is, and so are the slices and steps); out[kf * (row_frags + nf) + i], the token
 * fragments after the rows. */
static void frag_load_step(const skinny *q, ir_val c, uint32_t nf, ir_val *out) {
    kx k = q->k;
    ir_val col = kx_add(k, q->w_lane, kx_mul_c(k, c, 2)), xcol = kx_add(k, q->x_lane, kx_mul_c(k, c, 2));
    ir_val stride = kx_u32(k, q->cols);
    uint32_t per = q->row_frags + nf;
    for (uint32_t kf = 0; kf < 2 * q->wide; kf++) {
        for (uint32_t i = 0; i < q->row_frags; i++) {
            bool up = q->swiglu && i >= q->row_frags / 2;
            uint32_t f = up ? i - q->row_frags / 2 : i;
            ir_val at = kx_add_c(k, col, f * SKINNY_ROWS * q->cols + kf * 16);
            out[kf * per + i] = ir_frag_load_aligned(k.ir, q->ta, up ? q->wu : q->w, at, stride, true);
        }
        for (uint32_t j = 0; j < nf; j++) {
            ir_val at = kx_add_c(k, xcol, j * q->tok * q->cols + kf * 16);
            out[kf * per + q->row_frags + j] = ir_frag_load_aligned(k.ir, q->tb, q->x, at, stride, false);
        }
    }
}

static void frag_step_products(const skinny *q, const ir_val *ld, uint32_t nf, ir_val *acc) {
    uint32_t per = q->row_frags + nf;
    for (uint32_t kf = 0; kf < 2 * q->wide; kf++)
        for (uint32_t j = 0; j < nf; j++)
            for (uint32_t i = 0; i < q->row_frags; i++)
                acc[i * nf + j] = ir_frag_mma(q->k.ir, ld[kf * per + i], ld[kf * per + q->row_frags + j], acc[i * nf + j]);
}

/* Values a step loads: u32x4 words (rows g, g + 8 of each row fragment, token g of each
 * token fragment, with the norm wn's, wide of each), or opaque fragments (every row and
 * token fragment for each of 2 * wide column fragments). */
static uint32_t step_loads(const skinny *q, uint32_t nf) {
    return q->opaque ? 2 * q->wide * (q->row_frags + nf) : (q->row_frags * 2 + nf + q->norm) * q->wide;
}

/* Steps of loads in flight for nf token fragments: the forced depth, else as many as
 * DEPTH_REGS registers hold (4 a load: a u32x4, or an opaque fragment's 8 or fewer
 * 16-bit elements a lane), 1..SKINNY_MAX_DEPTH. */
static uint32_t depth_for(const skinny *q, uint32_t nf) {
    if (q->depth) return q->depth;
    uint32_t d = DEPTH_REGS / (step_loads(q, nf) * 4);
    return d < 1 ? 1 : d > SKINNY_MAX_DEPTH ? SKINNY_MAX_DEPTH : d;
}

/* The subgroup's slice of the columns for a block of nf token fragments, a step at a
 * time, the loads of the next steps in flight (the last steps load the slice's last step
 * again rather than past it); acc: rf * nf accumulators. */
static void slice_products(const skinny *q, uint32_t nf, ir_val *acc) {
    kx k = q->k;
    uint32_t sw = SKINNY_STEP / 2 * q->wide; /* words a step */
    uint32_t per = q->cols / q->slices / 2, steps = per / sw, n_acc = q->row_frags * nf;
    uint32_t n_ld = step_loads(q, nf), depth = depth_for(q, nf), n_carry = n_acc + depth * n_ld;
    void (*load)(const skinny *, ir_val, uint32_t, ir_val *) = q->opaque ? frag_load_step : load_step;
    ir_val first = kx_mul_c(k, kx_sg_id(k), per), last_step = kx_add_c(k, first, per - sw);
    ir_val carry[MAX_ACC + SKINNY_MAX_DEPTH * STEP_LOADS], next[MAX_ACC + SKINNY_MAX_DEPTH * STEP_LOADS];
    ir_val cur[STEP_LOADS];
    for (uint32_t j = 0; j < n_acc; j++) carry[j] = acc[j];
    for (uint32_t d = 0; d < depth; d++)
        load(q, kx_add_c(k, first, (d < steps ? d : steps - 1) * sw), nf, carry + n_acc + d * n_ld);
    ir_for *l = ir_for_begin(k.ir, first, kx_add_c(k, first, per), kx_u32(k, sw), n_carry, carry);
    ir_val c = ir_for_iv(l);
    for (uint32_t j = 0; j < n_carry; j++) next[j] = ir_for_arg(l, j);
    for (uint32_t i = 0; i < n_ld; i++) cur[i] = next[n_acc + i];
    /* the ring moves down one step; the step depth ahead is loaded before the products */
    for (uint32_t d = 0; d + 1 < depth; d++)
        for (uint32_t i = 0; i < n_ld; i++) next[n_acc + d * n_ld + i] = next[n_acc + (d + 1) * n_ld + i];
    load(q, kx_min(k, kx_add_c(k, c, depth * sw), last_step), nf, next + n_acc + (depth - 1) * n_ld);
    (q->opaque ? frag_step_products : step_products)(q, cur, nf, next);
    ir_for_end(k.ir, l, next);
    for (uint32_t j = 0; j < n_acc; j++) acc[j] = ir_for_result(l, j);
}

/* The block's products where (n + tok - 1) / tok == nf, its sums stored for the slice: slice s's
 * frag_rows x n_max sums (rows x tokens) at s * frag_rows * n_max (token fragments past
 * nf are not written and reach no stored output). */
static void products_for(const skinny *q0, uint32_t nf, ir_val zero) {
    skinny qn = *q0, *q = &qn;
    kx k = q->k;
    ir_val acc[MAX_ACC];
    for (uint32_t j = 0; j < q->row_frags * nf; j++) acc[j] = zero;
    for (uint32_t j = 0; q->norm && j < nf; j++) /* token g's scale of each live fragment, once */
        q->sc[j] = kx_splat(k, kx_shm_load(k, q->scale, kx_add_c(k, q->lg, j * q->tok), 1), 4);
    slice_products(q, nf, acc);
    ir_val base = kx_mul_c(k, kx_sg_id(k), q->frag_rows * q->n_max), stride = kx_u32(k, q->n_max);
    for (uint32_t i = 0; i < q->row_frags; i++)
        for (uint32_t j = 0; j < nf; j++) {
            ir_val at = kx_add_c(k, base, i * SKINNY_ROWS * q->n_max + j * q->tok);
            ir_frag_store(k.ir, acc[i * nf + j], true, q->sums, at, stride, true);
        }
}

/* Sum of the slices' sums at row rl of the fragments' rows (the slices in order). */
static ir_val slice_sum(const skinny *q, ir_val rl, ir_val t) {
    kx k = q->k;
    ir_val at = kx_add(k, kx_mul_c(k, rl, q->n_max), t), sum = IR_NONE;
    for (uint32_t s = 0; s < q->slices; s++) {
        ir_val v = kx_shm_load(k, q->sums, kx_add_c(k, at, s * q->frag_rows * q->n_max), 1);
        sum = s ? kx_add(k, sum, v) : v;
    }
    return sum;
}

/* Output item i: token i / (tile_rows / lanes), rows in vectors of lanes: the epilogue
 * (SwiGLU: silu(round(gate)) * round(up), as the separate products and kn_swiglu give),
 * stored for t < n. */
static void out_item(const skinny *q, ir_val i, uint32_t lanes) {
    kx k = q->k;
    uint32_t per = q->tile_rows / lanes;
    ir_val t = kx_div_c(k, i, per);
    ir_val rl = kx_mul_c(k, kx_rem_c(k, i, per), lanes);
    ir_if *f = kx_if(k, kx_lt(k, t, q->n));
    ir_val r = kx_add(k, q->r0, rl), yi = kx_idx(k, kx_add(k, q->t0, t), q->rows, r), o[4];
    for (uint32_t l = 0; l < lanes; l++) {
        ir_val sum = slice_sum(q, kx_add_c(k, rl, l), t);
        if (q->swiglu) {
            ir_val up = slice_sum(q, kx_add_c(k, rl, q->tile_rows + l), t); /* the up's rows follow the gate's */
            ir_val g = kx_as(k, kx_as(k, sum, q->dtype), IR_F32), u = kx_as(k, kx_as(k, up, q->dtype), IR_F32);
            o[l] = kx_as(k, kn_silu_mul(k, g, u), q->dtype);
            continue;
        }
        ir_val res_at = kx_add_c(k, yi, l), b_at = kx_add_c(k, r, l);
        o[l] = kn_epilogue(k, q->epi, sum, q->b, b_at, q->res, res_at, q->dtype);
    }
    kx_store(k, q->y, yi, lanes == 1 ? o[0] : kx_vec(k, o, lanes));
    kx_end_if(k, f);
}

/* Each live token's scale (kn_rms_of_sum of its f32 sum of squares) into workgroup
 * memory: subgroup s takes tokens s, s + slices, .., its lanes split the columns 8 a load
 * (u of them in flight where the row is whole steps of them), lane 0 stores; then one
 * barrier (reached by every invocation). The scales past n are not written. */
static void norm_prologue(skinny *q, float eps) {
    kx k = q->k;
    uint32_t sg = k.caps->subgroup_size, words = q->cols / 2, u = 4;
    while (u > 1 && words % (4 * sg * u)) u /= 2;
    q->scale = kx_shared(k, "scale", IR_F32, q->n_max);
    ir_val first = kx_sg_id(k), step = kx_u32(k, q->slices), t;
    ir_for *each = kx_for(k, first, q->n, step, &t);
    ir_val row = kx_mul_c(k, kx_add(k, q->t0, t), words);
    ir_val zero = kx_splat(k, kx_f32(k, 0.0f), 4), lane4 = kx_mul_c(k, kx_sg_lane(k), 4);
    ir_val end = kx_u32(k, words), stride = kx_u32(k, 4 * sg * u);
    ir_for *l = ir_for_begin(k.ir, lane4, end, stride, 1, &zero);
    ir_val ss = ir_for_arg(l, 0), at = kx_add(k, row, ir_for_iv(l)), ld[4];
    for (uint32_t i = 0; i < u; i++) ld[i] = kx_load(k, q->x, i ? kx_add_c(k, at, i * 4 * sg) : at, 4);
    for (uint32_t i = 0; i < u; i++)
        for (uint32_t h = 0; h < 2; h++) {
            ir_val f = half_f32(q, ld[i], h);
            ss = kx_fma(k, f, f, ss);
        }
    ir_for_end(k.ir, l, &ss);
    ir_val total = kx_sg_sum(k, kn_lane_sum(k, ir_for_result(l, 0), 4));
    ir_if *l0 = kx_if(k, kx_eq_c(k, kx_sg_lane(k), 0));
    kx_shm_store(k, q->scale, t, kn_rms_of_sum(k, total, q->cols, eps));
    kx_end_if(k, l0);
    kx_end_for(k, each);
    kx_barrier(k);
}

static ir_kernel *build(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_all, ir_scalar dtype, unsigned epi,
                        bool norm, float eps, uint32_t groups[2], kiln_err *err) {
    const char *name = norm ? "kn_matmul_skinny_norm" : "kn_matmul_skinny";
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (kn_check_epi(name, epi, KN_EPI_BIAS | KN_EPI_RESIDUAL | KN_EPI_SWIGLU | KN_EPI_F32, err))
        return NULL;
    if (norm && (!(eps >= 0.0f) || !isfinite(eps))) {
        kiln_fail(err, KILN_ERR_INVALID, "%s: bad eps %g", name, (double)eps);
        return NULL;
    }
    skinny_cfg g;
    bool swiglu = epi & KN_EPI_SWIGLU;
    uint32_t n_max = n_all > SKINNY_MAX ? SKINNY_MAX : n_all;
    bool ok = norm ? kn_matmul_skinny_norm_ok(c, rows, cols, n_all, dtype)
                   : kn_matmul_skinny_ok(c, rows, cols, n_all, dtype);
    if (!ok || !skinny_pick(c, rows, cols, n_max, swiglu, norm, &g)) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED,
                  "%s: %u x %u for %u tokens does not tile (rows of 16, columns of 32 per slice, "
                  "up to 64 tokens in whole fragments, or blocks of 64) or the caps lack 16x8x16 %s fragments (CUDA: in subgroups "
                  "of 32; elsewhere also 16x16x16%s)",
                  name, rows, cols, n_all, ir_scalar_name(dtype), norm ? "; the norm: CUDA's only" : "");
        return NULL;
    }
    uint32_t blocks = (n_all + n_max - 1) / n_max; /* n_max > 0 where it tiles */
    const rt_mma_shape *s = skinny_shape(c, dtype);
    skinny q = {.rows = rows, .cols = cols, .n_max = n_max, .dtype = dtype, .epi = epi, .row_frags = g.row_frags,
                .slices = g.slices, .depth = g.depth, .wide = g.wide, .swiglu = swiglu, .tok = s->n,
                .opaque = skinny_opaque(c), .norm = norm};
    q.frag_rows = q.row_frags * SKINNY_ROWS;
    q.tile_rows = swiglu ? q.frag_rows / 2 : q.frag_rows;
    q.k = (kx){kn_create(name, err), c};
    if (!q.k.ir) return NULL;
    kx k = q.k;
    /* u32 words of two elements where the kernel reads the elements itself */
    ir_scalar in = q.opaque ? dtype : IR_U32;
    uint64_t per_word = q.opaque ? 1 : 2;
    q.w = kx_buffer(k, "W", in, IR_READ, (uint64_t)rows * cols / per_word);
    if (swiglu) q.wu = kx_buffer(k, "Wu", in, IR_READ, (uint64_t)rows * cols / per_word);
    q.x = kx_buffer(k, "X", in, IR_READ, (uint64_t)n_all * cols / per_word);
    q.y = kx_buffer(k, "Y", epi & KN_EPI_F32 ? IR_F32 : dtype, IR_WRITE, (uint64_t)n_all * rows);
    q.info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    if (epi & KN_EPI_BIAS) q.b = kx_buffer(k, "b", dtype, IR_READ, rows);
    if (epi & KN_EPI_RESIDUAL) q.res = kx_buffer(k, "res", dtype, IR_READ, (uint64_t)n_all * rows);
    if (norm) q.wn = kx_buffer(k, "wn", IR_U32, IR_READ, cols / 2);
    q.invocations = q.slices * c->subgroup_size;
    kx_workgroup(k, q.invocations);
    q.sums = kx_shared(k, "sums", IR_F32, q.slices * q.frag_rows * n_max);
    ir_val lid = kx_local(k), lane = kx_sg_lane(k);
    /* g, and lane t's first word of a step: 4 * wide t */
    ir_val lg = kx_shr_c(k, lane, 2), lt4 = kx_mul_c(k, kx_and_c(k, lane, 3), 4 * q.wide);
    q.r0 = kx_group_times(k, 0, q.tile_rows);
    if (blocks == 1) { /* the weights while the kernel before ends (kn_early.c) */
        kn_prefetch_rows(k, q.w, q.r0, q.tile_rows, rows, cols, (uint32_t)per_word, swiglu ? 2 : 1);
        if (swiglu) kn_prefetch_rows(k, q.wu, q.r0, q.tile_rows, rows, cols, (uint32_t)per_word, 2);
    }
    ir_grid_wait(k.ir);
    /* the block's tokens: min(n, n_all) - t0, at most n_max, 0 past n */
    ir_val n_in = kx_min(k, kx_load(k, q.info, kx_u32(k, 1), 1), kx_u32(k, n_all));
    q.t0 = blocks > 1 ? kx_group_times(k, 1, n_max) : kx_u32(k, 0);
    q.n = blocks > 1 ? kx_select(k, kx_lt(k, q.t0, n_in), kx_min(k, kx_sub(k, n_in, q.t0), kx_u32(k, n_max)),
                                 kx_u32(k, 0))
                     : n_in;
    if (q.opaque) { /* the subgroup's W element at row r0, column 0; X's of token t0 */
        q.w_lane = kx_mul_c(k, q.r0, cols);
        q.x_lane = kx_mul_c(k, q.t0, cols);
    } else {
        q.w_lane = kx_add(k, kx_mul_c(k, kx_add(k, q.r0, lg), cols / 2), lt4);
        q.x_lane = kx_add(k, kx_mul_c(k, kx_add(k, q.t0, lg), cols / 2), lt4);
        q.lg = lg, q.wn_lane = lt4;
    }
    if (norm) norm_prologue(&q, eps);
    q.ta = ir_t_frag(k.ir, IR_FRAG_A, dtype, s->m, s->n, s->k);
    q.tb = ir_t_frag(k.ir, IR_FRAG_B, dtype, s->m, s->n, s->k);
    ir_type tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, s->m, s->n, s->k);
    ir_val zero = ir_frag_fill(k.ir, tc, kx_f32(k, 0.0f));
    /* one path per count of live token fragments (n + tok - 1) / tok, each with only its
     * loads and products: no branches in the loop, only the registers it needs */
    ir_val n_frags = kx_div_c(k, kx_add_c(k, q.n, q.tok - 1), q.tok);
    for (uint32_t nf = 1; nf <= n_max / q.tok; nf++) {
        ir_if *f = kx_if(k, kx_eq_c(k, n_frags, nf));
        products_for(&q, nf, zero);
        kx_end_if(k, f);
    }
    kx_barrier(k);

    uint32_t lanes = kn_vec_width(q.tile_rows), items = n_max * q.tile_rows / lanes;
    for (uint32_t j = 0; j * q.invocations < items; j++) {
        ir_val i = kx_add_c(k, lid, j * q.invocations);
        if ((j + 1) * q.invocations <= items) {
            out_item(&q, i, lanes);
        } else {
            ir_if *f = kx_if(k, kx_lt_c(k, i, items));
            out_item(&q, i, lanes);
            kx_end_if(k, f);
        }
    }
    if (groups) groups[0] = rows / q.tile_rows, groups[1] = blocks;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_matmul_skinny(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_all, ir_scalar dtype,
                            unsigned epi, uint32_t groups[2], kiln_err *err) {
    return build(c, rows, cols, n_all, dtype, epi, false, 0.0f, groups, err);
}

ir_kernel *kn_matmul_skinny_norm(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_all, ir_scalar dtype,
                                 unsigned epi, float eps, uint32_t groups[2], kiln_err *err) {
    return build(c, rows, cols, n_all, dtype, epi, true, eps, groups, err);
}
