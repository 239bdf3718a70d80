/* Block-quantized weights on the device (kernels/kn_quant.h): gguf_block_unpack's codes
 * and scales give ggml's values bit for bit; plan_quant_pack's planes read back through
 * the kernels on the Vulkan device (lavapipe in CI): the embedding bit for bit, the
 * products against the exact dequantized values with f32 sums, at odd row counts, every
 * type, outputs poisoned with guards after them. Random blocks carry random codes and
 * scales, f16 fields included subnormal ones.
 *
 * Tolerance of a product: the kernel sums a sub-block as s * sum(q x) + m * sum(x), the
 * reference sum((s q + m) x); each of the 2n + few products and sums rounds once in f32,
 * so the two are within (3n + 8) * 2^-24 * sum|w x| (plus |m| sum|x| terms, bounded the
 * same way by the reference's own magnitudes), then the 16-bit rounding as for kn_matvec. */
#include "backend-spirv/vk_device.h"
#include "base/error.h"
#include "gguf/gguf.h"
#include "gguf/half.h"
#include "kernels/kernels.h"
#include "plan/plan_quant.h"
#include "tests/util/testutil_dev.h"
#include "tests/util/testutil_ptx.h"
#include "tests/util/testutil_quant.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64

/* ---- the codes and scales are ggml's values ---- */

Test(kernels_quant, unpacked_blocks_are_ggml_values) {
    tu_seed(31);
    for (int q = 0; q < KN_Q_COUNT; q++) {
        const kn_qformat *f = kn_qformat_of((kn_qtype)q);
        uint32_t gt = tu_qtypes[q], blk = gguf_type_info_of(gt)->block;
        cr_assert_eq(plan_qtype(gt), q);
        uint8_t *b = tu_rand_blocks(gt, 64);
        float want[256];
        for (int i = 0; i < 64; i++) {
            const uint8_t *bb = b + (size_t)i * gguf_type_info_of(gt)->block_bytes;
            gguf_qblock qb;
            cr_assert_eq(gguf_block_unpack(gt, bb, &qb), 0);
            cr_assert_eq(gguf_decode_f32(gt, bb, want, blk), 0);
            for (uint32_t j = 0; j < blk; j++) {
                uint32_t sub = j / f->sub;
                float d = gguf_f16_to_f32(qb.d), s = f->k_quant ? d * (float)qb.sc[sub] : d, m = 0;
                if (f->has_min) m = f->k_quant ? -(gguf_f16_to_f32(qb.dm) * (float)qb.mn[sub]) : gguf_f16_to_f32(qb.dm);
                volatile float p = s * (float)((int)qb.code[j] - (int)f->offset); /* no fused multiply-add */
                float v = f->has_min ? p + m : p;
                cr_assert(memcmp(&v, &want[j], 4) == 0, "%s block %d element %u: %.9g != ggml's %.9g", f->name, i, j,
                          v, want[j]);
            }
        }
        free(b);
    }
    gguf_qblock qb;
    cr_assert_eq(gguf_block_unpack(GGUF_T_F16, (const uint8_t *)"\0\0", &qb), -1);
}

static rt_buffer *upload_words(rt_device *d, const tu_qmat *m) { return tu_vk_upload(d, m->words, m->L.words * 4); }

static void run(rt_device *d, const ir_kernel *k, uint32_t gx, uint32_t gy, const rt_arg *args, uint32_t n) {
    rt_kernel *ck = tu_vk_compile(d, k);
    tu_vk_run(d, ck, gx, gy, args, n);
    d->ops->release_kernel(d, ck);
}

static uint16_t *fetch16(rt_device *d, rt_buffer *b, ir_scalar t, size_t n, const char *what) {
    uint16_t *p = malloc((n + GUARD) * 2);
    tu_vk_download(d, b, p, (n + GUARD) * 2);
    for (size_t i = n; i < n + GUARD; i++)
        cr_assert_eq(p[i], tu_nan16(t), "%s: wrote past the end at %zu", what, i);
    return p;
}

static const uint32_t rows_cases[] = {1, 7, 33, 129};

static uint32_t cols_for(kn_qtype q, int i) {
    static const uint32_t small[] = {32, 96, 1056}, kq[] = {256, 768, 2816};
    return kn_qformat_of(q)->unit == 256 ? kq[i] : small[i];
}

/* The row of the parts stacked: which part and its row there. */
static const tu_qmat *part_row(const tu_qmat *w, uint32_t n_parts, uint32_t r, uint32_t *local) {
    uint32_t i = 0;
    while (i + 1 < n_parts && r >= w[i].L.rows) r -= w[i++].L.rows;
    *local = r;
    return &w[i];
}

static const char *parts_name(const kn_qpart *parts, uint32_t n, char *buf, size_t cap) {
    size_t at = 0;
    for (uint32_t i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s:%u", i ? "+" : "", kn_qformat_of(parts[i].type)->name,
                               parts[i].rows);
    return buf;
}

/* ---- the decode step's product ---- */

static uint32_t last_groups; /* the last matvec_q_case's grid */

