/* Text generation end to end: `kiln run` on stories260K against the float64 greedy
 * golden, stop strings, seeds, prefix reuse across turns, `kiln tokenize`, `kiln chat`,
 * and bad input. */
#include "base/error.h"
#include "generate/generate.h"
#include "generate/sampler.h"
#include "model/engine.h"
#include "model/model.h"
#include "oracle/oracle.h"
#include "tests/util/testutil.h"
#include "text/tok.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BIG (1 << 20)
static char out[BIG], err[BIG];
#define RUN(...) tu_run_kiln((const char *const[]){__VA_ARGS__, NULL}, out, sizeof out, err, sizeof err)

/* The golden's text for ids[1..n] (BOS excluded), detokenized by kiln's tokenizer. */
static char *golden_text(tokenizer *t, json_t *ids, size_t n) {
    char *s = calloc(1, 65536);
    tok_stream ts;
    tok_stream_init(&ts, t);
    size_t k = 0;
    for (size_t i = 1; i <= n; i++)
        k += tok_stream_push(&ts, (int32_t)json_integer_value(json_array_get(ids, i)), s + k, 65536 - k);
    k += tok_stream_flush(&ts, s + k, 65536 - k);
    s[k] = 0;
    return s;
}

/* "Once upon a time" is how the greedy golden from BOS begins, so greedy generation from
 * that prompt must continue exactly as the golden does. */
Test(generate, run_stories_matches_golden, .timeout = 120) {
    const char *model_path = tu_data_file("models/stories260K.gguf");
    json_error_t je;
    json_t *golden = json_load_file(tu_data_file("models/stories260K.greedy.json"), 0, &je);
    cr_assert_not_null(golden);
    json_t *ids = json_object_get(golden, "ids");
    kiln_err e = {0};
    kiln_err ge;
    gguf_file *g = gguf_open(model_path, &ge);
    tokenizer *t = tok_load(g, &e);
    cr_assert_not_null(t, "%s", e.msg);
    int32_t p[16];
    int64_t np = tok_encode(t, "Once upon a time", 16, true, true, p, 16, &e);
    cr_assert_gt(np, 1);
    for (int64_t i = 0; i < np; i++)
        cr_assert_eq(p[i], json_integer_value(json_array_get(ids, (size_t)i)), "prompt token %lld", (long long)i);
    char *want = golden_text(t, ids, (size_t)(np - 1) + 64);

    for (int mode = 0; mode < 2; mode++) {
        int rc = RUN("run", model_path, "-p", "Once upon a time", "-n", "64", "--oracle-mode",
                     mode ? "contract" : "f32", "--ids");
        cr_assert_eq(rc, 0, "%s", err);
        cr_assert(strncmp(out, want, strlen(want)) == 0, "mode %d:\n got: %s\nwant: %s", mode, out, want);
        cr_assert(strstr(err, "tok/s"), "%s", err);
    }
    /* empty prompt: generation from BOS alone is the golden itself */
    cr_assert_eq(RUN("run", model_path, "-p", "", "-n", "40", "--oracle-mode", "f32", "--no-echo"), 0, "%s", err);
    char *from_bos = golden_text(t, ids, 40);
    cr_assert(strncmp(out, from_bos, strlen(from_bos)) == 0, "got: %s\nwant: %s", out, from_bos);
    free(from_bos);
    /* a continuation keeps its first piece's space ("▁a" after "Once upon"); only text
     * from BOS alone loses the dummy prefix's */
    cr_assert_eq(RUN("run", model_path, "-p", "Once upon", "-n", "3", "--oracle-mode", "f32", "--no-echo"), 0, "%s",
                 err);
    cr_assert(strncmp(out, " a time", 7) == 0, "got: '%s'", out);
    free(want);
    tok_free(t);
    gguf_close(g);
    json_decref(golden);
}

