/* The kiln command: exit codes and one-line messages for bad input, and inspect/synth
 * end to end through the real binary. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "gguf/half.h"
#include "model/arch.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BIG (1 << 20)
static char out[BIG], err[BIG];

#define RUN(...) tu_run_kiln((const char *const[]){__VA_ARGS__, NULL}, out, sizeof out, err, sizeof err)

/* Bad input: the status, a message naming the problem on the first line, and the usage. */
static void expect_usage(int rc, const char *want) {
    cr_assert_eq(rc, 2, "exit %d, stderr: %s", rc, err);
    cr_assert(strncmp(err, "kiln: ", 6) == 0, "stderr: %s", err);
    char first[1024];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(err, "\n"), err);
    cr_assert(strstr(first, want), "first line of '%s' lacks '%s'", err, want);
    cr_assert(strstr(err, "usage: kiln"), "no usage in: %s", err);
}

Test(cli, bad_commands_and_flags) {
    expect_usage(RUN("bogus"), "unknown command 'bogus'");
    expect_usage(tu_run_kiln((const char *const[]){NULL}, out, sizeof out, err, sizeof err), "no command given");
    expect_usage(RUN("inspect"), "no file given");
    expect_usage(RUN("inspect", "--jsn", "x.gguf"), "unknown flag '--jsn'");
    expect_usage(RUN("inspect", "a.gguf", "b.gguf"), "more than one file");
    expect_usage(RUN("synth", "-o", tu_tmp("x.gguf")), "--preset is required");
    expect_usage(RUN("synth", "--preset", "tiny"), "-o FILE.gguf is required");
    expect_usage(RUN("synth", "--preset", "huge", "-o", tu_tmp("x.gguf")), "unknown preset 'huge'");
    expect_usage(RUN("synth", "--preset", "tiny", "--hidden", "abc", "-o", tu_tmp("x.gguf")), "--hidden: 'abc'");
    expect_usage(RUN("synth", "--preset", "tiny", "--hidden", "-5", "-o", tu_tmp("x.gguf")), "--hidden: '-5'");
    expect_usage(RUN("synth", "--preset", "tiny", "--layers", "0", "-o", tu_tmp("x.gguf")), "--layers: '0'");
    expect_usage(RUN("synth", "--preset", "tiny", "--vocab", "99999999999", "-o", tu_tmp("x.gguf")), "--vocab");
    expect_usage(RUN("synth", "--preset", "tiny", "--dtype", "q4", "-o", tu_tmp("x.gguf")), "--dtype: 'q4'");
    expect_usage(RUN("synth", "--preset", "tiny", "--arch", "gpt9", "-o", tu_tmp("x.gguf")), "unknown architecture");
    expect_usage(RUN("synth", "--preset", "tiny", "--heads", "6", "--kv-heads", "4", "--head-dim", "8", "-o",
                     tu_tmp("x.gguf")),
                 "not a multiple of --kv-heads");
    expect_usage(RUN("synth", "--preset", "tiny", "--hidden", "201", "-o", tu_tmp("x.gguf")), "give --head-dim");
    expect_usage(RUN("synth", "--preset", "tiny", "--seed"), "--seed needs a value");
    expect_usage(RUN("synth", "--preset", "tiny", "--frobnicate", "1", "-o", tu_tmp("x.gguf")), "unknown flag");
    expect_usage(RUN("synth", "--preset", "tiny", "--rms-eps", "nan", "-o", tu_tmp("x.gguf")), "--rms-eps");
    expect_usage(RUN("synth", "--preset", "tiny", "--vocab", "100", "-o", tu_tmp("x.gguf")), "too small");
    expect_usage(RUN("synth", "--preset", "tiny", "--pre", "qwen2", "-o", tu_tmp("x.gguf")), "--pre needs --tokenizer");
    cr_assert_neq(access(tu_tmp("x.gguf"), F_OK), 0, "no file is written on bad input");
    cr_assert_eq(RUN("help"), 0);
    cr_assert(strstr(out, "usage: kiln"));
    cr_assert_eq(RUN("synth", "--help"), 0);
    cr_assert(strstr(out, "--vocab-from"));
}

