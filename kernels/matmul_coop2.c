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

#include <stdlib.h>
#include <string.h>

#define HALF_T 64  /* tokens an accumulator */
#define TILE_T 128 /* tokens a workgroup: two accumulators */
#define TILE_R 128 /* rows a workgroup */
#define KC 32      /* columns a step */
#define OUT_PAD 4  /* f32 words after each row of the staged sums */

/* KILN_MATMUL_COOP=small or large asks for matmul_coop.c's tiles */
static bool refused(void) {
    const char *e = getenv("KILN_MATMUL_COOP");
    return e && (!strcmp(e, "small") || !strcmp(e, "large"));
}

static uint32_t out_bytes(void) { return HALF_T * (TILE_R + OUT_PAD) * 4u; }

bool mm_coop2_pick(const rt_caps *c, ir_scalar dt, mm_coop2_cfg *cfg) {
    if (!c || !c->n_mma || !c->n_wg_mma || refused()) return false;
    if (HALF_T > c->wg_mma_max_dim || TILE_R > c->wg_mma_max_dim || KC > c->wg_mma_max_dim) return false;
    uint32_t room = c->shared_bytes > c->wg_mma_reserved_shared ? c->shared_bytes - c->wg_mma_reserved_shared : 0;
    if (out_bytes() > room) return false;
    const rt_mma_shape *best = NULL;
    for (uint32_t i = 0; i < c->n_wg_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->wg_mma[i];
        if (s->ab_type != (uint32_t)dt || s->acc_type != IR_F32 || !s->m || !s->n || !s->k) continue;
        if (HALF_T % s->m || TILE_R % s->n || KC % s->k) continue;
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
    ir_val t0, r0; /* the accumulator's first token, the tile's first row */
    uint32_t lanes;
} out_arg;

/* Output item i of an accumulator: token i / (TILE_R / lanes), rows in a vector; the
 * epilogue of the staged f32 sums, for t < n and r < rows only. */
static void out_item(const mm *m, ir_val i, const void *p) {
    const out_arg *a = p;
    kx k = m->k;
    uint32_t per_row = TILE_R / a->lanes, stride = TILE_R + OUT_PAD;
    ir_val tl = kx_div_c(k, i, per_row), rl = kx_mul_c(k, kx_rem_c(k, i, per_row), a->lanes);
    ir_val tok = kx_add(k, a->t0, tl), row = kx_add(k, a->r0, rl);
    ir_if *f = kx_if(k, mm_exists(m, tok, row));
    ir_val v[4], at = kx_idx(k, tl, stride, rl);
    for (uint32_t l = 0; l < a->lanes; l++) v[l] = kx_shm_load(k, a->src, kx_add_c(k, at, l), 1);
    mm_store_y(m, tok, row, v, a->lanes);
    kx_end_if(k, f);
}

void mm_build_coop2(mm *m, const mm_coop2_cfg *cfg, uint32_t groups[2]) {
    kx k = m->k;
    m->invocations = cfg->shape->invocations;
    kx_workgroup(k, m->invocations);
    ir_shm cs = kx_shared(k, "cs", IR_F32, HALF_T * (TILE_R + OUT_PAD));
    ir_type ta = ir_t_frag_wg(k.ir, IR_FRAG_A, m->dtype, HALF_T, TILE_R, KC);
    ir_type tb = ir_t_frag_wg(k.ir, IR_FRAG_B, m->dtype, HALF_T, TILE_R, KC);
    ir_type tc = ir_t_frag_wg(k.ir, IR_FRAG_ACC, IR_F32, HALF_T, TILE_R, KC);
    /* workgroup (x, y): rows from r0, tokens from t0 */
    ir_val t0 = kx_group_times(k, 1, TILE_T);
    ir_val r0 = kx_group_times(k, 0, TILE_R);
    ir_val t1 = kx_add_c(k, t0, HALF_T);
    ir_val rows = kx_u32(k, m->rows), cols = kx_u32(k, m->cols);

    /* a tile of tokens all at t >= n does nothing (uniform: group id and a loaded value) */
    ir_if *live = kx_if(k, kx_lt(k, t0, m->n));
    ir_val zero = ir_frag_fill(k.ir, tc, kx_f32(k, 0.0f));
    ir_val init[2] = {zero, zero}, cur[2];
    ir_for *l = ir_for_begin(k.ir, kx_u32(k, 0), cols, kx_u32(k, KC), 2, init);
    for (uint32_t i = 0; i < 2; i++) cur[i] = ir_for_arg(l, i);
    ir_val c0 = ir_for_iv(l);
    ir_val b = ir_frag_load_tensor(k.ir, tb, m->w, r0, c0, rows, cols, true);
    ir_val a0 = ir_frag_load_tensor(k.ir, ta, m->x, t0, c0, m->n, cols, false);
    ir_val a1 = ir_frag_load_tensor(k.ir, ta, m->x, t1, c0, m->n, cols, false);
    cur[0] = ir_frag_mma(k.ir, a0, b, cur[0]);
    cur[1] = ir_frag_mma(k.ir, a1, b, cur[1]);
    ir_for_end(k.ir, l, cur);
    ir_val acc[2] = {ir_for_result(l, 0), ir_for_result(l, 1)};

    /* each accumulator -> the f32 array, then the epilogue by all */
    uint32_t lanes = kn_vec_width(m->rows);
    for (uint32_t h = 0; h < 2; h++) {
        if (h) kx_barrier(k); /* the first accumulator's sums are read */
        ir_frag_store(k.ir, acc[h], true, cs, kx_u32(k, 0), kx_u32(k, TILE_R + OUT_PAD), true);
        kx_barrier(k);
        out_arg o = {cs, h ? t1 : t0, r0, lanes};
        mm_for_items(m, HALF_T * TILE_R / lanes, out_item, &o);
    }
    kx_end_if(k, live);
    groups[0] = (m->rows + TILE_R - 1) / TILE_R;
    groups[1] = (m->n_max + TILE_T - 1) / TILE_T;
}
