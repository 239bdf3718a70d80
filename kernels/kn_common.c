/* Helpers shared by the kernel builders: argument checks, workgroup sizing, the
 * workgroup-wide f32 sum. */
#include "kernels/kn_common.h"

#include <math.h>
#include <stdio.h>

void kn_fail(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int kn_check_dtype(const rt_caps *c, ir_scalar dtype, char *err, size_t errlen) {
    if (!c) {
        kn_fail(err, errlen, "no caps");
        return -1;
    }
    if (dtype != IR_BF16 && dtype != IR_F16) {
        kn_fail(err, errlen, "dtype must be bf16 or f16, not %s", ir_scalar_name(dtype));
        return -1;
    }
    if (!c->storage16) {
        kn_fail(err, errlen, "16-bit buffers need caps.storage16 (no 32-bit packing variant yet)");
        return -1;
    }
    return 0;
}

uint32_t kn_workgroup(const rt_caps *c, uint32_t want) {
    uint32_t lim = want;
    if (c->max_workgroup && c->max_workgroup < lim) lim = c->max_workgroup;
    if (lim > 1024) lim = 1024;
    uint32_t p = 1;
    while (p * 2 <= lim) p *= 2;
    return p;
}

uint32_t kn_vec_width(uint32_t n) { return n % 4 == 0 ? 4 : n % 2 == 0 ? 2 : 1; }

ir_val kn_lane_sum(ir_kernel *k, ir_val v, uint32_t lanes) {
    if (lanes == 1) return v;
    ir_val s = ir_extract(k, v, 0);
    for (uint32_t i = 1; i < lanes; i++) s = ir_bin(k, IR_OP_ADD, s, ir_extract(k, v, i));
    return s;
}

/* Tree over workgroup memory: log2(wg) halving steps, unrolled (wg is a constant). */
static ir_val tree_sum(ir_kernel *k, uint32_t wg, ir_val v, const char *shm_name) {
    ir_shm s = ir_shared_array(k, shm_name, IR_F32, wg);
    ir_val lid = ir_id(k, IR_ID_LOCAL, 0);
    ir_shm_store(k, s, lid, v);
    ir_barrier(k);
    for (uint32_t h = wg / 2; h >= 1; h /= 2) {
        ir_if *f = ir_if_begin(k, ir_compare(k, IR_LT, lid, ir_const_u32(k, h)), 0);
        ir_val o = ir_shm_load(k, s, ir_bin(k, IR_OP_ADD, lid, ir_const_u32(k, h)), 1);
        ir_shm_store(k, s, lid, ir_bin(k, IR_OP_ADD, ir_shm_load(k, s, lid, 1), o));
        ir_if_end(k, f, NULL);
        ir_barrier(k);
    }
    return ir_shm_load(k, s, ir_const_u32(k, 0), 1);
}

ir_val kn_wg_sum(ir_kernel *k, const rt_caps *c, uint32_t wg, ir_val v, const char *shm_name) {
    if (!c->subgroup_arith || wg == 1) return wg == 1 ? v : tree_sum(k, wg, v, shm_name);
    ir_val s = ir_sg_reduce(k, IR_REDUCE_ADD, v);
    /* room for the most subgroups the device can split wg into */
    uint32_t sg_min = c->subgroup_min ? c->subgroup_min : 1, cap = (wg + sg_min - 1) / sg_min;
    ir_shm part = ir_shared_array(k, shm_name, IR_F32, cap);
    ir_val lane = ir_id(k, IR_ID_SG_LANE, 0), sgsz = ir_id(k, IR_ID_SG_SIZE, 0);
    ir_val zero = ir_const_u32(k, 0);
    ir_if *f = ir_if_begin(k, ir_compare(k, IR_EQ, lane, zero), 0);
    ir_shm_store(k, part, ir_id(k, IR_ID_SG_ID, 0), s);
    ir_if_end(k, f, NULL);
    ir_barrier(k);
    /* every subgroup sums the partials the same way, so all invocations agree bit for bit */
    ir_val nsg = ir_bin(k, IR_OP_DIV, ir_bin(k, IR_OP_ADD, ir_const_u32(k, wg - 1), sgsz), sgsz);
    ir_val init = ir_const_f32(k, 0.0f);
    ir_for *lp = ir_for_begin(k, lane, nsg, sgsz, 1, &init);
    ir_val acc = ir_bin(k, IR_OP_ADD, ir_for_arg(lp, 0), ir_shm_load(k, part, ir_for_iv(lp), 1));
    ir_for_end(k, lp, &acc);
    return ir_sg_reduce(k, IR_REDUCE_ADD, ir_for_result(lp, 0));
}

ir_kernel *kn_finish(ir_kernel *k, char *err, size_t errlen) {
    char msg[512];
    if (ir_verify(k, msg, sizeof msg)) {
        const char *be = ir_kernel_error(k);
        kn_fail(err, errlen, "%s: %s", ir_kernel_name(k), be && *be ? be : msg);
        ir_kernel_destroy(k);
        return NULL;
    }
    return k;
}

ir_kernel *kn_create(const char *name, char *err, size_t errlen) {
    ir_kernel *k = ir_kernel_create(name);
    if (!k) kn_fail(err, errlen, "%s: out of memory", name);
    return k;
}

int kn_check_epi(const char *who, unsigned epi, unsigned allowed, char *err, size_t errlen) {
    if ((epi & ~allowed) || ((epi & KN_EPI_SWIGLU) && (epi & (KN_EPI_BIAS | KN_EPI_RESIDUAL)))) {
        kn_fail(err, errlen, "%s: epilogue flags 0x%x are not supported here", who, epi);
        return -1;
    }
    return 0;
}

ir_val kn_epilogue(ir_kernel *k, unsigned epi, ir_val sum, ir_buf b, ir_val b_index, ir_buf res, ir_val res_index,
                   ir_scalar dtype) {
    ir_type f32 = ir_t_scalar(k, IR_F32), dt = ir_t_scalar(k, dtype);
    if (epi & KN_EPI_BIAS) sum = ir_bin(k, IR_OP_ADD, sum, ir_convert(k, ir_load(k, b, b_index, 1), f32));
    ir_val y = ir_convert(k, sum, dt);
    if (epi & KN_EPI_RESIDUAL)
        y = ir_convert(k, ir_bin(k, IR_OP_ADD, ir_convert(k, y, f32), ir_convert(k, ir_load(k, res, res_index, 1), f32)),
                       dt);
    return y;
}

ir_val kn_silu_mul(ir_kernel *k, ir_val g, ir_val u) {
    ir_val one = ir_const_f32(k, 1.0f);
    ir_val sig = ir_bin(k, IR_OP_ADD, one, kn_exp(k, ir_un(k, IR_OP_NEG, g)));
    return ir_bin(k, IR_OP_MUL, kn_fdiv(k, g, sig), u);
}

ir_val kn_rope_theta(ir_kernel *k, ir_val th, ir_val from, ir_val to, float theta_scale) {
    ir_for *l = ir_for_begin(k, from, to, ir_const_u32(k, 1), 1, &th);
    ir_val next = ir_bin(k, IR_OP_MUL, ir_for_arg(l, 0), ir_const_f32(k, theta_scale));
    ir_for_end(k, l, &next);
    return ir_for_result(l, 0);
}

ir_val kn_rms_scale(ir_kernel *k, const rt_caps *c, uint32_t wg, ir_buf x, ir_val base, uint32_t n, float eps,
                    const char *shm_name) {
    uint32_t v = kn_vec_width(n);
    ir_type f32 = ir_t_scalar(k, IR_F32), fv = v == 1 ? f32 : ir_t_vector(k, IR_F32, v);
    ir_val start = ir_bin(k, IR_OP_MUL, ir_id(k, IR_ID_LOCAL, 0), ir_const_u32(k, v));
    /* per-invocation sum of squares (vector lanes summed at the end) */
    ir_val zero = ir_const_f32(k, 0.0f);
    if (v > 1) {
        ir_val z[4] = {zero, zero, zero, zero};
        zero = ir_vec(k, z, v);
    }
    ir_for *l = ir_for_begin(k, start, ir_const_u32(k, n), ir_const_u32(k, wg * v), 1, &zero);
    ir_val xv = ir_convert(k, ir_load(k, x, ir_bin(k, IR_OP_ADD, base, ir_for_iv(l)), v), fv);
    ir_val ss = ir_fma(k, xv, xv, ir_for_arg(l, 0));
    ir_for_end(k, l, &ss);
    ir_val total = kn_wg_sum(k, c, wg, kn_lane_sum(k, ir_for_result(l, 0), v), shm_name);
    /* the oracle's 1 / sqrtf(ss / n + eps), each step correctly rounded */
    ir_val mean = kn_fdiv(k, total, ir_const_f32(k, (float)n));
    ir_val root = kn_fsqrt(k, ir_bin(k, IR_OP_ADD, mean, ir_const_f32(k, eps)));
    return kn_fdiv(k, ir_const_f32(k, 1.0f), root);
}

void kn_sincos(ir_kernel *k, ir_val th, ir_val *sin_out, ir_val *cos_out) {
    /* quadrant Q = round(th / (pi/2)) and y = th - Q pi/2 in [-pi/4, pi/4], pi/2 in four
     * parts: the first three of 8 bits, so Q * Pi is exact for Q < 2^16 (angles below
     * ~1e5 rad) and each subtraction is exact or rounds at y's own magnitude */
    const float p1 = 1.5703125f, p2 = 4.825592041015625e-4f, p3 = 1.2665987014770508e-6f, p4 = 9.92093629470503e-10f;
    ir_val qf = ir_un(k, IR_OP_FLOOR, ir_fma(k, th, ir_const_f32(k, (float)(2.0 / 3.141592653589793)), ir_const_f32(k, 0.5f)));
    /* the quadrant as an integer first, and both its uses from that one integer */
    ir_val qi = ir_convert(k, qf, ir_t_scalar(k, IR_I32));
    ir_val nq = ir_un(k, IR_OP_NEG, ir_convert(k, qi, ir_t_scalar(k, IR_F32)));
    ir_val y = ir_fma(k, nq, ir_const_f32(k, p1), th);
    y = ir_fma(k, nq, ir_const_f32(k, p2), y);
    y = ir_fma(k, nq, ir_const_f32(k, p3), y);
    y = ir_fma(k, nq, ir_const_f32(k, p4), y);
    /* minimax polynomials for f32 on [-pi/4, pi/4] (Cephes' sinf/cosf coefficients) */
    ir_val z = ir_bin(k, IR_OP_MUL, y, y);
    ir_val ps = ir_fma(k, z, ir_const_f32(k, -1.9515295891e-4f), ir_const_f32(k, 8.3321608736e-3f));
    ps = ir_fma(k, z, ps, ir_const_f32(k, -1.6666654611e-1f));
    ir_val sy = ir_fma(k, ir_bin(k, IR_OP_MUL, y, z), ps, y);
    ir_val pc = ir_fma(k, z, ir_const_f32(k, 2.443315711809948e-5f), ir_const_f32(k, -1.388731625493765e-3f));
    pc = ir_fma(k, z, pc, ir_const_f32(k, 4.166664568298827e-2f));
    ir_val cy = ir_fma(k, ir_bin(k, IR_OP_MUL, z, z), pc, ir_fma(k, z, ir_const_f32(k, -0.5f), ir_const_f32(k, 1.0f)));
    /* n = Q mod 4 (two's complement): sin = sy, cy, -sy, -cy; cos = cy, -sy, -cy, sy */
    ir_val n = ir_bin(k, IR_OP_AND, qi, ir_const_i32(k, 3));
    ir_val zero = ir_const_i32(k, 0);
    ir_val swap = ir_compare(k, IR_NE, ir_bin(k, IR_OP_AND, n, ir_const_i32(k, 1)), zero);
    ir_val sneg = ir_compare(k, IR_NE, ir_bin(k, IR_OP_AND, n, ir_const_i32(k, 2)), zero);
    ir_val cneg = ir_compare(k, IR_NE, ir_bin(k, IR_OP_AND, ir_bin(k, IR_OP_ADD, n, ir_const_i32(k, 1)), ir_const_i32(k, 2)),
                             zero);
    ir_val s0 = ir_select(k, swap, cy, sy), c0 = ir_select(k, swap, sy, cy);
    *sin_out = ir_select(k, sneg, ir_un(k, IR_OP_NEG, s0), s0);
    *cos_out = ir_select(k, cneg, ir_un(k, IR_OP_NEG, c0), c0);
}

/* ---- f32 math to the oracle's precision -----------------------------------------------------
 * Vulkan lets a driver's divide be 2.5 ulp, exp 3 + 2|x| ulp and sqrt an inverse-sqrt
 * approximation, and NVIDIA's are; the oracle's (IEEE divide and sqrt, glibc's expf) are
 * within an ulp. Each difference can round a 16-bit activation the other way, and the
 * contract says kernels and oracle differ in summation order alone: so these three are
 * computed here, from correctly rounded adds and multiplies, with the device's
 * approximations as starting points. */

static ir_val f32c(ir_kernel *k, float v) { return ir_const_f32(k, v); }
static ir_val add(ir_kernel *k, ir_val a, ir_val b) { return ir_bin(k, IR_OP_ADD, a, b); }
static ir_val sub(ir_kernel *k, ir_val a, ir_val b) { return ir_bin(k, IR_OP_SUB, a, b); }
static ir_val mul(ir_kernel *k, ir_val a, ir_val b) { return ir_bin(k, IR_OP_MUL, a, b); }

/* c - a * b exactly (to one final rounding), from adds and multiplies alone: Dekker's
 * product with Veltkamp's split. Vulkan makes + - * correctly rounded (and kiln forbids
 * contracting them), but lets a driver compute fma as a multiply and an add, so an fma
 * cannot be trusted for an exact residual. Needs |a|, |b| below 2^100 (the callers'
 * quotients and roots are). */
static ir_val residual(ir_kernel *k, ir_val c, ir_val a, ir_val b) {
    ir_val split = f32c(k, 4097.0f);
    ir_val ca = mul(k, split, a), ah = sub(k, ca, sub(k, ca, a)), al = sub(k, a, ah);
    ir_val cb = mul(k, split, b), bh = sub(k, cb, sub(k, cb, b)), bl = sub(k, b, bh);
    ir_val p = mul(k, a, b);
    ir_val e = add(k, add(k, add(k, sub(k, mul(k, ah, bh), p), mul(k, ah, bl)), mul(k, al, bh)), mul(k, al, bl));
    return sub(k, sub(k, c, p), e);
}

static ir_val finite_nonzero(ir_kernel *k, ir_val v) {
    ir_val m = ir_un(k, IR_OP_ABS, v);
    return ir_bin(k, IR_OP_AND, ir_compare(k, IR_LT, m, f32c(k, 0x1p100f)), ir_compare(k, IR_GT, m, f32c(k, 0x1p-100f)));
}

ir_val kn_fdiv(ir_kernel *k, ir_val a, ir_val b) {
    /* the device's quotient, corrected twice by the exact residual a - b q */
    ir_val q0 = ir_bin(k, IR_OP_DIV, a, b), y = ir_bin(k, IR_OP_DIV, f32c(k, 1.0f), b);
    ir_val q = add(k, q0, mul(k, residual(k, a, b, q0), y));
    q = add(k, q, mul(k, residual(k, a, b, q), y));
    /* zeros, infinities, NaN and extreme magnitudes: the device's quotient */
    ir_val ok = ir_bin(k, IR_OP_AND, ir_bin(k, IR_OP_AND, finite_nonzero(k, a), finite_nonzero(k, b)),
                       finite_nonzero(k, q0));
    return ir_select(k, ok, q, q0);
}

ir_val kn_fsqrt(ir_kernel *k, ir_val x) {
    ir_val s0 = ir_un(k, IR_OP_SQRT, x), h = ir_bin(k, IR_OP_DIV, f32c(k, 0.5f), s0);
    ir_val s = add(k, s0, mul(k, residual(k, x, s0, s0), h));
    s = add(k, s, mul(k, residual(k, x, s, s), h));
    return ir_select(k, finite_nonzero(k, s0), s, s0);
}

ir_val kn_exp(ir_kernel *k, ir_val x) {
    ir_type i32 = ir_t_scalar(k, IR_I32), f32 = ir_t_scalar(k, IR_F32);
    /* x = n ln2 + r, |r| <= ln2 / 2, ln2 in two parts (n * hi exact for |n| < 2^9) */
    ir_val xc = ir_bin(k, IR_OP_MAX, ir_bin(k, IR_OP_MIN, x, f32c(k, 89.0f)), f32c(k, -104.0f));
    ir_val n = ir_un(k, IR_OP_FLOOR, ir_fma(k, xc, f32c(k, 1.44269504088896341f), f32c(k, 0.5f)));
    ir_val nn = ir_un(k, IR_OP_NEG, n);
    ir_val r = ir_fma(k, nn, f32c(k, 0.693145751953125f), xc);
    r = ir_fma(k, nn, f32c(k, 1.428606765330187e-6f), r);
    /* e^r: Taylor to r^7 (truncation below 1e-8 relative on |r| <= 0.347) */
    static const float inv_fact[] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
    ir_val p = f32c(k, inv_fact[0]);
    for (int i = 1; i < 8; i++) p = ir_fma(k, p, r, f32c(k, inv_fact[i]));
    /* times 2^n in two exact power-of-two factors, so results down in the subnormals round once */
    ir_val ni = ir_convert(k, n, i32);
    ir_val n1 = ir_bin(k, IR_OP_DIV, ni, ir_const_i32(k, 2)), n2 = ir_bin(k, IR_OP_SUB, ni, n1);
    ir_val s1 = ir_bitcast(k, ir_bin(k, IR_OP_SHL, ir_bin(k, IR_OP_ADD, n1, ir_const_i32(k, 127)), ir_const_i32(k, 23)), f32);
    ir_val s2 = ir_bitcast(k, ir_bin(k, IR_OP_SHL, ir_bin(k, IR_OP_ADD, n2, ir_const_i32(k, 127)), ir_const_i32(k, 23)), f32);
    ir_val e = ir_bin(k, IR_OP_MUL, ir_bin(k, IR_OP_MUL, p, s1), s2);
    /* outside the clamp: 0 or infinity; NaN stays NaN */
    e = ir_select(k, ir_compare(k, IR_LT, x, f32c(k, -104.0f)), f32c(k, 0.0f), e);
    e = ir_select(k, ir_compare(k, IR_GT, x, f32c(k, 88.75f)), f32c(k, INFINITY), e);
    ir_val is_nan = ir_un(k, IR_OP_NOT, ir_compare(k, IR_LE, x, f32c(k, INFINITY))); /* compares are ordered */
    return ir_select(k, is_nan, x, e);
}
