/* Warpgroup matrix products for the PTX emitter (sm_90a; ir.h's ir_wg_mma): wg.mma is
 * inline PTX, one asm statement per IR instruction:
 *
 *   wgmma.fence; k_steps x wgmma.mma_async.m64nNk16 (A and B from shared-memory
 *   descriptors, D the accumulator, scale-d 1); wgmma.commit_group; wgmma.wait_group 0
 *
 * so the instruction is complete when it returns (without the wait for an async wg.mma;
 * wg.wait N is then wgmma.wait_group N over the same registers), and the accumulators are
 * tied operands ("+f": LLVM puts no copies between the products; a copy of one in flight
 * would make ptxas serialize, which the loader's info-log check refuses). LLVM 19 has no
 * intrinsics for wgmma.
 *
 * A descriptor (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the start address in
 * shared memory >> 4, 16-29 the leading dimension byte offset (LBO: between core matrices
 * adjacent along k) >> 4, 32-45 the stride dimension byte offset (SBO: between core
 * matrices adjacent along m or n; the 8-row atoms when swizzled) >> 4, 62-63 the swizzle
 * (0: none, the IR's core-matrix layout; 1: 128 bytes, IR_WG_MMA_SW128). Step s of k
 * starts 2 s core matrices along k (base + 2 s lbo), or swizzled 16 s elements into the
 * atoms' 64-element rows (the hardware applies the XOR from the address bits, so the atoms
 * are 1024-byte aligned: ptx_emit.c aligns the arrays of a module with wgmma). Both
 * operands are K-major (transpose bits 0): A as rows of k, B as its columns' rows of k. */
#include "backend-ptx/ptx_internal.h"

#include <stdio.h>
#include <string.h>

#define MAX_K_STEPS 8
#define MAX_ACC 128 /* n / 2 floats a lane, n <= 256 */

static LLVMTypeRef t_i64(ptx_ctx *x) { return LLVMInt64TypeInContext(x->lc); }

/* The descriptor of the matrix at element index at of array p (16-bit elements), sbo and
 * lbo in elements; swizzled: the 128-byte mode (lbo unused by the hardware for K-major
 * operands: the k steps move the start within an atom's row). */
static LLVMValueRef descriptor(ptx_ctx *x, LLVMValueRef p, LLVMValueRef at, LLVMValueRef sbo, LLVMValueRef lbo,
                               bool sw128) {
    LLVMValueRef ptr = ptx_elem_ptr(x, p, IR_BF16, at); /* 16-bit elements either way */
    LLVMValueRef addr = LLVMBuildPtrToInt(x->b, ptr, t_i64(x), ""); /* the shared window's offset */
    LLVMValueRef m14 = LLVMConstInt(t_i64(x), 0x3fff, 0);
    /* (bytes >> 4) & 0x3fff: elements * 2 / 16 = elements >> 3 */
    LLVMValueRef a = LLVMBuildAnd(x->b, LLVMBuildLShr(x->b, addr, LLVMConstInt(t_i64(x), 4, 0), ""), m14, "");
    LLVMValueRef l = sw128 ? LLVMConstInt(t_i64(x), 1, 0)
                           : LLVMBuildAnd(x->b,
                                          LLVMBuildLShr(x->b, LLVMBuildZExt(x->b, lbo, t_i64(x), ""),
                                                        LLVMConstInt(t_i64(x), 3, 0), ""),
                                          m14, "");
    LLVMValueRef s = LLVMBuildAnd(
        x->b, LLVMBuildLShr(x->b, LLVMBuildZExt(x->b, sbo, t_i64(x), ""), LLVMConstInt(t_i64(x), 3, 0), ""), m14, "");
    LLVMValueRef d = LLVMBuildOr(x->b, a, LLVMBuildShl(x->b, l, LLVMConstInt(t_i64(x), 16, 0), ""), "");
    d = LLVMBuildOr(x->b, d, LLVMBuildShl(x->b, s, LLVMConstInt(t_i64(x), 32, 0), ""), "");
    return sw128 ? LLVMBuildOr(x->b, d, LLVMConstInt(t_i64(x), 1ull << 62, 0), "") : d;
}

