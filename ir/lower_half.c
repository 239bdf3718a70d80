/* 16-bit floats (lower.h). Where the options hold a 16-bit type T in f32 registers:
 *
 *   arithmetic on T (when allowed)  ->  convert each operand to f32 (exact), the op on f32,
 *                                       then back to T: convert.exact after min, max, neg
 *                                       and abs (their f32 result is a T already), else the
 *                                       rounding conversion below
 *
 * and where they ask T's rounding in the IR, convert f32 -> T becomes round-to-nearest-even
 * written out, ending in convert.exact (which rounds nothing: the emitter only changes
 * the representation):
 *
 *   bf16, with integer ops: ties to even on the f32 bits, NaN kept and quieted
 *     u = bits(x); r = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000;
 *     q = (u | 0x400000) & 0xffff0000; (u & 0x7fffffff) > 0x7f800000 ? q : r
 *   f16, with f32 ops: scale by the f16 quantum at x's exponent (powers of two, exact),
 *     roundeven, scale back; |r| > 65504 is inf with x's sign; below f16's normal range
 *     the quantum is 2^-24, so subnormals round right too
 *
 * These are the sequences the emitters wrote themselves before, op for op. The result of
 * a rewritten instruction keeps its value number. */
#include "ir/emit_core.h"
#include "ir/ir_internal.h"
#include "ir/lower.h"

/* The options for a 16-bit float type (NULL for any other scalar). */
static const ir_lower_16 *opts_of(const ir_lower_opts *o, ir_scalar s) {
    return s == IR_BF16 ? &o->bf16 : s == IR_F16 ? &o->f16 : NULL;
}

/* The scalar (lanes 1) or vector type of e. */
static ir_type like(ir_kernel *k, uint32_t lanes, ir_scalar e) {
    return lanes == 1 ? ir_t_scalar(k, e) : ir_t_vector(k, e, lanes);
}

/* A constant of lanes lanes of e (a splat for vectors), bits in CONST's encoding. */
static ir_val cn(ir_rw *w, uint32_t lanes, ir_scalar e, int64_t bits) {
    return ir_rw_const(w, like(w->k, lanes, e), bits);
}

static ir_val op2(ir_rw *w, ir_op op, ir_type t, ir_val a, ir_val b) {
    return a && b ? ir_rw_op(w, op, t, a, b, 0) : IR_NONE;
}
static ir_val cmp(ir_rw *w, ir_cmp c, ir_type t, ir_val a, ir_val b) {
    return a && b ? ir_rw_op(w, IR_OP_CMP, t, a, b, c) : IR_NONE;
}
static ir_val op1(ir_rw *w, ir_op op, ir_type t, ir_val a) { return a ? ir_rw_op(w, op, t, a, IR_NONE, 0) : IR_NONE; }

static ir_val select3(ir_rw *w, ir_type t, ir_val c, ir_val a, ir_val b) {
    ir_val ops[3] = { c, a, b };
    ir_inst *in = c && a && b ? ir_rw_inst(w, IR_OP_SELECT, t, ops, 3, 0, 0, 0) : NULL;
    return in ? in->result : IR_NONE;
}

/* x (f32, lanes) rounded to the nearest bf16, as f32. Constants first, in the order of
 * their use, so the numbering does not hang on the C compiler's argument order. */
static ir_val round_bf16(ir_rw *w, uint32_t n, ir_val x) {
    ir_kernel *k = w->k;
    ir_type tu = like(k, n, IR_U32), tf = like(k, n, IR_F32), tb = like(k, n, IR_BOOL);
    ir_val c_abs = cn(w, n, IR_U32, 0x7fffffff), c_inf = cn(w, n, IR_U32, 0x7f800000), c16 = cn(w, n, IR_U32, 16),
           c1 = cn(w, n, IR_U32, 1), c_half = cn(w, n, IR_U32, 0x7fff), c_top = cn(w, n, IR_U32, 0xffff0000u),
           c_quiet = cn(w, n, IR_U32, 0x00400000);
    ir_val u = op1(w, IR_OP_BITCAST, tu, x);
    ir_val nan = cmp(w, IR_GT, tb, op2(w, IR_OP_AND, tu, u, c_abs), c_inf);
    ir_val lsb = op2(w, IR_OP_AND, tu, op2(w, IR_OP_SHR, tu, u, c16), c1);
    ir_val r = op2(w, IR_OP_AND, tu, op2(w, IR_OP_ADD, tu, op2(w, IR_OP_ADD, tu, u, c_half), lsb), c_top);
    ir_val q = op2(w, IR_OP_AND, tu, op2(w, IR_OP_OR, tu, u, c_quiet), c_top);
    return op1(w, IR_OP_BITCAST, tf, select3(w, tu, nan, q, r));
}

