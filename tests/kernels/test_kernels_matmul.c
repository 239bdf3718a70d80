/* kernels/matmul.c on the Vulkan device (lavapipe in CI; the cooperative-matrix variant
 * wherever the device offers it, e.g. the H200): kn_matmul at odd shapes against a plain
 * C reference with f32 accumulation, with every epilogue, under caps overrides that give
 * the tilings a smaller device would get; both variants built, verified and emitted for
 * spec-minimum and H200-like caps; refusals. Skipped by name when no Vulkan device exists.
 *
 * Each compiled kernel runs for several token counts n <= n_max (info = {pos0, n}, one
 * kernel for every prompt length). X rows t >= n hold NaN (they must not reach rows < n);
 * Y starts as NaN with a guard after its n_max * rows elements, and rows t >= n and the
 * guard must keep the poison bit for bit.
 *
 * Tolerance: products of two 16-bit values are exact in f32, so kernel and reference
 * differ only in summation order: two orders of cols terms are within 2 cols 2^-24
 * sum|terms|; the rounding to the 16-bit type adds one ulp at the result's magnitude,
 * the bias add a few f32 roundings, and the residual (y = round(round(sum) + res)) one more
 * ulp: the two inner roundings may land on neighbours. */
#include "backend-ptx/ptx_emit.h"
#include "backend-spirv/spv_emit.h"
#include "backend-spirv/vk_device.h"
#include "backend-spirv/vk_probe.h"
#include "base/error.h"
#include "gguf/half.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "tests/util/testutil_dev.h"
#include "tests/util/testutil_ptx.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64

static const ir_scalar dtypes[2] = {IR_BF16, IR_F16};

/* The epilogues in turn: none, bias, residual, both, f32 */
static unsigned epi_of(size_t i) { return i % 5 == 4 ? KN_EPI_F32 : (unsigned)(i % 5); }


/* ---- one kernel, several token counts ----------------------------------------------------- */

typedef struct mm_shape {
    uint32_t rows, cols, n_max;
} mm_shape;

/* kn_matmul or kn_matmul_skinny: the same parameters and results */
typedef ir_kernel *(*mm_builder)(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype,
                                 unsigned epi, uint32_t groups[2], kiln_err *err);

static unsigned n_coop_cases; /* products that took a fragment variant */

static void product_case(mm_builder build, rt_device *d, mm_shape s, ir_scalar t, unsigned epi, const uint32_t *ns,
                         size_t n_ns, const char *var) {
    kiln_err err = {0};
    char what[200];
    uint32_t rows = s.rows, cols = s.cols, n_max = s.n_max, g[2] = {0, 0};
    ir_kernel *k = build(&d->caps, rows, cols, n_max, t, epi, g, &err);
    cr_assert_not_null(k, "matmul %ux%u n_max=%u: %s", rows, cols, n_max, err.msg);
    bool mma = tu_ir_has(k, "frag.mma"), skinny = build == kn_matmul_skinny;
    n_coop_cases += mma;
    rt_kernel *ck = d->ops->compile(d, k, NULL, &err);
    cr_assert_not_null(ck, "matmul %ux%u: %s", rows, cols, err.msg);
    size_t nw = (size_t)rows * cols, nx = (size_t)n_max * cols, ny = (size_t)n_max * rows;
    float *wf, *xf, *bf, *rf;
    uint16_t *w = tu_rand16(t, nw, -1, 1, &wf), *x = tu_rand16(t, nx, -2, 2, &xf);
    uint16_t *b = tu_rand16(t, rows, -4, 4, &bf), *res = tu_rand16(t, ny, -8, 8, &rf);
    /* Y in dtype, or f32 with KN_EPI_F32 (the sums unrounded) */
    bool f32 = epi & KN_EPI_F32;
    size_t ysz = f32 ? 4 : 2;
    uint16_t *xp = malloc(nx * 2);
    uint8_t *poison = malloc((ny + GUARD) * ysz), *y = malloc((ny + GUARD) * ysz);
    cr_assert(xp && poison && y);
    for (size_t i = 0; i < ny + GUARD; i++) {
        uint16_t p16 = tu_nan16(t);
        uint32_t p32 = 0x7fc00bad;
        memcpy(poison + i * ysz, f32 ? (const void *)&p32 : (const void *)&p16, ysz);
    }
    rt_buffer *bw = tu_vk_upload(d, w, nw * 2), *bx = tu_vk_upload(d, x, nx * 2);
    rt_buffer *by = tu_vk_upload(d, poison, (ny + GUARD) * ysz), *bb = tu_vk_upload(d, b, (size_t)rows * 2);
    rt_buffer *br = tu_vk_upload(d, res, ny * 2);
    uint32_t info[2] = {123, 0};
    rt_buffer *bi = tu_vk_upload(d, info, sizeof info);
    rt_arg args[6] = {{bw, 0}, {bx, 0}, {by, 0}, {bi, 0}};
    uint32_t na = 4;
    if (epi & KN_EPI_BIAS) args[na++] = (rt_arg){bb, 0};
    if (epi & KN_EPI_RESIDUAL) args[na++] = (rt_arg){br, 0};
    for (size_t ni = 0; ni < n_ns; ni++) {
        uint32_t n = ns[ni];
        if (n > n_max) continue;
        snprintf(what, sizeof what, "matmul %ux%u n=%u/%u %s epi=%s %s caps=%s", rows, cols, n, n_max, tu_dname(t),
                 tu_epi_name(epi),
                 skinny ? "skinny"
                 : mma  ? "coopmat"
                        : "tiled",
                 var ? var : "device");
        /* rows t >= n of X are NaN: a leak into rows < n shows */
        for (size_t i = 0; i < nx; i++) xp[i] = i / cols < n ? x[i] : tu_nan16(t);
        info[1] = n;
        tu_vk_reupload(d, bx, xp, nx * 2), tu_vk_reupload(d, by, poison, (ny + GUARD) * ysz);
        tu_vk_reupload(d, bi, info, sizeof info);
        rt_launch l = {ck, {g[0], g[1], 1}, args, na};
        cr_assert_eq(d->ops->run(d, &l, 1, &err), 0, "%s: %s", what, err.msg);
        tu_vk_download(d, by, y, (ny + GUARD) * ysz);
        for (size_t i = (size_t)n * rows; i < ny + GUARD; i++)
            cr_assert_eq(memcmp(y + i * ysz, poison + i * ysz, ysz), 0,
                         "%s: wrote [%zu] (token %zu, past n or the end)", what, i, i / rows);
        for (uint32_t tk = 0; tk < n; tk++)
            for (uint32_t r = 0; r < rows; r++) {
                const float *wr = wf + (size_t)r * cols, *xr = xf + (size_t)tk * cols;
                float sum = 0;
                double mag = 0;
                for (uint32_t c = 0; c < cols; c++) {
                    float p = wr[c] * xr[c]; /* exact */
                    sum += p;
                    mag += fabs(p);
                }
                double tol = 2.0 * cols * ldexp(1.0, -24) * mag;
                if (epi & KN_EPI_BIAS) {
                    sum += bf[r];
                    tol += 4 * ldexp(1.0, -24) * (fabs(sum) + fabs(bf[r])); /* the two f32 adds */
                }
                double want = sum;
                if (epi & KN_EPI_RESIDUAL) {
                    float y1 = tu_from16(t, tu_to16(t, sum));
                    want = y1 + rf[(size_t)tk * rows + r];
                    tol += tu_ulp16(t, fmax(fabs(sum), fabs(y1)) + tol); /* the inner roundings */
                }
                size_t i = (size_t)tk * rows + r;
                uint16_t y16;
                float y32;
                memcpy(f32 ? (void *)&y32 : (void *)&y16, y + i * ysz, ysz);
                double got = f32 ? y32 : tu_from16(t, y16);
                cr_assert(!isnan(got), "%s: Y[%u][%u] NaN (not written, or a poisoned row leaked)", what, tk, r);
                if (!f32) tol += tu_ulp16(t, fmax(fabs(got), fabs(want))); /* the one rounding */
                cr_assert(fabs(got - want) <= tol, "%s: Y[%u][%u] = %.9g, want %.9g (tol %.3g)", what, tk, r, got, want,
                          tol);
            }
    }
    d->ops->release(d, bw), d->ops->release(d, bx), d->ops->release(d, by), d->ops->release(d, bb);
    d->ops->release(d, br), d->ops->release(d, bi);
    d->ops->release_kernel(d, ck);
    free(w), free(x), free(b), free(res), free(wf), free(xf), free(bf), free(rf), free(xp), free(poison), free(y);
    ir_kernel_destroy(k);
}

