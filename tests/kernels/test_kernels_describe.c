/* kn_describe (what `kiln probe` lists): each variant's line read off the kernels built
 * for the caps, for CUDA sm_90 / sm_80 caps of an H200-sized device and Vulkan minimum
 * caps. No device needed. */
#include "kernels/kernels.h"
#include "runtime/caps.h"
#include "tests/util/testutil_ptx.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

/* The line of role in text (up to its newline), or "" */
static void line_of(const char *text, const char *role, char *out, size_t cap) {
    const char *p = strstr(text, role);
    size_t n = p ? strcspn(p, "\n") : 0;
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p ? p : "");
}

Test(kernels_describe, variants_per_device) {
    char text[4096], mm[512], ap[512];
    rt_caps c90 = tu_cuda_caps(90), c80 = tu_cuda_caps(80), vk;
    c90.compute_units = c80.compute_units = 132;
    tu_caps_min(&vk);
    size_t n = kn_describe(&c90, text, sizeof text);
    cr_assert(n > 0 && n < sizeof text, "%zu", n);
    line_of(text, "matmul (prefill)", mm, sizeof mm);
    line_of(text, "attention (prefill)", ap, sizeof ap);
    cr_assert(strstr(mm, "warpgroup products m64n") && strstr(mm, "swizzled in flight") &&
                  strstr(mm, "tensor-map copies") && strstr(mm, "memory barriers") && strstr(mm, "workgroup 288"),
              "sm_90: %s", mm);
    rt_caps no_tma = c90;
    cr_assert_eq(rt_caps_override(&no_tma, "no-tma", NULL), 0);
    kn_describe(&no_tma, text, sizeof text);
    line_of(text, "matmul (prefill)", mm, sizeof mm);
    cr_assert(strstr(mm, "warpgroup products m64n") && strstr(mm, "asynchronous copies") && !strstr(mm, "tensor-map"),
              "sm_90 no-tma: %s", mm);
    n = kn_describe(&c90, text, sizeof text);
    cr_assert(strstr(ap, "softmax in registers") && strstr(ap, "cooperative matrices 16x8x16 bf16"), "sm_90: %s", ap);
    kn_describe(&c80, text, sizeof text);
    line_of(text, "matmul (prefill)", mm, sizeof mm);
    cr_assert(!strstr(mm, "warpgroup") && strstr(mm, "cooperative matrices 16x8x16"), "sm_80: %s", mm);
    kn_describe(&vk, text, sizeof text);
    cr_assert(!strstr(text, "warpgroup") && !strstr(text, "softmax in registers"), "minimum caps:\n%s", text);
    /* a buffer too small: the length it needs, the text cut */
    char small[16];
    cr_assert_eq(kn_describe(&c90, small, sizeof small), n);
}
