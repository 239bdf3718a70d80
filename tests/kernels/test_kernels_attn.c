/* kernels/attention.c on the Vulkan device (lavapipe in CI): kn_kv_store must write exactly
 * the row pos of each cache, bit for bit, and nothing else (whole caches and a guard after
 * them checked); kn_attn_decode against a C reference that follows the oracle's `attend`
 * (oracle/forward.c) step for step in f32, outputs poisoned with a guard region after them,
 * cache rows past pos poisoned (NaN) so a read past the last key shows. Skipped by name
 * when no Vulkan device exists.
 *
 * Tolerance of the attention (per output d of a head, W_d = sum_p w_p |v_p[d]| with w the
 * reference's softmax weights; |out_d| <= W_d):
 *  - scores: q_i * k_i is exact in f32 (two 16-bit values), so the two dot products
 *    differ only in summation order, each within (hd-1) 2^-24 sum|q_i k_i| of the exact
 *    sum, plus one rounding each for * scale: |ds_p| <= scale 2 hd 2^-24 sum|q k| +
 *    2^-23 |s_p| =: <= delta. Softmax is invariant to a common shift, so each weight moves
 *    by a factor within exp(+-2 delta): error <= 2 expm1(2 delta) W_d (numerator and sum).
 *  - exp: the device's exp is within (3 + 2|x|) ulp (Vulkan), the host's within 1 ulp. The
 *    kernel's e_p = exp(s_p - m_blk) times the rescales exp(m_i - m_i+1) of later blocks:
 *    the arguments' magnitudes add up to at most M - s_p (M the max score) and there are
 *    at most n blocks, so e_p carries eps_p <= (4 + 3n + 3 (M - s_p)) 2^-23 relative
 *    (with the subtraction's rounding). Both the weighted sum and the normaliser take it:
 *    error <= sum_p eps_p w_p |v_p[d]| + (sum_p eps_p w_p) W_d.
 *  - sums: l and the output are sums of n terms in another order (kernel: blocks, fma,
 *    then one divide; reference: e_p / sum per term, then in order): 2n 2^-24 each, plus
 *    a few roundings per term: (4n + 8) 2^-24 W_d.
 *  - the store rounds to the 16-bit type: one ulp at the result's magnitude (check16). */
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

/* ---- device plumbing (as tests/test_kernels.c) ------------------------------------------ */





/* ---- 16-bit values --------------------------------------------------------------------- */




static const ir_scalar dtypes[2] = {IR_BF16, IR_F16};

/* ---- kv_store ------------------------------------------------------------------------------ */

/* Caches start as random bit patterns (no NaN needed: every element is compared) plus a
 * guard; after the launch of n_tok tokens at pos0, rows pos0 + t < n_ctx hold token t's k / v
 * and every other element, the guard included, is unchanged. */
