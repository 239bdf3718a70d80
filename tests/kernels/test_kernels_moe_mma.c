/* kernels/moe_mma.c: a block's grouped expert products on matrix fragments against the SIMT
 * grouped kernels (moe.c, themselves checked against the per-token kernels and the oracle's
 * math) on the same grouping, at odd sizes (a column tail, a row tail, an expert whose list
 * runs past 64 entries, an expert nobody chose, dead tokens past info[1]), outputs poisoned
 * with guards; the cached variants (the slots read at run time) against the resident. The two sum in different orders: per output, f32 sums of n products differ
 * by at most 2n 2^-24 sum|terms|, and each 16-bit rounding after them by an ulp, which the
 * SwiGLU carries through silu (slope below 1.1) and the product with up. Runs where the
 * device has 16-bit fragments (a CUDA device, or Vulkan with cooperative matrices), skipped
 * by name elsewhere; the variants for CUDA and the H200's Vulkan caps build, assemble and
 * validate on any machine. */
#include "base/error.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "tests/util/testutil_ptx.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define GUARD 64

/* sum|w x| over a row, and the exact dot in double */
static double dot(const float *w, const float *x, uint32_t n, double *mag) {
    double s = 0, m = 0;
    for (uint32_t i = 0; i < n; i++) s += (double)w[i] * x[i], m += fabs((double)w[i] * x[i]);
    *mag = m;
    return s;
}

static void check_close(ir_scalar t, const uint16_t *got, const uint16_t *want, const double *tol, size_t n,
                        const char *what, const char *which) {
    for (size_t i = 0; i < n; i++) {
        double a = tu_from16(t, got[i]), b = tu_from16(t, want[i]);
        cr_assert(!isnan(a) && !isnan(b), "%s: %s[%zu] not written (%04x, %04x)", what, which, i, got[i], want[i]);
        double tl = tol[i] + 2 * tu_ulp16(t, fmax(fabs(a), fabs(b)));
        cr_assert(fabs(a - b) <= tl, "%s: %s[%zu] %.6g, SIMT %.6g (tol %.3g)", what, which, i, a, b, tl);
    }
}

/* The cached variants (built for the ne experts, the slots read from buffer "slots") over a
 * cache whose slot s holds expert s for s < ne - 1 (a prefix of the weights' buffers,
 * copied into buffers of their own): a hit's rows equal the all-resident fragments'
 * (actm, ycm) bit for bit, a miss's (the last expert's) stay poisoned. b: h, gate, up,
 * down, info, the SIMT act (down's input). */
