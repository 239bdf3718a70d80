/* kernels/kn_expr.h: each helper builds the instructions it names, in the order its
 * comment gives (the order the kernels' printed IR, their contract, depends on), and
 * declares the extent it is given. */
#include "base/error.h"
#include "ir/ir.h"
#include "kernels/kn_expr.h"

#include <criterion/criterion.h>
#include <stdlib.h>

Test(kn_expr, helpers_build_what_they_name_in_order) {
    kx k = {ir_kernel_create("t"), NULL};
    ir_buf b = kx_buffer(k, "b", IR_U32, IR_READ | IR_WRITE, 8);
    ir_buf f = kx_buffer_per_group(k, "f", IR_F32, IR_WRITE, 1, 3);
    kx_workgroup(k, 4);
    ir_val r = kx_local(k);
    ir_val at = kx_idx(k, r, 4, kx_u32(k, 1));     /* the operand, then the constant */
    ir_val s = kx_group_times(k, 0, 2);            /* the constant, then the id */
    kx_store(k, b, at, kx_min(k, s, kx_load_c(k, b, 0)));
    ir_val end = kx_u32(k, 3), step = kx_u32(k, 4), i;
    ir_for *l = kx_for(k, r, end, step, &i);
    ir_if *c = kx_if(k, kx_lt_c(k, i, 2));
    kx_store(k, f, i, kx_fma_f(k, kx_as(k, i, IR_F32), 2.0f, 0.5f)); /* the addend first */
    kx_end_if(k, c);
    kx_end_for(k, l);
    kiln_err err = {0};
    cr_assert_eq(ir_verify(k.ir, &err), 0, "%s", err.msg);
    char *text = ir_print(k.ir);
    const char *want = "kernel @t(@b: buf<u32, rw>[8], @f: buf<f32, w>[3 per group.y]) workgroup(4, 1, 1) {\n"
                       "  %1 = id.local.x : u32\n"
                       "  %2 = const 1 : u32\n"
                       "  %3 = const 4 : u32\n"
                       "  %4 = mul %1, %3 : u32\n"
                       "  %5 = add %4, %2 : u32\n"
                       "  %6 = const 2 : u32\n"
                       "  %7 = id.group.x : u32\n"
                       "  %8 = mul %7, %6 : u32\n"
                       "  %9 = const 0 : u32\n"
                       "  %10 = load @b[%9] : u32\n"
                       "  %11 = min %8, %10 : u32\n"
                       "  store @b[%5], %11\n"
                       "  %12 = const 3 : u32\n"
                       "  %13 = const 4 : u32\n"
                       "  for %14 = %1 to %12 step %13 {\n"
                       "    %15 = const 2 : u32\n"
                       "    %16 = cmp.lt %14, %15 : bool\n"
                       "    if %16 {\n"
                       "      %17 = convert %14 : f32\n"
                       "      %18 = const 0.5 : f32\n"
                       "      %19 = const 2 : f32\n"
                       "      %20 = fma %17, %19, %18 : f32\n"
                       "      store @f[%14], %20\n"
                       "      yield\n"
                       "    }\n"
                       "    yield\n"
                       "  }\n"
                       "}\n";
    cr_assert_str_eq(text, want);
    free(text);
    ir_kernel_destroy(k.ir);
}

/* The vector helpers: kx_t and kx_splat give the scalar itself for one lane. */
Test(kn_expr, one_lane_is_the_scalar) {
    kx k = {ir_kernel_create("t"), NULL};
    ir_val one = kx_f32(k, 1.0f);
    cr_assert_eq(kx_splat(k, one, 1), one);
    cr_assert_eq(kx_t(k, IR_F32, 1), ir_type_of(k.ir, one));
    ir_val v = kx_splat(k, one, 4);
    const ir_type_desc *d = ir_type_get(k.ir, ir_type_of(k.ir, v));
    cr_assert(d && d->kind == IR_T_VECTOR && d->lanes == 4 && d->elem == IR_F32);
    cr_assert_eq(ir_type_of(k.ir, v), kx_t(k, IR_F32, 4));
    ir_kernel_destroy(k.ir);
}
