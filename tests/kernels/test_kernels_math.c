/* kernels/kn_common.c's math on the device under test (lavapipe in CI): division, square
 * root and exp built to the oracle's precision, and the softmax weights' cheaper exp. */
#include "base/error.h"
#include "ir/ir.h"
#include "kernels/kn_common.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void launch(rt_device *d, const ir_kernel *k, uint32_t gx, uint32_t gy, const rt_arg *args, uint32_t n) {
    rt_kernel *ck = tu_vk_compile(d, k);
    tu_vk_run(d, ck, gx, gy, args, n);
    d->ops->release_kernel(d, ck);
}

/* ---- divide, square root and exp to the oracle's precision ---------------------------------- */

/* kn_fdiv and kn_fsqrt against the host's IEEE results (correctly rounded; the test
 * allows one ulp for the rare last-bit case), kn_exp against the f32 rounding of the
 * double exp within one ulp, over random and edge inputs (zeros, infinities, NaN, huge
 * and tiny quotients, subnormal results of exp). */
Test(kernels, fdiv_fsqrt_exp_match_the_host) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    kx k = {ir_kernel_create("math"), NULL};
    const uint32_t n = 8192;
    ir_buf a = kx_buffer(k, "a", IR_F32, IR_READ, n), b = kx_buffer(k, "b", IR_F32, IR_READ, n);
    ir_buf o = kx_buffer(k, "o", IR_F32, IR_WRITE, 3 * n);
    kx_workgroup(k, 64);
    ir_val i = kx_global(k);
    ir_if *in = kx_if(k, kx_lt_c(k, i, n));
    ir_val av = kx_load(k, a, i, 1), bv = kx_load(k, b, i, 1), i3 = kx_mul_c(k, i, 3);
    kx_store(k, o, i3, kn_fdiv(k, av, bv));
    kx_store(k, o, kx_add_c(k, i3, 1), kn_fsqrt(k, kx_abs(k, av)));
    kx_store(k, o, kx_add_c(k, i3, 2), kn_exp(k, bv));
    kx_end_if(k, in);
    kiln_err err = {0};
    cr_assert_eq(ir_verify(k.ir, &err), 0, "%s", err.msg);
    float *av_ = malloc(n * 4), *bv_ = malloc(n * 4), *out = malloc(3 * n * 4);
    tu_seed(12);
    const float edge_a[] = {0.0f, -0.0f, 1.0f, INFINITY, -INFINITY, NAN, 3e38f, 1e-38f, 7.0f, 1.0f, 1e-45f, 2.0f};
    const float edge_b[] = {1.0f, 3.0f, 0.0f, 2.0f, 1.0f, 1.0f, 1e-3f, 1e3f, NAN, INFINITY, -87.5f, -103.5f};
    for (uint32_t j = 0; j < n; j++) {
        if (j < sizeof edge_a / sizeof edge_a[0]) {
            av_[j] = edge_a[j], bv_[j] = edge_b[j];
        } else {
            av_[j] = tu_urand(-1, 1) * powf(2.0f, tu_urand(-30, 30));
            bv_[j] = j % 3 ? tu_urand(-100, 80) : tu_urand(-1, 1) * powf(2.0f, tu_urand(-30, 30));
        }
    }
    rt_buffer *ba = tu_vk_upload(d, av_, n * 4), *bb = tu_vk_upload(d, bv_, n * 4),
              *bo = tu_vk_upload(d, out, 3 * n * 4);
    rt_arg args[3] = {{ba, 0}, {bb, 0}, {bo, 0}};
    launch(d, k.ir, (n + 63) / 64, 1, args, 3);
    tu_vk_download(d, bo, out, 3 * n * 4);
    uint32_t exact_div = 0, exact_sqrt = 0;
    for (uint32_t j = 0; j < n; j++) {
        float wd = av_[j] / bv_[j], ws = sqrtf(fabsf(av_[j])), we = (float)exp((double)bv_[j]);
        float gd = out[3 * j], gs = out[3 * j + 1], ge = out[3 * j + 2];
        /* one ulp, in the units of the larger magnitude (subnormal floor) */
#define ULP1(w, g)                                                                                                     \
    (isnan(w) ? isnan(g) : (w) == (g) || fabsf((g) - (w)) <= fmaxf(nextafterf(fabsf(w), INFINITY) - fabsf(w), 1e-45f))
        cr_assert(ULP1(wd, gd), "%.9g / %.9g = %.9g, got %.9g", av_[j], bv_[j], wd, gd);
        cr_assert(ULP1(ws, gs), "sqrt %.9g = %.9g, got %.9g", fabsf(av_[j]), ws, gs);
        cr_assert(ULP1(we, ge), "exp %.9g = %.9g, got %.9g", bv_[j], we, ge);
#undef ULP1
        exact_div += wd == gd || (isnan(wd) && isnan(gd));
        exact_sqrt += ws == gs || (isnan(ws) && isnan(gs));
    }
    /* correctly rounded but for rare cases */
    cr_assert_geq(exact_div, n - n / 1000, "%u of %u quotients exact", exact_div, n);
    cr_assert_geq(exact_sqrt, n - n / 1000, "%u of %u roots exact", exact_sqrt, n);
    cr_log_info("kn_fdiv: %u / %u exact; kn_fsqrt: %u / %u exact", exact_div, n, exact_sqrt, n);
    d->ops->release(d, ba), d->ops->release(d, bb), d->ops->release(d, bo);
    free(av_), free(bv_), free(out);
    ir_kernel_destroy(k.ir);
    d->ops->destroy(d);
}

