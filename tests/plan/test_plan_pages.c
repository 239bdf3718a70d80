/* The slots' pool of pages (plan/plan_pages.c) on the Vulkan device (lavapipe in CI), with
 * stories260K: every slot's logits equal, bit for bit, those of a one-slot plan (unpaged
 * caches) evaluating the same tokens in the same blocks, because paging moves rows, not
 * arithmetic. Eight short chats and one long prompt share a pool where nine equal caches
 * would not hold the long one; an idle slot's tail pages go to a slot that needs them (its
 * cache then ends where they began, the prefix it keeps still right); a busy slot's never
 * (the other's eval fails with KILN_ERR_FULL, the room it reports says so); in a step, a
 * token that finds no page fails alone. Skipped by name when there is no Vulkan device. */
#include "base/error.h"
#include "model/engine.h"
#include "model/model.h"
#include "plan/plan.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture {
    rt_device *d;
    model *m;
    uint32_t nv;
    engine *ref;    /* one slot, unpaged */
    engine *s[9];   /* slots sharing a pool */
    uint32_t n;
    float *a, *b;   /* logits */
    int32_t *tok;   /* random tokens */
} fixture;

static fixture open_fixture(uint32_t n_slots, uint32_t n_ctx) {
    fixture f = {.d = tu_vk_open_or_skip(NULL), .n = n_slots};
    kiln_err err = {0};
    f.m = model_load(tu_data_file("models/stories260K.gguf"), &err);
    cr_assert_not_null(f.m, "%s", err.msg);
    f.nv = f.m->hp.n_vocab;
    cr_assert_not_null(f.ref = plan_create(f.m, f.d, GGUF_T_BF16, n_ctx, 0, &err), "%s", err.msg);
    cr_assert_not_null(f.s[0] = plan_create_slots(f.m, f.d, GGUF_T_BF16, n_ctx, 0, n_slots, &err), "%s", err.msg);
    cr_assert_eq(f.s[0]->n_ctx, n_ctx, "each slot may grow to the whole pool");
    for (uint32_t i = 1; i < n_slots; i++)
        cr_assert_not_null(f.s[i] = plan_create_sibling(f.s[0], &err), "%s", err.msg);
    f.a = malloc((size_t)f.nv * 4), f.b = malloc((size_t)f.nv * 4), f.tok = malloc(4096 * 4);
    tu_seed(71);
    for (int i = 0; i < 4096; i++) f.tok[i] = 1 + (int32_t)(tu_rnd32() % (f.nv - 1));
    return f;
}

static void close_fixture(fixture *f) {
    for (uint32_t i = f->n; i-- > 0;) engine_destroy(f->s[i]); /* siblings before the first */
    engine_destroy(f->ref);
    model_free(f->m);
    free(f->a), free(f->b), free(f->tok);
    f->d->ops->destroy(f->d);
}

/* The reference's logits for tokens t[0..n) evaluated in the pieces given (lengths; 0 ends),
 * against the slot's for the same pieces, which the slot evaluates from position from. */
static void same_as_alone(fixture *f, engine *slot, const int32_t *t, const uint32_t *pieces, uint32_t from,
                          const char *what) {
    kiln_err err = {0};
    uint32_t pos = 0;
    for (const uint32_t *pc = pieces; *pc; pos += *pc++) {
        cr_assert_eq(engine_eval(f->ref, t + pos, *pc, pos, f->a, false, &err), 0, "%s: %s", what, err.msg);
        if (pos + *pc <= from) continue; /* the slot holds these already */
        cr_assert_eq(engine_eval(slot, t + pos, *pc, pos, f->b, false, &err), 0, "%s: %s", what, err.msg);
        cr_assert_arr_eq(f->a, f->b, (size_t)f->nv * 4, "%s: the logits after position %u differ from one slot's",
                         what, pos + *pc);
    }
}

Test(plan_pages, short_chats_and_a_long_one_share_the_pool, .timeout = 600) {
    fixture f = open_fixture(9, 1024); /* 16 pages of 64 */
    char what[64];
    /* eight chats of 40 tokens and 3 decoded: a page each; the long prompt takes the other 8
     * (equal caches of 1024 / 9 positions would not hold it) */
    for (uint32_t i = 0; i < 8; i++) {
        snprintf(what, sizeof what, "chat %u", i);
        same_as_alone(&f, f.s[i], f.tok + 40 * i, (const uint32_t[]){40, 1, 1, 1, 0}, 0, what);
    }
    same_as_alone(&f, f.s[8], f.tok + 1000, (const uint32_t[]){300, 200, 11, 1, 0}, 0, "the long prompt");
    cr_assert_eq(f.s[8]->n_past, 512);
    /* every chat's cache is still whole: its next token as if alone */
    for (uint32_t i = 0; i < 8; i++) {
        snprintf(what, sizeof what, "chat %u again", i);
        cr_assert_eq(f.s[i]->n_past, 43, "%s", what);
        same_as_alone(&f, f.s[i], f.tok + 40 * i, (const uint32_t[]){40, 1, 1, 1, 1, 0}, 43, what);
    }
    close_fixture(&f);
}

