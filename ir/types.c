/* Interned types: scalars, vectors and matrix fragments, and the scalar predicates every
 * room shares (ir.h). */
#include "ir/ir_internal.h"

#include <stdio.h>

/* ---- types ----------------------------------------------------------------------------- */

static const char *const scalar_names[IR_SCALAR_COUNT] = {
    "bool", "i32", "u32", "i64", "u64", "f16", "bf16", "f32",
};

const char *ir_scalar_name(ir_scalar s) {
    return (unsigned)s < IR_SCALAR_COUNT ? scalar_names[s] : "?";
}

bool ir_scalar_is_int(ir_scalar s) { return s == IR_I32 || s == IR_U32 || s == IR_I64 || s == IR_U64; }
bool ir_scalar_is_float(ir_scalar s) { return s == IR_F16 || s == IR_BF16 || s == IR_F32; }
bool ir_scalar_is_signed(ir_scalar s) { return s == IR_I32 || s == IR_I64; }

ir_scalar ir_scalar_unsigned(ir_scalar s) { return s == IR_I32 ? IR_U32 : s == IR_I64 ? IR_U64 : s; }

uint32_t ir_scalar_bits(ir_scalar s) {
    switch (s) {
    case IR_BOOL: return 1;
    case IR_I32: case IR_U32: case IR_F32: return 32;
    case IR_I64: case IR_U64: return 64;
    case IR_F16: case IR_BF16: return 16;
    default: return 0;
    }
}

const char *ir_type_problem(const ir_type_desc *d) {
    if (!d)
        return "not a type";
    switch (d->kind) {
    case IR_T_SCALAR:
        return (unsigned)d->elem < IR_SCALAR_COUNT ? NULL : "unknown scalar";
    case IR_T_VECTOR:
        if ((unsigned)d->elem >= IR_SCALAR_COUNT)
            return "unknown scalar";
        return d->lanes >= 2 && d->lanes <= 4 ? NULL : "vector types have 2..4 lanes";
    case IR_T_FRAG:
        if (d->use == IR_FRAG_A || d->use == IR_FRAG_B) {
            if (d->elem != IR_F16 && d->elem != IR_BF16)
                return "A and B fragments hold f16 or bf16";
        } else if (d->use == IR_FRAG_ACC) {
            if (d->elem != IR_F32 && d->elem != IR_F16)
                return "ACC fragments hold f32 or f16";
        } else {
            return "unknown fragment use";
        }
        uint32_t most = d->wg ? 1024 : 256;
        if (d->m < 1 || d->m > most || d->n < 1 || d->n > most || d->k < 1 || d->k > most)
            return d->wg ? "workgroup fragment shapes are 1..1024 per dimension" : "fragment shapes are 1..256 per dimension";
        return NULL;
    }
    return "unknown type kind";
}

static bool desc_eq(const ir_type_desc *a, const ir_type_desc *b) {
    if (a->kind != b->kind || a->elem != b->elem)
        return false;
    if (a->kind == IR_T_VECTOR)
        return a->lanes == b->lanes;
    if (a->kind == IR_T_FRAG)
        return a->use == b->use && a->m == b->m && a->n == b->n && a->k == b->k && a->wg == b->wg;
    return true;
}

ir_type ir_type_find(const ir_kernel *k, const ir_type_desc *d) {
    if (!k)
        return 0;
    for (uint32_t i = 1; i < k->n_types; i++)
        if (desc_eq(&k->types[i], d))
            return i;
    return 0;
}

static ir_type intern(ir_kernel *k, const char *fn, ir_type_desc d) {
    if (!k)
        return 0;
    /* normalize the fields a kind does not use, so equal types compare equal */
    if (d.kind != IR_T_VECTOR)
        d.lanes = d.kind == IR_T_SCALAR ? 1 : 0;
    if (d.kind != IR_T_FRAG)
        d.use = 0, d.m = d.n = d.k = 0, d.wg = false;
    const char *why = ir_type_problem(&d);
    if (why) {
        ir_fail(k, "%s: %s", fn, why);
        return 0;
    }
    ir_type t = ir_type_find(k, &d);
    if (t)
        return t;
    uint32_t need = k->n_types ? k->n_types + 1 : 2;
    ir_type_desc *a = ir_grow(k, k->types, &k->cap_types, need, sizeof *a);
    if (!a)
        return 0;
    k->types = a;
    if (!k->n_types)
        k->n_types = 1;
    k->types[k->n_types] = d;
    return k->n_types++;
}

ir_type ir_t_scalar(ir_kernel *k, ir_scalar s) {
    return intern(k, "ir_t_scalar", (ir_type_desc){ .kind = IR_T_SCALAR, .elem = s });
}

ir_type ir_t_vector(ir_kernel *k, ir_scalar s, uint32_t lanes) {
    return intern(k, "ir_t_vector", (ir_type_desc){ .kind = IR_T_VECTOR, .elem = s, .lanes = lanes });
}

ir_type ir_t_frag(ir_kernel *k, ir_frag_use use, ir_scalar elem, uint32_t m, uint32_t n, uint32_t kk) {
    return intern(k, "ir_t_frag",
                  (ir_type_desc){ .kind = IR_T_FRAG, .elem = elem, .use = use, .m = m, .n = n, .k = kk });
}

ir_type ir_t_frag_wg(ir_kernel *k, ir_frag_use use, ir_scalar elem, uint32_t m, uint32_t n, uint32_t kk) {
    return intern(k, "ir_t_frag_wg",
                  (ir_type_desc){ .kind = IR_T_FRAG, .elem = elem, .use = use, .m = m, .n = n, .k = kk, .wg = true });
}

const ir_type_desc *ir_type_get(const ir_kernel *k, ir_type t) {
    if (!k || t == 0 || t >= k->n_types)
        return NULL;
    return &k->types[t];
}

ir_type ir_type_of(const ir_kernel *k, ir_val v) {
    if (!k || v == IR_NONE || v > k->n_vals)
        return 0;
    const ir_inst *d = k->vals[v].def;
    if (d && d->result == v)
        return d->type; /* the instruction's own field, so edits to it are seen */
    return k->vals[v].type;
}

bool ir_type_elem(const ir_kernel *k, ir_type t, ir_scalar *elem, uint32_t *lanes) {
    const ir_type_desc *d = ir_type_get(k, t);
    if (!d || ir_type_problem(d) || d->kind == IR_T_FRAG)
        return false;
    if (elem)
        *elem = d->elem;
    if (lanes)
        *lanes = d->kind == IR_T_VECTOR ? d->lanes : 1;
    return true;
}

void ir_type_str(const ir_kernel *k, ir_type t, char *buf, size_t len) {
    const ir_type_desc *d = ir_type_get(k, t);
    static const char *const uses[] = { "a", "b", "acc" };
    if (!d || (unsigned)d->elem >= IR_SCALAR_COUNT)
        snprintf(buf, len, "?");
    else if (d->kind == IR_T_SCALAR)
        snprintf(buf, len, "%s", ir_scalar_name(d->elem));
    else if (d->kind == IR_T_VECTOR)
        snprintf(buf, len, "%sx%u", ir_scalar_name(d->elem), d->lanes);
    else if (d->kind == IR_T_FRAG && (unsigned)d->use <= IR_FRAG_ACC)
        snprintf(buf, len, "frag.%s<%s, m%un%uk%u>", uses[d->use], ir_scalar_name(d->elem), d->m, d->n, d->k);
    else
        snprintf(buf, len, "?");
}
