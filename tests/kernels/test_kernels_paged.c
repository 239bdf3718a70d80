/* Paged KV caches (kn_pages, kiln serve's slots sharing one pool): every paged kernel
 * against its unpaged twin on the same logical caches, bit for bit (paging changes where a
 * position's row lives, not one operation of the arithmetic; the twins are checked against
 * the oracle in test_kernels_attn.c, _attn_prefill.c and _qk_prep.c). The pool's pages are
 * handed out in random order with spare pages left over; every pool row that holds no live
 * position is NaN, so a read of a wrong page shows; outputs are poisoned with a guard after
 * them; stores must land in exactly their pages' rows and nowhere else, a token whose page is
 * none writes nothing. Skipped by name without a device; the variants for the CUDA and
 * Vulkan caps build, assemble and validate without one. */
#include "base/error.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "tests/util/testutil_ptx.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64
#define NONE 0xffffffffu

static const ir_scalar dtypes[2] = {IR_BF16, IR_F16};

/* A pool and its page tables: sequence s holds pages for positions 0..len[s]-1. */
typedef struct pool {
    kn_pages pg;
    uint32_t n_seq;
    uint32_t *tab; /* [n_seq][stride]: a page, or NONE */
} pool;

static pool pool_make(uint32_t rows, uint32_t stride, uint32_t n_seq, const uint32_t *len, uint32_t spare) {
    pool p = {{rows, 0, stride}, n_seq, malloc((size_t)n_seq * stride * 4)};
    uint32_t need = 0;
    for (uint32_t s = 0; s < n_seq; s++) need += (len[s] + rows - 1) / rows;
    p.pg.n_pages = need + spare;
    uint32_t *pick = malloc(((size_t)need + 1) * 4);
    cr_assert(p.tab && pick);
    tu_rand_distinct(pick, need, p.pg.n_pages);
    for (uint32_t s = 0, at = 0; s < n_seq; s++)
        for (uint32_t i = 0; i < stride; i++) p.tab[s * stride + i] = i * rows < len[s] ? pick[at++] : NONE;
    free(pick);
    return p;
}

static size_t pool_rows(const pool *p) { return (size_t)p->pg.rows * p->pg.n_pages; }

/* The pool row of sequence s's position q, or SIZE_MAX where it has no page. */
static size_t row_of(const pool *p, uint32_t s, uint32_t q) {
    uint32_t page = p->tab[(size_t)s * p->pg.stride + q / p->pg.rows];
    return page == NONE ? SIZE_MAX : (size_t)page * p->pg.rows + q % p->pg.rows;
}

/* logical [n_seq][n_ctx][kv] (n_ctx = stride * rows) laid into the pool; NaN elsewhere */
static uint16_t *scatter(const pool *p, const uint16_t *logical, uint32_t kv, ir_scalar t) {
    size_t n = pool_rows(p) * kv;
    uint16_t *out = malloc(n * 2);
    cr_assert(out);
    for (size_t i = 0; i < n; i++) out[i] = tu_nan16(t);
    uint32_t n_ctx = p->pg.rows * p->pg.stride;
    for (uint32_t s = 0; s < p->n_seq; s++)
        for (uint32_t q = 0; q < n_ctx; q++) {
            size_t r = row_of(p, s, q);
            if (r != SIZE_MAX) memcpy(out + r * kv, logical + ((size_t)s * n_ctx + q) * kv, (size_t)kv * 2);
        }
    return out;
}

/* random logical caches of n_seq sequences, rows past last[s] NaN */
static uint16_t *logical_cache(ir_scalar t, uint32_t n_seq, uint32_t n_ctx, uint32_t kv, const uint32_t *last) {
    uint16_t *c = tu_rand16(t, (size_t)n_seq * n_ctx * kv, -2, 2, NULL);
    for (size_t i = 0; i < (size_t)n_seq * n_ctx * kv; i++) {
        size_t row = i / kv;
        if (row % n_ctx > last[row / n_ctx]) c[i] = tu_nan16(t);
    }
    return c;
}

