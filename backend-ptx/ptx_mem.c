/* Buffer and workgroup-memory accesses for the PTX emitter: loads and stores (vectors
 * where the IR asks for them) and atomics. Masked accesses reach it lowered
 * (ir/lower_mask.c): ifs around plain accesses. */
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
LLVMValueRef ptx_elem_ptr(ptx_ctx *x, LLVMValueRef base, ir_scalar s, LLVMValueRef index) {
    LLVMValueRef i64 = LLVMBuildZExt(x->b, index, t_i64(x), "");
    return LLVMBuildInBoundsGEP2(x->b, ptx_t_store(x, s, 1), base, &i64, 1, "");
}

static LLVMValueRef add_u32(ptx_ctx *x, LLVMValueRef a, uint32_t k) {
    return k ? LLVMBuildAdd(x->b, a, ptx_c_i32(x, k), "") : a;
}

/* `lanes` consecutive elements from base[index]: one access of lanes * size bytes, aligned
 * so (the IR keeps index a multiple of lanes). */
static LLVMValueRef load_at(ptx_ctx *x, LLVMValueRef base, ir_scalar s, LLVMValueRef index, uint32_t lanes) {
    LLVMValueRef p = ptx_elem_ptr(x, base, s, index);
    LLVMValueRef v = LLVMBuildLoad2(x->b, ptx_t_store(x, s, lanes), p, "");
    LLVMSetAlignment(v, (ir_scalar_bits(s) / 8) * lanes);
    return ptx_from_storage(x, s, lanes, v);
}
static void store_at(ptx_ctx *x, LLVMValueRef base, ir_scalar s, LLVMValueRef index, uint32_t lanes, LLVMValueRef v) {
    LLVMValueRef p = ptx_elem_ptr(x, base, s, index);
    LLVMValueRef st = LLVMBuildStore(x->b, ptx_to_storage(x, s, lanes, v), p);
    LLVMSetAlignment(st, (ir_scalar_bits(s) / 8) * lanes);
}

static LLVMValueRef lane_of(ptx_ctx *x, uint32_t lanes, LLVMValueRef v, uint32_t l) {
    return lanes == 1 ? v : LLVMBuildExtractElement(x->b, v, ptx_c_i32(x, l), "");
}

static uint32_t lanes_of(ptx_ctx *x, ir_type t) {
    ir_scalar s;
    uint32_t n = 1;
    ptx_tinfo(x, t, &s, &n);
    return n;
}

void ptx_emit_memory(ptx_ctx *x, const ir_inst *in) {
    switch (in->op) {
    case IR_OP_LOAD: {
        if (!ir_emit_need(&x->e, in, 1)) return;
        uint32_t b = imm_idx(x, in, 0, x->n_buf, "buffer");
        uint32_t lanes = lanes_of(x, in->type);
        LLVMValueRef index = ptx_V(x, in->operand[0]);
        if (x->e.failed) return;
        ptx_def(x, in->result, load_at(x, x->buf[b], buf_elem(x, b), index, lanes));
        return;
    }
    case IR_OP_STORE: {
        if (!ir_emit_need(&x->e, in, 2)) return;
        uint32_t b = imm_idx(x, in, 0, x->n_buf, "buffer");
        uint32_t lanes = lanes_of(x, ir_type_of(x->k, in->operand[1]));
        LLVMValueRef index = ptx_V(x, in->operand[0]), v = ptx_V(x, in->operand[1]);
        if (x->e.failed) return;
        store_at(x, x->buf[b], buf_elem(x, b), index, lanes, v);
        return;
    }
    case IR_OP_LOAD_MASKED: case IR_OP_STORE_MASKED:
        ptx_fail(x, "masked accesses are lowered before emission (ir/lower.h)");
        return;
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
        for (uint32_t l = 0; l < lanes; l++)
            store_at(x, x->shm[s], e, add_u32(x, index, l), 1, lane_of(x, lanes, v, l));
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
    LLVMValueRef p = ptx_elem_ptr(x, shm ? x->shm[target] : x->buf[target], elem, index);
    LLVMValueRef r = LLVMBuildAtomicRMW(x->b, rmw, p, v, LLVMAtomicOrderingMonotonic, 0);
    if (bits) r = LLVMBuildBitCast(x->b, r, LLVMFloatTypeInContext(x->lc), "");
    ptx_def(x, in->result, r);
}
