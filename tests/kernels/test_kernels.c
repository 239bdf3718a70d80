/* kernels/ on the Vulkan device (lavapipe in CI): each kernel at odd sizes against a
 * plain C reference with f32 accumulation, outputs poisoned (NaN) with a guard region
 * after them that must stay poisoned; each run also with caps overrides that change the
 * generated code; and every builder's variants built, verified and emitted for
 * spec-minimum and H200-like caps. Skipped by name when no Vulkan device exists.
 *
 * Tolerances. Products of two 16-bit values are exact in f32, so a kernel and the
 * reference differ only in summation order: for sums of n terms each order is within
 * (n-1) * 2^-24 * sum|terms| of the exact sum, so two orders are within
 * 2n * 2^-24 * sum|terms|. Rounding to the 16-bit type on store can then move the two
 * results at most one 16-bit ulp further apart (at the larger magnitude). Where the
 * device computes exp/sin/cos, its own precision (Vulkan: sin/cos absolute 2^-11 on
 * [-pi, pi], exp 3 + 2|x| ulp) is added. Kernels that only add or copy must match
 * bit for bit. */
#include "backend-spirv/spv_emit.h"
#include "backend-spirv/vk_device.h"
#include "backend-spirv/vk_probe.h"
#include "base/error.h"
#include "generate/sampler.h"
#include "gguf/half.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "kernels/kn_common.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64

/* ---- device plumbing ------------------------------------------------------------------ */

static void launch(rt_device *d, const ir_kernel *k, uint32_t gx, uint32_t gy, const rt_arg *args, uint32_t n) {
    kiln_err err = {0};
    rt_kernel *ck = d->ops->compile(d, k, NULL, &err);
    cr_assert_not_null(ck, "%s: %s", ir_kernel_name(k), err.msg);
    rt_launch l = {ck, {gx, gy, 1}, args, n};
    cr_assert_eq(d->ops->run(d, &l, 1, &err), 0, "%s", err.msg);
    d->ops->release_kernel(d, ck);
}

/* ---- 16-bit values ------------------------------------------------------------------- */

/* A device buffer of n 16-bit outputs plus the guard, all NaN. */
static rt_buffer *poisoned16(rt_device *d, ir_scalar t, size_t n) { return tu_vk_poisoned16(d, t, n, GUARD); }

/* Downloads n outputs + guard; the guard must still hold the poison. */
static uint16_t *fetch16(rt_device *d, rt_buffer *b, ir_scalar t, size_t n, const char *what) {
    uint16_t *p = malloc((n + GUARD) * 2);
    tu_vk_download(d, b, p, (n + GUARD) * 2);
    for (size_t i = n; i < n + GUARD; i++)
        cr_assert_eq(p[i], tu_nan16(t), "%s: wrote past the end at %zu (n=%zu)", what, i, n);
    return p;
}

static void check16(ir_scalar t, const uint16_t *got, const float *want, const double *tol_f32, size_t n,
                    const char *what) {
    for (size_t i = 0; i < n; i++) {
        double g = tu_from16(t, got[i]), w = want[i];
        cr_assert(!isnan(g), "%s: [%zu] not written (NaN)", what, i);
        double tol = (tol_f32 ? tol_f32[i] : 0) + tu_ulp16(t, fmax(fabs(g), fabs(w)));
        cr_assert(fabs(g - w) <= tol, "%s: [%zu] %.9g != %.9g (tol %.3g)", what, i, g, w, tol);
    }
}

static const ir_scalar dtypes[2] = {IR_BF16, IR_F16};
/* caps variants the device can be forced into, each changing the generated code */
static const char *const variants[] = {NULL, "no-subgroup-arith", "workgroup=32"};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

/* ---- rmsnorm ------------------------------------------------------------------------------ */

static void rmsnorm_case(rt_device *d, bool heads, uint32_t n, uint32_t rows, ir_scalar t, const char *var) {
    kiln_err err = {0};
    char what[128];
    snprintf(what, sizeof what, "%s n=%u rows=%u %s caps=%s", heads ? "rmsnorm_heads" : "rmsnorm", n, rows, tu_dname(t),
             var ? var : "device");
    const float eps = 1e-6f;
    ir_kernel *k = heads ? kn_rmsnorm_heads(&d->caps, n, t, eps, &err) : kn_rmsnorm(&d->caps, n, t, eps, &err);
    cr_assert_not_null(k, "%s: %s", what, err.msg);
    float *xf, *wf;
    uint16_t *x = tu_rand16(t, (size_t)n * rows, -3, 3, &xf), *w = tu_rand16(t, n, -2, 2, &wf);
    rt_buffer *bx = tu_vk_upload(d, x, (size_t)n * rows * 2), *bw = tu_vk_upload(d, w, (size_t)n * 2);
    rt_buffer *by = poisoned16(d, t, (size_t)n * rows);
    rt_arg args[3] = {{bx, 0}, {bw, 0}, {by, 0}};
    launch(d, k, rows, 1, args, 3);
    uint16_t *y = fetch16(d, by, t, (size_t)n * rows, what);
    float *want = malloc((size_t)n * rows * 4);
    double *tol = malloc((size_t)n * rows * sizeof *tol);
    for (uint32_t r = 0; r < rows; r++) {
        const float *xr = xf + (size_t)r * n;
        float ss = 0;
        for (uint32_t i = 0; i < n; i++) ss += xr[i] * xr[i];
        float scale = 1.0f / sqrtf(ss / (float)n + eps);
        for (uint32_t i = 0; i < n; i++) {
            want[(size_t)r * n + i] = (xr[i] * scale) * wf[i];
            /* ss (positive terms) differs by <= 2n * 2^-24 relative; the scale by half
             * that plus a few roundings (mean, sqrt, divide, two products) */
            tol[(size_t)r * n + i] = (n + 8) * ldexp(1.0, -24) * fabs(want[(size_t)r * n + i]);
        }
    }
    check16(t, y, want, tol, (size_t)n * rows, what);
    d->ops->release(d, bx), d->ops->release(d, bw), d->ops->release(d, by);
    free(x), free(w), free(xf), free(wf), free(y), free(want), free(tol);
    ir_kernel_destroy(k);
}

Test(kernels, rmsnorm_odd_sizes_with_guards) {
    const uint32_t sizes[] = {1, 7, 200, 1000, 4096, 4097};
    for (size_t v = 0; v < N_VARIANTS; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(1);
        for (size_t ti = 0; ti < 2; ti++)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
                rmsnorm_case(d, false, sizes[si], 3, dtypes[ti], variants[v]);
        d->ops->destroy(d);
    }
}

Test(kernels, rmsnorm_per_head) {
    const uint32_t dims[] = {1, 7, 64, 128, 256};
    for (size_t v = 0; v < N_VARIANTS; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(2);
        for (size_t ti = 0; ti < 2; ti++)
            for (size_t si = 0; si < sizeof dims / sizeof dims[0]; si++)
                rmsnorm_case(d, true, dims[si], 2 * 16 + 3, dtypes[ti], variants[v]); /* tokens x heads rows */
        d->ops->destroy(d);
    }
}

