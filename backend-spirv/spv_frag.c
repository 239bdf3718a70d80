/* Matrix fragments as SPV_KHR_cooperative_matrix for the SPIR-V emitter. */
#include "backend-spirv/spv_internal.h"
#include "backend-spirv/spv_khr.h"

/* ---- fragments ------------------------------------------------------------------------------- */

/* FRAG_LOAD_TENSOR: operands row0, col0, n_rows, n_cols; imm[0] the buffer, imm[1]
 * IR_FRAG_TRANSPOSED. A 2-D tensor layout of n_rows x n_cols (clamped: outside reads 0)
 * sliced at (row0, col0) to the fragment's rows x cols as stored (a transposed B's N x K),
 * read through a view that swaps the two coordinates when transposed. */
static void load_tensor(spv_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 4)) return;
    const ir_type_desc *d = ir_type_get(x->k, in->type);
    uint32_t src = spv_imm_u32(x, in, 0, x->n_buf, "buffer");
    uint32_t t = spv_t_rep(x, in->type);
    if (x->e.failed || !t || !d) return;
    bool tr = in->imm[1] & IR_FRAG_TRANSPOSED;
    uint32_t rows = d->use == IR_FRAG_B ? d->k : d->m, cols = d->use == IR_FRAG_A ? d->k : d->n;
    if (tr) rows = d->n, cols = d->k;
    spv_b_capability(&x->b, spv_cap_coopmat_tensor_addressing_nv);
    spv_b_capability(&x->b, spv_cap_tensor_addressing_nv);
    spv_b_extension(&x->b, "SPV_NV_tensor_addressing");
    uint32_t two = spv_c_u32(x, 2);
    uint32_t tl =
        spv_b_type(&x->b, spv_op_type_tensor_layout_nv, (uint32_t[]){two, spv_c_u32(x, spv_tensor_clamp_constant)}, 2);
    uint32_t l0 = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, spv_op_create_tensor_layout_nv, 2, tl, l0);
    uint32_t l1 =
        spv_fn3(x, spv_op_tensor_layout_set_dimension_nv, tl, l0, spv_V(x, in->operand[2]), spv_V(x, in->operand[3]));
    uint32_t l2 = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, spv_op_tensor_layout_slice_nv, 7, tl, l2, l1, spv_V(x, in->operand[0]),
                spv_c_u32(x, rows), spv_V(x, in->operand[1]), spv_c_u32(x, cols));
    /* the clipped elements keep this object's values; none are clipped here (no clip
     * region), but the operand is required */
    uint32_t zero = spv_fn1(x, SpvOpFConvert, spv_t_frag_component(x, d->elem), spv_c_scalar(x, IR_F32, 0));
    uint32_t fill = spv_fn1(x, SpvOpCompositeConstruct, t, zero);
    uint32_t ptr = spv_buf_ptr(x, src, 1, spv_c_u32(x, 0));
    uint32_t id = spv_b_id(&x->b);
    if (tr) {
        uint32_t no = spv_c_scalar(x, IR_BOOL, 0);
        uint32_t tv =
            spv_b_type(&x->b, spv_op_type_tensor_view_nv, (uint32_t[]){two, no, spv_c_u32(x, 1), spv_c_u32(x, 0)}, 4);
        uint32_t v = spv_b_id(&x->b);
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, spv_op_create_tensor_view_nv, 2, tv, v);
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, spv_op_coopmat_load_tensor_nv, 8, t, id, ptr, fill, l2,
                    SpvMemoryAccessNonPrivatePointerMask, spv_tensor_addressing_view, v);
    } else {
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, spv_op_coopmat_load_tensor_nv, 7, t, id, ptr, fill, l2,
                    SpvMemoryAccessNonPrivatePointerMask, 0);
    }
    spv_def(x, in->result, id);
}

/* FRAG_LOAD: operands base, stride; imm[0] src, imm[1] flags (IR_FRAG_ROW_MAJOR,
 * IR_FRAG_ALIGNED16: through the buffer's view as 16-byte words, base and stride / 8),
 * imm[2] shm.
 * FRAG_STORE: operands frag, base, stride; imm[0] dst, imm[1] row_major, imm[2] shm. */
