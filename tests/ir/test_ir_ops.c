/* The kernel IR: exact printed text, and every op builds, verifies and prints. */
#include "tests/ir/ir_test.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- exact text ---------------------------------------------------------------------------- */

static const char axpy_text[] =
    "kernel @axpy(@x: buf<f32, r>, @y: buf<f32, rw>, %1 @n: u32, %2 @a: f32) spec(%3 @WG: u32 = 64) "
    "workgroup(%3) {\n"
    "  %4 = id.global.x : u32\n"
    "  %5 = cmp.lt %4, %1 : bool\n"
    "  if %5 {\n"
    "    %6 = load @x[%4] : f32\n"
    "    %7 = load @y[%4] : f32\n"
    "    %8 = fma %2, %6, %7 : f32\n"
    "    store @y[%4], %8\n"
    "    yield\n"
    "  }\n"
    "}\n";

Test(ir, print_axpy_exact) {
    ir_kernel *k = build_axpy();
    expect_ok(k);
    char *t = ir_print(k);
    cr_assert_str_eq(t, axpy_text);
    char *t2 = ir_print(k);
    cr_assert_str_eq(t, t2); /* same kernel, same bytes */
    free(t);
    free(t2);
    ir_kernel *k2 = build_axpy(); /* built again, same bytes */
    t = ir_print(k2);
    cr_assert_str_eq(t, axpy_text);
    free(t);
    ir_kernel_destroy(k2);
    ir_kernel_destroy(k);
}

Test(ir, print_for_if_exact) {
    ir_kernel *k = ir_kernel_create("sum");
    ir_buf o = ir_param_buffer(k, "o", IR_I32, IR_WRITE);
    ir_shm s = ir_shared_array(k, "tile", IR_I32, 16);
    ir_set_workgroup(k, 16, 2, 1);
    ir_val zero = ir_const_u32(k, 0), ten = ir_const_u32(k, 10), one = ir_const_u32(k, 1);
    ir_val init = ir_const_i32(k, -3);
    ir_for *f = ir_for_begin(k, zero, ten, one, 1, &init);
    ir_val c = ir_compare(k, IR_GT, ir_for_iv(f), ir_const_u32(k, 4));
    ir_if *g = ir_if_begin(k, c, 1);
    ir_val t = ir_bin(k, IR_OP_ADD, ir_for_arg(f, 0), ir_convert(k, ir_for_iv(f), T(k, IR_I32)));
    ir_if_else(k, g, &t);
    ir_val e = ir_for_arg(f, 0);
    ir_if_end(k, g, &e);
    ir_val r = ir_if_result(g, 0);
    ir_for_end(k, f, &r);
    ir_shm_store(k, s, zero, ir_for_result(f, 0));
    ir_barrier(k);
    ir_store(k, o, zero, ir_shm_load(k, s, one, 1));
    expect_ok(k);
    char *txt = ir_print(k);
    cr_assert_str_eq(txt,
                     "kernel @sum(@o: buf<i32, w>) workgroup(16, 2, 1) {\n"
                     "  shared @tile: i32[16]\n"
                     "  %1 = const 0 : u32\n"
                     "  %2 = const 10 : u32\n"
                     "  %3 = const 1 : u32\n"
                     "  %4 = const -3 : i32\n"
                     "  %12 = for %5 = %1 to %2 step %3 iter(%6 = %4) : i32 {\n"
                     "    %7 = const 4 : u32\n"
                     "    %8 = cmp.gt %5, %7 : bool\n"
                     "    %11 = if %8 : i32 {\n"
                     "      %9 = convert %5 : i32\n"
                     "      %10 = add %6, %9 : i32\n"
                     "      yield %10\n"
                     "    } else {\n"
                     "      yield %6\n"
                     "    }\n"
                     "    yield %11\n"
                     "  }\n"
                     "  shm.store @tile[%1], %12\n"
                     "  barrier\n"
                     "  %13 = shm.load @tile[%3] : i32\n"
                     "  store @o[%1], %13\n"
                     "}\n");
    free(txt);
    ir_kernel_destroy(k);
}

