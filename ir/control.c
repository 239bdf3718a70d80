/* The builder's structured control flow: for (with carried values) and if/else (with
 * results), each region closed by one yield. */
#include "ir/ir_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- structured control flow --------------------------------------------------------------- */

#define MAX_CARRIED 4096u

static bool push_open(ir_kernel *k, ir_inst *in, uint32_t region) {
    ir_open *o = ir_grow(k, k->open, &k->cap_open, k->n_open + 1, sizeof *o);
    if (!o)
        return false;
    k->open = o;
    k->open[k->n_open++] = (ir_open){ .inst = in, .region = region };
    return true;
}

/* The construct must be the innermost open one. */
static bool is_top(ir_kernel *k, const char *fn, const ir_inst *in) {
    if (!k->n_open || k->open[k->n_open - 1].inst != in) {
        bool open = false;
        for (uint32_t i = 0; i < k->n_open; i++)
            open |= k->open[i].inst == in;
        ir_fail(k, open ? "%s: an inner for/if is still open" : "%s: that construct is not open", fn);
        return false;
    }
    return true;
}

/* A region has ended: what it defined is out of scope for the builder. */
static void close_region(ir_kernel *k, const ir_region *r) {
    for (uint32_t i = 0; i < r->n; i++) {
        const ir_inst *in = r->inst[i];
        if (in->result)
            k->vals[in->result].closed = true;
        for (uint32_t j = 0; j < in->n_results; j++)
            k->vals[in->results[j]].closed = true;
    }
}

static bool yield_into(ir_kernel *k, ir_region *r, const ir_val *v, uint32_t n) {
    ir_inst *y = ir_alloc(k, sizeof *y);
    ir_val *o = n ? ir_alloc(k, n * sizeof *o) : NULL;
    if (!y || (n && !o))
        return false;
    y->op = IR_OP_YIELD;
    if (n)
        memcpy(o, v, n * sizeof *o);
    y->operand = o;
    y->n_operand = n;
    return ir_region_push(k, r, y);
}

ir_for *ir_for_begin(ir_kernel *k, ir_val lo, ir_val hi, ir_val step, uint32_t n, const ir_val *init) {
    if (!k)
        return NULL;
    const char *fn = "ir_for_begin";
    if (n > MAX_CARRIED || (n && !init)) {
        ir_fail(k, "%s: %u carried values need %s", fn, n, n > MAX_CARRIED ? "to be fewer" : "their inits");
        return NULL;
    }
    ir_val *ops = malloc((3 + (size_t)n) * sizeof *ops);
    if (!ops) {
        ir_fail_oom(k);
        return NULL;
    }
    ops[0] = lo, ops[1] = hi, ops[2] = step;
    for (uint32_t i = 0; i < n; i++)
        ops[3 + i] = init[i];
    ir_inst *in = NULL;
    ir_for *f = NULL;
    if (ir_uses_ok(k, fn, ops, 3 + n)) {
        char msg[200];
        ir_inst tmp = { .op = IR_OP_FOR, .operand = ops, .n_operand = 3 + n };
        if (!ir_check_op(k, &tmp, msg, sizeof msg))
            ir_fail(k, "%s: %s", fn, msg);
        else if ((in = ir_alloc(k, sizeof *in)) && (f = ir_alloc(k, sizeof *f)))
            *in = tmp;
    }
    free(ops);
    if (!in || !f)
        return NULL;
    in->operand = ir_alloc(k, (3 + (size_t)n) * sizeof(ir_val));
    in->block_arg = ir_alloc(k, (1 + (size_t)n) * sizeof(ir_val));
    if (!in->operand || !in->block_arg)
        return NULL;
    in->operand[0] = lo, in->operand[1] = hi, in->operand[2] = step;
    for (uint32_t i = 0; i < n; i++)
        in->operand[3 + i] = init[i];
    in->n_region = 1;
    in->n_block_arg = 1 + n;
    for (uint32_t i = 0; i <= n; i++)
        if (!(in->block_arg[i] = ir_new_value(k, in, ir_type_of(k, in->operand[i ? 2 + i : 0]))))
            return NULL;
    if (!ir_region_push(k, ir_current(k), in) || !push_open(k, in, 0))
        return NULL;
    f->inst = in;
    f->n = n;
    return f;
}

ir_val ir_for_iv(const ir_for *f) { return f && f->inst ? f->inst->block_arg[0] : IR_NONE; }
ir_val ir_for_arg(const ir_for *f, uint32_t i) {
    return f && f->inst && i < f->n ? f->inst->block_arg[1 + i] : IR_NONE;
}
ir_val ir_for_result(const ir_for *f, uint32_t i) {
    return f && f->inst && i < f->inst->n_results ? f->inst->results[i] : IR_NONE;
}

/* Yields must be visible values of the expected types (types NULL: any). */
static bool yields_ok(ir_kernel *k, const char *fn, const ir_val *y, uint32_t n, const ir_type *types,
                      const ir_val *want_like) {
    if (n && !y) {
        ir_fail(k, "%s: %u values to yield, none given", fn, n);
        return false;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (!ir_use_ok(k, fn, y[i]))
            return false;
        ir_type want = types ? types[i] : want_like ? ir_type_of(k, want_like[i]) : 0;
        if (want && ir_type_of(k, y[i]) != want) {
            char a[48], b[48];
            ir_type_str(k, ir_type_of(k, y[i]), a, sizeof a);
            ir_type_str(k, want, b, sizeof b);
            ir_fail(k, "%s: yield %u is %s, expected %s", fn, i, a, b);
            return false;
        }
    }
    return true;
}