static void matmul_case(rt_device *d, mm_shape s, ir_scalar t, unsigned epi, const uint32_t *ns, size_t n_ns,
                        const char *var) {
    product_case(kn_matmul, d, s, t, epi, ns, n_ns, var);
}

static const uint32_t all_ns[] = {1, 7, 63, 64, 200};
#define N_NS (sizeof all_ns / sizeof all_ns[0])

/* rows in {1, 7, 200, 1000, 4097}, cols in {1, 7, 64, 1000}, n_max 64 or 256; sized so the
 * C reference stays quick */
static const mm_shape shapes[] = {
    {1, 1, 64},      {7, 7, 256},    {200, 64, 256}, {1000, 7, 64},   {7, 1000, 256}, {200, 1000, 64},
    {4097, 64, 256}, {64, 1000, 64}, {1000, 64, 64}, {130, 130, 256}, {100, 40, 64}, /* one full chunk and a tail: the loop that is not pipelined */
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

/* Every shape, both dtypes; the epilogue cycles so each dtype sees all four across shapes. */
static void run_shapes(const char *var, uint64_t sd, const size_t *pick, size_t n_pick) {
    rt_device *d = tu_vk_open_or_skip(var);
    tu_seed(sd);
    for (size_t pi = 0; pi < n_pick; pi++) {
        size_t si = pick ? pick[pi] : pi;
        for (size_t ti = 0; ti < 2; ti++) matmul_case(d, shapes[si], dtypes[ti], epi_of(si + ti), all_ns, N_NS, var);
    }
    d->ops->destroy(d);
}

Test(kernels_matmul, odd_shapes_epilogues_and_poisoned_rows, .timeout = 600) { run_shapes(NULL, 31, NULL, N_SHAPES); }

/* The tilings of smaller devices: the spec minimum's 128 invocations and 16 KiB (8 x 4
 * outputs each, 16-column chunks), and 64 invocations (32-token tiles). On a device with
 * cooperative matrices these also run the tiled kernel (neither fits it). */
static const size_t small_pick[] = {1, 3, 5, 6, 9, 10};

Test(kernels_matmul, spec_minimum_tiling, .timeout = 600) {
    run_shapes("workgroup=128,shared=16384", 32, small_pick, sizeof small_pick / sizeof small_pick[0]);
}

Test(kernels_matmul, small_workgroup_tiling, .timeout = 600) {
    run_shapes("workgroup=64", 33, small_pick, sizeof small_pick / sizeof small_pick[0]);
}

/* Where the device has cooperative matrices: the tiled kernel at full size too, and the
 * cooperative-matrix kernel with the narrower chunks of a 32 KiB device. */
Test(kernels_matmul, other_variants_on_coopmat_devices, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    bool have = d->caps.n_mma != 0;
    d->ops->destroy(d);
    if (!have) cr_skip_test("the device has no cooperative matrices: the default run covered its only variant");
    run_shapes("no-coopmat", 34, NULL, N_SHAPES);
    run_shapes("shared=32768", 35, small_pick, sizeof small_pick / sizeof small_pick[0]);
    /* each tile on every shape, whatever the grid (KILN_MATMUL_COOP) */
    setenv("KILN_MATMUL_COOP", "large", 1);
    run_shapes(NULL, 37, NULL, N_SHAPES);
    setenv("KILN_MATMUL_COOP", "small", 1);
    run_shapes(NULL, 38, NULL, N_SHAPES);
    unsetenv("KILN_MATMUL_COOP");
}

/* Where the device has none (lavapipe): the cooperative-matrix kernel's logic on emulated
 * f16 fragments (debug-emulate-coopmat; bf16 keeps the tiled kernel), each tile forced. */
Test(kernels_matmul, cooperative_variant_emulated, .timeout = 900) {
    rt_device *d = tu_vk_open_or_skip("debug-emulate-coopmat");
    bool emu = d->caps.mma_emulated;
    d->ops->destroy(d);
    if (!emu) cr_skip_test("the device has cooperative matrices (or lacks f16): nothing to emulate");
    run_shapes("debug-emulate-coopmat", 39, small_pick, sizeof small_pick / sizeof small_pick[0]);
    cr_assert_gt(n_coop_cases, 0, "no f16 product took the cooperative-matrix kernel");
    unsigned before = n_coop_cases;
    setenv("KILN_MATMUL_COOP", "large", 1);
    run_shapes("debug-emulate-coopmat", 40, small_pick, sizeof small_pick / sizeof small_pick[0]);
    unsetenv("KILN_MATMUL_COOP");
    cr_assert_gt(n_coop_cases, before, "the large tile did not fit the emulated device");
}

/* Workgroup-scope matrices with tensor-addressed loads (VK_NV_cooperative_matrix2), where
 * the device has them: every shape (the default there; KILN_MATMUL_COOP=wg names it). */
Test(kernels_matmul, workgroup_scope_variant_on_the_device, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    bool have = d->caps.n_wg_mma != 0;
    d->ops->destroy(d);
    if (!have) cr_skip_test("the device has no workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2)");
    setenv("KILN_MATMUL_COOP", "wg", 1);
    run_shapes(NULL, 39, NULL, N_SHAPES);
    setenv("KILN_COOP2_STAGED", "1", 1); /* X and W staged by the invocations (measuring) */
    run_shapes(NULL, 40, NULL, N_SHAPES);
    unsetenv("KILN_COOP2_STAGED");
    unsetenv("KILN_MATMUL_COOP");
}

/* ---- the skinny products of short blocks ------------------------------------------------ */

/* Where the device offers them (CUDA's 16x8x16 fragments, or cooperative matrices of 16 x 8
 * or 16 x 16 x 16): rows of 16, cols of 16 with 1, 2 and 8 slices, n_max 8 to 64 where it
 * is whole fragments of tokens, every epilogue, and n below, at and past whole fragments. */
Test(kernels_matmul, skinny_on_the_device, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    if (!kn_matmul_skinny_ok(&d->caps, 16, 32, 16, IR_BF16)) {
        d->ops->destroy(d);
        cr_skip_test("the device has no skinny products (16x8x16 or 16x16x16 matrix fragments)");
    }
    tu_seed(36);
    /* the last two: blocks of 64 tokens on the grid's y */
    static const mm_shape sk[] = {{16, 32, 8},    {48, 160, 24}, {272, 1024, 64}, {32, 1056, 32}, {1024, 128, 64},
                                  {16, 2048, 16}, {80, 352, 48}, {48, 320, 192},  {64, 1024, 128}};
    static const uint32_t ns[] = {1, 7, 8, 9, 17, 23, 24, 33, 64, 65, 127, 128, 130, 192};
    uint32_t ran = 0;
    for (size_t i = 0; i < sizeof sk / sizeof sk[0]; i++)
        for (size_t ti = 0; ti < 2; ti++) {
            /* n_max in whole token fragments: 16 on Vulkan's bf16 */
            if (!kn_matmul_skinny_ok(&d->caps, sk[i].rows, sk[i].cols, sk[i].n_max, dtypes[ti])) continue;
            product_case(kn_matmul_skinny, d, sk[i], dtypes[ti], epi_of(i + ti), ns, sizeof ns / sizeof ns[0], NULL);
            ran++;
        }
    cr_assert_geq(ran, 10, "only %u of the shapes ran", ran);
    /* forced configurations (KILN_SKINNY): row fragments, slices, steps in flight, where a
     * slice has fewer steps than are in flight, one step, 16 slices, and steps of 64 columns */
    static const char *forced[] = {"1,1,1", "2,2,4", "2,16,3", "1,4,2", "2,4,2,2", "1,2,1,2", "4,4,0,2", "4,2,1,1"};
    static const mm_shape fs = {64, 2048, 48};
    static const uint32_t fns[] = {1, 17, 40, 48};
    for (size_t i = 0; i < sizeof forced / sizeof forced[0]; i++) {
        setenv("KILN_SKINNY", forced[i], 1);
        product_case(kn_matmul_skinny, d, fs, dtypes[i % 2], epi_of(i), fns, 4, forced[i]);
        product_case(kn_matmul_skinny, d, (mm_shape){32, 64, 16}, dtypes[i % 2], 0, fns, 1, forced[i]);
    }
    unsetenv("KILN_SKINNY");
    d->ops->destroy(d);
}

/* The SwiGLU epilogue (the short block's gate and up products in one): Y[t][r] =
 * round(silu(round(gate)) * round(up)), the gate's and the up's rows of W and Wu, tokens
 * past n not written. The tolerance follows each rounding (as the matrix-vector case). */
static void swiglu_case(mm_builder build, rt_device *d, mm_shape s, ir_scalar t, const uint32_t *ns, size_t n_ns) {
    kiln_err err = {0};
    uint32_t rows = s.rows, cols = s.cols, n_max = s.n_max, g[2] = {0, 0};
    ir_kernel *k = build(&d->caps, rows, cols, n_max, t, KN_EPI_SWIGLU, g, &err);
    cr_assert_not_null(k, "swiglu %ux%u: %s", rows, cols, err.msg);
    if (build == kn_matmul_skinny) cr_assert(g[0] == rows / 16 || g[0] == rows / 32, "grid %u", g[0]);
    if (g[1] == 0) g[1] = 1;
    rt_kernel *ck = d->ops->compile(d, k, NULL, &err);
    cr_assert_not_null(ck, "%s", err.msg);
    size_t nw = (size_t)rows * cols, nx = (size_t)n_max * cols, ny = (size_t)n_max * rows;
    float *wf, *uf, *xf;
    uint16_t *w = tu_rand16(t, nw, -1, 1, &wf), *wu = tu_rand16(t, nw, -1, 1, &uf), *x = tu_rand16(t, nx, -2, 2, &xf);
    uint16_t *poison = malloc((ny + GUARD) * 2), *y = malloc((ny + GUARD) * 2), *xp = malloc(nx * 2);
    cr_assert(poison && y && xp);
    for (size_t i = 0; i < ny + GUARD; i++) poison[i] = tu_nan16(t);
    rt_buffer *bw = tu_vk_upload(d, w, nw * 2), *bu = tu_vk_upload(d, wu, nw * 2), *bx = tu_vk_upload(d, x, nx * 2);
    rt_buffer *by = tu_vk_upload(d, poison, (ny + GUARD) * 2);
    uint32_t info[2] = {0, 0};
    rt_buffer *bi = tu_vk_upload(d, info, sizeof info);
    rt_arg args[5] = {{bw, 0}, {bu, 0}, {bx, 0}, {by, 0}, {bi, 0}};
    for (size_t ni = 0; ni < n_ns; ni++) {
        uint32_t n = ns[ni];
        if (n > n_max) continue;
        for (size_t i = 0; i < nx; i++) xp[i] = i / cols < n ? x[i] : tu_nan16(t);
        info[1] = n;
        tu_vk_reupload(d, bx, xp, nx * 2), tu_vk_reupload(d, by, poison, (ny + GUARD) * 2);
        tu_vk_reupload(d, bi, info, sizeof info);
        rt_launch l = {ck, {g[0], g[1], 1}, args, 5};
        cr_assert_eq(d->ops->run(d, &l, 1, &err), 0, "%s", err.msg);
        tu_vk_download(d, by, y, (ny + GUARD) * 2);
        for (size_t i = (size_t)n * rows; i < ny + GUARD; i++)
            cr_assert_eq(y[i], tu_nan16(t), "swiglu %ux%u n=%u: wrote [%zu]", rows, cols, n, i);
        for (uint32_t tk = 0; tk < n; tk++)
            for (uint32_t r = 0; r < rows; r++) {
                float sum[2];
                double tol[2];
                for (int h = 0; h < 2; h++) {
                    const float *wr = (h ? uf : wf) + (size_t)r * cols, *xr = xf + (size_t)tk * cols;
                    float sm = 0;
                    double mag = 0;
                    for (uint32_t c = 0; c < cols; c++) sm += wr[c] * xr[c], mag += fabs(wr[c] * xr[c]);
                    sum[h] = sm, tol[h] = 2.0 * cols * ldexp(1.0, -24) * mag;
                }
                float gv = tu_from16(t, tu_to16(t, sum[0])), uv = tu_from16(t, tu_to16(t, sum[1]));
                double want = gv / (1.0f + expf(-gv)) * uv, got = tu_from16(t, y[(size_t)tk * rows + r]);
                double dg = tol[0] + tu_ulp16(t, fabs(gv) + tol[0]), du = tol[1] + tu_ulp16(t, fabs(uv) + tol[1]);
                double tl = 1.1 * dg * (fabs(uv) + du) + (fabs(gv) + dg) * du +
                            (7 + 2 * fabs(gv)) * ldexp(1.0, -23) * fabs(want);
                tl += tu_ulp16(t, fmax(fabs(want), fabs(got)));
                cr_assert(fabs(got - want) <= tl, "swiglu %ux%u n=%u %s: Y[%u][%u] = %.9g, want %.9g (tol %.3g)", rows,
                          cols, n, tu_dname(t), tk, r, got, want, tl);
            }
    }
    d->ops->release(d, bw), d->ops->release(d, bu), d->ops->release(d, bx), d->ops->release(d, by);
    d->ops->release(d, bi);
    d->ops->release_kernel(d, ck);
    free(w), free(wu), free(x), free(wf), free(uf), free(xf), free(poison), free(y), free(xp);
    ir_kernel_destroy(k);
}

Test(kernels_matmul, skinny_swiglu_on_the_device, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    if (!kn_matmul_skinny_ok(&d->caps, 16, 32, 16, IR_BF16)) {
        d->ops->destroy(d);
        cr_skip_test("the device has no skinny products (16x8x16 or 16x16x16 matrix fragments)");
    }
    tu_seed(37);
    static const mm_shape sk[] = {{16, 32, 8}, {48, 160, 24}, {272, 1024, 64}, {1040, 256, 40}, {48, 96, 32}};
    static const uint32_t ns[] = {1, 8, 9, 24, 33, 64};
    uint32_t ran = 0;
    for (size_t i = 0; i < sizeof sk / sizeof sk[0]; i++)
        if (kn_matmul_skinny_ok(&d->caps, sk[i].rows, sk[i].cols, sk[i].n_max, dtypes[i % 2]))
            swiglu_case(kn_matmul_skinny, d, sk[i], dtypes[i % 2], ns, 6), ran++;
    cr_assert_geq(ran, 2, "only %u of the shapes ran", ran);
    setenv("KILN_SKINNY", "2,16,1", 1); /* 16 slices, one step in flight */
    swiglu_case(kn_matmul_skinny, d, (mm_shape){32, 1024, 16}, IR_BF16, ns, 6);
    setenv("KILN_SKINNY", "4,4,0,2", 1); /* 32 rows of Y: two fragments of the gate, two of the up */
    swiglu_case(kn_matmul_skinny, d, (mm_shape){96, 1024, 32}, IR_F16, ns, 6);
    swiglu_case(kn_matmul_skinny, d, (mm_shape){64, 512, 64}, IR_BF16, ns, 6);
    unsetenv("KILN_SKINNY");
    d->ops->destroy(d);
}

/* Built and assembled for CUDA's caps at sm_80 and sm_90 on any machine; refused where the
 * shape does not tile, the caps lack the fragments, or the device is not CUDA. */
Test(kernels_matmul, skinny_builds_and_refuses) {
    kiln_err err = {0};
    uint32_t g[2] = {0, 0};
    for (uint32_t cc = 80; cc <= 90; cc += 10) {
        rt_caps c = tu_cuda_caps(cc);
        for (size_t ti = 0; ti < 2; ti++)
            for (unsigned epi = 0; epi < 4; epi++) {
                ir_kernel *k = kn_matmul_skinny(&c, 4096, 12288, 64, dtypes[ti], epi, g, &err);
                cr_assert_not_null(k, "%s", err.msg);
                cr_assert(tu_ir_has(k, "frag.mma"));
                /* 16 or 32 rows a workgroup */
                cr_assert((g[0] == 4096 / 16 || g[0] == 4096 / 32) && g[1] == 1, "grid %u x %u", g[0], g[1]);
                tu_ptx_assembles(k, &c, "skinny");
                ir_kernel_destroy(k);
            }
        cr_assert(kn_matmul_skinny_ok(&c, 1024, 3072, 32, IR_BF16));
        cr_assert(kn_matmul_skinny_ok(&c, 64, 2560, 512, IR_BF16)); /* 8 blocks of 64 */
        ir_kernel *kb = kn_matmul_skinny(&c, 64, 2560, 512, IR_BF16, 0, g, &err);
        cr_assert_not_null(kb, "%s", err.msg);
        cr_assert(g[1] == 8 && (g[0] == 4 || g[0] == 2), "grid %u x %u", g[0], g[1]);
        tu_ptx_assembles(kb, &c, "skinny blocks");
        ir_kernel_destroy(kb);
        static const mm_shape bad[] = {
            {1000, 1024, 32}, {1024, 1000, 32}, {1024, 1024, 20}, {1024, 1024, 72}, {1024, 1024, 100}};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            cr_assert_not(kn_matmul_skinny_ok(&c, bad[i].rows, bad[i].cols, bad[i].n_max, IR_BF16));
            cr_assert_null(kn_matmul_skinny(&c, bad[i].rows, bad[i].cols, bad[i].n_max, IR_BF16, 0, g, &err));
            cr_assert(strstr(err.msg, "does not tile"), "%s", err.msg);
        }
        ir_kernel *sw = kn_matmul_skinny(&c, 1040, 1024, 32, IR_BF16, KN_EPI_SWIGLU, g, &err);
        cr_assert_not_null(sw, "%s", err.msg);
        cr_assert_eq(g[0], 1040 / 16); /* the gate's and the up's 16 rows a workgroup */
        tu_ptx_assembles(sw, &c, "skinny swiglu");
        ir_kernel_destroy(sw);
        cr_assert_null(kn_matmul_skinny(&c, 1024, 1024, 32, IR_BF16, KN_EPI_SWIGLU | KN_EPI_BIAS, g, &err));
        /* four row fragments (KILN_SKINNY): 64 rows a workgroup, SwiGLU's 32 */
        setenv("KILN_SKINNY", "4,4,0,2", 1);
        ir_kernel *k4 = kn_matmul_skinny(&c, 4096, 12288, 64, IR_BF16, KN_EPI_RESIDUAL, g, &err);
        cr_assert_not_null(k4, "%s", err.msg);
        cr_assert_eq(g[0], 4096 / 64);
        tu_ptx_assembles(k4, &c, "skinny 4 fragments");
        ir_kernel_destroy(k4);
        k4 = kn_matmul_skinny(&c, 9728, 2560, 64, IR_BF16, KN_EPI_SWIGLU, g, &err);
        cr_assert_not_null(k4, "%s", err.msg);
        cr_assert_eq(g[0], 9728 / 32);
        tu_ptx_assembles(k4, &c, "skinny swiglu 4 fragments");
        ir_kernel_destroy(k4);
        unsetenv("KILN_SKINNY");
    }
    /* Vulkan with cooperative matrices (the H200's driver): whole fragments from the buffers,
     * 16x8x16 for f16, 16x16x16 for bf16, so bf16 takes token counts of 16 only */
    rt_caps v;
    tu_caps_h200(&v);
    for (size_t ti = 0; ti < 2; ti++)
        for (unsigned epi = 0; epi < 5; epi++) {
            unsigned e = epi == 4 ? KN_EPI_SWIGLU : epi;
            ir_kernel *k = kn_matmul_skinny(&v, 1024, 3584, 64, dtypes[ti], e, g, &err);
            tu_emit_ok(k, &v, err.msg, "skinny vulkan");
        }
    cr_assert(kn_matmul_skinny_ok(&v, 1024, 1024, 24, IR_F16));
    cr_assert_not(kn_matmul_skinny_ok(&v, 1024, 1024, 24, IR_BF16));
    cr_assert(kn_matmul_skinny_ok(&v, 1024, 1024, 32, IR_BF16));
    rt_caps lp;
    tu_caps_min(&lp); /* no cooperative matrices */
    cr_assert_not(kn_matmul_skinny_ok(&lp, 1024, 1024, 32, IR_F16));
}

