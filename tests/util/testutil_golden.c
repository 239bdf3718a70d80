#include "tests/util/testutil_golden.h"

#include "base/error.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>

static int32_t argmax(const float *x, uint32_t n) {
    int32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int32_t)i;
    return best;
}

static double json_num(json_t *pair, size_t i) { return json_number_value(json_array_get(pair, i)); }

/* The engine's log-probabilities against the golden's top 5 at one step: the worst
 * difference into *worst. */
static void compare_top5(const float *logits, uint32_t nv, json_t *t5, double *worst) {
    double mx = -INFINITY, sum = 0;
    for (uint32_t v = 0; v < nv; v++) mx = fmax(mx, logits[v]);
    for (uint32_t v = 0; v < nv; v++) sum += exp((double)logits[v] - mx);
    double lse = mx + log(sum);
    for (size_t k = 0; k < json_array_size(t5); k++) {
        json_t *pair = json_array_get(t5, k);
        int32_t id = (int32_t)json_integer_value(json_array_get(pair, 0));
        cr_assert(id >= 0 && (uint32_t)id < nv, "golden token %d past the vocabulary", id);
        double d = fabs((double)logits[id] - lse - json_num(pair, 1));
        if (d > *worst) *worst = d;
    }
}

tu_golden_result tu_golden_run(engine *e, const char *rel, double near_tie, const char *what) {
    return tu_golden_run_file(e, tu_data_file(rel), near_tie, what);
}

tu_golden_result tu_golden_run_file(engine *e, const char *path, double near_tie, const char *what) {
    const char *rel = path;
    json_error_t je;
    json_t *g = json_load_file(path, JSON_ALLOW_NUL, &je);
    cr_assert_not_null(g, "%s: %s", rel, je.text);
    uint32_t nv = e->n_vocab;
    float *logits = malloc(nv * sizeof *logits);
    cr_assert_not_null(logits);
    kiln_err err = {0};
    tu_golden_result r = {0};
    json_t *cases = json_object_get(g, "cases");
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c), *pids = json_object_get(cs, "prompt_ids"),
               *ids = json_object_get(cs, "ids"), *top5 = json_object_get(cs, "top5");
        uint32_t np = (uint32_t)json_array_size(pids), steps = (uint32_t)json_array_size(ids);
        int32_t prompt[64];
        cr_assert_leq(np, 64);
        for (uint32_t i = 0; i < np; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(pids, i));
        cr_assert_eq(engine_eval(e, prompt, np, 0, logits, false, &err), 0, "%s: %s", what, err.msg);
        bool same = true;
        for (uint32_t s = 0; s < steps; s++) {
            json_t *t5 = json_array_get(top5, s);
            compare_top5(logits, nv, t5, &r.worst_dlogprob);
            int32_t want = (int32_t)json_integer_value(json_array_get(ids, s)), got = argmax(logits, nv);
            if (got != want) {
                double gap = json_num(json_array_get(t5, 0), 1) - json_num(json_array_get(t5, 1), 1);
                cr_log_info("%s on %s case %zu: first difference at step %u (got %d, llama.cpp %d), llama.cpp gap %.4f",
                            what, rel, c, s, got, want, gap);
                cr_expect_leq(gap, near_tie, "%s on %s case %zu step %u: a difference at gap %.4f is no near-tie", what,
                              rel, c, s, gap);
                if (gap > r.worst_tie_gap) r.worst_tie_gap = gap;
                r.near_tie_diffs++;
                same = false;
                break;
            }
            cr_assert_eq(engine_eval(e, &want, 1, np + s, logits, false, &err), 0, "%s: %s", what, err.msg);
        }
        r.cases++;
        r.identical += same;
    }
    free(logits);
    json_decref(g);
    return r;
}