static void matvec_q_case(rt_device *d, const kn_qpart *parts, uint32_t n_parts, uint32_t cols, ir_scalar t,
                          unsigned epi, bool norm, const char *var, bool want_mma) {
    kiln_err err = {0};
    char what[200], pn[96];
    snprintf(what, sizeof what, "matvec_q%s %s x %u %s epi %u caps=%s", norm ? "_norm" : "",
             parts_name(parts, n_parts, pn, sizeof pn), cols, tu_dname(t), epi, var ? var : "device");
    uint32_t gx = 0, rows = 0;
    const float eps = 1e-6f;
    bool swi = epi & KN_EPI_SWIGLU;
    for (uint32_t i = 0; i < n_parts; i++) rows += swi && i ? 0 : parts[i].rows;
    ir_kernel *k = norm ? kn_matvec_q_norm(&d->caps, parts, n_parts, cols, t, t, epi, eps, &gx, &err)
                        : kn_matvec_q(&d->caps, parts, n_parts, cols, t, t, epi, &gx, &err);
    cr_assert_not_null(k, "%s: %s", what, err.msg);
    if (want_mma && d->caps.backend == RT_CUDA)
        cr_assert(!strncmp(ir_kernel_name(k), "kn_matvec_q_mma", 15), "%s: not on the matrix units", what);
    tu_qmat w[KN_Q_PARTS] = {0};
    for (uint32_t i = 0; i < n_parts; i++) w[i] = tu_qmat_make(parts[i].type, parts[i].rows, cols);
    float *xf, *rf, *nf;
    uint16_t *x = tu_rand16(t, cols, -2, 2, &xf), *res = tu_rand16(t, rows, -8, 8, &rf);
    uint16_t *wn = tu_rand16(t, cols, 0.5f, 1.5f, &nf);
    float *xin = xf; /* the product's input: x, or its norm as kn_rmsnorm rounds it */
    float *hx = malloc(cols * 4);
    if (norm) {
        float ss = 0;
        for (uint32_t c = 0; c < cols; c++) ss += xf[c] * xf[c];
        float scale = 1.0f / sqrtf(ss / (float)cols + eps);
        for (uint32_t c = 0; c < cols; c++) hx[c] = tu_from16(t, tu_to16(t, (xf[c] * scale) * nf[c]));
        xin = hx;
    }
    rt_buffer *bw[KN_Q_PARTS] = {0};
    for (uint32_t i = 0; i < n_parts; i++) bw[i] = upload_words(d, &w[i]);
    rt_buffer *bx = tu_vk_upload(d, x, cols * 2), *br = tu_vk_upload(d, res, rows * 2);
    rt_buffer *bn = tu_vk_upload(d, wn, cols * 2), *by = tu_vk_poisoned16(d, t, rows, GUARD);
    rt_arg args[8] = {{bw[0], 0}};
    uint32_t na = 1;
    for (uint32_t i = 1; i < n_parts && !swi; i++) args[na++] = (rt_arg){bw[i], 0};
    args[na++] = (rt_arg){bx, 0}, args[na++] = (rt_arg){by, 0};
    if (epi & KN_EPI_RESIDUAL) args[na++] = (rt_arg){br, 0};
    if (swi) args[na++] = (rt_arg){bw[1], 0};
    if (norm) args[na++] = (rt_arg){bn, 0};
    run(d, k, gx, 1, args, na);
    last_groups = gx;
    uint16_t *y = fetch16(d, by, t, rows, what);
    for (uint32_t r = 0; r < rows; r++) {
        uint32_t lr;
        const tu_qmat *pm = swi ? &w[0] : part_row(w, n_parts, r, &lr);
        if (swi) lr = r;
        double tol, s = tu_qref_dot(pm, lr, xin, &tol), want, tl;
        if (norm) tol += (cols + 8) * ldexp(1.0, -24) * fabs(s) + tol; /* the norm's scale, one 16-bit ulp of x */
        if (swi) {
            double tu_, su = tu_qref_dot(&w[1], r, xin, &tu_);
            float g = tu_from16(t, tu_to16(t, (float)s)), up = tu_from16(t, tu_to16(t, (float)su));
            want = g / (1.0f + expf(-g)) * up;
            double dg = tol + tu_ulp16(t, fabs(g) + tol), du = tu_ + tu_ulp16(t, fabs(up) + tu_);
            tl = 1.1 * dg * (fabs(up) + du) + (fabs(g) + dg) * du + (7 + 2 * fabs(g)) * ldexp(1.0, -23) * fabs(want);
        } else {
            want = s, tl = tol;
            if (epi & KN_EPI_RESIDUAL) {
                tl += tu_ulp16(t, fabs(s) + tl);
                want = tu_from16(t, tu_to16(t, (float)s)) + rf[r];
            }
        }
        double got = tu_from16(t, y[r]);
        tl += tu_ulp16(t, fmax(fabs(want), fabs(got)));
        cr_assert(fabs(got - want) <= tl, "%s: [%u] %.9g != %.9g (tol %.3g)", what, r, got, want, tl);
    }
    rt_buffer *bufs[] = {bw[0], bw[1], bw[2], bx, br, bn, by};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) d->ops->release(d, bufs[i]);
    for (uint32_t i = 0; i < n_parts; i++) tu_qmat_free(&w[i]);
    free(x), free(res), free(wn), free(xf), free(rf), free(nf), free(hx), free(y);
    ir_kernel_destroy(k);
}

static const char *const variants[] = {NULL, "no-subgroup-arith"};

Test(kernels_quant, matvec_q_every_type_odd_rows_with_guards, .timeout = 600) {
    for (size_t v = 0; v < 2; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(32);
        for (int q = 0; q < KN_Q_COUNT; q++)
            for (int ci = 0; ci < 3; ci++) {
                uint32_t rows = rows_cases[(q + ci) % 4], cols = cols_for((kn_qtype)q, ci);
                ir_scalar t = (q + ci) % 2 ? IR_F16 : IR_BF16;
                kn_qpart one = {(kn_qtype)q, rows};
                matvec_q_case(d, &one, 1, cols, t, KN_EPI_NONE, false, variants[v], false);
                matvec_q_case(d, &one, 1, cols, t, KN_EPI_RESIDUAL, ci == 2, variants[v], false);
            }
        d->ops->destroy(d);
    }
}

