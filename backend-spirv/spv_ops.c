/* Arithmetic, compares, conversions and bitcasts for the SPIR-V emitter. Arithmetic on
 * 16-bit floats held in f32 reaches it as f32 arithmetic and conversions, and f32 -> 16-bit
 * conversions as rounding written out in the IR and convert.exact (ir/lower_half.c). */
#include "backend-spirv/spv_internal.h"

#include <spirv/unified1/GLSL.std.450.h>

/* ---- conversions --------------------------------------------------------------------------- */

uint32_t spv_convert(spv_ctx *x, ir_scalar from, ir_scalar to, uint32_t n, uint32_t v, bool exact) {
    if (from == to) return v;
    uint32_t rt = spv_t_rep_sn(x, to, n);
    if (from == IR_BOOL) {
        uint32_t one =
            spv_c_splat(x, spv_t_rep_s(x, to), n, spv_c_scalar(x, to, ir_scalar_is_float(to) ? 0x3f800000u : 1u));
        uint32_t zero = spv_c_splat(x, spv_t_rep_s(x, to), n, spv_c_scalar(x, to, 0));
        return spv_fn3(x, SpvOpSelect, rt, v, one, zero);
    }
    if (to == IR_BOOL) {
        uint32_t zero = spv_c_splat(x, spv_t_rep_s(x, from), n, spv_c_scalar(x, from, 0));
        return spv_fn2(x, ir_scalar_is_float(from) ? SpvOpFUnordNotEqual : SpvOpINotEqual, rt, v, zero);
    }
    bool ff = ir_scalar_is_float(from), tf = ir_scalar_is_float(to);
    uint32_t f32n = spv_t_vec(x, spv_t_f32(x), n);
    if (ff && tf) {
        uint32_t f = v; /* as f32: exact from any 16-bit type */
        if (from == IR_F16 && x->f16_native) f = spv_fn1(x, SpvOpFConvert, f32n, v);
        if (to == IR_F32) return f;
        /* the IR rounded it (with f32 ops even for native f16: NVIDIA's compiler (580.159)
         * folds an f32 -> f16 -> f32 OpFConvert pair away), so the conversion is exact */
        if (!exact) {
            spv_fail(x, "f32 -> %s rounds in the IR before emission (ir/lower.h)", ir_scalar_name(to));
            return 0;
        }
        return to == IR_F16 && x->f16_native ? spv_fn1(x, SpvOpFConvert, rt, f) : f;
    }
    if (!ff && !tf) {
        if (ir_scalar_bits(from) == ir_scalar_bits(to)) return spv_fn1(x, SpvOpBitcast, rt, v);
        if (ir_scalar_is_signed(from)) return spv_fn1(x, SpvOpSConvert, rt, v); /* sign-extends or truncates */
        uint32_t r = spv_fn1(x, SpvOpUConvert, spv_t_rep_sn(x, ir_scalar_unsigned(to), n), v);
        return ir_scalar_is_signed(to) ? spv_fn1(x, SpvOpBitcast, rt, r) : r;
    }
    if (!ff) { /* int -> float */
        uint32_t op = ir_scalar_is_signed(from) ? SpvOpConvertSToF : SpvOpConvertUToF;
        if (to != IR_F32) { /* f32 is the one float the IR converts ints to */
            spv_fail(x, "convert from %s to %s", ir_scalar_name(from), ir_scalar_name(to));
            return 0;
        }
        return spv_fn1(x, op, rt, v);
    }
    /* float -> int, toward zero; widened values are exact in f32 */
    return spv_fn1(x, ir_scalar_is_signed(to) ? SpvOpConvertFToS : SpvOpConvertFToU, rt, v);
}

/* ---- arithmetic ------------------------------------------------------------------------------ */

bool spv_check_arith(spv_ctx *x, ir_scalar s) {
    if (s == IR_F16 && !x->f16_native) {
        spv_fail(x, "f16 arithmetic needs caps.f16_arith");
        return false;
    }
    if (s == IR_BF16 && !x->c->bf16_arith) {
        spv_fail(x, "bf16 arithmetic needs caps.bf16_arith");
        return false;
    }
    return true;
}

