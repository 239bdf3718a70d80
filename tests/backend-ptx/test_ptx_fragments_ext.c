/* The IR's later fragment operations on PTX: warpgroup products left in flight (wg.mma
 * async, wg.wait) and in the 128-byte swizzled layout, workgroup arrays that overlay
 * another, and a fragment's elements per lane (frag.elems, frag.from_elems): emitted,
 * assembled by ptxas where it is installed, refused by SPIR-V by name, and the verifier's
 * rules for each. */
#include "backend-ptx/ptx_emit.h"
#include "backend-spirv/spv_emit.h"
#include "base/error.h"
#include "ir/ir.h"
#include "runtime/caps.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_ptx.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#define U(v) ir_const_u32(k, v)
#define F(v) ir_const_f32(k, v)
#define HAS(ptx, s) cr_assert(strstr(ptx, s), "PTX lacks '%s':\n%s", s, ptx)

static ir_val gid(ir_kernel *k) { return ir_id(k, IR_ID_GLOBAL, 0); }


/* SPIR-V (H200-like Vulkan caps, cooperative matrices) refuses k, naming want */
static void spv_refuses(const ir_kernel *k, const char *want) {
    kiln_err err = {0};
    rt_caps vk;
    tu_caps_h200(&vk);
    spv_module m = {0};
    cr_assert_eq(spv_emit(k, &vk, &m, &err), -1, "SPIR-V emitted it");
    cr_assert(strstr(err.msg, want), "'%s' lacks '%s'", err.msg, want);
    spv_module_free(&m);
}

static void verify_fails(ir_kernel *k, const char *want) {
    kiln_err err = {0};
    cr_assert(ir_verify(k, &err), "verified: %s", want);
    cr_assert(strstr(err.msg, want), "'%s' lacks '%s'", err.msg, want);
}

/* A chain of two async products over a ring in the swizzled layout, waited for, stored
 * through an array that overlays the ring. */
static ir_kernel *async_kernel(bool bad_use) {
    ir_kernel *k = ir_kernel_create("wga");
    ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_set_workgroup(k, 128, 1, 1);
    ir_shm ring = ir_shared_array(k, "ring", IR_BF16, 2 * (64 + 128) * 64);
    ir_shm c = ir_shared_overlay(k, "c", IR_F32, 64 * 128, ring);
    ir_type tc = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 64, 128, 16);
    ir_val acc = ir_frag_fill(k, tc, F(0.0f));
    for (uint32_t s = 0; s < 2; s++) {
        uint32_t base = s * (64 + 128) * 64;
        acc = ir_wg_mma_flags(k, acc, ring, U(base), U(512), U(64 * 64), ring, U(base + 64 * 64), U(512),
                              U(128 * 64), 4, IR_WG_MMA_ASYNC | IR_WG_MMA_SW128);
    }
    if (!bad_use) acc = ir_wg_wait(k, acc, 0);
    ir_barrier(k);
    ir_frag_store(k, acc, true, c, U(0), U(128), true);
    ir_barrier(k);
    ir_store(k, y, gid(k), ir_shm_load(k, c, gid(k), 1));
    return k;
}

