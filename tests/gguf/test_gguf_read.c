/* GGUF reading: real files, crafted files of every value type, and every validation
 * rule with the byte offset it must name. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "gguf/half.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gguf_file *open_buf(const tu_buf *b, kiln_err *err) { return gguf_open_memory(b->p, b->n, err); }

/* The buffer must be rejected with a message containing want (and "at byte N" when at >= 0). */
static void expect_reject(const tu_buf *b, const char *want, long at) {
    kiln_err err = {0};
    gguf_file *g = open_buf(b, &err);
    cr_assert_null(g, "accepted a file that should fail with '%s'", want);
    cr_assert(strstr(err.msg, want), "message '%s' lacks '%s'", err.msg, want);
    if (at >= 0) {
        char pre[64];
        snprintf(pre, sizeof pre, "at byte %ld: ", at);
        cr_assert(strncmp(err.msg, pre, strlen(pre)) == 0, "message '%s' should start with '%s'", err.msg, pre);
    }
    cr_assert_null(strchr(err.msg, '\n'), "message must be one line");
}

Test(gguf_read, stories260k_header_and_tensors) {
    kiln_err err;
    gguf_file *g = gguf_open(tu_data_file("models/stories260K.gguf"), &err);
    cr_assert_not_null(g, "%s", err.msg);
    cr_assert_eq(gguf_version(g), 3);
    cr_assert_eq(gguf_n_kv(g), 19);
    cr_assert_eq(gguf_n_tensors(g), 48);
    cr_assert_eq(gguf_alignment(g), 32);
    cr_assert_eq(gguf_data_offset(g), 14176);
    cr_assert_eq(gguf_file_size(g), 1185376);
    const gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
    cr_assert_not_null(t);
    cr_assert_eq(t->type, GGUF_T_F32);
    cr_assert_eq(t->n_dims, 2);
    cr_assert_eq(t->ne[0], 64);
    cr_assert_eq(t->ne[1], 512);
    cr_assert_eq(t->offset, 0);
    cr_assert_eq(t->nbytes, 64 * 512 * 4);
    const gguf_tensor *k = gguf_find_tensor(g, "blk.0.attn_k.weight");
    cr_assert_eq(k->ne[1], 32);
    cr_assert_eq(k->offset, 278784);
    cr_assert_null(gguf_find_tensor(g, "no.such.tensor"));
    /* the last tensor ends exactly at the end of the file */
    uint64_t end = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *x = gguf_tensor_at(g, i);
        if (x->offset + x->nbytes > end) end = x->offset + x->nbytes;
    }
    cr_assert_eq(gguf_data_offset(g) + end, gguf_file_size(g));
    gguf_close(g);
}

Test(gguf_read, stories260k_typed_lookups) {
    kiln_err err;
    gguf_file *g = gguf_open(tu_data_file("models/stories260K.gguf"), &err);
    cr_assert_not_null(g, "%s", err.msg);
    uint32_t u;
    cr_assert_eq(gguf_get_u32(g, "llama.block_count", &u, &err), 0);
    cr_assert_eq(u, 5);
    int64_t i64;
    cr_assert_eq(gguf_get_int(g, "tokenizer.ggml.seperator_token_id", &i64, &err), 0);
    cr_assert_eq(i64, 4294967295LL);
    float f;
    cr_assert_eq(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f, &err), 0);
    cr_assert_float_eq(f, 1e-5f, 1e-9f);
    gguf_str s;
    cr_assert_eq(gguf_get_str(g, "tokenizer.ggml.model", &s, &err), 0);
    cr_assert(gguf_str_eq(s, "llama"));
    const gguf_array *a;
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STR, &a, &err), 0);
    cr_assert_eq(a->n, 512);
    gguf_value e = gguf_arr_at(a, 1);
    cr_assert(gguf_str_eq(e.v.str, "<s>"));
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_VT_I32, &a, &err), 0);
    cr_assert_eq(gguf_arr_at(a, 0).v.i, 2);
    cr_assert_eq(gguf_arr_at(a, 3).v.i, 6);

    /* errors name the key and the types */
    cr_assert_eq(gguf_get_str(g, "llama.block_count", &s, &err), -1);
    cr_assert_str_eq(err.msg, "metadata key 'llama.block_count' has type u32, expected str");
    cr_assert_eq(gguf_get_u32(g, "llama.no_such_key", &u, &err), -1);
    cr_assert_str_eq(err.msg, "metadata key 'llama.no_such_key' is missing");
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.scores", GGUF_VT_I32, &a, &err), -1);
    cr_assert_str_eq(err.msg, "metadata key 'tokenizer.ggml.scores' is an array of f32, expected i32");
    cr_assert_eq(gguf_get_float(g, "tokenizer.ggml.model", (double *)&(double){0}, &err), -1);
    cr_assert(strstr(err.msg, "expected a float"));
    cr_assert_eq(gguf_get_int(g, "tokenizer.ggml.model", &i64, &err), -1);
    cr_assert(strstr(err.msg, "expected an integer"));
    gguf_close(g);
}

