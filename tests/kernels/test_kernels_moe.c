/* kernels/moe.c on the Vulkan device (lavapipe in CI; KILN_TEST_DEVICE picks another): the
 * router's choice and weights, and the experts' products, at odd sizes against plain C
 * references of the oracle's math (oracle/moe.c), outputs poisoned with guard regions that
 * must stay so, with and without subgroup arithmetic. Tolerances as test_kernels.c derives
 * them: two summation orders of n products are within 2n 2^-24 sum|terms|; each rounding
 * to the 16-bit type adds an ulp. */
#include "base/error.h"
#include "gguf/half.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "tests/util/testutil_ptx.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64

static const char *const variants[] = {NULL, "no-subgroup-arith"};

/* ---- the router ---------------------------------------------------------------------------- */

/* shared: the last expert is a shared one (qwen35moe), every token's last choice with
 * weight sigmoid(its score); the others are routed among the rest */
static void route_case(rt_device *d, uint32_t n, uint32_t d_in, uint32_t ne, uint32_t k_used, ir_scalar t,
                       const char *var, bool shared) {
    char what[160];
    snprintf(what, sizeof what, "moe_route n=%u d=%u experts=%u k=%u %s caps=%s%s", n, d_in, ne, k_used, tu_dname(t),
             var ? var : "device", shared ? " shared" : "");
    uint32_t nr = shared ? ne - 1 : ne, kr = shared ? k_used - 1 : k_used; /* the routed ones */
    kiln_err err = {0};
    uint32_t gs = 0;
    ir_kernel *ks = kn_moe_scores(&d->caps, d_in, ne, t, &gs, &err);
    cr_assert_not_null(ks, "%s: %s", what, err.msg);
    ir_kernel *k = kn_moe_route(&d->caps, ne, k_used, shared, &err);
    cr_assert_not_null(k, "%s: %s", what, err.msg);
    float *hf, *rw = malloc((size_t)ne * d_in * 4);
    uint16_t *h = tu_rand16(t, (size_t)n * d_in, -2, 2, &hf);
    for (size_t i = 0; i < (size_t)ne * d_in; i++) rw[i] = tu_urand(-1, 1);
    rt_buffer *bh = tu_vk_upload(d, h, (size_t)n * d_in * 2), *br = tu_vk_upload(d, rw, (size_t)ne * d_in * 4);
    rt_buffer *bs = tu_vk_poisoned32(d, (size_t)n * k_used, GUARD), *bw = tu_vk_poisoned32(d, (size_t)n * k_used, GUARD);
    rt_buffer *bsc = tu_vk_poisoned32(d, (size_t)n * ne, GUARD);
    rt_arg sargs[3] = {{bh, 0}, {br, 0}, {bsc, 0}};
    tu_vk_launch(d, ks, gs, n, sargs, 3);
    free(tu_vk_fetch32(d, bsc, (size_t)n * ne, GUARD, what)); /* only the guard checked: the scores show in the choice */
    rt_arg args[3] = {{bsc, 0}, {bs, 0}, {bw, 0}};
    tu_vk_launch(d, k, 1, n, args, 3);
    uint32_t *sel = tu_vk_fetch32(d, bs, (size_t)n * k_used, GUARD, what), *wbits = tu_vk_fetch32(d, bw, (size_t)n * k_used, GUARD, what);
    double *s = malloc(ne * sizeof *s), *tol = malloc(ne * sizeof *tol);
    for (uint32_t tok = 0; tok < n; tok++) {
        double max = -INFINITY;
        for (uint32_t x = 0; x < ne; x++) {
            double acc = 0, mag = 0;
            for (uint32_t c = 0; c < d_in; c++) {
                double p = (double)rw[(size_t)x * d_in + c] * hf[(size_t)tok * d_in + c];
                acc += p, mag += fabs(p);
            }
            s[x] = acc, tol[x] = 2.0 * d_in * ldexp(1.0, -24) * mag + 1e-6;
            if (x < nr) max = fmax(max, acc);
        }
        bool used[1024] = {0};
        double chosen = 0;
        for (uint32_t j = 0; j < kr; j++) {
            uint32_t got = sel[tok * k_used + j];
            cr_assert_lt(got, nr, "%s: token %u choice %u is %u", what, tok, j, got);
            cr_assert(!used[got], "%s: token %u chose expert %u twice", what, tok, got);
            used[got] = true;
            /* the largest score among those not chosen before, up to the sums' orders */
            double best = -INFINITY, best_tol = 0;
            for (uint32_t x = 0; x < nr; x++)
                if (!used[x] || x == got)
                    if (s[x] > best) best = s[x], best_tol = tol[x];
            cr_assert(s[got] >= best - best_tol - tol[got], "%s: token %u choice %u: expert %u scores %.9g, %.9g is larger",
                      what, tok, j, got, s[got], best);
            chosen += exp(s[got] - max);
        }
        for (uint32_t j = 0; j < kr; j++) {
            float w;
            memcpy(&w, &wbits[tok * k_used + j], 4);
            double want = exp(s[sel[tok * k_used + j]] - max) / chosen;
            cr_assert(fabs(w - want) <= 1e-5 * want + 1e-6, "%s: token %u weight %u: %.9g, want %.9g", what, tok, j, w,
                      want);
        }
        if (!shared) continue;
        float w;
        memcpy(&w, &wbits[tok * k_used + kr], 4);
        double want = 1.0 / (1.0 + exp(-s[ne - 1])), slope = want * (1 - want);
        cr_assert_eq(sel[tok * k_used + kr], ne - 1, "%s: token %u's last choice is not the shared expert", what, tok);
        cr_assert(fabs(w - want) <= 1e-5 * want + slope * tol[ne - 1] + 1e-6,
                  "%s: token %u shared weight %.9g, want %.9g", what, tok, w, want);
    }
    d->ops->release(d, bh), d->ops->release(d, br), d->ops->release(d, bs), d->ops->release(d, bw);
    d->ops->release(d, bsc);
    free(h), free(hf), free(rw), free(sel), free(wbits), free(s), free(tol);
    ir_kernel_destroy(k);
    ir_kernel_destroy(ks);
}

