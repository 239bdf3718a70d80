/* The prefill projections for short blocks (at most 64 tokens): kn_matmul's math, but
 * each weight read once for all the block's tokens on the matrix units, so a short prompt
 * costs about one read of the weights, as a decode step does.
 *
 * A workgroup owns 16 or 32 rows of Y (one or two row fragments: two where the rows still
 * give every compute unit a workgroup) for every token of the block; its subgroups split
 * the columns (K) into equal slices. Each subgroup walks its slice 16 columns at a time:
 * A_i = W[r0 + 16i ..][c .. c + 16] loaded straight from the buffer, B_j = the same
 * columns of tokens 8j .. 8j + 8 (X read column-major), acc_ij += A_i x B_j on 16x8x16
 * fragments, only for the j that hold one of the block's n tokens (a uniform branch: a
 * 24-token block does 3 of the 8 token fragments). The slices' accumulators meet in f32
 * workgroup memory, are summed in slice order, and every invocation applies the epilogue
 * (kn_epilogue) to its share of the outputs.
 *
 * Rows of X at t >= n hold anything: they only reach outputs that are not stored. The
 * shape must tile exactly (kn_matmul_skinny_ok): rows a multiple of 16, cols of 16 times
 * the slices, n_max of 8, no more than 64. */
#include "base/error.h"
#include "kernels/kn_common.h"

#define SKINNY_ROWS 16   /* rows of Y per row fragment: the fragments' M */
#define SKINNY_ROW_FRAGS 2 /* row fragments per workgroup at most */
#define SKINNY_TOKENS 8  /* tokens per B fragment: its N */
#define SKINNY_K 16      /* columns per step: the fragments' K */
#define SKINNY_MAX 64    /* tokens per block at most (8 accumulators per lane) */
#define SKINNY_SLICES 8  /* subgroups per workgroup, each a slice of the columns */

/* The 16x8x16 dtype x dtype -> f32 shape, or NULL. */
static const rt_mma_shape *skinny_shape(const rt_caps *c, ir_scalar dtype) {
    for (uint32_t i = 0; c && i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->mma[i];
        if (s->ab_type == (uint32_t)dtype && s->acc_type == IR_F32 && s->m == SKINNY_ROWS && s->n == SKINNY_TOKENS &&
            s->k == SKINNY_K)
            return s;
    }
    return NULL;
}

/* Slices of the columns: as many as SKINNY_SLICES that split cols into whole steps. */
static uint32_t skinny_slices(uint32_t cols) {
    uint32_t s = SKINNY_SLICES;
    while (s > 1 && cols % (s * SKINNY_K)) s /= 2;
    return s;
}

/* Row fragments per workgroup: two where rows / 32 workgroups still cover the device. */
static uint32_t skinny_row_frags(const rt_caps *c, uint32_t rows) {
    uint32_t units = c->compute_units ? c->compute_units : 128;
    return rows % (2 * SKINNY_ROWS) == 0 && rows / (2 * SKINNY_ROWS) >= units ? 2 : 1;
}

static uint32_t sums_bytes(uint32_t slices, uint32_t row_frags, uint32_t n_max) {
    return slices * row_frags * SKINNY_ROWS * n_max * 4u;
}

/* The subgroups splitting the columns, fewer where their sums would not fit the caps'
 * workgroup memory (at least 2 a workgroup); 0 when even that does not fit. */
static uint32_t skinny_fit_slices(const rt_caps *c, uint32_t cols, uint32_t row_frags, uint32_t n_max) {
    uint32_t s = skinny_slices(cols);
    while (s > 1 && c->shared_bytes && sums_bytes(s, row_frags, n_max) > c->shared_bytes) s /= 2;
    return !c->shared_bytes || sums_bytes(s, row_frags, n_max) <= c->shared_bytes ? s : 0;
}

bool kn_matmul_skinny_ok(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype) {
    /* measured on CUDA only: Vulkan's cooperative matrices have not run it (issue 16) */
    if (!c || c->backend != RT_CUDA || !skinny_shape(c, dtype) || c->subgroup_size == 0) return false;
    if (rows == 0 || rows % SKINNY_ROWS || cols == 0 || cols % SKINNY_K || n_max == 0 || n_max % SKINNY_TOKENS ||
        n_max > SKINNY_MAX)
        return false;
    uint32_t slices = skinny_fit_slices(c, cols, skinny_row_frags(c, rows), n_max), wg = slices * c->subgroup_size;
    if (!slices || wg > 1024 || (c->max_workgroup && wg > c->max_workgroup)) return false;
    return (uint64_t)rows * cols <= UINT32_MAX && (uint64_t)n_max * cols <= UINT32_MAX;
}