Test(ir, print_constants) {
    ir_kernel *k = kern();
    ir_val a = ir_const_f32(k, 0.1f), b = ir_const_f32(k, 1e-5f), c = ir_const_f32(k, -0.0f);
    ir_val d = ir_const_f32(k, 3.0f), e = ir_const_f32(k, INFINITY), f = ir_const_f32(k, 16777216.0f);
    ir_val g = ir_const_bool(k, true), h = ir_const_i32(k, INT32_MIN), i = ir_const_u32(k, UINT32_MAX);
    ir_val n = ir_const_f32(k, NAN);
    expect_ok(k);
    expect_line(k, "%%%u = const 0.1 : f32", a);
    expect_line(k, "%%%u = const 1e-05 : f32", b);
    expect_line(k, "%%%u = const -0 : f32", c);
    expect_line(k, "%%%u = const 3 : f32", d);
    expect_line(k, "%%%u = const inf : f32", e);
    expect_line(k, "%%%u = const 16777216 : f32", f);
    expect_line(k, "%%%u = const true : bool", g);
    expect_line(k, "%%%u = const -2147483648 : i32", h);
    expect_line(k, "%%%u = const 4294967295 : u32", i);
    expect_line(k, "%%%u = const nan(0x7fc00000) : f32", n);
    /* the CONST encoding documented in ir.h */
    cr_assert_eq(ir_def(k, h)->imm[0], INT32_MIN);
    cr_assert_eq(ir_def(k, i)->imm[0], (int64_t)UINT32_MAX);
    cr_assert_eq(ir_def(k, a)->imm[0], 0x3dcccccd);
    ir_kernel_destroy(k);
}

/* ---- every op ------------------------------------------------------------------------------- */

Test(ir, op_binary) {
    ir_kernel *k = kern();
    ir_val fa = ir_const_f32(k, 1.5f), fb = ir_const_f32(k, 2.0f);
    ir_val ua = ir_const_u32(k, 7), ub = ir_const_u32(k, 3);
    ir_val ia = ir_const_i32(k, -7), ib = ir_const_i32(k, 2);
    ir_val ba = ir_const_bool(k, true), bb = ir_const_bool(k, false);
    for (ir_op op = IR_OP_ADD; op <= IR_OP_MAX; op++) {
        ir_val r = ir_bin(k, op, fa, fb);
        cr_assert_neq(r, IR_NONE, "%s f32: %s", ir_op_name(op), ir_kernel_error(k));
        expect_line(k, "%%%u = %s %%%u, %%%u : f32", r, ir_op_name(op), fa, fb);
        cr_assert_neq(ir_bin(k, op, ua, ub), IR_NONE);
        cr_assert_neq(ir_bin(k, op, ia, ib), IR_NONE);
    }
    for (ir_op op = IR_OP_AND; op <= IR_OP_SHR; op++) {
        ir_val r = ir_bin(k, op, ua, ub);
        cr_assert_neq(r, IR_NONE, "%s u32: %s", ir_op_name(op), ir_kernel_error(k));
        expect_line(k, "%%%u = %s %%%u, %%%u : u32", r, ir_op_name(op), ua, ub);
        cr_assert_neq(ir_bin(k, op, ia, ib), IR_NONE);
        if (op <= IR_OP_XOR)
            cr_assert_neq(ir_bin(k, op, ba, bb), IR_NONE);
    }
    /* vectors */
    ir_val l[4] = { fa, fb, fa, fb };
    ir_val v = ir_vec(k, l, 4);
    ir_val s = ir_bin(k, IR_OP_MUL, v, v);
    expect_line(k, "%%%u = mul %%%u, %%%u : f32x4", s, v, v);
    expect_ok(k);
    ir_kernel_destroy(k);
}

Test(ir, op_unary_and_fma) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 0.25f), u = ir_const_u32(k, 5), i = ir_const_i32(k, -5), b = ir_const_bool(k, true);
    for (ir_op op = IR_OP_EXP; op <= IR_OP_FLOOR; op++) {
        ir_val r = ir_un(k, op, f);
        cr_assert_neq(r, IR_NONE, "%s: %s", ir_op_name(op), ir_kernel_error(k));
        expect_line(k, "%%%u = %s %%%u : f32", r, ir_op_name(op), f);
    }
    ir_val r = ir_un(k, IR_OP_NEG, f);
    expect_line(k, "%%%u = neg %%%u : f32", r, f);
    cr_assert_neq(ir_un(k, IR_OP_NEG, i), IR_NONE);
    cr_assert_neq(ir_un(k, IR_OP_NEG, u), IR_NONE);
    r = ir_un(k, IR_OP_NOT, b);
    expect_line(k, "%%%u = not %%%u : bool", r, b);
    cr_assert_neq(ir_un(k, IR_OP_NOT, u), IR_NONE);
    r = ir_un(k, IR_OP_ABS, i);
    expect_line(k, "%%%u = abs %%%u : i32", r, i);
    cr_assert_neq(ir_un(k, IR_OP_ABS, f), IR_NONE);
    r = ir_fma(k, f, f, f);
    expect_line(k, "%%%u = fma %%%u, %%%u, %%%u : f32", r, f, f, f);
    ir_val h = ir_convert(k, f, T(k, IR_F16));
    cr_assert_neq(ir_fma(k, h, h, h), IR_NONE, "fma f16: %s", ir_kernel_error(k));
    expect_ok(k);
    ir_kernel_destroy(k);
}