static void kv_store_case(rt_device *d, rt_kernel *ck, uint32_t gx, uint32_t kv_dim, uint32_t n_ctx, ir_scalar t,
                          uint32_t pos0, uint32_t n_tok) {
    size_t nc = (size_t)n_ctx * kv_dim + GUARD, nt = (size_t)n_tok * kv_dim;
    uint16_t *kc0 = malloc(nc * 2), *vc0 = malloc(nc * 2), *kk = malloc(nt * 2), *vv = malloc(nt * 2);
    uint16_t *kc = malloc(nc * 2), *vc = malloc(nc * 2);
    cr_assert(kc0 && vc0 && kk && vv && kc && vc);
    for (size_t i = 0; i < nc; i++) kc0[i] = (uint16_t)tu_rnd32(), vc0[i] = (uint16_t)tu_rnd32();
    for (size_t i = 0; i < nt; i++) kk[i] = (uint16_t)tu_rnd32(), vv[i] = (uint16_t)tu_rnd32();
    rt_buffer *bk = tu_vk_upload(d, kk, nt * 2), *bv = tu_vk_upload(d, vv, nt * 2);
    rt_buffer *bkc = tu_vk_upload(d, kc0, nc * 2), *bvc = tu_vk_upload(d, vc0, nc * 2), *bp = tu_vk_upload(d, &pos0, 4);
    rt_arg args[5] = {{bk, 0}, {bv, 0}, {bkc, 0}, {bvc, 0}, {bp, 0}};
    tu_vk_run(d, ck, gx, n_tok, args, 5);
    tu_vk_download(d, bkc, kc, nc * 2);
    tu_vk_download(d, bvc, vc, nc * 2);
    for (size_t i = 0; i < nc; i++) {
        size_t row = i / kv_dim, col = i % kv_dim;
        uint16_t wk = kc0[i], wv = vc0[i];
        /* the row's token: pos0 + tok == row, with pos0 + tok computed in u32 like the kernel */
        if (row < n_ctx)
            for (uint32_t tk = 0; tk < n_tok; tk++)
                if ((uint32_t)(pos0 + tk) == row && (uint32_t)(pos0 + tk) >= pos0)
                    wk = kk[(size_t)tk * kv_dim + col], wv = vv[(size_t)tk * kv_dim + col];
        cr_assert_eq(kc[i], wk, "kv_store kv_dim=%u n_ctx=%u %s pos=%u+%u: kcache[%zu] (row %zu) %#x != %#x", kv_dim,
                     n_ctx, tu_dname(t), pos0, n_tok, i, row, kc[i], wk);
        cr_assert_eq(vc[i], wv, "kv_store kv_dim=%u n_ctx=%u %s pos=%u+%u: vcache[%zu] (row %zu) %#x != %#x", kv_dim,
                     n_ctx, tu_dname(t), pos0, n_tok, i, row, vc[i], wv);
    }
    d->ops->release(d, bk), d->ops->release(d, bv), d->ops->release(d, bkc), d->ops->release(d, bvc);
    d->ops->release(d, bp);
    free(kc0), free(vc0), free(kk), free(vv), free(kc), free(vc);
}

Test(kernels_attn, kv_store_writes_exactly_row_pos) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(11);
    kiln_err err = {0};
    const uint32_t dims[] = {8, 7, 6, 40, 5 * 40, 4 * 64, 8 * 128}; /* vector widths 4, 1, 2 */
    const uint32_t ctxs[] = {1024, 1031};
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (size_t ci = 0; ci < 2; ci++) {
                uint32_t kv = dims[di], nctx = ctxs[ci], gx = 0;
                ir_kernel *k = kn_kv_store(&d->caps, kv, nctx, dtypes[ti], &gx, &err);
                cr_assert_not_null(k, "%s", err.msg);
                rt_kernel *ck = tu_vk_compile(d, k);
                const uint32_t pos[] = {0, 1, 6, 200, 1000, nctx - 1, nctx, nctx + 5, 0xffffffffu};
                for (size_t pi = 0; pi < sizeof pos / sizeof pos[0]; pi++)
                    kv_store_case(d, ck, gx, kv, nctx, dtypes[ti], pos[pi], 1);
                /* a few tokens at once (prefill's shape): those past the end write nothing */
                kv_store_case(d, ck, gx, kv, nctx, dtypes[ti], 5, 3);
                kv_store_case(d, ck, gx, kv, nctx, dtypes[ti], nctx - 2, 4);
                kv_store_case(d, ck, gx, kv, nctx, dtypes[ti], 0xfffffffeu, 3); /* wraps: nothing */
                d->ops->release_kernel(d, ck);
                ir_kernel_destroy(k);
            }
    d->ops->destroy(d);
}

/* ---- attention ------------------------------------------------------------------------------ */


/* One kernel pair (shape, n_ctx, n_split, dtype) at several positions. The caches are
 * random 16-bit values up to row pos and NaN after it; q is scaled so softmax is far
 * from uniform. The partials buffer starts as NaN (a merge that reads a run nobody wrote
 * makes NaN) with a guard after it, as does the output. */
