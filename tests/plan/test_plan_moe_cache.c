/* The expert cache (plan/plan_moe_cache.c) on the Vulkan device (lavapipe in CI): testdata's
 * qwen3moe-tiny (4 layers of 8 experts, 2 a token) under a memory limit that leaves a few
 * slots a layer, against the contract-mode oracle and the plan with every expert resident
 * through a prompt's blocks and decode steps, while the limit falls (the cache shrinks to one slot) and rises again (it grows
 * back), the misses computed by the host; and llama.cpp's greedy goldens through the
 * cache. Skipped by name without Vulkan. */
#include "base/error.h"
#include "model/engine.h"
#include "model/model.h"
#include "oracle/oracle.h"
#include "plan/plan.h"
#include "plan/plan_internal.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_golden.h"
#include "tests/util/testutil_plan.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>

#define TINY "models/qwen3moe-tiny.gguf"
#define CTX 256
#define BLOCK 64

/* The memory limit at which a plan of the model (dtype, CTX, BLOCK) takes `slots` slots a
 * layer (plan_moe_slots_fit: what the limit allows less a 32nd, half a slot to spare). */
static uint64_t limit_for(const model *m, const rt_device *d, uint32_t dtype, uint32_t slots) {
    plan_shape s;
    kiln_err err = {0};
    cr_assert_eq(plan_shape_of(m, dtype, CTX, BLOCK, &s, &err), 0, "%s", err.msg);
    s.n_slots = 1;
    s.moe_slots = slots;
    s.moe_blocks = plan_moe_blocks_ok(m);
    uint64_t at = plan_bytes_of(m, &s, d);
    s.moe_slots = slots + 1;
    uint64_t per = plan_bytes_of(m, &s, d) - at;
    return (at + per / 2) * 32 / 31 + 1;
}

static double rel_error(const float *a, const float *b, uint32_t n) {
    double maxabs = 0, err = 0;
    for (uint32_t v = 0; v < n; v++) {
        cr_assert(isfinite(b[v]), "logit %u is %g", v, b[v]);
        maxabs = fmax(maxabs, fabs(a[v])), err = fmax(err, fabs(a[v] - b[v]));
    }
    return err / (maxabs > 0 ? maxabs : 1);
}

/* The model at path (dtype) through a cache of three slots a layer, against the oracle and
 * the plan with every expert resident: a 70-token prompt, then 60 decode steps with the
 * limit lowered to one slot's at step 4 and raised to six's (or all but one expert's) at
 * step 24. */
