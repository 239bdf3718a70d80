/* kiln synth with a quantization (synth_config.quant): the per-tensor types of the mix
 * (spelled out here layer by layer), general.file_type, weights that decode to the drawn
 * distribution and are exactly the --dtype file's values quantized (what llama-quantize
 * writes from that file), the same bytes whatever the threads, rows that fall back to
 * other types or are refused, and files that load through model_load and run on the
 * oracle with logits close to the unquantized model's. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "gguf/half.h"
#include "model/arch.h"
#include "model/engine.h"
#include "model/model.h"
#include "modelgen/quant_mix.h"
#include "modelgen/synth.h"
#include "modelgen/vocab.h"
#include "oracle/oracle.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A qwen3 whose rows are all multiples of 256: 4 layers, width 256, 4 heads of 64 over 2
 * KV heads, ffn 768, vocab 1000, untied. */
static synth_config dense(void) {
    synth_config c;
    cr_assert_eq(synth_preset("tiny", &c), 0);
    c.n_layer = 4, c.n_embd = 256, c.n_head = 4, c.n_head_kv = 2, c.head_dim = 64, c.n_ff = 768, c.n_vocab = 1000;
    c.tied = false;
    return c;
}

/* Rows of 32s but not 256s (width 160, ffn 416) and one of neither: attn_output's 5 heads
 * of 36 (180). */
static synth_config odd(void) {
    synth_config c;
    cr_assert_eq(synth_preset("tiny", &c), 0);
    c.n_layer = 3, c.n_embd = 160, c.n_head = 5, c.n_head_kv = 1, c.head_dim = 36, c.n_ff = 416, c.n_vocab = 500;
    c.tied = false;
    return c;
}

/* Qwen3.5 with rows of 256s but ssm_out's (128): layers 0 and 2 DeltaNet, 1 and 3
 * attention; tied. */
static synth_config qwen35(void) {
    synth_config c;
    cr_assert_eq(synth_preset("qwen3.5-tiny-odd", &c), 0);
    c.n_layer = 4, c.full_attn_interval = 2, c.n_embd = 256, c.n_head = 4, c.n_head_kv = 2, c.head_dim = 64;
    c.ssm_state = 32, c.ssm_k_heads = 2, c.ssm_v_heads = 4, c.n_ff = 512, c.n_vocab = 512;
    synth_qwen35_rope(&c);
    return c;
}

static int write_model(synth_config c, const char *mix, const char *name, const char **path, kiln_err *e) {
    if (mix) {
        cr_assert_eq(quant_mix_parse(mix, &c.quant, e), 0, "%s", e->msg);
    }
    tok_vocab v;
    tok_vocab_init(&v);
    cr_assert_eq(tok_vocab_bytelevel(c.n_vocab, &v, e), 0, "%s", e->msg);
    *path = tu_tmp(name);
    int rc = synth_write(&c, &v, NULL, *path, NULL, e);
    tok_vocab_free(&v);
    return rc;
}

static const char *write_ok(synth_config c, const char *mix, const char *name) {
    const char *path;
    kiln_err e = {0};
    cr_assert_eq(write_model(c, mix, name, &path, &e), 0, "%s %s: %s", name, mix ? mix : "", e.msg);
    return path;
}

static gguf_file *open_ok(const char *path) {
    kiln_err e = {0};
    gguf_file *g = gguf_open(path, &e);
    cr_assert_not_null(g, "%s: %s", path, e.msg);
    return g;
}

static void expect_type(const gguf_file *g, const char *name, int layer, uint32_t want) {
    char tn[96];
    snprintf(tn, sizeof tn, name, layer);
    const gguf_tensor *t = gguf_find_tensor(g, tn);
    cr_assert_not_null(t, "no %s", tn);
    cr_assert_eq(t->type, want, "%s is %s, want %s", tn, gguf_type_info_of(t->type)->name, gguf_type_info_of(want)->name);
}

static uint32_t u32_key(const gguf_file *g, const char *key) {
    uint32_t v = 0;
    kiln_err e = {0};
    cr_assert_eq(gguf_get_u32(g, key, &v, &e), 0, "%s", e.msg);
    return v;
}

