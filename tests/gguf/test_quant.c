/* Tensor type table and block decoding.
 *
 * Each block is built byte by byte from field values chosen here, following the
 * layouts of ggml's block structs; the expected floats are written from those field
 * values, not from the decoder. Scales are powers of two or small integers, so every
 * expected value is exact. "by hand" tests set a few bytes of an otherwise zero block
 * and spell out the arithmetic for each element they touch. */
#include "gguf/gguf.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* f16 bit patterns of the scales used below */
#define H_1 0x3c00u
#define H_2 0x4000u
#define H_0_5 0x3800u
#define H_0_25 0x3400u
#define H_0_125 0x3000u
#define H_M2 0xc000u
#define H_M3 0xc200u
#define H_M0_25 0xb400u

#define POISON -777.25f
#define GUARD 16

static void put_f16(uint8_t *p, unsigned bits) {
    p[0] = (uint8_t)(bits & 0xff);
    p[1] = (uint8_t)(bits >> 8);
}

/* Deterministic, non-periodic quant values, so a decoder that reads a neighbour's
 * bits gets a different number. */
static unsigned pick(unsigned i, unsigned salt, unsigned m) {
    uint32_t x = (i + 1u) * 2654435761u ^ (salt * 40503u + 0x9e37u);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    return x % m;
}

/* Decode from an unaligned copy of exactly nbytes (ASan sees overreads) into a
 * poisoned buffer whose tail must stay untouched. */
static int decode(uint32_t type, const uint8_t *blk, size_t nbytes, float *out, uint64_t n) {
    uint8_t *src = malloc(nbytes + 1);
    float *dst = malloc((n + GUARD) * sizeof(float));
    cr_assert(src && dst);
    memcpy(src + 1, blk, nbytes);
    for (uint64_t i = 0; i < n + GUARD; i++)
        dst[i] = POISON;
    int rc = gguf_decode_f32(type, src + 1, dst, n);
    for (uint64_t i = n; i < n + GUARD; i++)
        cr_assert_eq(dst[i], POISON, "wrote past the output at %llu", (unsigned long long)i);
    memcpy(out, dst, n * sizeof(float));
    free(src);
    free(dst);
    return rc;
}

static void expect_all(const float *y, const float *want, int n) {
    for (int i = 0; i < n; i++)
        cr_assert_eq(y[i], want[i], "element %d: got %.9g want %.9g", i, y[i], want[i]);
}

/* ---- plain types ------------------------------------------------------------------------ */

Test(quant, f32_copy) {
    const uint32_t bits[5] = {0x3f800000u, 0x80000000u, 0x7fc00001u, 0x00000001u, 0xc2f6e979u};
    uint8_t b[20];
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 4; k++)
            b[4 * i + k] = (uint8_t)(bits[i] >> (8 * k)); /* little-endian */
    float y[5];
    cr_assert_eq(decode(GGUF_T_F32, b, sizeof b, y, 5), 0);
    for (int i = 0; i < 5; i++) {
        uint32_t u;
        memcpy(&u, &y[i], 4);
        cr_assert_eq(u, bits[i], "element %d", i);
    }
}

Test(quant, f16_values) {
    const unsigned h[6] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x3555, 0xfc00};
    uint8_t b[12];
    for (int i = 0; i < 6; i++)
        put_f16(b + 2 * i, h[i]);
    float y[6];
    cr_assert_eq(decode(GGUF_T_F16, b, sizeof b, y, 6), 0);
    cr_assert_eq(y[0], 1.0f);
    cr_assert_eq(y[1], -2.0f);
    cr_assert_eq(y[2], 65504.0f);
    cr_assert_eq(y[3], 0x1p-24f);
    cr_assert_eq(y[4], 1365 * 0x1p-12f); /* exponent 13: (1024 + 0x155) * 2^(13-25) */
    cr_assert(isinf(y[5]) && y[5] < 0);
}

Test(quant, bf16_values) {
    const unsigned h[5] = {0x3f80, 0xc040, 0x4049, 0x0001, 0x7f80};
    uint8_t b[10];
    for (int i = 0; i < 5; i++)
        put_f16(b + 2 * i, h[i]); /* same byte order as f16 */
    float y[5];
    cr_assert_eq(decode(GGUF_T_BF16, b, sizeof b, y, 5), 0);
    cr_assert_eq(y[0], 1.0f);
    cr_assert_eq(y[1], -3.0f);
    cr_assert_eq(y[2], 3.140625f);
    cr_assert_eq(y[3], 0x1p-133f);
    cr_assert(isinf(y[4]) && y[4] > 0);
}

