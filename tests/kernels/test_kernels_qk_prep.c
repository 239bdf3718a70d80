/* kernels/qk_prep.c on the Vulkan device (lavapipe in CI): kn_qk_prep against a C
 * reference that follows the oracle's layer_forward (oracle/forward.c: q/k norm with
 * rmsnorm, then rope, then the cache copies) in f32, rounding to the 16-bit type where
 * contract mode does (after the norm, after rope). Both caches start all NaN (with a
 * guard after them): exactly rows pos0 .. pos0 + n - 1 below n_ctx may change, v bit for
 * bit, k within the tolerance; the q part of qkv changes only in those tokens' rows; the
 * v part of qkv and the guard after it never change. Each shape also runs with caps
 * overrides that change the generated code; every variant is emitted for spec-minimum
 * and H200-like caps; bad shapes are refused. Blocks run on grids of several widths
 * (workgroups taking one head, several, or all). Skipped by name when no Vulkan device.
 *
 * Tolerances, in the terms of tests/test_kernels.c (rmsnorm and rope):
 *  - norm: the kernel's scale is within (hd + 8) 2^-24 relative of the reference's (two
 *    orders of a sum of hd squares, then mean, sqrt, divide, two products), so its
 *    normed value lies within r = (hd + 8) 2^-24 |y| of the reference's y; both are
 *    rounded to dtype, and rounding is monotonic: the device's input to rope is within
 *    e = the larger distance from round(y) to round(y - r) or round(y + r) (0 unless y
 *    lies near a rounding boundary, one 16-bit ulp at most);
 *  - rope angle: the chain of f32 products (a driver may round it in another order: 4 ulp
 *    of theta, as the rope test), through the divide by the factor (the device's: 2.5 ulp,
 *    Vulkan; 3 taken) and the product with freq_scale (its rounding on a moved input: one
 *    ulp of the angle); the 2*pi reduction's three fma roundings (below 2^-20 each at the
 *    angles here, < 5100 rad); device sin/cos 2^-11 absolute on [-pi, pi];
 *  - rotation: out_a = x0 c - x1 s moves by at most e_a + e_b from the inputs and by
 *    d_angle (|x0| + |x1|) from c and s, plus a few f32 roundings (4 2^-24 (|x0| + |x1|));
 *  - the store rounds to dtype: one 16-bit ulp at the result's magnitude (check16).
 * Dims past n_rot without a norm must come back bit for bit. */
#include "backend-spirv/spv_emit.h"
#include "backend-spirv/vk_device.h"
#include "backend-spirv/vk_probe.h"
#include "base/error.h"
#include "gguf/half.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64
#define N_MAX 64
#define N_CTX 5040
#define MAX_HD 256

/* ---- plumbing (as tests/test_kernels_attn.c) ------------------------------------------- */



static float round16(ir_scalar t, float f) { return tu_from16(t, tu_to16(t, f)); }
/* one f32 ulp at |v| (0 for 0) */
static double ulp32(double v) { return v != 0 ? ldexp(1.0, ilogb(v) - 23) : 0; }

static const ir_scalar dtypes[2] = {IR_BF16, IR_F16};

/* ---- the reference ----------------------------------------------------------------------- */

typedef struct shape {
    const char *name;
    uint32_t n_head, n_head_kv, head_dim;
    kn_rope_opts rope;
    bool qk_norm;
} shape;

/* One q or k head at position pos, as layer_forward computes it in contract mode: out and
 * the tolerance per dim (before check16's store ulp). w is NULL without qk_norm, fac NULL
 * without freq factors. */
