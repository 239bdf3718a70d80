/* The kernel IR's verifier: each kernel here breaks exactly one rule, which refuses it. */
#include "tests/ir/ir_test.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- verifier rules: each kernel breaks exactly one ----------------------------------------- */

Test(ir, rule_use_before_def) {
    ir_kernel *k = kern();
    ir_val a = ir_const_u32(k, 1);
    ir_val b = ir_bin(k, IR_OP_ADD, a, a);
    expect_ok(k);
    ir_region *r = (ir_region *)ir_kernel_body(k);
    ir_inst *t = r->inst[0];
    r->inst[0] = r->inst[1];
    r->inst[1] = t;
    expect_fail(k, "is used before its definition");
    cr_assert_neq(b, IR_NONE);
    ir_kernel_destroy(k);
}

Test(ir, rule_scope) {
    ir_kernel *k = kern();
    ir_buf o = ir_param_buffer(k, "o", IR_U32, IR_WRITE);
    ir_val z = ir_const_u32(k, 0), n = ir_const_u32(k, 8), one = ir_const_u32(k, 1);
    ir_for *f = ir_for_begin(k, z, n, one, 0, NULL);
    ir_val inner = ir_bin(k, IR_OP_ADD, ir_for_iv(f), one);
    ir_for_end(k, f, NULL);
    ir_store(k, o, z, z);
    expect_ok(k);
    last_inst(k)->operand[1] = inner; /* the body's value, after the loop */
    expect_fail(k, "used outside the for/if body that defines it");
    last_inst(k)->operand[1] = ir_for_iv(f); /* the loop's block argument, after it */
    expect_fail(k, "used outside the for/if body that defines it");
    ir_kernel_destroy(k);
}

Test(ir, rule_scope_if_branches) {
    ir_kernel *k = kern();
    ir_val c = ir_const_bool(k, true);
    ir_if *g = ir_if_begin(k, c, 1);
    ir_val a = ir_const_u32(k, 1);
    ir_if_else(k, g, &a);
    ir_val b = ir_const_u32(k, 2);
    ir_if_end(k, g, &b);
    expect_ok(k);
    ir_inst *gi = last_inst(k);
    ir_region *els = &gi->region[1];
    els->inst[els->n - 1]->operand[0] = a; /* else yields the then-branch's value */
    expect_fail(k, "used outside the for/if body that defines it");
    ir_kernel_destroy(k);
}

Test(ir, rule_arith_types) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 1), u = ir_const_u32(k, 1);
    ir_val r = ir_bin(k, IR_OP_ADD, f, f);
    expect_ok(k);
    def(k, r)->operand[1] = u;
    expect_fail(k, "operands must have one type (f32, u32)");
    ir_kernel_destroy(k);
}

Test(ir, rule_arith_on_bool) {
    ir_kernel *k = kern();
    ir_val b = ir_const_bool(k, true), u = ir_const_u32(k, 1);
    ir_val r = ir_bin(k, IR_OP_ADD, u, u);
    expect_ok(k);
    ir_inst *in = def(k, r);
    in->operand[0] = in->operand[1] = b;
    in->type = T(k, IR_BOOL);
    expect_fail(k, "add takes ints or floats, not bool");
    ir_kernel_destroy(k);
}

Test(ir, rule_bits_on_ints) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 1), u = ir_const_u32(k, 1), b = ir_const_bool(k, false);
    ir_val r = ir_bin(k, IR_OP_XOR, u, u);
    ir_val s = ir_bin(k, IR_OP_SHL, u, u);
    expect_ok(k);
    ir_inst *in = def(k, r);
    in->operand[0] = in->operand[1] = f;
    in->type = T(k, IR_F32);
    expect_fail(k, "xor takes ints or bools, not f32");
    in->operand[0] = in->operand[1] = u;
    in->type = T(k, IR_U32);
    expect_ok(k);
    in = def(k, s);
    in->operand[0] = in->operand[1] = b;
    in->type = T(k, IR_BOOL);
    expect_fail(k, "shl takes ints, not bool");
    ir_kernel_destroy(k);
}

