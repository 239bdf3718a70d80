/* Invocation ids, the workgroup barrier and subgroup operations for the PTX emitter.
 * A subgroup is a CUDA warp of 32 lanes; warps are cut from the linear thread index. */
#include "backend-ptx/ptx_internal.h"

#include <stdio.h>

#define FULL_MASK 0xffffffffu

static LLVMValueRef sreg(ptx_ctx *x, const char *name) {
    char nm[64];
    snprintf(nm, sizeof nm, "llvm.nvvm.read.ptx.sreg.%s", name);
    return ptx_call(x, nm, ptx_t_i32(x), NULL, NULL, 0);
}

static LLVMValueRef sreg_dim(ptx_ctx *x, const char *base, uint32_t dim) {
    char nm[32];
    snprintf(nm, sizeof nm, "%s.%c", base, "xyz"[dim]);
    return sreg(x, nm);
}

/* The thread's index within its block, linear (x fastest), as warps are formed. */
static LLVMValueRef linear_tid(ptx_ctx *x) {
    LLVMValueRef t = sreg_dim(x, "tid", 0);
    if (x->wg[1] == 1 && x->wg[2] == 1) return t;
    LLVMValueRef yz = LLVMBuildAdd(x->b, sreg_dim(x, "tid", 1),
                                   LLVMBuildMul(x->b, sreg_dim(x, "tid", 2), ptx_c_i32(x, x->wg[1]), ""), "");
    return LLVMBuildAdd(x->b, t, LLVMBuildMul(x->b, yz, ptx_c_i32(x, x->wg[0]), ""), "");
}

LLVMValueRef ptx_load_id(ptx_ctx *x, ir_id_kind kind, uint32_t dim) {
    if (dim > 2) {
        ptx_fail(x, "bad id dimension %u", dim);
        return ptx_c_i32(x, 0);
    }
    switch (kind) {
    case IR_ID_GLOBAL:
        return LLVMBuildAdd(x->b, LLVMBuildMul(x->b, sreg_dim(x, "ctaid", dim), ptx_c_i32(x, x->wg[dim]), ""),
                            sreg_dim(x, "tid", dim), "");
    case IR_ID_LOCAL: return sreg_dim(x, "tid", dim);
    case IR_ID_GROUP: return sreg_dim(x, "ctaid", dim);
    case IR_ID_NUM_GROUPS: return sreg_dim(x, "nctaid", dim);
    case IR_ID_SG_ID: return LLVMBuildLShr(x->b, linear_tid(x), ptx_c_i32(x, 5), "");
    case IR_ID_SG_LANE: return sreg(x, "laneid");
    case IR_ID_SG_SIZE: return ptx_c_i32(x, 32);
    case IR_ID_WARPGROUP: return LLVMBuildLShr(x->b, linear_tid(x), ptx_c_i32(x, 7), "");
    case IR_ID_CLUSTER_RANK:
        if (x->sm < 90) return ptx_c_i32(x, 0); /* no clusters: every workgroup is rank 0 of its own */
        return sreg(x, "cluster.ctarank");
    default: ptx_fail(x, "unknown id kind %d", (int)kind); return ptx_c_i32(x, 0);
    }
}

void ptx_emit_barrier(ptx_ctx *x, const ir_inst *in) {
    if (in->op == IR_OP_FENCE) /* acquire and release at the GPU's scope (sm_70+); a compiler barrier too */
        ptx_emit_text(x, "fence.acq_rel.gpu;");
    else
        ptx_call(x, "llvm.nvvm.barrier0", LLVMVoidTypeInContext(x->lc), NULL, NULL, 0);
}

/* One 32-bit word from another lane: shfl.sync.bfly (xor) or .idx, full warp. */
static LLVMValueRef shfl32(ptx_ctx *x, bool bfly, LLVMValueRef w, LLVMValueRef lane) {
    LLVMTypeRef i32 = ptx_t_i32(x), ts[4] = {i32, i32, i32, i32};
    LLVMValueRef v[4] = {ptx_c_i32(x, FULL_MASK), w, lane, ptx_c_i32(x, 0x1f)};
    return ptx_call(x, bfly ? "llvm.nvvm.shfl.sync.bfly.i32" : "llvm.nvvm.shfl.sync.idx.i32", i32, ts, v, 4);
}