typedef struct skinny {
    kx k;
    uint32_t rows, cols, n_max, slices, invocations;
    uint32_t row_frags, tile_rows; /* row fragments per workgroup, and the rows they hold */
    ir_scalar dtype;
    unsigned epi;
    ir_buf w, x, y, info, b, res;
    ir_shm sums; /* [slice][tile_rows rows][n_max tokens], f32 */
    ir_val r0, n;
} skinny;

/* acc_j += a x B_j for the token fragments j that hold one of the n tokens. */
static void token_products(const skinny *q, ir_type tb, ir_val a, ir_val c, ir_val n_frags, const ir_val *in,
                           ir_val *out, uint32_t n_tok) {
    kx k = q->k;
    ir_val stride = kx_u32(k, q->cols);
    for (uint32_t j = 0; j < n_tok; j++) {
        ir_val jv = kx_u32(k, j);
        ir_if *f = ir_if_begin(k.ir, kx_lt(k, jv, n_frags), 1);
        /* B[kk][n] = X[8j + n][c + kk]: column-major with a column stride of cols */
        ir_val at = kx_add_c(k, c, j * SKINNY_TOKENS * q->cols);
        ir_val b = ir_frag_load(k.ir, tb, false, q->x, at, stride, false);
        ir_val d = ir_frag_mma(k.ir, a, b, in[j]);
        ir_if_else(k.ir, f, &d);
        ir_if_end(k.ir, f, &in[j]);
        out[j] = ir_if_result(f, 0);
    }
}

/* The subgroup's slice of the columns, 16 a step: acc[i * n_tok + j] += A_i x B_j. */
static void slice_products(const skinny *q, const rt_mma_shape *s, ir_val *acc, uint32_t n_tok) {
    kx k = q->k;
    ir_type ta = ir_t_frag(k.ir, IR_FRAG_A, q->dtype, s->m, s->n, s->k);
    ir_type tb = ir_t_frag(k.ir, IR_FRAG_B, q->dtype, s->m, s->n, s->k);
    uint32_t per_slice = q->cols / q->slices, n_acc = q->row_frags * n_tok;
    /* token fragments holding one of the n tokens: (n + 7) / 8 */
    ir_val n_frags = kx_shr_c(k, kx_add_c(k, q->n, SKINNY_TOKENS - 1), 3);
    ir_val first = kx_mul_c(k, kx_sg_id(k), per_slice);
    ir_val last = kx_add_c(k, first, per_slice), step = kx_u32(k, SKINNY_K);
    ir_for *l = ir_for_begin(k.ir, first, last, step, n_acc, acc);
    ir_val c = ir_for_iv(l), stride = kx_u32(k, q->cols);
    ir_val next[SKINNY_ROW_FRAGS * SKINNY_MAX / SKINNY_TOKENS], in[SKINNY_MAX / SKINNY_TOKENS];
    for (uint32_t i = 0; i < q->row_frags; i++) {
        ir_val row = kx_add_c(k, q->r0, i * SKINNY_ROWS);
        ir_val a = ir_frag_load(k.ir, ta, false, q->w, kx_idx(k, row, q->cols, c), stride, true);
        for (uint32_t j = 0; j < n_tok; j++) in[j] = ir_for_arg(l, i * n_tok + j);
        token_products(q, tb, a, c, n_frags, in, next + i * n_tok, n_tok);
    }
    ir_for_end(k.ir, l, next);
    for (uint32_t j = 0; j < n_acc; j++) acc[j] = ir_for_result(l, j);
}

/* Output item i: token i / (tile_rows / lanes), rows in vectors of lanes: the slices'
 * sums in order, the epilogue, stored for t < n. */
