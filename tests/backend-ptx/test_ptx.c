/* The PTX emitter (backend-ptx/ptx_emit.h): small kernels per IR op family, checked for
 * the PTX instructions they must lower to; every kernel builder at qwen3-0.6b and odd
 * shapes, bf16 and f16, for sm_80 and sm_90, assembled with ptxas where it exists
 * (skipped by name where it does not); refusals. No GPU is needed. */
#include "backend-ptx/cuda_probe.h"
#include "backend-ptx/ptx_emit.h"
#include "base/error.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "runtime/caps.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_ptx.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------------- */

/* Emits k (destroyed) for caps c; returns the PTX (caller frees), assembled where ptxas exists. */
static char *emit(ir_kernel *k, const rt_caps *c) {
    cr_assert(k, "no kernel");
    kiln_err err = {0};
    cr_assert(!ir_verify(k, &err), "%s", err.msg);
    char *ptx = NULL, *ll = NULL;
    int rc = ptx_emit(k, c, &ptx, &ll, &err);
    cr_assert_eq(rc, 0, "ptx_emit %s: %s", ir_kernel_name(k), err.msg);
    cr_assert(ptx && ll);
    cr_assert(strstr(ll, "nvvm.annotations"), "%s", ll);
    tu_ptxas_assemble(ptx, ptx_target_arch(c), ir_kernel_name(k));
    free(ll);
    ir_kernel_destroy(k);
    return ptx;
}

static int count(const char *s, const char *sub) {
    int n = 0;
    for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub)) n++;
    return n;
}

#define HAS(ptx, s) cr_assert(strstr(ptx, s), "PTX lacks '%s':\n%s", s, ptx)
#define LACKS(ptx, s) cr_assert(!strstr(ptx, s), "PTX has '%s':\n%s", s, ptx)

#define TS(s) ir_t_scalar(k, IR_##s)
#define TV(s, n) ir_t_vector(k, IR_##s, n)
#define U(v) ir_const_u32(k, v)
#define F(v) ir_const_f32(k, v)

static ir_val gid(ir_kernel *k) { return ir_id(k, IR_ID_GLOBAL, 0); }

/* ---- op families ------------------------------------------------------------------------------ */

Test(ptx, entry_params_and_uncontracted_arith) {
    ir_kernel *k = ir_kernel_create("axpy");
    ir_buf x = ir_param_buffer(k, "x", IR_F32, IR_READ);
    ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_READ | IR_WRITE);
    ir_val n = ir_param_scalar(k, "n", IR_U32);
    ir_val a = ir_param_scalar(k, "a", IR_F32);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i = gid(k);
    ir_if *f = ir_if_begin(k, ir_compare(k, IR_LT, i, n), 0);
    ir_val v = ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_MUL, a, ir_load(k, x, i, 1)), ir_load(k, y, i, 1));
    ir_store(k, y, i, v);
    ir_if_end(k, f, NULL);
    rt_caps c = tu_cuda_caps(90);
    char *p = emit(k, &c);
    HAS(p, ".target sm_90");
    HAS(p, ".version 8.0");
    HAS(p, ".entry axpy(");
    HAS(p, ".reqntid 64, 1, 1");
    cr_assert_eq(count(p, ".param .u64"), 2, "%s", p);
    HAS(p, ".param .u32 axpy_param_2");
    HAS(p, ".param .f32 axpy_param_3");
    HAS(p, "mul.rn.f32");
    HAS(p, "add.rn.f32");
    LACKS(p, "fma");
    HAS(p, "ld.global.f32");
    HAS(p, "st.global.f32");
    HAS(p, "%ctaid.x");
    HAS(p, "%tid.x");
    free(p);
}

/* (a & m) | c with both constants is one lop3 (ptxas keeps an and and an or as two LOP3s,
 * one immediate each); a variable mask or another shape stays plain and / or. */
Test(ptx, constant_and_or_is_one_lop3) {
    ir_kernel *k = ir_kernel_create("andor");
    ir_buf x = ir_param_buffer(k, "x", IR_U32, IR_READ | IR_WRITE);
    ir_val m = ir_param_scalar(k, "m", IR_U32);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i = gid(k), v = ir_load(k, x, i, 1);
    ir_val code = ir_bin(k, IR_OP_AND, v, ir_const_u32(k, 0x000F000Fu));
    ir_val w = ir_bin(k, IR_OP_OR, code, ir_const_u32(k, 0x43004300u));
    ir_val plain = ir_bin(k, IR_OP_OR, ir_bin(k, IR_OP_AND, v, m), ir_const_u32(k, 0x43004300u));
    ir_store(k, x, i, ir_bin(k, IR_OP_XOR, w, plain));
    rt_caps c = tu_cuda_caps(80);
    char *p = emit(k, &c);
    cr_assert_eq(count(p, "lop3.b32"), 1, "%s", p);
    HAS(p, "lop3.b32 %r");
    HAS(p, ", 983055, 1124090624, 0xEA;");
    HAS(p, "and.b32");
    HAS(p, "or.b32");
    free(p);
}

