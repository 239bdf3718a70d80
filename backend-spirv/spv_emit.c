/* The SPIR-V emitter (spv_emit.h): walks a verified IR kernel once, writing SSA SPIR-V
 * with structured control flow into a spv_builder. */
#include "backend-spirv/spv_emit.h"

#include "backend-spirv/spv_builder.h"
#include "backend-spirv/spv_khr.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spirv/unified1/GLSL.std.450.h>

#define SPV_VERSION_1_6 0x00010600u
#define PUSH_CONSTANT_BYTES 128u /* Vulkan's guaranteed maxPushConstantsSize */

/* Vulkan semantics and scopes (constants in the module). */
enum {
    SCOPE_DEVICE = 1,
    SCOPE_WORKGROUP = 2,
    SCOPE_SUBGROUP = 3,
    SCOPE_QUEUE_FAMILY = 5, /* the Vulkan memory model's device-wide scope without VulkanMemoryModelDeviceScope */
    SEM_RELAXED = 0,
    SEM_BARRIER = SpvMemorySemanticsAcquireReleaseMask | SpvMemorySemanticsWorkgroupMemoryMask |
                  SpvMemorySemanticsUniformMemoryMask,
};

/* How a workgroup array stores its elements. */
typedef enum shm_mode {
    SHM_REP,         /* in the value representation (f16 widened to f32 when not native) */
    SHM_BF16_NATIVE, /* bf16 read by fragments: the SPV_KHR_bfloat16 type */
    SHM_F32_BITS     /* f32 exchanged atomically: kept as u32 bits (float atomics need a feature) */
} shm_mode;

/* Views of a buffer: scalars, 2-vectors, 4-vectors, and an f32 buffer's bits as u32 (for
 * atomic exchange: Vulkan allows f32 atomics only with shaderBufferFloat32Atomics). */
#define N_VIEW_LANES 4
#define VIEW_BITS 0u /* the lanes argument that asks for the u32 view */

typedef struct buf_info {
    const ir_param *p;
    uint32_t var[N_VIEW_LANES]; /* per view; 0 until used */
    bool atomic;
} buf_info;

typedef struct shm_info {
    const ir_shared_decl *d;
    shm_mode mode;
    bool frag;   /* read or written by fragment loads/stores */
    bool xchg_f32; /* f32 exchanged atomically */
    uint32_t var, elem_type;
} shm_info;

typedef struct ctx {
    const ir_kernel *k;
    const rt_caps *c;
    spv_builder b;
    char *err;
    size_t errlen;
    bool failed;
    const ir_inst *cur; /* the instruction being lowered, for messages */

    bool f16_native;
    bool vulkan_mm; /* fragments need the Vulkan memory model (SPIR-V validation rule) */
    uint32_t *val; /* IR value -> SPIR-V id */
    uint32_t n_val;
    uint32_t label; /* the block being written */

    buf_info *buf;
    uint32_t n_buf;
    shm_info *shm;
    uint32_t n_shm;
    uint32_t builtin[IR_ID_COUNT];
    uint32_t pc_var;
    uint32_t *pc_member; /* param index -> push-constant member, or UINT32_MAX */

    uint32_t *iface; /* global variables, for OpEntryPoint */
    uint32_t n_iface, cap_iface;
} ctx;

/* ---- errors ------------------------------------------------------------------------------ */

static void fail(ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(ctx *x, const char *fmt, ...) {
    if (x->failed) return;
    x->failed = true;
    if (!x->err || !x->errlen) return;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (x->cur && x->cur->result)
        snprintf(x->err, x->errlen, "spirv: kernel '%s': %%%u = %s: %s", ir_kernel_name(x->k), x->cur->result,
                 ir_op_name(x->cur->op), what);
    else if (x->cur)
        snprintf(x->err, x->errlen, "spirv: kernel '%s': %s: %s", ir_kernel_name(x->k), ir_op_name(x->cur->op), what);
    else
        snprintf(x->err, x->errlen, "spirv: kernel '%s': %s", ir_kernel_name(x->k), what);
}

/* ---- scalar kinds -------------------------------------------------------------------------- */

static bool s_float(ir_scalar s) { return s == IR_F16 || s == IR_BF16 || s == IR_F32; }
static bool s_int(ir_scalar s) { return s == IR_I32 || s == IR_U32 || s == IR_I64 || s == IR_U64; }
static bool s_signed(ir_scalar s) { return s == IR_I32 || s == IR_I64; }
static uint32_t s_bits(ir_scalar s) {
    switch (s) {
    case IR_I64: case IR_U64: return 64;
    case IR_F16: case IR_BF16: return 16;
    case IR_BOOL: return 1;
    default: return 32;
    }
}
static ir_scalar s_unsigned(ir_scalar s) { return s == IR_I32 ? IR_U32 : s == IR_I64 ? IR_U64 : s; }

/* 16-bit floats that live in f32 registers. */
static bool widened(const ctx *x, ir_scalar s) { return s == IR_BF16 || (s == IR_F16 && !x->f16_native); }

/* The scalar element and lane count of a scalar or vector type; false for fragments. */
static bool tinfo(ctx *x, ir_type t, ir_scalar *s, uint32_t *lanes) {
    const ir_type_desc *d = ir_type_get(x->k, t);
    if (!d) {
        fail(x, "unknown type %u", t);
        return false;
    }
    if (d->kind == IR_T_FRAG) return false;
    *s = d->elem;
    *lanes = d->kind == IR_T_VECTOR ? d->lanes : 1;
    return true;
}

/* ---- types ------------------------------------------------------------------------------- */

static uint32_t t_void(ctx *x) { return spv_b_type(&x->b, SpvOpTypeVoid, NULL, 0); }
static uint32_t t_bool(ctx *x) { return spv_b_type(&x->b, SpvOpTypeBool, NULL, 0); }
static uint32_t t_int(ctx *x, uint32_t w, bool sign) {
    if (w == 64) spv_b_capability(&x->b, SpvCapabilityInt64);
    uint32_t o[2] = {w, sign};
    return spv_b_type(&x->b, SpvOpTypeInt, o, 2);
}
static uint32_t t_u32(ctx *x) { return t_int(x, 32, false); }
static uint32_t t_float(ctx *x, uint32_t w) {
    if (w == 16 && x->f16_native) spv_b_capability(&x->b, SpvCapabilityFloat16);
    return spv_b_type(&x->b, SpvOpTypeFloat, &w, 1);
}
static uint32_t t_f32(ctx *x) { return t_float(x, 32); }
static uint32_t t_bf16(ctx *x) {
    spv_b_capability(&x->b, spv_cap_bfloat16_type);
    spv_b_extension(&x->b, "SPV_KHR_bfloat16");
    uint32_t o[2] = {16, spv_fp_encoding_bfloat16};
    return spv_b_type(&x->b, SpvOpTypeFloat, o, 2);
}
static uint32_t t_vec(ctx *x, uint32_t elem, uint32_t n) {
    if (n <= 1) return elem;
    uint32_t o[2] = {elem, n};
    return spv_b_type(&x->b, SpvOpTypeVector, o, 2);
}
static uint32_t t_ptr(ctx *x, uint32_t sc, uint32_t t) {
    uint32_t o[2] = {sc, t};
    return spv_b_type(&x->b, SpvOpTypePointer, o, 2);
}

/* The type a value of scalar s is held in. */
static uint32_t t_rep_s(ctx *x, ir_scalar s) {
    switch (s) {
    case IR_BOOL: return t_bool(x);
    case IR_I32: return t_int(x, 32, true);
    case IR_U32: return t_int(x, 32, false);
    case IR_I64: return t_int(x, 64, true);
    case IR_U64: return t_int(x, 64, false);
    case IR_F16: return x->f16_native ? t_float(x, 16) : t_f32(x);
    case IR_BF16: return t_f32(x);
    case IR_F32: return t_f32(x);
    default: fail(x, "unknown scalar type %d", (int)s); return 0;
    }
}
static uint32_t t_rep_sn(ctx *x, ir_scalar s, uint32_t n) { return t_vec(x, t_rep_s(x, s), n); }

/* The type a buffer element of scalar s is stored as. */
static uint32_t t_store_s(ctx *x, ir_scalar s) {
    if (s == IR_F16 || s == IR_BF16) {
        spv_b_capability(&x->b, SpvCapabilityStorageBuffer16BitAccess);
        return s == IR_F16 ? t_float(x, 16) : t_int(x, 16, false);
    }
    return t_rep_s(x, s);
}

static uint32_t c_u32(ctx *x, uint32_t v) { return spv_b_const(&x->b, SpvOpConstant, t_u32(x), &v, 1); }

static const rt_mma_shape *mma_find(const rt_caps *c, uint32_t m, uint32_t n, uint32_t k, int ab, int acc) {
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
static uint32_t t_frag_component(ctx *x, ir_scalar s) {
    switch (s) {
    case IR_F32: return t_f32(x);
    case IR_F16:
        if (!x->f16_native) {
            fail(x, "f16 fragments need f16 arithmetic (caps.f16_arith is false)");
            return 0;
        }
        return t_float(x, 16);
    case IR_BF16:
        if (!x->c->bf16_arith) {
            fail(x, "bf16 fragments need VK_KHR_shader_bfloat16 (caps.bf16_arith is false)");
            return 0;
        }
        spv_b_capability(&x->b, spv_cap_bfloat16_coopmat);
        return t_bf16(x);
    default: fail(x, "fragments of %s are not supported", ir_scalar_name(s)); return 0;
    }
}

static uint32_t t_frag(ctx *x, const ir_type_desc *d) {
    if (!x->c->n_mma) {
        fail(x, "matrix fragments need cooperative matrices (caps.n_mma is 0)");
        return 0;
    }
    int ab = d->use == IR_FRAG_ACC ? -1 : (int)d->elem, acc = d->use == IR_FRAG_ACC ? (int)d->elem : -1;
    if (!mma_find(x->c, d->m, d->n, d->k, ab, acc)) {
        fail(x, "fragment %s %s %ux%ux%u is not one of the device's cooperative-matrix shapes (caps.mma)",
             use_name(d->use), ir_scalar_name(d->elem), d->m, d->n, d->k);
        return 0;
    }
    uint32_t comp = t_frag_component(x, d->elem);
    if (!comp) return 0;
    spv_b_capability(&x->b, spv_cap_coopmat_khr);
    spv_b_extension(&x->b, "SPV_KHR_cooperative_matrix");
    uint32_t rows = d->use == IR_FRAG_B ? d->k : d->m;
    uint32_t cols = d->use == IR_FRAG_A ? d->k : d->n;
    uint32_t use = d->use == IR_FRAG_A ? spv_coopmat_use_a : d->use == IR_FRAG_B ? spv_coopmat_use_b : spv_coopmat_use_acc;
    uint32_t o[5] = {comp, c_u32(x, SCOPE_SUBGROUP), c_u32(x, rows), c_u32(x, cols), c_u32(x, use)};
    return spv_b_type(&x->b, spv_op_type_coopmat_khr, o, 5);
}

/* The SPIR-V type of an IR type's values. */
static uint32_t t_rep(ctx *x, ir_type t) {
    const ir_type_desc *d = ir_type_get(x->k, t);
    if (!d) {
        fail(x, "unknown type %u", t);
        return 0;
    }
    if (d->kind == IR_T_FRAG) return t_frag(x, d);
    return t_rep_sn(x, d->elem, d->kind == IR_T_VECTOR ? d->lanes : 1);
}

/* ---- constants --------------------------------------------------------------------------- */

static uint32_t c_f32(ctx *x, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return spv_b_const(&x->b, SpvOpConstant, t_f32(x), &u, 1);
}
static uint32_t c_bool(ctx *x, bool v) { return spv_b_const(&x->b, v ? SpvOpConstantTrue : SpvOpConstantFalse, t_bool(x), NULL, 0); }

/* f32 <-> f16 bit patterns for constants (round to nearest even). */
static uint16_t f32_to_f16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                   /* f16 subnormal or zero */
        float q = fabsf(f) * 16777216.0f;                     /* in units of 2^-24, exact */
        float r = nearbyintf(q);                               /* default mode: ties to even */
        return (uint16_t)(sign | (uint32_t)r);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (((r >> 13) - (112u << 10)) & 0x7fffu));
}

