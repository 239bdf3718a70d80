/* Quantization of f32 values into ggml's block types (gguf.h, gguf_quantize_rows).
 *
 * The blocks are ggml's (ggml-common.h), so quant.c's decoders and gguf_block_unpack read
 * them back. The choice of codes and scales follows the method of ggml's reference
 * quantizers (quantize_row_*_ref, what llama-quantize uses without an importance matrix):
 *   Q4_0, Q5_0, Q8_0   one scale from the block's largest magnitude, codes rounded;
 *   Q4_1, Q5_1         scale and offset from the block's range;
 *   Q2_K, Q4_K, Q5_K   per sub-block a scale and a min fitted by weighted least squares
 *                      over a sweep of trial scales (fit_affine), then both quantized to
 *                      4 or 6 bits against one f16 super-scale, and the codes chosen again
 *                      against the scales as stored;
 *   Q3_K               per 16 a signed scale refined code by code (fit_q3);
 *   Q6_K               per 16 a signed scale from a sweep weighted by x^2 (fit_signed).
 * Arithmetic is plain f32 in a fixed order (no FMA fusing: CMakeLists.txt), so the same
 * input gives the same bytes on every host. */
#include "gguf/gguf.h"
#include "gguf/half.h"

#include <math.h>
#include <string.h>

#define QK 32
#define QK_K 256
#define TINY 1e-15f /* a (sub-)block whose largest magnitude is below this is all zeros */

/* Nearest integer, ties to even (as ggml's nearest_int); clamped first so that a NaN or an
 * overflowed product from a degenerate block never reaches an int conversion. Adding
 * 1.5 * 2^23 leaves the rounded integer in the low mantissa bits (|v| < 2^22): rintf's
 * result in the default rounding mode without a libm call, in the inner loops. */
static int nearest(float v) {
    if (!(v > -4194303.0f)) return -4194303;
    if (v > 4194303.0f) return 4194303;
    float big = v + 12582912.0f;
    uint32_t u;
    memcpy(&u, &big, 4);
    return (int)(u & 0x007fffffu) - 0x00400000;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
/* The f16 a scale is stored as, and the f32 the decoder will read back. */
static uint16_t h16(float f) { return gguf_f32_to_f16(f); }
static float f16v(uint16_t h) { return gguf_f16_to_f32(h); }

/* The value of largest magnitude (the first of equals), signed. */
static float signed_max(const float *x, int n) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    return max;
}

/* ---- 32-element blocks ---------------------------------------------------------------- */

/* Q4_0 / Q5_0: d = -max / 2^(bits-1), so the largest magnitude lands exactly on code 0;
 * codes floor(x/d + 2^(bits-1) + 0.5). */
static void quant_sym(const float *x, uint8_t *b, int bits) {
    const int half = 1 << (bits - 1), top = (1 << bits) - 1;
    const float d = signed_max(x, QK) / (float)-half;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const float bias = (float)half + 0.5f;
    uint8_t c[QK];
    for (int j = 0; j < QK; j++) c[j] = (uint8_t)clampi((int)(x[j] * id + bias), 0, top);
    put16(b, h16(d));
    uint8_t *qs = b + (bits == 5 ? 6 : 2);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        qs[j] = (uint8_t)((c[j] & 0x0f) | (c[j + QK / 2] & 0x0f) << 4);
        qh |= (uint32_t)(c[j] >> 4) << j | (uint32_t)(c[j + QK / 2] >> 4) << (j + QK / 2);
    }
    if (bits == 5) put32(b + 2, qh);
}