void spv_emit_arith(spv_ctx *x, const ir_inst *in) {
    ir_scalar s;
    uint32_t n;
    if (!ir_emit_tinfo(&x->e, in->type, &s, &n)) {
        spv_fail(x, "arithmetic on a fragment");
        return;
    }
    if (!spv_check_arith(x, s)) return;
    uint32_t t = spv_t_rep_sn(x, s, n);
    bool fl = ir_scalar_is_float(s), sg = ir_scalar_is_signed(s), bl = s == IR_BOOL;
    uint32_t r = 0;
    if (in->op == IR_OP_FMA) {
        if (!ir_emit_need(&x->e, in, 3)) return;
        if (!fl) {
            r = spv_fn2(x, SpvOpIAdd, t, spv_fn2(x, SpvOpIMul, t, spv_V(x, in->operand[0]), spv_V(x, in->operand[1])),
                        spv_V(x, in->operand[2]));
        } else {
            r = spv_ext3(x, t, GLSLstd450Fma, spv_V(x, in->operand[0]), spv_V(x, in->operand[1]),
                         spv_V(x, in->operand[2]));
            /* NoContraction: one fused operation with one rounding, the same wherever it
             * appears (without it a driver may split it, or split it differently) */
            spv_decorate(x, r, SpvDecorationNoContraction, 0, 0);
        }
    } else if (in->op >= IR_OP_ADD && in->op <= IR_OP_SHR) {
        if (!ir_emit_need(&x->e, in, 2)) return;
        uint32_t a = spv_V(x, in->operand[0]), b = spv_V(x, in->operand[1]);
        uint32_t op = 0, glsl = 0;
        switch (in->op) {
        case IR_OP_ADD: op = fl ? SpvOpFAdd : SpvOpIAdd; break;
        case IR_OP_SUB: op = fl ? SpvOpFSub : SpvOpISub; break;
        case IR_OP_MUL: op = fl ? SpvOpFMul : SpvOpIMul; break;
        case IR_OP_DIV: op = fl ? SpvOpFDiv : sg ? SpvOpSDiv : SpvOpUDiv; break;
        case IR_OP_REM: op = fl ? SpvOpFRem : sg ? SpvOpSRem : SpvOpUMod; break; /* C's sign rules */
        case IR_OP_MIN: glsl = fl ? GLSLstd450FMin : sg ? GLSLstd450SMin : GLSLstd450UMin; break;
        case IR_OP_MAX: glsl = fl ? GLSLstd450FMax : sg ? GLSLstd450SMax : GLSLstd450UMax; break;
        case IR_OP_AND: op = bl ? SpvOpLogicalAnd : SpvOpBitwiseAnd; break;
        case IR_OP_OR: op = bl ? SpvOpLogicalOr : SpvOpBitwiseOr; break;
        case IR_OP_XOR: op = bl ? SpvOpLogicalNotEqual : SpvOpBitwiseXor; break;
        case IR_OP_SHL: op = SpvOpShiftLeftLogical; break;
        case IR_OP_SHR: op = sg ? SpvOpShiftRightArithmetic : SpvOpShiftRightLogical; break;
        default: break;
        }
        if ((in->op >= IR_OP_AND && (fl || (!bl && !ir_scalar_is_int(s)))) || (bl && in->op < IR_OP_AND) ||
            (bl && (in->op == IR_OP_SHL || in->op == IR_OP_SHR))) {
            spv_fail(x, "%s on %s", ir_op_name(in->op), ir_scalar_name(s));
            return;
        }
        r = glsl ? spv_ext2(x, t, glsl, a, b) : spv_fn2(x, op, t, a, b);
        /* each float add, subtract, multiply and divide rounds on its own, as the oracle
         * (built with -ffp-contract=off) computes it: no fusing a * b + c into an fma */
        if (fl && !glsl && op != SpvOpFRem) spv_decorate(x, r, SpvDecorationNoContraction, 0, 0);
    } else {
        if (!ir_emit_need(&x->e, in, 1)) return;
        uint32_t a = spv_V(x, in->operand[0]);
        uint32_t glsl = 0;
        switch (in->op) {
        case IR_OP_NEG:
            if (bl) break;
            r = spv_fn1(x, fl ? SpvOpFNegate : SpvOpSNegate, t, a);
            break;
        case IR_OP_NOT:
            if (fl) break;
            r = spv_fn1(x, bl ? SpvOpLogicalNot : SpvOpNot, t, a);
            break;
        case IR_OP_ABS:
            if (bl) break;
            r = fl ? spv_ext1(x, t, GLSLstd450FAbs, a) : sg ? spv_ext1(x, t, GLSLstd450SAbs, a) : a;
            break;
        case IR_OP_EXP: glsl = GLSLstd450Exp; break;
        case IR_OP_LOG: glsl = GLSLstd450Log; break;
        case IR_OP_SQRT: glsl = GLSLstd450Sqrt; break;
        case IR_OP_RSQRT: glsl = GLSLstd450InverseSqrt; break;
        case IR_OP_TANH: glsl = GLSLstd450Tanh; break;
        case IR_OP_SIN: glsl = GLSLstd450Sin; break;
        case IR_OP_COS: glsl = GLSLstd450Cos; break;
        case IR_OP_FLOOR: glsl = GLSLstd450Floor; break;
        case IR_OP_ROUNDEVEN: glsl = GLSLstd450RoundEven; break;
        default: break;
        }
        if (glsl) {
            if (!fl) {
                spv_fail(x, "%s on %s", ir_op_name(in->op), ir_scalar_name(s));
                return;
            }
            r = spv_ext1(x, t, glsl, a);
        }
        if (!r) {
            spv_fail(x, "%s on %s", ir_op_name(in->op), ir_scalar_name(s));
            return;
        }
    }
    spv_def(x, in->result, r);
}

