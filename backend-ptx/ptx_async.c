/* Asynchronous copies for the PTX emitter (sm_80+; ptx_emit.h): async.copy is
 * cp.async into workgroup memory, .cg (L2 only: staged data is read once from
 * workgroup memory, never again from L1) for 16 bytes and .ca for 4 or 8, with a source
 * size: the bytes of the copy below the limit, so the rest is zero-filled and nothing
 * at or past the limit is read. async.commit is cp.async.commit_group, async.wait
 * cp.async.wait_group (on sm_90a, with wgmma in the module, followed by a fence of the async
 * proxy, through which wgmma reads the copied data). Below sm_80 ir/lower_async.c has turned them into plain
 * accesses before this file is reached. */
#include "backend-ptx/ptx_internal.h"

#include <stdio.h>

static void emit_copy(ptx_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 3)) return;
    int64_t s = in->imm[0], b = in->imm[1], count = in->imm[2];
    if (s < 0 || (uint64_t)s >= x->n_shm || b < 0 || (uint64_t)b >= x->n_buf) {
        ptx_fail(x, "async.copy array or buffer out of range");
        return;
    }
    ir_scalar e = ir_shared_at(x->k, (ir_shm)s)->elem;
    uint32_t eb = ir_scalar_bits(e) / 8, bytes = eb * (uint32_t)count;
    if (x->sm < 80 || (bytes != 4 && bytes != 8 && bytes != 16)) {
        ptx_fail(x, "cp.async needs sm_80 and 4, 8 or 16 bytes (sm_%u, %u bytes)", x->sm, bytes);
        return;
    }
    LLVMValueRef di = ptx_V(x, in->operand[0]), si = ptx_V(x, in->operand[1]), lim = ptx_V(x, in->operand[2]);
    /* elements below the limit: min(limit - src, count), 0 when src >= limit */
    LLVMValueRef room = LLVMBuildSub(x->b, lim, si, "");
    LLVMValueRef below = LLVMBuildICmp(x->b, LLVMIntULT, si, lim, "");
    LLVMValueRef some = LLVMBuildSelect(x->b, below, room, ptx_c_i32(x, 0), "");
    LLVMValueRef full = LLVMBuildICmp(x->b, LLVMIntUGE, some, ptx_c_i32(x, (uint32_t)count), "");
    LLVMValueRef n = LLVMBuildSelect(x->b, full, ptx_c_i32(x, (uint32_t)count), some, "");
    LLVMValueRef src_size = LLVMBuildMul(x->b, n, ptx_c_i32(x, eb), "");
    LLVMValueRef args[3] = {ptx_elem_ptr(x, x->shm[s], e, di), ptx_elem_ptr(x, x->buf[b], e, si), src_size};
    LLVMTypeRef ts[3] = {LLVMTypeOf(args[0]), LLVMTypeOf(args[1]), ptx_t_i32(x)};
    char name[64];
    snprintf(name, sizeof name, "llvm.nvvm.cp.async.%s.shared.global.%u.s", bytes == 16 ? "cg" : "ca", bytes);
    ptx_call(x, name, LLVMVoidTypeInContext(x->lc), ts, args, 3);
}

void ptx_emit_async(ptx_ctx *x, const ir_inst *in) {
    LLVMTypeRef v = LLVMVoidTypeInContext(x->lc), i32 = ptx_t_i32(x);
    switch (in->op) {
    case IR_OP_ASYNC_COPY: emit_copy(x, in); return;
    case IR_OP_ASYNC_COMMIT: ptx_call(x, "llvm.nvvm.cp.async.commit.group", v, NULL, NULL, 0); return;
    case IR_OP_ASYNC_WAIT: {
        LLVMValueRef n = ptx_c_i32(x, (uint32_t)in->imm[0]);
        ptx_call(x, "llvm.nvvm.cp.async.wait.group", v, &i32, &n, 1);
        if (x->arch_a) { /* wgmma reads workgroup memory through the async proxy: order the copies before it */
            static const char fence[] = "fence.proxy.async.shared::cta;";
            LLVMTypeRef ft = LLVMFunctionType(v, NULL, 0, 0);
            LLVMValueRef f = LLVMGetInlineAsm(ft, (char *)fence, sizeof fence - 1, (char *)"~{memory}", 9, 1, 0,
                                              LLVMInlineAsmDialectATT, 0);
            LLVMBuildCall2(x->b, ft, f, NULL, 0, "");
        }
        return;
    }
    default: ptx_fail(x, "not an asynchronous copy"); return;
    }
}
