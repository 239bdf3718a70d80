/* The prefill product on workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2):
 * the whole workgroup holds its 128 tokens x 128 rows of sums as two accumulators of
 * 64 x 128, and each step of 32 columns loads X's and W's pieces with tensor addressing
 * straight from the buffers (X as A, W transposed as B: a weight row is one of B's
 * columns). The compiler stages those loads through workgroup memory itself, and the
 * tensor layouts' clamping reads 0 outside the matrices, so a token, row or column tail
 * needs no masking: the product of a zero is zero.
 *
 * The sums leave through 33 KiB of workgroup memory (of the 48 the H200's driver offers,
 * 8 of which it keeps for its staging), one accumulator at a time, so every invocation
 * applies the epilogue to its share with plain (vector) stores, as the subgroup-scope
 * variant (matmul_coop.c) does.
 *
 * Chosen by the probe's caps.wg_mma (KILN_MATMUL_COOP=small|large takes the subgroup-scope
 * tiles instead). On an H100's Vulkan (NVIDIA 580.159.04, bf16) `kiln probe --measure`'s
 * product did 156 TFLOP/s here against 114 with matmul_coop.c's large tile and 72.6 with
 * its small one; qwen3-8b pp512 8,934 tok/s against 7,416 and 4,616 (same run). */
#include "kernels/matmul_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUT_PAD 4 /* f32 words after each row of the staged sums */

/* KILN_MATMUL_COOP=small or large asks for matmul_coop.c's tiles */
static bool refused(void) {
    const char *e = getenv("KILN_MATMUL_COOP");
    return e && (!strcmp(e, "small") || !strcmp(e, "large"));
}

/* the tiling: 64 x 128 accumulators, two along tokens, 32 columns a step (measured, H100:
 * bench/results/2026-12-07-sessions48-49.md), or KILN_COOP2's five numbers where they parse
 * (measuring) */
static void tiling(mm_coop2_cfg *cfg) {
    const char *st = getenv("KILN_COOP2_STAGED");
    cfg->staged = st && !strcmp(st, "1");
    /* staged: 32 x 128 accumulators, so one's sums (17 KiB) fit beside the staging (20) */
    cfg->acc_t = cfg->staged ? 32 : 64, cfg->acc_r = 128, cfg->n_t = cfg->staged ? 4 : 2, cfg->n_r = 1, cfg->kc = 32;
    const char *e = getenv("KILN_COOP2");
    unsigned v[5];
    if (e && sscanf(e, "%u,%u,%u,%u,%u", &v[0], &v[1], &v[2], &v[3], &v[4]) == 5 && v[0] && v[1] && v[2] &&
        v[3] && v[4] && v[2] * v[3] <= 8)
        cfg->acc_t = v[0], cfg->acc_r = v[1], cfg->n_t = v[2], cfg->n_r = v[3], cfg->kc = v[4];
}

#define STAGE_PAD 8 /* dtype elements after each staged row */

/* the sums of one accumulator, and (staged) the X and W chunks */
static uint32_t shared_bytes(const mm_coop2_cfg *cfg) {
    uint32_t out = cfg->acc_t * (cfg->acc_r + OUT_PAD) * 4u;
    uint32_t stage = (cfg->acc_t * cfg->n_t + cfg->acc_r * cfg->n_r) * (cfg->kc + STAGE_PAD) * 2u;
    return out + (cfg->staged ? stage : 0);
}

