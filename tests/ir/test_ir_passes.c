/* The kernel IR's passes: specialization folds as the device would; dead-code removal. */
#include "base/error.h"
#include "tests/ir/ir_test.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- specialize and fold ------------------------------------------------------------------- */

static int spec1(ir_kernel *k, const char *name, double v) {
    kiln_err err = {0};
    int rc = ir_specialize(k, &name, &v, 1, &err);
    cr_assert_eq(rc, 0, "specialize: %s", err.msg);
    return rc;
}

Test(ir, specialize_arith) {
    ir_kernel *k = kern();
    ir_buf o = ir_param_buffer(k, "o", IR_U32, IR_WRITE);
    ir_val n = ir_spec_const(k, "N", IR_U32, 4);
    ir_val m = ir_bin(k, IR_OP_MUL, n, ir_const_u32(k, 3));
    ir_val a = ir_bin(k, IR_OP_ADD, m, ir_const_u32(k, 1));
    ir_store(k, o, ir_const_u32(k, 0), a);
    spec1(k, "N", 10);
    cr_assert_eq(ir_n_specs(k), 0);
    cr_assert_eq(ir_def(k, n)->op, IR_OP_CONST);
    cr_assert_eq(ir_def(k, a)->op, IR_OP_CONST);
    cr_assert_eq(ir_def(k, a)->imm[0], 31);
    ir_dce(k);
    expect_ok(k);
    char *t = ir_print(k);
    cr_assert_str_eq(t, "kernel @t(@o: buf<u32, w>) workgroup(64, 1, 1) {\n"
                        "  %5 = const 31 : u32\n"
                        "  %6 = const 0 : u32\n"
                        "  store @o[%6], %5\n"
                        "}\n");
    free(t);
    ir_kernel_destroy(k);
}

/* Folds op on two constants; returns the folded constant's bits, or -1 if not folded. */
static int64_t fold2(ir_op op, ir_val (*mk)(ir_kernel *, double), double x, double y) {
    ir_kernel *k = kern();
    ir_val r = ir_bin(k, op, mk(k, x), mk(k, y));
    cr_assert_neq(r, IR_NONE, "%s", ir_kernel_error(k));
    kiln_err err = {0};
    cr_assert_eq(ir_specialize(k, NULL, NULL, 0, &err), 0, "%s", err.msg);
    const ir_inst *d = ir_def(k, r);
    int64_t v = d->op == IR_OP_CONST ? d->imm[0] : -1;
    cr_assert(d->op == IR_OP_CONST || d->op == op);
    ir_kernel_destroy(k);
    return v;
}

static ir_val mk_f(ir_kernel *k, double v) { return ir_const_f32(k, (float)v); }
static ir_val mk_i(ir_kernel *k, double v) { return ir_const_i32(k, (int32_t)v); }
static ir_val mk_u(ir_kernel *k, double v) { return ir_const_u32(k, (uint32_t)v); }

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

Test(ir, fold_f32_ieee) {
    volatile float a = 0.1f, b = 0.2f, c = 3.0f, d = 7.0f;
    cr_assert_eq(fold2(IR_OP_ADD, mk_f, 0.1, 0.2), fbits(a + b));
    cr_assert_eq(fold2(IR_OP_SUB, mk_f, 0.1, 0.2), fbits(a - b));
    cr_assert_eq(fold2(IR_OP_MUL, mk_f, 0.1, 0.2), fbits(a * b));
    cr_assert_eq(fold2(IR_OP_DIV, mk_f, 1.0, 3.0), fbits(1.0f / c));
    cr_assert_eq(fold2(IR_OP_REM, mk_f, 7.0, 3.0), fbits(1.0f));
    cr_assert_eq(fold2(IR_OP_REM, mk_f, -7.0, 3.0), fbits(-1.0f));
    cr_assert_eq(fold2(IR_OP_MIN, mk_f, 7.0, 3.0), fbits(c));
    cr_assert_eq(fold2(IR_OP_MAX, mk_f, 7.0, 3.0), fbits(d));
    /* f32, not double: 16777216 + 1 rounds back to 16777216 */
    cr_assert_eq(fold2(IR_OP_ADD, mk_f, 16777216.0, 1.0), fbits(16777216.0f));
    /* left to the device: division by zero, NaN and subnormal results, min of zeros */
    cr_assert_eq(fold2(IR_OP_DIV, mk_f, 1.0, 0.0), -1);
    cr_assert_eq(fold2(IR_OP_REM, mk_f, 1.0, 0.0), -1);
    cr_assert_eq(fold2(IR_OP_MUL, mk_f, 0.0, INFINITY), -1);
    cr_assert_eq(fold2(IR_OP_MUL, mk_f, 1e-20, 1e-20), -1);
    cr_assert_eq(fold2(IR_OP_MIN, mk_f, 0.0, -0.0), -1);
    cr_assert_eq(fold2(IR_OP_ADD, mk_f, NAN, 1.0), -1);
}