/* Q4_1 / Q5_1: m = min, d = (max - min) / (2^bits - 1); codes floor((x - m)/d + 0.5). */
static void quant_affine(const float *x, uint8_t *b, int bits) {
    const int top = (1 << bits) - 1;
    float min = x[0], max = x[0];
    for (int j = 1; j < QK; j++) min = x[j] < min ? x[j] : min, max = x[j] > max ? x[j] : max;
    const float d = (max - min) / (float)top;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    uint8_t c[QK];
    for (int j = 0; j < QK; j++) c[j] = (uint8_t)clampi((int)((x[j] - min) * id + 0.5f), 0, top);
    put16(b, h16(d));
    put16(b + 2, h16(min));
    uint8_t *qs = b + (bits == 5 ? 8 : 4);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        qs[j] = (uint8_t)((c[j] & 0x0f) | (c[j + QK / 2] & 0x0f) << 4);
        qh |= (uint32_t)(c[j] >> 4) << j | (uint32_t)(c[j + QK / 2] >> 4) << (j + QK / 2);
    }
    if (bits == 5) put32(b + 4, qh);
}

/* Q8_0: d = amax / 127, codes rounded half away from zero. */
static void quant_q8_0(const float *x, uint8_t *b) {
    float amax = 0;
    for (int j = 0; j < QK; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    put16(b, h16(d));
    for (int j = 0; j < QK; j++) b[2 + j] = (uint8_t)(int8_t)clampi((int)roundf(x[j] * id), -127, 127);
}

/* ---- scale fitting for the K types ---------------------------------------------------- */

/* Fits x ~ scale * L + min with L in [0, nmax] and min <= 0, minimizing the w-weighted
 * squared (or absolute, mad) error: the plain range fit first, then the least-squares
 * scale and min for the codes each trial scale (nmax + rmin + rdelta*k) / range rounds to,
 * keeping the best. Returns the scale; *neg_min = -min (>= 0). lbuf is scratch of n. */
static float fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, uint8_t *lbuf,
                        float rmin, float rdelta, int nstep, bool mad) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = w[0] * x[0];
    for (int i = 1; i < n; i++) {
        min = x[i] < min ? x[i] : min;
        max = x[i] > max ? x[i] : max;
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0;
    }
    float iscale = (float)nmax / (max - min), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        best += w[i] * (mad ? fabsf(diff) : diff * diff);
    }
    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * (float)k + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(nearest(iscale * (x[i] - min)), 0, nmax);
            lbuf[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0)) continue;
        float s = (sum_w * sum_xl - sum_x * sum_l) / det, m = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (m > 0) m = 0, s = sum_xl / sum_l2; /* the min is a subtraction: never add */
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = s * lbuf[i] + m - x[i];
            err += w[i] * (mad ? fabsf(diff) : diff * diff);
        }
        if (err < best) {
            memcpy(L, lbuf, (size_t)n);
            best = err, scale = s, min = m;
        }
    }
    *neg_min = -min;
    return scale;
}

/* Fits x ~ scale * l with l in [-nmax, nmax-1], weighting each element by x^2 (the large
 * ones matter most): the scale that puts the extreme value on -nmax, then 18 trial scales
 * around it, each with its least-squares scale; the best kept. L = l + nmax. */