static void follow_memory(const char *path, uint32_t dtype, const int32_t *ids, bool blocks) {
    kiln_err err = {0};
    model *m = model_load(path, &err);
    cr_assert_not_null(m, "%s", err.msg);
    cr_assert_eq(plan_moe_blocks_ok(m), blocks, "%s: the cache's slots %s", path, blocks ? "in 16 bits" : "in blocks");
    rt_device *d = tu_vk_open_or_skip(NULL);
    /* a shared expert is one more expert, every token's (plan_shape_of) */
    uint32_t all = m->hp.n_expert + (m->hp.n_ff_shexp ? 1 : 0), k = m->hp.n_expert_used + (m->hp.n_ff_shexp ? 1 : 0);
    uint32_t big = all - 1 < 6 ? all - 1 : 6; /* a cache holds at most all but one */
    uint64_t three = limit_for(m, d, dtype, 3), one = limit_for(m, d, dtype, 1), six = limit_for(m, d, dtype, big);
    rt_caps_limit_memory(&d->caps, three);
    orc_options oo = {.mode = ORC_CONTRACT, .dtype = dtype, .n_ctx = CTX, .threads = 2};
    engine *orc = orc_create(m, &oo, &err);
    cr_assert_not_null(orc, "%s", err.msg);
    orc_options o32 = {.mode = ORC_F32, .n_ctx = CTX, .threads = 2}; /* the contract's own noise, for the bound */
    engine *orc32 = orc_create(m, &o32, &err);
    cr_assert_not_null(orc32, "%s", err.msg);
    engine *gpu = plan_create(m, d, dtype, CTX, BLOCK, &err);
    cr_assert_not_null(gpu, "%s", err.msg);
    rt_device *d2 = tu_vk_open_or_skip(NULL);
    engine *full = plan_create(m, d2, dtype, CTX, BLOCK, &err);
    cr_assert_not_null(full, "%s", err.msg);
    float *lf = malloc((size_t)m->hp.n_vocab * 4);
    engine_expert_stats st;
    cr_assert(engine_expert_stats_of(gpu, &st), "no expert cache under a limit of %llu bytes", (unsigned long long)three);
    cr_assert_eq(st.slots, 3, "%u slots", st.slots);
    cr_assert_eq(st.experts, all);
    uint32_t nv = m->hp.n_vocab, pos = 70;
    float *lo = malloc((size_t)nv * 4), *lg = malloc((size_t)nv * 4), *l32 = malloc((size_t)nv * 4);
    cr_assert_eq(engine_eval(orc, ids, 70, 0, lo, false, &err), 0, "%s", err.msg);
    cr_assert_eq(engine_eval(orc32, ids, 70, 0, l32, false, &err), 0, "%s", err.msg);
    double f32 = rel_error(lo, l32, nv);
    cr_assert_eq(engine_eval(gpu, ids, 70, 0, lg, false, &err), 0, "%s", err.msg);
    cr_assert_eq(engine_eval(full, ids, 70, 0, lf, false, &err), 0, "%s", err.msg);
    double worst = rel_error(lo, lg, nv), apart = rel_error(lf, lg, nv);
    /* the prompt's blocks chose each expert often enough to upload the missing ones */
    cr_assert(engine_expert_stats_of(gpu, &st));
    cr_assert_gt(st.swaps, 0, "no expert uploaded for the prompt's blocks");
    uint32_t seen_small = 0, seen_large = 0;
    for (uint32_t step = 0; step < 60; step++, pos++) {
        if (step == 4) plan_limit_memory(gpu, one); /* another program takes memory */
        if (step == 24) plan_limit_memory(gpu, six); /* and gives it back */
        int32_t next = 0;
        for (uint32_t v = 1; v < nv; v++)
            if (lo[v] > lo[next]) next = (int32_t)v;
        cr_assert_eq(engine_eval(orc, &next, 1, pos, lo, false, &err), 0, "%s", err.msg);
        cr_assert_eq(engine_eval(orc32, &next, 1, pos, l32, false, &err), 0, "%s", err.msg);
        f32 = fmax(f32, rel_error(lo, l32, nv));
        cr_assert_eq(engine_eval(gpu, &next, 1, pos, lg, false, &err), 0, "step %u: %s", step, err.msg);
        worst = fmax(worst, rel_error(lo, lg, nv));
        cr_assert_eq(engine_eval(full, &next, 1, pos, lf, false, &err), 0, "step %u: %s", step, err.msg);
        apart = fmax(apart, rel_error(lf, lg, nv));
        cr_assert(engine_expert_stats_of(gpu, &st));
        if (st.slots == 1) seen_small++;
        if (st.slots == big) seen_large++;
    }
    cr_log_info("%s through the cache: logits relative error %.3e (%.3e from all resident, the f32 oracle %.3e); "
                "%llu hits, %llu misses, %llu swaps, %llu resizes",
                path, worst, apart, f32, (unsigned long long)st.hits, (unsigned long long)st.misses,
                (unsigned long long)st.swaps, (unsigned long long)st.resizes);
    /* the oracle's bound grows with the contract's own noise where a model's choices of
     * experts are near-ties (as test_plan_moe.c's); the plan with every expert resident is
     * the cache's own yardstick, as tight as ever */
    cr_assert_lt(worst, fmax(1e-2, 0.6 * f32), "logits relative error %.3e (the f32 oracle's %.3e)", worst, f32);
    cr_assert_lt(apart, 1e-2, "logits relative error %.3e from the plan with every expert resident", apart);
    cr_assert(seen_small > 0, "the cache never shrank to one slot");
    cr_assert(seen_large > 0 && st.slots == big, "the cache did not grow back (%u slots)", st.slots);
    cr_assert_geq(st.resizes, 2);
    cr_assert_gt(st.kept, 0, "no expert kept on the device through the resizes");
    cr_assert(st.hits > 0 && st.misses > 0 && st.swaps > 0, "hits %llu, misses %llu, swaps %llu",
              (unsigned long long)st.hits, (unsigned long long)st.misses, (unsigned long long)st.swaps);
    cr_assert_eq(st.hits + st.misses, (uint64_t)(70 + 60 + 1) * k * m->hp.n_layer,
                 "every token's choices counted once (the warm-up step's too)");
    free(lo), free(lg), free(lf), free(l32);
    engine_destroy(orc32);
    engine_destroy(full);
    d2->ops->destroy(d2);
    engine_destroy(gpu);
    engine_destroy(orc);
    d->ops->destroy(d);
    model_free(m);
}

Test(plan_moe_cache, follows_the_memory_against_the_oracle, .timeout = 600) {
    const char *path = tu_data_file(TINY);
    int32_t ids[256];
    uint32_t n = tu_story_ids(path, ids, 256);
    cr_assert_geq(n, 70, "a story of %u tokens", n);
    follow_memory(path, GGUF_T_F16, ids, false);
}