Test(plan_pages, idle_tails_are_taken_busy_slots_kept, .timeout = 600) {
    fixture f = open_fixture(3, 256); /* 4 pages */
    kiln_err err = {0};
    const int32_t *ta = f.tok, *tb = f.tok + 500;
    same_as_alone(&f, f.s[0], ta, (const uint32_t[]){150, 0}, 0, "slot 0's prompt");
    cr_assert_eq(engine_room(f.s[1]), 256, "the idle slot 0's pages count as room");
    /* slot 0 busy: slot 1 finds one free page, and no more */
    f.s[0]->ops->set_busy(f.s[0], true);
    cr_assert_eq(engine_room(f.s[1]), 64);
    cr_assert_eq(engine_eval(f.s[1], tb, 150, 0, f.b, false, &err), -1);
    cr_assert_eq(err.code, KILN_ERR_FULL, "%s", err.msg);
    cr_assert_eq(f.s[0]->n_past, 150, "a busy slot's cache was cut");
    same_as_alone(&f, f.s[0], ta, (const uint32_t[]){150, 1, 0}, 150, "slot 0 after the refusal");
    /* idle again: its last two pages go to slot 1, its cache ends at 64, the prefix still right */
    f.s[0]->ops->set_busy(f.s[0], false);
    same_as_alone(&f, f.s[1], tb, (const uint32_t[]){150, 0}, 0, "slot 1's prompt");
    cr_assert_eq(f.s[0]->n_past, 64, "slot 0 lost its tail from position 64");
    same_as_alone(&f, f.s[0], ta, (const uint32_t[]){64, 36, 1, 0}, 64, "slot 0 from its kept prefix");
    /* an eval past the pool is refused as past the context */
    cr_assert_eq(engine_eval(f.s[2], f.tok, 257, 0, f.b, false, &err), -1);
    cr_assert_eq(err.code, KILN_ERR_INVALID, "%s", err.msg);
    close_fixture(&f);
}

Test(plan_pages, a_step_token_without_a_page_fails_alone, .timeout = 600) {
    fixture f = open_fixture(3, 192); /* 3 pages */
    kiln_err err = {0};
    cr_assert_not_null(f.s[0]->ops->eval_step);
    /* slots 0 and 1 a page each, both at position 64: one page left for the two of them */
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(engine_eval(f.s[i], f.tok + 100 * i, 64, 0, f.b, false, &err), 0, "%s", err.msg);
        f.s[i]->ops->set_busy(f.s[i], true);
    }
    float *la = malloc((size_t)f.nv * 4), *lb = malloc((size_t)f.nv * 4);
    engine_step it[2] = {{.e = f.s[0], .token = 7, .pos = 64, .logits = la},
                         {.e = f.s[1], .token = 8, .pos = 64, .logits = lb}};
    cr_assert_eq(f.s[0]->ops->eval_step(it, 2), 0);
    cr_assert_eq(it[0].rc, 0, "%s", it[0].err.msg);
    cr_assert_eq(it[1].rc, -1);
    cr_assert_eq(it[1].err.code, KILN_ERR_FULL, "%s", it[1].err.msg);
    cr_assert_eq(f.s[1]->n_past, 64, "the failed token changed its slot");
    /* slot 0's token as the reference computes it alone (a decode step at 64) */
    cr_assert_eq(engine_eval(f.ref, f.tok, 64, 0, f.a, false, &err), 0, "%s", err.msg);
    cr_assert_eq(engine_eval(f.ref, (const int32_t[]){7}, 1, 64, f.a, false, &err), 0, "%s", err.msg);
    for (uint32_t v = 0; v < f.nv; v++) /* the step's head differs from decode's: close, not equal */
        cr_assert(fabsf(la[v] - f.a[v]) <= 1e-2f * (1 + fabsf(f.a[v])), "logit %u: %g != %g", v, la[v], f.a[v]);
    free(la), free(lb);
    close_fixture(&f);
}
