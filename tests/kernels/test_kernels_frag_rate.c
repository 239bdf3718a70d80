/* kernels/frag_rate.c, the probe's fragment rate: which shape it takes from the caps, that it
 * builds, emits and assembles for CUDA (sm_80, sm_90a) and the H200's Vulkan caps, refuses a
 * device without matrix units by name, and on a device with them (KILN_TEST_DEVICE) that
 * every accumulator ends at iters * k (ones times ones), the guard after the output still
 * poisoned: the products the probe times all happen. */
#include "base/error.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "tests/util/testutil_ptx.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

Test(kernels_frag_rate, shapes_and_builds) {
    rt_caps cuda80 = tu_cuda_caps(80), cuda90 = tu_cuda_caps(90), vk, min;
    tu_caps_h200(&vk);
    tu_caps_min(&min);
    const rt_mma_shape *s = kn_frag_rate_shape(&cuda90, IR_BF16);
    cr_assert_not_null(s);
    cr_assert(s->m == 16 && s->n == 8 && s->k == 16, "cuda: %ux%ux%u", s->m, s->n, s->k);
    s = kn_frag_rate_shape(&vk, IR_BF16);
    cr_assert_not_null(s);
    cr_assert(s->m == 16 && s->n == 16 && s->k == 16, "vulkan: %ux%ux%u", s->m, s->n, s->k);
    kiln_err err = {0};
    double flops = 0;
    cr_assert_null(kn_frag_rate(&min, IR_BF16, 8, 4, &flops, &err));
    cr_assert_eq(err.code, KILN_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "no bf16 fragments"), "%s", err.msg);
    for (int dt = 0; dt < 2; dt++) {
        ir_scalar t = dt ? IR_F16 : IR_BF16;
        const rt_caps *cs[2] = {&cuda80, &cuda90};
        for (int i = 0; i < 2; i++) {
            kiln_err e = {0};
            ir_kernel *k = kn_frag_rate(cs[i], t, 64, 7, &flops, &e);
            cr_assert_not_null(k, "%s", e.msg);
            cr_assert_float_eq(flops, 2.0 * 16 * 8 * 16 * 8 * 64 * 4 * 7, 1.0);
            tu_ptx_assembles(k, cs[i], i ? "frag_rate sm_90a" : "frag_rate sm_80");
            ir_kernel_destroy(k);
        }
        kiln_err e = {0};
        tu_emit_ok(kn_frag_rate(&vk, t, 64, 7, &flops, &e), &vk, e.msg, "frag_rate vulkan");
        cr_assert_float_eq(flops, 2.0 * 16 * 16 * 16 * 8 * 64 * 4 * 7, 1.0);
    }
}

Test(kernels_frag_rate, every_product_happens_on_the_device) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    const rt_mma_shape *s = kn_frag_rate_shape(&d->caps, IR_BF16);
    ir_scalar t = IR_BF16;
    if (!s) s = kn_frag_rate_shape(&d->caps, t = IR_F16);
    if (!s) {
        d->ops->destroy(d);
        cr_skip_test("the device has no matrix units");
    }
    const uint32_t iters = 37, groups = 3, guard = 64;
    kiln_err err = {0};
    double flops = 0;
    ir_kernel *k = kn_frag_rate(&d->caps, t, iters, groups, &flops, &err);
    cr_assert_not_null(k, "%s", err.msg);
    size_t n_ones = s->m * s->k > s->k * s->n ? s->m * s->k : s->k * s->n, n_out = (size_t)groups * KN_FRAG_RATE_FRAGS * s->m * s->n;
    uint16_t *ones = malloc(n_ones * 2);
    for (size_t i = 0; i < n_ones; i++) ones[i] = tu_to16(t, 1.0f);
    rt_buffer *bo = tu_vk_upload(d, ones, n_ones * 2), *out = tu_vk_poisoned32(d, n_out, guard);
    rt_arg args[2] = {{bo, 0}, {out, 0}};
    tu_vk_launch(d, k, groups, 1, args, 2);
    uint32_t *got = tu_vk_fetch32(d, out, n_out, guard, "out");
    float want = (float)iters * (float)s->k, v;
    for (size_t i = 0; i < n_out; i++) {
        memcpy(&v, &got[i], 4);
        cr_assert_float_eq(v, want, 0.0, "out[%zu] = %g, want %g", i, v, want);
    }
    free(got), free(ones);
    d->ops->release(d, out), d->ops->release(d, bo);
    ir_kernel_destroy(k);
    d->ops->destroy(d);
}
