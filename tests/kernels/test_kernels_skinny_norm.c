/* kn_matmul_skinny_norm (kernels/matmul_skinny.c): the short block's RMSNorm inside its
 * skinny product, CUDA only. Built and assembled by ptxas for sm_80 and sm_90 at qwen3's
 * shapes on any machine; refused where the fragments are Vulkan's (opaque), the shape
 * does not tile or eps is bad; and, where the device has the kernel (CUDA:
 * KILN_TEST_DEVICE=cuda:0; lavapipe and Vulkan drivers skip), run against kn_rmsnorm then
 * kn_matmul_skinny on the same device.
 *
 * Tolerance against the two launches: the scale's f32 sum of squares runs in another order,
 * a relative difference below delta (the sums' roundings: (2 cols / 256 + 40) 2^-24 holds
 * both kernels' orders with room), so an element of h whose (x * scale) * wn lies within
 * delta of a rounding midpoint may round to the neighbouring value: each such element adds
 * |W[r][c]| ulp(h[c]) to output (r, t). With the products' summation order (2 cols 2^-24
 * sum|W h|, should the configurations differ) that bounds the sums' difference; the
 * output's rounding adds an ulp (the residual's another at the sum's magnitude), SwiGLU's
 * the propagation of its two rounded sums. Rows of X past n hold NaN, Y starts poisoned with a guard, and rows
 * past n and the guard must keep the poison. */
#include "base/error.h"
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
#define EPS 1e-6f

static bool has_param(const ir_kernel *k, const char *name) {
    char *text = ir_print(k), pat[64];
    cr_assert_not_null(text);
    snprintf(pat, sizeof pat, "@%s:", name);
    bool f = strstr(text, pat) != NULL;
    free(text);
    return f;
}

/* qwen3-0.6b's and 8b's qkv (q_dim + 2 kv_dim rows) and gate/up (SwiGLU) products */
typedef struct nshape {
    uint32_t rows, cols;
    unsigned epi;
} nshape;

Test(kernels_skinny_norm, builds_and_assembles_at_qwen3_shapes, .timeout = 900) {
    static const nshape sh[] = {{4096, 1024, 0}, {3072, 1024, KN_EPI_SWIGLU}, {6144, 4096, 0},
                                {12288, 4096, KN_EPI_SWIGLU}};
    static const uint32_t ns[] = {1, 8, 24, 64, 128};
    kiln_err err = {0};
    for (uint32_t cc = 80; cc <= 90; cc += 10) {
        rt_caps c = tu_cuda_caps(cc);
        for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                uint32_t n = ns[ni], g[2] = {0, 0}, gs[2] = {0, 0};
                ir_scalar t = (i + ni) % 2 ? IR_F16 : IR_BF16;
                char what[96];
                snprintf(what, sizeof what, "skinny norm sm_%u %ux%u n=%u %s", cc, sh[i].rows, sh[i].cols, n,
                         tu_dname(t));
                bool ok = kn_matmul_skinny_norm_ok(&c, sh[i].rows, sh[i].cols, n, t);
                /* one token is no whole fragment: refused as the skinny product is */
                cr_assert_eq(ok, n != 1, "%s: ok %d", what, ok);
                cr_assert_eq(ok, kn_matmul_skinny_ok(&c, sh[i].rows, sh[i].cols, n, t), "%s", what);
                ir_kernel *k = kn_matmul_skinny_norm(&c, sh[i].rows, sh[i].cols, n, t, sh[i].epi, EPS, g, &err);
                if (!ok) {
                    cr_assert_null(k, "%s", what);
                    cr_assert(strstr(err.msg, "does not tile"), "%s: %s", what, err.msg);
                    continue;
                }
                cr_assert_not_null(k, "%s: %s", what, err.msg);
                cr_assert(has_param(k, "wn") && has_param(k, "X"), "%s", what);
                /* the grid of the product it replaces */
                ir_kernel *ks = kn_matmul_skinny(&c, sh[i].rows, sh[i].cols, n, t, sh[i].epi, gs, &err);
                cr_assert_not_null(ks, "%s", err.msg);
                cr_assert(g[0] == gs[0] && g[1] == gs[1] && g[1] == (n > 64 ? n / 64 : 1), "%s: grid %ux%u, %ux%u",
                          what, g[0], g[1], gs[0], gs[1]);
                tu_ptx_assembles(k, &c, what);
                ir_kernel_destroy(k), ir_kernel_destroy(ks);
            }
        /* the other epilogues, and forced configurations (four row fragments, steps of 64 columns) */
        static const unsigned epis[] = {KN_EPI_BIAS, KN_EPI_RESIDUAL, KN_EPI_BIAS | KN_EPI_RESIDUAL, KN_EPI_F32};
        for (size_t e = 0; e < sizeof epis / sizeof epis[0]; e++) {
            uint32_t g[2];
            ir_kernel *k = kn_matmul_skinny_norm(&c, 1024, 1024, 24, IR_BF16, epis[e], EPS, g, &err);
            cr_assert_not_null(k, "%s", err.msg);
            tu_ptx_assembles(k, &c, "skinny norm epilogue");
            ir_kernel_destroy(k);
        }
        static const char *forced[] = {"4,4,0,2", "1,16,1,1", "2,2,4,2"};
        for (size_t f = 0; f < sizeof forced / sizeof forced[0]; f++) {
            uint32_t g[2];
            setenv("KILN_SKINNY", forced[f], 1);
            ir_kernel *k = kn_matmul_skinny_norm(&c, 3072, 1024, 64, IR_F16, f ? 0 : KN_EPI_SWIGLU, EPS, g, &err);
            cr_assert_not_null(k, "%s: %s", forced[f], err.msg);
            tu_ptx_assembles(k, &c, forced[f]);
            ir_kernel_destroy(k);
        }
        unsetenv("KILN_SKINNY");
    }
}