static void attn_case(rt_device *d, uint32_t n_head, uint32_t n_head_kv, uint32_t hd, uint32_t n_ctx, uint32_t n_split,
                      ir_scalar t, const uint32_t *pos, size_t n_pos, const char *var) {
    kiln_err err = {0};
    char what[200];
    uint32_t g[2] = {0}, gm = 0, kv_dim = n_head_kv * hd, qn = n_head * hd;
    ir_kernel *k = kn_attn_decode(&d->caps, n_head, n_head_kv, hd, n_ctx, n_split, t, g, &err);
    cr_assert_not_null(k, "%s", err.msg);
    cr_assert(g[0] == n_head && g[1] == n_split);
    ir_kernel *km = kn_attn_merge(&d->caps, n_head, hd, n_ctx, n_split, t, &gm, &err);
    cr_assert_not_null(km, "%s", err.msg);
    cr_assert_eq(gm, n_head);
    rt_kernel *ck = tu_vk_compile(d, k), *cm = tu_vk_compile(d, km);
    size_t nc = (size_t)n_ctx * kv_dim, np = (size_t)n_head * n_split * (hd + 2) + GUARD;
    float *qf, *kf, *vf;
    uint16_t *q = tu_rand16(t, qn, -4, 4, &qf), *kc = tu_rand16(t, nc, -1, 1, &kf), *vc = tu_rand16(t, nc, -2, 2, &vf);
    uint16_t *kp = malloc(nc * 2), *vp = malloc(nc * 2), *poison = malloc(((size_t)qn + GUARD) * 2);
    uint16_t *o = malloc(((size_t)qn + GUARD) * 2);
    uint32_t *ppoison = malloc(np * 4), *pgot = malloc(np * 4);
    float *want = malloc((size_t)qn * 4);
    double *tol = malloc((size_t)qn * sizeof *tol);
    cr_assert(kp && vp && poison && o && want && tol && ppoison && pgot);
    for (size_t i = 0; i < (size_t)qn + GUARD; i++) poison[i] = tu_nan16(t);
    for (size_t i = 0; i < np; i++) ppoison[i] = 0x7fc00000u;
    rt_buffer *bq = tu_vk_upload(d, q, (size_t)qn * 2), *bk = tu_vk_upload(d, kc, nc * 2),
              *bv = tu_vk_upload(d, vc, nc * 2);
    rt_buffer *bo = tu_vk_upload(d, poison, ((size_t)qn + GUARD) * 2), *bp = tu_vk_upload(d, &pos[0], 4);
    rt_buffer *bpart = tu_vk_upload(d, ppoison, np * 4);
    for (size_t pi = 0; pi < n_pos; pi++) {
        uint32_t p = pos[pi];
        snprintf(what, sizeof what, "attn heads=%u/%u hd=%u n_ctx=%u splits=%u %s pos=%u caps=%s", n_head, n_head_kv,
                 hd, n_ctx, n_split, tu_dname(t), p, var ? var : "device");
        /* rows past pos poisoned: a read of a key or value beyond the last makes NaN */
        for (size_t i = 0; i < nc; i++) {
            bool live = i / kv_dim <= p;
            kp[i] = live ? kc[i] : tu_nan16(t), vp[i] = live ? vc[i] : tu_nan16(t);
        }
        tu_vk_reupload(d, bk, kp, nc * 2), tu_vk_reupload(d, bv, vp, nc * 2);
        tu_vk_reupload(d, bo, poison, ((size_t)qn + GUARD) * 2), tu_vk_reupload(d, bp, &p, 4);
        tu_vk_reupload(d, bpart, ppoison, np * 4);
        rt_arg args[5] = {{bq, 0}, {bk, 0}, {bv, 0}, {bpart, 0}, {bp, 0}};
        rt_arg margs[3] = {{bpart, 0}, {bo, 0}, {bp, 0}};
        tu_vk_run(d, ck, g[0], g[1], args, 5);
        tu_vk_run(d, cm, gm, 1, margs, 3);
        tu_vk_download(d, bo, o, ((size_t)qn + GUARD) * 2);
        tu_vk_download(d, bpart, pgot, np * 4);
        for (size_t i = np - GUARD; i < np; i++)
            cr_assert_eq(pgot[i], 0x7fc00000u, "%s: partials written past the end at %zu", what, i);
        for (size_t i = qn; i < (size_t)qn + GUARD; i++)
            cr_assert_eq(o[i], tu_nan16(t), "%s: wrote past the end at %zu", what, i);
        if (p >= n_ctx) { /* no keys: nothing written */
            for (size_t i = 0; i < qn; i++) cr_assert_eq(o[i], tu_nan16(t), "%s: wrote [%zu]", what, i);
            continue;
        }
        tu_attend_ref(qf, kf, vf, n_head, n_head_kv, hd, p, want, tol);
        for (size_t i = 0; i < qn; i++) {
            double gv = tu_from16(t, o[i]), w = want[i];
            cr_assert(!isnan(gv), "%s: [%zu] NaN (not written, or read past pos)", what, i);
            double tl = tol[i] + tu_ulp16(t, fmax(fabs(gv), fabs(w)));
            cr_assert(fabs(gv - w) <= tl, "%s: [%zu] %.9g != %.9g (tol %.3g)", what, i, gv, w, tl);
        }
    }
    d->ops->release(d, bq), d->ops->release(d, bk), d->ops->release(d, bv), d->ops->release(d, bo);
    d->ops->release(d, bp), d->ops->release(d, bpart);
    d->ops->release_kernel(d, ck), d->ops->release_kernel(d, cm);
    free(q), free(kc), free(vc), free(qf), free(kf), free(vf), free(kp), free(vp), free(poison), free(o), free(want);
    free(tol), free(ppoison), free(pgot);
    ir_kernel_destroy(k), ir_kernel_destroy(km);
}