/* The router in one subgroup (butterflies, where the device has shuffles) and over a
 * workgroup's barriers (without); each shape also with a shared expert past its experts. */
Test(kernels_moe, route_odd_sizes_with_guards) {
    const uint32_t shapes[][4] = {{1, 200, 6, 2}, {3, 97, 37, 5}, {2, 64, 128, 8}, {1, 33, 3, 3}, {2, 40, 300, 9}};
    const char *const route_variants[] = {NULL, "no-subgroup-arith", "no-subgroup-shuffle"};
    for (size_t v = 0; v < sizeof route_variants / sizeof route_variants[0]; v++) {
        const char *const *variants = route_variants;
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(61);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (int shared = 0; shared < 2; shared++)
                route_case(d, shapes[i][0], shapes[i][1], shapes[i][2] + (uint32_t)shared,
                           shapes[i][3] + (uint32_t)shared, i % 2 ? IR_F16 : IR_BF16, variants[v], shared);
        d->ops->destroy(d);
    }
}

/* ---- the experts' products ------------------------------------------------------------------ */

/* dot of w row (16-bit, as f32) with x; *tol the two-orders bound */
static float dot(const float *w, const float *x, uint32_t n, double *tol) {
    float s = 0;
    double mag = 0;
    for (uint32_t c = 0; c < n; c++) {
        float p = w[c] * x[c];
        s += p, mag += fabs(p);
    }
    *tol = 2.0 * n * ldexp(1.0, -24) * mag;
    return s;
}

