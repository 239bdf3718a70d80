/* Buffers (one Block variable per view width), storage <-> value representation,
 * workgroup arrays, masked accesses and atomics for the SPIR-V emitter. */
#include "backend-spirv/spv_internal.h"

#include <stdio.h>

/* Buffer storage <-> value representation. */
static uint32_t from_storage(spv_ctx *x, ir_scalar s, uint32_t n, uint32_t sv) {
    if (s == IR_BF16) {
        uint32_t tu = spv_t_vec(x, spv_t_u32(x), n);
        uint32_t w = spv_fn2(x, SpvOpShiftLeftLogical, tu, spv_fn1(x, SpvOpUConvert, tu, sv), spv_c_u32n(x, n, 16));
        return spv_fn1(x, SpvOpBitcast, spv_t_vec(x, spv_t_f32(x), n), w);
    }
    if (s == IR_F16 && !x->f16_native) return spv_fn1(x, SpvOpFConvert, spv_t_vec(x, spv_t_f32(x), n), sv);
    return sv;
}
static uint32_t to_storage(spv_ctx *x, ir_scalar s, uint32_t n, uint32_t v) {
    if (s == IR_BF16) { /* the value is a bf16 already: its top 16 bits are exact */
        uint32_t tu = spv_t_vec(x, spv_t_u32(x), n);
        uint32_t w = spv_fn2(x, SpvOpShiftRightLogical, tu, spv_fn1(x, SpvOpBitcast, tu, v), spv_c_u32n(x, n, 16));
        return spv_fn1(x, SpvOpUConvert, spv_t_vec(x, spv_t_store_s(x, s), n), w);
    }
    if (s == IR_F16 && !x->f16_native)
        return spv_fn1(x, SpvOpFConvert, spv_t_vec(x, spv_t_store_s(x, s), n), v); /* exact */
    return v;
}

/* ---- buffers ------------------------------------------------------------------------------ */

static int view_slot(uint32_t lanes) {
    return lanes == VIEW_WORDS4 ? 4 : lanes == VIEW_BITS ? 3 : lanes == 4 ? 2 : lanes == 2 ? 1 : 0;
}

/* The element type of a view. */
static uint32_t view_elem(spv_ctx *x, ir_scalar s, uint32_t lanes) {
    if (lanes == VIEW_WORDS4) return spv_t_vec(x, spv_t_u32(x), 4);
    return lanes == VIEW_BITS ? spv_t_u32(x) : spv_t_vec(x, spv_t_store_s(x, s), lanes);
}

/* The variable viewing buffer b as an array of `lanes`-vectors (1, 2 or 4, VIEW_BITS or VIEW_WORDS4);
 * each view is a separate Block at the same binding. */
uint32_t spv_buf_view(spv_ctx *x, uint32_t b, uint32_t lanes) {
    if (b >= x->n_buf) {
        spv_fail(x, "buffer %u out of range", b);
        return 0;
    }
    buf_info *bi = &x->buf[b];
    int slot = view_slot(lanes);
    if (bi->var[slot]) return bi->var[slot];
    ir_scalar s = bi->p->elem;
    if (s == IR_BOOL) {
        spv_fail(x, "buffer '%s': bool elements cannot live in Vulkan buffers", bi->p->name);
        return 0;
    }
    if ((s == IR_F16 || s == IR_BF16) && !x->c->storage16) {
        spv_fail(
            x,
            "buffer '%s' holds %s: 16-bit buffers need caps.storage16 (a 32-bit packing fallback is not written yet)",
            bi->p->name, ir_scalar_name(s));
        return 0;
    }
    uint32_t elem = view_elem(x, s, lanes);
    uint32_t arr = spv_b_id(&x->b), st = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_GLOBAL, SpvOpTypeRuntimeArray, 2, arr, elem);
    spv_b_emitv(&x->b, SPV_SEC_GLOBAL, SpvOpTypeStruct, 2, st, arr);
    spv_decorate(x, arr, SpvDecorationArrayStride, 1,
                 lanes == VIEW_WORDS4 ? 16 : lanes == VIEW_BITS ? 4 : ir_scalar_bits(s) / 8 * lanes);
    spv_decorate(x, st, SpvDecorationBlock, 0, 0);
    spv_b_emitv(&x->b, SPV_SEC_ANNOTATION, SpvOpMemberDecorate, 4, st, 0, SpvDecorationOffset, 0);
    uint32_t var = spv_global_var(x, spv_t_ptr(x, SpvStorageClassStorageBuffer, st), SpvStorageClassStorageBuffer);
    char nm[96], snm[104];
    snprintf(nm, sizeof nm,
             lanes == VIEW_WORDS4 ? "%s_w4"
             : lanes == VIEW_BITS ? "%s_bits"
             : lanes > 1          ? "%s_v%u"
                                  : "%s",
             bi->p->name ? bi->p->name : "buf", lanes);
    snprintf(snm, sizeof snm, "%s_block", nm);
    spv_name(x, st, snm);
    spv_name(x, var, nm);
    uint32_t member = 0;
    spv_b_emit_str(&x->b, SPV_SEC_DEBUG, SpvOpMemberName, (uint32_t[]){st, member}, 2, "data", NULL, 0);
    bi->var[slot] = var;
    return var;
}

