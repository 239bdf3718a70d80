/* The SPIR-V emitter (backend-spirv/spv_emit.h): kernels covering every IR op, emitted
 * for several capability sets and checked by SPIRV-Tools' validator (Vulkan 1.3);
 * refusals for missing capabilities; determinism; and, where a Vulkan device exists
 * (lavapipe here, the H200 on the GPU machine), a few emitted kernels run and compared
 * with C.
 *
 * The installed SPIRV-Tools may predate SPV_KHR_cooperative_matrix / SPV_KHR_bfloat16:
 * modules using them are then validated with the spirv-val named by $KILN_SPIRV_VAL,
 * or reported as not validated. */
#include "backend-spirv/spv_emit.h"
#include "backend-spirv/vk_khr.h"
#include "ir/ir.h"
#include "runtime/caps.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

/* ---- capability sets ------------------------------------------------------------------------ */

enum { CAPS_LAVAPIPE, CAPS_H200, CAPS_MIN, CAPS_STORAGE_ONLY, N_CAPS };
static const char *const caps_name[N_CAPS] = {"lavapipe", "h200", "spec-minimum", "storage16-only"};

static void caps_fill(rt_caps *c, int which) {
    memset(c, 0, sizeof *c);
    c->backend = RT_VULKAN;
    switch (which) {
    case CAPS_LAVAPIPE: /* ../shared/device/README.md: Mesa 22.3.6 */
        strcpy(c->vendor, "Mesa");
        c->subgroup_size = c->subgroup_min = c->subgroup_max = 8;
        c->subgroup_arith = c->subgroup_shuffle = true;
        c->f16_arith = c->storage16 = c->int8_arith = true;
        c->shared_bytes = 32768;
        c->max_workgroup = 1024;
        break;
    case CAPS_H200: {
        strcpy(c->vendor, "NVIDIA");
        c->subgroup_size = c->subgroup_min = c->subgroup_max = 32;
        c->subgroup_arith = c->subgroup_shuffle = true;
        c->f16_arith = c->bf16_arith = c->storage16 = c->int8_arith = true;
        c->atomic_f32_add = true;
        c->shared_bytes = 49152;
        c->max_workgroup = 1024;
        static const rt_mma_shape s[] = {
            {16, 16, 16, IR_F16, IR_F16}, {16, 8, 16, IR_F16, IR_F16}, {16, 8, 8, IR_F16, IR_F16},
            {16, 16, 16, IR_F16, IR_F32}, {16, 8, 16, IR_F16, IR_F32}, {16, 8, 8, IR_F16, IR_F32},
            {16, 16, 16, IR_BF16, IR_F32},
        };
        c->n_mma = sizeof s / sizeof s[0];
        memcpy(c->mma, s, sizeof s);
        break;
    }
    case CAPS_MIN: /* Vulkan 1.3's guarantees */
        c->subgroup_size = c->subgroup_min = c->subgroup_max = 4;
        c->shared_bytes = 16384;
        c->max_workgroup = 128;
        break;
    case CAPS_STORAGE_ONLY: /* 16-bit buffers but no f16 arithmetic: f16 lives in f32 registers */
        c->subgroup_size = c->subgroup_min = c->subgroup_max = 16;
        c->subgroup_arith = c->subgroup_shuffle = true;
        c->storage16 = true;
        c->shared_bytes = 32768;
        c->max_workgroup = 1024;
        break;
    }
}

/* ---- builder shorthands ------------------------------------------------------------------- */

#define TS(s) ir_t_scalar(k, IR_##s)
#define TV(s, n) ir_t_vector(k, IR_##s, n)
#define CU(v) ir_const_u32(k, v)
#define CI(v) ir_const_i32(k, v)
#define CF(v) ir_const_f32(k, v)
#define BIN(op, a, b) ir_bin(k, IR_OP_##op, a, b)
#define UN(op, a) ir_un(k, IR_OP_##op, a)
#define GID ir_id(k, IR_ID_GLOBAL, 0)

