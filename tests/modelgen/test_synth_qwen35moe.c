/* qwen35moe (Qwen3.5's hybrid trunk with a mixture of experts and a shared expert, llama.cpp's
 * src/models/qwen35moe.cpp): kiln synth's qwen3.5-35b-a3b has the published shape;
 * qwen35moe-tiny-odd written to a file has llama.cpp's names, shapes, types and keys, loads
 * through model_load with its shared expert, and the oracle takes a prompt at once exactly as
 * token by token in both modes; a shared expert of another width than the experts' runs on
 * the oracle and is refused by name on the GPU path. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/engine.h"
#include "model/model.h"
#include "modelgen/synth.h"
#include "modelgen/vocab.h"
#include "oracle/oracle.h"
#include "plan/plan_internal.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static const char *write_config(synth_config *c, const char *name) {
    c->threads = 2;
    kiln_err e = {0};
    cr_assert_eq(synth_check(c, &e), 0, "%s", e.msg);
    tok_vocab v;
    tok_vocab_init(&v);
    cr_assert_eq(tok_vocab_bytelevel(c->n_vocab, &v, &e), 0, "%s", e.msg);
    const char *path = tu_tmp(name);
    synth_stats st;
    cr_assert_eq(synth_write(c, &v, NULL, path, &st, &e), 0, "%s", e.msg);
    tok_vocab_free(&v);
    return path;
}

static const char *write_tiny(const char *name) {
    synth_config c;
    cr_assert_eq(synth_preset("qwen35moe-tiny-odd", &c), 0);
    return write_config(&c, name);
}

static void expect_tensor(const gguf_file *g, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1,
                          uint64_t ne2) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    cr_assert_not_null(t, "%s is missing", name);
    cr_assert_eq(t->type, type, "%s has type %u", name, t->type);
    cr_assert(t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == ne2,
              "%s has shape [%llu, %llu, %llu], expected [%llu, %llu, %llu]", name, (unsigned long long)t->ne[0],
              (unsigned long long)t->ne[1], (unsigned long long)t->ne[2], (unsigned long long)ne0,
              (unsigned long long)ne1, (unsigned long long)ne2);
}

Test(synth_qwen35moe, published_preset) {
    synth_config c;
    cr_assert_eq(synth_preset("qwen3.5-35b-a3b", &c), 0);
    /* Qwen/Qwen3.5-35B-A3B's text_config (modelgen/synth.c) */
    cr_assert(c.arch == ARCH_QWEN35MOE && c.n_layer == 40 && c.n_embd == 2048 && c.n_head == 16 && c.n_head_kv == 2 &&
              c.head_dim == 256 && c.n_vocab == 248320 && !c.tied && c.full_attn_interval == 4);
    cr_assert(c.ssm_k_heads == 16 && c.ssm_v_heads == 32 && c.ssm_state == 128 && c.ssm_conv_kernel == 4);
    cr_assert(c.n_expert == 256 && c.n_expert_used == 8 && c.n_ff_exp == 512 && c.n_ff_shexp == 512);
    cr_assert(c.n_rot == 64 && c.rope_sections[0] == 11 && c.rope_sections[1] == 11 && c.rope_sections[2] == 10);
    kiln_err e = {0};
    cr_assert_eq(synth_check(&c, &e), 0, "%s", e.msg);
    c.n_ff_shexp = 0; /* qwen35moe's shared expert is not optional */
    cr_assert_eq(synth_check(&c, &e), -1);
}