/* A Q4_K_M mix (K-quant widths of 256): the cache's slots hold the experts in their blocks,
 * the host computes misses from their exact values */
Test(plan_moe_cache, quantized_slots_follow_the_memory, .timeout = 600) {
    uint32_t nv;
    const char *path = tu_synth_moe("plan-moe-cache-q4km.gguf", "Q4_K_M", true, &nv);
    int32_t ids[70];
    for (uint32_t i = 0; i < 70; i++) ids[i] = (int32_t)((i * 7919u + 13u) % nv);
    follow_memory(path, GGUF_T_BF16, ids, true);
}

/* qwen35moe: the shared expert takes a slot as any expert and misses go to the host alike */
Test(plan_moe_cache, qwen35moe_follows_the_memory, .timeout = 600) {
    uint32_t nv;
    const char *path = tu_synth_preset_file("qwen35moe-tiny-odd", "plan-moe-cache-q35moe.gguf", NULL, false, &nv);
    int32_t ids[70];
    for (uint32_t i = 0; i < 70; i++) ids[i] = (int32_t)((i * 7919u + 13u) % nv);
    follow_memory(path, GGUF_T_BF16, ids, false);
}

/* llama.cpp's greedy goldens through a cache of two slots: as close as all resident */
Test(plan_moe_cache, tiny_against_llamacpp_goldens, .timeout = 600) {
    kiln_err err = {0};
    model *m = model_load(tu_data_file(TINY), &err);
    cr_assert_not_null(m, "%s", err.msg);
    rt_device *d = tu_vk_open_or_skip(NULL);
    plan_shape s;
    cr_assert_eq(plan_shape_of(m, GGUF_T_F16, CTX, BLOCK, &s, &err), 0, "%s", err.msg);
    s.n_slots = 1, s.moe_slots = 2;
    s.moe_blocks = plan_moe_blocks_ok(m);
    uint64_t at = plan_bytes_of(m, &s, d);
    rt_caps_limit_memory(&d->caps, at * 32 / 31 + 1);
    engine *e = plan_create(m, d, GGUF_T_F16, CTX, BLOCK, &err);
    cr_assert_not_null(e, "%s", err.msg);
    engine_expert_stats st;
    cr_assert(engine_expert_stats_of(e, &st) && st.slots == 2, "the cache's slots");
    tu_golden_result r = tu_golden_run(e, "models/qwen3moe-tiny.llamacpp.json", 0.1, d->label);
    cr_log_info("through the cache: %d/%d cases identical, max |dlogprob| %.4f", r.identical, r.cases, r.worst_dlogprob);
    cr_assert_eq(r.cases, 6);
    cr_assert_lt(r.worst_dlogprob, 0.05, "off by %.3f nats", r.worst_dlogprob);
    engine_destroy(e);
    d->ops->destroy(d);
    model_free(m);
}

/* Where the device refuses an allocation that the free memory seemed to allow (a cache
 * sized from the driver's count, kiln's buffers taking more than their bytes), the plan is
 * made with half the slots, down to one, not refused: a limit that allows six slots a
 * layer, a device whose allocations stop where three slots' plan ends (debug-alloc-kib). */
Test(plan_moe_cache, a_refused_allocation_halves_the_slots, .timeout = 300) {
    kiln_err err = {0};
    model *m = model_load(tu_data_file(TINY), &err);
    cr_assert_not_null(m, "%s", err.msg);
    rt_device *d = tu_vk_open_or_skip(NULL);
    rt_caps_limit_memory(&d->caps, limit_for(m, d, GGUF_T_BF16, 3));
    engine *three = plan_create(m, d, GGUF_T_BF16, CTX, BLOCK, &err);
    cr_assert_not_null(three, "%s", err.msg);
    engine_expert_stats st;
    cr_assert(engine_expert_stats_of(three, &st) && st.slots == 3, "%u slots", st.slots);
    uint64_t kib = (((plan_engine *)three)->dev_bytes + 1023) / 1024;
    engine_destroy(three);
    d->ops->destroy(d);
    char caps[64];
    snprintf(caps, sizeof caps, "debug-alloc-kib=%llu", (unsigned long long)kib);
    d = tu_vk_open_or_skip(caps);
    cr_assert_eq(d->debug.alloc_kib, kib);
    rt_caps_limit_memory(&d->caps, limit_for(m, d, GGUF_T_BF16, 6));
    engine *e = plan_create(m, d, GGUF_T_BF16, CTX, BLOCK, &err);
    cr_assert_not_null(e, "%s", err.msg);
    cr_assert(engine_expert_stats_of(e, &st) && st.slots == 3, "%u slots (6 refused, then half)", st.slots);
    int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float *l = malloc((size_t)m->hp.n_vocab * 4);
    cr_assert_eq(engine_eval(e, ids, 8, 0, l, false, &err), 0, "%s", err.msg);
    free(l);
    engine_destroy(e);
    /* no limit, so every expert seems to fit: the resident plan refused, a cache of all
     * but one expert a layer, then halves until the device gives it */
    d->ops->destroy(d);
    d = tu_vk_open_or_skip(caps);
    e = plan_create(m, d, GGUF_T_BF16, CTX, BLOCK, &err);
    cr_assert_not_null(e, "%s", err.msg);
    cr_assert(engine_expert_stats_of(e, &st) && st.slots >= 1 && st.slots <= 3, "%u slots (resident refused)",
              st.slots);
    l = malloc((size_t)m->hp.n_vocab * 4);
    cr_assert_eq(engine_eval(e, ids, 8, 0, l, false, &err), 0, "%s", err.msg);
    free(l);
    engine_destroy(e);
    /* one slot's plan past the cap: refused, out of memory */
    d->debug.alloc_kib = 1;
    cr_assert_null(plan_create(m, d, GGUF_T_BF16, CTX, BLOCK, &err));
    cr_assert_eq(err.code, KILN_ERR_NOMEM, "%s", err.msg);
    d->ops->destroy(d);
    model_free(m);
}