static ir_kernel *k_arith_f32(void) {
    ir_kernel *k = ir_kernel_create("arith_f32");
    ir_buf in = ir_param_buffer(k, "in", IR_F32, IR_READ);
    ir_buf out = ir_param_buffer(k, "out", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i4 = BIN(MUL, GID, CU(4));
    ir_val a = ir_load(k, in, i4, 1), b = ir_load(k, in, BIN(ADD, i4, CU(1)), 1);
    const ir_op bins[] = {IR_OP_ADD, IR_OP_SUB, IR_OP_MUL, IR_OP_DIV, IR_OP_REM, IR_OP_MIN, IR_OP_MAX};
    const ir_op uns[] = {IR_OP_NEG, IR_OP_ABS, IR_OP_EXP, IR_OP_LOG, IR_OP_SQRT, IR_OP_RSQRT,
                         IR_OP_TANH, IR_OP_SIN, IR_OP_COS, IR_OP_FLOOR};
    ir_val acc = a;
    for (size_t j = 0; j < sizeof bins / sizeof *bins; j++) acc = BIN(ADD, acc, ir_bin(k, bins[j], a, b));
    for (size_t j = 0; j < sizeof uns / sizeof *uns; j++) acc = BIN(ADD, acc, ir_un(k, uns[j], a));
    acc = ir_fma(k, a, b, acc);
    for (int c = IR_EQ; c <= IR_GE; c++) acc = ir_select(k, ir_compare(k, (ir_cmp)c, a, b), acc, BIN(SUB, acc, CF(1)));
    ir_val v = ir_load(k, in, i4, 4), w = ir_load(k, in, BIN(ADD, i4, CU(4)), 4);
    ir_val r = BIN(ADD, BIN(MUL, v, w), BIN(DIV, v, w));
    r = BIN(MAX, BIN(MIN, r, v), BIN(SUB, w, v));
    r = ir_fma(k, UN(NEG, r), UN(ABS, w), UN(EXP, v));
    r = ir_select(k, ir_compare(k, IR_LT, v, w), r, w);                          /* lane-wise condition */
    r = ir_select(k, ir_compare(k, IR_GT, a, b), r, UN(SQRT, UN(ABS, v)));      /* scalar condition */
    ir_val lanes[4] = {ir_extract(k, r, 3), ir_extract(k, r, 2), acc, ir_extract(k, r, 0)};
    ir_store(k, out, i4, ir_vec(k, lanes, 4));
    return k;
}

static ir_kernel *k_arith_int(void) {
    ir_kernel *k = ir_kernel_create("arith_int");
    ir_buf si = ir_param_buffer(k, "si", IR_I32, IR_READ | IR_WRITE);
    ir_buf ui = ir_param_buffer(k, "ui", IR_U32, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 32, 2, 1);
    ir_val i = BIN(MUL, GID, CU(2));
    ir_val a = ir_load(k, si, i, 1), b = ir_load(k, si, BIN(ADD, i, CU(1)), 1);
    ir_val ua = ir_load(k, ui, i, 1), ub = ir_load(k, ui, BIN(ADD, i, CU(1)), 1);
    ir_val s = a, u = ua;
    for (int op = IR_OP_ADD; op <= IR_OP_SHR; op++) {
        s = BIN(XOR, s, ir_bin(k, (ir_op)op, a, b));
        u = BIN(XOR, u, ir_bin(k, (ir_op)op, ua, ub));
    }
    s = BIN(ADD, s, BIN(ADD, UN(NEG, a), BIN(ADD, UN(NOT, b), UN(ABS, a))));
    u = BIN(ADD, u, BIN(ADD, UN(NEG, ua), UN(NOT, ub)));
    ir_val t = ir_const_bool(k, false);
    for (int c = IR_EQ; c <= IR_GE; c++) {
        t = BIN(XOR, t, ir_compare(k, (ir_cmp)c, a, b));
        t = BIN(OR, t, BIN(AND, ir_compare(k, (ir_cmp)c, ua, ub), ir_compare(k, IR_NE, t, ir_const_bool(k, true))));
    }
    t = UN(NOT, t);
    s = ir_select(k, t, s, BIN(SUB, CI(0), s));
    ir_val two[2] = {a, b}, utwo[2] = {ua, ub};
    ir_val v = ir_vec(k, two, 2), uv = ir_vec(k, utwo, 2);
    v = BIN(SHR, BIN(MUL, v, v), BIN(AND, v, ir_vec(k, (ir_val[]){CI(7), CI(3)}, 2)));
    uv = BIN(MAX, BIN(REM, uv, BIN(OR, uv, ir_vec(k, (ir_val[]){CU(1), CU(1)}, 2))), BIN(SHL, uv, uv));
    s = BIN(ADD, s, ir_extract(k, v, 1));
    u = BIN(ADD, u, ir_extract(k, uv, 0));
    ir_store(k, si, i, ir_vec(k, (ir_val[]){s, ir_extract(k, v, 0)}, 2));
    ir_store(k, ui, i, ir_vec(k, (ir_val[]){u, ir_extract(k, uv, 1)}, 2));
    return k;
}

static ir_kernel *k_arith_i64(void) {
    ir_kernel *k = ir_kernel_create("arith_i64");
    ir_buf in = ir_param_buffer(k, "in", IR_I64, IR_READ);
    ir_buf out = ir_param_buffer(k, "out", IR_U64, IR_WRITE);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val a = ir_load(k, in, GID, 1);
    ir_val b = ir_convert(k, GID, TS(I64));
    ir_val s = BIN(ADD, BIN(MUL, a, b), BIN(SHR, a, b));
    s = BIN(SUB, s, BIN(DIV, a, BIN(OR, b, ir_convert(k, CI(1), TS(I64)))));
    ir_val u = ir_convert(k, s, TS(U64));
    u = BIN(MAX, u, BIN(SHR, u, ir_convert(k, CU(3), TS(U64))));
    u = BIN(ADD, u, ir_convert(k, ir_convert(k, a, TS(I32)), TS(U64)));
    ir_val f = ir_convert(k, a, TS(F32));
    u = BIN(ADD, u, ir_convert(k, f, TS(U64)));
    u = BIN(XOR, u, ir_bitcast(k, ir_vec(k, (ir_val[]){GID, CU(1)}, 2), TS(U64)));
    ir_store(k, out, GID, u);
    return k;
}

static ir_kernel *k_arith_f16(void) {
    ir_kernel *k = ir_kernel_create("arith_f16");
    ir_buf io = ir_param_buffer(k, "io", IR_F16, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i = BIN(MUL, GID, CU(2));
    ir_val v = ir_load(k, io, i, 2);
    ir_val a = ir_extract(k, v, 0), b = ir_extract(k, v, 1);
    ir_val s = BIN(ADD, BIN(MUL, a, b), BIN(DIV, a, b));
    s = BIN(MAX, BIN(MIN, s, a), BIN(SUB, UN(NEG, b), UN(ABS, a)));
    s = ir_fma(k, s, a, b);
    ir_val w = ir_fma(k, v, v, BIN(MUL, v, v));
    w = ir_select(k, ir_compare(k, IR_LE, v, w), w, v);
    ir_store(k, io, i, ir_vec(k, (ir_val[]){s, ir_extract(k, w, 1)}, 2));
    return k;
}

static ir_kernel *k_arith_bf16(void) {
    ir_kernel *k = ir_kernel_create("arith_bf16");
    ir_buf io = ir_param_buffer(k, "io", IR_BF16, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val v = ir_load(k, io, BIN(MUL, GID, CU(4)), 4);
    ir_val w = BIN(ADD, BIN(MUL, v, v), BIN(DIV, v, BIN(SUB, v, UN(NEG, v))));
    w = BIN(MAX, UN(ABS, w), BIN(MIN, v, w));
    ir_val a = ir_extract(k, w, 0);
    a = BIN(REM, a, ir_extract(k, v, 1));
    ir_store(k, io, BIN(MUL, GID, CU(4)), ir_vec(k, (ir_val[]){a, ir_extract(k, w, 1), ir_extract(k, w, 2), ir_extract(k, v, 3)}, 4));
    return k;
}

/* Conversions between every allowed pair; 16-bit values only in registers. */
static ir_kernel *k_convert(void) {
    ir_kernel *k = ir_kernel_create("convert");
    ir_buf fin = ir_param_buffer(k, "fin", IR_F32, IR_READ);
    ir_buf iin = ir_param_buffer(k, "iin", IR_I32, IR_READ);
    ir_buf fout = ir_param_buffer(k, "fout", IR_F32, IR_WRITE);
    ir_buf uout = ir_param_buffer(k, "uout", IR_U32, IR_WRITE);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val f = ir_load(k, fin, GID, 1), si = ir_load(k, iin, GID, 1);
    ir_val h = ir_convert(k, f, TS(F16)), bf = ir_convert(k, f, TS(BF16));
    ir_val r = BIN(ADD, ir_convert(k, h, TS(F32)), ir_convert(k, bf, TS(F32)));
    ir_val v = ir_load(k, fin, BIN(MUL, GID, CU(4)), 4);
    ir_val hv = ir_convert(k, v, TV(F16, 4)), bv = ir_convert(k, v, TV(BF16, 4));
    ir_val back = BIN(SUB, ir_convert(k, hv, TV(F32, 4)), ir_convert(k, bv, TV(F32, 4)));
    r = BIN(ADD, r, ir_extract(k, back, 2));
    ir_val ui = ir_convert(k, si, TS(U32));
    r = BIN(ADD, r, BIN(ADD, ir_convert(k, si, TS(F32)), ir_convert(k, ui, TS(F32))));
    ir_val l = ir_convert(k, si, TS(I64)), ul = ir_convert(k, ui, TS(U64));
    ir_val ul2 = ir_convert(k, l, TS(U64)), l2 = ir_convert(k, ul, TS(I64));
    r = BIN(ADD, r, ir_convert(k, BIN(ADD, ul, ul2), TS(F32)));
    ir_val u = BIN(ADD, ir_convert(k, f, TS(U32)), ir_convert(k, ir_convert(k, f, TS(I32)), TS(U32)));
    u = BIN(ADD, u, ir_convert(k, l2, TS(U32)));
    u = BIN(ADD, u, ir_bitcast(k, f, TS(U32)));
    r = BIN(ADD, r, ir_bitcast(k, si, TS(F32)));
    /* 16-bit compares and selects stay exact in f32 registers */
    ir_val hb = ir_select(k, ir_compare(k, IR_LT, h, ir_convert(k, CF(1), TS(F16))), h, ir_convert(k, CF(2), TS(F16)));
    r = BIN(ADD, r, ir_convert(k, hb, TS(F32)));
    ir_store(k, fout, GID, r);
    ir_store(k, uout, GID, u);
    return k;
}

static ir_kernel *k_bitcast16(void) {
    ir_kernel *k = ir_kernel_create("bitcast16");
    ir_buf in = ir_param_buffer(k, "in", IR_U32, IR_READ);
    ir_buf out = ir_param_buffer(k, "out", IR_U32, IR_WRITE);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val w = ir_load(k, in, GID, 1);
    ir_val h2 = ir_bitcast(k, w, TV(F16, 2));       /* u32 -> f16x2 */
    ir_val b2 = ir_bitcast(k, w, TV(BF16, 2));      /* u32 -> bf16x2 */
    ir_val hb = ir_bitcast(k, ir_extract(k, h2, 1), TS(BF16)); /* f16 -> bf16 */
    ir_val bh = ir_bitcast(k, ir_extract(k, b2, 0), TS(F16)); /* bf16 -> f16 */
    ir_val h2b = ir_vec(k, (ir_val[]){bh, ir_extract(k, h2, 0)}, 2);
    ir_val u = BIN(ADD, ir_bitcast(k, h2b, TS(U32)), ir_bitcast(k, ir_vec(k, (ir_val[]){hb, ir_extract(k, b2, 1)}, 2), TS(U32)));
    ir_val v4 = ir_vec(k, (ir_val[]){ir_extract(k, h2, 0), ir_extract(k, h2, 1), bh, bh}, 4);
    ir_val u2 = ir_bitcast(k, v4, TV(U32, 2));
    u = BIN(ADD, u, BIN(XOR, ir_extract(k, u2, 0), ir_extract(k, u2, 1)));
    ir_store(k, out, GID, u);
    return k;
}

/* Loads and stores of 1, 2 and 4 lanes, plain and masked, for 32- and 16-bit buffers. */
static void memory_body(ir_kernel *k, ir_buf b, ir_val n, ir_val fallback) {
    ir_val i = BIN(MUL, GID, CU(4));
    ir_val v1 = ir_load(k, b, i, 1), v2 = ir_load(k, b, i, 2), v4 = ir_load(k, b, i, 4);
    ir_val m1 = ir_load_masked(k, b, i, 1, n, fallback);
    ir_val m2 = ir_load_masked(k, b, i, 2, n, fallback);
    ir_val m4 = ir_load_masked(k, b, i, 4, n, fallback);
    ir_barrier(k);
    ir_store(k, b, i, v4);
    ir_store(k, b, BIN(ADD, i, CU(2)), v2);
    ir_store(k, b, BIN(ADD, i, CU(1)), v1);
    ir_store_masked(k, b, i, m1, n);
    ir_store_masked(k, b, BIN(ADD, i, CU(2)), m2, n);
    ir_store_masked(k, b, i, m4, n);
}

static ir_kernel *k_memory32(void) {
    ir_kernel *k = ir_kernel_create("memory32");
    ir_buf f = ir_param_buffer(k, "f", IR_F32, IR_READ | IR_WRITE);
    ir_buf u = ir_param_buffer(k, "u", IR_U32, IR_READ | IR_WRITE);
    ir_buf ro = ir_param_buffer(k, "ro", IR_I32, IR_READ);
    ir_buf wo = ir_param_buffer(k, "wo", IR_I32, IR_WRITE);
    ir_val n = ir_param_scalar(k, "n", IR_U32);
    ir_set_workgroup(k, 64, 1, 1);
    memory_body(k, f, n, CF(-1));
    memory_body(k, u, n, CU(7));
    ir_store_masked(k, wo, GID, ir_load_masked(k, ro, GID, 4, n, CI(0)), n);
    return k;
}

static ir_kernel *k_memory16(void) {
    ir_kernel *k = ir_kernel_create("memory16");
    ir_buf h = ir_param_buffer(k, "h", IR_F16, IR_READ | IR_WRITE);
    ir_buf b = ir_param_buffer(k, "b", IR_BF16, IR_READ | IR_WRITE);
    ir_buf ho = ir_param_buffer(k, "ho", IR_F16, IR_WRITE);
    ir_val n = ir_param_scalar(k, "n", IR_U32);
    ir_set_workgroup(k, 64, 1, 1);
    memory_body(k, h, n, ir_convert(k, CF(0.5f), TS(F16)));
    memory_body(k, b, n, ir_convert(k, CF(-2.0f), TS(BF16)));
    ir_val x = ir_convert(k, ir_load(k, b, GID, 4), TV(F32, 4));
    ir_store(k, ho, BIN(MUL, GID, CU(4)), ir_convert(k, x, TV(F16, 4)));
    return k;
}

static ir_kernel *k_shared(void) {
    ir_kernel *k = ir_kernel_create("shared");
    ir_buf out = ir_param_buffer(k, "out", IR_F32, IR_WRITE);
    ir_shm sf = ir_shared_array(k, "sf", IR_F32, 256);
    ir_shm sh = ir_shared_array(k, "sh", IR_F16, 256);
    ir_shm sb = ir_shared_array(k, "sb", IR_BF16, 256);
    ir_shm su = ir_shared_array(k, "su", IR_U32, 64);
    ir_shm si = ir_shared_array(k, "si", IR_I32, 64);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val l = ir_id(k, IR_ID_LOCAL, 0);
    ir_val l4 = BIN(MUL, l, CU(4));
    ir_val f = ir_convert(k, l, TS(F32));
    ir_val f4 = ir_vec(k, (ir_val[]){f, f, f, f}, 4);
    ir_shm_store(k, sf, l4, f4);
    ir_shm_store(k, sh, l4, ir_convert(k, f4, TV(F16, 4)));
    ir_shm_store(k, sb, BIN(ADD, l4, CU(2)), ir_convert(k, ir_vec(k, (ir_val[]){f, f}, 2), TV(BF16, 2)));
    ir_shm_store(k, sb, l4, ir_convert(k, f, TS(BF16)));
    ir_shm_store(k, su, l, l);
    ir_shm_store(k, si, l, CI(0));
    ir_barrier(k);
    ir_val j = BIN(AND, BIN(ADD, l, CU(1)), CU(63));
    ir_val a = ir_shm_load(k, sf, BIN(MUL, j, CU(4)), 4);
    ir_val b = ir_convert(k, ir_shm_load(k, sh, BIN(MUL, j, CU(4)), 2), TV(F32, 2));
    ir_val c = ir_convert(k, ir_shm_load(k, sb, BIN(MUL, j, CU(4)), 1), TS(F32));
    ir_val old = ir_atomic(k, IR_ATOMIC_ADD, true, su, j, CU(1));
    ir_atomic(k, IR_ATOMIC_MAX, true, su, l, old);
    ir_atomic(k, IR_ATOMIC_MIN, true, si, j, CI(-1));
    ir_atomic(k, IR_ATOMIC_XCHG, true, si, l, CI(3));
    ir_val fx = ir_atomic(k, IR_ATOMIC_XCHG, true, sf, BIN(MUL, j, CU(4)), f); /* sf is then kept as u32 bits */
    ir_barrier(k);
    ir_val s = BIN(ADD, BIN(ADD, ir_extract(k, a, 3), ir_extract(k, b, 1)), c);
    s = BIN(ADD, s, ir_convert(k, ir_shm_load(k, su, l, 1), TS(F32)));
    s = BIN(ADD, s, ir_convert(k, ir_shm_load(k, si, j, 1), TS(F32)));
    ir_store(k, out, GID, BIN(ADD, s, fx));
    return k;
}

static ir_kernel *k_subgroup(void) {
    ir_kernel *k = ir_kernel_create("subgroup");
    ir_buf f = ir_param_buffer(k, "f", IR_F32, IR_READ | IR_WRITE);
    ir_buf u = ir_param_buffer(k, "u", IR_U32, IR_READ | IR_WRITE);
    ir_buf s = ir_param_buffer(k, "s", IR_I32, IR_READ | IR_WRITE);
    ir_val lane0 = ir_param_scalar(k, "lane", IR_U32);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val x = ir_load(k, f, GID, 1), y = ir_load(k, u, GID, 1), z = ir_load(k, s, GID, 1);
    ir_val lane = ir_id(k, IR_ID_SG_LANE, 0), sgid = ir_id(k, IR_ID_SG_ID, 0), sgsz = ir_id(k, IR_ID_SG_SIZE, 0);
    ir_val fx = x, uy = y, sz = z;
    for (int r = IR_REDUCE_ADD; r <= IR_REDUCE_MAX; r++) {
        fx = BIN(ADD, fx, ir_sg_reduce(k, (ir_reduce)r, x));
        uy = BIN(ADD, uy, ir_sg_reduce(k, (ir_reduce)r, y));
        sz = BIN(ADD, sz, ir_sg_reduce(k, (ir_reduce)r, z));
    }
    fx = BIN(ADD, fx, ir_sg_shuffle(k, x, BIN(XOR, lane, CU(1))));
    fx = BIN(ADD, fx, ir_sg_shuffle_xor(k, x, CU(2)));
    fx = BIN(ADD, fx, ir_sg_broadcast(k, x, CU(0)));
    uy = BIN(ADD, uy, ir_sg_broadcast(k, y, lane0));
    sz = BIN(ADD, sz, ir_sg_shuffle_xor(k, z, BIN(SUB, sgsz, CU(1))));
    ir_val v = ir_vec(k, (ir_val[]){x, fx, x, fx}, 4);
    v = ir_sg_shuffle(k, v, BIN(AND, BIN(ADD, lane, CU(1)), BIN(SUB, sgsz, CU(1))));
    ir_val uv = ir_sg_shuffle_xor(k, ir_vec(k, (ir_val[]){y, uy}, 2), CU(1));
    ir_store(k, f, GID, BIN(ADD, ir_extract(k, v, 1), ir_extract(k, v, 2)));
    ir_store(k, u, GID, BIN(ADD, BIN(ADD, ir_extract(k, uv, 0), ir_extract(k, uv, 1)), sgid));
    ir_store(k, s, GID, sz);
    return k;
}

static ir_kernel *k_atomic(void) {
    ir_kernel *k = ir_kernel_create("atomic");
    ir_buf s = ir_param_buffer(k, "s", IR_I32, IR_READ | IR_WRITE);
    ir_buf u = ir_param_buffer(k, "u", IR_U32, IR_READ | IR_WRITE);
    ir_buf f = ir_param_buffer(k, "f", IR_F32, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i = ir_id(k, IR_ID_LOCAL, 0);
    ir_val a = ir_atomic(k, IR_ATOMIC_ADD, false, s, CU(0), CI(1));
    a = BIN(ADD, a, ir_atomic(k, IR_ATOMIC_MIN, false, s, CU(1), CI(-5)));
    a = BIN(ADD, a, ir_atomic(k, IR_ATOMIC_MAX, false, s, CU(2), CI(5)));
    a = BIN(ADD, a, ir_atomic(k, IR_ATOMIC_XCHG, false, s, CU(3), a));
    ir_val b = ir_atomic(k, IR_ATOMIC_ADD, false, u, CU(0), i);
    b = BIN(ADD, b, ir_atomic(k, IR_ATOMIC_MIN, false, u, CU(1), i));
    b = BIN(ADD, b, ir_atomic(k, IR_ATOMIC_MAX, false, u, CU(2), i));
    b = BIN(ADD, b, ir_atomic(k, IR_ATOMIC_XCHG, false, u, CU(3), b));
    ir_val c = ir_atomic(k, IR_ATOMIC_XCHG, false, f, CU(0), CF(1.5f));
    ir_store(k, f, BIN(ADD, i, CU(4)), BIN(ADD, c, ir_convert(k, BIN(ADD, ir_convert(k, a, TS(U32)), b), TS(F32))));
    return k;
}

static ir_kernel *k_atomic_fadd(void) {
    ir_kernel *k = ir_kernel_create("atomic_fadd");
    ir_buf f = ir_param_buffer(k, "f", IR_F32, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val old = ir_atomic(k, IR_ATOMIC_ADD, false, f, CU(0), CF(0.25f));
    ir_store(k, f, BIN(ADD, GID, CU(1)), old);
    return k;
}

/* for with carried values (nested, dynamic and constant bounds), if/else with results
 * (nested), if without else, loops inside ifs. */
static ir_kernel *k_control(void) {
    ir_kernel *k = ir_kernel_create("control");
    ir_buf in = ir_param_buffer(k, "in", IR_F32, IR_READ);
    ir_buf out = ir_param_buffer(k, "out", IR_F32, IR_WRITE);
    ir_val n = ir_param_scalar(k, "n", IR_U32);
    ir_val lo = ir_param_scalar(k, "lo", IR_I32);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val init[2] = {CF(0), CU(0)};
    ir_for *f = ir_for_begin(k, CU(0), n, CU(1), 2, init);
    ir_val iv = ir_for_iv(f);
    ir_val x = ir_load_masked(k, in, BIN(ADD, iv, GID), 1, n, CF(0));
    ir_val init2[1] = {x};
    ir_for *g = ir_for_begin(k, lo, CI(4), CI(1), 1, init2);
    ir_val y = BIN(MUL, ir_for_arg(g, 0), CF(0.5f));
    ir_if *c1 = ir_if_begin(k, ir_compare(k, IR_LT, ir_for_iv(g), CI(2)), 1);
    ir_if *c2 = ir_if_begin(k, ir_compare(k, IR_GT, y, CF(1)), 2);
    ir_val t2[2] = {BIN(ADD, y, CF(1)), CU(1)};
    ir_if_else(k, c2, t2);
    ir_val e2[2] = {BIN(SUB, y, CF(1)), CU(2)};
    ir_if_end(k, c2, e2);
    ir_val t1[1] = {BIN(MUL, ir_if_result(c2, 0), ir_convert(k, ir_if_result(c2, 1), TS(F32)))};
    ir_if_else(k, c1, t1);
    ir_val e1[1] = {y};
    ir_if_end(k, c1, e1);
    ir_val yg[1] = {ir_if_result(c1, 0)};
    ir_for_end(k, g, yg);
    ir_val acc = BIN(ADD, ir_for_arg(f, 0), ir_for_result(g, 0));
    ir_val cnt = BIN(ADD, ir_for_arg(f, 1), CU(1));
    ir_val yf[2] = {acc, cnt};
    ir_for_end(k, f, yf);
    ir_val total = ir_for_result(f, 0);
    ir_if *c3 = ir_if_begin(k, ir_compare(k, IR_EQ, ir_for_result(f, 1), CU(0)), 0); /* no else */
    ir_store(k, out, GID, CF(-1));
    ir_if_end(k, c3, NULL);
    ir_if *c4 = ir_if_begin(k, ir_compare(k, IR_NE, ir_for_result(f, 1), CU(0)), 0);
    ir_for *h = ir_for_begin(k, CU(0), CU(3), CU(1), 0, NULL); /* a loop inside an if, nothing carried */
    ir_store(k, out, BIN(ADD, GID, ir_for_iv(h)), total);
    ir_for_end(k, h, NULL);
    ir_if_else(k, c4, NULL);
    ir_barrier(k); /* an else with work and no results */
    ir_if_end(k, c4, NULL);
    return k;
}

static ir_kernel *k_spec(void) {
    ir_kernel *k = ir_kernel_create("spec");
    ir_buf out = ir_param_buffer(k, "out", IR_F32, IR_WRITE);
    ir_val wg = ir_spec_const(k, "WG", IR_U32, 64);
    ir_val flag = ir_spec_const(k, "FLAG", IR_BOOL, 1);
    ir_val off = ir_spec_const(k, "OFF", IR_I32, -3);
    ir_val scale = ir_spec_const(k, "SCALE", IR_F32, 0.5);
    ir_val off0 = ir_spec_const(k, "FLAG0", IR_BOOL, 0);
    ir_set_workgroup_spec(k, wg);
    ir_val v = BIN(MUL, ir_convert(k, BIN(ADD, ir_id(k, IR_ID_LOCAL, 0), wg), TS(F32)), scale);
    v = BIN(ADD, v, ir_convert(k, off, TS(F32)));
    v = ir_select(k, BIN(XOR, flag, off0), v, UN(NEG, v));
    ir_store(k, out, GID, v);
    return k;
}

static ir_kernel *k_push(void) {
    ir_kernel *k = ir_kernel_create("push");
    ir_val a = ir_param_scalar(k, "a", IR_F32);
    ir_buf out = ir_param_buffer(k, "out", IR_F32, IR_WRITE);
    ir_val b = ir_param_scalar(k, "b", IR_I32);
    ir_buf out2 = ir_param_buffer(k, "out2", IR_U32, IR_WRITE);
    ir_val c = ir_param_scalar(k, "c", IR_U32);
    ir_set_workgroup(k, 8, 8, 1);
    ir_val x = ir_id(k, IR_ID_GLOBAL, 0), y = ir_id(k, IR_ID_GLOBAL, 1);
    ir_val i = BIN(ADD, BIN(MUL, y, BIN(MUL, ir_id(k, IR_ID_NUM_GROUPS, 0), CU(8))), x);
    ir_store(k, out, i, BIN(MUL, a, ir_convert(k, b, TS(F32))));
    ir_val g = BIN(ADD, ir_id(k, IR_ID_GROUP, 1), ir_id(k, IR_ID_LOCAL, 1));
    ir_store(k, out2, i, BIN(ADD, c, BIN(ADD, g, ir_id(k, IR_ID_GROUP, 2))));
    return k;
}

/* A 16x16 (per subgroup) tile product over K: A from a buffer (row-major), B from
 * workgroup memory (column-major), the accumulator carried through the loop. */
static ir_kernel *frag_kernel(const char *name, ir_scalar ab, ir_scalar acc, uint32_t M, uint32_t N, uint32_t K) {
    ir_kernel *k = ir_kernel_create(name);
    ir_buf a = ir_param_buffer(k, "a", ab, IR_READ);
    ir_buf b = ir_param_buffer(k, "b", ab, IR_READ);
    ir_buf c = ir_param_buffer(k, "c", acc, IR_WRITE);
    ir_shm sb = ir_shared_array(k, "sb", ab, K * N);
    ir_shm sc = ir_shared_array(k, "sc", acc, M * N);
    ir_set_workgroup(k, 32, 1, 1);
    ir_val l = ir_id(k, IR_ID_LOCAL, 0);
    ir_for *cp = ir_for_begin(k, l, CU(K * N), CU(32), 0, NULL);
    ir_shm_store(k, sb, ir_for_iv(cp), ir_load(k, b, ir_for_iv(cp), 1));
    ir_for_end(k, cp, NULL);
    ir_barrier(k);
    ir_type ta = ir_t_frag(k, IR_FRAG_A, ab, M, N, K), tb = ir_t_frag(k, IR_FRAG_B, ab, M, N, K);
    ir_type tc = ir_t_frag(k, IR_FRAG_ACC, acc, M, N, K);
    ir_val zero = acc == IR_F32 ? CF(0) : ir_convert(k, CF(0), ir_t_scalar(k, acc));
    ir_val init[1] = {ir_frag_fill(k, tc, zero)};
    ir_for *f = ir_for_begin(k, CU(0), CU(4), CU(1), 1, init);
    ir_val fa = ir_frag_load(k, ta, false, a, BIN(MUL, ir_for_iv(f), CU(M * K)), CU(K), true);
    ir_val fb = ir_frag_load(k, tb, true, sb, CU(0), CU(K), false);
    ir_val y[1] = {ir_frag_mma(k, fa, fb, ir_for_arg(f, 0))};
    ir_for_end(k, f, y);
    ir_frag_store(k, ir_for_result(f, 0), false, c, CU(0), CU(N), true);
    ir_frag_store(k, ir_for_result(f, 0), true, sc, CU(0), CU(N), false);
    ir_barrier(k);
    ir_store(k, c, BIN(ADD, l, CU(M * N)), ir_shm_load(k, sc, l, 1));
    return k;
}
static ir_kernel *k_frag_f16(void) { return frag_kernel("frag_f16", IR_F16, IR_F32, 16, 16, 16); }
static ir_kernel *k_frag_bf16(void) { return frag_kernel("frag_bf16", IR_BF16, IR_F32, 16, 16, 16); }
static ir_kernel *k_frag_f16acc(void) { return frag_kernel("frag_f16acc", IR_F16, IR_F16, 16, 8, 16); }

/* ---- the matrix: each kernel under each caps set ------------------------------------------ */

#define OK NULL
typedef struct kcase {
    const char *name;
    ir_kernel *(*build)(void);
    const char *expect[N_CAPS]; /* NULL: must emit and validate; else a part of the refusal */
} kcase;

static const kcase cases[] = {
    /*                               lavapipe  h200  spec-minimum  storage16-only */
    {"arith_f32", k_arith_f32, {OK, OK, OK, OK}},
    {"arith_int", k_arith_int, {OK, OK, OK, OK}},
    {"arith_i64", k_arith_i64, {OK, OK, OK, OK}},
    {"arith_f16", k_arith_f16, {OK, OK, "caps.storage16", "f16 arithmetic needs caps.f16_arith"}},
    {"arith_bf16", k_arith_bf16, {"bf16 arithmetic needs caps.bf16_arith", OK, "caps.storage16", "bf16 arithmetic needs caps.bf16_arith"}},
    {"convert", k_convert, {OK, OK, OK, OK}},
    {"bitcast16", k_bitcast16, {OK, OK, "caps.f16_arith", "caps.f16_arith"}},
    {"memory32", k_memory32, {OK, OK, OK, OK}},
    {"memory16", k_memory16, {OK, OK, "caps.storage16", OK}},
    {"shared", k_shared, {OK, OK, OK, OK}},
    {"subgroup", k_subgroup, {OK, OK, "caps.subgroup_arith", OK}},
    {"atomic", k_atomic, {OK, OK, OK, OK}},
    {"atomic_fadd", k_atomic_fadd, {"caps.atomic_f32_add", OK, "caps.atomic_f32_add", "caps.atomic_f32_add"}},
    {"control", k_control, {OK, OK, OK, OK}},
    {"spec", k_spec, {OK, OK, OK, OK}},
    {"push", k_push, {OK, OK, OK, OK}},
    {"frag_f16", k_frag_f16, {"caps.n_mma is 0", OK, "caps.n_mma is 0", "caps.n_mma is 0"}},
    {"frag_bf16", k_frag_bf16, {"caps.n_mma is 0", OK, "caps.n_mma is 0", "caps.n_mma is 0"}},
    {"frag_f16acc", k_frag_f16acc, {"caps.n_mma is 0", OK, "caps.n_mma is 0", "caps.n_mma is 0"}},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static ir_kernel *build_checked(const kcase *kc) {
    ir_kernel *k = kc->build();
    cr_assert(k, "%s: no kernel", kc->name);
    cr_assert_str_empty(ir_kernel_error(k), "%s: builder: %s", kc->name, ir_kernel_error(k));
    char err[256];
    cr_assert_eq(ir_verify(k, err, sizeof err), 0, "%s: verify: %s", kc->name, err);
    return k;
}

/* Does the module declare a capability newer than Debian's SPIRV-Tools knows? */
static void run_matrix(int which) {
    rt_caps c;
    caps_fill(&c, which);
    int ok = 0, refused = 0, external = 0, unchecked = 0;
    for (size_t i = 0; i < N_CASES; i++) {
        const kcase *kc = &cases[i];
        ir_kernel *k = build_checked(kc);
        spv_module m;
        char err[512];
        int rc = spv_emit(k, &c, &m, err, sizeof err);
        char what[96];
        snprintf(what, sizeof what, "%s on %s", kc->name, caps_name[which]);
        if (kc->expect[which]) {
            cr_expect_neq(rc, 0, "%s: expected a refusal (%s)", what, kc->expect[which]);
            cr_expect(strstr(err, kc->expect[which]) != NULL, "%s: refusal '%s' lacks '%s'", what, err, kc->expect[which]);
            cr_expect(strstr(err, kc->name) != NULL, "%s: refusal '%s' does not name the kernel", what, err);
            cr_expect(m.words == NULL && m.n == 0);
            refused++;
        } else {
            cr_assert_eq(rc, 0, "%s: %s", what, err);
            tu_val_how h = tu_spv_validate(&m, what);
            ok += h == TU_VAL_OK;
            external += h == TU_VAL_EXTERNAL;
            unchecked += h == TU_VAL_UNCHECKED;
            /* the disassembler reads what the validator reads */
            if (h == TU_VAL_OK) {
                char *text = spv_disassemble(&m);
                cr_expect(text && strstr(text, "OpEntryPoint GLCompute"), "%s: disassembly", what);
                free(text);
            }
        }
        spv_module_free(&m);
        ir_kernel_destroy(k);
    }
    fprintf(stderr, "spirv %-15s: %d validated, %d validated by $KILN_SPIRV_VAL, %d not validated (SPIRV-Tools too old), %d refused as expected\n",
            caps_name[which], ok, external, unchecked, refused);
}

Test(spirv, matrix_lavapipe) { run_matrix(CAPS_LAVAPIPE); }
Test(spirv, matrix_h200) { run_matrix(CAPS_H200); }
Test(spirv, matrix_spec_minimum) { run_matrix(CAPS_MIN); }
Test(spirv, matrix_storage16_only) { run_matrix(CAPS_STORAGE_ONLY); }

/* Every combination of the feature flags: each kernel either emits a module that
 * validates or is refused with a message; nothing in between. */
Test(spirv, every_caps_combination) {
    int ok = 0, refused = 0;
    for (uint32_t bits = 0; bits < 128; bits++) {
        rt_caps c;
        caps_fill(&c, CAPS_H200);
        c.f16_arith = bits & 1;
        c.bf16_arith = bits & 2;
        c.storage16 = bits & 4;
        c.subgroup_arith = bits & 8;
        c.subgroup_shuffle = bits & 16;
        c.atomic_f32_add = bits & 32;
        if (bits & 64) c.n_mma = 0;
        for (size_t i = 0; i < N_CASES; i++) {
            ir_kernel *k = build_checked(&cases[i]);
            spv_module m;
            char err[512] = "";
            char what[96];
            snprintf(what, sizeof what, "%s with flags 0x%02x", cases[i].name, bits);
            if (spv_emit(k, &c, &m, err, sizeof err) == 0) {
                tu_spv_validate(&m, what);
                ok++;
            } else {
                cr_expect(strstr(err, "caps.") && strstr(err, cases[i].name), "%s: unclear refusal '%s'", what, err);
                refused++;
            }
            spv_module_free(&m);
            ir_kernel_destroy(k);
        }
    }
    fprintf(stderr, "spirv caps combinations: %d modules validated, %d refusals\n", ok, refused);
}

Test(spirv, deterministic) {
    for (int which = 0; which < N_CAPS; which++) {
        rt_caps c;
        caps_fill(&c, which);
        for (size_t i = 0; i < N_CASES; i++) {
            if (cases[i].expect[which]) continue;
            ir_kernel *k1 = build_checked(&cases[i]), *k2 = build_checked(&cases[i]);
            spv_module a, b, a2;
            char err[256];
            cr_assert_eq(spv_emit(k1, &c, &a, err, sizeof err), 0, "%s", err);
            cr_assert_eq(spv_emit(k2, &c, &b, err, sizeof err), 0, "%s", err);
            cr_assert_eq(spv_emit(k1, &c, &a2, err, sizeof err), 0, "%s", err);
            cr_assert_eq(a.n, b.n, "%s on %s: %zu vs %zu words", cases[i].name, caps_name[which], a.n, b.n);
            cr_assert(!memcmp(a.words, b.words, a.n * 4), "%s on %s differs between builds", cases[i].name, caps_name[which]);
            cr_assert(a.n == a2.n && !memcmp(a.words, a2.words, a.n * 4));
            spv_module_free(&a);
            spv_module_free(&b);
            spv_module_free(&a2);
            ir_kernel_destroy(k1);
            ir_kernel_destroy(k2);
        }
    }
}

/* ---- refusals -------------------------------------------------------------------------------- */

static void expect_refusal(ir_kernel *k, const rt_caps *c, const char *part) {
    spv_module m = {0};
    char err[512] = "";
    cr_assert_str_empty(ir_kernel_error(k), "builder: %s", ir_kernel_error(k));
    cr_expect_neq(spv_emit(k, c, &m, err, sizeof err), 0, "expected a refusal with '%s'", part);
    cr_expect(strstr(err, part), "'%s' lacks '%s'", err, part);
    cr_expect(!m.words && !m.n);
    ir_kernel_destroy(k);
}

Test(spirv, refuses_fragment_without_coopmat) {
    rt_caps c;
    caps_fill(&c, CAPS_LAVAPIPE);
    expect_refusal(k_frag_f16(), &c, "matrix fragments need cooperative matrices (caps.n_mma is 0)");
}

Test(spirv, refuses_fragment_shape_not_offered) {
    rt_caps c;
    caps_fill(&c, CAPS_H200);
    expect_refusal(frag_kernel("frag32", IR_F16, IR_F32, 32, 32, 16), &c, "not one of the device's cooperative-matrix shapes");
    c.n_mma = 3; /* f16 accumulators only */
    expect_refusal(k_frag_f16(), &c, "fragment ACC f32 16x16x16");
    caps_fill(&c, CAPS_H200);
    c.bf16_arith = false;
    expect_refusal(k_frag_bf16(), &c, "bf16 fragments need VK_KHR_shader_bfloat16 (caps.bf16_arith is false)");
    caps_fill(&c, CAPS_H200);
    c.f16_arith = false;
    expect_refusal(k_frag_f16(), &c, "f16");
}

Test(spirv, refuses_f16_without_caps) {
    rt_caps c;
    caps_fill(&c, CAPS_MIN);
    expect_refusal(k_arith_f16(), &c, "buffer 'io' holds f16: 16-bit buffers need caps.storage16 (a 32-bit packing fallback is not written yet)");
    c.storage16 = true;
    expect_refusal(k_arith_f16(), &c, "f16 arithmetic needs caps.f16_arith");
    /* f16 arithmetic on register values only */
    ir_kernel *k = ir_kernel_create("f16_regs");
    ir_buf o = ir_param_buffer(k, "o", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 1, 1, 1);
    ir_val h = ir_convert(k, CF(1), TS(F16));
    ir_store(k, o, CU(0), ir_convert(k, BIN(ADD, h, h), TS(F32)));
    expect_refusal(k, &c, "%"); /* names the instruction */
}

Test(spirv, refuses_subgroup_and_atomics_without_caps) {
    rt_caps c;
    caps_fill(&c, CAPS_LAVAPIPE);
    c.subgroup_arith = false;
    expect_refusal(k_subgroup(), &c, "subgroup reduce needs caps.subgroup_arith");
    caps_fill(&c, CAPS_LAVAPIPE);
    ir_kernel *k = ir_kernel_create("shuf");
    ir_buf o = ir_param_buffer(k, "o", IR_F32, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 8, 1, 1);
    ir_store(k, o, GID, ir_sg_shuffle(k, ir_load(k, o, GID, 1), CU(0)));
    c.subgroup_shuffle = false;
    expect_refusal(k, &c, "caps.subgroup_shuffle");
    caps_fill(&c, CAPS_H200);
    k = ir_kernel_create("shm_fadd");
    ir_shm s = ir_shared_array(k, "s", IR_F32, 4);
    ir_set_workgroup(k, 8, 1, 1);
    ir_atomic(k, IR_ATOMIC_ADD, true, s, CU(0), CF(1));
    expect_refusal(k, &c, "f32 atomic add on workgroup memory");
}

Test(spirv, refuses_limits) {
    rt_caps c;
    caps_fill(&c, CAPS_MIN);
    ir_kernel *k = ir_kernel_create("big_wg");
    ir_set_workgroup(k, 256, 1, 1);
    expect_refusal(k, &c, "caps.max_workgroup is 128");
    k = ir_kernel_create("big_shm");
    ir_shared_array(k, "s", IR_F16, 6000); /* 12 KB as f16, 24 KB in f32 registers' width */
    ir_set_workgroup(k, 64, 1, 1);
    expect_refusal(k, &c, "caps.shared_bytes is 16384");
    k = ir_kernel_create("many_scalars");
    char nm[16];
    for (int i = 0; i < 33; i++) {
        snprintf(nm, sizeof nm, "p%d", i);
        ir_param_scalar(k, nm, IR_U32);
    }
    ir_set_workgroup(k, 1, 1, 1);
    expect_refusal(k, &c, "push constants hold 128 bytes");
}

Test(spirv, refuses_unverified_kernel_and_null) {
    rt_caps c;
    caps_fill(&c, CAPS_LAVAPIPE);
    ir_kernel *k = ir_kernel_create("open_for");
    ir_buf o = ir_param_buffer(k, "o", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 1, 1, 1);
    ir_for *f = ir_for_begin(k, CU(0), CU(4), CU(1), 0, NULL);
    ir_store(k, o, ir_for_iv(f), CF(1)); /* never closed */
    spv_module m = {0};
    char err[512];
    cr_expect_neq(spv_emit(k, &c, &m, err, sizeof err), 0);
    cr_expect(strstr(err, "does not verify"), "%s", err);
    ir_kernel_destroy(k);
    cr_expect_neq(spv_emit(NULL, &c, &m, err, sizeof err), 0);
    cr_expect_neq(spv_emit(NULL, NULL, &m, NULL, 0), 0);
    cr_expect_neq(spv_validate(&m, err, sizeof err), 0);
    cr_expect_null(spv_disassemble(&m));
    uint32_t junk[6] = {0x07230203, 0x00010600, 0, 10, 0, 0xdeadbeef};
    spv_module bad = {junk, 6};
    cr_expect_neq(spv_validate(&bad, err, sizeof err), 0);
    cr_expect(strstr(err, "spirv-val"), "%s", err);
    spv_module_free(NULL);
}

/* Structure of the module: what the interface promises (bindings, push constants,
 * spec ids, LocalSizeId, bf16 as 16-bit ints). */
Test(spirv, interface_layout) {
    rt_caps c;
    caps_fill(&c, CAPS_LAVAPIPE);
    ir_kernel *k = k_spec();
    spv_module m;
    char err[512];
    cr_assert_eq(spv_emit(k, &c, &m, err, sizeof err), 0, "%s", err);
    char *t = spv_disassemble(&m);
    cr_assert(t);
    cr_expect(strstr(t, "OpExecutionModeId %main LocalSizeId %WG %uint_1 %uint_1"), "%s", t);
    cr_expect(strstr(t, "OpDecorate %WG SpecId 0"));
    cr_expect(strstr(t, "OpDecorate %SCALAR SpecId 3") || strstr(t, "OpDecorate %SCALE SpecId 3"));
    cr_expect(strstr(t, "%WG = OpSpecConstant %uint 64"), "%s", t);
    cr_expect(strstr(t, "%FLAG = OpSpecConstantTrue %bool"));
    cr_expect(strstr(t, "%FLAG0 = OpSpecConstantFalse %bool"));
    cr_expect(strstr(t, "%OFF = OpSpecConstant %int -3"));
    free(t);
    spv_module_free(&m);
    ir_kernel_destroy(k);

    k = k_push();
    cr_assert_eq(spv_emit(k, &c, &m, err, sizeof err), 0, "%s", err);
    t = spv_disassemble(&m);
    cr_assert(t);
    cr_expect(strstr(t, "OpMemberDecorate %Params 0 Offset 0"));
    cr_expect(strstr(t, "OpMemberDecorate %Params 1 Offset 4"));
    cr_expect(strstr(t, "OpMemberDecorate %Params 2 Offset 8"));
    cr_expect(strstr(t, "%Params = OpTypeStruct %float %int %uint"), "%s", t);
    cr_expect(strstr(t, "OpDecorate %out2 Binding 1"), "%s", t);
    cr_expect(strstr(t, "OpDecorate %out2 NonReadable"));
    cr_expect(strstr(t, "OpExecutionMode %main LocalSize 8 8 1"));
    free(t);
    spv_module_free(&m);
    ir_kernel_destroy(k);

    k = k_atomic();
    cr_assert_eq(spv_emit(k, &c, &m, err, sizeof err), 0, "%s", err);
    t = spv_disassemble(&m);
    cr_assert(t);
    cr_expect(strstr(t, "OpAtomicExchange %uint"), "f32 exchange moves bits");
    cr_expect(!strstr(t, "OpAtomicExchange %float"));
    cr_expect(strstr(t, "OpDecorate %f_bits Aliased"));
    cr_expect(strstr(t, "OpDecorate %f_bits Binding 2"));
    free(t);
    spv_module_free(&m);
    ir_kernel_destroy(k);

    k = k_memory16();
    cr_assert_eq(spv_emit(k, &c, &m, err, sizeof err), 0, "%s", err);
    t = spv_disassemble(&m);
    cr_assert(t);
    cr_expect(strstr(t, "OpTypeRuntimeArray %ushort"), "bf16 is stored as u16");
    cr_expect(strstr(t, "OpDecorate %b_v4 Aliased"), "views of a written buffer are Aliased");
    cr_expect(strstr(t, "OpCapability StorageBuffer16BitAccess"));
    cr_expect(!strstr(t, "OpCapability Int16"));
    free(t);
    spv_module_free(&m);
    ir_kernel_destroy(k);
}

/* ---- a minimal Vulkan harness: run emitted kernels on the first device -------------------------- */

typedef VkResult(VKAPI_PTR *vkh_get_coopmat_fn)(VkPhysicalDevice, uint32_t *, vkp_coopmat_props *);

typedef struct vkh {
    VkInstance inst;
    VkPhysicalDevice pd;
    VkDevice dev;
    VkQueue q;
    VkCommandPool pool;
    VkPhysicalDeviceMemoryProperties mem;
    rt_caps caps;
    char name[256];
} vkh;

typedef struct vkbuf {
    VkBuffer b;
    VkDeviceMemory m;
    void *p;
    size_t n;
} vkbuf;

static bool has_ext(const VkExtensionProperties *e, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (!strcmp(e[i].extensionName, name)) return true;
    return false;
}

/* Opens the first Vulkan 1.3 device with a compute queue; false when there is none. */
static bool vkh_open(vkh *h) {
    memset(h, 0, sizeof *h);
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "kiln-test-spirv",
                             .apiVersion = VK_API_VERSION_1_3};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    if (vkCreateInstance(&ici, NULL, &h->inst) != VK_SUCCESS) return false;
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(h->inst, &n, NULL);
    VkPhysicalDevice pds[16];
    if (n > 16) n = 16;
    if (!n || vkEnumeratePhysicalDevices(h->inst, &n, pds) < 0) return false;
    uint32_t qf = UINT32_MAX;
    for (uint32_t i = 0; i < n && qf == UINT32_MAX; i++) {
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(pds[i], &p);
        if (p.apiVersion < VK_API_VERSION_1_3) continue;
        uint32_t nq = 0;
        vkGetPhysicalDeviceQueueFamilyProperties(pds[i], &nq, NULL);
        VkQueueFamilyProperties qp[32];
        if (nq > 32) nq = 32;
        vkGetPhysicalDeviceQueueFamilyProperties(pds[i], &nq, qp);
        for (uint32_t j = 0; j < nq; j++)
            if (qp[j].queueFlags & VK_QUEUE_COMPUTE_BIT) {
                qf = j;
                h->pd = pds[i];
                snprintf(h->name, sizeof h->name, "%s", p.deviceName);
                break;
            }
    }
    if (qf == UINT32_MAX) return false;
    vkGetPhysicalDeviceMemoryProperties(h->pd, &h->mem);

    /* what the device offers, as caps, and the features to enable for it */
    VkPhysicalDeviceVulkan11Properties p11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &p11};
    vkGetPhysicalDeviceProperties2(h->pd, &p2);
    uint32_t next = 0;
    vkEnumerateDeviceExtensionProperties(h->pd, NULL, &next, NULL);
    VkExtensionProperties *ext = calloc(next ? next : 1, sizeof *ext);
    if (!ext) return false;
    vkEnumerateDeviceExtensionProperties(h->pd, NULL, &next, ext);
    bool coop = has_ext(ext, next, "VK_KHR_cooperative_matrix"), bf16 = has_ext(ext, next, "VK_KHR_shader_bfloat16");
    free(ext);

    vkp_bf16_features fb = {.sType = VKP_STYPE_BF16_FEATURES};
    vkp_coopmat_features fc = {.sType = VKP_STYPE_COOPMAT_FEATURES, .pNext = bf16 ? &fb : NULL};
    VkPhysicalDeviceVulkan13Features f13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
                                            .pNext = coop ? (void *)&fc : bf16 ? (void *)&fb : NULL};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &f13};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &f12};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    vkGetPhysicalDeviceFeatures2(h->pd, &f2);

    rt_caps *c = &h->caps;
    c->backend = RT_VULKAN;
    c->subgroup_size = c->subgroup_min = c->subgroup_max = p11.subgroupSize;
    bool cs = p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT;
    c->subgroup_arith = cs && (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    c->subgroup_shuffle = cs && (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) &&
                          (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT);
    c->f16_arith = f12.shaderFloat16;
    c->storage16 = f11.storageBuffer16BitAccess;
    c->shared_bytes = p2.properties.limits.maxComputeSharedMemorySize;
    c->max_workgroup = p2.properties.limits.maxComputeWorkGroupInvocations;
    if (coop && fc.cooperativeMatrix) {
        vkh_get_coopmat_fn get = (vkh_get_coopmat_fn)vkGetInstanceProcAddr(h->inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
        uint32_t np = 0;
        vkp_coopmat_props props[64];
        if (get && get(h->pd, &np, NULL) == VK_SUCCESS) {
            if (np > 64) np = 64;
            for (uint32_t i = 0; i < np; i++) props[i] = (vkp_coopmat_props){.sType = VKP_STYPE_COOPMAT_PROPERTIES};
            get(h->pd, &np, props);
            for (uint32_t i = 0; i < np && c->n_mma < RT_MAX_MMA_SHAPES; i++) {
                const vkp_coopmat_props *p = &props[i];
                int ab = p->AType == 0 ? IR_F16 : p->AType == 1000141000 ? IR_BF16 : -1; /* VkComponentTypeKHR */
                int acc = p->CType == 0 ? IR_F16 : p->CType == 1 ? IR_F32 : -1;
                if (p->scope != 3 || ab < 0 || acc < 0 || p->AType != p->BType || p->CType != p->ResultType) continue;
                if (ab == IR_BF16 && !(bf16 && fb.shaderBFloat16CooperativeMatrix)) continue;
                c->mma[c->n_mma++] = (rt_mma_shape){p->MSize, p->NSize, p->KSize, (uint32_t)ab, (uint32_t)acc};
            }
        }
    }
    c->bf16_arith = bf16 && fb.shaderBFloat16Type;

    /* enable only what the emitted kernels may use */
    VkPhysicalDeviceFeatures2 e2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    VkPhysicalDeviceVulkan11Features e11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features e12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan13Features e13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    vkp_coopmat_features ec = {.sType = VKP_STYPE_COOPMAT_FEATURES, .cooperativeMatrix = c->n_mma > 0};
    vkp_bf16_features eb = {.sType = VKP_STYPE_BF16_FEATURES, .shaderBFloat16Type = c->bf16_arith,
                            .shaderBFloat16CooperativeMatrix = c->bf16_arith && fb.shaderBFloat16CooperativeMatrix};
    e2.pNext = &e11;
    e11.pNext = &e12;
    e12.pNext = &e13;
    void **tail = &e13.pNext;
    const char *exts[2];
    uint32_t n_ext = 0;
    if (c->n_mma) {
        *tail = &ec;
        tail = &ec.pNext;
        exts[n_ext++] = "VK_KHR_cooperative_matrix";
    }
    if (c->bf16_arith) {
        *tail = &eb;
        exts[n_ext++] = "VK_KHR_shader_bfloat16";
    }
    e2.features.shaderInt64 = f2.features.shaderInt64;
    e11.storageBuffer16BitAccess = f11.storageBuffer16BitAccess;
    e12.shaderFloat16 = f12.shaderFloat16;
    e12.vulkanMemoryModel = f12.vulkanMemoryModel;
    e13.maintenance4 = f13.maintenance4; /* LocalSizeId */
    float prio = 1;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = qf,
                                   .queueCount = 1, .pQueuePriorities = &prio};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &e2, .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci, .enabledExtensionCount = n_ext, .ppEnabledExtensionNames = exts};
    if (vkCreateDevice(h->pd, &dci, NULL, &h->dev) != VK_SUCCESS) return false;
    vkGetDeviceQueue(h->dev, qf, 0, &h->q);
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = qf};
    return vkCreateCommandPool(h->dev, &pci, NULL, &h->pool) == VK_SUCCESS;
}

