/* kernels/attn_prefill.c on the Vulkan device (lavapipe in CI): kn_attn_prefill against
 * a C reference that follows the oracle's `attend` (oracle/forward.c) step for step in
 * f32, per token t < n at position pos0 + t, with everything the kernel must not touch
 * or read poisoned: q rows at t >= n and the rest of a fused qkv row (NaN), cache rows
 * past the block's last position (NaN: a read past the causal limit makes NaN), and the
 * output (NaN) with a guard region after its n_max rows; rows of tokens at t >= n or at
 * positions >= n_ctx must stay poisoned. Also run with caps overrides that change the
 * generated code (smaller workgroups and workgroup memory, no subgroup shuffles, no f16
 * arithmetic), and the variants for spec-minimum and H200 caps built and validated.
 * Skipped by name when no Vulkan device exists.
 *
 * Tolerance: as tests/test_kernels_attn.c (the decode kernel's), per output d of a head,
 * W_d = sum_p w_p |v_p[d]|: scores differ only in summation order (delta), so weights
 * move by exp(+-2 delta); the device's exp (3 + 2|x| ulp) on e_p and on the rescales
 * exp(m_i - m_i+1) of later tiles, at most n of them: eps_p <= (4 + 3n + 3 (M - s_p))
 * 2^-23; the sums in another order, plus the kernel's rescale of the running sum once
 * per tile: (4n + 8) 2^-24 W_d; and one 16-bit ulp for the store. */
#include "backend-spirv/spv_emit.h"
#include "backend-spirv/vk_device.h"
#include "backend-spirv/vk_probe.h"
#include "base/error.h"
#include "gguf/half.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "tests/util/testutil_ptx.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64

static uint32_t force_units; /* nonzero: the caps' compute units, for short_rows's shapes */
static bool expect_coop;      /* the cooperative-matrix variant where the shape allows it */
static bool grow_keys;        /* keys scaled up along the positions: scores that keep growing */


static const ir_scalar dtypes[2] = {IR_BF16, IR_F16};


/* A kernel's shape; its blocks (pos0, n) run one after the other on the same buffers. */
typedef struct shape {
    uint32_t n_head, n_head_kv, hd, q_stride, n_ctx, n_max;
} shape;

typedef struct blk {
    uint32_t pos0, n;
} blk;

/* One kernel, several blocks. Random q rows (scaled so softmax is far from uniform) and
 * caches, refreshed per block with the poison laid over what must not be read. */