/* ---- matvec ------------------------------------------------------------------------------- */

/* The grid a matvec case launches: the kernel's full grid divided by div (at least 1),
 * as plan_tune may launch one smaller than the rows need (rows strided over the grid). */
static uint32_t shrunk(const rt_caps *c, uint32_t gx, uint32_t div) {
    return !kn_matvec_strided(c) ? gx : gx / div ? gx / div : 1;
}

static void matvec_case(rt_device *d, uint32_t rows, uint32_t cols, ir_scalar t, ir_scalar out, uint32_t div,
                        const char *var) {
    kiln_err err = {0};
    char what[160];
    uint32_t gx = 0;
    ir_kernel *k = kn_matvec(&d->caps, rows, cols, t, out, KN_EPI_NONE, &gx, &err);
    snprintf(what, sizeof what, "matvec %ux%u %s->%s grid %u of %u caps=%s", rows, cols, tu_dname(t),
             out == IR_F32 ? "f32" : tu_dname(t), shrunk(&d->caps, gx, div), gx, var ? var : "device");
    cr_assert_not_null(k, "%s: %s", what, err.msg);
    float *wf, *xf;
    uint16_t *w = tu_rand16(t, (size_t)rows * cols, -1, 1, &wf), *x = tu_rand16(t, cols, -2, 2, &xf);
    rt_buffer *bw = tu_vk_upload(d, w, (size_t)rows * cols * 2), *bx = tu_vk_upload(d, x, (size_t)cols * 2), *by;
    if (out == IR_F32) {
        float *p = malloc(((size_t)rows + GUARD) * 4);
        for (size_t i = 0; i < (size_t)rows + GUARD; i++) p[i] = NAN;
        by = tu_vk_upload(d, p, ((size_t)rows + GUARD) * 4);
        free(p);
    } else {
        by = poisoned16(d, t, rows);
    }
    rt_arg args[3] = {{bw, 0}, {bx, 0}, {by, 0}};
    launch(d, k, shrunk(&d->caps, gx, div), 1, args, 3);
    float *want = malloc((size_t)rows * 4);
    double *tol = malloc((size_t)rows * sizeof *tol);
    for (uint32_t r = 0; r < rows; r++) {
        float s = 0;
        double mag = 0;
        for (uint32_t c = 0; c < cols; c++) {
            float p = wf[(size_t)r * cols + c] * xf[c]; /* exact */
            s += p;
            mag += fabs(p);
        }
        want[r] = s;
        tol[r] = 2.0 * cols * ldexp(1.0, -24) * mag; /* two summation orders */
    }
    if (out == IR_F32) {
        float *y = malloc(((size_t)rows + GUARD) * 4);
        tu_vk_download(d, by, y, ((size_t)rows + GUARD) * 4);
        for (uint32_t r = 0; r < rows; r++)
            cr_assert(fabs((double)y[r] - want[r]) <= tol[r], "%s: [%u] %.9g != %.9g (tol %.3g)", what, r, y[r],
                      want[r], tol[r]);
        for (size_t i = rows; i < (size_t)rows + GUARD; i++)
            cr_assert(isnan(y[i]), "%s: wrote past the end at %zu", what, i);
        free(y);
    } else {
        uint16_t *y = fetch16(d, by, t, rows, what);
        check16(t, y, want, tol, rows, what);
        free(y);
    }
    d->ops->release(d, bw), d->ops->release(d, bx), d->ops->release(d, by);
    free(w), free(x), free(wf), free(xf), free(want), free(tol);
    ir_kernel_destroy(k);
}

Test(kernels, matvec_odd_shapes_with_guards) {
    /* the last two: short rows a CUDA subgroup takes four and two at a time (132 SMs) */
    const uint32_t shapes[][2] = {{1, 1},   {7, 200}, {200, 7}, {1000, 4097}, {4097, 1000}, {33, 4096}, {65, 2},
                                  {16384, 512}, {8448, 1536}};
    for (size_t v = 0; v < N_VARIANTS; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(3);
        for (size_t ti = 0; ti < 2; ti++)
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                matvec_case(d, shapes[si][0], shapes[si][1], dtypes[ti], dtypes[ti], 1, variants[v]);
                matvec_case(d, shapes[si][0], shapes[si][1], dtypes[ti], IR_F32, 3, variants[v]);
            }
        d->ops->destroy(d);
    }
}

/* The fused epilogues: the bias before the rounding, the residual after it (and a second
 * rounding), SwiGLU over a gate row and an up row. The reference rounds at the same
 * points; a device sum within tol of the exact one can round to the neighbouring 16-bit
 * value, which the later steps carry: the tolerance follows each rounding. */
static void matvec_epi_case(rt_device *d, uint32_t rows, uint32_t cols, ir_scalar t, unsigned epi, const char *var) {
    kiln_err err = {0};
    char what[160];
    snprintf(what, sizeof what, "matvec epi %u %ux%u %s caps=%s", epi, rows, cols, tu_dname(t), var ? var : "device");
    uint32_t gx = 0, wrows = epi & KN_EPI_SWIGLU ? 2 * rows : rows; /* the up weight after the gate's */
    ir_kernel *k = kn_matvec(&d->caps, rows, cols, t, t, epi, &gx, &err);
    cr_assert_not_null(k, "%s: %s", what, err.msg);
    float *wf, *xf, *bf, *rf;
    uint16_t *w = tu_rand16(t, (size_t)wrows * cols, -1, 1, &wf), *x = tu_rand16(t, cols, -2, 2, &xf);
    uint16_t *b = tu_rand16(t, rows, -3, 3, &bf), *res = tu_rand16(t, rows, -8, 8, &rf);
    rt_buffer *bw = tu_vk_upload(d, w, (size_t)wrows * cols * 2), *bx = tu_vk_upload(d, x, (size_t)cols * 2);
    rt_buffer *bb = tu_vk_upload(d, b, (size_t)rows * 2), *br = tu_vk_upload(d, res, (size_t)rows * 2);
    rt_buffer *by = poisoned16(d, t, rows);
    rt_buffer *bu = epi & KN_EPI_SWIGLU ? tu_vk_upload(d, w + (size_t)rows * cols, (size_t)rows * cols * 2) : NULL;
    rt_arg args[5] = {{bw, 0}, {bx, 0}, {by, 0}};
    uint32_t na = 3;
    if (epi & KN_EPI_BIAS) args[na++] = (rt_arg){bb, 0};
    if (epi & KN_EPI_RESIDUAL) args[na++] = (rt_arg){br, 0};
    if (bu) args[na++] = (rt_arg){bu, 0};
    launch(d, k, gx, 1, args, na);
    uint16_t *y = fetch16(d, by, t, rows, what);
    for (uint32_t r = 0; r < rows; r++) {
        double tol[2];
        float sum[2];
        for (uint32_t h = 0; h < (epi & KN_EPI_SWIGLU ? 2u : 1u); h++) {
            float s = 0;
            double mag = 0;
            for (uint32_t c = 0; c < cols; c++) {
                float p = wf[((size_t)r + h * rows) * cols + c] * xf[c];
                s += p, mag += fabs(p);
            }
            sum[h] = s, tol[h] = 2.0 * cols * ldexp(1.0, -24) * mag;
        }
        double got = tu_from16(t, y[r]), want, tl;
        if (epi & KN_EPI_SWIGLU) {
            float g = tu_from16(t, tu_to16(t, sum[0])), u = tu_from16(t, tu_to16(t, sum[1]));
            want = g / (1.0f + expf(-g)) * u;
            double dg = tol[0] + tu_ulp16(t, fabs(g) + tol[0]), du = tol[1] + tu_ulp16(t, fabs(u) + tol[1]);
            /* |silu'| <= 1.1; exp carries 3 + 2|g| ulp through divide and multiply */
            tl = 1.1 * dg * (fabs(u) + du) + (fabs(g) + dg) * du + (7 + 2 * fabs(g)) * ldexp(1.0, -23) * fabs(want);
        } else {
            float s = epi & KN_EPI_BIAS ? sum[0] + bf[r] : sum[0];
            tl = tol[0] + ldexp(1.0, -23) * fabs(s);
            want = s;
            if (epi & KN_EPI_RESIDUAL) {
                float r16 = tu_from16(t, tu_to16(t, s));
                tl += tu_ulp16(t, fabs(s) + tl);
                want = r16 + rf[r];
            }
        }
        tl += tu_ulp16(t, fmax(fabs(want), fabs(got)));
        cr_assert(fabs(got - want) <= tl, "%s: [%u] %.9g != %.9g (tol %.3g)", what, r, got, want, tl);
    }
    d->ops->release(d, bw), d->ops->release(d, bx), d->ops->release(d, bb), d->ops->release(d, br);
    d->ops->release(d, by);
    if (bu) d->ops->release(d, bu);
    free(w), free(x), free(b), free(res), free(wf), free(xf), free(bf), free(rf), free(y);
    ir_kernel_destroy(k);
}