Test(cli, bad_files) {
    cr_assert_eq(RUN("inspect", "/nonexistent/model.gguf"), 1);
    cr_assert(strstr(err, "cannot open"), "%s", err);
    const char *p = tu_tmp("junk.gguf");
    cr_assert(tu_write_file(p, "GGUF\x03\0\0\0\xff\xff\xff\xff\xff\xff\xff\x7f\0\0\0\0\0\0\0\0", 24));
    cr_assert_eq(RUN("inspect", p), 1);
    cr_assert(strstr(err, "at byte 8: tensor count"), "%s", err);
    cr_assert_eq(strchr(err, '\n'), strrchr(err, '\n'), "one line: %s", err);
    cr_assert(tu_write_file(p, "", 0));
    cr_assert_eq(RUN("inspect", p), 1);
    cr_assert(strstr(err, "empty file"), "%s", err);
    cr_assert_eq(RUN("inspect", tu_tmpdir()), 1);
    cr_assert(strstr(err, "not a regular file"), "%s", err);
    cr_assert_eq(RUN("synth", "--preset", "tiny", "--vocab-from", p, "-o", tu_tmp("y.gguf")), 1);
    cr_assert_eq(RUN("synth", "--preset", "tiny", "-o", "/nonexistent/dir/m.gguf"), 1);
    cr_assert(strstr(err, "cannot create"), "%s", err);
}

static gguf_file *synth_and_open(const char *name, const char *const *extra) {
    const char *args[40] = {"synth"};
    int n = 1;
    for (; extra && *extra; extra++) args[n++] = *extra;
    const char *path = tu_tmp(name);
    args[n++] = "-o";
    args[n++] = path;
    args[n] = NULL;
    int rc = tu_run_kiln(args, out, sizeof out, err, sizeof err);
    cr_assert_eq(rc, 0, "synth failed (%d): %s", rc, err);
    kiln_err e;
    gguf_file *g = gguf_open(path, &e);
    cr_assert_not_null(g, "%s", e.msg);
    return g;
}

static void expect_tensor(const gguf_file *g, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    cr_assert_not_null(t, "missing tensor %s", name);
    cr_assert_eq(t->type, type, "%s type %u", name, t->type);
    cr_assert_eq(t->ne[0], ne0, "%s ne0 %llu", name, (unsigned long long)t->ne[0]);
    cr_assert_eq(t->ne[1], ne1, "%s ne1 %llu", name, (unsigned long long)t->ne[1]);
    cr_assert_eq(t->n_dims, ne1 > 1 ? 2u : 1u);
}

Test(synth, tiny_qwen3_names_shapes_keys) {
    gguf_file *g = synth_and_open("tiny.gguf", (const char *const[]){"--preset", "tiny", NULL});
    arch_hparams hp;
    kiln_err e;
    cr_assert_eq(arch_read_hparams(g, &hp, &e), 0, "%s", e.msg);
    cr_assert_eq(hp.arch, ARCH_QWEN3);
    cr_assert_eq(hp.n_layer, 3);
    cr_assert_eq(hp.n_embd, 200);
    cr_assert_eq(hp.n_head, 5);
    cr_assert_eq(hp.n_head_kv, 1);
    cr_assert_eq(hp.head_dim_k, 40);
    cr_assert_eq(hp.n_ff, 520);
    cr_assert_eq(hp.n_vocab, 1000);
    cr_assert(!hp.tied_output && hp.qk_norm && hp.rope_neox);
    expect_tensor(g, "token_embd.weight", GGUF_T_BF16, 200, 1000);
    expect_tensor(g, "output.weight", GGUF_T_BF16, 200, 1000);
    expect_tensor(g, "output_norm.weight", GGUF_T_F32, 200, 1);
    for (int l = 0; l < 3; l++) {
        char n[64];
#define T(suffix, type, a, b) snprintf(n, sizeof n, "blk.%d." suffix, l), expect_tensor(g, n, type, a, b)
        T("attn_norm.weight", GGUF_T_F32, 200, 1);
        T("attn_q.weight", GGUF_T_BF16, 200, 200);
        T("attn_k.weight", GGUF_T_BF16, 200, 40);
        T("attn_v.weight", GGUF_T_BF16, 200, 40);
        T("attn_q_norm.weight", GGUF_T_F32, 40, 1);
        T("attn_k_norm.weight", GGUF_T_F32, 40, 1);
        T("attn_output.weight", GGUF_T_BF16, 200, 200);
        T("ffn_norm.weight", GGUF_T_F32, 200, 1);
        T("ffn_gate.weight", GGUF_T_BF16, 200, 520);
        T("ffn_up.weight", GGUF_T_BF16, 200, 520);
        T("ffn_down.weight", GGUF_T_BF16, 520, 200);
#undef T
    }
    cr_assert_eq(gguf_n_tensors(g), 3 + 3 * 11);
    uint32_t ft;
    cr_assert_eq(gguf_get_u32(g, "general.file_type", &ft, &e), 0);
    cr_assert_eq(ft, 32);
    const gguf_array *toks;
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STR, &toks, &e), 0);
    cr_assert_eq(toks->n, 1000);
    gguf_close(g);
}