static void ref_head(const shape *s, ir_scalar t, const float *x, const float *w, const float *fac, uint32_t pos,
                     float eps, float *out, double *tol) {
    uint32_t hd = s->head_dim, n_rot = s->rope.n_rot, half = n_rot / 2;
    float xn[MAX_HD];
    double e[MAX_HD];
    if (w) {
        float ss = 0;
        for (uint32_t i = 0; i < hd; i++) ss += x[i] * x[i];
        float scale = 1.0f / sqrtf(ss / (float)hd + eps);
        for (uint32_t i = 0; i < hd; i++) {
            float y = (x[i] * scale) * w[i];
            /* the device's y lies within rel of ours; rounding is monotonic, so its
             * rounded value lies between the roundings of y - rel and y + rel */
            float rel = (float)((hd + 8) * ldexp(1.0, -24) * fabs(y)) * 1.001f;
            xn[i] = round16(t, y);
            e[i] = fmax(xn[i] - round16(t, y - rel), round16(t, y + rel) - xn[i]);
        }
    } else {
        for (uint32_t i = 0; i < hd; i++) xn[i] = x[i], e[i] = 0;
    }
    for (uint32_t i = 0; i < hd; i++) out[i] = xn[i], tol[i] = e[i];
    float theta_scale = powf(s->rope.base, -2.0f / (float)n_rot), theta = (float)pos, fs = s->rope.freq_scale;
    for (uint32_t i = 0; i < half; i++, theta *= theta_scale) {
        float q = fac ? theta / fac[i] : theta, th = fs * q;
        float c = cosf(th), sn = sinf(th);
        uint32_t a = s->rope.neox ? i : 2 * i, b = s->rope.neox ? i + half : 2 * i + 1;
        float x0 = xn[a], x1 = xn[b];
        out[a] = round16(t, x0 * c - x1 * sn);
        out[b] = round16(t, x0 * sn + x1 * c);
        double dang = 4 * ulp32(theta) / (fac ? fac[i] : 1.0) * fs + (fac ? 3 * ulp32(q) * fs : 0) +
                      (fs != 1.0f ? ulp32(th) : 0) + 3 * ldexp(1.0, -20) + ldexp(1.0, -11);
        double mag = fabs(x0) + fabs(x1) + e[a] + e[b];
        tol[a] = tol[b] = dang * mag + 4 * ldexp(1.0, -24) * mag + e[a] + e[b];
    }
}

/* ---- one kernel, many blocks ------------------------------------------------------------------ */

typedef struct kcase {
    const shape *s;
    ir_scalar t;
    const char *var;
    uint32_t row, kv_dim, groups;
    rt_kernel *ck;
    float *qnf, *knf, *ff; /* weights as f32 (NULL when absent) */
    rt_buffer *bqn, *bkn, *bff;
} kcase;

