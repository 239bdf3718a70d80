/* The verifier: per-op typing rules (also run by the builder before it appends), and the
 * structural walk (scopes, yields, uniform barriers, declarations).
 *
 * Barrier uniformity is checked conservatively: a value is "divergent" when it depends,
 * through operands, loop-carried values or if-results, on an id other than GROUP,
 * NUM_GROUPS, SG_SIZE and CLUSTER_RANK (the ids every invocation of a workgroup shares),
 * or on an atomic's result; one that depends on WARPGROUP, and on nothing divergent, is
 * uniform within a warpgroup, which is what wg.mma and wg.wait need. A barrier inside an if whose condition is divergent, or inside a for
 * whose bounds or step are divergent, is refused, even where the data would in fact
 * agree; loads are taken as uniform when their index is (a racing write is a bug of its
 * own). */
#include "base/error.h"
#include "ir/ir_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- per-op rules ----------------------------------------------------------------------- */

typedef struct ck {
    const ir_kernel *k;
    const ir_inst *in;
    char *msg;
    size_t len;
} ck;

static bool bad(ck *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool bad(ck *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, c->len, fmt, ap);
    va_end(ap);
    return false;
}

static ir_type ty(ck *c, uint32_t i) { return ir_type_of(c->k, c->in->operand[i]); }

static const char *tname(ck *c, ir_type t, char *buf) {
    ir_type_str(c->k, t, buf, 48);
    return buf;
}

static bool nops(ck *c, uint32_t n) {
    if (c->in->n_operand != n || (n && !c->in->operand))
        return bad(c, "%s takes %u operands, has %u", ir_op_name(c->in->op), n, c->in->n_operand);
    return true;
}

/* Scalar or vector with its element and lanes. */
static bool sv(ck *c, ir_type t, ir_scalar *e, uint32_t *l) { return ir_type_elem(c->k, t, e, l); }

static bool is_u32(ck *c, ir_type t) {
    const ir_type_desc *d = ir_type_get(c->k, t);
    return d && d->kind == IR_T_SCALAR && d->elem == IR_U32;
}

static bool is_scalar(ck *c, ir_type t, ir_scalar s) {
    const ir_type_desc *d = ir_type_get(c->k, t);
    return d && d->kind == IR_T_SCALAR && d->elem == s;
}

static bool same_types(ck *c, uint32_t from, uint32_t to) {
    char a[48], b[48];
    for (uint32_t i = from; i < to; i++)
        if (ty(c, i) != ty(c, from))
            return bad(c, "operands must have one type (%s, %s)", tname(c, ty(c, from), a), tname(c, ty(c, i), b));
    return true;
}

static bool result_is(ck *c, ir_type want) {
    char a[48], b[48];
    if (c->in->type != want || !want)
        return bad(c, "result type is %s, expected %s", tname(c, c->in->type, a), tname(c, want, b));
    return true;
}

/* The (scalar or vector) type of elem with lanes, if the kernel has it. */
static ir_type find_sv(ck *c, ir_scalar e, uint32_t lanes) {
    ir_type_desc d = { .kind = lanes == 1 ? IR_T_SCALAR : IR_T_VECTOR, .elem = e, .lanes = lanes };
    return ir_type_find(c->k, &d);
}

static bool index_u32(ck *c, uint32_t i, const char *what) {
    char a[48];
    if (!is_u32(c, ty(c, i)))
        return bad(c, "%s must be u32, is %s", what, tname(c, ty(c, i), a));
    return true;
}

/* Buffer or workgroup array: its element, after the access check. */
static bool target(ck *c, bool shm, int64_t idx, unsigned need, ir_scalar *elem) {
    if (shm) {
        const ir_shared_decl *s = idx >= 0 && idx <= UINT32_MAX ? ir_shared_at(c->k, (uint32_t)idx) : NULL;
        if (!s)
            return bad(c, "no workgroup array %lld", (long long)idx);
        *elem = s->elem;
        return true;
    }
    if (idx < 0 || idx >= c->k->n_buffers)
        return bad(c, "no buffer %lld", (long long)idx);
    const ir_param *p = &c->k->params[c->k->buffers[idx]];
    if ((need & IR_READ) && !(p->access & IR_READ))
        return bad(c, "buffer @%s is not readable (IR_READ)", p->name);
    if ((need & IR_WRITE) && !(p->access & IR_WRITE))
        return bad(c, "buffer @%s is not writable (IR_WRITE)", p->name);
    *elem = p->elem;
    return true;
}

static bool lanes_ok(ck *c, int64_t lanes) {
    if (lanes != 1 && lanes != 2 && lanes != 4)
        return bad(c, "memory accesses take 1, 2 or 4 lanes, not %lld", (long long)lanes);
    return true;
}

/* A stored value: the element or a vector of it, as wide as imm[1] says. */
static bool stored_value(ck *c, uint32_t i, ir_scalar elem) {
    ir_scalar e;
    uint32_t l;
    char a[48];
    if (!sv(c, ty(c, i), &e, &l) || e != elem)
        return bad(c, "stored value is %s, the array holds %s", tname(c, ty(c, i), a), ir_scalar_name(elem));
    if (!lanes_ok(c, l))
        return false;
    if (c->in->imm[1] != l)
        return bad(c, "lanes %lld differ from the value's %u", (long long)c->in->imm[1], l);
    return true;
}

static bool loaded_type(ck *c, ir_scalar elem) {
    if (!lanes_ok(c, c->in->imm[1]))
        return false;
    return result_is(c, find_sv(c, elem, (uint32_t)c->in->imm[1]));
}

static bool arith(ck *c, bool ints, bool bools, bool floats, const char *what) {
    ir_scalar e;
    uint32_t l;
    char a[48];
    if (!sv(c, c->in->type, &e, &l))
        return bad(c, "%s takes %s, not %s", ir_op_name(c->in->op), what, tname(c, c->in->type, a));
    bool ok = (ints && ir_scalar_is_int(e)) || (bools && e == IR_BOOL) || (floats && ir_scalar_is_float(e));
    if (!ok)
        return bad(c, "%s takes %s, not %s", ir_op_name(c->in->op), what, tname(c, c->in->type, a));
    for (uint32_t i = 0; i < c->in->n_operand; i++)
        if (!result_is(c, ty(c, i)))
            return bad(c, "operands and result must have one type");
    return true;
}

static bool convert_ok(ir_scalar f, ir_scalar t) {
    if (ir_scalar_is_int(f) && ir_scalar_is_int(t))
        return true;
    if ((ir_scalar_is_int(f) && t == IR_F32) || (f == IR_F32 && ir_scalar_is_int(t)))
        return true;
    if ((f == IR_F32 && (t == IR_F16 || t == IR_BF16)) || ((f == IR_F16 || f == IR_BF16) && t == IR_F32))
        return true;
    return false;
}

static bool frag_of(ck *c, ir_type t, ir_frag_use use, const ir_type_desc **out) {
    const ir_type_desc *d = ir_type_get(c->k, t);
    static const char *const uses[] = { "A", "B", "ACC" };
    char a[48];
    if (!d || d->kind != IR_T_FRAG || d->use != use)
        return bad(c, "expected an %s fragment, got %s", uses[use], tname(c, t, a));
    *out = d;
    return true;
}