Test(ir, fold_int_wrap) {
    cr_assert_eq(fold2(IR_OP_ADD, mk_i, INT32_MAX, 1), INT32_MIN);
    cr_assert_eq(fold2(IR_OP_SUB, mk_u, 0, 1), (int64_t)UINT32_MAX);
    cr_assert_eq(fold2(IR_OP_MUL, mk_u, 65536, 65536), 0);
    cr_assert_eq(fold2(IR_OP_DIV, mk_i, -7, 2), -3);
    cr_assert_eq(fold2(IR_OP_REM, mk_i, -7, 2), -1);
    cr_assert_eq(fold2(IR_OP_DIV, mk_u, 7, 2), 3);
    cr_assert_eq(fold2(IR_OP_MIN, mk_i, -7, 2), -7);
    cr_assert_eq(fold2(IR_OP_MIN, mk_u, UINT32_MAX, 2), 2);
    cr_assert_eq(fold2(IR_OP_SHR, mk_i, -8, 1), -4);
    cr_assert_eq(fold2(IR_OP_SHR, mk_u, 0x80000000u, 31), 1);
    cr_assert_eq(fold2(IR_OP_SHL, mk_i, 1, 31), INT32_MIN);
    cr_assert_eq(fold2(IR_OP_XOR, mk_u, 0xff, 0x0f), 0xf0);
    /* not folded: division by zero, INT_MIN / -1, shifts by the width */
    cr_assert_eq(fold2(IR_OP_DIV, mk_u, 7, 0), -1);
    cr_assert_eq(fold2(IR_OP_REM, mk_i, 7, 0), -1);
    cr_assert_eq(fold2(IR_OP_DIV, mk_i, INT32_MIN, -1), -1);
    cr_assert_eq(fold2(IR_OP_SHL, mk_u, 1, 32), -1);
}

Test(ir, fold_unary_cmp_convert_select) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, -2.5f), i = ir_const_i32(k, INT32_MIN), u = ir_const_u32(k, 16777217);
    ir_val neg = ir_un(k, IR_OP_NEG, f), ab = ir_un(k, IR_OP_ABS, f), fl = ir_un(k, IR_OP_FLOOR, f);
    ir_val absmin = ir_un(k, IR_OP_ABS, i), ex = ir_un(k, IR_OP_EXP, f);
    ir_val nt = ir_un(k, IR_OP_NOT, u);
    ir_val fm = ir_fma(k, f, f, f);
    ir_val toi = ir_convert(k, f, T(k, IR_I32)), tof = ir_convert(k, u, T(k, IR_F32));
    ir_val big = ir_convert(k, ir_const_f32(k, 3e9f), T(k, IR_I32));
    ir_val bc = ir_bitcast(k, f, T(k, IR_U32));
    ir_val half = ir_convert(k, f, T(k, IR_F16));
    ir_val lt = ir_compare(k, IR_LT, f, ir_const_f32(k, 0));
    ir_val ne = ir_compare(k, IR_NE, ir_const_f32(k, NAN), f);
    ir_val ult = ir_compare(k, IR_LT, ir_const_i32(k, -1), ir_const_i32(k, 1));
    ir_val sel = ir_select(k, lt, ir_id(k, IR_ID_LOCAL, 0), ir_const_u32(k, 9));
    ir_buf o = ir_param_buffer(k, "o", IR_U32, IR_WRITE);
    ir_store(k, o, sel, sel);
    kiln_err err = {0};
    cr_assert_eq(ir_specialize(k, NULL, NULL, 0, &err), 0, "%s", err.msg);
    cr_assert_eq(ir_def(k, neg)->imm[0], fbits(2.5f));
    cr_assert_eq(ir_def(k, ab)->imm[0], fbits(2.5f));
    cr_assert_eq(ir_def(k, fl)->imm[0], fbits(-3.0f));
    cr_assert_eq(ir_def(k, nt)->imm[0], ~16777217u);
    cr_assert_eq(ir_def(k, fm)->imm[0], fbits(3.75f));
    cr_assert_eq(ir_def(k, toi)->imm[0], -2);               /* toward zero */
    cr_assert_eq(ir_def(k, tof)->imm[0], fbits(16777216.0f)); /* nearest even */
    cr_assert_eq(ir_def(k, bc)->imm[0], fbits(-2.5f));
    cr_assert_eq(ir_def(k, lt)->imm[0], 1);
    cr_assert_eq(ir_def(k, ne)->imm[0], 0); /* ordered: NaN != x is false */
    cr_assert_eq(ir_def(k, ult)->imm[0], 1);
    cr_assert_eq(ir_def(k, absmin)->op, IR_OP_ABS); /* abs(INT_MIN) left to the device */
    cr_assert_eq(ir_def(k, ex)->op, IR_OP_EXP);     /* transcendental: not folded */
    cr_assert_eq(ir_def(k, big)->op, IR_OP_CONVERT); /* out of range: not folded */
    cr_assert_eq(ir_def(k, half)->op, IR_OP_CONVERT);
    /* the select on a true constant became its first operand */
    cr_assert_null(ir_def(k, sel));
    const ir_inst *st = last_inst(k);
    cr_assert_eq(st->op, IR_OP_STORE);
    cr_assert_eq(ir_def(k, st->operand[1])->op, IR_OP_ID);
    expect_ok(k);
    ir_kernel_destroy(k);
}