Test(gguf_read, stories260k_rows_convert) {
    kiln_err err;
    gguf_file *g = gguf_open(tu_data_file("models/stories260K.gguf"), &err);
    cr_assert_not_null(g, "%s", err.msg);
    const gguf_tensor *t = gguf_find_tensor(g, "blk.4.ffn_down.weight");
    cr_assert_not_null(t);
    uint64_t n = t->ne[0], rows = gguf_tensor_nrows(t);
    float *f = malloc(n * rows * sizeof *f);
    uint16_t *b = malloc(n * rows * 2), *h = malloc(n * rows * 2);
    cr_assert_eq(gguf_tensor_rows_f32(t, 0, rows, f, &err), 0);
    cr_assert_eq(memcmp(f, t->data, n * rows * 4), 0);
    cr_assert_eq(gguf_tensor_rows_bf16(t, 1, rows - 1, b, &err), 0);
    cr_assert_eq(gguf_tensor_rows_f16(t, 1, rows - 1, h, &err), 0);
    for (uint64_t i = 0; i < n * (rows - 1); i++) {
        cr_assert_eq(b[i], gguf_f32_to_bf16(f[n + i]));
        cr_assert_eq(h[i], gguf_f32_to_f16(f[n + i]));
    }
    cr_assert_eq(gguf_tensor_rows_f32(t, rows - 1, 2, f, &err), -1);
    cr_assert(strstr(err.msg, "out of range"));
    free(f);
    free(b);
    free(h);
    gguf_close(g);
}

static void open_and_check(const char *p, void *ctx) {
    (void)ctx;
    kiln_err err;
    gguf_file *g = gguf_open(p, &err);
    cr_assert_not_null(g, "%s: %s", p, err.msg);
    const gguf_array *toks;
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STR, &toks, &err), 0, "%s: %s", p, err.msg);
    cr_assert_gt(toks->n, 100);
    gguf_close(g);
}

Test(gguf_read, every_testdata_gguf_opens) {
    char p[1024];
    snprintf(p, sizeof p, "%s/tokenizer", tu_testdata());
    int n = tu_each_gguf(p, open_and_check, NULL);
    snprintf(p, sizeof p, "%s/models", tu_testdata());
    n += tu_each_gguf(p, open_and_check, NULL);
    cr_assert_geq(n, 13);
}

/* Every strict prefix of a real file's header is rejected cleanly, never read past. */
Test(gguf_read, every_truncation_rejected) {
    const char *path = tu_data_file("models/stories260K.gguf");
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    uint8_t *all = malloc(1185376);
    cr_assert_eq(fread(all, 1, 1185376, f), 1185376);
    fclose(f);
    for (size_t n = 0; n < 1185376; n += n < 14200 ? 1 : 4099) {
        uint8_t *copy = malloc(n ? n : 1); /* exact size so ASan sees any overread */
        memcpy(copy, all, n);
        kiln_err err;
        gguf_file *g = gguf_open_memory(copy, n, &err);
        cr_assert_null(g, "prefix of %zu bytes accepted", n);
        free(copy);
    }
    kiln_err err;
    gguf_file *g = gguf_open_memory(all, 1185376, &err);
    cr_assert_not_null(g, "%s", err.msg);
    gguf_close(g);
    free(all);
}

/* ---- crafted files ---------------------------------------------------------------------- */