Test(synth, weights_are_normal_and_norms_near_one) {
    gguf_file *g = synth_and_open("stats.gguf", (const char *const[]){"--preset", "tiny", "--seed", "7", NULL});
    const gguf_tensor *t = gguf_find_tensor(g, "blk.0.ffn_up.weight");
    uint64_t n = gguf_tensor_nelements(t);
    float *f = malloc(n * sizeof *f);
    kiln_err e;
    cr_assert_eq(gguf_tensor_rows_f32(t, 0, gguf_tensor_nrows(t), f, &e), 0);
    double s = 0, s2 = 0;
    uint64_t beyond3 = 0;
    for (uint64_t i = 0; i < n; i++) {
        s += f[i], s2 += (double)f[i] * f[i];
        beyond3 += fabsf(f[i]) > 0.06f;
    }
    double mean = s / (double)n, sd = sqrt(s2 / (double)n - mean * mean);
    cr_assert(fabs(mean) < 0.0005, "mean %g", mean);
    cr_assert(fabs(sd - 0.02) < 0.0005, "std %g", sd);
    /* a normal puts 0.27% beyond 3 sigma: 281 of 104000 expected */
    cr_assert(beyond3 > 180 && beyond3 < 400, "%llu beyond 3 sigma", (unsigned long long)beyond3);
    free(f);
    const gguf_tensor *nt = gguf_find_tensor(g, "blk.1.attn_norm.weight");
    const float *w = (const float *)nt->data;
    for (uint64_t i = 0; i < nt->ne[0]; i++) cr_assert(fabsf(w[i] - 1.0f) < 0.15f, "norm weight %g", w[i]);
    cr_assert_neq(w[0], w[1]);
    gguf_close(g);
}

static bool same_bytes(const char *a, const char *b) {
    kiln_err e;
    gguf_file *x = gguf_open(a, &e), *y = gguf_open(b, &e);
    cr_assert(x && y);
    bool eq = gguf_file_size(x) == gguf_file_size(y);
    for (uint64_t i = 0; eq && i < gguf_n_tensors(x); i++)
        eq = memcmp(gguf_tensor_at(x, i)->data, gguf_tensor_at(y, i)->data, gguf_tensor_at(x, i)->nbytes) == 0;
    gguf_close(x);
    gguf_close(y);
    return eq;
}

Test(synth, same_seed_same_file_whatever_the_threads) {
    gguf_close(
        synth_and_open("s1.gguf", (const char *const[]){"--preset", "tiny", "--seed", "5", "--threads", "1", NULL}));
    gguf_close(
        synth_and_open("s2.gguf", (const char *const[]){"--preset", "tiny", "--seed", "5", "--threads", "7", NULL}));
    gguf_close(synth_and_open("s3.gguf", (const char *const[]){"--preset", "tiny", "--seed", "6", NULL}));
    cr_assert(same_bytes(tu_tmp("s1.gguf"), tu_tmp("s2.gguf")));
    cr_assert(!same_bytes(tu_tmp("s1.gguf"), tu_tmp("s3.gguf")));
}