Test(ptx, fma_div_and_math) {
    ir_kernel *k = ir_kernel_create("math");
    ir_buf x = ir_param_buffer(k, "x", IR_F32, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_val i = gid(k), v = ir_load(k, x, i, 1);
    static const ir_op ops[] = {IR_OP_EXP,   IR_OP_LOG,   IR_OP_SIN,       IR_OP_COS, IR_OP_TANH, IR_OP_SQRT,
                                IR_OP_RSQRT, IR_OP_FLOOR, IR_OP_ROUNDEVEN, IR_OP_ABS, IR_OP_NEG};
    ir_val acc = ir_fma(k, v, v, F(1.0f));
    for (size_t j = 0; j < sizeof ops / sizeof ops[0]; j++) acc = ir_bin(k, IR_OP_ADD, acc, ir_un(k, ops[j], v));
    acc = ir_bin(k, IR_OP_DIV, acc, ir_bin(k, IR_OP_MAX, v, F(0.5f)));
    acc = ir_bin(k, IR_OP_MIN, acc, ir_bin(k, IR_OP_REM, v, F(3.0f)));
    ir_store(k, x, i, acc);
    rt_caps c = tu_cuda_caps(80);
    char *p = emit(k, &c);
    HAS(p, ".target sm_80");
    HAS(p, "fma.rn.f32");
    HAS(p, "ex2.approx.f32");
    HAS(p, "lg2.approx.f32");
    HAS(p, "sin.approx.f32");
    HAS(p, "cos.approx.f32");
    HAS(p, "tanh.approx.f32");
    HAS(p, "sqrt.rn.f32");
    HAS(p, "div.rn.f32");
    HAS(p, "cvt.rmi.f32.f32");
    HAS(p, "cvt.rni.f32.f32");
    HAS(p, "abs.f32");
    HAS(p, "max.f32");
    HAS(p, "min.f32");
    free(p);
}

Test(ptx, vector_math_per_lane) {
    ir_kernel *k = ir_kernel_create("vmath");
    ir_buf x = ir_param_buffer(k, "x", IR_F32, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_val i = ir_bin(k, IR_OP_MUL, gid(k), U(4));
    ir_val v = ir_load(k, x, i, 4);
    v = ir_fma(k, ir_un(k, IR_OP_EXP, v), v, ir_un(k, IR_OP_FLOOR, v));
    ir_val l[4] = {ir_extract(k, v, 3), ir_extract(k, v, 2), ir_extract(k, v, 1), ir_extract(k, v, 0)};
    ir_store(k, x, i, ir_vec(k, l, 4));
    rt_caps c = tu_cuda_caps(90);
    char *p = emit(k, &c);
    HAS(p, "ld.global.v4.f32");
    HAS(p, "st.global.v4.f32");
    cr_assert_eq(count(p, "ex2.approx.f32"), 4, "%s", p);
    free(p);
}

/* y = x_bf16 * x_f16 rounded to bf16 and to f16 */
static ir_kernel *half_kernel(void) {
    ir_kernel *k = ir_kernel_create("half");
    ir_buf xb = ir_param_buffer(k, "xb", IR_BF16, IR_READ);
    ir_buf xh = ir_param_buffer(k, "xh", IR_F16, IR_READ);
    ir_buf yb = ir_param_buffer(k, "yb", IR_BF16, IR_WRITE);
    ir_buf yh = ir_param_buffer(k, "yh", IR_F16, IR_WRITE);
    ir_set_workgroup(k, 128, 1, 1);
    ir_val i = gid(k);
    ir_type f32 = TS(F32);
    ir_val s = ir_bin(k, IR_OP_MUL, ir_convert(k, ir_load(k, xb, i, 1), f32), ir_convert(k, ir_load(k, xh, i, 1), f32));
    ir_store(k, yb, i, ir_convert(k, s, TS(BF16)));
    ir_store(k, yh, i, ir_convert(k, s, TS(F16)));
    return k;
}

Test(ptx, sixteen_bit_storage_and_rounding) {
    rt_caps c = tu_cuda_caps(90);
    char *p = emit(half_kernel(), &c);
    HAS(p, "ld.global.u16");
    HAS(p, "cvt.f32.f16");
    HAS(p, "cvt.rn.f16.f32");
    HAS(p, "cvt.rn.bf16.f32"); /* sm_80+: the conversion, not the IR's integer rounding */
    cr_assert(!strstr(p, "32767"), "sm_90 rounds to bf16 in integer ops");
    HAS(p, "st.global.b16");
    free(p);
    c = tu_cuda_caps(75); /* no bf16 conversion in PTX before sm_80: the IR rounds */
    p = emit(half_kernel(), &c);
    HAS(p, "32767"); /* bf16's round-to-nearest-even bias, 0x7fff */
    cr_assert(!strstr(p, "cvt.rn.bf16"), "sm_75 has no cvt.rn.bf16.f32");
    free(p);
}

Test(ptx, vector_16bit_loads_and_bitcasts) {
    ir_kernel *k = ir_kernel_create("vhalf");
    ir_buf x = ir_param_buffer(k, "x", IR_BF16, IR_READ);
    ir_buf y = ir_param_buffer(k, "y", IR_U32, IR_WRITE);
    ir_buf z = ir_param_buffer(k, "z", IR_F16, IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_val i = gid(k);
    ir_val v = ir_load(k, x, ir_bin(k, IR_OP_MUL, i, U(4)), 4);
    ir_val w = ir_bitcast(k, v, TV(U32, 2));
    ir_store(k, y, ir_bin(k, IR_OP_MUL, i, U(2)), w);
    ir_val h = ir_bitcast(k, ir_extract(k, w, 0), TV(F16, 2));
    ir_store(k, z, ir_bin(k, IR_OP_MUL, i, U(2)), h);
    rt_caps c = tu_cuda_caps(90);
    char *p = emit(k, &c);
    HAS(p, "ld.global.v2.u32"); /* 4 x bf16 read as the 2 x u32 it is bitcast to */
    HAS(p, "st.global.v2.u32");
    free(p);
}

Test(ptx, masked_loads_and_stores) {
    ir_kernel *k = ir_kernel_create("masked");
    ir_buf x = ir_param_buffer(k, "x", IR_F16, IR_READ);
    ir_buf y = ir_param_buffer(k, "y", IR_F16, IR_WRITE);
    ir_buf s = ir_param_buffer(k, "s", IR_F32, IR_READ | IR_WRITE);
    ir_val n = ir_param_scalar(k, "n", IR_U32);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i = ir_bin(k, IR_OP_MUL, gid(k), U(4));
    ir_val fb = ir_convert(k, F(0.0f), TS(F16));
    ir_val v = ir_load_masked(k, x, i, 4, n, fb);
    ir_store_masked(k, y, i, v, n);
    ir_val one = ir_load_masked(k, s, gid(k), 1, n, F(-1.0f));
    ir_store_masked(k, s, gid(k), ir_bin(k, IR_OP_ADD, one, F(1.0f)), n);
    rt_caps c = tu_cuda_caps(90);
    char *p = emit(k, &c);
    HAS(p, "ld.global.v4.b16");
    HAS(p, "st.global.v4.b16");
    HAS(p, "ld.global.b16 "); /* the lane-by-lane tail */
    HAS(p, "st.global.b16 ");
    HAS(p, "setp.");
    HAS(p, "@%p");
    free(p);
}

Test(ptx, loops_and_ifs_with_values) {
    ir_kernel *k = ir_kernel_create("loops");
    ir_buf x = ir_param_buffer(k, "x", IR_F32, IR_READ);
    ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_val n = ir_param_scalar(k, "n", IR_I32);
    ir_set_workgroup(k, 32, 1, 1);
    ir_val init[2] = {F(0.0f), ir_const_i32(k, 0)};
    ir_for *f = ir_for_begin(k, ir_const_i32(k, 0), n, ir_const_i32(k, 3), 2, init);
    ir_val iv = ir_for_iv(f);
    ir_val e = ir_load(k, x, ir_convert(k, iv, TS(U32)), 1);
    ir_if *c = ir_if_begin(k, ir_compare(k, IR_GT, e, F(0.0f)), 2);
    ir_val t[2] = {ir_bin(k, IR_OP_ADD, ir_for_arg(f, 0), e),
                   ir_bin(k, IR_OP_ADD, ir_for_arg(f, 1), ir_const_i32(k, 1))};
    ir_if_else(k, c, t);
    ir_val el[2] = {ir_for_arg(f, 0), ir_for_arg(f, 1)};
    ir_if_end(k, c, el);
    ir_val y2[2] = {ir_if_result(c, 0), ir_if_result(c, 1)};
    ir_for_end(k, f, y2);
    ir_val r = ir_bin(k, IR_OP_DIV, ir_for_result(f, 0), ir_convert(k, ir_for_result(f, 1), TS(F32)));
    ir_store(k, y, gid(k), r);
    rt_caps c0 = tu_cuda_caps(90);
    char *p = emit(k, &c0);
    HAS(p, "@%p");
    HAS(p, "bra");
    HAS(p, "setp.lt.s32");
    HAS(p, "setp.gt.f32");
    HAS(p, "cvt.rn.f32.s32");
    free(p);
}

Test(ptx, conversions_between_ints_and_floats) {
    ir_kernel *k = ir_kernel_create("conv");
    ir_buf x = ir_param_buffer(k, "x", IR_F32, IR_READ);
    ir_buf y = ir_param_buffer(k, "y", IR_I32, IR_WRITE);
    ir_buf z = ir_param_buffer(k, "z", IR_U32, IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_val i = gid(k), v = ir_load(k, x, i, 1);
    ir_store(k, y, i, ir_convert(k, v, TS(I32)));
    ir_val u = ir_convert(k, v, TS(U32));
    ir_val wide = ir_convert(k, u, TS(U64));
    wide = ir_bin(k, IR_OP_SHR, ir_bin(k, IR_OP_MUL, wide, wide), ir_convert(k, U(7), TS(U64)));
    ir_val back = ir_convert(k, wide, TS(U32));
    ir_val s = ir_convert(k, ir_convert(k, ir_const_i32(k, -3), TS(I64)), TS(I32));
    ir_store(k, z, i, ir_bin(k, IR_OP_XOR, back, ir_convert(k, ir_bin(k, IR_OP_SHR, s, ir_const_i32(k, 1)), TS(U32))));
    rt_caps c = tu_cuda_caps(90);
    char *p = emit(k, &c);
    HAS(p, "cvt.rzi.s32.f32");
    HAS(p, "cvt.rzi.u32.f32");
    HAS(p, "mul.wide.u32");
    free(p);
}

Test(ptx, workgroup_memory_and_barrier) {
    ir_kernel *k = ir_kernel_create("shm");
    ir_buf x = ir_param_buffer(k, "x", IR_BF16, IR_READ);
    ir_buf y = ir_param_buffer(k, "y", IR_BF16, IR_WRITE);
    ir_set_workgroup(k, 256, 1, 1);
    ir_shm t = ir_shared_array(k, "tile", IR_BF16, 256);
    ir_shm g = ir_shared_array(k, "sums", IR_F32, 8);
    ir_val l = ir_id(k, IR_ID_LOCAL, 0);
    ir_shm_store(k, t, l, ir_load(k, x, gid(k), 1));
    ir_shm_store(k, g, ir_bin(k, IR_OP_AND, l, U(7)), F(0.0f));
    ir_barrier(k);
    ir_val v = ir_shm_load(k, t, ir_bin(k, IR_OP_XOR, l, U(1)), 1);
    ir_val w = ir_shm_load(k, g, ir_bin(k, IR_OP_AND, ir_bin(k, IR_OP_ADD, l, U(1)), U(7)), 1);
    ir_store(k, y, gid(k), ir_convert(k, ir_bin(k, IR_OP_ADD, ir_convert(k, v, TS(F32)), w), TS(BF16)));
    rt_caps c = tu_cuda_caps(90);
    char *p = emit(k, &c);
    HAS(p, ".shared .align 16 .b8 tile[512]");
    HAS(p, ".shared .align 16 .b8 sums[32]");
    HAS(p, "bar.sync 	0");
    HAS(p, "st.shared.u16");
    HAS(p, "st.shared.u32");
    HAS(p, "ld.shared.f32");
    HAS(p, "ld.shared.u16");
    free(p);
}

Test(ptx, subgroups) {
    ir_kernel *k = ir_kernel_create("sg");
    ir_buf x = ir_param_buffer(k, "x", IR_F32, IR_READ);
    ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_buf z = ir_param_buffer(k, "z", IR_U32, IR_WRITE);
    ir_set_workgroup(k, 128, 1, 1);
    ir_val v = ir_load(k, x, gid(k), 1);
    ir_val s = ir_sg_reduce(k, IR_REDUCE_ADD, v);
    ir_val lane = ir_id(k, IR_ID_SG_LANE, 0);
    ir_val sh = ir_sg_shuffle(k, v, ir_bin(k, IR_OP_SUB, U(31), lane));
    ir_val bc = ir_sg_broadcast(k, v, U(0));
    ir_val xr = ir_sg_shuffle_xor(k, ir_vec(k, (ir_val[]){v, s}, 2), U(1));
    ir_val r = ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_ADD, s, sh), ir_bin(k, IR_OP_ADD, bc, ir_extract(k, xr, 1)));
    ir_store(k, y, gid(k), r);
    ir_val mx = ir_sg_reduce(k, IR_REDUCE_MAX, lane);
    ir_val mn = ir_sg_reduce(k, IR_REDUCE_MIN, ir_convert(k, lane, TS(I32)));
    ir_val sgid = ir_id(k, IR_ID_SG_ID, 0), sgsz = ir_id(k, IR_ID_SG_SIZE, 0);
    ir_store(
        k, z, gid(k),
        ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_ADD, mx, ir_convert(k, mn, TS(U32))), ir_bin(k, IR_OP_MUL, sgid, sgsz)));
    rt_caps c = tu_cuda_caps(90);
    char *p = emit(k, &c);
    cr_assert_geq(count(p, "shfl.sync.bfly.b32"), 5 * 3 + 2, "%s", p);
    HAS(p, "shfl.sync.idx.b32");
    HAS(p, "%laneid");
    HAS(p, "-1;"); /* the full member mask */
    HAS(p, "max.u32");
    HAS(p, "min.s32");
    free(p);
}

