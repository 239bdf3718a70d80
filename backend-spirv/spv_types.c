/* Types, constants and the instruction writers of the SPIR-V emitter: an IR type's
 * representation (f16 in f32 registers without native f16, bf16 always), buffer storage
 * types, cooperative-matrix types checked against the caps, constants, and one helper per
 * instruction shape. */
#include "backend-spirv/spv_internal.h"
#include "backend-spirv/spv_khr.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <spirv/unified1/GLSL.std.450.h>

/* ---- types ------------------------------------------------------------------------------- */

uint32_t spv_t_void(spv_ctx *x) { return spv_b_type(&x->b, SpvOpTypeVoid, NULL, 0); }
uint32_t spv_t_bool(spv_ctx *x) { return spv_b_type(&x->b, SpvOpTypeBool, NULL, 0); }
static uint32_t t_int(spv_ctx *x, uint32_t w, bool sign) {
    if (w == 64) spv_b_capability(&x->b, SpvCapabilityInt64);
    uint32_t o[2] = {w, sign};
    return spv_b_type(&x->b, SpvOpTypeInt, o, 2);
}
uint32_t spv_t_u32(spv_ctx *x) { return t_int(x, 32, false); }
uint32_t spv_t_float(spv_ctx *x, uint32_t w) {
    if (w == 16 && x->f16_native) spv_b_capability(&x->b, SpvCapabilityFloat16);
    return spv_b_type(&x->b, SpvOpTypeFloat, &w, 1);
}
uint32_t spv_t_f32(spv_ctx *x) { return spv_t_float(x, 32); }
uint32_t spv_t_bf16(spv_ctx *x) {
    spv_b_capability(&x->b, spv_cap_bfloat16_type);
    spv_b_extension(&x->b, "SPV_KHR_bfloat16");
    uint32_t o[2] = {16, spv_fp_encoding_bfloat16};
    return spv_b_type(&x->b, SpvOpTypeFloat, o, 2);
}
uint32_t spv_t_vec(spv_ctx *x, uint32_t elem, uint32_t n) {
    if (n <= 1) return elem;
    uint32_t o[2] = {elem, n};
    return spv_b_type(&x->b, SpvOpTypeVector, o, 2);
}
uint32_t spv_t_ptr(spv_ctx *x, uint32_t sc, uint32_t t) {
    uint32_t o[2] = {sc, t};
    return spv_b_type(&x->b, SpvOpTypePointer, o, 2);
}

/* The type a value of scalar s is held in. */
uint32_t spv_t_rep_s(spv_ctx *x, ir_scalar s) {
    switch (s) {
    case IR_BOOL: return spv_t_bool(x);
    case IR_I32: return t_int(x, 32, true);
    case IR_U32: return t_int(x, 32, false);
    case IR_I64: return t_int(x, 64, true);
    case IR_U64: return t_int(x, 64, false);
    case IR_F16: return x->f16_native ? spv_t_float(x, 16) : spv_t_f32(x);
    case IR_BF16: return spv_t_f32(x);
    case IR_F32: return spv_t_f32(x);
    default: spv_fail(x, "unknown scalar type %d", (int)s); return 0;
    }
}
uint32_t spv_t_rep_sn(spv_ctx *x, ir_scalar s, uint32_t n) { return spv_t_vec(x, spv_t_rep_s(x, s), n); }

/* The type a buffer element of scalar s is stored as. */
uint32_t spv_t_store_s(spv_ctx *x, ir_scalar s) {
    if (s == IR_F16 || s == IR_BF16) {
        spv_b_capability(&x->b, SpvCapabilityStorageBuffer16BitAccess);
        return s == IR_F16 ? spv_t_float(x, 16) : t_int(x, 16, false);
    }
    return spv_t_rep_s(x, s);
}

uint32_t spv_c_u32(spv_ctx *x, uint32_t v) { return spv_b_const(&x->b, SpvOpConstant, spv_t_u32(x), &v, 1); }

