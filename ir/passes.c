/* Passes: spec-constant specialization with constant folding, and dead-code removal.
 *
 * Folding must give the bits the device would, so it folds only what IEEE and two's
 * complement pin down: f32 add/sub/mul/div/rem/min/max/neg/abs/floor/fma/compare and
 * int<->f32 conversions, integer arithmetic with wraparound, compares, selects and
 * bitcasts. It leaves to the device: division or remainder by zero (and INT_MIN / -1),
 * shifts by the width or more, out-of-range float-to-int conversions, transcendentals and
 * sqrt (whose precision the targets do not pin), and any f32 operation with a NaN or
 * subnormal operand or result (NaN payloads and denormal flushing differ between
 * devices). Folded constants are always bool, i32, u32 or f32. */
#include "base/error.h"
#include "ir/ir_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------------------- */

/* Values a discarded instruction or region defined no longer exist. */
static void kill_inst(ir_kernel *k, const ir_inst *in);

static void kill_region(ir_kernel *k, const ir_region *r) {
    for (uint32_t i = 0; i < r->n; i++)
        if (r->inst[i])
            kill_inst(k, r->inst[i]);
}

static void kill_val(ir_kernel *k, ir_val v) {
    if (v && v <= k->n_vals)
        k->vals[v].def = NULL;
}

static void kill_inst(ir_kernel *k, const ir_inst *in) {
    kill_val(k, in->result);
    for (uint32_t i = 0; i < in->n_results; i++)
        kill_val(k, in->results[i]);
    for (uint32_t i = 0; i < in->n_block_arg; i++)
        kill_val(k, in->block_arg[i]);
    for (uint32_t g = 0; g < in->n_region && g < 2; g++)
        kill_region(k, &in->region[g]);
}

static bool scalar_type(const ir_kernel *k, ir_type t, ir_scalar *s) {
    const ir_type_desc *d = ir_type_get(k, t);
    if (!d || d->kind != IR_T_SCALAR)
        return false;
    *s = d->elem;
    return true;
}

static bool const_of(const ir_kernel *k, ir_val v, ir_scalar *s, int64_t *bits) {
    const ir_inst *d = ir_def(k, v);
    if (!d || d->op != IR_OP_CONST || !scalar_type(k, d->type, s))
        return false;
    *bits = d->imm[0];
    return true;
}

static int64_t encode(ir_scalar s, uint32_t x) {
    switch (s) {
    case IR_BOOL: return x != 0;
    case IR_I32: return (int32_t)x;
    default: return (int64_t)x; /* u32, f32 bits */
    }
}

/* f32 values folding may take or give: not NaN, not subnormal. */
static bool f32_ok(float x) { return !isnan(x) && fpclassify(x) != FP_SUBNORMAL; }

/* ---- folding one instruction ------------------------------------------------------------ */

static bool fold_int(ir_op op, bool sgn, uint32_t a, uint32_t b, uint32_t *r) {
    int32_t sa = (int32_t)a, sb = (int32_t)b;
    switch (op) {
    case IR_OP_ADD: *r = a + b; return true;
    case IR_OP_SUB: *r = a - b; return true;
    case IR_OP_MUL: *r = a * b; return true;
    case IR_OP_DIV: case IR_OP_REM:
        if (b == 0 || (sgn && sa == INT32_MIN && sb == -1))
            return false;
        if (sgn)
            *r = (uint32_t)(op == IR_OP_DIV ? sa / sb : sa % sb);
        else
            *r = op == IR_OP_DIV ? a / b : a % b;
        return true;
    case IR_OP_MIN: *r = sgn ? (sa < sb ? a : b) : (a < b ? a : b); return true;
    case IR_OP_MAX: *r = sgn ? (sa > sb ? a : b) : (a > b ? a : b); return true;
    case IR_OP_AND: *r = a & b; return true;
    case IR_OP_OR: *r = a | b; return true;
    case IR_OP_XOR: *r = a ^ b; return true;
    case IR_OP_SHL:
        if (b >= 32)
            return false;
        *r = a << b;
        return true;
    case IR_OP_SHR:
        if (b >= 32)
            return false;
        *r = sgn && sa < 0 ? ~(~a >> b) : a >> b; /* arithmetic shift without relying on C's */
        return true;
    default:
        return false;
    }
}