Test(ptx, atomics) {
    ir_kernel *k = ir_kernel_create("atom");
    ir_buf a = ir_param_buffer(k, "a", IR_U32, IR_READ | IR_WRITE);
    ir_buf f = ir_param_buffer(k, "f", IR_F32, IR_READ | IR_WRITE);
    ir_buf o = ir_param_buffer(k, "o", IR_I32, IR_WRITE);
    ir_shm s = ir_shared_array(k, "s", IR_I32, 4);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i = gid(k);
    ir_val r1 = ir_atomic(k, IR_ATOMIC_ADD, false, a, U(0), U(1));
    ir_val r2 = ir_atomic(k, IR_ATOMIC_MAX, false, a, U(1), i);
    ir_val r3 = ir_atomic(k, IR_ATOMIC_ADD, false, f, U(0), F(0.5f));
    ir_val r4 = ir_atomic(k, IR_ATOMIC_XCHG, false, f, U(1), F(2.0f));
    ir_val r5 = ir_atomic(k, IR_ATOMIC_MIN, true, s, U(0), ir_const_i32(k, -5));
    ir_val sum = ir_bin(k, IR_OP_ADD, ir_convert(k, ir_bin(k, IR_OP_ADD, r1, r2), TS(I32)),
                        ir_bin(k, IR_OP_ADD, r5, ir_convert(k, ir_bin(k, IR_OP_ADD, r3, r4), TS(I32))));
    ir_store(k, o, i, sum);
    rt_caps c = tu_cuda_caps(90);
    char *p = emit(k, &c);
    HAS(p, "atom.global.add.u32");
    HAS(p, "atom.global.max.u32");
    HAS(p, "atom.global.add.f32");
    HAS(p, "atom.global.exch.b32");
    HAS(p, "atom.shared.min.s32");
    free(p);
}