/* ---- 32-element blocks ------------------------------------------------------------------ */

/* Element i < 16 is the low nibble of qs[i]; element i >= 16 the high nibble of qs[i-16]. */
static void put_nibbles(uint8_t *qs, const int *q) {
    for (int i = 0; i < 16; i++)
        qs[i] = (uint8_t)((q[i] & 15) | ((q[i + 16] & 15) << 4));
}

/* Bit i of the little-endian u32 qh is the fifth bit of element i. */
static void put_qh(uint8_t *qh, const int *q) {
    memset(qh, 0, 4);
    for (int i = 0; i < 32; i++)
        if (q[i] & 16)
            qh[i / 8] |= (uint8_t)(1u << (i % 8));
}

Test(quant, q4_0_block) {
    static const int q[32] = {0, 15, 1, 14, 2, 13, 3, 12, 4, 11, 5, 10, 6, 9, 7, 8,
                              8, 3, 12, 0, 15, 9, 1, 6, 10, 14, 2, 5, 13, 11, 7, 4};
    uint8_t b[18];
    put_f16(b, H_0_5);
    put_nibbles(b + 2, q);
    float y[32], want[32];
    for (int i = 0; i < 32; i++)
        want[i] = (q[i] - 8) * 0.5f;
    cr_assert_eq(decode(GGUF_T_Q4_0, b, sizeof b, y, 32), 0);
    expect_all(y, want, 32);
    /* by hand: qs[1] = 0x3f; element 1 = (15-8)*0.5, element 17 = (3-8)*0.5 */
    cr_assert_eq(b[3], 0x3f);
    cr_assert_eq(y[1], 3.5f);
    cr_assert_eq(y[17], -2.5f);
}

Test(quant, q4_1_block) {
    static const int q[32] = {7, 0, 15, 3, 9, 12, 1, 4, 14, 2, 8, 11, 5, 13, 6, 10,
                              1, 15, 0, 9, 4, 7, 12, 3, 6, 11, 2, 14, 8, 5, 10, 13};
    uint8_t b[20];
    put_f16(b, H_0_25);
    put_f16(b + 2, H_M3);
    put_nibbles(b + 4, q);
    float y[32], want[32];
    for (int i = 0; i < 32; i++)
        want[i] = q[i] * 0.25f - 3.0f;
    cr_assert_eq(decode(GGUF_T_Q4_1, b, sizeof b, y, 32), 0);
    expect_all(y, want, 32);
    /* by hand: element 2 = 15*0.25 - 3 = 0.75; element 18 = 0*0.25 - 3 */
    cr_assert_eq(y[2], 0.75f);
    cr_assert_eq(y[18], -3.0f);
}

Test(quant, q5_0_block) {
    static const int q[32] = {0, 31, 16, 15, 1, 30, 17, 14, 2, 29, 18, 13, 3, 28, 19, 12,
                              20, 4, 27, 11, 21, 5, 26, 10, 22, 6, 25, 9, 23, 7, 24, 8};
    uint8_t b[22];
    put_f16(b, H_0_5);
    put_qh(b + 2, q);
    put_nibbles(b + 6, q);
    float y[32], want[32];
    for (int i = 0; i < 32; i++)
        want[i] = (q[i] - 16) * 0.5f;
    cr_assert_eq(decode(GGUF_T_Q5_0, b, sizeof b, y, 32), 0);
    expect_all(y, want, 32);
    /* by hand: element 1 = 31 (nibble 15, qh bit 1) -> 7.5; element 16 = 20 (high
     * nibble of qs[0] = 4, qh bit 16 = byte 2 bit 0) -> 2.0 */
    cr_assert_eq(y[1], 7.5f);
    cr_assert_eq(y[16], 2.0f);
    cr_assert_eq(b[2 + 2] & 1, 1);
}