/* x (f32, lanes) rounded to the nearest f16 (overflow to inf, f16 subnormals), as f32. */
static ir_val round_f16(ir_rw *w, uint32_t n, ir_val x) {
    ir_kernel *k = w->k;
    ir_type tu = like(k, n, IR_U32), tf = like(k, n, IR_F32), tb = like(k, n, IR_BOOL);
    ir_val c23 = cn(w, n, IR_U32, 23), c_exp = cn(w, n, IR_U32, 0xff), c113 = cn(w, n, IR_U32, 113),
           c10 = cn(w, n, IR_U32, 10), c264 = cn(w, n, IR_U32, 264), c_max = cn(w, n, IR_F32, ir_f32_bits(65504.0f)),
           c_sign = cn(w, n, IR_U32, 0x80000000u), c_inf = cn(w, n, IR_U32, 0x7f800000);
    ir_val u = op1(w, IR_OP_BITCAST, tu, x);
    ir_val e = op2(w, IR_OP_AND, tu, op2(w, IR_OP_SHR, tu, u, c23), c_exp);
    e = op2(w, IR_OP_MAX, tu, e, c113); /* below f16's normal range the quantum is 2^-24 */
    ir_val q = op1(w, IR_OP_BITCAST, tf, op2(w, IR_OP_SHL, tu, op2(w, IR_OP_SUB, tu, e, c10), c23));
    ir_val inv = op1(w, IR_OP_BITCAST, tf, op2(w, IR_OP_SHL, tu, op2(w, IR_OP_SUB, tu, c264, e), c23));
    ir_val r = op2(w, IR_OP_MUL, tf, op1(w, IR_OP_ROUNDEVEN, tf, op2(w, IR_OP_MUL, tf, x, inv)), q);
    ir_val big = cmp(w, IR_GT, tb, op1(w, IR_OP_ABS, tf, r), c_max);
    ir_val inf = op2(w, IR_OP_OR, tu, op2(w, IR_OP_AND, tu, u, c_sign), c_inf);
    return select3(w, tf, big, op1(w, IR_OP_BITCAST, tf, inf), r);
}

/* `result` = x (f32, lanes) as T: rounded in the IR when T's options ask for it, else by
 * the target's conversion; exact: x holds a T already. Returns false when out of memory. */
static bool narrow(ir_rw *w, const ir_lower_opts *opts, ir_scalar t, uint32_t n, ir_val x, bool exact, ir_val result) {
    const ir_lower_16 *o = opts_of(opts, t);
    if (!exact && o->round) {
        x = t == IR_BF16 ? round_bf16(w, n, x) : round_f16(w, n, x);
        exact = true;
    }
    /* the rewritten instruction's value now names this conversion */
    return x && ir_rw_inst_into(w, result, IR_OP_CONVERT, &x, 1, exact, 0, 0);
}

static bool exact_op(ir_op op) { return op == IR_OP_MIN || op == IR_OP_MAX || op == IR_OP_NEG || op == IR_OP_ABS; }

static int lower_one(ir_rw *w, ir_inst *in, void *ctx) {
    const ir_lower_opts *opts = ctx;
    ir_kernel *k = w->k;
    ir_scalar e;
    uint32_t n;
    if (!in->result || !ir_type_elem(k, in->type, &e, &n))
        return 0;
    const ir_lower_16 *o = opts_of(opts, e);
    if (!o)
        return 0;
    ir_type tf = like(k, n, IR_F32);
    if (ir_op_class_of(in->op) == IR_CLASS_ARITH) {
        if (!o->in_f32 || !o->arith)
            return 0; /* native, or refused by the emitter */
        ir_val wide[3] = { 0 };
        for (uint32_t i = 0; i < in->n_operand && i < 3; i++)
            if (!(wide[i] = op1(w, IR_OP_CONVERT, tf, in->operand[i])))
                return -1;
        ir_inst *r = ir_rw_inst(w, in->op, tf, wide, in->n_operand, in->imm[0], in->imm[1], in->imm[2]);
        return r && narrow(w, opts, e, n, r->result, exact_op(in->op), in->result) ? 1 : -1;
    }
    if (in->op != IR_OP_CONVERT || in->imm[0] != 0)
        return 0;
    ir_scalar from;
    ir_type_elem(k, ir_type_of(k, in->operand[0]), &from, NULL);
    /* f32 is the one type that converts to a 16-bit float (the verifier's rule) */
    if (from == IR_F32 && o->round)
        return narrow(w, opts, e, n, in->operand[0], false, in->result) ? 1 : -1;
    return 0;
}

int ir_lower_half(ir_kernel *k, const ir_lower_opts *o) { return ir_rw_run(k, lower_one, (void *)o) ? 0 : -1; }
