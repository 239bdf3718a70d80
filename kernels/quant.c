/* Block-quantized weights on the device: the formats, the planes' layout (kn_quant.h) and
 * their decoding inside a kernel (quant_ir.h). */
#include "base/error.h"
#include "kernels/kn_common.h"
#include "kernels/quant_ir.h"

static const kn_qformat formats[KN_Q_COUNT] = {
    /* name     sub unit lo hi offset k_quant has_min */
    [KN_Q4_0] = {"Q4_0", 32, 32, 4, 0, 8, false, false},
    [KN_Q4_1] = {"Q4_1", 32, 32, 4, 0, 0, false, true},
    [KN_Q5_0] = {"Q5_0", 32, 32, 4, 1, 16, false, false},
    [KN_Q5_1] = {"Q5_1", 32, 32, 4, 1, 0, false, true},
    [KN_Q8_0] = {"Q8_0", 32, 32, 8, 0, 128, false, false}, /* the signed byte + 128 */
    [KN_Q2_K] = {"Q2_K", 16, 256, 2, 0, 0, true, true},
    [KN_Q3_K] = {"Q3_K", 16, 256, 2, 1, 4, true, false},
    [KN_Q4_K] = {"Q4_K", 32, 256, 4, 0, 0, true, true},
    [KN_Q5_K] = {"Q5_K", 32, 256, 4, 1, 0, true, true},
    [KN_Q6_K] = {"Q6_K", 16, 256, 4, 2, 32, true, false},
};

const kn_qformat *kn_qformat_of(kn_qtype q) { return (unsigned)q < KN_Q_COUNT ? &formats[q] : NULL; }

#define PLANE_ALIGN 64 /* words: 256 bytes */

static uint64_t plane(uint64_t *at, uint64_t words) {
    uint64_t start = *at;
    *at += (words + PLANE_ALIGN - 1) / PLANE_ALIGN * PLANE_ALIGN;
    return start;
}

int kn_qlayout_of(kn_qtype q, uint32_t rows, uint32_t cols, kn_qlayout *out, kiln_err *err) {
    const kn_qformat *f = kn_qformat_of(q);
    if (!f) return kiln_fail(err, KILN_ERR_INVALID, "unknown quantized type %d", (int)q);
    if (!rows || !cols || cols % f->unit)
        return kiln_fail(err, KILN_ERR_INVALID, "%s: a %u x %u matrix is not whole blocks of %u a row", f->name, rows,
                         cols, f->unit);
    uint64_t n = (uint64_t)rows * cols, at = 0;
    *out = (kn_qlayout){.type = q, .rows = rows, .cols = cols};
    out->lo = plane(&at, n * f->lo_bits / 32);
    if (f->hi_bits) out->hi = plane(&at, n * f->hi_bits / 32);
    uint64_t units = n / f->unit, subs = n / f->sub;
    out->d = plane(&at, (units + 1) / 2);
    if (f->has_min) out->dm = plane(&at, (units + 1) / 2);
    if (f->k_quant) out->sc = plane(&at, (subs + 3) / 4);
    if (f->k_quant && f->has_min) out->mn = plane(&at, (subs + 3) / 4);
    out->words = at;
    if (n > UINT32_MAX || at > UINT32_MAX)
        return kiln_fail(err, KILN_ERR_UNSUPPORTED, "%s: a %u x %u matrix passes u32 indices", f->name, rows, cols);
    return 0;
}

ir_val kn_q_f16_bits(kx k, ir_val bits) {
    ir_val sign = kx_shl_c(k, kx_and_c(k, bits, 0x8000u), 16);
    ir_val ex = kx_and_c(k, kx_shr_c(k, bits, 10), 0x1fu), mant = kx_and_c(k, bits, 0x3ffu);
    /* normal: the exponent rebased from 15 to 127 */
    ir_val normal = kx_or(k, sign, kx_shl_c(k, kx_add_c(k, kx_and_c(k, bits, 0x7fffu), 112u << 10), 13));
    ir_val inf = kx_u32(k, 0x7f800000u);
    ir_val special = kx_or(k, sign, kx_or(k, inf, kx_shl_c(k, mant, 13)));
    /* zero and subnormals: mant * 2^-24, exact in f32 (a normal number or zero) */
    ir_val tiny = kx_mul_f(k, kx_as(k, mant, IR_F32), 0x1p-24f);
    ir_val tiny_bits = kx_or(k, sign, kx_bitcast(k, tiny, kx_t(k, IR_U32, 1)));
    ir_val r = kx_select(k, kx_eq_c(k, ex, 31), special, normal);
    r = kx_select(k, kx_eq_c(k, ex, 0), tiny_bits, r);
    return kx_bitcast(k, r, kx_t(k, IR_F32, 1));
}

