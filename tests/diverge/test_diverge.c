/* kiln diverge: the analysis library on synthetic logits (quanta, top-k, verdicts), and the
 * command on stories260K and the tiny synth model against lavapipe, with a planted fault
 * (--caps debug-fault) that it must flag, the JSON checked against docs/diverge.schema.json. */
#include "diverge/diverge.h"
#include "gguf/gguf.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUT_CAP (1u << 20)

/* ---- the library, no device ---------------------------------------------------------------- */

Test(diverge, quantum_at_several_magnitudes) {
    /* bf16 keeps 7 fraction bits, f16 10: the spacing at [2^e, 2^(e+1)) is 2^(e-7) / 2^(e-10) */
    cr_assert_eq(dv_quantum(1.0, GGUF_T_BF16), 1.0 / 128);
    cr_assert_eq(dv_quantum(1.99, GGUF_T_BF16), 1.0 / 128);
    cr_assert_eq(dv_quantum(-12.5, GGUF_T_BF16), 8.0 / 128);
    cr_assert_eq(dv_quantum(0.3, GGUF_T_BF16), 0.25 / 128);
    cr_assert_eq(dv_quantum(1.0, GGUF_T_F16), 1.0 / 1024);
    cr_assert_eq(dv_quantum(1000.0, GGUF_T_F16), 512.0 / 1024);
    cr_assert_eq(dv_quantum(-0.1, GGUF_T_F16), 0.0625 / 1024);
    /* below the smallest normal (and at zero) the spacing stays the smallest normal's */
    cr_assert_eq(dv_quantum(0.0, GGUF_T_F16), ldexp(1.0, -24));
    cr_assert_eq(dv_quantum(1e-9, GGUF_T_F16), ldexp(1.0, -24));
    cr_assert_eq(dv_quantum(0.0, GGUF_T_BF16), ldexp(1.0, -133));
}

Test(diverge, topk_orders_largest_first_ties_to_lower_id) {
    const float l[] = {1.0f, 3.0f, NAN, 3.0f, -INFINITY, 2.0f, 3.0f, 0.5f};
    dv_cand c[5];
    cr_assert_eq(dv_topk(l, 8, c, 5), 5);
    const int32_t want[] = {1, 3, 6, 5, 0};
    for (int i = 0; i < 5; i++) cr_assert_eq(c[i].id, want[i], "rank %d: %d, want %d", i, c[i].id, want[i]);
    cr_assert_eq(c[0].logit, 3.0f);
    cr_assert_eq(c[4].logit, 1.0f);
    /* fewer candidates than k: every non-NaN one, NaN never */
    const float few[] = {NAN, -1.0f, NAN};
    cr_assert_eq(dv_topk(few, 3, c, 5), 1);
    cr_assert_eq(c[0].id, 1);
}

/* Two single-step-vocabulary runs of n_steps with the given logits (n_vocab 4), greedy
 * tokens their argmax, forced = greedy. */
typedef struct synth_run {
    int32_t tokens[4];
    float logits[4 * 4];
    dv_run run;
} synth_run;

static void synth(synth_run *s, const float *logits, uint32_t steps) {
    memcpy(s->logits, logits, steps * 4 * sizeof(float));
    for (uint32_t t = 0; t < steps; t++) {
        uint32_t best = 0;
        for (uint32_t v = 1; v < 4; v++)
            if (logits[t * 4 + v] > logits[t * 4 + best]) best = v;
        s->tokens[t] = (int32_t)best;
    }
    s->run = (dv_run){s->tokens, s->logits, s->logits};
}

Test(diverge, identical_runs_are_identical_to_the_end) {
    const float l[] = {1, 2, 3, 0, 5, 1, 1, 1};
    synth_run a, b;
    synth(&a, l, 2), synth(&b, l, 2);
    dv_comparison c;
    cr_assert_eq(dv_compare(&a.run, &b.run, 4, 2, GGUF_T_BF16, &c), 0);
    cr_assert_not(c.div.diverged);
    cr_assert_eq(c.div.step, 2);
    cr_assert_eq(c.agreement, 1.0);
    cr_assert_eq(c.worst_rel, 0.0);
    dv_comparison_free(&c);
}

