/* kernels/moe_q.c on the Vulkan device (lavapipe in CI; KILN_TEST_DEVICE picks another):
 * the experts' products on block-quantized experts against the exact dequantized values
 * (test_kernels_quant.c's tolerances), per token, and the grouped block kernels equal to
 * the per-token ones bit for bit (the same sums in the same order); outputs poisoned with
 * guards, mixed types as Q4_K_M mixes them, with and without subgroup arithmetic. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "tests/util/testutil_ptx.h"
#include "tests/util/testutil_quant.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64

static const char *const variants[] = {NULL, "no-subgroup-arith"};

static void q_case(rt_device *d, uint32_t nb, uint32_t d_in, uint32_t ff, uint32_t ne, uint32_t k_used,
                   const kn_qtype qt[3], ir_scalar t, const char *var) {
    char what[200];
    snprintf(what, sizeof what, "moe_q nb=%u d=%u ff=%u experts=%u k=%u %s/%s/%s %s caps=%s", nb, d_in, ff, ne, k_used,
             kn_qformat_of(qt[0])->name, kn_qformat_of(qt[1])->name, kn_qformat_of(qt[2])->name, tu_dname(t),
             var ? var : "device");
    kiln_err err = {0};
    uint32_t gu, gd, ggu, ggd, gc;
    ir_kernel *ku = kn_moe_gate_up_q(&d->caps, d_in, ff, ne, k_used, qt[0], qt[1], t, false, &gu, &err);
    ir_kernel *kd = kn_moe_down_q(&d->caps, ff, d_in, ne, k_used, qt[2], t, false, &gd, &err);
    ir_kernel *kg = kn_moe_group(&d->caps, ne, k_used, nb, false, &err);
    ir_kernel *kgu = kn_moe_gate_up_g_q(&d->caps, d_in, ff, ne, k_used, nb, qt[0], qt[1], t, false, &ggu, &err);
    ir_kernel *kgd = kn_moe_down_g_q(&d->caps, ff, d_in, ne, k_used, nb, qt[2], t, false, &ggd, &err);
    ir_kernel *kc = kn_moe_combine(&d->caps, d_in, k_used, nb, t, false, &gc, &err);
    cr_assert(ku && kd && kg && kgu && kgd && kc, "%s: %s", what, err.msg);
    tu_qmat g = tu_qmat_make(qt[0], ne * ff, d_in), u = tu_qmat_make(qt[1], ne * ff, d_in);
    tu_qmat dw = tu_qmat_make(qt[2], ne * d_in, ff);
    size_t nk = (size_t)nb * k_used;
    float *hf, *rf;
    uint16_t *h = tu_rand16(t, (size_t)nb * d_in, -2, 2, &hf), *res = tu_rand16(t, (size_t)nb * d_in, -4, 4, &rf);
    uint32_t *sel = malloc(nk * 4), info[2] = {0, nb};
    float *wt = malloc(nk * 4);
    for (uint32_t tok = 0; tok < nb; tok++) {
        tu_rand_distinct(sel + (size_t)tok * k_used, k_used, ne);
        for (uint32_t j = 0; j < k_used; j++) wt[tok * k_used + j] = tu_urand(0.05f, 1);
    }
    rt_buffer *bh = tu_vk_upload(d, h, (size_t)nb * d_in * 2), *br = tu_vk_upload(d, res, (size_t)nb * d_in * 2);
    rt_buffer *bg = tu_vk_upload(d, g.words, g.L.words * 4), *bu = tu_vk_upload(d, u.words, u.L.words * 4);
    rt_buffer *bd = tu_vk_upload(d, dw.words, dw.L.words * 4);
    rt_buffer *bs = tu_vk_upload(d, sel, nk * 4), *bw = tu_vk_upload(d, wt, nk * 4), *bi = tu_vk_upload(d, info, 8);
    rt_buffer *ba = tu_vk_poisoned16(d, t, nk * ff, GUARD), *by = tu_vk_poisoned16(d, t, (size_t)nb * d_in, GUARD);
    tu_vk_launch(d, ku, gu, nb, (rt_arg[]){{bh, 0}, {bg, 0}, {bu, 0}, {bs, 0}, {ba, 0}}, 5);
    uint16_t *act = tu_vk_fetch16(d, ba, t, nk * ff, GUARD, what);
    for (size_t cj = 0; cj < nk; cj++) { /* the SwiGLU rows against the exact products */
        const float *x = hf + (cj / k_used) * d_in;
        for (uint32_t r = 0; r < ff; r++) {
            double tg, tu, row = (double)sel[cj] * ff + r;
            double gs = tu_from16(t, tu_to16(t, (float)tu_qref_dot(&g, (uint32_t)row, x, &tg)));
            double us = tu_from16(t, tu_to16(t, (float)tu_qref_dot(&u, (uint32_t)row, x, &tu)));
            double want = gs / (1.0 + exp(-gs)) * us, got = tu_from16(t, act[cj * ff + r]);
            double dg = tg + tu_ulp16(t, fabs(gs) + tg), du = tu + tu_ulp16(t, fabs(us) + tu);
            double tl = 1.1 * dg * (fabs(us) + du) + (fabs(gs) + dg) * du + (7 + 2 * fabs(gs)) * ldexp(1.0, -23) * fabs(want);
            tl += tu_ulp16(t, fmax(fabs(want), fabs(got)));
            cr_assert(fabs(got - want) <= tl, "%s: act[%zu][%u] %.9g != %.9g (tol %.3g)", what, cj, r, got, want, tl);
        }
    }
    tu_vk_launch(d, kd, gd, nb, (rt_arg[]){{ba, 0}, {bd, 0}, {bs, 0}, {bw, 0}, {br, 0}, {by, 0}}, 6);
    uint16_t *y = tu_vk_fetch16(d, by, t, (size_t)nb * d_in, GUARD, what);
    float *af = malloc(ff * 4);
    for (uint32_t tok = 0; tok < nb; tok++)
        for (uint32_t r = 0; r < d_in; r++) {
            double o = 0, tl = 0;
            for (uint32_t j = 0; j < k_used; j++) {
                size_t cj = (size_t)tok * k_used + j;
                for (uint32_t c = 0; c < ff; c++) af[c] = tu_from16(t, act[cj * ff + c]);
                double td, yj = tu_qref_dot(&dw, sel[cj] * d_in + r, af, &td);
                o += wt[cj] * tu_from16(t, tu_to16(t, (float)yj));
                tl += wt[cj] * (td + tu_ulp16(t, fabs(yj) + td)) + ldexp(1.0, -23) * fabs(o);
            }
            double want = tu_from16(t, tu_to16(t, (float)o)) + rf[(size_t)tok * d_in + r];
            double got = tu_from16(t, y[(size_t)tok * d_in + r]);
            tl += tu_ulp16(t, fabs(o) + tl) + tu_ulp16(t, fmax(fabs(want), fabs(got)));
            cr_assert(fabs(got - want) <= tl, "%s: y[%u][%u] %.9g != %.9g (tol %.3g)", what, tok, r, got, want, tl);
        }
    /* grouped: the same sums as per token */
    rt_buffer *brank = tu_vk_poisoned32(d, nk, GUARD), *boff = tu_vk_poisoned32(d, ne + 1, GUARD), *blist = tu_vk_poisoned32(d, nk, GUARD);
    rt_buffer *ga = tu_vk_poisoned16(d, t, nk * ff, GUARD), *gyc = tu_vk_poisoned16(d, t, nk * d_in, GUARD);
    rt_buffer *gy = tu_vk_poisoned16(d, t, (size_t)nb * d_in, GUARD);
    tu_vk_launch(d, kg, 1, 1, (rt_arg[]){{bs, 0}, {bi, 0}, {brank, 0}, {boff, 0}, {blist, 0}}, 5);
    tu_vk_launch(d, kgu, ggu, 1, (rt_arg[]){{bh, 0}, {bg, 0}, {bu, 0}, {boff, 0}, {blist, 0}, {ga, 0}}, 6);
    tu_vk_launch(d, kgd, ggd, 1, (rt_arg[]){{ga, 0}, {bd, 0}, {boff, 0}, {blist, 0}, {gyc, 0}}, 5);
    tu_vk_launch(d, kc, gc, nb, (rt_arg[]){{gyc, 0}, {bw, 0}, {br, 0}, {gy, 0}, {bi, 0}}, 5);
    uint16_t *gact = tu_vk_fetch16(d, ga, t, nk * ff, GUARD, what), *gyv = tu_vk_fetch16(d, gy, t, (size_t)nb * d_in, GUARD, what);
    for (size_t i = 0; i < nk * ff; i++)
        cr_assert_eq(gact[i], act[i], "%s: grouped act[%zu] %04x, per token %04x", what, i, gact[i], act[i]);
    for (size_t i = 0; i < (size_t)nb * d_in; i++)
        cr_assert_eq(gyv[i], y[i], "%s: grouped y[%zu] %04x, per token %04x", what, i, gyv[i], y[i]);
    rt_buffer *bufs[] = {bh, br, bg, bu, bd, bs, bw, bi, ba, by, brank, boff, blist, ga, gyc, gy};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) d->ops->release(d, bufs[i]);
    tu_qmat_free(&g), tu_qmat_free(&u), tu_qmat_free(&dw);
    free(h), free(hf), free(res), free(rf), free(sel), free(wt), free(act), free(y), free(af), free(gact), free(gyv);
    ir_kernel *ks[] = {ku, kd, kg, kgu, kgd, kc};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) ir_kernel_destroy(ks[i]);
}