Test(synth, llama_and_qwen2_variants) {
    gguf_file *g = synth_and_open("llama.gguf", (const char *const[]){"--preset", "tiny", "--arch", "llama", "--tied",
                                                                      "--dtype", "f16", NULL});
    arch_hparams hp;
    kiln_err e;
    cr_assert_eq(arch_read_hparams(g, &hp, &e), 0, "%s", e.msg);
    cr_assert(hp.arch == ARCH_LLAMA && hp.tied_output && !hp.rope_neox && !hp.qk_norm);
    cr_assert_null(gguf_find_tensor(g, "output.weight"));
    cr_assert_null(gguf_find_tensor(g, "blk.0.attn_q_norm.weight"));
    expect_tensor(g, "blk.2.attn_q.weight", GGUF_T_F16, 200, 200);
    uint32_t u;
    cr_assert_eq(gguf_get_u32(g, "llama.rope.dimension_count", &u, &e), 0);
    cr_assert_eq(u, 40);
    cr_assert_eq(gguf_get_u32(g, "general.file_type", &u, &e), 0);
    cr_assert_eq(u, 1);
    gguf_close(g);

    g = synth_and_open("qwen2.gguf", (const char *const[]){"--preset", "tiny", "--arch", "qwen2", NULL});
    cr_assert_eq(arch_read_hparams(g, &hp, &e), 0, "%s", e.msg);
    cr_assert(hp.arch == ARCH_QWEN2 && hp.qkv_bias && hp.rope_neox);
    expect_tensor(g, "blk.0.attn_q.bias", GGUF_T_F32, 200, 1);
    expect_tensor(g, "blk.1.attn_k.bias", GGUF_T_F32, 40, 1);
    expect_tensor(g, "blk.2.attn_v.bias", GGUF_T_F32, 40, 1);
    gguf_close(g);
}

/* Every preset with its real widths (one layer, so CI stays fast; the full sizes run
 * under KILN_FULL_PRESETS=1) has llama.cpp's shapes and keys and inspects cleanly. */
static void check_preset(const char *preset, bool full) {
    const char *args[] = {"--preset", preset, full ? NULL : "--layers", "1", NULL};
    char name[64];
    snprintf(name, sizeof name, "%s.gguf", preset);
    gguf_file *g = synth_and_open(name, args);
    arch_hparams hp;
    kiln_err e;
    cr_assert_eq(arch_read_hparams(g, &hp, &e), 0, "%s", e.msg);
    uint64_t q = (uint64_t)hp.n_head * hp.head_dim_k, kv = (uint64_t)hp.n_head_kv * hp.head_dim_k;
    expect_tensor(g, "token_embd.weight", GGUF_T_BF16, hp.n_embd, hp.n_vocab);
    expect_tensor(g, "blk.0.attn_q.weight", GGUF_T_BF16, hp.n_embd, q);
    expect_tensor(g, "blk.0.attn_k.weight", GGUF_T_BF16, hp.n_embd, kv);
    expect_tensor(g, "blk.0.attn_output.weight", GGUF_T_BF16, q, hp.n_embd);
    expect_tensor(g, "blk.0.ffn_down.weight", GGUF_T_BF16, hp.n_ff, hp.n_embd);
    char last[64];
    snprintf(last, sizeof last, "blk.%u.ffn_up.weight", hp.n_layer - 1);
    expect_tensor(g, last, GGUF_T_BF16, hp.n_embd, hp.n_ff);
    gguf_close(g);
    cr_assert_eq(RUN("inspect", tu_tmp(name)), 0, "%s", err);
    cr_assert(strstr(out, "hyperparameters ("), "%s", out);
    unlink(tu_tmp(name));
}

Test(synth, presets_at_real_widths, .timeout = 600) {
    const struct { const char *name; uint32_t embd, heads, kv, hd, ff, vocab; bool tied; } want[] = {
        {"qwen3-0.6b", 1024, 16, 8, 128, 3072, 151936, true},
        {"qwen3-4b", 2560, 32, 8, 128, 9728, 151936, true},
        {"qwen3-8b", 4096, 32, 8, 128, 12288, 151936, false},
        {"llama-3.2-1b", 2048, 32, 8, 64, 8192, 128256, true}};
    for (size_t i = 0; i < 4; i++) {
        check_preset(want[i].name, false);
        gguf_file *g = synth_and_open("p.gguf", (const char *const[]){"--preset", want[i].name, "--layers", "1", NULL});
        arch_hparams hp;
        kiln_err e;
        cr_assert_eq(arch_read_hparams(g, &hp, &e), 0);
        cr_assert_eq(hp.n_embd, want[i].embd, "%s", want[i].name);
        cr_assert_eq(hp.n_head, want[i].heads);
        cr_assert_eq(hp.n_head_kv, want[i].kv);
        cr_assert_eq(hp.head_dim_k, want[i].hd);
        cr_assert_eq(hp.n_ff, want[i].ff);
        cr_assert_eq(hp.n_vocab, want[i].vocab);
        cr_assert_eq(hp.tied_output, want[i].tied, "%s", want[i].name);
        gguf_close(g);
        unlink(tu_tmp("p.gguf"));
    }
}

