/* The prefill product on the tensor copy engine and warpgroup products (sm_90a): the
 * variant kn_matmul builds where the caps offer tma and wgmma, with kn_matmul's
 * parameters, epilogues and numbers (f32 sums of exact products, one rounding; the
 * summation order is the wgmma's, as matmul_wg.c's).
 *
 * A workgroup is two consumer warpgroups and one producer subgroup (288 invocations). It
 * owns 128 tokens x tile_r rows of Y, each consumer warpgroup 64 tokens in one m64 x
 * tile_r accumulator. The columns are walked in chunks of 64 through a ring of `stages`
 * slots (a slot: X's 128 rows of the chunk, then W's tile_r rows, each in the 128-byte
 * swizzled layout the tensor copy engine writes and wg.mma reads), with two memory
 * barriers a slot: "full" (the copies of a chunk have landed) and "empty" (every consumer
 * is done with it). One invocation of the producer issues the copies:
 *
 *   producer, chunk c in slot s = c % S, pass p = c / S:
 *     wait empty[s] for parity (p & 1) ^ 1    (the first pass's waits return at once)
 *     expect full[s]: the slot's bytes; tma.load X's box and W's box(es) into slot s
 *   consumers:
 *     wait full[s] for parity p & 1; acc = wg.mma.async(acc, slot s); acc = wg.wait(acc, 1)
 *     (chunk c - 1's products are done) -> each subgroup's lane 0 arrives on empty of c - 1
 *
 * so the copies run as far ahead as the ring allows, no workgroup barrier in the loop,
 * and nothing but the producer computes an address. In clusters of two workgroups
 * (KILN_MATMUL_TMA=tile_r,2: adjacent token tiles of the same rows of W) each loads half
 * of W's tile and multicasts it to both, so a slot is empty once the consumers of both
 * have released it (their arrivals reach both workgroups' barriers), and the cluster meets
 * at the end before either leaves (a peer may still arrive on its barriers). Measured on
 * the H200 (qwen3-8b's products, 2026-12-04) the clusters gave no more than single
 * workgroups (within 3%, some shapes 6% less), so they are not the default. When every
 * chunk has been read, the sums leave through workgroup memory over the ring
 * (mm_tile_out, as matmul_wg.c): straight from the registers, the residual epilogue's
 * loads went one after another and the o product ran 25% below qkv's rate.
 *
 * KN_EPI_SWIGLU: W's tile is the gate's tile_r / 2 rows then the same rows of the up (a
 * cluster's two workgroups load one each), and the workgroup writes tile_r / 2 rows of
 * silu(round(g)) * round(u) rounded, as kn_swiglu after the two products. */
#include "kernels/kernels.h"
#include "kernels/matmul_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TMA_TOKENS 128     /* tokens a workgroup: two consumer warpgroups of 64 */
#define TMA_KC 64          /* columns a chunk: one 128-byte swizzled row */
#define TMA_CONSUMERS 256  /* invocations of the two consumer warpgroups */
#define TMA_INVOCATIONS (TMA_CONSUMERS + 32)
#define TMA_BAR_BYTES 1024 /* the barriers' array, rounded to the ring's alignment */

static uint32_t slot_elems(uint32_t tile_r) { return (TMA_TOKENS + tile_r) * TMA_KC; }

/* W's boxes a slot: the cluster's workgroups split the tile, SwiGLU's gate and up apart */
static uint32_t pieces(const mm_tma_cfg *g, bool swiglu) { return g->cluster > 1 ? g->cluster : swiglu ? 2 : 1; }

static uint32_t stages_for(const rt_caps *c, uint32_t tile_r) {
    uint32_t avail = c->shared_bytes > TMA_BAR_BYTES ? c->shared_bytes - TMA_BAR_BYTES : 0;
    uint32_t s = avail / (slot_elems(tile_r) * 2);
    return s > 8 ? 8 : s;
}

/* KILN_MATMUL_TMA=0 turns the variant off; =tile_r,cluster forces a shape (measuring). */
static int env_cfg(mm_tma_cfg *g) {
    const char *e = getenv("KILN_MATMUL_TMA");
    if (!e) return 1;
    if (strcmp(e, "0") == 0) return 0;
    unsigned r, cl;
    if (sscanf(e, "%u,%u", &r, &cl) == 2 && (r == 128 || r == 192 || r == 256) && (cl == 1 || cl == 2))
        g->tile_r = r, g->cluster = cl;
    return 1;
}

static uint32_t out_rows(const mm_tma_cfg *g, unsigned epi) { return epi & KN_EPI_SWIGLU ? g->tile_r / 2 : g->tile_r; }

static uint32_t token_tiles(uint32_t n_max) { return (n_max + TMA_TOKENS - 1) / TMA_TOKENS; }

