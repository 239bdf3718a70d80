/* A deep copy of a kernel (ir.h, ir_kernel_clone): the emitters lower a copy, so the
 * kernel a plan holds (and prints, and hashes for caches) stays as kernels/ built it.
 * Values keep their numbers; instructions, regions and declarations are copied into the
 * copy's own arena. */
#include "ir/ir_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct cl {
    const ir_kernel *src;
    ir_kernel *k;
} cl;

static void *dup(ir_kernel *k, const void *p, size_t n) {
    if (!n)
        return NULL;
    void *q = ir_alloc(k, n);
    if (q)
        memcpy(q, p, n);
    return q;
}

static char *dup_str(ir_kernel *k, const char *s) { return s ? dup(k, s, strlen(s) + 1) : NULL; }

static bool copy_region(cl *c, ir_region *to, const ir_region *from);

/* in's copy, which also becomes the definition of every value in defines. */
static ir_inst *copy_inst(cl *c, const ir_inst *in) {
    ir_kernel *k = c->k;
    ir_inst *out = dup(k, in, sizeof *in);
    if (!out)
        return NULL;
    out->operand = dup(k, in->operand, in->n_operand * sizeof *in->operand);
    out->block_arg = dup(k, in->block_arg, in->n_block_arg * sizeof *in->block_arg);
    out->results = dup(k, in->results, in->n_results * sizeof *in->results);
    if ((in->n_operand && !out->operand) || (in->n_block_arg && !out->block_arg) || (in->n_results && !out->results))
        return NULL;
    if (in->result)
        k->vals[in->result].def = out;
    for (uint32_t i = 0; i < in->n_block_arg; i++)
        k->vals[in->block_arg[i]].def = out;
    for (uint32_t i = 0; i < in->n_results; i++)
        k->vals[in->results[i]].def = out;
    for (uint32_t g = 0; g < in->n_region && g < 2; g++) {
        out->region[g] = (ir_region){ 0 };
        if (!copy_region(c, &out->region[g], &in->region[g]))
            return NULL;
    }
    return out;
}

static bool copy_region(cl *c, ir_region *to, const ir_region *from) {
    for (uint32_t i = 0; i < from->n; i++) {
        ir_inst *in = from->inst[i] ? copy_inst(c, from->inst[i]) : NULL;
        if (!in || !ir_region_push(c->k, to, in))
            return false;
    }
    return true;
}

static bool copy_decls(cl *c) {
    const ir_kernel *s = c->src;
    ir_kernel *k = c->k;
    k->types = dup(k, s->types, (size_t)s->cap_types * sizeof *s->types);
    k->vals = dup(k, s->vals, (size_t)s->cap_vals * sizeof *s->vals);
    k->params = dup(k, s->params, (size_t)s->cap_params * sizeof *s->params);
    k->buffers = dup(k, s->buffers, (size_t)s->cap_buffers * sizeof *s->buffers);
    k->specs = dup(k, s->specs, (size_t)s->cap_specs * sizeof *s->specs);
    k->shared = dup(k, s->shared, (size_t)s->cap_shared * sizeof *s->shared);
    if ((s->cap_types && !k->types) || (s->cap_vals && !k->vals) || (s->cap_params && !k->params) ||
        (s->cap_buffers && !k->buffers) || (s->cap_specs && !k->specs) || (s->cap_shared && !k->shared))
        return false;
    k->n_types = s->n_types, k->cap_types = s->cap_types;
    k->n_vals = s->n_vals, k->cap_vals = s->cap_vals;
    k->n_params = s->n_params, k->cap_params = s->cap_params;
    k->n_buffers = s->n_buffers, k->cap_buffers = s->cap_buffers;
    k->n_specs = s->n_specs, k->cap_specs = s->cap_specs;
    k->n_shared = s->n_shared, k->cap_shared = s->cap_shared;
    for (uint32_t i = 0; i < k->n_params; i++)
        if (!(k->params[i].name = dup_str(k, s->params[i].name)))
            return false;
    for (uint32_t i = 0; i < k->n_specs; i++)
        if (!(k->specs[i].name = dup_str(k, s->specs[i].name)))
            return false;
    for (uint32_t i = 0; i < k->n_shared; i++)
        if (!(k->shared[i].name = dup_str(k, s->shared[i].name)))
            return false;
    /* definitions are re-pointed as the body is copied; until then none */
    for (uint32_t v = 1; v <= k->n_vals; v++)
        k->vals[v].def = NULL;
    return true;
}

ir_kernel *ir_kernel_clone(const ir_kernel *src) {
    if (!src || src->n_open)
        return NULL;
    ir_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    memcpy(k->name, src->name, sizeof k->name);
    k->error = src->error;
    k->failed = src->failed;
    memcpy(k->wg, src->wg, sizeof k->wg);
    k->wg_spec = src->wg_spec;
    k->wg_set = src->wg_set;
    k->occupancy = src->occupancy;
    k->launch_early = src->launch_early;
    k->cluster = src->cluster;
    memcpy(k->tmaps, src->tmaps, sizeof k->tmaps);
    k->n_tmaps = src->n_tmaps;
    cl c = { .src = src, .k = k };
    bool ok = copy_decls(&c) && copy_region(&c, &k->body, &src->body);
    /* definitions outside every region: parameters' and spec constants' entry
     * instructions (and any a pass left standing alone) */
    for (uint32_t v = 1; ok && v <= k->n_vals; v++) {
        const ir_inst *d = src->vals[v].def;
        if (d && !k->vals[v].def)
            ok = copy_inst(&c, d) != NULL;
    }
    if (!ok) {
        ir_kernel_destroy(k);
        return NULL;
    }
    return k;
}
