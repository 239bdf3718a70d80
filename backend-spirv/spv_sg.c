/* Invocation ids (builtins) and subgroup operations for the SPIR-V emitter. */
#include "backend-spirv/spv_internal.h"

/* ---- builtins ------------------------------------------------------------------------------ */

uint32_t spv_load_id(spv_ctx *x, ir_id_kind kind, uint32_t dim) {
    static const struct { uint32_t builtin; bool vec; const char *name; } B[IR_ID_COUNT] = {
        [IR_ID_GLOBAL] = {SpvBuiltInGlobalInvocationId, true, "gl_GlobalInvocationID"},
        [IR_ID_LOCAL] = {SpvBuiltInLocalInvocationId, true, "gl_LocalInvocationID"},
        [IR_ID_GROUP] = {SpvBuiltInWorkgroupId, true, "gl_WorkGroupID"},
        [IR_ID_NUM_GROUPS] = {SpvBuiltInNumWorkgroups, true, "gl_NumWorkGroups"},
        [IR_ID_SG_ID] = {SpvBuiltInSubgroupId, false, "gl_SubgroupID"},
        [IR_ID_SG_LANE] = {SpvBuiltInSubgroupLocalInvocationId, false, "gl_SubgroupInvocationID"},
        [IR_ID_SG_SIZE] = {SpvBuiltInSubgroupSize, false, "gl_SubgroupSize"},
    };
    if ((unsigned)kind >= IR_ID_COUNT || dim > 2) {
        spv_fail(x, "bad id kind %d / dim %u", (int)kind, dim);
        return 0;
    }
    if (kind == IR_ID_WARPGROUP || kind == IR_ID_CLUSTER_RANK) {
        spv_fail(x, "warpgroups and clusters are CUDA's (sm_90); Vulkan has no such id");
        return 0;
    }
    uint32_t t = B[kind].vec ? spv_t_vec(x, spv_t_u32(x), 3) : spv_t_u32(x);
    if (!x->builtin[kind]) {
        if (!B[kind].vec) spv_b_capability(&x->b, SpvCapabilityGroupNonUniform);
        uint32_t var = spv_global_var(x, spv_t_ptr(x, SpvStorageClassInput, t), SpvStorageClassInput);
        spv_decorate(x, var, SpvDecorationBuiltIn, 1, B[kind].builtin);
        spv_name(x, var, B[kind].name);
        x->builtin[kind] = var;
    }
    uint32_t v = spv_fn1(x, SpvOpLoad, t, x->builtin[kind]);
    return B[kind].vec ? spv_fn2(x, SpvOpCompositeExtract, spv_t_u32(x), v, dim) : v;
}

/* ---- subgroups -------------------------------------------------------------------------------- */

void spv_emit_subgroup(spv_ctx *x, const ir_inst *in) {
    bool reduce = in->op == IR_OP_SG_REDUCE;
    if (!ir_emit_need(&x->e, in, reduce ? 1 : 2)) return;
    ir_scalar s;
    uint32_t n;
    if (!ir_emit_tinfo(&x->e, in->type, &s, &n)) {
        spv_fail(x, "subgroup op on a fragment");
        return;
    }
    if (reduce ? !x->c->subgroup_arith : !x->c->subgroup_shuffle) {
        spv_fail(x, reduce ? "subgroup reduce needs caps.subgroup_arith"
                           : "subgroup shuffle/broadcast needs caps.subgroup_shuffle");
        return;
    }
    uint32_t v = spv_V(x, in->operand[0]);
    uint32_t scope = spv_c_u32(x, SCOPE_SUBGROUP);
    /* f16 values travel as f32 (16-bit subgroup ops need shaderSubgroupExtendedTypes, which
     * caps does not report); 64-bit ones as two u32 for shuffles */
    bool via_f32 = s == IR_F16 && x->f16_native;
    uint32_t t = spv_t_rep_sn(x, s, n), tw = via_f32 ? spv_t_vec(x, spv_t_f32(x), n) : t;
    if (via_f32) v = spv_fn1(x, SpvOpFConvert, tw, v);
    uint32_t r;
    if (reduce) {
        int64_t ro = in->imm[0];
        if (s == IR_BOOL || ir_scalar_bits(s) == 64 || ro < 0 || ro > IR_REDUCE_MAX) {
            spv_fail(x, "subgroup reduce of %s is not supported", ir_scalar_name(s));
            return;
        }
        if (ro == IR_REDUCE_ADD && !spv_check_arith(x, s)) return;
        bool fl = ir_scalar_is_float(s), sg = ir_scalar_is_signed(s);
        static const uint32_t OPS[3][3] = {
            {SpvOpGroupNonUniformFAdd, SpvOpGroupNonUniformIAdd, SpvOpGroupNonUniformIAdd},
            {SpvOpGroupNonUniformFMin, SpvOpGroupNonUniformSMin, SpvOpGroupNonUniformUMin},
            {SpvOpGroupNonUniformFMax, SpvOpGroupNonUniformSMax, SpvOpGroupNonUniformUMax},
        };
        uint32_t op = OPS[ro][fl ? 0 : sg ? 1 : 2];
        spv_b_capability(&x->b, SpvCapabilityGroupNonUniformArithmetic);
        r = spv_fn3(x, op, tw, scope, SpvGroupOperationReduce, v);
    } else {
        uint32_t lane = spv_V(x, in->operand[1]);
        /* broadcast uses Shuffle: OpGroupNonUniformBroadcast needs the ballot feature, which
         * caps does not report; a uniform lane makes it the same read */
        uint32_t op = in->op == IR_OP_SG_SHUFFLE_XOR ? SpvOpGroupNonUniformShuffleXor : SpvOpGroupNonUniformShuffle;
        spv_b_capability(&x->b, SpvCapabilityGroupNonUniformShuffle);
        if (ir_scalar_bits(s) == 64) {
            if (n != 1) {
                spv_fail(x, "subgroup shuffle of 64-bit vectors is not supported");
                return;
            }
            uint32_t t2 = spv_t_vec(x, spv_t_u32(x), 2);
            uint32_t p = spv_fn1(x, SpvOpBitcast, t2, v);
            r = spv_fn1(x, SpvOpBitcast, t, spv_fn3(x, op, t2, scope, p, lane));
        } else {
            r = spv_fn3(x, op, tw, scope, v, lane);
        }
    }
    if (via_f32) r = spv_fn1(x, SpvOpFConvert, t, r);
    spv_def(x, in->result, r);
}

void spv_emit_barrier(spv_ctx *x, const ir_inst *in) {
    /* the Vulkan memory model also needs the barrier to make writes available/visible */
    uint32_t vis = x->vulkan_mm ? SpvMemorySemanticsMakeAvailableMask | SpvMemorySemanticsMakeVisibleMask : 0;
    if (in->op == IR_OP_FENCE) { /* buffers at device scope; their variables are Coherent (decorate_buffers) */
        uint32_t scope = spv_c_u32(x, x->vulkan_mm ? SCOPE_QUEUE_FAMILY : SCOPE_DEVICE);
        uint32_t sem = SpvMemorySemanticsAcquireReleaseMask | SpvMemorySemanticsUniformMemoryMask | vis;
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpMemoryBarrier, 2, scope, spv_c_u32(x, sem));
        return;
    }
    uint32_t sem = spv_c_u32(x, SEM_BARRIER | vis), wg = spv_c_u32(x, SCOPE_WORKGROUP);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpControlBarrier, 3, wg, wg, sem);
}