Test(ir, op_compare_select) {
    ir_kernel *k = kern();
    ir_val a = ir_const_f32(k, 1), b = ir_const_f32(k, 2), u = ir_const_u32(k, 1);
    static const char *const names[] = { "eq", "ne", "lt", "le", "gt", "ge" };
    for (ir_cmp c = IR_EQ; c <= IR_GE; c++) {
        ir_val r = ir_compare(k, c, a, b);
        expect_line(k, "%%%u = cmp.%s %%%u, %%%u : bool", r, names[c], a, b);
        cr_assert_neq(ir_compare(k, c, u, u), IR_NONE);
    }
    ir_val t = ir_const_bool(k, true);
    cr_assert_neq(ir_compare(k, IR_EQ, t, t), IR_NONE);
    ir_val c = ir_compare(k, IR_LT, a, b);
    ir_val s = ir_select(k, c, a, b);
    expect_line(k, "%%%u = select %%%u, %%%u, %%%u : f32", s, c, a, b);
    /* vectors: a bool vector from the compare, and lane-wise select */
    ir_val l[2] = { a, b };
    ir_val v = ir_vec(k, l, 2);
    ir_val vc = ir_compare(k, IR_LE, v, v);
    expect_line(k, "%%%u = cmp.le %%%u, %%%u : boolx2", vc, v, v);
    cr_assert_neq(ir_select(k, vc, v, v), IR_NONE);
    cr_assert_neq(ir_select(k, c, v, v), IR_NONE); /* a scalar condition picks whole vectors */
    expect_ok(k);
    ir_kernel_destroy(k);
}

Test(ir, op_convert_bitcast) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 1.5f), i = ir_const_i32(k, -2), u = ir_const_u32(k, 9);
    ir_val bf = ir_convert(k, f, T(k, IR_BF16));
    expect_line(k, "%%%u = convert %%%u : bf16", bf, f);
    cr_assert_neq(ir_convert(k, bf, T(k, IR_F32)), IR_NONE);
    ir_val h = ir_convert(k, f, T(k, IR_F16));
    cr_assert_neq(ir_convert(k, h, T(k, IR_F32)), IR_NONE);
    cr_assert_neq(ir_convert(k, i, T(k, IR_F32)), IR_NONE);
    cr_assert_neq(ir_convert(k, f, T(k, IR_U32)), IR_NONE);
    cr_assert_neq(ir_convert(k, u, T(k, IR_I64)), IR_NONE);
    cr_assert_neq(ir_convert(k, i, T(k, IR_U32)), IR_NONE);
    cr_assert_eq(ir_convert(k, f, T(k, IR_F32)), f); /* same type: the value itself */
    ir_val bits = ir_bitcast(k, f, T(k, IR_U32));
    expect_line(k, "%%%u = bitcast %%%u : u32", bits, f);
    ir_val hl[2] = { h, h };
    ir_val h2 = ir_vec(k, hl, 2);
    ir_val packed = ir_bitcast(k, h2, T(k, IR_U32));
    expect_line(k, "%%%u = bitcast %%%u : u32", packed, h2);
    cr_assert_neq(ir_bitcast(k, packed, ir_t_vector(k, IR_BF16, 2)), IR_NONE);
    /* vectors convert lane by lane */
    ir_val fl[4] = { f, f, f, f };
    ir_val f4 = ir_vec(k, fl, 4);
    ir_val b4 = ir_convert(k, f4, ir_t_vector(k, IR_BF16, 4));
    expect_line(k, "%%%u = convert %%%u : bf16x4", b4, f4);
    expect_ok(k);
    ir_kernel_destroy(k);
}