Test(ptx, spec_constants_take_their_defaults) {
    ir_kernel *k = ir_kernel_create("spec");
    ir_buf y = ir_param_buffer(k, "y", IR_U32, IR_WRITE);
    ir_val wg = ir_spec_const(k, "wg", IR_U32, 96);
    ir_val n = ir_spec_const(k, "n", IR_U32, 12345);
    ir_set_workgroup_spec(k, wg);
    ir_store(k, y, gid(k), ir_bin(k, IR_OP_MUL, n, U(3)));
    rt_caps c = tu_cuda_caps(90);
    char *p = emit(k, &c);
    HAS(p, ".reqntid 96, 1, 1");
    HAS(p, "37035");
    free(p);

    /* and ir_specialize's values when the caller specialized first */
    k = ir_kernel_create("spec2");
    y = ir_param_buffer(k, "y", IR_U32, IR_WRITE);
    wg = ir_spec_const(k, "wg", IR_U32, 96);
    n = ir_spec_const(k, "n", IR_U32, 12345);
    ir_set_workgroup_spec(k, wg);
    ir_store(k, y, gid(k), ir_bin(k, IR_OP_MUL, n, U(3)));
    const char *names[2] = {"wg", "n"};
    const double vals[2] = {256, 1000};
    kiln_err err = {0};
    cr_assert(!ir_specialize(k, names, vals, 2, &err), "%s", err.msg);
    p = emit(k, &c);
    HAS(p, ".reqntid 256, 1, 1");
    HAS(p, "3000");
    free(p);
}

/* Workgroup arrays past 48 KiB are offsets into one extern .shared array the launch sizes;
 * asynchronous copies are cp.async from sm_80 (and plain accesses before); fragments from
 * workgroup memory at strides of 8 come through ldmatrix. */
Test(ptx, dynamic_shared_memory_async_copies_and_ldmatrix) {
    ir_kernel *k = ir_kernel_create("dyn");
    ir_buf x = ir_param_buffer(k, "x", IR_BF16, IR_READ), y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_shm big = ir_shared_array(k, "big", IR_F32, 13000); /* 52,000 bytes */
    ir_shm h = ir_shared_array(k, "h", IR_BF16, 300);      /* 600, at 52,000 */
    ir_val i = gid(k), i8 = ir_bin(k, IR_OP_MUL, i, U(8));
    ir_async_copy(k, h, i8, x, i8, 8, U(100));
    ir_async_copy(k, h, i8, x, i8, 4, U(100));
    ir_async_copy(k, h, i8, x, i8, 2, U(100));
    ir_async_commit(k);
    ir_async_wait(k, 1);
    ir_barrier(k);
    ir_type ta = ir_t_frag(k, IR_FRAG_A, IR_BF16, 16, 8, 16), tb = ir_t_frag(k, IR_FRAG_B, IR_BF16, 16, 8, 16);
    ir_type tc = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 16, 8, 16);
    ir_val a = ir_frag_load(k, ta, true, h, U(0), U(24), true), b = ir_frag_load(k, tb, true, h, U(16), U(24), false);
    ir_val bt = ir_frag_load(k, tb, true, h, U(32), U(16), true); /* row-major B: ldmatrix .trans */
    ir_val c = ir_frag_mma(k, a, bt, ir_frag_mma(k, a, b, ir_frag_fill(k, tc, F(0.0f))));
    ir_frag_store(k, c, true, big, U(0), U(8), true);
    ir_barrier(k);
    ir_store(k, y, i, ir_shm_load(k, big, i, 1));
    cr_assert_eq(ptx_dynamic_shared_bytes(k), 52000u + 608u);
    rt_caps c90 = tu_cuda_caps(90), c75 = tu_cuda_caps(75);
    char *p = emit(k, &c90);
    HAS(p, ".extern .shared .align 16 .b8 kiln_dynamic_shared[]");
    HAS(p, "cp.async.cg.shared.global");
    HAS(p, "cp.async.ca.shared.global");
    HAS(p, "cp.async.commit_group");
    HAS(p, "cp.async.wait_group 1");
    HAS(p, "ldmatrix.sync.aligned.m8n8.x4.shared.b16");
    HAS(p, "ldmatrix.sync.aligned.m8n8.x2.shared.b16");
    HAS(p, "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16");
    free(p); /* emit assembled it and destroyed k */

    /* before sm_80 the copies are plain loads and stores (no fragments there) */
    k = ir_kernel_create("sync");
    x = ir_param_buffer(k, "x", IR_F32, IR_READ), y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_shm s = ir_shared_array(k, "s", IR_F32, 128);
    i8 = ir_bin(k, IR_OP_MUL, gid(k), U(4));
    ir_async_copy(k, s, i8, x, i8, 4, U(50));
    ir_async_commit(k);
    ir_async_wait(k, 0);
    ir_store(k, y, gid(k), ir_shm_load(k, s, gid(k), 1));
    cr_assert_eq(ptx_dynamic_shared_bytes(k), 0u);
    p = emit(k, &c75);
    LACKS(p, "cp.async");
    LACKS(p, ".extern");
    HAS(p, "st.shared");
    free(p);
}