static void out_item(const skinny *q, ir_val i, uint32_t lanes) {
    kx k = q->k;
    uint32_t per = q->tile_rows / lanes;
    ir_val t = kx_div_c(k, i, per);
    ir_val rl = kx_mul_c(k, kx_rem_c(k, i, per), lanes);
    ir_if *f = kx_if(k, kx_lt(k, t, q->n));
    ir_val r = kx_add(k, q->r0, rl), yi = kx_idx(k, t, q->rows, r), o[4];
    for (uint32_t l = 0; l < lanes; l++) {
        ir_val at = kx_add(k, kx_mul_c(k, kx_add_c(k, rl, l), q->n_max), t), sum = IR_NONE;
        for (uint32_t s = 0; s < q->slices; s++) {
            ir_val v = kx_shm_load(k, q->sums, kx_add_c(k, at, s * q->tile_rows * q->n_max), 1);
            sum = s ? kx_add(k, sum, v) : v;
        }
        ir_val res_at = kx_add_c(k, yi, l), b_at = kx_add_c(k, r, l);
        o[l] = kn_epilogue(k, q->epi, sum, q->b, b_at, q->res, res_at, q->dtype);
    }
    kx_store(k, q->y, yi, lanes == 1 ? o[0] : kx_vec(k, o, lanes));
    kx_end_if(k, f);
}

ir_kernel *kn_matmul_skinny(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype,
                            unsigned epi, uint32_t groups[2], kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (kn_check_epi("kn_matmul_skinny", epi, KN_EPI_BIAS | KN_EPI_RESIDUAL, err)) return NULL;
    if (!kn_matmul_skinny_ok(c, rows, cols, n_max, dtype)) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED,
                  "kn_matmul_skinny: %u x %u for %u tokens does not tile (rows of 16, columns of 16 per slice, "
                  "8..64 tokens in eights) or the caps lack 16x8x16 %s fragments",
                  rows, cols, n_max, ir_scalar_name(dtype));
        return NULL;
    }
    skinny q = {.rows = rows, .cols = cols, .n_max = n_max, .dtype = dtype, .epi = epi,
                .row_frags = skinny_row_frags(c, rows)};
    q.slices = skinny_fit_slices(c, cols, q.row_frags, n_max);
    q.tile_rows = q.row_frags * SKINNY_ROWS;
    q.k = (kx){kn_create("kn_matmul_skinny", err), c};
    if (!q.k.ir) return NULL;
    kx k = q.k;
    q.w = kx_buffer(k, "W", dtype, IR_READ, (uint64_t)rows * cols);
    q.x = kx_buffer(k, "X", dtype, IR_READ, (uint64_t)n_max * cols);
    q.y = kx_buffer(k, "Y", dtype, IR_WRITE, (uint64_t)n_max * rows);
    q.info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    if (epi & KN_EPI_BIAS) q.b = kx_buffer(k, "b", dtype, IR_READ, rows);
    if (epi & KN_EPI_RESIDUAL) q.res = kx_buffer(k, "res", dtype, IR_READ, (uint64_t)n_max * rows);
    q.invocations = q.slices * c->subgroup_size;
    kx_workgroup(k, q.invocations);
    q.sums = kx_shared(k, "sums", IR_F32, q.slices * q.tile_rows * n_max);
    ir_val lid = kx_local(k);
    q.n = kx_min(k, kx_load(k, q.info, kx_u32(k, 1), 1), kx_u32(k, n_max));
    q.r0 = kx_group_times(k, 0, q.tile_rows);

    const rt_mma_shape *s = skinny_shape(c, dtype);
    ir_type tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, s->m, s->n, s->k);
    uint32_t n_tok = n_max / SKINNY_TOKENS;
    ir_val acc[SKINNY_ROW_FRAGS * SKINNY_MAX / SKINNY_TOKENS], zero = ir_frag_fill(k.ir, tc, kx_f32(k, 0.0f));
    for (uint32_t j = 0; j < q.row_frags * n_tok; j++) acc[j] = zero;
    slice_products(&q, s, acc, n_tok);
    /* slice s's tile_rows x n_max sums (rows x tokens) at s * tile_rows * n_max; token
     * fragments past n hold zeros (never accumulated) and reach no stored output */
    ir_val base = kx_mul_c(k, kx_sg_id(k), q.tile_rows * n_max), stride = kx_u32(k, n_max);
    for (uint32_t i = 0; i < q.row_frags; i++)
        for (uint32_t j = 0; j < n_tok; j++) {
            ir_val at = kx_add_c(k, base, i * SKINNY_ROWS * n_max + j * SKINNY_TOKENS);
            ir_frag_store(k.ir, acc[i * n_tok + j], true, q.sums, at, stride, true);
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
    if (groups) groups[0] = rows / q.tile_rows, groups[1] = 1;
    return kn_finish(k.ir, err);
}
