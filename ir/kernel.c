/* The kernel IR's arena, kernels, their parameters and declarations, and the reading
 * side (ir.h's accessors). A failed call records the first error (ir_fail) and returns
 * 0, IR_NONE or NULL without touching the kernel. */
#include "base/error.h"
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
    vsnprintf(k->error.msg, sizeof k->error.msg, fmt, ap);
    va_end(ap);
    k->error.code = KILN_ERR_INVALID;
    k->failed = true;
}

void ir_fail_oom(ir_kernel *k) {
    if (!k || k->failed)
        return;
    kiln_fail_oom(&k->error, NULL);
    k->failed = true;
}

void *ir_alloc(ir_kernel *k, size_t size) {
    if (size > SIZE_MAX / 4) {
        ir_fail_oom(k);
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
            ir_fail_oom(k);
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
        ir_fail_oom(k);
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
const char *ir_kernel_error(const ir_kernel *k) { return k ? k->error.msg : "no kernel"; }

const kiln_err *ir_kernel_err(const ir_kernel *k) {
    static const kiln_err none = {KILN_ERR_INVALID, "no kernel"};
    return k ? &k->error : &none;
}

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

void ir_set_occupancy(ir_kernel *k, uint32_t n) {
    if (!k)
        return;
    if (n > 32) {
        ir_fail(k, "ir_set_occupancy: 0..32 workgroups per compute unit, not %u", n);
        return;
    }
    k->occupancy = n;
}

uint32_t ir_occupancy(const ir_kernel *k) { return k ? k->occupancy : 0; }

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

ir_shm ir_shared_overlay(ir_kernel *k, const char *name, ir_scalar elem, uint32_t count, ir_shm base) {
    if (!k)
        return 0;
    const ir_shared_decl *b = ir_shared_at(k, base);
    if (!b || b->overlays) {
        ir_fail(k, "ir_shared_overlay: base %u is no workgroup array of its own", base);
        return 0;
    }
    uint64_t need = (uint64_t)count * (ir_scalar_bits(elem) / 8), have = (uint64_t)b->count * (ir_scalar_bits(b->elem) / 8);
    if ((unsigned)elem < IR_SCALAR_COUNT && elem != IR_BOOL && need > have) {
        ir_fail(k, "ir_shared_overlay: %llu bytes do not fit @%s's %llu", (unsigned long long)need, b->name,
                (unsigned long long)have);
        return 0;
    }
    uint32_t before = k->n_shared;
    ir_shm s = ir_shared_array(k, name, elem, count);
    if (k->n_shared == before + 1)
        k->shared[s].overlays = base + 1;
    return s;
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