/* One launch for the block (pos0, n): qkv random, caches NaN; everything checked. */
static void block_case(rt_device *d, const kcase *kc, uint32_t pos0, uint32_t n) {
    const shape *s = kc->s;
    ir_scalar t = kc->t;
    uint32_t hd = s->head_dim, row = kc->row, kv_dim = kc->kv_dim, qd = s->n_head * hd;
    char what[256];
    snprintf(what, sizeof what, "qk_prep %s heads=%u/%u hd=%u rot=%u %s%s%s %s pos=%u+%u caps=%s", s->name, s->n_head,
             s->n_head_kv, hd, s->rope.n_rot, s->rope.neox ? "neox" : "norm", s->qk_norm ? " qk_norm" : "",
             s->rope.freq_factors ? " factors" : "", tu_dname(t), pos0, n, kc->var ? kc->var : "device");
    size_t nq = (size_t)N_MAX * row, nc = (size_t)N_CTX * kv_dim;
    float *xf;
    uint16_t *x0 = tu_rand16(t, nq + GUARD, -4, 4, &xf);
    for (size_t i = nq; i < nq + GUARD; i++) x0[i] = tu_nan16(t);
    uint16_t *poison = malloc((nc + GUARD) * 2), *x = malloc((nq + GUARD) * 2);
    uint16_t *kcache = malloc((nc + GUARD) * 2), *vcache = malloc((nc + GUARD) * 2);
    cr_assert(poison && x && kcache && vcache);
    for (size_t i = 0; i < nc + GUARD; i++) poison[i] = tu_nan16(t);
    rt_buffer *bx = tu_vk_upload(d, x0, (nq + GUARD) * 2), *bk = tu_vk_upload(d, poison, (nc + GUARD) * 2);
    rt_buffer *bv = tu_vk_upload(d, poison, (nc + GUARD) * 2);
    uint32_t info[2] = {pos0, n};
    rt_buffer *bi = tu_vk_upload(d, info, sizeof info);
    rt_arg args[7] = {{bx, 0}, {bk, 0}, {bv, 0}, {bi, 0}};
    uint32_t na = 4;
    if (s->qk_norm) args[na++].buf = kc->bqn, args[na++].buf = kc->bkn;
    if (s->rope.freq_factors) args[na++].buf = kc->bff;
    tu_vk_run(d, kc->ck, kc->groups, N_MAX, args, na);
    tu_vk_download(d, bx, x, (nq + GUARD) * 2);
    tu_vk_download(d, bk, kcache, (nc + GUARD) * 2);
    tu_vk_download(d, bv, vcache, (nc + GUARD) * 2);

    float want[MAX_HD];
    double tol[MAX_HD];
    for (uint32_t tk = 0; tk < N_MAX; tk++) {
        uint32_t p = pos0 + tk;
        bool live = tk < n && p >= pos0 && p < N_CTX;
        const uint16_t *xr = x0 + (size_t)tk * row, *gr = x + (size_t)tk * row;
        /* v part: never written */
        for (uint32_t i = qd + kv_dim; i < row; i++)
            cr_assert_eq(gr[i], xr[i], "%s: token %u: qkv v part [%u] changed", what, tk, i);
        for (uint32_t h = 0; h < s->n_head + s->n_head_kv; h++) {
            bool is_q = h < s->n_head;
            if (!live) { /* q untouched (the cache rows are checked below) */
                if (is_q)
                    for (uint32_t i = 0; i < hd; i++)
                        cr_assert_eq(gr[h * hd + i], xr[h * hd + i], "%s: token %u (not live): q head %u [%u] changed",
                                     what, tk, h, i);
                continue;
            }
            const uint16_t *got = is_q ? gr + h * hd : kcache + (size_t)p * kv_dim + (size_t)(h - s->n_head) * hd;
            ref_head(s, t, xf + (size_t)tk * row + h * hd, s->qk_norm ? (is_q ? kc->qnf : kc->knf) : NULL,
                     s->rope.freq_factors ? kc->ff : NULL, p, 1e-6f, want, tol);
            for (uint32_t i = 0; i < hd; i++) {
                double g = tu_from16(t, got[i]), w = want[i];
                if (i >= s->rope.n_rot && !s->qk_norm) {
                    cr_assert_eq(got[i], xr[h * hd + i], "%s: token %u %s head %u [%u] past n_rot: %#x != %#x", what,
                                 tk, is_q ? "q" : "k", h, i, got[i], xr[h * hd + i]);
                    continue;
                }
                cr_assert(!isnan(g), "%s: token %u %s head %u [%u] not written (NaN)", what, tk, is_q ? "q" : "k", h,
                          i);
                double tl = tol[i] + tu_ulp16(t, fmax(fabs(g), fabs(w)));
                cr_assert(fabs(g - w) <= tl, "%s: token %u %s head %u [%u] %.9g != %.9g (tol %.3g)", what, tk,
                          is_q ? "q" : "k", h, i, g, w, tl);
            }
        }
    }
    for (size_t i = nq; i < nq + GUARD; i++) cr_assert_eq(x[i], tu_nan16(t), "%s: wrote past qkv at %zu", what, i);
    /* caches: row r is token r - pos0's when that token is live, NaN otherwise */
    for (size_t i = 0; i < nc + GUARD; i++) {
        size_t r = i / kv_dim, c = i % kv_dim;
        bool written = r < N_CTX && r >= pos0 && r - pos0 < n;
        if (!written) {
            cr_assert_eq(kcache[i], tu_nan16(t), "%s: kcache[%zu] (row %zu) written", what, i, r);
            cr_assert_eq(vcache[i], tu_nan16(t), "%s: vcache[%zu] (row %zu) written", what, i, r);
            continue;
        }
        uint16_t wv = x0[(r - pos0) * row + qd + kv_dim + c];
        cr_assert_eq(vcache[i], wv, "%s: vcache[%zu] (row %zu) %#x != %#x", what, i, r, vcache[i], wv);
    }
    d->ops->release(d, bx), d->ops->release(d, bk), d->ops->release(d, bv), d->ops->release(d, bi);
    free(x0), free(xf), free(poison), free(x), free(kcache), free(vcache);
}

