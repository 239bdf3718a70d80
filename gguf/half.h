/* 16-bit float conversions. f32 -> 16-bit rounds to nearest even; NaN stays NaN. */
#ifndef KILN_GGUF_HALF_H
#define KILN_GGUF_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t gguf_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float gguf_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float gguf_bf16_to_f32(uint16_t h) { return gguf_bits_f32((uint32_t)h << 16); }

static inline uint16_t gguf_f32_to_bf16(float f) {
    uint32_t u = gguf_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, force a quiet mantissa bit */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

float gguf_f16_to_f32(uint16_t h);
uint16_t gguf_f32_to_f16(float f);

#endif