bool mm_coop2_pick(const rt_caps *c, ir_scalar dt, uint32_t rows, uint32_t n_max, mm_coop2_cfg *cfg) {
    if (!c || !c->n_mma || !c->n_wg_mma || refused()) return false;
    tiling(cfg);
    /* a grid under half the compute units leaves the most of them idle: matmul_coop.c's
     * 64 x 64 tile fills them at 73 of this tile's 156 TFLOP/s (an H100's Vulkan: qwen3-0.6b's
     * o and down, 32 workgroups of 128 x 128, ran at 36-38; KILN_COOP2 set keeps it) */
    uint64_t grid = (uint64_t)((rows + cfg->acc_r * cfg->n_r - 1) / (cfg->acc_r * cfg->n_r)) *
                    ((n_max + cfg->acc_t * cfg->n_t - 1) / (cfg->acc_t * cfg->n_t));
    if (c->compute_units && grid * 2 < c->compute_units && !getenv("KILN_COOP2")) return false;
    uint32_t most = c->wg_mma_max_dim;
    if (cfg->acc_t > most || cfg->acc_r > most || cfg->kc > most) return false;
    uint32_t room = c->shared_bytes > c->wg_mma_reserved_shared ? c->shared_bytes - c->wg_mma_reserved_shared : 0;
    if (shared_bytes(cfg) > room) return false;
    const rt_mma_shape *best = NULL;
    for (uint32_t i = 0; i < c->n_wg_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->wg_mma[i];
        if (s->ab_type != (uint32_t)dt || s->acc_type != IR_F32 || !s->m || !s->n || !s->k) continue;
        if (cfg->acc_t % s->m || cfg->acc_r % s->n || cfg->kc % s->k) continue;
        if (s->invocations > 1024 || (c->max_workgroup && s->invocations > c->max_workgroup)) continue;
        /* the most invocations: more of them share the staging and the epilogue */
        if (!best || s->invocations > best->invocations) best = s;
    }
    if (!best) return false;
    cfg->shape = best;
    return true;
}

typedef struct out_arg {
    ir_shm src;
    ir_val t0, r0; /* the accumulator's first token and row */
    uint32_t lanes, acc_r;
} out_arg;

/* Output item i of an accumulator: token i / (acc_r / lanes), rows in a vector; the
 * epilogue of the staged f32 sums, for t < n and r < rows only. */
static void out_item(const mm *m, ir_val i, const void *p) {
    const out_arg *a = p;
    kx k = m->k;
    uint32_t per_row = a->acc_r / a->lanes, stride = a->acc_r + OUT_PAD;
    ir_val tl = kx_div_c(k, i, per_row), rl = kx_mul_c(k, kx_rem_c(k, i, per_row), a->lanes);
    ir_val tok = kx_add(k, a->t0, tl), row = kx_add(k, a->r0, rl);
    ir_if *f = kx_if(k, mm_exists(m, tok, row));
    ir_val v[4], at = kx_idx(k, tl, stride, rl);
    for (uint32_t l = 0; l < a->lanes; l++) v[l] = kx_shm_load(k, a->src, kx_add_c(k, at, l), 1);
    mm_store_y(m, tok, row, v, a->lanes);
    kx_end_if(k, f);
}

#define MAX_ACC 8

typedef struct staged_ctx {
    ir_shm xs, ws;
    ir_type ta, tb;
    uint32_t acc_t, acc_r, n_t, n_r, stride;
} staged_ctx;

/* A staged chunk's products: acc[i][j] += X rows i * acc_t.. (row-major) times W rows
 * j * acc_r.. (B's columns: column-major), the chunk's columns in one step. */
static void staged_math(const mm *m, const void *p, ir_val *acc, uint32_t n_cols) {
    const staged_ctx *q = p;
    kx k = m->k;
    (void)n_cols; /* a whole chunk: the tail is zero-padded to it */
    ir_val st = kx_u32(k, q->stride), a[MAX_ACC], b[MAX_ACC];
    for (uint32_t i = 0; i < q->n_t; i++)
        a[i] = ir_frag_load(k.ir, q->ta, true, q->xs, kx_u32(k, i * q->acc_t * q->stride), st, true);
    for (uint32_t j = 0; j < q->n_r; j++)
        b[j] = ir_frag_load(k.ir, q->tb, true, q->ws, kx_u32(k, j * q->acc_r * q->stride), st, false);
    for (uint32_t i = 0; i < q->n_t; i++)
        for (uint32_t j = 0; j < q->n_r; j++) acc[i * q->n_r + j] = ir_frag_mma(k.ir, a[i], b[j], acc[i * q->n_r + j]);
}

