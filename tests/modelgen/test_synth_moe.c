/* kiln synth's mixture-of-experts presets (qwen3moe): qwen3-30b-a3b's published shape;
 * qwen3moe-tiny-odd written to a file has, for a layer and outside the layers, the tensor
 * names, order of dimensions, types and metadata keys of testdata's qwen3moe-tiny.gguf
 * (llama.cpp's converter's layout), loads through model_load with its experts, and the
 * oracle generates from it deterministically with logits that tell tokens apart; the
 * mixes quantize its 3-D expert tensors; bad expert counts are refused. */
#include "base/error.h"
#include "gguf/gguf.h"
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

#define REF "models/qwen3moe-tiny.gguf"

static const char *write_preset(const char *preset, const char *name, uint64_t seed, uint32_t dtype, const char *mix) {
    synth_config c;
    cr_assert_eq(synth_preset(preset, &c), 0);
    c.seed = seed, c.dtype = dtype, c.threads = 2;
    kiln_err e = {0};
    if (mix) {
        /* widths of 256 so that the K mixes take every matrix */
        c.n_embd = 256, c.n_head = 4, c.head_dim = 64, c.n_ff_exp = 256, c.n_expert = 4;
        cr_assert_eq(quant_mix_parse(mix, &c.quant, &e), 0, "%s", e.msg);
    }
    cr_assert_eq(synth_check(&c, &e), 0, "%s", e.msg);
    tok_vocab v;
    tok_vocab_init(&v);
    cr_assert_eq(tok_vocab_bytelevel(c.n_vocab, &v, &e), 0, "%s", e.msg);
    const char *path = tu_tmp(name);
    synth_stats st;
    cr_assert_eq(synth_write(&c, &v, NULL, path, &st, &e), 0, "%s", e.msg);
    tok_vocab_free(&v);
    return path;
}

static gguf_file *open_or_fail(const char *path) {
    kiln_err e = {0};
    gguf_file *g = gguf_open(path, &e);
    cr_assert_not_null(g, "%s: %s", path, e.msg);
    return g;
}

Test(synth_moe, published_preset) {
    synth_config c;
    cr_assert_eq(synth_preset("qwen3-30b-a3b", &c), 0);
    /* Qwen/Qwen3-30B-A3B's config.json (modelgen/synth.c) */
    cr_assert(c.arch == ARCH_QWEN3MOE && c.n_layer == 48 && c.n_embd == 2048 && c.n_head == 32 && c.n_head_kv == 4 &&
              c.head_dim == 128 && c.n_ff == 6144 && c.n_vocab == 151936 && !c.tied);
    cr_assert(c.n_expert == 128 && c.n_expert_used == 8 && c.n_ff_exp == 768);
    kiln_err e = {0};
    cr_assert_eq(synth_check(&c, &e), 0, "%s", e.msg);
}

Test(synth_moe, bad_expert_counts_refused) {
    synth_config c;
    kiln_err e = {0};
    const uint32_t bad[][3] = {{0, 1, 64}, {4, 0, 64}, {4, 5, 64}, {4, 2, 0}, {ARCH_MAX_EXPERTS + 1, 2, 64}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(synth_preset("qwen3moe-tiny-odd", &c), 0);
        c.n_expert = bad[i][0], c.n_expert_used = bad[i][1], c.n_ff_exp = bad[i][2];
        cr_assert_neq(synth_check(&c, &e), 0, "case %zu accepted", i);
        cr_assert(strstr(e.msg, "experts"), "%s", e.msg);
    }
    /* llama-quantize's rules for 8 experts are not quant_mix's */
    cr_assert_eq(synth_preset("qwen3moe-tiny-odd", &c), 0);
    c.n_expert = 8;
    cr_assert_eq(quant_mix_parse("Q4_K_M", &c.quant, &e), 0, "%s", e.msg);
    cr_assert_neq(synth_check(&c, &e), 0);
    cr_assert(strstr(e.msg, "8 experts"), "%s", e.msg);
}

