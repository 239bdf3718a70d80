/* The builder's memory, subgroup and matrix-fragment instructions. */
#include "ir/ir_internal.h"

/* ---- memory ------------------------------------------------------------------------------ */

/* The element type of a buffer (shm == false) or workgroup array, or false. */
static bool target_elem(ir_kernel *k, const char *fn, bool shm, uint32_t target, ir_scalar *elem) {
    if (shm) {
        const ir_shared_decl *s = ir_shared_at(k, target);
        if (!s) {
            ir_fail(k, "%s: no workgroup array %u", fn, target);
            return false;
        }
        *elem = s->elem;
    } else {
        if (target >= k->n_buffers) {
            ir_fail(k, "%s: no buffer %u", fn, target);
            return false;
        }
        *elem = k->params[k->buffers[target]].elem;
    }
    return true;
}

static ir_type lanes_type(ir_kernel *k, const char *fn, ir_scalar e, uint32_t lanes) {
    if (lanes != 1 && lanes != 2 && lanes != 4) {
        ir_fail(k, "%s: loads take 1, 2 or 4 lanes", fn);
        return 0;
    }
    return lanes == 1 ? ir_t_scalar(k, e) : ir_t_vector(k, e, lanes);
}

static uint32_t value_lanes(ir_kernel *k, ir_val v) {
    uint32_t l = 0;
    ir_type_elem(k, ir_type_of(k, v), NULL, &l);
    return l;
}

ir_val ir_load(ir_kernel *k, ir_buf b, ir_val index, uint32_t lanes) {
    ir_scalar e;
    if (!k || !target_elem(k, "ir_load", false, b, &e) || !ir_use_ok(k, "ir_load", index))
        return IR_NONE;
    ir_type t = lanes_type(k, "ir_load", e, lanes);
    return t ? ir_result_of(ir_build(k, "ir_load", IR_OP_LOAD, t, &index, 1, b, lanes, 0)) : IR_NONE;
}

void ir_store(ir_kernel *k, ir_buf b, ir_val index, ir_val value) {
    ir_scalar e;
    ir_val ops[2] = { index, value };
    if (!k || !target_elem(k, "ir_store", false, b, &e) || !ir_uses_ok(k, "ir_store", ops, 2))
        return;
    ir_build(k, "ir_store", IR_OP_STORE, 0, ops, 2, b, value_lanes(k, value), 0);
}

ir_val ir_load_masked(ir_kernel *k, ir_buf b, ir_val index, uint32_t lanes, ir_val limit, ir_val fallback) {
    ir_scalar e;
    ir_val ops[3] = { index, limit, fallback };
    if (!k || !target_elem(k, "ir_load_masked", false, b, &e) || !ir_uses_ok(k, "ir_load_masked", ops, 3))
        return IR_NONE;
    ir_type t = lanes_type(k, "ir_load_masked", e, lanes);
    return t ? ir_result_of(ir_build(k, "ir_load_masked", IR_OP_LOAD_MASKED, t, ops, 3, b, lanes, 0)) : IR_NONE;
}

void ir_store_masked(ir_kernel *k, ir_buf b, ir_val index, ir_val value, ir_val limit) {
    ir_scalar e;
    ir_val ops[3] = { index, value, limit };
    if (!k || !target_elem(k, "ir_store_masked", false, b, &e) || !ir_uses_ok(k, "ir_store_masked", ops, 3))
        return;
    ir_build(k, "ir_store_masked", IR_OP_STORE_MASKED, 0, ops, 3, b, value_lanes(k, value), 0);
}

ir_val ir_shm_load(ir_kernel *k, ir_shm s, ir_val index, uint32_t lanes) {
    ir_scalar e;
    if (!k || !target_elem(k, "ir_shm_load", true, s, &e) || !ir_use_ok(k, "ir_shm_load", index))
        return IR_NONE;
    ir_type t = lanes_type(k, "ir_shm_load", e, lanes);
    return t ? ir_result_of(ir_build(k, "ir_shm_load", IR_OP_SHM_LOAD, t, &index, 1, s, lanes, 0)) : IR_NONE;
}

void ir_shm_store(ir_kernel *k, ir_shm s, ir_val index, ir_val value) {
    ir_scalar e;
    ir_val ops[2] = { index, value };
    if (!k || !target_elem(k, "ir_shm_store", true, s, &e) || !ir_uses_ok(k, "ir_shm_store", ops, 2))
        return;
    ir_build(k, "ir_shm_store", IR_OP_SHM_STORE, 0, ops, 2, s, value_lanes(k, value), 0);
}

void ir_barrier(ir_kernel *k) {
    if (k)
        ir_build(k, "ir_barrier", IR_OP_BARRIER, 0, NULL, 0, 0, 0, 0);
}

void ir_fence(ir_kernel *k) {
    if (k)
        ir_build(k, "ir_fence", IR_OP_FENCE, 0, NULL, 0, 0, 0, 0);
}

