/* The prefill projections on block-quantized weights through cooperative matrices
 * (matmul_coop.c's tiles; Vulkan, or any device whose fragments hide their elements): the
 * contract's exact weights on the matrix units without rounding them. Each chunk of W is
 * staged as its codes less their offset (small integers every 16-bit float holds exactly)
 * with each sub-step's scale and min beside it in f32; the kernel takes a fresh product of
 * X and the codes per sub-step and adds it scaled element by element (coop_math_q):
 *
 *   Y[t][r] += s[r][b] * sum_{c in b} (code[r][c] - offset) X[t][c] + m[r][b] * sum_{c in b} X[t][c]
 *
 * as kn_matmul_q's sums, in another order. A sub-step is 32 columns (the sub-block of every
 * type but Q6_K's), or 16 where some stacked part has sub-blocks of 16; a part whose
 * sub-blocks are wider repeats its scale over its sub-steps. The stacked parts of a
 * product (q, k, v of their own types) branch per staged item on the row. */
#include "base/error.h"
#include "kernels/matmul_internal.h"
#include "kernels/quant_ir.h"

#include <stdlib.h>
#include <string.h>

typedef struct qc {
    const kn_qlayout *L;
    const ir_buf *w;
    uint32_t n_parts;
    mm_coop_q z;
} qc;

typedef struct qc_item_arg {
    const qc *q;
    ir_shm ws;
    uint32_t per_row, tile;
    ir_val r0, first_col;
} qc_item_arg;

/* The 32 codes (as f32: code - offset) of a part's row from column col, and the scale and
 * min of each 16-column half (the same pair twice for sub-blocks of 32; min 0 without). */
static void part_chunk(kx k, const kn_qlayout *L, ir_buf w, ir_val row, ir_val col, uint32_t cols, ir_val *out) {
    const kn_qformat *f = kn_qformat_of(L->type);
    ir_val e0 = kx_add(k, kx_mul_c(k, row, cols), col), s[2], m[2], zero = kx_f32(k, 0.0f);
    kn_q_chunk(k, L, w, e0, out);
    for (uint32_t h = 0; h < 2; h++) {
        if (h && f->sub == 32) {
            s[1] = s[0], m[1] = m[0];
            break;
        }
        ir_val si = f->sub == 16 ? kx_add_c(k, kx_shr_c(k, e0, 4), h) : kx_shr_c(k, e0, 5);
        kn_q_sub_scale(k, L, w, si, &s[h], &m[h]);
        if (m[h] == IR_NONE) m[h] = zero;
    }
    out[KN_Q_CHUNK] = s[0], out[KN_Q_CHUNK + 1] = s[1], out[KN_Q_CHUNK + 2] = m[0], out[KN_Q_CHUNK + 3] = m[1];
}

#define QC_VALS (KN_Q_CHUNK + 4)

/* Item i: row i / per_row of the tile, its 32 columns (i % per_row) * 32 of the chunk:
 * the codes into the staged W, the scales and mins of its sub-steps into ss and ms. */
static void stage_item(const mm *m, ir_val i, const void *p) {
    const qc_item_arg *a = p;
    const qc *q = a->q;
    const mm_coop_q *z = &q->z;
    kx k = m->k;
    ir_val rl = kx_div_c(k, i, a->per_row), c32 = kx_rem_c(k, i, a->per_row), v[QC_VALS];
    /* rows past the product read its last (their outputs are not stored) */
    ir_val row = kx_min(k, kx_add(k, a->r0, rl), kx_u32(k, m->rows - 1));
    ir_val col = kx_add(k, a->first_col, kx_mul_c(k, c32, KN_Q_CHUNK));
    kn_q_parts_values(k, q->L, q->w, q->n_parts, row, col, m->cols, part_chunk, QC_VALS, v);
    ir_type t1 = kx_t(k, m->dtype, 1);
    ir_val at = kx_add(k, kx_mul_c(k, rl, z->w_stride), kx_mul_c(k, c32, KN_Q_CHUNK)), h[4];
    for (uint32_t j = 0; j < KN_Q_CHUNK; j += 4) {
        for (uint32_t l = 0; l < 4; l++) h[l] = ir_convert_exact(k.ir, v[j + l], t1);
        kx_shm_store(k, a->ws, kx_add_c(k, at, j), kx_vec(k, h, 4));
    }
    /* sub-steps of 32: one pair an item (both halves hold it); of 16: one a half */
    uint32_t per_item = KN_Q_CHUNK / z->step;
    for (uint32_t s = 0; s < per_item; s++) {
        ir_val sat = kx_add(k, kx_mul_c(k, kx_add_c(k, kx_mul_c(k, c32, per_item), s), a->tile), rl);
        kx_shm_store(k, z->ss, sat, v[KN_Q_CHUNK + s]);
        if (z->has_min) kx_shm_store(k, z->ms, sat, v[KN_Q_CHUNK + 2 + s]);
    }
}