static void prefill_case(rt_device *d, const shape *s, ir_scalar t, const blk *blocks, size_t n_blocks,
                         const char *var) {
    kiln_err err = {0};
    char what[256];
    uint32_t groups[2] = {0, 0}, kv_dim = s->n_head_kv * s->hd, qn = s->n_head * s->hd;
    ir_kernel *k = kn_attn_prefill(&d->caps, s->n_head, s->n_head_kv, s->hd, s->q_stride, s->n_ctx, s->n_max, t,
                                   groups, &err);
    cr_assert_not_null(k, "%s", err.msg);
    cr_assert(groups[0] > 0 && groups[1] > 0);
    /* tiles of 4 rows: at most 4 tokens a block, so 64 tokens take 8 workgroups along y or more */
    if (expect_coop && s->hd % 16 == 0 && s->hd <= 128 && s->q_stride % 8 == 0) {
        char *text = ir_print(k);
        cr_assert(strstr(text, "frag.mma") && !strstr(text, "frag.elems"), "not the cooperative variant");
        free(text);
    }
    if (force_units >= 4096 && s->n_max <= 64) cr_assert_geq(groups[1], 8, "short block: %u groups along y", groups[1]);
    rt_kernel *ck = tu_vk_compile(d, k);
    size_t nq = (size_t)s->n_max * s->q_stride, nc = (size_t)s->n_ctx * kv_dim, no = (size_t)s->n_max * qn;
    uint16_t *q = malloc(nq * 2), *kc = malloc(nc * 2), *vc = malloc(nc * 2), *o = malloc((no + GUARD) * 2);
    uint16_t *poison = malloc((no + GUARD) * 2);
    float *qf = malloc(nq * 4), *kf = malloc(nc * 4), *vf = malloc(nc * 4), *want = malloc((size_t)qn * 4);
    double *tol = malloc((size_t)qn * sizeof *tol);
    cr_assert(q && kc && vc && o && poison && qf && kf && vf && want && tol);
    for (size_t i = 0; i < no + GUARD; i++) poison[i] = tu_nan16(t);
    memset(q, 0, nq * 2), memset(kc, 0, nc * 2); /* filled per block */
    rt_buffer *bq = tu_vk_upload(d, q, nq * 2), *bk = tu_vk_upload(d, kc, nc * 2), *bv = tu_vk_upload(d, kc, nc * 2);
    rt_buffer *bo = tu_vk_upload(d, poison, (no + GUARD) * 2), *bi = tu_vk_upload(d, &blocks[0], 8);
    for (size_t bi_ = 0; bi_ < n_blocks; bi_++) {
        uint32_t pos0 = blocks[bi_].pos0, n = blocks[bi_].n, last = pos0 + n - 1;
        snprintf(what, sizeof what, "prefill heads=%u/%u hd=%u q_stride=%u n_ctx=%u n_max=%u %s pos0=%u n=%u caps=%s",
                 s->n_head, s->n_head_kv, s->hd, s->q_stride, s->n_ctx, s->n_max, tu_dname(t), pos0, n,
                 var ? var : "device");
        /* q: rows t < n random in their heads' columns; the rest of each row (the fused
         * k/v part) and rows t >= n NaN */
        for (size_t i = 0; i < nq; i++) {
            size_t row = i / s->q_stride, col = i % s->q_stride;
            bool live = row < n && col < qn;
            q[i] = live ? tu_to16(t, tu_urand(-4, 4)) : tu_nan16(t);
            qf[i] = tu_from16(t, q[i]);
        }
        /* caches: rows up to the block's last position random, after it NaN */
        for (size_t i = 0; i < nc; i++) {
            bool live = i / kv_dim <= last;
            double grow = grow_keys ? 1 + (double)(i / kv_dim) / 16 : 1;
            kc[i] = live ? tu_to16(t, tu_urand(-1, 1) * grow) : tu_nan16(t);
            vc[i] = live ? tu_to16(t, tu_urand(-2, 2)) : tu_nan16(t);
            kf[i] = tu_from16(t, kc[i]), vf[i] = tu_from16(t, vc[i]);
        }
        uint32_t info[2] = {pos0, n};
        tu_vk_reupload(d, bq, q, nq * 2), tu_vk_reupload(d, bk, kc, nc * 2), tu_vk_reupload(d, bv, vc, nc * 2);
        tu_vk_reupload(d, bo, poison, (no + GUARD) * 2), tu_vk_reupload(d, bi, info, 8);
        rt_arg args[5] = {{bq, 0}, {bk, 0}, {bv, 0}, {bo, 0}, {bi, 0}};
        tu_vk_run(d, ck, groups[0], groups[1], args, 5);
        tu_vk_download(d, bo, o, (no + GUARD) * 2);
        for (size_t i = no; i < no + GUARD; i++)
            cr_assert_eq(o[i], tu_nan16(t), "%s: wrote past the end at %zu", what, i);
        for (uint32_t tk = 0; tk < s->n_max; tk++) {
            const uint16_t *ot = o + (size_t)tk * qn;
            uint32_t p = pos0 + tk;
            if (tk >= n || p >= s->n_ctx || p < pos0) { /* no output for this row */
                for (uint32_t i = 0; i < qn; i++)
                    cr_assert_eq(ot[i], tu_nan16(t), "%s: wrote row %u [%u]", what, tk, i);
                continue;
            }
            tu_attend_ref(qf + (size_t)tk * s->q_stride, kf, vf, s->n_head, s->n_head_kv, s->hd, p, want, tol);
            for (uint32_t i = 0; i < qn; i++) {
                double g = tu_from16(t, ot[i]), w = want[i];
                cr_assert(!isnan(g), "%s: row %u [%u] NaN (not written, or read past the causal limit)", what, tk, i);
                double tl = tol[i] + tu_ulp16(t, fmax(fabs(g), fabs(w)));
                cr_assert(fabs(g - w) <= tl, "%s: row %u [%u] %.9g != %.9g (tol %.3g)", what, tk, i, g, w, tl);
            }
        }
    }
    d->ops->release(d, bq), d->ops->release(d, bk), d->ops->release(d, bv), d->ops->release(d, bo);
    d->ops->release(d, bi);
    d->ops->release_kernel(d, ck);
    free(q), free(kc), free(vc), free(o), free(poison), free(qf), free(kf), free(vf), free(want), free(tol);
    ir_kernel_destroy(k);
}