/* Tensor i's name with its layer number dropped ("blk.N." -> ""), or NULL outside layer l. */
static const char *in_layer(const char *name, uint32_t l) {
    char pre[16];
    snprintf(pre, sizeof pre, "blk.%u.", l);
    return strncmp(name, pre, strlen(pre)) ? NULL : name + strlen(pre);
}

/* Layer l's tensors of g: each suffix's type and dimensions, checked against the rule its
 * name has in llama.cpp's qwen3moe loader; returns how many. */
static uint32_t check_layer(const gguf_file *g, const arch_hparams *hp, uint32_t l, char names[][48], uint32_t *types) {
    uint32_t n = 0;
    uint64_t d = hp->n_embd, q = (uint64_t)hp->n_head * hp->head_dim_k, kv = (uint64_t)hp->n_head_kv * hp->head_dim_k;
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        const char *s = in_layer(t->name, l);
        if (!s) continue;
        const struct { const char *name; uint32_t dims; uint64_t ne[3]; } rules[] = {
            {"attn_norm.weight", 1, {d, 1, 1}},           {"attn_q.weight", 2, {d, q, 1}},
            {"attn_k.weight", 2, {d, kv, 1}},             {"attn_v.weight", 2, {d, kv, 1}},
            {"attn_output.weight", 2, {q, d, 1}},         {"attn_q_norm.weight", 1, {hp->head_dim_k, 1, 1}},
            {"attn_k_norm.weight", 1, {hp->head_dim_k, 1, 1}}, {"ffn_norm.weight", 1, {d, 1, 1}},
            {"ffn_gate_inp.weight", 2, {d, hp->n_expert, 1}},
            {"ffn_gate_exps.weight", 3, {d, hp->n_ff_exp, hp->n_expert}},
            {"ffn_up_exps.weight", 3, {d, hp->n_ff_exp, hp->n_expert}},
            {"ffn_down_exps.weight", 3, {hp->n_ff_exp, d, hp->n_expert}},
        };
        size_t r = 0;
        while (r < sizeof rules / sizeof rules[0] && strcmp(rules[r].name, s)) r++;
        cr_assert_lt(r, sizeof rules / sizeof rules[0], "%s: no qwen3moe rule for it", t->name);
        cr_assert_eq(t->n_dims, rules[r].dims, "%s", t->name);
        for (uint32_t k = 0; k < rules[r].dims; k++) cr_assert_eq(t->ne[k], rules[r].ne[k], "%s ne[%u]", t->name, k);
        cr_assert_lt(n, 16);
        snprintf(names[n], 48, "%s", s);
        types[n++] = t->type;
    }
    return n;
}

Test(synth_moe, tiny_odd_has_llamacpp_layout) {
    const char *path = write_preset("qwen3moe-tiny-odd", "moe-f16.gguf", 42, GGUF_T_F16, NULL);
    gguf_file *ref = open_or_fail(tu_data_file(REF)), *g = open_or_fail(path);
    arch_hparams rh, sh;
    kiln_err e = {0};
    cr_assert_eq(arch_read_hparams(ref, &rh, &e), 0, "%s", e.msg);
    cr_assert_eq(arch_read_hparams(g, &sh, &e), 0, "%s", e.msg);
    cr_assert_eq(sh.arch, ARCH_QWEN3MOE);
    cr_assert(sh.n_layer == 3 && sh.n_embd == 200 && sh.n_head == 5 && sh.n_head_kv == 1 && sh.head_dim_k == 40);
    cr_assert(sh.n_expert == 6 && sh.n_expert_used == 2 && sh.n_ff_exp == 72);
    char rn[16][48], sn[16][48];
    uint32_t rt[16], st[16];
    uint32_t nr = check_layer(ref, &rh, 0, rn, rt);
    for (uint32_t l = 0; l < sh.n_layer; l++) {
        uint32_t ns = check_layer(g, &sh, l, sn, st);
        cr_assert_eq(ns, nr, "layer %u: %u tensors, the reference's layers %u", l, ns, nr);
        for (uint32_t i = 0; i < nr; i++) {
            uint32_t j = 0;
            while (j < ns && strcmp(sn[j], rn[i])) j++;
            cr_assert_lt(j, ns, "layer %u has no %s", l, rn[i]);
            cr_assert_eq(st[j], rt[i], "%s: %s, the reference's %s", rn[i], gguf_type_info_of(st[j])->name,
                         gguf_type_info_of(rt[i])->name);
        }
    }
    /* the keys llama.cpp's qwen3moe loader reads for the experts, as u32 */
    const char *keys[] = {"qwen3moe.expert_count", "qwen3moe.expert_used_count", "qwen3moe.expert_feed_forward_length"};
    for (size_t i = 0; i < 3; i++) {
        const gguf_value *v = gguf_find(g, keys[i]), *r = gguf_find(ref, keys[i]);
        cr_assert(v && r && v->type == r->type && v->type == GGUF_VT_U32, "%s", keys[i]);
    }
    gguf_close(ref);
    gguf_close(g);
}