/* ---- the pipeline of asynchronous copies (CUDA, sm_80+) ------------------------------------- */

/* Where the device has asynchronous copies (CUDA sm_80+): each of the pipeline's tiles
 * (128 x 128 where the grid fills the device, then 64 x 128, then 64 x 64) at odd
 * shapes and n, every epilogue, poisoned rows and guards. */
Test(kernels_matmul, pipeline_tiles_on_the_device, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    if (!d->caps.async_copy) {
        d->ops->destroy(d);
        cr_skip_test("the device has no asynchronous copies: the pipeline is CUDA sm_80+'s");
    }
    tu_seed(37);
    /* on the H200's 132 SMs: 128 x 128, 64 x 128, then 64 x 64 three times */
    static const mm_shape sh[] = {{4241, 136, 512}, {3835, 72, 256}, {4227, 1000, 128}, {200, 264, 64}, {1000, 8, 128}};
    static const uint32_t ns[] = {1, 63, 65, 128, 129, 300, 512};
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
        for (size_t ti = 0; ti < 2; ti++)
            product_case(kn_matmul, d, sh[i], dtypes[ti], epi_of(i + ti), ns, sizeof ns / sizeof ns[0], NULL);
    d->ops->destroy(d);
}

/* Built and assembled for sm_80 and sm_90 caps on any machine: 128 x 128 tiles, over the
 * dynamic shared memory's 48 KiB; the 64 x 64 kernel where the caps take the copies away
 * or cols is not a multiple of 8 (16-byte copies). */