Test(kernels, matvec_epilogues_odd_shapes_with_guards) {
    const uint32_t shapes[][2] = {{1, 1}, {7, 200}, {200, 7}, {1000, 1001}, {65, 2}};
    const unsigned epis[] = {KN_EPI_BIAS, KN_EPI_RESIDUAL, KN_EPI_BIAS | KN_EPI_RESIDUAL, KN_EPI_SWIGLU};
    for (size_t v = 0; v < N_VARIANTS; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(4);
        for (size_t ti = 0; ti < 2; ti++)
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
                for (size_t e = 0; e < sizeof epis / sizeof epis[0]; e++)
                    matvec_epi_case(d, shapes[si][0], shapes[si][1], dtypes[ti], epis[e], variants[v]);
        d->ops->destroy(d);
    }
}

/* The norm fused in front of the product: h = round((x * scale) * wn) in every workgroup,
 * then the dot products. The reference follows the oracle (f32 sum of squares in order);
 * the device's sum in another order moves the scale by a few ulps, which can round an h
 * that lies that close to a rounding boundary the other way: those h_i add |w_i| times an
 * ulp to the bound, the others nothing. */
static void matvec_norm_case(rt_device *d, uint32_t rows, uint32_t cols, ir_scalar t, ir_scalar out, unsigned epi,
                             uint32_t div, const char *var) {
    kiln_err err = {0};
    char what[192];
    uint32_t gx = 0;
    const float eps = 1e-5f;
    ir_kernel *k = kn_matvec_norm(&d->caps, rows, cols, t, out, epi, eps, &gx, &err);
    snprintf(what, sizeof what, "matvec_norm epi %u %ux%u %s->%s grid %u of %u caps=%s", epi, rows, cols, tu_dname(t),
             out == IR_F32 ? "f32" : tu_dname(t), shrunk(&d->caps, gx, div), gx, var ? var : "device");
    cr_assert_not_null(k, "%s: %s", what, err.msg);
    float *wf, *xf, *nf, *rf;
    uint16_t *w = tu_rand16(t, (size_t)rows * cols, -1, 1, &wf), *x = tu_rand16(t, cols, -3, 3, &xf);
    uint16_t *wn = tu_rand16(t, cols, 0.5f, 1.5f, &nf), *res = tu_rand16(t, rows, -8, 8, &rf);
    rt_buffer *bw = tu_vk_upload(d, w, (size_t)rows * cols * 2), *bx = tu_vk_upload(d, x, (size_t)cols * 2);
    rt_buffer *bn = tu_vk_upload(d, wn, (size_t)cols * 2), *br = tu_vk_upload(d, res, (size_t)rows * 2), *by;
    size_t ob = out == IR_F32 ? 4 : 2;
    if (out == IR_F32) {
        float *p = malloc(((size_t)rows + GUARD) * 4);
        for (size_t i = 0; i < (size_t)rows + GUARD; i++) p[i] = NAN;
        by = tu_vk_upload(d, p, ((size_t)rows + GUARD) * 4);
        free(p);
    } else {
        by = poisoned16(d, t, rows);
    }
    rt_arg args[5] = {{bw, 0}, {bx, 0}, {by, 0}};
    uint32_t na = 3;
    if (epi & KN_EPI_RESIDUAL) args[na++] = (rt_arg){br, 0};
    args[na++] = (rt_arg){bn, 0};
    launch(d, k, shrunk(&d->caps, gx, div), 1, args, na);
    /* the oracle's norm */
    float ss = 0;
    for (uint32_t c = 0; c < cols; c++) ss += xf[c] * xf[c];
    float scale = 1.0f / sqrtf(ss / (float)cols + eps);
    float *h = malloc((size_t)cols * 4);
    double *hflip = malloc((size_t)cols * sizeof *hflip);
    for (uint32_t c = 0; c < cols; c++) {
        float u = xf[c] * scale * nf[c];
        h[c] = tu_from16(t, tu_to16(t, u));
        double dl = (2.0 * cols + 8) * ldexp(1.0, -24) * fabs(u);
        bool may_flip = tu_to16(t, (float)(u - dl)) != tu_to16(t, (float)(u + dl));
        hflip[c] = may_flip ? tu_ulp16(t, fabs(u) + dl) : 0.0;
    }
    float *y = malloc(((size_t)rows + GUARD) * ob);
    tu_vk_download(d, by, y, ((size_t)rows + GUARD) * ob);
    for (uint32_t r = 0; r < rows; r++) {
        float s = 0;
        double mag = 0, flip = 0;
        for (uint32_t c = 0; c < cols; c++) {
            float p = wf[(size_t)r * cols + c] * h[c];
            s += p, mag += fabs(p), flip += fabs(wf[(size_t)r * cols + c]) * hflip[c];
        }
        double tl = 2.0 * cols * ldexp(1.0, -24) * mag + flip, want = s, got;
        if (out == IR_F32) {
            got = y[r];
        } else {
            got = tu_from16(t, ((uint16_t *)y)[r]);
            if (epi & KN_EPI_RESIDUAL) {
                tl += tu_ulp16(t, fabs(s) + tl);
                want = tu_from16(t, tu_to16(t, s)) + rf[r];
            }
            tl += tu_ulp16(t, fmax(fabs(want), fabs(got)));
        }
        cr_assert(fabs(got - want) <= tl, "%s: [%u] %.9g != %.9g (tol %.3g)", what, r, got, want, tl);
    }
    if (out == IR_F32)
        for (size_t i = rows; i < (size_t)rows + GUARD; i++) cr_assert(isnan(y[i]), "%s: wrote past the end", what);
    else
        for (size_t i = rows; i < (size_t)rows + GUARD; i++)
            cr_assert_eq(((uint16_t *)y)[i], tu_nan16(t), "%s: wrote past the end", what);
    d->ops->release(d, bw), d->ops->release(d, bx), d->ops->release(d, bn), d->ops->release(d, br);
    d->ops->release(d, by);
    free(w), free(x), free(wn), free(res), free(wf), free(xf), free(nf), free(rf), free(h), free(hflip), free(y);
    ir_kernel_destroy(k);
}