Test(kernels_moe_q, quantized_experts_mixed_types, .timeout = 600) {
    static const kn_qtype types[][3] = {{KN_Q4_K, KN_Q4_K, KN_Q6_K}, {KN_Q8_0, KN_Q8_0, KN_Q8_0},
                                        {KN_Q4_0, KN_Q5_1, KN_Q4_1}, {KN_Q2_K, KN_Q3_K, KN_Q5_K}};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(65);
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            bool kq = kn_qformat_of(types[i][0])->unit == 256 || kn_qformat_of(types[i][2])->unit == 256;
            uint32_t d_in = kq ? 256 : 96, ff = kq ? 512 : 160; /* rows not whole workgroups */
            q_case(d, i % 2 ? 3 : 5, d_in, ff, 5 + (uint32_t)i, 2 + (uint32_t)(i % 2), types[i],
                   i % 2 ? IR_F16 : IR_BF16, variants[v]);
        }
        d->ops->destroy(d);
    }
}

Test(kernels_moe_q, build_for_cuda_and_assemble, .timeout = 120) {
    rt_caps c = tu_cuda_caps(90);
    kiln_err err = {0};
    uint32_t g;
    ir_kernel *k[4] = {kn_moe_gate_up_q(&c, 2048, 768, 128, 8, KN_Q4_K, KN_Q4_K, IR_BF16, true, &g, &err),
                       kn_moe_down_q(&c, 768, 2048, 128, 8, KN_Q6_K, IR_BF16, true, &g, &err),
                       kn_moe_gate_up_g_q(&c, 2048, 768, 128, 8, 512, KN_Q4_K, KN_Q4_K, IR_BF16, true, &g, &err),
                       kn_moe_down_g_q(&c, 768, 2048, 128, 8, 512, KN_Q6_K, IR_BF16, true, &g, &err)};
    for (int i = 0; i < 4; i++) {
        cr_assert_not_null(k[i], "%s", err.msg);
        tu_ptx_assembles(k[i], &c, ir_kernel_name(k[i]));
        ir_kernel_destroy(k[i]);
    }
    /* a type whose units do not divide the columns is refused by name */
    cr_assert_null(kn_moe_down_q(&c, 100, 256, 8, 2, KN_Q4_K, IR_BF16, false, &g, &err));
}