typedef struct block {
    uint32_t pos0, n;
} block;

/* Builds the shape's kernel for dtype t on d and runs the blocks. */
static void shape_case(rt_device *d, const shape *s, ir_scalar t, const char *var, const block *blocks, size_t nb) {
    kiln_err err = {0};
    ir_kernel *k = kn_qk_prep(&d->caps, s->n_head, s->n_head_kv, s->head_dim, &s->rope, s->qk_norm, 1e-6f, N_CTX, t,
                              &err);
    cr_assert_not_null(k, "%s: %s", s->name, err.msg);
    kcase kc = {.s = s, .t = t, .var = var, .row = (s->n_head + 2 * s->n_head_kv) * s->head_dim,
                .kv_dim = s->n_head_kv * s->head_dim, .groups = s->n_head + 2 * s->n_head_kv};
    kc.ck = tu_vk_compile(d, k);
    uint16_t *qn = NULL, *kn = NULL, *ff = NULL;
    if (s->qk_norm) {
        qn = tu_rand16(t, s->head_dim, 0.25f, 2.0f, &kc.qnf), kn = tu_rand16(t, s->head_dim, 0.25f, 2.0f, &kc.knf);
        kc.bqn = tu_vk_upload(d, qn, s->head_dim * 2), kc.bkn = tu_vk_upload(d, kn, s->head_dim * 2);
    }
    if (s->rope.freq_factors) { /* llama 3's: 1 for high frequencies, up to 8 for low, smooth between */
        uint32_t half = s->rope.n_rot / 2;
        ff = tu_rand16(t, half, 1.0f, 8.0f, &kc.ff);
        ff[0] = tu_to16(t, 1.0f), ff[half - 1] = tu_to16(t, 8.0f);
        kc.ff[0] = 1.0f, kc.ff[half - 1] = 8.0f;
        kc.bff = tu_vk_upload(d, ff, half * 2);
    }
    /* the grid's width changes which workgroup takes which heads, never the numbers: one
     * head a workgroup, all heads in one, three a row (a short last round) */
    uint32_t heads = s->n_head + 2 * s->n_head_kv, widths[3] = {heads, 1, heads < 3 ? heads : 3};
    for (size_t bi = 0; bi < nb; bi++) {
        kc.groups = widths[bi % 3];
        block_case(d, &kc, blocks[bi].pos0, blocks[bi].n);
    }
    if (kc.bqn) d->ops->release(d, kc.bqn), d->ops->release(d, kc.bkn);
    if (kc.bff) d->ops->release(d, kc.bff);
    d->ops->release_kernel(d, kc.ck);
    free(qn), free(kn), free(ff), free(kc.qnf), free(kc.knf), free(kc.ff);
    ir_kernel_destroy(k);
}