Test(ptx, target_architectures) {
    static const struct {
        unsigned cc;
        const char *arch;
    } t[] = {{0, "sm_80"},  {80, "sm_80"},  {86, "sm_86"},  {89, "sm_89"},
             {90, "sm_90"}, {100, "sm_90"}, {120, "sm_90"}, {75, "sm_75"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        rt_caps c = tu_cuda_caps(t[i].cc);
        cr_assert_str_eq(ptx_target_arch(&c), t[i].arch);
        ir_kernel *k = ir_kernel_create("arch");
        ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
        ir_set_workgroup(k, 32, 1, 1);
        ir_store(k, y, gid(k), ir_un(k, IR_OP_TANH, ir_convert(k, gid(k), TS(F32))));
        char *p = emit(k, &c);
        char want[32];
        snprintf(want, sizeof want, ".target %s", t[i].arch);
        HAS(p, want);
        free(p);
    }
    rt_caps old = tu_cuda_caps(35);
    cr_assert_null(ptx_target_arch(&old));
}

/* caps.grid_dep (sm_90+): every kernel begins with griddepcontrol.wait, before any memory
 * access, and ends with launch_dependents, after its stores; not on sm_80, not under
 * --caps no-grid-dep. */
Test(ptx, grid_dependency_prologue) {
    for (int v = 0; v < 3; v++) {
        rt_caps c = tu_cuda_caps(v == 1 ? 80 : 90);
        kiln_err err = {0};
        if (v == 2) cr_assert_eq(rt_caps_override(&c, "no-grid-dep", &err), 0, "%s", err.msg);
        cr_assert_eq(c.grid_dep, v == 0);
        ir_kernel *k = ir_kernel_create("dep");
        ir_buf x = ir_param_buffer(k, "x", IR_F32, IR_READ), y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
        ir_set_workgroup(k, 32, 1, 1);
        ir_store(k, y, gid(k), ir_load(k, x, gid(k), 1));
        char *p = emit(k, &c);
        const char *w = strstr(p, "griddepcontrol.wait;"), *l = strstr(p, "griddepcontrol.launch_dependents;");
        if (v == 0) {
            cr_assert(w && l && w < l, "%s", p);
            cr_assert(w < strstr(p, "ld.global"), "a load before the wait:\n%s", p);
            cr_assert(strstr(p, "st.global") < l, "a store after the trigger:\n%s", p);
        } else {
            cr_assert(!w && !l, "%s", p);
        }
        free(p);
    }
}

Test(ptx, deterministic) {
    rt_caps c = tu_cuda_caps(90);
    kiln_err err = {0};
    char *p[2];
    for (int r = 0; r < 2; r++) {
        ir_kernel *k = kn_rmsnorm(&c, 1024, IR_BF16, 1e-6f, &err);
        cr_assert(k, "%s", err.msg);
        cr_assert_eq(ptx_emit(k, &c, &p[r], NULL, &err), 0, "%s", err.msg);
        ir_kernel_destroy(k);
    }
    cr_assert_str_eq(p[0], p[1]);
    free(p[0]);
    free(p[1]);
}

/* ---- refusals ------------------------------------------------------------------------------------ */

static void refused(ir_kernel *k, const rt_caps *c, const char *want) {
    kiln_err err = {0};
    char *ptx = (char *)1;
    char *ll = (char *)1;
    cr_assert_eq(ptx_emit(k, c, &ptx, &ll, &err), -1, "emitted what it should refuse (%s)", want);
    cr_assert_null(ptx);
    cr_assert_null(ll);
    cr_assert(strstr(err.msg, want), "error '%s' lacks '%s'", err.msg, want);
    cr_assert_null(strchr(err.msg, '\n'), "one line: %s", err.msg);
    ir_kernel_destroy(k);
}

/* acc (m64 x 128) = A (64 x 32) B (32 x 128) from core-matrix layouts, stored as rows */
static ir_kernel *wgmma_kernel(ir_scalar t, uint32_t n, uint32_t steps) {
    ir_kernel *k = ir_kernel_create("wg");
    ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 128, 1, 1);
    uint32_t kk = 16 * steps;
    ir_shm a = ir_shared_array(k, "a", t, 64 * kk), b = ir_shared_array(k, "b", t, n * kk);
    ir_shm c = ir_shared_array(k, "c", IR_F32, 64 * n);
    ir_type tc = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 64, n, 16);
    /* core matrices of 64 elements; k / 8 of them along k between row groups */
    ir_val lbo = U(64), sbo = U(64 * kk / 8);
    ir_val acc = ir_wg_mma(k, ir_frag_fill(k, tc, F(0.0f)), a, U(0), sbo, lbo, b, U(0), sbo, lbo, steps);
    ir_frag_store(k, acc, true, c, U(0), U(n), true);
    ir_barrier(k);
    ir_store(k, y, gid(k), ir_shm_load(k, c, gid(k), 1));
    return k;
}

/* wg.mma: inline wgmma on sm_90a (the module's target), assembled; refused below sm_90,
 * without caps.wgmma, and by the SPIR-V emitter; the verifier's shape rules. */
Test(ptx, warpgroup_products) {
    rt_caps c90 = tu_cuda_caps(90), c80 = tu_cuda_caps(80);
    cr_assert(c90.wgmma && !c80.wgmma);
    for (int ti = 0; ti < 2; ti++) {
        ir_scalar t = ti ? IR_F16 : IR_BF16;
        ir_kernel *k = wgmma_kernel(t, 128, 2);
        kiln_err err = {0};
        cr_assert(!ir_verify(k, &err), "%s", err.msg);
        char *ptx = NULL;
        cr_assert_eq(ptx_emit(k, &c90, &ptx, NULL, &err), 0, "%s", err.msg);
        HAS(ptx, ".target sm_90a");
        HAS(ptx, "wgmma.fence.sync.aligned");
        HAS(ptx, ti ? "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"
                    : "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16");
        HAS(ptx, "wgmma.commit_group.sync.aligned");
        HAS(ptx, "wgmma.wait_group.sync.aligned 0");
        cr_assert_eq(count(ptx, "wgmma.mma_async"), 2, "two k steps");
        tu_ptxas_assemble(ptx, "sm_90a", "wg.mma");
        free(ptx);
        ir_kernel_destroy(k);
    }
    ir_kernel *k = wgmma_kernel(IR_BF16, 256, 1);
    char *ptx = NULL;
    kiln_err err = {0};
    cr_assert_eq(ptx_emit(k, &c90, &ptx, NULL, &err), 0, "%s", err.msg);
    tu_ptxas_assemble(ptx, "sm_90a", "wg.mma n256");
    free(ptx);
    ir_kernel_destroy(k);
    refused(wgmma_kernel(IR_BF16, 128, 2), &c80, "wgmma");
    rt_caps off = c90;
    cr_assert_eq(rt_caps_override(&off, "no-wgmma", &err), 0, "%s", err.msg);
    refused(wgmma_kernel(IR_BF16, 128, 2), &off, "caps.wgmma");
    /* the verifier: n a multiple of 8, 1..8 steps, one 16-bit type, m64 */
    k = wgmma_kernel(IR_BF16, 128, 2);
    ir_inst *wg = NULL;
    for (uint32_t i = 0; i < ir_kernel_body(k)->n; i++)
        if (ir_kernel_body(k)->inst[i]->op == IR_OP_WG_MMA) wg = ir_kernel_body(k)->inst[i];
    cr_assert_not_null(wg);
    wg->imm[2] = 9;
    cr_assert(ir_verify(k, &err) && strstr(err.msg, "1..8 k steps"), "%s", err.msg);
    wg->imm[2] = 2;
    wg->imm[1] = 2; /* the f32 array */
    cr_assert(ir_verify(k, &err) && strstr(err.msg, "f16 or bf16 arrays of one type"), "%s", err.msg);
    ir_kernel_destroy(k);
    k = ir_kernel_create("wg16");
    ir_set_workgroup(k, 128, 1, 1);
    ir_shm a = ir_shared_array(k, "a", IR_BF16, 1024);
    ir_type t16 = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 16, 8, 16);
    ir_wg_mma(k, ir_frag_fill(k, t16, F(0.0f)), a, U(0), U(128), U(64), a, U(0), U(128), U(64), 1);
    cr_assert(ir_verify(k, &err) && strstr(err.msg, "m64 x n x k16"), "%s", err.msg);
    ir_kernel_destroy(k);
}

