/* The prefill product on warpgroup products (wg.mma: wgmma on sm_90a), the variant
 * kn_matmul builds where the caps offer it, with its parameters, grid semantics and
 * epilogues.
 *
 * A workgroup of two warpgroups (256 invocations) owns 128 tokens x tile_r rows of Y
 * (tile_r 128, 192 or 256), each warpgroup 64 tokens in one m64 x tile_r accumulator
 * (tile_r / 2 f32 a lane). cols is walked in chunks of kc columns ring-buffered in
 * `stages` slots of one workgroup array (a slot: X's 128 rows, then W's tile_r), each in
 * wg.mma's 128-byte swizzled layout (atoms of 8 rows x 64 columns, whose 16-byte pieces
 * fall in distinct banks for the products' reads: without the swizzle they ran at an
 * eighth of the tensor cores' rate on the H200), filled by asynchronous copies issued d
 * chunks ahead. With async products a chunk's wg.mma is
 * left in flight while the next chunk is waited for and staged (d = stages - 2: the slot
 * being filled is the one the product two chunks back read, which every warpgroup's
 * wg.wait 1 has released before the barrier); without, d = stages - 1:
 *
 *   stage chunks 0 .. d-1, one commit each
 *   for c in chunks: wait until chunk c has landed (d - 1 groups pending); barrier
 *                    stage chunk c + d; commit
 *                    acc = wg.mma.async(acc, chunk c); acc = wg.wait(acc, 1)
 *   acc = wg.wait(acc, 0)
 *
 * The accumulators leave through an f32 array that overlays the ring (it is free once
 * the loop ends) for the epilogue, as kn_matmul's: consecutive outputs, vector stores.
 *
 * KN_EPI_SWIGLU (the feed-forward's gate and up in one launch): a tile's tile_r rows of
 * W are tile_r / 2 rows of the gate (W) then the same rows of the up (Wu), each half
 * staged as its own operand into the slot (64-column chunks, so a half is whole atoms),
 * and the workgroup writes tile_r / 2 rows of silu(round(g)) * round(u) rounded: the
 * numbers of the two products and kn_swiglu. */
#include "kernels/kernels.h"
#include "kernels/matmul_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WG_TOKENS 128 /* tokens per workgroup: two warpgroups of 64 */
#define CS_PAD 4

static uint32_t ring_elems(const mm_wg_cfg *g) { return g->stages * (WG_TOKENS + g->tile_r) * g->kc; }
static uint32_t cs_elems(const mm_wg_cfg *g) { return WG_TOKENS * (g->tile_r + CS_PAD); }

static uint32_t wg_shared_bytes(const mm_wg_cfg *g) {
    uint32_t ring = ring_elems(g) * 2, cs = cs_elems(g) * 4;
    return cs <= ring ? ring : ring + cs;
}

static bool cfg_ok(const mm_wg_cfg *g, bool swiglu) {
    bool r = g->tile_r == 128 || g->tile_r == 192 || g->tile_r == 256;
    return r && (g->kc == 64 || (g->kc == 128 && !swiglu)) && g->stages >= (g->async ? 3u : 2u) &&
           g->stages <= 8;
}

/* KILN_MATMUL_WG=tile_r,kc,stages,async overrides the shape (for measuring others on a
 * device), KILN_MATMUL_WG=0 turns the variant off; a malformed value is ignored. */
static bool env_cfg(mm_wg_cfg *g, bool swiglu) {
    const char *e = getenv("KILN_MATMUL_WG");
    if (e && strcmp(e, "0") == 0) return false;
    unsigned v[4];
    if (!e || sscanf(e, "%u,%u,%u,%u", &v[0], &v[1], &v[2], &v[3]) != 4) return true;
    mm_wg_cfg t = {v[0], v[1], v[2], v[3] != 0};
    if (cfg_ok(&t, swiglu)) *g = t;
    return true;
}

bool mm_wg_forced(void) {
    const char *e = getenv("KILN_MATMUL_WG");
    return e && strcmp(e, "0") != 0;
}

/* rows of Y a workgroup writes: half its tile with SwiGLU */
static uint32_t out_rows(const mm_wg_cfg *g, unsigned epi) { return epi & KN_EPI_SWIGLU ? g->tile_r / 2 : g->tile_r; }

uint64_t mm_wg_grid(const mm_wg_cfg *g, uint32_t rows, uint32_t n_max, unsigned epi) {
    uint32_t tr = out_rows(g, epi);
    return (uint64_t)((rows + tr - 1) / tr) * ((n_max + WG_TOKENS - 1) / WG_TOKENS);
}