/* q, k and v of different types in one product; SwiGLU's gate and up of different types. */
Test(kernels_quant, matvec_q_parts_and_swiglu_mixed_types, .timeout = 600) {
    for (size_t v = 0; v < 2; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(35);
        kn_qpart qkv[3] = {{KN_Q4_K, 33}, {KN_Q4_K, 7}, {KN_Q6_K, 7}}, ff[2] = {{KN_Q4_K, 29}, {KN_Q5_K, 29}};
        kn_qpart mixed[3] = {{KN_Q8_0, 5}, {KN_Q4_0, 16}, {KN_Q5_1, 3}};
        matvec_q_case(d, qkv, 3, 512, IR_BF16, KN_EPI_NONE, true, variants[v], false);
        matvec_q_case(d, ff, 2, 768, IR_BF16, KN_EPI_SWIGLU, true, variants[v], false);
        matvec_q_case(d, ff, 2, 256, IR_F16, KN_EPI_SWIGLU, false, variants[v], false);
        matvec_q_case(d, mixed, 3, 96, IR_F16, KN_EPI_NONE, false, variants[v], false);
        /* parts of whole row groups: a subgroup's rows in one part, the last part odd */
        kn_qpart grouped[3] = {{KN_Q4_K, 64}, {KN_Q5_K, 16}, {KN_Q6_K, 21}};
        matvec_q_case(d, grouped, 3, 4096, IR_BF16, KN_EPI_RESIDUAL, true, variants[v], false);
        d->ops->destroy(d);
    }
}

/* Shapes the matrix-unit form takes (rows whole groups of 16, cols whole passes: one
 * subgroup's passes unrolled and the rest one by one), every type whose codes the 16-bit
 * type holds, fused norm, residual and SwiGLU: on CUDA it must be the one that runs. */
Test(kernels_quant, matvec_q_fragments_every_type, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(39);
    for (int q = 0; q < KN_Q_COUNT; q++) {
        if (q == KN_Q3_K) continue; /* a sub-block's high bits in half a word: the general kernel */
        ir_scalar t = q == KN_Q8_0 || q % 2 ? IR_F16 : IR_BF16; /* Q8_0's codes pass bf16's 7 bits */
        kn_qpart one = {(kn_qtype)q, q % 2 ? 48 : 32}; /* 17 or 34 passes, and 5 or 10 */
        matvec_q_case(d, &one, 1, 17 * 256, t, KN_EPI_NONE, false, "fragments", true);
        matvec_q_case(d, &one, 1, 5 * 256, t, KN_EPI_RESIDUAL, true, "fragments", true);
    }
    kn_qpart qkv[3] = {{KN_Q4_K, 64}, {KN_Q4_K, 16}, {KN_Q6_K, 32}}, ff[2] = {{KN_Q4_K, 48}, {KN_Q4_K, 48}};
    matvec_q_case(d, qkv, 3, 4096, IR_BF16, KN_EPI_NONE, true, "fragments", true);
    matvec_q_case(d, ff, 2, 3072, IR_BF16, KN_EPI_SWIGLU, true, "fragments", true);
    kn_qpart q5[2] = {{KN_Q5_0, 16}, {KN_Q4_1, 32}}; /* a min in one part only */
    matvec_q_case(d, q5, 2, 512, IR_F16, KN_EPI_RESIDUAL, false, "fragments", true);
    d->ops->destroy(d);
}

/* The streamed form (KILN_MATVEC_Q_STREAM): workgroups that walk several tiles (more
 * tiles than the grid, unevenly shared), the ring at depths 2 and 4, every type whose
 * codes the 16-bit type holds, fused norm, residual and SwiGLU. */
Test(kernels_quant, matvec_q_streamed_every_type, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    if (d->caps.backend != RT_CUDA || !d->caps.async_copy || !d->caps.compute_units) {
        d->ops->destroy(d);
        cr_skip("the streamed form is CUDA's (fragments whose registers the target exposes, cp.async)");
    }
    tu_seed(41);
    uint32_t grid = d->caps.compute_units, tiles = grid * 2 + 7; /* 7 workgroups take three tiles */
    for (int q = 0; q < KN_Q_COUNT; q++) {
        if (q == KN_Q3_K) continue;
        ir_scalar t = q == KN_Q8_0 || q % 2 ? IR_F16 : IR_BF16;
        const kn_qformat *f = kn_qformat_of((kn_qtype)q);
        setenv("KILN_MATVEC_Q_STREAM", q % 2 ? "2" : "4", 1);
        kn_qpart one = {(kn_qtype)q, tiles * 16};
        matvec_q_case(d, &one, 1, 8 * 8 * f->sub, t, KN_EPI_NONE, false, "streamed", true);
        cr_assert_eq(last_groups, grid, "%s: not streamed", f->name);
        kn_qpart few = {(kn_qtype)q, 48}; /* fewer tiles than compute units: one a workgroup */
        matvec_q_case(d, &few, 1, 16 * 8 * f->sub, t, KN_EPI_RESIDUAL, true, "streamed", true);
        cr_assert_eq(last_groups, 3);
    }
    setenv("KILN_MATVEC_Q_STREAM", "3,2", 1);
    kn_qpart ff[2] = {{KN_Q4_K, tiles * 16}, {KN_Q4_K, tiles * 16}};
    matvec_q_case(d, ff, 2, 4096, IR_BF16, KN_EPI_SWIGLU, true, "streamed", true);
    cr_assert_eq(last_groups, tiles < 2 * grid ? tiles : 2 * grid);
    unsetenv("KILN_MATVEC_Q_STREAM");
    d->ops->destroy(d);
}

/* The H200's Vulkan caps (16x16x16 KHR fragments of both types, 48 KiB): every type, both
 * dtypes and stacked parts take the cooperative variant and validate (with $KILN_SPIRV_VAL's
 * spirv-val where set: Debian's cannot read cooperative matrices); CUDA's caps never do. */