Test(quant, q5_1_block) {
    static const int q[32] = {31, 0, 5, 26, 17, 14, 9, 22, 1, 30, 16, 15, 8, 23, 3, 28,
                              12, 19, 27, 4, 18, 13, 6, 25, 29, 2, 20, 11, 10, 21, 24, 7};
    uint8_t b[24];
    put_f16(b, H_0_125);
    put_f16(b + 2, H_2);
    put_qh(b + 4, q);
    put_nibbles(b + 8, q);
    float y[32], want[32];
    for (int i = 0; i < 32; i++)
        want[i] = q[i] * 0.125f + 2.0f;
    cr_assert_eq(decode(GGUF_T_Q5_1, b, sizeof b, y, 32), 0);
    expect_all(y, want, 32);
    /* by hand: element 0 = 31*0.125 + 2 = 5.875; element 31 = 7*0.125 + 2 = 2.875 */
    cr_assert_eq(y[0], 5.875f);
    cr_assert_eq(y[31], 2.875f);
}

Test(quant, q8_0_block) {
    static const int q[32] = {-128, 127, 0, -1, 1, 64, -64, 100, -100, 33, -33, 2, -2, 77, -77,
                              5, -5, 126, -127, 3, -3, 50, -50, 9, -9, 111, -111, 42, -42, 13,
                              -13, 99};
    uint8_t b[34];
    put_f16(b, H_M0_25);
    for (int i = 0; i < 32; i++)
        b[2 + i] = (uint8_t)(int8_t)q[i];
    float y[32], want[32];
    for (int i = 0; i < 32; i++)
        want[i] = q[i] * -0.25f;
    cr_assert_eq(decode(GGUF_T_Q8_0, b, sizeof b, y, 32), 0);
    expect_all(y, want, 32);
    cr_assert_eq(y[0], 32.0f);     /* -128 * -0.25 */
    cr_assert_eq(y[1], -31.75f);   /* 127 * -0.25 */
}

/* ---- K-quants: whole blocks from formulas ----------------------------------------------- */

/* Q2_K: scales[16] @0, qs[64] @16, d @80, dmin @82. Element e: half h = e/128,
 * r = e%128; two bits at 2*(r/32) of qs[32h + r%32]; sub-block e/16. */
Test(quant, q2_k_block) {
    uint8_t b[84] = {0};
    int sc[16], mn[16], q[256];
    for (int s = 0; s < 16; s++) {
        sc[s] = (int)pick((unsigned)s, 10, 16);
        mn[s] = (int)pick((unsigned)s, 11, 16);
        b[s] = (uint8_t)(sc[s] | (mn[s] << 4));
    }
    for (int e = 0; e < 256; e++) {
        q[e] = (int)pick((unsigned)e, 12, 4);
        int h = e / 128, r = e % 128;
        b[16 + 32 * h + r % 32] |= (uint8_t)(q[e] << (2 * (r / 32)));
    }
    put_f16(b + 80, H_0_5);
    put_f16(b + 82, H_0_25);
    float y[256], want[256];
    for (int e = 0; e < 256; e++)
        want[e] = 0.5f * sc[e / 16] * q[e] - 0.25f * mn[e / 16];
    cr_assert_eq(decode(GGUF_T_Q2_K, b, sizeof b, y, 256), 0);
    expect_all(y, want, 256);
}

/* The sixteen 6-bit Q3_K scales: low four bits of scale j in byte j (j < 8) or the high
 * nibble of byte j-8; its top two bits in byte 8 + j%4 at bit 2*(j/4). */
static void put_q3_k_scales(uint8_t *s, const int *S) {
    memset(s, 0, 12);
    for (int j = 0; j < 16; j++) {
        if (j < 8)
            s[j] |= (uint8_t)(S[j] & 15);
        else
            s[j - 8] |= (uint8_t)((S[j] & 15) << 4);
        s[8 + j % 4] |= (uint8_t)((S[j] >> 4) << (2 * (j / 4)));
    }
}

/* Q3_K: hmask[32] @0, qs[64] @32, scales[12] @96, d @108. Element e: h = e/128,
 * r = e%128, g = r/32; low two bits at 2g of qs[32h + r%32]; high bit = bit 4h+g of
 * hmask[r%32], a clear bit meaning -4; scale S[e/16] - 32. */