static bool fold_f32(ir_op op, float a, float b, float *r) {
    if (!f32_ok(a) || !f32_ok(b))
        return false;
    switch (op) {
    case IR_OP_ADD: *r = a + b; break;
    case IR_OP_SUB: *r = a - b; break;
    case IR_OP_MUL: *r = a * b; break;
    case IR_OP_DIV:
        if (b == 0)
            return false;
        *r = a / b;
        break;
    case IR_OP_REM:
        if (b == 0)
            return false;
        *r = fmodf(a, b); /* exact; sign of the dividend, as OpFRem and LLVM's frem */
        break;
    case IR_OP_MIN: case IR_OP_MAX:
        if (a == 0 && b == 0)
            return false; /* min(-0, +0) differs between targets */
        *r = (op == IR_OP_MIN) == (a < b) ? a : b;
        break;
    default:
        return false;
    }
    return f32_ok(*r);
}

static bool fold_cmp(ir_cmp c, ir_scalar s, int64_t x, int64_t y, bool *r) {
    if (s == IR_F32) {
        float a = ir_bits_f32((uint32_t)x), b = ir_bits_f32((uint32_t)y);
        if (fpclassify(a) == FP_SUBNORMAL || fpclassify(b) == FP_SUBNORMAL)
            return false;
        switch (c) { /* ordered: false when either is NaN */
        case IR_EQ: *r = a == b; return true;
        case IR_NE: *r = a < b || a > b; return true;
        case IR_LT: *r = a < b; return true;
        case IR_LE: *r = a <= b; return true;
        case IR_GT: *r = a > b; return true;
        case IR_GE: *r = a >= b; return true;
        }
        return false;
    }
    /* bool, i32 (sign-extended) and u32 (zero-extended) all order correctly as int64 */
    switch (c) {
    case IR_EQ: *r = x == y; return true;
    case IR_NE: *r = x != y; return true;
    case IR_LT: *r = x < y; return true;
    case IR_LE: *r = x <= y; return true;
    case IR_GT: *r = x > y; return true;
    case IR_GE: *r = x >= y; return true;
    }
    return false;
}

static bool fold_convert(ir_scalar from, ir_scalar to, int64_t x, uint32_t *r) {
    if ((from == IR_I32 || from == IR_U32) && (to == IR_I32 || to == IR_U32)) {
        *r = (uint32_t)x;
        return true;
    }
    if (from == IR_I32 && to == IR_F32) {
        *r = ir_f32_bits((float)(int32_t)x); /* round to nearest even, as the devices */
        return true;
    }
    if (from == IR_U32 && to == IR_F32) {
        *r = ir_f32_bits((float)(uint32_t)x);
        return true;
    }
    if (from == IR_F32 && (to == IR_I32 || to == IR_U32)) {
        float f = ir_bits_f32((uint32_t)x);
        if (isnan(f))
            return false;
        if (to == IR_I32 && f > -2147483649.0f && f < 2147483648.0f) {
            *r = (uint32_t)(int32_t)f;
            return true;
        }
        if (to == IR_U32 && f > -1.0f && f < 4294967296.0f) {
            *r = (uint32_t)f;
            return true;
        }
    }
    return false;
}

