/* Ordering and the tensor copy engine (ir.h's last section) through the verifier and both
 * emitters: a producer / consumer kernel of memory barriers, tensor maps, a multicast
 * tma.load in clusters of two and a warpgroup's accumulator stored from its elements,
 * lowered to the PTX instructions they must become and assembled for sm_90a; grid.wait
 * and prefetch before it; the verifier's rules; refusals below sm_90 and by SPIR-V. No
 * GPU is needed. */
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
#define HAS(ptx, s) cr_assert(strstr(ptx, s), "PTX lacks '%s':\n%s", s, ptx)
#define LACKS(ptx, s) cr_assert(!strstr(ptx, s), "PTX has '%s':\n%s", s, ptx)


static void refused_by(ir_kernel *k, const rt_caps *c, const char *want) {
    kiln_err err = {0};
    char *ptx = NULL;
    cr_assert_eq(ptx_emit(k, c, &ptx, NULL, &err), -1, "emitted what it should refuse (%s)", want);
    cr_assert(strstr(err.msg, want), "'%s' lacks '%s'", err.msg, want);
}

/* A 288-invocation workgroup: subgroup 8's lane 0 copies a 64 x 64 box of X through a
 * barrier (multicast in clusters when cluster), the two warpgroups multiply it, and their
 * sums go out through workgroup memory. */
static ir_kernel *pipeline(bool cluster) {
    ir_kernel *k = ir_kernel_create("pipe");
    ir_buf x = ir_param_buffer(k, "X", IR_BF16, IR_READ), y = ir_param_buffer(k, "Y", IR_F32, IR_WRITE);
    ir_buffer_extent(k, x, 64 * 64);
    ir_set_workgroup(k, 288, 1, 1);
    if (cluster) ir_set_cluster(k, 2);
    ir_shm bars = ir_shared_array(k, "bars", IR_U64, 2), ring = ir_shared_array(k, "ring", IR_BF16, 64 * 64);
    ir_shm sums = ir_shared_array(k, "sums", IR_F32, 2 * 64 * 64);
    uint32_t map = ir_tensor_map(k, x, 64, 64, 64, 64);
    ir_val lid = ir_id(k, IR_ID_LOCAL, 0), wg = ir_id(k, IR_ID_WARPGROUP, 0);
    ir_if *f = ir_if_begin(k, ir_compare(k, IR_EQ, lid, U(0)), 0);
    ir_mbar_init(k, bars, U(0), U(1));
    ir_mbar_init(k, bars, U(1), U(8));
    ir_if_end(k, f, NULL);
    if (cluster) ir_cluster_sync(k);
    else ir_barrier(k);
    ir_if *role = ir_if_begin(k, ir_compare(k, IR_LT, wg, U(2)), 0);
    ir_mbar_wait(k, bars, U(0), U(0));
    ir_type tc = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 64, 64, 16);
    ir_val acc = ir_wg_mma_flags(k, ir_frag_fill(k, tc, ir_const_f32(k, 0.0f)), ring, U(0), U(512), U(1024), ring,
                                 U(0), U(512), U(1024), 4, IR_WG_MMA_SW128);
    ir_frag_store(k, acc, true, sums, ir_bin(k, IR_OP_MUL, wg, U(64 * 64)), U(64), true);
    ir_mbar_arrive(k, bars, U(1), cluster ? ir_id(k, IR_ID_CLUSTER_RANK, 0) : IR_NONE);
    ir_if_else(k, role, NULL);
    ir_if *one = ir_if_begin(k, ir_compare(k, IR_EQ, ir_id(k, IR_ID_SG_LANE, 0), U(0)), 0);
    ir_mbar_wait(k, bars, U(1), U(1));
    ir_mbar_expect(k, bars, U(0), U(64 * 64 * 2));
    ir_tma_load(k, ring, U(0), map, U(0), U(0), bars, U(0), cluster ? U(3) : IR_NONE);
    ir_if_end(k, one, NULL);
    ir_if_end(k, role, NULL);
    ir_barrier(k);
    ir_store(k, y, lid, ir_shm_load(k, sums, lid, 1));
    if (cluster) ir_cluster_sync(k);
    return k;
}