Test(kernels_quant, matmul_q_cooperative_builds_for_h200_vulkan_caps, .timeout = 300) {
    setenv("KILN_MATMUL_Q_COOP", "1", 1); /* opt-in on a GPU until it is right on one */
    rt_caps c;
    tu_caps_h200(&c);
    kiln_err err = {0};
    uint32_t g[2];
    char what[96];
    for (int q = 0; q < 2 * KN_Q_COUNT; q++) {
        kn_qpart one = {(kn_qtype)(q % KN_Q_COUNT), 4096};
        ir_scalar t = q < KN_Q_COUNT ? IR_BF16 : IR_F16;
        ir_kernel *k = kn_matmul_q(&c, &one, 1, 4096, 512, t, q % 2 ? KN_EPI_RESIDUAL : KN_EPI_NONE, g, &err);
        cr_assert(k && !strcmp(ir_kernel_name(k), "kn_matmul_q_coop"), "%s %s: %s", kn_qformat_of(one.type)->name,
                  tu_dname(t), k ? ir_kernel_name(k) : err.msg);
        snprintf(what, sizeof what, "matmul_q_coop %s %s", kn_qformat_of(one.type)->name, tu_dname(t));
        tu_emit_ok(k, &c, err.msg, what);
    }
    kn_qpart qkv[3] = {{KN_Q4_K, 4096}, {KN_Q4_K, 1024}, {KN_Q6_K, 1024}};
    ir_kernel *k = kn_matmul_q(&c, qkv, 3, 4096, 512, IR_BF16, KN_EPI_BIAS, g, &err);
    cr_assert(k && !strcmp(ir_kernel_name(k), "kn_matmul_q_coop"), "stacked: %s", k ? ir_kernel_name(k) : err.msg);
    tu_emit_ok(k, &c, err.msg, "matmul_q_coop stacked q4_k q4_k q6_k bf16");
    rt_caps cu = tu_cuda_caps(90);
    kn_qpart one = {KN_Q4_K, 4096};
    k = kn_matmul_q(&cu, &one, 1, 4096, 512, IR_BF16, KN_EPI_NONE, g, &err);
    cr_assert(k && strcmp(ir_kernel_name(k), "kn_matmul_q_coop"), "CUDA took the cooperative variant");
    ir_kernel_destroy(k);
    setenv("KILN_MATMUL_Q_COOP", "0", 1);
    k = kn_matmul_q(&c, &one, 1, 4096, 512, IR_BF16, KN_EPI_NONE, g, &err);
    cr_assert(k && strcmp(ir_kernel_name(k), "kn_matmul_q_coop"), "switched off: still cooperative");
    ir_kernel_destroy(k);
    unsetenv("KILN_MATMUL_Q_COOP");
    k = kn_matmul_q(&c, &one, 1, 4096, 512, IR_BF16, KN_EPI_NONE, g, &err);
    cr_assert(k && strcmp(ir_kernel_name(k), "kn_matmul_q_coop"), "a GPU took it without KILN_MATMUL_Q_COOP=1");
    ir_kernel_destroy(k);
}

/* Built for CUDA's caps at sm_80 and sm_90 and assembled by ptxas on any machine; refused
 * where a part is off the row groups, a type's codes pass the 16-bit type, or by switch. */
Test(kernels_quant, matvec_q_fragments_build_and_refuse, .timeout = 300) {
    kiln_err err = {0};
    uint32_t gx;
    for (uint32_t cc = 80; cc <= 90; cc += 10) {
        rt_caps c = tu_cuda_caps(cc);
        for (int q = 0; q < KN_Q_COUNT; q++) {
            if (q == KN_Q3_K) continue;
            kn_qpart one = {(kn_qtype)q, 4096};
            ir_scalar t = q == KN_Q8_0 || q % 2 ? IR_F16 : IR_BF16;
            ir_kernel *k = q % 2 ? kn_matvec_q(&c, &one, 1, 4096, t, t, KN_EPI_RESIDUAL, &gx, &err)
                                 : kn_matvec_q_norm(&c, &one, 1, 4096, t, t, KN_EPI_NONE, 1e-6f, &gx, &err);
            cr_assert_not_null(k, "%s", err.msg);
            cr_assert(!strncmp(ir_kernel_name(k), "kn_matvec_q_mma", 15), "%s: %s", kn_qformat_of((kn_qtype)q)->name,
                      ir_kernel_name(k));
            cr_assert_eq(gx, 4096 / 16);
            if (cc == 90 || q == KN_Q4_K) tu_ptx_assembles(k, &c, kn_qformat_of((kn_qtype)q)->name);
            ir_kernel_destroy(k);
        }
        kn_qpart ff[2] = {{KN_Q4_K, 12288}, {KN_Q4_K, 12288}}, qkv[3] = {{KN_Q4_K, 4096}, {KN_Q4_K, 1024}, {KN_Q6_K, 1024}};
        ir_kernel *k = kn_matvec_q_norm(&c, ff, 2, 4096, IR_BF16, IR_BF16, KN_EPI_SWIGLU, 1e-6f, &gx, &err);
        cr_assert_not_null(k, "%s", err.msg);
        cr_assert_str_eq(ir_kernel_name(k), "kn_matvec_q_mma_norm");
        tu_ptx_assembles(k, &c, "swiglu");
        ir_kernel_destroy(k);
        k = kn_matvec_q_norm(&c, qkv, 3, 4096, IR_BF16, IR_BF16, KN_EPI_NONE, 1e-6f, &gx, &err);
        cr_assert_str_eq(ir_kernel_name(k), "kn_matvec_q_mma_norm");
        tu_ptx_assembles(k, &c, "q4_k_m qkv");
        ir_kernel_destroy(k);
        kn_qpart ragged[2] = {{KN_Q4_K, 1000}, {KN_Q6_K, 64}}, q8 = {KN_Q8_0, 64}, q3 = {KN_Q3_K, 64};
        k = kn_matvec_q(&c, ragged, 2, 256, IR_BF16, IR_BF16, KN_EPI_NONE, &gx, &err);
        cr_assert_str_eq(ir_kernel_name(k), "kn_matvec_q", "a part off the row groups");
        ir_kernel_destroy(k);
        k = kn_matvec_q(&c, &q8, 1, 256, IR_BF16, IR_BF16, KN_EPI_NONE, &gx, &err);
        cr_assert_str_eq(ir_kernel_name(k), "kn_matvec_q", "Q8_0's codes in bf16");
        ir_kernel_destroy(k);
        k = kn_matvec_q(&c, &q3, 1, 256, IR_F16, IR_F16, KN_EPI_NONE, &gx, &err);
        cr_assert_str_eq(ir_kernel_name(k), "kn_matvec_q", "Q3_K");
        ir_kernel_destroy(k);
        kn_qpart one_q4k = {KN_Q4_K, 64};
        setenv("KILN_MATVEC_Q_MMA", "0", 1);
        k = kn_matvec_q(&c, &one_q4k, 1, 256, IR_BF16, IR_BF16, KN_EPI_NONE, &gx, &err);
        unsetenv("KILN_MATVEC_Q_MMA");
        cr_assert_str_eq(ir_kernel_name(k), "kn_matvec_q", "switched off");
        ir_kernel_destroy(k);
        /* the streamed form: a grid of the compute units, where the passes share evenly */
        c.compute_units = 132;
        setenv("KILN_MATVEC_Q_STREAM", "2", 1); /* sm_80's 163 KiB hold two of SwiGLU's 48 KiB passes */
        k = kn_matvec_q_norm(&c, ff, 2, 4096, IR_BF16, IR_BF16, KN_EPI_SWIGLU, 1e-6f, &gx, &err);
        cr_assert_eq(gx, 132);
        tu_ptx_assembles(k, &c, "streamed swiglu");
        ir_kernel_destroy(k);
        kn_qpart down = {KN_Q6_K, 4096};
        k = kn_matvec_q(&c, &down, 1, 12288, IR_BF16, IR_BF16, KN_EPI_RESIDUAL, &gx, &err);
        cr_assert_eq(gx, 132);
        tu_ptx_assembles(k, &c, "streamed q6_k");
        ir_kernel_destroy(k);
        k = kn_matvec_q(&c, &down, 1, 17 * 256, IR_BF16, IR_BF16, KN_EPI_RESIDUAL, &gx, &err);
        cr_assert_not_null(k, "%s", err.msg);
        cr_assert_eq(gx, 4096 / 16, "34 passes do not share over 8 subgroups: the direct form (%u)", gx);
        ir_kernel_destroy(k);
        k = kn_matvec_q(&c, qkv, 3, 4096, IR_BF16, IR_BF16, KN_EPI_NONE, &gx, &err);
        cr_assert_eq(gx, (4096 + 1024 + 1024) / 16, "stacked parts: the direct form");
        ir_kernel_destroy(k);
        unsetenv("KILN_MATVEC_Q_STREAM");
        c.compute_units = 0;
    }
}

