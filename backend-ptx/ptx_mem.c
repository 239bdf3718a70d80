/* Buffer and workgroup-memory accesses for the PTX emitter: loads and stores (vectors
 * where the IR asks for them), masked accesses that never form an out-of-bounds
 * address on the taken path, and atomics. */
#include "backend-ptx/ptx_internal.h"

static LLVMTypeRef t_i64(ptx_ctx *x) { return LLVMInt64TypeInContext(x->lc); }

static uint32_t imm_idx(ptx_ctx *x, const ir_inst *in, int i, uint32_t max, const char *what) {
    int64_t v = in->imm[i];
    if (v < 0 || (uint64_t)v >= max) {
        ptx_fail(x, "%s %lld out of range", what, (long long)v);
        return 0;
    }
    return (uint32_t)v;
}

static ir_scalar buf_elem(ptx_ctx *x, uint32_t b) { return ir_param_at(x->k, ir_buffer_param(x->k, b))->elem; }

/* &array[index] (index u32, so zero-extended: the IR's indices are unsigned). */
static LLVMValueRef elem_ptr(ptx_ctx *x, LLVMValueRef base, ir_scalar s, LLVMValueRef index) {
    LLVMValueRef i64 = LLVMBuildZExt(x->b, index, t_i64(x), "");
    return LLVMBuildInBoundsGEP2(x->b, ptx_t_store(x, s, 1), base, &i64, 1, "");
}

static LLVMValueRef add_u32(ptx_ctx *x, LLVMValueRef a, uint32_t k) { return k ? LLVMBuildAdd(x->b, a, ptx_c_i32(x, k), "") : a; }

/* `lanes` consecutive elements from base[index]: one access of lanes * size bytes, aligned
 * so (the IR keeps index a multiple of lanes). */
static LLVMValueRef load_at(ptx_ctx *x, LLVMValueRef base, ir_scalar s, LLVMValueRef index, uint32_t lanes) {
    LLVMValueRef p = elem_ptr(x, base, s, index);
    LLVMValueRef v = LLVMBuildLoad2(x->b, ptx_t_store(x, s, lanes), p, "");
    LLVMSetAlignment(v, (ir_scalar_bits(s) / 8) * lanes);
    return ptx_from_storage(x, s, lanes, v);
}
static void store_at(ptx_ctx *x, LLVMValueRef base, ir_scalar s, LLVMValueRef index, uint32_t lanes, LLVMValueRef v) {
    LLVMValueRef p = elem_ptr(x, base, s, index);
    LLVMValueRef st = LLVMBuildStore(x->b, ptx_to_storage(x, s, lanes, v), p);
    LLVMSetAlignment(st, (ir_scalar_bits(s) / 8) * lanes);
}

static LLVMValueRef lane_of(ptx_ctx *x, uint32_t lanes, LLVMValueRef v, uint32_t l) {
    return lanes == 1 ? v : LLVMBuildExtractElement(x->b, v, ptx_c_i32(x, l), "");
}

/* ---- guarded blocks ---------------------------------------------------------------------- */

typedef struct guard {
    LLVMBasicBlockRef before, merge;
} guard;

static guard guard_begin(ptx_ctx *x, LLVMValueRef cond) {
    guard g = {LLVMGetInsertBlock(x->b), LLVMAppendBasicBlockInContext(x->lc, x->fn, "skip")};
    LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(x->lc, x->fn, "inb");
    LLVMBuildCondBr(x->b, cond, then, g.merge);
    LLVMPositionBuilderAtEnd(x->b, then);
    return g;
}
/* Closes the guarded block; returns phi(v from it, fallback when skipped) when v is given. */
static LLVMValueRef guard_end(ptx_ctx *x, guard g, LLVMValueRef v, LLVMValueRef fallback) {
    LLVMBasicBlockRef then_end = LLVMGetInsertBlock(x->b);
    LLVMBuildBr(x->b, g.merge);
    LLVMPositionBuilderAtEnd(x->b, g.merge);
    if (!v) return NULL;
    LLVMValueRef phi = LLVMBuildPhi(x->b, LLVMTypeOf(v), "");
    LLVMValueRef vals[2] = {v, fallback};
    LLVMBasicBlockRef from[2] = {then_end, g.before};
    LLVMAddIncoming(phi, vals, from, 2);
    return phi;
}

/* index + l < limit, without wrapping: index < limit && limit - index > l. */
static LLVMValueRef lane_in_bounds(ptx_ctx *x, LLVMValueRef index, LLVMValueRef limit, uint32_t l) {
    LLVMValueRef lt = LLVMBuildICmp(x->b, LLVMIntULT, index, limit, "");
    if (!l) return lt;
    LLVMValueRef room = LLVMBuildSub(x->b, limit, index, "");
    return LLVMBuildAnd(x->b, lt, LLVMBuildICmp(x->b, LLVMIntUGT, room, ptx_c_i32(x, l), ""), "");
}