static bool check(ck *c) {
    const ir_inst *in = c->in;
    const ir_kernel *k = c->k;
    char a[48], b[48];
    ir_scalar e, e2;
    uint32_t l, l2;
    if ((unsigned)in->op >= IR_OP_COUNT)
        return bad(c, "unknown op %d", (int)in->op);
    if (in->n_operand && !in->operand)
        return bad(c, "operands missing");
    if (ir_op_has_result(in->op)) {
        const char *why = ir_type_problem(ir_type_get(k, in->type));
        if (why)
            return bad(c, "result type: %s", why);
    }
    switch (in->op) {
    case IR_OP_CONST: {
        if (!nops(c, 0))
            return false;
        const ir_type_desc *d = ir_type_get(k, in->type);
        int64_t v = in->imm[0];
        if (d->kind == IR_T_FRAG)
            return bad(c, "constants are scalars (or, lowered, vectors)");
        switch (d->elem) {
        case IR_BOOL: return v == 0 || v == 1 ? true : bad(c, "bool constant is 0 or 1");
        case IR_I32: return v >= INT32_MIN && v <= INT32_MAX ? true : bad(c, "i32 constant out of range");
        case IR_U32: case IR_F32: return v >= 0 && v <= UINT32_MAX ? true : bad(c, "32-bit constant out of range");
        default: return bad(c, "constants are bool, i32, u32 or f32");
        }
    }
    case IR_OP_PARAM: {
        const ir_param *p = in->imm[0] >= 0 && in->imm[0] < k->n_params ? &k->params[in->imm[0]] : NULL;
        if (!nops(c, 0))
            return false;
        if (!p || p->is_buffer || p->value != in->result)
            return bad(c, "param %lld is not this scalar parameter", (long long)in->imm[0]);
        return result_is(c, find_sv(c, p->elem, 1));
    }
    case IR_OP_SPEC: {
        const ir_spec *s = in->imm[0] >= 0 && in->imm[0] < k->n_specs ? &k->specs[in->imm[0]] : NULL;
        if (!nops(c, 0))
            return false;
        if (!s || s->value != in->result)
            return bad(c, "spec %lld is not this spec constant", (long long)in->imm[0]);
        return result_is(c, find_sv(c, s->type, 1));
    }
    case IR_OP_ID:
        if (!nops(c, 0))
            return false;
        if (in->imm[0] < 0 || in->imm[0] >= IR_ID_COUNT)
            return bad(c, "unknown id kind %lld", (long long)in->imm[0]);
        if (in->imm[1] < 0 || in->imm[1] > (in->imm[0] >= IR_ID_SG_ID ? 0 : 2))
            return bad(c, "id dimension %lld out of range", (long long)in->imm[1]);
        return result_is(c, find_sv(c, IR_U32, 1));
    case IR_OP_ADD: case IR_OP_SUB: case IR_OP_MUL: case IR_OP_DIV: case IR_OP_REM:
    case IR_OP_MIN: case IR_OP_MAX:
        return nops(c, 2) && same_types(c, 0, 2) && arith(c, true, false, true, "ints or floats");
    case IR_OP_AND: case IR_OP_OR: case IR_OP_XOR:
        return nops(c, 2) && same_types(c, 0, 2) && arith(c, true, true, false, "ints or bools");
    case IR_OP_SHL: case IR_OP_SHR:
        return nops(c, 2) && same_types(c, 0, 2) && arith(c, true, false, false, "ints");
    case IR_OP_NEG:
        return nops(c, 1) && arith(c, true, false, true, "ints or floats");
    case IR_OP_NOT:
        return nops(c, 1) && arith(c, true, true, false, "ints or bools");
    case IR_OP_ABS:
        if (!nops(c, 1) || !arith(c, true, false, true, "signed ints or floats"))
            return false;
        sv(c, in->type, &e, &l);
        return ir_scalar_is_int(e) && !ir_scalar_is_signed(e) ? bad(c, "abs takes signed ints or floats") : true;
    case IR_OP_EXP: case IR_OP_LOG: case IR_OP_SQRT: case IR_OP_RSQRT: case IR_OP_TANH:
    case IR_OP_SIN: case IR_OP_COS: case IR_OP_FLOOR: case IR_OP_ROUNDEVEN:
        if (!nops(c, 1) || !arith(c, false, false, true, "f32"))
            return false;
        sv(c, in->type, &e, &l);
        return e == IR_F32 ? true : bad(c, "%s takes f32, not %s", ir_op_name(in->op), tname(c, in->type, a));
    case IR_OP_FMA:
        if (!nops(c, 3) || !same_types(c, 0, 3) || !arith(c, false, false, true, "f32 or f16"))
            return false;
        sv(c, in->type, &e, &l);
        return e == IR_F32 || e == IR_F16 ? true : bad(c, "fma takes f32 or f16, not %s", tname(c, in->type, a));
    case IR_OP_CMP:
        if (!nops(c, 2) || !same_types(c, 0, 2))
            return false;
        if (in->imm[0] < IR_EQ || in->imm[0] > IR_GE)
            return bad(c, "unknown comparison %lld", (long long)in->imm[0]);
        if (!sv(c, ty(c, 0), &e, &l))
            return bad(c, "cmp takes scalars or vectors, not %s", tname(c, ty(c, 0), a));
        if (e == IR_BOOL && in->imm[0] != IR_EQ && in->imm[0] != IR_NE)
            return bad(c, "bools compare only eq/ne");
        return result_is(c, find_sv(c, IR_BOOL, l));
    case IR_OP_SELECT:
        if (!nops(c, 3) || !same_types(c, 1, 3))
            return false;
        if (!sv(c, ty(c, 1), &e, &l))
            return bad(c, "select takes scalars or vectors, not %s", tname(c, ty(c, 1), a));
        if (!sv(c, ty(c, 0), &e2, &l2) || e2 != IR_BOOL || (l2 != 1 && l2 != l))
            return bad(c, "select condition must be bool (or a bool vector as wide), is %s", tname(c, ty(c, 0), a));
        return result_is(c, ty(c, 1));
    case IR_OP_CONVERT:
        if (!nops(c, 1))
            return false;
        if (!sv(c, ty(c, 0), &e, &l) || !sv(c, in->type, &e2, &l2) || l != l2 || e == e2 || !convert_ok(e, e2))
            return bad(c, "convert from %s to %s is not allowed", tname(c, ty(c, 0), a), tname(c, in->type, b));
        if (in->imm[0] != 0 && !(in->imm[0] == 1 && e == IR_F32 && (e2 == IR_F16 || e2 == IR_BF16)))
            return bad(c, "convert.exact narrows f32 to f16 or bf16");
        return true;
    case IR_OP_BITCAST:
        if (!nops(c, 1))
            return false;
        if (!sv(c, ty(c, 0), &e, &l) || !sv(c, in->type, &e2, &l2) || e == IR_BOOL || e2 == IR_BOOL)
            return bad(c, "bitcast takes non-bool scalars or vectors (%s to %s)", tname(c, ty(c, 0), a),
                       tname(c, in->type, b));
        if (ir_scalar_bits(e) * l != ir_scalar_bits(e2) * l2 || ty(c, 0) == in->type)
            return bad(c, "bitcast needs another type of the same width (%s to %s)", tname(c, ty(c, 0), a),
                       tname(c, in->type, b));
        return true;
    case IR_OP_VEC:
        if (!sv(c, in->type, &e, &l) || l < 2)
            return bad(c, "vec makes a vector, not %s", tname(c, in->type, a));
        if (!nops(c, l))
            return false;
        for (uint32_t i = 0; i < l; i++)
            if (!is_scalar(c, ty(c, i), e))
                return bad(c, "vec lane %u is %s, expected %s", i, tname(c, ty(c, i), a), ir_scalar_name(e));
        return true;
    case IR_OP_EXTRACT:
        if (!nops(c, 1))
            return false;
        if (!sv(c, ty(c, 0), &e, &l) || l < 2)
            return bad(c, "extract takes a vector, not %s", tname(c, ty(c, 0), a));
        if (in->imm[0] < 0 || in->imm[0] >= l)
            return bad(c, "lane %lld out of 0..%u", (long long)in->imm[0], l - 1);
        return result_is(c, find_sv(c, e, 1));
    case IR_OP_LOAD:
        return nops(c, 1) && target(c, false, in->imm[0], IR_READ, &e) && index_u32(c, 0, "index") &&
               loaded_type(c, e);
    case IR_OP_LOAD_MASKED:
        if (!nops(c, 3) || !target(c, false, in->imm[0], IR_READ, &e) || !index_u32(c, 0, "index") ||
            !index_u32(c, 1, "mask limit"))
            return false;
        if (!is_scalar(c, ty(c, 2), e))
            return bad(c, "fallback must be %s (the element type), is %s", ir_scalar_name(e), tname(c, ty(c, 2), a));
        return loaded_type(c, e);
    case IR_OP_STORE:
        return nops(c, 2) && target(c, false, in->imm[0], IR_WRITE, &e) && index_u32(c, 0, "index") &&
               stored_value(c, 1, e);
    case IR_OP_STORE_MASKED:
        return nops(c, 3) && target(c, false, in->imm[0], IR_WRITE, &e) && index_u32(c, 0, "index") &&
               index_u32(c, 2, "mask limit") && stored_value(c, 1, e);
    case IR_OP_SHM_LOAD:
        return nops(c, 1) && target(c, true, in->imm[0], 0, &e) && index_u32(c, 0, "index") && loaded_type(c, e);
    case IR_OP_SHM_STORE:
        return nops(c, 2) && target(c, true, in->imm[0], 0, &e) && index_u32(c, 0, "index") &&
               stored_value(c, 1, e);
    case IR_OP_ATOMIC: {
        if (!nops(c, 2))
            return false;
        if (in->imm[2] != 0 && in->imm[2] != 1)
            return bad(c, "atomic shm flag is 0 or 1");
        if (!target(c, in->imm[2] == 1, in->imm[0], IR_READ | IR_WRITE, &e) || !index_u32(c, 0, "index"))
            return false;
        if (!is_scalar(c, ty(c, 1), e))
            return bad(c, "atomic value is %s, the array holds %s", tname(c, ty(c, 1), a), ir_scalar_name(e));
        switch (in->imm[1]) {
        case IR_ATOMIC_ADD: case IR_ATOMIC_XCHG:
            if (e != IR_I32 && e != IR_U32 && e != IR_F32)
                return bad(c, "atomic %s takes i32, u32 or f32, not %s", in->imm[1] ? "xchg" : "add",
                           ir_scalar_name(e));
            break;
        case IR_ATOMIC_MIN: case IR_ATOMIC_MAX:
            if (e != IR_I32 && e != IR_U32)
                return bad(c, "atomic min/max takes i32 or u32, not %s", ir_scalar_name(e));
            break;
        default:
            return bad(c, "unknown atomic op %lld", (long long)in->imm[1]);
        }
        return result_is(c, ty(c, 1));
    }
    case IR_OP_BARRIER: case IR_OP_FENCE: case IR_OP_ASYNC_COMMIT:
        return nops(c, 0);
    case IR_OP_ASYNC_WAIT:
        if (!nops(c, 0))
            return false;
        if (in->imm[0] < 0 || in->imm[0] > 7)
            return bad(c, "async.wait leaves 0..7 groups pending, not %lld", (long long)in->imm[0]);
        return true;
    case IR_OP_ASYNC_COPY: {
        ir_scalar es;
        if (!nops(c, 3) || !target(c, true, in->imm[0], 0, &e) || !target(c, false, in->imm[1], IR_READ, &es) ||
            !index_u32(c, 0, "destination index") || !index_u32(c, 1, "source index") || !index_u32(c, 2, "limit"))
            return false;
        if (e != es)
            return bad(c, "async.copy from %s into %s", ir_scalar_name(es), ir_scalar_name(e));
        uint64_t bytes = (uint64_t)(ir_scalar_bits(e) / 8) * (uint64_t)(in->imm[2] > 0 ? in->imm[2] : 0);
        if (bytes != 4 && bytes != 8 && bytes != 16)
            return bad(c, "async.copy moves 4, 8 or 16 bytes, not %lld elements of %s", (long long)in->imm[2],
                       ir_scalar_name(e));
        return true;
    }
    case IR_OP_SG_REDUCE:
        if (!nops(c, 1))
            return false;
        if (in->imm[0] < IR_REDUCE_ADD || in->imm[0] > IR_REDUCE_MAX)
            return bad(c, "unknown reduction %lld", (long long)in->imm[0]);
        if (!sv(c, ty(c, 0), &e, &l) || l != 1 || (e != IR_I32 && e != IR_U32 && e != IR_F32))
            return bad(c, "subgroup reduce takes i32, u32 or f32, not %s", tname(c, ty(c, 0), a));
        return result_is(c, ty(c, 0));
    case IR_OP_SG_SHUFFLE: case IR_OP_SG_SHUFFLE_XOR: case IR_OP_SG_BROADCAST:
        if (!nops(c, 2))
            return false;
        if (!sv(c, ty(c, 0), &e, &l) || (e != IR_I32 && e != IR_U32 && e != IR_F32))
            return bad(c, "%s takes i32, u32, f32 or vectors of them, not %s", ir_op_name(in->op),
                       tname(c, ty(c, 0), a));
        if (!index_u32(c, 1, in->op == IR_OP_SG_SHUFFLE_XOR ? "lane mask" : "lane"))
            return false;
        return result_is(c, ty(c, 0));
    case IR_OP_FRAG_FILL: {
        const ir_type_desc *d = ir_type_get(k, in->type);
        if (!nops(c, 1))
            return false;
        if (!d || d->kind != IR_T_FRAG)
            return bad(c, "frag.fill makes a fragment, not %s", tname(c, in->type, a));
        if (!is_scalar(c, ty(c, 0), d->elem))
            return bad(c, "fill value is %s, the fragment holds %s", tname(c, ty(c, 0), a), ir_scalar_name(d->elem));
        return true;
    }
    case IR_OP_FRAG_LOAD: case IR_OP_FRAG_STORE: {
        bool st = in->op == IR_OP_FRAG_STORE;
        if (!nops(c, st ? 3 : 2))
            return false;
        if (in->imm[1] < 0 || in->imm[1] > (IR_FRAG_ROW_MAJOR | IR_FRAG_ALIGNED16) || (in->imm[2] != 0 && in->imm[2] != 1))
            return bad(c, "fragment flags are row_major and aligned16, the shm flag 0 or 1");
        if ((in->imm[1] & IR_FRAG_ALIGNED16) && (st || in->imm[2]))
            return bad(c, "aligned16 is for fragment loads from buffers");
        if (!target(c, in->imm[2] == 1, in->imm[0], st ? IR_WRITE : IR_READ, &e))
            return false;
        ir_type ft = st ? ty(c, 0) : in->type;
        const ir_type_desc *d = ir_type_get(k, ft);
        if (!d || d->kind != IR_T_FRAG)
            return bad(c, "%s needs a fragment, not %s", ir_op_name(in->op), tname(c, ft, a));
        if (d->elem != e)
            return bad(c, "fragment holds %s, the array %s", ir_scalar_name(d->elem), ir_scalar_name(e));
        if ((in->imm[1] & IR_FRAG_ALIGNED16) && ir_scalar_bits(e) != 16)
            return bad(c, "aligned16 fragment loads are of 16-bit buffers");
        return index_u32(c, st, "base") && index_u32(c, st + 1, "stride");
    }
    case IR_OP_FRAG_LOAD_TENSOR: {
        if (!nops(c, 4))
            return false;
        if (in->imm[1] != 0 && in->imm[1] != IR_FRAG_TRANSPOSED)
            return bad(c, "frag.load_tensor's flag is transposed or nothing");
        if (!target(c, false, in->imm[0], IR_READ, &e))
            return false;
        const ir_type_desc *d = ir_type_get(k, in->type);
        if (!d || d->kind != IR_T_FRAG || !d->wg || d->use == IR_FRAG_ACC)
            return bad(c, "frag.load_tensor makes a workgroup A or B fragment, not %s", tname(c, in->type, a));
        if (d->elem != e)
            return bad(c, "fragment holds %s, the buffer %s", ir_scalar_name(d->elem), ir_scalar_name(e));
        if ((in->imm[1] & IR_FRAG_TRANSPOSED) && d->use != IR_FRAG_B)
            return bad(c, "frag.load_tensor transposes B fragments only");
        return index_u32(c, 0, "row0") && index_u32(c, 1, "col0") && index_u32(c, 2, "n_rows") &&
               index_u32(c, 3, "n_cols");
    }
    case IR_OP_FRAG_MMA: {
        const ir_type_desc *fa = NULL, *fb = NULL, *fc = NULL;
        if (!nops(c, 3) || !frag_of(c, ty(c, 0), IR_FRAG_A, &fa) || !frag_of(c, ty(c, 1), IR_FRAG_B, &fb) ||
            !frag_of(c, ty(c, 2), IR_FRAG_ACC, &fc))
            return false;
        if (fa->m != fb->m || fa->m != fc->m || fa->n != fb->n || fa->n != fc->n || fa->k != fb->k || fa->k != fc->k)
            return bad(c, "frag.mma shapes differ (A m%un%uk%u, B m%un%uk%u, ACC m%un%uk%u)", fa->m, fa->n, fa->k,
                       fb->m, fb->n, fb->k, fc->m, fc->n, fc->k);
        if (fa->elem != fb->elem)
            return bad(c, "A and B hold %s and %s", ir_scalar_name(fa->elem), ir_scalar_name(fb->elem));
        if (fa->wg != fb->wg || fa->wg != fc->wg)
            return bad(c, "frag.mma mixes workgroup and subgroup fragments");
        return result_is(c, ty(c, 2));
    }
    case IR_OP_WG_MMA: {
        const ir_type_desc *fc = NULL;
        if (!nops(c, 7) || !frag_of(c, ty(c, 0), IR_FRAG_ACC, &fc) || !target(c, true, in->imm[0], 0, &e) ||
            !target(c, true, in->imm[1], 0, &e2))
            return false;
        if (fc->m != 64 || fc->k != 16 || fc->n < 8 || fc->n > 256 || fc->n % 8 || fc->elem != IR_F32)
            return bad(c, "wg.mma accumulates m64 x n x k16 in f32 (n 8..256, a multiple of 8), not m%un%uk%u %s",
                       fc->m, fc->n, fc->k, ir_scalar_name(fc->elem));
        if (e != e2 || (e != IR_F16 && e != IR_BF16))
            return bad(c, "wg.mma multiplies f16 or bf16 arrays of one type, not %s by %s", ir_scalar_name(e),
                       ir_scalar_name(e2));
        int64_t steps = in->imm[2] & IR_WG_MMA_STEPS;
        if (steps < 1 || steps > 8 || (in->imm[2] & ~(int64_t)(IR_WG_MMA_STEPS | IR_WG_MMA_ASYNC | IR_WG_MMA_SW128)))
            return bad(c, "wg.mma takes 1..8 k steps and the flags async and sw128, not %#llx",
                       (long long)in->imm[2]);
        static const char *const what[6] = { "A base", "A sbo", "A lbo", "B base", "B sbo", "B lbo" };
        for (uint32_t i = 1; i < 7; i++)
            if (!index_u32(c, i, what[i - 1]))
                return false;
        return result_is(c, ty(c, 0));
    }
    case IR_OP_FRAG_MUL_ADD: {
        const ir_type_desc *fc = NULL;
        if (!nops(c, 3) || !frag_of(c, ty(c, 2), IR_FRAG_ACC, &fc) || !same_types(c, 0, 3))
            return false;
        if (fc->wg || fc->elem != IR_F32)
            return bad(c, "frag.mul_add takes subgroup f32 accumulators, not %s", tname(c, ty(c, 2), a));
        return result_is(c, ty(c, 2));
    }
    case IR_OP_FRAG_ELEMS: {
        const ir_type_desc *fc = NULL;
        if (!nops(c, 1) || !frag_of(c, ty(c, 0), IR_FRAG_ACC, &fc))
            return false;
        if (fc->m != 16 || fc->n != 8 || fc->k != 16 || fc->elem != IR_F32)
            return bad(c, "frag.elems takes a 16x8x16 f32 accumulator, not m%un%uk%u", fc->m, fc->n, fc->k);
        return result_is(c, find_sv(c, IR_F32, 4));
    }
    case IR_OP_FRAG_FROM_ELEMS: {
        const ir_type_desc *d = ir_type_get(k, in->type);
        if (!d || d->kind != IR_T_FRAG || d->m != 16 || d->n != 8 || d->k != 16)
            return bad(c, "frag.from_elems makes a 16x8x16 fragment");
        bool acc = d->use == IR_FRAG_ACC;
        if (acc ? d->elem != IR_F32 : d->elem != IR_F16 && d->elem != IR_BF16)
            return bad(c, "frag.from_elems: an f32 ACC or an f16/bf16 A or B");
        const ir_type_desc *w = in->n_operand == 1 ? ir_type_get(k, ty(c, 0)) : NULL;
        if (!acc && w && w->kind == IR_T_VECTOR && w->elem == IR_U32) /* the registers' words */
            return w->lanes == (d->use == IR_FRAG_A ? 4u : 2u)
                       ? true
                       : bad(c, "frag.from_elems: an A takes 4 words, a B 2, not %u", w->lanes);
        if (!nops(c, d->use == IR_FRAG_A ? 2 : 1))
            return false;
        for (uint32_t i = 0; i < in->n_operand; i++) {
            const ir_type_desc *v = ir_type_get(k, ty(c, i));
            if (!v || v->kind != IR_T_VECTOR || v->lanes != 4 || v->elem != d->elem)
                return bad(c, "frag.from_elems takes vectors of 4 %s, not %s", ir_scalar_name(d->elem),
                           tname(c, ty(c, i), a));
        }
        return true;
    }
    case IR_OP_FRAG_PAIR_SUB:
        if (!nops(c, 2) || !same_types(c, 0, 2) || !sv(c, ty(c, 0), &e, &l) || e != IR_U32)
            return bad(c, "frag.pair_sub takes u32 words of one type");
        if (in->imm[0] != IR_F16 && in->imm[0] != IR_BF16)
            return bad(c, "frag.pair_sub subtracts f16 or bf16 pairs, not %lld", (long long)in->imm[0]);
        return result_is(c, ty(c, 0));
    case IR_OP_WG_WAIT: {
        const ir_type_desc *fc = NULL;
        if (!nops(c, 1) || !frag_of(c, ty(c, 0), IR_FRAG_ACC, &fc))
            return false;
        if (fc->m != 64 || fc->k != 16)
            return bad(c, "wg.wait takes a warpgroup's m64 accumulator, not m%un%uk%u", fc->m, fc->n, fc->k);
        if (in->imm[0] < 0 || in->imm[0] > 7)
            return bad(c, "wg.wait leaves 0..7 groups pending, not %lld", (long long)in->imm[0]);
        return result_is(c, ty(c, 0));
    }
    case IR_OP_GRID_WAIT: case IR_OP_CLUSTER_SYNC:
        return nops(c, 0);
    case IR_OP_PREFETCH:
        if (!nops(c, 1) || !target(c, false, in->imm[0], IR_READ, &e) || !index_u32(c, 0, "index"))
            return false;
        if (in->imm[1] < 16 || in->imm[1] > (1 << 24) || in->imm[1] % 16)
            return bad(c, "prefetch of %lld bytes: a multiple of 16 in 16..2^24", (long long)in->imm[1]);
        return true;
    case IR_OP_MBAR_INIT: case IR_OP_MBAR_EXPECT: case IR_OP_MBAR_WAIT: case IR_OP_MBAR_ARRIVE: {
        static const char *const second[] = { "count", "cta", "bytes", "parity" };
        uint32_t n = in->op == IR_OP_MBAR_ARRIVE ? (in->imm[1] ? 2 : 1) : 2;
        if ((in->op == IR_OP_MBAR_ARRIVE && in->imm[1] != 0 && in->imm[1] != 1) || !nops(c, n) ||
            !target(c, true, in->imm[0], 0, &e) || !index_u32(c, 0, "barrier index"))
            return false;
        if (e != IR_U64)
            return bad(c, "memory barriers live in a u64 workgroup array, not %s", ir_scalar_name(e));
        return n == 1 || index_u32(c, 1, second[in->op - IR_OP_MBAR_INIT]);
    }
    case IR_OP_TMA_LOAD: {
        const ir_tensor_map_decl *m = in->imm[1] >= 0 && in->imm[1] < k->n_tmaps ? &k->tmaps[in->imm[1]] : NULL;
        if ((in->n_operand != 4 && !nops(c, 5)) || !target(c, true, in->imm[0], 0, &e) ||
            !target(c, true, in->imm[2], 0, &e2))
            return false;
        if (!m)
            return bad(c, "no tensor map %lld", (long long)in->imm[1]);
        if (in->n_operand == 5 && ir_cluster(k) == 1)
            return bad(c, "a multicast tma.load needs clusters (ir_set_cluster first)");
        if (e != k->params[k->buffers[m->buf]].elem || e2 != IR_U64)
            return bad(c, "tma.load copies into an array of its tensor's type, completing on a u64 barrier array");
        static const char *const what[5] = { "destination index", "inner coordinate", "outer coordinate",
                                             "barrier index", "cta mask" };
        for (uint32_t i = 0; i < in->n_operand; i++)
            if (!index_u32(c, i, what[i]))
                return false;
        return true;
    }
    case IR_OP_FOR: {
        if (in->n_operand < 3 || !in->operand)
            return bad(c, "for takes lo, hi, step and its inits");
        ir_type t = ty(c, 0);
        if (!(is_scalar(c, t, IR_I32) || is_scalar(c, t, IR_U32)) || ty(c, 1) != t || ty(c, 2) != t)
            return bad(c, "for bounds must be one type, i32 or u32 (%s, %s, %s)", tname(c, t, a),
                       tname(c, ty(c, 1), b), tname(c, ty(c, 2), (char[48]){ 0 }));
        const ir_inst *s = ir_def(k, in->operand[2]);
        if (s && s->op == IR_OP_CONST && (s->imm[0] == 0 || (is_scalar(c, t, IR_I32) && s->imm[0] < 0)))
            return bad(c, "for step must be positive");
        return true;
    }
    case IR_OP_IF:
        if (!nops(c, 1))
            return false;
        return is_scalar(c, ty(c, 0), IR_BOOL) ? true
                                               : bad(c, "if condition must be bool, is %s", tname(c, ty(c, 0), a));
    case IR_OP_YIELD:
        return true;
    case IR_OP_COUNT:
        break;
    }
    return bad(c, "unknown op");
}

