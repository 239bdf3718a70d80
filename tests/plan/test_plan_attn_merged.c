/* The decode step's attention in one launch (kn_attn_decode_merged: its runs merged by the
 * last workgroup, and kn_qk_prep's work for the token done in it where the caps take that
 * form; KILN_ATTN_MERGED=1) against the three launches (=0): the same logits bit for bit,
 * whole models (qwen3 with its q/k norms, llama, qwen2's biases) through a prompt and
 * decode steps, on the device and without subgroup sums (the merge without the prep). */
#include "base/error.h"
#include "model/engine.h"
#include "model/model.h"
#include "plan/plan.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS = 12, PROMPT = 9 };

/* The prompt's logits and STEPS greedy steps' into out ((STEPS + 1) rows). */
static void run(const char *path, const char *caps, uint32_t dtype, float *out) {
    rt_device *d = tu_vk_open_or_skip(caps);
    kiln_err err = {0};
    model *m = model_load(path, &err);
    cr_assert_not_null(m, "%s", err.msg);
    engine *e = plan_create(m, d, dtype, 256, 64, &err);
    cr_assert_not_null(e, "%s", err.msg);
    uint32_t nv = e->n_vocab;
    int32_t prompt[PROMPT] = {1, 256, 17, 99, 42, 3, 500, 77, 12};
    cr_assert_eq(engine_eval(e, prompt, PROMPT, 0, out, false, &err), 0, "%s", err.msg);
    for (uint32_t s = 0; s < STEPS; s++) {
        const float *last = out + (size_t)s * nv;
        int32_t tok = 0;
        for (uint32_t i = 1; i < nv; i++)
            if (last[i] > last[tok]) tok = (int32_t)i;
        cr_assert_eq(engine_eval(e, &tok, 1, PROMPT + s, out + (size_t)(s + 1) * nv, false, &err), 0, "%s", err.msg);
    }
    engine_destroy(e);
    model_free(m);
    d->ops->destroy(d);
}

Test(plan_attn_merged, one_launch_equals_three, .timeout = 600) {
    const char *archs[] = {"qwen3", "llama", "qwen2"}, *dts[] = {"bf16", "f16", "bf16"};
    const char *paths[3];
    for (int a = 0; a < 3; a++) { /* written before any device is opened (test_plan.c says why) */
        char name[64];
        snprintf(name, sizeof name, "merged-%s.gguf", archs[a]);
        paths[a] = tu_synth_tiny(name, archs[a], dts[a]);
    }
    const char *variants[] = {NULL, "no-subgroup-arith"};
    for (int a = 0; a < 3; a++)
        for (int v = 0; v < 2; v++) {
            kiln_err err = {0};
            model *m = model_load(paths[a], &err);
            cr_assert_not_null(m, "%s", err.msg);
            size_t n = (size_t)(STEPS + 1) * m->hp.n_vocab;
            model_free(m);
            float *one = malloc(n * 4), *three = malloc(n * 4);
            cr_assert(one && three);
            uint32_t dt = strcmp(dts[a], "f16") ? GGUF_T_BF16 : GGUF_T_F16;
            setenv("KILN_ATTN_MERGED", "1", 1); /* the default on Vulkan, not on CUDA */
            run(paths[a], variants[v], dt, one);
            setenv("KILN_ATTN_MERGED", "0", 1);
            run(paths[a], variants[v], dt, three);
            unsetenv("KILN_ATTN_MERGED");
            for (size_t i = 0; i < n; i++)
                cr_assert(!memcmp(&one[i], &three[i], 4), "%s caps=%s: logit %zu (step %zu): %.9g against %.9g",
                          archs[a], variants[v] ? variants[v] : "device", i, i / (n / (STEPS + 1)), one[i], three[i]);
            free(one), free(three);
        }
}