static bool caps_ok(const rt_caps *c, ir_scalar dt, uint32_t cols) {
    if (!c->wgmma || !c->async_copy || c->subgroup_size != 32 || cols % MM_COPY) return false;
    if (dt != IR_BF16 && dt != IR_F16) return false;
    return !c->max_workgroup || c->max_workgroup >= 256;
}

/* The shapes tried: 64-column chunks in 4 slots, products in flight. */
static const mm_wg_cfg shapes[] = {{256, 64, 4, true}, {192, 64, 4, true}, {128, 64, 4, true}};

bool mm_wg_pick(const rt_caps *c, ir_scalar dt, uint32_t rows, uint32_t cols, uint32_t n_max, unsigned epi,
                mm_wg_cfg *cfg) {
    if (!caps_ok(c, dt, cols)) return false;
    bool swiglu = epi & KN_EPI_SWIGLU;
    /* the fewest waves of workgroups weighted by a workgroup's time (its rows plus what
     * every tile costs whatever its width: X's staging, the epilogue) */
    uint32_t cu = c->compute_units ? c->compute_units : 1;
    const mm_wg_cfg *best = NULL;
    uint64_t best_cost = UINT64_MAX;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        uint64_t grid = mm_wg_grid(&shapes[i], rows, n_max, epi);
        uint64_t cost = (grid + cu - 1) / cu * (shapes[i].tile_r + 64);
        if (cost < best_cost && (!c->shared_bytes || wg_shared_bytes(&shapes[i]) <= c->shared_bytes))
            best = &shapes[i], best_cost = cost;
    }
    if (!best) return false;
    mm_wg_cfg g = *best;
    if (!env_cfg(&g, swiglu)) return false;
    if (c->shared_bytes && wg_shared_bytes(&g) > c->shared_bytes) return false;
    *cfg = g;
    return true;
}

bool kn_matmul_wg_ok(const rt_caps *c, ir_scalar dt, uint32_t cols) {
    mm_wg_cfg g;
    return mm_wg_pick(c, dt, 128, cols, 128, KN_EPI_NONE, &g);
}

typedef struct wg_item {
    ir_shm cs;
    ir_val t0, r0;
    uint32_t lanes, tile_r, out_r;
} wg_item;

uint32_t mm_tile_sums_elems(uint32_t tile_r) { return WG_TOKENS * (tile_r + CS_PAD); }

/* Output i of the tile: token i / (out_r / lanes), rows in vectors, from the f32 sums
 * (with SwiGLU the up's sum of a row is tile_r / 2 columns of cs past the gate's). */
static void out_item(const mm *m, ir_val i, const void *p) {
    const wg_item *a = p;
    kx k = m->k;
    uint32_t per = a->out_r / a->lanes;
    ir_val tl = kx_div_c(k, i, per), rl = kx_mul_c(k, kx_rem_c(k, i, per), a->lanes);
    ir_val t = kx_add(k, a->t0, tl), r = kx_add(k, a->r0, rl);
    ir_if *f = kx_if(k, mm_exists(m, t, r));
    ir_val s[4], at = kx_idx(k, tl, a->tile_r + CS_PAD, rl);
    for (uint32_t l = 0; l < a->lanes; l++) s[l] = kx_shm_load(k, a->cs, kx_add_c(k, at, l), 1);
    if (!(m->epi & KN_EPI_SWIGLU)) {
        mm_store_y(m, t, r, s, a->lanes);
    } else {
        for (uint32_t l = 0; l < a->lanes; l++) {
            ir_val up = kx_shm_load(k, a->cs, kx_add_c(k, at, a->out_r + l), 1);
            ir_val gv = kx_as(k, kx_as(k, s[l], m->dtype), IR_F32), uv = kx_as(k, kx_as(k, up, m->dtype), IR_F32);
            s[l] = kx_as(k, kn_silu_mul(k, gv, uv), m->dtype);
        }
        kx_store(k, m->y, kx_idx(k, t, m->rows, r), a->lanes == 1 ? s[0] : kx_vec(k, s, a->lanes));
    }
    kx_end_if(k, f);
}

void mm_tile_sums(const mm *m, ir_val acc, ir_val wg, ir_shm cs, uint32_t tile_r) {
    kx k = m->k;
    ir_val at = kx_mul_c(k, wg, 64 * (tile_r + CS_PAD));
    ir_frag_store(k.ir, acc, true, cs, at, kx_u32(k, tile_r + CS_PAD), true);
}

#define MAX_PRELOAD 32 /* items an invocation whose residuals it loads up front */

/* The residual epilogue's items with their loads first: every item's res vector (its
 * index clamped to 0 past the outputs: a load from inside the buffer, never used), then
 * each item's sums, rounding, residual and store. Item by item, each load waited inside
 * its item's bounds check, one after another: qwen3-8b's o product at 512 tokens ran at
 * 0.79 of cuBLAS with the epilogue a third of its time. */