Test(quant, q3_k_block) {
    static const int S[16] = {5, 28, 51, 10, 33, 56, 15, 38, 61, 20, 43, 2, 25, 48, 63, 0};
    uint8_t b[110] = {0};
    int q[256], hb[256];
    for (int e = 0; e < 256; e++) {
        q[e] = (int)pick((unsigned)e, 20, 4);
        hb[e] = (int)pick((unsigned)e, 21, 2);
        int h = e / 128, r = e % 128, g = r / 32;
        b[32 + 32 * h + r % 32] |= (uint8_t)(q[e] << (2 * g));
        b[r % 32] |= (uint8_t)(hb[e] << (4 * h + g));
    }
    put_q3_k_scales(b + 96, S);
    put_f16(b + 108, H_0_25);
    float y[256], want[256];
    for (int e = 0; e < 256; e++)
        want[e] = 0.25f * (S[e / 16] - 32) * (q[e] - (hb[e] ? 0 : 4));
    cr_assert_eq(decode(GGUF_T_Q3_K, b, sizeof b, y, 256), 0);
    expect_all(y, want, 256);
}

/* The eight 6-bit scales and mins of Q4_K/Q5_K: sub-blocks 0-3 in bytes 0-3 (scale)
 * and 4-7 (min); sub-blocks 4-7 keep their low four bits in byte j+4 (scale low
 * nibble, min high nibble) and their top two bits in bits 6-7 of bytes j-4 (scale)
 * and j (min). */
static void put_k4_scales(uint8_t *s, const int *sc, const int *mn) {
    memset(s, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] |= (uint8_t)sc[j];
            s[j + 4] |= (uint8_t)mn[j];
        } else {
            s[j + 4] = (uint8_t)((sc[j] & 15) | ((mn[j] & 15) << 4));
            s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            s[j] |= (uint8_t)((mn[j] >> 4) << 6);
        }
    }
}

static const int K4_SC[8] = {1, 63, 17, 40, 5, 33, 62, 48};
static const int K4_MN[8] = {0, 7, 63, 20, 49, 12, 36, 58};

/* Q4_K: d @0, dmin @2, scales[12] @4, qs[128] @16. Element e: sub-block e/32; the low
 * nibble of qs[32*(e/64) + e%32] for an even sub-block, the high nibble for odd. */
Test(quant, q4_k_block) {
    uint8_t b[144] = {0};
    int q[256];
    put_f16(b, H_0_5);
    put_f16(b + 2, H_0_25);
    put_k4_scales(b + 4, K4_SC, K4_MN);
    for (int e = 0; e < 256; e++) {
        q[e] = (int)pick((unsigned)e, 30, 16);
        b[16 + 32 * (e / 64) + e % 32] |= (uint8_t)(q[e] << (4 * ((e / 32) % 2)));
    }
    float y[256], want[256];
    for (int e = 0; e < 256; e++)
        want[e] = 0.5f * K4_SC[e / 32] * q[e] - 0.25f * K4_MN[e / 32];
    cr_assert_eq(decode(GGUF_T_Q4_K, b, sizeof b, y, 256), 0);
    expect_all(y, want, 256);
}

/* Q5_K: d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48. As Q4_K, plus the
 * fifth bit of element e in bit e/32 of qh[e%32]. */