static void vkh_close(vkh *h) {
    if (h->dev) {
        vkDeviceWaitIdle(h->dev);
        if (h->pool) vkDestroyCommandPool(h->dev, h->pool, NULL);
        vkDestroyDevice(h->dev, NULL);
    }
    if (h->inst) vkDestroyInstance(h->inst, NULL);
    memset(h, 0, sizeof *h);
}

/* The test's precondition: a device, or the test is skipped (by name). */
static void vkh_require(vkh *h) {
    if (!vkh_open(h)) {
        vkh_close(h);
        cr_skip_test("no Vulkan 1.3 device with a compute queue");
    }
    cr_log_info("vulkan device: %s", h->name);
}

static void vkbuf_make(vkh *h, vkbuf *b, size_t bytes) {
    memset(b, 0, sizeof *b);
    b->n = bytes;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = bytes,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT};
    cr_assert_eq(vkCreateBuffer(h->dev, &bci, NULL, &b->b), VK_SUCCESS);
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(h->dev, b->b, &req);
    uint32_t want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, type = UINT32_MAX;
    for (uint32_t i = 0; i < h->mem.memoryTypeCount && type == UINT32_MAX; i++)
        if ((req.memoryTypeBits & (1u << i)) && (h->mem.memoryTypes[i].propertyFlags & want) == want) type = i;
    cr_assert_neq(type, UINT32_MAX, "no host-visible memory");
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size, .memoryTypeIndex = type};
    cr_assert_eq(vkAllocateMemory(h->dev, &mai, NULL, &b->m), VK_SUCCESS);
    cr_assert_eq(vkBindBufferMemory(h->dev, b->b, b->m, 0), VK_SUCCESS);
    cr_assert_eq(vkMapMemory(h->dev, b->m, 0, VK_WHOLE_SIZE, 0, &b->p), VK_SUCCESS);
}

