/* GGUF writing: read -> write -> read keeps metadata and tensor bytes identical; the
 * writer refuses what would make a bad file and never leaves a half-written one. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool value_eq(const gguf_value *a, const gguf_value *b) {
    if (a->type != b->type) return false;
    switch (a->type) {
    case GGUF_VT_STR: return a->v.str.len == b->v.str.len && !memcmp(a->v.str.ptr, b->v.str.ptr, a->v.str.len);
    case GGUF_VT_ARR:
        if (a->v.arr.type != b->v.arr.type || a->v.arr.n != b->v.arr.n) return false;
        for (uint64_t i = 0; i < a->v.arr.n; i++) {
            gguf_value x = gguf_arr_at(&a->v.arr, i), y = gguf_arr_at(&b->v.arr, i);
            if (!value_eq(&x, &y)) return false;
        }
        return true;
    case GGUF_VT_F32: case GGUF_VT_F64: return memcmp(&a->v.f, &b->v.f, sizeof a->v.f) == 0;
    case GGUF_VT_BOOL: return a->v.b == b->v.b;
    default: return a->v.u == b->v.u;
    }
}

/* Copies src to path with the streaming writer, feeding tensor bytes in odd pieces. */
static void copy_gguf(const gguf_file *src, const char *path) {
    kiln_err err;
    gguf_writer *w = gguf_writer_create(path, &err);
    cr_assert_not_null(w, "%s", err.msg);
    for (uint64_t i = 0; i < gguf_n_kv(src); i++)
        cr_assert_eq(gguf_writer_add_kv(w, gguf_kv_key(src, i), gguf_kv_value(src, i), &err), 0, "%s", err.msg);
    for (uint64_t i = 0; i < gguf_n_tensors(src); i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, &err), 0, "%s", err.msg);
    }
    cr_assert_eq(gguf_writer_begin_data(w, &err), 0, "%s", err.msg);
    for (uint64_t i = 0; i < gguf_n_tensors(src); i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        for (uint64_t o = 0; o < t->nbytes;) {
            uint64_t k = t->nbytes - o < 1237 ? t->nbytes - o : 1237;
            cr_assert_eq(gguf_writer_write(w, t->data + o, k, &err), 0, "%s", err.msg);
            o += k;
        }
    }
    cr_assert_eq(gguf_writer_finish(w, &err), 0, "%s", err.msg);
    gguf_writer_destroy(w);
}

static void assert_same(const gguf_file *a, const gguf_file *b) {
    cr_assert_eq(gguf_n_kv(a), gguf_n_kv(b));
    for (uint64_t i = 0; i < gguf_n_kv(a); i++) {
        cr_assert_str_eq(gguf_kv_key(a, i), gguf_kv_key(b, i));
        cr_assert(value_eq(gguf_kv_value(a, i), gguf_kv_value(b, i)), "value of %s differs", gguf_kv_key(a, i));
    }
    cr_assert_eq(gguf_n_tensors(a), gguf_n_tensors(b));
    for (uint64_t i = 0; i < gguf_n_tensors(a); i++) {
        const gguf_tensor *x = gguf_tensor_at(a, i), *y = gguf_tensor_at(b, i);
        cr_assert_str_eq(x->name, y->name);
        cr_assert_eq(x->type, y->type);
        cr_assert_eq(x->n_dims, y->n_dims);
        cr_assert_arr_eq(x->ne, y->ne, sizeof x->ne);
        cr_assert_eq(x->nbytes, y->nbytes);
        cr_assert_eq(memcmp(x->data, y->data, x->nbytes), 0, "bytes of %s differ", x->name);
    }
}

static bool files_equal(const char *p, const char *q) {
    FILE *a = fopen(p, "rb"), *b = fopen(q, "rb");
    bool eq = a && b;
    while (eq) {
        int x = fgetc(a), y = fgetc(b);
        if (x != y) eq = false;
        if (x == EOF || y == EOF) break;
    }
    if (a) fclose(a);
    if (b) fclose(b);
    return eq;
}