/* Masked: the whole vector when every lane is in bounds, else lane by lane, each guarded. */
static LLVMValueRef masked_load(ptx_ctx *x, uint32_t b, LLVMValueRef index, uint32_t lanes, LLVMValueRef limit,
                                LLVMValueRef fallback) {
    ir_scalar s = buf_elem(x, b);
    LLVMValueRef base = x->buf[b];
    if (lanes == 1) {
        guard g = guard_begin(x, lane_in_bounds(x, index, limit, 0));
        return guard_end(x, g, load_at(x, base, s, index, 1), fallback);
    }
    guard all = guard_begin(x, lane_in_bounds(x, index, limit, lanes - 1));
    LLVMValueRef full = load_at(x, base, s, index, lanes);
    LLVMBasicBlockRef full_end = LLVMGetInsertBlock(x->b);
    LLVMBasicBlockRef part_l = LLVMAppendBasicBlockInContext(x->lc, x->fn, "part");
    LLVMBuildBr(x->b, all.merge);
    /* retarget the skip edge of the first guard to the lane-by-lane path */
    LLVMValueRef term = LLVMGetBasicBlockTerminator(all.before);
    LLVMSetSuccessor(term, 1, part_l);
    LLVMPositionBuilderAtEnd(x->b, part_l);
    LLVMValueRef r = LLVMGetPoison(ptx_t_rep(x, s, lanes));
    for (uint32_t l = 0; l < lanes; l++) {
        guard g = guard_begin(x, lane_in_bounds(x, index, limit, l));
        LLVMValueRef v = guard_end(x, g, load_at(x, base, s, add_u32(x, index, l), 1), fallback);
        r = LLVMBuildInsertElement(x->b, r, v, ptx_c_i32(x, l), "");
    }
    LLVMBasicBlockRef part_end = LLVMGetInsertBlock(x->b);
    LLVMBuildBr(x->b, all.merge);
    LLVMPositionBuilderAtEnd(x->b, all.merge);
    LLVMValueRef phi = LLVMBuildPhi(x->b, LLVMTypeOf(full), "");
    LLVMValueRef vals[2] = {full, r};
    LLVMBasicBlockRef from[2] = {full_end, part_end};
    LLVMAddIncoming(phi, vals, from, 2);
    return phi;
}

static void masked_store(ptx_ctx *x, uint32_t b, LLVMValueRef index, uint32_t lanes, LLVMValueRef v, LLVMValueRef limit) {
    ir_scalar s = buf_elem(x, b);
    LLVMValueRef base = x->buf[b];
    if (lanes == 1) {
        guard g = guard_begin(x, lane_in_bounds(x, index, limit, 0));
        store_at(x, base, s, index, 1, v);
        guard_end(x, g, NULL, NULL);
        return;
    }
    guard all = guard_begin(x, lane_in_bounds(x, index, limit, lanes - 1));
    store_at(x, base, s, index, lanes, v);
    LLVMBasicBlockRef part_l = LLVMAppendBasicBlockInContext(x->lc, x->fn, "part");
    LLVMBuildBr(x->b, all.merge);
    LLVMSetSuccessor(LLVMGetBasicBlockTerminator(all.before), 1, part_l);
    LLVMPositionBuilderAtEnd(x->b, part_l);
    for (uint32_t l = 0; l < lanes; l++) {
        guard g = guard_begin(x, lane_in_bounds(x, index, limit, l));
        store_at(x, base, s, add_u32(x, index, l), 1, lane_of(x, lanes, v, l));
        guard_end(x, g, NULL, NULL);
    }
    LLVMBuildBr(x->b, all.merge);
    LLVMPositionBuilderAtEnd(x->b, all.merge);
}

static uint32_t lanes_of(ptx_ctx *x, ir_type t) {
    ir_scalar s;
    uint32_t n = 1;
    ptx_tinfo(x, t, &s, &n);
    return n;
}