Test(ir, op_vec_extract) {
    ir_kernel *k = kern();
    ir_val a = ir_const_u32(k, 1), b = ir_const_u32(k, 2), c = ir_const_u32(k, 3);
    ir_val l[3] = { a, b, c };
    ir_val v = ir_vec(k, l, 3);
    expect_line(k, "%%%u = vec %%%u, %%%u, %%%u : u32x3", v, a, b, c);
    ir_val e = ir_extract(k, v, 2);
    expect_line(k, "%%%u = extract %%%u, 2 : u32", e, v);
    cr_assert_eq(ir_def(k, e)->imm[0], 2);
    expect_ok(k);
    ir_kernel_destroy(k);
}

Test(ir, op_ids) {
    ir_kernel *k = kern();
    ir_val g = ir_id(k, IR_ID_GLOBAL, 0), l = ir_id(k, IR_ID_LOCAL, 1), w = ir_id(k, IR_ID_GROUP, 2);
    ir_val n = ir_id(k, IR_ID_NUM_GROUPS, 0), s = ir_id(k, IR_ID_SG_ID, 0), ln = ir_id(k, IR_ID_SG_LANE, 0);
    ir_val sz = ir_id(k, IR_ID_SG_SIZE, 0);
    expect_line(k, "%%%u = id.global.x : u32", g);
    expect_line(k, "%%%u = id.local.y : u32", l);
    expect_line(k, "%%%u = id.group.z : u32", w);
    expect_line(k, "%%%u = id.num_groups.x : u32", n);
    expect_line(k, "%%%u = id.sg_id : u32", s);
    expect_line(k, "%%%u = id.sg_lane : u32", ln);
    expect_line(k, "%%%u = id.sg_size : u32", sz);
    cr_assert_eq(ir_def(k, w)->imm[0], IR_ID_GROUP);
    cr_assert_eq(ir_def(k, w)->imm[1], 2);
    expect_ok(k);
    ir_kernel_destroy(k);
}

Test(ir, op_memory) {
    ir_kernel *k = kern();
    ir_buf in = ir_param_buffer(k, "in", IR_F16, IR_READ);
    ir_buf out = ir_param_buffer(k, "out", IR_F16, IR_WRITE);
    ir_shm sh = ir_shared_array(k, "sh", IR_F32, 256);
    ir_val i = ir_id(k, IR_ID_GLOBAL, 0), lim = ir_const_u32(k, 100);
    ir_val z = ir_convert(k, ir_const_f32(k, 0), T(k, IR_F16));
    ir_val v1 = ir_load(k, in, i, 1), v2 = ir_load(k, in, i, 2), v4 = ir_load(k, in, i, 4);
    expect_line(k, "%%%u = load @in[%%%u] : f16", v1, i);
    expect_line(k, "%%%u = load @in[%%%u] : f16x2", v2, i);
    expect_line(k, "%%%u = load @in[%%%u] : f16x4", v4, i);
    cr_assert_eq(ir_def(k, v4)->imm[0], (int64_t)in);
    cr_assert_eq(ir_def(k, v4)->imm[1], 4);
    ir_store(k, out, i, v4);
    expect_line(k, "store @out[%%%u], %%%u", i, v4);
    cr_assert_eq(last_inst(k)->imm[1], 4);
    ir_val m = ir_load_masked(k, in, i, 4, lim, z);
    expect_line(k, "%%%u = load.masked @in[%%%u], limit %%%u, else %%%u : f16x4", m, i, lim, z);
    ir_store_masked(k, out, i, m, lim);
    expect_line(k, "store.masked @out[%%%u], %%%u, limit %%%u", i, m, lim);
    ir_shm_store(k, sh, i, ir_convert(k, v1, T(k, IR_F32)));
    ir_barrier(k);
    expect_line(k, "barrier");
    ir_val s4 = ir_shm_load(k, sh, i, 4);
    expect_line(k, "%%%u = shm.load @sh[%%%u] : f32x4", s4, i);
    ir_shm_store(k, sh, i, s4);
    expect_ok(k);
    ir_kernel_destroy(k);
}