/* Turns in into a CONST when its operands are constants and the result is pinned down. */
static void try_fold(ir_kernel *k, ir_inst *in) {
    ir_scalar rs, s[3];
    int64_t v[3];
    if (in->n_operand == 0 || in->n_operand > 3 || !in->result || !scalar_type(k, in->type, &rs))
        return;
    if (rs != IR_BOOL && rs != IR_I32 && rs != IR_U32 && rs != IR_F32)
        return;
    for (uint32_t i = 0; i < in->n_operand; i++)
        if (!const_of(k, in->operand[i], &s[i], &v[i]))
            return;
    uint32_t r = 0;
    bool ok = false;
    switch (in->op) {
    case IR_OP_ADD: case IR_OP_SUB: case IR_OP_MUL: case IR_OP_DIV: case IR_OP_REM: case IR_OP_MIN:
    case IR_OP_MAX: case IR_OP_AND: case IR_OP_OR: case IR_OP_XOR: case IR_OP_SHL: case IR_OP_SHR:
        if (in->n_operand != 2 || s[0] != rs || s[1] != rs)
            break;
        if (rs == IR_F32) {
            float f;
            ok = fold_f32(in->op, ir_bits_f32((uint32_t)v[0]), ir_bits_f32((uint32_t)v[1]), &f);
            r = ir_f32_bits(f);
        } else if (rs == IR_BOOL) {
            ok = in->op == IR_OP_AND || in->op == IR_OP_OR || in->op == IR_OP_XOR;
            r = in->op == IR_OP_AND ? (v[0] & v[1]) : in->op == IR_OP_OR ? (v[0] | v[1]) : (v[0] ^ v[1]);
        } else {
            ok = fold_int(in->op, rs == IR_I32, (uint32_t)v[0], (uint32_t)v[1], &r);
        }
        break;
    case IR_OP_NEG: case IR_OP_NOT: case IR_OP_ABS: case IR_OP_FLOOR: {
        if (s[0] != rs)
            break;
        uint32_t a = (uint32_t)v[0];
        if (rs == IR_F32) {
            float f = ir_bits_f32(a);
            if (in->op == IR_OP_NOT || !f32_ok(f))
                break;
            f = in->op == IR_OP_NEG ? -f : in->op == IR_OP_ABS ? fabsf(f) : floorf(f);
            ok = true;
            r = ir_f32_bits(f);
        } else if (rs == IR_BOOL) {
            ok = in->op == IR_OP_NOT;
            r = !a;
        } else if (in->op != IR_OP_FLOOR) {
            ok = !(in->op == IR_OP_ABS && (rs != IR_I32 || a == 0x80000000u));
            r = in->op == IR_OP_NEG ? 0u - a : in->op == IR_OP_NOT ? ~a : (int32_t)a < 0 ? 0u - a : a;
        }
        break;
    }
    case IR_OP_FMA: {
        if (rs != IR_F32 || s[0] != rs || s[1] != rs || s[2] != rs)
            break;
        float a = ir_bits_f32((uint32_t)v[0]), b = ir_bits_f32((uint32_t)v[1]), c = ir_bits_f32((uint32_t)v[2]);
        if (!f32_ok(a) || !f32_ok(b) || !f32_ok(c))
            break;
        float f = fmaf(a, b, c); /* one rounding, as the op means */
        ok = f32_ok(f);
        r = ir_f32_bits(f);
        break;
    }
    case IR_OP_CMP: {
        bool b;
        if (rs != IR_BOOL || s[0] != s[1] || in->imm[0] < IR_EQ || in->imm[0] > IR_GE)
            break;
        ok = fold_cmp((ir_cmp)in->imm[0], s[0], v[0], v[1], &b);
        r = b;
        break;
    }
    case IR_OP_CONVERT:
        ok = fold_convert(s[0], rs, v[0], &r);
        break;
    case IR_OP_BITCAST:
        ok = s[0] != IR_BOOL && rs != IR_BOOL && s[0] != rs; /* the remaining types are all 32-bit */
        r = (uint32_t)v[0];
        break;
    default:
        break;
    }
    if (!ok)
        return;
    in->op = IR_OP_CONST;
    in->operand = NULL;
    in->n_operand = 0;
    in->imm[0] = encode(rs, r);
    in->imm[1] = in->imm[2] = 0;
}

/* ---- folding regions --------------------------------------------------------------------- */

typedef struct fold {
    ir_kernel *k;
    ir_val *repl; /* a value replaced by another (if results by yields, selects by an operand) */
} fold;

static ir_val resolve(const fold *f, ir_val v) {
    for (uint32_t guard = 0; v && v <= f->k->n_vals && f->repl[v] && guard < f->k->n_vals; guard++)
        v = f->repl[v];
    return v;
}

static bool keep(fold *f, ir_region *out, ir_inst *in, bool top) {
    /* a value hoisted into the body is in scope again for further building */
    ir_kernel *k = f->k;
    if (top) {
        if (in->result)
            k->vals[in->result].closed = false;
        for (uint32_t i = 0; i < in->n_results; i++)
            k->vals[in->results[i]].closed = false;
    }
    return ir_region_push(k, out, in);
}

static bool fold_region(fold *f, ir_region *r, bool top);