static void experts_case(rt_device *d, uint32_t n, uint32_t d_in, uint32_t ff, uint32_t ne, uint32_t k_used,
                         ir_scalar t, const char *var) {
    char what[160];
    snprintf(what, sizeof what, "moe experts n=%u d=%u ff=%u experts=%u k=%u %s caps=%s", n, d_in, ff, ne, k_used,
             tu_dname(t), var ? var : "device");
    kiln_err err = {0};
    uint32_t gx_up = 0, gx_down = 0;
    ir_kernel *ku = kn_moe_gate_up(&d->caps, d_in, ff, ne, k_used, t, false, &gx_up, &err);
    cr_assert_not_null(ku, "%s: %s", what, err.msg);
    ir_kernel *kd = kn_moe_down(&d->caps, ff, d_in, ne, k_used, t, false, &gx_down, &err);
    cr_assert_not_null(kd, "%s: %s", what, err.msg);
    size_t wn = (size_t)ne * ff * d_in, nk = (size_t)n * k_used;
    float *hf, *gf, *uf, *df, *rf;
    uint16_t *h = tu_rand16(t, (size_t)n * d_in, -2, 2, &hf), *g = tu_rand16(t, wn, -0.5f, 0.5f, &gf);
    uint16_t *u = tu_rand16(t, wn, -0.5f, 0.5f, &uf), *dw = tu_rand16(t, wn, -0.5f, 0.5f, &df);
    uint16_t *res = tu_rand16(t, (size_t)n * d_in, -4, 4, &rf);
    uint32_t *sel = malloc(nk * 4);
    float *wt = malloc(nk * 4);
    for (uint32_t tok = 0; tok < n; tok++) { /* distinct experts, weights summing to 1 */
        float sum = 0;
        tu_rand_distinct(sel + (size_t)tok * k_used, k_used, ne);
        for (uint32_t j = 0; j < k_used; j++) sum += wt[tok * k_used + j] = tu_urand(0.05f, 1);
        for (uint32_t j = 0; j < k_used; j++) wt[tok * k_used + j] /= sum;
    }
    rt_buffer *bh = tu_vk_upload(d, h, (size_t)n * d_in * 2), *bg = tu_vk_upload(d, g, wn * 2);
    rt_buffer *bu = tu_vk_upload(d, u, wn * 2), *bd = tu_vk_upload(d, dw, wn * 2);
    rt_buffer *bs = tu_vk_upload(d, sel, nk * 4), *bw = tu_vk_upload(d, wt, nk * 4);
    rt_buffer *br = tu_vk_upload(d, res, (size_t)n * d_in * 2);
    rt_buffer *ba = tu_vk_poisoned16(d, t, nk * ff, GUARD), *by = tu_vk_poisoned16(d, t, (size_t)n * d_in, GUARD);
    rt_arg up_args[5] = {{bh, 0}, {bg, 0}, {bu, 0}, {bs, 0}, {ba, 0}};
    tu_vk_launch(d, ku, gx_up, n, up_args, 5);
    uint16_t *act = tu_vk_fetch16(d, ba, t, nk * ff, GUARD, what);
    /* act against the reference, as the dense SwiGLU's (test_kernels.c) */
    for (size_t cj = 0; cj < nk; cj++) {
        uint32_t tok = (uint32_t)(cj / k_used), x = sel[cj];
        for (uint32_t r = 0; r < ff; r++) {
            double tg, tu;
            size_t w0 = ((size_t)x * ff + r) * d_in;
            float gs = tu_from16(t, tu_to16(t, dot(gf + w0, hf + (size_t)tok * d_in, d_in, &tg)));
            float us = tu_from16(t, tu_to16(t, dot(uf + w0, hf + (size_t)tok * d_in, d_in, &tu)));
            double want = gs / (1.0f + expf(-gs)) * us, got = tu_from16(t, act[cj * ff + r]);
            double dg = tg + tu_ulp16(t, fabs(gs) + tg), du = tu + tu_ulp16(t, fabs(us) + tu);
            double tl = 1.1 * dg * (fabs(us) + du) + (fabs(gs) + dg) * du + (7 + 2 * fabs(gs)) * ldexp(1.0, -23) * fabs(want);
            tl += tu_ulp16(t, fmax(fabs(want), fabs(got)));
            cr_assert(fabs(got - want) <= tl, "%s: act[%zu][%u] %.9g != %.9g (tol %.3g)", what, cj, r, got, want, tl);
        }
    }
    /* down from the device's act, so that its check is the down's alone */
    rt_arg down_args[6] = {{ba, 0}, {bd, 0}, {bs, 0}, {bw, 0}, {br, 0}, {by, 0}};
    tu_vk_launch(d, kd, gx_down, n, down_args, 6);
    uint16_t *y = tu_vk_fetch16(d, by, t, (size_t)n * d_in, GUARD, what);
    float *af = malloc(ff * 4);
    for (uint32_t tok = 0; tok < n; tok++)
        for (uint32_t r = 0; r < d_in; r++) {
            float o = 0;
            double tl = 0;
            for (uint32_t j = 0; j < k_used; j++) {
                size_t cj = (size_t)tok * k_used + j;
                for (uint32_t c = 0; c < ff; c++) af[c] = tu_from16(t, act[cj * ff + c]);
                double td;
                float yj = dot(df + ((size_t)sel[cj] * d_in + r) * ff, af, ff, &td), y16 = tu_from16(t, tu_to16(t, yj));
                float p = wt[cj] * y16;
                o = j ? o + p : p;
                tl += wt[cj] * (td + tu_ulp16(t, fabs(yj) + td)) + ldexp(1.0, -23) * fabs(o);
            }
            double want = tu_from16(t, tu_to16(t, o)) + rf[(size_t)tok * d_in + r], got = tu_from16(t, y[(size_t)tok * d_in + r]);
            tl += tu_ulp16(t, fabs(o) + tl) + tu_ulp16(t, fmax(fabs(want), fabs(got)));
            cr_assert(fabs(got - want) <= tl, "%s: y[%u][%u] %.9g != %.9g (tol %.3g)", what, tok, r, got, want, tl);
        }
    rt_buffer *bufs[] = {bh, bg, bu, bd, bs, bw, br, ba, by};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) d->ops->release(d, bufs[i]);
    free(h), free(g), free(u), free(dw), free(res), free(hf), free(gf), free(uf), free(df), free(rf);
    free(sel), free(wt), free(act), free(y), free(af);
    ir_kernel_destroy(ku);
    ir_kernel_destroy(kd);
}