Test(ir, op_atomics) {
    ir_kernel *k = kern();
    ir_buf bu = ir_param_buffer(k, "bu", IR_U32, IR_READ | IR_WRITE);
    ir_buf bf = ir_param_buffer(k, "bf", IR_F32, IR_READ | IR_WRITE);
    ir_shm si = ir_shared_array(k, "si", IR_I32, 4);
    ir_val i = ir_const_u32(k, 0), u = ir_const_u32(k, 1), f = ir_const_f32(k, 1), s = ir_const_i32(k, -1);
    static const char *const names[] = { "add", "min", "max", "xchg" };
    for (ir_atomic_op op = IR_ATOMIC_ADD; op <= IR_ATOMIC_XCHG; op++) {
        ir_val r = ir_atomic(k, op, false, bu, i, u);
        cr_assert_neq(r, IR_NONE, "%s", ir_kernel_error(k));
        expect_line(k, "%%%u = atomic.%s @bu[%%%u], %%%u : u32", r, names[op], i, u);
        cr_assert_neq(ir_atomic(k, op, true, si, i, s), IR_NONE);
    }
    ir_val r = ir_atomic(k, IR_ATOMIC_ADD, false, bf, i, f);
    expect_line(k, "%%%u = atomic.add @bf[%%%u], %%%u : f32", r, i, f);
    cr_assert_eq(ir_def(k, r)->imm[0], (int64_t)bf);
    cr_assert_eq(ir_def(k, r)->imm[1], IR_ATOMIC_ADD);
    cr_assert_eq(ir_def(k, r)->imm[2], 0);
    cr_assert_neq(ir_atomic(k, IR_ATOMIC_XCHG, false, bf, i, f), IR_NONE);
    expect_ok(k);
    ir_kernel_destroy(k);
}

Test(ir, op_subgroup) {
    ir_kernel *k = kern();
    ir_val f = ir_const_f32(k, 2), u = ir_const_u32(k, 3), i = ir_const_i32(k, 4);
    ir_val lane = ir_id(k, IR_ID_SG_LANE, 0), one = ir_const_u32(k, 1);
    static const char *const names[] = { "add", "min", "max" };
    for (ir_reduce r = IR_REDUCE_ADD; r <= IR_REDUCE_MAX; r++) {
        ir_val v = ir_sg_reduce(k, r, f);
        expect_line(k, "%%%u = sg.reduce.%s %%%u : f32", v, names[r], f);
        cr_assert_neq(ir_sg_reduce(k, r, u), IR_NONE);
        cr_assert_neq(ir_sg_reduce(k, r, i), IR_NONE);
    }
    ir_val s = ir_sg_shuffle(k, f, lane);
    expect_line(k, "%%%u = sg.shuffle %%%u, %%%u : f32", s, f, lane);
    ir_val x = ir_sg_shuffle_xor(k, u, one);
    expect_line(k, "%%%u = sg.shuffle_xor %%%u, %%%u : u32", x, u, one);
    ir_val b = ir_sg_broadcast(k, i, one);
    expect_line(k, "%%%u = sg.broadcast %%%u, %%%u : i32", b, i, one);
    ir_val l[2] = { f, f };
    ir_val v = ir_vec(k, l, 2);
    cr_assert_neq(ir_sg_shuffle_xor(k, v, one), IR_NONE, "%s", ir_kernel_error(k));
    expect_ok(k);
    ir_kernel_destroy(k);
}

