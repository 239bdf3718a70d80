/* Steps of several slots' tokens (plan/plan_batch.c, engine_ops.eval_step) on the Vulkan
 * device (lavapipe in CI: the tiled products over a bucket of 64): three slots of one
 * plan_create_slots, each with its own prompt, decode together; every slot's logits (or
 * argmax) against the contract oracle run on that slot's tokens alone (teacher-forced on
 * the oracle's picks): relative error under 1e-2, greedy picks equal or a near-tie. A bad
 * item fails alone; plans that do not share a pool are refused whole; a slot rewinds
 * inside a step. Skipped by name when there is no Vulkan device. */
#include "base/error.h"
#include "diverge/diverge.h"
#include "model/engine.h"
#include "model/model.h"
#include "oracle/oracle.h"
#include "plan/plan.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 3

static int32_t argmax_of(const float *l, uint32_t n) {
    int32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = (int32_t)i;
    return b;
}

/* The GPU's row against the oracle's: relative error, and the pick equal or a near-tie. */
static double check_row(const float *lo, const float *lg, int32_t g_pick, uint32_t nv, const char *what) {
    double maxabs = 0, e = 0;
    for (uint32_t v = 0; lg && v < nv; v++) {
        cr_assert(isfinite(lg[v]), "%s: logit %u is %g", what, v, lg[v]);
        if (fabs(lo[v]) > maxabs) maxabs = fabs(lo[v]);
        if (fabs(lg[v] - lo[v]) > e) e = fabs(lg[v] - lo[v]);
    }
    int32_t oa = argmax_of(lo, nv);
    if (g_pick != oa) {
        double gap = dv_gap_quanta(lo, oa, g_pick, GGUF_T_BF16);
        cr_assert(gap <= 2.0, "%s: the step picked %d, the oracle %d (%.2f quanta apart)", what, g_pick, oa, gap);
    }
    return e / (maxabs > 0 ? maxabs : 1);
}

/* SLOTS slots of m on d, each with its own prompt through the prefill blocks, decode 12
 * steps together (every slot, or on odd steps the last two; logits for slots 0 and 2, the
 * argmax for 1), each row checked against its own contract oracle (check_row); returns the
 * worst relative error. The engines stay open for the caller; pos and next say where each
 * slot stands. */
static const int32_t p0[] = {1, 400, 300, 20, 77}, p1[] = {1, 50, 60, 70, 80, 90, 100, 110, 120}, p2[] = {1, 9};
static double step_together(model *m, rt_device *d, engine **slot, engine **orc, float **lo, float **lg, int32_t *next,
                            uint32_t *pos) {
    kiln_err err = {0};
    uint32_t nv = m->hp.n_vocab;
    slot[0] = plan_create_slots(m, d, GGUF_T_BF16, 256, 0, SLOTS, &err);
    cr_assert_not_null(slot[0], "%s", err.msg);
    cr_assert_not_null(slot[0]->ops->eval_step);
    orc_options oo = {.mode = ORC_CONTRACT, .dtype = GGUF_T_BF16, .n_ctx = 256, .threads = 2};
    for (int i = 0; i < SLOTS; i++) {
        if (i) cr_assert_not_null(slot[i] = plan_create_sibling(slot[0], &err), "%s", err.msg);
        cr_assert_not_null(orc[i] = orc_create(m, &oo, &err), "%s", err.msg);
    }
    const int32_t *prompt[SLOTS] = {p0, p1, p2};
    uint32_t len[SLOTS] = {5, 9, 2};
    int32_t best[SLOTS];
    for (int i = 0; i < SLOTS; i++) {
        lo[i] = malloc(nv * 4), lg[i] = malloc(nv * 4);
        cr_assert_eq(engine_eval(orc[i], prompt[i], len[i], 0, lo[i], false, &err), 0, "%s", err.msg);
        cr_assert_eq(engine_eval(slot[i], prompt[i], len[i], 0, lg[i], false, &err), 0, "%s", err.msg);
        next[i] = argmax_of(lo[i], nv);
        pos[i] = len[i];
    }
    double worst = 0;
    for (uint32_t s = 0; s < 12; s++) {
        engine_step it[SLOTS];
        uint32_t n = 0, first = s % 2 ? 1 : 0;
        for (int i = (int)first; i < SLOTS; i++)
            it[n++] = (engine_step){.e = slot[i], .token = next[i], .pos = pos[i],
                                    .logits = i == 1 ? NULL : lg[i], .best = i == 1 ? &best[i] : NULL};
        cr_assert_eq(slot[0]->ops->eval_step(it, n), 0, "step %u not taken", s);
        for (uint32_t j = 0; j < n; j++) {
            int i = (int)first + (int)j;
            char what[80];
            snprintf(what, sizeof what, "step %u slot %d at %u", s, i, pos[i]);
            cr_assert_eq(it[j].rc, 0, "%s: %s", what, it[j].err.msg);
            cr_assert_eq(slot[i]->n_past, pos[i] + 1, "%s", what);
            cr_assert_eq(engine_eval(orc[i], &next[i], 1, pos[i], lo[i], false, &err), 0, "%s", err.msg);
            double e = check_row(lo[i], i == 1 ? NULL : lg[i], i == 1 ? best[i] : argmax_of(lg[i], nv), nv, what);
            if (e > worst) worst = e;
            pos[i]++;
            next[i] = argmax_of(lo[i], nv);
        }
    }
    return worst;
}