Test(kernels, matvec_norm_odd_shapes_with_guards) {
    const uint32_t shapes[][2] = {{1, 1}, {7, 200}, {200, 7}, {1000, 1001}, {65, 2}, {33, 3072}, {8448, 1024}};
    for (size_t v = 0; v < N_VARIANTS; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(5);
        for (size_t ti = 0; ti < 2; ti++)
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                matvec_norm_case(d, shapes[si][0], shapes[si][1], dtypes[ti], dtypes[ti], KN_EPI_NONE, 1, variants[v]);
                matvec_norm_case(d, shapes[si][0], shapes[si][1], dtypes[ti], IR_F32, KN_EPI_NONE, 3, variants[v]);
                /* one workgroup for all the rows */
                matvec_norm_case(d, shapes[si][0], shapes[si][1], dtypes[ti], dtypes[ti], KN_EPI_RESIDUAL, UINT32_MAX,
                                 variants[v]);
            }
        d->ops->destroy(d);
    }
}

/* ---- add, swiglu ---------------------------------------------------------------------------- */

static void eltwise_case(rt_device *d, bool swiglu, uint32_t n, ir_scalar t, const char *var) {
    kiln_err err = {0};
    char what[128];
    snprintf(what, sizeof what, "%s n=%u %s caps=%s", swiglu ? "swiglu" : "add", n, tu_dname(t), var ? var : "device");
    uint32_t gx = 0;
    ir_kernel *k = swiglu ? kn_swiglu(&d->caps, n, t, &gx, &err) : kn_add(&d->caps, n, t, &gx, &err);
    cr_assert_not_null(k, "%s: %s", what, err.msg);
    float *af, *bf;
    uint16_t *a = tu_rand16(t, n, -8, 8, &af), *b = tu_rand16(t, n, -4, 4, &bf);
    rt_buffer *ba = tu_vk_upload(d, a, (size_t)n * 2), *bb = tu_vk_upload(d, b, (size_t)n * 2),
              *bo = poisoned16(d, t, n);
    rt_arg args[3] = {{ba, 0}, {bb, 0}, {bo, 0}};
    launch(d, k, gx, 1, args, 3);
    uint16_t *o = fetch16(d, bo, t, n, what);
    for (uint32_t i = 0; i < n; i++) {
        if (!swiglu) { /* one f32 add, one rounding: bit for bit */
            cr_assert_eq(o[i], tu_to16(t, af[i] + bf[i]), "%s: [%u] %#x != %#x", what, i, o[i],
                         tu_to16(t, af[i] + bf[i]));
            continue;
        }
        float want = af[i] / (1.0f + expf(-af[i])) * bf[i];
        /* the device's exp (3 + 2|x| ulp) carries through divide and multiply */
        double tol = (3 + 2 * fabs(af[i]) + 4) * ldexp(1.0, -23) * fabs(want) +
                     tu_ulp16(t, fmax(fabs(want), fabs(tu_from16(t, o[i]))));
        cr_assert(fabs(tu_from16(t, o[i]) - want) <= tol, "%s: [%u] %.9g != %.9g", what, i, tu_from16(t, o[i]), want);
    }
    d->ops->release(d, ba), d->ops->release(d, bb), d->ops->release(d, bo);
    free(a), free(b), free(af), free(bf), free(o);
    ir_kernel_destroy(k);
}

Test(kernels, add_and_swiglu_odd_sizes_with_guards) {
    const uint32_t sizes[] = {1, 7, 200, 1000, 4096, 4097, 6 * 4096 + 2};
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(4);
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            eltwise_case(d, false, sizes[si], dtypes[ti], NULL);
            eltwise_case(d, true, sizes[si], dtypes[ti], NULL);
        }
    d->ops->destroy(d);
}

/* ---- rope ------------------------------------------------------------------------------------ */