/* (n_head, n_head_kv, head_dim, {n_rot, neox, base, freq_scale, factors}, qk_norm) */
static const shape shapes[] = {
    {"qwen3", 16, 8, 128, {128, true, 1e6f, 1.0f, false}, true},
    {"llama", 4, 2, 64, {64, false, 1e4f, 1.0f, false}, false},
    {"llama3", 4, 2, 64, {64, false, 5e5f, 0.25f, true}, false}, /* factors and a linear scale */
    {"partial", 6, 1, 72, {32, true, 1e4f, 1.0f, false}, false}, /* dims past n_rot copied to k */
    {"partial-norm", 6, 1, 72, {32, false, 1e4f, 0.5f, true}, true},
    {"odd", 3, 3, 7, {6, true, 1e4f, 1.0f, false}, true}, /* no vectors, a dim past n_rot */
    {"pair", 1, 1, 2, {2, false, 5e5f, 1.0f, false}, false},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

/* positions {0, 17, 5000} x block sizes {1, 5, 33}, then blocks that reach past n_ctx
 * (partly, wholly, and wrapping past 2^32) */
static const block blocks[] = {{0, 1},  {0, 5},     {0, 33},    {17, 1},        {17, 5},        {17, 33},
                               {5000, 1}, {5000, 5}, {5000, 33}, {N_CTX - 2, 5}, {N_CTX, 1}, {0xfffffffeu, 3}};
#define N_BLOCKS (sizeof blocks / sizeof blocks[0])

Test(kernels_qk_prep, matches_oracle_layer_forward, .timeout = 300) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(31);
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t si = 0; si < N_SHAPES; si++) shape_case(d, &shapes[si], dtypes[ti], NULL, blocks, N_BLOCKS);
    d->ops->destroy(d);
}

/* caps that change the code: a 32-invocation workgroup (several pairs per invocation,
 * the angle chain carried between them), the workgroup-memory tree for the norm's sum */
/* The batched kernel gives each token bit for bit what the block kernel gives it alone:
 * its q row, and its k and v rows in its own sequence's part of the pool; tokens past the
 * context or the pool leave everything as it was. */
