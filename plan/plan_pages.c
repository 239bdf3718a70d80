/* The pages of the KV pool that a plan's slots share (kiln serve --parallel): which slot
 * holds which page, handed out as sequences grow. A slot that needs a page takes a free
 * one; where none is free it takes the last page of the idle slot used longest ago (its
 * cache then ends where that page began: the prefix it keeps can still be reused), never
 * one of a busy slot's (engine_ops.set_busy: a request is being served) or of a slot in
 * the step being staged. An eval at pos of n tokens keeps the pages of [0, pos + n) and
 * frees the rest (the engine drops what follows them); an idle slot keeps its pages, so a
 * conversation's next turn finds its prefix, until another slot takes them. The
 * device's copy of the tables (the owner's pages buffer, a view of its rows per plan) is
 * uploaded where they changed, before the launches that read them. A mutex guards the
 * books: a server marks slots busy from its request threads while a step reserves pages. */
#include "plan/plan_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct plan_pages {
    pthread_mutex_t mu;
    uint32_t n_pages, stride, n_slots;
    uint32_t *tab;       /* [n_slots][stride]: the device's tables, PLAN_PAGE_NONE past what a slot holds */
    uint32_t *held;      /* [n_slots]: pages a slot holds (its first held[s] entries) */
    uint32_t *free_list; /* n_free pages no slot holds */
    uint32_t n_free;
    uint64_t *used;      /* [n_slots]: the clock at a slot's last reservation */
    uint64_t clock;
    uint8_t *busy, *pinned;
    plan_engine **plans; /* [n_slots]: each slot's plan (NULL before it is made, after it is destroyed) */
    uint32_t *lo, *hi;   /* [n_slots]: each slot's entries changed since the last upload, [lo, hi) */
};

/* Entry i of slot s changed: the next sync uploads it (each slot's changed span alone:
 * the whole tables are n_slots x stride words, 256 KiB for 32 slots of a 131072 pool,
 * where a step usually changes one entry). */
static void touch(plan_pages *pp, uint32_t s, uint32_t i) {
    if (pp->lo[s] >= pp->hi[s]) pp->lo[s] = i, pp->hi[s] = i + 1;
    if (i < pp->lo[s]) pp->lo[s] = i;
    if (i + 1 > pp->hi[s]) pp->hi[s] = i + 1;
}

plan_pages *plan_pages_create(uint32_t n_pages, uint32_t stride, uint32_t n_slots) {
    plan_pages *pp = calloc(1, sizeof *pp);
    if (!pp) return NULL;
    pthread_mutex_init(&pp->mu, NULL);
    pp->n_pages = n_pages, pp->stride = stride, pp->n_slots = n_slots;
    pp->tab = malloc((size_t)n_slots * stride * 4);
    pp->held = calloc(n_slots, 4);
    pp->free_list = malloc((size_t)n_pages * 4);
    pp->used = calloc(n_slots, 8);
    pp->busy = calloc(n_slots, 1), pp->pinned = calloc(n_slots, 1);
    pp->plans = calloc(n_slots, sizeof *pp->plans);
    pp->lo = calloc(n_slots, 4), pp->hi = calloc(n_slots, 4);
    if (!pp->tab || !pp->held || !pp->free_list || !pp->used || !pp->busy || !pp->pinned || !pp->plans || !pp->lo ||
        !pp->hi) {
        plan_pages_destroy(pp);
        return NULL;
    }
    for (size_t i = 0; i < (size_t)n_slots * stride; i++) pp->tab[i] = PLAN_PAGE_NONE;
    /* the lowest pages handed out first */
    for (uint32_t i = 0; i < n_pages; i++) pp->free_list[i] = n_pages - 1 - i;
    pp->n_free = n_pages;
    for (uint32_t s = 0; s < n_slots; s++) pp->lo[s] = 0, pp->hi[s] = stride;
    return pp;
}

void plan_pages_destroy(plan_pages *pp) {
    if (!pp) return;
    free(pp->tab), free(pp->held), free(pp->free_list), free(pp->used), free(pp->busy), free(pp->pinned);
    free(pp->plans), free(pp->lo), free(pp->hi);
    pthread_mutex_destroy(&pp->mu);
    free(pp);
}

void plan_pages_attach(plan_pages *pp, uint32_t s, plan_engine *p) {
    pthread_mutex_lock(&pp->mu);
    pp->plans[s] = p;
    pthread_mutex_unlock(&pp->mu);
}

void plan_pages_detach(plan_pages *pp, uint32_t s) {
    pthread_mutex_lock(&pp->mu);
    for (uint32_t i = 0; i < pp->held[s]; i++) {
        pp->free_list[pp->n_free++] = pp->tab[(size_t)s * pp->stride + i];
        pp->tab[(size_t)s * pp->stride + i] = PLAN_PAGE_NONE;
        touch(pp, s, i);
    }
    pp->held[s] = 0;
    pp->plans[s] = NULL;
    pp->busy[s] = pp->pinned[s] = 0;
    pthread_mutex_unlock(&pp->mu);
}

void plan_pages_busy(plan_pages *pp, uint32_t s, bool busy) {
    pthread_mutex_lock(&pp->mu);
    pp->busy[s] = busy;
    pthread_mutex_unlock(&pp->mu);
}