void ptx_emit_memory(ptx_ctx *x, const ir_inst *in) {
    switch (in->op) {
    case IR_OP_LOAD: case IR_OP_LOAD_MASKED: {
        bool masked = in->op == IR_OP_LOAD_MASKED;
        if (!ir_emit_need(&x->e, in, masked ? 3 : 1)) return;
        uint32_t b = imm_idx(x, in, 0, x->n_buf, "buffer");
        uint32_t lanes = lanes_of(x, in->type);
        LLVMValueRef index = ptx_V(x, in->operand[0]);
        LLVMValueRef limit = masked ? ptx_V(x, in->operand[1]) : NULL, fb = masked ? ptx_V(x, in->operand[2]) : NULL;
        if (x->e.failed) return;
        ptx_def(x, in->result, masked ? masked_load(x, b, index, lanes, limit, fb) : load_at(x, x->buf[b], buf_elem(x, b), index, lanes));
        return;
    }
    case IR_OP_STORE: case IR_OP_STORE_MASKED: {
        bool masked = in->op == IR_OP_STORE_MASKED;
        if (!ir_emit_need(&x->e, in, masked ? 3 : 2)) return;
        uint32_t b = imm_idx(x, in, 0, x->n_buf, "buffer");
        uint32_t lanes = lanes_of(x, ir_type_of(x->k, in->operand[1]));
        LLVMValueRef index = ptx_V(x, in->operand[0]), v = ptx_V(x, in->operand[1]);
        LLVMValueRef limit = masked ? ptx_V(x, in->operand[2]) : NULL;
        if (x->e.failed) return;
        if (masked) masked_store(x, b, index, lanes, v, limit);
        else store_at(x, x->buf[b], buf_elem(x, b), index, lanes, v);
        return;
    }
    case IR_OP_SHM_LOAD: {
        if (!ir_emit_need(&x->e, in, 1)) return;
        uint32_t s = imm_idx(x, in, 0, x->n_shm, "workgroup array");
        uint32_t lanes = lanes_of(x, in->type);
        LLVMValueRef index = ptx_V(x, in->operand[0]);
        if (x->e.failed) return;
        ir_scalar e = ir_shared_at(x->k, s)->elem;
        /* lane by lane: the IR promises no alignment for workgroup vectors; LLVM merges
         * the accesses where it can prove it */
        if (lanes == 1) {
            ptx_def(x, in->result, load_at(x, x->shm[s], e, index, 1));
            return;
        }
        LLVMValueRef r = LLVMGetPoison(ptx_t_rep(x, e, lanes));
        for (uint32_t l = 0; l < lanes; l++)
            r = LLVMBuildInsertElement(x->b, r, load_at(x, x->shm[s], e, add_u32(x, index, l), 1), ptx_c_i32(x, l), "");
        ptx_def(x, in->result, r);
        return;
    }
    case IR_OP_SHM_STORE: {
        if (!ir_emit_need(&x->e, in, 2)) return;
        uint32_t s = imm_idx(x, in, 0, x->n_shm, "workgroup array");
        uint32_t lanes = lanes_of(x, ir_type_of(x->k, in->operand[1]));
        LLVMValueRef index = ptx_V(x, in->operand[0]), v = ptx_V(x, in->operand[1]);
        if (x->e.failed) return;
        ir_scalar e = ir_shared_at(x->k, s)->elem;
        for (uint32_t l = 0; l < lanes; l++) store_at(x, x->shm[s], e, add_u32(x, index, l), 1, lane_of(x, lanes, v, l));
        return;
    }
    default: return;
    }
}

/* ATOMIC: imm[0] target, imm[1] op, imm[2] shm flag; operands index, value. Relaxed
 * (monotonic), as the IR's atomics are. */
void ptx_emit_atomic(ptx_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 2)) return;
    uint32_t op = imm_idx(x, in, 1, IR_ATOMIC_XCHG + 1, "atomic op");
    bool shm = in->imm[2] != 0;
    uint32_t target = imm_idx(x, in, 0, shm ? x->n_shm : x->n_buf, shm ? "workgroup array" : "buffer");
    ir_scalar s;
    uint32_t n;
    if (x->e.failed || !ptx_tinfo(x, in->type, &s, &n)) return;
    if (n != 1 || ir_scalar_bits(s) != 32) {
        ptx_fail(x, "atomics take 32-bit scalars, not %s x%u", ir_scalar_name(s), n);
        return;
    }
    bool fl = s == IR_F32;
    LLVMAtomicRMWBinOp rmw;
    switch (op) {
    case IR_ATOMIC_ADD:
        if (fl && !shm && !x->c->atomic_f32_add) {
            ptx_fail(x, "f32 atomic add needs caps.atomic_f32_add");
            return;
        }
        rmw = fl ? LLVMAtomicRMWBinOpFAdd : LLVMAtomicRMWBinOpAdd;
        break;
    case IR_ATOMIC_MIN: case IR_ATOMIC_MAX:
        if (fl) {
            ptx_fail(x, "atomic min/max take i32/u32, not f32");
            return;
        }
        rmw = op == IR_ATOMIC_MIN ? (ir_scalar_is_signed(s) ? LLVMAtomicRMWBinOpMin : LLVMAtomicRMWBinOpUMin)
                                  : (ir_scalar_is_signed(s) ? LLVMAtomicRMWBinOpMax : LLVMAtomicRMWBinOpUMax);
        break;
    default: rmw = LLVMAtomicRMWBinOpXchg; break;
    }
    LLVMValueRef index = ptx_V(x, in->operand[0]), v = ptx_V(x, in->operand[1]);
    if (x->e.failed) return;
    ir_scalar elem = shm ? ir_shared_at(x->k, target)->elem : buf_elem(x, target);
    if (ir_scalar_bits(elem) != 32) {
        ptx_fail(x, "atomic on an array of %s", ir_scalar_name(elem));
        return;
    }
    /* an f32 exchange moves bits: exchanged as i32 (atom.exch.b32) */
    bool bits = rmw == LLVMAtomicRMWBinOpXchg && fl;
    if (bits) v = LLVMBuildBitCast(x->b, v, ptx_t_i32(x), "");
    LLVMValueRef p = elem_ptr(x, shm ? x->shm[target] : x->buf[target], elem, index);
    LLVMValueRef r = LLVMBuildAtomicRMW(x->b, rmw, p, v, LLVMAtomicOrderingMonotonic, 0);
    if (bits) r = LLVMBuildBitCast(x->b, r, LLVMFloatTypeInContext(x->lc), "");
    ptx_def(x, in->result, r);
}
