/* Arithmetic, compares, conversions and bitcasts for the PTX emitter, and the value
 * representation they share: f16 and bf16 live in f32 registers and as i16 in memory.
 * Their arithmetic reaches it as f32 arithmetic and conversions (ir/lower_half.c). */
#include "backend-ptx/ptx_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- types and constants ---------------------------------------------------------------- */

static LLVMTypeRef vec(LLVMTypeRef t, uint32_t lanes) { return lanes > 1 ? LLVMVectorType(t, lanes) : t; }
LLVMTypeRef ptx_t_i32(ptx_ctx *x) { return LLVMInt32TypeInContext(x->lc); }
static LLVMTypeRef t_f32(ptx_ctx *x) { return LLVMFloatTypeInContext(x->lc); }

LLVMTypeRef ptx_t_rep(ptx_ctx *x, ir_scalar s, uint32_t lanes) {
    LLVMTypeRef t;
    switch (s) {
    case IR_BOOL: t = LLVMInt1TypeInContext(x->lc); break;
    case IR_I32: case IR_U32: t = ptx_t_i32(x); break;
    case IR_I64: case IR_U64: t = LLVMInt64TypeInContext(x->lc); break;
    case IR_F16: case IR_BF16: case IR_F32: t = t_f32(x); break;
    default: ptx_fail(x, "unknown scalar type %d", (int)s); t = ptx_t_i32(x); break;
    }
    return vec(t, lanes);
}

LLVMTypeRef ptx_t_store(ptx_ctx *x, ir_scalar s, uint32_t lanes) {
    if (s == IR_F16 || s == IR_BF16) return vec(LLVMInt16TypeInContext(x->lc), lanes);
    return ptx_t_rep(x, s, lanes);
}

LLVMValueRef ptx_c_i32(ptx_ctx *x, uint32_t v) { return LLVMConstInt(ptx_t_i32(x), v, 0); }

static LLVMValueRef splat(LLVMValueRef c, uint32_t lanes) {
    if (lanes <= 1) return c;
    LLVMValueRef v[4] = {c, c, c, c};
    return LLVMConstVector(v, lanes);
}
static LLVMValueRef c_u32n(ptx_ctx *x, uint32_t lanes, uint32_t v) { return splat(ptx_c_i32(x, v), lanes); }

/* A scalar constant from the IR's CONST encoding (f32 as its bits, kept exactly). */
LLVMValueRef ptx_c_scalar(ptx_ctx *x, ir_scalar s, uint64_t bits) {
    switch (s) {
    case IR_BOOL: return LLVMConstInt(LLVMInt1TypeInContext(x->lc), bits != 0, 0);
    case IR_I32: case IR_U32: return LLVMConstInt(ptx_t_i32(x), (uint32_t)bits, 0);
    case IR_I64: case IR_U64: return LLVMConstInt(LLVMInt64TypeInContext(x->lc), bits, 0);
    case IR_F32: case IR_F16: case IR_BF16: {
        uint32_t u = (uint32_t)bits;
        float f;
        memcpy(&f, &u, 4);
        if (f != f) return LLVMConstBitCast(ptx_c_i32(x, u), t_f32(x)); /* keeps the NaN's bits */
        return LLVMConstReal(t_f32(x), f);
    }
    default: ptx_fail(x, "constant of unknown type"); return ptx_c_i32(x, 0);
    }
}

LLVMValueRef ptx_c_splat(ptx_ctx *x, ir_scalar s, uint32_t lanes, uint64_t bits) {
    return splat(ptx_c_scalar(x, s, bits), lanes);
}

/* A call to a declared-on-demand function or intrinsic. */
LLVMValueRef ptx_call(ptx_ctx *x, const char *name, LLVMTypeRef ret, LLVMTypeRef *args, LLVMValueRef *vals,
                      unsigned n) {
    LLVMTypeRef ft = LLVMFunctionType(ret, args, n, 0);
    LLVMValueRef f = LLVMGetNamedFunction(x->m, name);
    if (!f) f = LLVMAddFunction(x->m, name, ft);
    return LLVMBuildCall2(x->b, ft, f, vals, n, "");
}