void plan_pages_pin(plan_pages *pp, uint32_t s, bool pinned) {
    pthread_mutex_lock(&pp->mu);
    pp->pinned[s] = pinned;
    pthread_mutex_unlock(&pp->mu);
}

static bool can_give(const plan_pages *pp, uint32_t v, uint32_t taker) {
    return v != taker && pp->held[v] && !pp->busy[v] && !pp->pinned[v];
}

/* The idle slot whose last page goes to taker: the one used longest ago, or -1. */
static int victim(const plan_pages *pp, uint32_t taker) {
    int best = -1;
    for (uint32_t v = 0; v < pp->n_slots; v++)
        if (can_give(pp, v, taker) && (best < 0 || pp->used[v] < pp->used[best])) best = (int)v;
    return best;
}

static uint32_t pages_for(uint32_t positions) { return (positions + PLAN_PAGE_ROWS - 1) / PLAN_PAGE_ROWS; }

static int reserve(plan_pages *pp, uint32_t s, uint32_t positions, kiln_err *err) {
    uint32_t need = pages_for(positions);
    pp->used[s] = ++pp->clock;
    if (need > pp->stride) return kiln_fail(err, KILN_ERR_INVALID, "%u positions exceed the pool", positions);
    while (pp->held[s] < need) {
        uint32_t page;
        if (pp->n_free) {
            page = pp->free_list[--pp->n_free];
        } else {
            int v = victim(pp, s);
            if (v < 0)
                return kiln_fail(err, KILN_ERR_FULL,
                                 "the KV cache is full: %u positions wanted, the %u of the pool held by the other "
                                 "requests being served",
                                 positions, pp->n_pages * PLAN_PAGE_ROWS);
            uint32_t *last = &pp->tab[(size_t)v * pp->stride + --pp->held[v]];
            page = *last;
            *last = PLAN_PAGE_NONE;
            touch(pp, (uint32_t)v, pp->held[v]);
            /* the victim's cache now ends where that page began */
            plan_engine *vp = pp->plans[v];
            if (vp) engine_truncate(&vp->base, pp->held[v] * PLAN_PAGE_ROWS);
        }
        touch(pp, s, pp->held[s]);
        pp->tab[(size_t)s * pp->stride + pp->held[s]++] = page;
    }
    /* pages past the positions hold nothing an eval keeps (it drops what follows it): free */
    while (pp->held[s] > need) {
        uint32_t *last = &pp->tab[(size_t)s * pp->stride + --pp->held[s]];
        pp->free_list[pp->n_free++] = *last;
        *last = PLAN_PAGE_NONE;
        touch(pp, s, pp->held[s]);
    }
    return 0;
}

int plan_pages_reserve(plan_pages *pp, uint32_t s, uint32_t positions, kiln_err *err) {
    pthread_mutex_lock(&pp->mu);
    int rc = reserve(pp, s, positions, err);
    pthread_mutex_unlock(&pp->mu);
    return rc;
}

uint32_t plan_pages_room(plan_pages *pp, uint32_t s) {
    pthread_mutex_lock(&pp->mu);
    uint64_t pages = (uint64_t)pp->held[s] + pp->n_free;
    for (uint32_t v = 0; v < pp->n_slots; v++)
        if (can_give(pp, v, s)) pages += pp->held[v];
    pthread_mutex_unlock(&pp->mu);
    uint64_t rows = pages * PLAN_PAGE_ROWS;
    return rows > UINT32_MAX ? UINT32_MAX : (uint32_t)rows;
}

int plan_pages_sync(plan_pages *pp, rt_device *d, rt_buffer *dev, kiln_err *err) {
    pthread_mutex_lock(&pp->mu);
    int rc = 0;
    for (uint32_t s = 0; s < pp->n_slots && !rc; s++) {
        if (pp->lo[s] >= pp->hi[s]) continue;
        size_t at = (size_t)s * pp->stride + pp->lo[s];
        rc = d->ops->upload(d, dev, at * 4, pp->tab + at, (size_t)(pp->hi[s] - pp->lo[s]) * 4, err);
        if (!rc) pp->lo[s] = pp->hi[s] = 0;
    }
    pthread_mutex_unlock(&pp->mu);
    return rc;
}

/* ---- the plan's side ---------------------------------------------------------------------------- */

static plan_engine *owner_of(plan_engine *p) { return p->owner ? (plan_engine *)p->owner : p; }

int plan_pages_ready(plan_engine *p, uint32_t positions, kiln_err *err) {
    plan_engine *o = owner_of(p);
    if (!o->pp) return 0;
    return plan_pages_reserve(o->pp, p->slot, positions, err) || plan_pages_sync(o->pp, p->d, o->pages_dev, err) ? -1
                                                                                                                   : 0;
}

void plan_pages_set_busy(plan_engine *p, bool busy) {
    plan_engine *o = owner_of(p);
    if (o->pp) plan_pages_busy(o->pp, p->slot, busy);
}

uint32_t plan_pages_room_of(plan_engine *p) {
    plan_engine *o = owner_of(p);
    uint32_t room = o->pp ? plan_pages_room(o->pp, p->slot) : p->base.n_ctx;
    return room < p->base.n_ctx ? room : p->base.n_ctx;
}