uint64_t mm_tma_grid(const mm_tma_cfg *g, uint32_t rows, uint32_t n_max, unsigned epi) {
    uint32_t tr = out_rows(g, epi);
    return (uint64_t)((rows + tr - 1) / tr) * token_tiles(n_max);
}

bool mm_tma_pick(const rt_caps *c, ir_scalar dt, uint32_t rows, uint32_t cols, uint32_t n_max, unsigned epi,
                 mm_tma_cfg *cfg) {
    if (!c || !c->tma || !c->wgmma || c->subgroup_size != 32 || cols % 8 || rows % 2) return false;
    if ((dt != IR_BF16 && dt != IR_F16) || (c->max_workgroup && c->max_workgroup < TMA_INVOCATIONS)) return false;
    /* the fewest waves weighted by a workgroup's time (its rows plus what every tile costs
     * whatever its width), as matmul_wg.c */
    static const uint32_t widths[] = {256, 192, 128};
    uint32_t cu = c->compute_units ? c->compute_units : 1, cl = 1;
    uint64_t best_cost = UINT64_MAX;
    mm_tma_cfg best = {0};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        mm_tma_cfg g = {widths[i], cl, stages_for(c, widths[i])};
        uint64_t cost = (mm_tma_grid(&g, rows, n_max, epi) + cu - 1) / cu * (g.tile_r + 64);
        if (g.stages >= 3 && cost < best_cost) best = g, best_cost = cost;
    }
    if (!best.tile_r || !env_cfg(&best)) return false;
    best.stages = stages_for(c, best.tile_r);
    if (best.cluster > 1 && token_tiles(n_max) % best.cluster) best.cluster = 1;
    if (best.stages < 3) return false;
    *cfg = best;
    return true;
}

typedef struct tma_k {
    mm *m;
    mm_tma_cfg g;
    ir_shm ring, bars, cs; /* cs: the sums of the epilogue, over the ring */
    uint32_t chunks, xmap, wmap, umap, n_pieces, piece_rows;
    ir_val rank, t0, r0; /* the workgroup's rank in its cluster, first token and first row of Y */
} tma_k;

static ir_val full_bar(ir_val s) { return s; }
static ir_val empty_bar(const tma_k *q, ir_val s) { return kx_add_c(q->m->k, s, q->g.stages); }

/* The producer's one invocation: every chunk's copies, as far ahead as the ring allows. */
static void produce(const tma_k *q) {
    kx k = q->m->k;
    bool swiglu = q->m->epi & KN_EPI_SWIGLU;
    uint32_t S = q->g.stages, se = slot_elems(q->g.tile_r), cl = q->g.cluster;
    uint32_t bytes = se * 2, per_rank = q->n_pieces / cl;
    ir_val mask = cl > 1 ? kx_u32(k, (1u << cl) - 1) : IR_NONE, ch;
    ir_val zero = kx_u32(k, 0), n_chunks = kx_u32(k, q->chunks), one = kx_u32(k, 1), slot_bytes = kx_u32(k, bytes);
    ir_for *l = kx_for(k, zero, n_chunks, one, &ch);
    ir_val s = kx_rem_c(k, ch, S);
    ir_val parity = kx_and_c(k, kx_div_c(k, ch, S), 1);
    ir_val empty = empty_bar(q, s);
    ir_mbar_wait(k.ir, q->bars, empty, kx_xor(k, parity, one));
    ir_mbar_expect(k.ir, q->bars, full_bar(s), slot_bytes);
    ir_val slot = kx_mul_c(k, s, se), col = kx_mul_c(k, ch, TMA_KC);
    ir_tma_load(k.ir, q->ring, slot, q->xmap, col, q->t0, q->bars, full_bar(s), IR_NONE);
    for (uint32_t i = 0; i < per_rank; i++) {
        /* piece j = rank + i * cl: rows r0 + j * piece_rows of W, or SwiGLU's gate (j < half)
         * and up halves from r0 */
        ir_val j = kx_add_c(k, q->rank, i * cl);
        ir_val w_at = kx_add_c(k, slot, TMA_TOKENS * TMA_KC);
        ir_val dst = kx_add(k, w_at, kx_mul_c(k, j, q->piece_rows * TMA_KC));
        if (!swiglu) {
            ir_val row = kx_add(k, q->r0, kx_mul_c(k, j, q->piece_rows));
            ir_tma_load(k.ir, q->ring, dst, q->wmap, col, row, q->bars, full_bar(s), mask);
            continue;
        }
        /* the gate's pieces first, then the up's: piece j of n_pieces / 2 per matrix */
        uint32_t half = q->n_pieces / 2;
        ir_val up = kx_ge(k, j, kx_u32(k, half));
        ir_val jj = kx_select(k, up, kx_sub_c(k, j, half), j);
        ir_val row = kx_add(k, q->r0, kx_mul_c(k, jj, q->piece_rows));
        ir_if *f = kx_if(k, up);
        ir_tma_load(k.ir, q->ring, dst, q->umap, col, row, q->bars, full_bar(s), mask);
        kx_else(k, f);
        ir_tma_load(k.ir, q->ring, dst, q->wmap, col, row, q->bars, full_bar(s), mask);
        kx_end_if(k, f);
    }
    kx_end_for(k, l);
}