Test(ir, specialize_if_on_constant) {
    for (int taken = 0; taken < 2; taken++) {
        ir_kernel *k = kern();
        ir_buf o = ir_param_buffer(k, "o", IR_F32, IR_WRITE);
        ir_val flag = ir_spec_const(k, "FLAG", IR_BOOL, 0);
        ir_val x = ir_const_f32(k, 2);
        ir_if *g = ir_if_begin(k, flag, 1);
        ir_val a = ir_bin(k, IR_OP_MUL, x, x);
        ir_if_else(k, g, &a);
        ir_val b = ir_un(k, IR_OP_EXP, x);
        ir_if_end(k, g, &b);
        ir_val r = ir_if_result(g, 0);
        ir_store(k, o, ir_const_u32(k, 0), r);
        spec1(k, "FLAG", taken);
        ir_dce(k);
        expect_ok(k);
        cr_assert_null(ir_def(k, r));
        const ir_inst *st = last_inst(k);
        cr_assert_eq(st->op, IR_OP_STORE);
        cr_assert_eq(st->operand[1], taken ? a : b);
        char *t = ir_print(k);
        cr_assert_null(strstr(t, "if "), "%s", t);
        cr_assert_null(strstr(t, "yield"), "%s", t);
        free(t);
        if (taken) {
            cr_assert_eq(ir_def(k, a)->op, IR_OP_CONST); /* folded after being inlined */
            cr_assert_eq(ir_def(k, a)->imm[0], fbits(4.0f));
            cr_assert_null(ir_def(k, b));
        } else {
            cr_assert_eq(ir_def(k, b)->op, IR_OP_EXP);
            cr_assert_null(ir_def(k, a));
        }
        /* the hoisted value can be built on again */
        ir_val y = ir_const_f32(k, 1);
        cr_assert_neq(ir_bin(k, IR_OP_ADD, st->operand[1], y), IR_NONE, "%s", ir_kernel_error(k));
        ir_kernel_destroy(k);
    }
}