/* Every tensor decodes to finite values; the matrices' spread is the drawn std 0.02. */
static void expect_weights_decode(const gguf_file *g) {
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        uint64_t n = gguf_tensor_nelements(t);
        float *x = malloc(n * sizeof *x);
        kiln_err e = {0};
        cr_assert_eq(gguf_tensor_rows_f32(t, 0, gguf_tensor_nrows(t), x, &e), 0, "%s: %s", t->name, e.msg);
        double s2 = 0;
        for (uint64_t k = 0; k < n; k++) {
            cr_assert(isfinite(x[k]), "%s[%llu] = %g", t->name, (unsigned long long)k, x[k]);
            s2 += (double)x[k] * x[k];
        }
        if (gguf_type_is_block_quant(t->type)) {
            double sd = sqrt(s2 / (double)n);
            cr_assert(sd > 0.018 && sd < 0.022, "%s (%s): std %.4f, drawn with 0.02", t->name,
                      gguf_type_info_of(t->type)->name, sd);
        }
        free(x);
    }
}

/* 4 layers: the "more bits" ones are 2 (every third from n/8 = 0) and 3 (from 7n/8). */
Test(synth_quant, dense_mix_types_and_file_type) {
    const struct { const char *mix; uint32_t ftype, base, more, output; } w[] = {
        {"Q4_K_M", 15, GGUF_T_Q4_K, GGUF_T_Q6_K, GGUF_T_Q6_K},
        {"Q5_K_M", 17, GGUF_T_Q5_K, GGUF_T_Q6_K, GGUF_T_Q6_K},
        {"Q8_0", 7, GGUF_T_Q8_0, GGUF_T_Q8_0, GGUF_T_Q8_0},
        {"Q4_0", 2, GGUF_T_Q4_0, GGUF_T_Q4_0, GGUF_T_Q6_K},
    };
    for (size_t k = 0; k < sizeof w / sizeof w[0]; k++) {
        char name[32];
        snprintf(name, sizeof name, "dense-%s.gguf", w[k].mix);
        gguf_file *g = open_ok(write_ok(dense(), w[k].mix, name));
        cr_assert_eq(u32_key(g, "general.file_type"), w[k].ftype, "%s", w[k].mix);
        cr_assert_eq(u32_key(g, "general.quantization_version"), 2);
        expect_type(g, "token_embd.weight", 0, w[k].base);
        expect_type(g, "output.weight", 0, w[k].output);
        expect_type(g, "output_norm.weight", 0, GGUF_T_F32);
        for (int l = 0; l < 4; l++) {
            bool more = l >= 2;
            expect_type(g, "blk.%d.attn_v.weight", l, more ? w[k].more : w[k].base);
            expect_type(g, "blk.%d.ffn_down.weight", l, more ? w[k].more : w[k].base);
            const char *same[] = {"blk.%d.attn_q.weight", "blk.%d.attn_k.weight", "blk.%d.attn_output.weight",
                                  "blk.%d.ffn_gate.weight", "blk.%d.ffn_up.weight"};
            for (int s = 0; s < 5; s++) expect_type(g, same[s], l, w[k].base);
            const char *f32[] = {"blk.%d.attn_norm.weight", "blk.%d.ffn_norm.weight", "blk.%d.attn_q_norm.weight",
                                 "blk.%d.attn_k_norm.weight"};
            for (int s = 0; s < 4; s++) expect_type(g, f32[s], l, GGUF_T_F32);
        }
        expect_weights_decode(g);
        gguf_close(g);
    }
    /* without a mix: as before (bf16 matrices, file_type 32, no quantization_version) */
    gguf_file *g = open_ok(write_ok(dense(), NULL, "dense-bf16.gguf"));
    cr_assert_eq(u32_key(g, "general.file_type"), 32);
    cr_assert_null(gguf_find(g, "general.quantization_version"));
    expect_type(g, "blk.0.attn_v.weight", 0, GGUF_T_BF16);
    gguf_close(g);
}