/* A pointer to element (or vector) `index` of a view. */
uint32_t spv_buf_ptr(spv_ctx *x, uint32_t b, uint32_t lanes, uint32_t index) {
    uint32_t var = spv_buf_view(x, b, lanes);
    if (!var) return 0;
    uint32_t elem = view_elem(x, x->buf[b].p->elem, lanes);
    return spv_fn3(x, SpvOpAccessChain, spv_t_ptr(x, SpvStorageClassStorageBuffer, elem), var, spv_c_u32(x, 0), index);
}

static uint32_t add_u32(spv_ctx *x, uint32_t a, uint32_t k) {
    return k ? spv_fn2(x, SpvOpIAdd, spv_t_u32(x), a, spv_c_u32(x, k)) : a;
}

/* lanes consecutive elements from index; index is a multiple of lanes. */
uint32_t spv_buf_load(spv_ctx *x, uint32_t b, uint32_t index, uint32_t lanes) {
    ir_scalar s = x->buf[b].p->elem;
    if (lanes == 2 || lanes == 4) {
        uint32_t vi = spv_fn2(x, SpvOpShiftRightLogical, spv_t_u32(x), index, spv_c_u32(x, lanes == 4 ? 2 : 1));
        uint32_t p = spv_buf_ptr(x, b, lanes, vi);
        return from_storage(x, s, lanes, spv_op_load(x, spv_t_vec(x, spv_t_store_s(x, s), lanes), p));
    }
    uint32_t part[4];
    for (uint32_t l = 0; l < lanes && l < 4; l++) {
        uint32_t p = spv_buf_ptr(x, b, 1, add_u32(x, index, l));
        part[l] = from_storage(x, s, 1, spv_op_load(x, spv_t_store_s(x, s), p));
    }
    if (lanes == 1) return part[0];
    uint32_t id = spv_b_id(&x->b);
    uint32_t o[6] = {spv_t_rep_sn(x, s, lanes), id, part[0], part[1], part[2], part[3]};
    spv_b_emit(&x->b, SPV_SEC_FUNCTION, SpvOpCompositeConstruct, o, 2 + lanes);
    return id;
}

uint32_t spv_lane_of(spv_ctx *x, ir_scalar s, uint32_t lanes, uint32_t v, uint32_t l) {
    return lanes == 1 ? v : spv_fn2(x, SpvOpCompositeExtract, spv_t_rep_s(x, s), v, l);
}

void spv_buf_store(spv_ctx *x, uint32_t b, uint32_t index, uint32_t lanes, uint32_t v) {
    ir_scalar s = x->buf[b].p->elem;
    if (lanes == 2 || lanes == 4) {
        uint32_t vi = spv_fn2(x, SpvOpShiftRightLogical, spv_t_u32(x), index, spv_c_u32(x, lanes == 4 ? 2 : 1));
        spv_op_store(x, spv_buf_ptr(x, b, lanes, vi), to_storage(x, s, lanes, v));
        return;
    }
    for (uint32_t l = 0; l < lanes; l++)
        spv_op_store(x, spv_buf_ptr(x, b, 1, add_u32(x, index, l)),
                     to_storage(x, s, 1, spv_lane_of(x, s, lanes, v, l)));
}

/* ---- workgroup arrays ------------------------------------------------------------------------ */