/* A scalar constant of IR type s from the IR's CONST encoding (ints sign- or zero-extended,
 * f32 bits; f16/bf16 constants as the f32 bits of their value). */
static uint32_t c_scalar(ctx *x, ir_scalar s, uint64_t bits) {
    switch (s) {
    case IR_BOOL: return c_bool(x, bits != 0);
    case IR_I32: case IR_U32: {
        uint32_t u = (uint32_t)bits;
        return spv_b_const(&x->b, SpvOpConstant, t_rep_s(x, s), &u, 1);
    }
    case IR_I64: case IR_U64: {
        uint32_t o[2] = {(uint32_t)bits, (uint32_t)(bits >> 32)};
        return spv_b_const(&x->b, SpvOpConstant, t_rep_s(x, s), o, 2);
    }
    case IR_F32: case IR_BF16: {
        uint32_t u = (uint32_t)bits;
        return spv_b_const(&x->b, SpvOpConstant, t_f32(x), &u, 1);
    }
    case IR_F16: {
        uint32_t u = (uint32_t)bits;
        if (!x->f16_native) return spv_b_const(&x->b, SpvOpConstant, t_f32(x), &u, 1);
        float f;
        memcpy(&f, &u, 4);
        uint32_t h = f32_to_f16_bits(f);
        return spv_b_const(&x->b, SpvOpConstant, t_float(x, 16), &h, 1);
    }
    default: fail(x, "constant of unknown type"); return 0;
    }
}

/* A constant vector (or the scalar when n == 1) of one repeated scalar constant. */
static uint32_t c_splat(ctx *x, uint32_t scalar_type, uint32_t n, uint32_t c) {
    if (n <= 1) return c;
    uint32_t o[4] = {c, c, c, c};
    return spv_b_const(&x->b, SpvOpConstantComposite, t_vec(x, scalar_type, n), o, n);
}
static uint32_t c_u32n(ctx *x, uint32_t n, uint32_t v) { return c_splat(x, t_u32(x), n, c_u32(x, v)); }
static uint32_t c_f32n(ctx *x, uint32_t n, float v) { return c_splat(x, t_f32(x), n, c_f32(x, v)); }

/* ---- instructions -------------------------------------------------------------------------- */

static uint32_t fn1(ctx *x, uint32_t op, uint32_t type, uint32_t a) {
    uint32_t id = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, op, 3, type, id, a);
    return id;
}
static uint32_t fn2(ctx *x, uint32_t op, uint32_t type, uint32_t a, uint32_t b) {
    uint32_t id = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, op, 4, type, id, a, b);
    return id;
}
static uint32_t fn3(ctx *x, uint32_t op, uint32_t type, uint32_t a, uint32_t b, uint32_t c) {
    uint32_t id = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, op, 5, type, id, a, b, c);
    return id;
}
static uint32_t fn4(ctx *x, uint32_t op, uint32_t type, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    uint32_t id = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, op, 6, type, id, a, b, c, d);
    return id;
}
static uint32_t ext1(ctx *x, uint32_t type, uint32_t inst, uint32_t a) {
    return fn3(x, SpvOpExtInst, type, spv_b_glsl(&x->b), inst, a);
}
static uint32_t ext2(ctx *x, uint32_t type, uint32_t inst, uint32_t a, uint32_t b) {
    return fn4(x, SpvOpExtInst, type, spv_b_glsl(&x->b), inst, a, b);
}
static uint32_t ext3(ctx *x, uint32_t type, uint32_t inst, uint32_t a, uint32_t b, uint32_t c) {
    uint32_t id = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpExtInst, 7, type, id, spv_b_glsl(&x->b), inst, a, b, c);
    return id;
}
static void op_label(ctx *x, uint32_t l) {
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpLabel, 1, l);
    x->label = l;
}
static void op_branch(ctx *x, uint32_t to) { spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpBranch, 1, to); }
/* Loads and stores of buffer and workgroup memory: under the Vulkan memory model they
 * must be non-private for barriers to order them between invocations. */
static uint32_t op_load(ctx *x, uint32_t type, uint32_t ptr) {
    uint32_t id = spv_b_id(&x->b);
    if (x->vulkan_mm)
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpLoad, 4, type, id, ptr, SpvMemoryAccessNonPrivatePointerMask);
    else
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpLoad, 3, type, id, ptr);
    return id;
}
static void op_store(ctx *x, uint32_t ptr, uint32_t v) {
    if (x->vulkan_mm)
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpStore, 3, ptr, v, SpvMemoryAccessNonPrivatePointerMask);
    else
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpStore, 2, ptr, v);
}
static void name(ctx *x, uint32_t id, const char *s) {
    if (s && *s) spv_b_emit_str(&x->b, SPV_SEC_DEBUG, SpvOpName, &id, 1, s, NULL, 0);
}
static void decorate(ctx *x, uint32_t id, uint32_t dec, int nargs, uint32_t a) {
    spv_b_emitv(&x->b, SPV_SEC_ANNOTATION, SpvOpDecorate, nargs ? 3 : 2, id, dec, a);
}
static void add_iface(ctx *x, uint32_t var) {
    if (x->n_iface == x->cap_iface) {
        uint32_t nc = x->cap_iface ? x->cap_iface * 2 : 16;
        uint32_t *p = realloc(x->iface, nc * sizeof *p);
        if (!p) {
            fail(x, "out of memory");
            return;
        }
        x->iface = p;
        x->cap_iface = nc;
    }
    x->iface[x->n_iface++] = var;
}
static uint32_t global_var(ctx *x, uint32_t ptr_type, uint32_t sc) {
    uint32_t id = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_GLOBAL, SpvOpVariable, 3, ptr_type, id, sc);
    add_iface(x, id);
    return id;
}

/* The SPIR-V id of an IR value. */
static uint32_t V(ctx *x, ir_val v) {
    if (v == IR_NONE || v > x->n_val || !x->val[v]) {
        fail(x, "value %%%u is used before it is defined", v);
        return 0;
    }
    return x->val[v];
}
static void def(ctx *x, ir_val v, uint32_t id) {
    if (v == IR_NONE || v > x->n_val) {
        fail(x, "result %%%u is out of range", v);
        return;
    }
    x->val[v] = id;
}

static bool need_operands(ctx *x, const ir_inst *in, uint32_t n) {
    if (in->n_operand >= n) return true;
    fail(x, "expected %u operands, has %u", n, in->n_operand);
    return false;
}

/* ---- 16-bit rounding, done exactly with f32/u32 ops ---------------------------------------- */

/* f32 (n lanes) -> the nearest bf16, ties to even, NaN kept (quieted); as f32. */
static uint32_t round_bf16(ctx *x, uint32_t n, uint32_t f) {
    uint32_t tu = t_vec(x, t_u32(x), n), tf = t_vec(x, t_f32(x), n), tb = t_vec(x, t_bool(x), n);
    uint32_t u = fn1(x, SpvOpBitcast, tu, f);
    uint32_t a = fn2(x, SpvOpBitwiseAnd, tu, u, c_u32n(x, n, 0x7fffffffu));
    uint32_t nan = fn2(x, SpvOpUGreaterThan, tb, a, c_u32n(x, n, 0x7f800000u));
    uint32_t lsb = fn2(x, SpvOpBitwiseAnd, tu, fn2(x, SpvOpShiftRightLogical, tu, u, c_u32n(x, n, 16)), c_u32n(x, n, 1));
    uint32_t r = fn2(x, SpvOpIAdd, tu, fn2(x, SpvOpIAdd, tu, u, c_u32n(x, n, 0x7fffu)), lsb);
    r = fn2(x, SpvOpBitwiseAnd, tu, r, c_u32n(x, n, 0xffff0000u));
    uint32_t q = fn2(x, SpvOpBitwiseAnd, tu, fn2(x, SpvOpBitwiseOr, tu, u, c_u32n(x, n, 0x00400000u)),
                     c_u32n(x, n, 0xffff0000u));
    return fn1(x, SpvOpBitcast, tf, fn3(x, SpvOpSelect, tu, nan, q, r));
}

/* f32 -> the nearest f16 value (ties to even, overflow to inf, f16 subnormals), as f32:
 * scale by the f16 quantum at x's exponent (powers of two, exact), RoundEven, scale
 * back. Used when f16 values live in f32 registers, so the result does not depend on
 * the driver's conversion rounding. */
static uint32_t round_f16(ctx *x, uint32_t n, uint32_t f) {
    uint32_t tu = t_vec(x, t_u32(x), n), tf = t_vec(x, t_f32(x), n), tb = t_vec(x, t_bool(x), n);
    uint32_t u = fn1(x, SpvOpBitcast, tu, f);
    uint32_t e = fn2(x, SpvOpBitwiseAnd, tu, fn2(x, SpvOpShiftRightLogical, tu, u, c_u32n(x, n, 23)), c_u32n(x, n, 0xff));
    e = ext2(x, tu, GLSLstd450UMax, e, c_u32n(x, n, 113)); /* below f16's normal range the quantum is 2^-24 */
    uint32_t q = fn1(x, SpvOpBitcast, tf, fn2(x, SpvOpShiftLeftLogical, tu, fn2(x, SpvOpISub, tu, e, c_u32n(x, n, 10)), c_u32n(x, n, 23)));
    uint32_t inv = fn1(x, SpvOpBitcast, tf, fn2(x, SpvOpShiftLeftLogical, tu, fn2(x, SpvOpISub, tu, c_u32n(x, n, 264), e), c_u32n(x, n, 23)));
    uint32_t r = fn2(x, SpvOpFMul, tf, ext1(x, tf, GLSLstd450RoundEven, fn2(x, SpvOpFMul, tf, f, inv)), q);
    uint32_t big = fn2(x, SpvOpFOrdGreaterThan, tb, ext1(x, tf, GLSLstd450FAbs, r), c_f32n(x, n, 65504.0f));
    uint32_t inf = fn2(x, SpvOpBitwiseOr, tu, fn2(x, SpvOpBitwiseAnd, tu, u, c_u32n(x, n, 0x80000000u)), c_u32n(x, n, 0x7f800000u));
    return fn3(x, SpvOpSelect, tf, big, fn1(x, SpvOpBitcast, tf, inf), r);
}

/* After f32 arithmetic on a widened 16-bit type: round back to that type. */
static uint32_t round_to(ctx *x, ir_scalar s, uint32_t n, uint32_t v) {
    if (s == IR_BF16) return round_bf16(x, n, v);
    if (s == IR_F16 && !x->f16_native) return round_f16(x, n, v);
    return v;
}

/* ---- conversions --------------------------------------------------------------------------- */