Test(ir, op_fragments) {
    ir_kernel *k = kern();
    ir_buf a = ir_param_buffer(k, "a", IR_F16, IR_READ);
    ir_buf c = ir_param_buffer(k, "c", IR_F32, IR_WRITE);
    ir_shm sb = ir_shared_array(k, "sb", IR_F16, 256);
    ir_type fa = ir_t_frag(k, IR_FRAG_A, IR_F16, 16, 8, 16);
    ir_type fb = ir_t_frag(k, IR_FRAG_B, IR_F16, 16, 8, 16);
    ir_type fc = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 16, 8, 16);
    cr_assert(fa && fb && fc, "%s", ir_kernel_error(k));
    const ir_type_desc *d = ir_type_get(k, fb);
    cr_assert_eq(d->kind, IR_T_FRAG);
    cr_assert_eq(d->use, IR_FRAG_B);
    cr_assert_eq(d->m, 16);
    cr_assert_eq(d->n, 8);
    cr_assert_eq(d->k, 16);
    ir_val base = ir_const_u32(k, 0), stride = ir_const_u32(k, 16);
    ir_val acc = ir_frag_fill(k, fc, ir_const_f32(k, 0));
    expect_line(k, "%%%u = frag.fill %%%u : frag.acc<f32, m16n8k16>", acc, acc - 1);
    ir_val va = ir_frag_load(k, fa, false, a, base, stride, true);
    expect_line(k, "%%%u = frag.load @a[%%%u], stride %%%u, row_major : frag.a<f16, m16n8k16>", va, base, stride);
    ir_val vb = ir_frag_load(k, fb, true, sb, base, stride, false);
    expect_line(k, "%%%u = frag.load @sb[%%%u], stride %%%u, col_major : frag.b<f16, m16n8k16>", vb, base, stride);
    cr_assert_eq(ir_def(k, vb)->imm[2], 1);
    ir_val r = ir_frag_mma(k, va, vb, acc);
    expect_line(k, "%%%u = frag.mma %%%u, %%%u, %%%u : frag.acc<f32, m16n8k16>", r, va, vb, acc);
    ir_frag_store(k, r, false, c, base, stride, true);
    expect_line(k, "frag.store %%%u, @c[%%%u], stride %%%u, row_major", r, base, stride);
    /* an accumulator carried through a loop */
    ir_val lo = ir_const_u32(k, 0), hi = ir_const_u32(k, 4), st = ir_const_u32(k, 1);
    ir_for *f = ir_for_begin(k, lo, hi, st, 1, &acc);
    ir_val next = ir_frag_mma(k, va, vb, ir_for_arg(f, 0));
    ir_for_end(k, f, &next);
    ir_frag_store(k, ir_for_result(f, 0), false, c, base, stride, true);
    expect_ok(k);
    ir_kernel_destroy(k);
}

Test(ir, op_for_if) {
    ir_kernel *k = kern();
    ir_buf o = ir_param_buffer(k, "o", IR_F32, IR_WRITE);
    ir_val lo = ir_const_i32(k, -4), hi = ir_const_i32(k, 4), st = ir_const_i32(k, 2);
    ir_val init[2] = { ir_const_f32(k, 0), ir_const_f32(k, 1) };
    ir_for *f = ir_for_begin(k, lo, hi, st, 2, init);
    cr_assert(f);
    cr_assert_eq(ir_type_of(k, ir_for_iv(f)), T(k, IR_I32));
    cr_assert_eq(ir_for_result(f, 0), IR_NONE); /* results exist once the loop ends */
    ir_val x = ir_convert(k, ir_for_iv(f), T(k, IR_F32));
    ir_val y[2] = { ir_bin(k, IR_OP_ADD, ir_for_arg(f, 0), x), ir_bin(k, IR_OP_MUL, ir_for_arg(f, 1), x) };
    ir_for_end(k, f, y);
    const ir_inst *fi = ir_def(k, ir_for_result(f, 1));
    cr_assert_eq(fi->op, IR_OP_FOR);
    cr_assert_eq(ir_def(k, ir_for_iv(f)), fi);
    cr_assert_eq(fi->n_results, 2);
    cr_assert_eq(fi->n_block_arg, 3);
    cr_assert_eq(fi->n_operand, 5);
    const ir_region *body = &fi->region[0];
    cr_assert_eq(body->inst[body->n - 1]->op, IR_OP_YIELD);
    cr_assert_eq(body->inst[body->n - 1]->n_operand, 2);
    expect_line(k, "%%%u, %%%u = for %%%u = %%%u to %%%u step %%%u iter(%%%u = %%%u, %%%u = %%%u) : f32, f32 {",
                 ir_for_result(f, 0), ir_for_result(f, 1), ir_for_iv(f), lo, hi, st, ir_for_arg(f, 0), init[0],
                 ir_for_arg(f, 1), init[1]);
    /* an if without results and without else still has an else region ending in a yield */
    ir_val c = ir_compare(k, IR_GT, ir_for_result(f, 0), init[1]);
    ir_if *g = ir_if_begin(k, c, 0);
    ir_store(k, o, ir_const_u32(k, 0), ir_for_result(f, 1));
    ir_if_end(k, g, NULL);
    const ir_inst *gi = last_inst(k);
    cr_assert_eq(gi->op, IR_OP_IF);
    cr_assert_eq(gi->n_region, 2);
    cr_assert_eq(gi->region[1].n, 1);
    cr_assert_eq(gi->region[1].inst[0]->op, IR_OP_YIELD);
    cr_assert_eq(gi->region[1].inst[0]->n_operand, 0);
    /* an if with two results */
    ir_if *h = ir_if_begin(k, c, 2);
    ir_val ty[2] = { ir_const_f32(k, 1), ir_const_u32(k, 2) };
    ir_if_else(k, h, ty);
    ir_val ey[2] = { ir_const_f32(k, 3), ir_const_u32(k, 4) };
    ir_if_end(k, h, ey);
    cr_assert_eq(ir_type_of(k, ir_if_result(h, 1)), T(k, IR_U32));
    cr_assert_eq(ir_def(k, ir_if_result(h, 0))->op, IR_OP_IF);
    expect_line(k, "%%%u, %%%u = if %%%u : f32, u32 {", ir_if_result(h, 0), ir_if_result(h, 1), c);
    expect_ok(k);
    ir_kernel_destroy(k);
}