static const uint32_t heads[][2] = {{1, 1}, {4, 2}, {16, 8}, {6, 1}};

/* Every head layout at head_dim 64 / 128 / 40, n_max 64 and 256, blocks at pos0 0, 5 and
 * 300 of 1 .. 200 tokens, the n_ctx odd; a cache that ends inside the block (later rows
 * stay poisoned), a q row longer than the heads (the q part of a fused qkv row) and an odd
 * q row stride. full = false (the caps variants) keeps the cases that change their code paths. */
static void prefill_all(const char *var, uint64_t sd, bool full) {
    rt_device *d = tu_vk_open_or_skip(var);
    if (force_units) d->caps.compute_units = force_units;
    tu_seed(sd);
    const uint32_t hds[] = {64, 128, 40};
    for (size_t gi = 0; gi < sizeof heads / sizeof heads[0]; gi++)
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
            uint32_t nh = heads[gi][0], nkv = heads[gi][1], hd = hds[hi], qd = nh * hd;
            ir_scalar t = dtypes[full ? (gi + hi) % 2 : gi % 2];
            /* the caps variants: one head_dim per layout, both dtypes */
            if (!full && (gi == 0 || hi != gi - 1)) continue;
            /* n_max 64: blocks within the cache; a fused row (q, then k and v) */
            shape s64 = {nh, nkv, hd, qd + 2 * nkv * hd, 64 + 5 + 14, 64};
            const blk b64[] = {{0, 1}, {5, 7}, {0, 64}, {5, 64}};
            prefill_case(d, &s64, t, b64, full ? 4 : 2, var);
            if (!full && gi != 2) continue;
            /* n_max 256: the cache ends at 431, inside the first block (t >= 131 past it);
             * the last two blocks lie entirely past it (the last wraps past 2^32) */
            shape s256 = {nh, nkv, hd, qd, 431, 256};
            const blk big[] = {{300, 200}, {300, 7}, {431, 3}, {0xfffffff0u, 20}}, more[] = {{0, 200}, {5, 64}};
            prefill_case(d, &s256, t, big, full ? 4 : 1, var);
            /* the long ones are slow on lavapipe: not where the heads are many */
            if (full && nh < 16) prefill_case(d, &s256, t, more, 2, var);
        }
    /* an odd q row (scalar loads, f32 tiles for bf16 too) */
    shape odd = {4, 2, 64, 4 * 64 + 3, 83, 64};
    const blk bodd[] = {{5, 64}, {0, 7}};
    prefill_case(d, &odd, IR_BF16, bodd, full ? 2 : 1, var);
    d->ops->destroy(d);
}

Test(kernels_attn_prefill, matches_oracle_attend, .timeout = 600) { prefill_all(NULL, 31, true); }

/* 64 invocations: bigger register tiles per invocation */
/* A short block's tiles of fewer rows (kn_attn_prefill's short_rows: down to 4 where the
 * grid is under the compute units, as it is for every shape here with 4096 of them). */
Test(kernels_attn_prefill, short_block_small_tiles, .timeout = 600) {
    force_units = 4096;
    prefill_all(NULL, 37, false);
}

Test(kernels_attn_prefill, small_workgroup, .timeout = 600) { prefill_all("workgroup=64", 32, false); }

/* 16 KiB of workgroup memory: fewer rows and keys per tile */
Test(kernels_attn_prefill, small_shared_memory, .timeout = 600) { prefill_all("shared=16384", 33, false); }

/* no shuffles: one invocation per row runs the softmax; no f16 arithmetic: f16 tiles in
 * f32 instead of packed pairs */
Test(kernels_attn_prefill, no_subgroup_ops_no_f16, .timeout = 600) {
    prefill_all("no-subgroup-shuffle,no-subgroup-arith,no-f16", 34, false);
}

/* The cooperative-matrix variant (attn_prefill_coop.c) where the device has 16x16x16
 * fragments (a GPU's Vulkan; lavapipe has none: skipped by name), on every shape with the
 * grid threshold lifted; then keys whose scores grow along the positions, so that rows'
 * references pass their headroom and O is rescaled between tiles. */