static void release_all(rt_device *d, rt_buffer **b, size_t n) {
    for (size_t i = 0; i < n; i++) d->ops->release(d, b[i]);
}

/* ---- decode: one sequence, and a step's tokens of several ---------------------------------------- */

typedef struct heads {
    uint32_t n_head, n_head_kv, hd, rows, stride;
} heads;

static const heads decode_shapes[] = {{8, 4, 64, 16, 13}, {5, 1, 40, 1, 97}, {32, 8, 128, 64, 5}, {4, 4, 8, 4, 33}};

/* decode and merge of one token (batch 0) or a step of B; out poisoned with a guard */
static uint16_t *run_decode(rt_device *d, ir_kernel *k, ir_kernel *km, const uint32_t g[2], uint32_t gm, uint32_t nb,
                            rt_buffer *q, rt_buffer *kc, rt_buffer *vc, rt_buffer *pos, rt_buffer *tab, size_t n_out,
                            size_t n_part, ir_scalar t) {
    rt_buffer *part = tu_vk_poisoned32(d, n_part, GUARD), *out = tu_vk_poisoned16(d, t, n_out, GUARD);
    rt_arg a[6] = {{q, 0}, {kc, 0}, {vc, 0}, {part, 0}, {pos, 0}, {tab, 0}};
    tu_vk_launch(d, k, g[0], g[1], a, tab ? 6 : 5);
    rt_arg am[3] = {{part, 0}, {out, 0}, {pos, 0}};
    tu_vk_launch(d, km, gm, nb, am, 3);
    free(tu_vk_fetch32(d, part, n_part, GUARD, "partials"));
    uint16_t *o = tu_vk_fetch16(d, out, t, n_out, GUARD, "attention out");
    d->ops->release(d, part), d->ops->release(d, out);
    return o;
}

static void decode_one(rt_device *d, const heads *h, ir_scalar t) {
    kiln_err err = {0};
    uint32_t kv = h->n_head_kv * h->hd, qn = h->n_head * h->hd, n_ctx = h->rows * h->stride;
    uint32_t sp = kn_attn_splits(&d->caps, h->n_head, n_ctx), g[2], g2[2], gm;
    const uint32_t at[] = {0, 1, h->rows, n_ctx / 2 + 1, n_ctx - 1};
    for (size_t pi = 0; pi < sizeof at / sizeof at[0]; pi++) {
        uint32_t p = at[pi], len = p + 1;
        pool pl = pool_make(h->rows, h->stride, 1, &len, 3);
        ir_kernel *k0 = kn_attn_decode(&d->caps, h->n_head, h->n_head_kv, h->hd, n_ctx, sp, t, g, &err);
        ir_kernel *k1 = kn_attn_decode_paged(&d->caps, h->n_head, h->n_head_kv, h->hd, &pl.pg, sp, t, g2, &err);
        ir_kernel *km = kn_attn_merge(&d->caps, h->n_head, h->hd, n_ctx, sp, t, &gm, &err);
        cr_assert(k0 && k1 && km, "%s", err.msg);
        cr_assert(g[0] == g2[0] && g[1] == g2[1]);
        uint16_t *lc = logical_cache(t, 1, n_ctx, kv, &p), *lv = logical_cache(t, 1, n_ctx, kv, &p);
        uint16_t *pk = scatter(&pl, lc, kv, t), *pv = scatter(&pl, lv, kv, t), *q = tu_rand16(t, qn, -4, 4, NULL);
        rt_buffer *b[] = {tu_vk_upload(d, q, (size_t)qn * 2),          tu_vk_upload(d, lc, (size_t)n_ctx * kv * 2),
                          tu_vk_upload(d, lv, (size_t)n_ctx * kv * 2), tu_vk_upload(d, pk, pool_rows(&pl) * kv * 2),
                          tu_vk_upload(d, pv, pool_rows(&pl) * kv * 2), tu_vk_upload(d, &p, 4),
                          tu_vk_upload(d, pl.tab, (size_t)h->stride * 4)};
        size_t n_part = (size_t)h->n_head * sp * (h->hd + 2);
        uint16_t *want = run_decode(d, k0, km, g, gm, 1, b[0], b[1], b[2], b[5], NULL, qn, n_part, t);
        uint16_t *got = run_decode(d, k1, km, g, gm, 1, b[0], b[3], b[4], b[5], b[6], qn, n_part, t);
        for (uint32_t i = 0; i < qn; i++)
            cr_assert_eq(got[i], want[i], "decode heads %u/%u hd %u pages of %u %s pos %u: [%u] %04x != %04x",
                         h->n_head, h->n_head_kv, h->hd, h->rows, tu_dname(t), p, i, got[i], want[i]);
        release_all(d, b, sizeof b / sizeof b[0]);
        free(lc), free(lv), free(pk), free(pv), free(q), free(want), free(got), free(pl.tab);
        ir_kernel_destroy(k0), ir_kernel_destroy(k1), ir_kernel_destroy(km);
    }
}