/* "f32", "v4f32", "i32", "v2i64": an overloaded intrinsic's suffix. */
static void suffix(char *buf, size_t n, ir_scalar s, uint32_t lanes) {
    const char *e = ir_scalar_is_float(s)     ? "f32"
                    : ir_scalar_bits(s) == 64 ? "i64"
                    : ir_scalar_bits(s) == 1  ? "i1"
                                              : "i32";
    if (lanes > 1) snprintf(buf, n, "v%u%s", lanes, e);
    else snprintf(buf, n, "%s", e);
}

static LLVMValueRef intr1(ptx_ctx *x, const char *base, ir_scalar s, uint32_t lanes, LLVMValueRef a) {
    char nm[64], sf[16];
    suffix(sf, sizeof sf, s, lanes);
    snprintf(nm, sizeof nm, "%s.%s", base, sf);
    LLVMTypeRef t = ptx_t_rep(x, s, lanes);
    return ptx_call(x, nm, t, &t, &a, 1);
}
static LLVMValueRef intr2(ptx_ctx *x, const char *base, ir_scalar s, uint32_t lanes, LLVMValueRef a, LLVMValueRef b) {
    char nm[64], sf[16];
    suffix(sf, sizeof sf, s, lanes);
    snprintf(nm, sizeof nm, "%s.%s", base, sf);
    LLVMTypeRef t = ptx_t_rep(x, s, lanes), ts[2] = {t, t};
    LLVMValueRef v[2] = {a, b};
    return ptx_call(x, nm, t, ts, v, 2);
}

/* ---- 16-bit values: f16 conversions and storage -------------------------------------------- */

/* f32 -> the nearest f16 value, as f32: cvt.rn.f16.f32 (RNE, overflow to inf, f16
 * subnormals) and back (exact). */
static LLVMValueRef round_f16(ptx_ctx *x, uint32_t n, LLVMValueRef f) {
    LLVMValueRef h = LLVMBuildFPTrunc(x->b, f, vec(LLVMHalfTypeInContext(x->lc), n), "");
    return LLVMBuildFPExt(x->b, h, vec(t_f32(x), n), "");
}

/* f32 -> the nearest bf16 value, as f32: cvt.rn.bf16.f32 (sm_80+; RNE, as the IR's
 * rounding below sm_80, ir/lower_half.c, one instruction for its eight) and back by a shift
 * (exact). */
static LLVMValueRef round_bf16(ptx_ctx *x, uint32_t n, LLVMValueRef f) {
    LLVMValueRef h = LLVMBuildFPTrunc(x->b, f, vec(LLVMBFloatTypeInContext(x->lc), n), "");
    LLVMValueRef u = LLVMBuildZExt(x->b, LLVMBuildBitCast(x->b, h, vec(LLVMInt16TypeInContext(x->lc), n), ""),
                                   vec(ptx_t_i32(x), n), "");
    return LLVMBuildBitCast(x->b, LLVMBuildShl(x->b, u, c_u32n(x, n, 16), ""), vec(t_f32(x), n), "");
}

LLVMValueRef ptx_to_storage(ptx_ctx *x, ir_scalar s, uint32_t n, LLVMValueRef v) {
    if (s == IR_BF16) { /* the value is a bf16 already: its top 16 bits are exact */
        LLVMValueRef u = LLVMBuildBitCast(x->b, v, vec(ptx_t_i32(x), n), "");
        return LLVMBuildTrunc(x->b, LLVMBuildLShr(x->b, u, c_u32n(x, n, 16), ""), ptx_t_store(x, s, n), "");
    }
    if (s == IR_F16) { /* exact: the value is an f16 already */
        LLVMValueRef h = LLVMBuildFPTrunc(x->b, v, vec(LLVMHalfTypeInContext(x->lc), n), "");
        return LLVMBuildBitCast(x->b, h, ptx_t_store(x, s, n), "");
    }
    return v;
}