static void cached_case(rt_device *d, uint32_t nb, uint32_t live, uint32_t d_in, uint32_t ff, uint32_t ne,
                        uint32_t k_used, ir_scalar t, const uint32_t *sel, rt_buffer *const b[6], const uint16_t *actm,
                        const uint16_t *ycm, const char *what) {
    kiln_err err = {0};
    uint32_t slots = ne - 1, gm_u[2], gm_d[2];
    ir_kernel *kg = kn_moe_group(&d->caps, ne, k_used, nb, true, &err);
    ir_kernel *mu = kn_moe_gate_up_g_mma(&d->caps, d_in, ff, ne, k_used, nb, t, true, gm_u, &err);
    ir_kernel *md = kn_moe_down_g_mma(&d->caps, ff, d_in, ne, k_used, nb, t, true, gm_d, &err);
    cr_assert(kg && mu && md, "%s cached: %s", what, err.msg);
    size_t nk = (size_t)nb * k_used, n_live = (size_t)live * k_used, cn = (size_t)slots * ff * d_in;
    uint32_t *csel = malloc(nk * 4);
    for (size_t c = 0; c < nk; c++) csel[c] = sel[c] < slots ? sel[c] : KN_MOE_MISS;
    uint16_t *w = malloc(cn * 2);
    rt_buffer *cw[3];
    for (int i = 0; i < 3; i++) {
        tu_vk_download(d, b[1 + i], w, cn * 2);
        cw[i] = tu_vk_upload(d, w, cn * 2);
    }
    rt_buffer *bcs = tu_vk_upload(d, csel, nk * 4), *bns = tu_vk_upload(d, &slots, 4);
    rt_buffer *brank = tu_vk_poisoned32(d, nk, GUARD), *boff = tu_vk_poisoned32(d, ne + 2, GUARD);
    rt_buffer *blist = tu_vk_poisoned32(d, nk, GUARD), *ba = tu_vk_poisoned16(d, t, nk * ff, GUARD);
    rt_buffer *byc = tu_vk_poisoned16(d, t, nk * d_in, GUARD);
    tu_vk_launch(d, kg, 1, 1, (rt_arg[]){{bcs, 0}, {b[4], 0}, {brank, 0}, {boff, 0}, {blist, 0}}, 5);
    tu_vk_launch(d, mu, gm_u[0], gm_u[1], (rt_arg[]){{b[0], 0}, {cw[0], 0}, {cw[1], 0}, {boff, 0}, {blist, 0}, {ba, 0}, {bns, 0}}, 7);
    tu_vk_launch(d, md, gm_d[0], gm_d[1], (rt_arg[]){{b[5], 0}, {cw[2], 0}, {boff, 0}, {blist, 0}, {byc, 0}, {bns, 0}}, 6);
    uint16_t *act = tu_vk_fetch16(d, ba, t, nk * ff, GUARD, what), *yc = tu_vk_fetch16(d, byc, t, nk * d_in, GUARD, what);
    for (size_t c = 0; c < nk; c++) {
        bool hit = c < n_live && csel[c] != KN_MOE_MISS;
        for (uint32_t r = 0; r < ff; r++)
            cr_assert_eq(act[c * ff + r], hit ? actm[c * ff + r] : tu_nan16(t), "%s cached: act[%zu][%u] %04x", what,
                         c, r, act[c * ff + r]);
        for (uint32_t r = 0; r < d_in; r++)
            cr_assert_eq(yc[c * d_in + r], hit ? ycm[c * d_in + r] : tu_nan16(t), "%s cached: yc[%zu][%u] %04x", what,
                         c, r, yc[c * d_in + r]);
    }
    rt_buffer *bufs[] = {cw[0], cw[1], cw[2], bcs, bns, brank, boff, blist, ba, byc};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) d->ops->release(d, bufs[i]);
    free(csel), free(w), free(act), free(yc);
    ir_kernel_destroy(kg), ir_kernel_destroy(mu), ir_kernel_destroy(md);
}