static uint32_t convert(ctx *x, ir_scalar from, ir_scalar to, uint32_t n, uint32_t v) {
    if (from == to) return v;
    uint32_t rt = t_rep_sn(x, to, n);
    if (from == IR_BOOL) {
        uint32_t one = c_splat(x, t_rep_s(x, to), n, c_scalar(x, to, s_float(to) ? 0x3f800000u : 1u));
        uint32_t zero = c_splat(x, t_rep_s(x, to), n, c_scalar(x, to, 0));
        return fn3(x, SpvOpSelect, rt, v, one, zero);
    }
    if (to == IR_BOOL) {
        uint32_t zero = c_splat(x, t_rep_s(x, from), n, c_scalar(x, from, 0));
        return fn2(x, s_float(from) ? SpvOpFUnordNotEqual : SpvOpINotEqual, rt, v, zero);
    }
    bool ff = s_float(from), tf = s_float(to);
    uint32_t f32n = t_vec(x, t_f32(x), n);
    if (ff && tf) {
        uint32_t f = v; /* as f32: exact from any 16-bit type */
        if (from == IR_F16 && x->f16_native) f = fn1(x, SpvOpFConvert, f32n, v);
        if (to == IR_F32) return f;
        if (to == IR_BF16) return round_bf16(x, n, f);
        /* rounded with f32 ops even for native f16: NVIDIA's compiler (580.159) folds an
         * f32 -> f16 -> f32 OpFConvert pair away, and the conversion of a rounded value is exact */
        f = round_f16(x, n, f);
        return x->f16_native ? fn1(x, SpvOpFConvert, rt, f) : f;
    }
    if (!ff && !tf) {
        if (s_bits(from) == s_bits(to)) return fn1(x, SpvOpBitcast, rt, v);
        if (s_signed(from)) return fn1(x, SpvOpSConvert, rt, v); /* sign-extends or truncates */
        uint32_t r = fn1(x, SpvOpUConvert, t_rep_sn(x, s_unsigned(to), n), v);
        return s_signed(to) ? fn1(x, SpvOpBitcast, rt, r) : r;
    }
    if (!ff) { /* int -> float */
        uint32_t op = s_signed(from) ? SpvOpConvertSToF : SpvOpConvertUToF;
        if (to == IR_F16 && x->f16_native) return fn1(x, op, rt, v);
        return round_to(x, to, n, fn1(x, op, f32n, v));
    }
    /* float -> int, toward zero; widened values are exact in f32 */
    return fn1(x, s_signed(to) ? SpvOpConvertFToS : SpvOpConvertFToU, rt, v);
}

/* Buffer storage <-> value representation. */
static uint32_t from_storage(ctx *x, ir_scalar s, uint32_t n, uint32_t sv) {
    if (s == IR_BF16) {
        uint32_t tu = t_vec(x, t_u32(x), n);
        uint32_t w = fn2(x, SpvOpShiftLeftLogical, tu, fn1(x, SpvOpUConvert, tu, sv), c_u32n(x, n, 16));
        return fn1(x, SpvOpBitcast, t_vec(x, t_f32(x), n), w);
    }
    if (s == IR_F16 && !x->f16_native) return fn1(x, SpvOpFConvert, t_vec(x, t_f32(x), n), sv);
    return sv;
}
static uint32_t to_storage(ctx *x, ir_scalar s, uint32_t n, uint32_t v) {
    if (s == IR_BF16) { /* the value is a bf16 already: its top 16 bits are exact */
        uint32_t tu = t_vec(x, t_u32(x), n);
        uint32_t w = fn2(x, SpvOpShiftRightLogical, tu, fn1(x, SpvOpBitcast, tu, v), c_u32n(x, n, 16));
        return fn1(x, SpvOpUConvert, t_vec(x, t_store_s(x, s), n), w);
    }
    if (s == IR_F16 && !x->f16_native) return fn1(x, SpvOpFConvert, t_vec(x, t_store_s(x, s), n), v); /* exact */
    return v;
}

/* ---- buffers ------------------------------------------------------------------------------ */

static int view_slot(uint32_t lanes) { return lanes == VIEW_BITS ? 3 : lanes == 4 ? 2 : lanes == 2 ? 1 : 0; }

/* The element type of a view. */
static uint32_t view_elem(ctx *x, ir_scalar s, uint32_t lanes) {
    return lanes == VIEW_BITS ? t_u32(x) : t_vec(x, t_store_s(x, s), lanes);
}

/* The variable viewing buffer b as an array of `lanes`-vectors (1, 2 or 4, or VIEW_BITS);
 * each view is a separate Block at the same binding. */
static uint32_t buf_view(ctx *x, uint32_t b, uint32_t lanes) {
    if (b >= x->n_buf) {
        fail(x, "buffer %u out of range", b);
        return 0;
    }
    buf_info *bi = &x->buf[b];
    int slot = view_slot(lanes);
    if (bi->var[slot]) return bi->var[slot];
    ir_scalar s = bi->p->elem;
    if (s == IR_BOOL) {
        fail(x, "buffer '%s': bool elements cannot live in Vulkan buffers", bi->p->name);
        return 0;
    }
    if ((s == IR_F16 || s == IR_BF16) && !x->c->storage16) {
        fail(x, "buffer '%s' holds %s: 16-bit buffers need caps.storage16 (a 32-bit packing fallback is not written yet)",
             bi->p->name, ir_scalar_name(s));
        return 0;
    }
    uint32_t elem = view_elem(x, s, lanes);
    uint32_t arr = spv_b_id(&x->b), st = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_GLOBAL, SpvOpTypeRuntimeArray, 2, arr, elem);
    spv_b_emitv(&x->b, SPV_SEC_GLOBAL, SpvOpTypeStruct, 2, st, arr);
    decorate(x, arr, SpvDecorationArrayStride, 1, lanes == VIEW_BITS ? 4 : s_bits(s) / 8 * lanes);
    decorate(x, st, SpvDecorationBlock, 0, 0);
    spv_b_emitv(&x->b, SPV_SEC_ANNOTATION, SpvOpMemberDecorate, 4, st, 0, SpvDecorationOffset, 0);
    uint32_t var = global_var(x, t_ptr(x, SpvStorageClassStorageBuffer, st), SpvStorageClassStorageBuffer);
    char nm[96], snm[104];
    snprintf(nm, sizeof nm, lanes == VIEW_BITS ? "%s_bits" : lanes > 1 ? "%s_v%u" : "%s", bi->p->name ? bi->p->name : "buf",
             lanes);
    snprintf(snm, sizeof snm, "%s_block", nm);
    name(x, st, snm);
    name(x, var, nm);
    uint32_t member = 0;
    spv_b_emit_str(&x->b, SPV_SEC_DEBUG, SpvOpMemberName, (uint32_t[]){st, member}, 2, "data", NULL, 0);
    bi->var[slot] = var;
    return var;
}

/* A pointer to element (or vector) `index` of a view. */
static uint32_t buf_ptr(ctx *x, uint32_t b, uint32_t lanes, uint32_t index) {
    uint32_t var = buf_view(x, b, lanes);
    if (!var) return 0;
    uint32_t elem = view_elem(x, x->buf[b].p->elem, lanes);
    return fn3(x, SpvOpAccessChain, t_ptr(x, SpvStorageClassStorageBuffer, elem), var, c_u32(x, 0), index);
}

static uint32_t add_u32(ctx *x, uint32_t a, uint32_t k) { return k ? fn2(x, SpvOpIAdd, t_u32(x), a, c_u32(x, k)) : a; }

/* lanes consecutive elements from index; index is a multiple of lanes. */
static uint32_t buf_load(ctx *x, uint32_t b, uint32_t index, uint32_t lanes) {
    ir_scalar s = x->buf[b].p->elem;
    if (lanes == 2 || lanes == 4) {
        uint32_t vi = fn2(x, SpvOpShiftRightLogical, t_u32(x), index, c_u32(x, lanes == 4 ? 2 : 1));
        uint32_t p = buf_ptr(x, b, lanes, vi);
        return from_storage(x, s, lanes, op_load(x, t_vec(x, t_store_s(x, s), lanes), p));
    }
    uint32_t part[4];
    for (uint32_t l = 0; l < lanes && l < 4; l++) {
        uint32_t p = buf_ptr(x, b, 1, add_u32(x, index, l));
        part[l] = from_storage(x, s, 1, op_load(x, t_store_s(x, s), p));
    }
    if (lanes == 1) return part[0];
    uint32_t id = spv_b_id(&x->b);
    uint32_t o[6] = {t_rep_sn(x, s, lanes), id, part[0], part[1], part[2], part[3]};
    spv_b_emit(&x->b, SPV_SEC_FUNCTION, SpvOpCompositeConstruct, o, 2 + lanes);
    return id;
}

static uint32_t lane_of(ctx *x, ir_scalar s, uint32_t lanes, uint32_t v, uint32_t l) {
    return lanes == 1 ? v : fn2(x, SpvOpCompositeExtract, t_rep_s(x, s), v, l);
}

static void buf_store(ctx *x, uint32_t b, uint32_t index, uint32_t lanes, uint32_t v) {
    ir_scalar s = x->buf[b].p->elem;
    if (lanes == 2 || lanes == 4) {
        uint32_t vi = fn2(x, SpvOpShiftRightLogical, t_u32(x), index, c_u32(x, lanes == 4 ? 2 : 1));
        op_store(x, buf_ptr(x, b, lanes, vi), to_storage(x, s, lanes, v));
        return;
    }
    for (uint32_t l = 0; l < lanes; l++)
        op_store(x, buf_ptr(x, b, 1, add_u32(x, index, l)), to_storage(x, s, 1, lane_of(x, s, lanes, v, l)));
}

/* ---- workgroup arrays ------------------------------------------------------------------------ */

static uint32_t shm_ptr(ctx *x, uint32_t s, uint32_t index) {
    if (s >= x->n_shm) {
        fail(x, "workgroup array %u out of range", s);
        return 0;
    }
    return fn2(x, SpvOpAccessChain, t_ptr(x, SpvStorageClassWorkgroup, x->shm[s].elem_type), x->shm[s].var, index);
}

static uint32_t shm_load1(ctx *x, uint32_t s, uint32_t index) {
    uint32_t v = op_load(x, x->shm[s].elem_type, shm_ptr(x, s, index));
    if (x->shm[s].mode == SHM_BF16_NATIVE) v = fn1(x, SpvOpFConvert, t_f32(x), v); /* exact */
    if (x->shm[s].mode == SHM_F32_BITS) v = fn1(x, SpvOpBitcast, t_f32(x), v);
    return v;
}
static void shm_store1(ctx *x, uint32_t s, uint32_t index, uint32_t v) {
    if (x->shm[s].mode == SHM_BF16_NATIVE) v = fn1(x, SpvOpFConvert, x->shm[s].elem_type, v); /* exact: v is a bf16 */
    if (x->shm[s].mode == SHM_F32_BITS) v = fn1(x, SpvOpBitcast, x->shm[s].elem_type, v);
    op_store(x, shm_ptr(x, s, index), v);
}

/* ---- builtins ------------------------------------------------------------------------------ */

static uint32_t load_id(ctx *x, ir_id_kind kind, uint32_t dim) {
    static const struct { uint32_t builtin; bool vec; const char *name; } B[IR_ID_COUNT] = {
        [IR_ID_GLOBAL] = {SpvBuiltInGlobalInvocationId, true, "gl_GlobalInvocationID"},
        [IR_ID_LOCAL] = {SpvBuiltInLocalInvocationId, true, "gl_LocalInvocationID"},
        [IR_ID_GROUP] = {SpvBuiltInWorkgroupId, true, "gl_WorkGroupID"},
        [IR_ID_NUM_GROUPS] = {SpvBuiltInNumWorkgroups, true, "gl_NumWorkGroups"},
        [IR_ID_SG_ID] = {SpvBuiltInSubgroupId, false, "gl_SubgroupID"},
        [IR_ID_SG_LANE] = {SpvBuiltInSubgroupLocalInvocationId, false, "gl_SubgroupInvocationID"},
        [IR_ID_SG_SIZE] = {SpvBuiltInSubgroupSize, false, "gl_SubgroupSize"},
    };
    if ((unsigned)kind >= IR_ID_COUNT || dim > 2) {
        fail(x, "bad id kind %d / dim %u", (int)kind, dim);
        return 0;
    }
    uint32_t t = B[kind].vec ? t_vec(x, t_u32(x), 3) : t_u32(x);
    if (!x->builtin[kind]) {
        if (!B[kind].vec) spv_b_capability(&x->b, SpvCapabilityGroupNonUniform);
        uint32_t var = global_var(x, t_ptr(x, SpvStorageClassInput, t), SpvStorageClassInput);
        decorate(x, var, SpvDecorationBuiltIn, 1, B[kind].builtin);
        name(x, var, B[kind].name);
        x->builtin[kind] = var;
    }
    uint32_t v = fn1(x, SpvOpLoad, t, x->builtin[kind]);
    return B[kind].vec ? fn2(x, SpvOpCompositeExtract, t_u32(x), v, dim) : v;
}