Test(ir, specialize_zero_trip_loop) {
    ir_kernel *k = kern();
    ir_buf o = ir_param_buffer(k, "o", IR_F32, IR_WRITE);
    ir_val n = ir_spec_const(k, "N", IR_U32, 8);
    ir_val z = ir_const_u32(k, 0), one = ir_const_u32(k, 1), init = ir_const_f32(k, 5);
    ir_for *f = ir_for_begin(k, z, n, one, 1, &init);
    ir_val s = ir_bin(k, IR_OP_ADD, ir_for_arg(f, 0), init);
    ir_store(k, o, ir_for_iv(f), s);
    ir_for_end(k, f, &s);
    ir_store(k, o, z, ir_for_result(f, 0));
    spec1(k, "N", 0);
    ir_dce(k);
    expect_ok(k);
    char *t = ir_print(k);
    cr_assert_str_eq(t, "kernel @t(@o: buf<f32, w>) workgroup(64, 1, 1) {\n"
                        "  %2 = const 0 : u32\n"
                        "  %4 = const 5 : f32\n"
                        "  store @o[%2], %4\n"
                        "}\n");
    free(t);
    ir_kernel_destroy(k);

    /* a loop that runs stays, with its body folded */
    k = kern();
    o = ir_param_buffer(k, "o", IR_F32, IR_WRITE);
    n = ir_spec_const(k, "N", IR_I32, 8);
    ir_val lo = ir_const_i32(k, -2), one_i = ir_const_i32(k, 1);
    f = ir_for_begin(k, lo, n, one_i, 0, NULL);
    ir_val c = ir_bin(k, IR_OP_ADD, n, one_i);
    ir_store(k, o, ir_const_u32(k, 0), ir_convert(k, c, T(k, IR_F32)));
    ir_for_end(k, f, NULL);
    spec1(k, "N", -1);
    expect_ok(k);
    const ir_inst *fi = last_inst(k);
    cr_assert_eq(fi->op, IR_OP_FOR); /* -2 < -1: one trip (signed compare) */
    cr_assert_eq(ir_def(k, c)->op, IR_OP_CONST);
    cr_assert_eq(ir_def(k, c)->imm[0], 0);
    ir_kernel_destroy(k);
}

Test(ir, specialize_workgroup_and_errors) {
    ir_kernel *k = build_axpy();
    char *before = ir_print(k);
    kiln_err err = {0};
    const char *bad[] = { "nope" };
    double v = 1;
    cr_assert_eq(ir_specialize(k, bad, &v, 1, &err), -1);
    cr_assert(strstr(err.msg, "unknown spec constant @nope"), "%s", err.msg);
    const char *wg[] = { "WG" };
    double neg = -5;
    cr_assert_eq(ir_specialize(k, wg, &neg, 1, &err), -1);
    cr_assert(strstr(err.msg, "@WG = -5: not a u32"), "%s", err.msg);
    char *after = ir_print(k);
    cr_assert_str_eq(before, after); /* refused: unchanged */
    free(after);
    double big = 4096;
    cr_assert_eq(ir_specialize(k, wg, &big, 1, &err), -1);
    cr_assert(strstr(err.msg, "workgroup size 4096x1x1"), "%s", err.msg);
    free(before);
    ir_kernel_destroy(k);

    k = build_axpy();
    double w = 128;
    cr_assert_eq(ir_specialize(k, wg, &w, 1, &err), 0, "%s", err.msg);
    uint32_t xyz[3];
    ir_val xs;
    ir_workgroup(k, xyz, &xs);
    cr_assert_eq(xs, IR_NONE);
    cr_assert_eq(xyz[0], 128);
    cr_assert_eq(xyz[1], 1);
    cr_assert_eq(xyz[2], 1);
    ir_kernel_destroy(k);

    /* the remaining specs are renumbered; unnamed ones stay */
    k = kern();
    ir_val a = ir_spec_const(k, "A", IR_F32, 1.5), b = ir_spec_const(k, "B", IR_I32, -3);
    ir_buf o = ir_param_buffer(k, "o", IR_F32, IR_WRITE);
    ir_store(k, o, ir_const_u32(k, 0), ir_bin(k, IR_OP_MUL, a, ir_convert(k, b, T(k, IR_F32))));
    spec1(k, "A", 0.5);
    cr_assert_eq(ir_n_specs(k), 1);
    cr_assert_str_eq(ir_spec_at(k, 0)->name, "B");
    cr_assert_eq(ir_def(k, b)->op, IR_OP_SPEC);
    cr_assert_eq(ir_def(k, b)->imm[0], 0);
    cr_assert_eq(ir_def(k, a)->imm[0], fbits(0.5f));
    expect_ok(k);
    spec1(k, "B", 4);
    cr_assert_eq(ir_n_specs(k), 0);
    const ir_inst *st = last_inst(k);
    cr_assert_eq(ir_def(k, st->operand[1])->op, IR_OP_CONST);
    cr_assert_eq(ir_def(k, st->operand[1])->imm[0], fbits(2.0f));
    ir_kernel_destroy(k);
}