static const uint32_t head_dims[] = {8, 40, 64, 128};
static const uint32_t heads[][2] = {{1, 1}, {5, 1}, {8, 4}, {32, 8}};

static void attn_all(const char *var, uint64_t sd, bool full) {
    rt_device *d = tu_vk_open_or_skip(var);
    tu_seed(sd);
    const uint32_t ctxs[] = {1024, 1031};
    for (size_t ci = 0; ci < 2; ci++) {
        uint32_t nctx = ctxs[ci];
        const uint32_t pos[] = {0, 1, 6, 200, 1000, nctx - 1, nctx};
        for (size_t ti = 0; ti < 2; ti++)
            for (size_t hi = 0; hi < sizeof head_dims / sizeof head_dims[0]; hi++)
                for (size_t gi = 0; gi < sizeof heads / sizeof heads[0]; gi++) {
                    /* the other caps variant: the shapes that change its code */
                    if (!full && (gi != 2 || ti != ci)) continue;
                    /* one run, a few, the plan's choice for this device, many */
                    const uint32_t splits[] = {1, 3, kn_attn_splits(&d->caps, heads[gi][0], nctx), 64};
                    attn_case(d, heads[gi][0], heads[gi][1], head_dims[hi], nctx, splits[(hi + gi + ti + ci) % 4],
                              dtypes[ti], pos, sizeof pos / sizeof pos[0], var);
                }
    }
    d->ops->destroy(d);
}

Test(kernels_attn, decode_matches_oracle_attend, .timeout = 600) { attn_all(NULL, 21, true); }

/* a 32-invocation workgroup: several dims per invocation, blocks of 32 positions */
Test(kernels_attn, decode_small_workgroup, .timeout = 600) { attn_all("workgroup=32", 22, false); }

/* The batched pair: tokens of several sequences in one launch over a pool of caches, each
 * token against the reference on its own sequence's cache; a token past the context or
 * the pool writes nothing; q rows wider than the heads. */
