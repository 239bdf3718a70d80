/* The kernel IR's builder misused: every call returns IR_NONE (or nothing) with an error
 * and never crashes. */
#include "base/error.h"
#include "tests/ir/ir_test.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- builder misuse ------------------------------------------------------------------------ */

Test(ir, misuse_operands) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 1), u = ir_const_u32(k, 1);
    cr_assert_eq(ir_bin(k, IR_OP_ADD, IR_NONE, f), IR_NONE);
    cr_assert(strstr(ir_kernel_error(k), "ir_bin: operand %0 is not a value"), "%s", ir_kernel_error(k));
    /* only the first error is kept */
    cr_assert_eq(ir_bin(k, IR_OP_ADD, f, u), IR_NONE);
    cr_assert(strstr(ir_kernel_error(k), "operand %0"));
    ir_kernel_destroy(k);

    k = kern();
    f = ir_const_f32(k, 1), u = ir_const_u32(k, 1);
    cr_assert_eq(ir_bin(k, IR_OP_ADD, f, u), IR_NONE);
    expect_builder_error(k, "ir_bin: operands must have one type (f32, u32)");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_eq(ir_bin(k, IR_OP_EXP, ir_const_f32(k, 1), ir_const_f32(k, 1)), IR_NONE);
    expect_builder_error(k, "ir_bin: exp is not a binary op");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_eq(ir_un(k, IR_OP_SQRT, ir_const_u32(k, 4)), IR_NONE);
    expect_builder_error(k, "ir_un: sqrt takes f32, not u32");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_eq(ir_bin(k, IR_OP_ADD, 999, 1000), IR_NONE);
    expect_builder_error(k, "not a value");
    ir_kernel_destroy(k);
}

Test(ir, misuse_memory) {
    ir_kernel *k = kern();
    ir_buf r = ir_param_buffer(k, "r", IR_F32, IR_READ);
    ir_val i = ir_const_u32(k, 0);
    cr_assert_eq(ir_load(k, 7, i, 1), IR_NONE);
    expect_builder_error(k, "ir_load: no buffer 7");
    ir_kernel_destroy(k);

    k = kern();
    r = ir_param_buffer(k, "r", IR_F32, IR_READ);
    i = ir_const_u32(k, 0);
    ir_store(k, r, i, ir_const_f32(k, 1));
    expect_builder_error(k, "ir_store: buffer @r is not writable");
    cr_assert_eq(ir_kernel_body(k)->n, 2); /* nothing appended */
    ir_kernel_destroy(k);

    k = kern();
    r = ir_param_buffer(k, "r", IR_F32, IR_READ);
    cr_assert_eq(ir_load(k, r, ir_const_u32(k, 0), 3), IR_NONE);
    expect_builder_error(k, "ir_load: loads take 1, 2 or 4 lanes");
    ir_kernel_destroy(k);

    k = kern();
    r = ir_param_buffer(k, "r", IR_F32, IR_READ);
    cr_assert_eq(ir_load(k, r, ir_const_i32(k, 0), 1), IR_NONE);
    expect_builder_error(k, "ir_load: index must be u32, is i32");
    ir_kernel_destroy(k);

    k = kern();
    ir_buf w = ir_param_buffer(k, "w", IR_U32, IR_READ | IR_WRITE);
    cr_assert_eq(ir_atomic(k, IR_ATOMIC_ADD, true, 0, ir_const_u32(k, 0), ir_const_u32(k, 1)), IR_NONE);
    expect_builder_error(k, "ir_atomic: no workgroup array 0");
    cr_assert_eq(w, 0);
    ir_kernel_destroy(k);

    k = kern();
    ir_buf bf = ir_param_buffer(k, "bf", IR_F32, IR_READ | IR_WRITE);
    cr_assert_eq(ir_atomic(k, IR_ATOMIC_MIN, false, bf, ir_const_u32(k, 0), ir_const_f32(k, 1)), IR_NONE);
    expect_builder_error(k, "ir_atomic: atomic min/max takes i32 or u32, not f32");
    ir_kernel_destroy(k);

    k = kern();
    ir_shm s = ir_shared_array(k, "s", IR_F32, 4);
    cr_assert_eq(ir_shm_load(k, s + 1, ir_const_u32(k, 0), 1), IR_NONE);
    expect_builder_error(k, "ir_shm_load: no workgroup array 1");
    ir_kernel_destroy(k);
}