/* Where step s of k starts, in elements from the operand's base: 2 s core matrices along
 * k (plain), or 16 s elements into the atoms' rows, lbo per 64 (swizzled). */
static LLVMValueRef step_offset(ptx_ctx *x, uint32_t s, LLVMValueRef lbo, bool sw128) {
    if (!sw128) return LLVMBuildMul(x->b, ptx_c_i32(x, 2 * s), lbo, "");
    return LLVMBuildAdd(x->b, LLVMBuildMul(x->b, ptx_c_i32(x, 16 * s / 64), lbo, ""), ptx_c_i32(x, 16 * s % 64), "");
}

/* The asm text: {$0..$(na-1)} the accumulators, then the descriptors $na.. */
static int asm_text(char *buf, size_t cap, uint32_t n, uint32_t na, uint32_t steps, const char *ty, bool wait) {
    size_t at = 0;
    int w = snprintf(buf, cap, "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.fence.sync.aligned;\n");
    if (w < 0 || (size_t)w >= cap) return -1;
    at = (size_t)w;
    for (uint32_t s = 0; s < steps; s++) {
        w = snprintf(buf + at, cap - at, "wgmma.mma_async.sync.aligned.m64n%uk16.f32.%s.%s {", n, ty, ty);
        if (w < 0 || (size_t)w >= cap - at) return -1;
        at += (size_t)w;
        for (uint32_t i = 0; i < na; i++) {
            w = snprintf(buf + at, cap - at, "%s$%u", i ? "," : "", i);
            if (w < 0 || (size_t)w >= cap - at) return -1;
            at += (size_t)w;
        }
        w = snprintf(buf + at, cap - at, "}, $%u, $%u, p, 1, 1, 0, 0;\n", na + 2 * s, na + 2 * s + 1);
        if (w < 0 || (size_t)w >= cap - at) return -1;
        at += (size_t)w;
    }
    w = snprintf(buf + at, cap - at, "wgmma.commit_group.sync.aligned;\n%s}",
                 wait ? "wgmma.wait_group.sync.aligned 0;\n" : "");
    return w < 0 || (size_t)w >= cap - at ? -1 : 0;
}

/* One asm statement over the accumulator (operand 0) of in: outputs =f, then the nd i64
 * arguments already in args/at, then the accumulators tied to the outputs ("+f": LLVM
 * keeps them in the registers the products use, no copies between), side effects and a
 * memory clobber (the products read workgroup memory). Returns the new accumulator. */
static LLVMValueRef tied_asm(ptx_ctx *x, const ir_inst *in, const char *body, LLVMValueRef *args, LLVMTypeRef *at,
                             uint32_t nd) {
    const ir_type_desc *d = ir_type_get(x->k, in->type);
    uint32_t na = d->n / 2;
    LLVMTypeRef f32 = LLVMFloatTypeInContext(x->lc), rt[MAX_ACC];
    LLVMValueRef acc = ptx_V(x, in->operand[0]);
    for (uint32_t i = 0; i < na; i++) {
        args[nd + i] = LLVMBuildExtractElement(x->b, acc, ptx_c_i32(x, i), "");
        at[nd + i] = rt[i] = f32;
    }
    char cons[8 * (2 * MAX_K_STEPS + 2 * MAX_ACC) + 16];
    size_t cn = 0;
    for (uint32_t i = 0; i < na; i++) cn += (size_t)snprintf(cons + cn, sizeof cons - cn, "%s=f", i ? "," : "");
    for (uint32_t s = 0; s < nd; s++) cn += (size_t)snprintf(cons + cn, sizeof cons - cn, ",l");
    for (uint32_t i = 0; i < na; i++) cn += (size_t)snprintf(cons + cn, sizeof cons - cn, ",%u", i);
    cn += (size_t)snprintf(cons + cn, sizeof cons - cn, ",~{memory}");
    LLVMTypeRef ret = LLVMStructTypeInContext(x->lc, rt, na, 0);
    LLVMTypeRef fty = LLVMFunctionType(ret, at, nd + na, 0);
    LLVMValueRef asm_ = LLVMGetInlineAsm(fty, (char *)body, strlen(body), cons, cn, 1, 0, LLVMInlineAsmDialectATT, 0);
    LLVMValueRef call = LLVMBuildCall2(x->b, fty, asm_, args, nd + na, "");
    LLVMValueRef out = LLVMGetPoison(ptx_frag_type(x, in->type));
    for (uint32_t i = 0; i < na; i++)
        out = LLVMBuildInsertElement(x->b, out, LLVMBuildExtractValue(x->b, call, i, ""), ptx_c_i32(x, i), "");
    return out;
}