Test(quant, q5_k_block) {
    uint8_t b[176] = {0};
    int q[256];
    put_f16(b, H_0_25);
    put_f16(b + 2, H_0_5);
    put_k4_scales(b + 4, K4_SC, K4_MN);
    for (int e = 0; e < 256; e++) {
        q[e] = (int)pick((unsigned)e, 40, 32);
        b[48 + 32 * (e / 64) + e % 32] |= (uint8_t)((q[e] & 15) << (4 * ((e / 32) % 2)));
        b[16 + e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
    }
    float y[256], want[256];
    for (int e = 0; e < 256; e++)
        want[e] = 0.25f * K4_SC[e / 32] * q[e] - 0.5f * K4_MN[e / 32];
    cr_assert_eq(decode(GGUF_T_Q5_K, b, sizeof b, y, 256), 0);
    expect_all(y, want, 256);
}

/* Q6_K: ql[128] @0, qh[64] @128, int8 scales[16] @192, d @208. Element e: h = e/128,
 * r = e%128, k = r/32, l = r%32; low four bits in nibble k/2 of ql[64h + l + 32*(k%2)],
 * top two bits at 2k of qh[32h + l]; value d * scale[e/16] * (q - 32). */
Test(quant, q6_k_block) {
    static const int S[16] = {1, -1, 2, -3, 127, -128, 5, -7, 0, 64, -64, 3, -2, 9, -9, 100};
    uint8_t b[210] = {0};
    int q[256];
    for (int e = 0; e < 256; e++) {
        q[e] = (int)pick((unsigned)e, 50, 64);
        int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
        b[64 * h + l + 32 * (k % 2)] |= (uint8_t)((q[e] & 15) << (4 * (k / 2)));
        b[128 + 32 * h + l] |= (uint8_t)((q[e] >> 4) << (2 * k));
    }
    for (int s = 0; s < 16; s++)
        b[192 + s] = (uint8_t)(int8_t)S[s];
    put_f16(b + 208, H_0_125);
    float y[256], want[256];
    for (int e = 0; e < 256; e++)
        want[e] = 0.125f * S[e / 16] * (q[e] - 32);
    cr_assert_eq(decode(GGUF_T_Q6_K, b, sizeof b, y, 256), 0);
    expect_all(y, want, 256);
}

/* ---- K-quants by hand ------------------------------------------------------------------- */

static void fill(float *w, int from, int to, float v) {
    for (int i = from; i < to; i++)
        w[i] = v;
}

Test(quant, q2_k_by_hand) {
    uint8_t b[84] = {0};
    put_f16(b + 80, H_1);   /* d */
    put_f16(b + 82, H_0_5); /* dmin */
    b[9] = 0x73;            /* sub-block 9 (elements 144-159): scale 3, min 7 */
    b[15] = 0x25;           /* sub-block 15 (240-255): scale 5, min 2 */
    /* qs[50]: elements 128 + 32g + 18 for bit pairs g = 0..3 -> 146, 178, 210, 242 */
    b[16 + 50] = 0xe6;      /* pairs (low first): 2, 1, 2, 3 */
    float y[256], want[256];
    fill(want, 0, 256, 0.0f);
    fill(want, 144, 160, -3.5f); /* 1*3*0 - 0.5*7 */
    want[146] = 2.5f;            /* 1*3*2 - 3.5 */
    fill(want, 240, 256, -1.0f); /* 1*5*0 - 0.5*2 */
    want[242] = 14.0f;           /* 1*5*3 - 1 */
    /* 178 (sub-block 11) and 210 (sub-block 13) have scale 0, min 0: stay 0 */
    cr_assert_eq(decode(GGUF_T_Q2_K, b, sizeof b, y, 256), 0);
    expect_all(y, want, 256);
}

Test(quant, q3_k_high_scales_and_hmask) {
    uint8_t b[110] = {0};
    put_f16(b + 108, H_0_5); /* d */
    /* every scale 0 reads as 0-32 = -32; every quant with clear hmask as 0-4 = -4 */
    /* sub-block 2 (elements 32-47): scale 33 = 0b10'0001 -> low 1 in byte 2, top 2 in
     * byte 8+2 bits 0-1 */
    b[96 + 2] = 0x01;
    b[96 + 10] = 0x02;
    /* sub-block 13 (elements 208-223): scale 50 = 0b11'0010 -> low 2 in the high
     * nibble of byte 5, top 3 in byte 8+1 bits 6-7 */
    b[96 + 5] = 0x20;
    b[96 + 9] = 0xc0;
    /* element 40: h=0, r=40, g=1 -> qs[8] bits 2-3 = 1, hmask[8] bit 1 set */
    b[32 + 8] = 0x04;
    b[8] = 0x02;
    /* element 210: h=1, r=82, g=2 -> qs[32+18] bits 4-5 = 3, hmask[18] bit 6 set */
    b[32 + 50] = 0x30;
    b[18] = 0x40;
    float y[256], want[256];
    fill(want, 0, 256, 64.0f);    /* 0.5 * -32 * -4 */
    fill(want, 32, 48, -2.0f);    /* 0.5 * 1 * -4 */
    want[40] = 0.5f;              /* 0.5 * 1 * (1 - 0) */
    fill(want, 208, 224, -36.0f); /* 0.5 * 18 * -4 */
    want[210] = 27.0f;            /* 0.5 * 18 * (3 - 0) */
    cr_assert_eq(decode(GGUF_T_Q3_K, b, sizeof b, y, 256), 0);
    expect_all(y, want, 256);
}

Test(quant, q4_k_high_scales) {
    uint8_t b[144] = {0};
    put_f16(b, H_1);       /* d */
    put_f16(b + 2, H_0_5); /* dmin */
    /* sub-block 1: scale 3, min 4 (low six bits of bytes 1 and 5);
     * sub-block 5: scale 37 = 0b10'0101, min 19 = 0b01'0011 -> byte 9 = 0x35, top bits
     * 2 into bits 6-7 of byte 1, 1 into bits 6-7 of byte 5;
     * sub-block 7: scale 63 -> byte 11 low nibble 15, top 3 into byte 3 bits 6-7 */
    b[4 + 1] = 0x83;
    b[4 + 5] = 0x44;
    b[4 + 9] = 0x35;
    b[4 + 3] = 0xc0;
    b[4 + 11] = 0x0f;
    b[16 + 1] = 0x70;   /* element 33 (sub-block 1: high nibble of qs[1]) = 7 */
    b[16 + 65] = 0x90;  /* element 161 (sub-block 5: high nibble of qs[64+1]) = 9 */
    b[16 + 127] = 0xf0; /* element 255 (sub-block 7: high nibble of qs[96+31]) = 15 */
    float y[256], want[256];
    fill(want, 0, 256, 0.0f);
    fill(want, 32, 64, -2.0f);     /* 1*3*0 - 0.5*4 */
    want[33] = 19.0f;              /* 1*3*7 - 2 */
    fill(want, 160, 192, -9.5f);   /* 0 - 0.5*19 */
    want[161] = 323.5f;            /* 1*37*9 - 9.5 */
    want[255] = 945.0f;            /* 1*63*15 - 0 */
    cr_assert_eq(decode(GGUF_T_Q4_K, b, sizeof b, y, 256), 0);
    expect_all(y, want, 256);
}

Test(quant, q5_k_high_bits) {
    uint8_t b[176] = {0};
    put_f16(b, H_0_5);   /* d */
    put_f16(b + 2, H_1); /* dmin */
    /* sub-block 2: scale 2, min 1; sub-block 6: scale 20 = 0b01'0100, min 33 =
     * 0b10'0001 -> byte 10 = 0x14, top 1 into byte 2 bits 6-7, top 2 into byte 6 */
    b[4 + 2] = 0x42;
    b[4 + 6] = 0x81;
    b[4 + 10] = 0x14;
    /* element 69 (sub-block 2, l=5): low nibble of qs[32+5] = 10, qh[5] bit 2 */
    b[48 + 37] = 0x0a;
    b[16 + 5] = 0x04;
    b[16 + 6] = 0x04; /* element 70: only the fifth bit -> 16 */
    /* element 200 (sub-block 6, l=8): low nibble of qs[96+8] = 3, qh[8] bit 6 */
    b[48 + 104] = 0x03;
    b[16 + 8] = 0x40;
    float y[256], want[256];
    fill(want, 0, 256, 0.0f);
    fill(want, 64, 96, -1.0f);     /* 0.5*2*0 - 1*1 */
    want[69] = 25.0f;              /* 0.5*2*26 - 1 */
    want[70] = 15.0f;              /* 0.5*2*16 - 1 */
    fill(want, 192, 224, -33.0f);  /* 0 - 1*33 */
    want[200] = 157.0f;            /* 0.5*20*19 - 33 */
    cr_assert_eq(decode(GGUF_T_Q5_K, b, sizeof b, y, 256), 0);
    expect_all(y, want, 256);
}

Test(quant, q6_k_negative_scales) {
    uint8_t b[210] = {0};
    put_f16(b + 208, H_0_5); /* d */
    b[192 + 3] = 0xfd;       /* scale[3] = -3   (elements 48-63) */
    b[192 + 12] = 0x80;      /* scale[12] = -128 (192-207) */
    b[192 + 13] = 0x7f;      /* scale[13] = 127  (208-223) */
    /* element 50: h=0, k=1, l=18 -> low nibble of ql[18+32] = 7, qh[18] bits 2-3 = 2 */
    b[50] = 0x07;
    b[128 + 18] = 0x08;
    /* element 193: h=1, k=2, l=1 -> high nibble of ql[64+1] = 15, qh[32+1] bits 4-5 = 3 */
    b[65] = 0xf0;
    b[128 + 33] = 0x30;
    float y[256], want[256];
    fill(want, 0, 256, 0.0f);
    fill(want, 48, 64, 48.0f);       /* 0.5 * -3 * (0 - 32) */
    want[50] = -10.5f;               /* 0.5 * -3 * (39 - 32) */
    fill(want, 192, 208, 2048.0f);   /* 0.5 * -128 * -32 */
    want[193] = -1984.0f;            /* 0.5 * -128 * (63 - 32) */
    fill(want, 208, 224, -2032.0f);  /* 0.5 * 127 * -32 */
    cr_assert_eq(decode(GGUF_T_Q6_K, b, sizeof b, y, 256), 0);
    expect_all(y, want, 256);
}

/* ---- several blocks, bad input ---------------------------------------------------------- */

Test(quant, q4_0_two_blocks) {
    uint8_t b[36];
    put_f16(b, H_1);
    memset(b + 2, 0x99, 16); /* every quant 9 -> (9-8)*1 */
    put_f16(b + 18, H_M0_25);
    memset(b + 20, 0x00, 16); /* every quant 0 -> (0-8)*-0.25 */
    float y[64], want[64];
    fill(want, 0, 32, 1.0f);
    fill(want, 32, 64, 2.0f);
    cr_assert_eq(decode(GGUF_T_Q4_0, b, sizeof b, y, 64), 0);
    expect_all(y, want, 64);
}

static const uint32_t CONVERTIBLE[] = {
    GGUF_T_F32, GGUF_T_F16, GGUF_T_BF16, GGUF_T_Q8_0, GGUF_T_Q4_0, GGUF_T_Q4_1, GGUF_T_Q5_0,
    GGUF_T_Q5_1, GGUF_T_Q2_K, GGUF_T_Q3_K, GGUF_T_Q4_K, GGUF_T_Q5_K, GGUF_T_Q6_K,
};
#define N_CONVERTIBLE (sizeof CONVERTIBLE / sizeof CONVERTIBLE[0])

/* Three blocks decoded together give, bit for bit, each block decoded alone. */
Test(quant, blocks_independent) {
    for (size_t t = 0; t < N_CONVERTIBLE; t++) {
        const gguf_type_info *ti = gguf_type_info_of(CONVERTIBLE[t]);
        cr_assert_not_null(ti);
        size_t bb = ti->block_bytes, n = ti->block;
        uint8_t *raw = malloc(3 * bb);
        float *all = malloc(3 * n * sizeof(float)), *one = malloc(n * sizeof(float));
        for (size_t i = 0; i < 3 * bb; i++)
            raw[i] = (uint8_t)pick((unsigned)i, 60 + (unsigned)t, 256);
        cr_assert_eq(decode(CONVERTIBLE[t], raw, 3 * bb, all, 3 * n), 0, "%s", ti->name);
        for (int k = 0; k < 3; k++) {
            cr_assert_eq(decode(CONVERTIBLE[t], raw + k * bb, bb, one, n), 0);
            cr_assert_eq(memcmp(one, all + k * n, n * sizeof(float)), 0, "%s block %d",
                         ti->name, k);
        }
        free(raw);
        free(all);
        free(one);
    }
}

Test(quant, bad_length) {
    uint8_t b[3 * 210] = {0};
    float y[3 * 256];
    cr_assert_eq(decode(GGUF_T_Q4_0, b, 18, y, 31), -1);
    cr_assert_eq(decode(GGUF_T_Q4_0, b, 36, y, 33), -1);
    cr_assert_eq(decode(GGUF_T_Q8_0, b, 34, y, 16), -1);
    cr_assert_eq(decode(GGUF_T_Q4_K, b, 144, y, 128), -1);
    cr_assert_eq(decode(GGUF_T_Q6_K, b, 420, y, 257), -1);
    cr_assert_eq(decode(GGUF_T_Q2_K, b, 168, y, 288), -1);
    /* nothing written on failure */
    for (int i = 0; i < 31; i++)
        cr_assert_eq(y[i], POISON);
    /* blocks of one element take any count, zero included */
    cr_assert_eq(decode(GGUF_T_F16, b, 6, y, 3), 0);
    cr_assert_eq(decode(GGUF_T_Q4_K, b, 0, y, 0), 0);
}

Test(quant, not_convertible) {
    static const uint32_t bad[] = {
        GGUF_T_Q8_1, GGUF_T_Q8_K, GGUF_T_IQ2_XXS, GGUF_T_IQ2_XS, GGUF_T_IQ3_XXS, GGUF_T_IQ1_S,
        GGUF_T_IQ4_NL, GGUF_T_IQ3_S, GGUF_T_IQ2_S, GGUF_T_IQ4_XS, GGUF_T_I8, GGUF_T_I16,
        GGUF_T_I32, GGUF_T_I64, GGUF_T_F64, GGUF_T_IQ1_M, GGUF_T_TQ1_0, GGUF_T_TQ2_0,
        GGUF_T_MXFP4, 4, 5, 31, 33, 36, 38, GGUF_T_COUNT, 1000, UINT32_MAX,
    };
    uint8_t b[512] = {0};
    float y[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(decode(bad[i], b, sizeof b, y, 256), -1, "type %u", bad[i]);
        cr_assert_eq(y[0], POISON, "type %u wrote output", bad[i]);
    }
}

/* ---- the type table --------------------------------------------------------------------- */

static const struct {
    uint32_t type;
    const char *name;
    uint32_t block, bytes;
} GGML_TYPES[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},     {40, "NVFP4", 64, 36},
    {41, "Q1_0", 128, 18},    {42, "Q2_0", 64, 18},
};
#define N_GGML_TYPES (sizeof GGML_TYPES / sizeof GGML_TYPES[0])