/* ---- a block's product ---- */

static void matmul_q_case(rt_device *d, const kn_qpart *parts, uint32_t n_parts, uint32_t cols, uint32_t n_max,
                          uint32_t n, ir_scalar t, unsigned epi, const char *var, bool want_mma) {
    kiln_err err = {0};
    char what[200], pn[96];
    snprintf(what, sizeof what, "matmul_q %s x %u, %u of %u tokens %s epi %u caps=%s",
             parts_name(parts, n_parts, pn, sizeof pn), cols, n, n_max, tu_dname(t), epi, var ? var : "device");
    uint32_t g[2], rows = 0;
    for (uint32_t i = 0; i < n_parts; i++) rows += parts[i].rows;
    ir_kernel *k = kn_matmul_q(&d->caps, parts, n_parts, cols, n_max, t, epi, g, &err);
    cr_assert_not_null(k, "%s: %s", what, err.msg);
    if (want_mma && d->caps.backend == RT_CUDA)
        cr_assert_str_eq(ir_kernel_name(k), "kn_matmul_q_mma", "%s: not on the matrix units", what);
    tu_qmat w[KN_Q_PARTS] = {0};
    for (uint32_t i = 0; i < n_parts; i++) w[i] = tu_qmat_make(parts[i].type, parts[i].rows, cols);
    bool f32 = epi & KN_EPI_F32;
    float *xf, *rf, *bf;
    uint16_t *x = tu_rand16(t, (size_t)n_max * cols, -2, 2, &xf), *res = tu_rand16(t, (size_t)n_max * rows, -8, 8, &rf);
    uint16_t *b = tu_rand16(t, rows, -3, 3, &bf);
    uint32_t info[2] = {0, n};
    rt_buffer *bw[KN_Q_PARTS] = {0};
    for (uint32_t i = 0; i < n_parts; i++) bw[i] = upload_words(d, &w[i]);
    rt_buffer *bx = tu_vk_upload(d, x, (size_t)n_max * cols * 2);
    rt_buffer *bi = tu_vk_upload(d, info, 8), *bb = tu_vk_upload(d, b, rows * 2);
    rt_buffer *br = tu_vk_upload(d, res, (size_t)n_max * rows * 2), *by;
    if (f32) {
        float *p = malloc(((size_t)n * rows + GUARD) * 4);
        for (size_t i = 0; i < (size_t)n * rows + GUARD; i++) p[i] = NAN;
        by = tu_vk_upload(d, p, ((size_t)n * rows + GUARD) * 4);
        free(p);
    } else {
        by = tu_vk_poisoned16(d, t, (size_t)n * rows, GUARD);
    }
    rt_arg args[9];
    uint32_t na = 0;
    for (uint32_t i = 0; i < n_parts; i++) args[na++] = (rt_arg){bw[i], 0};
    args[na++] = (rt_arg){bx, 0}, args[na++] = (rt_arg){by, 0}, args[na++] = (rt_arg){bi, 0};
    if (epi & KN_EPI_BIAS) args[na++] = (rt_arg){bb, 0};
    if (epi & KN_EPI_RESIDUAL) args[na++] = (rt_arg){br, 0};
    run(d, k, g[0], g[1], args, na);
    float *yf = NULL;
    uint16_t *y = NULL;
    if (f32) {
        yf = malloc(((size_t)n * rows + GUARD) * 4);
        tu_vk_download(d, by, yf, ((size_t)n * rows + GUARD) * 4);
        for (size_t i = (size_t)n * rows; i < (size_t)n * rows + GUARD; i++)
            cr_assert(isnan(yf[i]), "%s: wrote past the end at %zu", what, i);
    } else {
        y = fetch16(d, by, t, (size_t)n * rows, what);
    }
    for (uint32_t tok = 0; tok < n; tok++)
        for (uint32_t r = 0; r < rows; r++) {
            uint32_t lr;
            const tu_qmat *pm = part_row(w, n_parts, r, &lr);
            double tol, s = tu_qref_dot(pm, lr, xf + (size_t)tok * cols, &tol);
            if (epi & KN_EPI_BIAS) s += bf[r], tol += ldexp(1.0, -23) * fabs(s);
            double want = s, tl = tol, got;
            if (f32) {
                got = yf[(size_t)tok * rows + r];
            } else {
                if (epi & KN_EPI_RESIDUAL) {
                    tl += tu_ulp16(t, fabs(s) + tl);
                    want = tu_from16(t, tu_to16(t, (float)s)) + rf[(size_t)tok * rows + r];
                }
                got = tu_from16(t, y[(size_t)tok * rows + r]);
                tl += tu_ulp16(t, fmax(fabs(want), fabs(got)));
            }
            cr_assert(fabs(got - want) <= tl, "%s: token %u row %u: %.9g != %.9g (tol %.3g)", what, tok, r, got, want,
                      tl);
        }
    rt_buffer *bufs[] = {bw[0], bw[1], bw[2], bx, bi, bb, br, by};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) d->ops->release(d, bufs[i]);
    for (uint32_t i = 0; i < n_parts; i++) tu_qmat_free(&w[i]);
    free(x), free(res), free(b), free(xf), free(rf), free(bf), free(y), free(yf);
    ir_kernel_destroy(k);
}

