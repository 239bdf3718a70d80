/* TEMPORARY (removed in the next commit): the launches bound by name equal those the old
 * positional recording makes, argument for argument, on every plan variant lavapipe gets. */
#include "model/model.h"
#include "plan/plan.h"
#include "plan/plan_internal.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int plan_old_record_decode(plan_engine *p);
int plan_old_record_prefill(plan_engine *p);

static uint32_t same_as_old(const char *caps, const char *path, uint32_t dtype) {
    rt_device *d = tu_vk_open_or_skip(caps);
    char err[512];
    model *m = model_load(path, err, sizeof err);
    cr_assert_not_null(m, "%s", err);
    engine *e = plan_create(m, d, dtype, 256, 64, err, sizeof err);
    cr_assert_not_null(e, "%s: %s", path, err);
    plan_engine *p = (plan_engine *)e;
    rt_launch *now = p->launch;
    uint32_t n_now = p->n_launch, cap_now = p->cap_launch, n_dec = p->n_decode_launch;
    p->launch = NULL, p->n_launch = p->cap_launch = 0;
    cr_assert_eq(plan_old_record_decode(p), 0);
    cr_assert_eq(p->n_launch, n_dec, "%s: decode %u vs %u", path, p->n_launch, n_dec);
    cr_assert_eq(plan_old_record_prefill(p), 0);
    cr_assert_eq(p->n_launch, n_now, "%s: %u launches vs %u", path, p->n_launch, n_now);
    uint32_t n_args = 0;
    for (uint32_t i = 0; i < n_now; i++) {
        const rt_launch *a = &now[i], *b = &p->launch[i];
        cr_assert_eq(a->kernel, b->kernel, "%s launch %u", path, i);
        cr_assert(!memcmp(a->groups, b->groups, sizeof a->groups), "%s launch %u grid", path, i);
        cr_assert_eq(a->n_args, b->n_args, "%s launch %u", path, i);
        for (uint32_t j = 0; j < a->n_args; j++) {
            cr_assert_eq(a->args[j].buf, b->args[j].buf, "%s launch %u arg %u", path, i, j);
            cr_assert_eq(a->args[j].bits, b->args[j].bits, "%s launch %u arg %u", path, i, j);
        }
        n_args += a->n_args;
    }
    for (uint32_t i = 0; i < p->n_launch; i++) free((void *)p->launch[i].args);
    free(p->launch);
    p->launch = now, p->n_launch = n_now, p->cap_launch = cap_now;
    fprintf(stderr, "same launches: %s caps=%s fuse=%d: %u launches, %u args\n", path, caps ? caps : "-",
            p->s.fuse_norm, n_now, n_args);
    engine_destroy(e);
    model_free(m);
    d->ops->destroy(d);
    return n_now;
}

Test(tmp_same_launches, every_variant, .timeout = 900) {
    const char *archs[] = {"qwen3", "llama", "qwen2"}, *dts[] = {"bf16", "f16", "bf16"};
    const char *paths[5];
    for (int a = 0; a < 3; a++) {
        char name[64];
        snprintf(name, sizeof name, "same-%s.gguf", archs[a]);
        paths[a] = tu_synth_tiny(name, archs[a], dts[a]);
    }
    char e[4096];
    paths[3] = tu_tmp("same-llama3.gguf");
    cr_assert_eq(tu_run_kiln((const char *const[]){"synth", "--preset", "llama-3.2-1b", "--hidden", "64", "--layers",
                                                   "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--ffn",
                                                   "96", "--vocab", "1000", "-o", paths[3], NULL},
                             NULL, 0, e, sizeof e),
                 0, "%s", e);
    paths[4] = tu_tmp("same-wide.gguf");
    cr_assert_eq(tu_run_kiln((const char *const[]){"synth", "--preset", "tiny", "--arch", "qwen3", "--hidden", "4096",
                                                   "--layers", "1", "--heads", "4", "--kv-heads", "2", "--head-dim",
                                                   "64", "--ffn", "96", "--vocab", "300", "-o", paths[4], NULL},
                             NULL, 0, e, sizeof e),
                 0, "%s", e);
    const char *variants[] = {NULL, "no-subgroup-arith", "workgroup=64", "shared=16384"};
    for (size_t v = 0; v < 4; v++) {
        same_as_old(variants[v], tu_data_file("models/stories260K.gguf"), GGUF_T_BF16);
        same_as_old(variants[v], tu_data_file("models/stories260K.gguf"), GGUF_T_F16);
        for (int a = 0; a < 5; a++)
            same_as_old(variants[v], paths[a], a == 1 ? GGUF_T_F16 : GGUF_T_BF16);
    }
}