/* 3 layers: the "more bits" layer is 2 (from 7n/8 = 2, and every third from 0). */
Test(synth_quant, odd_rows_fall_back) {
    const struct { const char *mix; uint32_t k32, more32; } w[] = {
        {"Q4_K_M", GGUF_T_Q5_0, GGUF_T_Q8_0}, /* Q4_K -> Q5_0, Q6_K -> Q8_0 */
        {"Q5_K_M", GGUF_T_Q5_1, GGUF_T_Q8_0}, /* Q5_K -> Q5_1 */
    };
    for (size_t k = 0; k < 2; k++) {
        char name[32];
        snprintf(name, sizeof name, "odd-%s.gguf", w[k].mix);
        gguf_file *g = open_ok(write_ok(odd(), w[k].mix, name));
        expect_type(g, "token_embd.weight", 0, w[k].k32);
        expect_type(g, "output.weight", 0, GGUF_T_Q8_0); /* the logits: Q8_0 where K blocks do not fit */
        for (int l = 0; l < 3; l++) {
            expect_type(g, "blk.%d.attn_q.weight", l, w[k].k32);
            expect_type(g, "blk.%d.attn_k.weight", l, w[k].k32);
            expect_type(g, "blk.%d.attn_v.weight", l, l == 2 ? w[k].more32 : w[k].k32);
            expect_type(g, "blk.%d.attn_output.weight", l, GGUF_T_F16); /* rows of 180 */
            expect_type(g, "blk.%d.ffn_gate.weight", l, w[k].k32);
            expect_type(g, "blk.%d.ffn_down.weight", l, l == 2 ? w[k].more32 : w[k].k32);
        }
        expect_weights_decode(g);
        gguf_close(g);
    }
    /* Q4_0 and Q8_0 have no type for rows of 180: refused, and no file left behind */
    const char *no[] = {"Q4_0", "Q8_0"};
    for (int k = 0; k < 2; k++) {
        const char *path;
        kiln_err e = {0};
        cr_assert_eq(write_model(odd(), no[k], "odd-refused.gguf", &path, &e), -1, "%s", no[k]);
        cr_assert(strstr(e.msg, no[k]) && strstr(e.msg, "blk.0.attn_output.weight") && strstr(e.msg, "rows of 180"),
                  "%s", e.msg);
        cr_assert_neq(access(path, F_OK), 0, "a file was written");
    }
}

/* The quantized file holds the --dtype file's values quantized (by gguf_quantize_rows,
 * which is llama-quantize's bytes: tests/gguf/test_quantize.c), F16 fallbacks those values
 * rounded to f16, and the 1-D tensors the same bytes. */
static void expect_requantized(synth_config c, const char *mix, const char *tag) {
    char a[48], b[48];
    snprintf(a, sizeof a, "%s-plain.gguf", tag);
    snprintf(b, sizeof b, "%s-%s.gguf", tag, mix);
    gguf_file *plain = open_ok(write_ok(c, NULL, a)), *q = open_ok(write_ok(c, mix, b));
    cr_assert_eq(gguf_n_tensors(plain), gguf_n_tensors(q));
    int n_quant = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(q); i++) {
        const gguf_tensor *t = gguf_tensor_at(q, i), *s = gguf_tensor_at(plain, i);
        cr_assert_str_eq(t->name, s->name);
        if (t->type == s->type) {
            cr_assert(t->nbytes == s->nbytes && memcmp(t->data, s->data, t->nbytes) == 0, "%s differs", t->name);
            continue;
        }
        uint64_t n = gguf_tensor_nelements(t);
        float *x = malloc(n * sizeof *x);
        uint8_t *want = malloc(t->nbytes);
        kiln_err e = {0};
        cr_assert_eq(gguf_tensor_rows_f32(s, 0, gguf_tensor_nrows(s), x, &e), 0, "%s", e.msg);
        if (t->type == GGUF_T_F16) {
            for (uint64_t k = 0; k < n; k++) {
                uint16_t h = gguf_f32_to_f16(x[k]);
                memcpy(want + 2 * k, &h, 2); /* little-endian hosts only, as the files */
            }
        } else {
            cr_assert_eq(gguf_quantize_rows(t->type, x, want, n, &e), 0, "%s", e.msg);
            n_quant++;
        }
        cr_assert(memcmp(want, t->data, t->nbytes) == 0, "%s %s: %s is not the plain file's values as %s", tag, mix,
                  t->name, gguf_type_info_of(t->type)->name);
        free(x), free(want);
    }
    cr_assert_gt(n_quant, 10, "%s %s", tag, mix);
    gguf_close(plain), gguf_close(q);
}