/* The oracle's rope (oracle/forward.c) on one head, in f32. */
static void rope_ref(float *x, uint32_t n_rot, bool neox, float base, uint32_t pos) {
    uint32_t half = n_rot / 2;
    float theta_scale = powf(base, -2.0f / (float)n_rot), theta = (float)pos;
    for (uint32_t i = 0; i < half; i++, theta *= theta_scale) {
        float c = cosf(theta), s = sinf(theta);
        uint32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

static void rope_case(rt_device *d, uint32_t heads, uint32_t hd, uint32_t n_rot, bool neox, float base, uint32_t pos0,
                      uint32_t tokens, ir_scalar t) {
    kiln_err err = {0};
    char what[160];
    snprintf(what, sizeof what, "rope heads=%u hd=%u rot=%u %s pos=%u+%u %s", heads, hd, n_rot, neox ? "neox" : "norm",
             pos0, tokens, tu_dname(t));
    uint32_t gx = 0;
    ir_kernel *k = kn_rope(&d->caps, heads, hd, n_rot, neox, base, t, &gx, &err);
    cr_assert_not_null(k, "%s: %s", what, err.msg);
    size_t n = (size_t)tokens * heads * hd;
    float *xf;
    uint16_t *x = tu_rand16(t, n, -4, 4, &xf);
    /* the kernel works in place: the guard after x must stay poisoned */
    uint16_t *buf = malloc((n + GUARD) * 2);
    memcpy(buf, x, n * 2);
    for (size_t i = n; i < n + GUARD; i++) buf[i] = tu_nan16(t);
    rt_buffer *bx = tu_vk_upload(d, buf, (n + GUARD) * 2), *bp = tu_vk_upload(d, &pos0, 4);
    rt_arg args[2] = {{bx, 0}, {bp, 0}};
    launch(d, k, gx, tokens, args, 2);
    uint16_t *y = fetch16(d, bx, t, n, what);
    float *want = malloc(n * 4);
    double *tol = malloc(n * sizeof *tol);
    memcpy(want, xf, n * 4);
    for (uint32_t tk = 0; tk < tokens; tk++)
        for (uint32_t h = 0; h < heads; h++) {
            size_t row = ((size_t)tk * heads + h) * hd;
            rope_ref(want + row, n_rot, neox, base, pos0 + tk);
            for (uint32_t i = 0; i < hd; i++) tol[row + i] = 0; /* untouched dims: exact */
            float theta = (float)(pos0 + tk), theta_scale = powf(base, -2.0f / (float)n_rot);
            for (uint32_t i = 0; i < n_rot / 2; i++, theta *= theta_scale) {
                uint32_t a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
                /* device sin/cos: 2^-11 absolute each (Vulkan), after an exact-enough reduction;
                 * and the angle itself: a driver may round the chain of f32 products in another
                 * order (NVIDIA's does), a few ulps of theta, which is thousands of radians at
                 * large positions */
                double ulp = theta > 0 ? ldexp(1.0, ilogbf(theta) - 23) : 0;
                tol[row + a] = tol[row + b] = (ldexp(1.0, -11) + 4 * ulp) * (fabs(xf[row + a]) + fabs(xf[row + b]));
            }
        }
    check16(t, y, want, tol, n, what);
    for (size_t i = 0; i < n; i++)
        if (tol[i] == 0) cr_assert_eq(y[i], x[i], "%s: [%zu] outside n_rot changed", what, i);
    d->ops->release(d, bx), d->ops->release(d, bp);
    free(x), free(xf), free(buf), free(y), free(want), free(tol);
    ir_kernel_destroy(k);
}

Test(kernels, rope_positions_and_layouts) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(5);
    const uint32_t pos[] = {0, 1, 7, 1000, 4097, 32767};
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t pi = 0; pi < sizeof pos / sizeof pos[0]; pi++) {
            rope_case(d, 32, 128, 128, false, 10000.0f, pos[pi], 1, dtypes[ti]); /* llama */
            rope_case(d, 14, 64, 64, true, 1000000.0f, pos[pi], 3, dtypes[ti]);  /* qwen2: neox, 3 tokens */
            rope_case(d, 7, 80, 32, true, 10000.0f, pos[pi], 2, dtypes[ti]);     /* partial rotation */
            rope_case(d, 1, 2, 2, false, 500000.0f, pos[pi], 1, dtypes[ti]);     /* one pair */
        }
    d->ops->destroy(d);
}

/* A recorded launch replays with a new position from the pos buffer. */
Test(kernels, rope_replays_with_new_position) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    kiln_err err = {0};
    uint32_t gx = 0, heads = 4, hd = 16;
    ir_kernel *k = kn_rope(&d->caps, heads, hd, hd, true, 10000.0f, IR_F16, &gx, &err);
    cr_assert_not_null(k, "%s", err.msg);
    rt_kernel *ck = d->ops->compile(d, k, NULL, &err);
    cr_assert_not_null(ck, "%s", err.msg);
    uint16_t ones[64];
    for (int i = 0; i < 64; i++) ones[i] = gguf_f32_to_f16(1.0f);
    uint32_t p = 0;
    rt_buffer *bx = tu_vk_upload(d, ones, sizeof ones), *bp = tu_vk_upload(d, &p, 4);
    rt_arg args[2] = {{bx, 0}, {bp, 0}};
    rt_launch l = {ck, {gx, 1, 1}, args, 2};
    rt_recording *rec = d->ops->record(d, &l, 1, &err);
    cr_assert_not_null(rec, "%s", err.msg);
    for (uint32_t step = 0; step < 3; step++) {
        p = 10 + step;
        cr_assert_eq(d->ops->upload(d, bx, 0, ones, sizeof ones, &err), 0);
        cr_assert_eq(d->ops->upload(d, bp, 0, &p, 4, &err), 0);
        cr_assert_eq(d->ops->replay(d, rec, &err), 0, "%s", err.msg);
        uint16_t y[64];
        tu_vk_download(d, bx, y, sizeof y);
        float want[16];
        for (int i = 0; i < 16; i++) want[i] = 1.0f;
        rope_ref(want, hd, true, 10000.0f, p);
        for (int i = 0; i < 16; i++)
            cr_assert(fabs(gguf_f16_to_f32(y[i]) - want[i]) <= tu_ulp16(IR_F16, want[i]) + ldexp(1.0, -10),
                      "pos %u [%d]: %g != %g", p, i, gguf_f16_to_f32(y[i]), want[i]);
    }
    d->ops->release_recording(d, rec);
    d->ops->release(d, bx), d->ops->release(d, bp);
    d->ops->release_kernel(d, ck);
    ir_kernel_destroy(k);
    d->ops->destroy(d);
}

/* ---- argmax ---------------------------------------------------------------------------------- */

static void argmax_case(rt_device *d, uint32_t n, int pattern, const char *var) {
    kiln_err err = {0};
    ir_kernel *k = kn_argmax(&d->caps, n, &err);
    cr_assert_not_null(k, "%s", err.msg);
    float *lg = malloc((size_t)n * 4);
    for (uint32_t i = 0; i < n; i++) {
        switch (pattern) {
        case 0: lg[i] = tu_urand(-20, 20); break;
        case 1: lg[i] = (float)(int)tu_urand(0, 4); break; /* many ties */
        case 2: lg[i] = -INFINITY; break;                  /* all equal: index 0 */
        case 3: lg[i] = 3.0f; break;
        case 4: lg[i] = i % 3 ? tu_urand(-5, 5) : NAN; break; /* NaN among them, the first too */
        default: lg[i] = i % 2 ? -INFINITY : NAN; break;      /* nothing but -inf and NaN */
        }
    }
    if (pattern == 1 && n > 10) lg[n - 1] = lg[n / 2] = 3.0f; /* the max tied late */
    /* the host's greedy pick, and the max it found */
    int32_t want = samp_argmax(lg, n);
    float wmax = want >= 0 ? lg[want] : -INFINITY;
    if (want < 0) want = 0; /* the kernel's index when nothing beats -inf: the first */
    uint32_t poison[2 + GUARD];
    for (int i = 0; i < 2 + GUARD; i++) poison[i] = 0xdeadbeef;
    rt_buffer *bl = tu_vk_upload(d, lg, (size_t)n * 4), *bo = tu_vk_upload(d, poison, sizeof poison);
    rt_arg args[2] = {{bl, 0}, {bo, 0}};
    launch(d, k, 1, 1, args, 2);
    uint32_t got[2 + GUARD];
    tu_vk_download(d, bo, got, sizeof got);
    float gmax;
    memcpy(&gmax, &got[1], 4);
    cr_assert_eq(got[0], (uint32_t)want, "argmax n=%u pattern %d caps=%s: %u != %d", n, pattern, var ? var : "device",
                 got[0], want);
    cr_assert(gmax == wmax, "argmax n=%u pattern %d: max %g != %g", n, pattern, gmax, wmax);
    for (int i = 2; i < 2 + GUARD; i++) cr_assert_eq(got[i], 0xdeadbeef, "argmax wrote past the end");
    d->ops->release(d, bl), d->ops->release(d, bo);
    free(lg);
    ir_kernel_destroy(k);
}