Test(gguf_read, every_value_type_and_nested_arrays) {
    tu_buf b = {0};
    tu_header(&b, 2, 0, 14);
    uint8_t u8 = 200;
    int8_t i8 = -5;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    int32_t i32 = -7;
    float f32 = 1.5f;
    uint64_t u64 = 1ull << 40;
    int64_t i64 = -(1ll << 40);
    double f64 = 0.1;
    struct { const char *k; uint32_t t; const void *p; size_t n; } sc[] = {
        {"a.u8", 0, &u8, 1}, {"a.i8", 1, &i8, 1}, {"a.u16", 2, &u16, 2}, {"a.i16", 3, &i16, 2},
        {"a.u32", 4, &(uint32_t){4000000000u}, 4}, {"a.i32", 5, &i32, 4}, {"a.f32", 6, &f32, 4},
        {"a.bool", 7, &(uint8_t){1}, 1}, {"a.u64", 10, &u64, 8}, {"a.i64", 11, &i64, 8}, {"a.f64", 12, &f64, 8}};
    for (size_t i = 0; i < 11; i++) {
        tu_str(&b, sc[i].k);
        tu_u32(&b, sc[i].t);
        tu_put(&b, sc[i].p, sc[i].n);
    }
    tu_kv_str(&b, "a.str", "hé\nllo");
    /* arr[str, 3] */
    tu_str(&b, "a.strs");
    tu_u32(&b, 9);
    tu_u32(&b, 8);
    tu_u64(&b, 3);
    tu_str(&b, "x");
    tu_str(&b, "");
    tu_str(&b, "zz");
    /* arr[arr, 2]: [[1,2,3] as u16, [] as f32] */
    tu_str(&b, "a.nested");
    tu_u32(&b, 9);
    tu_u32(&b, 9);
    tu_u64(&b, 2);
    tu_u32(&b, 2);
    tu_u64(&b, 3);
    uint16_t e3[3] = {1, 2, 3};
    tu_put(&b, e3, 6);
    tu_u32(&b, 6);
    tu_u64(&b, 0);
    kiln_err err;
    gguf_file *g = open_buf(&b, &err);
    cr_assert_not_null(g, "%s", err.msg);
    cr_assert_eq(gguf_version(g), 2);
    cr_assert_eq(gguf_find(g, "a.u8")->v.u, 200);
    cr_assert_eq(gguf_find(g, "a.i8")->v.i, -5);
    cr_assert_eq(gguf_find(g, "a.u16")->v.u, 60000);
    cr_assert_eq(gguf_find(g, "a.i16")->v.i, -30000);
    cr_assert_eq(gguf_find(g, "a.u32")->v.u, 4000000000u);
    cr_assert_eq(gguf_find(g, "a.i32")->v.i, -7);
    cr_assert_eq(gguf_find(g, "a.f32")->v.f, 1.5);
    cr_assert_eq(gguf_find(g, "a.bool")->v.b, true);
    cr_assert_eq(gguf_find(g, "a.u64")->v.u, 1ull << 40);
    cr_assert_eq(gguf_find(g, "a.i64")->v.i, -(1ll << 40));
    cr_assert_eq(gguf_find(g, "a.f64")->v.f, 0.1);
    cr_assert(gguf_str_eq(gguf_find(g, "a.str")->v.str, "hé\nllo"));
    const gguf_array *a;
    cr_assert_eq(gguf_get_arr(g, "a.strs", GGUF_VT_STR, &a, &err), 0);
    cr_assert_eq(a->n, 3);
    cr_assert(gguf_str_eq(gguf_arr_at(a, 2).v.str, "zz"));
    cr_assert_eq(gguf_arr_at(a, 1).v.str.len, 0);
    cr_assert_eq(gguf_get_arr(g, "a.nested", GGUF_VT_ARR, &a, &err), 0);
    gguf_value in0 = gguf_arr_at(a, 0), in1 = gguf_arr_at(a, 1);
    cr_assert_eq(in0.v.arr.type, GGUF_VT_U16);
    cr_assert_eq(in0.v.arr.n, 3);
    cr_assert_eq(gguf_arr_at(&in0.v.arr, 2).v.u, 3);
    cr_assert_eq(in1.v.arr.type, GGUF_VT_F32);
    cr_assert_eq(in1.v.arr.n, 0);
    int64_t x;
    cr_assert_eq(gguf_get_int(g, "a.u16", &x, &err), 0);
    cr_assert_eq(x, 60000);
    cr_assert_eq(gguf_get_int(g, "a.i8", &x, &err), 0);
    cr_assert_eq(x, -5);
    gguf_close(g);
    tu_free(&b);
}