void ptx_emit_wgmma(ptx_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 7)) return;
    const ir_type_desc *d = ir_type_get(x->k, in->type);
    int64_t sa = in->imm[0], sb = in->imm[1], steps = in->imm[2] & IR_WG_MMA_STEPS;
    bool wait = !(in->imm[2] & IR_WG_MMA_ASYNC), sw = (in->imm[2] & IR_WG_MMA_SW128) != 0;
    if (!d || d->m != 64 || sa < 0 || (uint64_t)sa >= x->n_shm || sb < 0 || (uint64_t)sb >= x->n_shm || steps < 1 ||
        steps > MAX_K_STEPS) {
        ptx_fail(x, "malformed wg.mma");
        return;
    }
    if (x->sm < 90 || !x->c->wgmma) {
        ptx_fail(x, "wg.mma needs wgmma: sm_90a and caps.wgmma (sm_%u)", x->sm);
        return;
    }
    ir_scalar e = ir_shared_at(x->k, (ir_shm)sa)->elem;
    uint32_t na = d->n / 2, nd = 2 * (uint32_t)steps;
    LLVMTypeRef i64 = t_i64(x);
    LLVMValueRef args[2 * MAX_K_STEPS + MAX_ACC];
    LLVMTypeRef at[2 * MAX_K_STEPS + MAX_ACC];
    for (uint32_t s = 0; s < (uint32_t)steps; s++) {
        LLVMValueRef ao = step_offset(x, s, ptx_V(x, in->operand[3]), sw);
        LLVMValueRef bo = step_offset(x, s, ptx_V(x, in->operand[6]), sw);
        args[2 * s] = descriptor(x, x->shm[sa], LLVMBuildAdd(x->b, ptx_V(x, in->operand[1]), ao, ""),
                                 ptx_V(x, in->operand[2]), ptx_V(x, in->operand[3]), sw);
        args[2 * s + 1] = descriptor(x, x->shm[sb], LLVMBuildAdd(x->b, ptx_V(x, in->operand[4]), bo, ""),
                                     ptx_V(x, in->operand[5]), ptx_V(x, in->operand[6]), sw);
        at[2 * s] = at[2 * s + 1] = i64;
    }
    char body[16384];
    if (asm_text(body, sizeof body, d->n, na, (uint32_t)steps, e == IR_BF16 ? "bf16" : "f16", wait)) {
        ptx_fail(x, "wg.mma: asm text too long");
        return;
    }
    ptx_def(x, in->result, tied_asm(x, in, body, args, at, nd));
}

void ptx_emit_wg_wait(ptx_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 1)) return;
    const ir_type_desc *d = ir_type_get(x->k, in->type);
    if (!d || d->m != 64 || d->n / 2 > MAX_ACC || in->imm[0] < 0 || in->imm[0] > 7) {
        ptx_fail(x, "malformed wg.wait");
        return;
    }
    if (x->sm < 90 || !x->c->wgmma) {
        ptx_fail(x, "wg.wait needs wgmma: sm_90a and caps.wgmma (sm_%u)", x->sm);
        return;
    }
    char body[64];
    snprintf(body, sizeof body, "wgmma.wait_group.sync.aligned %d;", (int)in->imm[0]);
    LLVMValueRef args[MAX_ACC];
    LLVMTypeRef at[MAX_ACC];
    ptx_def(x, in->result, tied_asm(x, in, body, args, at, 0));
}

