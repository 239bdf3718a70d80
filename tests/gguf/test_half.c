/* f16 and bf16 conversions: exact values, ties to even, and every f16 bit pattern. */
#include "gguf/half.h"

#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

static uint16_t to_f16(double x) { return gguf_f32_to_f16((float)x); }

/* ---- f16 -> f32 ------------------------------------------------------------------------- */

Test(half, f16_to_f32_exact) {
    cr_assert_eq(gguf_f16_to_f32(0x3c00), 1.0f);
    cr_assert_eq(gguf_f16_to_f32(0xc000), -2.0f);
    cr_assert_eq(gguf_f16_to_f32(0x3555), 0x555p-12f); /* 1365 * 2^-12 = 0.333251953125 */
    cr_assert_eq(gguf_f16_to_f32(0x7bff), 65504.0f);
    cr_assert_eq(gguf_f16_to_f32(0xfbff), -65504.0f);
    cr_assert_eq(gguf_f16_to_f32(0x0400), 0x1p-14f); /* smallest normal */
    cr_assert_eq(gguf_f16_to_f32(0x0001), 0x1p-24f); /* smallest subnormal */
    cr_assert_eq(gguf_f16_to_f32(0x0002), 0x1p-23f);
    cr_assert_eq(gguf_f16_to_f32(0x03ff), 1023.0f * 0x1p-24f); /* largest subnormal */
    cr_assert_eq(gguf_f16_to_f32(0x8001), -0x1p-24f);
    cr_assert_eq(gguf_f16_to_f32(0x0200), 0x1p-15f);
}

Test(half, f16_to_f32_zero_inf_nan) {
    float pz = gguf_f16_to_f32(0x0000), nz = gguf_f16_to_f32(0x8000);
    cr_assert(pz == 0.0f && !signbit(pz));
    cr_assert(nz == 0.0f && signbit(nz));
    cr_assert(isinf(gguf_f16_to_f32(0x7c00)) && gguf_f16_to_f32(0x7c00) > 0);
    cr_assert(isinf(gguf_f16_to_f32(0xfc00)) && gguf_f16_to_f32(0xfc00) < 0);
    cr_assert(isnan(gguf_f16_to_f32(0x7e00)) && !signbit(gguf_f16_to_f32(0x7e00)));
    cr_assert(isnan(gguf_f16_to_f32(0x7c01))); /* signalling payload must not become inf */
    cr_assert_eq(gguf_f32_bits(gguf_f16_to_f32(0x7c01)), 0x7fc02000u); /* quieted, as ggml */
    cr_assert_eq(gguf_f32_bits(gguf_f16_to_f32(0xfd55)), 0xffeaa000u);
    cr_assert(isnan(gguf_f16_to_f32(0xfe00)) && signbit(gguf_f16_to_f32(0xfe00)));
}

/* ---- f32 -> f16 ------------------------------------------------------------------------- */

Test(half, f32_to_f16_exact) {
    cr_assert_eq(to_f16(1.0), 0x3c00);
    cr_assert_eq(to_f16(-2.0), 0xc000);
    cr_assert_eq(to_f16(0.5), 0x3800);
    cr_assert_eq(to_f16(65504.0), 0x7bff);
    cr_assert_eq(to_f16(-65504.0), 0xfbff);
    cr_assert_eq(to_f16(0x1p-14), 0x0400);
    cr_assert_eq(to_f16(0x1p-24), 0x0001);
    cr_assert_eq(to_f16(1023.0 * 0x1p-24), 0x03ff);
    cr_assert_eq(to_f16(-0x1p-24), 0x8001);
    cr_assert_eq(to_f16(0.0), 0x0000);
    cr_assert_eq(to_f16(-0.0), 0x8000);
}