Test(ir, params_specs_shared) {
    ir_kernel *k = ir_kernel_create("decl");
    ir_val s = ir_param_scalar(k, "s", IR_I32);
    ir_buf b0 = ir_param_buffer(k, "b0", IR_BF16, IR_READ);
    ir_val f = ir_param_scalar(k, "f", IR_F32);
    ir_buf b1 = ir_param_buffer(k, "b1", IR_U64, IR_WRITE);
    ir_val sp = ir_spec_const(k, "flag", IR_BOOL, 1);
    ir_val wg = ir_spec_const(k, "WG", IR_U32, 128);
    ir_shm sh = ir_shared_array(k, "sh", IR_F16, 64);
    ir_set_workgroup_spec(k, wg);
    cr_assert_eq(ir_n_params(k), 4);
    cr_assert_eq(ir_n_buffers(k), 2);
    cr_assert_eq(ir_buffer_param(k, b0), 1);
    cr_assert_eq(ir_buffer_param(k, b1), 3);
    cr_assert_str_eq(ir_param_at(k, 0)->name, "s");
    cr_assert(!ir_param_at(k, 0)->is_buffer);
    cr_assert_eq(ir_param_at(k, 0)->value, s);
    cr_assert_eq(ir_param_at(k, 2)->value, f);
    cr_assert_eq(ir_param_at(k, 3)->access, IR_WRITE);
    cr_assert_eq(ir_def(k, f)->op, IR_OP_PARAM);
    cr_assert_eq(ir_def(k, f)->imm[0], 2);
    cr_assert_eq(ir_n_specs(k), 2);
    cr_assert_eq(ir_spec_at(k, 1)->value, wg);
    cr_assert_eq(ir_spec_at(k, 1)->dflt, 128);
    cr_assert_eq(ir_def(k, sp)->op, IR_OP_SPEC);
    cr_assert_eq(ir_def(k, wg)->imm[0], 1);
    cr_assert_eq(ir_n_shared(k), 1);
    cr_assert_eq(ir_shared_at(k, sh)->count, 64);
    uint32_t xyz[3];
    ir_val xs;
    ir_workgroup(k, xyz, &xs);
    cr_assert_eq(xs, wg);
    cr_assert_eq(xyz[0], 128);
    cr_assert_eq(xyz[1], 1);
    cr_assert_str_eq(ir_kernel_name(k), "decl");
    cr_assert_eq(ir_n_values(k), 4);
    cr_assert_str_eq(ir_scalar_name(IR_BF16), "bf16");
    cr_assert_str_eq(ir_op_name(IR_OP_SG_SHUFFLE_XOR), "sg.shuffle_xor");
    cr_assert_eq(ir_t_vector(k, IR_F32, 4), ir_t_vector(k, IR_F32, 4)); /* interned */
    cr_assert_neq(ir_t_vector(k, IR_F32, 4), ir_t_vector(k, IR_F32, 2));
    expect_ok(k);
    char *t = ir_print(k);
    cr_assert_str_eq(t, "kernel @decl(%1 @s: i32, @b0: buf<bf16, r>, %2 @f: f32, @b1: buf<u64, w>) "
                        "spec(%3 @flag: bool = true, %4 @WG: u32 = 128) workgroup(%4) {\n"
                        "  shared @sh: f16[64]\n"
                        "}\n");
    free(t);
    ir_kernel_destroy(k);
}