Test(generate, stop_strings_seeds_and_stdin, .timeout = 120) {
    const char *m = tu_data_file("models/stories260K.gguf");
    cr_assert_eq(RUN("run", m, "-p", "Once upon a time", "-n", "64", "--stop", "Lily", "--no-echo"), 0, "%s", err);
    cr_assert(strstr(out, "named ") && !strstr(out, "Lily"), "%s", out);
    cr_assert(strstr(err, "; stop"), "%s", err);
    static char a[4096], b[4096], c[4096];
    cr_assert_eq(RUN("run", m, "-p", "Once", "-n", "48", "--temp", "1.0", "--seed", "7"), 0, "%s", err);
    strcpy(a, out);
    cr_assert_eq(RUN("run", m, "-p", "Once", "-n", "48", "--temp", "1.0", "--seed", "7"), 0, "%s", err);
    strcpy(b, out);
    cr_assert_eq(RUN("run", m, "-p", "Once", "-n", "48", "--temp", "1.0", "--seed", "8"), 0, "%s", err);
    strcpy(c, out);
    cr_assert_str_eq(a, b, "same seed, same text");
    cr_assert_str_neq(a, c, "another seed, another text");
}

Test(generate, bad_input) {
    const char *m = tu_data_file("models/stories260K.gguf");
    cr_assert_eq(RUN("run", m, "-p", "x", "-n", "0"), 2);
    cr_assert(strstr(err, "-n: '0'"), "%s", err);
    cr_assert_eq(RUN("run", m, "-p", "x", "--temp", "-1"), 2);
    cr_assert(strstr(err, "temperature"), "%s", err);
    cr_assert_eq(RUN("run", m, "-p", "x", "--top-p", "1.5"), 2);
    cr_assert_eq(RUN("run", m, "-p", "x", "--oracle-mode", "f64"), 2);
    cr_assert_eq(RUN("run", m, "-p", "x", "--device", "cuda:x"), 2);
    cr_assert(strstr(err, "cuda:N"), "%s", err);
    cr_assert_eq(RUN("run", m, "-p", "x", "--device", "cuda:9"), 1); /* no machine here has ten */
    cr_assert(strstr(err, "cuda:9"), "%s", err);
    cr_assert_eq(RUN("run", m, "-p", "x", "--device", "gpu"), 2);
    cr_assert_eq(RUN("run", m, "-p", "x", "--device", "vulkan:9"), 1);
    cr_assert(strstr(err, "vulkan:9"), "%s", err);
    cr_assert_eq(RUN("run", m, "-p", "x", "--device", "vulkan:0", "--caps", "no-such-cap"), 2);
    cr_assert_eq(RUN("run", m), 2);
    cr_assert_eq(RUN("run", "-p", "x"), 2);
    cr_assert_eq(RUN("run", m, "-p", "\xff\xfe bad"), 1);
    cr_assert(strstr(err, "not valid UTF-8"), "%s", err);
    cr_assert_eq(RUN("run", m, "-p", "Once upon a time there was a long story", "--ctx", "8"), 1);
    cr_assert(strstr(err, "--truncate"), "%s", err);
    cr_assert_eq(RUN("run", m, "-p", "Once upon a time there was a long story", "--ctx", "8", "--truncate", "-n", "2"),
                 0, "%s", err);
    cr_assert_eq(RUN("run", "/nonexistent.gguf", "-p", "x"), 1);
    cr_assert_eq(RUN("run", tu_data_file("tokenizer/ggml-vocab-llama-spm.gguf"), "-p", "x"), 1);
    cr_assert(strstr(err, "token_embd.weight"), "%s", err);
}

Test(generate, tokenize_command) {
    const char *m = tu_data_file("models/stories260K.gguf");
    cr_assert_eq(RUN("tokenize", m, "-p", "Hello world", "--json"), 0, "%s", err);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    cr_assert_not_null(j, "%s: %s", je.text, out);
    json_t *ids = json_object_get(j, "ids"), *pieces = json_object_get(j, "pieces");
    cr_assert_gt(json_array_size(ids), 1);
    cr_assert_eq(json_array_size(ids), json_array_size(pieces));
    json_decref(j);
    cr_assert_eq(RUN("tokenize", m, "-p", "Hi", "--special"), 0, "%s", err);
    cr_assert(strstr(out, "     1 -> '<s>'"), "BOS first with --special: %s", out);
    cr_assert_eq(RUN("tokenize", tu_data_file("tokenizer/ggml-vocab-gpt-2.gguf"), "-p", "Hello world"), 0, "%s", err);
    cr_assert(strstr(out, "15496 -> 'Hello'") && strstr(out, "995 -> ' world'"), "%s", out);
    cr_assert_eq(RUN("tokenize", m), 2);
    cr_assert_eq(RUN("tokenize", m, "-p", "a", "-f", "b"), 2);
    cr_assert_eq(RUN("tokenize", m, "-f", "/nonexistent"), 1);
}

