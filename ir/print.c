/* The stable text form. Values keep their numbers (gaps after passes stay), buffers,
 * shared arrays, params and specs print by their unique @names, and f32 constants print
 * in the shortest decimal that reads back to the same bits, so one kernel gives one text.
 * It never trusts the kernel: the verifier prints broken instructions with it. */
#include "ir/ir_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ir_sb_printf(ir_sb *b, const char *fmt, ...) {
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->n;
        int n = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->s && (size_t)n < room) {
            b->n += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + (size_t)n + 1)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

static void put_type(ir_sb *b, const ir_kernel *k, ir_type t) {
    char buf[64];
    ir_type_str(k, t, buf, sizeof buf);
    ir_sb_printf(b, "%s", buf);
}

/* Shortest %g that reads back to the same f32 bits. */
static void put_f32(ir_sb *b, uint32_t bits) {
    float f = ir_bits_f32(bits);
    if (isnan(f)) {
        ir_sb_printf(b, "nan(0x%08x)", bits);
        return;
    }
    if (isinf(f)) {
        ir_sb_printf(b, "%sinf", f < 0 ? "-" : "");
        return;
    }
    char buf[48];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if (ir_f32_bits(strtof(buf, NULL)) == bits)
            break;
    }
    ir_sb_printf(b, "%s", buf);
}

static void put_const(ir_sb *b, const ir_kernel *k, ir_type t, int64_t v) {
    const ir_type_desc *d = ir_type_get(k, t);
    ir_scalar s = d && d->kind != IR_T_FRAG ? d->elem : IR_SCALAR_COUNT; /* vectors: every lane's */
    if (s == IR_BOOL)
        ir_sb_printf(b, "%s", v ? "true" : "false");
    else if (s == IR_F32 && v >= 0 && v <= UINT32_MAX)
        put_f32(b, (uint32_t)v);
    else
        ir_sb_printf(b, "%lld", (long long)v);
}

static void put_target(ir_sb *b, const ir_kernel *k, bool shm, int64_t idx) {
    const char *name = NULL;
    if (shm && idx >= 0 && idx < k->n_shared)
        name = k->shared[idx].name;
    else if (!shm && idx >= 0 && idx < k->n_buffers && k->buffers[idx] < k->n_params)
        name = k->params[k->buffers[idx]].name;
    if (name)
        ir_sb_printf(b, "@%s", name);
    else
        ir_sb_printf(b, "@?%s%lld", shm ? "shm" : "buf", (long long)idx);
}

static ir_val opnd(const ir_inst *in, uint32_t i) {
    return in->operand && i < in->n_operand ? in->operand[i] : IR_NONE;
}

static void put_vals(ir_sb *b, const ir_val *v, uint32_t from, uint32_t to) {
    for (uint32_t i = from; i < to; i++)
        ir_sb_printf(b, "%s%%%u", i > from ? ", " : "", v ? v[i] : 0);
}

static const char *const id_names[IR_ID_COUNT] = {
    "global", "local", "group", "num_groups", "sg_id", "sg_lane", "sg_size", "warpgroup", "cluster_rank",
};
static const char *const cmp_names[] = { "eq", "ne", "lt", "le", "gt", "ge" };
static const char *const red_names[] = { "add", "min", "max" };
static const char *const atomic_names[] = { "add", "min", "max", "xchg" };

#define NAME_AT(tab, i) ((i) >= 0 && (i) < (int64_t)(sizeof(tab) / sizeof(tab[0])) ? tab[(i)] : "?")

