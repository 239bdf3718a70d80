/* The kernel IR's copy (ir_kernel_clone) and its lowering passes (ir/lower.h): a copy
 * prints as the original and lives on its own; masked accesses become ifs around plain
 * accesses (exact text), the lowered kernel verifies and holds no masked op; misuse fails
 * with a message. */
#include "base/error.h"
#include "ir/lower.h"
#include "tests/ir/ir_test.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

/* y[2i..] = x[2i..] masked at n, twice as a 2-vector and once as a scalar */
static ir_kernel *build_tail(void) {
    ir_kernel *k = ir_kernel_create("tail");
    ir_buf x = ir_param_buffer(k, "x", IR_F32, IR_READ), y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_val n = ir_param_scalar(k, "n", IR_U32);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i = ir_bin(k, IR_OP_MUL, ir_id(k, IR_ID_GLOBAL, 0), ir_const_u32(k, 2));
    ir_val v = ir_load_masked(k, x, i, 2, n, ir_const_f32(k, 0.0f));
    ir_store_masked(k, y, i, v, n);
    ir_val s = ir_load_masked(k, x, i, 1, n, ir_const_f32(k, 1.0f));
    ir_store_masked(k, y, i, s, n);
    expect_ok(k);
    return k;
}

static const char tail_lowered[] =
    "kernel @tail(@x: buf<f32, r>, @y: buf<f32, w>, %1 @n: u32) workgroup(64, 1, 1) {\n"
    "  %11 = const 2 : u32\n"
    "  %17 = const 1 : u32\n"
    "  %2 = const 2 : u32\n"
    "  %3 = id.global.x : u32\n"
    "  %4 = mul %3, %2 : u32\n"
    "  %5 = const 0 : f32\n"
    "  %9 = cmp.lt %4, %1 : bool\n"
    "  %10 = sub %1, %4 : u32\n"
    "  %12 = cmp.ge %10, %11 : bool\n"
    "  %13 = and %9, %12 : bool\n"
    "  %6 = if %13 : f32x2 {\n"
    "    %14 = load @x[%4] : f32x2\n"
    "    yield %14\n"
    "  } else {\n"
    "    %15 = if %9 : f32 {\n"
    "      %16 = load @x[%4] : f32\n"
    "      yield %16\n"
    "    } else {\n"
    "      yield %5\n"
    "    }\n"
    "    %18 = cmp.gt %10, %17 : bool\n"
    "    %19 = and %9, %18 : bool\n"
    "    %20 = if %19 : f32 {\n"
    "      %21 = add %4, %17 : u32\n"
    "      %22 = load @x[%21] : f32\n"
    "      yield %22\n"
    "    } else {\n"
    "      yield %5\n"
    "    }\n"
    "    %23 = vec %15, %20 : f32x2\n"
    "    yield %23\n"
    "  }\n"
    "  %24 = cmp.lt %4, %1 : bool\n"
    "  %25 = sub %1, %4 : u32\n"
    "  %26 = cmp.ge %25, %11 : bool\n"
    "  %27 = and %24, %26 : bool\n"
    "  if %27 {\n"
    "    store @y[%4], %6\n"
    "    yield\n"
    "  } else {\n"
    "    if %24 {\n"
    "      %28 = extract %6, 0 : f32\n"
    "      store @y[%4], %28\n"
    "      yield\n"
    "    }\n"
    "    %29 = cmp.gt %25, %17 : bool\n"
    "    %30 = and %24, %29 : bool\n"
    "    if %30 {\n"
    "      %31 = add %4, %17 : u32\n"
    "      %32 = extract %6, 1 : f32\n"
    "      store @y[%31], %32\n"
    "      yield\n"
    "    }\n"
    "    yield\n"
    "  }\n"
    "  %7 = const 1 : f32\n"
    "  %33 = cmp.lt %4, %1 : bool\n"
    "  %8 = if %33 : f32 {\n"
    "    %34 = load @x[%4] : f32\n"
    "    yield %34\n"
    "  } else {\n"
    "    yield %7\n"
    "  }\n"
    "  %35 = cmp.lt %4, %1 : bool\n"
    "  if %35 {\n"
    "    store @y[%4], %8\n"
    "    yield\n"
    "  }\n"
    "}\n";

static bool has_op(const ir_region *r, ir_op op) {
    for (uint32_t i = 0; i < r->n; i++) {
        const ir_inst *in = r->inst[i];
        if (in->op == op)
            return true;
        for (uint32_t g = 0; g < in->n_region; g++)
            if (has_op(&in->region[g], op))
                return true;
    }
    return false;
}

Test(ir_lower, clone_prints_the_same_and_stands_alone) {
    ir_kernel *k = build_axpy();
    ir_shared_array(k, "tile", IR_BF16, 256);
    ir_buffer_extent(k, 0, 1000);
    expect_ok(k);
    char *a = ir_print(k);
    ir_kernel *c = ir_kernel_clone(k);
    cr_assert_not_null(c);
    expect_ok(c);
    char *b = ir_print(c);
    cr_assert_str_eq(a, b);
    cr_assert_eq(ir_n_values(c), ir_n_values(k));
    for (ir_val v = 1; v <= ir_n_values(k); v++) {
        cr_assert_eq(ir_type_of(c, v), ir_type_of(k, v), "%%%u", v);
        cr_assert_neq(ir_def(c, v), ir_def(k, v), "%%%u shares its instruction", v);
    }
    /* the original goes; the copy still verifies, prints and specializes on its own */
    ir_kernel_destroy(k);
    expect_ok(c);
    char *b2 = ir_print(c);
    cr_assert_str_eq(b2, a);
    const char *names[] = { "WG" };
    double values[] = { 128 };
    kiln_err err = {0};
    cr_assert_eq(ir_specialize(c, names, values, 1, &err), 0, "%s", err.msg);
    ir_kernel_destroy(c);
    free(a);
    free(b);
    free(b2);
}