static void vkbuf_free(vkh *h, vkbuf *b) {
    if (b->m) vkFreeMemory(h->dev, b->m, NULL);
    if (b->b) vkDestroyBuffer(h->dev, b->b, NULL);
    memset(b, 0, sizeof *b);
}

/* Creates the pipeline from m (spec constants: spec[i] as 4 bytes each for SpecId i),
 * binds bufs at bindings 0.., pushes pc, dispatches groups x 1 x 1 and waits. */
static void vkh_run(vkh *h, const spv_module *m, vkbuf *bufs, uint32_t nbuf, const void *pc, uint32_t pc_bytes,
                    const uint32_t *spec, uint32_t nspec, uint32_t groups) {
    VkDevice d = h->dev;
    VkShaderModuleCreateInfo smci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = m->n * 4, .pCode = m->words};
    VkShaderModule sm;
    cr_assert_eq(vkCreateShaderModule(d, &smci, NULL, &sm), VK_SUCCESS);
    VkDescriptorSetLayoutBinding lb[8];
    for (uint32_t i = 0; i < nbuf; i++)
        lb[i] = (VkDescriptorSetLayoutBinding){.binding = i, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                               .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dslci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = nbuf, .pBindings = lb};
    VkDescriptorSetLayout dsl;
    cr_assert_eq(vkCreateDescriptorSetLayout(d, &dslci, NULL, &dsl), VK_SUCCESS);
    VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = 128};
    VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                       .pSetLayouts = &dsl, .pushConstantRangeCount = 1, .pPushConstantRanges = &pcr};
    VkPipelineLayout pl;
    cr_assert_eq(vkCreatePipelineLayout(d, &plci, NULL, &pl), VK_SUCCESS);
    VkSpecializationMapEntry me[8];
    for (uint32_t i = 0; i < nspec; i++) me[i] = (VkSpecializationMapEntry){.constantID = i, .offset = 4 * i, .size = 4};
    VkSpecializationInfo si = {.mapEntryCount = nspec, .pMapEntries = me, .dataSize = 4 * nspec, .pData = spec};
    VkComputePipelineCreateInfo cpci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = sm, .pName = "main", .pSpecializationInfo = nspec ? &si : NULL},
        .layout = pl};
    VkPipeline pipe;
    cr_assert_eq(vkCreateComputePipelines(d, VK_NULL_HANDLE, 1, &cpci, NULL, &pipe), VK_SUCCESS);
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, nbuf};
    VkDescriptorPoolCreateInfo dpci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = 1, .poolSizeCount = 1, .pPoolSizes = &ps};
    VkDescriptorPool dp;
    cr_assert_eq(vkCreateDescriptorPool(d, &dpci, NULL, &dp), VK_SUCCESS);
    VkDescriptorSetAllocateInfo dsai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, .descriptorPool = dp,
                                        .descriptorSetCount = 1, .pSetLayouts = &dsl};
    VkDescriptorSet ds;
    cr_assert_eq(vkAllocateDescriptorSets(d, &dsai, &ds), VK_SUCCESS);
    VkDescriptorBufferInfo dbi[8];
    VkWriteDescriptorSet w[8];
    for (uint32_t i = 0; i < nbuf; i++) {
        dbi[i] = (VkDescriptorBufferInfo){bufs[i].b, 0, VK_WHOLE_SIZE};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = ds, .dstBinding = i,
                                      .descriptorCount = 1, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &dbi[i]};
    }
    vkUpdateDescriptorSets(d, nbuf, w, 0, NULL);
    VkCommandBufferAllocateInfo cbai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = h->pool,
                                        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    VkCommandBuffer cb;
    cr_assert_eq(vkAllocateCommandBuffers(d, &cbai, &cb), VK_SUCCESS);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    vkBeginCommandBuffer(cb, &bi);
    vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &ds, 0, NULL);
    uint8_t pcb[128] = {0};
    if (pc_bytes) memcpy(pcb, pc, pc_bytes);
    vkCmdPushConstants(cb, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, 128, pcb);
    vkCmdDispatch(cb, groups, 1, 1);
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    vkEndCommandBuffer(cb);
    VkSubmitInfo sub = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
    cr_assert_eq(vkQueueSubmit(h->q, 1, &sub, VK_NULL_HANDLE), VK_SUCCESS);
    cr_assert_eq(vkQueueWaitIdle(h->q), VK_SUCCESS);
    vkFreeCommandBuffers(d, h->pool, 1, &cb);
    vkDestroyDescriptorPool(d, dp, NULL);
    vkDestroyPipeline(d, pipe, NULL);
    vkDestroyPipelineLayout(d, pl, NULL);
    vkDestroyDescriptorSetLayout(d, dsl, NULL);
    vkDestroyShaderModule(d, sm, NULL);
}