Test(kernels, argmax_ties_to_lowest_index) {
    /* the vector steps, the vectors past them and the elements past the vectors, each alone and together */
    const uint32_t sizes[] = {1, 7, 200, 1000, 4097, 32770, 40003, 151936};
    for (size_t v = 0; v < N_VARIANTS; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(6);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int pat = 0; pat < 6; pat++) argmax_case(d, sizes[si], pat, variants[v]);
        d->ops->destroy(d);
    }
}

/* kn_argmax_rows (masked: kn_argmax_masked): each row its own pattern (row r: pattern r %
 * 6) and, masked, its own mask (none, all, or a random half, in turn); the host's pick per
 * row over the allowed entries, outputs past the rows poisoned. n % 4 != 0 takes the
 * scalar walk (rows start unaligned). */
static void argmax_rows_case(rt_device *d, uint32_t n, uint32_t rows, bool masked) {
    kiln_err err = {0};
    ir_kernel *k = (masked ? kn_argmax_masked : kn_argmax_rows)(&d->caps, n, rows, &err);
    cr_assert_not_null(k, "%s", err.msg);
    uint32_t words = (n + 31) / 32;
    float *lg = malloc((size_t)n * rows * 4), *row_m = malloc((size_t)n * 4);
    uint32_t *allow = malloc((size_t)words * rows * 4);
    for (uint32_t r = 0; r < rows; r++) {
        for (uint32_t i = 0; i < n; i++) {
            float *v = &lg[(size_t)r * n + i];
            switch (r % 6) {
            case 0: *v = tu_urand(-20, 20); break;
            case 1: *v = (float)(int)tu_urand(0, 4); break;
            case 2: *v = -INFINITY; break;
            case 3: *v = i == n - 1 ? 9.0f : 3.0f; break; /* the last one */
            case 4: *v = i % 3 ? tu_urand(-5, 5) : NAN; break;
            default: *v = i % 2 ? -INFINITY : NAN; break;
            }
        }
        for (uint32_t w = 0; w < words; w++) {
            uint32_t kind = (r / 2) % 3; /* rows in pairs: all, a random half, none */
            allow[(size_t)r * words + w] = kind == 0 ? ~0u : kind == 2 ? 0u : (uint32_t)(tu_urand(0, 1) * 4294967295.0);
        }
    }
    size_t out_words = 2 * (size_t)rows + GUARD;
    uint32_t *poison = malloc(out_words * 4), *got = malloc(out_words * 4);
    for (size_t i = 0; i < out_words; i++) poison[i] = 0xdeadbeef;
    rt_buffer *bl = tu_vk_upload(d, lg, (size_t)n * rows * 4), *bo = tu_vk_upload(d, poison, out_words * 4);
    rt_buffer *ba = tu_vk_upload(d, allow, (size_t)words * rows * 4);
    rt_arg args[3] = {{bl, 0}, {bo, 0}, {ba, 0}};
    launch(d, k, 1, rows, args, masked ? 3 : 2);
    tu_vk_download(d, bo, got, out_words * 4);
    for (uint32_t r = 0; r < rows; r++) {
        /* the host's pick over the allowed entries: the others as if absent */
        const float *row = lg + (size_t)r * n;
        int32_t want = -1, first_allowed = -1;
        for (uint32_t i = 0; i < n; i++) {
            bool ok = !masked || (allow[(size_t)r * words + i / 32] >> (i % 32) & 1);
            row_m[i] = ok ? row[i] : NAN;
            if (ok && first_allowed < 0) first_allowed = (int32_t)i;
        }
        want = samp_argmax(row_m, n);
        float wmax = want >= 0 ? row_m[want] : -INFINITY, gmax;
        uint32_t want_i = want >= 0 ? (uint32_t)want : first_allowed >= 0 ? (uint32_t)first_allowed : UINT32_MAX;
        memcpy(&gmax, &got[2 * r + 1], 4);
        cr_assert_eq(got[2 * r], want_i, "argmax n=%u row %u/%u%s: %u != %u", n, r, rows, masked ? " masked" : "",
                     got[2 * r], want_i);
        cr_assert(gmax == wmax, "argmax n=%u row %u: max %g != %g", n, r, gmax, wmax);
    }
    for (size_t i = 2 * (size_t)rows; i < out_words; i++) cr_assert_eq(got[i], 0xdeadbeef, "argmax wrote past the end");
    d->ops->release(d, bl), d->ops->release(d, bo), d->ops->release(d, ba);
    free(lg), free(row_m), free(allow), free(poison), free(got);
    ir_kernel_destroy(k);
}

Test(kernels, argmax_rows_each_its_own) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(61);
    const uint32_t shapes[][2] = {{1, 1}, {7, 6}, {1000, 7}, {4097, 3}, {512, 64}, {32770, 2}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int m = 0; m < 2; m++) argmax_rows_case(d, shapes[i][0], shapes[i][1], m);
    kiln_err err = {0};
    cr_assert_null(kn_argmax_rows(&d->caps, 16, 0, &err));
    cr_assert_null(kn_argmax_rows(&d->caps, 1u << 20, 1u << 13, &err), "u32 indices");
    cr_assert_null(kn_argmax_masked(&d->caps, 0, 2, &err));
    d->ops->destroy(d);
}

/* ---- embed ----------------------------------------------------------------------------------- */