Test(ir, rule_float_unary) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 1), i = ir_const_i32(k, 1);
    ir_val h = ir_convert(k, f, T(k, IR_F16));
    ir_val r = ir_un(k, IR_OP_EXP, f);
    expect_ok(k);
    ir_inst *in = def(k, r);
    in->operand[0] = i;
    in->type = T(k, IR_I32);
    expect_fail(k, "exp takes f32, not i32");
    in->operand[0] = h;
    in->type = T(k, IR_F16);
    expect_fail(k, "exp takes f32, not f16");
    ir_kernel_destroy(k);
}

Test(ir, rule_result_type) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 1);
    ir_val r = ir_bin(k, IR_OP_MUL, f, f);
    expect_ok(k);
    def(k, r)->type = T(k, IR_U32);
    expect_fail(k, "operands and result must have one type");
    ir_kernel_destroy(k);
}

Test(ir, rule_cmp) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 1), u = ir_const_u32(k, 1), b = ir_const_bool(k, true);
    ir_val c = ir_compare(k, IR_LT, f, f);
    expect_ok(k);
    ir_inst *in = def(k, c);
    in->operand[1] = u;
    expect_fail(k, "operands must have one type (f32, u32)");
    in->operand[1] = f;
    in->type = T(k, IR_F32);
    expect_fail(k, "result type is f32, expected bool");
    in->type = T(k, IR_BOOL);
    in->operand[0] = in->operand[1] = b;
    expect_fail(k, "bools compare only eq/ne");
    ir_kernel_destroy(k);
}

Test(ir, rule_select_cond) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 1), u = ir_const_u32(k, 1), c = ir_const_bool(k, true);
    ir_val s = ir_select(k, c, f, f);
    expect_ok(k);
    def(k, s)->operand[0] = u;
    expect_fail(k, "select condition must be bool");
    ir_kernel_destroy(k);
}

Test(ir, rule_convert_pairs) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 1);
    ir_val bf = ir_convert(k, f, T(k, IR_BF16));
    ir_val back = ir_convert(k, bf, T(k, IR_F32));
    expect_ok(k);
    def(k, back)->type = T(k, IR_I32);
    expect_fail(k, "convert from bf16 to i32 is not allowed");
    def(k, back)->type = T(k, IR_F16);
    expect_fail(k, "convert from bf16 to f16 is not allowed");
    ir_kernel_destroy(k);
}

Test(ir, rule_bitcast_width) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 1);
    ir_val b = ir_bitcast(k, f, T(k, IR_U32));
    expect_ok(k);
    def(k, b)->type = T(k, IR_F16);
    expect_fail(k, "bitcast needs another type of the same width (f32 to f16)");
    ir_kernel_destroy(k);
}

Test(ir, rule_load_needs_read) {
    ir_kernel *k = kern();
    ir_buf r = ir_param_buffer(k, "r", IR_F32, IR_READ);
    ir_buf w = ir_param_buffer(k, "w", IR_F32, IR_WRITE);
    ir_val v = ir_load(k, r, ir_const_u32(k, 0), 1);
    expect_ok(k);
    def(k, v)->imm[0] = w;
    expect_fail(k, "buffer @w is not readable (IR_READ)");
    ir_kernel_destroy(k);
}

Test(ir, rule_store_needs_write) {
    ir_kernel *k = kern();
    ir_buf r = ir_param_buffer(k, "r", IR_F32, IR_READ);
    ir_buf w = ir_param_buffer(k, "w", IR_F32, IR_WRITE);
    ir_store(k, w, ir_const_u32(k, 0), ir_const_f32(k, 1));
    expect_ok(k);
    last_inst(k)->imm[0] = r;
    expect_fail(k, "buffer @r is not writable (IR_WRITE)");
    ir_kernel_destroy(k);
}