Test(kernels_paged, decode_equals_the_unpaged_kernel, .timeout = 300) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(61);
    for (size_t i = 0; i < sizeof decode_shapes / sizeof decode_shapes[0]; i++) decode_one(d, &decode_shapes[i], dtypes[i % 2]);
    d->ops->destroy(d);
}

/* A step of B tokens of 3 sequences (one twice, one past its context, one past the pool)
 * against the unpaged pool of 3 equal caches. */
static void decode_step(rt_device *d, const heads *h, ir_scalar t) {
    enum { N_SEQ = 3, B = 6 };
    kiln_err err = {0};
    uint32_t kv = h->n_head_kv * h->hd, qn = h->n_head * h->hd, q_stride = qn + 8, n_ctx = h->rows * h->stride;
    const uint32_t last[N_SEQ] = {n_ctx - 1, n_ctx / 3, 7};
    const uint32_t tokpos[2 * B] = {7, 2, n_ctx - 1, 0, n_ctx / 3, 1, n_ctx, 2, 5, N_SEQ, 3, 1};
    uint32_t len[N_SEQ] = {last[0] + 1, last[1] + 1, last[2] + 1}, g[2], g2[2], gm, sp = 3;
    pool pl = pool_make(h->rows, h->stride, N_SEQ, len, 2);
    ir_kernel *k0 = kn_attn_decode_batch(&d->caps, h->n_head, h->n_head_kv, h->hd, n_ctx, sp, N_SEQ, B, q_stride, t, g,
                                         &err);
    ir_kernel *k1 = kn_attn_decode_batch_paged(&d->caps, h->n_head, h->n_head_kv, h->hd, &pl.pg, sp, N_SEQ, B,
                                               q_stride, t, g2, &err);
    ir_kernel *km = kn_attn_merge_batch(&d->caps, h->n_head, h->hd, n_ctx, sp, N_SEQ, B, t, &gm, &err);
    cr_assert(k0 && k1 && km, "%s", err.msg);
    cr_assert(g[0] == g2[0] && g[1] == g2[1]);
    uint16_t *lc = logical_cache(t, N_SEQ, n_ctx, kv, last), *lv = logical_cache(t, N_SEQ, n_ctx, kv, last);
    uint16_t *pk = scatter(&pl, lc, kv, t), *pv = scatter(&pl, lv, kv, t);
    uint16_t *q = tu_rand16(t, (size_t)B * q_stride, -4, 4, NULL);
    size_t nl = (size_t)N_SEQ * n_ctx * kv * 2, np = pool_rows(&pl) * kv * 2;
    rt_buffer *b[] = {tu_vk_upload(d, q, (size_t)B * q_stride * 2), tu_vk_upload(d, lc, nl), tu_vk_upload(d, lv, nl),
                      tu_vk_upload(d, pk, np), tu_vk_upload(d, pv, np), tu_vk_upload(d, tokpos, sizeof tokpos),
                      tu_vk_upload(d, pl.tab, (size_t)N_SEQ * h->stride * 4)};
    size_t n_part = (size_t)B * h->n_head * sp * (h->hd + 2), n_out = (size_t)B * qn;
    uint16_t *want = run_decode(d, k0, km, g, gm, B, b[0], b[1], b[2], b[5], NULL, n_out, n_part, t);
    uint16_t *got = run_decode(d, k1, km, g, gm, B, b[0], b[3], b[4], b[5], b[6], n_out, n_part, t);
    for (size_t i = 0; i < n_out; i++)
        cr_assert_eq(got[i], want[i], "step heads %u/%u hd %u pages of %u: token %zu [%zu] %04x != %04x", h->n_head,
                     h->n_head_kv, h->hd, h->rows, i / qn, i % qn, got[i], want[i]);
    release_all(d, b, sizeof b / sizeof b[0]);
    free(lc), free(lv), free(pk), free(pv), free(q), free(want), free(got), free(pl.tab);
    ir_kernel_destroy(k0), ir_kernel_destroy(k1), ir_kernel_destroy(km);
}