static ir_val *new_results(ir_kernel *k, ir_inst *in, uint32_t n, const ir_type *types, const ir_val *like) {
    ir_val *r = n ? ir_alloc(k, n * sizeof *r) : NULL;
    if (n && !r)
        return NULL;
    for (uint32_t i = 0; i < n; i++)
        if (!(r[i] = ir_new_value(k, in, types ? types[i] : ir_type_of(k, like[i]))))
            return NULL;
    in->results = r;
    in->n_results = n;
    return r;
}

void ir_for_end(ir_kernel *k, ir_for *f, const ir_val *yields) {
    if (!k)
        return;
    const char *fn = "ir_for_end";
    if (!f || !f->inst || f->ended) {
        ir_fail(k, "%s: that for is not open", fn);
        return;
    }
    if (!is_top(k, fn, f->inst))
        return;
    ir_inst *in = f->inst;
    bool ok = yields_ok(k, fn, yields, f->n, NULL, in->operand + 3);
    /* close it even when the yields are wrong, so later calls nest where the caller meant */
    k->n_open--;
    f->ended = true;
    if (!yield_into(k, &in->region[0], ok ? yields : NULL, ok ? f->n : 0))
        return;
    close_region(k, &in->region[0]);
    for (uint32_t i = 0; i < in->n_block_arg; i++)
        k->vals[in->block_arg[i]].closed = true;
    if (ok)
        new_results(k, in, f->n, NULL, in->operand + 3);
}

ir_if *ir_if_begin(ir_kernel *k, ir_val cond, uint32_t n) {
    if (!k)
        return NULL;
    const char *fn = "ir_if_begin";
    if (n > MAX_CARRIED) {
        ir_fail(k, "%s: too many results", fn);
        return NULL;
    }
    if (!ir_use_ok(k, fn, cond))
        return NULL;
    char msg[200];
    ir_inst tmp = { .op = IR_OP_IF, .operand = &cond, .n_operand = 1 };
    if (!ir_check_op(k, &tmp, msg, sizeof msg)) {
        ir_fail(k, "%s: %s", fn, msg);
        return NULL;
    }
    ir_inst *in = ir_alloc(k, sizeof *in);
    ir_if *f = ir_alloc(k, sizeof *f);
    ir_val *o = ir_alloc(k, sizeof *o);
    if (!in || !f || !o)
        return NULL;
    *in = tmp;
    o[0] = cond;
    in->operand = o;
    in->n_region = 2;
    if (!ir_region_push(k, ir_current(k), in) || !push_open(k, in, 0))
        return NULL;
    f->inst = in;
    f->n = n;
    return f;
}

void ir_if_else(ir_kernel *k, ir_if *f, const ir_val *then_yields) {
    if (!k)
        return;
    const char *fn = "ir_if_else";
    if (!f || !f->inst || f->phase != 0) {
        ir_fail(k, "%s: that if is not open in its then part", fn);
        return;
    }
    if (!is_top(k, fn, f->inst))
        return;
    ir_inst *in = f->inst;
    bool ok = yields_ok(k, fn, then_yields, f->n, NULL, NULL);
    if (ok && f->n) {
        f->types = ir_alloc(k, f->n * sizeof *f->types);
        if (!f->types)
            return;
        for (uint32_t i = 0; i < f->n; i++)
            f->types[i] = ir_type_of(k, then_yields[i]);
    }
    if (!yield_into(k, &in->region[0], ok ? then_yields : NULL, ok ? f->n : 0))
        return;
    close_region(k, &in->region[0]);
    k->open[k->n_open - 1].region = 1;
    f->phase = 1;
}

void ir_if_end(ir_kernel *k, ir_if *f, const ir_val *yields) {
    if (!k)
        return;
    const char *fn = "ir_if_end";
    if (!f || !f->inst || f->phase > 1) {
        ir_fail(k, "%s: that if is not open", fn);
        return;
    }
    if (!is_top(k, fn, f->inst))
        return;
    ir_inst *in = f->inst;
    bool ok;
    if (f->phase == 0) {
        /* no else: only an if without results may leave it out */
        ok = f->n == 0;
        if (!ok)
            ir_fail(k, "%s: an if with %u results needs an else", fn, f->n);
        if (!yield_into(k, &in->region[0], NULL, 0))
            return;
        close_region(k, &in->region[0]);
    } else {
        ok = f->types || f->n == 0 ? yields_ok(k, fn, yields, f->n, f->types, NULL) : false;
    }
    k->n_open--;
    f->phase = 2;
    if (!yield_into(k, &in->region[1], ok ? yields : NULL, ok ? f->n : 0))
        return;
    close_region(k, &in->region[1]);
    if (ok)
        new_results(k, in, f->n, f->types, NULL);
}

ir_val ir_if_result(const ir_if *f, uint32_t i) {
    return f && f->inst && i < f->inst->n_results ? f->inst->results[i] : IR_NONE;
}