Test(ir, rule_index_u32) {
    ir_kernel *k = kern();
    ir_buf r = ir_param_buffer(k, "r", IR_F32, IR_READ);
    ir_shm s = ir_shared_array(k, "s", IR_F32, 8);
    ir_val i = ir_const_i32(k, 0), u = ir_const_u32(k, 0);
    ir_val v = ir_load(k, r, u, 1);
    ir_val w = ir_shm_load(k, s, u, 1);
    expect_ok(k);
    def(k, v)->operand[0] = i;
    expect_fail(k, "index must be u32, is i32");
    def(k, v)->operand[0] = u;
    def(k, w)->operand[0] = i;
    expect_fail(k, "index must be u32, is i32");
    ir_kernel_destroy(k);
}

Test(ir, rule_vector_lanes) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 1);
    ir_val l[4] = { f, f, f, f };
    ir_val v = ir_vec(k, l, 4);
    expect_ok(k);
    ir_type_desc *d = (ir_type_desc *)ir_type_get(k, ir_type_of(k, v));
    d->lanes = 5;
    expect_fail(k, "vector types have 2..4 lanes");
    ir_kernel_destroy(k);
}

Test(ir, rule_load_lanes) {
    ir_kernel *k = kern();
    ir_buf r = ir_param_buffer(k, "r", IR_F32, IR_READ);
    ir_val v = ir_load(k, r, ir_const_u32(k, 0), 2);
    expect_ok(k);
    ir_inst *in = def(k, v);
    in->imm[1] = 3;
    in->type = ir_t_vector(k, IR_F32, 3);
    expect_fail(k, "memory accesses take 1, 2 or 4 lanes, not 3");
    ir_kernel_destroy(k);
}

Test(ir, rule_masked_limit_and_fallback) {
    ir_kernel *k = kern();
    ir_buf r = ir_param_buffer(k, "r", IR_F32, IR_READ);
    ir_buf w = ir_param_buffer(k, "w", IR_F32, IR_WRITE);
    ir_val i = ir_const_u32(k, 0), lim = ir_const_u32(k, 10), z = ir_const_f32(k, 0), si = ir_const_i32(k, 10);
    ir_val v = ir_load_masked(k, r, i, 4, lim, z);
    ir_store_masked(k, w, i, v, lim);
    expect_ok(k);
    ir_inst *ld = def(k, v);
    ld->operand[1] = z;
    expect_fail(k, "mask limit must be u32, is f32");
    ld->operand[1] = lim;
    ld->operand[2] = lim;
    expect_fail(k, "fallback must be f32 (the element type), is u32");
    ld->operand[2] = z;
    expect_ok(k);
    last_inst(k)->operand[2] = si;
    expect_fail(k, "mask limit must be u32, is i32");
    ir_kernel_destroy(k);
}

Test(ir, rule_atomics) {
    ir_kernel *k = kern();
    ir_buf bf = ir_param_buffer(k, "bf", IR_F32, IR_READ | IR_WRITE);
    ir_buf ro = ir_param_buffer(k, "ro", IR_F32, IR_READ);
    ir_buf bh = ir_param_buffer(k, "bh", IR_F16, IR_READ | IR_WRITE);
    ir_val i = ir_const_u32(k, 0), f = ir_const_f32(k, 1);
    ir_val h = ir_convert(k, f, T(k, IR_F16));
    ir_val a = ir_atomic(k, IR_ATOMIC_ADD, false, bf, i, f);
    expect_ok(k);
    ir_inst *in = def(k, a);
    in->imm[1] = IR_ATOMIC_MAX;
    expect_fail(k, "atomic min/max takes i32 or u32, not f32");
    in->imm[1] = IR_ATOMIC_ADD;
    in->imm[0] = ro;
    expect_fail(k, "buffer @ro is not writable");
    in->imm[0] = bh;
    in->operand[1] = h;
    in->type = T(k, IR_F16);
    expect_fail(k, "atomic add takes i32, u32 or f32, not f16");
    ir_kernel_destroy(k);
}