void ir_async_copy(ir_kernel *k, ir_shm dst, ir_val dst_index, ir_buf src, ir_val src_index, uint32_t count,
                   ir_val limit) {
    ir_scalar es, ed;
    ir_val ops[3] = { dst_index, src_index, limit };
    if (!k || !target_elem(k, "ir_async_copy", true, dst, &ed) || !target_elem(k, "ir_async_copy", false, src, &es) ||
        !ir_uses_ok(k, "ir_async_copy", ops, 3))
        return;
    ir_build(k, "ir_async_copy", IR_OP_ASYNC_COPY, 0, ops, 3, dst, src, count);
}

void ir_async_commit(ir_kernel *k) {
    if (k)
        ir_build(k, "ir_async_commit", IR_OP_ASYNC_COMMIT, 0, NULL, 0, 0, 0, 0);
}

void ir_async_wait(ir_kernel *k, uint32_t pending) {
    if (k)
        ir_build(k, "ir_async_wait", IR_OP_ASYNC_WAIT, 0, NULL, 0, pending, 0, 0);
}

ir_val ir_atomic(ir_kernel *k, ir_atomic_op op, bool shm, uint32_t target, ir_val index, ir_val value) {
    ir_scalar e;
    ir_val ops[2] = { index, value };
    if (!k || !target_elem(k, "ir_atomic", shm, target, &e) || !ir_uses_ok(k, "ir_atomic", ops, 2))
        return IR_NONE;
    ir_type t = ir_t_scalar(k, e);
    return t ? ir_result_of(ir_build(k, "ir_atomic", IR_OP_ATOMIC, t, ops, 2, target, op, shm)) : IR_NONE;
}

/* ---- subgroups ---------------------------------------------------------------------------- */

ir_val ir_sg_reduce(ir_kernel *k, ir_reduce r, ir_val v) {
    if (!k || !ir_use_ok(k, "ir_sg_reduce", v))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_sg_reduce", IR_OP_SG_REDUCE, ir_type_of(k, v), &v, 1, r, 0, 0));
}

static ir_val sg2(ir_kernel *k, const char *fn, ir_op op, ir_val v, ir_val lane) {
    ir_val ops[2] = { v, lane };
    if (!k || !ir_uses_ok(k, fn, ops, 2))
        return IR_NONE;
    return ir_result_of(ir_build(k, fn, op, ir_type_of(k, v), ops, 2, 0, 0, 0));
}

ir_val ir_sg_shuffle(ir_kernel *k, ir_val v, ir_val lane) { return sg2(k, "ir_sg_shuffle", IR_OP_SG_SHUFFLE, v, lane); }
ir_val ir_sg_shuffle_xor(ir_kernel *k, ir_val v, ir_val mask) {
    return sg2(k, "ir_sg_shuffle_xor", IR_OP_SG_SHUFFLE_XOR, v, mask);
}
ir_val ir_sg_broadcast(ir_kernel *k, ir_val v, ir_val lane) {
    return sg2(k, "ir_sg_broadcast", IR_OP_SG_BROADCAST, v, lane);
}

/* ---- matrix fragments -------------------------------------------------------------------- */

ir_val ir_frag_fill(ir_kernel *k, ir_type frag, ir_val scalar) {
    if (!k || !ir_use_ok(k, "ir_frag_fill", scalar))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_frag_fill", IR_OP_FRAG_FILL, frag, &scalar, 1, 0, 0, 0));
}

ir_val ir_frag_load(ir_kernel *k, ir_type frag, bool shm, uint32_t src, ir_val base, ir_val stride, bool row_major) {
    ir_scalar e;
    ir_val ops[2] = { base, stride };
    if (!k || !target_elem(k, "ir_frag_load", shm, src, &e) || !ir_uses_ok(k, "ir_frag_load", ops, 2))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_frag_load", IR_OP_FRAG_LOAD, frag, ops, 2, src, row_major, shm));
}

ir_val ir_frag_load_aligned(ir_kernel *k, ir_type frag, uint32_t src, ir_val base, ir_val stride, bool row_major) {
    ir_scalar e;
    ir_val ops[2] = { base, stride };
    if (!k || !target_elem(k, "ir_frag_load_aligned", false, src, &e) ||
        !ir_uses_ok(k, "ir_frag_load_aligned", ops, 2))
        return IR_NONE;
    if (ir_scalar_bits(e) != 16) {
        ir_fail(k, "ir_frag_load_aligned: buffer %u holds %s, not a 16-bit type", src, ir_scalar_name(e));
        return IR_NONE;
    }
    int64_t flags = (row_major ? IR_FRAG_ROW_MAJOR : 0) | IR_FRAG_ALIGNED16;
    return ir_result_of(ir_build(k, "ir_frag_load_aligned", IR_OP_FRAG_LOAD, frag, ops, 2, src, flags, 0));
}

void ir_frag_store(ir_kernel *k, ir_val frag, bool shm, uint32_t dst, ir_val base, ir_val stride, bool row_major) {
    ir_scalar e;
    ir_val ops[3] = { frag, base, stride };
    if (!k || !target_elem(k, "ir_frag_store", shm, dst, &e) || !ir_uses_ok(k, "ir_frag_store", ops, 3))
        return;
    ir_build(k, "ir_frag_store", IR_OP_FRAG_STORE, 0, ops, 3, dst, row_major, shm);
}