Test(kernels_paged, decode_step_equals_the_unpaged_pool, .timeout = 300) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(62);
    for (size_t i = 0; i < sizeof decode_shapes / sizeof decode_shapes[0]; i++) decode_step(d, &decode_shapes[i], dtypes[i % 2]);
    d->ops->destroy(d);
}

/* ---- prefill attention ------------------------------------------------------------------------ */

/* Blocks (pos0, n) of one sequence whose caches hold positions up to pos0 + n - 1; q rows of
 * a fused qkv row (q_stride wider than the heads). */
static void prefill_one(rt_device *d, const heads *h, uint32_t n_max, ir_scalar t) {
    kiln_err err = {0};
    uint32_t kv = h->n_head_kv * h->hd, qn = h->n_head * h->hd, q_stride = qn + 2 * kv, n_ctx = h->rows * h->stride;
    const uint32_t blocks[][2] = {{0, n_max < 37 ? n_max : 37}, {37, n_max}, {n_ctx - 5, 5}, {n_ctx - 3, n_max}};
    uint32_t g[2], g2[2];
    for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
        uint32_t pos0 = blocks[bi][0], n = blocks[bi][1], last = pos0 + n - 1 < n_ctx ? pos0 + n - 1 : n_ctx - 1;
        uint32_t len = last + 1, info[2] = {pos0, n};
        pool pl = pool_make(h->rows, h->stride, 1, &len, 4);
        ir_kernel *k0 = kn_attn_prefill(&d->caps, h->n_head, h->n_head_kv, h->hd, q_stride, n_ctx, n_max, t, g, &err);
        ir_kernel *k1 = kn_attn_prefill_paged(&d->caps, h->n_head, h->n_head_kv, h->hd, q_stride, &pl.pg, n_max, t,
                                              g2, &err);
        cr_assert(k0 && k1, "%s", err.msg);
        cr_assert(g[0] == g2[0] && g[1] == g2[1]);
        uint16_t *lc = logical_cache(t, 1, n_ctx, kv, &last), *lv = logical_cache(t, 1, n_ctx, kv, &last);
        uint16_t *pk = scatter(&pl, lc, kv, t), *pv = scatter(&pl, lv, kv, t);
        uint16_t *q = tu_rand16(t, (size_t)n_max * q_stride, -4, 4, NULL);
        size_t nl = (size_t)n_ctx * kv * 2, np = pool_rows(&pl) * kv * 2, n_out = (size_t)n_max * qn;
        rt_buffer *b[] = {tu_vk_upload(d, q, (size_t)n_max * q_stride * 2), tu_vk_upload(d, lc, nl),
                          tu_vk_upload(d, lv, nl), tu_vk_upload(d, pk, np), tu_vk_upload(d, pv, np),
                          tu_vk_upload(d, info, 8), tu_vk_upload(d, pl.tab, (size_t)h->stride * 4),
                          tu_vk_poisoned16(d, t, n_out, GUARD), tu_vk_poisoned16(d, t, n_out, GUARD)};
        rt_arg a0[5] = {{b[0], 0}, {b[1], 0}, {b[2], 0}, {b[7], 0}, {b[5], 0}};
        rt_arg a1[6] = {{b[0], 0}, {b[3], 0}, {b[4], 0}, {b[8], 0}, {b[5], 0}, {b[6], 0}};
        tu_vk_launch(d, k0, g[0], g[1], a0, 5);
        tu_vk_launch(d, k1, g[0], g[1], a1, 6);
        uint16_t *want = tu_vk_fetch16(d, b[7], t, n_out, GUARD, "unpaged out");
        uint16_t *got = tu_vk_fetch16(d, b[8], t, n_out, GUARD, "paged out");
        for (size_t i = 0; i < n_out; i++)
            cr_assert_eq(got[i], want[i], "prefill heads %u/%u hd %u pages of %u n_max %u block %u+%u: row %zu [%zu]",
                         h->n_head, h->n_head_kv, h->hd, h->rows, n_max, pos0, n, i / qn, i % qn);
        release_all(d, b, sizeof b / sizeof b[0]);
        free(lc), free(lv), free(pk), free(pv), free(q), free(want), free(got), free(pl.tab);
        ir_kernel_destroy(k0), ir_kernel_destroy(k1);
    }
}