static void close_slots(model *m, engine **slot, engine **orc, float **lo, float **lg) {
    for (int i = SLOTS - 1; i >= 0; i--) { /* the siblings first: the weights are slot 0's */
        engine_destroy(slot[i]);
        engine_destroy(orc[i]);
        free(lo[i]), free(lg[i]);
    }
    model_free(m);
}

/* SLOTS slots of the testdata model rel stepping together on the device (step_together). */
static void slots_of(const char *rel) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    kiln_err err = {0};
    model *m = model_load(tu_data_file(rel), &err);
    cr_assert_not_null(m, "%s", err.msg);
    engine *slot[SLOTS], *orc[SLOTS];
    float *lo[SLOTS], *lg[SLOTS];
    int32_t next[SLOTS];
    uint32_t pos[SLOTS];
    double worst = step_together(m, d, slot, orc, lo, lg, next, pos);
    cr_log_info("%s, %d slots stepping together on %s: worst logits relative error %.2e", rel, SLOTS, d->label, worst);
    cr_assert_lt(worst, 1e-2, "%s", rel);
    close_slots(m, slot, orc, lo, lg);
    d->ops->destroy(d);
}

/* The same with every product's weights in their quantized blocks (llama.cpp's Q4_K_M mix:
 * the step's products are the quantized block products at the bucket's size). */
Test(plan_batch, quantized_slots_step_together, .timeout = 600) { slots_of("models/dense-Q4_K_M.gguf"); }

/* The same on a mixture of experts (testdata's qwen3moe-tiny): each row routes its own token. */
Test(plan_batch, moe_slots_step_together, .timeout = 600) { slots_of("models/qwen3moe-tiny.gguf"); }

