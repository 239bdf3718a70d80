/* The lowering driver (lower.h) and the rewriting helpers its passes build with
 * (ir_internal.h, ir_rw_*). */
#include "ir/lower.h"

#include "base/error.h"
#include "ir/ir_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- rewriting --------------------------------------------------------------------------- */

ir_inst *ir_rw_inst(ir_rw *w, ir_op op, ir_type t, const ir_val *ops, uint32_t n, int64_t imm0, int64_t imm1,
                    int64_t imm2) {
    ir_kernel *k = w->k;
    ir_inst *in = ir_alloc(k, sizeof *in);
    ir_val *o = n ? ir_alloc(k, n * sizeof *o) : NULL;
    if (!in || (n && !o))
        return NULL;
    if (n)
        memcpy(o, ops, n * sizeof *o);
    *in = (ir_inst){ .op = op, .operand = o, .n_operand = n, .imm = { imm0, imm1, imm2 } };
    if (ir_op_has_result(op)) {
        in->type = t;
        if (!(in->result = ir_new_value(k, in, t)))
            return NULL;
    }
    return ir_region_push(k, w->out, in) ? in : NULL;
}

ir_inst *ir_rw_inst_into(ir_rw *w, ir_val v, ir_op op, const ir_val *ops, uint32_t n, int64_t imm0, int64_t imm1,
                         int64_t imm2) {
    ir_kernel *k = w->k;
    ir_inst *in = ir_alloc(k, sizeof *in);
    ir_val *o = n ? ir_alloc(k, n * sizeof *o) : NULL;
    if (!in || (n && !o) || !v || v > k->n_vals)
        return NULL;
    if (n)
        memcpy(o, ops, n * sizeof *o);
    *in = (ir_inst){ .op = op, .result = v, .type = ir_type_of(k, v), .operand = o, .n_operand = n,
                     .imm = { imm0, imm1, imm2 } };
    k->vals[v].def = in;
    return ir_region_push(k, w->out, in) ? in : NULL;
}

ir_val ir_rw_op(ir_rw *w, ir_op op, ir_type t, ir_val a, ir_val b, int64_t imm0) {
    ir_val ops[2] = { a, b };
    ir_inst *in = ir_rw_inst(w, op, t, ops, b ? 2 : 1, imm0, 0, 0);
    return in ? in->result : IR_NONE;
}

ir_val ir_rw_const(ir_rw *w, ir_type t, int64_t bits) {
    for (uint32_t i = 0; i < w->consts.n; i++) {
        const ir_inst *c = w->consts.inst[i];
        if (c->type == t && c->imm[0] == bits)
            return c->result;
    }
    ir_region *out = w->out;
    w->out = &w->consts;
    ir_inst *c = ir_rw_inst(w, IR_OP_CONST, t, NULL, 0, bits, 0, 0);
    w->out = out;
    return c ? c->result : IR_NONE;
}

ir_val ir_rw_u32(ir_rw *w, uint32_t v) { return ir_rw_const(w, ir_t_scalar(w->k, IR_U32), v); }

ir_inst *ir_rw_if(ir_rw *w, ir_val cond, uint32_t n, const ir_type *types, const ir_val *results) {
    ir_kernel *k = w->k;
    ir_inst *in = ir_rw_inst(w, IR_OP_IF, 0, &cond, 1, 0, 0, 0);
    ir_val *r = n ? ir_alloc(k, n * sizeof *r) : NULL;
    if (!in || (n && !r))
        return NULL;
    in->n_region = 2;
    in->results = r;
    in->n_results = n;
    for (uint32_t i = 0; i < n; i++) {
        if (results) {
            r[i] = results[i];
            k->vals[r[i]].def = in;
        } else if (!(r[i] = ir_new_value(k, in, types[i]))) {
            return NULL;
        }
    }
    return in;
}

bool ir_rw_yield(ir_rw *w, ir_region *r, const ir_val *v, uint32_t n) {
    ir_region *out = w->out;
    w->out = r;
    ir_inst *y = ir_rw_inst(w, IR_OP_YIELD, 0, v, n, 0, 0, 0);
    w->out = out;
    return y != NULL;
}

typedef struct run {
    ir_rw w;
    ir_rw_fn fn;
    void *ctx;
} run;

static bool run_region(run *r, ir_region *reg) {
    ir_region out = { 0 };
    ir_region *saved = r->w.out;
    bool ok = true;
    for (uint32_t i = 0; i < reg->n && ok; i++) {
        ir_inst *in = reg->inst[i];
        for (uint32_t g = 0; g < in->n_region && g < 2 && ok; g++)
            ok = run_region(r, &in->region[g]);
        if (!ok)
            break;
        r->w.out = &out;
        int done = r->fn(&r->w, in, r->ctx);
        ok = done >= 0 && (done == 1 || ir_region_push(r->w.k, &out, in));
    }
    r->w.out = saved;
    if (ok)
        *reg = out;
    return ok && !r->w.k->failed;
}

bool ir_rw_run(ir_kernel *k, ir_rw_fn fn, void *ctx) {
    run r = { .w = { .k = k }, .fn = fn, .ctx = ctx };
    if (!run_region(&r, &k->body))
        return false;
    if (!r.w.consts.n)
        return true;
    /* the pass's constants first, so they are in scope everywhere */
    ir_region body = r.w.consts;
    for (uint32_t i = 0; i < k->body.n; i++)
        if (!ir_region_push(k, &body, k->body.inst[i]))
            return false;
    k->body = body;
    return true;
}

/* ---- the driver -------------------------------------------------------------------------- */

int ir_lower(ir_kernel *k, const ir_lower_opts *o, kiln_err *err) {
    kiln_err_clear(err);
    if (!k || !o)
        return kiln_fail(err, KILN_ERR_INVALID, "ir_lower: no kernel or no options");
    if (ir_verify(k, err))
        return -1;
    if (o->async_sync && ir_lower_async(k))
        return k->failed ? kiln_err_wrap(err, &k->error, "ir_lower: asynchronous copies")
                         : kiln_fail(err, KILN_ERR_INTERNAL, "ir_lower: asynchronous copies failed");
    if (o->masked && ir_lower_masked(k))
        return k->failed ? kiln_err_wrap(err, &k->error, "ir_lower: masked accesses")
                         : kiln_fail(err, KILN_ERR_INTERNAL, "ir_lower: masked accesses failed");
    if (ir_lower_half(k, o))
        return k->failed ? kiln_err_wrap(err, &k->error, "ir_lower: 16-bit floats")
                         : kiln_fail(err, KILN_ERR_INTERNAL, "ir_lower: 16-bit floats failed");
    kiln_err verr;
    if (ir_verify(k, &verr)) /* a lowering that breaks a rule is kiln's bug */
        return kiln_fail(err, KILN_ERR_INTERNAL, "ir_lower: the lowered kernel does not verify: %s", verr.msg);
    return 0;
}
