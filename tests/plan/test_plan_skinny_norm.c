/* The short block's and a step's norms inside their skinny products (plan_skinny_norm,
 * kn_matmul_skinny_norm) on CUDA's caps, without a device: which roles take it at which
 * block sizes and for which models, the kernels plan_build_kernel and plan_each_kernel
 * build for them (assembled by ptxas), and KILN_SKINNY_NORM (opt-in). The recordings that bind
 * them run where a CUDA device is (the plan suites under KILN_TEST_DEVICE=cuda:0). */
#include "base/error.h"
#include "model/model.h"
#include "plan/plan.h"
#include "plan/plan_internal.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_dev.h"
#include "tests/util/testutil_ptx.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static model *load(const char *rel, plan_shape *s) {
    kiln_err err = {0};
    model *m = model_load(tu_data_file(rel), &err);
    cr_assert_not_null(m, "%s", err.msg);
    cr_assert_eq(plan_shape_of(m, 0, 0, 0, s, &err), 0, "%s", err.msg);
    s->skinny_norm = true;
    return m;
}

Test(plan_skinny_norm, roles_and_blocks_on_cuda) {
    plan_shape s;
    model *m = load("models/dense-F16.gguf", &s);
    rt_caps c = tu_cuda_caps(90), v;
    tu_caps_h200(&v);
    kiln_err err = {0};
    /* the short block and every step bucket; not the mid or long blocks */
    static const uint32_t short_nb[] = {8, 16, 32, 64};
    for (size_t i = 0; i < sizeof short_nb / sizeof short_nb[0]; i++) {
        s.n_block = short_nb[i];
        cr_assert(plan_skinny_norm(&s, &c, K_MM_QKV) && plan_skinny_norm(&s, &c, K_MM_FF), "n_block %u", s.n_block);
        cr_assert_not(plan_skinny_norm(&s, &c, K_MM_O) || plan_skinny_norm(&s, &c, K_MM_DOWN) ||
                      plan_skinny_norm(&s, &c, K_MM_OUT));
        cr_assert_not(plan_skinny_norm(&s, &v, K_MM_QKV) || plan_skinny_norm(&s, &v, K_MM_FF), "Vulkan's fragments");
        for (int r = 0; r < 2; r++) {
            int role = r ? K_MM_FF : K_MM_QKV;
            uint32_t g[2], gs[2];
            ir_kernel *k = plan_build_kernel(&s, &c, role, g, &err);
            cr_assert_not_null(k, "%s", err.msg);
            cr_assert(tu_ir_has(k, "@wn:") && !strcmp(ir_kernel_name(k), "kn_matmul_skinny_norm"), "%s",
                      plan_role[role]);
            tu_ptx_assembles(k, &c, plan_role[role]);
            s.skinny_norm = false; /* the product it replaces, on the same grid */
            ir_kernel *ks = plan_build_kernel(&s, &c, role, gs, &err);
            s.skinny_norm = true;
            cr_assert_not_null(ks, "%s", err.msg);
            cr_assert(!tu_ir_has(ks, "@wn:") && g[0] == gs[0] && g[1] == gs[1], "%s", plan_role[role]);
            ir_kernel_destroy(k), ir_kernel_destroy(ks);
        }
    }
    s.n_block = 512;
    cr_assert_not(plan_skinny_norm(&s, &c, K_MM_QKV) || plan_skinny_norm(&s, &c, K_MM_FF));
    s.n_block = 64;
    s.skinny_norm = false;
    cr_assert_not(plan_skinny_norm(&s, &c, K_MM_QKV) || plan_skinny_norm(&s, &c, K_MM_FF));
    model_free(m);
    /* a mixture of experts keeps its feed-forward's norm; qwen35 its attention's (the gate
     * product reads h too), not its dense feed-forward's */
    m = load("models/qwen3moe-tiny.gguf", &s);
    s.n_block = 64;
    cr_assert(plan_skinny_norm(&s, &c, K_MM_QKV) && !plan_skinny_norm(&s, &c, K_MM_FF));
    model_free(m);
    m = load("models/qwen35-tiny.gguf", &s);
    s.n_block = 64;
    cr_assert(!plan_skinny_norm(&s, &c, K_MM_QKV) && plan_skinny_norm(&s, &c, K_MM_FF));
    model_free(m);
}