static void round_trip(const char *path) {
    kiln_err err;
    gguf_file *a = gguf_open(path, &err);
    cr_assert_not_null(a, "%s: %s", path, err.msg);
    const char *out = tu_tmp("rt.gguf");
    copy_gguf(a, out);
    gguf_file *b = gguf_open(out, &err);
    cr_assert_not_null(b, "%s: %s", out, err.msg);
    assert_same(a, b);
    /* ggml lays files out the way this writer does, so they match byte for byte */
    cr_assert(files_equal(path, out), "%s: rewritten file differs in bytes", path);
    gguf_close(a);
    gguf_close(b);
    unlink(out);
}

Test(gguf_write, round_trip_stories260k) { round_trip(tu_data_file("models/stories260K.gguf")); }

static void round_trip_cb(const char *path, void *ctx) {
    (void)ctx;
    round_trip(path);
}

Test(gguf_write, round_trip_every_vocab_gguf) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tokenizer", tu_testdata());
    cr_assert_geq(tu_each_gguf(dir, round_trip_cb, NULL), 10);
}

Test(gguf_write, custom_alignment_and_all_types) {
    const char *path = tu_tmp("align.gguf");
    kiln_err err;
    gguf_writer *w = gguf_writer_create(path, &err);
    cr_assert_not_null(w);
    cr_assert_eq(gguf_writer_add_u32(w, "general.alignment", 64, &err), 0);
    cr_assert_eq(gguf_writer_add_i32(w, "t.i32", -3, &err), 0);
    cr_assert_eq(gguf_writer_add_f32(w, "t.f32", 0.25f, &err), 0);
    cr_assert_eq(gguf_writer_add_bool(w, "t.b", true, &err), 0);
    cr_assert_eq(gguf_writer_add_str(w, "t.s", "text", &err), 0);
    int16_t shorts[3] = {-1, 0, 7};
    cr_assert_eq(gguf_writer_add_arr(w, "t.i16s", GGUF_VT_I16, shorts, 3, &err), 0);
    const char *strs[2] = {"a", "bc"};
    cr_assert_eq(gguf_writer_add_arr_str(w, "t.strs", strs, 2, &err), 0);
    gguf_value inner[2] = {{.type = GGUF_VT_ARR, .v.arr = {GGUF_VT_I16, 3, shorts}},
                           {.type = GGUF_VT_ARR, .v.arr = {GGUF_VT_STR, 0, NULL}}};
    gguf_value nested = {.type = GGUF_VT_ARR, .v.arr = {GGUF_VT_ARR, 2, inner}};
    cr_assert_eq(gguf_writer_add_kv(w, "t.nested", &nested, &err), 0);
    uint64_t ne1[1] = {5}, ne2[2] = {32, 3};
    cr_assert_eq(gguf_writer_add_tensor(w, "x", GGUF_T_F32, 1, ne1, &err), 0);
    cr_assert_eq(gguf_writer_add_tensor(w, "q", GGUF_T_Q8_0, 2, ne2, &err), 0);
    cr_assert_eq(gguf_writer_begin_data(w, &err), 0);
    float xs[5] = {1, 2, 3, 4, 5};
    uint8_t q[3 * 34];
    for (size_t i = 0; i < sizeof q; i++) q[i] = (uint8_t)(i * 7);
    /* one piece spanning both tensors */
    uint8_t all[20 + sizeof q];
    memcpy(all, xs, 20);
    memcpy(all + 20, q, sizeof q);
    cr_assert_eq(gguf_writer_write(w, all, sizeof all, &err), 0, "%s", err.msg);
    cr_assert_eq(gguf_writer_finish(w, &err), 0, "%s", err.msg);
    gguf_writer_destroy(w);

    gguf_file *g = gguf_open(path, &err);
    cr_assert_not_null(g, "%s", err.msg);
    cr_assert_eq(gguf_alignment(g), 64);
    cr_assert_eq(gguf_data_offset(g) % 64, 0);
    cr_assert_eq(gguf_find_tensor(g, "q")->offset, 64);
    cr_assert_eq(memcmp(gguf_find_tensor(g, "q")->data, q, sizeof q), 0);
    cr_assert_eq(memcmp(gguf_find_tensor(g, "x")->data, xs, 20), 0);
    cr_assert_eq(gguf_find(g, "t.i32")->v.i, -3);
    cr_assert_eq(gguf_find(g, "t.f32")->v.f, 0.25);
    const gguf_value *nv = gguf_find(g, "t.nested");
    cr_assert(value_eq(nv, &nested));
    /* the file ends padded to the alignment after the last tensor, as ggml writes it */
    cr_assert_eq(gguf_file_size(g), gguf_data_offset(g) + 64 + 128);
    gguf_close(g);
}