bool ir_check_op(const ir_kernel *k, const ir_inst *in, char *msg, size_t len) {
    ck c = { .k = k, .in = in, .msg = msg, .len = len };
    if (len)
        msg[0] = 0;
    return check(&c);
}

/* ---- divergence ---------------------------------------------------------------------------- */

typedef struct vs {
    const ir_kernel *k;
    uint8_t *state;  /* per value: 0 not yet defined, 1 in scope, 2 out of scope */
    uint8_t *taint;  /* per value: 0 uniform, 1 uniform within a warpgroup, 2 divergent */
    char *err;       /* the message (the caller's kiln_err) */
    size_t len;
    kiln_code code;  /* invalid input, or out of memory */
    bool failed;
} vs;

static bool val_ok(const vs *s, ir_val v) { return v != IR_NONE && v <= s->k->n_vals; }

enum { UNIFORM, WG_UNIFORM, DIVERGENT }; /* taint levels: the larger of two wins */

static uint8_t tainted(const vs *s, ir_val v) { return val_ok(s, v) ? s->taint[v] : UNIFORM; }

static uint8_t most(uint8_t a, uint8_t b) { return a > b ? a : b; }

static void set_taint(vs *s, ir_val v, uint8_t t, bool *changed) {
    if (val_ok(s, v) && t > s->taint[v]) {
        s->taint[v] = t;
        *changed = true;
    }
}