Test(synth_qwen35moe, tiny_odd_has_llamacpp_layout_and_loads) {
    const char *path = write_tiny("q35moe-layout.gguf");
    kiln_err e = {0};
    gguf_file *g = gguf_open(path, &e);
    cr_assert_not_null(g, "%s", e.msg);
    const uint32_t BF = GGUF_T_BF16, F = GGUF_T_F32;
    for (int l = 0; l < 4; l++) { /* DeltaNet at 0, 1, 3; full attention at 2 (interval 3) */
        char n[96];
#define T(suffix, type, a, b, c) snprintf(n, sizeof n, "blk.%d." suffix, l), expect_tensor(g, n, type, a, b, c)
        T("ffn_gate_inp.weight", F, 200, 6, 1);
        T("ffn_gate_exps.weight", BF, 200, 72, 6);
        T("ffn_up_exps.weight", BF, 200, 72, 6);
        T("ffn_down_exps.weight", BF, 72, 200, 6);
        T("ffn_gate_inp_shexp.weight", F, 200, 1, 1);
        T("ffn_gate_shexp.weight", BF, 200, 72, 1);
        T("ffn_up_shexp.weight", BF, 200, 72, 1);
        T("ffn_down_shexp.weight", BF, 72, 200, 1);
        T("post_attention_norm.weight", F, 200, 1, 1);
        if (l == 2)
            T("attn_q.weight", BF, 200, 2 * 5 * 44, 1);
        else
            T("attn_qkv.weight", BF, 200, 2 * 2 * 28 + 6 * 28, 1);
#undef T
        snprintf(n, sizeof n, "blk.%d.ffn_gate.weight", l);
        cr_assert_null(gguf_find_tensor(g, n), "%s: a dense feed-forward beside the experts", n);
    }
    int64_t v;
    const char *keys[][2] = {{"qwen35moe.expert_count", "6"},
                             {"qwen35moe.expert_used_count", "2"},
                             {"qwen35moe.expert_feed_forward_length", "72"},
                             {"qwen35moe.expert_shared_feed_forward_length", "72"},
                             {"qwen35moe.full_attention_interval", "3"}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        cr_assert_eq(gguf_get_int(g, keys[i][0], &v, &e), 0, "%s: %s", keys[i][0], e.msg);
        cr_assert_eq(v, atoll(keys[i][1]), "%s = %lld", keys[i][0], (long long)v);
    }
    cr_assert_not_null(gguf_find(g, "qwen35moe.rope.dimension_sections"));
    gguf_close(g);

    model *m = model_load(path, &e);
    cr_assert_not_null(m, "%s", e.msg);
    cr_assert(m->hp.arch == ARCH_QWEN35MOE && arch_is_qwen35(m->hp.arch) && m->hp.n_recurrent == 3 &&
              !m->hp.recurrent[2]);
    cr_assert(m->hp.n_expert == 6 && m->hp.n_expert_used == 2 && m->hp.n_ff_exp == 72 && m->hp.n_ff_shexp == 72);
    for (uint32_t l = 0; l < 4; l++) {
        const model_layer *L = &m->layers[l];
        cr_assert(L->ffn_gate_exps && L->ffn_gate_shexp && L->ffn_up_shexp && L->ffn_down_shexp &&
                      L->ffn_gate_inp_shexp && !L->w_gate,
                  "layer %u", l);
        uint64_t r0;
        cr_assert_eq(model_expert_matrix(L, 2, 5, &r0), L->ffn_down_exps);
        cr_assert_eq(r0, 5 * 200);
        cr_assert_eq(model_expert_matrix(L, 1, 6, &r0), L->ffn_up_shexp, "expert n_expert is the shared one");
        cr_assert_eq(r0, 0);
    }
    model_free(m);
}

/* The oracle takes a prompt at once exactly as token by token (the shared expert over all
 * the block's rows, the routed ones gathered per expert), in both modes */
Test(synth_qwen35moe, oracle_prompt_at_once_equals_steps, .timeout = 60) {
    const char *path = write_tiny("q35moe-steps.gguf");
    static const int32_t toks[10] = {3, 400, 17, 256, 99, 640, 12, 300, 5, 77};
    for (int mode = 0; mode < 2; mode++) {
        kiln_err err = {0};
        model *m = model_load(path, &err);
        cr_assert_not_null(m, "%s", err.msg);
        orc_options o = {.mode = mode ? ORC_CONTRACT : ORC_F32, .dtype = GGUF_T_BF16, .n_ctx = 64, .threads = 2};
        engine *a = orc_create(m, &o, &err), *b = orc_create(m, &o, &err);
        cr_assert(a && b, "%s", err.msg);
        uint32_t nv = a->n_vocab;
        float *la = malloc(10 * nv * sizeof *la), *lb = malloc(nv * sizeof *lb);
        cr_assert_eq(engine_eval(a, toks, 10, 0, la, true, &err), 0, "%s", err.msg);
        for (uint32_t t = 0; t < 10; t++) {
            cr_assert_eq(engine_eval(b, &toks[t], 1, t, lb, false, &err), 0, "%s", err.msg);
            cr_assert_eq(memcmp(la + (size_t)t * nv, lb, nv * sizeof *lb), 0, "mode %d token %u", mode, t);
        }
        free(la), free(lb);
        engine_destroy(a), engine_destroy(b);
        model_free(m);
    }
}

/* A shared expert of its own width: the oracle runs it; the GPU path, which takes it as one
 * more expert, refuses by name */
Test(synth_qwen35moe, shared_expert_of_another_width, .timeout = 60) {
    synth_config c;
    cr_assert_eq(synth_preset("qwen35moe-tiny-odd", &c), 0);
    c.n_ff_shexp = 40;
    const char *path = write_config(&c, "q35moe-wide.gguf");
    kiln_err err = {0};
    model *m = model_load(path, &err);
    cr_assert_not_null(m, "%s", err.msg);
    cr_assert_eq(m->hp.n_ff_shexp, 40);
    orc_options o = {.mode = ORC_CONTRACT, .dtype = GGUF_T_BF16, .n_ctx = 64, .threads = 2};
    engine *e = orc_create(m, &o, &err);
    cr_assert_not_null(e, "%s", err.msg);
    int32_t toks[4] = {1, 2, 3, 4};
    float *l = malloc(e->n_vocab * sizeof *l);
    cr_assert_eq(engine_eval(e, toks, 4, 0, l, false, &err), 0, "%s", err.msg);
    for (uint32_t v = 0; v < e->n_vocab; v++) cr_assert(l[v] == l[v], "logit %u is NaN", v);
    free(l);
    engine_destroy(e);
    plan_shape s;
    cr_assert_eq(plan_shape_of(m, GGUF_T_BF16, 64, 64, &s, &err), -1);
    cr_assert(strstr(err.msg, "shared expert 40 wide beside experts 72 wide"), "%s", err.msg);
    model_free(m);
}
