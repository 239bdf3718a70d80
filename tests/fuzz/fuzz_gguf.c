/* libFuzzer target for the GGUF reader: any byte string must either be rejected with
 * a message or give a file whose every value and tensor row can be read in bounds. */
#include "base/error.h"
#include "gguf/gguf.h"

#include <stdlib.h>
#include <string.h>

static void touch_value(const gguf_value *v, unsigned *sink) {
    if (v->type == GGUF_VT_STR) {
        if (v->v.str.len) *sink += (unsigned char)v->v.str.ptr[v->v.str.len - 1];
    } else if (v->type == GGUF_VT_ARR) {
        for (uint64_t i = 0; i < v->v.arr.n; i++) {
            gguf_value e = gguf_arr_at(&v->v.arr, i);
            touch_value(&e, sink);
        }
    } else {
        *sink += (unsigned)v->v.u;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* A private copy: the reader must never touch bytes past size. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    kiln_err err;
    gguf_file *g = gguf_open_memory(copy, size, &err);
    if (!g) {
        free(copy);
        return 0;
    }
    unsigned sink = 0;
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        if (gguf_find(g, gguf_kv_key(g, i)) != gguf_kv_value(g, i)) abort();
        touch_value(gguf_kv_value(g, i), &sink);
    }
    int64_t x;
    (void)gguf_get_int(g, "general.alignment", &x, &err);
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (gguf_find_tensor(g, t->name) != t) abort();
        const gguf_type_info *ti = gguf_type_info_of(t->type);
        if (!ti->convertible || t->ne[0] > (1u << 16)) continue;
        float *row = malloc(t->ne[0] * sizeof *row);
        uint16_t *h = malloc(t->ne[0] * sizeof *h);
        uint64_t last = gguf_tensor_nrows(t) - 1;
        if (row && h) {
            gguf_tensor_rows_f32(t, 0, 1, row, &err);
            gguf_tensor_rows_bf16(t, last, 1, h, &err);
            gguf_tensor_rows_f16(t, last, 1, h, &err);
            uint32_t bits;
            memcpy(&bits, row, 4);
            sink += bits;
        }
        free(row);
        free(h);
    }
    gguf_close(g);
    free(copy);
    return (int)(sink & 0);
}
