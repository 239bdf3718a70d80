/* Grid tuning at plan time: a matrix-vector product strides its rows over whatever grid
 * it is launched with (kn_matvec), and the best grid depends on how many workgroups the
 * device keeps resident per SM, which no API reports portably (it follows the registers
 * the driver's compiler chose). With one subgroup per row, the qwen3-8b q/k/v product has
 * 768 workgroups: on the H200's Vulkan driver that is ~1.5 waves, the second half-empty,
 * and each workgroup repeats the fused norm's prologue; 2 workgroups per SM striding over
 * the rows ran it 30% faster. No rule read from the caps would have found that, so the
 * plan measures: a few candidate grids per kernel, on the device (only where the products
 * are built strided: kn_matvec_strided). */
#include "plan/plan_tune.h"

#include "base/clock.h"
#include "base/error.h"
#include "plan/plan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The launches of one kernel, each with gx workgroups: its launches in the step (each
 * layer's own weights, so a timing does not run from a cache warmed by a repeat), cycled
 * to at least min_n. */
static uint32_t fill_batch(const rt_launch *l, uint32_t n, const rt_kernel *k, uint32_t gx, rt_launch *batch,
                           uint32_t cap, uint32_t min_n) {
    uint32_t m = 0;
    for (uint32_t i = 0; i < n && m < cap; i++)
        if (l[i].kernel == k) batch[m] = l[i], batch[m++].groups[0] = gx;
    for (uint32_t j = 0; m && m < min_n && m < cap; j++) batch[m++] = batch[j];
    return m;
}

static void set_grid(rt_launch *l, uint32_t n, const rt_kernel *k, uint32_t gx) {
    for (uint32_t j = 0; j < n; j++)
        if (l[j].kernel == k) l[j].groups[0] = gx;
}

/* Seconds per replay of the step l[0..n) recorded as it is now: the best of a few. */
static int time_step(rt_device *d, const rt_launch *l, uint32_t n, double *t, kiln_err *err) {
    rt_recording *r = d->ops->record(d, l, n, err);
    if (!r) return -1;
    int rc = d->ops->replay(d, r, err); /* warm */
    *t = 1e30;
    for (int i = 0; i < 8 && !rc; i++) {
        double t0 = clock_now_s();
        rc = d->ops->replay(d, r, err);
        double dt = clock_now_s() - t0;
        if (dt < *t) *t = dt;
    }
    d->ops->release_recording(d, r);
    return rc;
}

int plan_tune_grids(rt_device *d, rt_launch *l, uint32_t n, rt_kernel *const *kerns, uint32_t n_kerns,
                    uint32_t *chosen, kiln_err *err) {
    static const uint32_t per_cu[] = {1, 2, 3, 4, 6, 8};
    enum { N_CAND = 1 + sizeof per_cu / sizeof per_cu[0], ROUNDS = 5, MIN_BATCH = 16 };
    const uint32_t cu = d->caps.compute_units, cap = n > MIN_BATCH ? n : MIN_BATCH;
    rt_launch *batch = malloc(cap * sizeof *batch);
    uint32_t *full_of = calloc(n_kerns ? n_kerns : 1, sizeof *full_of); /* 0: not tuned */
    if (!batch || !full_of) return free(batch), free(full_of), kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), -1;
    /* the products a few times first, to bring the clocks up (only they: the rest of the
     * step reads a token and a position not written yet) */
    int rc = 0;
    for (int w = 0; w < 3 && !rc; w++)
        for (uint32_t k = 0; k < n_kerns && !rc; k++) {
            uint32_t i = 0;
            while (i < n && l[i].kernel != kerns[k]) i++;
            if (i < n) rc = d->ops->run(d, batch, fill_batch(l, n, kerns[k], l[i].groups[0], batch, cap, 1), err);
        }
    for (uint32_t k = 0; k < n_kerns && !rc; k++) {
        uint32_t i = 0;
        while (i < n && l[i].kernel != kerns[k]) i++;
        chosen[k] = i < n ? l[i].groups[0] : 0;
        if (i == n || !cu || l[i].groups[0] <= cu) continue;
        uint32_t full = l[i].groups[0], cand[N_CAND] = {full}, nc = 1;
        for (size_t m = 0; m < sizeof per_cu / sizeof per_cu[0] && per_cu[m] * cu < full; m++)
            cand[nc++] = per_cu[m] * cu;
        /* rounds over all candidates, the best of each kept: drift hits them alike */
        double best_t[N_CAND];
        for (uint32_t c = 0; c < nc; c++) best_t[c] = 1e30;
        for (int r = 0; r < ROUNDS && !rc; r++)
            for (uint32_t c = 0; c < nc && !rc; c++) {
                uint32_t m = fill_batch(l, n, kerns[k], cand[c], batch, cap, MIN_BATCH);
                double t0 = clock_now_s();
                if ((rc = d->ops->run(d, batch, m, err))) break;
                double each = (clock_now_s() - t0) / m;
                if (each < best_t[c]) best_t[c] = each;
            }
        uint32_t best = 0;
        for (uint32_t c = 1; c < nc; c++)
            if (best_t[c] < best_t[best]) best = c;
        /* a smaller grid only for a clear gain: timing noise must not flip it */
        if (best_t[best] > 0.97 * best_t[0]) best = 0;
        chosen[k] = cand[best];
        set_grid(l, n, kerns[k], cand[best]);
        full_of[k] = full;
    }
    /* A kernel timed alone can mislead (on the H200's CUDA driver the products timed
     * faster on smaller grids alone and slower inside the step), so each smaller grid
     * must also make the whole step faster, replayed, or its kernel goes back to full. */
    for (uint32_t k = 0; k < n_kerns && !rc; k++) {
        if (!full_of[k] || chosen[k] == full_of[k]) continue;
        double t_small, t_full;
        if ((rc = time_step(d, l, n, &t_small, err))) break;
        set_grid(l, n, kerns[k], full_of[k]);
        if ((rc = time_step(d, l, n, &t_full, err))) break;
        if (t_small < 0.99 * t_full) set_grid(l, n, kerns[k], chosen[k]);
        else chosen[k] = full_of[k];
    }
    free(batch);
    free(full_of);
    return rc;
}

