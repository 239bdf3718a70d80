/* Helpers of the kernel IR's tests (tests/ir/test_ir_*.c). */
#ifndef KILN_TESTS_IR_IR_TEST_H
#define KILN_TESTS_IR_IR_TEST_H

#include "base/error.h"
#include "ir/ir.h"

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------ */

static inline ir_kernel *kern(void) {
    ir_kernel *k = ir_kernel_create("t");
    cr_assert(k);
    ir_set_workgroup(k, 64, 1, 1);
    return k;
}

static inline void expect_ok(const ir_kernel *k) {
    kiln_err err = {0};
    int rc = ir_verify(k, &err);
    cr_assert_eq(rc, 0, "verify failed: %s (builder: %s)", err.msg, ir_kernel_error(k));
    cr_assert_str_eq(err.msg, "");
}

static inline void expect_fail(const ir_kernel *k, const char *part) {
    kiln_err err = {0};
    int rc = ir_verify(k, &err);
    cr_assert_eq(rc, -1, "verify passed, expected \"%s\"", part);
    cr_assert(strstr(err.msg, part), "error \"%s\" lacks \"%s\"", err.msg, part);
}

static inline void expect_builder_error(const ir_kernel *k, const char *part) {
    const char *e = ir_kernel_error(k);
    cr_assert(strstr(e, part), "builder error \"%s\" lacks \"%s\"", e, part);
    expect_fail(k, part);
}

/* The printed kernel holds this line (formatted), on a line of its own. */
__attribute__((format(printf, 2, 3))) static inline void expect_line(const ir_kernel *k, const char *fmt, ...) {
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

static inline ir_inst *def(const ir_kernel *k, ir_val v) {
    ir_inst *in = (ir_inst *)ir_def(k, v);
    cr_assert(in, "%%%u has no definition", v);
    return in;
}

static inline ir_inst *body_inst(const ir_kernel *k, uint32_t i) {
    const ir_region *b = ir_kernel_body(k);
    cr_assert(i < b->n);
    return b->inst[i];
}

static inline ir_inst *last_inst(const ir_kernel *k) { return body_inst(k, ir_kernel_body(k)->n - 1); }

static inline ir_type T(ir_kernel *k, ir_scalar s) { return ir_t_scalar(k, s); }

/* y[i] = a * x[i] + y[i] for i < n, with a spec-constant workgroup (its text: test_ir_ops.c) */
static inline ir_kernel *build_axpy(void) {
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

#endif