Test(kernels, embed_rows_and_bad_tokens) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    kiln_err err = {0};
    tu_seed(7);
    const uint32_t dims[][2] = {{1, 1}, {5, 7}, {100, 200}, {3, 4097}, {17, 4096}};
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t si = 0; si < sizeof dims / sizeof dims[0]; si++) {
            ir_scalar t = dtypes[ti];
            uint32_t nv = dims[si][0], ne = dims[si][1], gx = 0;
            ir_kernel *k = kn_embed(&d->caps, nv, ne, t, &gx, &err);
            cr_assert_not_null(k, "%s", err.msg);
            float *tf;
            uint16_t *tab = tu_rand16(t, (size_t)nv * ne, -1, 1, &tf);
            rt_buffer *bt = tu_vk_upload(d, tab, (size_t)nv * ne * 2);
            /* 1 << 20 times 4096 wraps to row 0 in u32: it must still read as a bad token */
            const uint32_t toks[] = {0, nv - 1, nv / 2, nv, 0xffffffffu, 1u << 20};
            const uint32_t nt = sizeof toks / sizeof toks[0];
            /* all tokens in one launch, one per grid row, as a prefill block runs it */
            rt_buffer *bk = tu_vk_upload(d, toks, sizeof toks), *bo = poisoned16(d, t, (size_t)nt * ne);
            rt_arg args[3] = {{bt, 0}, {bk, 0}, {bo, 0}};
            launch(d, k, gx, nt, args, 3);
            uint16_t *o = fetch16(d, bo, t, (size_t)nt * ne, "embed");
            for (uint32_t q = 0; q < nt; q++)
                for (uint32_t c = 0; c < ne; c++) {
                    uint16_t want = toks[q] < nv ? tab[(size_t)toks[q] * ne + c] : 0;
                    cr_assert_eq(o[(size_t)q * ne + c], want, "embed %ux%u %s token %u [%u]: %#x != %#x", nv, ne,
                                 tu_dname(t), toks[q], c, o[(size_t)q * ne + c], want);
                }
            free(o);
            d->ops->release(d, bk), d->ops->release(d, bo);
            /* the last row of a block of n rows of the same table, n from info[1] */
            ir_kernel *tl = kn_take_last(&d->caps, ne, nv, t, &gx, &err);
            cr_assert_not_null(tl, "%s", err.msg);
            const uint32_t ns[] = {1, nv, nv / 2 + 1, 0, nv + 1};
            for (size_t q = 0; q < sizeof ns / sizeof ns[0]; q++) {
                uint32_t info[2] = {9, ns[q]};
                rt_buffer *bi = tu_vk_upload(d, info, 8), *bl = poisoned16(d, t, ne);
                rt_arg la[3] = {{bt, 0}, {bi, 0}, {bl, 0}};
                launch(d, tl, gx, 1, la, 3);
                uint16_t *ol = fetch16(d, bl, t, ne, "take_last");
                for (uint32_t c = 0; c < ne; c++) {
                    uint16_t want = ns[q] >= 1 && ns[q] <= nv ? tab[(size_t)(ns[q] - 1) * ne + c] : 0;
                    cr_assert_eq(ol[c], want, "take_last %ux%u n %u [%u]", nv, ne, ns[q], c);
                }
                free(ol);
                d->ops->release(d, bi), d->ops->release(d, bl);
            }
            ir_kernel_destroy(tl);
            d->ops->release(d, bt);
            free(tab), free(tf);
            ir_kernel_destroy(k);
        }
    d->ops->destroy(d);
}

/* The step's inputs from host-mapped buffers into device ones: n_tok words and the two
 * of info, nothing past either (guards), at odd counts and more than a workgroup. */
Test(kernels, stage_inputs_copy_exactly_with_guards) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    kiln_err err = {0};
    const uint32_t ns[] = {1, 7, 255, 256, 257, 1000};
    for (size_t q = 0; q < sizeof ns / sizeof ns[0]; q++) {
        uint32_t n = ns[q], gx = 0;
        ir_kernel *k = kn_stage_inputs(&d->caps, n, &gx, &err);
        cr_assert_not_null(k, "%s", err.msg);
        uint32_t *src = malloc((n + GUARD) * 4), *got = malloc((n + GUARD) * 4), *poison = malloc((n + GUARD) * 4);
        cr_assert(src && got && poison);
        for (uint32_t i = 0; i < n + GUARD; i++) src[i] = tu_rnd32(), poison[i] = 0xdeadbeefu;
        uint32_t info[2] = {tu_rnd32(), tu_rnd32()}, ipoison[2 + GUARD], igot[2 + GUARD];
        for (uint32_t i = 0; i < 2 + GUARD; i++) ipoison[i] = 0xdeadbeefu;
        rt_buffer *th = d->ops->alloc_host(d, n * 4, &err), *ih = d->ops->alloc_host(d, 8, &err);
        cr_assert(th && ih, "%s", err.msg);
        cr_assert_eq(d->ops->upload(d, th, 0, src, n * 4, &err), 0, "%s", err.msg);
        cr_assert_eq(d->ops->upload(d, ih, 0, info, 8, &err), 0, "%s", err.msg);
        rt_buffer *td = tu_vk_upload(d, poison, (n + GUARD) * 4), *id = tu_vk_upload(d, ipoison, sizeof ipoison);
        rt_arg args[4] = {{th, 0}, {td, 0}, {ih, 0}, {id, 0}};
        launch(d, k, gx, 1, args, 4);
        tu_vk_download(d, td, got, (n + GUARD) * 4);
        tu_vk_download(d, id, igot, sizeof igot);
        for (uint32_t i = 0; i < n + GUARD; i++)
            cr_assert_eq(got[i], i < n ? src[i] : 0xdeadbeefu, "stage n=%u tok[%u]", n, i);
        for (uint32_t i = 0; i < 2 + GUARD; i++)
            cr_assert_eq(igot[i], i < 2 ? info[i] : 0xdeadbeefu, "stage n=%u info[%u]", n, i);
        d->ops->release(d, th), d->ops->release(d, ih), d->ops->release(d, td), d->ops->release(d, id);
        free(src), free(got), free(poison);
        ir_kernel_destroy(k);
    }
    uint32_t gx;
    cr_assert_null(kn_stage_inputs(&d->caps, 0, &gx, &err));
    d->ops->destroy(d);
}

/* ---- variants built for other devices, and refusals --------------------------------------------- */

Test(kernels, variants_build_for_min_and_h200_caps) {
    rt_caps cs[2];
    tu_caps_min(&cs[0]);
    tu_caps_h200(&cs[1]);
    kiln_err err = {0};
    for (int ci = 0; ci < 2; ci++)
        for (size_t ti = 0; ti < 2; ti++) {
            const rt_caps *c = &cs[ci];
            ir_scalar t = dtypes[ti];
            uint32_t gx;
            tu_emit_ok(kn_rmsnorm(c, 4097, t, 1e-5f, &err), c, err.msg, "rmsnorm");
            tu_emit_ok(kn_rmsnorm(c, 4096, t, 1e-5f, &err), c, err.msg, "rmsnorm");
            tu_emit_ok(kn_rmsnorm_heads(c, 128, t, 1e-6f, &err), c, err.msg, "rmsnorm_heads");
            tu_emit_ok(kn_matvec(c, 4097, 1000, t, t, KN_EPI_NONE, &gx, &err), c, err.msg, "matvec");
            tu_emit_ok(kn_matvec(c, 151936, 4096, t, IR_F32, KN_EPI_NONE, &gx, &err), c, err.msg, "matvec f32");
            tu_emit_ok(kn_matvec_norm(c, 151936, 1024, t, IR_F32, KN_EPI_NONE, 1e-6f, &gx, &err), c, err.msg,
                       "matvec short rows");
            tu_emit_ok(kn_add(c, 4097, t, &gx, &err), c, err.msg, "add");
            tu_emit_ok(kn_swiglu(c, 11008, t, &gx, &err), c, err.msg, "swiglu");
            tu_emit_ok(kn_rope(c, 28, 128, 128, true, 1e6f, t, &gx, &err), c, err.msg, "rope");
            tu_emit_ok(kn_argmax(c, 151936, &err), c, err.msg, "argmax");
            tu_emit_ok(kn_embed(c, 151936, 3584, t, &gx, &err), c, err.msg, "embed");
            uint32_t g2[2];
            tu_emit_ok(kn_ssm_conv(c, 6144, 4, 512, t, g2, &err), c, err.msg, "ssm_conv"); /* qwen3.5-0.8b's */
            tu_emit_ok(kn_deltanet(c, &(kn_deltanet_shape){16, 16, 128, 512}, t, 1e-6f, g2, &err), c, err.msg,
                       "deltanet");
        }
    /* the two matvec shapes of work: a few rows per workgroup with subgroups, one without */
    uint32_t g1 = 0, g2 = 0;
    ir_kernel *a = kn_matvec(&cs[1], 4096, 4096, IR_BF16, IR_BF16, KN_EPI_NONE, &g1, &err);
    ir_kernel *b = kn_matvec(&cs[0], 4096, 4096, IR_BF16, IR_BF16, KN_EPI_NONE, &g2, &err);
    cr_assert(a && b, "%s", err.msg);
    cr_assert_eq(g1, 4096 / 8, "256 invocations = 8 subgroups of 32 = 8 rows per workgroup");
    cr_assert_eq(g2, 4096);
    ir_kernel_destroy(a);
    ir_kernel_destroy(b);
}