Test(ptx, refuses_unverified_kernels_and_null) {
    rt_caps c = tu_cuda_caps(90);
    ir_kernel *k = ir_kernel_create("open");
    ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_for_begin(k, U(0), U(4), U(1), 0, NULL); /* never closed */
    ir_store(k, y, gid(k), F(1.0f));
    refused(k, &c, "does not verify");

    k = ir_kernel_create("bad");
    ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_bin(k, IR_OP_ADD, U(1), F(1.0f)); /* mixed types: a builder error */
    refused(k, &c, "does not verify");

    kiln_err err = {0};
    char *ptx;
    cr_assert_eq(ptx_emit(NULL, &c, &ptx, NULL, &err), -1);
    cr_assert_null(ptx);
    k = ir_kernel_create("ok");
    cr_assert_eq(ptx_emit(k, NULL, &ptx, NULL, &err), -1);
    ir_kernel_destroy(k);
}

/* Fragments lower to mma.sync m16n8k16 on sm_80+; other shapes and older targets are
 * refused by name. The matmul builder picks that shape from the caps and its kernel
 * carries the instruction (assembled by ptxas where it exists). */
Test(ptx, fragments_as_mma_sync) {
    rt_caps c = tu_cuda_caps(90);
    c.mma[c.n_mma++] = (rt_mma_shape){16, 16, 16, IR_F16, IR_F32};
    ir_kernel *k = ir_kernel_create("frag");
    ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_val z = ir_frag_fill(k, ir_t_frag(k, IR_FRAG_ACC, IR_F32, 16, 16, 16), F(0.0f));
    ir_frag_store(k, z, false, y, U(0), U(16), true);
    kiln_err err = {0};
    cr_assert(!ir_verify(k, &err), "%s", err.msg);
    refused(k, &c, "PTX lowers m16n8k16");

    /* VK_NV_cooperative_matrix2's workgroup fragments and tensor loads are SPIR-V's only */
    k = ir_kernel_create("frag_wg");
    y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 256, 1, 1);
    z = ir_frag_fill(k, ir_t_frag_wg(k, IR_FRAG_ACC, IR_F32, 64, 64, 16), F(0.0f));
    ir_frag_store(k, z, false, y, U(0), U(64), true);
    refused(k, &c, "no PTX lowering");
    k = ir_kernel_create("tensor_load");
    ir_buf xb = ir_param_buffer(k, "x", IR_F16, IR_READ);
    y = ir_param_buffer(k, "y", IR_F16, IR_WRITE);
    ir_set_workgroup(k, 256, 1, 1);
    ir_val t = ir_frag_load_tensor(k, ir_t_frag_wg(k, IR_FRAG_A, IR_F16, 64, 64, 16), xb, U(0), U(0), U(7), U(9), false);
    ir_frag_store(k, t, false, y, U(0), U(16), true);
    refused(k, &c, "no PTX lowering");

    for (int old = 0; old < 2; old++) {
        rt_caps cc = tu_cuda_caps(old ? 75 : 80);
        if (old) cc.mma[cc.n_mma++] = (rt_mma_shape){16, 8, 16, IR_BF16, IR_F32};
        k = ir_kernel_create("mma");
        ir_buf ab = ir_param_buffer(k, "ab", IR_BF16, IR_READ), out = ir_param_buffer(k, "c", IR_F32, IR_WRITE);
        ir_set_workgroup(k, 32, 1, 1);
        ir_val a = ir_frag_load(k, ir_t_frag(k, IR_FRAG_A, IR_BF16, 16, 8, 16), false, ab, U(0), U(16), true);
        ir_val bb = ir_frag_load(k, ir_t_frag(k, IR_FRAG_B, IR_BF16, 16, 8, 16), false, ab, U(256), U(16), false);
        ir_val acc = ir_frag_fill(k, ir_t_frag(k, IR_FRAG_ACC, IR_F32, 16, 8, 16), F(1.0f));
        ir_frag_store(k, ir_frag_mma(k, a, bb, acc), false, out, U(0), U(8), true);
        if (old) {
            refused(k, &cc, "sm_80");
        } else {
            char *p = emit(k, &cc);
            cr_assert(strstr(p, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), "%s", p);
            free(p);
        }
    }

    uint32_t g[2];
    for (int t = 0; t < 2; t++) {
        rt_caps m = tu_cuda_caps(90);
        cr_assert_eq(rt_caps_override(&m, "no-wgmma", &err), 0, "%s", err.msg); /* else warpgroup products */
        k = kn_matmul(&m, 1024, 1024, 512, t ? IR_F16 : IR_BF16, KN_EPI_NONE, g, &err);
        cr_assert_not_null(k, "%s", err.msg);
        char *p = emit(k, &m);
        cr_assert(strstr(p, t ? "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
                              : "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
                  "matmul without mma.sync");
        free(p);
    }
}