Test(kernels_moe, experts_odd_sizes_with_guards, .timeout = 300) {
    const uint32_t shapes[][5] = {{1, 200, 72, 6, 2}, {3, 97, 45, 5, 3}, {2, 64, 33, 9, 1}};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(62);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            experts_case(d, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4],
                         i % 2 ? IR_F16 : IR_BF16, variants[v]);
        d->ops->destroy(d);
    }
}

/* A block of nb tokens (live < nb of them, info[1]) grouped by expert: the list holds every
 * live choice once, in its expert's run; act and y equal the per-token kernels' bit for
 * bit (the same sums in the same order), and the rows past the live tokens stay poisoned. */
static void grouped_case(rt_device *d, uint32_t nb, uint32_t live, uint32_t d_in, uint32_t ff, uint32_t ne,
                         uint32_t k_used, ir_scalar t, const char *var) {
    char what[160];
    snprintf(what, sizeof what, "moe grouped nb=%u live=%u d=%u ff=%u experts=%u k=%u %s caps=%s", nb, live, d_in, ff,
             ne, k_used, tu_dname(t), var ? var : "device");
    kiln_err err = {0};
    uint32_t g_up, g_down, g_comb, g_up1, g_down1;
    ir_kernel *kg = kn_moe_group(&d->caps, ne, k_used, nb, false, &err);
    cr_assert_not_null(kg, "%s: %s", what, err.msg);
    ir_kernel *ku = kn_moe_gate_up_g(&d->caps, d_in, ff, ne, k_used, nb, t, false, &g_up, &err);
    cr_assert_not_null(ku, "%s: %s", what, err.msg);
    ir_kernel *kd = kn_moe_down_g(&d->caps, ff, d_in, ne, k_used, nb, t, false, &g_down, &err);
    cr_assert_not_null(kd, "%s: %s", what, err.msg);
    ir_kernel *kc = kn_moe_combine(&d->caps, d_in, k_used, nb, t, false, &g_comb, &err);
    cr_assert_not_null(kc, "%s: %s", what, err.msg);
    ir_kernel *ku1 = kn_moe_gate_up(&d->caps, d_in, ff, ne, k_used, t, false, &g_up1, &err);
    ir_kernel *kd1 = kn_moe_down(&d->caps, ff, d_in, ne, k_used, t, false, &g_down1, &err);
    cr_assert(ku1 && kd1, "%s: %s", what, err.msg);
    size_t wn = (size_t)ne * ff * d_in, nk = (size_t)nb * k_used;
    float *hf, *gf, *uf, *df, *rf;
    uint16_t *h = tu_rand16(t, (size_t)nb * d_in, -2, 2, &hf), *g = tu_rand16(t, wn, -0.5f, 0.5f, &gf);
    uint16_t *u = tu_rand16(t, wn, -0.5f, 0.5f, &uf), *dw = tu_rand16(t, wn, -0.5f, 0.5f, &df);
    uint16_t *res = tu_rand16(t, (size_t)nb * d_in, -4, 4, &rf);
    uint32_t *sel = malloc(nk * 4), info[2] = {0, live};
    float *wt = malloc(nk * 4);
    for (uint32_t tok = 0; tok < nb; tok++) /* distinct experts; the first expert unchosen, so a run is empty */
        for (uint32_t j = 0; j < k_used; j++) {
            sel[tok * k_used + j] = 1 + (tok * 5 + j * 3) % (ne - 1);
            for (uint32_t i = 0; i < j; i++)
                if (sel[tok * k_used + i] == sel[tok * k_used + j]) sel[tok * k_used + j] = 1 + (sel[tok * k_used + j] % (ne - 1));
            wt[tok * k_used + j] = tu_urand(0.05f, 1);
        }
    rt_buffer *bh = tu_vk_upload(d, h, (size_t)nb * d_in * 2), *bg = tu_vk_upload(d, g, wn * 2);
    rt_buffer *bu = tu_vk_upload(d, u, wn * 2), *bd = tu_vk_upload(d, dw, wn * 2);
    rt_buffer *bs = tu_vk_upload(d, sel, nk * 4), *bw = tu_vk_upload(d, wt, nk * 4), *bi = tu_vk_upload(d, info, 8);
    rt_buffer *br = tu_vk_upload(d, res, (size_t)nb * d_in * 2);
    rt_buffer *brank = tu_vk_poisoned32(d, nk, GUARD), *boff = tu_vk_poisoned32(d, ne + 1, GUARD), *blist = tu_vk_poisoned32(d, nk, GUARD);
    rt_buffer *ba = tu_vk_poisoned16(d, t, nk * ff, GUARD), *byc = tu_vk_poisoned16(d, t, nk * d_in, GUARD);
    rt_buffer *by = tu_vk_poisoned16(d, t, (size_t)nb * d_in, GUARD);
    rt_arg ga[5] = {{bs, 0}, {bi, 0}, {brank, 0}, {boff, 0}, {blist, 0}};
    tu_vk_launch(d, kg, 1, 1, ga, 5);
    rt_arg ua[6] = {{bh, 0}, {bg, 0}, {bu, 0}, {boff, 0}, {blist, 0}, {ba, 0}};
    tu_vk_launch(d, ku, g_up, 1, ua, 6);
    rt_arg da[5] = {{ba, 0}, {bd, 0}, {boff, 0}, {blist, 0}, {byc, 0}};
    tu_vk_launch(d, kd, g_down, 1, da, 5);
    rt_arg ca[5] = {{byc, 0}, {bw, 0}, {br, 0}, {by, 0}, {bi, 0}};
    tu_vk_launch(d, kc, g_comb, nb, ca, 5);
    uint32_t *off = tu_vk_fetch32(d, boff, ne + 1, GUARD, what), *list = tu_vk_fetch32(d, blist, nk, GUARD, what);
    size_t n_live = (size_t)live * k_used;
    cr_assert_eq(off[0], 0, "%s", what);
    cr_assert_eq(off[ne], n_live, "%s: %u listed", what, off[ne]);
    cr_assert_eq(off[1], 0, "%s: expert 0 was chosen by nobody", what);
    bool *seen = calloc(nk, 1);
    for (uint32_t e = 0; e < ne; e++)
        for (uint32_t i = off[e]; i < off[e + 1]; i++) {
            cr_assert_lt(list[i], n_live, "%s: list[%u] = %u", what, i, list[i]);
            cr_assert(!seen[list[i]], "%s: choice %u listed twice", what, list[i]);
            seen[list[i]] = true;
            cr_assert_eq(sel[list[i]], e, "%s: choice %u in expert %u's run", what, list[i], e);
        }
    uint16_t *act = tu_vk_fetch16(d, ba, t, nk * ff, GUARD, what), *y = tu_vk_fetch16(d, by, t, (size_t)nb * d_in, GUARD, what);
    /* the per-token kernels on the same inputs */
    rt_buffer *ba1 = tu_vk_poisoned16(d, t, nk * ff, GUARD), *by1 = tu_vk_poisoned16(d, t, (size_t)nb * d_in, GUARD);
    rt_arg ua1[5] = {{bh, 0}, {bg, 0}, {bu, 0}, {bs, 0}, {ba1, 0}};
    tu_vk_launch(d, ku1, g_up1, nb, ua1, 5);
    rt_arg da1[6] = {{ba1, 0}, {bd, 0}, {bs, 0}, {bw, 0}, {br, 0}, {by1, 0}};
    tu_vk_launch(d, kd1, g_down1, nb, da1, 6);
    uint16_t *act1 = tu_vk_fetch16(d, ba1, t, nk * ff, GUARD, what), *y1 = tu_vk_fetch16(d, by1, t, (size_t)nb * d_in, GUARD, what);
    for (size_t i = 0; i < n_live * ff; i++) cr_assert_eq(act[i], act1[i], "%s: act[%zu] %04x, per token %04x", what, i, act[i], act1[i]);
    for (size_t i = n_live * ff; i < nk * ff; i++) cr_assert_eq(act[i], tu_nan16(t), "%s: act[%zu] of a dead token written", what, i);
    for (size_t i = 0; i < (size_t)live * d_in; i++) cr_assert_eq(y[i], y1[i], "%s: y[%zu] %04x, per token %04x", what, i, y[i], y1[i]);
    for (size_t i = (size_t)live * d_in; i < (size_t)nb * d_in; i++) cr_assert_eq(y[i], tu_nan16(t), "%s: y[%zu] of a dead token written", what, i);
    rt_buffer *bufs[] = {bh, bg, bu, bd, bs, bw, bi, br, brank, boff, blist, ba, byc, by, ba1, by1};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) d->ops->release(d, bufs[i]);
    free(h), free(g), free(u), free(dw), free(res), free(hf), free(gf), free(uf), free(df), free(rf);
    free(sel), free(wt), free(off), free(list), free(seen), free(act), free(y), free(act1), free(y1);
    ir_kernel *ks[] = {kg, ku, kd, kc, ku1, kd1};
    for (size_t i = 0; i < 6; i++) ir_kernel_destroy(ks[i]);
}

