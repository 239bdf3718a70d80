/* The prefill product as a multi-stage pipeline (the sm_80+ path of kn_matmul, where the
 * caps offer asynchronous copies): Y[t][r] = sum_c W[r][c] * X[t][c], then kn_epilogue.
 *
 * A workgroup owns a tile of (warps_t * frags_m * 16) tokens x (warps_r * frags_n * 8)
 * rows of Y, 128 x 128 where the grid still fills the device: 4 subgroups of 64 x 64,
 * each 4 x 8 accumulators of 16x8 (smaller tiles for products of fewer outputs). cols is walked in chunks of kc columns; `stages` chunks of X and W live in
 * workgroup memory at once, ring-buffered. Each chunk arrives by asynchronous 16-byte
 * copies issued stages - 1 chunks ahead, so while a chunk's products run the next ones
 * are in flight (one barrier per chunk):
 *
 *   issue chunks 0 .. stages-2, one commit each
 *   for c in chunks: wait until chunk c has landed (stages - 2 groups pending); barrier
 *                    issue chunk c + stages - 1 into the slot chunk c - 1 used; commit
 *                    the products of chunk c
 *
 * Staged rows are padded by 8 elements (kc 64: 144 bytes), so the eight 16-byte rows of a
 * fragment load fall in distinct banks. Tails: rows of X at t >= n and of W at r >= rows
 * are clamped into the buffers (what they give reaches no stored output), columns past
 * cols are zero-filled by the copies (their limit is the row's end). The accumulators
 * leave through an f32 workgroup array one 16-token strip per subgroup at a time, so
 * every invocation applies the epilogue to consecutive outputs with vector stores. */
#include "kernels/matmul_internal.h"

#include <stdio.h>
#include <stdlib.h>

#define PIPE_PAD 8 /* dtype elements after each staged row */
#define COPY 8     /* dtype elements per asynchronous copy (16 bytes) */
#define CS_PAD 4   /* f32 words after each row of the epilogue's strip */

typedef struct pipe {
    mm_pipe_cfg cfg;
    uint32_t tile_t, tile_r;   /* tokens and rows per workgroup */
    uint32_t stride;           /* of a staged row, in elements */
    uint32_t stage_x, stage_w; /* elements of one stage's X and W chunk */
    uint32_t chunks;           /* ceil(cols / kc) */
    ir_shm xs, ws;             /* the ring of stages */
    ir_type ta, tb;
    ir_val t0, r0;       /* the tile's first token and row */
    ir_val sub_t, sub_r; /* the subgroup's first token and row within the tile */
} pipe;

static uint32_t pipe_shared_bytes(const mm_pipe_cfg *g) {
    uint32_t tt = g->warps_t * g->frags_m * 16, tr = g->warps_r * g->frags_n * 8;
    uint32_t staged = g->stages * (tt + tr) * (g->kc + PIPE_PAD) * 2;
    uint32_t strip = g->warps_t * 16 * (tr + CS_PAD) * 4;
    return staged + strip;
}

/* KILN_MATMUL_PIPE=warps_t,warps_r,frags_m,frags_n,kc,stages overrides the default shape
 * (for measuring others on a device); a malformed value is ignored. */
