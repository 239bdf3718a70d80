/* The SPIR-V tests' capability sets, kernels covering every IR op and the case matrix
 * (spirv_test.h). */
#include "base/error.h"
#include "tests/backend-spirv/spirv_test.h"

const char *const caps_name[N_CAPS] = {"lavapipe", "h200", "spec-minimum", "storage16-only"};

void caps_fill(rt_caps *c, int which) {
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

ir_kernel *k_arith_f32(void) {
    ir_kernel *k = ir_kernel_create("arith_f32");
    ir_buf in = ir_param_buffer(k, "in", IR_F32, IR_READ);
    ir_buf out = ir_param_buffer(k, "out", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i4 = BIN(MUL, GID, CU(4));
    ir_val a = ir_load(k, in, i4, 1), b = ir_load(k, in, BIN(ADD, i4, CU(1)), 1);
    const ir_op bins[] = {IR_OP_ADD, IR_OP_SUB, IR_OP_MUL, IR_OP_DIV, IR_OP_REM, IR_OP_MIN, IR_OP_MAX};
    const ir_op uns[] = {IR_OP_NEG, IR_OP_ABS, IR_OP_EXP, IR_OP_LOG, IR_OP_SQRT, IR_OP_RSQRT,
                         IR_OP_TANH, IR_OP_SIN, IR_OP_COS, IR_OP_FLOOR, IR_OP_ROUNDEVEN};
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

ir_kernel *k_arith_int(void) {
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

ir_kernel *k_arith_i64(void) {
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

ir_kernel *k_arith_f16(void) {
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

ir_kernel *k_arith_bf16(void) {
    ir_kernel *k = ir_kernel_create("arith_bf16");
    ir_buf io = ir_param_buffer(k, "io", IR_BF16, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val v = ir_load(k, io, BIN(MUL, GID, CU(4)), 4);
    ir_val w = BIN(ADD, BIN(MUL, v, v), BIN(DIV, v, BIN(SUB, v, UN(NEG, v))));
    w = BIN(MAX, UN(ABS, w), BIN(MIN, v, w));
    ir_val a = ir_extract(k, w, 0);
    a = BIN(REM, a, ir_extract(k, v, 1));
    ir_store(k, io, BIN(MUL, GID, CU(4)),
             ir_vec(k, (ir_val[]){a, ir_extract(k, w, 1), ir_extract(k, w, 2), ir_extract(k, v, 3)}, 4));
    return k;
}

/* Conversions between every allowed pair; 16-bit values only in registers. */
ir_kernel *k_convert(void) {
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

ir_kernel *k_bitcast16(void) {
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
    ir_val u = BIN(ADD, ir_bitcast(k, h2b, TS(U32)),
                   ir_bitcast(k, ir_vec(k, (ir_val[]){hb, ir_extract(k, b2, 1)}, 2), TS(U32)));
    ir_val v4 = ir_vec(k, (ir_val[]){ir_extract(k, h2, 0), ir_extract(k, h2, 1), bh, bh}, 4);
    ir_val u2 = ir_bitcast(k, v4, TV(U32, 2));
    u = BIN(ADD, u, BIN(XOR, ir_extract(k, u2, 0), ir_extract(k, u2, 1)));
    ir_store(k, out, GID, u);
    return k;
}

/* Loads and stores of 1, 2 and 4 lanes, plain and masked, for 32- and 16-bit buffers. */
void memory_body(ir_kernel *k, ir_buf b, ir_val n, ir_val fallback) {
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

ir_kernel *k_memory32(void) {
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

ir_kernel *k_memory16(void) {
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

ir_kernel *k_shared(void) {
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

ir_kernel *k_subgroup(void) {
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

ir_kernel *k_atomic(void) {
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

ir_kernel *k_atomic_fadd(void) {
    ir_kernel *k = ir_kernel_create("atomic_fadd");
    ir_buf f = ir_param_buffer(k, "f", IR_F32, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val old = ir_atomic(k, IR_ATOMIC_ADD, false, f, CU(0), CF(0.25f));
    ir_store(k, f, BIN(ADD, GID, CU(1)), old);
    return k;
}

/* for with carried values (nested, dynamic and constant bounds), if/else with results
 * (nested), if without else, loops inside ifs. */
ir_kernel *k_control(void) {
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

ir_kernel *k_spec(void) {
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

ir_kernel *k_push(void) {
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
/* aligned: A's loads by ir_frag_load_aligned (16-byte words) */
static ir_kernel *frag_kernel_of(const char *name, ir_scalar ab, ir_scalar acc, uint32_t M, uint32_t N, uint32_t K,
                                 bool aligned) {
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
    ir_val at = BIN(MUL, ir_for_iv(f), CU(M * K));
    ir_val fa = aligned ? ir_frag_load_aligned(k, ta, a, at, CU(K), true) : ir_frag_load(k, ta, false, a, at, CU(K), true);
    ir_val fb = ir_frag_load(k, tb, true, sb, CU(0), CU(K), false);
    ir_val y[1] = {ir_frag_mma(k, fa, fb, ir_for_arg(f, 0))};
    ir_for_end(k, f, y);
    ir_frag_store(k, ir_for_result(f, 0), false, c, CU(0), CU(N), true);
    ir_frag_store(k, ir_for_result(f, 0), true, sc, CU(0), CU(N), false);
    ir_barrier(k);
    ir_store(k, c, BIN(ADD, l, CU(M * N)), ir_shm_load(k, sc, l, 1));
    return k;
}
ir_kernel *frag_kernel(const char *name, ir_scalar ab, ir_scalar acc, uint32_t M, uint32_t N, uint32_t K) {
    return frag_kernel_of(name, ab, acc, M, N, K, false);
}
ir_kernel *k_frag_aligned(ir_scalar ab) { return frag_kernel_of("frag_aligned", ab, IR_F32, 16, 16, 16, true); }
ir_kernel *k_frag_f16(void) { return frag_kernel("frag_f16", IR_F16, IR_F32, 16, 16, 16); }
ir_kernel *k_frag_bf16(void) { return frag_kernel("frag_bf16", IR_BF16, IR_F32, 16, 16, 16); }
ir_kernel *k_frag_f16acc(void) { return frag_kernel("frag_f16acc", IR_F16, IR_F16, 16, 8, 16); }

const kcase cases[] = {
    /*                               lavapipe  h200  spec-minimum  storage16-only */
    {"arith_f32", k_arith_f32, {OK, OK, OK, OK}},
    {"arith_int", k_arith_int, {OK, OK, OK, OK}},
    {"arith_i64", k_arith_i64, {OK, OK, OK, OK}},
    {"arith_f16", k_arith_f16, {OK, OK, "caps.storage16", "f16 arithmetic needs caps.f16_arith"}},
    {"arith_bf16",
     k_arith_bf16,
     {"bf16 arithmetic needs caps.bf16_arith", OK, "caps.storage16", "bf16 arithmetic needs caps.bf16_arith"}},
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
const size_t n_cases = sizeof cases / sizeof cases[0];

ir_kernel *build_checked(const kcase *kc) {
    ir_kernel *k = kc->build();
    cr_assert(k, "%s: no kernel", kc->name);
    cr_assert_str_empty(ir_kernel_error(k), "%s: builder: %s", kc->name, ir_kernel_error(k));
    kiln_err err = {0};
    cr_assert_eq(ir_verify(k, &err), 0, "%s: verify: %s", kc->name, err.msg);
    return k;
}