ir_val ir_frag_load_tensor(ir_kernel *k, ir_type frag, uint32_t src, ir_val row0, ir_val col0, ir_val n_rows,
                           ir_val n_cols, bool transposed) {
    ir_scalar e;
    ir_val ops[4] = { row0, col0, n_rows, n_cols };
    if (!k || !target_elem(k, "ir_frag_load_tensor", false, src, &e) || !ir_uses_ok(k, "ir_frag_load_tensor", ops, 4))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_frag_load_tensor", IR_OP_FRAG_LOAD_TENSOR, frag, ops, 4, src,
                                 transposed ? IR_FRAG_TRANSPOSED : 0, 0));
}

ir_val ir_frag_mma(ir_kernel *k, ir_val a, ir_val b, ir_val acc) {
    ir_val ops[3] = { a, b, acc };
    if (!k || !ir_uses_ok(k, "ir_frag_mma", ops, 3))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_frag_mma", IR_OP_FRAG_MMA, ir_type_of(k, acc), ops, 3, 0, 0, 0));
}

ir_val ir_frag_mul_add(ir_kernel *k, ir_val a, ir_val b, ir_val c) {
    ir_val ops[3] = { a, b, c };
    if (!k || !ir_uses_ok(k, "ir_frag_mul_add", ops, 3))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_frag_mul_add", IR_OP_FRAG_MUL_ADD, ir_type_of(k, c), ops, 3, 0, 0, 0));
}

ir_val ir_frag_elems(ir_kernel *k, ir_val acc) {
    if (!k || !ir_uses_ok(k, "ir_frag_elems", &acc, 1))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_frag_elems", IR_OP_FRAG_ELEMS, ir_t_vector(k, IR_F32, 4), &acc, 1, 0, 0, 0));
}

ir_val ir_frag_from_elems(ir_kernel *k, ir_type frag, ir_val lo, ir_val hi) {
    ir_val ops[2] = { lo, hi };
    uint32_t n = hi ? 2 : 1;
    if (!k || !ir_uses_ok(k, "ir_frag_from_elems", ops, n))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_frag_from_elems", IR_OP_FRAG_FROM_ELEMS, frag, ops, n, 0, 0, 0));
}

ir_val ir_frag_pair_sub(ir_kernel *k, ir_scalar elem, ir_val a, ir_val b) {
    ir_val ops[2] = { a, b };
    if (!k || !ir_uses_ok(k, "ir_frag_pair_sub", ops, 2))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_frag_pair_sub", IR_OP_FRAG_PAIR_SUB, ir_type_of(k, a), ops, 2, elem, 0, 0));
}

static ir_val wg_mma(ir_kernel *k, const char *fn, ir_val acc, ir_shm a, ir_val a_base, ir_val a_sbo, ir_val a_lbo,
                     ir_shm b, ir_val b_base, ir_val b_sbo, ir_val b_lbo, uint32_t k_steps) {
    ir_scalar ea, eb;
    ir_val ops[7] = { acc, a_base, a_sbo, a_lbo, b_base, b_sbo, b_lbo };
    if (!k || !target_elem(k, fn, true, a, &ea) || !target_elem(k, fn, true, b, &eb) || !ir_uses_ok(k, fn, ops, 7))
        return IR_NONE;
    return ir_result_of(ir_build(k, fn, IR_OP_WG_MMA, ir_type_of(k, acc), ops, 7, a, b, k_steps));
}

ir_val ir_wg_mma(ir_kernel *k, ir_val acc, ir_shm a, ir_val a_base, ir_val a_sbo, ir_val a_lbo, ir_shm b,
                 ir_val b_base, ir_val b_sbo, ir_val b_lbo, uint32_t k_steps) {
    return wg_mma(k, "ir_wg_mma", acc, a, a_base, a_sbo, a_lbo, b, b_base, b_sbo, b_lbo, k_steps);
}

ir_val ir_wg_mma_flags(ir_kernel *k, ir_val acc, ir_shm a, ir_val a_base, ir_val a_sbo, ir_val a_lbo, ir_shm b,
                       ir_val b_base, ir_val b_sbo, ir_val b_lbo, uint32_t k_steps, unsigned flags) {
    if (k_steps > IR_WG_MMA_STEPS || (flags & ~(unsigned)(IR_WG_MMA_ASYNC | IR_WG_MMA_SW128))) {
        ir_fail(k, "ir_wg_mma_flags: k_steps %u, flags %#x", k_steps, flags);
        return IR_NONE;
    }
    return wg_mma(k, "ir_wg_mma_flags", acc, a, a_base, a_sbo, a_lbo, b, b_base, b_sbo, b_lbo, k_steps | flags);
}

ir_val ir_wg_wait(ir_kernel *k, ir_val acc, uint32_t pending) {
    if (!k || !ir_uses_ok(k, "ir_wg_wait", &acc, 1))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_wg_wait", IR_OP_WG_WAIT, ir_type_of(k, acc), &acc, 1, pending, 0, 0));
}
