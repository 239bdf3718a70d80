/* Decoding of packed tensor types to f32.
 *
 * Block layouts and the order of f32 operations follow ggml's dequantize_row_* in
 * ggml-quants.c, so the floats match llama.cpp's bit for bit (for example Q4_K is
 * (d*sc)*q - dmin*m, never d*(sc*q)). Blocks are read byte by byte: tensor data in a
 * mapping need not be aligned, and the file is little-endian whatever the host. */
#include "gguf/gguf.h"
#include "gguf/half.h"

#define GGUF_QK 32   /* elements in a Q4_0..Q8_0 block */
#define GGUF_QK_K 256 /* elements in a K-quant super-block */

static inline uint16_t gguf_rd_u16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t gguf_rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static inline float gguf_rd_f16(const uint8_t *p) { return gguf_f16_to_f32(gguf_rd_u16(p)); }

static void gguf_decode_f32_plain(const uint8_t *b, float *y, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        y[i] = gguf_bits_f32(gguf_rd_u32(b + 4 * i));
}

static void gguf_decode_f16(const uint8_t *b, float *y, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        y[i] = gguf_rd_f16(b + 2 * i);
}

static void gguf_decode_bf16(const uint8_t *b, float *y, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        y[i] = gguf_bf16_to_f32(gguf_rd_u16(b + 2 * i));
}

/* Q4_0: f16 d, qs[16]; element j is the low nibble of qs[j], j+16 the high one. */
static void gguf_decode_q4_0(const uint8_t *b, float *y) {
    const float d = gguf_rd_f16(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < GGUF_QK / 2; j++) {
        const int x0 = (qs[j] & 0x0f) - 8;
        const int x1 = (qs[j] >> 4) - 8;
        y[j] = (float)x0 * d;
        y[j + GGUF_QK / 2] = (float)x1 * d;
    }
}

/* Q4_1: f16 d, f16 m, qs[16]. */
static void gguf_decode_q4_1(const uint8_t *b, float *y) {
    const float d = gguf_rd_f16(b);
    const float m = gguf_rd_f16(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < GGUF_QK / 2; j++) {
        const int x0 = qs[j] & 0x0f;
        const int x1 = qs[j] >> 4;
        y[j] = (float)x0 * d + m;
        y[j + GGUF_QK / 2] = (float)x1 * d + m;
    }
}

/* Q5_0: f16 d, qh (32 fifth bits, bit i for element i), qs[16]. */
static void gguf_decode_q5_0(const uint8_t *b, float *y) {
    const float d = gguf_rd_f16(b);
    const uint32_t qh = gguf_rd_u32(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < GGUF_QK / 2; j++) {
        const int h0 = (int)((qh >> j) & 1u) << 4;
        const int h1 = (int)((qh >> (j + 16)) & 1u) << 4;
        const int x0 = ((qs[j] & 0x0f) | h0) - 16;
        const int x1 = ((qs[j] >> 4) | h1) - 16;
        y[j] = (float)x0 * d;
        y[j + GGUF_QK / 2] = (float)x1 * d;
    }
}

/* Q5_1: f16 d, f16 m, qh, qs[16]. */
static void gguf_decode_q5_1(const uint8_t *b, float *y) {
    const float d = gguf_rd_f16(b);
    const float m = gguf_rd_f16(b + 2);
    const uint32_t qh = gguf_rd_u32(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < GGUF_QK / 2; j++) {
        const int h0 = (int)((qh >> j) & 1u) << 4;
        const int h1 = (int)((qh >> (j + 16)) & 1u) << 4;
        const int x0 = (qs[j] & 0x0f) | h0;
        const int x1 = (qs[j] >> 4) | h1;
        y[j] = (float)x0 * d + m;
        y[j + GGUF_QK / 2] = (float)x1 * d + m;
    }
}

/* Q8_0: f16 d, int8 qs[32]. */
static void gguf_decode_q8_0(const uint8_t *b, float *y) {
    const float d = gguf_rd_f16(b);
    for (int j = 0; j < GGUF_QK; j++)
        y[j] = (int8_t)b[2 + j] * d;
}

/* Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], f16 d, f16 dmin.
 * Each 128-element half uses 32 qs bytes four times, two bits at a time. */
static void gguf_decode_q2_k(const uint8_t *b, float *y) {
    const uint8_t *scales = b;
    const uint8_t *q = b + 16;
    const float d = gguf_rd_f16(b + 80);
    const float dmin = gguf_rd_f16(b + 82);
    int is = 0;
    for (int n = 0; n < GGUF_QK_K; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++) {
                const uint8_t sc = scales[is++];
                const float dl = d * (sc & 0x0f);
                const float ml = dmin * (sc >> 4);
                for (int l = 0; l < 16; l++)
                    *y++ = dl * ((q[16 * half + l] >> shift) & 3) - ml;
            }
        }
        q += 32;
    }
}

/* The 16 six-bit Q3_K scales: low nibbles in bytes 0-7 (scale j < 8 low, j >= 8 high
 * nibble of byte j-8), the two high bits of scale j in byte 8 + j%4 at bit 2*(j/4). */