/* The words of a plane holding bits-bit codes for the chunk from e0: bits words. */
static void plane_words(kx k, ir_buf w, uint64_t at, uint32_t bits, ir_val e0, ir_val *words) {
    ir_val first = kx_add_c(k, kx_mul_c(k, kx_shr_c(k, e0, 5), bits), (uint32_t)at);
    for (uint32_t i = 0; i < bits; i += 4) { /* 16-byte loads, or one of 2 words, or a word */
        uint32_t lanes = bits - i >= 4 ? 4 : bits - i;
        ir_val v = kx_load(k, w, i ? kx_add_c(k, first, i) : first, lanes);
        for (uint32_t l = 0; l < lanes; l++) words[i + l] = lanes == 1 ? v : kx_lane(k, v, l);
    }
}

/* Code j's bits bits from a plane's words of the chunk. */
static ir_val code_bits(kx k, const ir_val *words, uint32_t bits, uint32_t j) {
    uint32_t bit = j * bits, sh = bit % 32;
    ir_val v = sh ? kx_shr_c(k, words[bit / 32], sh) : words[bit / 32];
    return bits == 32 - sh ? v : kx_and_c(k, v, (1u << bits) - 1);
}

void kn_q_codes_load(kx k, const kn_qlayout *L, ir_buf w, ir_val e0, kn_q_words *c) {
    const kn_qformat *f = kn_qformat_of(L->type);
    plane_words(k, w, L->lo, f->lo_bits, e0, c->lo);
    if (f->hi_bits) plane_words(k, w, L->hi, f->hi_bits, e0, c->hi);
}

void kn_q_codes_decode(kx k, const kn_qlayout *L, const kn_q_words *c, ir_val *q) {
    const kn_qformat *f = kn_qformat_of(L->type);
    ir_type ft = kx_t(k, IR_F32, 1);
    ir_val zero = kx_f32(k, 8388608.0f + (float)f->offset); /* 2^23 + offset: exact */
    for (uint32_t j = 0; j < KN_Q_CHUNK; j++) {
        ir_val code = code_bits(k, c->lo, f->lo_bits, j);
        if (f->hi_bits) code = kx_or(k, code, kx_shl_c(k, code_bits(k, c->hi, f->hi_bits, j), f->lo_bits));
        /* 2^23 + code as an f32's bits, less 2^23 + offset: code - offset exactly */
        q[j] = kx_sub(k, kx_bitcast(k, kx_or(k, code, kx_u32(k, 0x4b000000u)), ft), zero);
    }
}

void kn_q_chunk(kx k, const kn_qlayout *L, ir_buf w, ir_val e0, ir_val *q) {
    kn_q_words c;
    kn_q_codes_load(k, L, w, e0, &c);
    kn_q_codes_decode(k, L, &c, q);
}

/* The f16 in half (u & 1) of word, as f32: CUDA's conversion instruction (exact), else
 * kn_q_f16_bits (a Vulkan device need not offer f16 values). */
static ir_val f16_half(kx k, ir_val word, ir_val u) {
    ir_val w = kx_shr(k, word, kx_shl_c(k, kx_and_c(k, u, 1), 4));
    if (k.caps && k.caps->backend == RT_CUDA) return kx_as(k, kx_lane(k, kx_bitcast(k, w, kx_t(k, IR_F16, 2)), 0), IR_F32);
    return kn_q_f16_bits(k, w);
}

/* Byte (i & 3) of word: 0..255 as u32. */
static ir_val byte_of(kx k, ir_val word, ir_val i) {
    return kx_and_c(k, kx_shr(k, word, kx_shl_c(k, kx_and_c(k, i, 3), 3)), 0xffu);
}

static ir_val unit_of(kx k, const kn_qformat *f, ir_val si) {
    return f->unit == f->sub ? si : kx_div_c(k, si, f->unit / f->sub);
}