static void batch_shape(rt_device *d, const shape *s, ir_scalar t) {
    enum { B = 5, N_SEQ = 3, CTX = 97 };
    static const uint32_t tokpos[2 * B] = {5, 2, 0, 0, CTX, 1, 9, 3, 96, 1};
    kiln_err err = {0};
    uint32_t hd = s->head_dim, row = (s->n_head + 2 * s->n_head_kv) * hd, kv_dim = s->n_head_kv * hd;
    uint32_t heads = s->n_head + 2 * s->n_head_kv;
    ir_kernel *kb = kn_qk_prep_batch(&d->caps, s->n_head, s->n_head_kv, hd, &s->rope, s->qk_norm, 1e-6f, CTX, N_SEQ, t,
                                     &err);
    cr_assert_not_null(kb, "%s: %s", s->name, err.msg);
    ir_kernel *k1 = kn_qk_prep(&d->caps, s->n_head, s->n_head_kv, hd, &s->rope, s->qk_norm, 1e-6f, CTX, t, &err);
    cr_assert_not_null(k1, "%s: %s", s->name, err.msg);
    rt_kernel *cb = tu_vk_compile(d, kb), *c1 = tu_vk_compile(d, k1);
    size_t nq = (size_t)B * row, pool = (size_t)N_SEQ * CTX * kv_dim, one = (size_t)CTX * kv_dim;
    float *xf, *wf = NULL;
    uint16_t *x0 = tu_rand16(t, nq, -4, 4, &xf), *w = tu_rand16(t, hd, 0.25f, 2.0f, &wf);
    uint16_t *poison = malloc((pool + GUARD) * 2), *x = malloc(nq * 2), *kp = malloc((pool + GUARD) * 2);
    uint16_t *vp = malloc((pool + GUARD) * 2), *x1 = malloc((size_t)row * 2), *k1c = malloc(one * 2), *v1c = malloc(one * 2);
    for (size_t i = 0; i < pool + GUARD; i++) poison[i] = tu_nan16(t);
    float ff[MAX_HD];
    uint16_t ffh[MAX_HD];
    for (uint32_t i = 0; i < s->rope.n_rot / 2; i++) ff[i] = 1.0f + (float)i / 8, ffh[i] = tu_to16(t, ff[i]);
    rt_buffer *bw = tu_vk_upload(d, w, hd * 2), *bff = tu_vk_upload(d, ffh, MAX_HD * 2);
    rt_buffer *bx = tu_vk_upload(d, x0, nq * 2), *bk = tu_vk_upload(d, poison, (pool + GUARD) * 2);
    rt_buffer *bv = tu_vk_upload(d, poison, (pool + GUARD) * 2), *bp = tu_vk_upload(d, tokpos, sizeof tokpos);
    rt_arg args[7] = {{bx, 0}, {bk, 0}, {bv, 0}, {bp, 0}};
    uint32_t na = 4;
    if (s->qk_norm) args[na++].buf = bw, args[na++].buf = bw;
    if (s->rope.freq_factors) args[na++].buf = bff;
    tu_vk_run(d, cb, heads, B, args, na);
    tu_vk_download(d, bx, x, nq * 2), tu_vk_download(d, bk, kp, (pool + GUARD) * 2);
    tu_vk_download(d, bv, vp, (pool + GUARD) * 2);
    rt_buffer *bx1 = tu_vk_upload(d, x0, (size_t)row * 2), *bk1 = tu_vk_upload(d, poison, one * 2);
    rt_buffer *bv1 = tu_vk_upload(d, poison, one * 2), *bi1 = tu_vk_upload(d, (uint32_t[2]){0, 1}, 8);
    for (uint32_t b = 0; b < B; b++) {
        uint32_t pos = tokpos[2 * b], seq = tokpos[2 * b + 1];
        const uint16_t *xr = x0 + (size_t)b * row, *got = x + (size_t)b * row;
        if (pos >= CTX || seq >= N_SEQ) {
            cr_assert_arr_eq(got, xr, (size_t)row * 2, "%s: token %u (not live) changed its row", s->name, b);
            continue;
        }
        uint32_t info[2] = {pos, 1};
        tu_vk_reupload(d, bx1, xr, (size_t)row * 2), tu_vk_reupload(d, bk1, poison, one * 2);
        tu_vk_reupload(d, bv1, poison, one * 2), tu_vk_reupload(d, bi1, info, 8);
        rt_arg a1[7] = {{bx1, 0}, {bk1, 0}, {bv1, 0}, {bi1, 0}, args[4], args[5], args[6]};
        tu_vk_run(d, c1, heads, 1, a1, na);
        tu_vk_download(d, bx1, x1, (size_t)row * 2), tu_vk_download(d, bk1, k1c, one * 2);
        tu_vk_download(d, bv1, v1c, one * 2);
        cr_assert_arr_eq(got, x1, (size_t)row * 2, "%s %s: token %u's q differs from the block kernel's", s->name,
                         tu_dname(t), b);
        size_t at = ((size_t)seq * CTX + pos) * kv_dim;
        cr_assert_arr_eq(kp + at, k1c + (size_t)pos * kv_dim, (size_t)kv_dim * 2, "%s: token %u's k row", s->name, b);
        cr_assert_arr_eq(vp + at, v1c + (size_t)pos * kv_dim, (size_t)kv_dim * 2, "%s: token %u's v row", s->name, b);
        for (size_t i = 0; i < (size_t)kv_dim; i++) kp[at + i] = vp[at + i] = tu_nan16(t); /* checked */
    }
    for (size_t i = 0; i < pool + GUARD; i++) { /* nothing else written */
        cr_assert_eq(kp[i], tu_nan16(t), "%s: kcache pool [%zu] (row %zu) written", s->name, i, i / kv_dim);
        cr_assert_eq(vp[i], tu_nan16(t), "%s: vcache pool [%zu] (row %zu) written", s->name, i, i / kv_dim);
    }
    rt_buffer *bufs[] = {bw, bff, bx, bk, bv, bp, bx1, bk1, bv1, bi1};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) d->ops->release(d, bufs[i]);
    d->ops->release_kernel(d, cb), d->ops->release_kernel(d, c1);
    free(x0), free(xf), free(w), free(wf), free(poison), free(x), free(kp), free(vp), free(x1), free(k1c), free(v1c);
    ir_kernel_destroy(kb), ir_kernel_destroy(k1);
}