/* kn_exp_nonpositive within 8 ulps of the double exp on [-87, 0] (the device's exp on |r| <=
 * 0.35 is a few), 0 below -87 and at -inf. */
Test(kernels, exp_nonpositive_within_ulps) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    kx k = {ir_kernel_create("expneg"), NULL};
    const uint32_t n = 8192;
    ir_buf a = kx_buffer(k, "a", IR_F32, IR_READ, n), o = kx_buffer(k, "o", IR_F32, IR_WRITE, n);
    kx_workgroup(k, 64);
    ir_val i = kx_global(k);
    ir_if *in = kx_if(k, kx_lt_c(k, i, n));
    kx_store(k, o, i, kn_exp_nonpositive(k, kx_load(k, a, i, 1)));
    kx_end_if(k, in);
    kiln_err err = {0};
    cr_assert_eq(ir_verify(k.ir, &err), 0, "%s", err.msg);
    float *x = malloc(n * 4), *out = malloc(n * 4);
    tu_seed(13);
    const float edge[] = {0.0f, -0.0f, -INFINITY, -87.5f, -86.9f, -1e-30f, -0.34657359f, -0.34657360f, -104.0f, -1e4f};
    for (uint32_t j = 0; j < n; j++)
        x[j] = j < sizeof edge / sizeof edge[0] ? edge[j] : j % 2 ? tu_urand(-90, 0) : -powf(2.0f, tu_urand(-30, 4));
    rt_buffer *bx = tu_vk_upload(d, x, n * 4), *bo = tu_vk_upload(d, out, n * 4);
    rt_arg args[2] = {{bx, 0}, {bo, 0}};
    launch(d, k.ir, (n + 63) / 64, 1, args, 2);
    tu_vk_download(d, bo, out, n * 4);
    for (uint32_t j = 0; j < n; j++) {
        double want = x[j] < -87.0f ? 0.0 : exp((double)x[j]);
        double ulp = fmax(ldexp(1.0, ilogb(fmax(want, 1e-38)) - 23), 1e-45);
        cr_assert(fabs(out[j] - want) <= 8 * ulp, "exp %.9g = %.9g, got %.9g", x[j], want, out[j]);
    }
    d->ops->release(d, bx), d->ops->release(d, bo);
    free(x), free(out);
    ir_kernel_destroy(k.ir);
    d->ops->destroy(d);
}

/* ---- copies and zeros -------------------------------------------------------------------- */

/* kn_copy and kn_zero at odd word counts (every vector width, a grid-stride tail) move
 * exactly n words: the words past n (a guard) keep their poison. */
Test(kernels, copy_and_zero_exact_with_guards) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    kiln_err err = {0};
    const uint32_t ns[] = {1, 3, 6, 257, 1024, 4099, 70001};
    enum { G = 64 };
    for (size_t q = 0; q < sizeof ns / sizeof ns[0]; q++)
        for (int zero = 0; zero < 2; zero++) {
            uint32_t n = ns[q], gx = 0;
            ir_kernel *k = (zero ? kn_zero : kn_copy)(&d->caps, n, &gx, &err);
            cr_assert_not_null(k, "%s", err.msg);
            uint32_t *src = malloc((n + G) * 4), *got = malloc((n + G) * 4);
            for (uint32_t i = 0; i < n + G; i++) src[i] = 0x9e3779b9u * (i + 1), got[i] = 0xdeadbeefu;
            rt_buffer *bs = tu_vk_upload(d, src, (n + G) * 4), *bd = tu_vk_upload(d, got, (n + G) * 4);
            rt_arg copy_args[2] = {{bs, 0}, {bd, 0}}, zero_args[1] = {{bd, 0}};
            launch(d, k, gx, 1, zero ? zero_args : copy_args, zero ? 1 : 2);
            tu_vk_download(d, bd, got, (n + G) * 4);
            for (uint32_t i = 0; i < n + G; i++)
                cr_assert_eq(got[i], i >= n ? 0xdeadbeefu : zero ? 0u : src[i], "%s n=%u [%u]",
                             zero ? "zero" : "copy", n, i);
            d->ops->release(d, bs), d->ops->release(d, bd);
            free(src), free(got);
            ir_kernel_destroy(k);
        }
    uint32_t gx;
    cr_assert_null(kn_zero(&d->caps, 0, &gx, &err));
    cr_assert(strstr(err.msg, "kn_zero"), "%s", err.msg);
    d->ops->destroy(d);
}
