/* kiln's quantizer (gguf_quantize_rows): every type it writes, on random and edge inputs,
 * decoded back through gguf_decode_f32 within a per-type error bound; the same bytes every
 * time and block by block; codes and scales that gguf_block_unpack reads back to the
 * decoded values; the K types' scale search better than plain max-abs scaling; bad input
 * refused; and llama-quantize's own files (testdata's dense-TYPE.gguf, quantized from
 * dense-F16.gguf without an importance matrix) reproduced byte for byte.
 *
 * The error is the relative RMS error sqrt(sum (y - x)^2 / sum x^2). Each bound is the
 * worst measured over 200 random draws at 1, 3 and 16 blocks, times 1.5. For normal
 * data the figures sit where the bits put them: a b-bit code over a block's range has a
 * step of range / (2^b - 1) and an RMS error of step / sqrt(12), e.g. Q8_0 about 0.5%,
 * Q4_K 7%, Q2_K 30%. Tiny values (1e-4) have larger bounds for the 6- and 8-bit types: their
 * f16 scales fall among f16's subnormals, whose spacing (6e-8) is then a large part of
 * the scale. */
#include "base/error.h"
#include "base/rng.h"
#include "gguf/gguf.h"
#include "gguf/half.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bound {
    uint32_t type;
    double normal;  /* normal data, N(0, 1) or N(0, 0.02), all-negative, offset */
    double outlier; /* one element of 100 per block in N(0, 1) */
    double tiny;    /* N(0, 1e-4) */
} bound;

/* measured worst x 1.5 (see the top of the file) */
static const bound bounds[] = {
    {GGUF_T_Q4_0, 0.19, 0.12, 0.18},   {GGUF_T_Q4_1, 0.16, 0.23, 0.17},  {GGUF_T_Q5_0, 0.098, 0.11, 0.082},
    {GGUF_T_Q5_1, 0.086, 0.11, 0.079}, {GGUF_T_Q8_0, 0.0125, 0.024, 0.033}, {GGUF_T_Q2_K, 0.54, 0.50, 0.52},
    {GGUF_T_Q3_K, 0.27, 0.13, 0.26},   {GGUF_T_Q4_K, 0.12, 0.11, 0.15},  {GGUF_T_Q5_K, 0.063, 0.09, 0.18},
    {GGUF_T_Q6_K, 0.031, 0.06, 0.30},
};
#define N_TYPES (sizeof bounds / sizeof bounds[0])

static const gguf_type_info *info(uint32_t t) { return gguf_type_info_of(t); }

/* Quantize into an exact-size buffer followed by guard bytes that must stay untouched. */
static uint8_t *quantize(uint32_t type, const float *x, uint64_t n) {
    size_t nb = n / info(type)->block * info(type)->block_bytes;
    uint8_t *q = malloc(nb + 16);
    cr_assert_not_null(q);
    memset(q + nb, 0xa5, 16);
    kiln_err e = {0};
    cr_assert_eq(gguf_quantize_rows(type, x, q, n, &e), 0, "%s: %s", info(type)->name, e.msg);
    for (int i = 0; i < 16; i++) cr_assert_eq(q[nb + i], 0xa5, "%s wrote past its blocks", info(type)->name);
    return q;
}

/* Relative RMS error of x quantized to type and decoded back; *worst_abs the largest
 * element error. */
static double rel_rms(uint32_t type, const float *x, uint64_t n, double *worst_abs) {
    uint8_t *q = quantize(type, x, n);
    float *y = malloc(n * sizeof *y);
    cr_assert_eq(gguf_decode_f32(type, q, y, n), 0);
    double se = 0, ss = 0, wa = 0;
    for (uint64_t i = 0; i < n; i++) {
        cr_assert(isfinite(y[i]), "%s: element %llu decodes to %g", info(type)->name, (unsigned long long)i, y[i]);
        double d = (double)y[i] - x[i];
        se += d * d, ss += (double)x[i] * x[i];
        wa = fabs(d) > wa ? fabs(d) : wa;
    }
    if (worst_abs) *worst_abs = wa;
    free(q);
    free(y);
    return ss > 0 ? sqrt(se / ss) : sqrt(se);
}

