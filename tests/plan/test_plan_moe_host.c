/* plan/plan_moe_host.c: the expert cache's misses computed by the host's threads, against a
 * double-precision reference of the device's rounding points (the gate and up products,
 * SwiGLU and the down product each rounded to the 16-bit type) at odd widths (the vector
 * loops' tails), bf16 and f16 weights read from the file, a quantized file's weights either
 * rounded to the plan's type or exact; rows of choices that did not miss stay untouched. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "gguf/half.h"
#include "plan/plan_internal.h"
#include "tests/util/testutil_quant.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define POISON 0x7e7e

static float to16(bool bf16, float x) {
    return bf16 ? gguf_bf16_to_f32(gguf_f32_to_bf16(x)) : gguf_f16_to_f32(gguf_f32_to_f16(x));
}

/* Row r of t as the device would hold it: exact, or rounded to the plan's type. */
static void row_values(const gguf_tensor *t, uint64_t r, bool bf16, bool exact, float *dst) {
    kiln_err err = {0};
    cr_assert_eq(gguf_tensor_rows_f32(t, r, 1, dst, &err), 0, "%s", err.msg);
    if (!exact)
        for (uint64_t c = 0; c < t->ne[0]; c++) dst[c] = to16(bf16, dst[c]);
}

/* A 3-D tensor [experts x rows x cols] of ggml type gt: random 16-bit values, or (a block
 * type) random blocks. */
static gguf_tensor make(uint32_t gt, uint32_t cols, uint32_t rows, uint32_t ne, void **data) {
    gguf_tensor t = {.name = "w", .n_dims = 3, .ne = {cols, rows, ne, 1}, .type = gt};
    size_t n = (size_t)cols * rows * ne;
    if (gt == GGUF_T_BF16 || gt == GGUF_T_F16) {
        uint16_t *v = malloc(n * 2);
        for (size_t i = 0; i < n; i++) {
            float x = tu_urand(-0.5f, 0.5f);
            v[i] = gt == GGUF_T_BF16 ? gguf_f32_to_bf16(x) : gguf_f32_to_f16(x);
        }
        *data = v;
    } else {
        *data = tu_rand_blocks(gt, n / gguf_type_info_of(gt)->block);
    }
    t.data = *data;
    const gguf_type_info *ti = gguf_type_info_of(gt);
    t.nbytes = n / ti->block * ti->block_bytes;
    return t;
}

static void host_case(uint32_t gt, bool bf16, bool exact, uint32_t d, uint32_t ff, uint32_t ne, uint32_t k,
                      uint32_t n) {
    char what[160];
    snprintf(what, sizeof what, "host experts %s plan=%s%s d=%u ff=%u experts=%u k=%u n=%u",
             gguf_type_info_of(gt)->name, bf16 ? "bf16" : "f16", exact ? " exact" : "", d, ff, ne, k, n);
    arch_hparams hp = {0};
    hp.n_embd = d, hp.n_ff_exp = ff, hp.n_expert = ne, hp.n_expert_used = k;
    void *dg, *du, *dd;
    gguf_tensor tg = make(gt, d, ff, ne, &dg), tu = make(gt, d, ff, ne, &du), td = make(gt, ff, d, ne, &dd);
    model_layer ml = {0};
    ml.ffn_gate_exps = &tg, ml.ffn_up_exps = &tu, ml.ffn_down_exps = &td;
    plan_moe_host mh;
    kiln_err err = {0};
    cr_assert_eq(plan_moe_host_init(&mh, &hp, n, &err), 0, "%s", err.msg);
    uint16_t *h = malloc((size_t)n * d * 2), *out = malloc((size_t)n * k * d * 2);
    float *hf = malloc((size_t)n * d * 4);
    for (size_t i = 0; i < (size_t)n * d; i++) {
        float x = tu_urand(-2, 2);
        h[i] = bf16 ? gguf_f32_to_bf16(x) : gguf_f32_to_f16(x);
        hf[i] = bf16 ? gguf_bf16_to_f32(h[i]) : gguf_f16_to_f32(h[i]);
    }
    for (size_t i = 0; i < (size_t)n * k * d; i++) out[i] = POISON;
    /* every other choice misses; experts repeat across tokens (a group of several) */
    uint32_t choice[64], expert[64], m = 0;
    for (uint32_t c = 0; c < n * k; c++)
        if (c % 2 == 0) choice[m] = c, expert[m++] = (c / 2) % ne;
    cr_assert_eq(plan_moe_host_run(&mh, &ml, &hp, bf16, exact, h, n, choice, expert, m, out, &err), 0, "%s",
                 err.msg);
    float *wrow = malloc((d > ff ? d : ff) * 4), *act = malloc(ff * 4);
    for (uint32_t i = 0; i < m; i++) {
        uint32_t c = choice[i], e = expert[i];
        const float *x = hf + (size_t)(c / k) * d;
        for (uint32_t r = 0; r < ff; r++) { /* the SwiGLU row as the device rounds it */
            double g = 0, u = 0;
            row_values(&tg, (uint64_t)e * ff + r, bf16, exact, wrow);
            for (uint32_t j = 0; j < d; j++) g += (double)wrow[j] * x[j];
            row_values(&tu, (uint64_t)e * ff + r, bf16, exact, wrow);
            for (uint32_t j = 0; j < d; j++) u += (double)wrow[j] * x[j];
            float gs = to16(bf16, (float)g), us = to16(bf16, (float)u);
            act[r] = to16(bf16, gs / (1.0f + expf(-gs)) * us);
        }
        for (uint32_t r = 0; r < d; r++) {
            double y = 0, mag = 0;
            row_values(&td, (uint64_t)e * d + r, bf16, exact, wrow);
            for (uint32_t j = 0; j < ff; j++) y += (double)wrow[j] * act[j], mag += fabs((double)wrow[j] * act[j]);
            float got = bf16 ? gguf_bf16_to_f32(out[(size_t)c * d + r]) : gguf_f16_to_f32(out[(size_t)c * d + r]);
            /* the output's rounding (an ulp) and the f32 sums' order (an act element on a
             * rounding boundary could round the other way: none does at these seeds) */
            double tol = ldexp(fabs(y), bf16 ? -7 : -10) + 4.0 * ff * ldexp(mag, -24);
            cr_assert(fabs(got - y) <= tol + 1e-6, "%s: out[%u][%u] %.7g, want %.7g (tol %.3g)", what, c, r, got, y,
                      tol);
        }
    }
    for (uint32_t c = 1; c < n * k; c += 2) /* hits: the device's rows, untouched */
        for (uint32_t r = 0; r < d; r++) cr_assert_eq(out[(size_t)c * d + r], POISON, "%s: a hit's row written", what);
    plan_moe_host_free(&mh);
    free(dg), free(du), free(dd), free(h), free(out), free(hf), free(wrow), free(act);
}

Test(plan_moe_host, misses_at_odd_widths) {
    tu_seed(71);
    host_case(GGUF_T_BF16, true, false, 200, 72, 5, 2, 3);
    host_case(GGUF_T_F16, false, false, 97, 45, 4, 3, 2);
    host_case(GGUF_T_F16, true, false, 33, 17, 3, 2, 1); /* converted to the plan's bf16 */
    host_case(GGUF_T_Q8_0, true, false, 96, 64, 4, 2, 3);
    host_case(GGUF_T_Q4_K, false, true, 256, 256, 3, 2, 2);
}