uint32_t spv_shm_ptr(spv_ctx *x, uint32_t s, uint32_t index) {
    if (s >= x->n_shm) {
        spv_fail(x, "workgroup array %u out of range", s);
        return 0;
    }
    return spv_fn2(x, SpvOpAccessChain, spv_t_ptr(x, SpvStorageClassWorkgroup, x->shm[s].elem_type), x->shm[s].var,
                   index);
}

uint32_t spv_shm_load1(spv_ctx *x, uint32_t s, uint32_t index) {
    uint32_t v = spv_op_load(x, x->shm[s].elem_type, spv_shm_ptr(x, s, index));
    if (x->shm[s].mode == SHM_BF16_NATIVE) v = spv_fn1(x, SpvOpFConvert, spv_t_f32(x), v); /* exact */
    if (x->shm[s].mode == SHM_F32_BITS) v = spv_fn1(x, SpvOpBitcast, spv_t_f32(x), v);
    return v;
}
void spv_shm_store1(spv_ctx *x, uint32_t s, uint32_t index, uint32_t v) {
    if (x->shm[s].mode == SHM_BF16_NATIVE)
        v = spv_fn1(x, SpvOpFConvert, x->shm[s].elem_type, v); /* exact: v is a bf16 */
    if (x->shm[s].mode == SHM_F32_BITS) v = spv_fn1(x, SpvOpBitcast, x->shm[s].elem_type, v);
    spv_op_store(x, spv_shm_ptr(x, s, index), v);
}

/* ---- memory ops ------------------------------------------------------------------------------- */

uint32_t spv_imm_u32(spv_ctx *x, const ir_inst *in, int i, uint32_t max, const char *what) {
    int64_t v = in->imm[i];
    if (v < 0 || (uint64_t)v >= max) {
        spv_fail(x, "%s %lld out of range", what, (long long)v);
        return 0;
    }
    return (uint32_t)v;
}

static uint32_t lanes_of(spv_ctx *x, ir_type t) {
    ir_scalar s;
    uint32_t n = 1;
    if (!ir_emit_tinfo(&x->e, t, &s, &n)) spv_fail(x, "memory access of a fragment");
    return n;
}

void spv_emit_memory(spv_ctx *x, const ir_inst *in) {
    switch (in->op) {
    case IR_OP_LOAD: {
        if (!ir_emit_need(&x->e, in, 1)) return;
        uint32_t b = spv_imm_u32(x, in, 0, x->n_buf, "buffer");
        uint32_t lanes = lanes_of(x, in->type);
        if (x->e.failed) return;
        spv_def(x, in->result, spv_buf_load(x, b, spv_V(x, in->operand[0]), lanes));
        return;
    }
    case IR_OP_STORE: {
        if (!ir_emit_need(&x->e, in, 2)) return;
        uint32_t b = spv_imm_u32(x, in, 0, x->n_buf, "buffer");
        uint32_t lanes = lanes_of(x, ir_type_of(x->k, in->operand[1]));
        if (x->e.failed) return;
        spv_buf_store(x, b, spv_V(x, in->operand[0]), lanes, spv_V(x, in->operand[1]));
        return;
    }
    case IR_OP_LOAD_MASKED: case IR_OP_STORE_MASKED:
        spv_fail(x, "masked accesses are lowered before emission (ir/lower.h)");
        return;
    case IR_OP_SHM_LOAD: {
        if (!ir_emit_need(&x->e, in, 1)) return;
        uint32_t s = spv_imm_u32(x, in, 0, x->n_shm, "workgroup array");
        ir_scalar es;
        uint32_t lanes;
        if (x->e.failed || !ir_emit_tinfo(&x->e, in->type, &es, &lanes)) return;
        uint32_t index = spv_V(x, in->operand[0]), part[4];
        for (uint32_t l = 0; l < lanes && l < 4; l++) part[l] = spv_shm_load1(x, s, add_u32(x, index, l));
        if (lanes == 1) {
            spv_def(x, in->result, part[0]);
            return;
        }
        uint32_t id = spv_b_id(&x->b);
        uint32_t o[6] = {spv_t_rep(x, in->type), id, part[0], part[1], part[2], part[3]};
        spv_b_emit(&x->b, SPV_SEC_FUNCTION, SpvOpCompositeConstruct, o, 2 + lanes);
        spv_def(x, in->result, id);
        return;
    }
    case IR_OP_SHM_STORE: {
        if (!ir_emit_need(&x->e, in, 2)) return;
        uint32_t s = spv_imm_u32(x, in, 0, x->n_shm, "workgroup array");
        ir_scalar es;
        uint32_t lanes;
        if (x->e.failed || !ir_emit_tinfo(&x->e, ir_type_of(x->k, in->operand[1]), &es, &lanes)) return;
        uint32_t index = spv_V(x, in->operand[0]), v = spv_V(x, in->operand[1]);
        for (uint32_t l = 0; l < lanes; l++) spv_shm_store1(x, s, add_u32(x, index, l), spv_lane_of(x, es, lanes, v, l));
        return;
    }
    default: return;
    }
}

