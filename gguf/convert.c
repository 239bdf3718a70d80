/* Tensor rows as f32, bf16 or f16. Quantized data goes through f32 (exact: every
 * quantized value is an f32), then rounds to nearest even. */
#include "gguf/gguf.h"
#include "gguf/half.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_rows(const gguf_tensor *t, uint64_t row0, uint64_t nrows, kiln_err *err) {
    const gguf_type_info *ti = gguf_type_info_of(t->type);
    if (!ti || !ti->convertible) {
        if (err)
            kiln_fail(err, KILN_ERR_UNSUPPORTED, "tensor '%s': type %s cannot be converted", t->name,
                      ti ? ti->name : "?");
        return -1;
    }
    uint64_t n = gguf_tensor_nrows(t);
    if (row0 > n || nrows > n - row0) {
        if (err)
            kiln_fail(err, KILN_ERR_INVALID, "tensor '%s': rows [%llu, +%llu) out of range (%llu rows)", t->name,
                      (unsigned long long)row0, (unsigned long long)nrows, (unsigned long long)n);
        return -1;
    }
    return 0;
}

static const uint8_t *row_ptr(const gguf_tensor *t, uint64_t row) {
    const gguf_type_info *ti = gguf_type_info_of(t->type);
    return t->data + row * (t->ne[0] / ti->block) * ti->block_bytes;
}

int gguf_tensor_rows_f32(const gguf_tensor *t, uint64_t row0, uint64_t nrows, float *dst,
                         kiln_err *err) {
    if (check_rows(t, row0, nrows, err)) return -1;
    uint64_t n = t->ne[0];
    for (uint64_t r = 0; r < nrows; r++)
        gguf_decode_f32(t->type, row_ptr(t, row0 + r), dst + r * n, n);
    return 0;
}

typedef uint16_t (*round_fn)(float);

static int rows_16(const gguf_tensor *t, uint64_t row0, uint64_t nrows, uint16_t *dst, uint32_t same_type,
                   round_fn round16, kiln_err *err) {
    if (check_rows(t, row0, nrows, err)) return -1;
    uint64_t n = t->ne[0];
    if (t->type == same_type) {
        memcpy(dst, row_ptr(t, row0), nrows * n * 2);
        return 0;
    }
    float *tmp = malloc(n * sizeof *tmp);
    if (!tmp) {
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory converting tensor '%s'", t->name);
        return -1;
    }
    for (uint64_t r = 0; r < nrows; r++) {
        gguf_decode_f32(t->type, row_ptr(t, row0 + r), tmp, n);
        for (uint64_t i = 0; i < n; i++) dst[r * n + i] = round16(tmp[i]);
    }
    free(tmp);
    return 0;
}

static uint16_t to_bf16(float f) { return gguf_f32_to_bf16(f); }

int gguf_tensor_rows_bf16(const gguf_tensor *t, uint64_t row0, uint64_t nrows, uint16_t *dst,
                          kiln_err *err) {
    return rows_16(t, row0, nrows, dst, GGUF_T_BF16, to_bf16, err);
}

int gguf_tensor_rows_f16(const gguf_tensor *t, uint64_t row0, uint64_t nrows, uint16_t *dst,
                         kiln_err *err) {
    return rows_16(t, row0, nrows, dst, GGUF_T_F16, gguf_f32_to_f16, err);
}