static float *normal(uint64_t n, uint64_t seed, float mean, float std) {
    float *x = malloc(n * sizeof *x);
    cr_assert_not_null(x);
    rng r;
    rng_seed(&r, seed, 18, n);
    rng_normal_fill(&r, x, n, mean, std);
    return x;
}

static const uint64_t block_counts[] = {1, 3, 16};

Test(quantize, types_it_writes) {
    for (size_t i = 0; i < N_TYPES; i++) cr_assert(gguf_type_quantizable(bounds[i].type), "%s", info(bounds[i].type)->name);
    const uint32_t no[] = {GGUF_T_F32, GGUF_T_F16, GGUF_T_BF16, GGUF_T_Q8_1, GGUF_T_Q8_K, GGUF_T_IQ4_NL, GGUF_T_IQ2_XXS,
                           GGUF_T_MXFP4, 4, 999};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) cr_assert(!gguf_type_quantizable(no[i]), "type %u", no[i]);
}

Test(quantize, random_data_within_bounds) {
    for (size_t t = 0; t < N_TYPES; t++) {
        const bound *b = &bounds[t];
        for (size_t k = 0; k < 3; k++) {
            uint64_t n = block_counts[k] * info(b->type)->block;
            float *x[4] = {normal(n, 1, 0, 1), normal(n, 2, 0, 0.02f), normal(n, 3, 0, 1), normal(n, 4, 3.0f, 0.5f)};
            for (uint64_t i = 0; i < n; i++) x[2][i] = -fabsf(x[2][i]) - 0.5f; /* negative only */
            const char *what[4] = {"N(0,1)", "N(0,0.02)", "negative", "N(3,0.5)"};
            for (int c = 0; c < 4; c++) {
                double e = rel_rms(b->type, x[c], n, NULL);
                cr_assert_lt(e, b->normal, "%s %s x%llu blocks: relative RMS error %.4f over %.4f", info(b->type)->name,
                             what[c], (unsigned long long)block_counts[k], e, b->normal);
                free(x[c]);
            }
        }
    }
}

/* One large value per block sets the scale; it must come back nearly exact, the rest
 * within the outlier bound. */
Test(quantize, one_large_outlier) {
    for (size_t t = 0; t < N_TYPES; t++) {
        const bound *b = &bounds[t];
        const uint32_t blk = info(b->type)->block;
        for (size_t k = 0; k < 3; k++) {
            uint64_t n = block_counts[k] * blk;
            float *x = normal(n, 5 + k, 0, 1);
            for (uint64_t i = 7; i < n; i += blk) x[i] = 100.0f;
            double e = rel_rms(b->type, x, n, NULL);
            cr_assert_lt(e, b->outlier, "%s: relative RMS error %.4f over %.4f", info(b->type)->name, e, b->outlier);
            uint8_t *q = quantize(b->type, x, n);
            float *y = malloc(n * sizeof *y);
            gguf_decode_f32(b->type, q, y, n);
            for (uint64_t i = 7; i < n; i += blk)
                cr_assert(fabsf(y[i] - 100.0f) < 1.0f, "%s: the outlier comes back as %g", info(b->type)->name, y[i]);
            free(q);
            free(y);
            free(x);
        }
    }
}

Test(quantize, tiny_values) {
    for (size_t t = 0; t < N_TYPES; t++) {
        const bound *b = &bounds[t];
        uint64_t n = 3 * info(b->type)->block;
        float *x = normal(n, 9, 0, 1e-4f);
        double e = rel_rms(b->type, x, n, NULL);
        cr_assert_lt(e, b->tiny, "%s: relative RMS error %.4f over %.4f", info(b->type)->name, e, b->tiny);
        /* below f16's smallest subnormal every scale is 0: values vanish, nothing blows up */
        for (uint64_t i = 0; i < n; i++) x[i] *= 1e-26f;
        double worst;
        rel_rms(b->type, x, n, &worst);
        cr_assert_lt(worst, 1e-28, "%s: error %g on values of 1e-30", info(b->type)->name, worst);
        free(x);
    }
}