/* An id's level: the workgroup's own (GROUP, NUM_GROUPS, SG_SIZE, CLUSTER_RANK) are
 * uniform, WARPGROUP within a warpgroup, the rest per invocation. */
static uint8_t id_level(int64_t kind) {
    if (kind == IR_ID_GROUP || kind == IR_ID_NUM_GROUPS || kind == IR_ID_SG_SIZE || kind == IR_ID_CLUSTER_RANK)
        return UNIFORM;
    return kind == IR_ID_WARPGROUP ? WG_UNIFORM : DIVERGENT;
}

static const ir_inst *region_yield(const ir_region *r) {
    if (!r->n || !r->inst || !r->inst[r->n - 1] || r->inst[r->n - 1]->op != IR_OP_YIELD)
        return NULL;
    return r->inst[r->n - 1];
}

static ir_val yielded(const ir_region *r, uint32_t i) {
    const ir_inst *y = region_yield(r);
    return y && i < y->n_operand && y->operand ? y->operand[i] : IR_NONE;
}

/* Marks divergent values; returns whether anything changed. Loops iterate to a fixpoint
 * so a divergence carried around the back edge reaches the loop's block arguments. */
static bool taint_region(vs *s, const ir_region *r, int depth) {
    bool changed = false;
    if (depth > 1000 || !r->inst)
        return false;
    for (uint32_t i = 0; i < r->n; i++) {
        const ir_inst *in = r->inst[i];
        if (!in)
            continue;
        uint8_t t = UNIFORM;
        for (uint32_t j = 0; j < in->n_operand && in->operand; j++)
            t = most(t, tainted(s, in->operand[j]));
        if (in->op == IR_OP_ID)
            t = id_level(in->imm[0]);
        if (in->op == IR_OP_ATOMIC)
            t = DIVERGENT;
        if (in->op == IR_OP_FOR && in->n_region >= 1 && in->block_arg) {
            uint8_t bounds = UNIFORM;
            for (uint32_t j = 0; j < 3 && j < in->n_operand; j++)
                bounds = most(bounds, tainted(s, in->operand[j]));
            bool again = true;
            while (again) {
                again = false;
                set_taint(s, in->block_arg[0], bounds, &again);
                for (uint32_t j = 1; j < in->n_block_arg; j++) {
                    uint8_t tj = most(bounds, tainted(s, yielded(&in->region[0], j - 1)));
                    if (3 + j - 1 < in->n_operand)
                        tj = most(tj, tainted(s, in->operand[3 + j - 1]));
                    set_taint(s, in->block_arg[j], tj, &again);
                }
                again |= taint_region(s, &in->region[0], depth + 1);
                changed |= again;
            }
            for (uint32_t j = 0; j < in->n_results && in->results; j++) {
                uint8_t tj = j + 1 < in->n_block_arg ? most(bounds, tainted(s, in->block_arg[j + 1])) : bounds;
                set_taint(s, in->results[j], tj, &changed);
            }
            continue;
        }
        if (in->op == IR_OP_IF) {
            for (uint32_t g = 0; g < in->n_region && g < 2; g++)
                changed |= taint_region(s, &in->region[g], depth + 1);
            for (uint32_t j = 0; j < in->n_results && in->results; j++) {
                uint8_t tj = most(t, most(tainted(s, yielded(&in->region[0], j)), tainted(s, yielded(&in->region[1], j))));
                set_taint(s, in->results[j], tj, &changed);
            }
            continue;
        }
        set_taint(s, in->result, t, &changed);
    }
    return changed;
}