static void residual_items(const mm *m, const wg_item *a, uint32_t count) {
    kx k = m->k;
    uint32_t per = a->out_r / a->lanes, n = (count + m->invocations - 1) / m->invocations;
    ir_val t[MAX_PRELOAD], r[MAX_PRELOAD], ok[MAX_PRELOAD], res[MAX_PRELOAD], at[MAX_PRELOAD];
    ir_val zero = kx_u32(k, 0);
    for (uint32_t j = 0; j < n; j++) {
        ir_val i = kx_add_c(k, m->lid, j * m->invocations);
        ir_val tl = kx_div_c(k, i, per), rl = kx_mul_c(k, kx_rem_c(k, i, per), a->lanes);
        t[j] = kx_add(k, a->t0, tl);
        r[j] = kx_add(k, a->r0, rl);
        at[j] = kx_idx(k, tl, a->tile_r + CS_PAD, rl);
        ok[j] = mm_exists(m, t[j], r[j]);
        if ((j + 1) * m->invocations > count) ok[j] = kx_and(k, ok[j], kx_lt_c(k, i, count));
        ir_val yi = kx_select(k, ok[j], kx_idx(k, t[j], m->rows, r[j]), zero);
        res[j] = kx_load(k, m->res, yi, a->lanes);
    }
    for (uint32_t j = 0; j < n; j++) {
        ir_if *f = kx_if(k, ok[j]);
        ir_val o[4];
        for (uint32_t l = 0; l < a->lanes; l++) {
            ir_val sum = kx_shm_load(k, a->cs, kx_add_c(k, at[j], l), 1);
            if (m->epi & KN_EPI_BIAS) sum = kx_add(k, sum, kx_as(k, kx_load(k, m->b, kx_add_c(k, r[j], l), 1), IR_F32));
            ir_val y = kx_as(k, kx_as(k, sum, m->dtype), IR_F32); /* kn_epilogue's roundings */
            ir_val rv = kx_as(k, a->lanes == 1 ? res[j] : kx_lane(k, res[j], l), IR_F32);
            o[l] = kx_as(k, kx_add(k, y, rv), m->dtype);
        }
        kx_store(k, m->y, kx_idx(k, t[j], m->rows, r[j]), a->lanes == 1 ? o[0] : kx_vec(k, o, a->lanes));
        kx_end_if(k, f);
    }
}

void mm_tile_out(const mm *m, ir_shm cs, ir_val t0, ir_val r0, uint32_t tile_r, uint32_t out_r) {
    kx_barrier(m->k);
    wg_item it = {cs, t0, r0, kn_vec_width(m->rows), tile_r, out_r};
    uint32_t count = WG_TOKENS * out_r / it.lanes;
    if ((m->epi & KN_EPI_RESIDUAL) && !(m->epi & KN_EPI_SWIGLU) &&
        (count + m->invocations - 1) / m->invocations <= MAX_PRELOAD)
        residual_items(m, &it, count);
    else
        mm_for_items(m, count, out_item, &it);
}