Test(quantize, zeros_and_constants) {
    for (size_t t = 0; t < N_TYPES; t++) {
        const uint32_t type = bounds[t].type;
        uint64_t n = 2 * info(type)->block;
        float *x = calloc(n, sizeof *x);
        double worst;
        rel_rms(type, x, n, &worst);
        cr_assert_eq(worst, 0.0, "%s: zeros come back off by %g", info(type)->name, worst);
        /* a constant block is one code at one scale: only the f16 rounding of the scales
         * (2^-11 relative) and 6-bit sub-scales separate it from exact */
        const float consts[] = {0.75f, -1.5f, 40.0f};
        for (size_t c = 0; c < 3; c++) {
            for (uint64_t i = 0; i < n; i++) x[i] = consts[c];
            double e = rel_rms(type, x, n, NULL);
            cr_assert_lt(e, 1e-3, "%s: constant %g off by %.2e", info(type)->name, consts[c], e);
        }
        free(x);
    }
}

/* Values already on a type's grid (a power-of-two scale, the extreme value on the lowest
 * code) come back exactly: the codes are packed where the decoder reads them. */
Test(quantize, grid_values_exact) {
    const struct { uint32_t type; int lo, hi; } g[] = {{GGUF_T_Q4_0, -8, 7}, {GGUF_T_Q5_0, -16, 15}, {GGUF_T_Q8_0, -127, 127}};
    for (size_t t = 0; t < 3; t++) {
        float x[64], y[64];
        for (int i = 0; i < 64; i++) x[i] = 0.125f * (float)(g[t].lo + (i * 7 + i / 32) % (g[t].hi - g[t].lo + 1));
        x[5] = x[40] = 0.125f * (float)g[t].lo; /* each block's extreme */
        uint8_t *q = quantize(g[t].type, x, 64);
        gguf_decode_f32(g[t].type, q, y, 64);
        for (int i = 0; i < 64; i++) cr_assert_eq(y[i], x[i], "%s element %d: %g for %g", info(g[t].type)->name, i, y[i], x[i]);
        free(q);
    }
}

/* gguf_block_unpack's codes and scales give the decoder's values bit for bit (gguf.h's
 * s * (code - offset) + m), and every code fits its width. */
Test(quantize, unpack_reads_the_same_values) {
    for (size_t t = 0; t < N_TYPES; t++) {
        const uint32_t type = bounds[t].type, blk = info(type)->block;
        uint64_t n = 4 * blk;
        float *x = normal(n, 11, 0.1f, 1), *y = malloc(n * sizeof *y);
        uint8_t *q = quantize(type, x, n);
        gguf_decode_f32(type, q, y, n);
        int bits = type == GGUF_T_Q8_0 ? 8 : type == GGUF_T_Q2_K ? 2 : type == GGUF_T_Q3_K ? 3
                 : type == GGUF_T_Q6_K ? 6 : type == GGUF_T_Q5_0 || type == GGUF_T_Q5_1 || type == GGUF_T_Q5_K ? 5 : 4;
        for (uint64_t k = 0; k < n / blk; k++) {
            gguf_qblock u;
            cr_assert_eq(gguf_block_unpack(type, q + k * info(type)->block_bytes, &u), 0);
            float d = gguf_f16_to_f32(u.d), dm = gguf_f16_to_f32(u.dm);
            for (uint32_t j = 0; j < blk; j++) {
                cr_assert_lt(u.code[j], 1u << bits, "%s code %u", info(type)->name, u.code[j]);
                int sub = blk == 256 ? (int)j / (type == GGUF_T_Q4_K || type == GGUF_T_Q5_K ? 32 : 16) : 0;
                float s = d, m = 0;
                int off = 0;
                switch (type) {
                case GGUF_T_Q4_0: off = 8; break;
                case GGUF_T_Q5_0: off = 16; break;
                case GGUF_T_Q8_0: off = 128; break;
                case GGUF_T_Q4_1: case GGUF_T_Q5_1: m = dm; break;
                case GGUF_T_Q3_K: s = d * (float)u.sc[sub], off = 4; break;
                case GGUF_T_Q6_K: s = d * (float)u.sc[sub], off = 32; break;
                default: s = d * (float)u.sc[sub], m = -(dm * (float)u.mn[sub]); break; /* Q2_K, Q4_K, Q5_K */
                }
                float v = s * (float)((int)u.code[j] - off) + m;
                cr_assert_eq(v, y[k * blk + j], "%s block %llu element %u: unpack %g, decode %g", info(type)->name,
                             (unsigned long long)k, j, v, y[k * blk + j]);
            }
        }
        free(x), free(y), free(q);
    }
}