/* plan_each_kernel (kiln dump) decides it as a plan does: with KILN_SKINNY_NORM=1 the
 * short block's qkv and gate/up kernels take wn, nothing else does; unset or 0, none. */
typedef struct seen {
    char roles[8][64];
    uint32_t n;
} seen;

static void note(void *ctx, const char *role, const ir_kernel *k) {
    seen *s = ctx;
    if (!tu_ir_has(k, "@wn:") || strncmp(ir_kernel_name(k), "kn_matmul_skinny", 16)) return;
    cr_assert_lt(s->n, 8);
    snprintf(s->roles[s->n++], sizeof s->roles[0], "%s", role);
}

Test(plan_skinny_norm, each_kernel_and_the_switch) {
    kiln_err err = {0};
    model *m = model_load(tu_data_file("models/dense-F16.gguf"), &err);
    cr_assert_not_null(m, "%s", err.msg);
    rt_caps c = tu_cuda_caps(80);
    seen s = {0};
    setenv("KILN_SKINNY_NORM", "1", 1);
    cr_assert(plan_skinny_norm_on());
    cr_assert_eq(plan_each_kernel(m, &c, NULL, 0, 0, note, &s, &err), 0, "%s", err.msg);
    cr_assert(s.n == 2 && !strcmp(s.roles[0], "short_prefill_qkv") && !strcmp(s.roles[1], "short_prefill_gate_up"),
              "%u: %s %s", s.n, s.roles[0], s.roles[1]);
    for (int i = 0; i < 2; i++) { /* unset (the default), then 0 */
        if (i) setenv("KILN_SKINNY_NORM", "0", 1);
        else unsetenv("KILN_SKINNY_NORM");
        cr_assert_not(plan_skinny_norm_on());
        s.n = 0;
        cr_assert_eq(plan_each_kernel(m, &c, NULL, 0, 0, note, &s, &err), 0, "%s", err.msg);
        cr_assert_eq(s.n, 0, "%s", s.roles[0]);
    }
    unsetenv("KILN_SKINNY_NORM");
    model_free(m);
}

/* KILN_SKINNY_MAX=16 (measuring the tiled products on short blocks): blocks of 8 and 16 and
 * those the tiled products cannot take (32: not a whole tile of 64) keep the skinny ones, a
 * block of 64 takes the tiled ones; every role builds and assembles for sm_90a (a step of
 * 32 failed to build on an H100 before: kn_matmul refused n_max 32). */
Test(plan_skinny_norm, skinny_max_keeps_the_blocks_the_tiles_cannot_take) {
    plan_shape s;
    model *m = load("models/dense-F16.gguf", &s);
    s.skinny_norm = false;
    rt_caps c = tu_cuda_caps(90);
    kiln_err err = {0};
    setenv("KILN_SKINNY_MAX", "16", 1);
    static const uint32_t nb[] = {8, 16, 32, 64};
    static const int roles[] = {K_MM_QKV, K_MM_O, K_MM_FF, K_MM_DOWN};
    for (size_t i = 0; i < sizeof nb / sizeof nb[0]; i++)
        for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++) {
            s.n_block = nb[i];
            uint32_t g[2];
            ir_kernel *k = plan_build_kernel(&s, &c, roles[r], g, &err);
            cr_assert_not_null(k, "n_block %u %s: %s", nb[i], plan_role[roles[r]], err.msg);
            bool skinny = !strncmp(ir_kernel_name(k), "kn_matmul_skinny", 16);
            cr_assert_eq(skinny, nb[i] < 64, "n_block %u %s: %s", nb[i], plan_role[roles[r]], ir_kernel_name(k));
            char what[64];
            snprintf(what, sizeof what, "%s at %u", plan_role[roles[r]], nb[i]);
            tu_ptx_assembles(k, &c, what);
            ir_kernel_destroy(k);
        }
    unsetenv("KILN_SKINNY_MAX");
    model_free(m);
}