Test(kernels_skinny_norm, refuses_opaque_fragments_and_bad_shapes) {
    kiln_err err = {0};
    uint32_t g[2];
    rt_caps v;
    tu_caps_h200(&v); /* the H200's Vulkan: the skinny product on whole fragments, no norm */
    cr_assert(kn_matmul_skinny_ok(&v, 1024, 1024, 32, IR_BF16));
    cr_assert_not(kn_matmul_skinny_norm_ok(&v, 1024, 1024, 32, IR_BF16));
    cr_assert_null(kn_matmul_skinny_norm(&v, 1024, 1024, 32, IR_BF16, 0, EPS, g, &err));
    cr_assert(strstr(err.msg, "CUDA's only"), "%s", err.msg);
    rt_caps lp;
    tu_caps_min(&lp);
    cr_assert_not(kn_matmul_skinny_norm_ok(&lp, 1024, 1024, 32, IR_F16));
    rt_caps c = tu_cuda_caps(90);
    cr_assert(kn_matmul_skinny_norm_ok(&c, 1024, 1024, 32, IR_BF16));
    static const struct {
        uint32_t rows, cols, n;
    } bad[] = {{1000, 1024, 32}, {1024, 1000, 32}, {1024, 1024, 20},
               {1024, 1024, 72}, {1024, 1024, 100}, {1024, 1024, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_not(kn_matmul_skinny_norm_ok(&c, bad[i].rows, bad[i].cols, bad[i].n, IR_BF16), "%zu", i);
        cr_assert_null(kn_matmul_skinny_norm(&c, bad[i].rows, bad[i].cols, bad[i].n, IR_BF16, 0, EPS, g, &err));
        cr_assert(strstr(err.msg, "does not tile"), "%s", err.msg);
    }
    cr_assert_null(kn_matmul_skinny_norm(&c, 1024, 1024, 32, IR_BF16, 0, NAN, g, &err));
    cr_assert(strstr(err.msg, "eps"), "%s", err.msg);
    cr_assert_null(kn_matmul_skinny_norm(&c, 1024, 1024, 32, IR_BF16, KN_EPI_SWIGLU | KN_EPI_BIAS, EPS, g, &err));
    rt_caps ns = c;
    ns.subgroup_arith = false; /* the scale's sums are subgroup reductions */
    cr_assert_not(kn_matmul_skinny_norm_ok(&ns, 1024, 1024, 32, IR_BF16));
}

/* ---- on the device: against kn_rmsnorm then kn_matmul_skinny ------------------------------ */

typedef struct ncase {
    uint32_t rows, cols, n_max;
    unsigned epi;
} ncase;

static rt_kernel *compile(rt_device *d, ir_kernel *k, const char *what) {
    kiln_err err = {0};
    cr_assert_not_null(k, "%s", what);
    rt_kernel *ck = d->ops->compile(d, k, NULL, &err);
    cr_assert_not_null(ck, "%s: %s", what, err.msg);
    return ck;
}

/* The bound on |fused - unfused| at output (r, tk) (file comment): host sums of W (and Wu)
 * against the host's h, the elements of h that may round either way. */
typedef struct tol_in {
    ir_scalar t;
    uint32_t cols;
    const float *x, *wn;
    double scale, delta;
} tol_in;

static double sum_bound(const tol_in *in, const float *wr, double *sum) {
    double drift = 0, mag = 0, s = 0;
    for (uint32_t c = 0; c < in->cols; c++) {
        double v = (double)in->x[c] * in->scale * in->wn[c];
        float h = tu_from16(in->t, tu_to16(in->t, (float)v));
        float lo = (float)(v * (1 - in->delta)), hi = (float)(v * (1 + in->delta));
        if (tu_to16(in->t, lo) != tu_to16(in->t, hi)) drift += fabs(wr[c]) * tu_ulp16(in->t, fabs(v) * (1 + in->delta));
        s += (double)wr[c] * h, mag += fabs((double)wr[c] * h);
    }
    *sum = s;
    return drift + 2.0 * in->cols * ldexp(1.0, -24) * mag;
}

static void norm_case(rt_device *d, ncase s, ir_scalar t, const uint32_t *ns, size_t n_ns, const char *var) {
    kiln_err err = {0};
    uint32_t rows = s.rows, cols = s.cols, n_max = s.n_max, g[2], gs[2];
    bool swiglu = s.epi & KN_EPI_SWIGLU, f32 = s.epi & KN_EPI_F32;
    char what[200];
    snprintf(what, sizeof what, "skinny norm %ux%u n_max=%u %s epi=0x%x %s", rows, cols, n_max, tu_dname(t), s.epi,
             var ? var : "");
    rt_kernel *kf = compile(d, kn_matmul_skinny_norm(&d->caps, rows, cols, n_max, t, s.epi, EPS, g, &err), what);
    rt_kernel *ks = compile(d, kn_matmul_skinny(&d->caps, rows, cols, n_max, t, s.epi, gs, &err), what);
    rt_kernel *kr = compile(d, kn_rmsnorm(&d->caps, cols, t, EPS, &err), what);
    size_t nw = (size_t)rows * cols, nx = (size_t)n_max * cols, ny = (size_t)n_max * rows, ysz = f32 ? 4 : 2;
    float *wf, *uf, *xf, *nf, *bf, *rf;
    uint16_t *w = tu_rand16(t, nw, -1, 1, &wf), *wu = tu_rand16(t, nw, -1, 1, &uf);
    uint16_t *x = tu_rand16(t, nx, -3, 3, &xf), *wn = tu_rand16(t, cols, 0.25f, 2.0f, &nf);
    uint16_t *b = tu_rand16(t, rows, -4, 4, &bf), *res = tu_rand16(t, ny, -8, 8, &rf);
    uint16_t *xp = malloc(nx * 2), *hp = malloc(nx * 2);
    uint8_t *poison = malloc((ny + GUARD) * ysz), *yf = malloc((ny + GUARD) * ysz), *ys = malloc((ny + GUARD) * ysz);
    cr_assert(xp && hp && poison && yf && ys);
    for (size_t i = 0; i < ny + GUARD; i++) {
        uint16_t p16 = tu_nan16(t);
        uint32_t p32 = 0x7fc00bad;
        memcpy(poison + i * ysz, f32 ? (const void *)&p32 : (const void *)&p16, ysz);
    }
    for (size_t i = 0; i < nx; i++) hp[i] = tu_nan16(t);
    rt_buffer *bw = tu_vk_upload(d, w, nw * 2), *bu = tu_vk_upload(d, wu, nw * 2), *bx = tu_vk_upload(d, x, nx * 2);
    rt_buffer *bh = tu_vk_upload(d, hp, nx * 2), *bn = tu_vk_upload(d, wn, (size_t)cols * 2);
    rt_buffer *bb = tu_vk_upload(d, b, (size_t)rows * 2), *br = tu_vk_upload(d, res, ny * 2);
    rt_buffer *byf = tu_vk_upload(d, poison, (ny + GUARD) * ysz), *bys = tu_vk_upload(d, poison, (ny + GUARD) * ysz);
    uint32_t info[2] = {7, 0};
    rt_buffer *bi = tu_vk_upload(d, info, sizeof info);
    /* W, [Wu], X, Y, info, [b], [res], then the fused kernel's wn */
    rt_arg af[8], as[8], ar[3] = {{bx, 0}, {bn, 0}, {bh, 0}};
    uint32_t na = 0;
    af[na] = as[na] = (rt_arg){bw, 0}, na++;
    if (swiglu) af[na] = as[na] = (rt_arg){bu, 0}, na++;
    af[na] = (rt_arg){bx, 0}, as[na] = (rt_arg){bh, 0}, na++;
    af[na] = (rt_arg){byf, 0}, as[na] = (rt_arg){bys, 0}, na++;
    af[na] = as[na] = (rt_arg){bi, 0}, na++;
    if (s.epi & KN_EPI_BIAS) af[na] = as[na] = (rt_arg){bb, 0}, na++;
    if (s.epi & KN_EPI_RESIDUAL) af[na] = as[na] = (rt_arg){br, 0}, na++;
    af[na] = (rt_arg){bn, 0};
    double delta = (2.0 * cols / 256 + 40) * ldexp(1.0, -24);
    uint32_t ran = 0;
    for (size_t ni = 0; ni < n_ns; ni++) {
        uint32_t n = ns[ni];
        if (n > n_max) continue;
        ran++;
        for (size_t i = 0; i < nx; i++) xp[i] = i / cols < n ? x[i] : tu_nan16(t);
        info[1] = n;
        tu_vk_reupload(d, bx, xp, nx * 2), tu_vk_reupload(d, bh, hp, nx * 2), tu_vk_reupload(d, bi, info, sizeof info);
        tu_vk_reupload(d, byf, poison, (ny + GUARD) * ysz), tu_vk_reupload(d, bys, poison, (ny + GUARD) * ysz);
        rt_launch l[3] = {{kr, {n, 1, 1}, ar, 3}, {ks, {gs[0], gs[1], 1}, as, na}, {kf, {g[0], g[1], 1}, af, na + 1}};
        for (int li = 0; li < 3; li++) cr_assert_eq(d->ops->run(d, l + li, 1, &err), 0, "%s: %s", what, err.msg);
        tu_vk_download(d, byf, yf, (ny + GUARD) * ysz), tu_vk_download(d, bys, ys, (ny + GUARD) * ysz);
        for (size_t i = (size_t)n * rows; i < ny + GUARD; i++)
            cr_assert_eq(memcmp(yf + i * ysz, poison + i * ysz, ysz), 0, "%s n=%u: wrote [%zu] (past n or the end)",
                         what, n, i);
        for (uint32_t tk = 0; tk < n; tk++) {
            const float *xr = xf + (size_t)tk * cols;
            double ss = 0;
            for (uint32_t c = 0; c < cols; c++) ss += (double)xr[c] * xr[c];
            tol_in in = {t, cols, xr, nf, 1.0 / sqrt(ss / cols + EPS), delta};
            for (uint32_t r = 0; r < rows; r++) {
                size_t i = (size_t)tk * rows + r;
                double got, want, gs_sum, tol = sum_bound(&in, wf + (size_t)r * cols, &gs_sum);
                if (f32) {
                    float a, bv;
                    memcpy(&a, yf + i * 4, 4), memcpy(&bv, ys + i * 4, 4);
                    got = a, want = bv;
                } else {
                    uint16_t a, bv;
                    memcpy(&a, yf + i * 2, 2), memcpy(&bv, ys + i * 2, 2);
                    got = tu_from16(t, a), want = tu_from16(t, bv);
                }
                cr_assert(!isnan(got) && !isnan(want), "%s n=%u: Y[%u][%u] = %g (fused), %g: NaN", what, n, tk, r,
                          got, want);
                if (swiglu) {
                    double us_sum, du = sum_bound(&in, uf + (size_t)r * cols, &us_sum), dg = tol;
                    double gv = tu_from16(t, tu_to16(t, (float)gs_sum)), uv = tu_from16(t, tu_to16(t, (float)us_sum));
                    dg += tu_ulp16(t, fabs(gv) + dg), du += tu_ulp16(t, fabs(uv) + du);
                    tol = 1.1 * dg * (fabs(uv) + du) + (fabs(gv) + dg) * du +
                          (7 + 2 * fabs(gv)) * ldexp(1.0, -23) * fabs(want);
                } else if (s.epi & KN_EPI_BIAS) {
                    tol += 4 * ldexp(1.0, -24) * (fabs(gs_sum) + fabs(bf[r]));
                }
                /* the residual's inner rounding is at the sum's magnitude, the other at Y's */
                if (s.epi & KN_EPI_RESIDUAL) tol += tu_ulp16(t, fabs(gs_sum) + tol);
                if (!f32) tol += tu_ulp16(t, fmax(fabs(got), fabs(want)) + tol);
                cr_assert(fabs(got - want) <= tol, "%s n=%u: Y[%u][%u] = %.9g fused, %.9g apart (tol %.3g)", what, n,
                          tk, r, got, want, tol);
            }
        }
    }
    cr_assert_gt(ran, 0, "%s: no token count ran", what);
    rt_buffer *bufs[] = {bw, bu, bx, bh, bn, bb, br, byf, bys, bi};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) d->ops->release(d, bufs[i]);
    d->ops->release_kernel(d, kf), d->ops->release_kernel(d, ks), d->ops->release_kernel(d, kr);
    free(w), free(wu), free(x), free(wn), free(b), free(res), free(wf), free(uf), free(xf), free(nf), free(bf);
    free(rf), free(xp), free(hp), free(poison), free(yf), free(ys);
}