Test(ptx, refuses_what_caps_lack) {
    rt_caps c = tu_cuda_caps(90);
    ir_kernel *k = ir_kernel_create("h16");
    ir_buf y = ir_param_buffer(k, "y", IR_F16, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_val v = ir_load(k, y, gid(k), 1);
    ir_store(k, y, gid(k), ir_bin(k, IR_OP_ADD, v, v));
    refused(k, &c, "f16 arithmetic needs caps.f16_arith");

    k = ir_kernel_create("odd");
    y = ir_param_buffer(k, "y", IR_F32, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 48, 1, 1);
    ir_store(k, y, gid(k), ir_sg_reduce(k, IR_REDUCE_ADD, ir_load(k, y, gid(k), 1)));
    refused(k, &c, "multiple of 32");

    rt_caps s16 = c;
    s16.subgroup_size = 16;
    k = ir_kernel_create("sg16");
    y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_store(k, y, gid(k), F(1.0f));
    refused(k, &s16, "warps of 32");

    rt_caps noatom = c;
    noatom.atomic_f32_add = false;
    k = ir_kernel_create("fatom");
    y = ir_param_buffer(k, "y", IR_F32, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_atomic(k, IR_ATOMIC_ADD, false, y, U(0), F(1.0f));
    refused(k, &noatom, "caps.atomic_f32_add");

    k = ir_kernel_create("bigshm");
    y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_shm s = ir_shared_array(k, "big", IR_F32, 60000); /* 240,000 bytes: past the opt-in 227 KiB */
    ir_shm_store(k, s, gid(k), F(1.0f));
    refused(k, &c, "caps.shared_bytes");

    rt_caps old = tu_cuda_caps(35);
    k = ir_kernel_create("old");
    y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_store(k, y, gid(k), F(1.0f));
    refused(k, &old, "sm_50");
}

/* ---- every kernel builder, assembled ----------------------------------------------------------- */

static int n_emitted;

static void builder(ir_kernel *k, const rt_caps *c, const char *err, const char *what) {
    cr_assert(k, "%s: builder refused: %s", what, err);
    char *p = emit(k, c);
    cr_assert(strstr(p, ".entry"), "%s", what);
    free(p);
    n_emitted++;
}

/* qwen3-0.6b: d 1024, 16 q heads / 8 kv heads of 128, ffn 3072, vocab 151936, n_ctx 4096,
 * prefill blocks of 512; and odd shapes beside them. */
static void all_builders(unsigned cc, ir_scalar t) {
    rt_caps c = tu_cuda_caps(cc);
    kiln_err err = {0};
    uint32_t gx, g[2];
    static const unsigned epis[] = {KN_EPI_NONE, KN_EPI_BIAS, KN_EPI_RESIDUAL, KN_EPI_BIAS | KN_EPI_RESIDUAL,
                                    KN_EPI_SWIGLU};
    builder(kn_rmsnorm(&c, 1024, t, 1e-6f, &err), &c, err.msg, "rmsnorm");
    builder(kn_rmsnorm(&c, 997, t, 1e-6f, &err), &c, err.msg, "rmsnorm odd");
    builder(kn_rmsnorm_heads(&c, 128, t, 1e-6f, &err), &c, err.msg, "rmsnorm_heads");
    builder(kn_rmsnorm_heads(&c, 80, t, 1e-6f, &err), &c, err.msg, "rmsnorm_heads 80");
    for (size_t e = 0; e < sizeof epis / sizeof epis[0]; e++) {
        uint32_t rows = epis[e] == KN_EPI_SWIGLU ? 3072 : 2048;
        builder(kn_matvec(&c, rows, 1024, t, t, epis[e], &gx, &err), &c, err.msg, "matvec");
        builder(kn_matvec_norm(&c, rows, 1024, t, t, epis[e], 1e-6f, &gx, &err), &c, err.msg, "matvec_norm");
    }
    builder(kn_matvec(&c, 1024, 3072, t, t, KN_EPI_RESIDUAL, &gx, &err), &c, err.msg, "matvec down");
    builder(kn_matvec(&c, 151936, 1024, t, IR_F32, KN_EPI_NONE, &gx, &err), &c, err.msg, "matvec logits");
    builder(kn_matvec_norm(&c, 151936, 1024, t, IR_F32, KN_EPI_NONE, 1e-6f, &gx, &err), &c, err.msg,
            "matvec_norm logits");
    builder(kn_matvec(&c, 1001, 999, t, t, KN_EPI_BIAS, &gx, &err), &c, err.msg, "matvec odd");
    builder(kn_matvec_norm(&c, 1001, 999, t, t, KN_EPI_SWIGLU, 1e-6f, &gx, &err), &c, err.msg, "matvec_norm odd");
    static const unsigned mepis[] = {KN_EPI_NONE, KN_EPI_BIAS, KN_EPI_RESIDUAL, KN_EPI_BIAS | KN_EPI_RESIDUAL};
    for (size_t e = 0; e < sizeof mepis / sizeof mepis[0]; e++)
        builder(kn_matmul(&c, 2048, 1024, 512, t, mepis[e], g, &err), &c, err.msg, "matmul");
    builder(kn_matmul(&c, 1000, 999, 64, t, KN_EPI_NONE, g, &err), &c, err.msg, "matmul odd");
    builder(kn_add(&c, 1024, t, &gx, &err), &c, err.msg, "add");
    builder(kn_add(&c, 1023, t, &gx, &err), &c, err.msg, "add odd");
    builder(kn_swiglu(&c, 3072, t, &gx, &err), &c, err.msg, "swiglu");
    builder(kn_swiglu(&c, 3071, t, &gx, &err), &c, err.msg, "swiglu odd");
    builder(kn_ssm_conv(&c, 6144, 4, 64, t, g, &err), &c, err.msg, "ssm_conv");
    builder(kn_ssm_conv(&c, 37, 3, 1, t, g, &err), &c, err.msg, "ssm_conv odd");
    builder(kn_deltanet(&c, &(kn_deltanet_shape){16, 16, 128, 64}, t, 1e-6f, g, &err), &c, err.msg, "deltanet");
    builder(kn_deltanet(&c, &(kn_deltanet_shape){2, 3, 40, 7}, t, 1e-6f, g, &err), &c, err.msg, "deltanet odd");
    builder(kn_rope(&c, 16, 128, 128, true, 1e6f, t, &gx, &err), &c, err.msg, "rope neox");
    builder(kn_rope(&c, 8, 64, 32, false, 1e4f, t, &gx, &err), &c, err.msg, "rope partial");
    builder(kn_argmax(&c, 151936, &err), &c, err.msg, "argmax");
    builder(kn_argmax(&c, 1001, &err), &c, err.msg, "argmax odd");
    builder(kn_argmax_rows(&c, 151936, 64, &err), &c, err.msg, "argmax rows");
    builder(kn_argmax_rows(&c, 1001, 3, &err), &c, err.msg, "argmax rows odd");
    builder(kn_argmax_masked(&c, 151936, 1, &err), &c, err.msg, "argmax masked");
    builder(kn_argmax_masked(&c, 1001, 5, &err), &c, err.msg, "argmax masked odd");
    builder(kn_embed(&c, 151936, 1024, t, &gx, &err), &c, err.msg, "embed");
    builder(kn_embed(&c, 1001, 999, t, &gx, &err), &c, err.msg, "embed odd");
    builder(kn_take_last(&c, 1024, 512, t, &gx, &err), &c, err.msg, "take_last");
    builder(kn_take_last(&c, 999, 64, t, &gx, &err), &c, err.msg, "take_last odd");
    builder(kn_stage_inputs(&c, 512, &gx, &err), &c, err.msg, "stage_inputs");
    builder(kn_kv_store(&c, 1024, 4096, t, &gx, &err), &c, err.msg, "kv_store");
    builder(kn_kv_store(&c, 200, 1000, t, &gx, &err), &c, err.msg, "kv_store odd");
    uint32_t g2[2];
    builder(kn_attn_decode(&c, 16, 8, 128, 4096, 16, t, g2, &err), &c, err.msg, "attn_decode");
    builder(kn_attn_decode(&c, 6, 2, 64, 1000, 3, t, g2, &err), &c, err.msg, "attn_decode odd");
    builder(kn_attn_merge(&c, 16, 128, 4096, 16, t, &gx, &err), &c, err.msg, "attn_merge");
    builder(kn_attn_merge(&c, 6, 40, 1000, 3, t, &gx, &err), &c, err.msg, "attn_merge odd");
    builder(kn_attn_prefill(&c, 16, 8, 128, 4096, 4096, 512, t, g, &err), &c, err.msg, "attn_prefill");
    builder(kn_attn_prefill(&c, 6, 2, 64, 640, 1000, 64, t, g, &err), &c, err.msg, "attn_prefill odd");
    kn_rope_opts r = {128, true, 1e6f, 1.0f, false};
    builder(kn_qk_prep(&c, 16, 8, 128, &r, true, 1e-6f, 4096, t, &err), &c, err.msg, "qk_prep");
    kn_rope_opts r2 = {32, false, 1e4f, 0.25f, true};
    builder(kn_qk_prep(&c, 6, 2, 64, &r2, false, 1e-6f, 1000, t, &err), &c, err.msg, "qk_prep odd");
    builder(kn_qk_prep_batch(&c, 16, 8, 128, &r, true, 1e-6f, 4096, 8, t, &err), &c, err.msg, "qk_prep batch");
    builder(kn_attn_decode_batch(&c, 16, 8, 128, 4096, 16, 8, 64, 4096, t, g2, &err), &c, err.msg, "attn_decode batch");
    builder(kn_attn_merge_batch(&c, 16, 128, 4096, 16, 8, 64, t, &gx, &err), &c, err.msg, "attn_merge batch");
    if (!tu_ptxas_path())
        cr_skip_test("no ptxas: %d kernels emitted for sm_%u but not assembled (looked on PATH and at "
                     "/usr/local/cuda/bin/ptxas)",
                     n_emitted, cc);
}

/* The block-quantized kernels of every type (qwen3-0.6b's shapes: gate/up with SwiGLU
 * and the norm, the down product, the logits head, a block's product, the embedding). */
static void quant_builders(unsigned cc, ir_scalar t) {
    rt_caps c = tu_cuda_caps(cc);
    kiln_err err = {0};
    uint32_t gx, g[2];
    for (int q = 0; q < KN_Q_COUNT; q++) {
        const char *name = kn_qformat_of((kn_qtype)q)->name;
        kn_qtype other = (kn_qtype)((q + 3) % KN_Q_COUNT);
        kn_qpart ff[2] = {{(kn_qtype)q, 3072}, {other, 3072}}, down = {(kn_qtype)q, 1024}, head = {(kn_qtype)q, 151936};
        kn_qpart qkv[3] = {{(kn_qtype)q, 2048}, {(kn_qtype)q, 1024}, {other, 1024}};
        builder(kn_matvec_q_norm(&c, ff, 2, 1024, t, t, KN_EPI_SWIGLU, 1e-6f, &gx, &err), &c, err.msg, name);
        builder(kn_matvec_q_norm(&c, qkv, 3, 1024, t, t, KN_EPI_BIAS, 1e-6f, &gx, &err), &c, err.msg, name);
        builder(kn_matvec_q(&c, &down, 1, 3072, t, t, KN_EPI_RESIDUAL, &gx, &err), &c, err.msg, name);
        builder(kn_matvec_q(&c, &head, 1, 1024, t, IR_F32, KN_EPI_NONE, &gx, &err), &c, err.msg, name);
        builder(kn_matmul_q(&c, qkv, 3, 1024, 512, t, KN_EPI_BIAS, g, &err), &c, err.msg, name);
        builder(kn_matmul_q(&c, &down, 1, 3072, 512, t, KN_EPI_RESIDUAL, g, &err), &c, err.msg, name);
        builder(kn_matmul_q(&c, &head, 1, 1024, 64, t, KN_EPI_F32, g, &err), &c, err.msg, name);
        builder(kn_embed_q(&c, (kn_qtype)q, 151936, 1024, t, &gx, &err), &c, err.msg, name);
    }
}

Test(ptx, quant_builders_sm80_bf16, .timeout = 120) { quant_builders(80, IR_BF16); }
Test(ptx, quant_builders_sm90_f16, .timeout = 120) { quant_builders(90, IR_F16); }

Test(ptx, builders_sm80_bf16, .timeout = 120) { all_builders(80, IR_BF16); }
Test(ptx, builders_sm80_f16, .timeout = 120) { all_builders(80, IR_F16); }
Test(ptx, builders_sm90_bf16, .timeout = 120) { all_builders(90, IR_BF16); }
Test(ptx, builders_sm90_f16, .timeout = 120) { all_builders(90, IR_F16); }

/* The PTX cache: a first emit writes ptx-<key>.ptx, a second reads it back (the same
 * text, no LLVM), a damaged file is ignored and rewritten, other caps get their own file,
 * and the cached text (a comment line ahead of the module) still assembles. */
Test(ptx, cache_on_disk) {
    const char *dir = tu_tmp("ptx-cache");
    setenv("KILN_CACHE_DIR", dir, 1);
    rt_caps c = tu_cuda_caps(90), c80 = tu_cuda_caps(80);
    kiln_err err = {0};
    char *a = NULL;
    char *b = NULL;
    char *d = NULL;
    bool hit = true;
    ir_kernel *k = kn_rmsnorm(&c, 1000, IR_BF16, 1e-6f, &err);
    cr_assert_not_null(k, "%s", err.msg);
    cr_assert_eq(ptx_emit_cached(k, &c, &a, &hit, &err), 0, "%s", err.msg);
    cr_assert(!hit && a && strstr(a, ".entry"));
    cr_assert_eq(ptx_emit_cached(k, &c, &b, &hit, &err), 0, "%s", err.msg);
    cr_assert(hit, "second emit missed the cache");
    cr_assert(strstr(b, "// kiln ptx cache ") == b && strstr(b, a), "cached text differs");
    tu_ptxas_assemble(b, "sm_90", "cached rmsnorm");
    /* exactly one file, then damage it */
    char cmd[1200], path[1000] = "";
    snprintf(cmd, sizeof cmd, "ls %s/ptx-*.ptx", dir);
    FILE *p = popen(cmd, "r");
    cr_assert(p && fgets(path, sizeof path, p));
    path[strcspn(path, "\n")] = 0;
    cr_assert(!fgets(cmd, sizeof cmd, p), "more than one cache file");
    pclose(p);
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fputs("garbage", f);
    fclose(f);
    free(b);
    cr_assert_eq(ptx_emit_cached(k, &c, &b, &hit, &err), 0, "%s", err.msg);
    cr_assert(!hit && strstr(b, ".entry"), "a damaged file was used");
    free(b);
    cr_assert_eq(ptx_emit_cached(k, &c, &b, &hit, &err), 0, "%s", err.msg);
    cr_assert(hit, "the damaged file was not rewritten");
    /* another target: another key */
    cr_assert_eq(ptx_emit_cached(k, &c80, &d, &hit, &err), 0, "%s", err.msg);
    cr_assert(!hit && strstr(d, "sm_80"));
    free(a), free(b), free(d);
    ir_kernel_destroy(k);
    unsetenv("KILN_CACHE_DIR");
}