Test(diverge, a_gap_of_one_quantum_is_a_near_tie) {
    /* at 8, a bf16 quantum is 1/16: the reference prefers token 2 by one quantum, the
     * other side token 1 by one */
    const float la[] = {1, 2, 3, 0, 0, 8.0f, 8.0f + 1.0f / 16, 1};
    const float lb[] = {1, 2, 3, 0, 0, 8.0f + 1.0f / 16, 8.0f, 1};
    synth_run a, b;
    synth(&a, la, 2), synth(&b, lb, 2);
    dv_comparison c;
    cr_assert_eq(dv_compare(&a.run, &b.run, 4, 2, GGUF_T_BF16, &c), 0);
    cr_assert(c.div.diverged);
    cr_assert_eq(c.div.step, 1);
    cr_assert_eq(c.div.token_a, 2);
    cr_assert_eq(c.div.token_b, 1);
    cr_assert_float_eq(c.div.a.gap_quanta, 1.0, 1e-9);
    cr_assert_float_eq(c.div.b.gap_quanta, 1.0, 1e-9);
    cr_assert(c.div.near_tie);
    cr_assert_not(c.div.a.tie);
    cr_assert_eq(c.div.a.top[0].id, 2);
    cr_assert_eq(c.div.b.top[0].id, 1);
    cr_assert_float_eq(c.agreement, 0.5, 1e-12);
    cr_assert_eq(c.worst_step, 1);
    cr_assert_float_eq(c.steps[1].max_abs, 1.0 / 16, 1e-7);
    dv_comparison_free(&c);
}

Test(diverge, an_exact_tie_is_reported_and_explained) {
    const float la[] = {4, 4, 0, 0};    /* token 0 by the lower-id rule */
    const float lb[] = {4, 4.03125f, 0, 0}; /* a quantum at 4 is 1/32 */
    synth_run a, b;
    synth(&a, la, 1), synth(&b, lb, 1);
    dv_comparison c;
    cr_assert_eq(dv_compare(&a.run, &b.run, 4, 1, GGUF_T_BF16, &c), 0);
    cr_assert(c.div.diverged);
    cr_assert(c.div.a.tie);
    cr_assert_eq(c.div.a.gap_quanta, 0.0);
    cr_assert_not(c.div.b.tie);
    cr_assert(c.div.near_tie);
    dv_comparison_free(&c);
}

Test(diverge, a_wide_gap_is_not_explained) {
    const float la[] = {8, 7, 0, 0};
    const float lb[] = {7, 8, 0, 0};
    synth_run a, b;
    synth(&a, la, 1), synth(&b, lb, 1);
    dv_comparison c;
    cr_assert_eq(dv_compare(&a.run, &b.run, 4, 1, GGUF_T_BF16, &c), 0);
    cr_assert(c.div.diverged);
    cr_assert_float_eq(c.div.a.gap_quanta, 16.0, 1e-9);
    cr_assert_not(c.div.near_tie);
    cr_assert_float_eq(c.steps[0].rel, 1.0 / 8, 1e-12);
    dv_comparison_free(&c);
    /* one side near, the other far: still not explained */
    cr_assert_not(dv_is_near_tie(1.0, 3.0));
    cr_assert(dv_is_near_tie(2.0, 0.0));
    cr_assert_not(dv_is_near_tie(INFINITY, 0.0));
}

Test(diverge, gap_quanta_is_one_sides_margin) {
    /* bf16 at 1.0: quanta of 2^-7 */
    const float l[] = {1.0f, 1.0f + 3.0f / 128, 1.0f + 1.0f / 128, NAN};
    cr_assert_float_eq(dv_gap_quanta(l, 1, 0, GGUF_T_BF16), 3.0, 1e-9);
    cr_assert_float_eq(dv_gap_quanta(l, 1, 2, GGUF_T_BF16), 2.0, 1e-9);
    cr_assert_float_eq(dv_gap_quanta(l, 2, 1, GGUF_T_BF16), -2.0, 1e-9, "a pick below the other's: negative");
    cr_assert(isinf(dv_gap_quanta(l, -1, 0, GGUF_T_BF16)), "no pick: nothing explains it");
    cr_assert(isinf(dv_gap_quanta(l, 0, -1, GGUF_T_BF16)));
    cr_assert(isinf(dv_gap_quanta(l, 3, 0, GGUF_T_BF16)), "NaN: not comparable");
    cr_assert(dv_is_near_tie(dv_gap_quanta(l, 1, 2, GGUF_T_BF16), dv_gap_quanta(l, 2, 1, GGUF_T_BF16)));
    cr_assert_not(dv_is_near_tie(dv_gap_quanta(l, 1, 0, GGUF_T_BF16), 0.0));
}

Test(diverge, nan_logits_are_an_infinite_error) {
    const float la[] = {1, 2, 0, 0};
    const float lb[] = {1, NAN, 0, 0};
    synth_run a, b;
    synth(&a, la, 1), synth(&b, lb, 1);
    dv_comparison c;
    cr_assert_eq(dv_compare(&a.run, &b.run, 4, 1, GGUF_T_F16, &c), 0);
    cr_assert(isinf(c.steps[0].max_abs));
    cr_assert_not(c.steps[0].top1_agree);
    dv_comparison_free(&c);
}

