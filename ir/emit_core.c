/* The emitters' shared core (emit_core.h). */
#include "ir/emit_core.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>

ir_op_class ir_op_class_of(ir_op op) {
    switch (op) {
    case IR_OP_CONST: case IR_OP_PARAM: case IR_OP_SPEC: return IR_CLASS_DECL;
    case IR_OP_ID: return IR_CLASS_ID;
    case IR_OP_ADD: case IR_OP_SUB: case IR_OP_MUL: case IR_OP_DIV: case IR_OP_REM: case IR_OP_MIN: case IR_OP_MAX:
    case IR_OP_AND: case IR_OP_OR: case IR_OP_XOR: case IR_OP_SHL: case IR_OP_SHR: case IR_OP_NEG: case IR_OP_NOT:
    case IR_OP_ABS: case IR_OP_EXP: case IR_OP_LOG: case IR_OP_SQRT: case IR_OP_RSQRT: case IR_OP_TANH: case IR_OP_SIN:
    case IR_OP_COS: case IR_OP_FLOOR: case IR_OP_ROUNDEVEN: case IR_OP_FMA:
        return IR_CLASS_ARITH;
    case IR_OP_CMP: return IR_CLASS_CMP;
    case IR_OP_SELECT: return IR_CLASS_SELECT;
    case IR_OP_CONVERT: return IR_CLASS_CONVERT;
    case IR_OP_BITCAST: return IR_CLASS_BITCAST;
    case IR_OP_VEC: case IR_OP_EXTRACT: return IR_CLASS_VECTOR;
    case IR_OP_LOAD: case IR_OP_STORE: case IR_OP_LOAD_MASKED: case IR_OP_STORE_MASKED: case IR_OP_SHM_LOAD:
    case IR_OP_SHM_STORE:
        return IR_CLASS_MEMORY;
    case IR_OP_ATOMIC: return IR_CLASS_ATOMIC;
    case IR_OP_BARRIER: case IR_OP_FENCE: return IR_CLASS_BARRIER;
    case IR_OP_ASYNC_COPY: case IR_OP_ASYNC_COMMIT: case IR_OP_ASYNC_WAIT: return IR_CLASS_ASYNC;
    case IR_OP_SG_REDUCE: case IR_OP_SG_SHUFFLE: case IR_OP_SG_SHUFFLE_XOR: case IR_OP_SG_BROADCAST:
        return IR_CLASS_SUBGROUP;
    case IR_OP_FRAG_FILL: case IR_OP_FRAG_LOAD: case IR_OP_FRAG_STORE: case IR_OP_FRAG_MMA: case IR_OP_FRAG_MUL_ADD:
    case IR_OP_WG_MMA:
    case IR_OP_FRAG_LOAD_TENSOR:
    case IR_OP_WG_WAIT: case IR_OP_FRAG_ELEMS: case IR_OP_FRAG_FROM_ELEMS: case IR_OP_FRAG_PAIR_SUB:
        return IR_CLASS_FRAGMENT;
    case IR_OP_GRID_WAIT: case IR_OP_PREFETCH: case IR_OP_MBAR_INIT: case IR_OP_MBAR_ARRIVE: case IR_OP_MBAR_EXPECT:
    case IR_OP_MBAR_WAIT: case IR_OP_TMA_LOAD: case IR_OP_CLUSTER_SYNC:
        return IR_CLASS_SYNC;
    case IR_OP_FOR: case IR_OP_IF: case IR_OP_YIELD: return IR_CLASS_CONTROL;
    default: return IR_CLASS_UNKNOWN;
    }
}

int ir_emit_init(ir_emit *e, const ir_kernel *k, const char *target, kiln_err *err) {
    *e = (ir_emit){ .k = k, .target = target, .err = err, .code = KILN_ERR_UNSUPPORTED };
    kiln_err_clear(err);
    e->n_val = ir_n_values(k);
    e->val = calloc((size_t)e->n_val + 1, sizeof *e->val);
    if (!e->val) {
        ir_emit_fail_code(e, KILN_ERR_NOMEM, "out of memory");
        return -1;
    }
    return 0;
}

void ir_emit_free(ir_emit *e) {
    free(e->val);
    e->val = NULL;
    e->n_val = 0;
}