void spv_emit_cmp(spv_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 2)) return;
    ir_scalar s;
    uint32_t n;
    if (!ir_emit_tinfo(&x->e, ir_type_of(x->k, in->operand[0]), &s, &n)) {
        spv_fail(x, "compare of fragments");
        return;
    }
    static const uint32_t F[6] = {SpvOpFOrdEqual, SpvOpFOrdNotEqual, SpvOpFOrdLessThan, SpvOpFOrdLessThanEqual,
                                  SpvOpFOrdGreaterThan, SpvOpFOrdGreaterThanEqual};
    static const uint32_t S[6] = {SpvOpIEqual, SpvOpINotEqual, SpvOpSLessThan, SpvOpSLessThanEqual,
                                  SpvOpSGreaterThan, SpvOpSGreaterThanEqual};
    static const uint32_t U[6] = {SpvOpIEqual, SpvOpINotEqual, SpvOpULessThan, SpvOpULessThanEqual,
                                  SpvOpUGreaterThan, SpvOpUGreaterThanEqual};
    int64_t c = in->imm[0];
    if (c < 0 || c > IR_GE) {
        spv_fail(x, "bad comparison %lld", (long long)c);
        return;
    }
    uint32_t op;
    if (s == IR_BOOL) {
        if (c > IR_NE) {
            spv_fail(x, "ordering compare on bool");
            return;
        }
        op = c == IR_EQ ? SpvOpLogicalEqual : SpvOpLogicalNotEqual;
    } else {
        op = ir_scalar_is_float(s) ? F[c] : ir_scalar_is_signed(s) ? S[c] : U[c];
    }
    spv_def(x, in->result,
            spv_fn2(x, op, spv_t_vec(x, spv_t_bool(x), n), spv_V(x, in->operand[0]), spv_V(x, in->operand[1])));
}

/* The 16 bits of lane l of a 16-bit value, in the low half of a u32. */
static uint32_t half_bits(spv_ctx *x, ir_scalar s, uint32_t n, uint32_t v, uint32_t l) {
    uint32_t tu = spv_t_u32(x), lane = spv_lane_of(x, s, n, v, l);
    if (s == IR_BF16)
        return spv_fn2(x, SpvOpShiftRightLogical, tu, spv_fn1(x, SpvOpBitcast, tu, lane), spv_c_u32(x, 16));
    uint32_t pair =
        spv_fn2(x, SpvOpCompositeConstruct, spv_t_vec(x, spv_t_float(x, 16), 2), lane, spv_c_scalar(x, IR_F16, 0));
    return spv_fn2(x, SpvOpBitwiseAnd, tu, spv_fn1(x, SpvOpBitcast, tu, pair), spv_c_u32(x, 0xffff));
}