Test(synth, full_size_presets, .timeout = 900) {
    const char *full = getenv("KILN_FULL_PRESETS");
    if (!full || strcmp(full, "1")) cr_skip_test("full-size presets run only with KILN_FULL_PRESETS=1 (CI sets it)");
    check_preset("qwen3-0.6b", true);
    check_preset("llama-3.2-1b", true);
}

Test(synth, llama3_rope_freqs) {
    gguf_file *g = synth_and_open("l3.gguf", (const char *const[]){"--preset", "llama-3.2-1b", "--layers", "1",
                                                                   "--hidden", "256", "--heads", "4", "--kv-heads", "2",
                                                                   "--ffn", "96", "--vocab", "300", NULL});
    const gguf_tensor *t = gguf_find_tensor(g, "rope_freqs.weight");
    cr_assert_not_null(t);
    cr_assert_eq(t->type, GGUF_T_F32);
    cr_assert_eq(t->ne[0], 32); /* head_dim 64 / 2 */
    const float *f = (const float *)t->data;
    /* wavelength 2*pi*500000^(2i/64): short ones (< 8192/4) keep factor 1, long ones
     * (> 8192) get the full factor 32, the band between is smoothed */
    for (int i = 0; i < 32; i++) {
        double wl = 2 * 3.14159265358979 * pow(500000.0, 2.0 * i / 64);
        if (wl < 2048) cr_assert_eq(f[i], 1.0f, "i=%d", i);
        else if (wl > 8192) cr_assert_eq(f[i], 32.0f, "i=%d", i);
        else {
            double smooth = (8192 / wl - 1) / 3;
            cr_assert_float_eq(f[i], 1 / ((1 - smooth) / 32 + smooth), 1e-4, "i=%d", i);
        }
    }
    cr_assert_eq(f[0], 1.0f);
    cr_assert_eq(f[31], 32.0f);
    arch_hparams hp;
    kiln_err e;
    cr_assert_eq(arch_read_hparams(g, &hp, &e), 0);
    cr_assert(hp.has_rope_freqs && hp.rope_scaling == ROPE_SCALING_LLAMA3);
    cr_assert_eq(hp.rope_base, 500000.0f);
    gguf_close(g);
}

Test(synth, tokenizer_import_and_vocab_from) {
    const char *tj = tu_data_file("tokenizers/qwen3/tokenizer.json");
    const char *tc = tu_data_file("tokenizers/qwen3/tokenizer_config.json");
    gguf_file *g = synth_and_open("tq.gguf", (const char *const[]){"--preset", "tiny", "--layers", "1", "--tokenizer",
                                                                   tj, "--tokenizer-config", tc, NULL});
    kiln_err e;
    const gguf_array *toks;
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STR, &toks, &e), 0);
    cr_assert_eq(toks->n, 151669, "vocab is the tokenizer's");
    expect_tensor(g, "token_embd.weight", GGUF_T_BF16, 200, 151669);
    gguf_str s;
    cr_assert_eq(gguf_get_str(g, "tokenizer.ggml.pre", &s, &e), 0);
    cr_assert(gguf_str_eq(s, "qwen2"));
    cr_assert_not_null(gguf_find(g, "tokenizer.chat_template"));
    gguf_close(g);

    /* an explicit --vocab pads with [PAD] tokens */
    g = synth_and_open("tq2.gguf", (const char *const[]){"--preset", "tiny", "--layers", "1", "--tokenizer", tj,
                                                         "--vocab", "151936", NULL});
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STR, &toks, &e), 0);
    cr_assert_eq(toks->n, 151936);
    cr_assert(gguf_str_eq(gguf_arr_at(toks, 151935).v.str, "[PAD151935]"));
    gguf_close(g);
    unlink(tu_tmp("tq.gguf"));
    unlink(tu_tmp("tq2.gguf"));

    const char *stories = tu_data_file("models/stories260K.gguf");
    g = synth_and_open("vf.gguf", (const char *const[]){"--preset", "tiny", "--arch", "llama", "--vocab-from", stories,
                                                        NULL});
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STR, &toks, &e), 0);
    cr_assert_eq(toks->n, 512);
    cr_assert_eq(gguf_get_str(g, "tokenizer.ggml.model", &s, &e), 0);
    cr_assert(gguf_str_eq(s, "llama"));
    cr_assert_not_null(gguf_find(g, "tokenizer.ggml.scores"));
    expect_tensor(g, "token_embd.weight", GGUF_T_BF16, 200, 512);
    gguf_close(g);
    cr_assert_eq(RUN("synth", "--preset", "tiny", "--vocab-from", stories, "--vocab", "600", "-o", tu_tmp("bad.gguf")),
                 1);
    cr_assert(strstr(err, "512 tokens"), "%s", err);
}