/* A valid file: two F32 tensors, alignment 32, with room to break one thing at a time. */
static void good_file(tu_buf *b, uint64_t off2) {
    tu_header(b, 3, 2, 1);
    tu_kv_u32(b, "x.n", 1);
    tu_tensor_info(b, "a", GGUF_T_F32, 3, 0, 0);
    tu_tensor_info(b, "b", GGUF_T_F32, 4, 2, off2);
    tu_pad(b, 32);
    float d[64] = {0};
    tu_put(b, d, off2 + 32);
}

Test(gguf_read, crafted_good_file) {
    tu_buf b = {0};
    good_file(&b, 32);
    kiln_err err;
    gguf_file *g = open_buf(&b, &err);
    cr_assert_not_null(g, "%s", err.msg);
    cr_assert_eq(gguf_find_tensor(g, "b")->nbytes, 32);
    gguf_close(g);
    tu_free(&b);
}

Test(gguf_read, reject_bad_magic_and_version) {
    tu_buf b = {0};
    tu_put(&b, "GGUG", 4);
    tu_u32(&b, 3);
    tu_u64(&b, 0);
    tu_u64(&b, 0);
    expect_reject(&b, "bad magic", 0);
    memcpy(b.p, "GGUF", 4);
    b.p[4] = 1;
    expect_reject(&b, "GGUF version 1 is not supported", 4);
    b.p[4] = 0, b.p[7] = 3; /* version 3 written big-endian */
    expect_reject(&b, "a big-endian file?", 4);
    b.p[4] = 3, b.p[7] = 0;
    b.n = 10;
    expect_reject(&b, "tensor count (8 bytes) runs past the end of the file", 8);
    b.n = 0;
    expect_reject(&b, "magic", 0);
    tu_free(&b);
}

Test(gguf_read, reject_counts_that_cannot_fit) {
    tu_buf b = {0};
    tu_header(&b, 3, 0, 1000);
    tu_kv_u32(&b, "x", 1);
    expect_reject(&b, "metadata count 1000 cannot fit", 16);
    tu_free(&b);
    tu_header(&b, 3, 1ull << 60, 0);
    expect_reject(&b, "tensor count 1152921504606846976 cannot fit", 8);
    tu_free(&b);
    /* array count beyond the file */
    tu_header(&b, 3, 0, 1);
    tu_str(&b, "arr");
    tu_u32(&b, 9);
    tu_u32(&b, 4);
    tu_u64(&b, 1ull << 62);
    tu_u32(&b, 1);
    expect_reject(&b, "array count 4611686018427387904 cannot fit", 24 + 11 + 4 + 4);
    tu_free(&b);
}

Test(gguf_read, reject_strings_past_the_end) {
    tu_buf b = {0};
    tu_header(&b, 3, 0, 1);
    tu_u64(&b, 1000); /* key length */
    tu_put(&b, "abcdefghijklmnopqrstuvwxyz", 26);
    expect_reject(&b, "metadata key length 1000 runs past the end", 24);
    tu_free(&b);
    tu_header(&b, 3, 0, 1);
    tu_str(&b, "k");
    tu_u32(&b, 8);
    tu_u64(&b, 99);
    tu_put(&b, "xy", 2);
    expect_reject(&b, "string value length 99 runs past the end", 24 + 9 + 4);
    tu_free(&b);
    tu_header(&b, 3, 0, 1);
    tu_str(&b, "k");
    tu_u32(&b, 9);
    tu_u32(&b, 8);
    tu_u64(&b, 2);
    tu_str(&b, "ok");
    tu_u64(&b, 1ull << 63);
    expect_reject(&b, "string in array length 9223372036854775808 runs past", 24 + 9 + 4 + 12 + 10);
    tu_free(&b);
}

Test(gguf_read, reject_bad_values) {
    tu_buf b = {0};
    tu_header(&b, 3, 0, 1);
    tu_str(&b, "k");
    tu_u32(&b, 13);
    tu_u32(&b, 0);
    expect_reject(&b, "unknown metadata value type 13 for key 'k'", 33);
    tu_free(&b);
    tu_header(&b, 3, 0, 1);
    tu_str(&b, "k");
    tu_u32(&b, 9);
    tu_u32(&b, 77);
    tu_u64(&b, 0);
    expect_reject(&b, "unknown array element type 77", 37);
    tu_free(&b);
    tu_header(&b, 3, 0, 1);
    tu_str(&b, "k");
    tu_u32(&b, 7);
    tu_put(&b, "\x02", 1);
    expect_reject(&b, "bool value 2 is neither 0 nor 1", 37);
    tu_free(&b);
    /* arrays of arrays nested past the limit */
    tu_header(&b, 3, 0, 1);
    tu_str(&b, "k");
    tu_u32(&b, 9);
    for (int i = 0; i < 12; i++) {
        tu_u32(&b, 9);
        tu_u64(&b, 1);
    }
    tu_u32(&b, 0);
    tu_u64(&b, 0);
    expect_reject(&b, "arrays nested deeper than 8 levels", -1);
    tu_free(&b);
}