LLVMValueRef ptx_from_storage(ptx_ctx *x, ir_scalar s, uint32_t n, LLVMValueRef v) {
    if (s == IR_BF16) {
        LLVMValueRef w = LLVMBuildShl(x->b, LLVMBuildZExt(x->b, v, vec(ptx_t_i32(x), n), ""), c_u32n(x, n, 16), "");
        return LLVMBuildBitCast(x->b, w, vec(t_f32(x), n), "");
    }
    if (s == IR_F16) {
        LLVMValueRef h = LLVMBuildBitCast(x->b, v, vec(LLVMHalfTypeInContext(x->lc), n), "");
        return LLVMBuildFPExt(x->b, h, vec(t_f32(x), n), "");
    }
    return v;
}

/* ---- arithmetic ------------------------------------------------------------------------------ */

static bool check_arith(ptx_ctx *x, ir_scalar s) {
    if (s == IR_F16 && !x->c->f16_arith) {
        ptx_fail(x, "f16 arithmetic needs caps.f16_arith");
        return false;
    }
    if (s == IR_BF16 && !x->c->bf16_arith) {
        ptx_fail(x, "bf16 arithmetic needs caps.bf16_arith");
        return false;
    }
    return true;
}

typedef LLVMValueRef (*scalar_fn)(ptx_ctx *x, LLVMValueRef a);

/* f(lane) for each lane of an f32 scalar or vector (the approximate PTX math is scalar). */
static LLVMValueRef per_lane(ptx_ctx *x, uint32_t n, LLVMValueRef v, scalar_fn f) {
    if (n <= 1) return f(x, v);
    LLVMValueRef r = LLVMGetPoison(vec(t_f32(x), n));
    for (uint32_t l = 0; l < n; l++) {
        LLVMValueRef e = LLVMBuildExtractElement(x->b, v, ptx_c_i32(x, l), "");
        r = LLVMBuildInsertElement(x->b, r, f(x, e), ptx_c_i32(x, l), "");
    }
    return r;
}

static LLVMValueRef nvvm1(ptx_ctx *x, const char *name, LLVMValueRef a) {
    LLVMTypeRef t = t_f32(x);
    return ptx_call(x, name, t, &t, &a, 1);
}
static LLVMValueRef f_ex2(ptx_ctx *x, LLVMValueRef a) { return nvvm1(x, "llvm.nvvm.ex2.approx.f", a); }
static LLVMValueRef f_exp(ptx_ctx *x, LLVMValueRef a) {
    return f_ex2(x, LLVMBuildFMul(x->b, a, LLVMConstReal(t_f32(x), 1.44269504088896340736), ""));
}
static LLVMValueRef f_log(ptx_ctx *x, LLVMValueRef a) {
    return LLVMBuildFMul(x->b, nvvm1(x, "llvm.nvvm.lg2.approx.f", a), LLVMConstReal(t_f32(x), 0.693147180559945309417),
                         "");
}
static LLVMValueRef f_sin(ptx_ctx *x, LLVMValueRef a) { return nvvm1(x, "llvm.nvvm.sin.approx.f", a); }
static LLVMValueRef f_cos(ptx_ctx *x, LLVMValueRef a) { return nvvm1(x, "llvm.nvvm.cos.approx.f", a); }
static LLVMValueRef f_rsqrt(ptx_ctx *x, LLVMValueRef a) {
    LLVMTypeRef t = t_f32(x);
    LLVMValueRef s = ptx_call(x, "llvm.sqrt.f32", t, &t, &a, 1);
    return LLVMBuildFDiv(x->b, LLVMConstReal(t, 1.0), s, "");
}
static LLVMValueRef f_tanh(ptx_ctx *x, LLVMValueRef a) {
    LLVMTypeRef t = t_f32(x);
    if (x->sm >= 75) { /* LLVM 19 has no intrinsic for it: inline PTX */
        LLVMTypeRef ft = LLVMFunctionType(t, &t, 1, 0);
        LLVMValueRef asmv =
            LLVMGetInlineAsm(ft, "tanh.approx.f32 $0, $1;", 23, "=f,f", 4, 0, 0, LLVMInlineAsmDialectATT, 0);
        return LLVMBuildCall2(x->b, ft, asmv, &a, 1, "");
    }
    /* tanh|x| = 1 - 2 / (e^(2|x|) + 1), sign restored */
    LLVMValueRef ax = ptx_call(x, "llvm.fabs.f32", t, &t, &a, 1);
    LLVMValueRef e = f_ex2(x, LLVMBuildFMul(x->b, ax, LLVMConstReal(t, 2.88539008177792681472), ""));
    LLVMValueRef r = LLVMBuildFSub(
        x->b, LLVMConstReal(t, 1.0),
        LLVMBuildFDiv(x->b, LLVMConstReal(t, 2.0), LLVMBuildFAdd(x->b, e, LLVMConstReal(t, 1.0), ""), ""), "");
    LLVMValueRef neg = LLVMBuildFCmp(x->b, LLVMRealOLT, a, LLVMConstReal(t, 0.0), "");
    return LLVMBuildSelect(x->b, neg, LLVMBuildFNeg(x->b, r, ""), r, "");
}

