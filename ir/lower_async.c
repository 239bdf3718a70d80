/* Asynchronous copies where a target has none (lower.h): async.copy of count elements
 * becomes, per vector of up to 4 of them, a load.masked from the buffer (fallback zero,
 * the copy's limit) and a shm.store, so the data is in workgroup memory when the copy
 * returns; async.commit and async.wait go (nothing is left in flight). The masked loads
 * are lowered after this pass, with the others. */
#include "ir/ir_internal.h"

/* Zero of the scalar type e: f32 0 converted where e is a 16-bit float or a 64-bit int. */
static ir_val zero_of(ir_rw *w, ir_scalar e) {
    ir_kernel *k = w->k;
    switch (e) {
    case IR_F32: case IR_I32: case IR_U32: return ir_rw_const(w, ir_t_scalar(k, e), 0);
    case IR_F16: case IR_BF16: {
        ir_val z = ir_rw_const(w, ir_t_scalar(k, IR_F32), 0);
        return z ? ir_rw_op(w, IR_OP_CONVERT, ir_t_scalar(k, e), z, IR_NONE, 0) : IR_NONE;
    }
    case IR_I64: case IR_U64: {
        ir_val z = ir_rw_const(w, ir_t_scalar(k, IR_U32), 0);
        return z ? ir_rw_op(w, IR_OP_CONVERT, ir_t_scalar(k, e), z, IR_NONE, 0) : IR_NONE;
    }
    default: return IR_NONE;
    }
}

static int lower_one(ir_rw *w, ir_inst *in, void *ctx) {
    (void)ctx;
    if (in->op == IR_OP_ASYNC_COMMIT || in->op == IR_OP_ASYNC_WAIT)
        return 1; /* replaced by nothing */
    if (in->op != IR_OP_ASYNC_COPY)
        return 0;
    ir_kernel *k = w->k;
    const ir_shared_decl *d = ir_shared_at(k, (uint32_t)in->imm[0]);
    if (!d)
        return -1;
    ir_scalar e = d->elem;
    ir_val zero = zero_of(w, e);
    if (!zero)
        return -1;
    ir_type tu = ir_t_scalar(k, IR_U32);
    uint32_t count = (uint32_t)in->imm[2], lanes = count < 4 ? count : 4;
    ir_type tv = lanes == 1 ? ir_t_scalar(k, e) : ir_t_vector(k, e, lanes);
    for (uint32_t at = 0; at < count; at += lanes) {
        ir_val src = in->operand[1], dst = in->operand[0];
        if (at) {
            src = ir_rw_op(w, IR_OP_ADD, tu, src, ir_rw_u32(w, at), 0);
            dst = ir_rw_op(w, IR_OP_ADD, tu, dst, ir_rw_u32(w, at), 0);
        }
        ir_val lops[3] = { src, in->operand[2], zero };
        ir_inst *ld = src && dst ? ir_rw_inst(w, IR_OP_LOAD_MASKED, tv, lops, 3, in->imm[1], lanes, 0) : NULL;
        ir_val sops[2] = { dst, ld ? ld->result : IR_NONE };
        if (!ld || !ir_rw_inst(w, IR_OP_SHM_STORE, 0, sops, 2, in->imm[0], lanes, 0))
            return -1;
    }
    return 1;
}

int ir_lower_async(ir_kernel *k) { return ir_rw_run(k, lower_one, NULL) ? 0 : -1; }
