/* Hyperparameters from metadata: llama.cpp's keys, defaults, and a clear error naming
 * the missing or wrong key. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct kv { const char *key; char kind; double v; const char *s; } kv; /* kind: u, f, s */

static gguf_file *make(const kv *kvs, size_t n) {
    const char *path = tu_tmp("arch.gguf");
    kiln_err err;
    gguf_writer *w = gguf_writer_create(path, &err);
    cr_assert_not_null(w);
    for (size_t i = 0; i < n; i++) {
        int rc = kvs[i].kind == 'u'   ? gguf_writer_add_u32(w, kvs[i].key, (uint32_t)kvs[i].v, &err)
                 : kvs[i].kind == 'f' ? gguf_writer_add_f32(w, kvs[i].key, (float)kvs[i].v, &err)
                                      : gguf_writer_add_str(w, kvs[i].key, kvs[i].s, &err);
        cr_assert_eq(rc, 0, "%s", err.msg);
    }
    cr_assert_eq(gguf_writer_finish(w, &err), 0, "%s", err.msg);
    gguf_writer_destroy(w);
    gguf_file *g = gguf_open(path, &err);
    cr_assert_not_null(g, "%s", err.msg);
    return g;
}

static const kv base[] = {
    {"general.architecture", 's', 0, "llama"},
    {"llama.block_count", 'u', 2, NULL},
    {"llama.embedding_length", 'u', 64, NULL},
    {"llama.attention.head_count", 'u', 4, NULL},
    {"llama.feed_forward_length", 'u', 96, NULL},
    {"llama.context_length", 'u', 128, NULL},
    {"llama.attention.layer_norm_rms_epsilon", 'f', 1e-5, NULL},
    {"llama.vocab_size", 'u', 300, NULL},
};
#define NBASE (sizeof base / sizeof base[0])

static void expect_error(const kv *kvs, size_t n, const char *want) {
    gguf_file *g = make(kvs, n);
    arch_hparams hp;
    kiln_err err;
    cr_assert_eq(arch_read_hparams(g, &hp, &err), -1, "accepted; wanted '%s'", want);
    cr_assert(strstr(err.msg, want), "'%s' lacks '%s'", err.msg, want);
    gguf_close(g);
}

Test(arch, defaults) {
    gguf_file *g = make(base, NBASE);
    arch_hparams hp;
    kiln_err err;
    cr_assert_eq(arch_read_hparams(g, &hp, &err), 0, "%s", err.msg);
    cr_assert_eq(hp.n_head_kv, 4, "kv heads default to heads");
    cr_assert_eq(hp.head_dim_k, 16, "head dim defaults to embedding / heads");
    cr_assert_eq(hp.n_rot, 16);
    cr_assert_eq(hp.rope_base, 10000.0f);
    cr_assert(!hp.rope_neox);
    cr_assert_eq(hp.rope_scaling, ROPE_SCALING_NONE);
    cr_assert_eq(hp.n_vocab, 300);
    gguf_close(g);
}

Test(arch, errors_name_the_key) {
    kv k[NBASE + 2];
    memcpy(k, base, sizeof base);
    expect_error(k + 1, NBASE - 1, "metadata key 'general.architecture' is missing");
    k[0].s = "mamba";
    expect_error(k, NBASE, "architecture 'mamba' is not supported");
    k[0].s = "qwen3"; /* every key still says llama. */
    expect_error(k, NBASE, "metadata key 'qwen3.block_count' is missing");
    k[0].s = "llama";
    k[2].kind = 's', k[2].s = "64";
    expect_error(k, NBASE, "metadata key 'llama.embedding_length' has type str, expected an integer");
    memcpy(k, base, sizeof base);
    k[NBASE] = (kv){"llama.attention.head_count_kv", 'u', 3, NULL};
    expect_error(k, NBASE + 1, "head_count 4 is not a multiple of head_count_kv 3");
    k[NBASE] = (kv){"llama.rope.dimension_count", 'u', 17, NULL};
    expect_error(k, NBASE + 1, "rope.dimension_count 17 is odd or exceeds the head size 16");
    k[NBASE] = (kv){"llama.rope.scaling.type", 's', 0, "weird"};
    expect_error(k, NBASE + 1, "rope scaling type 'weird' is not supported");
    k[NBASE] = (kv){"llama.rope.freq_base", 'f', NAN, NULL};
    expect_error(k, NBASE + 1, "out of range");
    k[6].v = 0;
    expect_error(k, NBASE, "out of range");
    memcpy(k, base, sizeof base);
    k[1].v = 0;
    expect_error(k, NBASE, "hyperparameter block_count is zero");
}

Test(arch, qwen_keys_and_scaling) {
    kv k[NBASE + 4];
    memcpy(k, base, sizeof base);
    for (size_t i = 1; i < NBASE; i++) {
        static char keys[NBASE][96];
        snprintf(keys[i], sizeof keys[i], "qwen2%s", strchr(base[i].key, '.'));
        k[i].key = keys[i];
    }
    k[0].s = "qwen2";
    k[NBASE] = (kv){"qwen2.attention.key_length", 'u', 24, NULL};
    k[NBASE + 1] = (kv){"qwen2.attention.value_length", 'u', 24, NULL};
    k[NBASE + 2] = (kv){"qwen2.rope.scaling.type", 's', 0, "yarn"};
    k[NBASE + 3] = (kv){"qwen2.rope.scaling.factor", 'f', 4, NULL};
    gguf_file *g = make(k, NBASE + 4);
    arch_hparams hp;
    kiln_err err;
    cr_assert_eq(arch_read_hparams(g, &hp, &err), 0, "%s", err.msg);
    cr_assert(hp.arch == ARCH_QWEN2 && hp.qkv_bias && hp.rope_neox);
    cr_assert_eq(hp.head_dim_k, 24);
    cr_assert_eq(hp.n_rot, 24);
    cr_assert_eq(hp.rope_scaling, ROPE_SCALING_YARN);
    cr_assert_eq(hp.rope_scale_factor, 4.0f);
    gguf_close(g);
    unlink(tu_tmp("arch.gguf"));
}