/* ---- dead code ------------------------------------------------------------------------------ */

Test(ir, dce) {
    ir_kernel *k = kern();
    ir_buf o = ir_param_buffer(k, "o", IR_U32, IR_READ | IR_WRITE);
    ir_val z = ir_const_u32(k, 0), one = ir_const_u32(k, 1), n = ir_const_u32(k, 4);
    ir_val d1 = ir_bin(k, IR_OP_ADD, one, one);
    ir_val d2 = ir_bin(k, IR_OP_MUL, d1, d1); /* a dead chain */
    ir_val ld = ir_load(k, o, z, 1);          /* a dead load */
    ir_val at = ir_atomic(k, IR_ATOMIC_ADD, false, o, z, one); /* result unused, but an effect */
    /* a loop with no effect and an unused result */
    ir_for *f = ir_for_begin(k, z, n, one, 1, &z);
    ir_val s = ir_bin(k, IR_OP_ADD, ir_for_arg(f, 0), ir_for_iv(f));
    ir_for_end(k, f, &s);
    /* an if with a store inside: kept, though its dead value inside goes */
    ir_if *g = ir_if_begin(k, ir_compare(k, IR_EQ, ir_id(k, IR_ID_LOCAL, 0), z), 0);
    ir_val dead_in = ir_bin(k, IR_OP_SUB, n, one);
    ir_store(k, o, z, n);
    ir_if_end(k, g, NULL);
    ir_barrier(k);
    expect_ok(k);
    ir_dce(k);
    expect_ok(k);
    cr_assert_null(ir_def(k, d1));
    cr_assert_null(ir_def(k, d2));
    cr_assert_null(ir_def(k, ld));
    cr_assert_null(ir_def(k, s));
    cr_assert_null(ir_def(k, ir_for_result(f, 0)));
    cr_assert_null(ir_def(k, dead_in));
    cr_assert(ir_def(k, at));
    char *t = ir_print(k);
    cr_assert_str_eq(t, "kernel @t(@o: buf<u32, rw>) workgroup(64, 1, 1) {\n"
                        "  %1 = const 0 : u32\n"
                        "  %2 = const 1 : u32\n"
                        "  %3 = const 4 : u32\n"
                        "  %7 = atomic.add @o[%1], %2 : u32\n"
                        "  %12 = id.local.x : u32\n"
                        "  %13 = cmp.eq %12, %1 : bool\n"
                        "  if %13 {\n"
                        "    store @o[%1], %3\n"
                        "    yield\n"
                        "  }\n"
                        "  barrier\n"
                        "}\n");
    free(t);
    ir_dce(k); /* idempotent */
    char *t2 = ir_print(k);
    cr_assert_str_eq(t2, "kernel @t(@o: buf<u32, rw>) workgroup(64, 1, 1) {\n"
                         "  %1 = const 0 : u32\n"
                         "  %2 = const 1 : u32\n"
                         "  %3 = const 4 : u32\n"
                         "  %7 = atomic.add @o[%1], %2 : u32\n"
                         "  %12 = id.local.x : u32\n"
                         "  %13 = cmp.eq %12, %1 : bool\n"
                         "  if %13 {\n"
                         "    store @o[%1], %3\n"
                         "    yield\n"
                         "  }\n"
                         "  barrier\n"
                         "}\n");
    free(t2);
    ir_kernel_destroy(k);
}

Test(ir, dce_keeps_open_constructs) {
    ir_kernel *k = kern();
    ir_buf o = ir_param_buffer(k, "o", IR_U32, IR_WRITE);
    ir_val z = ir_const_u32(k, 0);
    ir_const_u32(k, 7); /* unused for now */
    ir_if *g = ir_if_begin(k, ir_const_bool(k, true), 0);
    ir_dce(k); /* mid-build: nothing goes, the builder may still use any value */
    ir_store(k, o, z, z);
    ir_if_end(k, g, NULL);
    expect_ok(k);
    cr_assert_eq(ir_kernel_body(k)->n, 4);
    cr_assert_eq(last_inst(k)->op, IR_OP_IF);
    ir_dce(k); /* built: the unused constant goes */
    cr_assert_eq(ir_kernel_body(k)->n, 3);
    ir_kernel_destroy(k);
}