static float fit_signed(int n, int nmax, const float *x, uint8_t *L) {
    const float max = signed_max(x, n);
    if (fabsf(max) < TINY) {
        memset(L, 0, (size_t)n);
        return 0;
    }
    float best_scale = 0, best = 0;
    for (int k = 0; k <= 18; k++) { /* k = 0 is the plain scale, then trials -9..9 but 0 */
        int t = k == 0 ? 0 : k <= 9 ? k - 10 : k - 9;
        float iscale = -((float)nmax + 0.1f * (float)t) / max;
        float sumlx = 0, suml2 = 0;
        for (int i = 0; i < n; i++) {
            float l = (float)clampi(nearest(iscale * x[i]), -nmax, nmax - 1), w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        /* the weighted error of the least-squares scale falls as sumlx^2 / suml2 grows */
        bool better = k == 0 ? true : suml2 > 0 && sumlx * sumlx > best * suml2;
        if (!better) continue;
        for (int i = 0; i < n; i++) L[i] = (uint8_t)(nmax + clampi(nearest(iscale * x[i]), -nmax, nmax - 1));
        best_scale = suml2 != 0 ? sumlx / suml2 : 0;
        best = best_scale * sumlx;
    }
    return best_scale;
}

/* Q3_K's sub-block fit: x ~ scale * l with l in [-nmax, nmax-1], weights x^2; starting from
 * the extreme-value scale, each code in turn moves to the value the least-squares scale of
 * the others asks for when that lowers the error, for up to 5 sweeps. L = l + nmax. */
static float fit_q3(int n, int nmax, const float *x, uint8_t *L) {
    const float max = signed_max(x, n);
    if (fabsf(max) < TINY) {
        memset(L, 0, (size_t)n);
        return 0;
    }
    const float iscale = (float)-nmax / max;
    int l[QK_K / 16];
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        l[i] = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l[i];
        suml2 += w * (float)l[i] * (float)l[i];
    }
    for (int sweep = 0; sweep < 5; sweep++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)l[i];
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * (float)l[i] * (float)l[i];
            int nl = clampi(nearest(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (nl == l[i]) continue;
            slx += w * x[i] * (float)nl;
            sl2 += w * (float)nl * (float)nl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                l[i] = nl, sumlx = slx, suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (uint8_t)(l[i] + nmax);
    return suml2 > 0 ? sumlx / suml2 : 0;
}

/* ---- 256-element super-blocks --------------------------------------------------------- */

/* Codes L[0..255] of 2 bits into Q2_K / Q3_K's qs: byte 32h + l holds elements
 * 128h + l + 32k at bits 2k. */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *e = L + 128 * h + l;
            qs[32 * h + l] = (uint8_t)(e[0] | e[32] << 2 | e[64] << 4 | e[96] << 6);
        }
}

/* Q2_K: scales[16] (scale low nibble, min high), qs[64], d, dmin. */
static void quant_q2_k(const float *x, uint8_t *b) {
    uint8_t L[QK_K], aux[16];
    float w[16], scales[16], mins[16], max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
        scales[j] = fit_affine(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], aux, -0.5f, 0.1f, 15, true);
        max_scale = scales[j] > max_scale ? scales[j] : max_scale;
        max_min = mins[j] > max_min ? mins[j] : max_min;
    }
    uint8_t *sc = b;
    memset(sc, 0, 16);
    uint16_t d = 0, dmin = 0;
    if (max_scale > 0) {
        float is = 15.0f / max_scale;
        for (int j = 0; j < 16; j++) sc[j] = (uint8_t)clampi(nearest(is * scales[j]), 0, 15);
        d = h16(max_scale / 15.0f);
    }
    if (max_min > 0) {
        float is = 15.0f / max_min;
        for (int j = 0; j < 16; j++) sc[j] |= (uint8_t)(clampi(nearest(is * mins[j]), 0, 15) << 4);
        dmin = h16(max_min / 15.0f);
    }
    /* the codes again, against the scales as stored */
    for (int j = 0; j < 16; j++) {
        const float dl = f16v(d) * (float)(sc[j] & 0x0f);
        if (dl == 0) continue;
        const float ml = f16v(dmin) * (float)(sc[j] >> 4);
        for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)clampi(nearest((x[16 * j + l] + ml) / dl), 0, 3);
    }
    pack_2bit(L, b + 16);
    put16(b + 80, d);
    put16(b + 82, dmin);
}