void mm_build_wg(mm *m, const mm_wg_cfg *g, uint32_t groups[2]) {
    kx k = m->k;
    bool swiglu = m->epi & KN_EPI_SWIGLU;
    uint32_t tr = g->tile_r, out_r = out_rows(g, m->epi), kc = g->kc, S = g->stages;
    uint32_t stage_x = WG_TOKENS * kc, slot_elems = (WG_TOKENS + tr) * kc, chunks = (m->cols + kc - 1) / kc;
    uint32_t d = g->async ? S - 2 : S - 1; /* chunks staged ahead */
    m->invocations = 256;
    kx_workgroup(k, 256);
    ir_shm ring = kx_shared(k, "ring", m->dtype, ring_elems(g));
    ir_shm cs = cs_elems(g) * 4 <= ring_elems(g) * 2 ? ir_shared_overlay(k.ir, "cs", IR_F32, cs_elems(g), ring)
                                                     : kx_shared(k, "cs", IR_F32, cs_elems(g));
    ir_type tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, 64, tr, 16);
    /* tiles in launch order token tile first: the workgroups that run together share their
     * rows of W, read from memory once for all of them (row tile first, each wave
     * streamed W again for every token tile: qwen3-8b's gate/up with SwiGLU at 512
     * tokens, 96 x 4 tiles, ran at 316 TFLOP/s) */
    uint32_t gx = (m->rows + out_r - 1) / out_r, gt = (m->n_max + WG_TOKENS - 1) / WG_TOKENS;
    ir_val lin = kx_add(k, kx_group(k, 0), kx_mul_c(k, kx_group(k, 1), gx));
    ir_val t0 = kx_mul_c(k, kx_rem_c(k, lin, gt), WG_TOKENS), r0 = kx_mul_c(k, kx_div_c(k, lin, gt), out_r);
    ir_val half = kx_shr_c(k, kx_sg_id(k), 2); /* the warpgroup: tokens 64 half .. */
    ir_if *live = kx_if(k, kx_lt(k, t0, m->n));
    mm_stage sx = {m->x, ring, WG_TOKENS, m->n_max - 1, slot_elems, kc, 0, MM_SW128, t0, 0};
    mm_stage sw = {m->w, ring, out_r, m->rows - 1, slot_elems, kc, 0, MM_SW128, r0, stage_x};
    mm_stage su = {m->wu, ring, out_r, m->rows - 1, slot_elems, kc, 0, MM_SW128, r0, stage_x + out_r * kc};
    for (uint32_t c = 0; c < d; c++) {
        if (c < chunks) {
            mm_issue_stage(m, &sx, kx_u32(k, c), kx_u32(k, c));
            mm_issue_stage(m, &sw, kx_u32(k, c), kx_u32(k, c));
            if (swiglu) mm_issue_stage(m, &su, kx_u32(k, c), kx_u32(k, c));
        }
        ir_async_commit(k.ir);
    }
    ir_val init = ir_frag_fill(k.ir, tc, kx_f32(k, 0.0f));
    ir_for *l = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, chunks), kx_u32(k, 1), 1, &init);
    ir_val c = ir_for_iv(l), acc = ir_for_arg(l, 0);
    ir_async_wait(k.ir, d - 1);
    kx_barrier(k); /* chunk c is everyone's; the slot chunk c + d takes is free */
    ir_val next = kx_add_c(k, c, d);
    ir_if *f = kx_if(k, kx_lt_c(k, next, chunks));
    ir_val nslot = kx_rem_c(k, next, S);
    mm_issue_stage(m, &sx, next, nslot);
    mm_issue_stage(m, &sw, next, nslot);
    if (swiglu) mm_issue_stage(m, &su, next, nslot);
    kx_end_if(k, f);
    ir_async_commit(k.ir);
    ir_val slot = kx_mul_c(k, kx_rem_c(k, c, S), slot_elems);
    /* swizzled atoms of 8 rows x 64 columns: sbo 512, lbo a whole operand's rows of 64 */
    ir_val a_base = kx_add(k, slot, kx_mul_c(k, half, 8 * 512)); /* the warpgroup's 64 tokens */
    ir_val b_base = kx_add_c(k, slot, stage_x);
    ir_val sbo = kx_u32(k, 512), a_lbo = kx_u32(k, WG_TOKENS * 64), b_lbo = kx_u32(k, tr * 64);
    unsigned flags = IR_WG_MMA_SW128 | (g->async ? IR_WG_MMA_ASYNC : 0);
    acc = ir_wg_mma_flags(k.ir, acc, ring, a_base, sbo, a_lbo, ring, b_base, sbo, b_lbo, kc / 16, flags);
    if (g->async) acc = ir_wg_wait(k.ir, acc, 1);
    ir_for_end(k.ir, l, &acc);
    acc = ir_for_result(l, 0);
    if (g->async) acc = ir_wg_wait(k.ir, acc, 0);
    kx_barrier(k); /* the ring is free: the sums may overlay it */
    mm_tile_sums(m, acc, half, cs, tr);
    mm_tile_out(m, cs, t0, r0, tr, out_r);
    kx_end_if(k, live);
    groups[0] = gx;
    groups[1] = gt;
}

static void build_wg(mm *m, const void *cfg, uint32_t groups[2]) { mm_build_wg(m, cfg, groups); }

ir_kernel *kn_matmul_wg(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype, unsigned epi,
                        uint32_t groups[2], kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (kn_check_epi("kn_matmul_wg", epi, KN_EPI_BIAS | KN_EPI_RESIDUAL | KN_EPI_SWIGLU | KN_EPI_F32, err))
        return NULL;
    mm_wg_cfg cfg;
    if (!mm_shape_ok(rows, cols, n_max) || !mm_wg_pick(c, dtype, rows, cols, n_max, epi, &cfg)) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED,
                  "kn_matmul_wg: needs wgmma (sm_90a), asynchronous copies and cols a multiple of 8, and a shape "
                  "kn_matmul takes (rows %u, cols %u, n_max %u)",
                  rows, cols, n_max);
        return NULL;
    }
    return mm_make("kn_matmul_wg", c, rows, cols, n_max, dtype, epi, build_wg, &cfg, groups, err);
}