/* The u32 constant v is, or false. */
static bool const_u32_of(const ptx_ctx *x, ir_val v, uint32_t *out) {
    const ir_inst *d = ir_def(x->k, v);
    if (!d || d->op != IR_OP_CONST) return false;
    *out = (uint32_t)d->imm[0];
    return true;
}

/* (a & m) | c with m and c constants (a 4-bit code pair OR-ed into a magic float): one
 * lop3 with both as immediates. As an and and an or, ptxas keeps two LOP3s, one immediate
 * each (the quantized products' inner loops decode a fragment word that way). NULL where
 * the or is not of that form. */
static LLVMValueRef and_or_lop3(ptx_ctx *x, const ir_inst *in, ir_scalar s, uint32_t n) {
    uint32_t m, c;
    if (s != IR_U32 || n != 1 || !const_u32_of(x, in->operand[1], &c)) return NULL;
    const ir_inst *a = ir_def(x->k, in->operand[0]);
    if (!a || a->op != IR_OP_AND || !const_u32_of(x, a->operand[1], &m)) return NULL;
    LLVMValueRef v = ptx_V(x, a->operand[0]);
    if (x->e.failed) return NULL;
    char text[80];
    snprintf(text, sizeof text, "lop3.b32 $0, $1, %u, %u, 0xEA;", m, c);
    LLVMTypeRef t = LLVMInt32TypeInContext(x->lc), ft = LLVMFunctionType(t, &t, 1, 0);
    LLVMValueRef asmv = LLVMGetInlineAsm(ft, text, strlen(text), "=r,r", 4, 0, 0, LLVMInlineAsmDialectATT, 0);
    return LLVMBuildCall2(x->b, ft, asmv, &v, 1, "");
}

static void bad_type(ptx_ctx *x, const ir_inst *in, ir_scalar s) {
    ptx_fail(x, "%s on %s", ir_op_name(in->op), ir_scalar_name(s));
}