/* ---- arithmetic ------------------------------------------------------------------------------ */

static bool check_arith(ctx *x, ir_scalar s) {
    if (s == IR_F16 && !x->f16_native) {
        fail(x, "f16 arithmetic needs caps.f16_arith");
        return false;
    }
    if (s == IR_BF16 && !x->c->bf16_arith) {
        fail(x, "bf16 arithmetic needs caps.bf16_arith");
        return false;
    }
    return true;
}

static void emit_arith(ctx *x, const ir_inst *in) {
    ir_scalar s;
    uint32_t n;
    if (!tinfo(x, in->type, &s, &n)) {
        fail(x, "arithmetic on a fragment");
        return;
    }
    if (!check_arith(x, s)) return;
    uint32_t t = t_rep_sn(x, s, n);
    bool fl = s_float(s), sg = s_signed(s), bl = s == IR_BOOL;
    bool exact = false; /* no rounding needed after it, even on widened types */
    uint32_t r = 0;
    if (in->op == IR_OP_FMA) {
        if (!need_operands(x, in, 3)) return;
        if (!fl) {
            r = fn2(x, SpvOpIAdd, t, fn2(x, SpvOpIMul, t, V(x, in->operand[0]), V(x, in->operand[1])), V(x, in->operand[2]));
        } else {
            r = ext3(x, t, GLSLstd450Fma, V(x, in->operand[0]), V(x, in->operand[1]), V(x, in->operand[2]));
            /* NoContraction: one fused operation with one rounding, the same wherever it
             * appears (without it a driver may split it, or split it differently) */
            decorate(x, r, SpvDecorationNoContraction, 0, 0);
        }
    } else if (in->op >= IR_OP_ADD && in->op <= IR_OP_SHR) {
        if (!need_operands(x, in, 2)) return;
        uint32_t a = V(x, in->operand[0]), b = V(x, in->operand[1]);
        uint32_t op = 0, glsl = 0;
        switch (in->op) {
        case IR_OP_ADD: op = fl ? SpvOpFAdd : SpvOpIAdd; break;
        case IR_OP_SUB: op = fl ? SpvOpFSub : SpvOpISub; break;
        case IR_OP_MUL: op = fl ? SpvOpFMul : SpvOpIMul; break;
        case IR_OP_DIV: op = fl ? SpvOpFDiv : sg ? SpvOpSDiv : SpvOpUDiv; break;
        case IR_OP_REM: op = fl ? SpvOpFRem : sg ? SpvOpSRem : SpvOpUMod; break; /* C's sign rules */
        case IR_OP_MIN: glsl = fl ? GLSLstd450FMin : sg ? GLSLstd450SMin : GLSLstd450UMin; exact = true; break;
        case IR_OP_MAX: glsl = fl ? GLSLstd450FMax : sg ? GLSLstd450SMax : GLSLstd450UMax; exact = true; break;
        case IR_OP_AND: op = bl ? SpvOpLogicalAnd : SpvOpBitwiseAnd; break;
        case IR_OP_OR: op = bl ? SpvOpLogicalOr : SpvOpBitwiseOr; break;
        case IR_OP_XOR: op = bl ? SpvOpLogicalNotEqual : SpvOpBitwiseXor; break;
        case IR_OP_SHL: op = SpvOpShiftLeftLogical; break;
        case IR_OP_SHR: op = sg ? SpvOpShiftRightArithmetic : SpvOpShiftRightLogical; break;
        default: break;
        }
        if ((in->op >= IR_OP_AND && (fl || (!bl && !s_int(s)))) || (bl && in->op < IR_OP_AND) ||
            (bl && (in->op == IR_OP_SHL || in->op == IR_OP_SHR))) {
            fail(x, "%s on %s", ir_op_name(in->op), ir_scalar_name(s));
            return;
        }
        r = glsl ? ext2(x, t, glsl, a, b) : fn2(x, op, t, a, b);
        /* each float add, subtract, multiply and divide rounds on its own, as the oracle
         * (built with -ffp-contract=off) computes it: no fusing a * b + c into an fma */
        if (fl && !glsl && op != SpvOpFRem) decorate(x, r, SpvDecorationNoContraction, 0, 0);
    } else {
        if (!need_operands(x, in, 1)) return;
        uint32_t a = V(x, in->operand[0]);
        uint32_t glsl = 0;
        switch (in->op) {
        case IR_OP_NEG:
            if (bl) break;
            r = fn1(x, fl ? SpvOpFNegate : SpvOpSNegate, t, a);
            exact = true;
            break;
        case IR_OP_NOT:
            if (fl) break;
            r = fn1(x, bl ? SpvOpLogicalNot : SpvOpNot, t, a);
            break;
        case IR_OP_ABS:
            if (bl) break;
            r = fl ? ext1(x, t, GLSLstd450FAbs, a) : sg ? ext1(x, t, GLSLstd450SAbs, a) : a;
            exact = true;
            break;
        case IR_OP_EXP: glsl = GLSLstd450Exp; break;
        case IR_OP_LOG: glsl = GLSLstd450Log; break;
        case IR_OP_SQRT: glsl = GLSLstd450Sqrt; break;
        case IR_OP_RSQRT: glsl = GLSLstd450InverseSqrt; break;
        case IR_OP_TANH: glsl = GLSLstd450Tanh; break;
        case IR_OP_SIN: glsl = GLSLstd450Sin; break;
        case IR_OP_COS: glsl = GLSLstd450Cos; break;
        case IR_OP_FLOOR: glsl = GLSLstd450Floor; exact = true; break;
        default: break;
        }
        if (glsl) {
            if (!fl) {
                fail(x, "%s on %s", ir_op_name(in->op), ir_scalar_name(s));
                return;
            }
            r = ext1(x, t, glsl, a);
        }
        if (!r) {
            fail(x, "%s on %s", ir_op_name(in->op), ir_scalar_name(s));
            return;
        }
    }
    if (fl && !exact) r = round_to(x, s, n, r);
    def(x, in->result, r);
}

static void emit_cmp(ctx *x, const ir_inst *in) {
    if (!need_operands(x, in, 2)) return;
    ir_scalar s;
    uint32_t n;
    if (!tinfo(x, ir_type_of(x->k, in->operand[0]), &s, &n)) {
        fail(x, "compare of fragments");
        return;
    }
    static const uint32_t F[6] = {SpvOpFOrdEqual, SpvOpFOrdNotEqual, SpvOpFOrdLessThan, SpvOpFOrdLessThanEqual,
                                  SpvOpFOrdGreaterThan, SpvOpFOrdGreaterThanEqual};
    static const uint32_t S[6] = {SpvOpIEqual, SpvOpINotEqual, SpvOpSLessThan, SpvOpSLessThanEqual,
                                  SpvOpSGreaterThan, SpvOpSGreaterThanEqual};
    static const uint32_t U[6] = {SpvOpIEqual, SpvOpINotEqual, SpvOpULessThan, SpvOpULessThanEqual,
                                  SpvOpUGreaterThan, SpvOpUGreaterThanEqual};
    int64_t c = in->imm[0];
    if (c < 0 || c > IR_GE) {
        fail(x, "bad comparison %lld", (long long)c);
        return;
    }
    uint32_t op;
    if (s == IR_BOOL) {
        if (c > IR_NE) {
            fail(x, "ordering compare on bool");
            return;
        }
        op = c == IR_EQ ? SpvOpLogicalEqual : SpvOpLogicalNotEqual;
    } else {
        op = s_float(s) ? F[c] : s_signed(s) ? S[c] : U[c];
    }
    def(x, in->result, fn2(x, op, t_vec(x, t_bool(x), n), V(x, in->operand[0]), V(x, in->operand[1])));
}

/* The 16 bits of lane l of a 16-bit value, in the low half of a u32. */
static uint32_t half_bits(ctx *x, ir_scalar s, uint32_t n, uint32_t v, uint32_t l) {
    uint32_t tu = t_u32(x), lane = lane_of(x, s, n, v, l);
    if (s == IR_BF16) return fn2(x, SpvOpShiftRightLogical, tu, fn1(x, SpvOpBitcast, tu, lane), c_u32(x, 16));
    uint32_t pair = fn2(x, SpvOpCompositeConstruct, t_vec(x, t_float(x, 16), 2), lane, c_scalar(x, IR_F16, 0));
    return fn2(x, SpvOpBitwiseAnd, tu, fn1(x, SpvOpBitcast, tu, pair), c_u32(x, 0xffff));
}

/* A 16-bit value from 16 bits in the low half of a u32. */
static uint32_t from_half_bits(ctx *x, ir_scalar s, uint32_t bits) {
    if (s == IR_BF16) return fn1(x, SpvOpBitcast, t_f32(x), fn2(x, SpvOpShiftLeftLogical, t_u32(x), bits, c_u32(x, 16)));
    return fn2(x, SpvOpCompositeExtract, t_float(x, 16), fn1(x, SpvOpBitcast, t_vec(x, t_float(x, 16), 2), bits), 0);
}

/* Bitcasts through u32 words, since 16-bit lanes have no 16-bit integer registers here
 * (bf16 lives in f32, and 16-bit ints would need Int16, which caps does not report). */
static void emit_bitcast(ctx *x, const ir_inst *in) {
    if (!need_operands(x, in, 1)) return;
    ir_scalar fs, ts;
    uint32_t fn, tn;
    if (!tinfo(x, ir_type_of(x->k, in->operand[0]), &fs, &fn) || !tinfo(x, in->type, &ts, &tn)) {
        fail(x, "bitcast of fragments");
        return;
    }
    uint32_t v = V(x, in->operand[0]);
    uint32_t bits = s_bits(fs) * fn;
    if (bits != s_bits(ts) * tn || fs == IR_BOOL || ts == IR_BOOL) {
        fail(x, "bitcast %s x%u -> %s x%u changes the width", ir_scalar_name(fs), fn, ir_scalar_name(ts), tn);
        return;
    }
    bool h_from = s_bits(fs) == 16, h_to = s_bits(ts) == 16;
    if (!h_from && !h_to) {
        def(x, in->result, fn1(x, SpvOpBitcast, t_rep(x, in->type), v));
        return;
    }
    if ((fs == IR_F16 || ts == IR_F16) && !x->f16_native) {
        fail(x, "bitcast of f16 needs native f16 (caps.f16_arith)");
        return;
    }
    /* the value as u32 words (a single 16-bit scalar: one word holding 16 bits) */
    uint32_t nw = bits >= 32 ? bits / 32 : 1, w[4], tu = t_u32(x);
    if (h_from) {
        for (uint32_t i = 0; i < nw; i++) {
            w[i] = half_bits(x, fs, fn, v, 2 * i);
            if (2 * i + 1 < fn) {
                uint32_t hi = fn2(x, SpvOpShiftLeftLogical, tu, half_bits(x, fs, fn, v, 2 * i + 1), c_u32(x, 16));
                w[i] = fn2(x, SpvOpBitwiseOr, tu, w[i], hi);
            }
        }
    } else {
        uint32_t words = fn1(x, SpvOpBitcast, t_vec(x, tu, nw), v);
        for (uint32_t i = 0; i < nw; i++) w[i] = nw == 1 ? words : fn2(x, SpvOpCompositeExtract, tu, words, i);
    }
    uint32_t r;
    if (h_to) {
        uint32_t lanes[4];
        for (uint32_t l = 0; l < tn; l++) {
            uint32_t word = w[l / 2];
            if (l % 2) word = fn2(x, SpvOpShiftRightLogical, tu, word, c_u32(x, 16));
            else if (tn > 1) word = fn2(x, SpvOpBitwiseAnd, tu, word, c_u32(x, 0xffff));
            lanes[l] = from_half_bits(x, ts, word);
        }
        if (tn == 1) {
            r = lanes[0];
        } else {
            r = spv_b_id(&x->b);
            uint32_t o[6] = {t_rep(x, in->type), r, lanes[0], lanes[1], lanes[2], lanes[3]};
            spv_b_emit(&x->b, SPV_SEC_FUNCTION, SpvOpCompositeConstruct, o, 2 + tn);
        }
    } else {
        uint32_t words = w[0];
        if (nw > 1) {
            words = spv_b_id(&x->b);
            uint32_t o[6] = {t_vec(x, tu, nw), words, w[0], w[1], w[2], w[3]};
            spv_b_emit(&x->b, SPV_SEC_FUNCTION, SpvOpCompositeConstruct, o, 2 + nw);
        }
        r = fn1(x, SpvOpBitcast, t_rep(x, in->type), words);
    }
    def(x, in->result, r);
}