/* Q3_K: hmask[32], qs[64], scales[12] (16 six-bit signed scales + 32), d. */
static void quant_q3_k(const float *x, uint8_t *b) {
    uint8_t L[QK_K];
    float scales[16], max_scale = 0, amax = 0;
    for (int j = 0; j < 16; j++) {
        scales[j] = fit_q3(16, 4, x + 16 * j, L + 16 * j);
        if (fabsf(scales[j]) > amax) amax = fabsf(scales[j]), max_scale = scales[j];
    }
    uint8_t *s = b + 96;
    memset(s, 0, 12);
    uint16_t d = 0;
    if (max_scale != 0) {
        /* the largest scale maps to -32: its sign lets it use the code range's long end */
        const float is = -32.0f / max_scale;
        for (int j = 0; j < 16; j++) {
            int l = clampi(nearest(is * scales[j]), -32, 31) + 32;
            s[j < 8 ? j : j - 8] |= (uint8_t)((l & 0x0f) << (j < 8 ? 0 : 4));
            s[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
        }
        d = h16(1 / is);
    }
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4), hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        const float dl = f16v(d) * (float)((lo | hi << 4) - 32);
        if (dl == 0) continue;
        for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)(clampi(nearest(x[16 * j + l] / dl), -4, 3) + 4);
    }
    /* the third bit of element e goes to hmask[e % 32] at bit e / 32 */
    uint8_t *hm = b;
    memset(hm, 0, 32);
    for (int e = 0; e < QK_K; e++)
        if (L[e] > 3) hm[e % 32] |= (uint8_t)(1u << (e / 32)), L[e] -= 4;
    pack_2bit(L, b + 32);
    put16(b + 108, d);
}

/* Q4_K / Q5_K: d, dmin, scales[12] (8 six-bit scales and mins), [qh[32],] qs[128].
 * Each sub-block of 32 is weighted by its RMS plus the element's magnitude. */
static void quant_q45_k(const float *x, uint8_t *b, bool five) {
    const int nmax = five ? 31 : 15;
    uint8_t L[QK_K], aux[32];
    float w[32], scales[8], mins[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float av = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av + fabsf(xs[l]);
        scales[j] = five ? fit_affine(32, nmax, xs, w, L + 32 * j, &mins[j], aux, -0.5f, 0.1f, 15, false)
                         : fit_affine(32, nmax, xs, w, L + 32 * j, &mins[j], aux, -1.0f, 0.1f, 20, false);
        max_scale = scales[j] > max_scale ? scales[j] : max_scale;
        max_min = mins[j] > max_min ? mins[j] : max_min;
    }
    const float is = max_scale > 0 ? 63.0f / max_scale : 0, im = max_min > 0 ? 63.0f / max_min : 0;
    uint8_t *s = b + 4, ls[8], lm[8];
    memset(s, 0, 12);
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)clampi(nearest(is * scales[j]), 0, 63);
        lm[j] = (uint8_t)clampi(nearest(im * mins[j]), 0, 63);
        if (j < 4) {
            s[j] = ls[j], s[j + 4] = lm[j];
        } else { /* low nibbles in bytes 8-11, the top two bits over bytes 0-7's */
            s[j + 4] = (uint8_t)((ls[j] & 0x0f) | (lm[j] & 0x0f) << 4);
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
    const uint16_t d = h16(max_scale / 63.0f), dmin = h16(max_min / 63.0f);
    put16(b, d);
    put16(b + 2, dmin);
    for (int j = 0; j < 8; j++) {
        const float dl = f16v(d) * (float)ls[j];
        if (dl == 0) continue;
        const float ml = f16v(dmin) * (float)lm[j];
        for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)clampi(nearest((x[32 * j + l] + ml) / dl), 0, nmax);
    }
    /* per 64: low nibbles the first 32, high nibbles the next; Q5_K's fifth bit of element
     * 32k + l is bit k of qh[l] */
    uint8_t *qh = b + 16, *ql = b + (five ? 48 : 16);
    if (five) memset(qh, 0, 32);
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) {
            int a = L[64 * g + l], c = L[64 * g + 32 + l];
            if (five) qh[l] |= (uint8_t)((a >> 4) << (2 * g) | (c >> 4) << (2 * g + 1));
            ql[32 * g + l] = (uint8_t)((a & 0x0f) | (c & 0x0f) << 4);
        }
}

