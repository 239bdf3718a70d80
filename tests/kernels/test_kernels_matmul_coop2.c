/* kernels/matmul_coop2.c built for the H200's Vulkan caps (VK_NV_cooperative_matrix2's
 * workgroup scope): which products take it, its tensor-addressed and staged forms on every
 * dtype, epilogue and odd shape, each emitted and validated (with $KILN_SPIRV_VAL's
 * spirv-val where set: Debian's SPIRV-Tools cannot read cooperative matrices). Its runs on
 * a device are test_kernels_matmul.c's workgroup_scope_variant_on_the_device. */
#include "base/error.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "tests/util/testutil_dev.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

static const ir_scalar dtypes[2] = {IR_BF16, IR_F16};

typedef struct mm_shape {
    uint32_t rows, cols, n_max;
} mm_shape;

/* On 132 compute units, a product whose 128 x 128 tiles are fewer than 66 (qwen3-0.6b's o
 * and down at 512 tokens: 32) takes the 64 x 64 subgroup-scope tile instead, one with 128
 * tiles (its qkv) keeps the workgroup scope; KILN_COOP2 set keeps it regardless. */
Test(kernels_matmul_coop2, workgroup_scope_variant_only_where_its_grid_fills_half_the_device) {
    rt_caps c;
    tu_caps_h200(&c);
    c.compute_units = 132;
    kiln_err err = {0};
    uint32_t g[2];
    ir_kernel *k = kn_matmul(&c, 1024, 2048, 512, IR_BF16, 0, g, &err);
    cr_assert_not_null(k, "%s", err.msg);
    cr_assert(!tu_ir_has(k, "frag.load_tensor") && tu_ir_has(k, "frag.mma"), "o: not the small KHR tile");
    cr_assert(g[0] * g[1] >= 128, "o: grid %u x %u", g[0], g[1]);
    ir_kernel_destroy(k);
    k = kn_matmul(&c, 4096, 1024, 512, IR_BF16, 0, g, &err);
    cr_assert_not_null(k, "%s", err.msg);
    cr_assert(tu_ir_has(k, "frag.load_tensor"), "qkv: not the workgroup scope");
    ir_kernel_destroy(k);
    setenv("KILN_COOP2", "64,128,2,1,32", 1);
    k = kn_matmul(&c, 1024, 2048, 512, IR_BF16, 0, g, &err);
    unsetenv("KILN_COOP2");
    cr_assert_not_null(k, "%s", err.msg);
    cr_assert(tu_ir_has(k, "frag.load_tensor"), "KILN_COOP2: not the workgroup scope");
    ir_kernel_destroy(k);
}

/* The workgroup-scope variant builds and validates for the H200's caps on every dtype,
 * epilogue and odd shape (128-square tiles, the loads tensor-addressed), and steps aside
 * where the caps lack it, where its sums do not fit, and where KILN_MATMUL_COOP asks for
 * the subgroup-scope tiles. */
Test(kernels_matmul_coop2, workgroup_scope_variant_builds_for_h200_caps) {
    kiln_err err = {0};
    rt_caps c, none, small;
    tu_caps_h200(&c);
    none = c, small = c;
    cr_assert_eq(rt_caps_override(&none, "no-coopmat2", &err), 0, "%s", err.msg);
    cr_assert_eq(rt_caps_override(&small, "shared=40000", &err), 0, "%s", err.msg); /* 31,808 left: < 33,792 */
    static const mm_shape sh[] = {{1024, 1024, 512}, {4097, 1000, 256}, {7, 7, 64}, {151936, 1024, 64}, {100, 40, 64}};
    for (int forced = 0; forced < 3; forced++) { /* unset, wg, large */
        if (forced) setenv("KILN_MATMUL_COOP", forced == 1 ? "wg" : "large", 1);
        for (size_t ti = 0; ti < 2; ti++)
            for (unsigned epi = 0; epi < 4; epi++)
                for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
                    mm_shape s = sh[i];
                    uint32_t g[2] = {0, 0};
                    char what[200];
                    snprintf(what, sizeof what, "matmul %ux%u n_max=%u %s epi=%s%s", s.rows, s.cols, s.n_max,
                             tu_dname(dtypes[ti]), tu_epi_name(epi),
                             forced == 2 ? " large"
                             : forced    ? " wg"
                                         : "");
                    ir_kernel *k = kn_matmul(&c, s.rows, s.cols, s.n_max, dtypes[ti], epi, g, &err);
                    cr_assert_not_null(k, "%s: %s", what, err.msg);
                    cr_assert_eq(tu_ir_has(k, "frag.load_tensor"), forced < 2, "%s", what);
                    if (forced < 2) {
                        cr_assert_eq(g[0], (s.rows + 127) / 128, "%s: groups x %u", what, g[0]);
                        cr_assert_eq(g[1], (s.n_max + 127) / 128, "%s: groups y %u", what, g[1]);
                    }
                    tu_emit_ok(k, &c, err.msg, what);            /* destroys k */
                    for (int j = 0; j < 2 && forced == 1; j++) { /* no coopmat2, too little workgroup memory */
                        k = kn_matmul(j ? &small : &none, s.rows, s.cols, s.n_max, dtypes[ti], epi, g, &err);
                        cr_assert_not_null(k, "%s: %s", what, err.msg);
                        cr_assert_not(tu_ir_has(k, "frag.load_tensor"), "%s: taken %s", what,
                                      j ? "with 31,808 bytes to stage its sums" : "without coopmat2");
                        ir_kernel_destroy(k);
                    }
                }
    }
    unsetenv("KILN_MATMUL_COOP");
}

/* The staged form (KILN_COOP2_STAGED=1: X and W through workgroup memory, workgroup-scope
 * fragments loaded from there) builds and validates for the H200's caps on every dtype,
 * epilogue and odd shape, 128-square tiles of four 32 x 128 accumulators. */
Test(kernels_matmul_coop2, workgroup_scope_staged_builds_for_h200_caps) {
    kiln_err err = {0};
    rt_caps c;
    tu_caps_h200(&c);
    setenv("KILN_COOP2_STAGED", "1", 1);
    static const mm_shape sh[] = {{1024, 1024, 512}, {4097, 1000, 256}, {7, 7, 64}, {100, 40, 64}};
    for (size_t ti = 0; ti < 2; ti++)
        for (unsigned epi = 0; epi < 4; epi++)
            for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
                mm_shape s = sh[i];
                uint32_t g[2] = {0, 0};
                char what[160];
                snprintf(what, sizeof what, "staged matmul %ux%u n_max=%u %s epi=%s", s.rows, s.cols, s.n_max,
                         tu_dname(dtypes[ti]), tu_epi_name(epi));
                ir_kernel *k = kn_matmul(&c, s.rows, s.cols, s.n_max, dtypes[ti], epi, g, &err);
                cr_assert_not_null(k, "%s: %s", what, err.msg);
                cr_assert(!tu_ir_has(k, "frag.load_tensor") && tu_ir_has(k, "frag.mma"), "%s", what);
                cr_assert(g[0] == (s.rows + 127) / 128 && g[1] == (s.n_max + 127) / 128, "%s: grid %u x %u", what,
                          g[0], g[1]);
                tu_emit_ok(k, &c, err.msg, what); /* destroys k */
            }
    unsetenv("KILN_COOP2_STAGED");
}
