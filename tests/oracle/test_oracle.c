/* The CPU oracle: stories260K's greedy golden (all 256 ids, logits at positions 0-3),
 * prefill = token-by-token, rewinding the KV cache, both modes on the odd-sized tiny
 * model with their difference reported, and bad input. */
#include "base/error.h"
#include "model/engine.h"
#include "model/model.h"
#include "oracle/oracle.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t argmax(const float *x, uint32_t n) {
    int32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int32_t)i;
    return best;
}

static engine *open_engine(const char *path, orc_mode mode, uint32_t dtype, model **m) {
    kiln_err err = {0};
    *m = model_load(path, &err);
    cr_assert_not_null(*m, "%s", err.msg);
    orc_options o = {.mode = mode, .dtype = dtype, .n_ctx = 0, .threads = 2};
    engine *e = orc_create(*m, &o, &err);
    cr_assert_not_null(e, "%s", err.msg);
    return e;
}

Test(oracle, stories260k_greedy_golden_f32, .timeout = 120) {
    json_error_t je;
    json_t *golden = json_load_file(tu_data_file("models/stories260K.greedy.json"), 0, &je);
    cr_assert_not_null(golden, "%s", je.text);
    json_t *ids = json_object_get(golden, "ids");
    cr_assert_eq(json_array_size(ids), 257);
    model *m;
    engine *e = open_engine(tu_data_file("models/stories260K.gguf"), ORC_F32, 0, &m);
    cr_assert_eq(e->n_vocab, 512);
    float *logits = malloc(4 * 512 * sizeof *logits);
    kiln_err err = {0};

    /* logits at positions 0..3 against the float64 reference */
    json_t *dbg = json_object_get(json_object_get(golden, "debug"), "logits");
    int32_t first4[4];
    for (int i = 0; i < 4; i++) first4[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
    cr_assert_eq(engine_eval(e, first4, 4, 0, logits, true, &err), 0, "%s", err.msg);
    double worst = 0;
    for (int p = 0; p < 4; p++)
        for (int v = 0; v < 512; v++) {
            double want = json_real_value(json_array_get(json_array_get(dbg, (size_t)p), (size_t)v));
            double d = fabs(logits[p * 512 + v] - want);
            if (d > worst) worst = d;
        }
    cr_log_info("stories260K f32: max |logit - float64 reference| over positions 0-3: %.2e", worst);
    cr_assert_lt(worst, 1e-3);

    /* greedy from BOS, one token at a time */
    int32_t tok = (int32_t)json_integer_value(json_array_get(ids, 0));
    for (uint32_t pos = 0; pos < 256; pos++) {
        cr_assert_eq(engine_eval(e, &tok, 1, pos, logits, false, &err), 0, "%s", err.msg);
        tok = argmax(logits, 512);
        cr_assert_eq(tok, json_integer_value(json_array_get(ids, pos + 1)), "step %u: got %d", pos, tok);
    }
    free(logits);
    engine_destroy(e);
    model_free(m);
    json_decref(golden);
}

/* Contract mode (bf16 weights and activations) on the same model: how far the contract
 * moves the logits is reported, and greedy decoding still follows the golden until the
 * first near-tie. */
Test(oracle, stories260k_contract_bf16_reported, .timeout = 120) {
    model *mc, *mf;
    engine *c = open_engine(tu_data_file("models/stories260K.gguf"), ORC_CONTRACT, GGUF_T_BF16, &mc);
    engine *f = open_engine(tu_data_file("models/stories260K.gguf"), ORC_F32, 0, &mf);
    float *lc = malloc(512 * sizeof *lc), *lf = malloc(512 * sizeof *lf);
    kiln_err err = {0};
    int32_t tok = 1;
    double worst = 0;
    uint32_t agree = 0;
    for (uint32_t pos = 0; pos < 64; pos++) {
        cr_assert_eq(engine_eval(c, &tok, 1, pos, lc, false, &err), 0, "%s", err.msg);
        cr_assert_eq(engine_eval(f, &tok, 1, pos, lf, false, &err), 0, "%s", err.msg);
        for (int v = 0; v < 512; v++)
            if (fabs(lc[v] - lf[v]) > worst) worst = fabs(lc[v] - lf[v]);
        agree += argmax(lc, 512) == argmax(lf, 512);
        tok = argmax(lf, 512); /* teacher-forced on the f32 tokens */
    }
    cr_log_info("stories260K contract(bf16) vs f32 over 64 steps: max |dlogit| %.4f, top-1 agree %u/64", worst, agree);
    cr_assert_gt(worst, 0, "contract mode must round something");
    cr_assert_lt(worst, 2.0);
    cr_assert_geq(agree, 60);
    free(lc);
    free(lf);
    engine_destroy(c);
    engine_destroy(f);
    model_free(mc);
    model_free(mf);
}

/* One prefill call gives bit-identical logits to feeding the tokens one by one, and
 * evaluating at an earlier position rewinds the cache exactly. */
static void prefill_matches_steps(const char *path, orc_mode mode) {
    model *ma, *mb;
    engine *a = open_engine(path, mode, 0, &ma);
    engine *b = open_engine(path, mode, 0, &mb);
    uint32_t nv = a->n_vocab, n = 23;
    int32_t toks[23];
    for (uint32_t i = 0; i < n; i++) toks[i] = (int32_t)((i * 7919u + 3) % nv);
    float *all = malloc((size_t)n * nv * sizeof *all), *one = malloc(nv * sizeof *one);
    kiln_err err = {0};
    cr_assert_eq(engine_eval(a, toks, n, 0, all, true, &err), 0, "%s", err.msg);
    for (uint32_t i = 0; i < n; i++) {
        cr_assert_eq(engine_eval(b, &toks[i], 1, i, one, false, &err), 0, "%s", err.msg);
        cr_assert_eq(memcmp(one, all + (size_t)i * nv, nv * sizeof *one), 0, "%s: position %u differs", path, i);
    }
    /* rewind b to position 9 and take another path; a fresh run of that path agrees */
    int32_t alt[5] = {5, 6, 7, 8, 9};
    cr_assert_eq(engine_eval(b, alt, 5, 9, one, false, &err), 0, "%s", err.msg);
    cr_assert_eq(b->n_past, 14);
    int32_t path2[14];
    memcpy(path2, toks, 9 * sizeof *toks);
    memcpy(path2 + 9, alt, sizeof alt);
    cr_assert_eq(engine_eval(a, path2, 14, 0, all, false, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(one, all, nv * sizeof *one), 0, "rewound cache differs from a fresh run");
    free(all);
    free(one);
    engine_destroy(a);
    engine_destroy(b);
    model_free(ma);
    model_free(mb);
}

Test(oracle, prefill_equals_steps_and_rewind, .timeout = 120) {
    prefill_matches_steps(tu_data_file("models/stories260K.gguf"), ORC_F32);
    prefill_matches_steps(tu_data_file("models/stories260K.gguf"), ORC_CONTRACT);
}

/* The odd-sized tiny model in every architecture and both modes; the distance between
 * the modes is printed, never hidden. */
Test(oracle, tiny_all_archs_both_modes, .timeout = 300) {
    const char *archs[] = {"qwen3", "qwen2", "llama"};
    const char *dtypes[] = {"bf16", "f16", "bf16"};
    for (int a = 0; a < 3; a++) {
        char name[64];
        snprintf(name, sizeof name, "tiny-%s.gguf", archs[a]);
        const char *path = tu_synth_tiny(name, archs[a], dtypes[a]);
        prefill_matches_steps(path, ORC_CONTRACT);
        model *mc, *mf;
        engine *c = open_engine(path, ORC_CONTRACT, 0, &mc), *f = open_engine(path, ORC_F32, 0, &mf);
        uint32_t nv = c->n_vocab, n = 37;
        int32_t toks[37];
        for (uint32_t i = 0; i < n; i++) toks[i] = (int32_t)((i * 131u + 17) % nv);
        float *lc = malloc((size_t)n * nv * sizeof *lc), *lf = malloc((size_t)n * nv * sizeof *lf);
        kiln_err err = {0};
        cr_assert_eq(engine_eval(c, toks, n, 0, lc, true, &err), 0, "%s", err.msg);
        cr_assert_eq(engine_eval(f, toks, n, 0, lf, true, &err), 0, "%s", err.msg);
        double worst = 0, mag = 0;
        uint32_t agree = 0;
        for (uint32_t t = 0; t < n; t++) {
            for (uint32_t v = 0; v < nv; v++) {
                double d = fabs(lc[t * nv + v] - lf[t * nv + v]);
                if (d > worst) worst = d;
                if (fabs(lf[t * nv + v]) > mag) mag = fabs(lf[t * nv + v]);
                cr_assert(isfinite(lc[t * nv + v]) && isfinite(lf[t * nv + v]));
            }
            agree += argmax(lc + t * nv, nv) == argmax(lf + t * nv, nv);
        }
        cr_log_info(
            "tiny %s (%s): contract vs f32 over %u positions: max |dlogit| %.3e (max |logit| %.3f), top-1 agree "
            "%u/%u",
            archs[a], dtypes[a], n, worst, mag, agree, n);
        cr_assert_gt(worst, 0);
        cr_assert_lt(worst, 0.05 * mag + 1e-3);
        free(lc);
        free(lf);
        engine_destroy(c);
        engine_destroy(f);
        model_free(mc);
        model_free(mf);
    }
}

Test(oracle, bad_input) {
    model *m;
    engine *e = open_engine(tu_data_file("models/stories260K.gguf"), ORC_F32, 0, &m);
    float *l = malloc(512 * sizeof *l);
    kiln_err err = {0};
    int32_t bad = 512, ok[2] = {1, 2};
    cr_assert_eq(engine_eval(e, &bad, 1, 0, l, false, &err), -1);
    cr_assert(strstr(err.msg, "token id 512 is outside the vocabulary of 512"), "%s", err.msg);
    cr_assert_eq(engine_eval(e, ok, 2, 1, l, false, &err), -1);
    cr_assert(strstr(err.msg, "past the 0 cached positions"), "%s", err.msg);
    cr_assert_eq(engine_eval(e, ok, 0, 0, l, false, &err), -1);
    cr_assert_eq(engine_eval(e, ok, 2, 0, l, false, &err), 0, "%s", err.msg);
    engine_truncate(e, 1);
    cr_assert_eq(e->n_past, 1);
    cr_assert_eq(engine_eval(e, ok, 2, 2047, l, false, &err), -1);
    free(l);
    engine_destroy(e);
    model_free(m);
    kiln_err msg = {0};
    cr_assert_null(model_load(tu_data_file("tokenizer/ggml-vocab-llama-spm.gguf"), &msg));
    cr_assert(strstr(msg.msg, "tensor 'token_embd.weight' is missing"), "%s", msg.msg);
    cr_assert_null(model_load(tu_data_file("tokenizer/ggml-vocab-bert-bge.gguf"), &msg));
    cr_assert(strstr(msg.msg, "architecture 'bert' is not supported"), "%s", msg.msg);
}
