/* A device that refuses a kernel variant at load and gives up the capability behind it
 * (the CUDA JIT serializing wgmma: cuda_device.c clears caps.wgmma and says so in
 * rt_device's fallback): plan_compile_kernel builds that kernel again from the caps as
 * they are now, once; a refusal that changes nothing is an error. On a stand-in device
 * with H200-like CUDA caps whose compile only reads the kernel (no GPU needed). */
#include "base/error.h"
#include "ir/ir.h"
#include "model/model.h"
#include "plan/plan_bind.h"
#include "plan/plan_internal.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_ptx.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int compiles, refusals;
static bool refuse_everything;
static char dummy_kernel;

static bool has_wgmma(const ir_kernel *k) {
    char *text = ir_print(k);
    bool wg = text && strstr(text, "wg.mma");
    free(text);
    return wg;
}

/* Refuses kernels with warpgroup products as the CUDA device does when its JIT serializes them. */
static rt_kernel *fake_compile(rt_device *d, const ir_kernel *k, const double *spec, kiln_err *err) {
    (void)spec;
    compiles++;
    if (refuse_everything || has_wgmma(k)) {
        refusals++;
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "%s: kernel '%s': the JIT serialized its wgmma", d->label,
                  ir_kernel_name(k));
        if (!refuse_everything && d->caps.wgmma) {
            d->caps.wgmma = false;
            snprintf(d->fallback, sizeof d->fallback, "no wgmma: the JIT serialized it in kernel '%s'",
                     ir_kernel_name(k));
        }
        return NULL;
    }
    return (rt_kernel *)(void *)&dummy_kernel;
}

static void fake_release_kernel(rt_device *d, rt_kernel *k) {
    (void)d, (void)k;
}

static const rt_device_ops fake_ops = {.compile = fake_compile, .release_kernel = fake_release_kernel};

Test(plan_fallback, a_refused_variant_is_built_again_without_it, .timeout = 120) {
    const char *path = tu_synth_tiny("fallback.gguf", "qwen3", "bf16");
    kiln_err err = {0};
    model *m = model_load(path, &err);
    cr_assert_not_null(m, "%s", err.msg);
    plan_shape s;
    cr_assert_eq(plan_shape_of(m, 0, 0, 0, &s, &err), 0, "%s", err.msg);
    rt_device d = {.ops = &fake_ops, .caps = tu_cuda_caps(90)};
    d.caps.compute_units = 132;
    snprintf(d.label, sizeof d.label, "cuda:9");
    setenv("KILN_MATMUL_WG", "128,64,4,1", 1); /* the tiny model's products take it whatever their grid */
    uint32_t g[2];
    plan_sig sig;
    /* the o product: refused with wgmma, then built without */
    compiles = refusals = 0;
    cr_assert(plan_compile_kernel(&d, &s, K_MM_O, g, &sig, &err), "%s", err.msg);
    cr_assert_eq(compiles, 2, "the o product: refused with wgmma, then built without (%d compiles)", compiles);
    cr_assert_eq(refusals, 1);
    cr_assert_not(d.caps.wgmma);
    cr_assert(strstr(d.fallback, "no wgmma"), "%s", d.fallback);
    cr_assert_str_eq(sig.kernel, "kn_matmul");
    plan_sig_free(&sig);
    /* later kernels are built from the caps as they now are: no refusal */
    compiles = refusals = 0;
    cr_assert(plan_compile_kernel(&d, &s, K_MM_DOWN, g, &sig, &err), "%s", err.msg);
    cr_assert_eq(compiles, 1);
    cr_assert_eq(refusals, 0);
    plan_sig_free(&sig);
    compiles = 0;
    cr_assert(plan_compile_kernel(&d, &s, K_EMBED, g, &sig, &err), "%s", err.msg);
    cr_assert_eq(compiles, 1);
    plan_sig_free(&sig);
    /* a refusal that takes nothing away is the caller's error, after one compile */
    refuse_everything = true;
    compiles = 0;
    cr_assert_null(plan_compile_kernel(&d, &s, K_MM_QKV, g, &sig, &err));
    cr_assert_eq(compiles, 1);
    cr_assert_eq(err.code, KILN_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "cuda:9"), "%s", err.msg);
    refuse_everything = false;
    unsetenv("KILN_MATMUL_WG");
    model_free(m);
}