/* Each subgroup's lane 0 releases slot s to every producer of the cluster. */
static void release(const tma_k *q, ir_val s, ir_val lane0) {
    kx k = q->m->k;
    ir_if *f = kx_if(k, lane0);
    ir_val empty = empty_bar(q, s);
    for (uint32_t r = 0; r < q->g.cluster; r++)
        ir_mbar_arrive(k.ir, q->bars, empty, q->g.cluster > 1 ? kx_u32(k, r) : IR_NONE);
    kx_end_if(k, f);
}

/* The consumer warpgroup wg's products over every chunk: its m64 x tile_r accumulator. */
static ir_val consume(const tma_k *q, ir_val wg) {
    kx k = q->m->k;
    uint32_t S = q->g.stages, se = slot_elems(q->g.tile_r), tr = q->g.tile_r;
    ir_type tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, 64, tr, 16);
    ir_val lane0 = kx_eq_c(k, kx_sg_lane(k), 0);
    ir_val init = ir_frag_fill(k.ir, tc, kx_f32(k, 0.0f));
    ir_val zero = kx_u32(k, 0), n_chunks = kx_u32(k, q->chunks), one = kx_u32(k, 1);
    ir_for *l = ir_for_begin(k.ir, zero, n_chunks, one, 1, &init);
    ir_val ch = ir_for_iv(l), acc = ir_for_arg(l, 0);
    ir_val s = kx_rem_c(k, ch, S);
    ir_val parity = kx_and_c(k, kx_div_c(k, ch, S), 1);
    ir_mbar_wait(k.ir, q->bars, full_bar(s), parity);
    ir_val slot = kx_mul_c(k, s, se);
    /* swizzled atoms of 8 rows x 64 columns: sbo 512 elements; one chunk is one atom row */
    ir_val a_base = kx_add(k, slot, kx_mul_c(k, wg, 64 * TMA_KC)), b_base = kx_add_c(k, slot, TMA_TOKENS * TMA_KC);
    ir_val sbo = kx_u32(k, 512), lbo = kx_u32(k, 1024);
    acc = ir_wg_mma_flags(k.ir, acc, q->ring, a_base, sbo, lbo, q->ring, b_base, sbo, lbo, TMA_KC / 16,
                          IR_WG_MMA_SW128 | IR_WG_MMA_ASYNC);
    acc = ir_wg_wait(k.ir, acc, 1);
    ir_if *prev = kx_if(k, kx_gt(k, ch, zero)); /* chunk c - 1's products are done: its slot is free */
    release(q, kx_rem_c(k, kx_add_c(k, ch, S - 1), S), lane0);
    kx_end_if(k, prev);
    ir_for_end(k.ir, l, &acc);
    return ir_wg_wait(k.ir, ir_for_result(l, 0), 0);
}

