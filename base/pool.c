#include "base/pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

struct pool {
    int n;                 /* threads including the caller */
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t generation;   /* bumped per job */
    int pending;           /* workers still busy with this generation */
    bool quit;
    pool_range_fn fn;
    void *ctx;
    uint64_t total;
};

typedef struct worker_arg { pool *p; int index; } worker_arg;

static void piece(pool *p, int index) {
    uint64_t b = p->total * (uint64_t)index / (uint64_t)p->n, e = p->total * (uint64_t)(index + 1) / (uint64_t)p->n;
    if (b < e) p->fn(p->ctx, b, e, index);
}

static void *worker(void *arg) {
    worker_arg *wa = arg;
    pool *p = wa->p;
    int index = wa->index;
    free(wa);
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->go, &p->mu);
        if (p->quit) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        piece(p, index);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

pool *pool_create(int threads) {
    if (threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        threads = c > 0 ? (int)(c < 64 ? c : 64) : 1;
    }
    pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = threads;
    p->th = calloc((size_t)threads, sizeof *p->th);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    if (!p->th) {
        pool_destroy(p);
        return NULL;
    }
    for (int i = 1; i < threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa || pthread_create(&p->th[i], NULL, worker, (*wa = (worker_arg){p, i}, wa))) {
            free(wa);
            p->n = i; /* run with the threads we have */
            break;
        }
    }
    return p;
}

void pool_destroy(pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; p->th && i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p->th);
    free(p);
}

int pool_threads(const pool *p) { return p->n; }

void pool_run(pool *p, pool_range_fn fn, void *ctx, uint64_t n) {
    if (p->n == 1 || n < 2) {
        if (n) fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->total = n;
    p->pending = p->n - 1;
    p->generation++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    piece(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