/* Moves a taken region's instructions (all but its yield) into out. */
static bool inline_region(fold *f, ir_region *out, ir_inst *con, ir_region *taken, bool top) {
    if (!fold_region(f, taken, top))
        return false;
    const ir_inst *y = taken->n ? taken->inst[taken->n - 1] : NULL;
    for (uint32_t i = 0; i + 1 < taken->n; i++)
        if (!keep(f, out, taken->inst[i], top))
            return false;
    for (uint32_t i = 0; i < con->n_results && y && i < y->n_operand; i++) {
        f->repl[con->results[i]] = resolve(f, y->operand[i]);
        kill_val(f->k, con->results[i]);
    }
    return true;
}

static bool zero_trip(const ir_kernel *k, const ir_inst *in) {
    ir_scalar sl, sh;
    int64_t lo, hi;
    if (!const_of(k, in->operand[0], &sl, &lo) || !const_of(k, in->operand[1], &sh, &hi) || sl != sh)
        return false;
    return lo >= hi; /* i32 sign-extended and u32 zero-extended compare right as int64 */
}

static bool fold_region(fold *f, ir_region *r, bool top) {
    ir_kernel *k = f->k;
    ir_region out = { 0 };
    for (uint32_t i = 0; i < r->n; i++) {
        ir_inst *in = r->inst[i];
        for (uint32_t j = 0; j < in->n_operand; j++)
            in->operand[j] = resolve(f, in->operand[j]);
        ir_scalar s;
        int64_t c;
        if (in->op == IR_OP_IF && const_of(k, in->operand[0], &s, &c) && s == IR_BOOL) {
            kill_region(k, &in->region[c ? 1 : 0]);
            if (!inline_region(f, &out, in, &in->region[c ? 0 : 1], top))
                return false;
            continue;
        }
        if (in->op == IR_OP_FOR && zero_trip(k, in)) {
            for (uint32_t j = 0; j < in->n_results; j++) {
                f->repl[in->results[j]] = in->operand[3 + j];
                kill_val(k, in->results[j]);
            }
            kill_region(k, &in->region[0]);
            for (uint32_t j = 0; j < in->n_block_arg; j++)
                kill_val(k, in->block_arg[j]);
            continue;
        }
        if (in->op == IR_OP_SELECT && const_of(k, in->operand[0], &s, &c) && s == IR_BOOL) {
            f->repl[in->result] = in->operand[c ? 1 : 2];
            kill_val(k, in->result);
            continue;
        }
        if (in->op == IR_OP_IF || in->op == IR_OP_FOR) {
            for (uint32_t g = 0; g < in->n_region; g++)
                if (!fold_region(f, &in->region[g], false))
                    return false;
        } else {
            try_fold(k, in);
        }
        if (!keep(f, &out, in, false))
            return false;
    }
    *r = out;
    return true;
}

/* ---- specialize ------------------------------------------------------------------------------ */