Test(ir, rule_subgroup_types) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 1), lane = ir_const_u32(k, 0);
    ir_val h = ir_convert(k, f, T(k, IR_F16));
    ir_val l[2] = { f, f };
    ir_val v = ir_vec(k, l, 2);
    ir_val r = ir_sg_reduce(k, IR_REDUCE_ADD, f);
    ir_val s = ir_sg_shuffle(k, v, lane);
    expect_ok(k);
    ir_inst *in = def(k, r);
    in->operand[0] = h;
    in->type = T(k, IR_F16);
    expect_fail(k, "subgroup reduce takes i32, u32 or f32, not f16");
    in->operand[0] = v;
    in->type = ir_type_of(k, v);
    expect_fail(k, "subgroup reduce takes i32, u32 or f32, not f32x2");
    in->operand[0] = f;
    in->type = T(k, IR_F32);
    expect_ok(k);
    def(k, s)->operand[1] = f;
    expect_fail(k, "lane must be u32, is f32");
    ir_kernel_destroy(k);
}

Test(ir, rule_fragment_shapes) {
    ir_kernel *k = kern();
    ir_buf a = ir_param_buffer(k, "a", IR_F16, IR_READ);
    ir_type fa = ir_t_frag(k, IR_FRAG_A, IR_F16, 16, 16, 16);
    ir_type fb = ir_t_frag(k, IR_FRAG_B, IR_F16, 16, 16, 16);
    ir_type fb8 = ir_t_frag(k, IR_FRAG_B, IR_F16, 16, 8, 16);
    ir_type fc = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 16, 16, 16);
    ir_val z = ir_const_u32(k, 0), st = ir_const_u32(k, 16);
    ir_val va = ir_frag_load(k, fa, false, a, z, st, true);
    ir_val vb = ir_frag_load(k, fb, false, a, z, st, true);
    ir_val vb8 = ir_frag_load(k, fb8, false, a, z, st, true);
    ir_val acc = ir_frag_fill(k, fc, ir_const_f32(k, 0));
    ir_val r = ir_frag_mma(k, va, vb, acc);
    expect_ok(k);
    ir_inst *in = def(k, r);
    in->operand[1] = vb8;
    expect_fail(k, "frag.mma shapes differ");
    in->operand[1] = va;
    expect_fail(k, "expected an B fragment");
    in->operand[1] = vb;
    expect_ok(k);
    def(k, vb)->type = ir_t_frag(k, IR_FRAG_B, IR_BF16, 16, 16, 16);
    expect_fail(k, "fragment holds bf16, the array f16");
    ir_kernel_destroy(k);
}

Test(ir, rule_yield_count_and_types) {
    ir_kernel *k = kern();
    ir_val z = ir_const_u32(k, 0), n = ir_const_u32(k, 4), one = ir_const_u32(k, 1), f = ir_const_f32(k, 0);
    ir_for *lp = ir_for_begin(k, z, n, one, 1, &f);
    ir_val s = ir_bin(k, IR_OP_ADD, ir_for_arg(lp, 0), f);
    ir_for_end(k, lp, &s);
    expect_ok(k);
    ir_inst *fi = last_inst(k);
    ir_inst *y = fi->region[0].inst[fi->region[0].n - 1];
    y->n_operand = 0;
    expect_fail(k, "yields 0 values, the for has 1");
    y->n_operand = 1;
    y->operand[0] = ir_for_iv(lp);
    expect_fail(k, "yield 0 is u32, expected f32");
    ir_kernel_destroy(k);
}

