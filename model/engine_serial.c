#include "model/engine_serial.h"

#include "base/error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* The fair lock, shared by the wrappers of one call to engine_serialize and freed with
 * the last of them. */
typedef struct turns {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t next, serving; /* ticket to hand out; ticket whose turn it is */
    atomic_uint refs;
} turns;

typedef struct serial {
    engine base;
    engine_ops ops; /* the inner engine's offer: eval_argmax only where it has one */
    engine *inner;
    turns *t;
} serial;

static void turn_begin(turns *t) {
    pthread_mutex_lock(&t->mu);
    uint64_t mine = t->next++;
    while (t->serving != mine) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

static void turn_end(turns *t) {
    pthread_mutex_lock(&t->mu);
    t->serving++;
    pthread_cond_broadcast(&t->cv); /* the next ticket's holder is one of the waiters */
    pthread_mutex_unlock(&t->mu);
}

/* The wrapper's n_past is the one callers move (engine_truncate); the inner engine
 * follows it before each call and reports back after. */
static int serial_eval(engine *e, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits, bool all,
                       kiln_err *err) {
    serial *s = (serial *)e;
    turn_begin(s->t);
    s->inner->n_past = e->n_past;
    int rc = engine_eval(s->inner, tokens, n, pos, logits, all, err);
    e->n_past = s->inner->n_past;
    turn_end(s->t);
    return rc;
}

static int serial_eval_argmax(engine *e, const int32_t *tokens, uint32_t n, uint32_t pos, int32_t *best,
                              kiln_err *err) {
    serial *s = (serial *)e;
    turn_begin(s->t);
    s->inner->n_past = e->n_past;
    int rc = s->inner->ops->eval_argmax(s->inner, tokens, n, pos, best, err);
    e->n_past = s->inner->n_past;
    turn_end(s->t);
    return rc;
}

static void turns_release(turns *t) {
    if (atomic_fetch_sub(&t->refs, 1) != 1) return;
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

static void serial_destroy(engine *e) {
    serial *s = (serial *)e;
    engine_destroy(s->inner);
    turns_release(s->t);
    free(s);
}

int engine_serialize(engine **e, uint32_t n, kiln_err *err) {
    turns *t = calloc(1, sizeof *t);
    serial **w = calloc(n ? n : 1, sizeof *w);
    bool ok = t && w;
    for (uint32_t i = 0; ok && i < n; i++) ok = (w[i] = calloc(1, sizeof *w[i])) != NULL;
    if (!ok) {
        for (uint32_t i = 0; w && i < n; i++) free(w[i]);
        free(w);
        free(t);
        return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), -1;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    atomic_init(&t->refs, n);
    for (uint32_t i = 0; i < n; i++) {
        serial *s = w[i];
        s->inner = e[i];
        s->t = t;
        s->ops = (engine_ops){serial_eval, serial_destroy, e[i]->ops->eval_argmax ? serial_eval_argmax : NULL};
        s->base = *e[i];
        s->base.ops = &s->ops;
        e[i] = &s->base;
    }
    free(w);
    if (n == 0) { /* nothing shares it */
        atomic_init(&t->refs, 1);
        turns_release(t);
    }
    return 0;
}