void mm_build_coop2(mm *m, const mm_coop2_cfg *cfg, uint32_t groups[2]) {
    kx k = m->k;
    uint32_t at_ = cfg->acc_t, ar = cfg->acc_r, nt = cfg->n_t, nr = cfg->n_r, kc = cfg->kc, n_acc = nt * nr;
    uint32_t tile_t = at_ * nt, tile_r = ar * nr;
    m->invocations = cfg->shape->invocations;
    kx_workgroup(k, m->invocations);
    ir_shm cs = kx_shared(k, "cs", IR_F32, at_ * (ar + OUT_PAD));
    ir_type ta = ir_t_frag_wg(k.ir, IR_FRAG_A, m->dtype, at_, ar, kc);
    ir_type tb = ir_t_frag_wg(k.ir, IR_FRAG_B, m->dtype, at_, ar, kc);
    ir_type tc = ir_t_frag_wg(k.ir, IR_FRAG_ACC, IR_F32, at_, ar, kc);
    /* workgroup (x, y): rows from r0, tokens from t0 */
    ir_val t0 = kx_group_times(k, 1, tile_t);
    ir_val r0 = kx_group_times(k, 0, tile_r);
    ir_val rows = kx_u32(k, m->rows), cols = kx_u32(k, m->cols);

    /* a tile of tokens all at t >= n does nothing (uniform: group id and a loaded value) */
    ir_if *live = kx_if(k, kx_lt(k, t0, m->n));
    ir_val zero = ir_frag_fill(k.ir, tc, kx_f32(k, 0.0f));
    ir_val init[MAX_ACC], cur[MAX_ACC], sums[MAX_ACC];
    for (uint32_t i = 0; i < n_acc; i++) init[i] = zero;
    if (cfg->staged) {
        staged_ctx q = {.ta = ta, .tb = tb, .acc_t = at_, .acc_r = ar, .n_t = nt, .n_r = nr, .stride = kc + STAGE_PAD};
        q.xs = kx_shared(k, "xs", m->dtype, tile_t * q.stride);
        q.ws = kx_shared(k, "ws", m->dtype, tile_r * q.stride);
        uint32_t v = kn_vec_width(m->cols);
        chunker ch = {.sx = {m->x, q.xs, t0, IR_NONE, m->n_max - 1, 0, v, q.stride, 1, false, false},
                      .sw = {m->w, q.ws, r0, IR_NONE, m->rows - 1, 0, v, q.stride, 1, false, false},
                      .x_tile = tile_t,
                      .w_tile = tile_r,
                      .cols_per_chunk = kc,
                      .col_step = kc,
                      .n_acc = n_acc,
                      .pipelined = true,
                      .math = staged_math,
                      .q = &q};
        for (uint32_t i = 0; i < n_acc; i++) sums[i] = init[i];
        mm_run_chunks(m, &ch, sums);
        kx_barrier(k); /* the last chunk's readers are done before the sums go out */
    } else {
        ir_for *l = ir_for_begin(k.ir, kx_u32(k, 0), cols, kx_u32(k, kc), n_acc, init);
        for (uint32_t i = 0; i < n_acc; i++) cur[i] = ir_for_arg(l, i);
        ir_val c0 = ir_for_iv(l);
        ir_val a[MAX_ACC], b[MAX_ACC];
        for (uint32_t j = 0; j < nr; j++)
            b[j] = ir_frag_load_tensor(k.ir, tb, m->w, kx_add_c(k, r0, j * ar), c0, rows, cols, true);
        for (uint32_t i = 0; i < nt; i++)
            a[i] = ir_frag_load_tensor(k.ir, ta, m->x, kx_add_c(k, t0, i * at_), c0, m->n, cols, false);
        for (uint32_t i = 0; i < nt; i++)
            for (uint32_t j = 0; j < nr; j++) cur[i * nr + j] = ir_frag_mma(k.ir, a[i], b[j], cur[i * nr + j]);
        ir_for_end(k.ir, l, cur);
        for (uint32_t i = 0; i < n_acc; i++) sums[i] = ir_for_result(l, i);
    }

    /* each accumulator -> the f32 array, then the epilogue by all */
    uint32_t lanes = kn_vec_width(m->rows);
    while (ar % lanes) lanes /= 2;
    for (uint32_t h = 0; h < n_acc; h++) {
        if (h) kx_barrier(k); /* the last accumulator's sums are read */
        ir_frag_store(k.ir, sums[h], true, cs, kx_u32(k, 0), kx_u32(k, ar + OUT_PAD), true);
        kx_barrier(k);
        out_arg o = {cs, kx_add_c(k, t0, (h / nr) * at_), kx_add_c(k, r0, (h % nr) * ar), lanes, ar};
        mm_for_items(m, at_ * ar / lanes, out_item, &o);
    }
    kx_end_if(k, live);
    groups[0] = (m->rows + tile_r - 1) / tile_r;
    groups[1] = (m->n_max + tile_t - 1) / tile_t;
}