Test(ptx_fragments_ext, async_swizzled_products_and_overlays) {
    rt_caps c90 = tu_cuda_caps(90);
    ir_kernel *k = async_kernel(false);
    char *text = ir_print(k);
    cr_assert(strstr(text, "overlays @ring") && strstr(text, "sw128, async") && strstr(text, "wg.wait"), "%s",
              text);
    free(text);
    char *ptx = tu_ptx_emit_ok(k, &c90);
    HAS(ptx, "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16");
    HAS(ptx, "wgmma.wait_group.sync.aligned 0;");
    HAS(ptx, ".align 1024"); /* the swizzled atoms' alignment */
    /* no wait inside the products' asm: the one wait is the wg.wait */
    const char *p = ptx;
    int waits = 0;
    while ((p = strstr(p, "wgmma.wait_group"))) waits++, p++;
    cr_assert_eq(waits, 1, "%s", ptx);
    tu_ptxas_assemble(ptx, "sm_90a", "wg.mma async sw128");
    free(ptx);
    /* SPIR-V refuses by name */
    spv_refuses(k, "wgmma");
    ir_kernel_destroy(k);
    /* an accumulator in flight read by a frag.store */
    k = async_kernel(true);
    verify_fails(k, "still in flight");
    ir_kernel_destroy(k);
    /* flags and waits out of range, an overlay larger than its base or of an overlay */
    k = ir_kernel_create("bad");
    ir_set_workgroup(k, 128, 1, 1);
    ir_shm a = ir_shared_array(k, "a", IR_BF16, 1024);
    ir_type tc = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 64, 8, 16);
    cr_assert_eq(ir_wg_mma_flags(k, ir_frag_fill(k, tc, F(0.0f)), a, U(0), U(512), U(64), a, U(0), U(512), U(64), 1,
                                 1024),
                 IR_NONE);
    ir_kernel_destroy(k);
    k = ir_kernel_create("bad2");
    ir_set_workgroup(k, 128, 1, 1);
    a = ir_shared_array(k, "a", IR_BF16, 1024);
    tc = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 64, 8, 16);
    cr_assert_eq(ir_wg_wait(k, ir_frag_fill(k, tc, F(0.0f)), 8), IR_NONE);
    ir_kernel_destroy(k);
    k = ir_kernel_create("bad3");
    a = ir_shared_array(k, "a", IR_BF16, 1024);
    cr_assert_eq(ir_shared_overlay(k, "o", IR_F32, 513, a), 0);
    cr_assert(strstr(ir_kernel_err(k)->msg, "do not fit"), "%s", ir_kernel_err(k)->msg);
    ir_kernel_destroy(k);
    k = ir_kernel_create("bad4");
    a = ir_shared_array(k, "a", IR_BF16, 1024);
    ir_shm o = ir_shared_overlay(k, "o", IR_F32, 512, a);
    cr_assert_eq(o, 1);
    ir_shared_overlay(k, "o2", IR_F32, 4, o);
    cr_assert(strstr(ir_kernel_err(k)->msg, "no workgroup array of its own"), "%s", ir_kernel_err(k)->msg);
    ir_kernel_destroy(k);
}

/* y[lane * 4 + e] = 2 * (element e of the lane's accumulator of A B), the accumulator
 * rebuilt from its elements, and an A fragment made from two accumulators' elements. */
