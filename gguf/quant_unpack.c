/* ggml's quantized blocks taken apart into integer codes and scales (gguf.h,
 * gguf_block_unpack), for the device layouts that repack them. The codes follow the
 * decoders in quant.c element for element; each value is s * (code - offset) + m there. */
#include "gguf/gguf.h"

#include <string.h>

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Q4_0 .. Q5_1: nibble j of qs (low for j < 16, high for j + 16), the fifth bit from qh. */
static void nibbles(const uint8_t *qs, uint32_t qh, bool fifth, uint8_t *code) {
    for (int j = 0; j < 16; j++) {
        code[j] = (uint8_t)((qs[j] & 0x0f) | (fifth ? ((qh >> j) & 1u) << 4 : 0));
        code[j + 16] = (uint8_t)((qs[j] >> 4) | (fifth ? ((qh >> (j + 16)) & 1u) << 4 : 0));
    }
}

/* The 6-bit scale and min of sub-block j of Q4_K / Q5_K (12 bytes at s). */
static void k4_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
        *mn = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

static void unpack_q2_k(const uint8_t *b, gguf_qblock *o) {
    o->d = rd16(b + 80), o->dm = rd16(b + 82);
    for (int s = 0; s < 16; s++) o->sc[s] = (int8_t)(b[s] & 0x0f), o->mn[s] = (uint8_t)(b[s] >> 4);
    /* half h, shift 2j, part p, l: element 128h + 32j + 16p + l from qs[32h + 16p + l] */
    for (int e = 0; e < 256; e++) {
        int h = e / 128, j = e % 128 / 32, p = e % 32 / 16, l = e % 16;
        o->code[e] = (uint8_t)((b[16 + 32 * h + 16 * p + l] >> (2 * j)) & 3);
    }
}

static void unpack_q3_k(const uint8_t *b, gguf_qblock *o) {
    const uint8_t *hm = b, *q = b + 32, *s = b + 96;
    o->d = rd16(b + 108);
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4), hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
        o->sc[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
    for (int e = 0; e < 256; e++) {
        int h = e / 128, j = e % 128 / 32, i = e % 32; /* i = 16 * part + l */
        int lo = (q[32 * h + i] >> (2 * j)) & 3, high = (hm[i] >> (4 * h + j)) & 1;
        o->code[e] = (uint8_t)(lo | high << 2);
    }
}

static void unpack_q45_k(const uint8_t *b, gguf_qblock *o, bool five) {
    const uint8_t *qh = b + 16, *ql = b + (five ? 48 : 16);
    o->d = rd16(b), o->dm = rd16(b + 2);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, mn;
        k4_scale_min(b + 4, j, &sc, &mn);
        o->sc[j] = (int8_t)sc, o->mn[j] = mn;
    }
    /* 64 elements a group g: low nibbles of ql[32g + l], then high ones; the fifth bit of
     * element 32k + l is bit k of qh[l] */
    for (int e = 0; e < 256; e++) {
        int g = e / 64, hi = e % 64 / 32, l = e % 32;
        int c = hi ? ql[32 * g + l] >> 4 : ql[32 * g + l] & 0x0f;
        if (five) c |= ((qh[l] >> (e / 32)) & 1) << 4;
        o->code[e] = (uint8_t)c;
    }
}

static void unpack_q6_k(const uint8_t *b, gguf_qblock *o) {
    const uint8_t *ql = b, *qh = b + 128;
    o->d = rd16(b + 208);
    for (int s = 0; s < 16; s++) o->sc[s] = (int8_t)b[192 + s];
    /* per 128 (half h): element 32k + l takes nibble k >> 1 of ql[64h + l + 32 (k & 1)]
     * and bits 2k of qh[32h + l] */
    for (int e = 0; e < 256; e++) {
        int h = e / 128, k = e % 128 / 32, l = e % 32;
        int lo = ql[64 * h + l + 32 * (k & 1)] >> (4 * (k >> 1)) & 0x0f, hi = (qh[32 * h + l] >> (2 * k)) & 3;
        o->code[e] = (uint8_t)(lo | hi << 4);
    }
}

int gguf_block_unpack(uint32_t type, const uint8_t *b, gguf_qblock *o) {
    memset(o, 0, sizeof *o);
    switch (type) {
    case GGUF_T_Q4_0: o->d = rd16(b); nibbles(b + 2, 0, false, o->code); return 0;
    case GGUF_T_Q4_1: o->d = rd16(b), o->dm = rd16(b + 2); nibbles(b + 4, 0, false, o->code); return 0;
    case GGUF_T_Q5_0: o->d = rd16(b); nibbles(b + 6, rd32(b + 2), true, o->code); return 0;
    case GGUF_T_Q5_1: o->d = rd16(b), o->dm = rd16(b + 2); nibbles(b + 8, rd32(b + 4), true, o->code); return 0;
    case GGUF_T_Q8_0:
        o->d = rd16(b);
        for (int j = 0; j < 32; j++) o->code[j] = (uint8_t)(b[2 + j] ^ 0x80); /* the signed byte + 128 */
        return 0;
    case GGUF_T_Q2_K: unpack_q2_k(b, o); return 0;
    case GGUF_T_Q3_K: unpack_q3_k(b, o); return 0;
    case GGUF_T_Q4_K: unpack_q45_k(b, o, false); return 0;
    case GGUF_T_Q5_K: unpack_q45_k(b, o, true); return 0;
    case GGUF_T_Q6_K: unpack_q6_k(b, o); return 0;
    default: return -1;
    }
}
