/* Ordering and the tensor copy engine for the PTX emitter (ir.h's last section), as
 * inline PTX (LLVM 19 has no intrinsics for most of it):
 *
 *   grid.wait     griddepcontrol.wait (where the device launches with programmatic
 *                 dependent launch, caps.grid_dep); prefetch: cp.async.bulk.prefetch.L2 on
 *                 sm_90, nothing elsewhere (a hint)
 *   mbar.*        mbarrier.init / arrive / arrive.expect_tx / try_wait.parity on the
 *                 barrier's shared address; a remote arrive maps the address into the
 *                 cluster workgroup first (mapa) and keeps the default release at the
 *                 workgroup's scope (.release.cluster put MEMBAR.ALL.GPU before every
 *                 arrive and halved the tma product in clusters on the H200; what a slot's
 *                 release orders is wg.mma's reads, complete at its wg.wait); an init is
 *                 followed by the fences that make it visible to the cluster and to the
 *                 tensor copy engine
 *   tma.load      cp.async.bulk.tensor.2d ... mbarrier::complete_tx::bytes (.multicast::cluster
 *                 with a mask), its tensor map the generic address of the kernel parameter
 *                 that carries it (ptx_emit.c declares one .param .align 64 .b8 [128] per
 *                 map, after the IR's parameters; the device fills them per launch)
 *   cluster.sync  barrier.cluster.arrive.release + wait.acquire
 *
 * Everything but grid.wait and prefetch needs sm_90 (refused by name elsewhere). */
#include "backend-ptx/ptx_emit.h"
#include "backend-ptx/ptx_internal.h"

#include <stdio.h>
#include <string.h>

static LLVMTypeRef t_void(ptx_ctx *x) { return LLVMVoidTypeInContext(x->lc); }

/* One asm statement: text over the n i32/i64 arguments, with side effects and a memory
 * clobber (these order memory), returning nothing. */
static void asm_void(ptx_ctx *x, const char *text, const char *cons, LLVMValueRef *args, unsigned n) {
    LLVMTypeRef at[6];
    for (unsigned i = 0; i < n; i++) at[i] = LLVMTypeOf(args[i]);
    LLVMTypeRef ft = LLVMFunctionType(t_void(x), at, n, 0);
    LLVMValueRef f = LLVMGetInlineAsm(ft, (char *)text, strlen(text), (char *)cons, strlen(cons), 1, 0,
                                      LLVMInlineAsmDialectATT, 0);
    LLVMBuildCall2(x->b, ft, f, args, n, "");
}

void ptx_emit_text(ptx_ctx *x, const char *text) { asm_void(x, text, "~{memory}", NULL, 0); }

/* The shared-window address (u32) of element index of workgroup array s. */
static LLVMValueRef shared_addr(ptx_ctx *x, int64_t s, ir_val index) {
    if (s < 0 || (uint64_t)s >= x->n_shm) {
        ptx_fail(x, "no workgroup array %lld", (long long)s);
        return ptx_c_i32(x, 0);
    }
    ir_scalar e = ir_shared_at(x->k, (ir_shm)s)->elem;
    LLVMValueRef p = ptx_elem_ptr(x, x->shm[s], e, ptx_V(x, index));
    return LLVMBuildPtrToInt(x->b, p, ptx_t_i32(x), "");
}

/* The generic address of tensor map m's parameter (cvta.param of the .param symbol). */
static LLVMValueRef map_addr(ptx_ctx *x, int64_t m) {
    if (m < 0 || (uint64_t)m >= ir_n_tensor_maps(x->k) || !x->map_param[m][0]) {
        ptx_fail(x, "no tensor map %lld", (long long)m);
        return LLVMConstInt(LLVMInt64TypeInContext(x->lc), 0, 0);
    }
    char text[160];
    snprintf(text, sizeof text, "mov.u64 $0, %s;\ncvta.param.u64 $0, $0;", x->map_param[m]);
    LLVMTypeRef i64 = LLVMInt64TypeInContext(x->lc);
    LLVMTypeRef ft = LLVMFunctionType(i64, NULL, 0, 0);
    LLVMValueRef f = LLVMGetInlineAsm(ft, text, strlen(text), (char *)"=l", 2, 0, 0, LLVMInlineAsmDialectATT, 0);
    return LLVMBuildCall2(x->b, ft, f, NULL, 0, "");
}