Test(kernels_qk_prep, batched_tokens_match_the_block_kernel, .timeout = 300) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(35);
    for (size_t i = 0; i < N_SHAPES; i++) batch_shape(d, &shapes[i], dtypes[i % 2]);
    d->ops->destroy(d);
}

static void variant(const char *var, uint64_t sd) {
    rt_device *d = tu_vk_open_or_skip(var);
    tu_seed(sd);
    const block few[] = {{17, 33}, {5000, 5}, {N_CTX - 2, 5}};
    for (size_t si = 0; si < N_SHAPES; si++)
        shape_case(d, &shapes[si], dtypes[si % 2], var, few, sizeof few / sizeof few[0]);
    d->ops->destroy(d);
}

Test(kernels_qk_prep, small_workgroup, .timeout = 300) { variant("workgroup=32", 32); }
Test(kernels_qk_prep, no_subgroup_arith, .timeout = 300) { variant("no-subgroup-arith", 33); }

/* ---- variants built for other devices, and refusals ------------------------------------------ */

Test(kernels_qk_prep, variants_build_for_min_and_h200_caps) {
    rt_caps cs[2];
    tu_caps_min(&cs[0]);
    tu_caps_h200(&cs[1]);
    kiln_err err = {0};
    const shape more[] = {
        {"llama3-8b", 32, 8, 128, {128, false, 5e5f, 1.0f, true}, false},
        {"qwen3-big", 64, 4, 256, {256, true, 1e6f, 1.0f, false}, true},
        {"norm-factors", 8, 8, 96, {64, true, 1e4f, 0.125f, true}, true},
    };
    for (int ci = 0; ci < 2; ci++)
        for (size_t ti = 0; ti < 2; ti++)
            for (size_t si = 0; si < N_SHAPES + 3; si++) {
                const shape *s = si < N_SHAPES ? &shapes[si] : &more[si - N_SHAPES];
                tu_emit_ok(kn_qk_prep(&cs[ci], s->n_head, s->n_head_kv, s->head_dim, &s->rope, s->qk_norm, 1e-6f,
                                      32768, dtypes[ti], &err),
                           &cs[ci], err.msg, s->name);
            }
}

/* The grid's width for a block: a head a subgroup (4 a workgroup) for short blocks
 * (decode, the first token), several heads a subgroup sharing a token's angle table once
 * the grid passes 8 workgroups an SM; a head a workgroup without subgroup sums. */
Test(kernels_qk_prep, grid_width_follows_the_block) {
    rt_caps c;
    tu_caps_h200(&c);
    c.compute_units = 132;
    cr_assert_eq(kn_qk_prep_groups(&c, 32, 8, 128, 128, 1), 12);
    cr_assert_eq(kn_qk_prep_groups(&c, 32, 8, 128, 128, 24), 12);
    cr_assert_eq(kn_qk_prep_groups(&c, 32, 8, 128, 128, 512), 3, "qwen3-8b at 512 tokens: 4 heads a subgroup");
    cr_assert_eq(kn_qk_prep_groups(&c, 16, 8, 128, 128, 512), 3, "qwen3-0.6b at 512 tokens: 3 heads a subgroup");
    for (uint32_t n = 1; n <= 4096; n = n * 3 + 1) {
        uint32_t g = kn_qk_prep_groups(&c, 3, 1, 7, 6, n);
        cr_assert(g >= 1 && g <= 5, "n %u: width %u", n, g);
    }
    c.compute_units = 0; /* unknown: still a width */
    cr_assert(kn_qk_prep_groups(&c, 32, 8, 128, 128, 512) >= 1);
    c.compute_units = 132;
    c.subgroup_arith = false; /* a head a workgroup */
    cr_assert_eq(kn_qk_prep_groups(&c, 32, 8, 128, 128, 1), 48);
    cr_assert_eq(kn_qk_prep_groups(&c, 32, 8, 128, 128, 512), 12);
}