void ir_emit_vfail(ir_emit *e, const char *fmt, va_list ap) {
    if (e->failed)
        return;
    e->failed = true;
    if (!e->err)
        return;
    char what[256];
    vsnprintf(what, sizeof what, fmt, ap);
    const char *kn = ir_kernel_name(e->k);
    if (e->cur && e->cur->result)
        kiln_fail(e->err, e->code, "%s: kernel '%s': %%%u = %s: %s", e->target, kn, e->cur->result,
                  ir_op_name(e->cur->op), what);
    else if (e->cur)
        kiln_fail(e->err, e->code, "%s: kernel '%s': %s: %s", e->target, kn, ir_op_name(e->cur->op), what);
    else
        kiln_fail(e->err, e->code, "%s: kernel '%s': %s", e->target, kn, what);
}

void ir_emit_fail_code(ir_emit *e, kiln_code code, const char *fmt, ...) {
    if (!e->failed)
        e->code = code;
    va_list ap;
    va_start(ap, fmt);
    ir_emit_vfail(e, fmt, ap);
    va_end(ap);
}

void ir_emit_fail(ir_emit *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ir_emit_vfail(e, fmt, ap);
    va_end(ap);
}

uintptr_t ir_emit_get(ir_emit *e, ir_val v) {
    if (v == IR_NONE || v > e->n_val || !e->val[v]) {
        ir_emit_fail(e, "value %%%u is used before it is defined", v);
        return 0;
    }
    return e->val[v];
}

bool ir_emit_has(const ir_emit *e, ir_val v) { return v != IR_NONE && v <= e->n_val && e->val[v]; }

void ir_emit_set(ir_emit *e, ir_val v, uintptr_t t) {
    if (v == IR_NONE || v > e->n_val || !t) {
        ir_emit_fail(e, "result %%%u is out of range", v);
        return;
    }
    e->val[v] = t;
}

bool ir_emit_need(ir_emit *e, const ir_inst *in, uint32_t n) {
    if (in->n_operand >= n)
        return true;
    ir_emit_fail(e, "expected %u operands, has %u", n, in->n_operand);
    return false;
}

bool ir_emit_tinfo(ir_emit *e, ir_type t, ir_scalar *s, uint32_t *lanes) {
    const ir_type_desc *d = ir_type_get(e->k, t);
    if (!d) {
        ir_emit_fail(e, "unknown type %u", t);
        return false;
    }
    if (d->kind == IR_T_FRAG)
        return false;
    *s = d->elem;
    *lanes = d->kind == IR_T_VECTOR ? d->lanes : 1;
    return true;
}

const ir_inst *ir_emit_region(ir_emit *e, const ir_region *r, ir_emit_inst_fn emit_inst, void *ctx) {
    const ir_inst *y = NULL;
    const ir_inst *outer = e->cur;
    for (uint32_t i = 0; i < r->n && !e->failed; i++) {
        const ir_inst *in = r->inst[i];
        if (!in)
            continue;
        if (in->op == IR_OP_YIELD)
            y = in;
        e->cur = in;
        emit_inst(ctx, in);
    }
    if (!e->failed)
        e->cur = outer; /* a failure keeps naming the instruction that failed */
    return y;
}

/* The first instruction in r (recursively) with class c (op == IR_OP_COUNT) or op op. */
static const ir_inst *find(const ir_region *r, ir_op_class c, ir_op op) {
    for (uint32_t i = 0; i < r->n; i++) {
        const ir_inst *in = r->inst[i];
        if (!in)
            continue;
        if (op == IR_OP_COUNT ? ir_op_class_of(in->op) == c : in->op == op)
            return in;
        for (uint32_t j = 0; j < in->n_region && j < 2; j++) {
            const ir_inst *f = find(&in->region[j], c, op);
            if (f)
                return f;
        }
    }
    return NULL;
}

const ir_inst *ir_emit_find_class(const ir_region *r, ir_op_class c) { return find(r, c, IR_OP_COUNT); }

const ir_inst *ir_emit_find_op(const ir_region *r, ir_op op) { return find(r, IR_CLASS_UNKNOWN, op); }
