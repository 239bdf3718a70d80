/* The kernel IR: arena, interned types, parameters and declarations, and the builder.
 * The builder checks every instruction with the verifier's per-op rules before
 * appending it, so misuse is caught where it happens; a failed call records the first
 * error and returns IR_NONE (or NULL) without touching the kernel. */
#include "ir/ir_internal.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ---------------------------------------------------------------------------- */

#define BLOCK_HDR ((sizeof(ir_block) + IR_ALIGN - 1) & ~(size_t)(IR_ALIGN - 1))
#define BLOCK_MIN 4096u
#define BLOCK_MAX (1u << 20)

void ir_fail(ir_kernel *k, const char *fmt, ...) {
    if (!k || k->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->error, sizeof k->error, fmt, ap);
    va_end(ap);
    k->failed = true;
}

void *ir_alloc(ir_kernel *k, size_t size) {
    if (size > SIZE_MAX / 4) {
        ir_fail(k, "out of memory");
        return NULL;
    }
    size = (size + IR_ALIGN - 1) & ~(size_t)(IR_ALIGN - 1);
    if (size == 0)
        size = IR_ALIGN;
    ir_block *b = k->blocks;
    if (!b || b->cap - b->used < size) {
        /* Blocks double up to BLOCK_MAX so small kernels stay small. */
        size_t cap = b ? b->cap * 2 : BLOCK_MIN;
        if (cap > BLOCK_MAX)
            cap = BLOCK_MAX;
        if (cap < size)
            cap = size;
        ir_block *nb = malloc(BLOCK_HDR + cap);
        if (!nb) {
            ir_fail(k, "out of memory");
            return NULL;
        }
        nb->next = b;
        nb->cap = cap;
        nb->used = 0;
        k->blocks = nb;
        b = nb;
    }
    void *p = (char *)b + BLOCK_HDR + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

void *ir_grow(ir_kernel *k, void *arr, uint32_t *cap, uint32_t need, size_t esz) {
    if (need <= *cap)
        return arr;
    uint64_t nc = *cap ? *cap : 8;
    while (nc < need)
        nc *= 2;
    if (nc > UINT32_MAX) {
        ir_fail(k, "out of memory");
        return NULL;
    }
    void *p = ir_alloc(k, (size_t)nc * esz);
    if (!p)
        return NULL;
    if (arr && *cap)
        memcpy(p, arr, (size_t)*cap * esz);
    *cap = (uint32_t)nc;
    return p;
}

static char *arena_strdup(ir_kernel *k, const char *s) {
    size_t n = strlen(s);
    char *p = ir_alloc(k, n + 1);
    if (p)
        memcpy(p, s, n + 1);
    return p;
}

bool ir_region_push(ir_kernel *k, ir_region *r, ir_inst *in) {
    ir_inst **a = ir_grow(k, r->inst, &r->cap, r->n + 1, sizeof *a);
    if (!a)
        return false;
    r->inst = a;
    r->inst[r->n++] = in;
    return true;
}

ir_val ir_new_value(ir_kernel *k, ir_inst *def, ir_type t) {
    if (k->n_vals == UINT32_MAX - 1) {
        ir_fail(k, "too many values");
        return IR_NONE;
    }
    ir_value_info *v = ir_grow(k, k->vals, &k->cap_vals, k->n_vals + 2, sizeof *v);
    if (!v)
        return IR_NONE;
    k->vals = v;
    ir_val id = ++k->n_vals;
    k->vals[id] = (ir_value_info){ .def = def, .type = t, .closed = false };
    return id;
}

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

uint32_t ir_scalar_bits(ir_scalar s) {
    switch (s) {
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
        if (d->m < 1 || d->m > 256 || d->n < 1 || d->n > 256 || d->k < 1 || d->k > 256)
            return "fragment shapes are 1..256 per dimension";
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
        return a->use == b->use && a->m == b->m && a->n == b->n && a->k == b->k;
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
        d.use = 0, d.m = d.n = d.k = 0;
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

/* ---- ops ------------------------------------------------------------------------------- */

static const char *const op_names[IR_OP_COUNT] = {
    [IR_OP_CONST] = "const", [IR_OP_PARAM] = "param", [IR_OP_SPEC] = "spec", [IR_OP_ID] = "id",
    [IR_OP_ADD] = "add", [IR_OP_SUB] = "sub", [IR_OP_MUL] = "mul", [IR_OP_DIV] = "div",
    [IR_OP_REM] = "rem", [IR_OP_MIN] = "min", [IR_OP_MAX] = "max",
    [IR_OP_AND] = "and", [IR_OP_OR] = "or", [IR_OP_XOR] = "xor", [IR_OP_SHL] = "shl", [IR_OP_SHR] = "shr",
    [IR_OP_NEG] = "neg", [IR_OP_NOT] = "not", [IR_OP_ABS] = "abs",
    [IR_OP_EXP] = "exp", [IR_OP_LOG] = "log", [IR_OP_SQRT] = "sqrt", [IR_OP_RSQRT] = "rsqrt",
    [IR_OP_TANH] = "tanh", [IR_OP_SIN] = "sin", [IR_OP_COS] = "cos", [IR_OP_FLOOR] = "floor",
    [IR_OP_FMA] = "fma", [IR_OP_CMP] = "cmp", [IR_OP_SELECT] = "select",
    [IR_OP_CONVERT] = "convert", [IR_OP_BITCAST] = "bitcast", [IR_OP_VEC] = "vec", [IR_OP_EXTRACT] = "extract",
    [IR_OP_LOAD] = "load", [IR_OP_STORE] = "store", [IR_OP_LOAD_MASKED] = "load.masked",
    [IR_OP_STORE_MASKED] = "store.masked", [IR_OP_SHM_LOAD] = "shm.load", [IR_OP_SHM_STORE] = "shm.store",
    [IR_OP_ATOMIC] = "atomic", [IR_OP_BARRIER] = "barrier",
    [IR_OP_SG_REDUCE] = "sg.reduce", [IR_OP_SG_SHUFFLE] = "sg.shuffle", [IR_OP_SG_SHUFFLE_XOR] = "sg.shuffle_xor",
    [IR_OP_SG_BROADCAST] = "sg.broadcast",
    [IR_OP_FRAG_FILL] = "frag.fill", [IR_OP_FRAG_LOAD] = "frag.load", [IR_OP_FRAG_STORE] = "frag.store",
    [IR_OP_FRAG_MMA] = "frag.mma",
    [IR_OP_FOR] = "for", [IR_OP_IF] = "if", [IR_OP_YIELD] = "yield",
};

const char *ir_op_name(ir_op op) {
    return (unsigned)op < IR_OP_COUNT && op_names[op] ? op_names[op] : "?";
}

bool ir_op_has_result(ir_op op) {
    switch (op) {
    case IR_OP_STORE: case IR_OP_STORE_MASKED: case IR_OP_SHM_STORE: case IR_OP_BARRIER:
    case IR_OP_FRAG_STORE: case IR_OP_FOR: case IR_OP_IF: case IR_OP_YIELD:
        return false;
    default:
        return (unsigned)op < IR_OP_COUNT;
    }
}

bool ir_op_is_effect(ir_op op) {
    switch (op) {
    case IR_OP_STORE: case IR_OP_STORE_MASKED: case IR_OP_SHM_STORE: case IR_OP_ATOMIC:
    case IR_OP_BARRIER: case IR_OP_FRAG_STORE:
        return true;
    default:
        return false;
    }
}

/* ---- kernels and parameters ---------------------------------------------------------------- */

static bool name_ok(const char *s) {
    if (!s || !*s || strlen(s) > IR_MAX_NAME)
        return false;
    /* identifiers only: names reach PTX and SPIR-V debug names as they are */
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return false;
    return true;
}

ir_kernel *ir_kernel_create(const char *name) {
    ir_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    if (name_ok(name))
        memcpy(k->name, name, strlen(name) + 1);
    else
        ir_fail(k, "ir_kernel_create: a name is an identifier of 1..%u characters", IR_MAX_NAME);
    return k;
}

void ir_kernel_destroy(ir_kernel *k) {
    if (!k)
        return;
    for (ir_block *b = k->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(k);
}

const char *ir_kernel_name(const ir_kernel *k) { return k ? k->name : ""; }
const char *ir_kernel_error(const ir_kernel *k) { return k ? k->error : "no kernel"; }

/* Parameters, spec constants and shared arrays share one namespace: the printer names
 * them @name. */
static bool name_free(ir_kernel *k, const char *fn, const char *name) {
    if (!name_ok(name)) {
        ir_fail(k, "%s: a name is an identifier of 1..%u characters", fn, IR_MAX_NAME);
        return false;
    }
    bool taken = false;
    for (uint32_t i = 0; i < k->n_params; i++)
        taken |= strcmp(k->params[i].name, name) == 0;
    for (uint32_t i = 0; i < k->n_specs; i++)
        taken |= strcmp(k->specs[i].name, name) == 0;
    for (uint32_t i = 0; i < k->n_shared; i++)
        taken |= strcmp(k->shared[i].name, name) == 0;
    if (taken)
        ir_fail(k, "%s: @%s is already declared", fn, name);
    return !taken;
}

static ir_param *new_param(ir_kernel *k, const char *name) {
    ir_param *p = ir_grow(k, k->params, &k->cap_params, k->n_params + 1, sizeof *p);
    char *nm = p ? arena_strdup(k, name) : NULL;
    if (!nm)
        return NULL;
    k->params = p;
    p = &k->params[k->n_params];
    *p = (ir_param){ .name = nm };
    return p;
}

ir_buf ir_param_buffer(ir_kernel *k, const char *name, ir_scalar elem, unsigned access) {
    if (!k)
        return 0;
    if ((unsigned)elem >= IR_SCALAR_COUNT || elem == IR_BOOL) {
        ir_fail(k, "ir_param_buffer: buffers hold a non-bool scalar");
        return 0;
    }
    if (access == 0 || (access & ~(unsigned)(IR_READ | IR_WRITE))) {
        ir_fail(k, "ir_param_buffer: access is IR_READ, IR_WRITE or both");
        return 0;
    }
    if (!name_free(k, "ir_param_buffer", name))
        return 0;
    uint32_t *b = ir_grow(k, k->buffers, &k->cap_buffers, k->n_buffers + 1, sizeof *b);
    if (!b)
        return 0;
    k->buffers = b;
    ir_param *p = new_param(k, name);
    if (!p)
        return 0;
    p->is_buffer = true;
    p->elem = elem;
    p->access = access;
    k->buffers[k->n_buffers] = k->n_params++;
    return k->n_buffers++;
}

static void set_extent(ir_kernel *k, const char *who, ir_buf b, uint32_t dim, uint64_t n, bool per_group) {
    if (!k)
        return;
    if (b >= k->n_buffers) {
        ir_fail(k, "%s: %u is not a buffer parameter", who, b);
        return;
    }
    ir_param *p = &k->params[k->buffers[b]];
    if (n == 0 || n > (1ull << 48) || dim > 2) {
        ir_fail(k, "%s: %llu elements for @%s along dimension %u (1..2^48, dimension 0..2)", who,
                (unsigned long long)n, p->name, dim);
        return;
    }
    p->extent = n;
    p->extent_dim = dim;
    p->extent_per_group = per_group;
}

void ir_buffer_extent(ir_kernel *k, ir_buf b, uint64_t n) { set_extent(k, "ir_buffer_extent", b, 0, n, false); }

void ir_buffer_extent_per_group(ir_kernel *k, ir_buf b, uint32_t dim, uint64_t n) {
    set_extent(k, "ir_buffer_extent_per_group", b, dim, n, true);
}

uint64_t ir_param_extent(const ir_param *p, const uint32_t groups[3]) {
    if (!p || !p->is_buffer)
        return 0;
    return p->extent_per_group ? p->extent * groups[p->extent_dim] : p->extent;
}

/* PARAM and SPEC instructions live in no region: they are defined at kernel entry. */
static ir_inst *entry_inst(ir_kernel *k, ir_op op, ir_scalar s, int64_t index) {
    ir_type t = ir_t_scalar(k, s);
    ir_inst *in = t ? ir_alloc(k, sizeof *in) : NULL;
    if (!in)
        return NULL;
    in->op = op;
    in->type = t;
    in->imm[0] = index;
    in->result = ir_new_value(k, in, t);
    return in->result ? in : NULL;
}

ir_val ir_param_scalar(ir_kernel *k, const char *name, ir_scalar s) {
    if (!k)
        return IR_NONE;
    if (s != IR_I32 && s != IR_U32 && s != IR_F32) {
        ir_fail(k, "ir_param_scalar: scalar parameters are i32, u32 or f32");
        return IR_NONE;
    }
    if (!name_free(k, "ir_param_scalar", name))
        return IR_NONE;
    ir_param *p = new_param(k, name);
    ir_inst *in = p ? entry_inst(k, IR_OP_PARAM, s, k->n_params) : NULL;
    if (!in)
        return IR_NONE;
    p->elem = s;
    p->value = in->result;
    k->n_params++;
    return in->result;
}

/* The CONST encoding of a spec value, or false with why it does not fit. */
static bool encode_value(ir_scalar s, double v, int64_t *out, const char **why) {
    switch (s) {
    case IR_BOOL:
        if (v != 0.0 && v != 1.0) {
            *why = "a bool is 0 or 1";
            return false;
        }
        *out = v != 0.0;
        return true;
    case IR_I32:
        if (!(v >= INT32_MIN && v <= INT32_MAX) || v != floor(v)) {
            *why = "not an i32";
            return false;
        }
        *out = (int64_t)v;
        return true;
    case IR_U32:
        if (!(v >= 0 && v <= UINT32_MAX) || v != floor(v)) {
            *why = "not a u32";
            return false;
        }
        *out = (int64_t)v;
        return true;
    case IR_F32:
        if (isfinite(v) && fabs(v) > FLT_MAX) {
            *why = "out of f32 range";
            return false;
        }
        *out = ir_f32_bits((float)v);
        return true;
    default:
        *why = "spec constants are bool, i32, u32 or f32";
        return false;
    }
}

int ir_encode_spec_value(ir_scalar s, double v, int64_t *out, const char **why) {
    return encode_value(s, v, out, why) ? 0 : -1;
}

ir_val ir_spec_const(ir_kernel *k, const char *name, ir_scalar s, double dflt) {
    if (!k)
        return IR_NONE;
    int64_t bits;
    const char *why = NULL;
    if (!encode_value(s, dflt, &bits, &why)) {
        ir_fail(k, "ir_spec_const: default of @%s: %s", name ? name : "?", why);
        return IR_NONE;
    }
    if (!name_free(k, "ir_spec_const", name))
        return IR_NONE;
    ir_spec *sp = ir_grow(k, k->specs, &k->cap_specs, k->n_specs + 1, sizeof *sp);
    char *nm = sp ? arena_strdup(k, name) : NULL;
    if (!nm)
        return IR_NONE;
    k->specs = sp;
    ir_inst *in = entry_inst(k, IR_OP_SPEC, s, k->n_specs);
    if (!in)
        return IR_NONE;
    /* keep the default exactly as the type holds it (an f32 default is rounded once) */
    double d = s == IR_F32 ? (double)ir_bits_f32((uint32_t)bits) : dflt;
    k->specs[k->n_specs++] = (ir_spec){ .name = nm, .type = s, .dflt = d, .value = in->result };
    return in->result;
}

void ir_set_workgroup(ir_kernel *k, uint32_t x, uint32_t y, uint32_t z) {
    if (!k)
        return;
    /* ranges are the verifier's: the kernel records what it was given */
    k->wg[0] = x, k->wg[1] = y, k->wg[2] = z;
    k->wg_spec = IR_NONE;
    k->wg_set = true;
}

void ir_set_workgroup_spec(ir_kernel *k, ir_val x_spec) {
    if (!k)
        return;
    const ir_inst *d = ir_def(k, x_spec);
    if (!d || d->op != IR_OP_SPEC || d->type != ir_t_scalar(k, IR_U32)) {
        ir_fail(k, "ir_set_workgroup_spec: %%%u is not a u32 spec constant", x_spec);
        return;
    }
    const ir_spec *sp = ir_spec_at(k, (uint32_t)d->imm[0]);
    k->wg[0] = sp ? (uint32_t)sp->dflt : 0;
    k->wg[1] = k->wg[2] = 1;
    k->wg_spec = x_spec;
    k->wg_set = true;
}

ir_shm ir_shared_array(ir_kernel *k, const char *name, ir_scalar elem, uint32_t count) {
    if (!k)
        return 0;
    if ((unsigned)elem >= IR_SCALAR_COUNT || elem == IR_BOOL) {
        ir_fail(k, "ir_shared_array: shared arrays hold a non-bool scalar");
        return 0;
    }
    if (count == 0 || count > (1u << 24)) {
        ir_fail(k, "ir_shared_array: count is 1..2^24");
        return 0;
    }
    if (!name_free(k, "ir_shared_array", name))
        return 0;
    ir_shared_decl *s = ir_grow(k, k->shared, &k->cap_shared, k->n_shared + 1, sizeof *s);
    char *nm = s ? arena_strdup(k, name) : NULL;
    if (!nm)
        return 0;
    k->shared = s;
    k->shared[k->n_shared] = (ir_shared_decl){ .name = nm, .elem = elem, .count = count };
    return k->n_shared++;
}

/* ---- reading --------------------------------------------------------------------------- */

const ir_region *ir_kernel_body(const ir_kernel *k) { return k ? &k->body : NULL; }
uint32_t ir_n_params(const ir_kernel *k) { return k ? k->n_params : 0; }
const ir_param *ir_param_at(const ir_kernel *k, uint32_t i) { return k && i < k->n_params ? &k->params[i] : NULL; }
uint32_t ir_n_buffers(const ir_kernel *k) { return k ? k->n_buffers : 0; }
uint32_t ir_buffer_param(const ir_kernel *k, ir_buf b) { return k && b < k->n_buffers ? k->buffers[b] : UINT32_MAX; }
uint32_t ir_n_specs(const ir_kernel *k) { return k ? k->n_specs : 0; }
const ir_spec *ir_spec_at(const ir_kernel *k, uint32_t i) { return k && i < k->n_specs ? &k->specs[i] : NULL; }
uint32_t ir_n_shared(const ir_kernel *k) { return k ? k->n_shared : 0; }
const ir_shared_decl *ir_shared_at(const ir_kernel *k, ir_shm s) { return k && s < k->n_shared ? &k->shared[s] : NULL; }
uint32_t ir_n_values(const ir_kernel *k) { return k ? k->n_vals : 0; }

void ir_workgroup(const ir_kernel *k, uint32_t xyz[3], ir_val *x_spec) {
    if (xyz) {
        xyz[0] = k ? k->wg[0] : 0;
        xyz[1] = k ? k->wg[1] : 0;
        xyz[2] = k ? k->wg[2] : 0;
    }
    if (x_spec)
        *x_spec = k ? k->wg_spec : IR_NONE;
}

const ir_inst *ir_def(const ir_kernel *k, ir_val v) {
    if (!k || v == IR_NONE || v > k->n_vals)
        return NULL;
    return k->vals[v].def;
}

/* ---- builder core ---------------------------------------------------------------------- */

static ir_region *current(ir_kernel *k) {
    if (!k->n_open)
        return &k->body;
    ir_open *o = &k->open[k->n_open - 1];
    return &o->inst->region[o->region];
}

/* An operand must be a value whose region is still open. */
static bool use_ok(ir_kernel *k, const char *fn, ir_val v) {
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

static bool uses_ok(ir_kernel *k, const char *fn, const ir_val *v, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (!use_ok(k, fn, v[i]))
            return false;
    return true;
}

/* Checks an instruction with the verifier's rules, then appends it to the innermost open
 * region. Returns it, or NULL (with the error) when it breaks a rule. */
static ir_inst *build(ir_kernel *k, const char *fn, ir_op op, ir_type type, const ir_val *ops, uint32_t n,
                      int64_t imm0, int64_t imm1, int64_t imm2) {
    if (k->failed && !strncmp(k->error, "out of memory", 13))
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
    if (!ir_region_push(k, current(k), in))
        return NULL;
    return in;
}

static ir_val result_of(const ir_inst *in) { return in ? in->result : IR_NONE; }

/* ---- values ------------------------------------------------------------------------------ */

static ir_val make_const(ir_kernel *k, const char *fn, ir_scalar s, int64_t bits) {
    if (!k)
        return IR_NONE;
    ir_type t = ir_t_scalar(k, s);
    return t ? result_of(build(k, fn, IR_OP_CONST, t, NULL, 0, bits, 0, 0)) : IR_NONE;
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
    if (!uses_ok(k, "ir_bin", ops, 2))
        return IR_NONE;
    return result_of(build(k, "ir_bin", op, ir_type_of(k, a), ops, 2, 0, 0, 0));
}

ir_val ir_un(ir_kernel *k, ir_op op, ir_val a) {
    if (!k)
        return IR_NONE;
    if (op < IR_OP_NEG || op > IR_OP_FLOOR) {
        ir_fail(k, "ir_un: %s is not a unary op", ir_op_name(op));
        return IR_NONE;
    }
    if (!use_ok(k, "ir_un", a))
        return IR_NONE;
    return result_of(build(k, "ir_un", op, ir_type_of(k, a), &a, 1, 0, 0, 0));
}

ir_val ir_fma(ir_kernel *k, ir_val a, ir_val b, ir_val c) {
    if (!k)
        return IR_NONE;
    ir_val ops[3] = { a, b, c };
    if (!uses_ok(k, "ir_fma", ops, 3))
        return IR_NONE;
    return result_of(build(k, "ir_fma", IR_OP_FMA, ir_type_of(k, a), ops, 3, 0, 0, 0));
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
    if (!uses_ok(k, "ir_compare", ops, 2))
        return IR_NONE;
    return result_of(build(k, "ir_compare", IR_OP_CMP, bool_like(k, ir_type_of(k, a)), ops, 2, c, 0, 0));
}

ir_val ir_select(ir_kernel *k, ir_val cond, ir_val a, ir_val b) {
    if (!k)
        return IR_NONE;
    ir_val ops[3] = { cond, a, b };
    if (!uses_ok(k, "ir_select", ops, 3))
        return IR_NONE;
    return result_of(build(k, "ir_select", IR_OP_SELECT, ir_type_of(k, a), ops, 3, 0, 0, 0));
}

ir_val ir_convert(ir_kernel *k, ir_val a, ir_type to) {
    if (!k || !use_ok(k, "ir_convert", a))
        return IR_NONE;
    if (to && ir_type_of(k, a) == to)
        return a; /* nothing to do; SPIR-V has no same-type conversion */
    return result_of(build(k, "ir_convert", IR_OP_CONVERT, to, &a, 1, 0, 0, 0));
}

ir_val ir_bitcast(ir_kernel *k, ir_val a, ir_type to) {
    if (!k || !use_ok(k, "ir_bitcast", a))
        return IR_NONE;
    if (to && ir_type_of(k, a) == to)
        return a;
    return result_of(build(k, "ir_bitcast", IR_OP_BITCAST, to, &a, 1, 0, 0, 0));
}

ir_val ir_vec(ir_kernel *k, const ir_val *lanes, uint32_t n) {
    if (!k)
        return IR_NONE;
    if (!lanes || n < 2 || n > 4) {
        ir_fail(k, "ir_vec: vectors have 2..4 lanes");
        return IR_NONE;
    }
    if (!uses_ok(k, "ir_vec", lanes, n))
        return IR_NONE;
    ir_scalar e;
    uint32_t l;
    if (!ir_type_elem(k, ir_type_of(k, lanes[0]), &e, &l) || l != 1) {
        ir_fail(k, "ir_vec: lanes are scalars");
        return IR_NONE;
    }
    ir_type t = ir_t_vector(k, e, n);
    return t ? result_of(build(k, "ir_vec", IR_OP_VEC, t, lanes, n, 0, 0, 0)) : IR_NONE;
}

ir_val ir_extract(ir_kernel *k, ir_val v, uint32_t lane) {
    if (!k || !use_ok(k, "ir_extract", v))
        return IR_NONE;
    ir_scalar e;
    uint32_t l;
    if (!ir_type_elem(k, ir_type_of(k, v), &e, &l) || l < 2) {
        ir_fail(k, "ir_extract: %%%u is not a vector", v);
        return IR_NONE;
    }
    ir_type t = ir_t_scalar(k, e);
    return t ? result_of(build(k, "ir_extract", IR_OP_EXTRACT, t, &v, 1, lane, 0, 0)) : IR_NONE;
}

ir_val ir_id(ir_kernel *k, ir_id_kind kind, uint32_t dim) {
    if (!k)
        return IR_NONE;
    ir_type t = ir_t_scalar(k, IR_U32);
    return t ? result_of(build(k, "ir_id", IR_OP_ID, t, NULL, 0, kind, dim, 0)) : IR_NONE;
}

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
    if (!k || !target_elem(k, "ir_load", false, b, &e) || !use_ok(k, "ir_load", index))
        return IR_NONE;
    ir_type t = lanes_type(k, "ir_load", e, lanes);
    return t ? result_of(build(k, "ir_load", IR_OP_LOAD, t, &index, 1, b, lanes, 0)) : IR_NONE;
}

void ir_store(ir_kernel *k, ir_buf b, ir_val index, ir_val value) {
    ir_scalar e;
    ir_val ops[2] = { index, value };
    if (!k || !target_elem(k, "ir_store", false, b, &e) || !uses_ok(k, "ir_store", ops, 2))
        return;
    build(k, "ir_store", IR_OP_STORE, 0, ops, 2, b, value_lanes(k, value), 0);
}

ir_val ir_load_masked(ir_kernel *k, ir_buf b, ir_val index, uint32_t lanes, ir_val limit, ir_val fallback) {
    ir_scalar e;
    ir_val ops[3] = { index, limit, fallback };
    if (!k || !target_elem(k, "ir_load_masked", false, b, &e) || !uses_ok(k, "ir_load_masked", ops, 3))
        return IR_NONE;
    ir_type t = lanes_type(k, "ir_load_masked", e, lanes);
    return t ? result_of(build(k, "ir_load_masked", IR_OP_LOAD_MASKED, t, ops, 3, b, lanes, 0)) : IR_NONE;
}

void ir_store_masked(ir_kernel *k, ir_buf b, ir_val index, ir_val value, ir_val limit) {
    ir_scalar e;
    ir_val ops[3] = { index, value, limit };
    if (!k || !target_elem(k, "ir_store_masked", false, b, &e) || !uses_ok(k, "ir_store_masked", ops, 3))
        return;
    build(k, "ir_store_masked", IR_OP_STORE_MASKED, 0, ops, 3, b, value_lanes(k, value), 0);
}

ir_val ir_shm_load(ir_kernel *k, ir_shm s, ir_val index, uint32_t lanes) {
    ir_scalar e;
    if (!k || !target_elem(k, "ir_shm_load", true, s, &e) || !use_ok(k, "ir_shm_load", index))
        return IR_NONE;
    ir_type t = lanes_type(k, "ir_shm_load", e, lanes);
    return t ? result_of(build(k, "ir_shm_load", IR_OP_SHM_LOAD, t, &index, 1, s, lanes, 0)) : IR_NONE;
}

void ir_shm_store(ir_kernel *k, ir_shm s, ir_val index, ir_val value) {
    ir_scalar e;
    ir_val ops[2] = { index, value };
    if (!k || !target_elem(k, "ir_shm_store", true, s, &e) || !uses_ok(k, "ir_shm_store", ops, 2))
        return;
    build(k, "ir_shm_store", IR_OP_SHM_STORE, 0, ops, 2, s, value_lanes(k, value), 0);
}

void ir_barrier(ir_kernel *k) {
    if (k)
        build(k, "ir_barrier", IR_OP_BARRIER, 0, NULL, 0, 0, 0, 0);
}

ir_val ir_atomic(ir_kernel *k, ir_atomic_op op, bool shm, uint32_t target, ir_val index, ir_val value) {
    ir_scalar e;
    ir_val ops[2] = { index, value };
    if (!k || !target_elem(k, "ir_atomic", shm, target, &e) || !uses_ok(k, "ir_atomic", ops, 2))
        return IR_NONE;
    ir_type t = ir_t_scalar(k, e);
    return t ? result_of(build(k, "ir_atomic", IR_OP_ATOMIC, t, ops, 2, target, op, shm)) : IR_NONE;
}

/* ---- subgroups ---------------------------------------------------------------------------- */

ir_val ir_sg_reduce(ir_kernel *k, ir_reduce r, ir_val v) {
    if (!k || !use_ok(k, "ir_sg_reduce", v))
        return IR_NONE;
    return result_of(build(k, "ir_sg_reduce", IR_OP_SG_REDUCE, ir_type_of(k, v), &v, 1, r, 0, 0));
}

static ir_val sg2(ir_kernel *k, const char *fn, ir_op op, ir_val v, ir_val lane) {
    ir_val ops[2] = { v, lane };
    if (!k || !uses_ok(k, fn, ops, 2))
        return IR_NONE;
    return result_of(build(k, fn, op, ir_type_of(k, v), ops, 2, 0, 0, 0));
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
    if (!k || !use_ok(k, "ir_frag_fill", scalar))
        return IR_NONE;
    return result_of(build(k, "ir_frag_fill", IR_OP_FRAG_FILL, frag, &scalar, 1, 0, 0, 0));
}

ir_val ir_frag_load(ir_kernel *k, ir_type frag, bool shm, uint32_t src, ir_val base, ir_val stride, bool row_major) {
    ir_scalar e;
    ir_val ops[2] = { base, stride };
    if (!k || !target_elem(k, "ir_frag_load", shm, src, &e) || !uses_ok(k, "ir_frag_load", ops, 2))
        return IR_NONE;
    return result_of(build(k, "ir_frag_load", IR_OP_FRAG_LOAD, frag, ops, 2, src, row_major, shm));
}

void ir_frag_store(ir_kernel *k, ir_val frag, bool shm, uint32_t dst, ir_val base, ir_val stride, bool row_major) {
    ir_scalar e;
    ir_val ops[3] = { frag, base, stride };
    if (!k || !target_elem(k, "ir_frag_store", shm, dst, &e) || !uses_ok(k, "ir_frag_store", ops, 3))
        return;
    build(k, "ir_frag_store", IR_OP_FRAG_STORE, 0, ops, 3, dst, row_major, shm);
}

ir_val ir_frag_mma(ir_kernel *k, ir_val a, ir_val b, ir_val acc) {
    ir_val ops[3] = { a, b, acc };
    if (!k || !uses_ok(k, "ir_frag_mma", ops, 3))
        return IR_NONE;
    return result_of(build(k, "ir_frag_mma", IR_OP_FRAG_MMA, ir_type_of(k, acc), ops, 3, 0, 0, 0));
}

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
        ir_fail(k, "out of memory");
        return NULL;
    }
    ops[0] = lo, ops[1] = hi, ops[2] = step;
    for (uint32_t i = 0; i < n; i++)
        ops[3 + i] = init[i];
    ir_inst *in = NULL;
    ir_for *f = NULL;
    if (uses_ok(k, fn, ops, 3 + n)) {
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
    if (!ir_region_push(k, current(k), in) || !push_open(k, in, 0))
        return NULL;
    f->inst = in;
    f->n = n;
    return f;
}

ir_val ir_for_iv(const ir_for *f) { return f && f->inst ? f->inst->block_arg[0] : IR_NONE; }
ir_val ir_for_arg(const ir_for *f, uint32_t i) { return f && f->inst && i < f->n ? f->inst->block_arg[1 + i] : IR_NONE; }
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
        if (!use_ok(k, fn, y[i]))
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
    if (!use_ok(k, fn, cond))
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
    if (!ir_region_push(k, current(k), in) || !push_open(k, in, 0))
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