void ir_sb_inst(ir_sb *b, const ir_kernel *k, const ir_inst *in) {
    const char *op = ir_op_name(in->op);
    if (in->result)
        ir_sb_printf(b, "%%%u = ", in->result);
    bool typed = in->result != IR_NONE;
    switch (in->op) {
    case IR_OP_CONST:
        ir_sb_printf(b, "const ");
        put_const(b, k, in->type, in->imm[0]);
        break;
    case IR_OP_ID:
        ir_sb_printf(b, "id.%s", NAME_AT(id_names, in->imm[0]));
        if (in->imm[0] < IR_ID_SG_ID)
            ir_sb_printf(b, ".%c", in->imm[1] >= 0 && in->imm[1] <= 2 ? (char)('x' + in->imm[1]) : '?');
        break;
    case IR_OP_PARAM: case IR_OP_SPEC:
        ir_sb_printf(b, "%s %lld", op, (long long)in->imm[0]);
        break;
    case IR_OP_CMP:
        ir_sb_printf(b, "cmp.%s ", NAME_AT(cmp_names, in->imm[0]));
        put_vals(b, in->operand, 0, in->n_operand);
        break;
    case IR_OP_EXTRACT:
        ir_sb_printf(b, "extract %%%u, %lld", opnd(in, 0), (long long)in->imm[0]);
        break;
    case IR_OP_LOAD: case IR_OP_SHM_LOAD:
        ir_sb_printf(b, "%s ", op);
        put_target(b, k, in->op == IR_OP_SHM_LOAD, in->imm[0]);
        ir_sb_printf(b, "[%%%u]", opnd(in, 0));
        break;
    case IR_OP_LOAD_MASKED:
        ir_sb_printf(b, "%s ", op);
        put_target(b, k, false, in->imm[0]);
        ir_sb_printf(b, "[%%%u], limit %%%u, else %%%u", opnd(in, 0), opnd(in, 1), opnd(in, 2));
        break;
    case IR_OP_STORE: case IR_OP_SHM_STORE:
        ir_sb_printf(b, "%s ", op);
        put_target(b, k, in->op == IR_OP_SHM_STORE, in->imm[0]);
        ir_sb_printf(b, "[%%%u], %%%u", opnd(in, 0), opnd(in, 1));
        break;
    case IR_OP_STORE_MASKED:
        ir_sb_printf(b, "%s ", op);
        put_target(b, k, false, in->imm[0]);
        ir_sb_printf(b, "[%%%u], %%%u, limit %%%u", opnd(in, 0), opnd(in, 1), opnd(in, 2));
        break;
    case IR_OP_ASYNC_COPY:
        ir_sb_printf(b, "%s ", op);
        put_target(b, k, true, in->imm[0]);
        ir_sb_printf(b, "[%%%u], ", opnd(in, 0));
        put_target(b, k, false, in->imm[1]);
        ir_sb_printf(b, "[%%%u], count %lld, limit %%%u", opnd(in, 1), (long long)in->imm[2], opnd(in, 2));
        break;
    case IR_OP_WG_MMA:
        ir_sb_printf(b, "%s %%%u, ", op, opnd(in, 0));
        put_target(b, k, true, in->imm[0]);
        ir_sb_printf(b, "[%%%u] sbo %%%u lbo %%%u, ", opnd(in, 1), opnd(in, 2), opnd(in, 3));
        put_target(b, k, true, in->imm[1]);
        ir_sb_printf(b, "[%%%u] sbo %%%u lbo %%%u, k_steps %lld%s%s", opnd(in, 4), opnd(in, 5), opnd(in, 6),
                     (long long)(in->imm[2] & IR_WG_MMA_STEPS), in->imm[2] & IR_WG_MMA_SW128 ? ", sw128" : "",
                     in->imm[2] & IR_WG_MMA_ASYNC ? ", async" : "");
        break;
    case IR_OP_WG_WAIT:
        ir_sb_printf(b, "%s %%%u, pending %lld", op, opnd(in, 0), (long long)in->imm[0]);
        break;
    case IR_OP_PREFETCH:
        ir_sb_printf(b, "%s ", op);
        put_target(b, k, false, in->imm[0]);
        ir_sb_printf(b, "[%%%u], %lld bytes", opnd(in, 0), (long long)in->imm[1]);
        break;
    case IR_OP_MBAR_INIT: case IR_OP_MBAR_ARRIVE: case IR_OP_MBAR_EXPECT: case IR_OP_MBAR_WAIT:
        ir_sb_printf(b, "%s ", op);
        put_target(b, k, true, in->imm[0]);
        ir_sb_printf(b, "[%%%u]", opnd(in, 0));
        if (in->n_operand > 1)
            ir_sb_printf(b, ", %s %%%u", in->op == IR_OP_MBAR_INIT ? "count" : in->op == IR_OP_MBAR_ARRIVE ? "cta"
                                         : in->op == IR_OP_MBAR_EXPECT ? "bytes" : "parity", opnd(in, 1));
        break;
    case IR_OP_TMA_LOAD:
        ir_sb_printf(b, "%s ", op);
        put_target(b, k, true, in->imm[0]);
        ir_sb_printf(b, "[%%%u], map %lld (%%%u, %%%u), bar ", opnd(in, 0), (long long)in->imm[1], opnd(in, 1),
                     opnd(in, 2));
        put_target(b, k, true, in->imm[2]);
        ir_sb_printf(b, "[%%%u]", opnd(in, 3));
        if (in->n_operand > 4)
            ir_sb_printf(b, ", multicast %%%u", opnd(in, 4));
        break;
    case IR_OP_ASYNC_WAIT:
        ir_sb_printf(b, "%s %lld", op, (long long)in->imm[0]);
        break;
    case IR_OP_ATOMIC:
        ir_sb_printf(b, "atomic.%s ", NAME_AT(atomic_names, in->imm[1]));
        put_target(b, k, in->imm[2] != 0, in->imm[0]);
        ir_sb_printf(b, "[%%%u], %%%u", opnd(in, 0), opnd(in, 1));
        break;
    case IR_OP_SG_REDUCE:
        ir_sb_printf(b, "sg.reduce.%s %%%u", NAME_AT(red_names, in->imm[0]), opnd(in, 0));
        break;
    case IR_OP_FRAG_PAIR_SUB:
        ir_sb_printf(b, "%s.%s %%%u, %%%u", op, in->imm[0] == IR_BF16 ? "bf16" : in->imm[0] == IR_F16 ? "f16" : "?",
                     opnd(in, 0), opnd(in, 1));
        break;
    case IR_OP_FRAG_LOAD:
        ir_sb_printf(b, "%s ", op);
        put_target(b, k, in->imm[2] != 0, in->imm[0]);
        ir_sb_printf(b, "[%%%u], stride %%%u, %s%s", opnd(in, 0), opnd(in, 1),
                     in->imm[1] & IR_FRAG_ROW_MAJOR ? "row_major" : "col_major",
                     in->imm[1] & IR_FRAG_ALIGNED16 ? ", aligned16" : "");
        break;
    case IR_OP_FRAG_LOAD_TENSOR:
        ir_sb_printf(b, "%s ", op);
        put_target(b, k, false, in->imm[0]);
        ir_sb_printf(b, "[%%%u, %%%u] of %%%u x %%%u%s", opnd(in, 0), opnd(in, 1), opnd(in, 2), opnd(in, 3),
                     in->imm[1] & IR_FRAG_TRANSPOSED ? ", transposed" : "");
        break;
    case IR_OP_FRAG_STORE:
        ir_sb_printf(b, "%s %%%u, ", op, opnd(in, 0));
        put_target(b, k, in->imm[2] != 0, in->imm[0]);
        ir_sb_printf(b, "[%%%u], stride %%%u, %s", opnd(in, 1), opnd(in, 2),
                     in->imm[1] & IR_FRAG_ROW_MAJOR ? "row_major" : "col_major");
        break;
    case IR_OP_FOR:
        if (in->n_results) {
            put_vals(b, in->results, 0, in->n_results);
            ir_sb_printf(b, " = ");
        }
        ir_sb_printf(b, "for %%%u = %%%u to %%%u step %%%u", in->n_block_arg && in->block_arg ? in->block_arg[0] : 0,
                     opnd(in, 0), opnd(in, 1), opnd(in, 2));
        if (in->n_operand > 3) {
            ir_sb_printf(b, " iter(");
            for (uint32_t i = 3; i < in->n_operand; i++)
                ir_sb_printf(b, "%s%%%u = %%%u", i > 3 ? ", " : "",
                             in->block_arg && i - 2 < in->n_block_arg ? in->block_arg[i - 2] : 0, opnd(in, i));
            ir_sb_printf(b, ")");
        }
        break;
    case IR_OP_IF:
        if (in->n_results) {
            put_vals(b, in->results, 0, in->n_results);
            ir_sb_printf(b, " = ");
        }
        ir_sb_printf(b, "if %%%u", opnd(in, 0));
        break;
    default:
        ir_sb_printf(b, "%s", in->op == IR_OP_CONVERT && in->imm[0] == 1 ? "convert.exact" : op);
        if (in->n_operand)
            ir_sb_printf(b, " ");
        put_vals(b, in->operand, 0, in->n_operand);
        break;
    }
    if (typed) {
        ir_sb_printf(b, " : ");
        put_type(b, k, in->type);
    } else if ((in->op == IR_OP_FOR || in->op == IR_OP_IF) && in->n_results && in->results) {
        ir_sb_printf(b, " : ");
        for (uint32_t i = 0; i < in->n_results; i++) {
            if (i)
                ir_sb_printf(b, ", ");
            put_type(b, k, ir_type_of(k, in->results[i]));
        }
    }
}

