/* The 16-bit lowering (ir/lower_half.c): f32 -> bf16 and f32 -> f16 rounding written out
 * in the IR (exact text), 16-bit arithmetic held in f32 becoming f32 arithmetic and a
 * conversion back, each option honoured (native types and refused arithmetic left as
 * they are); and the forms only lowered kernels hold (convert.exact, vector constants,
 * roundeven) checked by the verifier. */
#include "base/error.h"
#include "ir/lower.h"
#include "tests/ir/ir_test.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

/* y[i] = convert(x[i]) to t (lanes wide); with arith also y = min(y + y_old, y_old). */
static ir_kernel *build_narrow(ir_scalar t, uint32_t lanes, bool arith) {
    ir_kernel *k = ir_kernel_create("h");
    ir_buf x = ir_param_buffer(k, "x", IR_F32, IR_READ), y = ir_param_buffer(k, "y", t, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i = ir_id(k, IR_ID_GLOBAL, 0);
    ir_val v = ir_convert(k, ir_load(k, x, i, lanes), lanes == 1 ? ir_t_scalar(k, t) : ir_t_vector(k, t, lanes));
    if (arith) {
        ir_val old = ir_load(k, y, i, lanes);
        v = ir_bin(k, IR_OP_MIN, ir_bin(k, IR_OP_ADD, v, old), old);
    }
    ir_store(k, y, i, v);
    expect_ok(k);
    return k;
}

static char *lowered(ir_kernel *k, ir_lower_opts o) {
    kiln_err err = {0};
    cr_assert_eq(ir_lower(k, &o, &err), 0, "%s", err.msg);
    expect_ok(k);
    char *t = ir_print(k);
    cr_assert(t);
    return t;
}

static const ir_lower_opts all_in_f32 = { .bf16 = { true, true, true }, .f16 = { true, true, true } };

static const char bf16_text[] =
    "kernel @h(@x: buf<f32, r>, @y: buf<bf16, rw>) workgroup(64, 1, 1) {\n"
    "  %4 = const 2147483647 : u32\n"
    "  %5 = const 2139095040 : u32\n"
    "  %6 = const 16 : u32\n"
    "  %7 = const 1 : u32\n"
    "  %8 = const 32767 : u32\n"
    "  %9 = const 4294901760 : u32\n"
    "  %10 = const 4194304 : u32\n"
    "  %1 = id.global.x : u32\n"
    "  %2 = load @x[%1] : f32\n"
    "  %11 = bitcast %2 : u32\n"
    "  %12 = and %11, %4 : u32\n"
    "  %13 = cmp.gt %12, %5 : bool\n"
    "  %14 = shr %11, %6 : u32\n"
    "  %15 = and %14, %7 : u32\n"
    "  %16 = add %11, %8 : u32\n"
    "  %17 = add %16, %15 : u32\n"
    "  %18 = and %17, %9 : u32\n"
    "  %19 = or %11, %10 : u32\n"
    "  %20 = and %19, %9 : u32\n"
    "  %21 = select %13, %20, %18 : u32\n"
    "  %22 = bitcast %21 : f32\n"
    "  %3 = convert.exact %22 : bf16\n"
    "  store @y[%1], %3\n"
    "}\n";

static const char f16_text[] =
    "kernel @h(@x: buf<f32, r>, @y: buf<f16, rw>) workgroup(64, 1, 1) {\n"
    "  %4 = const 23 : u32\n"
    "  %5 = const 255 : u32\n"
    "  %6 = const 113 : u32\n"
    "  %7 = const 10 : u32\n"
    "  %8 = const 264 : u32\n"
    "  %9 = const 65504 : f32\n"
    "  %10 = const 2147483648 : u32\n"
    "  %11 = const 2139095040 : u32\n"
    "  %1 = id.global.x : u32\n"
    "  %2 = load @x[%1] : f32\n"
    "  %12 = bitcast %2 : u32\n"
    "  %13 = shr %12, %4 : u32\n"
    "  %14 = and %13, %5 : u32\n"
    "  %15 = max %14, %6 : u32\n"
    "  %16 = sub %15, %7 : u32\n"
    "  %17 = shl %16, %4 : u32\n"
    "  %18 = bitcast %17 : f32\n"
    "  %19 = sub %8, %15 : u32\n"
    "  %20 = shl %19, %4 : u32\n"
    "  %21 = bitcast %20 : f32\n"
    "  %22 = mul %2, %21 : f32\n"
    "  %23 = roundeven %22 : f32\n"
    "  %24 = mul %23, %18 : f32\n"
    "  %25 = abs %24 : f32\n"
    "  %26 = cmp.gt %25, %9 : bool\n"
    "  %27 = and %12, %10 : u32\n"
    "  %28 = or %27, %11 : u32\n"
    "  %29 = bitcast %28 : f32\n"
    "  %30 = select %26, %29, %24 : f32\n"
    "  %3 = convert.exact %30 : f16\n"
    "  store @y[%1], %3\n"
    "}\n";

Test(ir_lower_half, bf16_rounding_exact) {
    ir_kernel *k = build_narrow(IR_BF16, 1, false);
    char *t = lowered(k, all_in_f32);
    cr_assert_str_eq(t, bf16_text);
    free(t);
    ir_kernel_destroy(k);
}

Test(ir_lower_half, f16_rounding_exact_or_left_to_the_target) {
    ir_kernel *k = build_narrow(IR_F16, 1, false);
    char *t = lowered(k, all_in_f32);
    cr_assert_str_eq(t, f16_text);
    free(t);
    ir_kernel_destroy(k);
    /* rounding by the target's conversion: the convert stays */
    k = build_narrow(IR_F16, 1, false);
    ir_lower_opts o = all_in_f32;
    o.f16.round = false;
    t = lowered(k, o);
    cr_assert(strstr(t, "  %3 = convert %2 : f16\n") && !strstr(t, "roundeven"), "%s", t);
    free(t);
    ir_kernel_destroy(k);
}

Test(ir_lower_half, vectors_round_with_splat_constants) {
    ir_kernel *k = build_narrow(IR_BF16, 4, false);
    char *t = lowered(k, all_in_f32);
    cr_assert(strstr(t, " = const 16 : u32x4\n"), "%s", t);
    cr_assert(strstr(t, " = cmp.gt %"), "%s", t);
    cr_assert(strstr(t, " : boolx4\n"), "%s", t);
    cr_assert(strstr(t, "  %3 = convert.exact %"), "%s", t);
    cr_assert(strstr(t, " : bf16x4\n  store @y[%1], %3\n"), "%s", t);
    free(t);
    ir_kernel_destroy(k);
}

Test(ir_lower_half, arithmetic_in_f32_then_back) {
    ir_kernel *k = build_narrow(IR_F16, 1, true);
    ir_lower_opts o = all_in_f32;
    o.f16.round = false; /* keep the text short: the target rounds */
    char *t = lowered(k, o);
    static const char want[] =
        "  %4 = load @y[%1] : f16\n"
        "  %7 = convert %3 : f32\n"
        "  %8 = convert %4 : f32\n"
        "  %9 = add %7, %8 : f32\n"
        "  %5 = convert %9 : f16\n"     /* rounds: an add */
        "  %10 = convert %5 : f32\n"
        "  %11 = convert %4 : f32\n"
        "  %12 = min %10, %11 : f32\n"
        "  %6 = convert.exact %12 : f16\n" /* min of two f16 values is one */
        "  store @y[%1], %6\n";
    cr_assert(strstr(t, want), "%s", t);
    free(t);
    ir_kernel_destroy(k);
}

Test(ir_lower_half, native_and_refused_arithmetic_are_left) {
    for (int native = 0; native < 2; native++) {
        ir_kernel *k = build_narrow(IR_BF16, 2, true);
        ir_lower_opts o = all_in_f32;
        o.bf16 = native ? (ir_lower_16){ .in_f32 = false, .arith = true, .round = true }
                        : (ir_lower_16){ .in_f32 = true, .arith = false, .round = true };
        char *t = lowered(k, o);
        /* the arithmetic stays on bf16 (native, or for the emitter to refuse) */
        cr_assert(strstr(t, "  %5 = add %3, %4 : bf16x2\n") && strstr(t, "  %6 = min %5, %4 : bf16x2\n"), "%s", t);
        cr_assert(strstr(t, "  %3 = convert.exact %"), "the conversion still rounds in the IR: %s", t);
        free(t);
        ir_kernel_destroy(k);
    }
}

Test(ir_lower_half, lowered_forms_verify_and_print) {
    ir_kernel *k = kern();
    ir_buf y = ir_param_buffer(k, "y", IR_BF16, IR_WRITE);
    ir_val r = ir_un(k, IR_OP_ROUNDEVEN, ir_const_f32(k, 2.5f));
    expect_line(k, "%%%u = roundeven %%%u : f32", r, r - 1);
    ir_val c = ir_convert(k, r, T(k, IR_BF16));
    ir_store(k, y, ir_const_u32(k, 0), c);
    expect_ok(k);
    def(k, c)->imm[0] = 1; /* as ir/lower_half.c writes it */
    expect_ok(k);
    expect_line(k, "%%%u = convert.exact %%%u : bf16", c, r);
    ir_kernel_destroy(k);

    /* a vector constant: every lane the same */
    k = kern();
    ir_buf u = ir_param_buffer(k, "u", IR_U32, IR_WRITE);
    ir_val v = ir_vec(k, (ir_val[]){ ir_const_u32(k, 7), ir_const_u32(k, 7) }, 2);
    ir_store(k, u, ir_const_u32(k, 0), v);
    ir_inst *vi = def(k, v);
    vi->op = IR_OP_CONST, vi->n_operand = 0, vi->imm[0] = 7;
    expect_ok(k);
    expect_line(k, "%%%u = const 7 : u32x2", v);
    ir_kernel_destroy(k);
}

Test(ir_lower_half, rules_for_the_lowered_forms) {
    ir_kernel *k = kern();
    ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_val f = ir_convert(k, ir_const_i32(k, 3), T(k, IR_F32));
    ir_store(k, y, ir_const_u32(k, 0), f);
    expect_ok(k);
    def(k, f)->imm[0] = 1; /* exact on an int -> f32 conversion: not a narrowing */
    expect_fail(k, "convert.exact narrows f32 to f16 or bf16");
    def(k, f)->imm[0] = 2;
    expect_fail(k, "convert.exact");
    ir_kernel_destroy(k);

    k = kern();
    ir_un(k, IR_OP_ROUNDEVEN, ir_const_i32(k, 3));
    expect_builder_error(k, "roundeven takes f32");
    ir_kernel_destroy(k);
}