/* The same input gives the same bytes, whether in one call or block by block. */
Test(quantize, deterministic_and_blockwise) {
    for (size_t t = 0; t < N_TYPES; t++) {
        const uint32_t type = bounds[t].type, blk = info(type)->block, bb = info(type)->block_bytes;
        uint64_t n = 5 * blk;
        float *x = normal(n, 13, 0, 0.02f);
        uint8_t *a = quantize(type, x, n), *b = quantize(type, x, n);
        cr_assert(memcmp(a, b, n / blk * bb) == 0, "%s: two runs differ", info(type)->name);
        for (uint64_t k = 0; k < n / blk; k++) {
            uint8_t *one = quantize(type, x + k * blk, blk);
            cr_assert(memcmp(one, a + k * bb, bb) == 0, "%s: block %llu alone differs", info(type)->name,
                      (unsigned long long)k);
            free(one);
        }
        free(a), free(b), free(x);
    }
}

/* The least-squares search over trial scales (fit_affine, fit_signed, fit_q3) against a
 * plain max-abs (range) fit per sub-block with exact f32 scales: even with its scales
 * rounded to 4- or 6-bit sub-scales and an f16 super-scale, kiln's error is smaller.
 * Measured ratios over 50 draws of 4096 values: Q2_K 0.89-0.93, Q3_K 0.97-0.98, Q4_K
 * 0.90-0.93, Q5_K 0.93-0.97, Q6_K 0.93-0.96; with the trial sweeps removed Q2_K, Q4_K and
 * Q5_K come out worse than the plain fit (1.00-1.02) and Q6_K at 0.98-0.99. */
static double naive_sq_error(uint32_t type, const float *x, uint64_t n) {
    const int sub = type == GGUF_T_Q4_K || type == GGUF_T_Q5_K ? 32 : 16;
    double se = 0;
    for (uint64_t s = 0; s < n; s += (uint64_t)sub) {
        const float *v = x + s;
        if (type == GGUF_T_Q3_K || type == GGUF_T_Q6_K) { /* symmetric: the extreme on -half */
            const int half = type == GGUF_T_Q3_K ? 4 : 32;
            float mx = 0;
            for (int i = 0; i < sub; i++) mx = fabsf(v[i]) > fabsf(mx) ? v[i] : mx;
            const float sc = -mx / (float)half;
            for (int i = 0; i < sub; i++) {
                int l = sc != 0 ? (int)rintf(v[i] / sc) : 0;
                l = l < -half ? -half : l > half - 1 ? half - 1 : l;
                se += ((double)sc * l - v[i]) * ((double)sc * l - v[i]);
            }
        } else { /* affine over the range */
            const int top = type == GGUF_T_Q2_K ? 3 : type == GGUF_T_Q4_K ? 15 : 31;
            float lo = v[0], hi = v[0];
            for (int i = 1; i < sub; i++) lo = v[i] < lo ? v[i] : lo, hi = v[i] > hi ? v[i] : hi;
            const float sc = (hi - lo) / (float)top;
            for (int i = 0; i < sub; i++) {
                int l = sc != 0 ? (int)rintf((v[i] - lo) / sc) : 0;
                se += ((double)sc * l + lo - v[i]) * ((double)sc * l + lo - v[i]);
            }
        }
    }
    return se;
}