Test(inspect, text_and_json) {
    const char *stories = tu_data_file("models/stories260K.gguf");
    cr_assert_eq(RUN("inspect", stories), 0, "%s", err);
    cr_assert(strstr(out, "GGUF v3, 1185376 bytes"), "%s", out);
    cr_assert(strstr(out, "tokenizer.ggml.tokens"), "%s", out);
    cr_assert(strstr(out, "arr[str,512]"), "%s", out);
    cr_assert(strstr(out, "... (504 more)"), "long arrays are summarized");
    cr_assert(strstr(out, "blk.4.ffn_down.weight"));
    cr_assert(strstr(out, "F32        48 tensors"), "%s", out);
    cr_assert(strstr(out, "hyperparameters (llama)"));
    cr_assert(strstr(out, "layers 5, embedding 64, feed-forward 172, vocab 512"), "%s", out);
    cr_assert(strstr(out, "heads 8, kv heads 4 (GQA 2), head dim k 8 / v 8"), "%s", out);

    cr_assert_eq(RUN("inspect", stories, "--json"), 0, "%s", err);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    cr_assert_not_null(j, "bad JSON: %s", je.text);
    cr_assert_eq(json_integer_value(json_object_get(j, "version")), 3);
    cr_assert_eq(json_array_size(json_object_get(j, "tensors")), 48);
    json_t *t0 = json_array_get(json_object_get(j, "tensors"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(t0, "name")), "token_embd.weight");
    cr_assert_eq(json_integer_value(json_array_get(json_object_get(t0, "shape"), 1)), 512);
    json_t *hp = json_object_get(j, "hparams");
    cr_assert_eq(json_integer_value(json_object_get(hp, "n_layer")), 5);
    cr_assert_eq(json_integer_value(json_object_get(hp, "n_head_kv")), 4);
    json_t *tot = json_object_get(json_object_get(j, "totals_by_type"), "F32");
    cr_assert_eq(json_integer_value(json_object_get(tot, "tensors")), 48);
    json_t *meta = json_object_get(j, "metadata");
    bool found = false;
    for (size_t i = 0; i < json_array_size(meta); i++) {
        json_t *m = json_array_get(meta, i);
        if (strcmp(json_string_value(json_object_get(m, "key")), "tokenizer.ggml.tokens") == 0) {
            found = true;
            cr_assert_eq(json_integer_value(json_object_get(m, "count")), 512);
            cr_assert_eq(json_array_size(json_object_get(m, "head")), 16);
        }
    }
    cr_assert(found);
    json_decref(j);
}

/* Every GGUF in the test data (vocab-only ones of other architectures too) inspects
 * cleanly, as text and as JSON. */
static void inspect_one(const char *p, void *ctx) {
    (void)ctx;
    cr_assert_eq(RUN("inspect", p), 0, "%s: %s", p, err);
    cr_assert(strstr(out, "hyperparameters"), "%s", out);
    cr_assert_eq(RUN("inspect", "--json", p), 0, "%s: %s", p, err);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    cr_assert_not_null(j, "%s: bad JSON: %s", p, je.text);
    cr_assert(json_is_array(json_object_get(j, "metadata")));
    json_decref(j);
}

Test(inspect, every_testdata_gguf) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tokenizer", tu_testdata());
    int n = tu_each_gguf(dir, inspect_one, NULL);
    snprintf(dir, sizeof dir, "%s/models", tu_testdata());
    n += tu_each_gguf(dir, inspect_one, NULL);
    cr_assert_geq(n, 13);
    cr_assert_eq(RUN("inspect", tu_data_file("tokenizer/ggml-vocab-bert-bge.gguf")), 0);
    cr_assert(strstr(out, "tensors (0)"), "%s", out);
    cr_assert(strstr(out, "hyperparameters: not available: architecture 'bert' is not supported"), "%s", out);
}

