/* IEEE binary16 <-> binary32 in portable C (no F16C), so results do not depend on the
 * host CPU. f32 -> f16 rounds to nearest, ties to even, like the GPU conversions. */
#include "gguf/half.h"

float gguf_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;

    if (exp == 0x1fu) {
        if (mant == 0)
            return gguf_bits_f32(sign | 0x7f800000u);
        /* NaN: keep sign and payload, set the quiet bit, as F16C and ggml do */
        return gguf_bits_f32(sign | 0x7fc00000u | (mant << 13));
    }
    if (exp != 0) /* normal: rebias 15 -> 127 */
        return gguf_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0)
        return gguf_bits_f32(sign);

    /* subnormal mant * 2^-24: shift the leading one up to the implicit bit */
    uint32_t e = 113u; /* biased f32 exponent of 2^-14, the f16 subnormal scale */
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return gguf_bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t gguf_f32_to_f16(float f) {
    uint32_t u = gguf_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;

    if (a > 0x7f800000u) /* NaN: keep sign, force a quiet bit so the payload can't vanish */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x47800000u) /* >= 65536 (or inf): beyond any rounding to 65504 */
        return (uint16_t)(sign | 0x7c00u);

    if (a >= 0x38800000u) { /* f16 normal range, [2^-14, 65536) */
        uint32_t h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu);
        uint32_t rem = a & 0x1fffu;
        /* a carry out of the mantissa bumps the exponent, up to inf at >= 65520 */
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }

    if (a < 0x33000000u) /* below 2^-25: rounds to zero (2^-25 itself ties to 0 below) */
        return sign;

    /* subnormal: value / 2^-24 = m * 2^(e - 126), with e in [102, 112] */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u)))
        h++; /* may carry into 0x400, the smallest normal: still the right bits */
    return (uint16_t)(sign | h);
}