/* Whether qvar v is a decode product (the embedding takes no tuning). */
static bool decode_qvar(const plan_qvar *v) { return v->nb == 0 && v->role != K_EMBED; }

/* The decode step's products on the grids measured fastest on the device (plan_tune.c
 * says why), before anything is recorded; the prefill block's logits head takes the
 * decode step's. Only where the products accept any grid (kn_matvec_strided: not on
 * CUDA); a plan that borrows another's weights takes that plan's grids, not measuring
 * again. The launches were bound before (plan_bind checked their buffers at the full
 * grid); a matvec's extents do not follow its grid, so a smaller one needs no new check.
 * The quantized products' variants (plan_qkernels.c) are tuned beside the 16-bit ones. */
int plan_tune_products(plan_engine *p, kiln_err *err) {
    static const int mv[] = {K_MV_QKV, K_MV_O, K_MV_FFN, K_MV_DOWN, K_MV_OUT};
    enum { N_MV = sizeof mv / sizeof mv[0] };
    rt_device *d = p->d;
    if (!kn_matvec_strided(&d->caps)) return 0;
    uint32_t n = N_MV + p->n_qvar, m = 0;
    rt_kernel **mk = malloc(n * sizeof *mk);
    uint32_t *chosen = calloc(n, sizeof *chosen), **slot = malloc(n * sizeof *slot);
    const uint32_t **from = calloc(n, sizeof *from); /* the owner's grid where it borrows */
    int rc = 0;
    if (!mk || !chosen || !slot || !from) rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < N_MV && !rc; i++, m++) {
        mk[m] = p->kern[mv[i]], slot[m] = &p->grid[mv[i]][0];
        if (p->owner) from[m] = &p->owner->grid[mv[i]][0];
    }
    for (uint32_t j = 0; j < p->n_qvar && !rc; j++) {
        plan_qvar *v = &p->qvar[j];
        if (!decode_qvar(v)) continue;
        mk[m] = v->k, slot[m] = &v->grid[0];
        for (uint32_t k = 0; p->owner && k < p->owner->n_qvar; k++) {
            const plan_qvar *o = &p->owner->qvar[k];
            if (o->role == v->role && o->nb == 0 && !memcmp(o->qt, v->qt, KN_Q_PARTS)) from[m] = &o->grid[0];
        }
        m++;
    }
    if (!rc && p->owner) {
        for (uint32_t i = 0; i < m; i++) chosen[i] = from[i] ? *from[i] : 0;
        for (uint32_t j = 0; j < p->n_launch; j++)
            for (uint32_t i = 0; i < m; i++)
                if (p->launch[j].kernel == mk[i] && chosen[i]) p->launch[j].groups[0] = chosen[i];
    } else if (!rc) {
        int32_t tok0 = 0;
        uint32_t info0[2] = {0, 1}; /* token 0 at position 0: the step's replays need valid inputs */
        rc = d->ops->upload(d, p->tok_h, 0, &tok0, sizeof tok0, err) ||
                     d->ops->upload(d, p->info_h, 0, info0, sizeof info0, err) ||
                     plan_tune_grids(d, p->launch, p->n_launch, mk, m, chosen, err)
                 ? -1
                 : 0;
    }
    for (uint32_t i = 0; i < m && !rc; i++)
        if (chosen[i]) *slot[i] = chosen[i];
    free(mk), free(chosen), free(slot), free(from);
    return rc;
}