Test(ptx_sync, pipeline_lowers_to_sm_90a) {
    rt_caps c = tu_cuda_caps(90);
    cr_assert(c.tma);
    for (int cl = 0; cl < 2; cl++) {
        ir_kernel *k = pipeline(cl);
        char *text = ir_print(k);
        cr_assert(strstr(text, "tensor_map 0: @X 64 x 64, box 64 x 64") && strstr(text, "mbar.wait @bars") &&
                      strstr(text, cl ? "cluster(2)" : "tma.load"),
                  "%s", text);
        free(text);
        char *ptx = tu_ptx_emit_ok(k, &c);
        HAS(ptx, ".target sm_90a");
        HAS(ptx, ".param .align 64 .b8 pipe_param_2[128]"); /* after X and Y */
        HAS(ptx, "cvta.param.u64");
        HAS(ptx, "mbarrier.init.shared::cta.b64");
        HAS(ptx, "fence.mbarrier_init.release.cluster");
        HAS(ptx, "mbarrier.arrive.expect_tx.shared::cta.b64");
        HAS(ptx, "mbarrier.try_wait.parity.shared::cta.b64");
        HAS(ptx, "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes");
        if (cl) {
            HAS(ptx, ".multicast::cluster");
            HAS(ptx, "mapa.shared::cluster.u32");
            LACKS(ptx, "mbarrier.arrive.release.cluster"); /* a GPU-wide fence before every arrive */
            HAS(ptx, "barrier.cluster.arrive.release.aligned");
            HAS(ptx, "%cluster_ctarank");
        } else {
            HAS(ptx, "mbarrier.arrive.shared::cta.b64");
            LACKS(ptx, "barrier.cluster");
        }
        tu_ptxas_assemble(ptx, "sm_90a", cl ? "pipeline, clusters" : "pipeline");
        free(ptx);
        /* SPIR-V has none of it: refused by name */
        rt_caps vk;
        tu_caps_h200(&vk);
        spv_module m = {0};
        kiln_err err = {0};
        cr_assert_eq(spv_emit(k, &vk, &m, &err), -1);
        cr_assert(strstr(err.msg, "CUDA's (sm_90)"), "%s", err.msg);
        /* nor does sm_80 */
        rt_caps c80 = tu_cuda_caps(80);
        refused_by(k, &c80, "needs sm_90");
        ir_kernel_destroy(k);
    }
}

/* grid.wait after prefetches: the wait where the IR puts it (not on entry), the prefetch
 * a bulk L2 prefetch on sm_90 and nothing on sm_80; launch_early triggers on entry. */