static int sink(void *ctx, const char *text, size_t len) {
    (void)ctx, (void)text, (void)len;
    return 0;
}

typedef struct rig { model *m; tokenizer *t; engine *e; gen_session *s; sampler *smp; } rig;

static void rig_open(rig *r) {
    kiln_err e = {0};
    r->m = model_load(tu_data_file("models/stories260K.gguf"), &e);
    cr_assert_not_null(r->m, "%s", e.msg);
    r->t = tok_load(r->m->file, &e);
    cr_assert_not_null(r->t, "%s", e.msg);
    orc_options o = {.mode = ORC_F32, .threads = 1};
    r->e = orc_create(r->m, &o, &e);
    r->s = gen_session_create(r->e, r->t);
    samp_params sp;
    samp_params_default(&sp);
    r->smp = samp_create(&sp, r->e->n_vocab);
}

static void rig_close(rig *r) {
    samp_free(r->smp);
    gen_session_free(r->s);
    engine_destroy(r->e);
    tok_free(r->t);
    model_free(r->m);
}

/* A second turn that extends the first evaluates only its new tokens, and generates
 * what a cold session generates. */
Test(generate, session_reuses_prefix, .timeout = 60) {
    rig warm, cold;
    rig_open(&warm);
    rig_open(&cold);
    kiln_err e = {0};
    int32_t p1[64], p2[64];
    int64_t n1 = tok_encode(warm.t, "Once upon a time", 16, true, true, p1, 64, &e);
    int64_t n2 = tok_encode(warm.t, "Once upon a time there was a dog", 32, true, true, p2, 64, &e);
    cr_assert_eq(memcmp(p1, p2, (size_t)n1 * sizeof *p1), 0);
    gen_params gp = {.max_tokens = 8, .extra_eog = -1};
    gen_result r1, r2, rc;
    cr_assert_eq(gen_run(warm.s, warm.smp, p1, (uint32_t)n1, &gp, sink, NULL, &r1, &e), 0, "%s", e.msg);
    cr_assert_eq(r1.n_reused, 0);
    cr_assert_eq(gen_run(warm.s, warm.smp, p2, (uint32_t)n2, &gp, sink, NULL, &r2, &e), 0, "%s", e.msg);
    cr_assert_geq(r2.n_reused, (uint32_t)n1, "reused %u of %lld", r2.n_reused, (long long)n2);
    cr_assert_eq(gen_run(cold.s, cold.smp, p2, (uint32_t)n2, &gp, sink, NULL, &rc, &e), 0, "%s", e.msg);
    cr_assert_eq(r2.n_generated, rc.n_generated);
    cr_assert_eq(memcmp(r2.ids, rc.ids, rc.n_generated * sizeof *rc.ids), 0, "warm and cold runs differ");
    free(r1.ids);
    free(r2.ids);
    free(rc.ids);
    rig_close(&warm);
    rig_close(&cold);
}

/* kiln chat through a model's own template: two turns from stdin, one reply each; and
 * run's `-p -` reads the prompt from stdin. */
