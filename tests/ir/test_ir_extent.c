/* Buffer extents: what a kernel declares it reads or writes through each buffer, kept on
 * the parameter, printed after its type, carried through specialization; misuse is a
 * builder error. */
#include "base/error.h"
#include "ir/ir.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static ir_kernel *copy_kernel(uint64_t n_src, uint64_t n_dst) {
    ir_kernel *k = ir_kernel_create("copy");
    cr_assert(k);
    ir_set_workgroup(k, 64, 1, 1);
    ir_buf src = ir_param_buffer(k, "src", IR_F32, IR_READ), dst = ir_param_buffer(k, "dst", IR_F32, IR_WRITE);
    if (n_src) ir_buffer_extent(k, src, n_src);
    if (n_dst) ir_buffer_extent(k, dst, n_dst);
    ir_val i = ir_id(k, IR_ID_GLOBAL, 0);
    ir_store(k, dst, i, ir_load(k, src, i, 1));
    return k;
}

Test(ir_extent, kept_and_printed) {
    ir_kernel *k = copy_kernel(100, 7);
    cr_assert_eq(ir_verify(k, NULL), 0, "%s", ir_kernel_error(k));
    cr_assert_eq(ir_param_at(k, 0)->extent, 100);
    cr_assert_eq(ir_param_at(k, 1)->extent, 7);
    char *t = ir_print(k);
    cr_assert(strstr(t, "@src: buf<f32, r>[100], @dst: buf<f32, w>[7])"), "%s", t);
    free(t);
    ir_kernel_destroy(k);
}

Test(ir_extent, per_group_follows_the_grid) {
    ir_kernel *k = copy_kernel(0, 0);
    ir_buffer_extent(k, 0, 12);
    ir_buffer_extent_per_group(k, 1, 1, 5);
    char *t = ir_print(k);
    cr_assert(strstr(t, "@src: buf<f32, r>[12], @dst: buf<f32, w>[5 per group.y])"), "%s", t);
    free(t);
    uint32_t g[3] = {7, 3, 1};
    cr_assert_eq(ir_param_extent(ir_param_at(k, 0), g), 12);
    cr_assert_eq(ir_param_extent(ir_param_at(k, 1), g), 15);
    g[1] = 0;
    cr_assert_eq(ir_param_extent(ir_param_at(k, 1), g), 0);
    cr_assert_eq(ir_param_extent(NULL, g), 0);
    ir_kernel_destroy(k);
}

Test(ir_extent, unknown_prints_nothing) {
    ir_kernel *k = copy_kernel(0, 0);
    cr_assert_eq(ir_param_at(k, 0)->extent, 0);
    char *t = ir_print(k);
    cr_assert(strstr(t, "@src: buf<f32, r>, @dst: buf<f32, w>)"), "%s", t);
    free(t);
    ir_kernel_destroy(k);
}

Test(ir_extent, misuse_is_a_builder_error) {
    ir_kernel *k = copy_kernel(0, 0);
    ir_buffer_extent(k, 2, 10); /* no third buffer */
    cr_assert(strstr(ir_kernel_error(k), "not a buffer parameter"), "%s", ir_kernel_error(k));
    cr_assert_neq(ir_verify(k, NULL), 0);
    ir_kernel_destroy(k);
    k = copy_kernel(0, 0);
    ir_buffer_extent(k, 0, 0);
    cr_assert(strstr(ir_kernel_error(k), "1..2^48"), "%s", ir_kernel_error(k));
    ir_kernel_destroy(k);
    k = copy_kernel(0, 0);
    ir_buffer_extent_per_group(k, 1, 3, 4);
    cr_assert(strstr(ir_kernel_error(k), "dimension 0..2"), "%s", ir_kernel_error(k));
    ir_kernel_destroy(k);
    k = copy_kernel(0, 0);
    ir_buffer_extent(k, 0, (1ull << 48) + 1);
    cr_assert(strstr(ir_kernel_error(k), "1..2^48"), "%s", ir_kernel_error(k));
    ir_kernel_destroy(k);
    ir_buffer_extent(NULL, 0, 1); /* no kernel: nothing happens */
}

Test(ir_extent, survives_specialization) {
    ir_kernel *k = ir_kernel_create("spec");
    ir_set_workgroup(k, 64, 1, 1);
    ir_buf b = ir_param_buffer(k, "b", IR_U32, IR_READ | IR_WRITE);
    ir_buffer_extent(k, b, 33);
    ir_val s = ir_spec_const(k, "n", IR_U32, 4);
    ir_store(k, b, ir_id(k, IR_ID_GLOBAL, 0), s);
    cr_assert_eq(ir_verify(k, NULL), 0, "%s", ir_kernel_error(k));
    const char *names[] = {"n"};
    double values[] = {9};
    kiln_err err = {0};
    cr_assert_eq(ir_specialize(k, names, values, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(ir_param_at(k, 0)->extent, 33);
    ir_kernel_destroy(k);
}