/* The cached variants on quantized slots: slot s holds expert (2 s + 1) % ne (its blocks
 * copied); a hit's products equal the all-resident kernels' bit for bit, a miss's come
 * from "miss" (here the all-resident grouped yc), so every y equals the all-resident y. */
static uint8_t *expert_blocks(const tu_qmat *m, kn_qtype q, uint32_t ne, uint32_t slots, uint32_t rows) {
    size_t per = (size_t)rows * m->L.cols / gguf_type_info_of(tu_qtypes[q])->block *
                 gguf_type_info_of(tu_qtypes[q])->block_bytes;
    uint8_t *b = malloc(per * slots);
    for (uint32_t s = 0; s < slots; s++) memcpy(b + per * s, m->blocks + per * ((2 * s + 1) % ne), per);
    return b;
}

static void cached_q_case(rt_device *d, uint32_t nb, uint32_t d_in, uint32_t ff, uint32_t ne, uint32_t slots,
                          uint32_t k_used, const kn_qtype qt[3], ir_scalar t, const char *var) {
    char what[200];
    snprintf(what, sizeof what, "moe_q cached nb=%u d=%u ff=%u experts=%u slots=%u k=%u %s caps=%s", nb, d_in, ff, ne,
             slots, k_used, tu_dname(t), var ? var : "device");
    kiln_err err = {0};
    uint32_t gu, gd, ggu, ggd, gc, xgu, xgd, xggu, xggd, xgc;
    ir_kernel *ku = kn_moe_gate_up_q(&d->caps, d_in, ff, ne, k_used, qt[0], qt[1], t, false, &gu, &err);
    ir_kernel *kd = kn_moe_down_q(&d->caps, ff, d_in, ne, k_used, qt[2], t, false, &gd, &err);
    ir_kernel *kg = kn_moe_group(&d->caps, ne, k_used, nb, false, &err);
    ir_kernel *kgu = kn_moe_gate_up_g_q(&d->caps, d_in, ff, ne, k_used, nb, qt[0], qt[1], t, false, &ggu, &err);
    ir_kernel *kgd = kn_moe_down_g_q(&d->caps, ff, d_in, ne, k_used, nb, qt[2], t, false, &ggd, &err);
    ir_kernel *kc = kn_moe_combine(&d->caps, d_in, k_used, nb, t, false, &gc, &err);
    ir_kernel *xu = kn_moe_gate_up_q(&d->caps, d_in, ff, slots, k_used, qt[0], qt[1], t, true, &xgu, &err);
    ir_kernel *xd = kn_moe_down_q(&d->caps, ff, d_in, slots, k_used, qt[2], t, true, &xgd, &err);
    /* the plan groups by the model's experts (kernels.h: the 16-bit kernels' bound); the
     * quantized kernels, laid out for the slots, read the slots' bins */
    ir_kernel *xg = kn_moe_group(&d->caps, ne, k_used, nb, true, &err);
    ir_kernel *xgu_ = kn_moe_gate_up_g_q(&d->caps, d_in, ff, slots, k_used, nb, qt[0], qt[1], t, true, &xggu, &err);
    ir_kernel *xgd_ = kn_moe_down_g_q(&d->caps, ff, d_in, slots, k_used, nb, qt[2], t, true, &xggd, &err);
    ir_kernel *xc = kn_moe_combine(&d->caps, d_in, k_used, nb, t, true, &xgc, &err);
    cr_assert(ku && kd && kg && kgu && kgd && kc && xu && xd && xg && xgu_ && xgd_ && xc, "%s: %s", what, err.msg);
    tu_qmat g = tu_qmat_make(qt[0], ne * ff, d_in), u = tu_qmat_make(qt[1], ne * ff, d_in);
    tu_qmat dw = tu_qmat_make(qt[2], ne * d_in, ff);
    tu_qmat cg = tu_qmat_from_blocks(qt[0], slots * ff, d_in, expert_blocks(&g, qt[0], ne, slots, ff));
    tu_qmat cu = tu_qmat_from_blocks(qt[1], slots * ff, d_in, expert_blocks(&u, qt[1], ne, slots, ff));
    tu_qmat cd = tu_qmat_from_blocks(qt[2], slots * d_in, ff, expert_blocks(&dw, qt[2], ne, slots, d_in));
    size_t nk = (size_t)nb * k_used;
    uint16_t *h = tu_rand16(t, (size_t)nb * d_in, -2, 2, NULL), *res = tu_rand16(t, (size_t)nb * d_in, -4, 4, NULL);
    uint32_t *sel = malloc(nk * 4), *csel = malloc(nk * 4), info[2] = {0, nb};
    float *wt = malloc(nk * 4);
    size_t misses = 0;
    for (uint32_t tok = 0; tok < nb; tok++) {
        tu_rand_distinct(sel + (size_t)tok * k_used, k_used, ne);
        for (uint32_t j = 0; j < k_used; j++) {
            size_t c = (size_t)tok * k_used + j;
            uint32_t x = sel[c];
            wt[c] = tu_urand(0.05f, 1), csel[c] = KN_MOE_MISS;
            for (uint32_t s = 0; s < slots; s++)
                if ((2 * s + 1) % ne == x) csel[c] = s;
            misses += csel[c] == KN_MOE_MISS;
        }
    }
    cr_assert(misses > 0 && misses < nk, "%s: %zu of %zu choices miss", what, misses, nk);
    rt_buffer *bh = tu_vk_upload(d, h, (size_t)nb * d_in * 2), *br = tu_vk_upload(d, res, (size_t)nb * d_in * 2);
    rt_buffer *bg = tu_vk_upload(d, g.words, g.L.words * 4), *bu = tu_vk_upload(d, u.words, u.L.words * 4);
    rt_buffer *bd = tu_vk_upload(d, dw.words, dw.L.words * 4);
    rt_buffer *xbg = tu_vk_upload(d, cg.words, cg.L.words * 4), *xbu = tu_vk_upload(d, cu.words, cu.L.words * 4);
    rt_buffer *xbd = tu_vk_upload(d, cd.words, cd.L.words * 4);
    rt_buffer *bs = tu_vk_upload(d, sel, nk * 4), *bcs = tu_vk_upload(d, csel, nk * 4);
    rt_buffer *bw = tu_vk_upload(d, wt, nk * 4), *bi = tu_vk_upload(d, info, 8), *bns = tu_vk_upload(d, &slots, 4);
    rt_buffer *brank = tu_vk_poisoned32(d, nk, GUARD), *boff = tu_vk_poisoned32(d, ne + 2, GUARD), *blist = tu_vk_poisoned32(d, nk, GUARD);
    rt_buffer *ba = tu_vk_poisoned16(d, t, nk * ff, GUARD), *byc = tu_vk_poisoned16(d, t, nk * d_in, GUARD);
    rt_buffer *by = tu_vk_poisoned16(d, t, (size_t)nb * d_in, GUARD), *by1 = tu_vk_poisoned16(d, t, (size_t)nb * d_in, GUARD);
    rt_buffer *ba1 = tu_vk_poisoned16(d, t, nk * ff, GUARD);
    /* all resident: grouped (yc, y) and per token (act, y1) */
    tu_vk_launch(d, kg, 1, 1, (rt_arg[]){{bs, 0}, {bi, 0}, {brank, 0}, {boff, 0}, {blist, 0}}, 5);
    tu_vk_launch(d, kgu, ggu, 1, (rt_arg[]){{bh, 0}, {bg, 0}, {bu, 0}, {boff, 0}, {blist, 0}, {ba, 0}}, 6);
    tu_vk_launch(d, kgd, ggd, 1, (rt_arg[]){{ba, 0}, {bd, 0}, {boff, 0}, {blist, 0}, {byc, 0}}, 5);
    tu_vk_launch(d, kc, gc, nb, (rt_arg[]){{byc, 0}, {bw, 0}, {br, 0}, {by, 0}, {bi, 0}}, 5);
    tu_vk_launch(d, ku, gu, nb, (rt_arg[]){{bh, 0}, {bg, 0}, {bu, 0}, {bs, 0}, {ba1, 0}}, 5);
    tu_vk_launch(d, kd, gd, nb, (rt_arg[]){{ba1, 0}, {bd, 0}, {bs, 0}, {bw, 0}, {br, 0}, {by1, 0}}, 6);
    uint16_t *yc = tu_vk_fetch16(d, byc, t, nk * d_in, GUARD, what), *y = tu_vk_fetch16(d, by, t, (size_t)nb * d_in, GUARD, what);
    uint16_t *act1 = tu_vk_fetch16(d, ba1, t, nk * ff, GUARD, what), *y1 = tu_vk_fetch16(d, by1, t, (size_t)nb * d_in, GUARD, what);
    uint16_t *miss = malloc(nk * d_in * 2);
    for (size_t c = 0; c < nk; c++)
        for (uint32_t r = 0; r < d_in; r++) miss[c * d_in + r] = csel[c] == KN_MOE_MISS ? yc[c * d_in + r] : tu_nan16(t);
    rt_buffer *bm = tu_vk_upload(d, miss, nk * d_in * 2);
    /* cached, per token */
    rt_buffer *pa = tu_vk_poisoned16(d, t, nk * ff, GUARD), *py = tu_vk_poisoned16(d, t, (size_t)nb * d_in, GUARD);
    tu_vk_launch(d, xu, xgu, nb, (rt_arg[]){{bh, 0}, {xbg, 0}, {xbu, 0}, {bcs, 0}, {pa, 0}, {bns, 0}}, 6);
    tu_vk_launch(d, xd, xgd, nb, (rt_arg[]){{pa, 0}, {xbd, 0}, {bcs, 0}, {bw, 0}, {br, 0}, {py, 0}, {bm, 0}, {bns, 0}},
                 8);
    uint16_t *pact = tu_vk_fetch16(d, pa, t, nk * ff, GUARD, what), *pyv = tu_vk_fetch16(d, py, t, (size_t)nb * d_in, GUARD, what);
    for (size_t c = 0; c < nk; c++)
        for (uint32_t r = 0; r < ff; r++) {
            uint16_t want = csel[c] != KN_MOE_MISS ? act1[c * ff + r] : tu_nan16(t);
            cr_assert_eq(pact[c * ff + r], want, "%s: act[%zu][%u] %04x, want %04x", what, c, r, pact[c * ff + r], want);
        }
    for (size_t i = 0; i < (size_t)nb * d_in; i++)
        cr_assert_eq(pyv[i], y1[i], "%s: y[%zu] %04x, all resident %04x", what, i, pyv[i], y1[i]);
    /* cached, grouped */
    rt_buffer *xoff = tu_vk_poisoned32(d, ne + 2, GUARD), *xa = tu_vk_poisoned16(d, t, nk * ff, GUARD);
    rt_buffer *xyc = tu_vk_poisoned16(d, t, nk * d_in, GUARD), *xy = tu_vk_poisoned16(d, t, (size_t)nb * d_in, GUARD);
    tu_vk_launch(d, xg, 1, 1, (rt_arg[]){{bcs, 0}, {bi, 0}, {brank, 0}, {xoff, 0}, {blist, 0}}, 5);
    tu_vk_launch(d, xgu_, xggu, 1, (rt_arg[]){{bh, 0}, {xbg, 0}, {xbu, 0}, {xoff, 0}, {blist, 0}, {xa, 0}, {bns, 0}}, 7);
    tu_vk_launch(d, xgd_, xggd, 1, (rt_arg[]){{xa, 0}, {xbd, 0}, {xoff, 0}, {blist, 0}, {xyc, 0}, {bns, 0}}, 6);
    tu_vk_launch(d, xc, xgc, nb, (rt_arg[]){{xyc, 0}, {bw, 0}, {br, 0}, {xy, 0}, {bi, 0}, {bcs, 0}, {bm, 0}}, 7);
    uint16_t *gy = tu_vk_fetch16(d, xy, t, (size_t)nb * d_in, GUARD, what);
    for (size_t i = 0; i < (size_t)nb * d_in; i++)
        cr_assert_eq(gy[i], y[i], "%s: grouped y[%zu] %04x, all resident %04x", what, i, gy[i], y[i]);
    rt_buffer *bufs[] = {bh, br, bg, bu, bd, xbg, xbu, xbd, bs, bcs, bw, bi, brank, boff, blist, ba, byc, by, by1, ba1,
                         bm, pa, py, xoff, xa, xyc, xy, bns};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) d->ops->release(d, bufs[i]);
    tu_qmat *ms[] = {&g, &u, &dw, &cg, &cu, &cd};
    for (size_t i = 0; i < 6; i++) tu_qmat_free(ms[i]);
    free(h), free(res), free(sel), free(csel), free(wt), free(yc), free(y), free(act1), free(y1), free(miss);
    free(pact), free(pyv), free(gy);
    ir_kernel *ks[] = {ku, kd, kg, kgu, kgd, kc, xu, xd, xg, xgu_, xgd_, xc};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) ir_kernel_destroy(ks[i]);
}

Test(kernels_moe_q, cached_equals_resident, .timeout = 600) {
    static const kn_qtype types[][3] = {{KN_Q4_K, KN_Q4_K, KN_Q6_K}, {KN_Q8_0, KN_Q4_1, KN_Q5_0}};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(66);
        cached_q_case(d, 6, 256, 512, 7, 3, 2, types[0], IR_BF16, variants[v]);
        cached_q_case(d, 5, 96, 64, 6, 2, 3, types[1], IR_F16, variants[v]);
        d->ops->destroy(d);
    }
}