Test(gguf_write, refuses_bad_use_and_leaves_no_half_file) {
    const char *path = tu_tmp("bad.gguf");
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    kiln_err err;
    gguf_writer *w = gguf_writer_create(path, &err);
    cr_assert_not_null(w);
    cr_assert_eq(gguf_writer_add_u32(w, "k", 1, &err), 0);
    cr_assert_eq(gguf_writer_add_u32(w, "k", 2, &err), -1);
    cr_assert_str_eq(err.msg, "duplicate metadata key 'k'");
    cr_assert_eq(gguf_writer_add_u32(w, "general.alignment", 48, &err), -1);
    uint64_t ne[1] = {8}, odd[1] = {33}, zero[1] = {0};
    cr_assert_eq(gguf_writer_add_tensor(w, "t", GGUF_T_F32, 1, ne, &err), 0);
    cr_assert_eq(gguf_writer_add_tensor(w, "t", GGUF_T_F32, 1, ne, &err), -1);
    cr_assert_str_eq(err.msg, "duplicate tensor name 't'");
    cr_assert_eq(gguf_writer_add_tensor(w, "u", GGUF_T_Q4_0, 1, odd, &err), -1);
    cr_assert_eq(gguf_writer_add_tensor(w, "v", GGUF_T_F32, 1, zero, &err), -1);
    cr_assert_eq(gguf_writer_add_tensor(w, "w", 4, 1, ne, &err), -1);
    cr_assert_eq(gguf_writer_add_u32(w, "general.alignment", 64, &err), -1, "alignment after tensors");
    cr_assert_eq(gguf_writer_write(w, "x", 1, &err), -1, "data before begin_data");
    cr_assert_eq(gguf_writer_begin_data(w, &err), 0);
    cr_assert_eq(gguf_writer_add_u32(w, "late", 1, &err), -1);
    float half[4] = {0};
    cr_assert_eq(gguf_writer_write(w, half, sizeof half, &err), 0);
    cr_assert_eq(access(tmp, F_OK), 0, "writes go to PATH.tmp");
    cr_assert_eq(gguf_writer_finish(w, &err), -1);
    cr_assert_str_eq(err.msg, "tensor 't' got 16 of its 32 bytes");
    gguf_writer_destroy(w);
    cr_assert_neq(access(path, F_OK), 0, "no file after a failed write");
    cr_assert_neq(access(tmp, F_OK), 0, "temporary file removed");

    w = gguf_writer_create(path, &err);
    cr_assert_eq(gguf_writer_add_tensor(w, "t", GGUF_T_F32, 1, ne, &err), 0);
    cr_assert_eq(gguf_writer_begin_data(w, &err), 0);
    float too_much[9] = {0};
    cr_assert_eq(gguf_writer_write(w, too_much, sizeof too_much, &err), -1);
    cr_assert_str_eq(err.msg, "more tensor data written than the tensors hold");
    gguf_writer_destroy(w);
    cr_assert_neq(access(tmp, F_OK), 0);

    cr_assert_null(gguf_writer_create("/nonexistent-dir/x.gguf", &err));
    cr_assert(strstr(err.msg, "cannot create"));
}