/* Greedy decoding under a grammar on a GPU plan (the mask goes to the device's argmax:
 * eval_argmax_masked) writes what the oracle writes (its host mask over the logits). */
Test(cli, grammar_on_the_gpu_as_on_the_oracle, .timeout = 240) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    d->ops->destroy(d);
    const char *g = tu_tmp("story.gbnf");
    FILE *f = fopen(g, "w");
    cr_assert(f);
    fputs("root ::= \"Once\" [a-z ,]+ \".\"\n", f);
    fclose(f);
    static char out[2][4096], err[2][4096];
    const char *dev[2] = {"cpu", "vulkan:0"};
    for (int i = 0; i < 2; i++) {
        int rc = tu_run_kiln((const char *const[]){"run", tu_data_file("models/stories260K.gguf"), "-p", "Once upon",
                                                   "-n", "40", "--grammar", g, "--device", dev[i], NULL},
                             out[i], sizeof out[i], err[i], sizeof err[i]);
        cr_assert_eq(rc, 0, "%s: %s", dev[i], err[i]);
    }
    cr_assert(strstr(out[1], "Once uponOnce "), "%s", out[1]);
    cr_assert_str_eq(out[1], out[0]);
}

/* --mem-limit: byte counts with units, bad ones refused as usage errors; a model past the
 * limit refused by name on a GPU device (the context halved first, as for the device's
 * own memory), one within it running, one whose experts do not all fit running with an
 * expert cache (its slots and hit rate printed). */
Test(cli, mem_limit) {
    const char *path = tu_data_file("models/qwen3moe-tiny.gguf");
    const char *bad[] = {"0", "x", "2x", "-1", "1.5GiB", "99999999999T", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_usage(RUN("run", path, "-p", "hi", "--mem-limit", bad[i]), "--mem-limit");
    rt_device *d = tu_vk_open_or_skip(NULL);
    d->ops->destroy(d);
    int rc = RUN("run", path, "-p", "hi", "-n", "2", "--device", "vulkan:0", "--mem-limit", "1MiB");
    cr_assert_eq(rc, 1, "exit %d, stderr: %s", rc, err);
    cr_assert(strstr(err, "--mem-limit allows"), "stderr: %s", err);
    rc = RUN("run", path, "-p", "hi", "-n", "2", "--device", "vulkan:0", "--mem-limit", "1GiB");
    cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
    cr_assert_null(strstr(err, "expert cache"), "stderr: %s", err);
    rc = RUN("run", path, "-p", "hi", "-n", "8", "--device", "vulkan:0", "--ctx", "256", "--mem-limit", "2600000");
    cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
    cr_assert(strstr(err, "expert cache: 1 of 8 experts a layer on the device"), "stderr: %s", err);
}

/* --token-log: a line per generated token (as many as the run reports), times ascending,
 * counts 1, 2, ...; a file that cannot be written refused by name. */
Test(cli, token_log) {
    const char *path = tu_data_file("models/stories260K.gguf"), *log = tu_tmp("tokens.log");
    int rc = RUN("run", path, "-p", "Once upon", "-n", "12", "--token-log", log);
    cr_assert_eq(rc, 0, "exit %d, stderr: %s", rc, err);
    FILE *f = fopen(log, "r");
    cr_assert_not_null(f);
    double t, last = -1;
    unsigned long long k, lines = 0;
    while (fscanf(f, "%lf %llu", &t, &k) == 2) {
        cr_assert_eq(k, ++lines, "line %llu counts %llu", lines, k);
        cr_assert(t >= last && t < 600, "line %llu at %g s after %g", lines, t, last);
        last = t;
    }
    fclose(f);
    const char *g = strstr(err, "generated ");
    unsigned gen = 0;
    cr_assert(g && sscanf(g, "generated %u tokens", &gen) == 1, "stderr: %s", err);
    cr_assert(lines >= 1 && lines == gen, "%llu lines for %u tokens", lines, gen);
    rc = RUN("run", path, "-p", "Once", "-n", "2", "--token-log", "/nonexistent-dir/x.log");
    cr_assert_eq(rc, 1, "exit %d", rc);
    cr_assert(strstr(err, "--token-log"), "stderr: %s", err);
}