Test(kernels_matmul, pipeline_builds_for_cuda_caps, .timeout = 300) {
    kiln_err err = {0};
    static const mm_shape sh[] = {{4096, 4096, 512}, {24576, 4096, 2048}, {1000, 4104, 64}, {7, 8, 64}};
    for (uint32_t cc = 80; cc <= 90; cc += 10) {
        rt_caps c = tu_cuda_caps(cc);
        c.compute_units = 132; /* an H200's SMs: the tiles follow the grid they give */
        cr_assert_eq(rt_caps_override(&c, "no-wgmma", &err), 0, "%s", err.msg); /* sm_90's other variant */
        for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
            for (size_t ti = 0; ti < 2; ti++) {
                uint32_t g[2] = {0, 0};
                unsigned epi = epi_of(i + ti);
                char what[160];
                snprintf(what, sizeof what, "pipeline %ux%u n_max=%u %s epi=%s sm_%u", sh[i].rows, sh[i].cols,
                         sh[i].n_max, tu_dname(dtypes[ti]), tu_epi_name(epi), cc);
                ir_kernel *k = kn_matmul(&c, sh[i].rows, sh[i].cols, sh[i].n_max, dtypes[ti], epi, g, &err);
                cr_assert_not_null(k, "%s: %s", what, err.msg);
                cr_assert(tu_ir_has(k, "async.copy") && tu_ir_has(k, "frag.mma"), "%s: not the pipeline", what);
                /* 128 x 128 tiles where they fill the 132 SMs, else smaller */
                bool big = i < 2;
                cr_assert(!big || (g[0] == (sh[i].rows + 127) / 128 && g[1] == (sh[i].n_max + 127) / 128),
                          "%s: grid %u x %u", what, g[0], g[1]);
                cr_assert(i != 2 || (g[0] == 1000 / 64 + 1 && g[1] == 1), "%s: grid %u x %u, not 64 x 64 tiles", what,
                          g[0], g[1]);
                cr_assert_gt(ptx_dynamic_shared_bytes(k), 48u * 1024, "%s: the stages fit static shared memory", what);
                if (i < 2 || ti == 0) tu_ptx_assembles(k, &c, what);
                ir_kernel_destroy(k);
            }
        rt_caps off = c;
        cr_assert_eq(rt_caps_override(&off, "no-async-copy", &err), 0, "%s", err.msg);
        uint32_t g[2];
        ir_kernel *k = kn_matmul(&off, 4096, 4096, 512, IR_BF16, 0, g, &err);
        cr_assert(k && !tu_ir_has(k, "async.copy") && tu_ir_has(k, "frag.mma") && g[0] == 64,
                  "no-async-copy: the 64 x 64 kernel");
        tu_ptx_assembles(k, &off, "no-async-copy");
        ir_kernel_destroy(k);
        k = kn_matmul(&c, 4096, 4100, 512, IR_BF16, 0, g, &err);
        cr_assert(k && !tu_ir_has(k, "async.copy") && tu_ir_has(k, "frag.mma"), "cols 4100: the 64 x 64 kernel");
        ir_kernel_destroy(k);
    }
}