static ir_kernel *early(bool launch_early) {
    ir_kernel *k = ir_kernel_create("early");
    ir_buf w = ir_param_buffer(k, "W", IR_U32, IR_READ), y = ir_param_buffer(k, "y", IR_U32, IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_set_launch_early(k, launch_early);
    ir_val lid = ir_id(k, IR_ID_LOCAL, 0);
    ir_if *f = ir_if_begin(k, ir_compare(k, IR_LT, lid, U(4)), 0);
    ir_prefetch(k, w, ir_bin(k, IR_OP_MUL, lid, U(1024)), 4096);
    ir_if_end(k, f, NULL);
    ir_grid_wait(k);
    ir_store(k, y, lid, ir_load(k, w, lid, 1));
    return k;
}

Test(ptx_sync, grid_wait_where_placed_and_prefetch) {
    rt_caps c = tu_cuda_caps(90), c80 = tu_cuda_caps(80);
    for (int e = 0; e < 2; e++) {
        ir_kernel *ke = early(e);
        char *p = tu_ptx_emit_ok(ke, &c);
        ir_kernel_destroy(ke);
        const char *pre = strstr(p, "cp.async.bulk.prefetch.L2.global"), *w = strstr(p, "griddepcontrol.wait;");
        const char *trig = strstr(p, "griddepcontrol.launch_dependents;");
        cr_assert(pre && w && trig && pre < w && w < strstr(p, "ld.global"), "%s", p);
        cr_assert(e ? trig < pre : trig > strstr(p, "st.global"), "launch_dependents %s:\n%s",
                  e ? "on entry" : "at the end", p);
        tu_ptxas_assemble(p, "sm_90", "grid.wait");
        free(p);
    }
    ir_kernel *k80 = early(true);
    char *p = tu_ptx_emit_ok(k80, &c80);
    ir_kernel_destroy(k80);
    LACKS(p, "prefetch");
    LACKS(p, "griddepcontrol");
    free(p);
    rt_caps vk;
    tu_caps_h200(&vk);
    spv_module m = {0};
    kiln_err err = {0};
    ir_kernel *k = early(true);
    cr_assert_eq(spv_emit(k, &vk, &m, &err), 0, "SPIR-V drops the hints: %s", err.msg);
    spv_module_free(&m);
    ir_kernel_destroy(k);
}

static void verify_fails(ir_kernel *k, const char *want) {
    kiln_err err = {0};
    cr_assert_eq(ir_verify(k, &err), -1, "verified what breaks '%s'", want);
    cr_assert(strstr(err.msg, want), "'%s' lacks '%s'", err.msg, want);
    ir_kernel_destroy(k);
}

Test(ptx_sync, verifier_rules) {
    /* a load before grid.wait; two waits; one inside an if */
    ir_kernel *k = ir_kernel_create("r1");
    ir_buf b = ir_param_buffer(k, "b", IR_U32, IR_READ | IR_WRITE);
    ir_set_workgroup(k, 32, 1, 1);
    ir_val v = ir_load(k, b, U(0), 1);
    ir_grid_wait(k);
    ir_store(k, b, U(1), v);
    verify_fails(k, "before grid.wait");
    k = ir_kernel_create("r2");
    ir_set_workgroup(k, 32, 1, 1);
    ir_grid_wait(k);
    ir_grid_wait(k);
    verify_fails(k, "2 grid.waits");
    k = ir_kernel_create("r3");
    ir_set_workgroup(k, 32, 1, 1);
    ir_if *f = ir_if_begin(k, ir_compare(k, IR_EQ, ir_id(k, IR_ID_GROUP, 0), U(0)), 0);
    ir_grid_wait(k);
    ir_if_end(k, f, NULL);
    verify_fails(k, "top level");
    /* memory barriers live in u64 arrays; a multicast needs clusters; cluster.sync too */
    k = ir_kernel_create("r4");
    ir_set_workgroup(k, 32, 1, 1);
    ir_shm s32 = ir_shared_array(k, "s", IR_U32, 4);
    ir_mbar_init(k, s32, U(0), U(1));
    cr_assert(strstr(ir_kernel_error(k), "u64"), "%s", ir_kernel_error(k));
    ir_kernel_destroy(k);
    k = ir_kernel_create("r5");
    ir_buf x = ir_param_buffer(k, "X", IR_BF16, IR_READ);
    ir_set_workgroup(k, 32, 1, 1);
    ir_shm bars = ir_shared_array(k, "bars", IR_U64, 1), ring = ir_shared_array(k, "ring", IR_BF16, 4096);
    uint32_t m = ir_tensor_map(k, x, 64, 64, 64, 64);
    ir_tma_load(k, ring, U(0), m, U(0), U(0), bars, U(0), U(3));
    cr_assert(strstr(ir_kernel_error(k), "needs clusters"), "%s", ir_kernel_error(k));
    ir_kernel_destroy(k);
    k = ir_kernel_create("r6");
    ir_set_workgroup(k, 32, 1, 1);
    ir_cluster_sync(k);
    verify_fails(k, "without clusters");
    /* tensor maps: 128-byte boxes of 16-bit readable buffers, within the extent */
    static const struct { ir_scalar t; uint32_t outer, box_inner; const char *want; } maps[] = {
        {IR_F32, 64, 32, "16-bit"}, {IR_BF16, 64, 32, "128 bytes"}, {IR_BF16, 101, 64, "extent"}};
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) {
        k = ir_kernel_create("maps");
        ir_buf h = ir_param_buffer(k, "H", maps[i].t, IR_READ);
        ir_buffer_extent(k, h, 64 * 100);
        ir_tensor_map(k, h, 64, maps[i].outer, maps[i].box_inner, 64);
        cr_assert(strstr(ir_kernel_error(k), maps[i].want), "%s", ir_kernel_error(k));
        ir_kernel_destroy(k);
    }
    /* wg.mma under a warpgroup's branch verifies; under a subgroup's it does not; a
     * barrier under a warpgroup's does not either */
    for (int c = 0; c < 3; c++) {
        k = ir_kernel_create("r10");
        ir_set_workgroup(k, 256, 1, 1);
        ir_shm a = ir_shared_array(k, "a", IR_BF16, 64 * 64);
        ir_id_kind kind = c == 1 ? IR_ID_SG_ID : IR_ID_WARPGROUP;
        ir_if *g = ir_if_begin(k, ir_compare(k, IR_EQ, ir_id(k, kind, 0), U(0)), 0);
        if (c == 2) {
            ir_barrier(k);
        } else {
            ir_type tc = ir_t_frag(k, IR_FRAG_ACC, IR_F32, 64, 64, 16);
            ir_wg_mma(k, ir_frag_fill(k, tc, ir_const_f32(k, 0.0f)), a, U(0), U(128), U(64), a, U(0), U(128),
                      U(64), 4);
        }
        ir_if_end(k, g, NULL);
        if (c == 0) {
            kiln_err err = {0};
            cr_assert_eq(ir_verify(k, &err), 0, "%s", err.msg);
            ir_kernel_destroy(k);
        } else {
            verify_fails(k, "per-invocation id");
        }
    }
}