/* Q6_K: ql[128], qh[64], int8 scales[16], d. */
static void quant_q6_k(const float *x, uint8_t *b) {
    uint8_t L[QK_K];
    float scales[16], max_scale = 0, amax = 0;
    for (int j = 0; j < 16; j++) {
        scales[j] = fit_signed(16, 32, x + 16 * j, L + 16 * j);
        if (fabsf(scales[j]) > amax) amax = fabsf(scales[j]), max_scale = scales[j];
    }
    memset(b, 0, 210);
    if (amax < TINY) return; /* all zero: d = 0 */
    const float is = -128.0f / max_scale;
    const uint16_t d = h16(1 / is);
    int8_t *sc = (int8_t *)(b + 192);
    for (int j = 0; j < 16; j++) sc[j] = (int8_t)clampi(nearest(is * scales[j]), -128, 127);
    for (int j = 0; j < 16; j++) {
        const float dl = f16v(d) * (float)sc[j];
        if (dl == 0) continue;
        for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)(clampi(nearest(x[16 * j + l] / dl), -32, 31) + 32);
    }
    /* per 128 (half h): element 32k + l, low nibble into ql[64h + l + 32(k&1)] at nibble
     * k>>1, high two bits into qh[32h + l] at bit 2k */
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *e = L + 128 * h + l;
            b[64 * h + l] = (uint8_t)((e[0] & 0x0f) | (e[64] & 0x0f) << 4);
            b[64 * h + 32 + l] = (uint8_t)((e[32] & 0x0f) | (e[96] & 0x0f) << 4);
            b[128 + 32 * h + l] = (uint8_t)(e[0] >> 4 | (e[32] >> 4) << 2 | (e[64] >> 4) << 4 | (e[96] >> 4) << 6);
        }
    put16(b + 208, d);
}

/* ---- entry points --------------------------------------------------------------------- */

bool gguf_type_quantizable(uint32_t type) { return gguf_type_is_block_quant(type); }

int gguf_quantize_rows(uint32_t type, const float *src, void *dst, uint64_t n, kiln_err *err) {
    const gguf_type_info *ti = gguf_type_info_of(type);
    if (!gguf_type_quantizable(type))
        return kiln_fail(err, KILN_ERR_UNSUPPORTED,
                         "cannot quantize to %s (kiln writes Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q2_K..Q6_K)",
                         ti ? ti->name : "an unknown type");
    if (n % ti->block)
        return kiln_fail(err, KILN_ERR_INVALID, "%llu values are not a whole number of %s blocks of %u",
                         (unsigned long long)n, ti->name, ti->block);
    /* every scale is an f16: values past its range (or not numbers) have no encoding */
    for (uint64_t i = 0; i < n; i++)
        if (!(fabsf(src[i]) <= 65504.0f))
            return kiln_fail(err, KILN_ERR_INVALID, "value %llu is %g: %s holds finite values within +-65504",
                             (unsigned long long)i, (double)src[i], ti->name);
    uint8_t *out = dst;
    for (uint64_t k = 0; k < n / ti->block; k++) {
        const float *x = src + k * ti->block;
        uint8_t *b = out + k * ti->block_bytes;
        switch (type) {
        case GGUF_T_Q4_0: quant_sym(x, b, 4); break;
        case GGUF_T_Q5_0: quant_sym(x, b, 5); break;
        case GGUF_T_Q4_1: quant_affine(x, b, 4); break;
        case GGUF_T_Q5_1: quant_affine(x, b, 5); break;
        case GGUF_T_Q8_0: quant_q8_0(x, b); break;
        case GGUF_T_Q2_K: quant_q2_k(x, b); break;
        case GGUF_T_Q3_K: quant_q3_k(x, b); break;
        case GGUF_T_Q4_K: quant_q45_k(x, b, false); break;
        case GGUF_T_Q5_K: quant_q45_k(x, b, true); break;
        case GGUF_T_Q6_K: quant_q6_k(x, b); break;
        default: return kiln_fail(err, KILN_ERR_INTERNAL, "%s is block-quantized but has no quantizer", ti->name);
        }
    }
    return 0;
}