Test(half, f32_to_f16_ties_to_even) {
    /* near 1 the f16 step is 2^-10; halfway points go to the even mantissa */
    cr_assert_eq(to_f16(1.0 + 0x1p-11), 0x3c00);            /* 1 | 1+2^-10: 1 is even */
    cr_assert_eq(to_f16(1.0 + 3 * 0x1p-11), 0x3c02);        /* 1+2^-10 | 1+2^-9: 1+2^-9 */
    cr_assert_eq(to_f16(1.0 + 0x1p-11 + 0x1p-20), 0x3c01);  /* just above the tie */
    cr_assert_eq(to_f16(1.0 + 3 * 0x1p-11 - 0x1p-20), 0x3c01); /* just below the tie */
    cr_assert_eq(to_f16(-(1.0 + 3 * 0x1p-11)), 0xbc02);
    /* subnormals: steps of 2^-24 */
    cr_assert_eq(to_f16(0x1p-25), 0x0000);                  /* 0 | 2^-24: 0 is even */
    cr_assert_eq(to_f16(-0x1p-25), 0x8000);
    cr_assert_eq(to_f16(0x1p-25 * (1.0 + 0x1p-23)), 0x0001); /* a hair above the tie */
    cr_assert_eq(to_f16(0x1p-26), 0x0000);
    cr_assert_eq(to_f16(3 * 0x1p-25), 0x0002);              /* 1.5 ulp: 1 | 2 -> 2 */
    cr_assert_eq(to_f16(5 * 0x1p-25), 0x0002);              /* 2.5 ulp: 2 | 3 -> 2 */
    cr_assert_eq(to_f16(7 * 0x1p-25), 0x0004);              /* 3.5 ulp: 3 | 4 -> 4 */
    cr_assert_eq(to_f16(1023.5 * 0x1p-24), 0x0400);         /* largest subnormal | 2^-14 */
    cr_assert_eq(to_f16(1022.5 * 0x1p-24), 0x03fe);
    cr_assert_eq(to_f16(1e-40), 0x0000);                    /* f32 subnormal */
    cr_assert_eq(to_f16(-1e-40), 0x8000);
}

Test(half, f32_to_f16_overflow) {
    cr_assert_eq(to_f16(65519.0), 0x7bff);   /* below the 65504 | 65536 midpoint */
    cr_assert_eq(to_f16(65520.0), 0x7c00);   /* the midpoint: 65504's mantissa is odd */
    cr_assert_eq(to_f16(-65520.0), 0xfc00);
    cr_assert_eq(to_f16(65536.0), 0x7c00);
    cr_assert_eq(to_f16(1e6), 0x7c00);
    cr_assert_eq(gguf_f32_to_f16(FLT_MAX), 0x7c00);
    cr_assert_eq(gguf_f32_to_f16(INFINITY), 0x7c00);
    cr_assert_eq(gguf_f32_to_f16(-INFINITY), 0xfc00);
}

Test(half, f32_to_f16_nan) {
    uint16_t p = gguf_f32_to_f16(NAN);
    uint16_t n = gguf_f32_to_f16(-NAN);
    cr_assert_eq(p & 0x7c00, 0x7c00);
    cr_assert_neq(p & 0x03ff, 0);
    cr_assert_eq(p & 0x8000, 0);
    cr_assert_eq(n & 0x7c00, 0x7c00);
    cr_assert_neq(n & 0x03ff, 0);
    cr_assert_eq(n & 0x8000, 0x8000);
    /* a payload only in the low f32 mantissa bits would truncate to inf without care */
    uint16_t low = gguf_f32_to_f16(gguf_bits_f32(0xff800001u));
    cr_assert_eq(low & 0xfc00, 0xfc00);
    cr_assert_neq(low & 0x03ff, 0);
}

/* Every f16 pattern: f16->f32 equals the value from the definition, and f32->f16
 * gives the pattern back (NaNs stay NaN, with sign). */