const rt_mma_shape *spv_mma_find(const rt_caps *c, uint32_t m, uint32_t n, uint32_t k, int ab, int acc) {
    for (uint32_t i = 0; i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->mma[i];
        if (s->m == m && s->n == n && s->k == k && (ab < 0 || s->ab_type == (uint32_t)ab) &&
            (acc < 0 || s->acc_type == (uint32_t)acc))
            return s;
    }
    return NULL;
}

static const char *use_name(ir_frag_use u) { return u == IR_FRAG_A ? "A" : u == IR_FRAG_B ? "B" : "ACC"; }

/* A fragment's component type (checked against the caps). */
uint32_t spv_t_frag_component(spv_ctx *x, ir_scalar s) {
    switch (s) {
    case IR_F32: return spv_t_f32(x);
    case IR_F16:
        if (!x->f16_native) {
            spv_fail(x, "f16 fragments need f16 arithmetic (caps.f16_arith is false)");
            return 0;
        }
        return spv_t_float(x, 16);
    case IR_BF16:
        if (!x->c->bf16_arith) {
            spv_fail(x, "bf16 fragments need VK_KHR_shader_bfloat16 (caps.bf16_arith is false)");
            return 0;
        }
        spv_b_capability(&x->b, spv_cap_bfloat16_coopmat);
        return spv_t_bf16(x);
    default: spv_fail(x, "fragments of %s are not supported", ir_scalar_name(s)); return 0;
    }
}

/* The workgroup's invocations (a literal size; 0 where it is a spec constant or unset). */
static uint32_t wg_invocations(const spv_ctx *x) {
    uint32_t wg[3] = {0, 0, 0};
    ir_val spec = IR_NONE;
    ir_workgroup(x->k, wg, &spec);
    return spec == IR_NONE ? wg[0] * wg[1] * wg[2] : 0;
}

const rt_mma_shape *spv_wg_mma_find(spv_ctx *x, uint32_t m, uint32_t n, uint32_t k, int ab, int acc) {
    const rt_caps *c = x->c;
    uint32_t inv = wg_invocations(x);
    if (m > c->wg_mma_max_dim || n > c->wg_mma_max_dim || k > c->wg_mma_max_dim) return NULL;
    for (uint32_t i = 0; i < c->n_wg_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->wg_mma[i];
        if (s->invocations == inv && m % s->m == 0 && n % s->n == 0 && k % s->k == 0 &&
            (ab < 0 || s->ab_type == (uint32_t)ab) && (acc < 0 || s->acc_type == (uint32_t)acc))
            return s;
    }
    return NULL;
}

/* OpTypeCooperativeMatrixKHR of a fragment checked against the caps: a subgroup's shape
 * from caps.mma; a workgroup's (VK_NV_cooperative_matrix2's workgroup scope) dimensions
 * multiples of a granularity caps.wg_mma lists for this workgroup size. */
static uint32_t t_frag(spv_ctx *x, const ir_type_desc *d) {
    if (x->emu) return spv_emu_frag_type(x, d);
    int ab = d->use == IR_FRAG_ACC ? -1 : (int)d->elem, acc = d->use == IR_FRAG_ACC ? (int)d->elem : -1;
    if (d->wg && (!x->c->n_wg_mma || !x->c->n_mma)) {
        spv_fail(x, "workgroup fragments need VK_NV_cooperative_matrix2 (caps.wg_mma is empty)");
        return 0;
    }
    if (!d->wg && !x->c->n_mma) {
        spv_fail(x, "matrix fragments need cooperative matrices (caps.n_mma is 0)");
        return 0;
    }
    if (d->wg && !spv_wg_mma_find(x, d->m, d->n, d->k, ab, acc)) {
        spv_fail(x,
                 "workgroup fragment %s %s %ux%ux%u of a %u-invocation workgroup is not a multiple of the "
                 "device's granularities (caps.wg_mma)",
                 use_name(d->use), ir_scalar_name(d->elem), d->m, d->n, d->k, wg_invocations(x));
        return 0;
    }
    if (!d->wg && !spv_mma_find(x->c, d->m, d->n, d->k, ab, acc)) {
        spv_fail(x, "fragment %s %s %ux%ux%u is not one of the device's cooperative-matrix shapes (caps.mma)",
                 use_name(d->use), ir_scalar_name(d->elem), d->m, d->n, d->k);
        return 0;
    }
    uint32_t comp = spv_t_frag_component(x, d->elem);
    if (!comp) return 0;
    spv_b_capability(&x->b, spv_cap_coopmat_khr);
    spv_b_extension(&x->b, "SPV_KHR_cooperative_matrix");
    if (d->wg) spv_b_extension(&x->b, "SPV_NV_cooperative_matrix2");
    uint32_t rows = d->use == IR_FRAG_B ? d->k : d->m;
    uint32_t cols = d->use == IR_FRAG_A ? d->k : d->n;
    uint32_t use = d->use == IR_FRAG_A   ? spv_coopmat_use_a
                   : d->use == IR_FRAG_B ? spv_coopmat_use_b
                                         : spv_coopmat_use_acc;
    uint32_t scope = spv_c_u32(x, d->wg ? SCOPE_WORKGROUP : SCOPE_SUBGROUP);
    uint32_t o[5] = {comp, scope, spv_c_u32(x, rows), spv_c_u32(x, cols), spv_c_u32(x, use)};
    return spv_b_type(&x->b, spv_op_type_coopmat_khr, o, 5);
}

