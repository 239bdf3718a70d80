/* Qwen3.5 (qwen35) in the model room: qwen35-tiny's hyperparameters and tensors as
 * llama.cpp lays them out, and copies of it with one key or tensor broken, each refused
 * with a message naming what is wrong (or, for nextn blocks, loaded without them). */
#include "base/error.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/model.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define TINY "models/qwen35-tiny.gguf"

Test(arch, qwen35_tiny_hparams) {
    kiln_err err = {0};
    gguf_file *g = gguf_open(tu_data_file(TINY), &err);
    cr_assert_not_null(g, "%s", err.msg);
    arch_hparams hp;
    cr_assert_eq(arch_read_hparams(g, &hp, &err), 0, "%s", err.msg);
    cr_assert_eq(hp.arch, ARCH_QWEN35);
    cr_assert_str_eq(arch_name(hp.arch), "qwen35");
    cr_assert_eq(hp.n_layer, 8);
    cr_assert_eq(hp.n_nextn, 0);
    cr_assert(hp.n_embd == 128 && hp.n_ff == 256 && hp.n_vocab == 512 && hp.n_ctx_train == 4096);
    cr_assert(hp.n_head == 4 && hp.n_head_kv == 2 && hp.head_dim_k == 32 && hp.head_dim_v == 32);
    cr_assert_eq(hp.n_rot, 16);
    cr_assert_eq(hp.rope_base, 1e6f);
    cr_assert(hp.rope_neox && hp.qk_norm && !hp.qkv_bias && hp.tied_output);
    cr_assert_eq(hp.rms_eps, 1e-6f);
    cr_assert(hp.ssm_conv_kernel == 4 && hp.ssm_state == 32 && hp.ssm_k_heads == 2 && hp.ssm_v_heads == 4 &&
              hp.ssm_inner == 128);
    uint32_t want_sec[4] = {3, 3, 2, 0};
    cr_assert_arr_eq(hp.rope_sections, want_sec, sizeof want_sec);
    for (uint32_t l = 0; l < 8; l++) cr_assert_eq(hp.recurrent[l], l != 3 && l != 7, "layer %u", l);
    cr_assert_eq(hp.n_recurrent, 6);
    gguf_close(g);
}

Test(model, qwen35_tiny_tensors_by_kind) {
    kiln_err err = {0};
    model *m = model_load(tu_data_file(TINY), &err);
    cr_assert_not_null(m, "%s", err.msg);
    cr_assert_eq(m->file_dtype, GGUF_T_F16);
    cr_assert_eq(m->output, m->tok_embd, "tied output");
    const model_layer *dn = &m->layers[0], *at = &m->layers[3];
    cr_assert(dn->ssm_qkv && dn->ssm_z && dn->ssm_conv && dn->ssm_dt_bias && dn->ssm_a && dn->ssm_beta &&
              dn->ssm_alpha && dn->ssm_norm && dn->ssm_out);
    cr_assert(!dn->wq && !dn->wk && !dn->wv && !dn->wo && !dn->q_norm);
    cr_assert_eq(dn->ssm_qkv->ne[1], 256);
    cr_assert(dn->ssm_conv->ne[0] == 4 && dn->ssm_conv->ne[1] == 256);
    cr_assert_str_eq(dn->ffn_norm->name, "blk.0.post_attention_norm.weight");
    cr_assert(at->wq && at->wk && at->wv && at->wo && at->q_norm && at->k_norm && !at->ssm_qkv);
    cr_assert_eq(at->wq->ne[1], 256, "attn_q holds query and gate");
    cr_assert_eq(at->wk->ne[1], 64);
    model_free(m);
}

/* A copy of qwen35-tiny with edits: a key dropped or replaced (u32, or an i32 array
 * when arr_n > 0), a tensor dropped or given another shape of the same size. */
typedef struct edit {
    const char *drop_key, *set_key;
    uint32_t set_u32;
    const int32_t *arr;
    uint32_t arr_n;
    const char *drop_tensor, *reshape_tensor;
    uint64_t ne0, ne1;
} edit;

static const char *variant(const edit *ed) {
    kiln_err err = {0};
    gguf_file *src = gguf_open(tu_data_file(TINY), &err);
    cr_assert_not_null(src, "%s", err.msg);
    const char *path = tu_tmp("qwen35-variant.gguf");
    gguf_writer *w = gguf_writer_create(path, &err);
    cr_assert_not_null(w, "%s", err.msg);
    for (uint64_t i = 0; i < gguf_n_kv(src); i++) {
        const char *key = gguf_kv_key(src, i);
        if (ed->drop_key && !strcmp(key, ed->drop_key)) continue;
        if (ed->set_key && !strcmp(key, ed->set_key)) continue;
        cr_assert_eq(gguf_writer_add_kv(w, key, gguf_kv_value(src, i), &err), 0, "%s", err.msg);
    }
    if (ed->set_key) {
        int rc = ed->arr_n ? gguf_writer_add_arr(w, ed->set_key, GGUF_VT_I32, ed->arr, ed->arr_n, &err)
                           : gguf_writer_add_u32(w, ed->set_key, ed->set_u32, &err);
        cr_assert_eq(rc, 0, "%s", err.msg);
    }
    for (uint64_t i = 0; i < gguf_n_tensors(src); i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        if (ed->drop_tensor && !strcmp(t->name, ed->drop_tensor)) continue;
        uint64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (ed->reshape_tensor && !strcmp(t->name, ed->reshape_tensor)) ne[0] = ed->ne0, ne[1] = ed->ne1;
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne, &err), 0, "%s", err.msg);
    }
    cr_assert_eq(gguf_writer_begin_data(w, &err), 0, "%s", err.msg);
    for (uint64_t i = 0; i < gguf_n_tensors(src); i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        if (ed->drop_tensor && !strcmp(t->name, ed->drop_tensor)) continue;
        cr_assert_eq(gguf_writer_write(w, t->data, t->nbytes, &err), 0, "%s", err.msg);
    }
    cr_assert_eq(gguf_writer_finish(w, &err), 0, "%s", err.msg);
    gguf_writer_destroy(w);
    gguf_close(src);
    return path;
}

