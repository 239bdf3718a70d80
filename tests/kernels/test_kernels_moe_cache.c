/* kernels/moe.c's cached variants (the plan's expert cache) on the Vulkan device (lavapipe
 * in CI), built once for the model's experts and run over caches of two slot counts (the
 * count read from buffer "slots"): the experts' products over C slots holding some, each
 * choice's sel its slot or KN_MOE_MISS, a miss's rounded product given in "miss". With
 * the misses' products taken from the all-resident grouped kernels' yc, the cached
 * kernels' outputs equal the all-resident ones bit for bit (the same sums in the same
 * order), per token and grouped; a miss's activation row is never written, and the rows
 * past the live tokens stay poisoned. */
#include "base/error.h"
#include "gguf/half.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64

static const char *const variants[] = {NULL, "no-subgroup-arith"};

/* Expert e's rows of a [ne x rows x cols] tensor into slot s of a [slots x rows x cols] one. */
static void put_slot(uint16_t *cache, const uint16_t *all, uint32_t s, uint32_t e, size_t rows_cols) {
    memcpy(cache + (size_t)s * rows_cols, all + (size_t)e * rows_cols, rows_cols * 2);
}

/* A case's inputs and its all-resident results (the reference). */
typedef struct mcase {
    rt_device *d;
    uint32_t nb, live, d_in, ff, ne, k;
    ir_scalar t;
    const char *what;
    uint16_t *g, *u, *dw; /* every expert's weights */
    uint32_t *sel;
    rt_buffer *bh, *bw, *bi, *br;
    uint16_t *yc, *y, *act;   /* grouped: every choice's down row, the output, the SwiGLU rows */
    uint16_t *act_all, *y_all; /* per token, every row */
} mcase;

/* The cache's kernels: built once, for the model's ne experts; the slots come at run time. */
typedef struct ckern {
    ir_kernel *g, *u, *dn, *c, *u1, *d1;
    uint32_t gu, gd, gc, g1, g2;
} ckern;

/* The cached kernels over a cache of `slots` slots, slot s holding expert (3 s + 1) % ne
 * (slots < ne: some experts miss), against the all-resident results bit for bit. */
