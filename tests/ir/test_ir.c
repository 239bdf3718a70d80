/* The kernel IR: every op builds, verifies and prints; every verifier rule refuses a
 * kernel that breaks exactly it; builder misuse returns IR_NONE with an error and never
 * crashes; specialization folds as the device would; DCE; a realistic RMSNorm kernel. */
#include "ir/ir.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------ */

static ir_kernel *kern(void) {
    ir_kernel *k = ir_kernel_create("t");
    cr_assert(k);
    ir_set_workgroup(k, 64, 1, 1);
    return k;
}

static void expect_ok(const ir_kernel *k) {
    char err[512];
    int rc = ir_verify(k, err, sizeof err);
    cr_assert_eq(rc, 0, "verify failed: %s (builder: %s)", err, ir_kernel_error(k));
    cr_assert_str_eq(err, "");
}

static void expect_fail(const ir_kernel *k, const char *part) {
    char err[512];
    int rc = ir_verify(k, err, sizeof err);
    cr_assert_eq(rc, -1, "verify passed, expected \"%s\"", part);
    cr_assert(strstr(err, part), "error \"%s\" lacks \"%s\"", err, part);
}

static void expect_builder_error(const ir_kernel *k, const char *part) {
    const char *e = ir_kernel_error(k);
    cr_assert(strstr(e, part), "builder error \"%s\" lacks \"%s\"", e, part);
    expect_fail(k, part);
}

/* The printed kernel holds this line (formatted), on a line of its own. */
static void expect_line(const ir_kernel *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void expect_line(const ir_kernel *k, const char *fmt, ...) {
    char want[256], pat[264];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want, sizeof want, fmt, ap);
    va_end(ap);
    snprintf(pat, sizeof pat, " %s\n", want);
    char *t = ir_print(k);
    cr_assert(t);
    bool found = strstr(t, pat) != NULL;
    if (!found)
        cr_log_error("printed:\n%s", t);
    free(t);
    cr_assert(found, "missing line \"%s\"", want);
}

static ir_inst *def(const ir_kernel *k, ir_val v) {
    ir_inst *in = (ir_inst *)ir_def(k, v);
    cr_assert(in, "%%%u has no definition", v);
    return in;
}

static ir_inst *body_inst(const ir_kernel *k, uint32_t i) {
    const ir_region *b = ir_kernel_body(k);
    cr_assert(i < b->n);
    return b->inst[i];
}

static ir_inst *last_inst(const ir_kernel *k) { return body_inst(k, ir_kernel_body(k)->n - 1); }

static ir_type T(ir_kernel *k, ir_scalar s) { return ir_t_scalar(k, s); }

/* ---- exact text ---------------------------------------------------------------------------- */

static ir_kernel *build_axpy(void) {
    ir_kernel *k = ir_kernel_create("axpy");
    ir_buf x = ir_param_buffer(k, "x", IR_F32, IR_READ);
    ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_READ | IR_WRITE);
    ir_val n = ir_param_scalar(k, "n", IR_U32);
    ir_val a = ir_param_scalar(k, "a", IR_F32);
    ir_val wg = ir_spec_const(k, "WG", IR_U32, 64);
    ir_set_workgroup_spec(k, wg);
    ir_val i = ir_id(k, IR_ID_GLOBAL, 0);
    ir_if *f = ir_if_begin(k, ir_compare(k, IR_LT, i, n), 0);
    ir_val xv = ir_load(k, x, i, 1);
    ir_val yv = ir_load(k, y, i, 1);
    ir_store(k, y, i, ir_fma(k, a, xv, yv));
    ir_if_end(k, f, NULL);
    return k;
}

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
    ir_val l[2] = { f, u };
    cr_assert_eq(ir_vec(k, l, 2), IR_NONE);
    expect_builder_error(k, "ir_vec: vec lane 1 is u32, expected f32");
    ir_kernel_destroy(k);

    k = kern();
    f = ir_const_f32(k, 1);
    ir_val l5[5] = { f, f, f, f, f };
    cr_assert_eq(ir_vec(k, l5, 5), IR_NONE);
    expect_builder_error(k, "ir_vec: vectors have 2..4 lanes");
    ir_kernel_destroy(k);

    k = kern();
    f = ir_const_f32(k, 1);
    ir_val l2[2] = { f, f };
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
}

Test(ir, misuse_null_kernel_and_garbage) {
    /* nothing may crash: a NULL kernel, IR_NONE and out-of-range operands everywhere */
    cr_assert_null(ir_print(NULL));
    char err[64];
    cr_assert_eq(ir_verify(NULL, err, sizeof err), -1);
    cr_assert_eq(ir_specialize(NULL, NULL, NULL, 0, err, sizeof err), -1);
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
    ir_val bad[] = { IR_NONE, 77, UINT32_MAX };
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
        cr_assert_eq(ir_vec(k, (ir_val[]){ x, x }, 2), IR_NONE);
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
    cr_assert_eq(ir_verify(k, err, sizeof err), -1);
    char *t = ir_print(k); /* a kernel with errors still prints */
    cr_assert(t);
    free(t);
    cr_assert_eq(ir_specialize(k, NULL, NULL, 0, err, sizeof err), -1);
    ir_dce(k);
    cr_assert_eq(ir_verify(k, NULL, 0), -1); /* no error buffer: fine */
    ir_kernel_destroy(k);
}