Test(kernels_paged, prefill_equals_the_unpaged_kernel, .timeout = 300) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(63);
    for (size_t i = 0; i < sizeof decode_shapes / sizeof decode_shapes[0]; i++)
        prefill_one(d, &decode_shapes[i], i % 2 ? 64 : 100, dtypes[i % 2]);
    d->ops->destroy(d);
}

/* ---- the cache stores (kn_qk_prep) ------------------------------------------------------------ */

static const kn_rope_opts rope64 = {64, true, 1e6f, 1.0f, false};

/* kn_qk_prep's arguments: qkv, kcache, vcache, info or tokpos, q_norm, k_norm[, pages] */
static void run_prep(rt_device *d, ir_kernel *k, uint32_t gx, uint32_t gy, rt_buffer *x, rt_buffer *kc, rt_buffer *vc,
                     rt_buffer *info, rt_buffer *w, rt_buffer *tab) {
    rt_arg a[7] = {{x, 0}, {kc, 0}, {vc, 0}, {info, 0}, {w, 0}, {w, 0}, {tab, 0}};
    tu_vk_launch(d, k, gx, gy, a, tab ? 7 : 6);
}

/* A block of one sequence (batch 0) or a step's tokens (tokpos, B of them): paged stores
 * against the unpaged kernel's rows, a token without a page leaving everything as it was. */