static void expect_refused(const edit *ed, const char *want) {
    kiln_err err = {0};
    model *m = model_load(variant(ed), &err);
    cr_assert_null(m, "accepted; wanted '%s'", want);
    cr_assert(strstr(err.msg, want), "'%s' lacks '%s'", err.msg, want);
}

Test(model, qwen35_broken_copies_name_the_problem, .timeout = 60) {
    /* the copy itself loads */
    kiln_err err = {0};
    model *m = model_load(variant(&(edit){0}), &err);
    cr_assert_not_null(m, "%s", err.msg);
    model_free(m);

    expect_refused(&(edit){.drop_key = "qwen35.ssm.state_size"}, "metadata key 'qwen35.ssm.state_size' is missing");
    expect_refused(&(edit){.drop_key = "qwen35.rope.dimension_sections"},
                   "metadata key 'qwen35.rope.dimension_sections' is missing");
    expect_refused(&(edit){.set_key = "qwen35.ssm.group_count", .set_u32 = 3},
                   "ssm.time_step_rank 4 (value heads) is not a multiple of ssm.group_count 3");
    expect_refused(&(edit){.set_key = "qwen35.ssm.inner_size", .set_u32 = 96},
                   "ssm.inner_size 96 is not ssm.state_size 32 x ssm.time_step_rank 4");
    expect_refused(&(edit){.set_key = "qwen35.full_attention_interval", .set_u32 = 0}, "full_attention_interval is zero");
    expect_refused(&(edit){.set_key = "qwen35.nextn_predict_layers", .set_u32 = 8}, "leaves no trunk");
    static const int32_t three[3] = {3, 3, 2};
    expect_refused(&(edit){.set_key = "qwen35.rope.dimension_sections", .arr = three, .arr_n = 3},
                   "'qwen35.rope.dimension_sections' has 3 elements, expected 4");
    static const int32_t short_layers[4] = {1, 1, 1, 0};
    expect_refused(&(edit){.set_key = "qwen35.attention.recurrent_layers", .arr = short_layers, .arr_n = 4},
                   "'qwen35.attention.recurrent_layers' has 4 elements, expected 8");
    /* layer 2 said to be attention: its attention tensors are missing */
    static const int32_t moved[8] = {1, 1, 0, 0, 1, 1, 1, 0};
    expect_refused(&(edit){.set_key = "qwen35.attention.recurrent_layers", .arr = moved, .arr_n = 8},
                   "tensor 'blk.2.attn_q.weight' is missing");
    expect_refused(&(edit){.drop_tensor = "blk.5.ssm_a"}, "tensor 'blk.5.ssm_a' is missing");
    expect_refused(&(edit){.drop_tensor = "blk.3.attn_q_norm.weight"}, "tensor 'blk.3.attn_q_norm.weight' is missing");
    expect_refused(&(edit){.drop_tensor = "blk.1.post_attention_norm.weight"},
                   "tensor 'blk.1.post_attention_norm.weight' is missing");
    expect_refused(&(edit){.reshape_tensor = "blk.0.ssm_conv1d.weight", .ne0 = 8, .ne1 = 128},
                   "tensor 'blk.0.ssm_conv1d.weight' has shape [8, 128, 1, 1], expected [4, 256]");
    expect_refused(&(edit){.reshape_tensor = "blk.7.attn_q.weight", .ne0 = 256, .ne1 = 128},
                   "tensor 'blk.7.attn_q.weight' has shape [256, 128, 1, 1], expected [128, 256]");
}

Test(model, qwen35_recurrent_layers_and_nextn_blocks, .timeout = 60) {
    /* the per-layer key, given as the interval would have it, changes nothing */
    static const int32_t same[8] = {1, 1, 1, 0, 1, 1, 1, 0};
    kiln_err err = {0};
    model *m = model_load(variant(&(edit){.set_key = "qwen35.attention.recurrent_layers", .arr = same, .arr_n = 8}),
                          &err);
    cr_assert_not_null(m, "%s", err.msg);
    cr_assert(m->hp.recurrent[2] && !m->hp.recurrent[3] && m->hp.n_recurrent == 6);
    model_free(m);
    /* one nextn block: block_count still 8, the trunk is 7 layers and blk.7 is never read */
    m = model_load(variant(&(edit){.set_key = "qwen35.nextn_predict_layers", .set_u32 = 1}), &err);
    cr_assert_not_null(m, "%s", err.msg);
    cr_assert_eq(m->hp.n_layer, 7);
    cr_assert_eq(m->hp.n_nextn, 1);
    model_free(m);
    unlink(tu_tmp("qwen35-variant.gguf"));
}