Test(kernels_quant, matmul_q_every_type_odd_rows_with_guards, .timeout = 600) {
    for (size_t v = 0; v < 2; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(33);
        for (int q = 0; q < KN_Q_COUNT; q++) {
            kn_qpart one = {(kn_qtype)q, rows_cases[q % 4]};
            ir_scalar t = q % 2 ? IR_F16 : IR_BF16;
            unsigned epi = q % 3 == 0 ? KN_EPI_BIAS : q % 3 == 1 ? KN_EPI_RESIDUAL : KN_EPI_F32;
            matmul_q_case(d, &one, 1, cols_for((kn_qtype)q, q % 2), 24, 13, t, epi, variants[v], false);
        }
        kn_qpart qkv[3] = {{KN_Q4_K, 33}, {KN_Q4_K, 7}, {KN_Q6_K, 7}};
        matmul_q_case(d, qkv, 3, 512, 16, 16, IR_BF16, KN_EPI_BIAS, variants[v], false);
        d->ops->destroy(d);
    }
}

/* Shapes the matrix-unit variant takes (cols of 64, parts on whole 64-row tiles, the last
 * part odd; tokens over two tiles, n odd): on CUDA it must be the one that runs. */
Test(kernels_quant, matmul_q_fragments_every_type_odd_tokens, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(35);
    for (int q = 0; q < KN_Q_COUNT; q++) {
        kn_qpart one = {(kn_qtype)q, q % 2 ? 69 : 128};
        ir_scalar t = q % 2 ? IR_F16 : IR_BF16;
        unsigned epi = q % 3 == 0 ? KN_EPI_BIAS : q % 3 == 1 ? KN_EPI_RESIDUAL : KN_EPI_F32;
        uint32_t cols = kn_qformat_of((kn_qtype)q)->unit == 256 ? 768 : 320;
        matmul_q_case(d, &one, 1, cols, 136, q % 2 ? 131 : 136, t, epi, "fragments", true);
    }
    kn_qpart qkv[3] = {{KN_Q4_K, 128}, {KN_Q5_K, 64}, {KN_Q6_K, 37}};
    matmul_q_case(d, qkv, 3, 512, 64, 40, IR_BF16, KN_EPI_BIAS, "fragments", true);
    kn_qpart mixed[2] = {{KN_Q8_0, 64}, {KN_Q2_K, 66}};
    matmul_q_case(d, mixed, 2, 256, 16, 9, IR_F16, KN_EPI_RESIDUAL, "fragments", true);
    kn_qpart long_row = {KN_Q6_K, 96}; /* a short block's tile for long rows (64 tokens x 32 rows) */
    matmul_q_case(d, &long_row, 1, 8192, 64, 37, IR_BF16, KN_EPI_RESIDUAL, "fragments", true);
    d->ops->destroy(d);
}

/* Blocks of 64 tokens or more on devices without the matrix-unit variant: the tiled
 * kernel, every type, odd rows (tiles past the end), stacked parts whose boundaries fall
 * inside a tile (a branch per item), n below and off the tiles; KILN_MATMUL_Q_TILED=0 and
 * blocks of 32 keep the per-row kernel. */