/* ---- structured control flow ------------------------------------------------------------------ */

static const ir_inst *emit_region(ctx *x, const ir_region *r);

static void emit_for(ctx *x, const ir_inst *in) {
    uint32_t n = in->n_results;
    if (!need_operands(x, in, 3 + n) || in->n_block_arg != n + 1 || in->n_region < 1) {
        fail(x, "malformed for");
        return;
    }
    ir_scalar is;
    uint32_t il;
    if (!tinfo(x, ir_type_of(x->k, in->operand[0]), &is, &il) || il != 1 || !s_int(is)) {
        fail(x, "loop bounds must be integers");
        return;
    }
    uint32_t lo = V(x, in->operand[0]), hi = V(x, in->operand[1]), step = V(x, in->operand[2]);
    uint32_t tiv = t_rep_s(x, is);
    uint32_t pre = x->label;
    uint32_t header = spv_b_id(&x->b), cond = spv_b_id(&x->b), body = spv_b_id(&x->b), cont = spv_b_id(&x->b),
             merge = spv_b_id(&x->b);
    op_branch(x, header);
    op_label(x, header);
    uint32_t iv = spv_b_id(&x->b), iv_next = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpPhi, 6, tiv, iv, lo, pre, iv_next, cont);
    def(x, in->block_arg[0], iv);
    size_t *patch = calloc(n ? n : 1, sizeof *patch);
    if (!patch) {
        fail(x, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t phi = spv_b_id(&x->b);
        /* the yielded value is known after the body: patched below */
        patch[i] = spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpPhi, 6, t_rep(x, ir_type_of(x->k, in->results[i])), phi,
                               V(x, in->operand[3 + i]), pre, 0, cont);
        def(x, in->block_arg[1 + i], phi);
        def(x, in->results[i], phi);
    }
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpLoopMerge, 3, merge, cont, SpvLoopControlMaskNone);
    op_branch(x, cond);
    op_label(x, cond);
    uint32_t c = fn2(x, s_signed(is) ? SpvOpSLessThan : SpvOpULessThan, t_bool(x), iv, hi);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpBranchConditional, 3, c, body, merge);
    op_label(x, body);
    const ir_inst *y = emit_region(x, &in->region[0]);
    if (n && (!y || y->n_operand != n)) fail(x, "loop body does not yield %u values", n);
    op_branch(x, cont);
    op_label(x, cont);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpIAdd, 4, tiv, iv_next, iv, step);
    op_branch(x, header);
    for (uint32_t i = 0; i < n && !x->failed; i++) spv_b_patch(&x->b, SPV_SEC_FUNCTION, patch[i] + 5, V(x, y->operand[i]));
    free(patch);
    op_label(x, merge);
}

static void emit_if(ctx *x, const ir_inst *in) {
    uint32_t n = in->n_results;
    if (!need_operands(x, in, 1) || in->n_region < 1) {
        fail(x, "malformed if");
        return;
    }
    /* the builder closes a missing else with an empty yield: no else block for it */
    bool has_else = n > 0;
    for (uint32_t i = 0; in->n_region > 1 && i < in->region[1].n; i++)
        has_else |= in->region[1].inst[i] && in->region[1].inst[i]->op != IR_OP_YIELD;
    uint32_t then_l = spv_b_id(&x->b), else_l = has_else ? spv_b_id(&x->b) : 0, merge = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpSelectionMerge, 2, merge, SpvSelectionControlMaskNone);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpBranchConditional, 3, V(x, in->operand[0]), then_l, has_else ? else_l : merge);
    op_label(x, then_l);
    const ir_inst *yt = emit_region(x, &in->region[0]);
    uint32_t then_end = x->label;
    op_branch(x, merge);
    const ir_inst *ye = NULL;
    uint32_t else_end = 0;
    if (has_else) {
        op_label(x, else_l);
        ye = emit_region(x, &in->region[1]);
        else_end = x->label;
        op_branch(x, merge);
    }
    op_label(x, merge);
    if (!n) return;
    if (!has_else || !yt || !ye || yt->n_operand != n || ye->n_operand != n) {
        fail(x, "if with %u results needs both branches to yield them", n);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t phi = spv_b_id(&x->b);
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpPhi, 6, t_rep(x, ir_type_of(x->k, in->results[i])), phi,
                    V(x, yt->operand[i]), then_end, V(x, ye->operand[i]), else_end);
        def(x, in->results[i], phi);
    }
}

/* if (cond) { then(); } as a selection construct; returns the block that held the branch,
 * for phis at the merge. */
typedef struct guard {
    uint32_t before, merge;
} guard;
static guard guard_begin(ctx *x, uint32_t cond) {
    guard g = {x->label, spv_b_id(&x->b)};
    uint32_t then_l = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpSelectionMerge, 2, g.merge, SpvSelectionControlMaskNone);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpBranchConditional, 3, cond, then_l, g.merge);
    op_label(x, then_l);
    return g;
}
/* Ends the guarded block; returns the phi of v (from the block) and fallback (skipped). */
static uint32_t guard_end(ctx *x, guard g, uint32_t type, uint32_t v, uint32_t fallback) {
    uint32_t then_end = x->label;
    op_branch(x, g.merge);
    op_label(x, g.merge);
    if (!type) return 0;
    uint32_t phi = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpPhi, 6, type, phi, v, then_end, fallback, g.before);
    return phi;
}

/* index < limit for lane 0, and all `lanes` in bounds (without wrapping) for vectors. */
static uint32_t in_bounds(ctx *x, uint32_t index, uint32_t limit, uint32_t lanes) {
    uint32_t tb = t_bool(x), tu = t_u32(x);
    uint32_t lt = fn2(x, SpvOpULessThan, tb, index, limit);
    if (lanes == 1) return lt;
    uint32_t room = fn2(x, SpvOpISub, tu, limit, index);
    return fn2(x, SpvOpLogicalAnd, tb, lt, fn2(x, SpvOpUGreaterThanEqual, tb, room, c_u32(x, lanes)));
}

/* index + l < limit, computed without wrapping: index < limit && limit - index > l. */
static uint32_t lane_in_bounds(ctx *x, uint32_t index, uint32_t limit, uint32_t l) {
    uint32_t tb = t_bool(x);
    uint32_t lt = fn2(x, SpvOpULessThan, tb, index, limit);
    if (!l) return lt;
    uint32_t room = fn2(x, SpvOpISub, t_u32(x), limit, index);
    return fn2(x, SpvOpLogicalAnd, tb, lt, fn2(x, SpvOpUGreaterThan, tb, room, c_u32(x, l)));
}

/* Masked loads never touch an element at or past limit: the whole vector when it fits,
 * else lane by lane, each in its own selection construct. */
static uint32_t masked_load(ctx *x, uint32_t b, uint32_t index, uint32_t lanes, uint32_t limit, uint32_t fallback) {
    ir_scalar s = x->buf[b].p->elem;
    uint32_t ts = t_rep_s(x, s), tv = t_rep_sn(x, s, lanes);
    if (lanes == 1) {
        guard g = guard_begin(x, in_bounds(x, index, limit, 1));
        uint32_t v = buf_load(x, b, index, 1);
        return guard_end(x, g, ts, v, fallback);
    }
    uint32_t all = in_bounds(x, index, limit, lanes);
    uint32_t merge = spv_b_id(&x->b), full_l = spv_b_id(&x->b), part_l = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpSelectionMerge, 2, merge, SpvSelectionControlMaskNone);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpBranchConditional, 3, all, full_l, part_l);
    op_label(x, full_l);
    uint32_t vfull = buf_load(x, b, index, lanes);
    uint32_t full_end = x->label;
    op_branch(x, merge);
    op_label(x, part_l);
    uint32_t part[4];
    for (uint32_t l = 0; l < lanes; l++) {
        uint32_t il = add_u32(x, index, l);
        guard g = guard_begin(x, lane_in_bounds(x, index, limit, l));
        uint32_t v = buf_load(x, b, il, 1);
        part[l] = guard_end(x, g, ts, v, fallback);
    }
    uint32_t id = spv_b_id(&x->b);
    uint32_t o[6] = {tv, id, part[0], part[1], part[2], part[3]};
    spv_b_emit(&x->b, SPV_SEC_FUNCTION, SpvOpCompositeConstruct, o, 2 + lanes);
    uint32_t part_end = x->label;
    op_branch(x, merge);
    op_label(x, merge);
    uint32_t phi = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpPhi, 6, tv, phi, vfull, full_end, id, part_end);
    return phi;
}

static void masked_store(ctx *x, uint32_t b, uint32_t index, uint32_t lanes, uint32_t v, uint32_t limit) {
    ir_scalar s = x->buf[b].p->elem;
    if (lanes == 1) {
        guard g = guard_begin(x, in_bounds(x, index, limit, 1));
        buf_store(x, b, index, 1, v);
        guard_end(x, g, 0, 0, 0);
        return;
    }
    uint32_t all = in_bounds(x, index, limit, lanes);
    uint32_t merge = spv_b_id(&x->b), full_l = spv_b_id(&x->b), part_l = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpSelectionMerge, 2, merge, SpvSelectionControlMaskNone);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpBranchConditional, 3, all, full_l, part_l);
    op_label(x, full_l);
    buf_store(x, b, index, lanes, v);
    op_branch(x, merge);
    op_label(x, part_l);
    for (uint32_t l = 0; l < lanes; l++) {
        uint32_t il = add_u32(x, index, l);
        guard g = guard_begin(x, lane_in_bounds(x, index, limit, l));
        buf_store(x, b, il, 1, lane_of(x, s, lanes, v, l));
        guard_end(x, g, 0, 0, 0);
    }
    op_branch(x, merge);
    op_label(x, merge);
}

/* ---- memory ops ------------------------------------------------------------------------------- */

static uint32_t imm_u32(ctx *x, const ir_inst *in, int i, uint32_t max, const char *what) {
    int64_t v = in->imm[i];
    if (v < 0 || (uint64_t)v >= max) {
        fail(x, "%s %lld out of range", what, (long long)v);
        return 0;
    }
    return (uint32_t)v;
}

static uint32_t lanes_of(ctx *x, ir_type t) {
    ir_scalar s;
    uint32_t n = 1;
    if (!tinfo(x, t, &s, &n)) fail(x, "memory access of a fragment");
    return n;
}