static void env_cfg(mm_pipe_cfg *g) {
    const char *e = getenv("KILN_MATMUL_PIPE");
    unsigned v[6];
    if (!e || sscanf(e, "%u,%u,%u,%u,%u,%u", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) return;
    uint32_t warps = v[0] * v[1];
    if (warps < 1 || warps > 16 || v[2] < 1 || v[2] > 8 || v[3] < 1 || v[3] > 16 || v[2] * v[3] > 64 || v[4] < 16 ||
        v[4] > 128 || v[4] % 16 || v[5] < 2 || v[5] > 8)
        return;
    *g = (mm_pipe_cfg){v[0], v[1], v[2], v[3], v[4], v[5]};
}

/* The tiles tried, largest first, each 4 subgroups with 64-column chunks in 3 or 4
 * stages (128 x 64 would give the grid of 64 x 128; on the H200, qwen3-8b's 512-token products: 128 x 128 with 64 columns in 3
 * stages ran 200-270 TFLOP/s, 32 columns in 4 stages 200-250, 8 subgroups of 128 x 256 or
 * 256 x 128 135-245). */
static const mm_pipe_cfg tiles[] = {
    {2, 2, 4, 8, 64, 3}, /* 128 tokens x 128 rows */
    {2, 2, 2, 8, 64, 4}, /* 64 x 128 */
    {2, 2, 2, 4, 64, 4}, /* 64 x 64 */
};

static uint32_t grid_of(const mm_pipe_cfg *g, uint32_t rows, uint32_t n_max) {
    uint32_t tt = g->warps_t * g->frags_m * 16, tr = g->warps_r * g->frags_n * 8;
    return ((rows + tr - 1) / tr) * ((n_max + tt - 1) / tt);
}

bool mm_pipe_pick(const rt_caps *c, ir_scalar dt, uint32_t rows, uint32_t cols, uint32_t n_max, mm_pipe_cfg *cfg) {
    if (!c->async_copy || c->subgroup_size != 32 || cols % MM_COPY) return false;
    bool shape = false;
    for (uint32_t i = 0; i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->mma[i];
        shape |= s->m == 16 && s->n == 8 && s->k == 16 && s->ab_type == (uint32_t)dt && s->acc_type == IR_F32;
    }
    if (!shape) return false;
    /* the largest tile whose grid still covers nine tenths of the SMs (a product of few
     * tiles leaves the rest idle), else the smallest */
    size_t n_tiles = sizeof tiles / sizeof tiles[0], t = 0;
    uint32_t cu = c->compute_units ? c->compute_units : 1;
    while (t + 1 < n_tiles && (uint64_t)grid_of(&tiles[t], rows, n_max) * 10 < (uint64_t)cu * 9) t++;
    mm_pipe_cfg g = tiles[t];
    env_cfg(&g);
    if (c->max_workgroup && g.warps_t * g.warps_r * 32 > c->max_workgroup) return false;
    while (g.stages > 2 && c->shared_bytes && pipe_shared_bytes(&g) > c->shared_bytes) g.stages--;
    if (c->shared_bytes && pipe_shared_bytes(&g) > c->shared_bytes) return false;
    *cfg = g;
    return true;
}

/* ---- staging ------------------------------------------------------------------------------ */

/* chunk's X and W into ring slot chunk % stages */
static void issue_chunk(const mm *m, const pipe *p, ir_val chunk) {
    kx k = m->k;
    ir_val slot = kx_rem_c(k, chunk, p->cfg.stages);
    mm_stage ox = {m->x, p->xs, p->tile_t, m->n_max - 1, p->stage_x, p->cfg.kc, p->stride, MM_ROWS, p->t0};
    mm_stage ow = {m->w, p->ws, p->tile_r, m->rows - 1, p->stage_w, p->cfg.kc, p->stride, MM_ROWS, p->r0};
    mm_issue_stage(m, &ox, chunk, slot);
    mm_issue_stage(m, &ow, chunk, slot);
}

/* ---- the products --------------------------------------------------------------------------- */

static void chunk_math(const mm *m, const pipe *p, ir_val slot, ir_val *acc) {
    kx k = m->k;
    const mm_pipe_cfg *g = &p->cfg;
    ir_val st = kx_u32(k, p->stride);
    ir_val xb = kx_add(k, kx_mul_c(k, slot, p->stage_x), kx_mul_c(k, p->sub_t, p->stride));
    ir_val wb = kx_add(k, kx_mul_c(k, slot, p->stage_w), kx_mul_c(k, p->sub_r, p->stride));
    for (uint32_t kk = 0; kk < g->kc; kk += 16) {
        ir_val a[8], b[16];
        for (uint32_t i = 0; i < g->frags_m; i++)
            a[i] = ir_frag_load(k.ir, p->ta, true, p->xs, kx_add_c(k, xb, i * 16 * p->stride + kk), st, true);
        for (uint32_t j = 0; j < g->frags_n; j++)
            b[j] = ir_frag_load(k.ir, p->tb, true, p->ws, kx_add_c(k, wb, j * 8 * p->stride + kk), st, false);
        for (uint32_t i = 0; i < g->frags_m; i++)
            for (uint32_t j = 0; j < g->frags_n; j++) {
                ir_val *c = &acc[i * g->frags_n + j];
                *c = ir_frag_mma(k.ir, a[i], b[j], *c);
            }
    }
}

/* The ring: prologue, then one loop over the chunks. */
static void run_pipe(const mm *m, const pipe *p, ir_val *acc, uint32_t n_acc) {
    kx k = m->k;
    uint32_t s = p->cfg.stages;
    for (uint32_t c = 0; c + 1 < s; c++) {
        if (c < p->chunks) issue_chunk(m, p, kx_u32(k, c));
        ir_async_commit(k.ir); /* empty groups keep the count uniform */
    }
    ir_for *l = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, p->chunks), kx_u32(k, 1), n_acc, acc);
    ir_val cur[64];
    for (uint32_t i = 0; i < n_acc; i++) cur[i] = ir_for_arg(l, i);
    ir_val c = ir_for_iv(l);
    ir_async_wait(k.ir, s - 2);
    kx_barrier(k); /* chunk c is everyone's; everyone is done with chunk c - 1's slot */
    ir_val next = kx_add_c(k, c, s - 1);
    ir_if *f = kx_if(k, kx_lt_c(k, next, p->chunks));
    issue_chunk(m, p, next);
    kx_end_if(k, f);
    ir_async_commit(k.ir);
    chunk_math(m, p, kx_rem_c(k, c, s), cur);
    ir_for_end(k.ir, l, cur);
    for (uint32_t i = 0; i < n_acc; i++) acc[i] = ir_for_result(l, i);
}

/* ---- the epilogue ------------------------------------------------------------------------------ */