/* Every kernel of the matrix the device's caps allow, emitted for those caps and compiled
 * by the driver (vkCreateComputePipelines), not run. */
Test(spirv_vk, pipelines_compile) {
    vkh h;
    vkh_require(&h);
    int built = 0, refused = 0;
    for (size_t i = 0; i < N_CASES; i++) {
        ir_kernel *k = build_checked(&cases[i]);
        spv_module m;
        char err[512];
        if (spv_emit(k, &h.caps, &m, err, sizeof err)) {
            cr_log_info("%s: refused for this device: %s", cases[i].name, err);
            refused++;
            ir_kernel_destroy(k);
            continue;
        }
        tu_spv_validate(&m, cases[i].name);
        VkShaderModuleCreateInfo smci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = m.n * 4, .pCode = m.words};
        VkShaderModule sm;
        cr_assert_eq(vkCreateShaderModule(h.dev, &smci, NULL, &sm), VK_SUCCESS, "%s", cases[i].name);
        VkDescriptorSetLayoutBinding lb[8];
        uint32_t nb = ir_n_buffers(k);
        for (uint32_t j = 0; j < nb; j++)
            lb[j] = (VkDescriptorSetLayoutBinding){.binding = j, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                   .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
        VkDescriptorSetLayoutCreateInfo dslci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = nb, .pBindings = lb};
        VkDescriptorSetLayout dsl;
        cr_assert_eq(vkCreateDescriptorSetLayout(h.dev, &dslci, NULL, &dsl), VK_SUCCESS);
        VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = 128};
        VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                           .pSetLayouts = &dsl, .pushConstantRangeCount = 1, .pPushConstantRanges = &pcr};
        VkPipelineLayout pl;
        cr_assert_eq(vkCreatePipelineLayout(h.dev, &plci, NULL, &pl), VK_SUCCESS);
        VkComputePipelineCreateInfo cpci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                      .module = sm, .pName = "main"},
            .layout = pl};
        VkPipeline pipe;
        cr_expect_eq(vkCreateComputePipelines(h.dev, VK_NULL_HANDLE, 1, &cpci, NULL, &pipe), VK_SUCCESS,
                     "%s: the driver refused the pipeline", cases[i].name);
        vkDestroyPipeline(h.dev, pipe, NULL);
        vkDestroyPipelineLayout(h.dev, pl, NULL);
        vkDestroyDescriptorSetLayout(h.dev, dsl, NULL);
        vkDestroyShaderModule(h.dev, sm, NULL);
        built++;
        spv_module_free(&m);
        ir_kernel_destroy(k);
    }
    fprintf(stderr, "spirv on %s: %d pipelines compiled, %d kernels refused for its caps\n", h.name, built, refused);
    vkh_close(&h);
}