Test(kernels_moe, grouped_block_equals_per_token, .timeout = 300) {
    const uint32_t shapes[][6] = {{64, 37, 200, 72, 6, 2}, {16, 16, 97, 45, 9, 3}, {8, 1, 64, 33, 5, 4}};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(63);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            grouped_case(d, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], shapes[i][5],
                         i % 2 ? IR_F16 : IR_BF16, variants[v]);
        d->ops->destroy(d);
    }
}

Test(kernels_moe, bad_shapes_refused) {
    rt_caps c;
    rt_caps_default(&c, RT_VULKAN);
    c.storage16 = true;
    kiln_err err = {0};
    uint32_t g;
    cr_assert_null(kn_moe_route(&c, 4, 5, false, &err));
    cr_assert(strstr(err.msg, "kn_moe_route"), "%s", err.msg);
    cr_assert_null(kn_moe_route(&c, 0, 0, false, &err));
    cr_assert_null(kn_moe_route(&c, 1, 1, true, &err)); /* a shared expert needs one routed beside it */
    cr_assert_null(kn_moe_route(&c, 4, 1, true, &err));
    cr_assert_null(kn_moe_scores(&c, 64, 0, IR_BF16, &g, &err));
    cr_assert_null(kn_moe_gate_up(&c, 64, 64, 8, 0, IR_BF16, false, &g, &err));
    cr_assert_null(kn_moe_down(&c, 65536, 65536, 8, 2, IR_BF16, false, &g, &err)); /* past u32 indices */
    cr_assert(strstr(err.msg, "u32"), "%s", err.msg);
    cr_assert_null(kn_moe_down(&c, 64, 64, 8, 2, IR_F32, false, &g, &err));
}