typedef struct strip_arg {
    const pipe *p;
    ir_shm cs;
    uint32_t strip; /* 0 .. frags_m - 1 */
    uint32_t lanes;
} strip_arg;

/* Item i of a strip: cs row i / (tile_r / lanes) is token (row / 16) * (frags_m * 16) +
 * strip * 16 + row % 16 of the tile, lanes consecutive rows of Y. */
static void strip_item(const mm *m, ir_val i, const void *arg) {
    const strip_arg *a = arg;
    const pipe *p = a->p;
    kx k = m->k;
    uint32_t per = p->tile_r / a->lanes, cs_stride = p->tile_r + CS_PAD;
    ir_val row = kx_div_c(k, i, per), rl = kx_mul_c(k, kx_rem_c(k, i, per), a->lanes);
    ir_val tl = kx_add(k, kx_mul_c(k, kx_shr_c(k, row, 4), p->cfg.frags_m * 16), kx_and_c(k, row, 15));
    ir_val t = kx_add(k, p->t0, kx_add_c(k, tl, a->strip * 16)), r = kx_add(k, p->r0, rl);
    ir_if *f = kx_if(k, mm_exists(m, t, r));
    ir_val s[4], at = kx_idx(k, row, cs_stride, rl);
    for (uint32_t l = 0; l < a->lanes; l++) s[l] = kx_shm_load(k, a->cs, kx_add_c(k, at, l), 1);
    mm_store_y(m, t, r, s, a->lanes);
    kx_end_if(k, f);
}

static void epilogue(const mm *m, const pipe *p, ir_shm cs, const ir_val *acc, ir_val sid) {
    kx k = m->k;
    const mm_pipe_cfg *g = &p->cfg;
    uint32_t cs_stride = p->tile_r + CS_PAD, lanes = kn_vec_width(m->rows);
    ir_val wt = kx_div_c(k, sid, g->warps_r);
    ir_val row0 = kx_mul_c(k, wt, 16); /* the subgroup's 16 rows of the strip */
    for (uint32_t i = 0; i < g->frags_m; i++) {
        if (i) kx_barrier(k); /* the last strip has been read */
        for (uint32_t j = 0; j < g->frags_n; j++) {
            ir_val at = kx_add(k, kx_mul_c(k, row0, cs_stride), kx_add_c(k, p->sub_r, j * 8));
            ir_frag_store(k.ir, acc[i * g->frags_n + j], true, cs, at, kx_u32(k, cs_stride), true);
        }
        kx_barrier(k);
        strip_arg a = {p, cs, i, lanes};
        mm_for_items(m, g->warps_t * 16 * p->tile_r / lanes, strip_item, &a);
    }
}

void mm_build_pipe(mm *m, const mm_pipe_cfg *cfg, uint32_t groups[2]) {
    kx k = m->k;
    pipe p = {.cfg = *cfg};
    const mm_pipe_cfg *g = &p.cfg;
    p.tile_t = g->warps_t * g->frags_m * 16, p.tile_r = g->warps_r * g->frags_n * 8;
    p.stride = g->kc + PIPE_PAD;
    p.stage_x = p.tile_t * p.stride, p.stage_w = p.tile_r * p.stride;
    p.chunks = (m->cols + g->kc - 1) / g->kc;
    m->invocations = g->warps_t * g->warps_r * 32;
    kx_workgroup(k, m->invocations);
    p.xs = kx_shared(k, "xs", m->dtype, g->stages * p.stage_x);
    p.ws = kx_shared(k, "ws", m->dtype, g->stages * p.stage_w);
    ir_shm cs = kx_shared(k, "cs", IR_F32, g->warps_t * 16 * (p.tile_r + CS_PAD));
    p.ta = ir_t_frag(k.ir, IR_FRAG_A, m->dtype, 16, 8, 16);
    p.tb = ir_t_frag(k.ir, IR_FRAG_B, m->dtype, 16, 8, 16);
    ir_type tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, 16, 8, 16);
    ir_val sid = kx_sg_id(k);
    p.t0 = kx_group_times(k, 1, p.tile_t);
    p.r0 = kx_group_times(k, 0, p.tile_r);
    p.sub_t = kx_mul_c(k, kx_div_c(k, sid, g->warps_r), g->frags_m * 16);
    p.sub_r = kx_mul_c(k, kx_rem_c(k, sid, g->warps_r), g->frags_n * 8);

    ir_if *live = kx_if(k, kx_lt(k, p.t0, m->n)); /* uniform: group id and a loaded value */
    uint32_t n_acc = g->frags_m * g->frags_n;
    ir_val acc[64], zero = ir_frag_fill(k.ir, tc, kx_f32(k, 0.0f));
    for (uint32_t i = 0; i < n_acc; i++) acc[i] = zero;
    run_pipe(m, &p, acc, n_acc);
    epilogue(m, &p, cs, acc, sid);
    kx_end_if(k, live);
    groups[0] = (m->rows + p.tile_r - 1) / p.tile_r;
    groups[1] = (m->n_max + p.tile_t - 1) / p.tile_t;
}