static void indent(ir_sb *b, int depth) { ir_sb_printf(b, "%*s", 2 * depth, ""); }

/* An else that only yields nothing is the builder's filler for an if without else. */
static bool empty_else(const ir_inst *in) {
    if (in->n_region < 2 || in->n_results)
        return false;
    const ir_region *r = &in->region[1];
    return r->n == 0 || (r->n == 1 && r->inst && r->inst[0] && r->inst[0]->op == IR_OP_YIELD && !r->inst[0]->n_operand);
}

static void put_region(ir_sb *b, const ir_kernel *k, const ir_region *r, int depth) {
    if (depth > 1000 || (r->n && !r->inst))
        return;
    for (uint32_t i = 0; i < r->n; i++) {
        const ir_inst *in = r->inst[i];
        if (!in)
            continue;
        indent(b, depth);
        ir_sb_inst(b, k, in);
        if ((in->op == IR_OP_FOR || in->op == IR_OP_IF) && in->n_region) {
            ir_sb_printf(b, " {\n");
            put_region(b, k, &in->region[0], depth + 1);
            if (in->op == IR_OP_IF && in->n_region > 1 && !empty_else(in)) {
                indent(b, depth);
                ir_sb_printf(b, "} else {\n");
                put_region(b, k, &in->region[1], depth + 1);
            }
            indent(b, depth);
            ir_sb_printf(b, "}");
        }
        ir_sb_printf(b, "\n");
    }
}