static void run_cached(const mcase *m, const ckern *x, uint32_t slots) {
    rt_device *d = m->d;
    uint32_t nb = m->nb, d_in = m->d_in, ff = m->ff, ne = m->ne;
    ir_scalar t = m->t;
    char what[260];
    snprintf(what, sizeof what, "%s slots=%u", m->what, slots);
    size_t cn = (size_t)slots * ff * d_in, nk = (size_t)nb * m->k, n_live = (size_t)m->live * m->k;
    uint16_t *cgate = malloc(cn * 2), *cup = malloc(cn * 2), *cdown = malloc(cn * 2);
    int32_t *slot_of = malloc(ne * 4);
    uint32_t *csel = malloc(nk * 4);
    for (uint32_t e = 0; e < ne; e++) slot_of[e] = -1;
    for (uint32_t s = 0; s < slots; s++) {
        uint32_t e = (3 * s + 1) % ne;
        slot_of[e] = (int32_t)s;
        put_slot(cgate, m->g, s, e, (size_t)ff * d_in), put_slot(cup, m->u, s, e, (size_t)ff * d_in);
        put_slot(cdown, m->dw, s, e, (size_t)ff * d_in);
    }
    size_t misses = 0;
    for (size_t c = 0; c < nk; c++) {
        csel[c] = slot_of[m->sel[c]] < 0 ? KN_MOE_MISS : (uint32_t)slot_of[m->sel[c]];
        misses += c < n_live && csel[c] == KN_MOE_MISS;
    }
    cr_assert(misses > 0 && misses < n_live, "%s: the case has hits and misses (%zu of %zu miss)", what, misses, n_live);
    rt_buffer *xbg = tu_vk_upload(d, cgate, cn * 2), *xbu = tu_vk_upload(d, cup, cn * 2);
    rt_buffer *xbd = tu_vk_upload(d, cdown, cn * 2), *bcs = tu_vk_upload(d, csel, nk * 4);
    rt_buffer *bns = tu_vk_upload(d, &slots, 4);
    /* the misses' products, as the host gives them; a hit's row poisoned (never read) */
    uint16_t *miss = malloc(nk * d_in * 2);
    for (size_t c = 0; c < nk; c++)
        for (uint32_t r = 0; r < d_in; r++)
            miss[c * d_in + r] = csel[c] == KN_MOE_MISS ? m->yc[c * d_in + r] : tu_nan16(t);
    rt_buffer *bm = tu_vk_upload(d, miss, nk * d_in * 2);
    /* grouped: the bins are the model's experts', the misses' bin past them */
    rt_buffer *brank = tu_vk_poisoned32(d, nk, GUARD), *blist = tu_vk_poisoned32(d, nk, GUARD);
    rt_buffer *xa = tu_vk_poisoned16(d, t, nk * ff, GUARD), *xyc = tu_vk_poisoned16(d, t, nk * d_in, GUARD);
    rt_buffer *xy = tu_vk_poisoned16(d, t, (size_t)nb * d_in, GUARD);
    rt_buffer *xoff = tu_vk_poisoned32(d, ne + 2, GUARD);
    tu_vk_launch(d, x->g, 1, 1, (rt_arg[]){{bcs, 0}, {m->bi, 0}, {brank, 0}, {xoff, 0}, {blist, 0}}, 5);
    tu_vk_launch(d, x->u, x->gu, 1,
                 (rt_arg[]){{m->bh, 0}, {xbg, 0}, {xbu, 0}, {xoff, 0}, {blist, 0}, {xa, 0}, {bns, 0}}, 7);
    tu_vk_launch(d, x->dn, x->gd, 1, (rt_arg[]){{xa, 0}, {xbd, 0}, {xoff, 0}, {blist, 0}, {xyc, 0}, {bns, 0}}, 6);
    tu_vk_launch(d, x->c, x->gc, nb,
                 (rt_arg[]){{xyc, 0}, {m->bw, 0}, {m->br, 0}, {xy, 0}, {m->bi, 0}, {bcs, 0}, {bm, 0}}, 7);
    uint32_t off[1026];
    tu_vk_download(d, xoff, off, (ne + 2) * 4);
    cr_assert_eq(off[ne + 1], n_live, "%s: %u choices listed", what, off[ne + 1]);
    cr_assert_eq(off[ne + 1] - off[ne], misses, "%s: %u in the misses' bin, %zu misses", what, off[ne + 1] - off[ne],
                 misses);
    cr_assert_eq(off[ne], off[slots], "%s: a bin past the slots holds choices", what);
    uint16_t *xact = tu_vk_fetch16(d, xa, t, nk * ff, GUARD, what), *gy = tu_vk_fetch16(d, xy, t, (size_t)nb * d_in, GUARD, what);
    for (size_t c = 0; c < nk; c++)
        for (uint32_t r = 0; r < ff; r++) {
            uint16_t want = c < n_live && csel[c] != KN_MOE_MISS ? m->act[c * ff + r] : tu_nan16(t);
            cr_assert_eq(xact[c * ff + r], want, "%s: grouped act[%zu][%u] %04x, want %04x", what, c, r,
                         xact[c * ff + r], want);
        }
    for (size_t i = 0; i < (size_t)nb * d_in; i++)
        cr_assert_eq(gy[i], m->y[i], "%s: grouped y[%zu] %04x, all resident %04x", what, i, gy[i], m->y[i]);
    /* per token (every row live: the per-token kernels have no info) */
    rt_buffer *pa = tu_vk_poisoned16(d, t, nk * ff, GUARD), *py = tu_vk_poisoned16(d, t, (size_t)nb * d_in, GUARD);
    tu_vk_launch(d, x->u1, x->g1, nb, (rt_arg[]){{m->bh, 0}, {xbg, 0}, {xbu, 0}, {bcs, 0}, {pa, 0}, {bns, 0}}, 6);
    uint16_t *pact = tu_vk_fetch16(d, pa, t, nk * ff, GUARD, what);
    for (size_t c = 0; c < nk; c++)
        for (uint32_t r = 0; r < ff; r++) {
            uint16_t want = csel[c] != KN_MOE_MISS ? m->act_all[c * ff + r] : tu_nan16(t);
            cr_assert_eq(pact[c * ff + r], want, "%s: act[%zu][%u] %04x, want %04x", what, c, r, pact[c * ff + r], want);
        }
    if (m->live == nb) {
        tu_vk_launch(d, x->d1, x->g2, nb,
                     (rt_arg[]){{pa, 0}, {xbd, 0}, {bcs, 0}, {m->bw, 0}, {m->br, 0}, {py, 0}, {bm, 0}, {bns, 0}}, 8);
        uint16_t *pyv = tu_vk_fetch16(d, py, t, (size_t)nb * d_in, GUARD, what);
        for (size_t i = 0; i < (size_t)nb * d_in; i++)
            cr_assert_eq(pyv[i], m->y_all[i], "%s: y[%zu] %04x, all resident %04x", what, i, pyv[i], m->y_all[i]);
        free(pyv);
    }
    rt_buffer *bufs[] = {xbg, xbu, xbd, bcs, bns, bm, brank, blist, xa, xyc, xy, xoff, pa, py};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) d->ops->release(d, bufs[i]);
    free(cgate), free(cup), free(cdown), free(slot_of), free(csel), free(miss), free(xact), free(gy), free(pact);
}