Test(synth_quant, the_dtype_files_values_quantized, .timeout = 60) {
    expect_requantized(dense(), "Q4_K_M", "rq-dense");
    synth_config c = odd();
    c.dtype = GGUF_T_F16;
    expect_requantized(c, "Q5_K_M", "rq-odd");
    expect_requantized(qwen35(), "Q4_K_M", "rq-q35");
}

Test(synth_quant, same_bytes_whatever_the_threads) {
    synth_config c = dense();
    c.seed = 9, c.threads = 1;
    const char *a = write_ok(c, "Q4_K_M", "t1.gguf");
    c.threads = 3;
    const char *b = write_ok(c, "Q4_K_M", "t3.gguf");
    c.seed = 10;
    const char *d = write_ok(c, "Q4_K_M", "s10.gguf");
    gguf_file *x = open_ok(a), *y = open_ok(b), *z = open_ok(d);
    cr_assert_eq(gguf_file_size(x), gguf_file_size(y));
    bool other = false;
    for (uint64_t i = 0; i < gguf_n_tensors(x); i++) {
        const gguf_tensor *s = gguf_tensor_at(x, i), *t = gguf_tensor_at(y, i);
        cr_assert(memcmp(s->data, t->data, s->nbytes) == 0, "%s differs between 1 and 3 threads", s->name);
        other |= memcmp(s->data, gguf_tensor_at(z, i)->data, s->nbytes) != 0;
    }
    cr_assert(other, "another seed wrote the same weights");
    gguf_close(x), gguf_close(y), gguf_close(z);
}

/* Qwen3.5: the same rules by name, attn_qkv counted as attn_v. 4 layers: more bits on 2
 * and 3; tied, so token_embd is the output (Q6_K); ssm_out's rows of 128 fall back. */
Test(synth_quant, qwen35_mix) {
    gguf_file *g = open_ok(write_ok(qwen35(), "Q4_K_M", "q35-Q4_K_M.gguf"));
    cr_assert_eq(u32_key(g, "general.file_type"), 15);
    expect_type(g, "token_embd.weight", 0, GGUF_T_Q6_K);
    cr_assert_null(gguf_find_tensor(g, "output.weight"));
    expect_type(g, "blk.%d.attn_qkv.weight", 0, GGUF_T_Q4_K);
    expect_type(g, "blk.%d.attn_v.weight", 1, GGUF_T_Q4_K);
    expect_type(g, "blk.%d.attn_qkv.weight", 2, GGUF_T_Q6_K);
    expect_type(g, "blk.%d.attn_v.weight", 3, GGUF_T_Q6_K);
    expect_type(g, "blk.%d.attn_gate.weight", 0, GGUF_T_Q4_K);
    expect_type(g, "blk.%d.ssm_alpha.weight", 0, GGUF_T_Q4_K);
    expect_type(g, "blk.%d.ssm_beta.weight", 2, GGUF_T_Q4_K);
    expect_type(g, "blk.%d.ssm_out.weight", 0, GGUF_T_Q5_0);
    expect_type(g, "blk.%d.ssm_conv1d.weight", 0, GGUF_T_F32);
    expect_type(g, "blk.%d.ssm_a", 2, GGUF_T_F32);
    expect_type(g, "blk.%d.attn_q.weight", 1, GGUF_T_Q4_K);
    expect_type(g, "blk.%d.ffn_down.weight", 2, GGUF_T_Q6_K);
    expect_type(g, "blk.%d.ffn_down.weight", 1, GGUF_T_Q4_K);
    expect_weights_decode(g);
    gguf_close(g);
}