/* The SPIR-V type of an IR type's values. */
uint32_t spv_t_rep(spv_ctx *x, ir_type t) {
    const ir_type_desc *d = ir_type_get(x->k, t);
    if (!d) {
        spv_fail(x, "unknown type %u", t);
        return 0;
    }
    if (d->kind == IR_T_FRAG) return t_frag(x, d);
    return spv_t_rep_sn(x, d->elem, d->kind == IR_T_VECTOR ? d->lanes : 1);
}

/* ---- constants --------------------------------------------------------------------------- */

static uint32_t c_bool(spv_ctx *x, bool v) {
    return spv_b_const(&x->b, v ? SpvOpConstantTrue : SpvOpConstantFalse, spv_t_bool(x), NULL, 0);
}

/* f32 <-> f16 bit patterns for constants (round to nearest even). */
static uint16_t f32_to_f16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                   /* f16 subnormal or zero */
        float q = fabsf(f) * 16777216.0f;                    /* in units of 2^-24, exact */
        float r = nearbyintf(q);                             /* default mode: ties to even */
        return (uint16_t)(sign | (uint32_t)r);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (((r >> 13) - (112u << 10)) & 0x7fffu));
}

/* A scalar constant of IR type s from the IR's CONST encoding (ints sign- or zero-extended,
 * f32 bits; f16/bf16 constants as the f32 bits of their value). */
uint32_t spv_c_scalar(spv_ctx *x, ir_scalar s, uint64_t bits) {
    switch (s) {
    case IR_BOOL: return c_bool(x, bits != 0);
    case IR_I32:
    case IR_U32: {
        uint32_t u = (uint32_t)bits;
        return spv_b_const(&x->b, SpvOpConstant, spv_t_rep_s(x, s), &u, 1);
    }
    case IR_I64:
    case IR_U64: {
        uint32_t o[2] = {(uint32_t)bits, (uint32_t)(bits >> 32)};
        return spv_b_const(&x->b, SpvOpConstant, spv_t_rep_s(x, s), o, 2);
    }
    case IR_F32:
    case IR_BF16: {
        uint32_t u = (uint32_t)bits;
        return spv_b_const(&x->b, SpvOpConstant, spv_t_f32(x), &u, 1);
    }
    case IR_F16: {
        uint32_t u = (uint32_t)bits;
        if (!x->f16_native) return spv_b_const(&x->b, SpvOpConstant, spv_t_f32(x), &u, 1);
        float f;
        memcpy(&f, &u, 4);
        uint32_t h = f32_to_f16_bits(f);
        return spv_b_const(&x->b, SpvOpConstant, spv_t_float(x, 16), &h, 1);
    }
    default: spv_fail(x, "constant of unknown type"); return 0;
    }
}