/* ---- warpgroup products (sm_90a) ------------------------------------------------------------ */

/* Built for sm_90 caps and assembled for sm_90a on any machine; refused without wgmma. */
Test(kernels_matmul, warpgroup_variant_builds_for_sm_90, .timeout = 300) {
    kiln_err err = {0};
    rt_caps c = tu_cuda_caps(90), c80 = tu_cuda_caps(80);
    c.compute_units = 132;
    cr_assert_eq(rt_caps_override(&c, "no-tma", &err), 0, "%s", err.msg); /* kn_matmul's choice below */
    /* the default shapes (tiles of 128, 192 and 256 rows by the grid), then others by
     * KILN_MATMUL_WG: products waited for in each chunk, 3 slots, 128-column chunks in 2 */
    static const mm_shape sh[] = {{4096, 4096, 512}, {6144, 4096, 512}, {24576, 4096, 2048}, {1000, 1000, 64}};
    static const uint32_t tile[] = {128, 192, 256, 128};
    static const char *const env[] = {NULL, "256,64,4,0", "128,64,3,1", "192,128,2,0"};
    for (size_t e = 0; e < sizeof env / sizeof env[0]; e++) {
        if (env[e]) setenv("KILN_MATMUL_WG", env[e], 1);
        for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
            for (size_t ti = 0; ti < 2; ti++) {
                if (e && i != 1) continue;
                uint32_t g[2] = {0, 0}, tr = e ? (uint32_t)atoi(env[e]) : tile[i];
                unsigned epi = epi_of(i + 2 * ti);
                ir_kernel *k = kn_matmul_wg(&c, sh[i].rows, sh[i].cols, sh[i].n_max, dtypes[ti], epi, g, &err);
                cr_assert_not_null(k, "%s", err.msg);
                char *text = ir_print(k);
                cr_assert(strstr(text, "wg.mma") && strstr(text, "sw128") && strstr(text, "async.copy"),
                          "not the warpgroup variant");
                cr_assert_eq(strstr(text, "wg.wait") != NULL, !env[e] || env[e][strlen(env[e]) - 1] == '1',
                             "products in flight or not");
                free(text);
                cr_assert(g[0] == (sh[i].rows + tr - 1) / tr && g[1] == (sh[i].n_max + 127) / 128,
                          "%ux%u: grid %u x %u, tiles of %u rows", sh[i].rows, sh[i].n_max, g[0], g[1], tr);
                tu_ptx_assembles(k, &c, env[e] ? env[e] : "matmul wg");
                ir_kernel_destroy(k);
            }
        unsetenv("KILN_MATMUL_WG");
    }
    /* SwiGLU: half a tile of gate rows and half of up rows, 64-column chunks only */
    for (size_t ti = 0; ti < 2; ti++) {
        uint32_t g[2] = {0, 0};
        ir_kernel *k = kn_matmul(&c, 12288, 4096, 512, dtypes[ti], KN_EPI_SWIGLU, g, &err);
        cr_assert_not_null(k, "%s", err.msg);
        char *text = ir_print(k);
        cr_assert(strstr(text, "wg.mma") && strstr(text, "@Wu"), "swiglu: not the warpgroup variant with Wu");
        free(text);
        cr_assert(g[0] == 12288 / 128 && g[1] == 4, "swiglu grid %u x %u: 128 rows of Y a workgroup", g[0], g[1]);
        tu_ptx_assembles(k, &c, "matmul wg swiglu");
        ir_kernel_destroy(k);
    }
    cr_assert(kn_matmul_swiglu_ok(&c, 12288, 4096, 512, IR_BF16));
    cr_assert_not(kn_matmul_swiglu_ok(&c, 12288, 4096, 100, IR_BF16), "n_max not a multiple of 64");
    cr_assert_not(kn_matmul_swiglu_ok(&c80, 12288, 4096, 512, IR_BF16), "sm_80: no wgmma");
    setenv("KILN_MATMUL_WG", "0", 1);
    cr_assert_not(kn_matmul_swiglu_ok(&c, 12288, 4096, 512, IR_BF16), "KILN_MATMUL_WG=0");
    unsetenv("KILN_MATMUL_WG");
    {
        uint32_t g[2];
        cr_assert_null(kn_matmul(&c80, 12288, 4096, 512, IR_BF16, KN_EPI_SWIGLU, g, &err));
        cr_assert(strstr(err.msg, "SwiGLU") && strstr(err.msg, "warpgroup"), "%s", err.msg);
    }
    /* kn_matmul takes it where its tiles fill the SMs, not for a small grid or with it off */
    uint32_t g[2];
    ir_kernel *k = kn_matmul(&c, 4096, 4096, 512, IR_BF16, 0, g, &err);
    cr_assert_not_null(k, "%s", err.msg);
    char *text = ir_print(k);
    cr_assert(strstr(text, "wg.mma"), "kn_matmul 4096x4096x512 on sm_90: not the warpgroup variant");
    free(text);
    ir_kernel_destroy(k);
    k = kn_matmul(&c, 1000, 4104, 64, IR_BF16, 0, g, &err);
    text = ir_print(k);
    cr_assert(text && !strstr(text, "wg.mma"), "a grid of 8: the warpgroup variant");
    free(text);
    ir_kernel_destroy(k);
    setenv("KILN_MATMUL_WG", "0", 1);
    cr_assert_not(kn_matmul_wg_ok(&c, IR_BF16, 4096), "KILN_MATMUL_WG=0");
    unsetenv("KILN_MATMUL_WG");
    cr_assert_null(kn_matmul_wg(&c80, 4096, 4096, 512, IR_BF16, 0, g, &err));
    cr_assert(strstr(err.msg, "wgmma"), "%s", err.msg);
    cr_assert_eq(rt_caps_override(&c, "no-wgmma", &err), 0, "%s", err.msg);
    cr_assert_not(kn_matmul_wg_ok(&c, IR_BF16, 4096));
}

