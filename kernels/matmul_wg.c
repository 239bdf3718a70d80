/* The prefill product on warpgroup products (wg.mma: wgmma on sm_90a), built beside
 * kn_matmul with its parameters, grid semantics and epilogues; not yet used by the plan
 * (it has not run on a device: tests/kernels checks it against the reference there).
 *
 * A workgroup of two warpgroups (256 invocations) owns 128 tokens x 128 rows of Y, each
 * warpgroup 64 tokens x 128 rows in one m64n128 accumulator (64 f32 a lane). cols is
 * walked in chunks of 64 columns ring-buffered in `stages` slots of workgroup memory by
 * asynchronous copies issued stages - 1 chunks ahead (kn_matmul's pipeline), each slot
 * in wg.mma's layout of 8x8 core matrices (matmul_stage.c: lbo 64, sbo 8 * 64 elements);
 * a chunk's products are one wg.mma of 4 steps of 16 columns per warpgroup. The
 * accumulators leave through an f32 workgroup array for the epilogue, as kn_matmul's. */
#include "kernels/kernels.h"
#include "kernels/matmul_internal.h"

#define WG_TILE 128 /* tokens and rows per workgroup */
#define WG_KC 64    /* columns per chunk */
#define WG_STAGES 4
#define CS_PAD 4

static uint32_t wg_shared_bytes(void) { return WG_STAGES * 2 * WG_TILE * WG_KC * 2 + WG_TILE * (WG_TILE + CS_PAD) * 4; }

bool kn_matmul_wg_ok(const rt_caps *c, ir_scalar dt, uint32_t cols) {
    if (!c->wgmma || !c->async_copy || c->subgroup_size != 32 || cols % MM_COPY) return false;
    if (dt != IR_BF16 && dt != IR_F16) return false;
    if (c->max_workgroup && c->max_workgroup < 256) return false;
    return !c->shared_bytes || wg_shared_bytes() <= c->shared_bytes;
}

typedef struct wg_item {
    ir_shm cs;
    ir_val t0, r0;
    uint32_t lanes;
} wg_item;

/* Output i of the tile: token i / (128 / lanes), rows in vectors, from the f32 sums. */
static void out_item(const mm *m, ir_val i, const void *p) {
    const wg_item *a = p;
    kx k = m->k;
    uint32_t per = WG_TILE / a->lanes;
    ir_val tl = kx_div_c(k, i, per), rl = kx_mul_c(k, kx_rem_c(k, i, per), a->lanes);
    ir_val t = kx_add(k, a->t0, tl), r = kx_add(k, a->r0, rl);
    ir_if *f = kx_if(k, mm_exists(m, t, r));
    ir_val s[4], at = kx_idx(k, tl, WG_TILE + CS_PAD, rl);
    for (uint32_t l = 0; l < a->lanes; l++) s[l] = kx_shm_load(k, a->cs, kx_add_c(k, at, l), 1);
    mm_store_y(m, t, r, s, a->lanes);
    kx_end_if(k, f);
}

