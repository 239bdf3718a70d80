/* The builder's core and its value-making calls: op names and properties, constants,
 * arithmetic, compares, selects, conversions, vectors and ids. The builder checks every
 * instruction with the verifier's per-op rules before appending it, so misuse is caught
 * where it happens; a failed call records the first error and returns IR_NONE (or NULL)
 * without touching the kernel. */
#include "ir/ir_internal.h"

#include <string.h>

/* ---- ops ------------------------------------------------------------------------------- */

static const char *const op_names[IR_OP_COUNT] = {
    [IR_OP_CONST] = "const", [IR_OP_PARAM] = "param", [IR_OP_SPEC] = "spec", [IR_OP_ID] = "id",
    [IR_OP_ADD] = "add", [IR_OP_SUB] = "sub", [IR_OP_MUL] = "mul", [IR_OP_DIV] = "div",
    [IR_OP_REM] = "rem", [IR_OP_MIN] = "min", [IR_OP_MAX] = "max",
    [IR_OP_AND] = "and", [IR_OP_OR] = "or", [IR_OP_XOR] = "xor", [IR_OP_SHL] = "shl", [IR_OP_SHR] = "shr",
    [IR_OP_NEG] = "neg", [IR_OP_NOT] = "not", [IR_OP_ABS] = "abs",
    [IR_OP_EXP] = "exp", [IR_OP_LOG] = "log", [IR_OP_SQRT] = "sqrt", [IR_OP_RSQRT] = "rsqrt",
    [IR_OP_TANH] = "tanh", [IR_OP_SIN] = "sin", [IR_OP_COS] = "cos", [IR_OP_FLOOR] = "floor",
    [IR_OP_ROUNDEVEN] = "roundeven",
    [IR_OP_FMA] = "fma", [IR_OP_CMP] = "cmp", [IR_OP_SELECT] = "select",
    [IR_OP_CONVERT] = "convert", [IR_OP_BITCAST] = "bitcast", [IR_OP_VEC] = "vec", [IR_OP_EXTRACT] = "extract",
    [IR_OP_LOAD] = "load", [IR_OP_STORE] = "store", [IR_OP_LOAD_MASKED] = "load.masked",
    [IR_OP_STORE_MASKED] = "store.masked", [IR_OP_SHM_LOAD] = "shm.load", [IR_OP_SHM_STORE] = "shm.store",
    [IR_OP_ATOMIC] = "atomic", [IR_OP_BARRIER] = "barrier", [IR_OP_FENCE] = "fence",
    [IR_OP_ASYNC_COPY] = "async.copy", [IR_OP_ASYNC_COMMIT] = "async.commit", [IR_OP_ASYNC_WAIT] = "async.wait",
    [IR_OP_SG_REDUCE] = "sg.reduce", [IR_OP_SG_SHUFFLE] = "sg.shuffle", [IR_OP_SG_SHUFFLE_XOR] = "sg.shuffle_xor",
    [IR_OP_SG_BROADCAST] = "sg.broadcast",
    [IR_OP_FRAG_FILL] = "frag.fill", [IR_OP_FRAG_LOAD] = "frag.load", [IR_OP_FRAG_STORE] = "frag.store",
    [IR_OP_FRAG_MMA] = "frag.mma", [IR_OP_FRAG_MUL_ADD] = "frag.mul_add", [IR_OP_FRAG_LOAD_TENSOR] = "frag.load_tensor", [IR_OP_FRAG_ELEMS] = "frag.elems",
    [IR_OP_FRAG_FROM_ELEMS] = "frag.from_elems", [IR_OP_FRAG_PAIR_SUB] = "frag.pair_sub", [IR_OP_WG_MMA] = "wg.mma", [IR_OP_WG_WAIT] = "wg.wait",
    [IR_OP_GRID_WAIT] = "grid.wait", [IR_OP_PREFETCH] = "prefetch",
    [IR_OP_MBAR_INIT] = "mbar.init", [IR_OP_MBAR_ARRIVE] = "mbar.arrive", [IR_OP_MBAR_EXPECT] = "mbar.expect",
    [IR_OP_MBAR_WAIT] = "mbar.wait", [IR_OP_TMA_LOAD] = "tma.load", [IR_OP_CLUSTER_SYNC] = "cluster.sync",
    [IR_OP_FOR] = "for", [IR_OP_IF] = "if", [IR_OP_YIELD] = "yield",
};

const char *ir_op_name(ir_op op) {
    return (unsigned)op < IR_OP_COUNT && op_names[op] ? op_names[op] : "?";
}

bool ir_op_has_result(ir_op op) {
    switch (op) {
    case IR_OP_STORE: case IR_OP_STORE_MASKED: case IR_OP_SHM_STORE: case IR_OP_BARRIER: case IR_OP_FENCE:
    case IR_OP_FRAG_STORE: case IR_OP_FOR: case IR_OP_IF: case IR_OP_YIELD:
    case IR_OP_ASYNC_COPY: case IR_OP_ASYNC_COMMIT: case IR_OP_ASYNC_WAIT:
    case IR_OP_GRID_WAIT: case IR_OP_PREFETCH: case IR_OP_MBAR_INIT: case IR_OP_MBAR_ARRIVE:
    case IR_OP_MBAR_EXPECT: case IR_OP_MBAR_WAIT: case IR_OP_TMA_LOAD: case IR_OP_CLUSTER_SYNC:
        return false;
    default:
        return (unsigned)op < IR_OP_COUNT;
    }
}