/* The tensor copy engine's variant, built for sm_90 and assembled for sm_90a on any
 * machine: every tile width and cluster, the epilogues; kn_matmul's first choice there;
 * refused without caps.tma, below sm_90 and by KILN_MATMUL_TMA=0. */
Test(kernels_matmul, tma_variant_builds_for_sm_90, .timeout = 300) {
    kiln_err err = {0};
    rt_caps c = tu_cuda_caps(90), c80 = tu_cuda_caps(80);
    c.compute_units = 132;
    cr_assert(c.tma && !c80.tma);
    static const char *const env[] = {NULL, "128,1", "192,2", "256,2"};
    static const mm_shape sh[] = {{4096, 4096, 512}, {1000, 1000, 64}, {24576, 4096, 2048}};
    for (size_t e = 0; e < sizeof env / sizeof env[0]; e++) {
        if (env[e]) setenv("KILN_MATMUL_TMA", env[e], 1);
        for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
            if (i == 1 && !env[e]) continue; /* a grid of 8: kn_matmul keeps another variant (below) */
            unsigned epi = i == 2 ? KN_EPI_SWIGLU : epi_of(e + i);
            uint32_t g[2] = {0, 0};
            ir_kernel *k = kn_matmul(&c, sh[i].rows, sh[i].cols, sh[i].n_max, dtypes[(e + i) % 2], epi, g, &err);
            cr_assert_not_null(k, "%s", err.msg);
            char *text = ir_print(k);
            bool pairs = (sh[i].n_max + 127) / 128 % 2 == 0, cl = pairs && env[e] && env[e][strlen(env[e]) - 1] == '2';
            cr_assert(strstr(text, "tma.load") && strstr(text, "mbar.wait") && strstr(text, "wg.mma"),
                      "not the tma variant");
            cr_assert_eq(strstr(text, "cluster(2)") != NULL, cl, "%ux%u (%s): clusters or not", sh[i].rows, sh[i].n_max,
                         env[e] ? env[e] : "default");
            cr_assert_eq(strstr(text, "multicast") != NULL, cl, "multicast with clusters only");
            cr_assert_eq(g[1], 1u, "a 1D grid");
            cr_assert_eq(g[0] % (cl ? 2 : 1), 0u, "the grid a multiple of the cluster");
            free(text);
            tu_ptx_assembles(k, &c, env[e] ? env[e] : "matmul tma");
            ir_kernel_destroy(k);
        }
        unsetenv("KILN_MATMUL_TMA");
    }
    uint32_t g[2];
    ir_kernel *small = kn_matmul(&c, 1000, 1000, 64, IR_BF16, 0, g, &err);
    char *small_text = ir_print(small);
    cr_assert(small_text && !strstr(small_text, "tma.load"), "a grid of 8 on 132 SMs: the tma variant");
    free(small_text);
    ir_kernel_destroy(small);
    cr_assert_null(kn_matmul_tma(&c80, 4096, 4096, 512, IR_BF16, 0, g, &err));
    cr_assert(strstr(err.msg, "tensor copy engine"), "%s", err.msg);
    cr_assert_null(kn_matmul_tma(&c, 4095, 4096, 512, IR_BF16, 0, g, &err), "rows of 2");
    cr_assert_null(kn_matmul_tma(&c, 4096, 4092, 512, IR_BF16, 0, g, &err), "cols of 8");
    setenv("KILN_MATMUL_TMA", "0", 1);
    cr_assert_null(kn_matmul_tma(&c, 4096, 4096, 512, IR_BF16, 0, g, &err), "KILN_MATMUL_TMA=0");
    unsetenv("KILN_MATMUL_TMA");
    cr_assert_eq(rt_caps_override(&c, "no-tma", &err), 0, "%s", err.msg);
    ir_kernel *k = kn_matmul(&c, 4096, 4096, 512, IR_BF16, 0, g, &err);
    char *text = ir_print(k);
    cr_assert(text && !strstr(text, "tma.load"), "no-tma: the tma variant");
    free(text);
    ir_kernel_destroy(k);
}