/* Greedy tokens from a prompt on the oracle, and the spread of the first step's logits. */
static void generate(const char *path, int32_t *out, int n, double *sd) {
    kiln_err e = {0};
    model *m = model_load(path, &e);
    cr_assert_not_null(m, "%s", e.msg);
    orc_options o = {.mode = ORC_CONTRACT, .dtype = 0, .n_ctx = 64, .threads = 2};
    engine *en = orc_create(m, &o, &e);
    cr_assert_not_null(en, "%s", e.msg);
    uint32_t V = en->n_vocab;
    float *logits = malloc(V * sizeof *logits);
    const int32_t prompt[] = {256, 72, 101, 108, 108, 111, 300, 451, 640, 7};
    uint32_t np = sizeof prompt / sizeof prompt[0], pos = np;
    cr_assert_eq(engine_eval(en, prompt, np, 0, logits, false, &e), 0, "%s", e.msg);
    for (int s = 0; s < n; s++) {
        if (s == 0) {
            double sum = 0, sum2 = 0;
            for (uint32_t i = 0; i < V; i++) {
                cr_assert(isfinite(logits[i]), "logit %u is %g", i, logits[i]);
                sum += logits[i], sum2 += (double)logits[i] * logits[i];
            }
            *sd = sqrt(sum2 / V - (sum / V) * (sum / V));
        }
        int32_t best = 0;
        for (uint32_t i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = (int32_t)i;
        out[s] = best;
        cr_assert_eq(engine_eval(en, &best, 1, pos++, logits, false, &e), 0, "%s", e.msg);
    }
    free(logits);
    engine_destroy(en);
    model_free(m);
}

Test(synth_moe, tiny_odd_runs_on_the_oracle_deterministically, .timeout = 60) {
    const char *a = write_preset("qwen3moe-tiny-odd", "moe-a.gguf", 7, GGUF_T_BF16, NULL);
    const char *b = write_preset("qwen3moe-tiny-odd", "moe-b.gguf", 7, GGUF_T_BF16, NULL);
    enum { N = 8 };
    int32_t ta[N], tb[N];
    double sda, sdb;
    generate(a, ta, N, &sda);
    generate(b, tb, N, &sdb);
    cr_assert_arr_eq(ta, tb, sizeof ta, "the same seed gave other tokens");
    cr_assert_eq(sda, sdb);
    cr_assert(sda > 0.05, "logits std %g: flat", sda);
    for (int i = 0; i < N; i++) cr_assert(ta[i] >= 0 && ta[i] < 1000);
}

Test(synth_moe, mixes_quantize_the_experts, .timeout = 60) {
    const char *path = write_preset("qwen3moe-tiny-odd", "moe-q4km.gguf", 3, GGUF_T_BF16, "Q4_K_M");
    gguf_file *g = open_or_fail(path);
    uint32_t exps = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (strstr(t->name, "_exps.")) {
            exps++;
            cr_assert(gguf_type_is_block_quant(t->type), "%s stayed %s", t->name, gguf_type_info_of(t->type)->name);
        }
        if (strstr(t->name, "ffn_gate_inp")) cr_assert_eq(t->type, GGUF_T_F32, "the router is quantized");
    }
    cr_assert_eq(exps, 9);
    gguf_close(g);
    int32_t t[4];
    double sd;
    generate(path, t, 4, &sd);
    cr_assert(sd > 0.05, "logits std %g", sd);
}