void ptx_emit_arith(ptx_ctx *x, const ir_inst *in) {
    ir_scalar s;
    uint32_t n;
    if (!ptx_tinfo(x, in->type, &s, &n)) return;
    if (!check_arith(x, s)) return;
    bool fl = ir_scalar_is_float(s), sg = ir_scalar_is_signed(s), bl = s == IR_BOOL;
    LLVMBuilderRef b = x->b;
    LLVMValueRef r = NULL;
    if (in->op == IR_OP_FMA) {
        if (!ir_emit_need(&x->e, in, 3)) return;
        LLVMValueRef a0 = ptx_V(x, in->operand[0]), a1 = ptx_V(x, in->operand[1]), a2 = ptx_V(x, in->operand[2]);
        if (x->e.failed) return;
        if (bl) return bad_type(x, in, s);
        if (!fl) {
            r = LLVMBuildAdd(b, LLVMBuildMul(b, a0, a1, ""), a2, "");
        } else {
            char nm[32], sf[16];
            suffix(sf, sizeof sf, s, n);
            snprintf(nm, sizeof nm, "llvm.fma.%s", sf);
            LLVMTypeRef t = ptx_t_rep(x, s, n), ts[3] = {t, t, t};
            LLVMValueRef v[3] = {a0, a1, a2};
            r = ptx_call(x, nm, t, ts, v, 3);
        }
    } else if (in->op >= IR_OP_ADD && in->op <= IR_OP_SHR) {
        if (!ir_emit_need(&x->e, in, 2)) return;
        LLVMValueRef a = ptx_V(x, in->operand[0]), c = ptx_V(x, in->operand[1]);
        if (x->e.failed) return;
        bool bits = in->op >= IR_OP_AND;
        if ((bits && fl) || (bl && !(in->op == IR_OP_AND || in->op == IR_OP_OR || in->op == IR_OP_XOR)))
            return bad_type(x, in, s);
        /* plain fadd/fsub/fmul/fdiv without fast-math flags: LLVM keeps them apart and
         * NVPTX writes .rn forms, which ptxas does not fuse into fma either */
        switch (in->op) {
        case IR_OP_ADD: r = fl ? LLVMBuildFAdd(b, a, c, "") : LLVMBuildAdd(b, a, c, ""); break;
        case IR_OP_SUB: r = fl ? LLVMBuildFSub(b, a, c, "") : LLVMBuildSub(b, a, c, ""); break;
        case IR_OP_MUL: r = fl ? LLVMBuildFMul(b, a, c, "") : LLVMBuildMul(b, a, c, ""); break;
        case IR_OP_DIV:
            r = fl ? LLVMBuildFDiv(b, a, c, "") : sg ? LLVMBuildSDiv(b, a, c, "") : LLVMBuildUDiv(b, a, c, "");
            break;
        case IR_OP_REM:
            r = fl ? LLVMBuildFRem(b, a, c, "") : sg ? LLVMBuildSRem(b, a, c, "") : LLVMBuildURem(b, a, c, "");
            break;
        case IR_OP_MIN: r = intr2(x, fl ? "llvm.minnum" : sg ? "llvm.smin" : "llvm.umin", s, n, a, c); break;
        case IR_OP_MAX: r = intr2(x, fl ? "llvm.maxnum" : sg ? "llvm.smax" : "llvm.umax", s, n, a, c); break;
        case IR_OP_AND: r = LLVMBuildAnd(b, a, c, ""); break;
        case IR_OP_OR:
            r = and_or_lop3(x, in, s, n);
            if (!r) r = LLVMBuildOr(b, a, c, "");
            break;
        case IR_OP_XOR: r = LLVMBuildXor(b, a, c, ""); break;
        case IR_OP_SHL: r = LLVMBuildShl(b, a, c, ""); break;
        case IR_OP_SHR: r = sg ? LLVMBuildAShr(b, a, c, "") : LLVMBuildLShr(b, a, c, ""); break;
        default: break;
        }
    } else {
        if (!ir_emit_need(&x->e, in, 1)) return;
        LLVMValueRef a = ptx_V(x, in->operand[0]);
        if (x->e.failed) return;
        scalar_fn f = NULL;
        switch (in->op) {
        case IR_OP_NEG:
            if (bl) break;
            r = fl ? LLVMBuildFNeg(b, a, "") : LLVMBuildNeg(b, a, "");
            break;
        case IR_OP_NOT:
            if (!fl) r = LLVMBuildNot(b, a, "");
            break;
        case IR_OP_ABS:
            if (bl) break;
            if (fl) {
                r = intr1(x, "llvm.fabs", s, n, a);
            } else if (sg) {
                char nm[32], sf[16];
                suffix(sf, sizeof sf, s, n);
                snprintf(nm, sizeof nm, "llvm.abs.%s", sf);
                LLVMTypeRef t = ptx_t_rep(x, s, n), ts[2] = {t, LLVMInt1TypeInContext(x->lc)};
                LLVMValueRef v[2] = {a, LLVMConstInt(ts[1], 0, 0)}; /* INT_MIN stays INT_MIN */
                r = ptx_call(x, nm, t, ts, v, 2);
            } else {
                r = a;
            }
            break;
        case IR_OP_EXP: f = f_exp; break;
        case IR_OP_LOG: f = f_log; break;
        case IR_OP_SIN: f = f_sin; break;
        case IR_OP_COS: f = f_cos; break;
        case IR_OP_TANH: f = f_tanh; break;
        case IR_OP_RSQRT: f = f_rsqrt; break;
        case IR_OP_SQRT:
            if (fl) r = intr1(x, "llvm.sqrt", s, n, a);
            break;
        case IR_OP_FLOOR:
            if (fl) r = intr1(x, "llvm.floor", s, n, a);
            break;
        case IR_OP_ROUNDEVEN:
            if (fl) r = intr1(x, "llvm.roundeven", s, n, a);
            break;
        default: break;
        }
        if (f && fl) r = per_lane(x, n, a, f);
    }
    if (!r) return bad_type(x, in, s);
    ptx_def(x, in->result, r);
}