static void batch_case(rt_device *d, uint32_t n_head, uint32_t n_head_kv, uint32_t hd, uint32_t n_split, ir_scalar t) {
    kiln_err err = {0};
    enum { N_SEQ = 3, B = 6 };
    const uint32_t n_ctx = 131, kv_dim = n_head_kv * hd, qn = n_head * hd, q_stride = qn + 24;
    /* (position, sequence): sequence 1 twice (two of its positions), one past the context, one past the pool */
    static const uint32_t tokpos[2 * B] = {7, 2, 130, 0, 40, 1, 131, 2, 5, 3, 3, 1};
    uint32_t g[2], gm;
    ir_kernel *k = kn_attn_decode_batch(&d->caps, n_head, n_head_kv, hd, n_ctx, n_split, N_SEQ, B, q_stride, t, g, &err);
    cr_assert_not_null(k, "%s", err.msg);
    ir_kernel *km = kn_attn_merge_batch(&d->caps, n_head, hd, n_ctx, n_split, N_SEQ, B, t, &gm, &err);
    cr_assert_not_null(km, "%s", err.msg);
    cr_assert(g[0] == n_head && g[1] == n_split * B && gm == n_head);
    rt_kernel *ck = tu_vk_compile(d, k), *cm = tu_vk_compile(d, km);
    size_t nc = (size_t)N_SEQ * n_ctx * kv_dim, np = (size_t)B * n_head * n_split * (hd + 2) + GUARD;
    size_t no = (size_t)B * qn + GUARD;
    float *qf, *kf, *vf;
    uint16_t *q = tu_rand16(t, (size_t)B * q_stride, -4, 4, &qf), *kc = tu_rand16(t, nc, -1, 1, &kf);
    uint16_t *vc = tu_rand16(t, nc, -2, 2, &vf), *o = malloc(no * 2), *poison = malloc(no * 2);
    uint32_t *ppoison = malloc(np * 4);
    float *want = malloc((size_t)qn * 4), *qrow = malloc((size_t)qn * 4);
    double *tol = malloc((size_t)qn * sizeof *tol);
    for (size_t i = 0; i < no; i++) poison[i] = tu_nan16(t);
    for (size_t i = 0; i < np; i++) ppoison[i] = 0x7fc00000u;
    /* rows past each sequence's last used position are NaN: a read past pos shows */
    const uint32_t last[N_SEQ] = {130, 40, 7};
    for (size_t i = 0; i < nc; i++) {
        size_t row = i / kv_dim, sq = row / n_ctx;
        if (row % n_ctx > last[sq]) kc[i] = vc[i] = tu_nan16(t);
    }
    rt_buffer *bq = tu_vk_upload(d, q, (size_t)B * q_stride * 2), *bk = tu_vk_upload(d, kc, nc * 2);
    rt_buffer *bv = tu_vk_upload(d, vc, nc * 2), *bo = tu_vk_upload(d, poison, no * 2);
    rt_buffer *bp = tu_vk_upload(d, tokpos, sizeof tokpos), *bpart = tu_vk_upload(d, ppoison, np * 4);
    rt_arg args[5] = {{bq, 0}, {bk, 0}, {bv, 0}, {bpart, 0}, {bp, 0}};
    rt_arg margs[3] = {{bpart, 0}, {bo, 0}, {bp, 0}};
    tu_vk_run(d, ck, g[0], g[1], args, 5);
    tu_vk_run(d, cm, gm, B, margs, 3);
    tu_vk_download(d, bo, o, no * 2);
    for (size_t i = (size_t)B * qn; i < no; i++) cr_assert_eq(o[i], tu_nan16(t), "wrote past the end at %zu", i);
    for (uint32_t b = 0; b < B; b++) {
        uint32_t pos = tokpos[2 * b], sq = tokpos[2 * b + 1];
        const uint16_t *ob = o + (size_t)b * qn;
        if (pos >= n_ctx || sq >= N_SEQ) {
            for (uint32_t i = 0; i < qn; i++) cr_assert_eq(ob[i], tu_nan16(t), "token %u (no keys) wrote [%u]", b, i);
            continue;
        }
        memcpy(qrow, qf + (size_t)b * q_stride, (size_t)qn * 4);
        size_t at = (size_t)sq * n_ctx * kv_dim;
        tu_attend_ref(qrow, kf + at, vf + at, n_head, n_head_kv, hd, pos, want, tol);
        for (uint32_t i = 0; i < qn; i++) {
            double gv = tu_from16(t, ob[i]), w = want[i];
            double tl = tol[i] + tu_ulp16(t, fmax(fabs(gv), fabs(w)));
            cr_assert(fabs(gv - w) <= tl, "heads %u/%u hd %u splits %u token %u (seq %u pos %u): [%u] %.9g != %.9g",
                      n_head, n_head_kv, hd, n_split, b, sq, pos, i, gv, w);
        }
    }
    d->ops->release(d, bq), d->ops->release(d, bk), d->ops->release(d, bv), d->ops->release(d, bo);
    d->ops->release(d, bp), d->ops->release(d, bpart);
    d->ops->release_kernel(d, ck), d->ops->release_kernel(d, cm);
    free(q), free(kc), free(vc), free(qf), free(kf), free(vf), free(o), free(poison), free(ppoison), free(want);
    free(qrow), free(tol);
    ir_kernel_destroy(k), ir_kernel_destroy(km);
}