static void build(mm *m, uint32_t groups[2]) {
    kx k = m->k;
    uint32_t stage = WG_TILE * WG_KC, chunks = (m->cols + WG_KC - 1) / WG_KC;
    m->invocations = 256;
    kx_workgroup(k, 256);
    ir_shm xs = kx_shared(k, "xs", m->dtype, WG_STAGES * stage), ws = kx_shared(k, "ws", m->dtype, WG_STAGES * stage);
    ir_shm cs = kx_shared(k, "cs", IR_F32, WG_TILE * (WG_TILE + CS_PAD));
    ir_type tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, 64, WG_TILE, 16);
    ir_val t0 = kx_group_times(k, 1, WG_TILE), r0 = kx_group_times(k, 0, WG_TILE);
    ir_val half = kx_shr_c(k, kx_sg_id(k), 2); /* the warpgroup: tokens 64 half .. */
    ir_if *live = kx_if(k, kx_lt(k, t0, m->n));
    mm_stage sx = {m->x, xs, WG_TILE, m->n_max - 1, stage, WG_KC, 0, true, t0};
    mm_stage sw = {m->w, ws, WG_TILE, m->rows - 1, stage, WG_KC, 0, true, r0};
    for (uint32_t c = 0; c + 1 < WG_STAGES; c++) {
        if (c < chunks) {
            mm_issue_stage(m, &sx, kx_u32(k, c), kx_u32(k, c));
            mm_issue_stage(m, &sw, kx_u32(k, c), kx_u32(k, c));
        }
        ir_async_commit(k.ir);
    }
    ir_val init = ir_frag_fill(k.ir, tc, kx_f32(k, 0.0f));
    ir_for *l = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, chunks), kx_u32(k, 1), 1, &init);
    ir_val c = ir_for_iv(l), acc = ir_for_arg(l, 0);
    ir_async_wait(k.ir, WG_STAGES - 2);
    kx_barrier(k); /* chunk c is everyone's; chunk c - 1's slot is free */
    ir_val next = kx_add_c(k, c, WG_STAGES - 1);
    ir_if *f = kx_if(k, kx_lt_c(k, next, chunks));
    ir_val nslot = kx_rem_c(k, next, WG_STAGES);
    mm_issue_stage(m, &sx, next, nslot);
    mm_issue_stage(m, &sw, next, nslot);
    kx_end_if(k, f);
    ir_async_commit(k.ir);
    ir_val slot = kx_mul_c(k, kx_rem_c(k, c, WG_STAGES), stage);
    ir_val a_base = kx_add(k, slot, kx_mul_c(k, half, 64 * WG_KC)); /* 8 row groups of 8 x 64 */
    ir_val sbo = kx_u32(k, 8 * WG_KC), lbo = kx_u32(k, 64);
    acc = ir_wg_mma(k.ir, acc, xs, a_base, sbo, lbo, ws, slot, sbo, lbo, WG_KC / 16);
    ir_for_end(k.ir, l, &acc);
    acc = ir_for_result(l, 0);
    /* the warpgroup's 64 tokens x 128 rows, then the epilogue by all */
    ir_frag_store(k.ir, acc, true, cs, kx_mul_c(k, half, 64 * (WG_TILE + CS_PAD)), kx_u32(k, WG_TILE + CS_PAD), true);
    kx_barrier(k);
    wg_item it = {cs, t0, r0, kn_vec_width(m->rows)};
    mm_for_items(m, WG_TILE * WG_TILE / it.lanes, out_item, &it);
    kx_end_if(k, live);
    groups[0] = (m->rows + WG_TILE - 1) / WG_TILE;
    groups[1] = (m->n_max + WG_TILE - 1) / WG_TILE;
}

ir_kernel *kn_matmul_wg(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype, unsigned epi,
                        uint32_t groups[2], kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (kn_check_epi("kn_matmul_wg", epi, KN_EPI_BIAS | KN_EPI_RESIDUAL, err)) return NULL;
    if (!kn_matmul_wg_ok(c, dtype, cols) || rows == 0 || n_max == 0 || n_max % 64 ||
        (uint64_t)n_max * cols > UINT32_MAX || (uint64_t)n_max * rows > UINT32_MAX ||
        (uint64_t)rows * cols > UINT32_MAX) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED,
                  "kn_matmul_wg: needs wgmma (sm_90a), asynchronous copies and cols a multiple of 8, and a shape "
                  "kn_matmul takes (rows %u, cols %u, n_max %u)",
                  rows, cols, n_max);
        return NULL;
    }
    mm m = {.k = {kn_create("kn_matmul_wg", err), c},
            .rows = rows,
            .cols = cols,
            .n_max = n_max,
            .dtype = dtype,
            .epi = epi};
    if (!m.k.ir) return NULL;
    mm_params(&m);
    uint32_t g[2];
    build(&m, g);
    if (groups) groups[0] = g[0], groups[1] = g[1];
    return kn_finish(m.k.ir, err);
}