Test(kernels_quant, matmul_q_tiled_every_type_and_stacked_parts, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    if (d->caps.backend == RT_CUDA) {
        d->ops->destroy(d);
        cr_skip_test("CUDA takes the matrix-unit variant");
    }
    tu_seed(37);
    kiln_err err = {0};
    uint32_t g[2];
    setenv("KILN_MATMUL_Q_COOP", "0", 1); /* whatever the environment asks */
    for (int q = 0; q < KN_Q_COUNT; q++) {
        kn_qpart one = {(kn_qtype)q, q % 2 ? 69 : 130};
        ir_scalar t = q % 2 ? IR_F16 : IR_BF16;
        unsigned epi = q % 3 == 0 ? KN_EPI_BIAS : q % 3 == 1 ? KN_EPI_RESIDUAL : KN_EPI_F32;
        uint32_t cols = kn_qformat_of((kn_qtype)q)->unit == 256 ? 512 : 96;
        ir_kernel *k = kn_matmul_q(&d->caps, &one, 1, cols, 136, t, epi, g, &err);
        cr_assert_not_null(k, "%s", err.msg);
        cr_assert(tu_ir_has(k, "shared @ws: f32"), "%s: not the tiled kernel", kn_qformat_of((kn_qtype)q)->name);
        ir_kernel_destroy(k);
        matmul_q_case(d, &one, 1, cols, 136, q % 2 ? 131 : 65, t, epi, "tiled", false);
    }
    kn_qpart qkv[3] = {{KN_Q4_K, 33}, {KN_Q5_K, 7}, {KN_Q6_K, 40}};
    matmul_q_case(d, qkv, 3, 512, 72, 70, IR_BF16, KN_EPI_BIAS, "tiled", false);
    matmul_q_case(d, qkv, 3, 512, 64, 24, IR_F16, KN_EPI_RESIDUAL, "tiled", false); /* a short block */
    kn_qpart mixed[2] = {{KN_Q8_0, 65}, {KN_Q2_K, 66}};
    matmul_q_case(d, mixed, 2, 256, 128, 128, IR_F16, KN_EPI_RESIDUAL, "tiled", false);
    kn_qpart plain = {KN_Q4_0, 64};
    ir_kernel *k = kn_matmul_q(&d->caps, &plain, 1, 64, 32, IR_BF16, KN_EPI_NONE, g, &err);
    cr_assert(k && !tu_ir_has(k, "shared @ws: f32"), "a block of 32 tokens: the per-row kernel");
    ir_kernel_destroy(k);
    setenv("KILN_MATMUL_Q_TILED", "0", 1);
    k = kn_matmul_q(&d->caps, &plain, 1, 64, 128, IR_BF16, KN_EPI_NONE, g, &err);
    unsetenv("KILN_MATMUL_Q_TILED");
    cr_assert(k && !tu_ir_has(k, "shared @ws: f32"), "switched off: the per-row kernel");
    ir_kernel_destroy(k);
    unsetenv("KILN_MATMUL_Q_COOP");
    d->ops->destroy(d);
}

/* Blocks of 64 tokens or more on cooperative matrices (matmul_q_coop.c: Vulkan's, or
 * lavapipe's emulated f16 ones): every type, odd rows, stacked parts whose boundaries fall
 * inside a tile and whose sub-blocks differ (sub-steps of 16), n below and off the tiles,
 * a tail chunk (96 columns); the kernel must be that variant wherever its fragments exist. */
Test(kernels_quant, matmul_q_cooperative_every_type_and_stacked_parts, .timeout = 900) {
    setenv("KILN_MATMUL_Q_COOP", "1", 1); /* opt-in on a GPU until it is right on one */
    rt_device *d = tu_vk_open_or_skip("debug-emulate-coopmat");
    if (d->caps.backend == RT_CUDA || !d->caps.n_mma) {
        d->ops->destroy(d);
        cr_skip_test("no cooperative matrices here (CUDA takes its own matrix-unit variant)");
    }
    tu_seed(39);
    kiln_err err = {0};
    uint32_t g[2];
    unsigned coop = 0;
    for (int q = 0; q < 2 * KN_Q_COUNT; q++) {
        kn_qtype qt = (kn_qtype)(q % KN_Q_COUNT);
        kn_qpart one = {qt, q % 2 ? 69 : 130};
        ir_scalar t = q < KN_Q_COUNT ? IR_F16 : IR_BF16;
        unsigned epi = q % 3 == 0 ? KN_EPI_BIAS : q % 3 == 1 ? KN_EPI_RESIDUAL : KN_EPI_F32;
        uint32_t cols = kn_qformat_of(qt)->unit == 256 ? 512 : 96;
        ir_kernel *k = kn_matmul_q(&d->caps, &one, 1, cols, 136, t, epi, g, &err);
        cr_assert_not_null(k, "%s", err.msg);
        bool is_coop = !strcmp(ir_kernel_name(k), "kn_matmul_q_coop");
        ir_kernel_destroy(k);
        if (!is_coop) continue; /* no fragments of this dtype (lavapipe: bf16) */
        coop++;
        matmul_q_case(d, &one, 1, cols, 136, q % 2 ? 131 : 65, t, epi, "cooperative", false);
    }
    cr_assert_geq(coop, KN_Q_COUNT, "only %u of the types took the cooperative variant", coop);
    kn_qpart qkv[3] = {{KN_Q4_K, 33}, {KN_Q5_K, 7}, {KN_Q6_K, 40}};
    matmul_q_case(d, qkv, 3, 512, 72, 70, IR_F16, KN_EPI_BIAS, "cooperative", false);
    kn_qpart mixed[2] = {{KN_Q8_0, 65}, {KN_Q4_1, 66}};
    matmul_q_case(d, mixed, 2, 256, 128, 128, IR_F16, KN_EPI_RESIDUAL, "cooperative", false);
    kn_qpart sub16[2] = {{KN_Q8_0, 20}, {KN_Q2_K, 50}};
    matmul_q_case(d, sub16, 2, 256, 64, 64, IR_F16, KN_EPI_F32, "cooperative", false);
    ir_kernel *k = kn_matmul_q(&d->caps, qkv, 3, 512, 72, IR_F16, KN_EPI_BIAS, g, &err);
    cr_assert(k && !strcmp(ir_kernel_name(k), "kn_matmul_q_coop"), "stacked parts: not the cooperative variant");
    ir_kernel_destroy(k);
    unsetenv("KILN_MATMUL_Q_COOP");
    d->ops->destroy(d);
}

/* Built for CUDA's caps at sm_80 and sm_90 and assembled by ptxas on any machine; refused
 * (the general-purpose kernel instead) where cols or the parts do not tile, or by switch. */