Test(ir, misuse_structure) {
    ir_kernel *k = kern();
    ir_val z = ir_const_u32(k, 0), n = ir_const_u32(k, 4), one = ir_const_u32(k, 1);
    ir_for *f = ir_for_begin(k, z, n, one, 0, NULL);
    ir_for_end(k, f, NULL);
    ir_for_end(k, f, NULL); /* ended twice */
    expect_builder_error(k, "ir_for_end: that for is not open");
    ir_kernel_destroy(k);

    k = kern();
    z = ir_const_u32(k, 0), n = ir_const_u32(k, 4), one = ir_const_u32(k, 1);
    f = ir_for_begin(k, z, n, one, 0, NULL);
    ir_if *g = ir_if_begin(k, ir_const_bool(k, true), 0);
    ir_for_end(k, f, NULL); /* the if inside is still open */
    expect_builder_error(k, "ir_for_end: an inner for/if is still open");
    cr_assert(g);
    ir_kernel_destroy(k);

    k = kern();
    ir_for_end(k, NULL, NULL);
    expect_builder_error(k, "ir_for_end: that for is not open");
    ir_if_end(k, NULL, NULL);
    ir_if_else(k, NULL, NULL);
    cr_assert_eq(ir_for_iv(NULL), IR_NONE);
    cr_assert_eq(ir_for_arg(NULL, 0), IR_NONE);
    cr_assert_eq(ir_for_result(NULL, 0), IR_NONE);
    cr_assert_eq(ir_if_result(NULL, 0), IR_NONE);
    ir_kernel_destroy(k);

    k = kern();
    g = ir_if_begin(k, ir_const_bool(k, true), 1);
    ir_if_end(k, g, NULL);
    expect_builder_error(k, "ir_if_end: an if with 1 results needs an else");
    cr_assert_eq(ir_if_result(g, 0), IR_NONE);
    ir_kernel_destroy(k);

    k = kern();
    z = ir_const_u32(k, 0), n = ir_const_u32(k, 4), one = ir_const_u32(k, 1);
    ir_val fz = ir_const_f32(k, 0);
    f = ir_for_begin(k, z, n, one, 1, &fz);
    ir_for_end(k, f, NULL); /* one carried value, no yields */
    expect_builder_error(k, "ir_for_end: 1 values to yield, none given");
    cr_assert_eq(ir_for_result(f, 0), IR_NONE);
    ir_kernel_destroy(k);

    k = kern();
    z = ir_const_u32(k, 0), n = ir_const_u32(k, 4), one = ir_const_u32(k, 1), fz = ir_const_f32(k, 0);
    f = ir_for_begin(k, z, n, one, 1, &fz);
    ir_for_end(k, f, &one); /* u32 for an f32 carried value */
    expect_builder_error(k, "ir_for_end: yield 0 is u32, expected f32");
    ir_kernel_destroy(k);

    k = kern();
    g = ir_if_begin(k, ir_const_bool(k, true), 1);
    ir_val a = ir_const_u32(k, 1);
    ir_if_else(k, g, &a);
    ir_val b = ir_const_f32(k, 1);
    ir_if_end(k, g, &b);
    expect_builder_error(k, "ir_if_end: yield 0 is f32, expected u32");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_null(ir_if_begin(k, ir_const_u32(k, 1), 0));
    expect_builder_error(k, "ir_if_begin: if condition must be bool, is u32");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_null(ir_for_begin(k, ir_const_u32(k, 0), ir_const_i32(k, 4), ir_const_u32(k, 1), 0, NULL));
    expect_builder_error(k, "ir_for_begin: for bounds must be one type, i32 or u32 (u32, i32, u32)");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_null(ir_for_begin(k, ir_const_u32(k, 0), ir_const_u32(k, 4), ir_const_u32(k, 0), 0, NULL));
    expect_builder_error(k, "ir_for_begin: for step must be positive");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_null(ir_for_begin(k, ir_const_u32(k, 0), ir_const_u32(k, 4), ir_const_u32(k, 1), 2, NULL));
    expect_builder_error(k, "ir_for_begin: 2 carried values need their inits");
    ir_kernel_destroy(k);

    /* a value from an ended body is refused */
    k = kern();
    z = ir_const_u32(k, 0), n = ir_const_u32(k, 4), one = ir_const_u32(k, 1);
    f = ir_for_begin(k, z, n, one, 0, NULL);
    ir_val in = ir_bin(k, IR_OP_ADD, ir_for_iv(f), one);
    ir_for_end(k, f, NULL);
    cr_assert_eq(ir_bin(k, IR_OP_ADD, in, one), IR_NONE);
    expect_builder_error(k, "is defined inside a for/if body that has ended");
    ir_kernel_destroy(k);
}