static void coop_or_skip(void) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    bool ok = false;
    for (size_t ti = 0; ti < 2; ti++) ok |= kn_attn_prefill_coop_ok(&d->caps, dtypes[ti], 16, 8, 128, 4096);
    d->ops->destroy(d);
    if (!ok) cr_skip_test("no 16x16x16 cooperative matrices of 16-bit types on this device");
    force_units = 1, expect_coop = true;
    setenv("KILN_ATTN_COOP", "1", 1); /* opt-in until it is right on a device */
}

Test(kernels_attn_prefill, cooperative_matrices, .timeout = 600) {
    coop_or_skip();
    prefill_all(NULL, 41, true);
}

Test(kernels_attn_prefill, cooperative_matrices_growing_scores, .timeout = 600) {
    coop_or_skip();
    grow_keys = true;
    prefill_all(NULL, 43, true);
}

/* ---- variants built for other devices, and refusals ----------------------------------------- */

Test(kernels_attn_prefill, variants_build_for_min_and_h200_caps) {
    rt_caps cs[2];
    tu_caps_min(&cs[0]);
    tu_caps_h200(&cs[1]);
    kiln_err err = {0};
    uint32_t g[2];
    for (int ci = 0; ci < 2; ci++)
        for (size_t ti = 0; ti < 2; ti++) {
            ir_scalar t = dtypes[ti];
            /* qwen3-0.6b (q part of its fused qkv row) and qwen3-8b, 4096 positions, 512 tokens */
            tu_emit_ok(kn_attn_prefill(&cs[ci], 16, 8, 128, 4096, 4096, 512, t, g, &err), &cs[ci], err.msg,
                       "prefill 0.6b");
            tu_emit_ok(kn_attn_prefill(&cs[ci], 32, 8, 128, 4096, 4096, 512, t, g, &err), &cs[ci], err.msg,
                       "prefill 8b");
            tu_emit_ok(kn_attn_prefill(&cs[ci], 16, 8, 128, 2048, 4096, 512, t, g, &err), &cs[ci], err.msg,
                       "prefill 0.6b");
            tu_emit_ok(kn_attn_prefill(&cs[ci], 6, 1, 40, 241, 1031, 100, t, g, &err), &cs[ci], err.msg,
                       "prefill odd");
            tu_emit_ok(kn_attn_prefill(&cs[ci], 2, 2, 256, 512, 100, 64, t, g, &err), &cs[ci], err.msg,
                       "prefill 256");
            tu_emit_ok(kn_attn_prefill(&cs[ci], 3, 3, 5, 15, 7, 3, t, g, &err), &cs[ci], err.msg, "prefill tiny");
        }
}

/* The H200's Vulkan caps (16x16x16 KHR fragments, 48 KiB) give the cooperative variant
 * where the grid fills half the device and head_dim <= 128, the SIMT kernel otherwise (and
 * without KILN_ATTN_COOP=1); each validates (with $KILN_SPIRV_VAL's spirv-val where set). */