Test(generate, chat_and_stdin_prompt, .timeout = 300) {
    const char *tj = tu_data_file("tokenizers/qwen3/tokenizer.json");
    const char *tc = tu_data_file("tokenizers/qwen3/tokenizer_config.json");
    const char *path = tu_tmp("chat.gguf");
    cr_assert_eq(RUN("synth", "--preset", "tiny", "--layers", "1", "--hidden", "64", "--heads", "2", "--kv-heads", "1",
                     "--ffn", "96", "--tokenizer", tj, "--tokenizer-config", tc, "-o", path),
                 0, "%s", err);
    int rc = tu_run_kiln_input((const char *const[]){"chat", path, "-n", "6", "--system", "Be brief.", NULL},
                               "Hello there\n\n/exit\nnever read\n", out, sizeof out, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    int lines = 0;
    for (const char *p = out; *p; p++) lines += *p == '\n';
    cr_assert_eq(lines, 1, "one reply before /exit: '%s'", out);
    rc = tu_run_kiln_input((const char *const[]){"chat", path, "-n", "4", NULL}, "one\ntwo\n", out, sizeof out, err,
                           sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    lines = 0;
    for (const char *p = out; *p; p++) lines += *p == '\n';
    cr_assert_eq(lines, 2, "two replies: '%s'", out);
    cr_assert_eq(tu_run_kiln_input((const char *const[]){"chat", path, "--chat-template", "nope", NULL}, "", out,
                                   sizeof out, err, sizeof err),
                 2);
    cr_assert_eq(tu_run_kiln_input((const char *const[]){"chat", tu_data_file("models/stories260K.gguf"), NULL}, "hi\n",
                                   out, sizeof out, err, sizeof err),
                 1);
    cr_assert(strstr(err, "--chat-template"), "%s", err);

    const char *m = tu_data_file("models/stories260K.gguf");
    rc = tu_run_kiln_input((const char *const[]){"run", m, "-p", "-", "-n", "8", NULL}, "Once upon a time", out,
                           sizeof out, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    static char piped[4096];
    strcpy(piped, out);
    cr_assert_eq(RUN("run", m, "-p", "Once upon a time", "-n", "8"), 0, "%s", err);
    cr_assert_str_eq(piped, out);
}

/* The greedy fast path (engine_ops.eval_argmax): when the engine reports that no logit
 * beats -inf, the loop reads the logits and lets the sampler decide, as without the
 * fast path: an error when nothing can be sampled, the sampler's pick otherwise. A fake
 * engine stands in: its argmax always says -1; its logits are all -inf, or -inf but for
 * one token. */
typedef struct fake {
    engine base;
    int32_t only;    /* the one finite logit, or -1 */
    int n_argmax;    /* calls of eval_argmax */
} fake;

static int fake_eval(engine *e, const int32_t *tok, uint32_t n, uint32_t pos, float *logits, bool all, kiln_err *err) {
    (void)tok, (void)all, (void)err;
    fake *f = (fake *)e;
    for (uint32_t v = 0; v < e->n_vocab; v++) logits[v] = (int32_t)v == f->only ? 1.0f : -INFINITY;
    e->n_past = pos + n;
    return 0;
}
static int fake_argmax(engine *e, const int32_t *tok, uint32_t n, uint32_t pos, int32_t *best, kiln_err *err) {
    (void)tok, (void)err;
    ((fake *)e)->n_argmax++;
    e->n_past = pos + n;
    *best = -1;
    return 0;
}
static void fake_destroy(engine *e) { (void)e; }
static const engine_ops fake_ops = {fake_eval, fake_destroy, fake_argmax};

Test(generate, greedy_fast_path_falls_back_to_the_sampler) {
    rig r;
    rig_open(&r);
    kiln_err e = {0};
    for (int only = -1; only <= 0; only++) {
        fake f = {{&fake_ops, "fake", r.e->n_vocab, 64, 0}, only == 0 ? 300 : -1, 0};
        gen_session *s = gen_session_create(&f.base, r.t);
        cr_assert_not_null(s);
        int32_t prompt[2] = {1, 400};
        gen_params gp = {.max_tokens = 3, .extra_eog = -1};
        gen_result res;
        int rc = gen_run(s, r.smp, prompt, 2, &gp, sink, NULL, &res, &e);
        cr_assert(f.n_argmax >= 1, "the fast path was not taken");
        if (only < 0) {
            cr_assert_eq(rc, -1);
            cr_assert(strstr(e.msg, "no token can be sampled"), "%s", e.msg);
        } else {
            cr_assert_eq(rc, 0, "%s", e.msg);
            cr_assert_eq(res.n_generated, 3);
            for (uint32_t i = 0; i < 3; i++) cr_assert_eq(res.ids[i], 300);
        }
        free(res.ids);
        gen_session_free(s);
    }
    /* with penalties the sampler needs the logits: no fast path */
    samp_params sp;
    samp_params_default(&sp);
    sp.repeat_penalty = 1.3f;
    sampler *pen = samp_create(&sp, r.e->n_vocab);
    cr_assert(!samp_is_greedy(pen) && samp_is_greedy(r.smp));
    fake f = {{&fake_ops, "fake", r.e->n_vocab, 64, 0}, 300, 0};
    gen_session *s = gen_session_create(&f.base, r.t);
    int32_t prompt[2] = {1, 400};
    gen_params gp = {.max_tokens = 2, .extra_eog = -1};
    gen_result res;
    cr_assert_eq(gen_run(s, pen, prompt, 2, &gp, sink, NULL, &res, &e), 0, "%s", e.msg);
    cr_assert_eq(f.n_argmax, 0);
    cr_assert_eq(res.ids[0], 300);
    free(res.ids);
    gen_session_free(s);
    samp_free(pen);
    rig_close(&r);
}

/* gen_params.on_token: called once per output token with the logits it was sampled
 * from; greedy decoding then reads the logits (no argmax fast path); a nonzero return
 * stops. On the oracle, the tokens are those generated without the callback. */
typedef struct seen { int n, stop_at; int32_t ids[64]; bool logits_ok; } seen;

static int count_tokens(void *ctx, int32_t id, const float *logits, uint32_t n_vocab) {
    seen *s = ctx;
    if (s->n < 64) s->ids[s->n] = id;
    s->n++;
    s->logits_ok = s->logits_ok && n_vocab > 0 && samp_argmax(logits, n_vocab) == id;
    return s->n == s->stop_at;
}

Test(generate, on_token_sees_each_token_and_its_logits) {
    rig r;
    rig_open(&r);
    kiln_err e = {0};
    fake f = {{&fake_ops, "fake", r.e->n_vocab, 64, 0}, 300, 0};
    gen_session *s = gen_session_create(&f.base, r.t);
    int32_t prompt[2] = {1, 400};
    seen sn = {.logits_ok = true};
    gen_params gp = {.max_tokens = 3, .extra_eog = -1, .on_token = count_tokens, .token_ctx = &sn};
    gen_result res;
    cr_assert_eq(gen_run(s, r.smp, prompt, 2, &gp, sink, NULL, &res, &e), 0, "%s", e.msg);
    cr_assert_eq(f.n_argmax, 0, "with a callback the loop reads the logits");
    cr_assert_eq(sn.n, 3);
    cr_assert(sn.logits_ok && sn.ids[0] == 300);
    free(res.ids);
    sn = (seen){.stop_at = 1, .logits_ok = true};
    cr_assert_eq(gen_run(s, r.smp, prompt, 2, &gp, sink, NULL, &res, &e), 0, "%s", e.msg);
    cr_assert_eq(res.finish, GEN_CALLER);
    cr_assert_eq(res.n_generated, 1);
    free(res.ids);
    gen_session_free(s);

    /* the oracle: the same tokens with and without the callback */
    int32_t p[16];
    int64_t np = tok_encode(r.t, "Once upon a time", 16, true, true, p, 16, &e);
    gen_params plain = {.max_tokens = 16, .extra_eog = -1};
    gen_result a, b;
    cr_assert_eq(gen_run(r.s, r.smp, p, (uint32_t)np, &plain, sink, NULL, &a, &e), 0, "%s", e.msg);
    sn = (seen){.logits_ok = true};
    gp.max_tokens = 16;
    engine_truncate(r.e, 0);
    cr_assert_eq(gen_run(r.s, r.smp, p, (uint32_t)np, &gp, sink, NULL, &b, &e), 0, "%s", e.msg);
    cr_assert_eq(a.n_generated, b.n_generated);
    cr_assert_eq((uint32_t)sn.n, b.n_generated);
    cr_assert(sn.logits_ok);
    for (uint32_t i = 0; i < a.n_generated; i++) {
        cr_assert_eq(a.ids[i], b.ids[i]);
        cr_assert_eq(sn.ids[i], b.ids[i]);
    }
    free(a.ids);
    free(b.ids);

    /* the reusable prefix: the common part, never the prompt's last token */
    uint32_t cached = gen_session_cached(r.s);
    cr_assert(cached > (uint32_t)np);
    cr_assert_eq(gen_session_prefix(r.s, p, (uint32_t)np), (uint32_t)np - 1);
    int32_t q[3] = {p[0], p[1], p[1] + 1};
    cr_assert_eq(gen_session_prefix(r.s, q, 3), 2);
    cr_assert_eq(gen_session_prefix(r.s, q, 1), 0);
    cr_assert_eq(gen_session_prefix(r.s, q, 0), 0);
    rig_close(&r);
}