Test(plan_batch, slots_step_together_as_each_alone, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    kiln_err err = {0};
    model *m = model_load(tu_data_file("models/stories260K.gguf"), &err);
    cr_assert_not_null(m, "%s", err.msg);
    uint32_t nv = m->hp.n_vocab;
    engine *slot[SLOTS], *orc[SLOTS];
    float *lo[SLOTS], *lg[SLOTS];
    int32_t next[SLOTS], best[SLOTS];
    uint32_t pos[SLOTS];
    double worst = step_together(m, d, slot, orc, lo, lg, next, pos);
    cr_log_info("stories260K, %d slots stepping together on %s: worst logits relative error %.2e", SLOTS, d->label,
                worst);
    cr_assert_lt(worst, 1e-2);

    /* a bad token fails alone; the others step */
    engine_step bad[2] = {{.e = slot[0], .token = (int32_t)nv, .pos = pos[0], .logits = lg[0]},
                          {.e = slot[2], .token = next[2], .pos = pos[2], .best = &best[2]}};
    cr_assert_eq(slot[0]->ops->eval_step(bad, 2), 0);
    cr_assert_eq(bad[0].rc, -1);
    cr_assert(strstr(bad[0].err.msg, "vocabulary"), "%s", bad[0].err.msg);
    cr_assert_eq(bad[1].rc, 0, "%s", bad[1].err.msg);
    cr_assert_eq(slot[0]->n_past, pos[0], "the failed item moved its slot");
    cr_assert_eq(engine_eval(orc[2], &next[2], 1, pos[2], lo[2], false, &err), 0, "%s", err.msg);
    check_row(lo[2], NULL, best[2], nv, "beside a bad item");

    /* a rewind inside a step: slot 1 back to its prompt's last token, as a lone decode gives */
    engine_step rw[2] = {{.e = slot[1], .token = p1[8], .pos = 8, .logits = lg[1]},
                         {.e = slot[0], .token = next[0], .pos = pos[0], .logits = lg[0]}};
    cr_assert_eq(slot[0]->ops->eval_step(rw, 2), 0);
    cr_assert_eq(rw[0].rc, 0, "%s", rw[0].err.msg);
    cr_assert_eq(engine_eval(orc[1], p1, 9, 0, lo[1], false, &err), 0, "%s", err.msg);
    cr_assert_lt(check_row(lo[1], lg[1], argmax_of(lg[1], nv), nv, "rewound"), 1e-2);
    engine_step late = {.e = slot[1], .token = 5, .pos = 11, .best = &best[1]}; /* past its 9 positions */
    cr_assert_eq(slot[0]->ops->eval_step(&late, 1), 0);
    cr_assert_eq(late.rc, -1);

    /* plans that share no pool are not taken: nothing evaluated */
    engine *lone = plan_create(m, d, GGUF_T_BF16, 256, 0, &err);
    cr_assert_not_null(lone, "%s", err.msg);
    engine_step mix[2] = {{.e = slot[0], .token = 3, .pos = 0, .best = &best[0]},
                          {.e = lone, .token = 3, .pos = 0, .best = &best[1]}};
    uint32_t before = slot[0]->n_past;
    cr_assert_eq(lone->ops->eval_step(mix, 2), -1);
    cr_assert_eq(lone->ops->eval_step(mix + 1, 1), -1, "a lone plan has no steps of several");
    cr_assert_eq(slot[0]->n_past, before);
    engine_step twice[2] = {{.e = slot[2], .token = 3, .pos = 1, .best = &best[0]},
                            {.e = slot[2], .token = 3, .pos = 1, .best = &best[1]}};
    cr_assert_eq(slot[0]->ops->eval_step(twice, 2), -1, "one slot twice at one position in a step");
    twice[1].pos = 0;
    cr_assert_eq(slot[0]->ops->eval_step(twice, 2), -1, "one slot's positions out of order in a step");
    engine_destroy(lone);

    /* the step's profile (kiln run --profile-step) */
    char *text = NULL;
    size_t text_len = 0;
    FILE *f = open_memstream(&text, &text_len);
    cr_assert(f);
    cr_assert_eq(plan_profile(slot[0], 2, 0, SLOTS, f, &err), 0, "%s", err.msg);
    cr_assert_eq(plan_profile(slot[0], 2, 0, 65, f, &err), -1, "a step past the largest bucket");
    fclose(f);
    cr_assert(strstr(text, "step of 3 slots' tokens") && strstr(text, "batch_attn") && strstr(text, "batch_logits"),
              "%s", text);
    free(text);

    close_slots(m, slot, orc, lo, lg);
    d->ops->destroy(d);
}