Test(kernels_qk_prep, bad_shapes_and_caps_are_refused) {
    rt_caps c, plain;
    tu_caps_h200(&c);
    rt_caps_default(&plain, RT_VULKAN); /* no 16-bit buffers */
    kiln_err err = {0};
    const kn_rope_opts ok = {64, true, 1e4f, 1.0f, false};
#define REFUSED(caps, nh, nkv, hd, rope, norm, eps, nctx, dt)                                                          \
    do {                                                                                                               \
        err.msg[0] = 0;                                                                                                \
        ir_kernel *k_ = kn_qk_prep(caps, nh, nkv, hd, rope, norm, eps, nctx, dt, &err);                                \
        cr_assert_null(k_, "line %d: built", __LINE__);                                                                \
        cr_assert(!strncmp(err.msg, "kn_qk_prep: ", 12), "line %d: %s", __LINE__, err.msg);                            \
    } while (0)
    /* the reference shape builds */
    ir_kernel *k = kn_qk_prep(&c, 8, 2, 64, &ok, true, 1e-6f, 4096, IR_BF16, &err);
    cr_assert_not_null(k, "%s", err.msg);
    ir_kernel_destroy(k);
    REFUSED(&c, 0, 2, 64, &ok, true, 1e-6f, 4096, IR_BF16);
    REFUSED(&c, 8, 0, 64, &ok, true, 1e-6f, 4096, IR_BF16);
    REFUSED(&c, 8, 2, 0, &ok, true, 1e-6f, 4096, IR_BF16);
    REFUSED(&c, 8, 2, 64, &ok, true, 1e-6f, 0, IR_BF16);
    REFUSED(&c, 6, 4, 64, &ok, true, 1e-6f, 4096, IR_BF16); /* 6 % 4 */
    REFUSED(&c, 8, 2, 64, NULL, true, 1e-6f, 4096, IR_BF16);
    cr_assert(strstr(err.msg, "rope"), "%s", err.msg);
    const kn_rope_opts bad[] = {
        {0, true, 1e4f, 1.0f, false},     {63, true, 1e4f, 1.0f, false},      {66, true, 1e4f, 1.0f, false},
        {64, true, 0.0f, 1.0f, false},    {64, true, -1e4f, 1.0f, false},     {64, true, NAN, 1.0f, false},
        {64, true, INFINITY, 1.0f, true}, {64, true, 1e4f, 0.0f, false},      {64, true, 1e4f, -0.5f, false},
        {64, true, 1e4f, NAN, true},      {64, false, 1e4f, INFINITY, false},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        REFUSED(&c, 8, 2, 64, &bad[i], false, 1e-6f, 4096, IR_F16);
        cr_assert(strstr(err.msg, "bad shape"), "bad[%zu]: %s", i, err.msg);
    }
    REFUSED(&c, 8, 2, 64, &ok, true, NAN, 4096, IR_BF16); /* eps, with the norm */
    REFUSED(&c, 8, 2, 64, &ok, true, -1.0f, 4096, IR_BF16);
    REFUSED(&c, 64, 64, 128, &ok, false, 1e-6f, 1u << 20, IR_BF16); /* n_ctx * kv_dim */
    cr_assert(strstr(err.msg, "2^32"), "%s", err.msg);
    REFUSED(&c, 8, 2, 64, &ok, true, 1e-6f, 4096, IR_F32);
    cr_assert(strstr(err.msg, "bf16 or f16"), "%s", err.msg);
    REFUSED(&plain, 8, 2, 64, &ok, true, 1e-6f, 4096, IR_BF16);
    cr_assert(strstr(err.msg, "storage16"), "%s", err.msg);
    REFUSED(NULL, 8, 2, 64, &ok, true, 1e-6f, 4096, IR_BF16);
#undef REFUSED
}