static void emit_memory(ctx *x, const ir_inst *in) {
    switch (in->op) {
    case IR_OP_LOAD: {
        if (!need_operands(x, in, 1)) return;
        uint32_t b = imm_u32(x, in, 0, x->n_buf, "buffer");
        uint32_t lanes = lanes_of(x, in->type);
        if (x->failed) return;
        def(x, in->result, buf_load(x, b, V(x, in->operand[0]), lanes));
        return;
    }
    case IR_OP_LOAD_MASKED: {
        if (!need_operands(x, in, 3)) return;
        uint32_t b = imm_u32(x, in, 0, x->n_buf, "buffer");
        uint32_t lanes = lanes_of(x, in->type);
        if (x->failed) return;
        def(x, in->result, masked_load(x, b, V(x, in->operand[0]), lanes, V(x, in->operand[1]), V(x, in->operand[2])));
        return;
    }
    case IR_OP_STORE: case IR_OP_STORE_MASKED: {
        bool masked = in->op == IR_OP_STORE_MASKED;
        if (!need_operands(x, in, masked ? 3 : 2)) return;
        uint32_t b = imm_u32(x, in, 0, x->n_buf, "buffer");
        uint32_t lanes = lanes_of(x, ir_type_of(x->k, in->operand[1]));
        if (x->failed) return;
        uint32_t index = V(x, in->operand[0]), v = V(x, in->operand[1]);
        if (masked)
            masked_store(x, b, index, lanes, v, V(x, in->operand[2]));
        else
            buf_store(x, b, index, lanes, v);
        return;
    }
    case IR_OP_SHM_LOAD: {
        if (!need_operands(x, in, 1)) return;
        uint32_t s = imm_u32(x, in, 0, x->n_shm, "workgroup array");
        ir_scalar es;
        uint32_t lanes;
        if (x->failed || !tinfo(x, in->type, &es, &lanes)) return;
        uint32_t index = V(x, in->operand[0]), part[4];
        for (uint32_t l = 0; l < lanes && l < 4; l++) part[l] = shm_load1(x, s, add_u32(x, index, l));
        if (lanes == 1) {
            def(x, in->result, part[0]);
            return;
        }
        uint32_t id = spv_b_id(&x->b);
        uint32_t o[6] = {t_rep(x, in->type), id, part[0], part[1], part[2], part[3]};
        spv_b_emit(&x->b, SPV_SEC_FUNCTION, SpvOpCompositeConstruct, o, 2 + lanes);
        def(x, in->result, id);
        return;
    }
    case IR_OP_SHM_STORE: {
        if (!need_operands(x, in, 2)) return;
        uint32_t s = imm_u32(x, in, 0, x->n_shm, "workgroup array");
        ir_scalar es;
        uint32_t lanes;
        if (x->failed || !tinfo(x, ir_type_of(x->k, in->operand[1]), &es, &lanes)) return;
        uint32_t index = V(x, in->operand[0]), v = V(x, in->operand[1]);
        for (uint32_t l = 0; l < lanes; l++) shm_store1(x, s, add_u32(x, index, l), lane_of(x, es, lanes, v, l));
        return;
    }
    default: return;
    }
}

/* ATOMIC: imm[0] target, imm[1] op, imm[2] shm flag; operands index, value. */
static void emit_atomic(ctx *x, const ir_inst *in) {
    if (!need_operands(x, in, 2)) return;
    uint32_t op = imm_u32(x, in, 1, IR_ATOMIC_XCHG + 1, "atomic op");
    bool shm = in->imm[2] != 0;
    uint32_t target = imm_u32(x, in, 0, shm ? x->n_shm : x->n_buf, shm ? "workgroup array" : "buffer");
    ir_scalar s;
    uint32_t n;
    if (x->failed || !tinfo(x, in->type, &s, &n)) return;
    if (n != 1 || s_bits(s) != 32) {
        fail(x, "atomics take 32-bit scalars, not %s x%u", ir_scalar_name(s), n);
        return;
    }
    uint32_t t = t_rep_s(x, s);
    uint32_t spvop;
    switch (op) {
    case IR_ATOMIC_ADD:
        if (s == IR_F32) {
            if (shm) {
                fail(x, "f32 atomic add on workgroup memory: caps has no flag for it (caps.atomic_f32_add covers buffers)");
                return;
            }
            if (!x->c->atomic_f32_add) {
                fail(x, "f32 atomic add needs caps.atomic_f32_add (SPV_EXT_shader_atomic_float_add)");
                return;
            }
            spv_b_capability(&x->b, SpvCapabilityAtomicFloat32AddEXT);
            spv_b_extension(&x->b, "SPV_EXT_shader_atomic_float_add");
            spvop = SpvOpAtomicFAddEXT;
        } else {
            spvop = SpvOpAtomicIAdd;
        }
        break;
    case IR_ATOMIC_MIN: spvop = s_signed(s) ? SpvOpAtomicSMin : SpvOpAtomicUMin; break;
    case IR_ATOMIC_MAX: spvop = s_signed(s) ? SpvOpAtomicSMax : SpvOpAtomicUMax; break;
    default: spvop = SpvOpAtomicExchange; break;
    }
    if ((op == IR_ATOMIC_MIN || op == IR_ATOMIC_MAX) && !s_int(s)) {
        fail(x, "atomic min/max take i32/u32, not %s", ir_scalar_name(s));
        return;
    }
    uint32_t index = V(x, in->operand[0]), v = V(x, in->operand[1]);
    /* an f32 exchange moves bits: a u32 exchange needs no float-atomics feature */
    bool bits = spvop == SpvOpAtomicExchange && s == IR_F32;
    if (bits) {
        t = t_u32(x);
        v = fn1(x, SpvOpBitcast, t, v);
    }
    uint32_t ptr;
    if (shm) {
        ptr = shm_ptr(x, target, index); /* the array holds u32 bits then (scan_frags) */
    } else {
        x->buf[target].atomic = true;
        ptr = buf_ptr(x, target, bits ? VIEW_BITS : 1, index);
    }
    uint32_t scope = c_u32(x, shm ? SCOPE_WORKGROUP : x->vulkan_mm ? SCOPE_QUEUE_FAMILY : SCOPE_DEVICE);
    uint32_t sem = c_u32(x, SEM_RELAXED);
    uint32_t id = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, spvop, 6, t, id, ptr, scope, sem, v);
    def(x, in->result, bits ? fn1(x, SpvOpBitcast, t_f32(x), id) : id);
}

/* ---- subgroups -------------------------------------------------------------------------------- */

static void emit_subgroup(ctx *x, const ir_inst *in) {
    bool reduce = in->op == IR_OP_SG_REDUCE;
    if (!need_operands(x, in, reduce ? 1 : 2)) return;
    ir_scalar s;
    uint32_t n;
    if (!tinfo(x, in->type, &s, &n)) {
        fail(x, "subgroup op on a fragment");
        return;
    }
    if (reduce ? !x->c->subgroup_arith : !x->c->subgroup_shuffle) {
        fail(x, reduce ? "subgroup reduce needs caps.subgroup_arith" : "subgroup shuffle/broadcast needs caps.subgroup_shuffle");
        return;
    }
    uint32_t v = V(x, in->operand[0]);
    uint32_t scope = c_u32(x, SCOPE_SUBGROUP);
    /* f16 values travel as f32 (16-bit subgroup ops need shaderSubgroupExtendedTypes, which
     * caps does not report); 64-bit ones as two u32 for shuffles */
    bool via_f32 = s == IR_F16 && x->f16_native;
    uint32_t t = t_rep_sn(x, s, n), tw = via_f32 ? t_vec(x, t_f32(x), n) : t;
    if (via_f32) v = fn1(x, SpvOpFConvert, tw, v);
    uint32_t r;
    if (reduce) {
        int64_t ro = in->imm[0];
        if (s == IR_BOOL || s_bits(s) == 64 || ro < 0 || ro > IR_REDUCE_MAX) {
            fail(x, "subgroup reduce of %s is not supported", ir_scalar_name(s));
            return;
        }
        if (ro == IR_REDUCE_ADD && !check_arith(x, s)) return;
        bool fl = s_float(s), sg = s_signed(s);
        static const uint32_t OPS[3][3] = {
            {SpvOpGroupNonUniformFAdd, SpvOpGroupNonUniformIAdd, SpvOpGroupNonUniformIAdd},
            {SpvOpGroupNonUniformFMin, SpvOpGroupNonUniformSMin, SpvOpGroupNonUniformUMin},
            {SpvOpGroupNonUniformFMax, SpvOpGroupNonUniformSMax, SpvOpGroupNonUniformUMax},
        };
        uint32_t op = OPS[ro][fl ? 0 : sg ? 1 : 2];
        spv_b_capability(&x->b, SpvCapabilityGroupNonUniformArithmetic);
        r = fn3(x, op, tw, scope, SpvGroupOperationReduce, v);
        if (ro == IR_REDUCE_ADD && !via_f32) r = round_to(x, s, n, r);
    } else {
        uint32_t lane = V(x, in->operand[1]);
        /* broadcast uses Shuffle: OpGroupNonUniformBroadcast needs the ballot feature, which
         * caps does not report; a uniform lane makes it the same read */
        uint32_t op = in->op == IR_OP_SG_SHUFFLE_XOR ? SpvOpGroupNonUniformShuffleXor : SpvOpGroupNonUniformShuffle;
        spv_b_capability(&x->b, SpvCapabilityGroupNonUniformShuffle);
        if (s_bits(s) == 64) {
            if (n != 1) {
                fail(x, "subgroup shuffle of 64-bit vectors is not supported");
                return;
            }
            uint32_t t2 = t_vec(x, t_u32(x), 2);
            uint32_t p = fn1(x, SpvOpBitcast, t2, v);
            r = fn1(x, SpvOpBitcast, t, fn3(x, op, t2, scope, p, lane));
        } else {
            r = fn3(x, op, tw, scope, v, lane);
        }
    }
    if (via_f32) r = fn1(x, SpvOpFConvert, t, r);
    def(x, in->result, r);
}

/* ---- fragments ------------------------------------------------------------------------------- */

/* FRAG_LOAD: operands base, stride; imm[0] src, imm[1] row_major, imm[2] shm.
 * FRAG_STORE: operands frag, base, stride; imm[0] dst, imm[1] row_major, imm[2] shm. */