Test(types, sizes_match_ggml) {
    for (size_t i = 0; i < N_GGML_TYPES; i++) {
        const gguf_type_info *ti = gguf_type_info_of(GGML_TYPES[i].type);
        cr_assert_not_null(ti, "type %u", GGML_TYPES[i].type);
        cr_assert_str_eq(ti->name, GGML_TYPES[i].name);
        cr_assert_eq(ti->block, GGML_TYPES[i].block, "%s", ti->name);
        cr_assert_eq(ti->block_bytes, GGML_TYPES[i].bytes, "%s", ti->name);
    }
}

Test(types, undefined_numbers) {
    size_t defined = 0;
    for (uint32_t t = 0; t < 200; t++)
        defined += gguf_type_info_of(t) != NULL;
    cr_assert_eq(defined, N_GGML_TYPES);
    static const uint32_t gone[] = {4, 5, 31, 32, 33, 36, 37, 38, 43, 44, UINT32_MAX};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        cr_assert_null(gguf_type_info_of(gone[i]), "type %u", gone[i]);
}

Test(types, convertible_set) {
    for (uint32_t t = 0; t < GGUF_T_COUNT; t++) {
        const gguf_type_info *ti = gguf_type_info_of(t);
        if (!ti)
            continue;
        bool want = false;
        for (size_t i = 0; i < N_CONVERTIBLE; i++)
            want |= CONVERTIBLE[i] == t;
        cr_assert_eq(ti->convertible, want, "%s", ti->name);
    }
}