void mm_build_tma(mm *m, const mm_tma_cfg *g, uint32_t groups[2]) {
    kx k = m->k;
    bool swiglu = m->epi & KN_EPI_SWIGLU;
    uint32_t S = g->stages, cl = g->cluster, tr = g->tile_r, o_r = out_rows(g, m->epi);
    tma_k q = {.m = m, .g = *g, .chunks = (m->cols + TMA_KC - 1) / TMA_KC, .n_pieces = pieces(g, swiglu)};
    q.piece_rows = tr / q.n_pieces;
    m->invocations = TMA_INVOCATIONS;
    kx_workgroup(k, TMA_INVOCATIONS);
    if (cl > 1) ir_set_cluster(k.ir, cl);
    q.bars = kx_shared(k, "bars", IR_U64, 2 * S);
    q.ring = kx_shared(k, "ring", m->dtype, S * slot_elems(tr));
    q.cs = ir_shared_overlay(k.ir, "cs", IR_F32, mm_tile_sums_elems(tr), q.ring);
    q.xmap = ir_tensor_map(k.ir, m->x, m->cols, m->n_max, TMA_KC, TMA_TOKENS);
    q.wmap = ir_tensor_map(k.ir, m->w, m->cols, m->rows, TMA_KC, q.piece_rows);
    if (swiglu) q.umap = ir_tensor_map(k.ir, m->wu, m->cols, m->rows, TMA_KC, q.piece_rows);
    /* a 1D grid, token tiles fastest: a cluster's workgroups share their rows of W, and the
     * workgroups that run together read each W tile once from memory for all of them */
    uint32_t gt = token_tiles(m->n_max), gx = (m->rows + o_r - 1) / o_r;
    ir_val lin = kx_group(k, 0);
    q.rank = cl > 1 ? ir_id(k.ir, IR_ID_CLUSTER_RANK, 0) : kx_u32(k, 0);
    q.t0 = kx_mul_c(k, kx_rem_c(k, lin, gt), TMA_TOKENS);
    q.r0 = kx_mul_c(k, kx_div_c(k, lin, gt), o_r);
    ir_val rank_t = kx_mul_c(k, q.rank, TMA_TOKENS);
    ir_val first_t0 = kx_sub(k, q.t0, rank_t); /* the cluster's first token tile */
    ir_if *live = kx_if(k, kx_lt(k, first_t0, m->n)); /* a whole cluster lives or leaves */
    ir_if *init = kx_if(k, kx_eq_c(k, m->lid, 0));
    ir_val one = kx_u32(k, 1), consumers = kx_u32(k, TMA_CONSUMERS / 32 * cl);
    for (uint32_t s = 0; s < S; s++) {
        ir_mbar_init(k.ir, q.bars, kx_u32(k, s), one);             /* the producer's expect */
        ir_mbar_init(k.ir, q.bars, kx_u32(k, S + s), consumers);   /* every consumer subgroup of the cluster */
    }
    kx_end_if(k, init);
    if (cl > 1) ir_cluster_sync(k.ir); /* the barriers are the cluster's before a peer copies or arrives */
    else kx_barrier(k);
    ir_val wg = ir_id(k.ir, IR_ID_WARPGROUP, 0);
    ir_val consumer = kx_lt_c(k, wg, 2);
    ir_if *role = ir_if_begin(k.ir, consumer, 1); /* the consumers' sums out; the producer's are zeros */
    ir_val acc = consume(&q, wg);
    ir_if_else(k.ir, role, &acc);
    ir_if *lane0 = kx_if(k, kx_eq_c(k, kx_sg_lane(k), 0));
    produce(&q);
    kx_end_if(k, lane0);
    ir_type tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, 64, tr, 16);
    ir_val none = ir_frag_fill(k.ir, tc, kx_f32(k, 0.0f));
    ir_if_end(k.ir, role, &none);
    acc = ir_if_result(role, 0);
    /* every chunk has landed and been read: the ring is free for the sums */
    kx_barrier(k);
    ir_if *sums = kx_if(k, consumer);
    mm_tile_sums(m, acc, wg, q.cs, tr);
    kx_end_if(k, sums);
    mm_tile_out(m, q.cs, q.t0, q.r0, tr, o_r);
    if (cl > 1) ir_cluster_sync(k.ir); /* no workgroup leaves while a peer may arrive on its barriers */
    kx_end_if(k, live);
    groups[0] = gx * gt;
    groups[1] = 1;
}

bool mm_tma_takes(const rt_caps *c, ir_scalar dtype, uint32_t rows, uint32_t cols, uint32_t n_max, unsigned epi,
                  mm_tma_cfg *cfg) {
    if (!c || !mm_tma_pick(c, dtype, rows, cols, n_max, epi, cfg)) return false;
    const char *e = getenv("KILN_MATMUL_TMA");
    return (e && strchr(e, ',')) || mm_tma_grid(cfg, rows, n_max, epi) * 2 >= (c->compute_units ? c->compute_units : 1);
}

bool kn_matmul_tma_ok(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype, unsigned epi) {
    mm_tma_cfg cfg;
    return mm_shape_ok(rows, cols, n_max) && mm_tma_takes(c, dtype, rows, cols, n_max, epi, &cfg);
}

static void build_tma(mm *m, const void *cfg, uint32_t groups[2]) { mm_build_tma(m, cfg, groups); }

ir_kernel *kn_matmul_tma(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype,
                         unsigned epi, uint32_t groups[2], kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (kn_check_epi("kn_matmul_tma", epi, KN_EPI_BIAS | KN_EPI_RESIDUAL | KN_EPI_SWIGLU | KN_EPI_F32, err))
        return NULL;
    mm_tma_cfg cfg;
    if (!mm_shape_ok(rows, cols, n_max) || !mm_tma_pick(c, dtype, rows, cols, n_max, epi, &cfg)) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED,
                  "kn_matmul_tma: needs the tensor copy engine and wgmma (sm_90a), cols a multiple of 8 and rows of "
                  "2, and a shape kn_matmul takes (rows %u, cols %u, n_max %u)",
                  rows, cols, n_max);
        return NULL;
    }
    return mm_make("kn_matmul_tma", c, rows, cols, n_max, dtype, epi, build_tma, &cfg, groups, err);
}