Test(kernels_attn, batched_decode_over_a_pool_of_caches, .timeout = 300) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(23);
    batch_case(d, 8, 4, 64, 3, IR_BF16);
    batch_case(d, 5, 1, 40, 1, IR_F16);
    batch_case(d, 4, 4, 128, 16, IR_BF16);
    d->ops->destroy(d);
}

/* ---- variants built for other devices, and refusals ----------------------------------------- */

Test(kernels_attn, variants_build_for_min_and_h200_caps) {
    rt_caps cs[2];
    tu_caps_min(&cs[0]);
    tu_caps_h200(&cs[1]);
    kiln_err err = {0};
    uint32_t gx;
    for (int ci = 0; ci < 2; ci++)
        for (size_t ti = 0; ti < 2; ti++) {
            tu_emit_ok(kn_kv_store(&cs[ci], 1024, 32768, dtypes[ti], &gx, &err), &cs[ci], err.msg, "kv_store");
            tu_emit_ok(kn_kv_store(&cs[ci], 7, 5, dtypes[ti], &gx, &err), &cs[ci], err.msg, "kv_store");
            uint32_t g2[2];
            tu_emit_ok(kn_attn_decode(&cs[ci], 32, 8, 128, 32768, 16, dtypes[ti], g2, &err), &cs[ci], err.msg, "attn");
            tu_emit_ok(kn_attn_decode(&cs[ci], 28, 4, 128, 4096, 1, dtypes[ti], g2, &err), &cs[ci], err.msg, "attn");
            tu_emit_ok(kn_attn_decode(&cs[ci], 5, 1, 40, 1031, 7, dtypes[ti], g2, &err), &cs[ci], err.msg, "attn");
            tu_emit_ok(kn_attn_decode(&cs[ci], 2, 2, 256, 100, 64, dtypes[ti], g2, &err), &cs[ci], err.msg, "attn");
            tu_emit_ok(kn_attn_merge(&cs[ci], 32, 128, 32768, 16, dtypes[ti], &gx, &err), &cs[ci], err.msg, "merge");
            tu_emit_ok(kn_attn_merge(&cs[ci], 5, 40, 1031, 7, dtypes[ti], &gx, &err), &cs[ci], err.msg, "merge");
            tu_emit_ok(kn_attn_merge(&cs[ci], 2, 256, 100, 1, dtypes[ti], &gx, &err), &cs[ci], err.msg, "merge");
        }
}

Test(kernels_attn, batched_variants_build_and_refuse) {
    rt_caps c = tu_cuda_caps(90), vk;
    tu_caps_h200(&vk);
    kiln_err err = {0};
    uint32_t g2[2], gx;
    ir_kernel *kb = kn_attn_decode_batch(&c, 32, 8, 128, 4096, 8, 8, 64, 6144, IR_BF16, g2, &err);
    cr_assert_not_null(kb, "%s", err.msg);
    tu_ptx_assembles(kb, &c, "decode batch");
    ir_kernel_destroy(kb);
    tu_emit_ok(kn_attn_decode_batch(&vk, 32, 8, 128, 4096, 8, 8, 64, 6144, IR_BF16, g2, &err), &vk, err.msg, "decode batch");
    tu_emit_ok(kn_attn_merge_batch(&vk, 32, 128, 4096, 8, 8, 64, IR_BF16, &gx, &err), &vk, err.msg, "merge batch");
    cr_assert_null(kn_attn_decode_batch(&vk, 32, 8, 128, 4096, 8, 8, 0, 6144, IR_BF16, g2, &err));
    cr_assert(strstr(err.msg, "no tokens"), "%s", err.msg);
    cr_assert_null(kn_attn_decode_batch(&vk, 32, 8, 128, 4096, 8, 8, 4, 100, IR_BF16, g2, &err));
    cr_assert(strstr(err.msg, "q_stride"), "%s", err.msg);
    cr_assert_null(kn_attn_decode_batch(&vk, 32, 8, 128, 1u << 20, 8, 64, 4, 6144, IR_BF16, g2, &err));
    cr_assert(strstr(err.msg, "u32"), "%s", err.msg);
    cr_assert_null(kn_attn_merge_batch(&vk, 32, 128, 4096, 8, 8, 0, IR_BF16, &gx, &err));
}