static void prep_case(rt_device *d, ir_scalar t, uint32_t rows, bool step) {
    enum { NH = 4, NKV = 2, HD = 64, STRIDE = 7, N_SEQ = 3, B = 6 };
    kiln_err err = {0};
    uint32_t kv = NKV * HD, row = (NH + 2 * NKV) * HD, n_ctx = rows * STRIDE;
    /* one sequence: tokens at 3..3+B-1, its pages up to position 5 only (tokens 3.. have none);
     * a step: as decode_step's tokens */
    uint32_t len1 = 6, lens[N_SEQ] = {n_ctx, n_ctx / 2, 8};
    const uint32_t tokpos[2 * B] = {7, 2, n_ctx - 1, 0, n_ctx / 2 - 1, 1, n_ctx, 2, 5, N_SEQ, 3, 1};
    uint32_t info[2] = {3, B}, n_seq = step ? N_SEQ : 1;
    pool pl = pool_make(rows, STRIDE, n_seq, step ? lens : &len1, 2);
    ir_kernel *k0 = step ? kn_qk_prep_batch(&d->caps, NH, NKV, HD, &rope64, true, 1e-6f, n_ctx, N_SEQ, t, &err)
                         : kn_qk_prep(&d->caps, NH, NKV, HD, &rope64, true, 1e-6f, n_ctx, t, &err);
    ir_kernel *k1 = step ? kn_qk_prep_batch_paged(&d->caps, NH, NKV, HD, &rope64, true, 1e-6f, &pl.pg, N_SEQ, t, &err)
                         : kn_qk_prep_paged(&d->caps, NH, NKV, HD, &rope64, true, 1e-6f, &pl.pg, t, &err);
    cr_assert(k0 && k1, "%s", err.msg);
    uint16_t *x = tu_rand16(t, (size_t)B * row, -3, 3, NULL), *w = tu_rand16(t, HD, 0.5f, 1.5f, NULL);
    size_t nl = (size_t)n_seq * n_ctx * kv, np = pool_rows(&pl) * kv;
    rt_buffer *b[] = {tu_vk_upload(d, x, (size_t)B * row * 2), tu_vk_upload(d, x, (size_t)B * row * 2),
                      tu_vk_poisoned16(d, t, nl, GUARD),       tu_vk_poisoned16(d, t, nl, GUARD),
                      tu_vk_poisoned16(d, t, np, GUARD),       tu_vk_poisoned16(d, t, np, GUARD),
                      step ? tu_vk_upload(d, tokpos, sizeof tokpos) : tu_vk_upload(d, info, 8),
                      tu_vk_upload(d, w, HD * 2),              tu_vk_upload(d, pl.tab, (size_t)n_seq * STRIDE * 4)};
    uint32_t gx = kn_qk_prep_groups(&d->caps, NH, NKV, HD, 64, B);
    run_prep(d, k0, gx, B, b[0], b[2], b[3], b[6], b[7], NULL);
    run_prep(d, k1, gx, B, b[1], b[4], b[5], b[6], b[7], b[8]);
    uint16_t *x0 = tu_vk_fetch16(d, b[0], t, (size_t)B * row, 0, "qkv"), *x1 = tu_vk_fetch16(d, b[1], t, (size_t)B * row, 0, "qkv");
    uint16_t *lk = tu_vk_fetch16(d, b[2], t, nl, GUARD, "k"), *lv = tu_vk_fetch16(d, b[3], t, nl, GUARD, "v");
    uint16_t *pk = tu_vk_fetch16(d, b[4], t, np, GUARD, "paged k"), *pv = tu_vk_fetch16(d, b[5], t, np, GUARD, "paged v");
    for (uint32_t tk = 0; tk < B; tk++) {
        uint32_t s = step ? tokpos[2 * tk + 1] : 0, q = step ? tokpos[2 * tk] : info[0] + tk;
        bool live = s < n_seq && q < n_ctx;
        size_t r = live ? row_of(&pl, s, q) : SIZE_MAX;
        const uint16_t *want_q = r != SIZE_MAX ? x0 + (size_t)tk * row : x + (size_t)tk * row;
        cr_assert_arr_eq(x1 + (size_t)tk * row, want_q, (size_t)row * 2, "%s pages of %u token %u: q row",
                         step ? "step" : "block", rows, tk);
        if (r == SIZE_MAX) continue;
        size_t l = ((size_t)s * n_ctx + q) * kv;
        cr_assert_arr_eq(pk + r * kv, lk + l, (size_t)kv * 2, "token %u: k row", tk);
        cr_assert_arr_eq(pv + r * kv, lv + l, (size_t)kv * 2, "token %u: v row", tk);
        for (size_t i = 0; i < kv; i++) pk[r * kv + i] = pv[r * kv + i] = tu_nan16(t); /* checked */
    }
    for (size_t i = 0; i < np; i++) /* nothing else in the pool written */
        cr_assert(pk[i] == tu_nan16(t) && pv[i] == tu_nan16(t), "pages of %u: pool row %zu written", rows, i / kv);
    release_all(d, b, sizeof b / sizeof b[0]);
    free(x), free(w), free(x0), free(x1), free(lk), free(lv), free(pk), free(pv), free(pl.tab);
    ir_kernel_destroy(k0), ir_kernel_destroy(k1);
}

Test(kernels_paged, cache_stores_land_in_their_pages, .timeout = 300) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(64);
    const uint32_t rows[] = {1, 4, 16};
    for (size_t i = 0; i < 3; i++) {
        prep_case(d, dtypes[i % 2], rows[i], false);
        prep_case(d, dtypes[(i + 1) % 2], rows[i], true);
    }
    d->ops->destroy(d);
}