/* Where the device has the tensor copy engine (the H200): the tma variant at odd shapes
 * and n, every epilogue, clusters of one and two, poisoned rows and guards. */
Test(kernels_matmul, tma_variant_on_the_device, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    if (!d->caps.tma || !d->caps.wgmma) {
        d->ops->destroy(d);
        cr_skip_test("the device has no tensor copy engine and warpgroup products (sm_90a)");
    }
    tu_seed(41);
    static const mm_shape sh[] = {{4242, 136, 512}, {200, 1000, 128}, {1000, 8, 64}, {300, 264, 256}};
    static const uint32_t ns[] = {1, 63, 65, 128, 129, 300, 512};
    static const char *const cfg[] = {NULL, "256,2", "192,2"};
    for (size_t e = 0; e < sizeof cfg / sizeof cfg[0]; e++) {
        if (cfg[e]) setenv("KILN_MATMUL_TMA", cfg[e], 1);
        for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
            product_case(kn_matmul_tma, d, sh[i], dtypes[(i + e) % 2], epi_of(i + e), ns, sizeof ns / sizeof ns[0],
                         cfg[e] ? cfg[e] : "tma");
        static const mm_shape sw[] = {{200, 1000, 128}, {1000, 136, 256}, {136, 64, 64}};
        static const uint32_t sns[] = {1, 63, 65, 128, 129, 256};
        for (size_t i = 0; i < sizeof sw / sizeof sw[0]; i++)
            swiglu_case(kn_matmul_tma, d, sw[i], dtypes[(i + e) % 2], sns, 6);
        unsetenv("KILN_MATMUL_TMA");
    }
    d->ops->destroy(d);
}

/* Where the device has wgmma (the H200): the warpgroup variant at odd shapes and n, every
 * epilogue, poisoned rows and guards. */
Test(kernels_matmul, warpgroup_variant_on_the_device, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    if (!kn_matmul_wg_ok(&d->caps, IR_BF16, 64)) {
        d->ops->destroy(d);
        cr_skip_test("the device has no warpgroup products (wgmma, sm_90a)");
    }
    tu_seed(38);
    static const mm_shape sh[] = {{4241, 136, 512}, {200, 1000, 128}, {1000, 8, 64}, {300, 264, 256}};
    static const uint32_t ns[] = {1, 63, 65, 128, 129, 300, 512};
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
        for (size_t ti = 0; ti < 2; ti++)
            product_case(kn_matmul_wg, d, sh[i], dtypes[ti], epi_of(i + ti), ns, sizeof ns / sizeof ns[0], "wgmma");
    /* the SwiGLU epilogue: half-tiles of gate and up rows, a rows tail in each tile size */
    static const mm_shape sw[] = {{200, 1000, 128}, {1000, 136, 256}, {136, 64, 64}};
    static const char *const tiles[] = {NULL, "192,64,4,1", "128,64,3,0"};
    static const uint32_t sns[] = {1, 63, 65, 128, 129, 256};
    for (size_t e = 0; e < sizeof tiles / sizeof tiles[0]; e++) {
        if (tiles[e]) setenv("KILN_MATMUL_WG", tiles[e], 1);
        for (size_t i = 0; i < sizeof sw / sizeof sw[0]; i++)
            swiglu_case(kn_matmul_wg, d, sw[i], dtypes[(i + e) % 2], sns, 6);
        unsetenv("KILN_MATMUL_WG");
    }
    d->ops->destroy(d);
}

/* ---- variants built for other devices, and refusals --------------------------------------- */

/* Caps, whether each dtype (bf16, f16) should get cooperative matrices there, and whether
 * the 128 x 128 tile fits (8 subgroups, 32-column chunks): then it is taken where its grid
 * fills the compute units (64 where unknown). */
typedef struct caps_case {
    const char *name;
    rt_caps c;
    bool mma[2];
    bool large;
} caps_case;