Test(half, f16_exhaustive_round_trip) {
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t e = (h >> 10) & 31, m = h & 1023;
        float f = gguf_f16_to_f32((uint16_t)h);
        uint16_t back = gguf_f32_to_f16(f);
        if (e == 31 && m != 0) {
            cr_assert(isnan(f), "h=%04x", h);
            cr_assert_eq(!!signbit(f), !!(h & 0x8000), "h=%04x", h);
            cr_assert_eq(back & 0x7c00, 0x7c00, "h=%04x", h);
            cr_assert_neq(back & 0x03ff, 0, "h=%04x", h);
            cr_assert_eq(back & 0x8000, h & 0x8000, "h=%04x", h);
            continue;
        }
        double mag = e == 31 ? INFINITY : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, (int)e - 25);
        double want = (h & 0x8000) ? -mag : mag;
        cr_assert_eq((double)f, want, "h=%04x", h);
        cr_assert_eq(!!signbit(f), !!(h & 0x8000), "h=%04x", h);
        cr_assert_eq(back, h, "h=%04x -> %04x", h, back);
    }
}

/* Midpoints between every pair of neighbouring finite f16s round to the even one, and
 * one f32 step either side of the midpoint goes to the nearer one. */
Test(half, f32_to_f16_exhaustive_midpoints) {
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double lo = gguf_f16_to_f32((uint16_t)h), hi = gguf_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2); /* exact: 12 significant bits */
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        cr_assert_eq(gguf_f32_to_f16(mid), even, "h=%04x", h);
        cr_assert_eq(gguf_f32_to_f16(nextafterf(mid, 0.0f)), h, "h=%04x", h);
        cr_assert_eq(gguf_f32_to_f16(nextafterf(mid, INFINITY)), h + 1, "h=%04x", h);
        cr_assert_eq(gguf_f32_to_f16(-mid), even | 0x8000, "h=%04x", h);
    }
}

/* ---- bf16 (header inlines) -------------------------------------------------------------- */

Test(half, bf16_exact) {
    cr_assert_eq(gguf_bf16_to_f32(0x3f80), 1.0f);
    cr_assert_eq(gguf_bf16_to_f32(0xc040), -3.0f);
    cr_assert_eq(gguf_bf16_to_f32(0x4049), 3.140625f);
    cr_assert_eq(gguf_bf16_to_f32(0x0001), 0x1p-133f);
    cr_assert_eq(gguf_f32_to_bf16(1.0f), 0x3f80);
    cr_assert_eq(gguf_f32_to_bf16(-3.0f), 0xc040);
    cr_assert_eq(gguf_f32_to_bf16(0x1p-133f), 0x0001);
    cr_assert_eq(gguf_f32_to_bf16(-0.0f), 0x8000);
}

Test(half, bf16_ties_to_even) {
    /* near 1 the bf16 step is 2^-7 */
    cr_assert_eq(gguf_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);          /* tie -> 1.0 */
    cr_assert_eq(gguf_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);      /* tie -> 1 + 2^-6 */
    cr_assert_eq(gguf_bf16_to_f32(0x3f82), 1.0f + 0x1p-6f);
    cr_assert_eq(gguf_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81); /* above the tie */
    cr_assert_eq(gguf_f32_to_bf16(1.0f + 3 * 0x1p-8f - 0x1p-20f), 0x3f81);
    cr_assert_eq(gguf_f32_to_bf16(-(1.0f + 0x1p-8f)), 0xbf80);
}

Test(half, bf16_overflow_nan) {
    cr_assert_eq(gguf_f32_to_bf16(FLT_MAX), 0x7f80); /* rounds up past the largest bf16 */
    cr_assert_eq(gguf_f32_to_bf16(-INFINITY), 0xff80);
    uint16_t n = gguf_f32_to_bf16(gguf_bits_f32(0xff800001u)); /* payload only in low bits */
    cr_assert_eq(n & 0xff80, 0xff80);
    cr_assert_neq(n & 0x007f, 0);
    cr_assert(isnan(gguf_bf16_to_f32(0x7fc0)));
}