/* A shrink under pressure: the device refuses the smaller buffers while the old are held,
 * and again once they are gone (debug-alloc-kib: five slots of one layer below what the
 * plan holds), so the resize falls to one slot a layer, the first layer's kept experts from
 * the host; every step still evaluates, against the oracle. */
Test(plan_moe_cache, a_shrink_refused_twice_falls_to_one_slot, .timeout = 300) {
    kiln_err err = {0};
    model *m = model_load(tu_data_file(TINY), &err);
    cr_assert_not_null(m, "%s", err.msg);
    rt_device *d = tu_vk_open_or_skip(NULL);
    uint32_t dt = GGUF_T_F16, big = m->hp.n_expert - 1 < 6 ? m->hp.n_expert - 1 : 6;
    rt_caps_limit_memory(&d->caps, limit_for(m, d, dt, big));
    engine *e = plan_create(m, d, dt, CTX, BLOCK, &err);
    cr_assert_not_null(e, "%s", err.msg);
    orc_options oo = {.mode = ORC_CONTRACT, .dtype = dt, .n_ctx = CTX, .threads = 2};
    engine *orc = orc_create(m, &oo, &err);
    cr_assert_not_null(orc, "%s", err.msg);
    engine_expert_stats st;
    cr_assert(engine_expert_stats_of(e, &st) && st.slots == big, "%u slots", st.slots);
    plan_shape s = ((plan_engine *)e)->s;
    uint64_t at = plan_bytes_of(m, &s, d);
    s.moe_slots++;
    uint64_t per_layer = (plan_bytes_of(m, &s, d) - at) / m->hp.n_layer;
    uint32_t nv = m->hp.n_vocab;
    float *lo = malloc((size_t)nv * 4), *lg = malloc((size_t)nv * 4);
    int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    cr_assert_eq(engine_eval(orc, ids, 8, 0, lo, false, &err), 0, "%s", err.msg);
    cr_assert_eq(engine_eval(e, ids, 8, 0, lg, false, &err), 0, "%s", err.msg);
    d->debug.alloc_kib = (uint32_t)((((plan_engine *)e)->dev_bytes - 5 * per_layer + 1023) / 1024);
    plan_limit_memory(e, limit_for(m, d, dt, 3)); /* another program takes memory */
    double worst = rel_error(lo, lg, nv);
    uint32_t fewest = big;
    for (uint32_t pos = 8; pos < 8 + 2 * PLAN_MOE_RECHECK + 2; pos++) {
        int32_t next = 0;
        for (uint32_t v = 1; v < nv; v++)
            if (lo[v] > lo[next]) next = (int32_t)v;
        cr_assert_eq(engine_eval(orc, &next, 1, pos, lo, false, &err), 0, "%s", err.msg);
        cr_assert_eq(engine_eval(e, &next, 1, pos, lg, false, &err), 0, "position %u: %s", pos, err.msg);
        worst = fmax(worst, rel_error(lo, lg, nv));
        cr_assert(engine_expert_stats_of(e, &st));
        if (st.slots < fewest) fewest = st.slots;
    }
    /* one slot after the refusals (then three again: one slot's layers leave room for them) */
    cr_assert_eq(fewest, 1, "%u slots at the fewest", fewest);
    cr_assert_geq(st.resizes, 1);
    cr_assert_lt(worst, 1e-2, "logits relative error %.3e", worst);
    free(lo), free(lg);
    engine_destroy(orc);
    engine_destroy(e);
    d->ops->destroy(d);
    model_free(m);
}