static void mbar(ptx_ctx *x, const ir_inst *in) {
    LLVMValueRef a[2] = {shared_addr(x, in->imm[0], in->operand[0]), NULL};
    if (in->n_operand > 1) a[1] = ptx_V(x, in->operand[1]);
    switch (in->op) {
    case IR_OP_MBAR_INIT:
        asm_void(x,
                 "mbarrier.init.shared::cta.b64 [$0], $1;\n"
                 "fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;",
                 "r,r,~{memory}", a, 2);
        return;
    case IR_OP_MBAR_EXPECT:
        asm_void(x, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r,~{memory}", a, 2);
        return;
    case IR_OP_MBAR_WAIT:
        asm_void(x,
                 "{\n.reg .pred p;\nKILN_WAIT_${:uid}:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1;\n"
                 "@!p bra KILN_WAIT_${:uid};\n}",
                 "r,r,~{memory}", a, 2);
        return;
    case IR_OP_MBAR_ARRIVE:
        if (in->n_operand == 1)
            asm_void(x, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}", a, 1);
        else
            asm_void(x,
                     "{\n.reg .b32 r;\nmapa.shared::cluster.u32 r, $0, $1;\n"
                     "mbarrier.arrive.shared::cluster.b64 _, [r];\n}",
                     "r,r,~{memory}", a, 2);
        return;
    default: ptx_fail(x, "not a memory barrier op"); return;
    }
}

static void tma_load(ptx_ctx *x, const ir_inst *in) {
    LLVMValueRef a[6] = {shared_addr(x, in->imm[0], in->operand[0]), map_addr(x, in->imm[1]),
                         ptx_V(x, in->operand[1]), ptx_V(x, in->operand[2]),
                         shared_addr(x, in->imm[2], in->operand[3]), NULL};
    if (in->n_operand == 4) {
        asm_void(x,
                 "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                 "[$0], [$1, {$2, $3}], [$4];",
                 "r,l,r,r,r,~{memory}", a, 5);
        return;
    }
    a[5] = LLVMBuildTrunc(x->b, ptx_V(x, in->operand[4]), LLVMInt16TypeInContext(x->lc), "");
    asm_void(x,
             "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
             "[$0], [$1, {$2, $3}], [$4], $5;",
             "r,l,r,r,r,h,~{memory}", a, 6);
}

static void prefetch(ptx_ctx *x, const ir_inst *in) {
    if (x->sm < 90) return; /* a hint: nothing to do without the bulk prefetch */
    if (in->imm[0] < 0 || (uint64_t)in->imm[0] >= x->n_buf) {
        ptx_fail(x, "no buffer %lld", (long long)in->imm[0]);
        return;
    }
    const ir_param *p = ir_param_at(x->k, ir_buffer_param(x->k, (ir_buf)in->imm[0]));
    LLVMValueRef a[2] = {ptx_elem_ptr(x, x->buf[in->imm[0]], p->elem, ptx_V(x, in->operand[0])),
                         ptx_c_i32(x, (uint32_t)in->imm[1])};
    asm_void(x, "cp.async.bulk.prefetch.L2.global [$0], $1;", "l,r,~{memory}", a, 2);
}

void ptx_emit_sync(ptx_ctx *x, const ir_inst *in) {
    if (in->op == IR_OP_GRID_WAIT) {
        if (ptx_uses_grid_dep(x->c)) ptx_emit_text(x, "griddepcontrol.wait;");
        return;
    }
    if (in->op == IR_OP_PREFETCH) {
        if (ir_emit_need(&x->e, in, 1)) prefetch(x, in);
        return;
    }
    if (x->sm < 90) {
        ptx_fail(x, "%s needs sm_90 (memory barriers, clusters, the tensor copy engine); this is sm_%u",
                 ir_op_name(in->op), x->sm);
        return;
    }
    switch (in->op) {
    case IR_OP_CLUSTER_SYNC:
        ptx_emit_text(x, "barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;");
        return;
    case IR_OP_TMA_LOAD:
        if (ir_emit_need(&x->e, in, 4)) tma_load(x, in);
        return;
    default:
        if (ir_emit_need(&x->e, in, 1)) mbar(x, in);
        return;
    }
}