Test(kernels_attn_prefill, cooperative_variant_on_h200_vulkan_caps) {
    setenv("KILN_ATTN_COOP", "1", 1); /* opt-in until it is right on a device */
    rt_caps c;
    tu_caps_h200(&c);
    c.compute_units = 132;
    kiln_err err = {0};
    uint32_t g[2];
    const struct {
        uint32_t nh, nkv, hd, q_stride, n_ctx, n_max;
        bool coop;
    } cases[] = {{32, 8, 128, 6144, 4096, 512, true},  {16, 8, 128, 4096, 4096, 512, true},
                 {16, 8, 64, 2048, 1031, 2048, true},  {12, 3, 80, 1440, 999, 777, true},
                 {16, 8, 128, 4096, 4096, 64, false}, {8, 2, 256, 4096, 4096, 2048, false},
                 {16, 8, 40, 960, 1031, 2048, false}};
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            ir_kernel *k = kn_attn_prefill(&c, cases[i].nh, cases[i].nkv, cases[i].hd, cases[i].q_stride,
                                           cases[i].n_ctx, cases[i].n_max, dtypes[ti], g, &err);
            cr_assert_not_null(k, "%s", err.msg);
            char *text = ir_print(k);
            bool coop = strstr(text, "frag.mma") != NULL;
            free(text);
            cr_assert_eq(coop, cases[i].coop, "case %zu %s: cooperative %d", i, tu_dname(dtypes[ti]), coop);
            if (coop) {
                uint32_t hpt = cases[i].nh / cases[i].nkv > 16 ? 16 : cases[i].nh / cases[i].nkv;
                cr_assert(g[0] == cases[i].nh / hpt && g[1] == (cases[i].n_max + 64 / hpt - 1) / (64 / hpt),
                          "case %zu: grid %u x %u", i, g[0], g[1]);
            }
            tu_emit_ok(k, &c, err.msg, "prefill on h200 vulkan caps");
        }
    kn_pages pg = {.rows = 256, .n_pages = 64, .stride = 16};
    ir_kernel *k = kn_attn_prefill_paged(&c, 32, 8, 128, 6144, &pg, 512, IR_BF16, g, &err);
    cr_assert_not_null(k, "%s", err.msg);
    char *text = ir_print(k);
    cr_assert(strstr(text, "frag.mma"), "paged: not the cooperative variant");
    free(text);
    tu_emit_ok(k, &c, err.msg, "paged prefill on h200 vulkan caps");
    unsetenv("KILN_ATTN_COOP");
    k = kn_attn_prefill(&c, 32, 8, 128, 6144, 4096, 512, IR_BF16, g, &err);
    cr_assert_not_null(k, "%s", err.msg);
    text = ir_print(k);
    cr_assert(!strstr(text, "frag.mma"), "without KILN_ATTN_COOP=1: cooperative");
    free(text);
    ir_kernel_destroy(k);
}

/* CUDA's caps (sm_80, sm_90) give the matrix-fragment variant at head_dim multiples of
 * 16 with 16-byte q rows, the SIMT kernel otherwise (and with fewer than 128 invocations);
 * each assembles. */
Test(kernels_attn_prefill, fragments_on_cuda_caps) {
    kiln_err err = {0};
    uint32_t g[2];
    for (uint32_t cc = 80; cc <= 90; cc += 10)
        for (size_t ti = 0; ti < 2; ti++) {
            rt_caps c = tu_cuda_caps(cc);
            ir_scalar t = dtypes[ti];
            ir_kernel *k = kn_attn_prefill(&c, 32, 8, 128, 6144, 4096, 512, t, g, &err);
            cr_assert_not_null(k, "%s", err.msg);
            char *text = ir_print(k);
            cr_assert(strstr(text, "frag.mma") && strstr(text, "async.copy"), "8b: not the fragment variant");
            free(text);
            /* 4 heads x 16 tokens a workgroup, blocks from the last */
            cr_assert(g[0] == 8 && g[1] == 32, "grid %u x %u", g[0], g[1]);
            tu_ptx_assembles(k, &c, "prefill 8b fragments");
            ir_kernel_destroy(k);
            k = kn_attn_prefill(&c, 6, 1, 64, 6 * 64 + 3 * 64, 1031, 100, t, g, &err);
            cr_assert(k && g[0] == 3 && g[1] == 4, "odd: grid %u x %u", g[0], g[1]);
            tu_ptx_assembles(k, &c, "prefill odd fragments");
            ir_kernel_destroy(k);
            /* on 132 SMs: a short block's 16 workgroups take the SIMT kernel, a full block's 128 not */
            rt_caps h = c;
            h.compute_units = 132;
            for (uint32_t nm = 64; nm <= 512; nm *= 8) {
                k = kn_attn_prefill(&h, 16, 8, 128, 4096, 4096, nm, t, g, &err);
                cr_assert_not_null(k, "%s", err.msg);
                text = ir_print(k);
                cr_assert_eq(strstr(text, "frag.mma") != NULL, nm == 512, "n_max %u", nm);
                free(text);
                ir_kernel_destroy(k);
            }
            /* head_dim 40, an odd q row, 64 invocations: the SIMT kernel */
            const struct {
                uint32_t hd, q_stride;
                const char *caps;
            } simt[] = {{40, 40 * 6, NULL}, {64, 6 * 64 + 3, NULL}, {64, 6 * 64, "workgroup=64"}};
            for (size_t i = 0; i < 3; i++) {
                rt_caps ci = c;
                if (simt[i].caps) cr_assert_eq(rt_caps_override(&ci, simt[i].caps, &err), 0, "%s", err.msg);
                k = kn_attn_prefill(&ci, 6, 1, simt[i].hd, simt[i].q_stride, 1031, 100, t, g, &err);
                cr_assert_not_null(k, "%s", err.msg);
                text = ir_print(k);
                cr_assert(!strstr(text, "frag.mma"), "case %zu: fragments", i);
                free(text);
                ir_kernel_destroy(k);
            }
        }
}