/* ---- variants and refusals, without a device ---------------------------------------------------- */

Test(kernels_paged, variants_build_assemble_and_validate) {
    kiln_err err = {0};
    kn_pages pg = {64, 700, 640};
    uint32_t g[2];
    rt_caps caps[3];
    caps[0] = tu_cuda_caps(90);
    tu_caps_min(&caps[1]), tu_caps_h200(&caps[2]);
    for (int ci = 0; ci < 3; ci++)
        for (int ti = 0; ti < 2; ti++) {
            const rt_caps *c = &caps[ci];
            ir_scalar t = dtypes[ti];
            ir_kernel *k[5] = {
                kn_attn_decode_paged(c, 32, 8, 128, &pg, 8, t, g, &err),
                kn_attn_decode_batch_paged(c, 32, 8, 128, &pg, 4, 8, 16, 6144, t, g, &err),
                kn_attn_prefill_paged(c, 32, 8, 128, 6144, &pg, 512, t, g, &err),
                kn_qk_prep_paged(c, 32, 8, 128, &(kn_rope_opts){128, true, 1e6f, 1.0f, false}, true, 1e-6f, &pg, t, &err),
                kn_qk_prep_batch_paged(c, 32, 8, 128, &(kn_rope_opts){128, true, 1e6f, 1.0f, false}, true, 1e-6f, &pg, 8,
                                       t, &err)};
            for (int i = 0; i < 5; i++) {
                cr_assert_not_null(k[i], "caps %d kernel %d: %s", ci, i, err.msg);
                char *text = ir_print(k[i]);
                cr_assert(strstr(text, "pages"), "kernel %d has no page table", i);
                if (ci == 0 && i == 2) cr_assert(strstr(text, "frag.mma"), "the 8B's paged prefill is not on fragments");
                free(text);
                if (ci == 0) {
                    tu_ptx_assembles(k[i], c, "paged");
                    ir_kernel_destroy(k[i]);
                } else {
                    tu_emit_ok(k[i], c, err.msg, "paged");
                }
            }
        }
    /* a server's step: 32 slots sharing 131072 positions of qwen3-0.6b (16 heads of 128): the
     * merge reads only the partials, so the pool's size does not limit it */
    pg = (kn_pages){64, 2048, 2048};
    uint32_t gm;
    for (int ci = 0; ci < 2; ci++) {
        ir_kernel *km = kn_attn_merge_batch(&caps[ci], 16, 128, 131072, 4, 32, 8, IR_BF16, &gm, &err);
        cr_assert_not_null(km, "the step's merge over 32 x 131072 positions: %s", err.msg);
        ir_kernel_destroy(km);
        ir_kernel *kd = kn_attn_decode_batch_paged(&caps[ci], 16, 8, 128, &pg, 4, 32, 8, 4096, IR_BF16, g, &err);
        cr_assert_not_null(kd, "the step's paged decode: %s", err.msg);
        ir_kernel_destroy(kd);
    }
    /* refused: rows not a power of two, no pages, no table, the pool past u32 indices */
    const kn_pages bad[] = {{24, 10, 10}, {16, 0, 10}, {16, 10, 0}, {4096, 1u << 20, 4}};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_null(kn_attn_decode_paged(&caps[1], 8, 4, 64, &bad[i], 2, IR_BF16, g, &err), "bad paging %zu", i);
        cr_assert(strstr(err.msg, "paging"), "%s", err.msg);
        cr_assert_null(kn_qk_prep_paged(&caps[1], 8, 4, 64, &rope64, true, 1e-6f, &bad[i], IR_BF16, &err));
        cr_assert_null(kn_attn_prefill_paged(&caps[1], 8, 4, 64, 1024, &bad[i], 64, IR_BF16, g, &err));
    }
    cr_assert_null(kn_attn_decode_batch_paged(&caps[1], 8, 4, 64, NULL, 2, 2, 4, 512, IR_BF16, g, &err));
}