static void emit_frag(ctx *x, const ir_inst *in) {
    switch (in->op) {
    case IR_OP_FRAG_FILL: {
        if (!need_operands(x, in, 1)) return;
        const ir_type_desc *d = ir_type_get(x->k, in->type);
        uint32_t t = t_rep(x, in->type);
        if (!t || !d) return;
        uint32_t v = V(x, in->operand[0]);
        ir_scalar vs;
        uint32_t vn;
        if (!tinfo(x, ir_type_of(x->k, in->operand[0]), &vs, &vn) || vn != 1) {
            fail(x, "fill value must be a scalar");
            return;
        }
        v = convert(x, vs, d->elem, 1, v);
        if (d->elem == IR_BF16) v = fn1(x, SpvOpFConvert, t_bf16(x), v); /* exact: v is a bf16 */
        def(x, in->result, fn1(x, SpvOpCompositeConstruct, t, v));
        return;
    }
    case IR_OP_FRAG_LOAD: case IR_OP_FRAG_STORE: {
        bool load = in->op == IR_OP_FRAG_LOAD;
        uint32_t o = load ? 0 : 1;
        if (!need_operands(x, in, 2 + o)) return;
        bool shm = in->imm[2] != 0;
        uint32_t src = imm_u32(x, in, 0, shm ? x->n_shm : x->n_buf, shm ? "workgroup array" : "buffer");
        uint32_t t = t_rep(x, load ? in->type : ir_type_of(x->k, in->operand[0]));
        if (x->failed || !t) return;
        uint32_t base = V(x, in->operand[o]), stride = V(x, in->operand[o + 1]);
        uint32_t ptr = shm ? shm_ptr(x, src, base) : buf_ptr(x, src, 1, base);
        uint32_t layout = c_u32(x, in->imm[1] ? spv_coopmat_row_major : spv_coopmat_col_major);
        if (load) {
            uint32_t id = spv_b_id(&x->b);
            spv_b_emitv(&x->b, SPV_SEC_FUNCTION, spv_op_coopmat_load_khr, 6, t, id, ptr, layout, stride,
                        SpvMemoryAccessNonPrivatePointerMask);
            def(x, in->result, id);
        } else {
            spv_b_emitv(&x->b, SPV_SEC_FUNCTION, spv_op_coopmat_store_khr, 5, ptr, V(x, in->operand[0]), layout, stride,
                        SpvMemoryAccessNonPrivatePointerMask);
        }
        return;
    }
    case IR_OP_FRAG_MMA: {
        if (!need_operands(x, in, 3)) return;
        const ir_type_desc *a = ir_type_get(x->k, ir_type_of(x->k, in->operand[0]));
        const ir_type_desc *c = ir_type_get(x->k, ir_type_of(x->k, in->operand[2]));
        if (!a || !c || a->kind != IR_T_FRAG || c->kind != IR_T_FRAG) {
            fail(x, "mma operands must be fragments");
            return;
        }
        if (!mma_find(x->c, a->m, a->n, a->k, (int)a->elem, (int)c->elem)) {
            fail(x, "mma %ux%ux%u %s x %s -> %s is not one of the device's cooperative-matrix shapes (caps.mma)", a->m,
                 a->n, a->k, ir_scalar_name(a->elem), ir_scalar_name(a->elem), ir_scalar_name(c->elem));
            return;
        }
        uint32_t t = t_rep(x, in->type);
        if (!t) return;
        def(x, in->result, fn3(x, spv_op_coopmat_muladd_khr, t, V(x, in->operand[0]), V(x, in->operand[1]), V(x, in->operand[2])));
        return;
    }
    default: return;
    }
}

/* ---- the walk ------------------------------------------------------------------------------- */

static void emit_inst(ctx *x, const ir_inst *in) {
    x->cur = in;
    switch (in->op) {
    case IR_OP_CONST: case IR_OP_PARAM: case IR_OP_SPEC:
        if (in->result && in->result <= x->n_val && !x->val[in->result]) fail(x, "not declared up front");
        return;
    case IR_OP_ID:
        def(x, in->result, load_id(x, (ir_id_kind)in->imm[0], (uint32_t)in->imm[1]));
        return;
    case IR_OP_ADD: case IR_OP_SUB: case IR_OP_MUL: case IR_OP_DIV: case IR_OP_REM: case IR_OP_MIN: case IR_OP_MAX:
    case IR_OP_AND: case IR_OP_OR: case IR_OP_XOR: case IR_OP_SHL: case IR_OP_SHR: case IR_OP_NEG: case IR_OP_NOT:
    case IR_OP_ABS: case IR_OP_EXP: case IR_OP_LOG: case IR_OP_SQRT: case IR_OP_RSQRT: case IR_OP_TANH: case IR_OP_SIN:
    case IR_OP_COS: case IR_OP_FLOOR: case IR_OP_FMA:
        emit_arith(x, in);
        return;
    case IR_OP_CMP: emit_cmp(x, in); return;
    case IR_OP_SELECT:
        if (!need_operands(x, in, 3)) return;
        def(x, in->result, fn3(x, SpvOpSelect, t_rep(x, in->type), V(x, in->operand[0]), V(x, in->operand[1]), V(x, in->operand[2])));
        return;
    case IR_OP_CONVERT: {
        if (!need_operands(x, in, 1)) return;
        ir_scalar fs, ts;
        uint32_t fn, tn;
        if (!tinfo(x, ir_type_of(x->k, in->operand[0]), &fs, &fn) || !tinfo(x, in->type, &ts, &tn) || fn != tn) {
            fail(x, "convert needs scalars or vectors of the same width");
            return;
        }
        def(x, in->result, convert(x, fs, ts, tn, V(x, in->operand[0])));
        return;
    }
    case IR_OP_BITCAST: emit_bitcast(x, in); return;
    case IR_OP_VEC: {
        if (in->n_operand < 2 || in->n_operand > 4) {
            fail(x, "vectors have 2 to 4 lanes");
            return;
        }
        uint32_t o[6] = {t_rep(x, in->type), spv_b_id(&x->b)};
        for (uint32_t i = 0; i < in->n_operand; i++) o[2 + i] = V(x, in->operand[i]);
        spv_b_emit(&x->b, SPV_SEC_FUNCTION, SpvOpCompositeConstruct, o, 2 + in->n_operand);
        def(x, in->result, o[1]);
        return;
    }
    case IR_OP_EXTRACT:
        if (!need_operands(x, in, 1)) return;
        def(x, in->result, fn2(x, SpvOpCompositeExtract, t_rep(x, in->type), V(x, in->operand[0]), (uint32_t)in->imm[0]));
        return;
    case IR_OP_LOAD: case IR_OP_STORE: case IR_OP_LOAD_MASKED: case IR_OP_STORE_MASKED: case IR_OP_SHM_LOAD:
    case IR_OP_SHM_STORE:
        emit_memory(x, in);
        return;
    case IR_OP_ATOMIC: emit_atomic(x, in); return;
    case IR_OP_BARRIER:
        /* the Vulkan memory model also needs the barrier to make writes available/visible */
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpControlBarrier, 3, c_u32(x, SCOPE_WORKGROUP), c_u32(x, SCOPE_WORKGROUP),
                    c_u32(x, SEM_BARRIER | (x->vulkan_mm ? SpvMemorySemanticsMakeAvailableMask | SpvMemorySemanticsMakeVisibleMask : 0)));
        return;
    case IR_OP_SG_REDUCE: case IR_OP_SG_SHUFFLE: case IR_OP_SG_SHUFFLE_XOR: case IR_OP_SG_BROADCAST:
        emit_subgroup(x, in);
        return;
    case IR_OP_FRAG_FILL: case IR_OP_FRAG_LOAD: case IR_OP_FRAG_STORE: case IR_OP_FRAG_MMA:
        emit_frag(x, in);
        return;
    case IR_OP_FOR: emit_for(x, in); return;
    case IR_OP_IF: emit_if(x, in); return;
    case IR_OP_YIELD: return; /* read by the construct */
    default: fail(x, "unknown op %d", (int)in->op); return;
    }
}

/* Emits a region; returns its closing YIELD, if any. */
static const ir_inst *emit_region(ctx *x, const ir_region *r) {
    const ir_inst *y = NULL;
    const ir_inst *outer = x->cur;
    for (uint32_t i = 0; i < r->n && !x->failed; i++) {
        const ir_inst *in = r->inst[i];
        if (!in) continue;
        if (in->op == IR_OP_YIELD) y = in;
        emit_inst(x, in);
    }
    x->cur = outer;
    return y;
}

/* ---- declarations ----------------------------------------------------------------------------- */

static bool is_frag_op(ir_op op) { return op >= IR_OP_FRAG_FILL && op <= IR_OP_FRAG_MMA; }

/* Before anything is declared: does the kernel use fragments (then the module takes the
 * Vulkan memory model), which workgroup arrays do fragments touch (they take the
 * fragment's element type), and which f32 arrays are exchanged atomically (kept as bits)? */
static void scan_frags(ctx *x, const ir_region *r, int depth) {
    for (uint32_t i = 0; i < r->n && depth < 1000; i++) {
        const ir_inst *in = r->inst[i];
        if (!in) continue;
        if (is_frag_op(in->op)) x->vulkan_mm = true;
        bool on_shm = in->imm[2] == 1 && in->imm[0] >= 0 && (uint64_t)in->imm[0] < x->n_shm;
        if ((in->op == IR_OP_FRAG_LOAD || in->op == IR_OP_FRAG_STORE) && on_shm) x->shm[in->imm[0]].frag = true;
        if (in->op == IR_OP_ATOMIC && on_shm && in->imm[1] == IR_ATOMIC_XCHG && x->shm[in->imm[0]].d->elem == IR_F32)
            x->shm[in->imm[0]].xchg_f32 = true;
        for (uint32_t j = 0; j < in->n_region && j < 2; j++) scan_frags(x, &in->region[j], depth + 1);
    }
}

/* Fragment types and mma shapes against the caps, first: a device without cooperative
 * matrices is the clearest reason to refuse such a kernel. */
static void check_frags(ctx *x, const ir_region *r, int depth) {
    for (uint32_t i = 0; i < r->n && !x->failed && depth < 1000; i++) {
        const ir_inst *in = r->inst[i];
        if (!in) continue;
        x->cur = in;
        if (in->op == IR_OP_FRAG_FILL || in->op == IR_OP_FRAG_LOAD || in->op == IR_OP_FRAG_MMA) t_rep(x, in->type);
        if (in->op == IR_OP_FRAG_STORE && in->n_operand) t_rep(x, ir_type_of(x->k, in->operand[0]));
        for (uint32_t j = 0; j < in->n_region && j < 2; j++) check_frags(x, &in->region[j], depth + 1);
    }
    if (!depth) x->cur = NULL;
}

static void declare_shared(ctx *x) {
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < x->n_shm; i++) {
        shm_info *si = &x->shm[i];
        const ir_shared_decl *d = si->d;
        x->cur = NULL;
        uint32_t elem;
        uint32_t size;
        if (si->frag && (d->elem == IR_F16 || d->elem == IR_BF16) && !t_frag_component(x, d->elem)) return;
        if (d->elem == IR_BF16 && si->frag) {
            si->mode = SHM_BF16_NATIVE;
            elem = t_bf16(x);
            size = 2;
        } else if (si->xchg_f32) {
            si->mode = SHM_F32_BITS;
            elem = t_u32(x);
            size = 4;
        } else {
            si->mode = SHM_REP;
            elem = t_rep_s(x, d->elem);
            size = widened(x, d->elem) || s_bits(d->elem) < 8 ? 4 : s_bits(d->elem) / 8;
        }
        if (!d->count) {
            fail(x, "workgroup array '%s' has no elements", d->name);
            return;
        }
        bytes += (uint64_t)size * d->count;
        uint32_t arr = spv_b_type(&x->b, SpvOpTypeArray, (uint32_t[]){elem, c_u32(x, d->count)}, 2);
        si->elem_type = elem;
        si->var = global_var(x, t_ptr(x, SpvStorageClassWorkgroup, arr), SpvStorageClassWorkgroup);
        name(x, si->var, d->name);
    }
    if (x->c->shared_bytes && bytes > x->c->shared_bytes)
        fail(x, "workgroup arrays need %llu bytes (16-bit floats take 4 without native f16/bf16); caps.shared_bytes is %u",
             (unsigned long long)bytes, x->c->shared_bytes);
}