Test(kernels_attn_prefill, bad_shapes_and_caps_are_refused) {
    rt_caps c, plain;
    rt_caps_default(&c, RT_VULKAN);
    c.storage16 = true;
    rt_caps_default(&plain, RT_VULKAN);
    kiln_err err = {0};
    uint32_t g[2];
    const char *pre = "kn_attn_prefill: ";
    cr_assert_null(kn_attn_prefill(&c, 6, 4, 64, 384, 16, 8, IR_BF16, g, &err)); /* 6 % 4 */
    cr_assert(strncmp(err.msg, pre, strlen(pre)) == 0 && strstr(err.msg, "bad shape"), "%s", err.msg);
    cr_assert_null(kn_attn_prefill(&c, 0, 1, 64, 64, 16, 8, IR_BF16, g, &err));
    cr_assert(strncmp(err.msg, pre, strlen(pre)) == 0, "%s", err.msg);
    cr_assert_null(kn_attn_prefill(&c, 4, 0, 64, 256, 16, 8, IR_BF16, g, &err));
    cr_assert(strncmp(err.msg, pre, strlen(pre)) == 0, "%s", err.msg);
    cr_assert_null(kn_attn_prefill(&c, 4, 4, 0, 256, 16, 8, IR_BF16, g, &err));
    cr_assert(strncmp(err.msg, pre, strlen(pre)) == 0, "%s", err.msg);
    cr_assert_null(kn_attn_prefill(&c, 4, 4, 64, 256, 0, 8, IR_BF16, g, &err));
    cr_assert(strncmp(err.msg, pre, strlen(pre)) == 0, "%s", err.msg);
    cr_assert_null(kn_attn_prefill(&c, 4, 4, 64, 256, 16, 0, IR_BF16, g, &err));
    cr_assert(strncmp(err.msg, pre, strlen(pre)) == 0, "%s", err.msg);
    /* q rows shorter than the heads */
    cr_assert_null(kn_attn_prefill(&c, 4, 4, 64, 255, 16, 8, IR_BF16, g, &err));
    cr_assert(strncmp(err.msg, pre, strlen(pre)) == 0 && strstr(err.msg, "q_stride"), "%s", err.msg);
    /* u32 indices: the caches, q and out */
    cr_assert_null(kn_attn_prefill(&c, 64, 64, 128, 8192, 1u << 20, 8, IR_BF16, g, &err));
    cr_assert(strncmp(err.msg, pre, strlen(pre)) == 0 && strstr(err.msg, "2^32"), "%s", err.msg);
    cr_assert_null(kn_attn_prefill(&c, 8, 8, 128, 1024, 16, 1u << 22, IR_BF16, g, &err));
    cr_assert(strncmp(err.msg, pre, strlen(pre)) == 0 && strstr(err.msg, "2^32"), "%s", err.msg);
    cr_assert_null(kn_attn_prefill(&c, 1, 1, 64, 64, 1u << 20, 1u << 26, IR_BF16, g, &err));
    cr_assert(strncmp(err.msg, pre, strlen(pre)) == 0, "%s", err.msg);
    /* a head too wide for the workgroup memory */
    rt_caps tiny = c;
    tiny.shared_bytes = 1024;
    cr_assert_null(kn_attn_prefill(&tiny, 4, 4, 128, 512, 16, 8, IR_BF16, g, &err));
    cr_assert(strncmp(err.msg, pre, strlen(pre)) == 0 && strstr(err.msg, "workgroup memory"), "%s", err.msg);
    /* dtype and caps */
    cr_assert_null(kn_attn_prefill(&c, 4, 4, 64, 256, 16, 8, IR_F32, g, &err));
    cr_assert(strstr(err.msg, "bf16 or f16"), "%s", err.msg);
    cr_assert_null(kn_attn_prefill(&plain, 4, 4, 64, 256, 16, 8, IR_BF16, g, &err));
    cr_assert(strstr(err.msg, "storage16"), "%s", err.msg);
    cr_assert_null(kn_attn_prefill(NULL, 4, 4, 64, 256, 16, 8, IR_BF16, g, &err));
}