void ptx_emit_cmp(ptx_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 2)) return;
    ir_scalar s;
    uint32_t n;
    if (!ptx_tinfo(x, ir_type_of(x->k, in->operand[0]), &s, &n)) return;
    static const LLVMRealPredicate F[6] = {LLVMRealOEQ, LLVMRealONE, LLVMRealOLT,
                                           LLVMRealOLE, LLVMRealOGT, LLVMRealOGE};
    static const LLVMIntPredicate S[6] = {LLVMIntEQ, LLVMIntNE, LLVMIntSLT, LLVMIntSLE, LLVMIntSGT, LLVMIntSGE};
    static const LLVMIntPredicate U[6] = {LLVMIntEQ, LLVMIntNE, LLVMIntULT, LLVMIntULE, LLVMIntUGT, LLVMIntUGE};
    int64_t c = in->imm[0];
    if (c < 0 || c > IR_GE || (s == IR_BOOL && c > IR_NE)) {
        ptx_fail(x, "bad comparison %lld on %s", (long long)c, ir_scalar_name(s));
        return;
    }
    LLVMValueRef a = ptx_V(x, in->operand[0]), b = ptx_V(x, in->operand[1]);
    if (x->e.failed) return;
    LLVMValueRef r = ir_scalar_is_float(s) ? LLVMBuildFCmp(x->b, F[c], a, b, "")
                                    : LLVMBuildICmp(x->b, ir_scalar_is_signed(s) ? S[c] : U[c], a, b, "");
    ptx_def(x, in->result, r);
}

/* ---- conversions ------------------------------------------------------------------------------ */