Test(ir, misuse_types_and_decls) {
    ir_kernel *k = kern();
    cr_assert_eq(ir_t_vector(k, IR_F32, 5), 0);
    expect_builder_error(k, "ir_t_vector: vector types have 2..4 lanes");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_eq(ir_t_frag(k, IR_FRAG_A, IR_F32, 16, 16, 16), 0);
    expect_builder_error(k, "ir_t_frag: A and B fragments hold f16 or bf16");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_eq(ir_t_scalar(k, (ir_scalar)99), 0);
    expect_builder_error(k, "unknown scalar");
    cr_assert_null(ir_type_get(k, 0));
    cr_assert_null(ir_type_get(k, 12345));
    cr_assert_str_eq(ir_scalar_name((ir_scalar)99), "?");
    cr_assert_str_eq(ir_op_name((ir_op)999), "?");
    ir_kernel_destroy(k);

    k = kern();
    ir_param_buffer(k, "x", IR_F32, IR_READ);
    ir_param_scalar(k, "x", IR_U32);
    expect_builder_error(k, "ir_param_scalar: @x is already declared");
    ir_kernel_destroy(k);

    k = kern();
    ir_param_buffer(k, "bad name", IR_F32, IR_READ);
    expect_builder_error(k, "a name is an identifier");
    ir_kernel_destroy(k);

    k = kern();
    ir_param_buffer(k, NULL, IR_F32, IR_READ);
    expect_builder_error(k, "a name is an identifier");
    ir_kernel_destroy(k);

    k = kern();
    ir_param_buffer(k, "b", IR_BOOL, IR_READ);
    expect_builder_error(k, "buffers hold a non-bool scalar");
    ir_kernel_destroy(k);

    k = kern();
    ir_param_buffer(k, "b", IR_F32, 0);
    expect_builder_error(k, "access is IR_READ, IR_WRITE or both");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_eq(ir_param_scalar(k, "h", IR_F16), IR_NONE);
    expect_builder_error(k, "scalar parameters are i32, u32 or f32");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_eq(ir_spec_const(k, "n", IR_I32, 1.5), IR_NONE);
    expect_builder_error(k, "ir_spec_const: default of @n: not an i32");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_eq(ir_spec_const(k, "n", IR_U32, -1), IR_NONE);
    expect_builder_error(k, "not a u32");
    ir_kernel_destroy(k);

    k = kern();
    ir_set_workgroup_spec(k, ir_const_u32(k, 64));
    expect_builder_error(k, "ir_set_workgroup_spec: %1 is not a u32 spec constant");
    ir_kernel_destroy(k);

    k = kern();
    ir_shared_array(k, "s", IR_F32, 0);
    expect_builder_error(k, "ir_shared_array: count is 1..2^24");
    ir_kernel_destroy(k);

    k = ir_kernel_create("no good");
    cr_assert(k);
    expect_builder_error(k, "ir_kernel_create: a name is an identifier");
    ir_kernel_destroy(k);
    k = ir_kernel_create(NULL);
    cr_assert(k);
    cr_assert_str_eq(ir_kernel_name(k), "");
    ir_kernel_destroy(k);
}