/* Built for CUDA's caps (qwen3-30b-a3b's shapes) and assembled by ptxas where installed. */
Test(kernels_moe, build_for_cuda_and_assemble, .timeout = 120) {
    rt_caps c = tu_cuda_caps(90);
    kiln_err err = {0};
    uint32_t g;
    ir_kernel *k[3] = {kn_moe_route(&c, 128, 8, false, &err),
                       kn_moe_gate_up(&c, 2048, 768, 128, 8, IR_BF16, true, &g, &err),
                       kn_moe_down(&c, 768, 2048, 128, 8, IR_BF16, true, &g, &err)};
    ir_kernel *kg[4] = {kn_moe_group(&c, 128, 8, 512, true, &err), kn_moe_gate_up_g(&c, 2048, 768, 128, 8, 512, IR_BF16, true, &g, &err),
                        kn_moe_down_g(&c, 768, 2048, 128, 8, 512, IR_BF16, true, &g, &err),
                        kn_moe_combine(&c, 2048, 8, 512, IR_BF16, true, &g, &err)};
    ir_kernel *ks = kn_moe_scores(&c, 2048, 128, IR_BF16, &g, &err);
    for (int i = 0; i < 8; i++) {
        ir_kernel *x = i < 3 ? k[i] : i < 7 ? kg[i - 3] : ks;
        cr_assert_not_null(x, "%s", err.msg);
        tu_ptx_assembles(x, &c, ir_kernel_name(x));
        ir_kernel_destroy(x);
    }
}