Test(quantize, k_scale_search_beats_max_abs) {
    const struct { uint32_t type; double at_most; } k[] = {
        {GGUF_T_Q2_K, 0.95}, {GGUF_T_Q3_K, 0.99}, {GGUF_T_Q4_K, 0.95}, {GGUF_T_Q5_K, 0.985}, {GGUF_T_Q6_K, 0.975}};
    const uint64_t n = 64 * 256;
    float *x = normal(n, 17, 0, 1);
    double ss = 0;
    for (uint64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    for (size_t t = 0; t < 5; t++) {
        double ours = rel_rms(k[t].type, x, n, NULL), naive = sqrt(naive_sq_error(k[t].type, x, n) / ss);
        cr_log_info("%s: relative RMS error %.4f, max-abs fit %.4f (ratio %.3f)", info(k[t].type)->name, ours, naive,
                    ours / naive);
        cr_assert_lt(ours / naive, k[t].at_most, "%s: %.4f against the max-abs fit's %.4f", info(k[t].type)->name,
                     ours, naive);
    }
    free(x);
}

Test(quantize, bad_input_refused) {
    float x[512] = {0};
    uint8_t q[1024];
    kiln_err e = {0};
    cr_assert_eq(gguf_quantize_rows(GGUF_T_Q4_K, x, q, 300, &e), -1);
    cr_assert(strstr(e.msg, "not a whole number of Q4_K blocks of 256"), "%s", e.msg);
    cr_assert_eq(gguf_quantize_rows(GGUF_T_Q8_0, x, q, 33, &e), -1);
    cr_assert(strstr(e.msg, "Q8_0 blocks of 32"), "%s", e.msg);
    cr_assert_eq(gguf_quantize_rows(GGUF_T_F16, x, q, 32, &e), -1);
    cr_assert(strstr(e.msg, "cannot quantize to F16"), "%s", e.msg);
    cr_assert_eq(e.code, KILN_ERR_UNSUPPORTED);
    cr_assert_eq(gguf_quantize_rows(GGUF_T_IQ4_NL, x, q, 32, &e), -1);
    cr_assert_eq(gguf_quantize_rows(12345, x, q, 32, &e), -1);
    cr_assert(strstr(e.msg, "unknown type"), "%s", e.msg);
    const float badv[] = {NAN, INFINITY, -1e6f};
    for (int i = 0; i < 3; i++) {
        x[37] = badv[i];
        cr_assert_eq(gguf_quantize_rows(GGUF_T_Q4_0, x, q, 64, &e), -1);
        cr_assert(strstr(e.msg, "value 37 is"), "%s", e.msg);
        cr_assert_eq(e.code, KILN_ERR_INVALID);
    }
    cr_assert_eq(gguf_quantize_rows(GGUF_T_Q4_0, x, q, 64, NULL), -1); /* no message wanted */
    x[37] = 65504.0f; /* f16's largest: still fine */
    cr_assert_eq(gguf_quantize_rows(GGUF_T_Q4_0, x, q, 64, &e), 0, "%s", e.msg);
    cr_assert_eq(gguf_quantize_rows(GGUF_T_Q4_0, x, q, 0, &e), 0, "nothing to do is no error");
}

/* testdata's dense-TYPE.gguf are llama-quantize's output from dense-F16.gguf (no importance
 * matrix: ggml's reference quantizers): every quantized tensor, requantized here from the
 * F16 source, is the same bytes. */
Test(quantize, same_bytes_as_llama_quantize, .timeout = 120) {
    const char *files[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"};
    kiln_err e = {0};
    gguf_file *src = gguf_open(tu_data_file("models/dense-F16.gguf"), &e);
    cr_assert_not_null(src, "%s", e.msg);
    bool seen[GGUF_T_COUNT] = {0};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char rel[64];
        snprintf(rel, sizeof rel, "models/dense-%s.gguf", files[f]);
        gguf_file *g = gguf_open(tu_data_file(rel), &e);
        cr_assert_not_null(g, "%s", e.msg);
        for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i), *s = gguf_find_tensor(src, t->name);
            if (!gguf_type_quantizable(t->type)) continue;
            cr_assert_not_null(s, "%s: no %s in dense-F16.gguf", rel, t->name);
            uint64_t n = gguf_tensor_nelements(t);
            float *x = malloc(n * sizeof *x);
            cr_assert_eq(gguf_tensor_rows_f32(s, 0, gguf_tensor_nrows(s), x, &e), 0, "%s", e.msg);
            uint8_t *q = quantize(t->type, x, n);
            cr_assert(memcmp(q, t->data, t->nbytes) == 0, "%s: %s (%s) differs from llama-quantize's", rel, t->name,
                      info(t->type)->name);
            seen[t->type] = true;
            free(x), free(q);
        }
        gguf_close(g);
    }
    gguf_close(src);
    for (size_t t = 0; t < N_TYPES; t++) cr_assert(seen[bounds[t].type], "no %s tensor met", info(bounds[t].type)->name);
}