/* A scalar of any register type from another lane, moved as 32-bit words. */
static LLVMValueRef shfl_scalar(ptx_ctx *x, bool bfly, ir_scalar s, LLVMValueRef v, LLVMValueRef lane) {
    LLVMBuilderRef b = x->b;
    LLVMTypeRef i32 = ptx_t_i32(x), t = LLVMTypeOf(v);
    switch (ir_scalar_bits(s)) {
    case 1: return LLVMBuildTrunc(b, shfl32(x, bfly, LLVMBuildZExt(b, v, i32, ""), lane), t, "");
    case 64: {
        LLVMTypeRef i64 = LLVMInt64TypeInContext(x->lc);
        LLVMValueRef lo = shfl32(x, bfly, LLVMBuildTrunc(b, v, i32, ""), lane);
        LLVMValueRef hi =
            shfl32(x, bfly, LLVMBuildTrunc(b, LLVMBuildLShr(b, v, LLVMConstInt(i64, 32, 0), ""), i32, ""), lane);
        return LLVMBuildOr(b, LLVMBuildZExt(b, lo, i64, ""),
                           LLVMBuildShl(b, LLVMBuildZExt(b, hi, i64, ""), LLVMConstInt(i64, 32, 0), ""), "");
    }
    default: /* i32/u32, and f32 registers (f32, and f16/bf16 held in f32) */
        if (t == i32) return shfl32(x, bfly, v, lane);
        return LLVMBuildBitCast(b, shfl32(x, bfly, LLVMBuildBitCast(b, v, i32, ""), lane), t, "");
    }
}

static LLVMValueRef shfl(ptx_ctx *x, bool bfly, ir_scalar s, uint32_t n, LLVMValueRef v, LLVMValueRef lane) {
    if (n == 1) return shfl_scalar(x, bfly, s, v, lane);
    LLVMValueRef r = LLVMGetPoison(LLVMTypeOf(v));
    for (uint32_t l = 0; l < n; l++) {
        LLVMValueRef e = LLVMBuildExtractElement(x->b, v, ptx_c_i32(x, l), "");
        r = LLVMBuildInsertElement(x->b, r, shfl_scalar(x, bfly, s, e, lane), ptx_c_i32(x, l), "");
    }
    return r;
}

/* a op b for a subgroup reduction */
static LLVMValueRef combine(ptx_ctx *x, ir_reduce r, ir_scalar s, LLVMValueRef a, LLVMValueRef b) {
    bool fl = s == IR_F32, sg = ir_scalar_is_signed(s);
    if (r == IR_REDUCE_ADD) return fl ? LLVMBuildFAdd(x->b, a, b, "") : LLVMBuildAdd(x->b, a, b, "");
    const char *nm = r == IR_REDUCE_MIN ? (fl ? "llvm.minnum.f32" : sg ? "llvm.smin.i32" : "llvm.umin.i32")
                                        : (fl ? "llvm.maxnum.f32" : sg ? "llvm.smax.i32" : "llvm.umax.i32");
    LLVMTypeRef t = LLVMTypeOf(a), ts[2] = {t, t};
    LLVMValueRef v[2] = {a, b};
    return ptx_call(x, nm, t, ts, v, 2);
}

void ptx_emit_subgroup(ptx_ctx *x, const ir_inst *in) {
    bool reduce = in->op == IR_OP_SG_REDUCE;
    if (!ir_emit_need(&x->e, in, reduce ? 1 : 2)) return;
    ir_scalar s;
    uint32_t n;
    if (!ptx_tinfo(x, in->type, &s, &n)) return;
    if (reduce ? !x->c->subgroup_arith : !x->c->subgroup_shuffle) {
        ptx_fail(x, reduce ? "subgroup reduce needs caps.subgroup_arith"
                           : "subgroup shuffle/broadcast needs caps.subgroup_shuffle");
        return;
    }
    LLVMValueRef v = ptx_V(x, in->operand[0]);
    LLVMValueRef lane = reduce ? NULL : ptx_V(x, in->operand[1]);
    if (x->e.failed) return;
    if (!reduce) {
        ptx_def(x, in->result, shfl(x, in->op == IR_OP_SG_SHUFFLE_XOR, s, n, v, lane));
        return;
    }
    int64_t ro = in->imm[0];
    if (n != 1 || (s != IR_I32 && s != IR_U32 && s != IR_F32) || ro < 0 || ro > IR_REDUCE_MAX) {
        ptx_fail(x, "subgroup reduce of %s x%u is not supported (i32/u32/f32 scalars)", ir_scalar_name(s), n);
        return;
    }
    /* butterfly: partners combine the same two values (a op b == b op a exactly, also in
     * f32), so every lane ends with the same bits */
    for (uint32_t m = 16; m >= 1; m /= 2)
        v = combine(x, (ir_reduce)ro, s, v, shfl_scalar(x, true, s, v, ptx_c_i32(x, m)));
    ptx_def(x, in->result, v);
}