static void emit_for(vkh *h, ir_kernel *k, const rt_caps *c, spv_module *m) {
    char err[512];
    cr_assert_str_empty(ir_kernel_error(k), "builder: %s", ir_kernel_error(k));
    cr_assert_eq(spv_emit(k, c ? c : &h->caps, m, err, sizeof err), 0, "%s", err);
    tu_spv_validate(m, ir_kernel_name(k));
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Reference conversions, as gguf/half.h: round to nearest even, NaN kept (quieted). */
static uint16_t ref_bf16(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float ref_f16_value(float f) { /* nearest f16, as a float (via a double: exact) */
    if (isnan(f)) return f;
    double a = fabs((double)f);
    if (a >= 65520.0) return copysignf(INFINITY, f);
    int e;
    frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    int q = e - 11 < -24 ? -24 : e - 11; /* the quantum's exponent */
    double r = nearbyint(ldexp(a, -q)) * ldexp(1.0, q);
    return copysignf((float)r, f);
}

static uint16_t ref_f16(float f) { /* the f16 bits of f, rounded to nearest even */
    float r = ref_f16_value(f);
    uint32_t u = f2u(r), sign = (u >> 16) & 0x8000u;
    if (isnan(r)) return (uint16_t)(sign | 0x7e00u);
    float a = fabsf(r);
    if (isinf(a)) return (uint16_t)(sign | 0x7c00u);
    if (a < 6.103515625e-05f) return (uint16_t)(sign | (uint32_t)(a * 16777216.0f)); /* subnormal: units of 2^-24 */
    return (uint16_t)(sign | ((((u >> 23) & 0xffu) - 112u) << 10) | ((u >> 13) & 0x3ffu));
}

static float tricky_f32[] = {0.0f, -0.0f, 1.0f, -1.0f, 1.00390625f /* tie 0x3f808000 */, 1.01171875f /* 0x3f818000 */,
                             3.14159265f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f, 6.1e-5f, 1e30f,
                             -1e-40f, 3.0e38f, 0.333333343f, 2049.0f, 2051.0f, 1e5f};

static void fill_inputs(float *x, uint32_t n) {
    uint32_t nt = sizeof tricky_f32 / sizeof *tricky_f32;
    uint32_t s = 12345;
    for (uint32_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        if (i < nt) x[i] = tricky_f32[i];
        else if (i == nt) x[i] = INFINITY;
        else if (i == nt + 1) x[i] = -INFINITY;
        else if (i == nt + 2) x[i] = u2f(0x7fa00001u); /* signaling NaN */
        else if (i == nt + 3) x[i] = u2f(0xffc00000u);
        else if (i % 3 == 0) x[i] = u2f((s & 0xffff0000u) | 0x8000u | ((s >> 7) & 0x10000u)); /* bf16 ties */
        else if (i % 3 == 1) x[i] = u2f(((0x33000000u + s % 0x14800000u) & ~0x1fffu) | 0x1000u | (s & 0x80000000u)); /* f16 ties, subnormals */
        else x[i] = u2f(s);
    }
}

Test(spirv_vk, vector_add) {
    vkh h;
    vkh_require(&h);
    ir_kernel *k = ir_kernel_create("vadd");
    ir_buf a = ir_param_buffer(k, "a", IR_F32, IR_READ);
    ir_buf b = ir_param_buffer(k, "b", IR_F32, IR_READ);
    ir_buf c = ir_param_buffer(k, "c", IR_F32, IR_WRITE);
    ir_val n = ir_param_scalar(k, "n", IR_U32);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i = ir_id(k, IR_ID_GLOBAL, 0);
    ir_val s = BIN(ADD, ir_load_masked(k, a, i, 1, n, CF(0)), ir_load_masked(k, b, i, 1, n, CF(0)));
    ir_store_masked(k, c, i, s, n);
    spv_module m;
    emit_for(&h, k, NULL, &m);
    const uint32_t N = 1000, CAP = 1024 + 64; /* a poisoned guard past n */
    vkbuf bufs[3];
    for (int j = 0; j < 3; j++) vkbuf_make(&h, &bufs[j], CAP * 4);
    float *pa = bufs[0].p, *pb = bufs[1].p;
    uint32_t *pc = bufs[2].p;
    for (uint32_t j = 0; j < CAP; j++) {
        pa[j] = (float)j * 0.5f;
        pb[j] = 1000.0f - (float)j;
        pc[j] = 0xdeadbeefu;
    }
    vkh_run(&h, &m, bufs, 3, &N, 4, NULL, 0, (N + 63) / 64 + 1);
    for (uint32_t j = 0; j < N; j++) cr_assert_eq(u2f(pc[j]), pa[j] + pb[j], "c[%u]", j);
    for (uint32_t j = N; j < CAP; j++) cr_assert_eq(pc[j], 0xdeadbeefu, "c[%u] written past n", j);
    for (int j = 0; j < 3; j++) vkbuf_free(&h, &bufs[j]);
    spv_module_free(&m);
    ir_kernel_destroy(k);
    vkh_close(&h);
}

/* f32 -> 16-bit stored, and back to f32; lanes of 4 with a masked tail. */
static ir_kernel *k_round_trip(ir_scalar s) {
    ir_kernel *k = ir_kernel_create(s == IR_BF16 ? "to_bf16" : "to_f16");
    ir_buf in = ir_param_buffer(k, "in", IR_F32, IR_READ);
    ir_buf h = ir_param_buffer(k, "h", s, IR_WRITE);
    ir_buf back = ir_param_buffer(k, "back", IR_F32, IR_WRITE);
    ir_val n = ir_param_scalar(k, "n", IR_U32);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i = BIN(MUL, GID, CU(4));
    ir_val x = ir_load_masked(k, in, i, 4, n, CF(0));
    ir_val y = ir_convert(k, x, ir_t_vector(k, s, 4));
    ir_store_masked(k, h, i, y, n);
    ir_store_masked(k, back, i, ir_convert(k, y, TV(F32, 4)), n);
    return k;
}

static void check_round_trip(vkh *h, ir_scalar s, const rt_caps *c, const char *label) {
    ir_kernel *k = k_round_trip(s);
    spv_module m;
    emit_for(h, k, c, &m);
    const uint32_t N = 4093, CAP = 4096 + 16;
    vkbuf bufs[3];
    vkbuf_make(h, &bufs[0], CAP * 4);
    vkbuf_make(h, &bufs[1], CAP * 2);
    vkbuf_make(h, &bufs[2], CAP * 4);
    float *in = bufs[0].p;
    uint16_t *hb = bufs[1].p;
    uint32_t *back = bufs[2].p;
    fill_inputs(in, CAP);
    memset(hb, 0xee, CAP * 2);
    memset(back, 0xee, CAP * 4);
    vkh_run(h, &m, bufs, 3, &N, 4, NULL, 0, (N + 255) / 256);
    int bad = 0;
    for (uint32_t j = 0; j < N && bad < 10; j++) {
        if (s == IR_BF16) {
            uint16_t want = ref_bf16(in[j]);
            if (hb[j] != want || back[j] != (uint32_t)want << 16) {
                cr_log_error("%s: bf16 of %a (0x%08x): got 0x%04x / 0x%08x, want 0x%04x", label, in[j], f2u(in[j]), hb[j], back[j], want);
                bad++;
            }
        } else {
            float want = ref_f16_value(in[j]);
            float got = u2f(back[j]);
            uint16_t wbits = ref_f16(in[j]);
            bool same = isnan(want) ? isnan(got) && (hb[j] & 0x7fffu) > 0x7c00u : f2u(got) == f2u(want) && hb[j] == wbits;
            /* devices may flush f16 subnormals: accept a signed zero for those */
            if (!same && !isnan(want) && fabsf(want) < 6.103515625e-05f && got == 0.0f && (hb[j] & 0x7fffu) == 0) same = true;
            if (!same) {
                cr_log_error("%s: f16 of %a (0x%08x): got %a (0x%04x), want %a (0x%04x)", label, in[j], f2u(in[j]), got,
                             hb[j], want, wbits);
                bad++;
            }
        }
    }
    for (uint32_t j = N; j < CAP; j++) cr_assert(hb[j] == 0xeeee && back[j] == 0xeeeeeeeeu, "written past n at %u", j);
    cr_expect_eq(bad, 0, "%s (%s): %d mismatches", ir_kernel_name(k), label, bad);
    for (int j = 0; j < 3; j++) vkbuf_free(h, &bufs[j]);
    spv_module_free(&m);
    ir_kernel_destroy(k);
}

Test(spirv_vk, f32_to_bf16_rne) {
    vkh h;
    vkh_require(&h);
    if (!h.caps.storage16) {
        vkh_close(&h);
        cr_skip_test("device lacks storageBuffer16BitAccess");
    }
    check_round_trip(&h, IR_BF16, NULL, "bf16 as u16");
    vkh_close(&h);
}

Test(spirv_vk, f32_to_f16_rne) {
    vkh h;
    vkh_require(&h);
    if (!h.caps.storage16) {
        vkh_close(&h);
        cr_skip_test("device lacks storageBuffer16BitAccess");
    }
    check_round_trip(&h, IR_F16, NULL, h.caps.f16_arith ? "native f16" : "f16 in f32 registers"); /* native where offered */
    rt_caps c = h.caps;
    c.f16_arith = false; /* f16 in f32 registers: the emitter's own rounding */
    check_round_trip(&h, IR_F16, &c, "f16 in f32 registers");
    vkh_close(&h);
}

/* A workgroup sum: a loop with a carried value, subgroup reduce, workgroup memory and a
 * barrier, an if, a dynamic loop bound from the subgroup size. */
Test(spirv_vk, workgroup_sum) {
    vkh h;
    vkh_require(&h);
    if (!h.caps.subgroup_arith) {
        vkh_close(&h);
        cr_skip_test("device lacks subgroup arithmetic");
    }
    ir_kernel *k = ir_kernel_create("wgsum");
    ir_buf in = ir_param_buffer(k, "in", IR_F32, IR_READ);
    ir_buf out = ir_param_buffer(k, "out", IR_F32, IR_WRITE);
    ir_val n = ir_param_scalar(k, "n", IR_U32);
    ir_val wgs = ir_spec_const(k, "WG", IR_U32, 64);
    ir_set_workgroup_spec(k, wgs);
    ir_shm part = ir_shared_array(k, "part", IR_F32, 256);
    ir_val l = ir_id(k, IR_ID_LOCAL, 0), g = ir_id(k, IR_ID_GROUP, 0);
    ir_val base = BIN(MUL, BIN(ADD, BIN(MUL, g, wgs), l), CU(8));
    ir_val z[1] = {CF(0)};
    ir_for *f = ir_for_begin(k, CU(0), CU(8), CU(1), 1, z);
    ir_val y[1] = {BIN(ADD, ir_for_arg(f, 0), ir_load_masked(k, in, BIN(ADD, base, ir_for_iv(f)), 1, n, CF(0)))};
    ir_for_end(k, f, y);
    ir_val s = ir_sg_reduce(k, IR_REDUCE_ADD, ir_for_result(f, 0));
    ir_if *c = ir_if_begin(k, ir_compare(k, IR_EQ, ir_id(k, IR_ID_SG_LANE, 0), CU(0)), 0);
    ir_shm_store(k, part, ir_id(k, IR_ID_SG_ID, 0), s);
    ir_if_end(k, c, NULL);
    ir_barrier(k);
    ir_if *c0 = ir_if_begin(k, ir_compare(k, IR_EQ, l, CU(0)), 0);
    ir_val nsg = BIN(DIV, BIN(SUB, BIN(ADD, wgs, ir_id(k, IR_ID_SG_SIZE, 0)), CU(1)), ir_id(k, IR_ID_SG_SIZE, 0));
    ir_for *f2 = ir_for_begin(k, CU(0), nsg, CU(1), 1, z);
    ir_val y2[1] = {BIN(ADD, ir_for_arg(f2, 0), ir_shm_load(k, part, ir_for_iv(f2), 1))};
    ir_for_end(k, f2, y2);
    ir_store(k, out, g, ir_for_result(f2, 0));
    ir_if_end(k, c0, NULL);
    spv_module m;
    emit_for(&h, k, NULL, &m);
    const uint32_t WG = 128, N = 5000, G = (N + WG * 8 - 1) / (WG * 8);
    vkbuf bufs[2];
    vkbuf_make(&h, &bufs[0], N * 4);
    vkbuf_make(&h, &bufs[1], G * 4);
    float *pin = bufs[0].p, *pout = bufs[1].p;
    for (uint32_t j = 0; j < N; j++) pin[j] = (float)(j % 17) - 8.0f; /* exact sums */
    uint32_t spec[1] = {WG};
    vkh_run(&h, &m, bufs, 2, &N, 4, spec, 1, G);
    for (uint32_t gi = 0; gi < G; gi++) {
        float want = 0;
        for (uint32_t j = gi * WG * 8; j < (gi + 1) * WG * 8 && j < N; j++) want += pin[j];
        cr_expect_eq(pout[gi], want, "group %u: %f vs %f", gi, pout[gi], want);
    }
    for (int j = 0; j < 2; j++) vkbuf_free(&h, &bufs[j]);
    spv_module_free(&m);
    ir_kernel_destroy(k);
    vkh_close(&h);
}

static uint16_t ref_f16_bits(float f) { /* exact for the small integers used below */
    if (f == 0) return 0;
    uint32_t u = f2u(f);
    uint32_t e = ((u >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(((u >> 16) & 0x8000u) | (e << 10) | ((u >> 13) & 0x3ffu));
}

/* Cooperative matrices on a device that has them (the H200): C = sum over 4 K-blocks
 * of A_k x B (B from workgroup memory, column-major), against C. */
static void check_frag(vkh *h, ir_scalar ab) {
    const uint32_t M = 16, N = 16, K = 16;
    if (!h->caps.n_mma || !h->caps.mma[0].m) return;
    bool have = false;
    for (uint32_t i = 0; i < h->caps.n_mma; i++)
        have |= h->caps.mma[i].m == M && h->caps.mma[i].n == N && h->caps.mma[i].k == K && h->caps.mma[i].ab_type == (uint32_t)ab &&
                h->caps.mma[i].acc_type == IR_F32;
    if (!have) {
        cr_log_warn("no %s 16x16x16 cooperative matrix here", ab == IR_F16 ? "f16" : "bf16");
        return;
    }
    ir_kernel *k = frag_kernel(ab == IR_F16 ? "frag_f16" : "frag_bf16", ab, IR_F32, M, N, K);
    fprintf(stderr, "spirv on %s: running %s (16x16x16 -> f32)\n", h->name, ir_kernel_name(k));
    spv_module m;
    emit_for(h, k, NULL, &m);
    vkbuf bufs[3];
    vkbuf_make(h, &bufs[0], 4 * M * K * 2);
    vkbuf_make(h, &bufs[1], K * N * 2);
    vkbuf_make(h, &bufs[2], (M * N + 32) * 4);
    uint16_t *pa = bufs[0].p, *pb = bufs[1].p;
    float *pc = bufs[2].p;
    float A[4][16][16], B[16][16]; /* B[k][n], stored column-major: pb[n*K + k] */
    for (uint32_t t = 0; t < 4; t++)
        for (uint32_t i = 0; i < M; i++)
            for (uint32_t j = 0; j < K; j++) {
                A[t][i][j] = (float)((int)((i * 7 + j * 3 + t) % 9) - 4);
                pa[t * M * K + i * K + j] = ab == IR_F16 ? ref_f16_bits(A[t][i][j]) : ref_bf16(A[t][i][j]);
            }
    for (uint32_t kk = 0; kk < K; kk++)
        for (uint32_t j = 0; j < N; j++) {
            B[kk][j] = (float)((int)((kk * 5 + j) % 7) - 3);
            pb[j * K + kk] = ab == IR_F16 ? ref_f16_bits(B[kk][j]) : ref_bf16(B[kk][j]);
        }
    memset(pc, 0, (M * N + 32) * 4);
    vkh_run(h, &m, bufs, 3, NULL, 0, NULL, 0, 1);
    for (uint32_t i = 0; i < M; i++)
        for (uint32_t j = 0; j < N; j++) {
            float want = 0;
            for (uint32_t t = 0; t < 4; t++)
                for (uint32_t kk = 0; kk < K; kk++) want += A[t][i][kk] * B[kk][j];
            cr_expect_eq(pc[i * N + j], want, "%s C[%u][%u] = %f, want %f", ir_kernel_name(k), i, j, pc[i * N + j], want);
        }
    /* the accumulator also went column-major through workgroup memory: lane l read sc[l] */
    for (uint32_t l = 0; l < 32; l++) {
        uint32_t i = l % M, j = l / M;
        cr_expect_eq(pc[M * N + l], pc[i * N + j], "sc[%u]", l);
    }
    for (int j = 0; j < 3; j++) vkbuf_free(h, &bufs[j]);
    spv_module_free(&m);
    ir_kernel_destroy(k);
}

Test(spirv_vk, coopmat) {
    vkh h;
    vkh_require(&h);
    if (!h.caps.n_mma) {
        vkh_close(&h);
        cr_skip_test("device has no VK_KHR_cooperative_matrix shapes kiln uses");
    }
    if (h.caps.subgroup_size != 32) {
        vkh_close(&h);
        cr_skip_test("the test kernel assumes 32-lane subgroups");
    }
    check_frag(&h, IR_F16);
    if (h.caps.bf16_arith) check_frag(&h, IR_BF16);
    vkh_close(&h);
}