Test(kernels, bad_shapes_and_caps_are_refused) {
    rt_caps c, plain;
    tu_caps_h200(&c);
    rt_caps_default(&plain, RT_VULKAN); /* no 16-bit buffers */
    kiln_err err = {0};
    uint32_t gx;
    err.msg[0] = 0;
    cr_assert_null(kn_rmsnorm(&c, 0, IR_BF16, 1e-5f, &err));
    cr_assert(strstr(err.msg, "bad shape"), "%s", err.msg);
    cr_assert_null(kn_rmsnorm(&c, 64, IR_F32, 1e-5f, &err));
    cr_assert(strstr(err.msg, "bf16 or f16"), "%s", err.msg);
    cr_assert_null(kn_rmsnorm(&c, 64, IR_BF16, NAN, &err));
    cr_assert_null(kn_rmsnorm(&plain, 64, IR_BF16, 1e-5f, &err));
    cr_assert(strstr(err.msg, "storage16"), "%s", err.msg);
    cr_assert_null(kn_matvec(&c, 0, 5, IR_F16, IR_F16, KN_EPI_NONE, &gx, &err));
    cr_assert_null(kn_matvec(&c, 100000, 100000, IR_F16, IR_F16, KN_EPI_NONE, &gx, &err));
    cr_assert(strstr(err.msg, "2^32"), "%s", err.msg);
    cr_assert_null(kn_matvec(&c, 5, 5, IR_F16, IR_BF16, KN_EPI_NONE, &gx, &err));
    cr_assert_null(kn_matvec(&c, 5, 5, IR_F16, IR_F32, KN_EPI_BIAS, &gx, &err), "no epilogue on f32 logits");
    cr_assert_null(kn_matvec(&c, 5, 5, IR_F16, IR_F16, KN_EPI_SWIGLU | KN_EPI_BIAS, &gx, &err));
    cr_assert_null(kn_matvec(&c, 5, 5, IR_F16, IR_F16, 8, &gx, &err), "unknown epilogue flag");
    cr_assert_null(kn_matvec_norm(&c, 5, 5, IR_F16, IR_F16, KN_EPI_NONE, -1.0f, &gx, &err), "bad eps");
    rt_caps small = c;
    small.shared_bytes = 16384;
    cr_assert_null(kn_matvec_norm(&small, 5, 4096, IR_F16, IR_F16, KN_EPI_NONE, 1e-6f, &gx, &err));
    cr_assert(strstr(err.msg, "workgroup memory"), "%s", err.msg);
    cr_assert_null(kn_add(&c, 0, IR_F16, &gx, &err));
    cr_assert_null(kn_swiglu(NULL, 8, IR_F16, &gx, &err));
    cr_assert_null(kn_rope(&c, 8, 64, 65, false, 1e4f, IR_BF16, &gx, &err));
    cr_assert_null(kn_rope(&c, 8, 64, 128, false, 1e4f, IR_BF16, &gx, &err));
    cr_assert_null(kn_rope(&c, 8, 64, 64, false, 0.0f, IR_BF16, &gx, &err));
    cr_assert_null(kn_argmax(&c, 0, &err));
    cr_assert_null(kn_embed(&c, 1u << 20, 1u << 12, IR_BF16, &gx, &err));
    cr_assert(strstr(err.msg, "bad shape"), "%s", err.msg);
}

/* ---- sin and cos of rope angles ---------------------------------------------------------- */

/* kn_sincos against the host's double sin/cos of the same f32 angle, over the angles rope
 * meets (0 to tens of thousands of radians): within 2^-22 absolute (two f32 ulps at 1:
 * the reduced angle's rounding and the polynomials'), where Vulkan's own sin/cos promise
 * only 2^-11. */
Test(kernels, sincos_is_accurate_over_rope_angles) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    kx k = {ir_kernel_create("sincos"), NULL};
    ir_buf a = kx_buffer(k, "a", IR_F32, IR_READ, 4097), o = kx_buffer(k, "o", IR_F32, IR_WRITE, 2 * 4097);
    const uint32_t n = 4097;
    kx_workgroup(k, 64);
    ir_val i = kx_global(k);
    ir_if *in = kx_if(k, kx_lt_c(k, i, n));
    ir_val s, c;
    kn_sincos(k, kx_load(k, a, i, 1), &s, &c);
    kx_store(k, o, kx_mul_c(k, i, 2), s);
    kx_store(k, o, kx_add_c(k, kx_mul_c(k, i, 2), 1), c);
    kx_end_if(k, in);
    kiln_err err = {0};
    cr_assert_eq(ir_verify(k.ir, &err), 0, "%s", err.msg);
    float *ang = malloc(n * 4), *out = malloc(2 * n * 4);
    tu_seed(11);
    for (uint32_t j = 0; j < n; j++)
        ang[j] = j < 64 ? (float)j * 0.7853981633974483f : j < 2048 ? tu_urand(-7, 7) : tu_urand(0, 40000);
    rt_buffer *ba = tu_vk_upload(d, ang, n * 4), *bo = tu_vk_upload(d, out, 2 * n * 4);
    rt_arg args[2] = {{ba, 0}, {bo, 0}};
    launch(d, k.ir, (n + 63) / 64, 1, args, 2);
    tu_vk_download(d, bo, out, 2 * n * 4);
    double worst = 0;
    for (uint32_t j = 0; j < n; j++) {
        double es = fabs(out[2 * j] - sin((double)ang[j])), ec = fabs(out[2 * j + 1] - cos((double)ang[j]));
        worst = fmax(worst, fmax(es, ec));
        cr_assert(es <= ldexp(1.0, -22) && ec <= ldexp(1.0, -22),
                  "angle %.9g: sin %.9g (%.3g off), cos %.9g (%.3g off)", ang[j], out[2 * j], es, out[2 * j + 1], ec);
    }
    cr_log_info("kn_sincos: worst absolute error %.3g over %u angles", worst, n);
    d->ops->release(d, ba), d->ops->release(d, bo);
    free(ang), free(out);
    ir_kernel_destroy(k.ir);
    d->ops->destroy(d);
}