/* A prompt's tokens in a step beside the other slots' next tokens (model/engine_batch.c's
 * short prompts): slot 1 starts over on a prompt of 70 tokens (the step then spans two
 * buckets of 64, the prompt's rows split between them), only its last row with an output;
 * every row against its own contract oracle, and a failing row takes its slot's later
 * rows with it while the other slots step. */
Test(plan_batch, a_prompt_steps_beside_decoding_slots, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    kiln_err err = {0};
    model *m = model_load(tu_data_file("models/stories260K.gguf"), &err);
    cr_assert_not_null(m, "%s", err.msg);
    uint32_t nv = m->hp.n_vocab;
    engine *slot[SLOTS], *orc[SLOTS];
    float *lo[SLOTS], *lg[SLOTS];
    int32_t next[SLOTS], best = -2;
    uint32_t pos[SLOTS];
    step_together(m, d, slot, orc, lo, lg, next, pos);
    enum { N = 70 };
    int32_t prompt[N];
    for (uint32_t t = 0; t < N; t++) prompt[t] = t ? (int32_t)(2 + t * 37 % (nv - 2)) : 1;
    engine_step it[N + 2];
    uint32_t k = 0;
    it[k++] = (engine_step){.e = slot[0], .token = next[0], .pos = pos[0], .logits = lg[0]};
    for (uint32_t t = 0; t < N; t++)
        it[k++] = (engine_step){.e = slot[1], .token = prompt[t], .pos = t, .logits = t + 1 == N ? lg[1] : NULL};
    it[k++] = (engine_step){.e = slot[2], .token = next[2], .pos = pos[2], .best = &best};
    cr_assert_eq(slot[0]->ops->eval_step(it, k), 0);
    for (uint32_t i = 0; i < k; i++) cr_assert_eq(it[i].rc, 0, "item %u: %s", i, it[i].err.msg);
    cr_assert(slot[0]->n_past == pos[0] + 1 && slot[1]->n_past == N && slot[2]->n_past == pos[2] + 1);
    cr_assert_eq(engine_eval(orc[0], &next[0], 1, pos[0], lo[0], false, &err), 0, "%s", err.msg);
    engine_truncate(orc[1], 0);
    cr_assert_eq(engine_eval(orc[1], prompt, N, 0, lo[1], false, &err), 0, "%s", err.msg);
    cr_assert_eq(engine_eval(orc[2], &next[2], 1, pos[2], lo[2], false, &err), 0, "%s", err.msg);
    cr_assert_lt(check_row(lo[0], lg[0], argmax_of(lg[0], nv), nv, "slot 0 beside a prompt"), 1e-2);
    cr_assert_lt(check_row(lo[1], lg[1], argmax_of(lg[1], nv), nv, "the prompt's last row"), 1e-2);
    check_row(lo[2], NULL, best, nv, "slot 2 beside a prompt");

    /* a bad token inside the prompt: its row and the slot's later ones fail, the rest step */
    engine_step bad[4] = {{.e = slot[1], .token = prompt[0], .pos = 0},
                          {.e = slot[1], .token = (int32_t)nv, .pos = 1},
                          {.e = slot[1], .token = prompt[2], .pos = 2, .logits = lg[1]},
                          {.e = slot[2], .token = 5, .pos = pos[2] + 1, .best = &best}};
    cr_assert_eq(slot[0]->ops->eval_step(bad, 4), 0);
    cr_assert(bad[0].rc == 0 && bad[1].rc == -1 && bad[2].rc == -1 && bad[3].rc == 0, "%d %d %d %d", bad[0].rc,
              bad[1].rc, bad[2].rc, bad[3].rc);
    cr_assert(strstr(bad[2].err.msg, "vocabulary"), "%s", bad[2].err.msg);
    close_slots(m, slot, orc, lo, lg);
    d->ops->destroy(d);
}