/* A 16-bit value from 16 bits in the low half of a u32. */
static uint32_t from_half_bits(spv_ctx *x, ir_scalar s, uint32_t bits) {
    if (s == IR_BF16)
        return spv_fn1(x, SpvOpBitcast, spv_t_f32(x),
                       spv_fn2(x, SpvOpShiftLeftLogical, spv_t_u32(x), bits, spv_c_u32(x, 16)));
    return spv_fn2(x, SpvOpCompositeExtract, spv_t_float(x, 16),
                   spv_fn1(x, SpvOpBitcast, spv_t_vec(x, spv_t_float(x, 16), 2), bits), 0);
}

/* Bitcasts through u32 words, since 16-bit lanes have no 16-bit integer registers here
 * (bf16 lives in f32, and 16-bit ints would need Int16, which caps does not report). */
void spv_emit_bitcast(spv_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 1)) return;
    ir_scalar fs, ts;
    uint32_t fn, tn;
    if (!ir_emit_tinfo(&x->e, ir_type_of(x->k, in->operand[0]), &fs, &fn) ||
        !ir_emit_tinfo(&x->e, in->type, &ts, &tn)) {
        spv_fail(x, "bitcast of fragments");
        return;
    }
    uint32_t v = spv_V(x, in->operand[0]);
    uint32_t bits = ir_scalar_bits(fs) * fn;
    if (bits != ir_scalar_bits(ts) * tn || fs == IR_BOOL || ts == IR_BOOL) {
        spv_fail(x, "bitcast %s x%u -> %s x%u changes the width", ir_scalar_name(fs), fn, ir_scalar_name(ts), tn);
        return;
    }
    bool h_from = ir_scalar_bits(fs) == 16, h_to = ir_scalar_bits(ts) == 16;
    if (!h_from && !h_to) {
        spv_def(x, in->result, spv_fn1(x, SpvOpBitcast, spv_t_rep(x, in->type), v));
        return;
    }
    if ((fs == IR_F16 || ts == IR_F16) && !x->f16_native) {
        spv_fail(x, "bitcast of f16 needs native f16 (caps.f16_arith)");
        return;
    }
    /* the value as u32 words (a single 16-bit scalar: one word holding 16 bits) */
    uint32_t nw = bits >= 32 ? bits / 32 : 1, w[4], tu = spv_t_u32(x);
    if (h_from) {
        for (uint32_t i = 0; i < nw; i++) {
            w[i] = half_bits(x, fs, fn, v, 2 * i);
            if (2 * i + 1 < fn) {
                uint32_t hi =
                    spv_fn2(x, SpvOpShiftLeftLogical, tu, half_bits(x, fs, fn, v, 2 * i + 1), spv_c_u32(x, 16));
                w[i] = spv_fn2(x, SpvOpBitwiseOr, tu, w[i], hi);
            }
        }
    } else {
        uint32_t words = spv_fn1(x, SpvOpBitcast, spv_t_vec(x, tu, nw), v);
        for (uint32_t i = 0; i < nw; i++) w[i] = nw == 1 ? words : spv_fn2(x, SpvOpCompositeExtract, tu, words, i);
    }
    uint32_t r;
    if (h_to) {
        uint32_t lanes[4];
        for (uint32_t l = 0; l < tn; l++) {
            uint32_t word = w[l / 2];
            if (l % 2) word = spv_fn2(x, SpvOpShiftRightLogical, tu, word, spv_c_u32(x, 16));
            else if (tn > 1) word = spv_fn2(x, SpvOpBitwiseAnd, tu, word, spv_c_u32(x, 0xffff));
            lanes[l] = from_half_bits(x, ts, word);
        }
        if (tn == 1) {
            r = lanes[0];
        } else {
            r = spv_b_id(&x->b);
            uint32_t o[6] = {spv_t_rep(x, in->type), r, lanes[0], lanes[1], lanes[2], lanes[3]};
            spv_b_emit(&x->b, SPV_SEC_FUNCTION, SpvOpCompositeConstruct, o, 2 + tn);
        }
    } else {
        uint32_t words = w[0];
        if (nw > 1) {
            words = spv_b_id(&x->b);
            uint32_t o[6] = {spv_t_vec(x, tu, nw), words, w[0], w[1], w[2], w[3]};
            spv_b_emit(&x->b, SPV_SEC_FUNCTION, SpvOpCompositeConstruct, o, 2 + nw);
        }
        r = spv_fn1(x, SpvOpBitcast, spv_t_rep(x, in->type), words);
    }
    spv_def(x, in->result, r);
}