/* ATOMIC: imm[0] target, imm[1] op, imm[2] shm flag; operands index, value. */
void spv_emit_atomic(spv_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 2)) return;
    uint32_t op = spv_imm_u32(x, in, 1, IR_ATOMIC_XCHG + 1, "atomic op");
    bool shm = in->imm[2] != 0;
    uint32_t target = spv_imm_u32(x, in, 0, shm ? x->n_shm : x->n_buf, shm ? "workgroup array" : "buffer");
    ir_scalar s;
    uint32_t n;
    if (x->e.failed || !ir_emit_tinfo(&x->e, in->type, &s, &n)) return;
    if (n != 1 || ir_scalar_bits(s) != 32) {
        spv_fail(x, "atomics take 32-bit scalars, not %s x%u", ir_scalar_name(s), n);
        return;
    }
    uint32_t t = spv_t_rep_s(x, s);
    uint32_t spvop;
    switch (op) {
    case IR_ATOMIC_ADD:
        if (s == IR_F32) {
            if (shm) {
                spv_fail(
                    x,
                    "f32 atomic add on workgroup memory: caps has no flag for it (caps.atomic_f32_add covers buffers)");
                return;
            }
            if (!x->c->atomic_f32_add) {
                spv_fail(x, "f32 atomic add needs caps.atomic_f32_add (SPV_EXT_shader_atomic_float_add)");
                return;
            }
            spv_b_capability(&x->b, SpvCapabilityAtomicFloat32AddEXT);
            spv_b_extension(&x->b, "SPV_EXT_shader_atomic_float_add");
            spvop = SpvOpAtomicFAddEXT;
        } else {
            spvop = SpvOpAtomicIAdd;
        }
        break;
    case IR_ATOMIC_MIN: spvop = ir_scalar_is_signed(s) ? SpvOpAtomicSMin : SpvOpAtomicUMin; break;
    case IR_ATOMIC_MAX: spvop = ir_scalar_is_signed(s) ? SpvOpAtomicSMax : SpvOpAtomicUMax; break;
    default: spvop = SpvOpAtomicExchange; break;
    }
    if ((op == IR_ATOMIC_MIN || op == IR_ATOMIC_MAX) && !ir_scalar_is_int(s)) {
        spv_fail(x, "atomic min/max take i32/u32, not %s", ir_scalar_name(s));
        return;
    }
    uint32_t index = spv_V(x, in->operand[0]), v = spv_V(x, in->operand[1]);
    /* an f32 exchange moves bits: a u32 exchange needs no float-atomics feature */
    bool bits = spvop == SpvOpAtomicExchange && s == IR_F32;
    if (bits) {
        t = spv_t_u32(x);
        v = spv_fn1(x, SpvOpBitcast, t, v);
    }
    uint32_t ptr;
    if (shm) {
        ptr = spv_shm_ptr(x, target, index); /* the array holds u32 bits then (scan_frags) */
    } else {
        x->buf[target].atomic = true;
        ptr = spv_buf_ptr(x, target, bits ? VIEW_BITS : 1, index);
    }
    uint32_t scope = spv_c_u32(x, shm ? SCOPE_WORKGROUP : x->vulkan_mm ? SCOPE_QUEUE_FAMILY : SCOPE_DEVICE);
    uint32_t sem = spv_c_u32(x, SEM_RELAXED);
    uint32_t id = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, spvop, 6, t, id, ptr, scope, sem, v);
    spv_def(x, in->result, bits ? spv_fn1(x, SpvOpBitcast, spv_t_f32(x), id) : id);
}