Test(ptx_fragments_ext, fragment_elements) {
    rt_caps c80 = tu_cuda_caps(80);
    for (int ti = 0; ti < 2; ti++) {
        ir_scalar t = ti ? IR_F16 : IR_BF16;
        ir_kernel *k = ir_kernel_create("el");
        ir_buf x = ir_param_buffer(k, "x", t, IR_READ);
        ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
        ir_set_workgroup(k, 32, 1, 1);
        ir_type ta = ir_t_frag(k, IR_FRAG_A, t, 16, 8, 16), tb = ir_t_frag(k, IR_FRAG_B, t, 16, 8, 16);
        ir_type tc = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 16, 8, 16);
        ir_val a = ir_frag_load(k, ta, false, x, U(0), U(16), true);
        ir_val b = ir_frag_load(k, tb, false, x, U(0), U(16), false);
        ir_val acc = ir_frag_mma(k, a, b, ir_frag_fill(k, tc, F(0.0f)));
        ir_val e = ir_frag_elems(k, acc);
        ir_val two = ir_bin(k, IR_OP_MUL, e, ir_vec(k, (ir_val[]){F(2), F(2), F(2), F(2)}, 4));
        ir_val acc2 = ir_frag_from_elems(k, tc, two, IR_NONE);
        ir_val h = ir_convert(k, ir_frag_elems(k, acc2), ir_t_vector(k, t, 4));
        ir_val a2 = ir_frag_from_elems(k, ta, h, h);
        ir_val b2 = ir_frag_from_elems(k, tb, h, IR_NONE); /* a B from its 4 elements */
        ir_val acc3 = ir_frag_mma(k, a2, b2, ir_frag_mma(k, a2, b, acc2));
        ir_store(k, y, ir_bin(k, IR_OP_MUL, ir_id(k, IR_ID_LOCAL, 0), U(4)), ir_frag_elems(k, acc3));
        char *ptx = tu_ptx_emit_ok(k, &c80);
        tu_ptxas_assemble(ptx, "sm_80", "frag.elems");
        free(ptx);
        /* the H200's Vulkan caps have 16x8x16 for f16 (then frag.elems is refused), not bf16 */
        spv_refuses(k, ti ? "frag.elems" : "16x8x16");
        ir_kernel_destroy(k);
    }
    /* the rules: an ACC of 16x8x16 for elems; 4-lane vectors of the fragment's type */
    ir_kernel *k = ir_kernel_create("bad");
    ir_set_workgroup(k, 32, 1, 1);
    ir_type tb = ir_t_frag(k, IR_FRAG_B, IR_BF16, 16, 8, 16);
    ir_frag_elems(k, ir_frag_fill(k, tb, F(0.0f)));
    cr_assert(ir_kernel_err(k)->code, "frag.elems of a B fragment built");
    ir_kernel_destroy(k);
    k = ir_kernel_create("bad2");
    ir_set_workgroup(k, 32, 1, 1);
    ir_type ta = ir_t_frag(k, IR_FRAG_A, IR_BF16, 16, 8, 16);
    ir_val v = ir_vec(k, (ir_val[]){F(1), F(1), F(1), F(1)}, 4);
    cr_assert_eq(ir_frag_from_elems(k, ta, v, v), IR_NONE); /* f32 lanes for a bf16 A */
    cr_assert(strstr(ir_kernel_err(k)->msg, "vectors of 4"), "%s", ir_kernel_err(k)->msg);
    ir_kernel_destroy(k);
    k = ir_kernel_create("bad3"); /* a B takes one vector */
    ir_set_workgroup(k, 32, 1, 1);
    tb = ir_t_frag(k, IR_FRAG_B, IR_BF16, 16, 8, 16);
    v = ir_convert(k, ir_vec(k, (ir_val[]){F(1), F(1), F(1), F(1)}, 4), ir_t_vector(k, IR_BF16, 4));
    cr_assert_eq(ir_frag_from_elems(k, tb, v, v), IR_NONE);
    cr_assert(ir_kernel_err(k)->code, "a B from two vectors built");
    ir_kernel_destroy(k);
}

/* ir_set_occupancy: .minnctapersm on the entry (ptxas keeps the registers within it),
 * nothing without it; out of range is a builder error; a clone keeps it. */
Test(ptx_fragments_ext, occupancy_hint) {
    rt_caps c = tu_cuda_caps(80);
    for (uint32_t n = 0; n < 2; n++) {
        ir_kernel *k = ir_kernel_create("occ");
        ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
        ir_set_workgroup(k, 128, 1, 1);
        if (n) ir_set_occupancy(k, 3);
        ir_store(k, y, gid(k), F(1.0f));
        ir_kernel *cl = ir_kernel_clone(k);
        cr_assert_eq(ir_occupancy(cl), n ? 3u : 0u);
        char *ptx = tu_ptx_emit_ok(cl, &c);
        cr_assert_eq(strstr(ptx, ".minnctapersm 3") != NULL, n == 1, "%s", ptx);
        tu_ptxas_assemble(ptx, "sm_80", "occupancy");
        free(ptx);
        ir_kernel_destroy(cl);
        ir_kernel_destroy(k);
    }
    ir_kernel *k = ir_kernel_create("occ2");
    ir_set_occupancy(k, 33);
    cr_assert(strstr(ir_kernel_err(k)->msg, "0..32"), "%s", ir_kernel_err(k)->msg);
    ir_kernel_destroy(k);
}