/* The last position's logits after a short prompt, on the oracle in f32 mode. */
static float *logits_of(const char *path, uint32_t *n_vocab) {
    kiln_err e = {0};
    model *m = model_load(path, &e);
    cr_assert_not_null(m, "%s: %s", path, e.msg);
    orc_options o = {.mode = ORC_F32, .n_ctx = 32, .threads = 2};
    engine *en = orc_create(m, &o, &e);
    cr_assert_not_null(en, "%s", e.msg);
    *n_vocab = en->n_vocab;
    float *logits = malloc(en->n_vocab * sizeof *logits);
    const int32_t prompt[] = {256, 72, 101, 108, 300, 7};
    cr_assert_eq(engine_eval(en, prompt, 6, 0, logits, false, &e), 0, "%s", e.msg);
    for (uint32_t i = 0; i < en->n_vocab; i++) cr_assert(isfinite(logits[i]), "%s: logit %u is %g", path, i, logits[i]);
    engine_destroy(en);
    model_free(m);
    return logits;
}

static double correlation(const float *a, const float *b, uint32_t n) {
    double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
    for (uint32_t i = 0; i < n; i++) ma += a[i], mb += b[i];
    ma /= n, mb /= n;
    for (uint32_t i = 0; i < n; i++) {
        sab += (a[i] - ma) * (b[i] - mb), saa += (a[i] - ma) * (a[i] - ma), sbb += (b[i] - mb) * (b[i] - mb);
    }
    return sab / sqrt(saa * sbb);
}

/* Each file loads and runs, and its logits follow the unquantized model's. Correlations
 * measured: dense Q8_0 0.9999, Q4_K_M 0.981, Q4_0 0.971; odd Q4_K_M 0.994 (a third of it
 * F16 and Q8_0); qwen35 Q5_K_M 0.977. The bounds leave about twice the measured gap. */
Test(synth_quant, loads_and_runs_on_the_oracle, .timeout = 120) {
    const struct { synth_config (*cfg)(void); const char *tag, *mix; double min_corr; } w[] = {
        {dense, "dense", "Q8_0", 0.9997}, {dense, "dense", "Q4_K_M", 0.96}, {dense, "dense", "Q4_0", 0.94},
        {odd, "odd", "Q4_K_M", 0.988},    {qwen35, "q35", "Q5_K_M", 0.95},
    };
    for (size_t k = 0; k < sizeof w / sizeof w[0]; k++) {
        char a[48], b[48];
        snprintf(a, sizeof a, "run-%s.gguf", w[k].tag);
        snprintf(b, sizeof b, "run-%s-%s.gguf", w[k].tag, w[k].mix);
        uint32_t va, vb;
        float *plain = logits_of(write_ok(w[k].cfg(), NULL, a), &va), *q = logits_of(write_ok(w[k].cfg(), w[k].mix, b), &vb);
        cr_assert_eq(va, vb);
        double r = correlation(plain, q, va);
        cr_log_info("%s %s: logits correlate %.5f with the unquantized model's", w[k].tag, w[k].mix, r);
        cr_assert_gt(r, w[k].min_corr, "%s %s: correlation %.4f", w[k].tag, w[k].mix, r);
        free(plain), free(q);
    }
}

/* A hand-made mix that names no block type is refused by synth_check. */
Test(synth_quant, bad_mix_refused) {
    synth_config c = dense();
    kiln_err e = {0};
    c.quant = (quant_mix){"F16?", 15, GGUF_T_F16};
    cr_assert_eq(synth_check(&c, &e), -1);
    cr_assert(strstr(e.msg, "not a mix kiln writes"), "%s", e.msg);
    c.quant = (quant_mix){NULL, 15, GGUF_T_Q4_K};
    cr_assert_eq(synth_check(&c, &e), -1);
    c.quant = (quant_mix){"Q4_K_M", 15, GGUF_T_Q4_K};
    cr_assert_eq(synth_check(&c, &e), 0, "%s", e.msg);
}