Test(kernels_skinny_norm, against_rmsnorm_then_skinny_on_the_device, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    if (!kn_matmul_skinny_norm_ok(&d->caps, 16, 256, 8, IR_BF16)) {
        d->ops->destroy(d);
        cr_skip_test("the device has no fused skinny norm (CUDA's fragments only: KILN_TEST_DEVICE=cuda:0)");
    }
    tu_seed(61);
    /* blocks of 8, 16, 24, 48 and two of 64; every epilogue */
    static const ncase cs[] = {{48, 256, 8, 0},
                               {64, 512, 16, KN_EPI_SWIGLU},
                               {96, 1024, 24, KN_EPI_BIAS},
                               {32, 2048, 48, KN_EPI_RESIDUAL},
                               {80, 768, 24, KN_EPI_F32},
                               {64, 1024, 128, KN_EPI_SWIGLU},
                               {48, 512, 128, KN_EPI_BIAS | KN_EPI_RESIDUAL}};
    static const uint32_t ns[] = {1, 5, 8, 13, 24, 37, 48, 64, 70, 101, 128};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        norm_case(d, cs[i], i % 2 ? IR_F16 : IR_BF16, ns, sizeof ns / sizeof ns[0], NULL);
    /* forced configurations (KILN_SKINNY): one slice and step in flight, 16 slices, four
     * row fragments with steps of 64 columns (SwiGLU: two of the gate, two of the up) */
    static const char *forced[] = {"1,1,1", "2,16,3", "4,4,0,2", "2,2,4,2"};
    for (size_t i = 0; i < sizeof forced / sizeof forced[0]; i++) {
        setenv("KILN_SKINNY", forced[i], 1);
        norm_case(d, (ncase){64, 2048, 48, i % 2 ? KN_EPI_SWIGLU : KN_EPI_RESIDUAL}, i % 2 ? IR_BF16 : IR_F16, ns,
                  sizeof ns / sizeof ns[0], forced[i]);
    }
    unsetenv("KILN_SKINNY");
    d->ops->destroy(d);
}