static void declare_push_constants(ctx *x) {
    uint32_t np = ir_n_params(x->k), ns = 0;
    uint32_t members[PUSH_CONSTANT_BYTES / 4];
    for (uint32_t i = 0; i < np; i++) {
        const ir_param *p = ir_param_at(x->k, i);
        x->pc_member[i] = UINT32_MAX;
        if (!p || p->is_buffer) continue;
        if (p->elem != IR_I32 && p->elem != IR_U32 && p->elem != IR_F32) {
            fail(x, "scalar parameter '%s' is %s; push constants take i32, u32 or f32", p->name, ir_scalar_name(p->elem));
            return;
        }
        if (ns == PUSH_CONSTANT_BYTES / 4) {
            fail(x, "more than %u scalar parameters: push constants hold %u bytes", PUSH_CONSTANT_BYTES / 4, PUSH_CONSTANT_BYTES);
            return;
        }
        x->pc_member[i] = ns;
        members[ns++] = t_rep_s(x, p->elem);
    }
    if (!ns) return;
    uint32_t st = spv_b_id(&x->b);
    uint32_t o[1 + PUSH_CONSTANT_BYTES / 4];
    o[0] = st;
    memcpy(o + 1, members, ns * sizeof *members);
    spv_b_emit(&x->b, SPV_SEC_GLOBAL, SpvOpTypeStruct, o, 1 + ns);
    decorate(x, st, SpvDecorationBlock, 0, 0);
    name(x, st, "Params");
    for (uint32_t i = 0; i < np; i++) {
        if (x->pc_member[i] == UINT32_MAX) continue;
        uint32_t m = x->pc_member[i];
        spv_b_emitv(&x->b, SPV_SEC_ANNOTATION, SpvOpMemberDecorate, 4, st, m, SpvDecorationOffset, 4 * m);
        const ir_param *p = ir_param_at(x->k, i);
        spv_b_emit_str(&x->b, SPV_SEC_DEBUG, SpvOpMemberName, (uint32_t[]){st, m}, 2, p->name ? p->name : "", NULL, 0);
    }
    x->pc_var = global_var(x, t_ptr(x, SpvStorageClassPushConstant, st), SpvStorageClassPushConstant);
    name(x, x->pc_var, "params");
}

/* The scalar parameters' values, loaded once in the entry block. */
static void load_push_constants(ctx *x) {
    uint32_t np = ir_n_params(x->k);
    for (uint32_t i = 0; i < np && !x->failed; i++) {
        if (x->pc_member[i] == UINT32_MAX) continue;
        const ir_param *p = ir_param_at(x->k, i);
        uint32_t t = t_rep_s(x, p->elem);
        uint32_t ptr = fn2(x, SpvOpAccessChain, t_ptr(x, SpvStorageClassPushConstant, t), x->pc_var, c_u32(x, x->pc_member[i]));
        def(x, p->value, fn1(x, SpvOpLoad, t, ptr));
    }
}

static void declare_specs(ctx *x) {
    uint32_t n = ir_n_specs(x->k);
    for (uint32_t i = 0; i < n && !x->failed; i++) {
        const ir_spec *s = ir_spec_at(x->k, i);
        uint32_t id = spv_b_id(&x->b);
        switch (s->type) {
        case IR_BOOL:
            spv_b_emitv(&x->b, SPV_SEC_GLOBAL, s->dflt != 0 ? SpvOpSpecConstantTrue : SpvOpSpecConstantFalse, 2, t_bool(x), id);
            break;
        case IR_I32: case IR_U32: {
            uint32_t bits = s->type == IR_I32 ? (uint32_t)(int32_t)s->dflt : (uint32_t)s->dflt;
            if (!(s->dflt >= -2147483648.0 && s->dflt <= 4294967295.0)) bits = 0;
            spv_b_emitv(&x->b, SPV_SEC_GLOBAL, SpvOpSpecConstant, 3, t_rep_s(x, s->type), id, bits);
            break;
        }
        case IR_F32: {
            float f = (float)s->dflt;
            uint32_t bits;
            memcpy(&bits, &f, 4);
            spv_b_emitv(&x->b, SPV_SEC_GLOBAL, SpvOpSpecConstant, 3, t_f32(x), id, bits);
            break;
        }
        default:
            fail(x, "spec constant '%s' is %s; spec constants are bool, i32, u32 or f32", s->name, ir_scalar_name(s->type));
            return;
        }
        decorate(x, id, SpvDecorationSpecId, 1, i);
        name(x, id, s->name);
        def(x, s->value, id);
    }
}

/* Constants anywhere in the kernel become module constants. */
static void declare_constants(ctx *x) {
    for (uint32_t v = 1; v <= x->n_val && !x->failed; v++) {
        const ir_inst *d = ir_def(x->k, v);
        if (!d || d->op != IR_OP_CONST || d->result != v) continue;
        ir_scalar s;
        uint32_t n;
        x->cur = d;
        if (!tinfo(x, d->type, &s, &n) || n != 1) {
            fail(x, "constants are scalars");
            return;
        }
        def(x, v, c_scalar(x, s, (uint64_t)d->imm[0]));
    }
    x->cur = NULL;
}

static void decorate_buffers(ctx *x) {
    for (uint32_t b = 0; b < x->n_buf; b++) {
        buf_info *bi = &x->buf[b];
        uint32_t views = 0;
        for (int v = 0; v < N_VIEW_LANES; v++) views += bi->var[v] != 0;
        for (int v = 0; v < N_VIEW_LANES; v++) {
            uint32_t var = bi->var[v];
            if (!var) continue;
            decorate(x, var, SpvDecorationDescriptorSet, 1, 0);
            decorate(x, var, SpvDecorationBinding, 1, b);
            if (!(bi->p->access & IR_WRITE)) decorate(x, var, SpvDecorationNonWritable, 0, 0);
            if (!(bi->p->access & IR_READ) && !bi->atomic) decorate(x, var, SpvDecorationNonReadable, 0, 0);
            /* two views of one written buffer may overlap: without Aliased SPIR-V assumes not */
            if (views > 1 && (bi->p->access & IR_WRITE)) decorate(x, var, SpvDecorationAliased, 0, 0);
        }
    }
}

static int emit_module(ctx *x, spv_module *out) {
    const ir_kernel *k = x->k;
    spv_builder *b = &x->b;
    spv_b_capability(b, SpvCapabilityShader);

    x->n_buf = ir_n_buffers(k);
    x->n_shm = ir_n_shared(k);
    x->buf = calloc(x->n_buf ? x->n_buf : 1, sizeof *x->buf);
    x->shm = calloc(x->n_shm ? x->n_shm : 1, sizeof *x->shm);
    x->pc_member = calloc(ir_n_params(k) ? ir_n_params(k) : 1, sizeof *x->pc_member);
    x->n_val = ir_n_values(k);
    x->val = calloc(x->n_val + 1, sizeof *x->val);
    if (!x->buf || !x->shm || !x->pc_member || !x->val) {
        fail(x, "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < x->n_buf; i++) {
        x->buf[i].p = ir_param_at(k, ir_buffer_param(k, i));
        if (!x->buf[i].p || !x->buf[i].p->is_buffer) {
            fail(x, "buffer %u has no parameter", i);
            return -1;
        }
    }
    for (uint32_t i = 0; i < x->n_shm; i++) {
        x->shm[i].d = ir_shared_at(k, i);
        if (!x->shm[i].d) {
            fail(x, "workgroup array %u missing", i);
            return -1;
        }
    }

    uint32_t wg[3];
    ir_val wg_spec = IR_NONE;
    ir_workgroup(k, wg, &wg_spec);

    scan_frags(x, ir_kernel_body(k), 0);
    check_frags(x, ir_kernel_body(k), 0);
    uint32_t fn_type = spv_b_type(b, SpvOpTypeFunction, (uint32_t[]){t_void(x)}, 1);
    uint32_t main_fn = spv_b_id(b);
    name(x, main_fn, "main");
    for (uint32_t i = 0; i < x->n_buf && !x->failed; i++) buf_view(x, i, 1);
    if (!x->failed) declare_push_constants(x);
    if (!x->failed) declare_specs(x);
    if (!x->failed) declare_shared(x);
    if (!x->failed) declare_constants(x);

    /* workgroup size */
    uint32_t spec_id = 0;
    if (!x->failed) {
        if (wg_spec != IR_NONE) {
            const ir_inst *d = ir_def(k, wg_spec);
            ir_scalar s;
            uint32_t n;
            if (!d || d->op != IR_OP_SPEC || !tinfo(x, d->type, &s, &n) || n != 1 || (s != IR_U32 && s != IR_I32)) {
                fail(x, "the workgroup size spec constant must be an i32/u32 spec constant");
            } else {
                spec_id = V(x, wg_spec);
                for (uint32_t i = 0; i < ir_n_specs(k); i++)
                    if (ir_spec_at(k, i)->value == wg_spec) wg[0] = (uint32_t)ir_spec_at(k, i)->dflt;
                wg[1] = wg[2] = 1;
            }
        }
        uint64_t inv = (uint64_t)wg[0] * wg[1] * wg[2];
        if (!inv)
            fail(x, "workgroup size %ux%ux%u is empty", wg[0], wg[1], wg[2]);
        else if (x->c->max_workgroup && inv > x->c->max_workgroup)
            fail(x, "workgroup %ux%ux%u has %llu invocations; caps.max_workgroup is %u", wg[0], wg[1], wg[2],
                 (unsigned long long)inv, x->c->max_workgroup);
    }

    /* the function */
    if (!x->failed) {
        spv_b_emitv(b, SPV_SEC_FUNCTION, SpvOpFunction, 4, t_void(x), main_fn, SpvFunctionControlMaskNone, fn_type);
        op_label(x, spv_b_id(b));
        load_push_constants(x);
        emit_region(x, ir_kernel_body(k));
        x->cur = NULL;
        spv_b_emitv(b, SPV_SEC_FUNCTION, SpvOpReturn, 0);
        spv_b_emitv(b, SPV_SEC_FUNCTION, SpvOpFunctionEnd, 0);
    }
    if (x->failed) return -1;
    decorate_buffers(x);
    if (x->vulkan_mm) spv_b_capability(b, SpvCapabilityVulkanMemoryModel);
    spv_b_emitv(b, SPV_SEC_MEMORY_MODEL, SpvOpMemoryModel, 2, SpvAddressingModelLogical,
                x->vulkan_mm ? SpvMemoryModelVulkan : SpvMemoryModelGLSL450);

    uint32_t pre[2] = {SpvExecutionModelGLCompute, main_fn};
    spv_b_emit_str(b, SPV_SEC_ENTRY_POINT, SpvOpEntryPoint, pre, 2, "main", x->iface, x->n_iface);
    if (spec_id)
        spv_b_emitv(b, SPV_SEC_EXEC_MODE, SpvOpExecutionModeId, 5, main_fn, SpvExecutionModeLocalSizeId, spec_id,
                    c_u32(x, 1), c_u32(x, 1));
    else
        spv_b_emitv(b, SPV_SEC_EXEC_MODE, SpvOpExecutionMode, 5, main_fn, SpvExecutionModeLocalSize, wg[0], wg[1], wg[2]);

    if (spv_b_finish(b, SPV_VERSION_1_6, &out->words, &out->n)) {
        fail(x, "out of memory");
        return -1;
    }
    return 0;
}

int spv_emit(const ir_kernel *k, const rt_caps *c, spv_module *out, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!out) return -1;
    out->words = NULL;
    out->n = 0;
    if (!k || !c) {
        if (err && errlen) snprintf(err, errlen, "spirv: no kernel or no caps");
        return -1;
    }
    char verr[256];
    if (ir_verify(k, verr, sizeof verr)) {
        if (err && errlen) snprintf(err, errlen, "spirv: kernel '%s' does not verify: %s", ir_kernel_name(k), verr);
        return -1;
    }
    ctx x;
    memset(&x, 0, sizeof x);
    x.k = k;
    x.c = c;
    x.err = err;
    x.errlen = errlen;
    x.f16_native = c->f16_arith;
    spv_b_init(&x.b);
    int rc = emit_module(&x, out);
    if (x.b.oom && !x.failed) fail(&x, "out of memory");
    if (x.failed) rc = -1;
    if (rc) spv_module_free(out);
    spv_b_free(&x.b);
    free(x.val);
    free(x.buf);
    free(x.shm);
    free(x.pc_member);
    free(x.iface);
    return rc;
}

void spv_module_free(spv_module *m) {
    if (!m) return;
    free(m->words);
    m->words = NULL;
    m->n = 0;
}