Test(ir, misuse_values) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 1), u = ir_const_u32(k, 1);
    ir_val l[2] = {f, u};
    cr_assert_eq(ir_vec(k, l, 2), IR_NONE);
    expect_builder_error(k, "ir_vec: vec lane 1 is u32, expected f32");
    ir_kernel_destroy(k);

    k = kern();
    f = ir_const_f32(k, 1);
    ir_val l5[5] = {f, f, f, f, f};
    cr_assert_eq(ir_vec(k, l5, 5), IR_NONE);
    expect_builder_error(k, "ir_vec: vectors have 2..4 lanes");
    ir_kernel_destroy(k);

    k = kern();
    f = ir_const_f32(k, 1);
    ir_val l2[2] = {f, f};
    cr_assert_eq(ir_extract(k, ir_vec(k, l2, 2), 2), IR_NONE);
    expect_builder_error(k, "ir_extract: lane 2 out of 0..1");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_eq(ir_extract(k, ir_const_f32(k, 1), 0), IR_NONE);
    expect_builder_error(k, "ir_extract: %1 is not a vector");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_eq(ir_convert(k, ir_convert(k, ir_const_f32(k, 1), T(k, IR_BF16)), T(k, IR_I32)), IR_NONE);
    expect_builder_error(k, "ir_convert: convert from bf16 to i32 is not allowed");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_eq(ir_bitcast(k, ir_const_f32(k, 1), T(k, IR_I64)), IR_NONE);
    expect_builder_error(k, "ir_bitcast: bitcast needs another type of the same width (f32 to i64)");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_eq(ir_id(k, IR_ID_SG_LANE, 1), IR_NONE);
    expect_builder_error(k, "ir_id: id dimension 1 out of range");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_eq(ir_id(k, (ir_id_kind)42, 0), IR_NONE);
    expect_builder_error(k, "ir_id: unknown id kind 42");
    ir_kernel_destroy(k);

    k = kern();
    cr_assert_eq(ir_select(k, ir_const_u32(k, 1), ir_const_f32(k, 1), ir_const_f32(k, 2)), IR_NONE);
    expect_builder_error(k, "ir_select: select condition must be bool");
    ir_kernel_destroy(k);

    k = kern();
    ir_type fa = ir_t_frag(k, IR_FRAG_A, IR_F16, 16, 16, 16);
    ir_type fb = ir_t_frag(k, IR_FRAG_B, IR_F16, 16, 8, 16);
    ir_type fc = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 16, 16, 16);
    ir_val h = ir_convert(k, ir_const_f32(k, 0), T(k, IR_F16));
    ir_val va = ir_frag_fill(k, fa, h), vb = ir_frag_fill(k, fb, h), vc = ir_frag_fill(k, fc, ir_const_f32(k, 0));
    cr_assert_eq(ir_frag_mma(k, va, vb, vc), IR_NONE);
    expect_builder_error(k, "ir_frag_mma: frag.mma shapes differ");
    ir_kernel_destroy(k);

    k = kern();
    fc = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 16, 16, 16);
    cr_assert_eq(ir_frag_fill(k, fc, ir_const_u32(k, 0)), IR_NONE);
    expect_builder_error(k, "ir_frag_fill: fill value is u32, the fragment holds f32");
    ir_kernel_destroy(k);

    /* workgroup fragments: up to 1024 a side; never mixed with a subgroup's in one product */
    k = kern();
    cr_assert_neq(ir_t_frag_wg(k, IR_FRAG_ACC, IR_F32, 1024, 64, 16), 0);
    cr_assert_eq(ir_t_frag_wg(k, IR_FRAG_ACC, IR_F32, 1025, 64, 16), 0);
    expect_builder_error(k, "ir_t_frag_wg: workgroup fragment shapes are 1..1024 per dimension");
    ir_kernel_destroy(k);

    k = kern();
    fa = ir_t_frag_wg(k, IR_FRAG_A, IR_F16, 16, 16, 16);
    fb = ir_t_frag(k, IR_FRAG_B, IR_F16, 16, 16, 16);
    fc = ir_t_frag_wg(k, IR_FRAG_ACC, IR_F32, 16, 16, 16);
    cr_assert_neq(fa, ir_t_frag(k, IR_FRAG_A, IR_F16, 16, 16, 16), "a workgroup fragment is its own type");
    h = ir_convert(k, ir_const_f32(k, 0), T(k, IR_F16));
    va = ir_frag_fill(k, fa, h), vb = ir_frag_fill(k, fb, h), vc = ir_frag_fill(k, fc, ir_const_f32(k, 0));
    cr_assert_eq(ir_frag_mma(k, va, vb, vc), IR_NONE);
    expect_builder_error(k, "ir_frag_mma: frag.mma mixes workgroup and subgroup fragments");
    ir_kernel_destroy(k);

    /* tensor loads: workgroup A or B fragments of the buffer's type; only B transposes */
    static const struct {
        ir_frag_use use;
        bool wg, transposed;
        ir_scalar elem;
        const char *why;
    } tl[] = {
        {IR_FRAG_ACC, true, false, IR_F16, "ir_frag_load_tensor: frag.load_tensor makes a workgroup A or B fragment"},
        {IR_FRAG_A, false, false, IR_F16, "ir_frag_load_tensor: frag.load_tensor makes a workgroup A or B fragment"},
        {IR_FRAG_A, true, true, IR_F16, "ir_frag_load_tensor: frag.load_tensor transposes B fragments only"},
        {IR_FRAG_B, true, true, IR_BF16, "ir_frag_load_tensor: fragment holds bf16, the buffer f16"},
    };
    for (size_t i = 0; i < sizeof tl / sizeof tl[0]; i++) {
        k = kern();
        ir_buf b = ir_param_buffer(k, "T", IR_F16, IR_READ);
        ir_type ft = tl[i].wg ? ir_t_frag_wg(k, tl[i].use, tl[i].elem, 32, 32, 16)
                              : ir_t_frag(k, tl[i].use, tl[i].elem, 32, 32, 16);
        ir_val z = ir_const_u32(k, 0), n = ir_const_u32(k, 100);
        cr_assert_eq(ir_frag_load_tensor(k, ft, b, z, z, n, n, tl[i].transposed), IR_NONE, "%zu", i);
        expect_builder_error(k, tl[i].why);
        ir_kernel_destroy(k);
    }
    k = kern();
    ir_buf b = ir_param_buffer(k, "T", IR_F16, IR_READ);
    ir_val z = ir_const_u32(k, 0), n = ir_const_u32(k, 100);
    cr_assert_neq(ir_frag_load_tensor(k, ir_t_frag_wg(k, IR_FRAG_B, IR_F16, 32, 32, 16), b, z, z, n, n, true), IR_NONE);
    cr_assert_eq(
        ir_frag_load_tensor(k, ir_t_frag_wg(k, IR_FRAG_B, IR_F16, 32, 32, 16), b, z, z, n, ir_const_f32(k, 1), false),
        IR_NONE);
    expect_builder_error(k, "ir_frag_load_tensor: n_cols must be u32");
    ir_kernel_destroy(k);
}