Test(kernels_matmul, variants_build_for_min_and_h200_caps) {
    kiln_err err = {0};
    caps_case cs[6];
    tu_caps_min(&cs[0].c);
    for (int i = 1; i < 6; i++) { /* matmul_coop.c's tiles (workgroup_scope_* test matmul_coop2.c) */
        tu_caps_h200(&cs[i].c);
        cr_assert_eq(rt_caps_override(&cs[i].c, "no-coopmat2", &err), 0, "%s", err.msg);
    }
    cs[0].name = "spec-minimum", cs[0].mma[0] = cs[0].mma[1] = false;
    cs[1].name = "h200", cs[1].mma[0] = cs[1].mma[1] = true, cs[1].large = true;
    /* a driver without VK_KHR_shader_bfloat16: bf16 tiled, f16 cooperative */
    cs[2].name = "h200 no-bf16", cs[2].mma[0] = false, cs[2].mma[1] = true, cs[2].large = true;
    cr_assert_eq(rt_caps_override(&cs[2].c, "no-bf16", &err), 0, "%s", err.msg);
    /* 64-lane subgroups: 256 invocations of cooperative matrices (not with 128 at most) */
    cs[3].name = "subgroup 64", cs[3].c.subgroup_size = cs[3].c.subgroup_min = cs[3].c.subgroup_max = 64;
    cs[3].mma[0] = cs[3].mma[1] = true, cs[3].large = true;
    cs[4] = cs[3], cs[4].name = "subgroup 64, workgroup 128", cs[4].c.max_workgroup = 128;
    cs[4].mma[0] = cs[4].mma[1] = cs[4].large = false;
    /* 32 KiB: the small tile's 32-column chunks (the large one's need 38 KiB); 16 KiB holds
     * no cooperative tile */
    cs[5].name = "h200 shared=32768", cs[5].c.shared_bytes = 32768, cs[5].mma[0] = cs[5].mma[1] = true;
    cs[5].large = false;
    cs[1].c.compute_units = 132;        /* the H200's SMs; the others leave them unknown */
    static const mm_shape shapes_b[] = {/* qwen3-0.6b's projections at 512 tokens */
                                        {1024, 1024, 512},
                                        {2048, 1024, 512},
                                        {3072, 1024, 512},
                                        {1024, 3072, 512},
                                        {1024, 2048, 512},
                                        {4096, 1024, 512},
                                        /* odd ones, and a vocabulary-sized one */
                                        {1, 1, 64},
                                        {7, 7, 64},
                                        {4097, 1000, 256},
                                        {1000, 4097, 64},
                                        {151936, 1024, 64}};
    /* the large tile where it fits and its grid fills the compute units, or where forced */
    for (int force = 0; force < 2; force++) {
        if (force) setenv("KILN_MATMUL_COOP", "large", 1);
        for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
            for (size_t ti = 0; ti < 2; ti++)
                for (unsigned epi = 0; epi < 4; epi++)
                    for (size_t i = 0; i < sizeof shapes_b / sizeof shapes_b[0]; i++) {
                        if (epi && i % 3) continue; /* every epilogue on a third of the shapes */
                        const rt_caps *c = &cs[ci].c;
                        mm_shape s = shapes_b[i];
                        uint32_t g[2] = {0, 0};
                        char what[200];
                        snprintf(what, sizeof what, "matmul %ux%u n_max=%u %s epi=%s caps %s%s", s.rows, s.cols,
                                 s.n_max, tu_dname(dtypes[ti]), tu_epi_name(epi), cs[ci].name,
                                 force ? " (large forced)" : "");
                        ir_kernel *k = kn_matmul(c, s.rows, s.cols, s.n_max, dtypes[ti], epi, g, &err);
                        cr_assert_not_null(k, "%s: %s", what, err.msg);
                        cr_assert_eq(tu_ir_has(k, "frag.mma"), cs[ci].mma[ti], "%s: cooperative matrices %s", what,
                                     cs[ci].mma[ti] ? "not used" : "used");
                        /* the grid covers each output once, in 128- or 64-square tiles */
                        uint32_t units = c->compute_units ? c->compute_units : 64;
                        uint64_t grid128 = (uint64_t)((s.rows + 127) / 128) * ((s.n_max + 127) / 128);
                        uint32_t tile = cs[ci].mma[ti] && cs[ci].large && (force || grid128 >= units) ? 128 : 64;
                        cr_assert_eq(g[0], (s.rows + tile - 1) / tile, "%s: groups x %u (tile %u)", what, g[0], tile);
                        cr_assert_eq(g[1], (s.n_max + tile - 1) / tile, "%s: groups y %u (tile %u)", what, g[1], tile);
                        tu_emit_ok(k, c, err.msg, what);
                    }
    }
    unsetenv("KILN_MATMUL_COOP");
}

Test(kernels_matmul, bad_shapes_dtypes_and_epilogues_are_refused) {
    rt_caps c, plain;
    tu_caps_h200(&c);
    rt_caps_default(&plain, RT_VULKAN); /* no 16-bit buffers */
    kiln_err err = {0};
    uint32_t g[2];
    static const struct {
        uint32_t rows, cols, n_max;
    } bad[] = {
        {0, 64, 64},        {64, 0, 64},  {64, 64, 0},
        {64, 64, 100},      {64, 64, 32}, {1u << 16, 1u << 16, 64}, /* rows * cols = 2^32 */
        {64, 1u << 26, 64},                                         /* n_max * cols = 2^32 */
        {1u << 26, 1, 64},                                          /* n_max * rows = 2^32 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = 0;
        cr_assert_null(kn_matmul(&c, bad[i].rows, bad[i].cols, bad[i].n_max, IR_BF16, 0, g, &err),
                       "%ux%u n_max=%u built", bad[i].rows, bad[i].cols, bad[i].n_max);
        cr_assert(!strncmp(err.msg, "kn_matmul: bad shape", 20), "%s", err.msg);
    }
    cr_assert(strstr(err.msg, "2^32"), "%s", err.msg);
    /* just under the limits builds */
    ir_kernel *k = kn_matmul(&c, (1u << 26) - 1, 1, 64, IR_BF16, 0, g, &err);
    cr_assert_not_null(k, "%s", err.msg);
    ir_kernel_destroy(k);
    cr_assert_null(kn_matmul(&c, 64, 64, 64, IR_F32, 0, g, &err));
    cr_assert(strstr(err.msg, "bf16 or f16"), "%s", err.msg);
    cr_assert_null(kn_matmul(&plain, 64, 64, 64, IR_BF16, 0, g, &err));
    cr_assert(strstr(err.msg, "storage16"), "%s", err.msg);
    cr_assert_null(kn_matmul(&c, 64, 64, 64, IR_BF16, KN_EPI_SWIGLU, g, &err));
    cr_assert(!strncmp(err.msg, "kn_matmul: ", 11), "%s", err.msg);
    cr_assert_null(kn_matmul(&c, 64, 64, 64, IR_BF16, KN_EPI_SWIGLU | KN_EPI_BIAS, g, &err));
    cr_assert_null(kn_matmul(&c, 64, 64, 64, IR_BF16, 8, g, &err));
    cr_assert_null(kn_matmul(NULL, 64, 64, 64, IR_BF16, 0, g, &err));
    rt_caps tiny;
    tu_caps_min(&tiny);
    tiny.shared_bytes = 1024; /* not even 4 columns of a 64 x 64 tile */
    cr_assert_null(kn_matmul(&tiny, 64, 64, 64, IR_BF16, 0, g, &err));
    cr_assert(strstr(err.msg, "kn_matmul: caps.shared_bytes"), "%s", err.msg);
}

/* ---- the matrix-vector products' short rows on CUDA ----------------------------------------- */

/* Where a bf16 row is short a CUDA subgroup takes up to four (a row's 4096 columns at most,
 * two workgroups an SM kept): the logits head of qwen3-0.6b gets a quarter of the
 * workgroups, an 8B's rows one subgroup each; assembled with ptxas. */
Test(kernels_matmul, matvec_short_rows_on_cuda) {
    rt_caps c = tu_cuda_caps(90);
    c.compute_units = 132;
    kiln_err err = {0};
    uint32_t gx = 0;
    ir_kernel *k = kn_matvec_norm(&c, 151936, 1024, IR_BF16, IR_F32, KN_EPI_NONE, 1e-6f, &gx, &err);
    cr_assert_not_null(k, "%s", err.msg);
    cr_assert_eq(gx, 151936 / 32, "grid %u", gx);
    tu_ptx_assembles(k, &c, "matvec short rows");
    ir_kernel_destroy(k);
    static const uint32_t shapes[][3] = {
        {4096, 4096, 8}, {16384, 512, 32}, {8448, 1536, 16}, {4096, 1024, 8}, {4097, 1024, 8}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        k = kn_matvec(&c, shapes[i][0], shapes[i][1], IR_BF16, IR_BF16, KN_EPI_RESIDUAL, &gx, &err);
        cr_assert_not_null(k, "%s", err.msg);
        uint32_t want = (shapes[i][0] + shapes[i][2] - 1) / shapes[i][2];
        cr_assert_eq(gx, want, "%ux%u: grid %u, not %u", shapes[i][0], shapes[i][1], gx, want);
        ir_kernel_destroy(k);
    }
}