/* One build of the cached kernels run at two slot counts (a resize compiles nothing). */
static void cache_case(rt_device *d, uint32_t nb, uint32_t live, uint32_t d_in, uint32_t ff, uint32_t ne,
                       uint32_t slots, uint32_t k_used, ir_scalar t, const char *var) {
    char what[200];
    snprintf(what, sizeof what, "moe cache nb=%u live=%u d=%u ff=%u experts=%u k=%u %s caps=%s", nb, live, d_in, ff,
             ne, k_used, tu_dname(t), var ? var : "device");
    kiln_err err = {0};
    uint32_t gg, gd, gc, g1, g2;
    /* all resident: grouped (yc, the misses' products) and per token */
    ir_kernel *kg = kn_moe_group(&d->caps, ne, k_used, nb, false, &err);
    ir_kernel *ku = kn_moe_gate_up_g(&d->caps, d_in, ff, ne, k_used, nb, t, false, &gg, &err);
    ir_kernel *kd = kn_moe_down_g(&d->caps, ff, d_in, ne, k_used, nb, t, false, &gd, &err);
    ir_kernel *kc = kn_moe_combine(&d->caps, d_in, k_used, nb, t, false, &gc, &err);
    ir_kernel *ku1 = kn_moe_gate_up(&d->caps, d_in, ff, ne, k_used, t, false, &g1, &err);
    ir_kernel *kd1 = kn_moe_down(&d->caps, ff, d_in, ne, k_used, t, false, &g2, &err);
    ckern x = {0};
    x.g = kn_moe_group(&d->caps, ne, k_used, nb, true, &err);
    x.u = kn_moe_gate_up_g(&d->caps, d_in, ff, ne, k_used, nb, t, true, &x.gu, &err);
    x.dn = kn_moe_down_g(&d->caps, ff, d_in, ne, k_used, nb, t, true, &x.gd, &err);
    x.c = kn_moe_combine(&d->caps, d_in, k_used, nb, t, true, &x.gc, &err);
    x.u1 = kn_moe_gate_up(&d->caps, d_in, ff, ne, k_used, t, true, &x.g1, &err);
    x.d1 = kn_moe_down(&d->caps, ff, d_in, ne, k_used, t, true, &x.g2, &err);
    cr_assert(kg && ku && kd && kc && ku1 && kd1 && x.g && x.u && x.dn && x.c && x.u1 && x.d1, "%s: %s", what,
              err.msg);
    size_t wn = (size_t)ne * ff * d_in, nk = (size_t)nb * k_used;
    mcase m = {d, nb, live, d_in, ff, ne, k_used, t, what};
    uint16_t *h = tu_rand16(t, (size_t)nb * d_in, -2, 2, NULL), *res = tu_rand16(t, (size_t)nb * d_in, -4, 4, NULL);
    m.g = tu_rand16(t, wn, -0.5f, 0.5f, NULL), m.u = tu_rand16(t, wn, -0.5f, 0.5f, NULL);
    m.dw = tu_rand16(t, wn, -0.5f, 0.5f, NULL);
    m.sel = malloc(nk * 4);
    uint32_t info[2] = {0, live};
    float *wt = malloc(nk * 4);
    for (uint32_t tok = 0; tok < nb; tok++) { /* distinct experts a token */
        tu_rand_distinct(m.sel + (size_t)tok * k_used, k_used, ne);
        for (uint32_t j = 0; j < k_used; j++) wt[tok * k_used + j] = tu_urand(0.05f, 1);
    }
    m.bh = tu_vk_upload(d, h, (size_t)nb * d_in * 2), m.bw = tu_vk_upload(d, wt, nk * 4);
    m.bi = tu_vk_upload(d, info, 8), m.br = tu_vk_upload(d, res, (size_t)nb * d_in * 2);
    rt_buffer *bg = tu_vk_upload(d, m.g, wn * 2), *bu = tu_vk_upload(d, m.u, wn * 2), *bd = tu_vk_upload(d, m.dw, wn * 2);
    rt_buffer *bs = tu_vk_upload(d, m.sel, nk * 4);
    rt_buffer *brank = tu_vk_poisoned32(d, nk, GUARD), *boff = tu_vk_poisoned32(d, ne + 2, GUARD), *blist = tu_vk_poisoned32(d, nk, GUARD);
    rt_buffer *ba = tu_vk_poisoned16(d, t, nk * ff, GUARD), *byc = tu_vk_poisoned16(d, t, nk * d_in, GUARD);
    rt_buffer *by = tu_vk_poisoned16(d, t, (size_t)nb * d_in, GUARD);
    tu_vk_launch(d, kg, 1, 1, (rt_arg[]){{bs, 0}, {m.bi, 0}, {brank, 0}, {boff, 0}, {blist, 0}}, 5);
    tu_vk_launch(d, ku, gg, 1, (rt_arg[]){{m.bh, 0}, {bg, 0}, {bu, 0}, {boff, 0}, {blist, 0}, {ba, 0}}, 6);
    tu_vk_launch(d, kd, gd, 1, (rt_arg[]){{ba, 0}, {bd, 0}, {boff, 0}, {blist, 0}, {byc, 0}}, 5);
    tu_vk_launch(d, kc, gc, nb, (rt_arg[]){{byc, 0}, {m.bw, 0}, {m.br, 0}, {by, 0}, {m.bi, 0}}, 5);
    m.yc = tu_vk_fetch16(d, byc, t, nk * d_in, GUARD, what), m.y = tu_vk_fetch16(d, by, t, (size_t)nb * d_in, GUARD, what);
    m.act = tu_vk_fetch16(d, ba, t, nk * ff, GUARD, what);
    rt_buffer *ra = tu_vk_poisoned16(d, t, nk * ff, GUARD), *ry = tu_vk_poisoned16(d, t, (size_t)nb * d_in, GUARD);
    tu_vk_launch(d, ku1, g1, nb, (rt_arg[]){{m.bh, 0}, {bg, 0}, {bu, 0}, {bs, 0}, {ra, 0}}, 5);
    tu_vk_launch(d, kd1, g2, nb, (rt_arg[]){{ra, 0}, {bd, 0}, {bs, 0}, {m.bw, 0}, {m.br, 0}, {ry, 0}}, 6);
    m.act_all = tu_vk_fetch16(d, ra, t, nk * ff, GUARD, what);
    m.y_all = tu_vk_fetch16(d, ry, t, (size_t)nb * d_in, GUARD, what);
    run_cached(&m, &x, slots);
    if (slots + 1 < ne) run_cached(&m, &x, slots + 1);
    rt_buffer *bufs[] = {m.bh, m.bw, m.bi, m.br, bg, bu, bd, bs, brank, boff, blist, ba, byc, by, ra, ry};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) d->ops->release(d, bufs[i]);
    free(h), free(res), free(wt), free(m.g), free(m.u), free(m.dw), free(m.sel), free(m.yc), free(m.y), free(m.act);
    free(m.act_all), free(m.y_all);
    ir_kernel *ks[] = {kg, ku, kd, kc, ku1, kd1, x.g, x.u, x.dn, x.c, x.u1, x.d1};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) ir_kernel_destroy(ks[i]);
}

Test(kernels_moe_cache, cached_equals_resident, .timeout = 300) {
    /* nb, live, d, ff, experts, slots, k */
    const uint32_t shapes[][7] = {{5, 5, 200, 72, 9, 4, 3}, {16, 11, 97, 45, 6, 2, 2}, {1, 1, 64, 33, 8, 5, 4},
                                  {8, 8, 64, 40, 7, 1, 3}};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        tu_seed(64);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            cache_case(d, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], shapes[i][5],
                       shapes[i][6], i % 2 ? IR_F16 : IR_BF16, variants[v]);
        d->ops->destroy(d);
    }
}
