/* The SPIR-V emitter (backend-spirv/spv_emit.h): kernels covering every IR op, emitted
 * for several capability sets and checked by SPIRV-Tools' validator (Vulkan 1.3);
 * refusals for missing capabilities; determinism; and, where a Vulkan device exists
 * (lavapipe here, the H200 on the GPU machine), a few emitted kernels run and compared
 * with C.
 *
 * The installed SPIRV-Tools may predate SPV_KHR_cooperative_matrix / SPV_KHR_bfloat16:
 * modules using them are then validated with the spirv-val named by $KILN_SPIRV_VAL,
 * or reported as not validated. */
#include "base/error.h"
#include "tests/backend-spirv/spirv_test.h"

/* Does the module declare a capability newer than Debian's SPIRV-Tools knows? */
static void run_matrix(int which) {
    rt_caps c;
    caps_fill(&c, which);
    int ok = 0, refused = 0, external = 0, unchecked = 0;
    for (size_t i = 0; i < N_CASES; i++) {
        const kcase *kc = &cases[i];
        ir_kernel *k = build_checked(kc);
        spv_module m;
        kiln_err err = {0};
        int rc = spv_emit(k, &c, &m, &err);
        char what[96];
        snprintf(what, sizeof what, "%s on %s", kc->name, caps_name[which]);
        if (kc->expect[which]) {
            cr_expect_neq(rc, 0, "%s: expected a refusal (%s)", what, kc->expect[which]);
            cr_expect(strstr(err.msg, kc->expect[which]) != NULL, "%s: refusal '%s' lacks '%s'", what, err.msg,
                      kc->expect[which]);
            cr_expect(strstr(err.msg, kc->name) != NULL, "%s: refusal '%s' does not name the kernel", what, err.msg);
            cr_expect(m.words == NULL && m.n == 0);
            refused++;
        } else {
            cr_assert_eq(rc, 0, "%s: %s", what, err.msg);
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
    fprintf(stderr,
            "spirv %-15s: %d validated, %d validated by $KILN_SPIRV_VAL, %d not validated (SPIRV-Tools too old), %d "
            "refused as expected\n",
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
            kiln_err err = {0};
            char what[96];
            snprintf(what, sizeof what, "%s with flags 0x%02x", cases[i].name, bits);
            if (spv_emit(k, &c, &m, &err) == 0) {
                tu_spv_validate(&m, what);
                ok++;
            } else {
                cr_expect(strstr(err.msg, "caps.") && strstr(err.msg, cases[i].name), "%s: unclear refusal '%s'", what,
                          err.msg);
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
            kiln_err err = {0};
            cr_assert_eq(spv_emit(k1, &c, &a, &err), 0, "%s", err.msg);
            cr_assert_eq(spv_emit(k2, &c, &b, &err), 0, "%s", err.msg);
            cr_assert_eq(spv_emit(k1, &c, &a2, &err), 0, "%s", err.msg);
            cr_assert_eq(a.n, b.n, "%s on %s: %zu vs %zu words", cases[i].name, caps_name[which], a.n, b.n);
            cr_assert(!memcmp(a.words, b.words, a.n * 4), "%s on %s differs between builds", cases[i].name,
                      caps_name[which]);
            cr_assert(a.n == a2.n && !memcmp(a.words, a2.words, a.n * 4));
            spv_module_free(&a);
            spv_module_free(&b);
            spv_module_free(&a2);
            ir_kernel_destroy(k1);
            ir_kernel_destroy(k2);
        }
    }
}

/* The emitter takes 16-bit rounding written out in the IR (ir/lower_half.c): for every
 * caps set the kernel it lowers holds no rounding conversion to f16 or bf16, only
 * convert.exact after RoundEven (f16) or the integer sequence (bf16). */
Test(spirv, rounding_to_16_bits_is_lowered_in_the_ir) {
    for (int which = 0; which < N_CAPS; which++) {
        rt_caps c;
        caps_fill(&c, which);
        ir_kernel *k = k_convert();
        kiln_err err = {0};
        ir_kernel *low = spv_lowered(k, &c, &err);
        cr_assert_not_null(low, "%s: %s", caps_name[which], err.msg);
        char *t = ir_print(low);
        cr_assert(strstr(t, " = convert.exact ") && strstr(t, " = roundeven "), "%s: %s", caps_name[which], t);
        for (const char *p = strstr(t, " = convert %"); p; p = strstr(p + 1, " = convert %")) {
            const char *eol = strchr(p, '\n');
            cr_assert(eol && (size_t)(eol - p) > 5 && strncmp(eol - 4, " f16", 4) && strncmp(eol - 5, " bf16", 5) &&
                          strncmp(eol - 6, " f16x4", 6) && strncmp(eol - 7, " bf16x4", 7),
                      "%s: a rounding conversion left: %.*s", caps_name[which], (int)(eol - p), p);
        }
        free(t);
        ir_kernel_destroy(low);
        ir_kernel_destroy(k);
    }
}

/* ---- refusals -------------------------------------------------------------------------------- */

static void expect_refusal(ir_kernel *k, const rt_caps *c, const char *part) {
    spv_module m = {0};
    kiln_err err = {0};
    cr_assert_str_empty(ir_kernel_error(k), "builder: %s", ir_kernel_error(k));
    cr_expect_neq(spv_emit(k, c, &m, &err), 0, "expected a refusal with '%s'", part);
    cr_expect(strstr(err.msg, part), "'%s' lacks '%s'", err.msg, part);
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
    expect_refusal(frag_kernel("frag32", IR_F16, IR_F32, 32, 32, 16), &c,
                   "not one of the device's cooperative-matrix shapes");
    c.n_mma = 3; /* f16 accumulators only */
    expect_refusal(k_frag_f16(), &c, "fragment ACC f32 16x16x16");
    caps_fill(&c, CAPS_H200);
    c.bf16_arith = false;
    expect_refusal(k_frag_bf16(), &c, "bf16 fragments need VK_KHR_shader_bfloat16 (caps.bf16_arith is false)");
    caps_fill(&c, CAPS_H200);
    c.f16_arith = false;
    expect_refusal(k_frag_f16(), &c, "f16");
}

/* ir_frag_load_aligned reads the buffer through its view as 16-byte words, base and stride
 * in words (elements / 8); the plain load through 16-bit elements. Both validate. */
Test(spirv, aligned_fragment_loads_read_16_byte_words) {
    rt_caps c;
    caps_fill(&c, CAPS_H200);
    for (int aligned = 0; aligned < 2; aligned++) {
        /* f16: Debian's SPIRV-Tools cannot disassemble bf16 cooperative matrices */
        ir_kernel *k = aligned ? k_frag_aligned(IR_F16) : k_frag_f16();
        kiln_err err = {0};
        char *p = ir_print(k);
        cr_assert(p);
        cr_expect(!strstr(p, "aligned16") == !aligned, "%s", p);
        free(p);
        spv_module m;
        cr_assert_eq(spv_emit(k, &c, &m, &err), 0, "%s", err.msg);
        /* Debian's SPIRV-Tools predate cooperative matrices: read the words themselves */
        bool w4_named = false, stride16 = false, coop_load = false;
        const char *bytes = (const char *)m.words;
        for (size_t i = 0; i + 5 <= m.n * 4; i++) w4_named |= !memcmp(bytes + i, "a_w4", 5);
        for (size_t i = 5; i < m.n;) {
            uint32_t op = m.words[i] & 0xffff, len = m.words[i] >> 16;
            if (!len) break;
            if (op == 71 && len == 4 && m.words[i + 2] == 6 && m.words[i + 3] == 16) /* OpDecorate ArrayStride 16 */
                stride16 = true;
            coop_load |= op == 4457; /* OpCooperativeMatrixLoadKHR */
            i += len;
        }
        cr_expect(w4_named == (aligned != 0) && stride16 == (aligned != 0), "aligned %d: view %d, stride 16 %d",
                  aligned, w4_named, stride16);
        cr_expect(coop_load);
        if (spv_validate(&m, &err)) cr_expect(spv_needs_newer_tools(&m), "%s", err.msg);
        spv_module_free(&m);
        ir_kernel_destroy(k);
    }
    /* 16-bit buffers only */
    ir_kernel *k = ir_kernel_create("bad_aligned");
    ir_buf f = ir_param_buffer(k, "f", IR_F32, IR_READ);
    ir_set_workgroup(k, 32, 1, 1);
    ir_type ta = ir_t_frag(k, IR_FRAG_A, IR_F16, 16, 16, 16);
    cr_assert_eq(ir_frag_load_aligned(k, ta, f, CU(0), CU(16), true), IR_NONE);
    cr_assert(strstr(ir_kernel_error(k), "ir_frag_load_aligned"), "%s", ir_kernel_error(k));
    ir_kernel_destroy(k);
}

/* warpgroup products are sm_90a's: refused by name */
Test(spirv, refuses_warpgroup_products) {
    rt_caps c;
    caps_fill(&c, CAPS_H200);
    ir_kernel *k = ir_kernel_create("wg");
    ir_set_workgroup(k, 128, 1, 1);
    ir_shm a = ir_shared_array(k, "a", IR_F16, 1024);
    ir_type t = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 64, 8, 16);
    ir_val u0 = ir_const_u32(k, 0), s = ir_const_u32(k, 128), l = ir_const_u32(k, 64);
    ir_wg_mma(k, ir_frag_fill(k, t, ir_const_f32(k, 0.0f)), a, u0, s, l, a, u0, s, l, 1);
    expect_refusal(k, &c, "wg.mma");
}

Test(spirv, refuses_f16_without_caps) {
    rt_caps c;
    caps_fill(&c, CAPS_MIN);
    expect_refusal(
        k_arith_f16(), &c,
        "buffer 'io' holds f16: 16-bit buffers need caps.storage16 (a 32-bit packing fallback is not written yet)");
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
    kiln_err err = {0};
    cr_expect_neq(spv_emit(k, &c, &m, &err), 0);
    cr_expect(strstr(err.msg, "does not verify"), "%s", err.msg);
    ir_kernel_destroy(k);
    cr_expect_neq(spv_emit(NULL, &c, &m, &err), 0);
    cr_expect_neq(spv_emit(NULL, NULL, &m, NULL), 0);
    cr_expect_neq(spv_validate(&m, &err), 0);
    cr_expect_null(spv_disassemble(&m));
    uint32_t junk[6] = {0x07230203, 0x00010600, 0, 10, 0, 0xdeadbeef};
    spv_module bad = {junk, 6};
    cr_expect_neq(spv_validate(&bad, &err), 0);
    cr_expect(strstr(err.msg, "spirv-val"), "%s", err.msg);
    spv_module_free(NULL);
}

/* Structure of the module: what the interface promises (bindings, push constants,
 * spec ids, LocalSizeId, bf16 as 16-bit ints). */
Test(spirv, interface_layout) {
    rt_caps c;
    caps_fill(&c, CAPS_LAVAPIPE);
    ir_kernel *k = k_spec();
    spv_module m;
    kiln_err err = {0};
    cr_assert_eq(spv_emit(k, &c, &m, &err), 0, "%s", err.msg);
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
    cr_assert_eq(spv_emit(k, &c, &m, &err), 0, "%s", err.msg);
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
    cr_assert_eq(spv_emit(k, &c, &m, &err), 0, "%s", err.msg);
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
    cr_assert_eq(spv_emit(k, &c, &m, &err), 0, "%s", err.msg);
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

/* Bytes of each Workgroup variable of a module, read from its words (Debian's SPIRV-Tools
 * cannot read modules with cooperative matrices): OpTypeInt/OpTypeFloat widths, u32
 * OpConstants, OpTypeArray, OpTypePointer, OpVariable. Returns how many, into bytes. */
static size_t workgroup_bytes(const spv_module *m, uint64_t *bytes, size_t cap) {
    uint32_t bound = m->n > 3 ? m->words[3] : 0;
    uint64_t *width = calloc(bound, 8), *value = calloc(bound, 8), *arr_len = calloc(bound, 8);
    uint32_t *arr_elem = calloc(bound, 4), *ptr_to = calloc(bound, 4);
    size_t n = 0;
    cr_assert(width && value && arr_len && arr_elem && ptr_to);
    for (size_t i = 5; i < m->n;) {
        const uint32_t *w = &m->words[i];
        uint32_t op = w[0] & 0xffff, len = w[0] >> 16;
        if (!len || i + len > m->n) break;
        if ((op == 21 || op == 22) && w[1] < bound) width[w[1]] = w[2]; /* OpTypeInt, OpTypeFloat */
        if (op == 43 && len == 4 && w[2] < bound) value[w[2]] = w[3];   /* OpConstant (32-bit) */
        if (op == 28 && w[1] < bound && w[3] < bound) arr_elem[w[1]] = w[2], arr_len[w[1]] = value[w[3]];
        if (op == 32 && w[2] == 4 && w[1] < bound) ptr_to[w[1]] = w[3]; /* OpTypePointer Workgroup */
        if (op == 59 && w[3] == 4 && w[1] < bound && n < cap) {         /* OpVariable Workgroup */
            uint32_t arr = ptr_to[w[1]];
            bytes[n++] = arr < bound && arr_elem[arr] < bound ? arr_len[arr] * width[arr_elem[arr]] / 8 : 0;
        }
        i += len;
    }
    free(width), free(value), free(arr_len), free(arr_elem), free(ptr_to);
    return n;
}

/* A 16-bit fragment array beside a 4-byte flag and a 12-byte array: with fragments in the
 * kernel every workgroup array is a whole number of 16-byte words (NVIDIA's driver placed
 * attn_prefill_coop.c's 4-byte flag so that its fragment loads shifted); without, the
 * arrays keep their sizes. */
Test(spirv, workgroup_arrays_whole_16_byte_words_where_fragments_are) {
    rt_caps c;
    caps_fill(&c, CAPS_H200);
    for (int frags = 0; frags < 2; frags++) {
        ir_kernel *k = ir_kernel_create("wg_words");
        ir_buf out = ir_param_buffer(k, "out", IR_F32, IR_WRITE);
        ir_shm sa = ir_shared_array(k, "sa", IR_F16, 16 * 16);
        ir_shm flag = ir_shared_array(k, "flag", IR_U32, 1);
        ir_shm three = ir_shared_array(k, "three", IR_F32, 3);
        ir_set_workgroup(k, 32, 1, 1);
        ir_val l = ir_id(k, IR_ID_LOCAL, 0);
        ir_shm_store(k, sa, l, ir_convert(k, CF(1), ir_t_scalar(k, IR_F16)));
        ir_shm_store(k, flag, CU(0), l);
        ir_shm_store(k, three, CU(2), CF(2));
        ir_barrier(k);
        if (frags) {
            ir_type ta = ir_t_frag(k, IR_FRAG_A, IR_F16, 16, 16, 16), tb = ir_t_frag(k, IR_FRAG_B, IR_F16, 16, 16, 16);
            ir_type tc = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 16, 16, 16);
            ir_val fa = ir_frag_load(k, ta, true, sa, CU(0), CU(16), true);
            ir_val fb = ir_frag_load(k, tb, true, sa, CU(0), CU(16), false);
            ir_frag_store(k, ir_frag_mma(k, fa, fb, ir_frag_fill(k, tc, CF(0))), false, out, CU(0), CU(16), true);
        }
        ir_val v = BIN(ADD, ir_convert(k, ir_shm_load(k, flag, CU(0), 1), ir_t_scalar(k, IR_F32)),
                       ir_shm_load(k, three, CU(2), 1));
        ir_store(k, out, BIN(ADD, l, CU(256)), v);
        kiln_err err = {0};
        cr_assert_eq(ir_verify(k, &err), 0, "%s", err.msg);
        spv_module m;
        cr_assert_eq(spv_emit(k, &c, &m, &err), 0, "%s", err.msg);
        uint64_t bytes[8];
        size_t n = workgroup_bytes(&m, bytes, 8);
        cr_assert_eq(n, 3, "frags %d: %zu workgroup variables", frags, n);
        cr_expect_eq(bytes[0], 512);
        cr_expect_eq(bytes[1], frags ? 16 : 4, "frags %d: flag %llu bytes", frags, (unsigned long long)bytes[1]);
        cr_expect_eq(bytes[2], frags ? 16 : 12, "frags %d: three %llu bytes", frags, (unsigned long long)bytes[2]);
        spv_module_free(&m);
        ir_kernel_destroy(k);
    }
}