/* exact: convert.exact, whose value the 16-bit type holds already (ir/lower.h). */
static LLVMValueRef convert(ptx_ctx *x, ir_scalar from, ir_scalar to, uint32_t n, LLVMValueRef v, bool exact) {
    if (from == to) return v;
    LLVMBuilderRef b = x->b;
    LLVMTypeRef rt = ptx_t_rep(x, to, n);
    if (from == IR_BOOL) {
        LLVMValueRef one = splat(ptx_c_scalar(x, to, ir_scalar_is_float(to) ? 0x3f800000u : 1u), n);
        return LLVMBuildSelect(b, v, one, LLVMConstNull(rt), "");
    }
    if (to == IR_BOOL) {
        LLVMValueRef zero = LLVMConstNull(ptx_t_rep(x, from, n));
        return ir_scalar_is_float(from) ? LLVMBuildFCmp(b, LLVMRealUNE, v, zero, "")
                                        : LLVMBuildICmp(b, LLVMIntNE, v, zero, "");
    }
    bool ff = ir_scalar_is_float(from), tf = ir_scalar_is_float(to);
    if (ff && tf) { /* from is exact in f32 already */
        if (exact || to == IR_F32) return v;
        if (to == IR_F16) return round_f16(x, n, v);
        if (to == IR_BF16 && x->sm >= 80) return round_bf16(x, n, v);
        ptx_fail(x, "f32 -> %s rounds in the IR before emission (ir/lower.h)", ir_scalar_name(to));
        return v;
    }
    if (!ff && !tf) {
        unsigned fb = ir_scalar_bits(from), tb = ir_scalar_bits(to);
        if (fb == tb) return v; /* i32 and u32 are one LLVM type */
        if (fb > tb) return LLVMBuildTrunc(b, v, rt, "");
        return ir_scalar_is_signed(from) ? LLVMBuildSExt(b, v, rt, "") : LLVMBuildZExt(b, v, rt, "");
    }
    if (!ff) { /* int -> f32, the one float the IR converts ints to */
        if (to != IR_F32) ptx_fail(x, "convert from %s to %s", ir_scalar_name(from), ir_scalar_name(to));
        return ir_scalar_is_signed(from) ? LLVMBuildSIToFP(b, v, rt, "") : LLVMBuildUIToFP(b, v, rt, "");
    }
    /* float -> int, toward zero (cvt.rzi; out of range is the device's) */
    return ir_scalar_is_signed(to) ? LLVMBuildFPToSI(b, v, rt, "") : LLVMBuildFPToUI(b, v, rt, "");
}

void ptx_emit_convert(ptx_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 1)) return;
    ir_scalar fs, ts;
    uint32_t fn, tn;
    if (!ptx_tinfo(x, ir_type_of(x->k, in->operand[0]), &fs, &fn) || !ptx_tinfo(x, in->type, &ts, &tn)) return;
    if (fn != tn) {
        ptx_fail(x, "convert needs scalars or vectors of the same width");
        return;
    }
    LLVMValueRef v = ptx_V(x, in->operand[0]);
    if (!x->e.failed) ptx_def(x, in->result, convert(x, fs, ts, tn, v, in->imm[0] == 1));
}

/* Through the memory form: 16-bit lanes as i16, everything else as itself. */
void ptx_emit_bitcast(ptx_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 1)) return;
    ir_scalar fs, ts;
    uint32_t fn, tn;
    if (!ptx_tinfo(x, ir_type_of(x->k, in->operand[0]), &fs, &fn) || !ptx_tinfo(x, in->type, &ts, &tn)) return;
    if (ir_scalar_bits(fs) * fn != ir_scalar_bits(ts) * tn || fs == IR_BOOL || ts == IR_BOOL) {
        ptx_fail(x, "bitcast %s x%u -> %s x%u changes the width", ir_scalar_name(fs), fn, ir_scalar_name(ts), tn);
        return;
    }
    LLVMValueRef v = ptx_V(x, in->operand[0]);
    if (x->e.failed) return;
    LLVMValueRef m = ptx_to_storage(x, fs, fn, v);
    m = LLVMBuildBitCast(x->b, m, ptx_t_store(x, ts, tn), "");
    ptx_def(x, in->result, ptx_from_storage(x, ts, tn, m));
}