/* ---- specialize and fold ------------------------------------------------------------------- */

static int spec1(ir_kernel *k, const char *name, double v) {
    char err[256];
    int rc = ir_specialize(k, &name, &v, 1, err, sizeof err);
    cr_assert_eq(rc, 0, "specialize: %s", err);
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
    char err[256];
    cr_assert_eq(ir_specialize(k, NULL, NULL, 0, err, sizeof err), 0, "%s", err);
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
    char err[256];
    cr_assert_eq(ir_specialize(k, NULL, NULL, 0, err, sizeof err), 0, "%s", err);
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
    char err[256];
    const char *bad[] = { "nope" };
    double v = 1;
    cr_assert_eq(ir_specialize(k, bad, &v, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "unknown spec constant @nope"), "%s", err);
    const char *wg[] = { "WG" };
    double neg = -5;
    cr_assert_eq(ir_specialize(k, wg, &neg, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "@WG = -5: not a u32"), "%s", err);
    char *after = ir_print(k);
    cr_assert_str_eq(before, after); /* refused: unchanged */
    free(after);
    double big = 4096;
    cr_assert_eq(ir_specialize(k, wg, &big, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "workgroup size 4096x1x1"), "%s", err);
    free(before);
    ir_kernel_destroy(k);

    k = build_axpy();
    double w = 128;
    cr_assert_eq(ir_specialize(k, wg, &w, 1, err, sizeof err), 0, "%s", err);
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

/* ---- a realistic kernel: RMSNorm, one workgroup per row ------------------------------------- */

static ir_kernel *build_rmsnorm(void) {
    ir_kernel *k = ir_kernel_create("rmsnorm");
    ir_buf x = ir_param_buffer(k, "x", IR_F32, IR_READ);
    ir_buf w = ir_param_buffer(k, "w", IR_F32, IR_READ);
    ir_buf y = ir_param_buffer(k, "y", IR_BF16, IR_WRITE);
    ir_val n = ir_param_scalar(k, "n", IR_U32); /* row length, a multiple of 4 */
    ir_val eps = ir_spec_const(k, "eps", IR_F32, 1e-6);
    ir_val wg = ir_spec_const(k, "WG", IR_U32, 256);
    ir_set_workgroup_spec(k, wg);
    ir_shm part = ir_shared_array(k, "partial", IR_F32, 32);
    ir_type f32 = T(k, IR_F32);

    ir_val row = ir_id(k, IR_ID_GROUP, 0), lid = ir_id(k, IR_ID_LOCAL, 0);
    ir_val base = ir_bin(k, IR_OP_MUL, row, n);
    ir_val end = ir_bin(k, IR_OP_ADD, base, n);
    ir_val four = ir_const_u32(k, 4);
    ir_val zero = ir_const_f32(k, 0);
    /* sum of squares: each invocation strides by the workgroup, 4 lanes at a time, masked at the end */
    ir_for *f = ir_for_begin(k, ir_bin(k, IR_OP_MUL, lid, four), n, ir_bin(k, IR_OP_MUL, wg, four), 1, &zero);
    ir_val sum = ir_for_arg(f, 0);
    ir_val v = ir_load_masked(k, x, ir_bin(k, IR_OP_ADD, base, ir_for_iv(f)), 4, end, zero);
    for (uint32_t l = 0; l < 4; l++) {
        ir_val e = ir_extract(k, v, l);
        sum = ir_fma(k, e, e, sum);
    }
    ir_for_end(k, f, &sum);
    /* subgroup reduce, then one partial per subgroup through shared memory */
    ir_val part_sum = ir_sg_reduce(k, IR_REDUCE_ADD, ir_for_result(f, 0));
    ir_val uz = ir_const_u32(k, 0), one = ir_const_u32(k, 1);
    ir_if *g = ir_if_begin(k, ir_compare(k, IR_EQ, ir_id(k, IR_ID_SG_LANE, 0), uz), 0);
    ir_shm_store(k, part, ir_id(k, IR_ID_SG_ID, 0), part_sum);
    ir_if_end(k, g, NULL);
    ir_barrier(k);
    ir_val nsg = ir_bin(k, IR_OP_DIV, wg, ir_id(k, IR_ID_SG_SIZE, 0));
    ir_for *h = ir_for_begin(k, uz, nsg, one, 1, &zero);
    ir_val acc = ir_bin(k, IR_OP_ADD, ir_for_arg(h, 0), ir_shm_load(k, part, ir_for_iv(h), 1));
    ir_for_end(k, h, &acc);
    ir_val mean = ir_bin(k, IR_OP_DIV, ir_for_result(h, 0), ir_convert(k, n, f32));
    ir_val scale = ir_un(k, IR_OP_RSQRT, ir_bin(k, IR_OP_ADD, mean, eps));
    /* normalize, scale by the weight, round to bf16 on store */
    ir_for *o = ir_for_begin(k, lid, n, wg, 0, NULL);
    ir_val j = ir_for_iv(o);
    ir_val idx = ir_bin(k, IR_OP_ADD, base, j);
    ir_val r = ir_bin(k, IR_OP_MUL, ir_bin(k, IR_OP_MUL, ir_load(k, x, idx, 1), scale), ir_load(k, w, j, 1));
    ir_store(k, y, idx, ir_convert(k, r, T(k, IR_BF16)));
    ir_for_end(k, o, NULL);
    return k;
}

Test(ir, rmsnorm) {
    ir_kernel *k = build_rmsnorm();
    expect_ok(k);
    char *t = ir_print(k);
    cr_assert(strncmp(t, "kernel @rmsnorm(@x: buf<f32, r>, @w: buf<f32, r>, @y: buf<bf16, w>, %1 @n: u32) "
                         "spec(%2 @eps: f32 = 1e-06, %3 @WG: u32 = 256) workgroup(%3) {\n"
                         "  shared @partial: f32[32]\n",
                  strlen("kernel @rmsnorm(@x: buf<f32, r>, @w: buf<f32, r>, @y: buf<bf16, w>, %1 @n: u32) "
                         "spec(%2 @eps: f32 = 1e-06, %3 @WG: u32 = 256) workgroup(%3) {\n"
                         "  shared @partial: f32[32]\n")) == 0,
              "%s", t);
    cr_assert(strstr(t, " = load.masked @x["), "%s", t);
    cr_assert(strstr(t, " = sg.reduce.add "), "%s", t);
    cr_assert(strstr(t, "  barrier\n"), "%s", t);
    cr_assert(strstr(t, " = convert "), "%s", t);
    cr_assert(strstr(t, " : bf16\n"), "%s", t);
    free(t);
    /* specialized for a device: the workgroup becomes a constant, everything still verifies */
    const char *names[] = { "WG", "eps" };
    double vals[] = { 128, 1e-5 };
    char err[256];
    cr_assert_eq(ir_specialize(k, names, vals, 2, err, sizeof err), 0, "%s", err);
    ir_dce(k);
    expect_ok(k);
    uint32_t xyz[3];
    ir_workgroup(k, xyz, NULL);
    cr_assert_eq(xyz[0], 128);
    t = ir_print(k);
    cr_assert(strstr(t, "workgroup(128, 1, 1)"), "%s", t);
    cr_assert(strstr(t, "const 512 : u32"), "%s", t); /* WG * 4 folded */
    free(t);
    ir_kernel_destroy(k);
}

/* Kernels edited into any shape (operands, immediates, types, ops, results) must never
 * crash the verifier, the printer or the passes; the sanitizer build checks the memory. */
static ir_inst *pick_inst(const ir_region *r, uint64_t *st, int depth) {
    if (!r->n)
        return NULL;
    *st ^= *st << 13, *st ^= *st >> 7, *st ^= *st << 17;
    ir_inst *in = r->inst[*st % r->n];
    if (in->n_region && depth < 4 && (*st >> 20) % 2) {
        ir_inst *x = pick_inst(&in->region[(*st >> 24) % in->n_region], st, depth + 1);
        if (x)
            return x;
    }
    return in;
}

Test(ir, edited_kernels_never_crash) {
    uint64_t st = 88172645463325252ull;
    int still_ok = 0;
    for (int it = 0; it < 3000; it++) {
        ir_kernel *k = build_rmsnorm();
        ir_inst *in = pick_inst(ir_kernel_body(k), &st, 0);
        cr_assert(in);
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        uint32_t r = (uint32_t)(st >> 32);
        switch (st % 5) {
        case 0: if (in->n_operand) in->operand[r % in->n_operand] = r % (ir_n_values(k) + 4); break;
        case 1: in->imm[r % 3] = (int64_t)(r % 14) - 2; break;
        case 2: in->type = r % 20; break;
        case 3: in->op = (ir_op)(r % (IR_OP_COUNT + 1)); break;
        case 4: in->result = r % (ir_n_values(k) + 3); break;
        }
        char err[256];
        if (ir_verify(k, err, sizeof err) == 0) {
            still_ok++;
            ir_specialize(k, NULL, NULL, 0, err, sizeof err);
        } else {
            cr_assert_neq(err[0], 0);
        }
        free(ir_print(k));
        ir_dce(k);
        free(ir_print(k));
        ir_kernel_destroy(k);
    }
    cr_assert(still_ok < 3000);
}
