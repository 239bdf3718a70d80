/* The SPIR-V emitter on a Vulkan device (lavapipe here, the H200 on the GPU machine):
 * every case's pipeline compiles, and emitted kernels run and match C. */
#include "base/error.h"
#include "tests/backend-spirv/spirv_test.h"

Test(spirv_vk, pipelines_compile) {
    vkh h;
    vkh_require(&h);
    int built = 0, refused = 0;
    for (size_t i = 0; i < N_CASES; i++) {
        ir_kernel *k = build_checked(&cases[i]);
        spv_module m;
        kiln_err err = {0};
        if (spv_emit(k, &h.caps, &m, &err)) {
            cr_log_info("%s: refused for this device: %s", cases[i].name, err.msg);
            refused++;
            ir_kernel_destroy(k);
            continue;
        }
        tu_spv_validate(&m, cases[i].name);
        VkShaderModuleCreateInfo smci = {
            .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = m.n * 4, .pCode = m.words};
        VkShaderModule sm;
        cr_assert_eq(vkCreateShaderModule(h.dev, &smci, NULL, &sm), VK_SUCCESS, "%s", cases[i].name);
        VkDescriptorSetLayoutBinding lb[8];
        uint32_t nb = ir_n_buffers(k);
        for (uint32_t j = 0; j < nb; j++)
            lb[j] = (VkDescriptorSetLayoutBinding){.binding = j, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                   .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
        VkDescriptorSetLayoutCreateInfo dslci = {
            .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = nb, .pBindings = lb};
        VkDescriptorSetLayout dsl;
        cr_assert_eq(vkCreateDescriptorSetLayout(h.dev, &dslci, NULL, &dsl), VK_SUCCESS);
        VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = 128};
        VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                           .setLayoutCount = 1,
                                           .pSetLayouts = &dsl,
                                           .pushConstantRangeCount = 1,
                                           .pPushConstantRanges = &pcr};
        VkPipelineLayout pl;
        cr_assert_eq(vkCreatePipelineLayout(h.dev, &plci, NULL, &pl), VK_SUCCESS);
        VkComputePipelineCreateInfo cpci = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                                            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                                      .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                                                      .module = sm,
                                                      .pName = "main"},
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
    kiln_err err = {0};
    cr_assert_str_empty(ir_kernel_error(k), "builder: %s", ir_kernel_error(k));
    cr_assert_eq(spv_emit(k, c ? c : &h->caps, m, &err), 0, "%s", err.msg);
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
        else if (i % 3 == 1)
            x[i] = u2f(((0x33000000u + s % 0x14800000u) & ~0x1fffu) | 0x1000u |
                       (s & 0x80000000u)); /* f16 ties, subnormals */
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
                cr_log_error("%s: bf16 of %a (0x%08x): got 0x%04x / 0x%08x, want 0x%04x", label, in[j], f2u(in[j]),
                             hb[j], back[j], want);
                bad++;
            }
        } else {
            float want = ref_f16_value(in[j]);
            float got = u2f(back[j]);
            uint16_t wbits = ref_f16(in[j]);
            bool same =
                isnan(want) ? isnan(got) && (hb[j] & 0x7fffu) > 0x7c00u : f2u(got) == f2u(want) && hb[j] == wbits;
            /* devices may flush f16 subnormals: accept a signed zero for those */
            if (!same && !isnan(want) && fabsf(want) < 6.103515625e-05f && got == 0.0f && (hb[j] & 0x7fffu) == 0)
                same = true;
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
    check_round_trip(&h, IR_F16, NULL,
                     h.caps.f16_arith ? "native f16" : "f16 in f32 registers"); /* native where offered */
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
        have |= h->caps.mma[i].m == M && h->caps.mma[i].n == N && h->caps.mma[i].k == K &&
                h->caps.mma[i].ab_type == (uint32_t)ab && h->caps.mma[i].acc_type == IR_F32;
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
            cr_expect_eq(pc[i * N + j], want, "%s C[%u][%u] = %f, want %f", ir_kernel_name(k), i, j, pc[i * N + j],
                         want);
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