static void mma_case(rt_device *d, uint32_t nb, uint32_t live, uint32_t d_in, uint32_t ff, uint32_t ne,
                     uint32_t k_used, ir_scalar t) {
    char what[160];
    snprintf(what, sizeof what, "moe mma nb=%u live=%u d=%u ff=%u experts=%u k=%u %s", nb, live, d_in, ff, ne, k_used,
             tu_dname(t));
    kiln_err err = {0};
    uint32_t gu, gd, gm_u[2], gm_d[2];
    ir_kernel *kg = kn_moe_group(&d->caps, ne, k_used, nb, false, &err);
    ir_kernel *ku = kn_moe_gate_up_g(&d->caps, d_in, ff, ne, k_used, nb, t, false, &gu, &err);
    ir_kernel *kd = kn_moe_down_g(&d->caps, ff, d_in, ne, k_used, nb, t, false, &gd, &err);
    ir_kernel *mu = kn_moe_gate_up_g_mma(&d->caps, d_in, ff, ne, k_used, nb, t, false, gm_u, &err);
    ir_kernel *md = kn_moe_down_g_mma(&d->caps, ff, d_in, ne, k_used, nb, t, false, gm_d, &err);
    cr_assert(kg && ku && kd && mu && md, "%s: %s", what, err.msg);
    size_t wn = (size_t)ne * ff * d_in, nk = (size_t)nb * k_used, n_live = (size_t)live * k_used;
    float *hf, *gf, *uf, *df;
    uint16_t *h = tu_rand16(t, (size_t)nb * d_in, -2, 2, &hf), *g = tu_rand16(t, wn, -0.5f, 0.5f, &gf);
    uint16_t *u = tu_rand16(t, wn, -0.5f, 0.5f, &uf), *dw = tu_rand16(t, wn, -0.5f, 0.5f, &df);
    uint32_t *sel = malloc(nk * 4), info[2] = {0, live};
    /* expert 1 chosen by every token (its list runs past 64 entries), expert 0 by none */
    for (uint32_t tok = 0; tok < nb; tok++)
        for (uint32_t j = 0; j < k_used; j++) sel[tok * k_used + j] = j == 0 ? 1 : 2 + (tok + j * 3) % (ne - 2);
    for (uint32_t tok = 0; tok < nb; tok++) /* distinct within a token */
        for (uint32_t j = 1; j < k_used; j++)
            for (uint32_t i = 1; i < j; i++)
                if (sel[tok * k_used + i] == sel[tok * k_used + j]) sel[tok * k_used + j] = 2 + (sel[tok * k_used + j] - 1) % (ne - 2);
    rt_buffer *bh = tu_vk_upload(d, h, (size_t)nb * d_in * 2), *bg = tu_vk_upload(d, g, wn * 2);
    rt_buffer *bu = tu_vk_upload(d, u, wn * 2), *bd = tu_vk_upload(d, dw, wn * 2);
    rt_buffer *bs = tu_vk_upload(d, sel, nk * 4), *bi = tu_vk_upload(d, info, 8);
    rt_buffer *brank = tu_vk_poisoned32(d, nk, GUARD), *boff = tu_vk_poisoned32(d, ne + 1, GUARD);
    rt_buffer *blist = tu_vk_poisoned32(d, nk, GUARD);
    rt_buffer *ba = tu_vk_poisoned16(d, t, nk * ff, GUARD), *bam = tu_vk_poisoned16(d, t, nk * ff, GUARD);
    rt_buffer *byc = tu_vk_poisoned16(d, t, nk * d_in, GUARD), *bycm = tu_vk_poisoned16(d, t, nk * d_in, GUARD);
    rt_arg ga[5] = {{bs, 0}, {bi, 0}, {brank, 0}, {boff, 0}, {blist, 0}};
    tu_vk_launch(d, kg, 1, 1, ga, 5);
    rt_arg ua[6] = {{bh, 0}, {bg, 0}, {bu, 0}, {boff, 0}, {blist, 0}, {ba, 0}};
    tu_vk_launch(d, ku, gu, 1, ua, 6);
    ua[5].buf = bam;
    tu_vk_launch(d, mu, gm_u[0], gm_u[1], ua, 6);
    /* both down products from the SIMT act */
    rt_arg da[5] = {{ba, 0}, {bd, 0}, {boff, 0}, {blist, 0}, {byc, 0}};
    tu_vk_launch(d, kd, gd, 1, da, 5);
    da[4].buf = bycm;
    tu_vk_launch(d, md, gm_d[0], gm_d[1], da, 5);
    uint16_t *act = tu_vk_fetch16(d, ba, t, nk * ff, GUARD, what), *actm = tu_vk_fetch16(d, bam, t, nk * ff, GUARD, what);
    uint16_t *yc = tu_vk_fetch16(d, byc, t, nk * d_in, GUARD, what), *ycm = tu_vk_fetch16(d, bycm, t, nk * d_in, GUARD, what);
    double *tol_a = malloc(nk * ff * sizeof *tol_a), *tol_y = malloc(nk * d_in * sizeof *tol_y);
    float *af = malloc((size_t)ff * 4);
    double eps = ldexp(1.0, -24);
    for (size_t c = 0; c < n_live; c++) {
        uint32_t e = sel[c], tok = (uint32_t)(c / k_used);
        for (uint32_t r = 0; r < ff; r++) {
            double mg, mu_, gv = dot(gf + ((size_t)e * ff + r) * d_in, hf + (size_t)tok * d_in, d_in, &mg);
            double uv = dot(uf + ((size_t)e * ff + r) * d_in, hf + (size_t)tok * d_in, d_in, &mu_);
            double dg = 2 * d_in * eps * mg + tu_ulp16(t, fabs(gv)), du = 2 * d_in * eps * mu_ + tu_ulp16(t, fabs(uv));
            double sg = fabs(gv) / (1 + exp(-gv)) + dg;
            tol_a[c * ff + r] = 1.1 * dg * (fabs(uv) + du) + sg * du;
            af[r] = tu_from16(t, act[c * ff + r]);
        }
        for (uint32_t r = 0; r < d_in; r++) {
            double m;
            dot(df + ((size_t)e * d_in + r) * ff, af, ff, &m);
            tol_y[c * d_in + r] = 2 * ff * eps * m;
        }
    }
    check_close(t, actm, act, tol_a, n_live * ff, what, "act");
    check_close(t, ycm, yc, tol_y, n_live * d_in, what, "yc");
    for (size_t i = n_live * ff; i < nk * ff; i++) cr_assert_eq(actm[i], tu_nan16(t), "%s: act[%zu] of a dead token", what, i);
    for (size_t i = n_live * d_in; i < nk * d_in; i++) cr_assert_eq(ycm[i], tu_nan16(t), "%s: yc[%zu] of a dead token", what, i);
    cached_case(d, nb, live, d_in, ff, ne, k_used, t, sel, (rt_buffer *[]){bh, bg, bu, bd, bi, ba}, actm, ycm, what);
    rt_buffer *bufs[] = {bh, bg, bu, bd, bs, bi, brank, boff, blist, ba, bam, byc, bycm};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) d->ops->release(d, bufs[i]);
    free(h), free(g), free(u), free(dw), free(hf), free(gf), free(uf), free(df), free(sel);
    free(act), free(actm), free(yc), free(ycm), free(tol_a), free(tol_y), free(af);
    ir_kernel *ks[] = {kg, ku, kd, mu, md};
    for (size_t i = 0; i < 5; i++) ir_kernel_destroy(ks[i]);
}