/* A constant vector (or the scalar when n == 1) of one repeated scalar constant. */
uint32_t spv_c_splat(spv_ctx *x, uint32_t scalar_type, uint32_t n, uint32_t c) {
    if (n <= 1) return c;
    uint32_t o[4] = {c, c, c, c};
    return spv_b_const(&x->b, SpvOpConstantComposite, spv_t_vec(x, scalar_type, n), o, n);
}
uint32_t spv_c_u32n(spv_ctx *x, uint32_t n, uint32_t v) { return spv_c_splat(x, spv_t_u32(x), n, spv_c_u32(x, v)); }

/* ---- instructions -------------------------------------------------------------------------- */

uint32_t spv_fn1(spv_ctx *x, uint32_t op, uint32_t type, uint32_t a) {
    uint32_t id = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, op, 3, type, id, a);
    return id;
}
uint32_t spv_fn2(spv_ctx *x, uint32_t op, uint32_t type, uint32_t a, uint32_t b) {
    uint32_t id = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, op, 4, type, id, a, b);
    return id;
}
uint32_t spv_fn3(spv_ctx *x, uint32_t op, uint32_t type, uint32_t a, uint32_t b, uint32_t c) {
    uint32_t id = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, op, 5, type, id, a, b, c);
    return id;
}
static uint32_t fn4(spv_ctx *x, uint32_t op, uint32_t type, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    uint32_t id = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, op, 6, type, id, a, b, c, d);
    return id;
}
uint32_t spv_ext1(spv_ctx *x, uint32_t type, uint32_t inst, uint32_t a) {
    return spv_fn3(x, SpvOpExtInst, type, spv_b_glsl(&x->b), inst, a);
}
uint32_t spv_ext2(spv_ctx *x, uint32_t type, uint32_t inst, uint32_t a, uint32_t b) {
    return fn4(x, SpvOpExtInst, type, spv_b_glsl(&x->b), inst, a, b);
}
uint32_t spv_ext3(spv_ctx *x, uint32_t type, uint32_t inst, uint32_t a, uint32_t b, uint32_t c) {
    uint32_t id = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpExtInst, 7, type, id, spv_b_glsl(&x->b), inst, a, b, c);
    return id;
}
void spv_op_label(spv_ctx *x, uint32_t l) {
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpLabel, 1, l);
    x->label = l;
}
void spv_op_branch(spv_ctx *x, uint32_t to) { spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpBranch, 1, to); }
/* Loads and stores of buffer and workgroup memory: under the Vulkan memory model they
 * must be non-private for barriers to order them between invocations. */
uint32_t spv_op_load(spv_ctx *x, uint32_t type, uint32_t ptr) {
    uint32_t id = spv_b_id(&x->b);
    if (x->vulkan_mm)
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpLoad, 4, type, id, ptr, SpvMemoryAccessNonPrivatePointerMask);
    else
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpLoad, 3, type, id, ptr);
    return id;
}
void spv_op_store(spv_ctx *x, uint32_t ptr, uint32_t v) {
    if (x->vulkan_mm)
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpStore, 3, ptr, v, SpvMemoryAccessNonPrivatePointerMask);
    else
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpStore, 2, ptr, v);
}
void spv_name(spv_ctx *x, uint32_t id, const char *s) {
    if (s && *s) spv_b_emit_str(&x->b, SPV_SEC_DEBUG, SpvOpName, &id, 1, s, NULL, 0);
}
void spv_decorate(spv_ctx *x, uint32_t id, uint32_t dec, int nargs, uint32_t a) {
    spv_b_emitv(&x->b, SPV_SEC_ANNOTATION, SpvOpDecorate, nargs ? 3 : 2, id, dec, a);
}
static void add_iface(spv_ctx *x, uint32_t var) {
    if (x->n_iface == x->cap_iface) {
        uint32_t nc = x->cap_iface ? x->cap_iface * 2 : 16;
        uint32_t *p = realloc(x->iface, nc * sizeof *p);
        if (!p) {
            spv_fail(x, "out of memory");
            return;
        }
        x->iface = p;
        x->cap_iface = nc;
    }
    x->iface[x->n_iface++] = var;
}
uint32_t spv_global_var(spv_ctx *x, uint32_t ptr_type, uint32_t sc) {
    uint32_t id = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_GLOBAL, SpvOpVariable, 3, ptr_type, id, sc);
    add_iface(x, id);
    return id;
}