bool ir_op_is_effect(ir_op op) {
    switch (op) {
    case IR_OP_STORE: case IR_OP_STORE_MASKED: case IR_OP_SHM_STORE: case IR_OP_ATOMIC:
    case IR_OP_BARRIER: case IR_OP_FENCE: case IR_OP_FRAG_STORE:
    case IR_OP_ASYNC_COPY: case IR_OP_ASYNC_COMMIT: case IR_OP_ASYNC_WAIT:
    case IR_OP_GRID_WAIT: case IR_OP_PREFETCH: case IR_OP_MBAR_INIT: case IR_OP_MBAR_ARRIVE:
    case IR_OP_MBAR_EXPECT: case IR_OP_MBAR_WAIT: case IR_OP_TMA_LOAD: case IR_OP_CLUSTER_SYNC:
        return true;
    default:
        return false;
    }
}

/* ---- builder core ---------------------------------------------------------------------- */

ir_region *ir_current(ir_kernel *k) {
    if (!k->n_open)
        return &k->body;
    ir_open *o = &k->open[k->n_open - 1];
    return &o->inst->region[o->region];
}

/* An operand must be a value whose region is still open. */
bool ir_use_ok(ir_kernel *k, const char *fn, ir_val v) {
    if (v == IR_NONE || v > k->n_vals || !k->vals[v].def) {
        ir_fail(k, "%s: operand %%%u is not a value", fn, v);
        return false;
    }
    if (k->vals[v].closed) {
        ir_fail(k, "%s: %%%u is defined inside a for/if body that has ended", fn, v);
        return false;
    }
    return true;
}

bool ir_uses_ok(ir_kernel *k, const char *fn, const ir_val *v, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (!ir_use_ok(k, fn, v[i]))
            return false;
    return true;
}

/* Checks an instruction with the verifier's rules, then appends it to the innermost open
 * region. Returns it, or NULL (with the error) when it breaks a rule. */
ir_inst *ir_build(ir_kernel *k, const char *fn, ir_op op, ir_type type, const ir_val *ops, uint32_t n, int64_t imm0,
                  int64_t imm1, int64_t imm2) {
    if (k->failed && k->error.code == KILN_ERR_NOMEM)
        return NULL;
    ir_inst tmp = { .op = op, .type = type, .operand = (ir_val *)ops, .n_operand = n,
                    .imm = { imm0, imm1, imm2 } };
    char msg[200];
    if (!ir_check_op(k, &tmp, msg, sizeof msg)) {
        ir_fail(k, "%s: %s", fn, msg);
        return NULL;
    }
    ir_inst *in = ir_alloc(k, sizeof *in);
    ir_val *o = n ? ir_alloc(k, n * sizeof *o) : NULL;
    if (!in || (n && !o))
        return NULL;
    *in = tmp;
    if (n)
        memcpy(o, ops, n * sizeof *o);
    in->operand = o;
    if (ir_op_has_result(op)) {
        in->result = ir_new_value(k, in, type);
        if (!in->result)
            return NULL;
    } else {
        in->type = 0;
    }
    if (!ir_region_push(k, ir_current(k), in))
        return NULL;
    return in;
}


/* ---- values ------------------------------------------------------------------------------ */

static ir_val make_const(ir_kernel *k, const char *fn, ir_scalar s, int64_t bits) {
    if (!k)
        return IR_NONE;
    ir_type t = ir_t_scalar(k, s);
    return t ? ir_result_of(ir_build(k, fn, IR_OP_CONST, t, NULL, 0, bits, 0, 0)) : IR_NONE;
}

ir_val ir_const_bool(ir_kernel *k, bool v) { return make_const(k, "ir_const_bool", IR_BOOL, v ? 1 : 0); }
ir_val ir_const_i32(ir_kernel *k, int32_t v) { return make_const(k, "ir_const_i32", IR_I32, v); }
ir_val ir_const_u32(ir_kernel *k, uint32_t v) { return make_const(k, "ir_const_u32", IR_U32, v); }
ir_val ir_const_f32(ir_kernel *k, float v) { return make_const(k, "ir_const_f32", IR_F32, ir_f32_bits(v)); }

ir_val ir_bin(ir_kernel *k, ir_op op, ir_val a, ir_val b) {
    if (!k)
        return IR_NONE;
    if (op < IR_OP_ADD || op > IR_OP_SHR) {
        ir_fail(k, "ir_bin: %s is not a binary op", ir_op_name(op));
        return IR_NONE;
    }
    ir_val ops[2] = { a, b };
    if (!ir_uses_ok(k, "ir_bin", ops, 2))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_bin", op, ir_type_of(k, a), ops, 2, 0, 0, 0));
}