Test(kernels_moe_mma, grouped_products_on_fragments_equal_simt, .timeout = 300) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    if (!kn_moe_g_mma_ok(&d->caps, IR_BF16, 64, false)) {
        char label[64];
        snprintf(label, sizeof label, "%s", d->label);
        d->ops->destroy(d);
        cr_skip_test("no 16-bit matrix fragments on %s", label);
    }
    tu_seed(81);
    /* the last: kiln synth's qwen3moe-tiny-odd's experts (200 x 72, 6 of which 2) in a block of 64 */
    const uint32_t shapes[][6] = {{100, 90, 72, 80, 8, 2}, {64, 64, 256, 96, 16, 4}, {13, 13, 36, 20, 4, 1},
                                  {64, 64, 200, 72, 6, 2}, {512, 70, 200, 72, 6, 2}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        ir_scalar t = i % 2 ? IR_F16 : IR_BF16;
        if (kn_moe_g_mma_ok(&d->caps, t, shapes[i][2], true) && kn_moe_g_mma_ok(&d->caps, t, shapes[i][3], false))
            mma_case(d, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], shapes[i][5], t);
    }
    d->ops->destroy(d);
}

Test(kernels_moe_mma, variants_build_assemble_validate_and_refuse) {
    kiln_err err = {0};
    uint32_t g[2];
    for (unsigned cc = 80; cc <= 90; cc += 10) {
        rt_caps c = tu_cuda_caps(cc);
        ir_kernel *k = kn_moe_gate_up_g_mma(&c, 2048, 768, 128, 8, 512, IR_BF16, cc == 90, g, &err);
        cr_assert_not_null(k, "%s", err.msg);
        cr_assert(g[0] == 128 * 12 && g[1] == 8, "grid %u x %u", g[0], g[1]);
        tu_ptx_assembles(k, &c, "moe gate/up on fragments");
        ir_kernel_destroy(k);
        cr_assert_not_null(k = kn_moe_down_g_mma(&c, 768, 2048, 128, 8, 512, IR_F16, cc == 90, g, &err), "%s", err.msg);
        tu_ptx_assembles(k, &c, "moe down on fragments");
        ir_kernel_destroy(k);
    }
    rt_caps h;
    tu_caps_h200(&h);
    /* the H200's Vulkan: down on fragments; gate/up's SwiGLU sums and staging past its 48 KiB */
    cr_assert(kn_moe_g_mma_ok(&h, IR_BF16, 768, false) && !kn_moe_g_mma_ok(&h, IR_BF16, 2048, true));
    tu_emit_ok(kn_moe_down_g_mma(&h, 768, 2048, 128, 8, 512, IR_BF16, true, g, &err), &h, err.msg, "vk down");
    rt_caps m;
    tu_caps_min(&m);
    cr_assert_null(kn_moe_gate_up_g_mma(&m, 64, 64, 4, 2, 64, IR_BF16, false, g, &err));
    cr_assert_eq(err.code, KILN_ERR_UNSUPPORTED, "%s", err.msg);
    rt_caps c = tu_cuda_caps(90);
    cr_assert_null(kn_moe_down_g_mma(&c, 66, 64, 4, 2, 64, IR_BF16, false, g, &err), "66 columns are not a multiple of 4");
    cr_assert_null(kn_moe_down_g_mma(&c, 64, 64, 0, 2, 64, IR_BF16, false, g, &err));
    cr_assert_eq(err.code, KILN_ERR_INVALID, "%s", err.msg);
}