Test(ir_lower, clone_refuses_null_and_open_kernels) {
    cr_assert_null(ir_kernel_clone(NULL));
    ir_kernel *k = kern();
    ir_if *f = ir_if_begin(k, ir_const_bool(k, true), 0);
    cr_assert_null(ir_kernel_clone(k));
    ir_if_end(k, f, NULL);
    ir_kernel *c = ir_kernel_clone(k);
    cr_assert_not_null(c);
    ir_kernel_destroy(c);
    ir_kernel_destroy(k);
}

Test(ir_lower, masked_accesses_exact) {
    ir_kernel *k = build_tail();
    char *before = ir_print(k);
    ir_kernel *c = ir_kernel_clone(k);
    kiln_err err = {0};
    cr_assert_eq(ir_lower(c, &(ir_lower_opts){ .masked = true }, &err), 0, "%s", err.msg);
    char *t = ir_print(c);
    cr_assert_str_eq(t, tail_lowered);
    expect_ok(c);
    cr_assert(!has_op(ir_kernel_body(c), IR_OP_LOAD_MASKED) && !has_op(ir_kernel_body(c), IR_OP_STORE_MASKED));
    /* the original is untouched */
    char *after = ir_print(k);
    cr_assert_str_eq(before, after);
    cr_assert(has_op(ir_kernel_body(k), IR_OP_LOAD_MASKED));
    free(before);
    free(after);
    free(t);
    ir_kernel_destroy(c);
    ir_kernel_destroy(k);
}

Test(ir_lower, nothing_asked_nothing_changed) {
    ir_kernel *k = build_tail();
    char *before = ir_print(k);
    cr_assert_eq(ir_lower(k, &(ir_lower_opts){ 0 }, NULL), 0);
    char *after = ir_print(k);
    cr_assert_str_eq(before, after);
    free(before);
    free(after);
    ir_kernel_destroy(k);
}

Test(ir_lower, refuses_unverified_kernels_and_null) {
    kiln_err err = {0};
    cr_assert_eq(ir_lower(NULL, &(ir_lower_opts){ .masked = true }, &err), -1);
    cr_assert(strstr(err.msg, "no kernel"), "%s", err.msg);
    ir_kernel *k = kern();
    cr_assert_eq(ir_lower(k, NULL, &err), -1);
    ir_bin(k, IR_OP_ADD, ir_const_u32(k, 1), ir_const_f32(k, 1.0f)); /* a builder error */
    cr_assert_eq(ir_lower(k, &(ir_lower_opts){ .masked = true }, &err), -1);
    cr_assert(strstr(err.msg, "builder"), "%s", err.msg);
    ir_kernel_destroy(k);
}

/* sh[4i..] = src[4i..] (f32, 16 bytes) below limit n, asynchronously, then waited for */
static ir_kernel *build_async(void) {
    ir_kernel *k = ir_kernel_create("acopy");
    ir_buf x = ir_param_buffer(k, "x", IR_F32, IR_READ);
    ir_val n = ir_param_scalar(k, "n", IR_U32);
    ir_shm sh = ir_shared_array(k, "sh", IR_F32, 256);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i = ir_bin(k, IR_OP_MUL, ir_id(k, IR_ID_LOCAL, 0), ir_const_u32(k, 4));
    ir_async_copy(k, sh, i, x, i, 4, n);
    ir_async_commit(k);
    ir_async_wait(k, 0);
    expect_ok(k);
    return k;
}

static const char async_printed[] = "  async.copy @sh[%4], @x[%4], count 4, limit %1\n"
                                    "  async.commit\n"
                                    "  async.wait 0\n";
static const char async_lowered[] = "  %5 = const 0 : f32\n"
                                    "  %2 = const 4 : u32\n"
                                    "  %3 = id.local.x : u32\n"
                                    "  %4 = mul %3, %2 : u32\n"
                                    "  %6 = load.masked @x[%4], limit %1, else %5 : f32x4\n"
                                    "  shm.store @sh[%4], %6\n"
                                    "}\n";

Test(ir_lower, async_copies_become_masked_loads_where_asked) {
    ir_kernel *k = build_async();
    char *t = ir_print(k);
    cr_assert(strstr(t, async_printed), "%s", t);
    free(t);
    /* not asked: left for a target that has them */
    ir_kernel *keep = ir_kernel_clone(k);
    cr_assert_eq(ir_lower(keep, &(ir_lower_opts){ .masked = true }, NULL), 0);
    cr_assert(has_op(ir_kernel_body(keep), IR_OP_ASYNC_COPY) && has_op(ir_kernel_body(keep), IR_OP_ASYNC_WAIT));
    ir_kernel_destroy(keep);
    kiln_err err = {0};
    cr_assert_eq(ir_lower(k, &(ir_lower_opts){ .async_sync = true }, &err), 0, "%s", err.msg);
    t = ir_print(k);
    cr_assert(strstr(t, async_lowered), "%s", t);
    cr_assert(!has_op(ir_kernel_body(k), IR_OP_ASYNC_COPY) && !has_op(ir_kernel_body(k), IR_OP_ASYNC_COMMIT) &&
              !has_op(ir_kernel_body(k), IR_OP_ASYNC_WAIT));
    free(t);
    ir_kernel_destroy(k);
}