char *ir_print(const ir_kernel *k) {
    if (!k)
        return NULL;
    ir_sb b = { 0 };
    ir_sb_printf(&b, "kernel @%s(", k->name);
    for (uint32_t i = 0; i < k->n_params; i++) {
        const ir_param *p = &k->params[i];
        if (i)
            ir_sb_printf(&b, ", ");
        if (p->is_buffer) {
            ir_sb_printf(&b, "@%s: buf<%s, %s%s>", p->name, ir_scalar_name(p->elem), p->access & IR_READ ? "r" : "",
                         p->access & IR_WRITE ? "w" : "");
            if (p->extent && p->extent_per_group)
                ir_sb_printf(&b, "[%llu per group.%c]", (unsigned long long)p->extent, "xyz"[p->extent_dim]);
            else if (p->extent)
                ir_sb_printf(&b, "[%llu]", (unsigned long long)p->extent);
        }
        else
            ir_sb_printf(&b, "%%%u @%s: %s", p->value, p->name, ir_scalar_name(p->elem));
    }
    ir_sb_printf(&b, ")");
    if (k->n_specs) {
        ir_sb_printf(&b, " spec(");
        for (uint32_t i = 0; i < k->n_specs; i++) {
            const ir_spec *s = &k->specs[i];
            ir_sb_printf(&b, "%s%%%u @%s: %s = ", i ? ", " : "", s->value, s->name, ir_scalar_name(s->type));
            if (s->type == IR_F32)
                put_f32(&b, ir_f32_bits((float)s->dflt));
            else if (s->type == IR_BOOL)
                ir_sb_printf(&b, "%s", s->dflt != 0 ? "true" : "false");
            else
                ir_sb_printf(&b, "%.17g", s->dflt);
        }
        ir_sb_printf(&b, ")");
    }
    if (!k->wg_set)
        ir_sb_printf(&b, " workgroup(?)");
    else if (k->wg_spec)
        ir_sb_printf(&b, " workgroup(%%%u)", k->wg_spec);
    else
        ir_sb_printf(&b, " workgroup(%u, %u, %u)", k->wg[0], k->wg[1], k->wg[2]);
    if (k->occupancy)
        ir_sb_printf(&b, " occupancy(%u)", k->occupancy);
    if (ir_cluster(k) > 1)
        ir_sb_printf(&b, " cluster(%u)", ir_cluster(k));
    if (k->launch_early)
        ir_sb_printf(&b, " launch_early");
    ir_sb_printf(&b, " {\n");
    for (uint32_t i = 0; i < k->n_tmaps; i++) {
        const ir_tensor_map_decl *m = &k->tmaps[i];
        ir_sb_printf(&b, "  tensor_map %u: ", i);
        put_target(&b, k, false, m->buf);
        ir_sb_printf(&b, " %u x %u, box %u x %u\n", m->outer, m->inner, m->box_outer, m->box_inner);
    }
    for (uint32_t i = 0; i < k->n_shared; i++)
        ir_sb_printf(&b, "  shared @%s: %s[%u]%s%s\n", k->shared[i].name, ir_scalar_name(k->shared[i].elem),
                     k->shared[i].count, k->shared[i].overlays ? " overlays @" : "",
                     k->shared[i].overlays && k->shared[i].overlays <= k->n_shared
                         ? k->shared[k->shared[i].overlays - 1].name
                         : "");
    put_region(&b, k, &k->body, 1);
    ir_sb_printf(&b, "}\n");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