Test(kernels_attn, bad_shapes_and_caps_are_refused) {
    rt_caps c, plain;
    rt_caps_default(&c, RT_VULKAN);
    c.storage16 = true;
    rt_caps_default(&plain, RT_VULKAN);
    kiln_err err = {0};
    uint32_t gx;
    cr_assert_null(kn_kv_store(&c, 0, 16, IR_BF16, &gx, &err));
    cr_assert(strstr(err.msg, "bad shape"), "%s", err.msg);
    cr_assert_null(kn_kv_store(&c, 1u << 16, 1u << 16, IR_BF16, &gx, &err));
    cr_assert(strstr(err.msg, "2^32"), "%s", err.msg);
    cr_assert_null(kn_kv_store(&c, 64, 16, IR_F32, &gx, &err));
    cr_assert(strstr(err.msg, "bf16 or f16"), "%s", err.msg);
    cr_assert_null(kn_kv_store(&plain, 64, 16, IR_BF16, &gx, &err));
    cr_assert(strstr(err.msg, "storage16"), "%s", err.msg);
    uint32_t g2[2];
    cr_assert_null(kn_attn_decode(&c, 6, 4, 64, 16, 1, IR_BF16, g2, &err)); /* 6 % 4 */
    cr_assert(strstr(err.msg, "bad shape"), "%s", err.msg);
    cr_assert_null(kn_attn_decode(&c, 0, 1, 64, 16, 1, IR_BF16, g2, &err));
    cr_assert_null(kn_attn_decode(&c, 4, 0, 64, 16, 1, IR_BF16, g2, &err));
    cr_assert_null(kn_attn_decode(&c, 4, 4, 0, 16, 1, IR_BF16, g2, &err));
    cr_assert_null(kn_attn_decode(&c, 4, 4, 64, 0, 1, IR_BF16, g2, &err));
    cr_assert_null(kn_attn_decode(&c, 4, 4, 64, 16, 0, IR_BF16, g2, &err));
    cr_assert(strstr(err.msg, "splits"), "%s", err.msg);
    cr_assert_null(kn_attn_decode(&c, 4, 4, 64, 16, 1025, IR_BF16, g2, &err));
    cr_assert_null(kn_attn_decode(&c, 64, 64, 128, 1u << 20, 1, IR_BF16, g2, &err));
    cr_assert(strstr(err.msg, "2^32"), "%s", err.msg);
    cr_assert_null(kn_attn_decode(NULL, 4, 4, 64, 16, 1, IR_BF16, g2, &err));
    cr_assert_null(kn_attn_decode(&c, 4, 4, 64, 16, 1, IR_F32, g2, &err));
    cr_assert_null(kn_attn_merge(&c, 0, 64, 16, 1, IR_BF16, &gx, &err));
    cr_assert_null(kn_attn_merge(&c, 4, 64, 16, 0, IR_BF16, &gx, &err));
    cr_assert_null(kn_attn_merge(&c, 4, 64, 16, 1, IR_F32, &gx, &err));
    /* the plan's split count: at least 1, at most 64, a power of two, runs of >= 16 */
    rt_caps big = c;
    big.compute_units = 132;
    cr_assert_eq(kn_attn_splits(&big, 32, 40960), 16);
    cr_assert_eq(kn_attn_splits(&big, 16, 40960), 32);
    cr_assert_eq(kn_attn_splits(&big, 1, 40960), 64);
    cr_assert_eq(kn_attn_splits(&big, 32, 64), 4);
    cr_assert_eq(kn_attn_splits(&c, 32, 40960), 1);
}
