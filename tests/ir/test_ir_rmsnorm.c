/* The kernel IR on a realistic kernel (RMSNorm), and edited kernels that never crash the
 * verifier or printer. */
#include "base/error.h"
#include "tests/ir/ir_test.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    kiln_err err = {0};
    cr_assert_eq(ir_specialize(k, names, vals, 2, &err), 0, "%s", err.msg);
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
        kiln_err err = {0};
        if (ir_verify(k, &err) == 0) {
            still_ok++;
            ir_specialize(k, NULL, NULL, 0, &err);
        } else {
            cr_assert_neq(err.msg[0], 0);
        }
        free(ir_print(k));
        ir_dce(k);
        free(ir_print(k));
        ir_kernel_destroy(k);
    }
    cr_assert(still_ok < 3000);
}
