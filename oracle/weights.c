#include "oracle/weights.h"

#include "base/error.h"
#include "gguf/half.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* f16 -> f32 by table: the oracle widens every weight on every use. */
static float f16_table[65536];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;
static void f16_init(void) {
    for (uint32_t i = 0; i < 65536; i++) f16_table[i] = gguf_f16_to_f32((uint16_t)i);
}

int orc_weight_load(orc_weight *w, const gguf_tensor *t, uint32_t want, bool keep, kiln_err *err) {
    pthread_once(&f16_once, f16_init);
    memset(w, 0, sizeof *w);
    w->cols = t->ne[0];
    w->rows = t->ne[1] * t->ne[2] * t->ne[3];
    if (keep && gguf_type_is_block_quant(t->type)) {
        const gguf_type_info *ti = gguf_type_info_of(t->type);
        if (w->cols % ti->block)
            return kiln_fail(err, KILN_ERR_INVALID, "tensor '%s': rows of %llu are not whole %s blocks of %u", t->name,
                             (unsigned long long)w->cols, ti->name, ti->block);
        w->type = t->type;
        w->row_bytes = w->cols / ti->block * ti->block_bytes;
        w->data = t->data;
        return 0;
    }
    if (t->type == want || (want == GGUF_T_F32 && (t->type == GGUF_T_BF16 || t->type == GGUF_T_F16))) {
        w->type = t->type;
        w->data = t->data;
        return 0;
    }
    size_t esz = want == GGUF_T_F32 ? 4 : 2;
    w->owned = malloc(w->rows * w->cols * esz);
    if (!w->owned) {
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory converting tensor '%s' (%llu bytes)", t->name,
                  (unsigned long long)(w->rows * w->cols * esz));
        return -1;
    }
    kiln_err ge;
    int rc = want == GGUF_T_F32    ? gguf_tensor_rows_f32(t, 0, w->rows, w->owned, &ge)
             : want == GGUF_T_BF16 ? gguf_tensor_rows_bf16(t, 0, w->rows, w->owned, &ge)
                                   : gguf_tensor_rows_f16(t, 0, w->rows, w->owned, &ge);
    if (rc) {
        kiln_err_wrap(err, &ge, NULL);
        orc_weight_free(w);
        return -1;
    }
    w->type = want;
    w->data = w->owned;
    return 0;
}

void orc_weight_free(orc_weight *w) {
    free(w->owned);
    memset(w, 0, sizeof *w);
}

void orc_weight_row(const orc_weight *w, uint64_t r, float *out) {
    uint64_t n = w->cols;
    if (w->row_bytes) {
        gguf_decode_f32(w->type, (const uint8_t *)w->data + r * w->row_bytes, out, n);
    } else if (w->type == GGUF_T_F32) {
        memcpy(out, (const float *)w->data + r * n, n * sizeof *out);
    } else if (w->type == GGUF_T_BF16) {
        const uint16_t *p = (const uint16_t *)w->data + r * n;
        for (uint64_t i = 0; i < n; i++) out[i] = gguf_bf16_to_f32(p[i]);
    } else {
        const uint16_t *p = (const uint16_t *)w->data + r * n;
        for (uint64_t i = 0; i < n; i++) out[i] = f16_table[p[i]];
    }
}

/* Eight running sums (a fixed order, the same on every run) let the compiler use vector
 * registers without reassociating anything. */
#define DOT(LOAD)                                                                   \
    float acc[8] = {0};                                                             \
    uint64_t i = 0;                                                                 \
    for (; i + 8 <= n; i += 8)                                                      \
        for (int k = 0; k < 8; k++) acc[k] += LOAD(i + k) * x[i + k];               \
    float s = 0;                                                                    \
    for (; i < n; i++) s += LOAD(i) * x[i];                                         \
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + s;

/* A quantized row: decoded a piece at a time (its exact f32 values), the same eight sums
 * running over the whole row as in DOT. */
#define PIECE 256
static float quant_dot(const orc_weight *w, uint64_t r, const float *x) {
    const gguf_type_info *ti = gguf_type_info_of(w->type);
    const uint8_t *row = (const uint8_t *)w->data + r * w->row_bytes;
    float acc[8] = {0}, v[PIECE];
    for (uint64_t c = 0; c < w->cols; c += PIECE) { /* cols is whole blocks; a block divides PIECE */
        uint64_t n = w->cols - c < PIECE ? w->cols - c : PIECE;
        gguf_decode_f32(w->type, row + c / ti->block * ti->block_bytes, v, n);
        for (uint64_t i = 0; i < n; i += 8)
            for (int k = 0; k < 8; k++) acc[k] += v[i + k] * x[c + i + k];
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

float orc_weight_dot(const orc_weight *w, uint64_t r, const float *x) {
    uint64_t n = w->cols;
    if (w->row_bytes) {
        return quant_dot(w, r, x);
    } else if (w->type == GGUF_T_F32) {
        const float *p = (const float *)w->data + r * n;
#define LF32(j) p[j]
        DOT(LF32)
    } else if (w->type == GGUF_T_BF16) {
        const uint16_t *p = (const uint16_t *)w->data + r * n;
#define LBF16(j) gguf_bf16_to_f32(p[j])
        DOT(LBF16)
    } else {
        const uint16_t *p = (const uint16_t *)w->data + r * n;
#define LF16(j) f16_table[p[j]]
        DOT(LF16)
    }
}