Test(gguf_read, reject_duplicate_key_and_bad_alignment) {
    tu_buf b = {0};
    tu_header(&b, 3, 0, 2);
    tu_kv_u32(&b, "dup", 1);
    tu_kv_u32(&b, "dup", 2);
    expect_reject(&b, "duplicate metadata key 'dup'", 24 + 19);
    tu_free(&b);
    tu_header(&b, 3, 0, 1);
    tu_kv_str(&b, "general.alignment", "32");
    expect_reject(&b, "general.alignment has type str, expected u32", 24);
    tu_free(&b);
    tu_header(&b, 3, 0, 1);
    tu_kv_u32(&b, "general.alignment", 24);
    expect_reject(&b, "general.alignment 24 is not a power of two", 24);
    tu_free(&b);
    tu_header(&b, 3, 0, 1);
    tu_kv_u32(&b, "general.alignment", 0);
    expect_reject(&b, "not a power of two", 24);
    tu_free(&b);
}

/* Tensor info of a one-tensor file starts at byte 24 + 19 (after one u32 entry "x.n"). */
#define TI 43

static void one_tensor(tu_buf *b, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne, uint64_t off,
                       size_t data) {
    tu_header(b, 3, 1, 1);
    tu_kv_u32(b, "x.n", 1);
    tu_str(b, name);
    tu_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) tu_u64(b, ne[d]);
    tu_u32(b, type);
    tu_u64(b, off);
    tu_pad(b, 32);
    uint8_t *z = calloc(1, data + 1);
    tu_put(b, z, data);
    free(z);
}

Test(gguf_read, reject_bad_dims) {
    tu_buf b = {0};
    uint64_t ne[5] = {2, 2, 2, 2, 2};
    one_tensor(&b, "t", GGUF_T_F32, 5, ne, 0, 256);
    expect_reject(&b, "tensor 't' has n_dims 5 (must be 1..4)", TI + 9);
    tu_free(&b);
    one_tensor(&b, "t", GGUF_T_F32, 0, ne, 0, 256);
    expect_reject(&b, "has n_dims 0", TI + 9);
    tu_free(&b);
    uint64_t z[2] = {4, 0};
    one_tensor(&b, "t", GGUF_T_F32, 2, z, 0, 256);
    expect_reject(&b, "tensor 't' has a zero dimension ne[1]", TI + 9 + 4 + 8);
    tu_free(&b);
    uint64_t big[3] = {1ull << 32, 1ull << 31, 4};
    one_tensor(&b, "t", GGUF_T_F32, 3, big, 0, 256);
    expect_reject(&b, "dimensions overflow", TI + 9 + 4 + 8);
    tu_free(&b);
    uint64_t neg[1] = {1ull << 63};
    one_tensor(&b, "t", GGUF_T_F32, 1, neg, 0, 256);
    expect_reject(&b, "dimensions overflow", TI + 9 + 4);
    tu_free(&b);
    /* element count fits but the byte size does not */
    uint64_t bytes[2] = {1ull << 31, 1ull << 31};
    one_tensor(&b, "t", GGUF_T_F64, 2, bytes, 0, 256);
    expect_reject(&b, "byte size overflows", TI + 9);
    tu_free(&b);
}

Test(gguf_read, reject_bad_type_and_block) {
    tu_buf b = {0};
    uint64_t ne[1] = {32};
    one_tensor(&b, "t", 4, 1, ne, 0, 256); /* Q4_2: removed from ggml */
    expect_reject(&b, "tensor 't' has unknown type 4", TI + 9 + 4 + 8);
    tu_free(&b);
    one_tensor(&b, "t", 1000, 1, ne, 0, 256);
    expect_reject(&b, "unknown type 1000", TI + 21);
    tu_free(&b);
    uint64_t odd[1] = {33};
    one_tensor(&b, "t", GGUF_T_Q4_0, 1, odd, 0, 256);
    expect_reject(&b, "row length 33 is not a multiple of Q4_0's block of 32", TI + 9);
    tu_free(&b);
}