static int gguf_q3_k_scale(const uint8_t *s, int j) {
    const int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
    const int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* Q3_K: hmask[32], qs[64], scales[12], f16 d. A clear hmask bit subtracts 4. */
static void gguf_decode_q3_k(const uint8_t *b, float *y) {
    const uint8_t *hm = b;
    const uint8_t *q = b + 32;
    const uint8_t *scales = b + 96;
    const float d = gguf_rd_f16(b + 108);
    int is = 0;
    uint8_t m = 1;
    for (int n = 0; n < GGUF_QK_K; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++) {
                const float dl = d * (float)gguf_q3_k_scale(scales, is++);
                for (int l = 0; l < 16; l++) {
                    const int i = 16 * half + l;
                    *y++ = dl * (float)(((q[i] >> shift) & 3) - ((hm[i] & m) ? 0 : 4));
                }
            }
            m <<= 1;
        }
        q += 32;
    }
}

/* The 8 six-bit scales and mins of Q4_K/Q5_K in 12 bytes: sub-blocks 0-3 in the low
 * six bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 take their low four
 * bits from bytes 8-11 and their high two from the top bits of bytes 0-7. */
static void gguf_k4_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
        *mn = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Q4_K: f16 d, f16 dmin, scales[12], qs[128]; each 64 elements use 32 qs bytes,
 * low nibbles for the first sub-block, high nibbles for the second. */
static void gguf_decode_q4_k(const uint8_t *b, float *y) {
    const float d = gguf_rd_f16(b);
    const float dmin = gguf_rd_f16(b + 2);
    const uint8_t *scales = b + 4;
    const uint8_t *q = b + 16;
    for (int is = 0; is < 8; is += 2) {
        uint8_t sc, mn;
        gguf_k4_scale_min(scales, is, &sc, &mn);
        const float d1 = d * sc, m1 = dmin * mn;
        gguf_k4_scale_min(scales, is + 1, &sc, &mn);
        const float d2 = d * sc, m2 = dmin * mn;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (q[l] & 0x0f) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (q[l] >> 4) - m2;
        q += 32;
    }
}

/* Q5_K: as Q4_K plus qh[32]: bit k of qh[l] is the fifth bit of element 32*k + l. */
static void gguf_decode_q5_k(const uint8_t *b, float *y) {
    const float d = gguf_rd_f16(b);
    const float dmin = gguf_rd_f16(b + 2);
    const uint8_t *scales = b + 4;
    const uint8_t *qh = b + 16;
    const uint8_t *ql = b + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2) {
        uint8_t sc, mn;
        gguf_k4_scale_min(scales, is, &sc, &mn);
        const float d1 = d * sc, m1 = dmin * mn;
        gguf_k4_scale_min(scales, is + 1, &sc, &mn);
        const float d2 = d * sc, m2 = dmin * mn;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)((ql[l] & 0x0f) + ((qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
        ql += 32;
        u1 = (uint8_t)(u1 << 2);
        u2 = (uint8_t)(u2 << 2);
    }
}

/* Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], f16 d.
 * Per 128 elements: 64 ql bytes, 32 qh bytes, 8 scales; element 32*k + l takes
 * its low bits from ql[l + 32*(k&1)] (nibble k>>1) and its high bits from qh[l]
 * at bit 2k. */
static void gguf_decode_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b;
    const uint8_t *qh = b + 128;
    const uint8_t *scb = b + 192;
    const float d = gguf_rd_f16(b + 208);
    for (int n = 0; n < GGUF_QK_K; n += 128) {
        const int8_t *sc = (const int8_t *)scb;
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is] * (float)q1;
            y[l + 32] = d * sc[is + 2] * (float)q2;
            y[l + 64] = d * sc[is + 4] * (float)q3;
            y[l + 96] = d * sc[is + 6] * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        scb += 8;
    }
}

int gguf_decode_f32(uint32_t type, const void *src, float *dst, uint64_t n) {
    const gguf_type_info *ti = gguf_type_info_of(type);
    if (!ti || !ti->convertible || n % ti->block != 0)
        return -1;
    const uint8_t *b = src;
    const uint64_t nb = n / ti->block;
    void (*block_fn)(const uint8_t *, float *) = NULL;

    switch (type) {
    case GGUF_T_F32: gguf_decode_f32_plain(b, dst, n); return 0;
    case GGUF_T_F16: gguf_decode_f16(b, dst, n); return 0;
    case GGUF_T_BF16: gguf_decode_bf16(b, dst, n); return 0;
    case GGUF_T_Q4_0: block_fn = gguf_decode_q4_0; break;
    case GGUF_T_Q4_1: block_fn = gguf_decode_q4_1; break;
    case GGUF_T_Q5_0: block_fn = gguf_decode_q5_0; break;
    case GGUF_T_Q5_1: block_fn = gguf_decode_q5_1; break;
    case GGUF_T_Q8_0: block_fn = gguf_decode_q8_0; break;
    case GGUF_T_Q2_K: block_fn = gguf_decode_q2_k; break;
    case GGUF_T_Q3_K: block_fn = gguf_decode_q3_k; break;
    case GGUF_T_Q4_K: block_fn = gguf_decode_q4_k; break;
    case GGUF_T_Q5_K: block_fn = gguf_decode_q5_k; break;
    case GGUF_T_Q6_K: block_fn = gguf_decode_q6_k; break;
    default: return -1; /* marked convertible but no decoder: keep the table honest */
    }
    for (uint64_t i = 0; i < nb; i++)
        block_fn(b + i * ti->block_bytes, dst + i * ti->block);
    return 0;
}