Test(types, from_name) {
    for (size_t i = 0; i < N_GGML_TYPES; i++)
        cr_assert_eq(gguf_type_from_name(GGML_TYPES[i].name), (int)GGML_TYPES[i].type);
    cr_assert_eq(gguf_type_from_name("bf16"), GGUF_T_BF16);
    cr_assert_eq(gguf_type_from_name("q4_k"), GGUF_T_Q4_K);
    cr_assert_eq(gguf_type_from_name("Iq2_xXs"), GGUF_T_IQ2_XXS);
    cr_assert_eq(gguf_type_from_name("mxfp4"), GGUF_T_MXFP4);
    cr_assert_eq(gguf_type_from_name(""), -1);
    cr_assert_eq(gguf_type_from_name("Q4"), -1);
    cr_assert_eq(gguf_type_from_name("Q4_K_M"), -1); /* a file type, not a tensor type */
    cr_assert_eq(gguf_type_from_name("F32 "), -1);
    cr_assert_eq(gguf_type_from_name("Q4_2"), -1);
}

Test(types, value_types) {
    static const char *names[GGUF_VT_COUNT] = {"u8",  "i8",  "u16", "i16", "u32", "i32", "f32",
                                               "bool", "str", "arr", "u64", "i64", "f64"};
    static const size_t sizes[GGUF_VT_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    for (int t = 0; t < GGUF_VT_COUNT; t++) {
        cr_assert_str_eq(gguf_vtype_name((gguf_vtype)t), names[t]);
        cr_assert_eq(gguf_vtype_size((gguf_vtype)t), sizes[t], "%s", names[t]);
    }
    cr_assert_str_eq(gguf_vtype_name(GGUF_VT_COUNT), "?");
    cr_assert_eq(gguf_vtype_size(GGUF_VT_COUNT), 0);
    cr_assert_str_eq(gguf_vtype_name((gguf_vtype)77), "?");
}