Test(ir, rule_region_ends_with_yield) {
    ir_kernel *k = kern();
    ir_val c = ir_const_bool(k, true);
    ir_if *g = ir_if_begin(k, c, 0);
    ir_const_u32(k, 1);
    ir_if_end(k, g, NULL);
    expect_ok(k);
    ir_inst *gi = last_inst(k);
    gi->region[0].n--; /* drop the then-part's yield */
    expect_fail(k, "every if region must end with a yield");
    gi->region[0].n++;
    ir_region *body = (ir_region *)ir_kernel_body(k);
    /* a yield in the kernel body */
    body->inst[0] = gi->region[1].inst[0];
    expect_fail(k, "yield outside a for/if");
    ir_kernel_destroy(k);
}

Test(ir, rule_for_bounds) {
    ir_kernel *k = kern();
    ir_val z = ir_const_u32(k, 0), n = ir_const_u32(k, 4), one = ir_const_u32(k, 1), ni = ir_const_i32(k, 4);
    ir_val f = ir_const_f32(k, 4);
    ir_for *lp = ir_for_begin(k, z, n, one, 0, NULL);
    ir_for_end(k, lp, NULL);
    expect_ok(k);
    ir_inst *fi = last_inst(k);
    fi->operand[1] = ni;
    expect_fail(k, "for bounds must be one type, i32 or u32 (u32, i32, u32)");
    fi->operand[0] = fi->operand[1] = fi->operand[2] = f;
    expect_fail(k, "for bounds must be one type, i32 or u32 (f32, f32, f32)");
    ir_kernel_destroy(k);
}

Test(ir, rule_for_step_positive) {
    ir_kernel *k = kern();
    ir_val z = ir_const_i32(k, 0), n = ir_const_i32(k, 4), one = ir_const_i32(k, 1), m = ir_const_i32(k, -1);
    ir_for *lp = ir_for_begin(k, z, n, one, 0, NULL);
    ir_for_end(k, lp, NULL);
    expect_ok(k);
    last_inst(k)->operand[2] = m;
    expect_fail(k, "for step must be positive");
    ir_kernel_destroy(k);
}

Test(ir, rule_barrier_uniform) {
    /* a barrier under an if on the local id: refused */
    ir_kernel *k = kern();
    ir_val lid = ir_id(k, IR_ID_LOCAL, 0);
    ir_val c = ir_compare(k, IR_LT, lid, ir_const_u32(k, 32));
    ir_if *g = ir_if_begin(k, c, 0);
    ir_barrier(k);
    ir_if_end(k, g, NULL);
    cr_assert_str_eq(ir_kernel_error(k), ""); /* the builder takes it; the verifier refuses */
    expect_fail(k, "barrier in control flow that depends on a per-invocation id");
    ir_kernel_destroy(k);

    /* on the workgroup id: uniform, accepted */
    k = kern();
    ir_val grp = ir_id(k, IR_ID_GROUP, 0);
    c = ir_compare(k, IR_LT, grp, ir_const_u32(k, 32));
    g = ir_if_begin(k, c, 0);
    ir_barrier(k);
    ir_if_end(k, g, NULL);
    expect_ok(k);
    ir_kernel_destroy(k);

    /* divergence carried through a loop's carried value reaches the if after it */
    k = kern();
    ir_val z = ir_const_u32(k, 0), n = ir_const_u32(k, 4), one = ir_const_u32(k, 1);
    ir_for *f = ir_for_begin(k, z, n, one, 1, &z);
    ir_val lane = ir_id(k, IR_ID_SG_LANE, 0);
    ir_val nx = ir_bin(k, IR_OP_ADD, ir_for_arg(f, 0), lane);
    ir_for_end(k, f, &nx);
    c = ir_compare(k, IR_EQ, ir_for_result(f, 0), z);
    g = ir_if_begin(k, c, 0);
    ir_barrier(k);
    ir_if_end(k, g, NULL);
    expect_fail(k, "barrier in control flow that depends on a per-invocation id");
    ir_kernel_destroy(k);

    /* a loop whose start is the local id: refused */
    k = kern();
    lid = ir_id(k, IR_ID_LOCAL, 0);
    f = ir_for_begin(k, lid, ir_const_u32(k, 100), ir_const_u32(k, 64), 0, NULL);
    ir_barrier(k);
    ir_for_end(k, f, NULL);
    expect_fail(k, "barrier in control flow that depends on a per-invocation id");
    ir_kernel_destroy(k);
}