Test(diverge, pair_indices_are_dense) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < 4; i++)
        for (uint32_t j = i + 1; j < 4; j++) cr_assert_eq(dv_pair_index(4, i, j), k++);
}

/* ---- the command ----------------------------------------------------------------------------- */

/* Whether lavapipe (or any Vulkan device) is there: kiln probe lists it. Skips otherwise. */
static void need_vulkan(void) {
    static char out[1 << 16];
    int rc = tu_run_kiln((const char *const[]){"probe", NULL}, out, sizeof out, NULL, 0);
    cr_assert_eq(rc, 0);
    if (!strstr(out, "vulkan:0")) {
        const char *req = getenv("KILN_REQUIRE_VULKAN");
        if (req && !strcmp(req, "1")) cr_assert_fail("no Vulkan device and KILN_REQUIRE_VULKAN=1");
        cr_skip_test("no Vulkan device");
    }
}

/* python3's jsonschema validates file against the repository's schema; skips when the
 * module is absent (fails under KILN_REQUIRE_TESTDATA=1). */
static void validate_json(const char *file) {
    if (system("python3 -c 'import jsonschema' >/dev/null 2>&1") != 0) {
        const char *req = getenv("KILN_REQUIRE_TESTDATA");
        if (req && !strcmp(req, "1")) cr_assert_fail("python3's jsonschema is missing and KILN_REQUIRE_TESTDATA=1");
        cr_skip_test("python3's jsonschema module is missing (Debian: python3-jsonschema)");
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import jsonschema,json,sys; jsonschema.validate(json.load(open(sys.argv[2])), "
             "json.load(open(sys.argv[1])))' '%s/docs/diverge.schema.json' '%s' 2>&1",
             KILN_SOURCE_DIR, file);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char msg[4096] = "";
    size_t n = fread(msg, 1, sizeof msg - 1, p);
    msg[n] = '\0';
    cr_assert_eq(pclose(p), 0, "%s does not validate: %s", file, msg);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s was not written", path);
    char *b = calloc(1, OUT_CAP);
    size_t n = fread(b, 1, OUT_CAP - 1, f);
    b[n] = '\0';
    fclose(f);
    return b;
}

static void check_html(const char *path) {
    char *h = slurp(path);
    cr_assert(!strncmp(h, "<!DOCTYPE html>", 15), "%.40s", h);
    cr_assert_not_null(strstr(h, "<svg"));
    cr_assert_not_null(strstr(h, "</html>"));
    cr_assert_null(strstr(h, "<script"));
    free(h);
}

/* kiln diverge MODEL --device vulkan:0 -n 6 [--caps ...] with JSON and HTML; its status. */
static int diverge(const char *model, const char *caps, const char *json, const char *html, char *out, char *err) {
    const char *args[16] = {"diverge", model, "--device", "vulkan:0", "-n", "6", "--json", json, "--html", html};
    int n = 10;
    if (caps) args[n++] = "--caps", args[n++] = caps;
    args[n] = NULL;
    return tu_run_kiln(args, out, OUT_CAP, err, OUT_CAP);
}

static void explained_on(const char *model) {
    char *out = malloc(OUT_CAP), *err = malloc(OUT_CAP);
    const char *json = tu_tmp("d.json"), *html = tu_tmp("d.html");
    int rc = diverge(model, NULL, json, html, out, err);
    cr_assert_eq(rc, 0, "status %d\n%s\n%s", rc, out, err);
    cr_assert_not_null(strstr(out, "## Verdicts"));
    cr_assert_not_null(strstr(out, "- vulkan:0: explained"), "%s", out);
    cr_assert_null(strstr(out, "NOT explained"));
    cr_assert_not_null(strstr(out, "the contract's cost"));
    validate_json(json);
    check_html(html);
    free(out);
    free(err);
}

Test(diverge, stories260k_on_lavapipe_is_explained, .timeout = 120) {
    const char *model = tu_data_file("models/stories260K.gguf");
    need_vulkan();
    explained_on(model);
}

Test(diverge, tiny_on_lavapipe_is_explained, .timeout = 120) {
    need_vulkan();
    explained_on(tu_synth_tiny("tiny.gguf", "qwen3", "bf16"));
}

Test(diverge, a_planted_fault_is_not_a_near_tie, .timeout = 120) {
    const char *model = tu_data_file("models/stories260K.gguf");
    need_vulkan();
    char *out = malloc(OUT_CAP), *err = malloc(OUT_CAP);
    const char *json = tu_tmp("f.json"), *html = tu_tmp("f.html");
    int rc = diverge(model, "debug-fault", json, html, out, err);
    cr_assert_eq(rc, 3, "status %d\n%s\n%s", rc, out, err);
    cr_assert_not_null(strstr(out, "- vulkan:0: NOT explained"), "%s", out);
    cr_assert_not_null(strstr(out, "a bug to chase"));
    cr_assert_not_null(strstr(out, "NOT a near-tie"));
    validate_json(json);
    char *j = slurp(json);
    cr_assert_not_null(strstr(j, "\"explained\": false"), "%.2000s", j);
    free(j);
    check_html(html);
    free(out);
    free(err);
}

/* ---- bad input ------------------------------------------------------------------------------- */

static void bad(const char *const *args, int want, const char *says) {
    char *err = malloc(OUT_CAP);
    int rc = tu_run_kiln(args, NULL, 0, err, OUT_CAP);
    cr_assert_eq(rc, want, "%s: status %d, want %d: %s", args[1], rc, want, err);
    cr_assert_not_null(strstr(err, says), "'%s' not in: %s", says, err);
    free(err);
}

Test(diverge, bad_flags_are_usage_errors) {
    bad((const char *const[]){"diverge", NULL}, 2, "no model given");
    bad((const char *const[]){"diverge", "m.gguf", "--bogus", NULL}, 2, "unknown flag");
    bad((const char *const[]){"diverge", "m.gguf", "-n", "0", NULL}, 2, "-n");
    bad((const char *const[]){"diverge", "m.gguf", "-n", NULL}, 2, "needs a value");
    bad((const char *const[]){"diverge", "m.gguf", "--device", "metal:0", NULL}, 2, "--device metal:0");
    bad((const char *const[]){"diverge", "m.gguf", "--oracle-mode", "f64", NULL}, 2, "--oracle-mode");
    bad((const char *const[]){"diverge", "m.gguf", "--caps", "no-such", NULL}, 2, "--caps");
    bad((const char *const[]){"diverge", "a.gguf", "b.gguf", NULL}, 2, "more than one model");
}

Test(diverge, help_documents_the_exit_status) {
    static char out[8192];
    cr_assert_eq(tu_run_kiln((const char *const[]){"diverge", "--help", NULL}, out, sizeof out, NULL, 0), 0);
    cr_assert_not_null(strstr(out, "3 when some divergence is not explained"));
    cr_assert_not_null(strstr(out, "debug-fault"));
}

Test(diverge, bad_files_and_devices_fail) {
    const char *model = tu_data_file("models/stories260K.gguf");
    bad((const char *const[]){"diverge", tu_tmp("absent.gguf"), NULL}, 1, "absent.gguf");
    bad((const char *const[]){"diverge", model, "--prompts", tu_tmp("absent.txt"), NULL}, 1, "absent.txt");
    const char *empty = tu_tmp("empty.txt"), *badjson = tu_tmp("bad.jsonl"), *nokey = tu_tmp("nokey.jsonl");
    cr_assert(tu_write_file(empty, "\n\n", 2));
    cr_assert(tu_write_file(badjson, "{\"prompt\": \n", 12));
    cr_assert(tu_write_file(nokey, "{\"text\": \"x\"}\n", 14));
    bad((const char *const[]){"diverge", model, "--prompts", empty, NULL}, 1, "no prompts");
    bad((const char *const[]){"diverge", model, "--prompts", badjson, NULL}, 1, "bad JSON");
    bad((const char *const[]){"diverge", model, "--prompts", nokey, NULL}, 1, "expected {\"prompt\"");
    bad((const char *const[]){"diverge", model, "--device", "vulkan:63", NULL}, 1, "vulkan:63");
    bad((const char *const[]){"diverge", model, "--device", "cuda:0", NULL}, 1, "cuda:0");
}

Test(diverge, prompts_file_of_lines_and_json_lines_on_the_oracle) {
    const char *model = tu_data_file("models/stories260K.gguf");
    const char *file = tu_tmp("prompts.jsonl");
    static const char text[] = "Once upon a time\n{\"prompt\": \"The dog ran\"}\n";
    cr_assert(tu_write_file(file, text, sizeof text - 1));
    char *out = malloc(OUT_CAP), *err = malloc(OUT_CAP);
    const char *json = tu_tmp("o.json");
    int rc = tu_run_kiln((const char *const[]){"diverge", model, "--device", "cpu", "--prompts", file, "-n", "4",
                                               "--oracle-mode", "f32", "--json", json, NULL},
                         out, OUT_CAP, err, OUT_CAP);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_not_null(strstr(out, "## Prompt 2"));
    cr_assert_null(strstr(out, "## Prompt 3"));
    cr_assert_not_null(strstr(out, "The dog ran"));
    cr_assert_not_null(strstr(out, "- cpu: explained: identical to the reference to the end on all 2 prompts"), "%s",
                       out);
    validate_json(json);
    free(out);
    free(err);
}