int ir_specialize(ir_kernel *k, const char *const *names, const double *values, uint32_t n, kiln_err *err) {
    kiln_err_clear(err);
    if (!k) {
        kiln_fail(err, KILN_ERR_INVALID, "no kernel");
        return -1;
    }
    if (n && (!names || !values)) {
        kiln_fail(err, KILN_ERR_INVALID, "ir_specialize: %u names without their arrays", n);
        return -1;
    }
    /* folding trusts the kernel's typing, so it takes only kernels that verify */
    if (ir_verify(k, err))
        return -1;
    int64_t *bits = calloc((size_t)k->n_specs + 1, sizeof *bits);
    bool *set = calloc((size_t)k->n_specs + 1, sizeof *set);
    ir_val *repl = calloc((size_t)k->n_vals + 1, sizeof *repl);
    if (!bits || !set || !repl) {
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = 0;
        while (j < k->n_specs && !(names[i] && strcmp(k->specs[j].name, names[i]) == 0))
            j++;
        if (j == k->n_specs) {
            kiln_fail(err, KILN_ERR_INVALID, "ir_specialize: unknown spec constant @%s",
                      names[i] ? names[i] : "(null)");
            goto fail;
        }
        const char *why = NULL;
        if (ir_encode_spec_value(k->specs[j].type, values[i], &bits[j], &why)) {
            kiln_fail(err, KILN_ERR_INVALID, "ir_specialize: @%s = %g: %s", names[i], values[i], why);
            goto fail;
        }
        set[j] = true;
    }

    /* Named specs become constants at the top of the body, keeping their value numbers. */
    ir_region head = { 0 };
    uint32_t kept = 0;
    for (uint32_t j = 0; j < k->n_specs; j++) {
        ir_spec sp = k->specs[j];
        ir_inst *d = k->vals[sp.value].def;
        if (!set[j]) {
            d->imm[0] = kept;
            k->specs[kept++] = sp;
            continue;
        }
        ir_inst *c = ir_alloc(k, sizeof *c);
        if (!c || !ir_region_push(k, &head, c)) {
            kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
            goto fail;
        }
        c->op = IR_OP_CONST;
        c->result = sp.value;
        c->type = d->type;
        c->imm[0] = bits[j];
        k->vals[sp.value].def = c;
        if (k->wg_spec == sp.value) {
            k->wg[0] = (uint32_t)bits[j], k->wg[1] = k->wg[2] = 1;
            k->wg_spec = IR_NONE;
        }
    }
    k->n_specs = kept;
    for (uint32_t i = 0; i < k->body.n; i++)
        if (!ir_region_push(k, &head, k->body.inst[i])) {
            kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
            goto fail;
        }
    k->body = head;

    fold f = { .k = k, .repl = repl };
    if (!fold_region(&f, &k->body, true)) {
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    free(bits);
    free(set);
    free(repl);
    return ir_verify(k, err);
fail:
    free(bits);
    free(set);
    free(repl);
    return -1;
}

/* ---- dead code ---------------------------------------------------------------------------- */

static void count_uses(const ir_region *r, uint32_t *uses, uint32_t nv, int sign) {
    for (uint32_t i = 0; i < r->n; i++) {
        const ir_inst *in = r->inst[i];
        if (!in)
            continue;
        for (uint32_t j = 0; j < in->n_operand && in->operand; j++)
            if (in->operand[j] && in->operand[j] <= nv)
                uses[in->operand[j]] += (uint32_t)sign;
        for (uint32_t g = 0; g < in->n_region && g < 2; g++)
            count_uses(&in->region[g], uses, nv, sign);
    }
}

static bool has_effect(const ir_region *r) {
    for (uint32_t i = 0; i < r->n; i++) {
        const ir_inst *in = r->inst[i];
        if (in && ir_op_is_effect(in->op))
            return true;
        for (uint32_t g = 0; in && g < in->n_region && g < 2; g++)
            if (has_effect(&in->region[g]))
                return true;
    }
    return false;
}

static bool removable(const ir_kernel *k, const ir_inst *in, const uint32_t *uses) {
    if (in->op == IR_OP_FOR || in->op == IR_OP_IF) {
        for (uint32_t i = 0; i < in->n_results; i++)
            if (uses[in->results[i]])
                return false;
        for (uint32_t g = 0; g < in->n_region && g < 2; g++)
            if (has_effect(&in->region[g]))
                return false;
        return true;
    }
    if (in->op == IR_OP_YIELD || ir_op_is_effect(in->op) || !in->result || in->result > k->n_vals)
        return false;
    return uses[in->result] == 0;
}

static bool sweep(ir_kernel *k, ir_region *r, uint32_t *uses) {
    bool changed = false;
    for (uint32_t i = r->n; i-- > 0;) {
        ir_inst *in = r->inst[i];
        if (!in)
            continue;
        for (uint32_t g = 0; g < in->n_region && g < 2; g++)
            changed |= sweep(k, &in->region[g], uses);
        if (!removable(k, in, uses))
            continue;
        ir_region one = { .inst = &r->inst[i], .n = 1, .cap = 1 };
        count_uses(&one, uses, k->n_vals, -1);
        kill_inst(k, in);
        r->inst[i] = NULL;
        changed = true;
    }
    uint32_t w = 0;
    for (uint32_t i = 0; i < r->n; i++)
        if (r->inst[i])
            r->inst[w++] = r->inst[i];
    r->n = w;
    return changed;
}

void ir_dce(ir_kernel *k) {
    /* while a construct is open the builder may still use any value, so nothing is dead yet */
    if (!k || k->n_open)
        return;
    uint32_t *uses = calloc((size_t)k->n_vals + 1, sizeof *uses);
    if (!uses)
        return;
    count_uses(&k->body, uses, k->n_vals, 1);
    while (sweep(k, &k->body, uses))
        ;
    free(uses);
}