Test(ir, rule_workgroup) {
    ir_kernel *k = ir_kernel_create("w");
    expect_fail(k, "workgroup size not set");
    ir_set_workgroup(k, 2048, 1, 1);
    expect_fail(k, "workgroup size 2048x1x1: each dimension 1..1024, product <= 1024");
    ir_set_workgroup(k, 32, 32, 2);
    expect_fail(k, "workgroup size 32x32x2");
    ir_set_workgroup(k, 0, 1, 1);
    expect_fail(k, "workgroup size 0x1x1");
    ir_set_workgroup(k, 32, 32, 1);
    expect_ok(k);
    ir_val s = ir_spec_const(k, "WG", IR_U32, 4096);
    ir_set_workgroup_spec(k, s);
    expect_fail(k, "workgroup size 4096x1x1");
    ir_kernel_destroy(k);
}

Test(ir, rule_defined_once) {
    ir_kernel *k = kern();
    ir_val a = ir_const_u32(k, 1);
    ir_val b = ir_const_u32(k, 2);
    expect_ok(k);
    def(k, b)->result = a;
    expect_fail(k, "is defined more than once");
    ir_kernel_destroy(k);
}

Test(ir, rule_builder_error_and_open_construct) {
    ir_kernel *k = kern();
    ir_bin(k, IR_OP_ADD, ir_const_u32(k, 1), ir_const_f32(k, 1));
    expect_fail(k, "builder: ir_bin: operands must have one type (u32, f32)");
    ir_kernel_destroy(k);
    k = kern();
    ir_if_begin(k, ir_const_bool(k, true), 0);
    expect_fail(k, "an if is still open");
    ir_kernel_destroy(k);
}

Test(ir, rule_async_copies) {
    ir_kernel *k = kern();
    ir_buf src = ir_param_buffer(k, "src", IR_BF16, IR_READ);
    ir_buf wo = ir_param_buffer(k, "wo", IR_BF16, IR_WRITE);
    ir_buf s32 = ir_param_buffer(k, "s32", IR_F32, IR_READ);
    ir_shm sh = ir_shared_array(k, "sh", IR_BF16, 64);
    ir_val i = ir_const_u32(k, 0), lim = ir_const_u32(k, 10), si = ir_const_i32(k, 0);
    ir_async_copy(k, sh, i, src, i, 8, lim);
    ir_async_commit(k);
    ir_async_wait(k, 0);
    expect_ok(k);
    ir_inst *w = last_inst(k);
    w->imm[0] = 8;
    expect_fail(k, "async.wait leaves 0..7 groups pending, not 8");
    w->imm[0] = 7;
    expect_ok(k);
    ir_inst *cp = body_inst(k, ir_kernel_body(k)->n - 3);
    cr_assert_eq(cp->op, IR_OP_ASYNC_COPY);
    cp->imm[2] = 3;
    expect_fail(k, "async.copy moves 4, 8 or 16 bytes, not 3 elements of bf16");
    cp->imm[2] = 4;
    expect_ok(k);
    cp->imm[1] = s32;
    expect_fail(k, "async.copy from f32 into bf16");
    cp->imm[1] = wo;
    expect_fail(k, "buffer @wo is not readable");
    cp->imm[1] = src;
    cp->operand[2] = si;
    expect_fail(k, "limit must be u32, is i32");
    cp->operand[2] = lim;
    cp->imm[0] = 5;
    expect_fail(k, "no workgroup array 5");
    ir_kernel_destroy(k);
}