void spv_emit_frag(spv_ctx *x, const ir_inst *in) {
    if (x->emu) {
        spv_emu_frag(x, in);
        return;
    }
    switch (in->op) {
    case IR_OP_FRAG_FILL: {
        if (!ir_emit_need(&x->e, in, 1)) return;
        const ir_type_desc *d = ir_type_get(x->k, in->type);
        uint32_t t = spv_t_rep(x, in->type);
        if (!t || !d) return;
        uint32_t v = spv_V(x, in->operand[0]); /* of the fragment's element type (the verifier's rule) */
        ir_scalar vs;
        uint32_t vn;
        if (!ir_emit_tinfo(&x->e, ir_type_of(x->k, in->operand[0]), &vs, &vn) || vn != 1) {
            spv_fail(x, "fill value must be a scalar");
            return;
        }
        if (d->elem == IR_BF16) v = spv_fn1(x, SpvOpFConvert, spv_t_bf16(x), v); /* exact: v is a bf16 */
        spv_def(x, in->result, spv_fn1(x, SpvOpCompositeConstruct, t, v));
        return;
    }
    case IR_OP_FRAG_LOAD:
    case IR_OP_FRAG_STORE: {
        bool load = in->op == IR_OP_FRAG_LOAD;
        uint32_t o = load ? 0 : 1;
        if (!ir_emit_need(&x->e, in, 2 + o)) return;
        bool shm = in->imm[2] != 0;
        uint32_t src = spv_imm_u32(x, in, 0, shm ? x->n_shm : x->n_buf, shm ? "workgroup array" : "buffer");
        uint32_t t = spv_t_rep(x, load ? in->type : ir_type_of(x->k, in->operand[0]));
        if (x->e.failed || !t) return;
        uint32_t base = spv_V(x, in->operand[o]), stride = spv_V(x, in->operand[o + 1]);
        bool words = load && !shm && (in->imm[1] & IR_FRAG_ALIGNED16);
        if (words) { /* 8 16-bit elements a word */
            base = spv_fn2(x, SpvOpShiftRightLogical, spv_t_u32(x), base, spv_c_u32(x, 3));
            stride = spv_fn2(x, SpvOpShiftRightLogical, spv_t_u32(x), stride, spv_c_u32(x, 3));
        }
        uint32_t ptr = shm ? spv_shm_ptr(x, src, base) : spv_buf_ptr(x, src, words ? VIEW_WORDS4 : 1, base);
        uint32_t layout = spv_c_u32(x, in->imm[1] & IR_FRAG_ROW_MAJOR ? spv_coopmat_row_major : spv_coopmat_col_major);
        if (load) {
            uint32_t id = spv_b_id(&x->b);
            spv_b_emitv(&x->b, SPV_SEC_FUNCTION, spv_op_coopmat_load_khr, 6, t, id, ptr, layout, stride,
                        SpvMemoryAccessNonPrivatePointerMask);
            spv_def(x, in->result, id);
        } else {
            spv_b_emitv(&x->b, SPV_SEC_FUNCTION, spv_op_coopmat_store_khr, 5, ptr, spv_V(x, in->operand[0]), layout,
                        stride, SpvMemoryAccessNonPrivatePointerMask);
        }
        return;
    }
    case IR_OP_FRAG_LOAD_TENSOR: load_tensor(x, in); return;
    case IR_OP_FRAG_MUL_ADD: { /* component-wise on cooperative matrices of one type */
        if (!ir_emit_need(&x->e, in, 3)) return;
        uint32_t t = spv_t_rep(x, in->type);
        if (!t) return;
        uint32_t p = spv_fn2(x, SpvOpFMul, t, spv_V(x, in->operand[0]), spv_V(x, in->operand[1]));
        spv_def(x, in->result, spv_fn2(x, SpvOpFAdd, t, p, spv_V(x, in->operand[2])));
        return;
    }
    case IR_OP_FRAG_ELEMS:
    case IR_OP_FRAG_FROM_ELEMS:
    case IR_OP_FRAG_PAIR_SUB:
        spv_fail(x, "a fragment's elements per invocation (frag.elems) have no defined layout in SPIR-V's "
                    "cooperative matrices");
        return;
    case IR_OP_WG_MMA:
    case IR_OP_WG_WAIT: spv_fail(x, "warpgroup matrix products (wgmma, sm_90a) have no SPIR-V equivalent"); return;
    case IR_OP_FRAG_MMA: {
        if (!ir_emit_need(&x->e, in, 3)) return;
        const ir_type_desc *a = ir_type_get(x->k, ir_type_of(x->k, in->operand[0]));
        const ir_type_desc *c = ir_type_get(x->k, ir_type_of(x->k, in->operand[2]));
        if (!a || !c || a->kind != IR_T_FRAG || c->kind != IR_T_FRAG) {
            spv_fail(x, "mma operands must be fragments");
            return;
        }
        if (a->wg ? !spv_wg_mma_find(x, a->m, a->n, a->k, (int)a->elem, (int)c->elem)
                  : !spv_mma_find(x->c, a->m, a->n, a->k, (int)a->elem, (int)c->elem)) {
            spv_fail(x, "mma %ux%ux%u %s x %s -> %s is not one of the device's cooperative-matrix shapes (caps.mma)",
                     a->m, a->n, a->k, ir_scalar_name(a->elem), ir_scalar_name(a->elem), ir_scalar_name(c->elem));
            return;
        }
        uint32_t t = spv_t_rep(x, in->type);
        if (!t) return;
        spv_def(x, in->result,
                spv_fn3(x, spv_op_coopmat_muladd_khr, t, spv_V(x, in->operand[0]), spv_V(x, in->operand[1]),
                        spv_V(x, in->operand[2])));
        return;
    }
    default: return;
    }
}