ir_val ir_un(ir_kernel *k, ir_op op, ir_val a) {
    if (!k)
        return IR_NONE;
    if (op < IR_OP_NEG || op > IR_OP_ROUNDEVEN) {
        ir_fail(k, "ir_un: %s is not a unary op", ir_op_name(op));
        return IR_NONE;
    }
    if (!ir_use_ok(k, "ir_un", a))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_un", op, ir_type_of(k, a), &a, 1, 0, 0, 0));
}

ir_val ir_fma(ir_kernel *k, ir_val a, ir_val b, ir_val c) {
    if (!k)
        return IR_NONE;
    ir_val ops[3] = { a, b, c };
    if (!ir_uses_ok(k, "ir_fma", ops, 3))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_fma", IR_OP_FMA, ir_type_of(k, a), ops, 3, 0, 0, 0));
}

/* bool, or a bool vector as wide as t */
static ir_type bool_like(ir_kernel *k, ir_type t) {
    const ir_type_desc *d = ir_type_get(k, t);
    if (d && d->kind == IR_T_VECTOR && d->lanes >= 2 && d->lanes <= 4)
        return ir_t_vector(k, IR_BOOL, d->lanes);
    return ir_t_scalar(k, IR_BOOL);
}

ir_val ir_compare(ir_kernel *k, ir_cmp c, ir_val a, ir_val b) {
    if (!k)
        return IR_NONE;
    ir_val ops[2] = { a, b };
    if (!ir_uses_ok(k, "ir_compare", ops, 2))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_compare", IR_OP_CMP, bool_like(k, ir_type_of(k, a)), ops, 2, c, 0, 0));
}

ir_val ir_select(ir_kernel *k, ir_val cond, ir_val a, ir_val b) {
    if (!k)
        return IR_NONE;
    ir_val ops[3] = { cond, a, b };
    if (!ir_uses_ok(k, "ir_select", ops, 3))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_select", IR_OP_SELECT, ir_type_of(k, a), ops, 3, 0, 0, 0));
}

ir_val ir_convert(ir_kernel *k, ir_val a, ir_type to) {
    if (!k || !ir_use_ok(k, "ir_convert", a))
        return IR_NONE;
    if (to && ir_type_of(k, a) == to)
        return a; /* nothing to do; SPIR-V has no same-type conversion */
    return ir_result_of(ir_build(k, "ir_convert", IR_OP_CONVERT, to, &a, 1, 0, 0, 0));
}

ir_val ir_convert_exact(ir_kernel *k, ir_val a, ir_type to) {
    if (!k || !ir_use_ok(k, "ir_convert_exact", a))
        return IR_NONE;
    return ir_result_of(ir_build(k, "ir_convert_exact", IR_OP_CONVERT, to, &a, 1, 1, 0, 0));
}

ir_val ir_bitcast(ir_kernel *k, ir_val a, ir_type to) {
    if (!k || !ir_use_ok(k, "ir_bitcast", a))
        return IR_NONE;
    if (to && ir_type_of(k, a) == to)
        return a;
    return ir_result_of(ir_build(k, "ir_bitcast", IR_OP_BITCAST, to, &a, 1, 0, 0, 0));
}

ir_val ir_vec(ir_kernel *k, const ir_val *lanes, uint32_t n) {
    if (!k)
        return IR_NONE;
    if (!lanes || n < 2 || n > 4) {
        ir_fail(k, "ir_vec: vectors have 2..4 lanes");
        return IR_NONE;
    }
    if (!ir_uses_ok(k, "ir_vec", lanes, n))
        return IR_NONE;
    ir_scalar e;
    uint32_t l;
    if (!ir_type_elem(k, ir_type_of(k, lanes[0]), &e, &l) || l != 1) {
        ir_fail(k, "ir_vec: lanes are scalars");
        return IR_NONE;
    }
    ir_type t = ir_t_vector(k, e, n);
    return t ? ir_result_of(ir_build(k, "ir_vec", IR_OP_VEC, t, lanes, n, 0, 0, 0)) : IR_NONE;
}

ir_val ir_extract(ir_kernel *k, ir_val v, uint32_t lane) {
    if (!k || !ir_use_ok(k, "ir_extract", v))
        return IR_NONE;
    ir_scalar e;
    uint32_t l;
    if (!ir_type_elem(k, ir_type_of(k, v), &e, &l) || l < 2) {
        ir_fail(k, "ir_extract: %%%u is not a vector", v);
        return IR_NONE;
    }
    ir_type t = ir_t_scalar(k, e);
    return t ? ir_result_of(ir_build(k, "ir_extract", IR_OP_EXTRACT, t, &v, 1, lane, 0, 0)) : IR_NONE;
}

ir_val ir_id(ir_kernel *k, ir_id_kind kind, uint32_t dim) {
    if (!k)
        return IR_NONE;
    ir_type t = ir_t_scalar(k, IR_U32);
    return t ? ir_result_of(ir_build(k, "ir_id", IR_OP_ID, t, NULL, 0, kind, dim, 0)) : IR_NONE;
}