Test(ir, misuse_null_kernel_and_garbage) {
    /* nothing may crash: a NULL kernel, IR_NONE and out-of-range operands everywhere */
    cr_assert_null(ir_print(NULL));
    kiln_err err = {0};
    cr_assert_eq(ir_verify(NULL, &err), -1);
    cr_assert_eq(ir_specialize(NULL, NULL, NULL, 0, &err), -1);
    ir_dce(NULL);
    ir_kernel_destroy(NULL);
    cr_assert_eq(ir_bin(NULL, IR_OP_ADD, 1, 2), IR_NONE);
    cr_assert_eq(ir_const_f32(NULL, 1), IR_NONE);
    cr_assert_null(ir_for_begin(NULL, 1, 2, 3, 0, NULL));
    cr_assert_null(ir_kernel_body(NULL));
    cr_assert_null(ir_def(NULL, 1));
    cr_assert_eq(ir_type_of(NULL, 1), 0);
    ir_store(NULL, 0, 1, 2);
    ir_barrier(NULL);

    ir_kernel *k = kern();
    ir_buf b = ir_param_buffer(k, "b", IR_F32, IR_READ | IR_WRITE);
    ir_shm s = ir_shared_array(k, "s", IR_F32, 16);
    ir_type fr = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 16, 16, 16);
    ir_val bad[] = {IR_NONE, 77, UINT32_MAX};
    for (unsigned i = 0; i < 3; i++) {
        ir_val x = bad[i];
        cr_assert_eq(ir_bin(k, IR_OP_ADD, x, x), IR_NONE);
        cr_assert_eq(ir_un(k, IR_OP_NEG, x), IR_NONE);
        cr_assert_eq(ir_fma(k, x, x, x), IR_NONE);
        cr_assert_eq(ir_compare(k, IR_EQ, x, x), IR_NONE);
        cr_assert_eq(ir_select(k, x, x, x), IR_NONE);
        cr_assert_eq(ir_convert(k, x, 0), IR_NONE);
        cr_assert_eq(ir_convert(k, x, 9999), IR_NONE);
        cr_assert_eq(ir_bitcast(k, x, 0), IR_NONE);
        cr_assert_eq(ir_vec(k, (ir_val[]){x, x}, 2), IR_NONE);
        cr_assert_eq(ir_vec(k, NULL, 2), IR_NONE);
        cr_assert_eq(ir_extract(k, x, 0), IR_NONE);
        cr_assert_eq(ir_load(k, b, x, 1), IR_NONE);
        ir_store(k, b, x, x);
        cr_assert_eq(ir_load_masked(k, b, x, 1, x, x), IR_NONE);
        ir_store_masked(k, b, x, x, x);
        cr_assert_eq(ir_shm_load(k, s, x, 1), IR_NONE);
        ir_shm_store(k, s, x, x);
        cr_assert_eq(ir_atomic(k, IR_ATOMIC_ADD, false, b, x, x), IR_NONE);
        cr_assert_eq(ir_sg_reduce(k, IR_REDUCE_ADD, x), IR_NONE);
        cr_assert_eq(ir_sg_shuffle(k, x, x), IR_NONE);
        cr_assert_eq(ir_sg_shuffle_xor(k, x, x), IR_NONE);
        cr_assert_eq(ir_sg_broadcast(k, x, x), IR_NONE);
        cr_assert_eq(ir_frag_fill(k, fr, x), IR_NONE);
        cr_assert_eq(ir_frag_fill(k, 0, x), IR_NONE);
        cr_assert_eq(ir_frag_load(k, fr, false, b, x, x, true), IR_NONE);
        ir_frag_store(k, x, false, b, x, x, true);
        cr_assert_eq(ir_frag_mma(k, x, x, x), IR_NONE);
        cr_assert_null(ir_for_begin(k, x, x, x, 1, &x));
        cr_assert_null(ir_if_begin(k, x, 0));
        ir_set_workgroup_spec(k, x);
        cr_assert_eq(ir_type_of(k, x), 0);
        cr_assert_null(ir_def(k, x));
    }
    /* wrong-kind values in right places */
    ir_val f = ir_const_f32(k, 1);
    cr_assert_eq(ir_convert(k, f, 0), IR_NONE);
    cr_assert_eq(ir_frag_fill(k, ir_t_scalar(k, IR_F32), f), IR_NONE);
    cr_assert_eq(ir_frag_mma(k, f, f, f), IR_NONE);
    ir_frag_store(k, f, false, b, f, f, true);
    cr_assert_eq(ir_sg_reduce(k, (ir_reduce)9, f), IR_NONE);
    cr_assert_eq(ir_compare(k, (ir_cmp)9, f, f), IR_NONE);
    cr_assert_eq(ir_atomic(k, (ir_atomic_op)9, false, b, ir_const_u32(k, 0), f), IR_NONE);
    cr_assert_neq(ir_kernel_error(k)[0], 0);
    cr_assert_eq(ir_verify(k, &err), -1);
    char *t = ir_print(k); /* a kernel with errors still prints */
    cr_assert(t);
    free(t);
    cr_assert_eq(ir_specialize(k, NULL, NULL, 0, &err), -1);
    ir_dce(k);
    cr_assert_eq(ir_verify(k, NULL), -1); /* no error buffer: fine */
    ir_kernel_destroy(k);
}