static void stage(const mm *m, const mm_w_stager *s, ir_shm ws, uint32_t stride, ir_val r0, uint32_t tile,
                  ir_val first_col, uint32_t n_cols) {
    (void)stride; /* the staged W's rows are z.w_stride apart (the stager's own layout) */
    qc_item_arg a = {s->arg, ws, n_cols / KN_Q_CHUNK, tile, r0, first_col};
    mm_for_items(m, tile * a.per_row, stage_item, &a);
}

/* Opt-in on a GPU (KILN_MATMUL_Q_COOP=1) until it has run right on one: its stride-0
 * fragment loads and element-wise products are new to the drivers. Where fragments are
 * emulated (lavapipe's tests) it is the default; KILN_MATMUL_Q_COOP=0 refuses it anywhere. */
static bool coop_wanted(const rt_caps *c) {
    const char *e = getenv("KILN_MATMUL_Q_COOP");
    if (e && !strcmp(e, "0")) return false;
    return c->mma_emulated || (e && !strcmp(e, "1"));
}

bool kn_matmul_q_coop_pick(const rt_caps *c, const kn_qlayout *L, uint32_t n_parts, uint32_t rows, uint32_t n_max,
                           ir_scalar dt, mm_coop_cfg *cfg) {
    /* CUDA's fragments expose their elements: matmul_q_mma.c */
    if (c->backend == RT_CUDA || !coop_wanted(c)) return false;
    uint32_t step = 32;
    for (uint32_t p = 0; p < n_parts; p++)
        if (kn_qformat_of(L[p].type)->sub < step) step = kn_qformat_of(L[p].type)->sub;
    return mm_coop_pick_q(c, dt, rows, n_max, step, cfg);
}

ir_kernel *kn_matmul_q_coop(const rt_caps *c, const kn_qlayout *L, uint32_t n_parts, uint32_t rows, uint32_t cols,
                            uint32_t n_max, ir_scalar dtype, unsigned epi, mm_coop_cfg *cfg, uint32_t groups[2],
                            kiln_err *err) {
    mm m = {.k = {kn_create("kn_matmul_q_coop", err), c},
            .rows = rows,
            .cols = cols,
            .n_max = n_max,
            .dtype = dtype,
            .epi = epi};
    kx k = m.k;
    if (!k.ir) return NULL;
    ir_buf w[KN_Q_PARTS];
    qc q = {L, w, n_parts, {.step = 32}};
    mm_params_q(&m, L, n_parts, w);
    for (uint32_t i = 0; i < n_parts; i++) {
        const kn_qformat *f = kn_qformat_of(L[i].type);
        if (f->sub < q.z.step) q.z.step = f->sub;
        q.z.has_min |= f->has_min;
    }
    mm_w_stager ws = {stage, &q, KN_Q_CHUNK};
    q.z.wq = &ws;
    cfg->q = &q.z;
    uint32_t g[2];
    mm_build_coop(&m, cfg, g);
    cfg->q = NULL;
    if (groups) groups[0] = g[0], groups[1] = g[1];
    return kn_finish(k.ir, err);
}