Test(gguf_read, reject_bad_names) {
    tu_buf b = {0};
    uint64_t ne[1] = {4};
    one_tensor(&b, "", GGUF_T_F32, 1, ne, 0, 256);
    expect_reject(&b, "tensor name length 0 is not in 1..63", TI);
    tu_free(&b);
    char lng[80];
    memset(lng, 'n', 70);
    lng[70] = 0;
    one_tensor(&b, lng, GGUF_T_F32, 1, ne, 0, 256);
    expect_reject(&b, "tensor name length 70", TI);
    tu_free(&b);
    /* duplicate tensor name */
    tu_header(&b, 3, 2, 1);
    tu_kv_u32(&b, "x.n", 1);
    tu_tensor_info(&b, "w", GGUF_T_F32, 8, 0, 0);
    size_t second = b.n;
    tu_tensor_info(&b, "w", GGUF_T_F32, 8, 0, 32);
    tu_pad(&b, 32);
    uint8_t z[64] = {0};
    tu_put(&b, z, 64);
    expect_reject(&b, "duplicate tensor name 'w'", (long)second);
    tu_free(&b);
}

Test(gguf_read, reject_data_misaligned_outside_overlapping) {
    tu_buf b = {0};
    uint64_t ne[1] = {8};
    one_tensor(&b, "t", GGUF_T_F32, 1, ne, 4, 64);
    expect_reject(&b, "tensor 't' offset 4 is not aligned to 32", TI + 9 + 4 + 8 + 4);
    tu_free(&b);
    one_tensor(&b, "t", GGUF_T_F32, 1, ne, 0, 31);
    expect_reject(&b, "tensor 't' data [0, +32) lies outside the file", TI);
    tu_free(&b);
    one_tensor(&b, "t", GGUF_T_F32, 1, ne, 1ull << 62, 64);
    expect_reject(&b, "lies outside the file", TI);
    tu_free(&b);
    /* second tensor starts inside the first */
    tu_header(&b, 3, 2, 1);
    tu_kv_u32(&b, "x.n", 1);
    tu_tensor_info(&b, "a", GGUF_T_F32, 16, 0, 0); /* 64 bytes */
    size_t second = b.n;
    tu_tensor_info(&b, "b", GGUF_T_F32, 8, 0, 32);
    tu_pad(&b, 32);
    uint8_t z[128] = {0};
    tu_put(&b, z, 128);
    expect_reject(&b, "tensor 'b' data at 32 overlaps tensor 'a' [0, +64)", (long)second);
    tu_free(&b);
    /* a tensor-less file may end right after its infos, but one with tensors needs data */
    good_file(&b, 32);
    b.n -= 40;
    expect_reject(&b, "lies outside the file", -1);
    tu_free(&b);
}

/* The fuzzer's hand-made seeds are valid files: every convertible type decodes. */
Test(gguf_read, fuzz_seeds_open_and_convert) {
    char p[1024];
    snprintf(p, sizeof p, "%s/tests/fuzz/seeds/all-convertible-types.gguf", KILN_SOURCE_DIR);
    kiln_err err;
    gguf_file *g = gguf_open(p, &err);
    cr_assert_not_null(g, "%s", err.msg);
    cr_assert_eq(gguf_n_tensors(g), 13);
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        float row[1024];
        cr_assert_eq(gguf_tensor_rows_f32(t, 1, 1, row, &err), 0, "%s: %s", t->name, err.msg);
    }
    gguf_close(g);
}

/* Crashers the fuzzer finds are kept in tests/fuzz/regressions (none so far) and the
 * seeds in tests/fuzz/seeds: every file there is handled, accepted or rejected, cleanly. */
static void open_each_file(const char *dir, int *n) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        kiln_err err;
        gguf_close(gguf_open(p, &err));
        (*n)++;
    }
    closedir(d);
}

Test(gguf_read, fuzz_regressions_and_seeds) {
    char dir[1024];
    int n = 0;
    snprintf(dir, sizeof dir, "%s/tests/fuzz/regressions", KILN_SOURCE_DIR);
    open_each_file(dir, &n);
    snprintf(dir, sizeof dir, "%s/tests/fuzz/seeds", KILN_SOURCE_DIR);
    open_each_file(dir, &n);
    cr_assert_gt(n, 0);
}