Test(kernels_quant, matmul_q_fragments_build_and_refuse, .timeout = 300) {
    kiln_err err = {0};
    uint32_t g[2];
    for (uint32_t cc = 80; cc <= 90; cc += 10) {
        rt_caps c = tu_cuda_caps(cc);
        for (int q = 0; q < KN_Q_COUNT; q++) {
            kn_qpart one = {(kn_qtype)q, 4096};
            ir_scalar t = q % 2 ? IR_F16 : IR_BF16;
            unsigned epi = q % 3 == 0 ? KN_EPI_BIAS : q % 3 == 1 ? KN_EPI_RESIDUAL : KN_EPI_F32;
            ir_kernel *k = kn_matmul_q(&c, &one, 1, 4096, 512, t, epi, g, &err);
            cr_assert_not_null(k, "%s", err.msg);
            cr_assert_str_eq(ir_kernel_name(k), "kn_matmul_q_mma", "%s", kn_qformat_of((kn_qtype)q)->name);
            cr_assert(g[0] == 4096 / 64 && g[1] == 512 / 128, "grid %u x %u", g[0], g[1]);
            if (cc == 90 || q == KN_Q4_K) tu_ptx_assembles(k, &c, kn_qformat_of((kn_qtype)q)->name);
            ir_kernel_destroy(k);
        }
        kn_qpart qkv[3] = {{KN_Q4_K, 4096}, {KN_Q4_K, 1024}, {KN_Q6_K, 1024}};
        ir_kernel *k = kn_matmul_q(&c, qkv, 3, 4096, 512, IR_BF16, KN_EPI_NONE, g, &err);
        cr_assert_not_null(k, "%s", err.msg);
        cr_assert_str_eq(ir_kernel_name(k), "kn_matmul_q_mma");
        tu_ptx_assembles(k, &c, "q4_k_m qkv");
        ir_kernel_destroy(k);
        kn_qpart ragged[2] = {{KN_Q4_K, 1000}, {KN_Q6_K, 64}};
        kn_qpart odd_cols = {KN_Q8_0, 64};
        k = kn_matmul_q(&c, ragged, 2, 256, 64, IR_BF16, KN_EPI_NONE, g, &err);
        cr_assert_str_eq(ir_kernel_name(k), "kn_matmul_q", "a part off the tiles");
        ir_kernel_destroy(k);
        k = kn_matmul_q(&c, &odd_cols, 1, 96, 64, IR_BF16, KN_EPI_NONE, g, &err);
        cr_assert_str_eq(ir_kernel_name(k), "kn_matmul_q", "cols off the chunks");
        ir_kernel_destroy(k);
        setenv("KILN_MATMUL_Q_MMA", "0", 1);
        k = kn_matmul_q(&c, &odd_cols, 1, 256, 64, IR_BF16, KN_EPI_NONE, g, &err);
        unsetenv("KILN_MATMUL_Q_MMA");
        cr_assert_str_eq(ir_kernel_name(k), "kn_matmul_q", "switched off");
        ir_kernel_destroy(k);
    }
}

/* The load's threaded repack writes the words the serial one does, where a row's units are
 * odd (rows sharing a word of the d plane) and the rows too. */
Test(kernels_quant, threaded_pack_equals_serial) {
    tu_seed(37);
    static const kn_qtype types[] = {KN_Q4_K, KN_Q6_K, KN_Q5_0, KN_Q2_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        uint32_t cols = kn_qformat_of(types[i])->unit == 256 ? 2816 : 1056;
        tu_qmat m = tu_qmat_make(types[i], 1031, cols);
        gguf_tensor t = {.name = "w", .n_dims = 2, .ne = {cols, 1031, 1, 1}, .type = tu_qtypes[types[i]], .data = m.blocks};
        for (int th = 1; th <= 7; th += 3) {
            uint32_t *w = calloc(m.L.words, 4);
            kiln_err err = {0};
            cr_assert_eq(plan_quant_pack_all(&t, &m.L, w, th, &err), 0, "%s", err.msg);
            cr_assert(!memcmp(w, m.words, m.L.words * 4), "%s with %d threads", kn_qformat_of(types[i])->name, th);
            free(w);
        }
        tu_qmat_free(&m);
    }
}

/* ---- the embedding: bit for bit ---- */

Test(kernels_quant, embed_q_every_type_bit_for_bit) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(34);
    for (int q = 0; q < KN_Q_COUNT; q++) {
        kiln_err err = {0};
        uint32_t vocab = 37, embd = cols_for((kn_qtype)q, 1), gx;
        ir_scalar t = q % 2 ? IR_F16 : IR_BF16;
        ir_kernel *k = kn_embed_q(&d->caps, (kn_qtype)q, vocab, embd, t, &gx, &err);
        cr_assert_not_null(k, "%s", err.msg);
        tu_qmat w = tu_qmat_make((kn_qtype)q, vocab, embd);
        uint32_t tok[4] = {0, 36, 17, 37}; /* the last past the vocabulary: zeros */
        rt_buffer *bw = upload_words(d, &w), *bt = tu_vk_upload(d, tok, sizeof tok);
        rt_buffer *bo = tu_vk_poisoned16(d, t, 4 * embd, GUARD);
        rt_arg args[3] = {{bw, 0}, {bt, 0}, {bo, 0}};
        run(d, k, gx, 4, args, 3);
        uint16_t *o = fetch16(d, bo, t, 4 * embd, "embed_q");
        for (uint32_t i = 0; i < 4; i++)
            for (uint32_t c = 0; c < embd; c++) {
                uint16_t want = i == 3 ? tu_to16(t, 0.0f) : tu_to16(t, w.w[(size_t)tok[i] * embd + c]);
                cr_assert_eq(o[i * embd + c], want, "embed_q %s %s token %u [%u]: %#x != %#x", kn_qformat_of(q)->name,
                             tu_dname(t), tok[i], c, o[i * embd + c], want);
            }
        d->ops->release(d, bw), d->ops->release(d, bt), d->ops->release(d, bo);
        tu_qmat_free(&w);
        free(o);
        ir_kernel_destroy(k);
    }
    d->ops->destroy(d);
}
