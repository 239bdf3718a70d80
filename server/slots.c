/* The slots: one engine, generation session and worker thread each. A request waits in a
 * bounded FIFO queue (tickets) for a free slot, takes the one whose cache holds the
 * longest part of its prompt and hands its job to that slot's worker. Where the slots'
 * caches are one pool of pages (a GPU's slots), a request also waits while the slot it
 * would take has no room for its prompt (the pages held by the requests being served). Several slots'
 * engines step together (model/engine_batch.h): a slot is marked busy while it serves a
 * request, so each step waits for its next token. */
#include "server/http_internal.h"

#include "model/engine_batch.h"

#include <stdlib.h>
#include <time.h>

/* The free slot for prompt ids[n]: the longest cached prefix, where it covers at least
 * half of the prompt (a shared BOS alone should not make a request evict another
 * conversation's cache for one token; llama.cpp's server has the same 0.5 threshold);
 * without one, the slot holding the least (nothing lost), ties to the least recently
 * used. The caller holds mu and knows one is free. */
static slot *slot_pick(server *s, const int32_t *ids, uint32_t n) {
    slot *best = NULL;
    uint32_t best_same = 0, best_held = 0;
    for (uint32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->busy) continue;
        uint32_t held = gen_session_cached(sl->session), same = gen_session_prefix(sl->session, ids, n);
        if (2 * (uint64_t)same < n) same = 0;
        bool better = !best || same > best_same;
        if (best && same == best_same)
            better = same ? sl->last_used < best->last_used /* equal reuse: the older */
                          : held < best_held || (held == best_held && sl->last_used < best->last_used);
        if (better) best = sl, best_same = same, best_held = held;
    }
    return best;
}

/* The slot the request would take now, or NULL while it must wait: none free, or (the
 * caches pooled) no room for the prompt and a token while other requests are served. */
static slot *slot_ready(server *s, const int32_t *ids, uint32_t n) {
    if (s->busy == s->n_slots) return NULL;
    slot *sl = slot_pick(s, ids, n);
    return s->busy && engine_room(sl->engine) < (uint64_t)n + 1 ? NULL : sl;
}

slot_status srv_slot_acquire(server *s, const int32_t *ids, uint32_t n, slot **out) {
    slot_status st = SLOT_OK;
    pthread_mutex_lock(&s->mu);
    if ((s->busy == s->n_slots || s->waiting) && s->waiting >= s->cfg->queue) st = SLOT_FULL;
    else {
        uint64_t mine = s->ticket_next++;
        s->waiting++;
        slot *sl = NULL;
        while ((s->ticket_serving != mine || !(sl = slot_ready(s, ids, n))) && !atomic_load(&s->stopping)) {
            if (s->ticket_serving != mine || s->busy == s->n_slots) {
                pthread_cond_wait(&s->cv, &s->mu);
                continue;
            }
            /* first in line with a slot free but no room: the room grows as the busy
             * sequences' evals free pages they no longer need, which signals nothing, so
             * look again every 20 ms (and at once when a slot is released) */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 20000000;
            if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        }
        s->waiting--;
        if (atomic_load(&s->stopping)) st = SLOT_STOPPING;
        else {
            sl->busy = true;
            engine_batch_busy(sl->engine, true); /* its steps wait for this slot's tokens */
            sl->last_used = ++s->uses;
            s->busy++;
            s->ticket_serving++;
            pthread_cond_broadcast(&s->cv); /* the next in line, if another slot is free */
            *out = sl;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

void srv_slot_release(slot *sl) {
    server *s = sl->srv;
    pthread_mutex_lock(&s->mu);
    sl->busy = false;
    engine_batch_busy(sl->engine, false);
    s->busy--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void srv_slot_dispatch(slot *sl, job *j) {
    server *s = sl->srv;
    pthread_mutex_lock(&s->mu);
    sl->job = j;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* A slot's worker: runs the jobs handed to the slot, one at a time, until quit. */
static void *slot_main(void *arg) {
    slot *sl = arg;
    server *s = sl->srv;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!sl->job && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
        job *j = sl->job;
        sl->job = NULL;
        pthread_mutex_unlock(&s->mu);
        if (!j) return NULL;
        if (j->req.stream) srv_stream_run(sl, j);
        else srv_job_run_plain(sl, j);
    }
}

int srv_slots_create(server *s) {
    const srv_config *cfg = s->cfg;
    s->n_slots = cfg->parallel ? cfg->parallel : 1;
    s->slots = calloc(s->n_slots, sizeof *s->slots);
    if (!s->slots) return -1;
    for (uint32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        sl->srv = s;
        sl->engine = cfg->engines[i];
        if (!(sl->session = gen_session_create(sl->engine, cfg->tok))) return -1;
    }
    return 0;
}

int srv_slots_start(server *s) {
    for (uint32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (pthread_create(&sl->worker, NULL, slot_main, sl)) return -1;
        sl->started = true;
    }
    return 0;
}

void srv_slots_free(server *s) {
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (uint32_t i = 0; s->slots && i < s->n_slots; i++) {
        if (s->slots[i].started) pthread_join(s->slots[i].worker, NULL);
        gen_session_free(s->slots[i].session);
    }
    free(s->slots);
}