/* The argmax under a grammar's mask stays on the device (eval_argmax_masked, and a step's
 * items with allow): each pick is the host's argmax over the allowed logits; an unmasked
 * call after a masked one sees every token again; nothing allowed gives -1. */
static int32_t host_pick(const float *l, const uint32_t *allow, uint32_t n) {
    int32_t b = -1;
    for (uint32_t i = 0; i < n; i++)
        if ((!allow || (allow[i / 32] >> (i % 32) & 1)) && l[i] == l[i] && l[i] > -INFINITY && (b < 0 || l[i] > l[b]))
            b = (int32_t)i;
    return b;
}

Test(plan_batch, masked_argmax_on_the_device, .timeout = 300) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    kiln_err err = {0};
    model *m = model_load(tu_data_file("models/stories260K.gguf"), &err);
    cr_assert_not_null(m, "%s", err.msg);
    uint32_t nv = m->hp.n_vocab, words = (nv + 31) / 32;
    engine *a = plan_create_slots(m, d, GGUF_T_BF16, 256, 0, 2, &err), *b = NULL;
    cr_assert_not_null(a, "%s", err.msg);
    cr_assert_not_null(b = plan_create_sibling(a, &err), "%s", err.msg);
    cr_assert_not_null(a->ops->eval_argmax_masked);
    static const int32_t pa[] = {1, 400, 300, 20}, pb[] = {1, 50, 60};
    float *la = malloc(nv * 4), *lb = malloc(nv * 4);
    uint32_t *allow = malloc(words * 4), *allow2 = malloc(words * 4);
    cr_assert_eq(engine_eval(a, pa, 4, 0, la, false, &err), 0, "%s", err.msg);
    cr_assert_eq(engine_eval(b, pb, 3, 0, lb, false, &err), 0, "%s", err.msg);
    tu_seed(71);
    for (int round = 0; round < 6; round++) {
        for (uint32_t w = 0; w < words; w++) { /* a random half; a single token; nothing */
            allow[w] = round % 3 == 0 ? (uint32_t)(tu_urand(0, 1) * 4294967295.0) : 0u;
            allow2[w] = (uint32_t)(tu_urand(0, 1) * 4294967295.0);
        }
        if (round % 3 == 1) allow[(round * 37 % nv) / 32] |= 1u << ((round * 37 % nv) % 32);
        int32_t got = -2;
        cr_assert_eq(a->ops->eval_argmax_masked(a, &pa[3], 1, 3, allow, &got, &err), 0, "%s", err.msg);
        cr_assert_eq(got, host_pick(la, allow, nv), "round %d: masked pick %d", round, got);
        cr_assert_eq(a->ops->eval_argmax(a, &pa[3], 1, 3, &got, &err), 0, "%s", err.msg);
        cr_assert_eq(got, host_pick(la, NULL, nv), "round %d: the mask outlived its call", round);
        /* a step: slot a masked, slot b not, then both masked, then neither */
        int32_t ga = -2, gb = -2;
        for (int k = 0; k < 3; k++) {
            engine_step it[2] = {{.e = a, .token = pa[3], .pos = 3, .best = &ga, .allow = k < 2 ? allow : NULL},
                                 {.e = b, .token = pb[2], .pos = 2, .best = &gb, .allow = k == 1 ? allow2 : NULL}};
            cr_assert_eq(a->ops->eval_step(it, 2), 0);
            cr_assert(it[0].rc == 0 && it[1].rc == 0, "%s %s", it[0].err.msg, it[1].err.msg);
            cr_assert_eq(ga, host_pick(la, k < 2 ? allow : NULL, nv), "round %d step %d: slot a", round, k);
            cr_assert_eq(gb, host_pick(lb, k == 1 ? allow2 : NULL, nv), "round %d step %d: slot b", round, k);
        }
    }
    free(la), free(lb), free(allow), free(allow2);
    engine_destroy(b);
    engine_destroy(a);
    model_free(m);
    d->ops->destroy(d);
}