void kn_q_scale_words(kx k, const kn_qlayout *L, ir_val si, ir_val at[KN_Q_SCALE_WORDS]) {
    const kn_qformat *f = kn_qformat_of(L->type);
    ir_val u = unit_of(k, f, si), du = kx_shr_c(k, u, 1), bi = kx_shr_c(k, si, 2);
    at[0] = kx_add_c(k, du, (uint32_t)L->d);
    at[1] = f->has_min ? kx_add_c(k, du, (uint32_t)L->dm) : IR_NONE;
    at[2] = f->k_quant ? kx_add_c(k, bi, (uint32_t)L->sc) : IR_NONE;
    at[3] = f->k_quant && f->has_min ? kx_add_c(k, bi, (uint32_t)L->mn) : IR_NONE;
}

void kn_q_scale_load(kx k, const kn_qlayout *L, ir_buf w, ir_val si, ir_val raw[KN_Q_SCALE_WORDS]) {
    ir_val at[KN_Q_SCALE_WORDS];
    kn_q_scale_words(k, L, si, at);
    for (uint32_t i = 0; i < KN_Q_SCALE_WORDS; i++) raw[i] = at[i] == IR_NONE ? IR_NONE : kx_load(k, w, at[i], 1);
}

void kn_q_scale_decode(kx k, const kn_qlayout *L, ir_val si, const ir_val raw[KN_Q_SCALE_WORDS], ir_val *s, ir_val *m) {
    const kn_qformat *f = kn_qformat_of(L->type);
    ir_val u = unit_of(k, f, si);
    ir_val d = f16_half(k, raw[0], u);
    *m = IR_NONE;
    if (!f->k_quant) {
        *s = d;
        if (f->has_min) *m = f16_half(k, raw[1], u);
        return;
    }
    /* the signed byte: (b ^ 0x80) - 0x80 in i32 */
    ir_val byte = byte_of(k, raw[2], si);
    ir_val b = kx_bitcast(k, kx_xor(k, byte, kx_u32(k, 0x80u)), kx_t(k, IR_I32, 1));
    *s = kx_mul(k, d, kx_as(k, kx_add_i(k, b, -128), IR_F32));
    if (f->has_min) {
        ir_val dmin = f16_half(k, raw[1], u);
        *m = kx_neg(k, kx_mul(k, dmin, kx_as(k, byte_of(k, raw[3], si), IR_F32)));
    }
}

void kn_q_parts_values(kx k, const kn_qlayout *L, const ir_buf *w, uint32_t n_parts, ir_val row, ir_val col,
                       uint32_t cols, kn_q_part_fn fn, uint32_t n, ir_val *out) {
    if (n_parts == 1) {
        fn(k, L, w[0], row, col, cols, out);
        return;
    }
    ir_val a[KN_Q_PART_VALS], b[KN_Q_PART_VALS];
    ir_if *f = ir_if_begin(k.ir, kx_lt_c(k, row, L[0].rows), n);
    fn(k, L, w[0], row, col, cols, a);
    ir_if_else(k.ir, f, a);
    kn_q_parts_values(k, L + 1, w + 1, n_parts - 1, kx_sub_c(k, row, L[0].rows), col, cols, fn, n, b);
    ir_if_end(k.ir, f, b);
    for (uint32_t j = 0; j < n; j++) out[j] = ir_if_result(f, j);
}

void kn_q_sub_scale(kx k, const kn_qlayout *L, ir_buf w, ir_val si, ir_val *s, ir_val *m) {
    ir_val raw[KN_Q_SCALE_WORDS];
    kn_q_scale_load(k, L, w, si, raw);
    kn_q_scale_decode(k, L, si, raw, s, m);
}

int kn_q_part_layouts(const char *name, const kn_qpart *parts, uint32_t n_parts, uint32_t cols, bool swi,
                        kn_qlayout *L, uint32_t *rows, kiln_err *err) {
    if (!parts || !n_parts || n_parts > KN_Q_PARTS || (swi && (n_parts != 2 || parts[0].rows != parts[1].rows)))
        return kiln_fail(err, KILN_ERR_INVALID, "%s: %u parts%s", name, n_parts, swi ? " (SwiGLU takes two equal ones)" : "");
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_parts; i++) {
        if (kn_qlayout_of(parts[i].type, parts[i].rows, cols, &L[i], err)) return -1;
        total += parts[i].rows;
    }
    *rows = swi ? parts[0].rows : (uint32_t)total;
    if (total > UINT32_MAX / 2) return kiln_fail(err, KILN_ERR_INVALID, "%s: %llu rows", name, (unsigned long long)total);
    return 0;
}