/* ---- structure ----------------------------------------------------------------------------- */

static bool fail(vs *s, const ir_inst *in, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(vs *s, const ir_inst *in, const char *fmt, ...) {
    if (s->failed)
        return false;
    s->failed = true;
    char rule[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rule, sizeof rule, fmt, ap);
    va_end(ap);
    if (!in) {
        snprintf(s->err, s->len, "%s", rule);
        return false;
    }
    ir_sb b = { 0 };
    ir_sb_inst(&b, s->k, in);
    snprintf(s->err, s->len, "`%s`: %s", b.s ? b.s : ir_op_name(in->op), rule);
    free(b.s);
    return false;
}

static bool define(vs *s, const ir_inst *in, ir_val v, const char *what) {
    if (!val_ok(s, v))
        return fail(s, in, "%s %%%u is not a value", what, v);
    if (s->state[v])
        return fail(s, in, "%%%u is defined more than once", v);
    if (s->k->vals[v].def != in)
        return fail(s, in, "%%%u names another defining instruction", v);
    s->state[v] = 1;
    return true;
}

static bool use(vs *s, const ir_inst *in, ir_val v) {
    if (!val_ok(s, v))
        return fail(s, in, "operand %%%u is not a value", v);
    if (s->state[v] == 1)
        return true;
    if (s->state[v] == 2)
        return fail(s, in, "%%%u is used outside the for/if body that defines it", v);
    return fail(s, in, "%%%u is used before its definition", v);
}

/* Values a region defined leave scope when it ends. */
static void close_scope(vs *s, const ir_region *r) {
    for (uint32_t i = 0; i < r->n; i++) {
        const ir_inst *in = r->inst[i];
        if (!in)
            continue;
        if (val_ok(s, in->result))
            s->state[in->result] = 2;
        for (uint32_t j = 0; j < in->n_results && in->results; j++)
            if (val_ok(s, in->results[j]))
                s->state[in->results[j]] = 2;
    }
}

static bool walk(vs *s, const ir_region *r, const ir_inst *parent, uint8_t divergent, int depth);

/* A region of a construct: walks it and checks its closing yield against types[]. */
static bool walk_body(vs *s, const ir_inst *in, const ir_region *r, const ir_type *types, uint32_t n,
                      uint8_t divergent, int depth) {
    if (!walk(s, r, in, divergent, depth + 1))
        return false;
    const ir_inst *y = region_yield(r);
    if (!y)
        return fail(s, in, "every %s region must end with a yield", ir_op_name(in->op));
    if (y->n_operand != n)
        return fail(s, y, "yields %u values, the %s has %u", y->n_operand, ir_op_name(in->op), n);
    for (uint32_t i = 0; i < n; i++)
        if (ir_type_of(s->k, y->operand[i]) != types[i]) {
            char a[48], b[48];
            ir_type_str(s->k, ir_type_of(s->k, y->operand[i]), a, sizeof a);
            ir_type_str(s->k, types[i], b, sizeof b);
            return fail(s, y, "yield %u is %s, expected %s", i, a, b);
        }
    close_scope(s, r);
    return true;
}

static bool walk_for(vs *s, const ir_inst *in, uint8_t divergent, int depth) {
    uint32_t n = in->n_operand - 3;
    if (in->n_region != 1 || in->n_results != n || in->n_block_arg != n + 1 || !in->block_arg ||
        (n && !in->results))
        return fail(s, in, "a for has one region, %u block arguments and %u results", n + 1, n);
    ir_type *types = malloc((n + 1) * sizeof *types);
    if (!types)
        return s->code = KILN_ERR_NOMEM, fail(s, in, "out of memory");
    bool ok = true;
    for (uint32_t i = 0; i < n && ok; i++)
        types[i] = ir_type_of(s->k, in->operand[3 + i]);
    if (ir_type_of(s->k, in->block_arg[0]) != ir_type_of(s->k, in->operand[0]))
        ok = fail(s, in, "the induction variable must have the bounds' type");
    for (uint32_t i = 0; i < n && ok; i++)
        if (ir_type_of(s->k, in->block_arg[1 + i]) != types[i] || ir_type_of(s->k, in->results[i]) != types[i])
            ok = fail(s, in, "carried value %u must keep its init's type", i);
    for (uint32_t i = 0; i <= n && ok; i++)
        ok = define(s, in, in->block_arg[i], "block argument");
    uint8_t div = most(most(divergent, tainted(s, in->operand[0])), most(tainted(s, in->operand[1]),
                                                                        tainted(s, in->operand[2])));
    if (ok)
        ok = walk_body(s, in, &in->region[0], types, n, div, depth);
    for (uint32_t i = 0; i <= n && ok; i++)
        s->state[in->block_arg[i]] = 2;
    for (uint32_t i = 0; i < n && ok; i++)
        ok = define(s, in, in->results[i], "result");
    free(types);
    return ok;
}

static bool walk_if(vs *s, const ir_inst *in, uint8_t divergent, int depth) {
    uint32_t n = in->n_results;
    if (in->n_region != 2 || (n && !in->results))
        return fail(s, in, "an if has a then and an else region");
    ir_type *types = malloc((n + 1) * sizeof *types);
    if (!types)
        return s->code = KILN_ERR_NOMEM, fail(s, in, "out of memory");
    for (uint32_t i = 0; i < n; i++)
        types[i] = ir_type_of(s->k, in->results[i]);
    uint8_t div = most(divergent, tainted(s, in->operand[0]));
    bool ok = walk_body(s, in, &in->region[0], types, n, div, depth) &&
              walk_body(s, in, &in->region[1], types, n, div, depth);
    for (uint32_t i = 0; i < n && ok; i++)
        ok = define(s, in, in->results[i], "result");
    free(types);
    return ok;
}

/* The result of a wg.mma left in flight (IR_WG_MMA_ASYNC). */
static bool in_flight(const ir_kernel *k, ir_val v) {
    const ir_inst *d = ir_def(k, v);
    return d && d->op == IR_OP_WG_MMA && (d->imm[2] & IR_WG_MMA_ASYNC);
}

static bool walk(vs *s, const ir_region *r, const ir_inst *parent, uint8_t divergent, int depth) {
    if (depth > 1000)
        return fail(s, parent, "constructs nest too deeply");
    if (r->n && !r->inst)
        return fail(s, parent, "region has no instruction array");
    for (uint32_t i = 0; i < r->n; i++) {
        const ir_inst *in = r->inst[i];
        if (!in)
            return fail(s, parent, "region holds a null instruction");
        if ((unsigned)in->op >= IR_OP_COUNT)
            return fail(s, NULL, "unknown op %d", (int)in->op);
        if (in->op == IR_OP_PARAM || in->op == IR_OP_SPEC)
            return fail(s, in, "params and spec constants are defined at entry, not in a region");
        if (in->op == IR_OP_YIELD && (!parent || i + 1 != r->n))
            return fail(s, in, parent ? "yield must end its region" : "yield outside a for/if");
        if (in->n_operand && !in->operand)
            return fail(s, in, "operands missing");
        for (uint32_t j = 0; j < in->n_operand; j++) {
            if (!use(s, in, in->operand[j]))
                return false;
            if (in_flight(s->k, in->operand[j]) && !((in->op == IR_OP_WG_MMA && j == 0) || in->op == IR_OP_WG_WAIT ||
                                                     in->op == IR_OP_YIELD || (in->op == IR_OP_FOR && j >= 3)))
                return fail(s, in, "%%%u is a wg.mma's accumulator still in flight: only wg.mma, wg.wait or a loop "
                                   "carrying it may take it", in->operand[j]);
        }
        char msg[200];
        if (!ir_check_op(s->k, in, msg, sizeof msg))
            return fail(s, in, "%s", msg);
        bool wg_op = in->op == IR_OP_WG_MMA || in->op == IR_OP_WG_WAIT;
        if ((in->op == IR_OP_BARRIER || in->op == IR_OP_CLUSTER_SYNC || wg_op) && divergent > (wg_op ? WG_UNIFORM : UNIFORM))
            return fail(s, in, "%s in control flow that depends on a per-invocation id "
                               "(only GROUP, NUM_GROUPS, SG_SIZE and CLUSTER_RANK ids are uniform%s)",
                        ir_op_name(in->op), wg_op ? "; WARPGROUP within a warpgroup" : "");
        bool has = ir_op_has_result(in->op);
        if (has != (in->result != IR_NONE))
            return fail(s, in, has ? "%s must define a value" : "%s defines no value", ir_op_name(in->op));
        if (has && !define(s, in, in->result, "result"))
            return false;
        if (in->op == IR_OP_FOR && !walk_for(s, in, divergent, depth))
            return false;
        if (in->op == IR_OP_IF && !walk_if(s, in, divergent, depth))
            return false;
        if (in->op != IR_OP_FOR && in->op != IR_OP_IF && (in->n_region || in->n_results || in->n_block_arg))
            return fail(s, in, "only for and if have regions");
    }
    return true;
}

/* Parameters and spec constants: defined at entry, visible everywhere. */
static bool entry(vs *s) {
    const ir_kernel *k = s->k;
    for (uint32_t i = 0; i < k->n_params; i++) {
        const ir_param *p = &k->params[i];
        if (p->is_buffer) {
            if (p->elem == IR_BOOL || (unsigned)p->elem >= IR_SCALAR_COUNT)
                return fail(s, NULL, "buffer @%s: element must be a non-bool scalar", p->name);
            if (!p->access || (p->access & ~(unsigned)(IR_READ | IR_WRITE)))
                return fail(s, NULL, "buffer @%s: access must be IR_READ, IR_WRITE or both", p->name);
            continue;
        }
        const ir_inst *d = ir_def(k, p->value);
        if (!d || d->op != IR_OP_PARAM)
            return fail(s, NULL, "param @%s has no PARAM instruction", p->name);
        char msg[200];
        if (!ir_check_op(k, d, msg, sizeof msg))
            return fail(s, d, "%s", msg);
        if (p->elem != IR_I32 && p->elem != IR_U32 && p->elem != IR_F32)
            return fail(s, d, "scalar parameters are i32, u32 or f32");
        if (!define(s, d, p->value, "param"))
            return false;
    }
    for (uint32_t i = 0; i < k->n_specs; i++) {
        const ir_spec *sp = &k->specs[i];
        const ir_inst *d = ir_def(k, sp->value);
        if (!d || d->op != IR_OP_SPEC)
            return fail(s, NULL, "spec @%s has no SPEC instruction", sp->name);
        char msg[200];
        if (!ir_check_op(k, d, msg, sizeof msg))
            return fail(s, d, "%s", msg);
        if (sp->type != IR_BOOL && sp->type != IR_I32 && sp->type != IR_U32 && sp->type != IR_F32)
            return fail(s, d, "spec constants are bool, i32, u32 or f32");
        if (!define(s, d, sp->value, "spec"))
            return false;
    }
    for (uint32_t i = 0; i < k->n_shared; i++) {
        const ir_shared_decl *sh = &k->shared[i];
        if (sh->elem == IR_BOOL || (unsigned)sh->elem >= IR_SCALAR_COUNT || sh->count == 0)
            return fail(s, NULL, "shared @%s: a non-bool element and a count of at least 1", sh->name);
        if (sh->overlays) {
            const ir_shared_decl *b = sh->overlays <= k->n_shared ? &k->shared[sh->overlays - 1] : NULL;
            if (!b || b == sh || b->overlays ||
                (uint64_t)sh->count * ir_scalar_bits(sh->elem) > (uint64_t)b->count * ir_scalar_bits(b->elem))
                return fail(s, NULL, "shared @%s overlays no array of its own that holds it", sh->name);
        }
    }
    return true;
}

static bool workgroup(vs *s) {
    const ir_kernel *k = s->k;
    if (!k->wg_set)
        return fail(s, NULL, "workgroup size not set");
    uint64_t x = k->wg[0], y = k->wg[1], z = k->wg[2];
    if (k->wg_spec) {
        const ir_inst *d = ir_def(k, k->wg_spec);
        const ir_spec *sp = d && d->op == IR_OP_SPEC ? ir_spec_at(k, (uint32_t)d->imm[0]) : NULL;
        if (!sp || sp->type != IR_U32)
            return fail(s, NULL, "workgroup size %%%u is not a u32 spec constant", k->wg_spec);
        x = (uint64_t)sp->dflt, y = z = 1;
    }
    if (x < 1 || x > 1024 || y < 1 || y > 1024 || z < 1 || z > 1024 || x * y * z > 1024)
        return fail(s, NULL, "workgroup size %llux%llux%llu: each dimension 1..1024, product <= 1024",
                    (unsigned long long)x, (unsigned long long)y, (unsigned long long)z);
    return true;
}

/* What a kernel may do before its grid.wait: compute values and prefetch (no memory
 * access, no barrier), in control flow holding only that. */
static bool early_only(const ir_region *r, int depth) {
    for (uint32_t i = 0; r->inst && i < r->n && depth < 1000; i++) {
        const ir_inst *in = r->inst[i];
        if (!in)
            continue;
        switch (in->op) {
        case IR_OP_FOR: case IR_OP_IF:
            for (uint32_t g = 0; g < in->n_region; g++)
                if (!early_only(&in->region[g], depth + 1))
                    return false;
            break;
        case IR_OP_YIELD: case IR_OP_PREFETCH: case IR_OP_CONST: case IR_OP_ID: case IR_OP_CMP: case IR_OP_SELECT:
        case IR_OP_CONVERT: case IR_OP_BITCAST: case IR_OP_VEC: case IR_OP_EXTRACT: case IR_OP_FMA:
            break;
        default:
            if (in->op < IR_OP_ADD || in->op > IR_OP_ROUNDEVEN)
                return false;
        }
    }
    return true;
}

static uint32_t count_op(const ir_region *r, ir_op op, int depth) {
    uint32_t n = 0;
    for (uint32_t i = 0; r->inst && i < r->n && depth < 1000; i++) {
        const ir_inst *in = r->inst[i];
        if (!in)
            continue;
        n += in->op == op;
        for (uint32_t g = 0; g < in->n_region; g++)
            n += count_op(&in->region[g], op, depth + 1);
    }
    return n;
}

/* One grid.wait at most, in the body's top level, after only early_only work; a
 * multicast tma.load in a kernel of clusters. */
static bool ordering(vs *s) {
    const ir_kernel *k = s->k;
    uint32_t n = count_op(&k->body, IR_OP_GRID_WAIT, 0);
    if (n > 1)
        return fail(s, NULL, "%u grid.waits: a kernel waits for the kernel before it once", n);
    for (uint32_t i = 0; n && i < k->body.n; i++) {
        const ir_inst *in = k->body.inst[i];
        if (!in || in->op != IR_OP_GRID_WAIT)
            continue;
        ir_region before = { k->body.inst, i, i };
        if (!early_only(&before, 0))
            return fail(s, in, "only values, prefetches and control flow of them may come before grid.wait");
        n = 0;
    }
    if (n)
        return fail(s, NULL, "grid.wait belongs in the body's top level, not inside a for or if");
    if (ir_cluster(k) == 1 && count_op(&k->body, IR_OP_CLUSTER_SYNC, 0))
        return fail(s, NULL, "cluster.sync in a kernel without clusters (ir_set_cluster)");
    return true;
}

int ir_verify(const ir_kernel *k, kiln_err *err) {
    kiln_err none;
    if (!err)
        err = &none;
    kiln_err_clear(err);
    if (!k)
        return kiln_fail(err, KILN_ERR_INVALID, "no kernel");
    if (k->failed)
        return kiln_err_wrap(err, &k->error, "builder");
    if (k->n_open)
        return kiln_fail(err, KILN_ERR_INVALID, "%s is still open",
                         k->open[k->n_open - 1].inst->op == IR_OP_IF ? "an if" : "a for");
    vs s = { .k = k, .err = err->msg, .len = sizeof err->msg, .code = KILN_ERR_INVALID };
    s.state = calloc((size_t)k->n_vals + 1, 1);
    s.taint = calloc((size_t)k->n_vals + 1, 1);
    if (!s.state || !s.taint) {
        free(s.state);
        free(s.taint);
        return kiln_fail_oom(err, NULL);
    }
    for (uint32_t t = 1; t < k->n_types; t++) {
        const char *why = ir_type_problem(&k->types[t]);
        if (why) {
            char name[48];
            ir_type_str(k, t, name, sizeof name);
            fail(&s, NULL, "type %s: %s", name, why);
            break;
        }
    }
    if (!s.failed)
        taint_region(&s, &k->body, 0);
    bool ok = !s.failed && entry(&s) && walk(&s, &k->body, NULL, UNIFORM, 0) && workgroup(&s) && ordering(&s);
    free(s.state);
    free(s.taint);
    if (!ok)
        err->code = s.code;
    return ok ? 0 : -1;
}
