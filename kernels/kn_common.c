/* Helpers shared by the kernel builders: argument checks, workgroup sizing, the
 * workgroup-wide f32 sum. */
#include "kernels/kn_common.h"

#include "base/error.h"

#include <math.h>
#include <stdio.h>

int kn_check_dtype(const rt_caps *c, ir_scalar dtype, kiln_err *err) {
    if (!c) {
        kiln_fail(err, KILN_ERR_INVALID, "no caps");
        return -1;
    }
    if (dtype != IR_BF16 && dtype != IR_F16) {
        kiln_fail(err, KILN_ERR_INVALID, "dtype must be bf16 or f16, not %s", ir_scalar_name(dtype));
        return -1;
    }
    if (!c->storage16) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "16-bit buffers need caps.storage16 (no 32-bit packing variant yet)");
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

ir_val kn_lane_sum(kx k, ir_val v, uint32_t lanes) {
    if (lanes == 1) return v;
    ir_val s = kx_lane(k, v, 0);
    for (uint32_t i = 1; i < lanes; i++) s = kx_add(k, s, kx_lane(k, v, i));
    return s;
}

/* Tree over workgroup memory: log2(wg) halving steps, unrolled (wg is a constant). */
static ir_val tree_sum(kx k, uint32_t wg, ir_val v, const char *shm_name) {
    ir_shm s = kx_shared(k, shm_name, IR_F32, wg);
    ir_val lid = kx_local(k);
    kx_shm_store(k, s, lid, v);
    kx_barrier(k);
    for (uint32_t h = wg / 2; h >= 1; h /= 2) {
        ir_if *f = kx_if(k, kx_lt_c(k, lid, h));
        ir_val o = kx_shm_load(k, s, kx_add_c(k, lid, h), 1);
        kx_shm_store(k, s, lid, kx_add(k, kx_shm_load(k, s, lid, 1), o));
        kx_end_if(k, f);
        kx_barrier(k);
    }
    return kx_shm_load(k, s, kx_u32(k, 0), 1);
}

ir_val kn_wg_sum(kx k, uint32_t wg, ir_val v, const char *shm_name) {
    const rt_caps *c = k.caps;
    if (!c->subgroup_arith || wg == 1) return wg == 1 ? v : tree_sum(k, wg, v, shm_name);
    ir_val s = kx_sg_sum(k, v);
    /* room for the most subgroups the device can split wg into */
    uint32_t sg_min = c->subgroup_min ? c->subgroup_min : 1, cap = (wg + sg_min - 1) / sg_min;
    ir_shm part = kx_shared(k, shm_name, IR_F32, cap);
    ir_val lane = kx_sg_lane(k), sg_size = kx_sg_size(k);
    ir_val zero = kx_u32(k, 0);
    ir_if *f = kx_if(k, kx_eq(k, lane, zero));
    kx_shm_store(k, part, kx_sg_id(k), s);
    kx_end_if(k, f);
    kx_barrier(k);
    /* every subgroup sums the partials the same way, so all invocations agree bit for bit */
    ir_val n_sg = kx_div(k, kx_add(k, kx_u32(k, wg - 1), sg_size), sg_size);
    ir_val init = kx_f32(k, 0.0f);
    ir_for *lp = ir_for_begin(k.ir, lane, n_sg, sg_size, 1, &init);
    ir_val acc = kx_add(k, ir_for_arg(lp, 0), kx_shm_load(k, part, ir_for_iv(lp), 1));
    ir_for_end(k.ir, lp, &acc);
    return kx_sg_sum(k, ir_for_result(lp, 0));
}

ir_kernel *kn_finish(ir_kernel *k, kiln_err *err) {
    kiln_err msg = {0};
    if (ir_verify(k, &msg)) {
        const char *be = ir_kernel_error(k);
        kiln_err_wrap(err, be && *be ? ir_kernel_err(k) : &msg, "%s", ir_kernel_name(k));
        ir_kernel_destroy(k);
        return NULL;
    }
    return k;
}

ir_kernel *kn_create(const char *name, kiln_err *err) {
    ir_kernel *k = ir_kernel_create(name);
    if (!k) kiln_fail(err, KILN_ERR_NOMEM, "%s: out of memory", name);
    return k;
}

int kn_check_epi(const char *who, unsigned epi, unsigned allowed, kiln_err *err) {
    if ((epi & ~allowed) || ((epi & KN_EPI_SWIGLU) && (epi & (KN_EPI_BIAS | KN_EPI_RESIDUAL))) ||
        ((epi & KN_EPI_F32) && epi != KN_EPI_F32)) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "%s: epilogue flags 0x%x are not supported here", who, epi);
        return -1;
    }
    return 0;
}

ir_val kn_epilogue(kx k, unsigned epi, ir_val sum, ir_buf b, ir_val b_index, ir_buf res, ir_val res_index,
                   ir_scalar dtype) {
    if (epi & KN_EPI_F32) return sum; /* an f32 Y: nothing rounds */
    if (epi & KN_EPI_BIAS) sum = kx_add(k, sum, kx_as(k, kx_load(k, b, b_index, 1), IR_F32));
    ir_val y = kx_as(k, sum, dtype);
    if (epi & KN_EPI_RESIDUAL) {
        ir_val r = kx_as(k, kx_load(k, res, res_index, 1), IR_F32);
        y = kx_as(k, kx_add(k, kx_as(k, y, IR_F32), r), dtype);
    }
    return y;
}

ir_val kn_silu_mul(kx k, ir_val g, ir_val u) {
    ir_val one = kx_f32(k, 1.0f);
    ir_val sig = kx_add(k, one, kn_exp(k, kx_neg(k, g)));
    return kx_mul(k, kn_fdiv(k, g, sig), u);
}

ir_val kn_softplus(kx k, ir_val x) {
    ir_val soft = ir_un(k.ir, IR_OP_LOG, kx_add_f(k, kn_exp(k, x), 1.0f));
    return kx_select(k, kx_gt_f(k, x, 20.0f), x, soft);
}

ir_val kn_sigmoid(kx k, ir_val x) {
    return kn_fdiv(k, kx_f32(k, 1.0f), kx_add_f(k, kn_exp(k, kx_neg(k, x)), 1.0f));
}

ir_val kn_l2_inv(kx k, ir_val ss, float eps) {
    return kn_fdiv(k, kx_f32(k, 1.0f), kx_max(k, kn_fsqrt(k, ss), kx_f32(k, eps)));
}

ir_val kn_rope_theta(kx k, ir_val th, ir_val from, ir_val to, float theta_scale) {
    ir_for *l = ir_for_begin(k.ir, from, to, kx_u32(k, 1), 1, &th);
    ir_val next = kx_mul_f(k, ir_for_arg(l, 0), theta_scale);
    ir_for_end(k.ir, l, &next);
    return ir_for_result(l, 0);
}

void kn_attn_prefill_bufs(kx k, ir_scalar dt, uint32_t n_max, uint32_t q_stride, uint32_t n_head, uint32_t hd,
                          uint64_t kv_dim, uint32_t n_ctx, const kn_pages *pg, kn_attn_bufs *b) {
    b->q = kx_buffer(k, "q", dt, IR_READ, (uint64_t)n_max * q_stride);
    uint64_t cache = pg ? (uint64_t)pg->rows * pg->n_pages : n_ctx;
    b->kc = kx_buffer(k, "kcache", dt, IR_READ, cache * kv_dim);
    b->vc = kx_buffer(k, "vcache", dt, IR_READ, cache * kv_dim);
    b->out = kx_buffer(k, "out", dt, IR_WRITE, (uint64_t)n_max * n_head * hd);
    b->info = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    b->pages = pg ? kx_buffer(k, "pages", IR_U32, IR_READ, pg->stride) : 0;
}

void kn_attn_place_of(kx k, ir_buf info, uint32_t hpt, uint32_t group, uint32_t hd, uint32_t tpt, uint32_t n_max,
                      uint32_t n_ctx, kn_attn_place *p) {
    ir_val u0 = kx_u32(k, 0);
    p->head0 = kx_group_times(k, 0, hpt);
    p->kv_off = kx_mul_c(k, kx_div_c(k, p->head0, group), hd);
    p->blocks = (n_max + tpt - 1) / tpt;
    p->t0 = kx_mul_c(k, kx_sub(k, kx_u32(k, p->blocks - 1), kx_group(k, 1)), tpt);
    p->pos0 = kx_load(k, info, u0, 1);
    ir_val n = kx_load_c(k, info, 1);
    ir_val room = kx_select(k, kx_lt_c(k, p->pos0, n_ctx), kx_sub(k, kx_u32(k, n_ctx), p->pos0), u0);
    p->n_valid = kx_min(k, kx_min_c(k, n, n_max), room);
}

ir_val kn_in_cache(kx k, ir_val p, ir_val p0, uint32_t n_ctx) {
    ir_val below_end = kx_lt_c(k, p, n_ctx);
    return kx_and(k, kx_ge(k, p, p0), below_end);
}

int kn_pages_check(const kn_pages *pg, uint64_t kv_dim, const char *who, kiln_err *err) {
    if (!pg) return 0;
    uint64_t pool = (uint64_t)pg->rows * pg->n_pages, ctx = (uint64_t)pg->rows * pg->stride;
    if (!pg->rows || pg->rows > 4096 || (pg->rows & (pg->rows - 1)) || !pg->n_pages || !pg->stride ||
        pool * kv_dim > UINT32_MAX || ctx * kv_dim > UINT32_MAX)
        return kiln_fail(err, KILN_ERR_INVALID,
                         "%s: bad paging (pages of %u rows, %u pages, %u a sequence; rows a power of two <= 4096, "
                         "u32 indices)",
                         who, pg->rows, pg->n_pages, pg->stride);
    return 0;
}

static uint32_t log2u(uint32_t v) {
    uint32_t l = 0;
    while ((1u << l) < v) l++;
    return l;
}

ir_val kn_page_of(kx k, const kn_pages *pg, ir_buf tab, ir_val tab0, ir_val p) {
    return kx_load(k, tab, kx_add(k, tab0, kx_shr_c(k, p, log2u(pg->rows))), 1);
}

ir_val kn_page_row(kx k, const kn_pages *pg, ir_val page, ir_val p) {
    return kx_add(k, kx_shl_c(k, page, log2u(pg->rows)), kx_and_c(k, p, pg->rows - 1));
}

ir_val kn_cache_row(kx k, const kn_pages *pg, ir_buf tab, ir_val tab0, ir_val row0, ir_val p) {
    if (!pg) return row0 == IR_NONE ? p : kx_add(k, row0, p);
    ir_val page = kx_min_c(k, kn_page_of(k, pg, tab, tab0, p), pg->n_pages - 1);
    return kn_page_row(k, pg, page, p);
}

void kn_rotate(kx k, ir_val x0, ir_val x1, ir_val cs, ir_val sn, ir_val *o0, ir_val *o1) {
    ir_val x1_sn = kx_mul(k, x1, sn);
    *o0 = kx_sub(k, kx_mul(k, x0, cs), x1_sn);
    ir_val x1_cs = kx_mul(k, x1, cs);
    *o1 = kx_add(k, kx_mul(k, x0, sn), x1_cs);
}

ir_val kn_rms_scale(kx k, uint32_t wg, ir_buf x, ir_val base, uint32_t n, float eps, const char *shm_name) {
    uint32_t v = kn_vec_width(n);
    ir_type fv = kx_t(k, IR_F32, v);
    ir_val start = kx_local_times(k, v);
    /* per-invocation sum of squares (vector lanes summed at the end) */
    ir_val zero = kx_splat(k, kx_f32(k, 0.0f), v);
    ir_val step = kx_u32(k, wg * v);
    ir_for *l = ir_for_begin(k.ir, start, kx_u32(k, n), step, 1, &zero);
    ir_val xv = kx_convert(k, kx_load(k, x, kx_add(k, base, ir_for_iv(l)), v), fv);
    ir_val ss = kx_fma(k, xv, xv, ir_for_arg(l, 0));
    ir_for_end(k.ir, l, &ss);
    ir_val total = kn_wg_sum(k, wg, kn_lane_sum(k, ir_for_result(l, 0), v), shm_name);
    return kn_rms_of_sum(k, total, n, eps);
}

ir_val kn_rms_of_sum(kx k, ir_val total, uint32_t n, float eps) {
    /* the oracle's 1 / sqrtf(ss / n + eps), each step correctly rounded */
    ir_val mean = kn_fdiv(k, total, kx_f32(k, (float)n));
    ir_val root = kn_fsqrt(k, kx_add_f(k, mean, eps));
    return kn_fdiv(k, kx_f32(k, 1.0f), root);
}

void kn_sincos(kx k, ir_val th, ir_val *sin_out, ir_val *cos_out) {
    /* quadrant Q = round(th / (pi/2)) and y = th - Q pi/2 in [-pi/4, pi/4], pi/2 in four
     * parts: the first three of 8 bits, so Q * Pi is exact for Q < 2^16 (angles below
     * ~1e5 rad) and each subtraction is exact or rounds at y's own magnitude */
    const float p1 = 1.5703125f, p2 = 4.825592041015625e-4f, p3 = 1.2665987014770508e-6f, p4 = 9.92093629470503e-10f;
    ir_val qf = kx_floor(k, kx_fma_f(k, th, (float)(2.0 / 3.141592653589793), 0.5f));
    /* the quadrant as an integer first, and both its uses from that one integer */
    ir_val qi = kx_as(k, qf, IR_I32);
    ir_val nq = kx_neg(k, kx_as(k, qi, IR_F32));
    ir_val y = kx_fma(k, nq, kx_f32(k, p1), th);
    y = kx_fma(k, nq, kx_f32(k, p2), y);
    y = kx_fma(k, nq, kx_f32(k, p3), y);
    y = kx_fma(k, nq, kx_f32(k, p4), y);
    /* minimax polynomials for f32 on [-pi/4, pi/4] (Cephes' sinf/cosf coefficients):
     * sin y = y + y z ps(z), cos y = 1 - z / 2 + z^2 pc(z), z = y^2 */
    ir_val z = kx_mul(k, y, y);
    ir_val ps = kx_fma_f(k, z, -1.9515295891e-4f, 8.3321608736e-3f);
    ps = kx_fma(k, z, ps, kx_f32(k, -1.6666654611e-1f));
    ir_val sy = kx_fma(k, kx_mul(k, y, z), ps, y);
    ir_val pc = kx_fma_f(k, z, 2.443315711809948e-5f, -1.388731625493765e-3f);
    pc = kx_fma(k, z, pc, kx_f32(k, 4.166664568298827e-2f));
    ir_val one_minus_half_z = kx_fma_f(k, z, -0.5f, 1.0f);
    ir_val cy = kx_fma(k, kx_mul(k, z, z), pc, one_minus_half_z);
    /* n = Q mod 4 (two's complement): sin = sy, cy, -sy, -cy; cos = cy, -sy, -cy, sy */
    ir_val n = kx_and_i(k, qi, 3);
    ir_val zero = kx_i32(k, 0);
    ir_val swap = kx_ne(k, kx_and_i(k, n, 1), zero);
    ir_val sneg = kx_ne(k, kx_and_i(k, n, 2), zero);
    ir_val two = kx_i32(k, 2);
    ir_val cneg = kx_ne(k, kx_and(k, kx_add_i(k, n, 1), two), zero);
    ir_val s0 = kx_select(k, swap, cy, sy), c0 = kx_select(k, swap, sy, cy);
    *sin_out = kx_select(k, sneg, kx_neg(k, s0), s0);
    *cos_out = kx_select(k, cneg, kx_neg(k, c0), c0);
}

/* ---- f32 math to the oracle's precision -----------------------------------------------------
 * Vulkan lets a driver's divide be 2.5 ulp, exp 3 + 2|x| ulp and sqrt an inverse-sqrt
 * approximation, and NVIDIA's are; the oracle's (IEEE divide and sqrt, glibc's expf) are
 * within an ulp. Each difference can round a 16-bit activation the other way, and the
 * contract says kernels and oracle differ in summation order alone: so these three are
 * computed here, from correctly rounded adds and multiplies, with the device's
 * approximations as starting points. */

/* c - a * b exactly (to one final rounding), from adds and multiplies alone: Dekker's
 * product with Veltkamp's split. Vulkan makes + - * correctly rounded (and kiln forbids
 * contracting them), but lets a driver compute fma as a multiply and an add, so an fma
 * cannot be trusted for an exact residual. Needs |a|, |b| below 2^100 (the callers'
 * quotients and roots are). */
static ir_val residual(kx k, ir_val c, ir_val a, ir_val b) {
    ir_val split = kx_f32(k, 4097.0f);
    ir_val ca = kx_mul(k, split, a), ah = kx_sub(k, ca, kx_sub(k, ca, a)), al = kx_sub(k, a, ah);
    ir_val cb = kx_mul(k, split, b), bh = kx_sub(k, cb, kx_sub(k, cb, b)), bl = kx_sub(k, b, bh);
    ir_val p = kx_mul(k, a, b);
    /* e = a * b - p exactly: ((ah bh - p) + ah bl + al bh) + al bl */
    ir_val ll = kx_mul(k, al, bl), lh = kx_mul(k, al, bh), hl = kx_mul(k, ah, bl);
    ir_val e = kx_add(k, kx_add(k, kx_add(k, kx_sub(k, kx_mul(k, ah, bh), p), hl), lh), ll);
    return kx_sub(k, kx_sub(k, c, p), e);
}

static ir_val finite_nonzero(kx k, ir_val v) {
    ir_val m = kx_abs(k, v);
    ir_val not_tiny = kx_gt_f(k, m, 0x1p-100f);
    return kx_and(k, kx_lt_f(k, m, 0x1p100f), not_tiny);
}

ir_val kn_fdiv(kx k, ir_val a, ir_val b) {
    /* the device's quotient, corrected twice by the exact residual a - b q */
    ir_val q0 = kx_div(k, a, b), y = kx_div(k, kx_f32(k, 1.0f), b);
    ir_val q = kx_add(k, q0, kx_mul(k, residual(k, a, b, q0), y));
    q = kx_add(k, q, kx_mul(k, residual(k, a, b, q), y));
    /* zeros, infinities, NaN and extreme magnitudes: the device's quotient */
    ir_val q0_ok = finite_nonzero(k, q0), b_ok = finite_nonzero(k, b);
    ir_val ok = kx_and(k, kx_and(k, finite_nonzero(k, a), b_ok), q0_ok);
    return kx_select(k, ok, q, q0);
}

ir_val kn_fsqrt(kx k, ir_val x) {
    ir_val s0 = kx_sqrt(k, x), h = kx_div(k, kx_f32(k, 0.5f), s0);
    ir_val s = kx_add(k, s0, kx_mul(k, residual(k, x, s0, s0), h));
    s = kx_add(k, s, kx_mul(k, residual(k, x, s, s), h));
    return kx_select(k, finite_nonzero(k, s0), s, s0);
}

/* 2^n as an f32, for n in the normal exponents: the bits (n + 127) << 23 */
static ir_val pow2(kx k, ir_val n) {
    ir_val shift = kx_i32(k, 23);
    return kx_bitcast(k, kx_shl(k, kx_add_i(k, n, 127), shift), kx_t(k, IR_F32, 1));
}

ir_val kn_exp(kx k, ir_val x) {
    /* x = n ln2 + r, |r| <= ln2 / 2, ln2 in two parts (n * hi exact for |n| < 2^9) */
    ir_val lowest = kx_f32(k, -104.0f);
    ir_val xc = kx_max(k, kx_min_f(k, x, 89.0f), lowest);
    ir_val n = kx_floor(k, kx_fma_f(k, xc, 1.44269504088896341f, 0.5f));
    ir_val nn = kx_neg(k, n);
    ir_val r = kx_fma(k, nn, kx_f32(k, 0.693145751953125f), xc);
    r = kx_fma(k, nn, kx_f32(k, 1.428606765330187e-6f), r);
    /* e^r: Taylor to r^7 (truncation below 1e-8 relative on |r| <= 0.347) */
    static const float inv_fact[] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
    ir_val p = kx_f32(k, inv_fact[0]);
    for (int i = 1; i < 8; i++) p = kx_fma(k, p, r, kx_f32(k, inv_fact[i]));
    /* times 2^n in two exact power-of-two factors, so results down in the subnormals round once */
    ir_val ni = kx_as(k, n, IR_I32);
    ir_val n1 = kx_div(k, ni, kx_i32(k, 2)), n2 = kx_sub(k, ni, n1);
    ir_val s1 = pow2(k, n1);
    ir_val s2 = pow2(k, n2);
    ir_val e = kx_mul(k, kx_mul(k, p, s1), s2);
    /* outside the clamp: 0 or infinity; NaN stays NaN */
    ir_val zero = kx_f32(k, 0.0f);
    e = kx_select(k, kx_lt_f(k, x, -104.0f), zero, e);
    ir_val inf = kx_f32(k, INFINITY);
    e = kx_select(k, kx_gt_f(k, x, 88.75f), inf, e);
    ir_val is_nan = kx_not(k, kx_le_f(k, x, INFINITY)); /* compares are ordered */
    return kx_select(k, is_nan, x, e);
}

ir_val kn_exp_nonpositive(kx k, ir_val x) {
    /* x = n ln2 + r as kn_exp, n in -151..0 */
    ir_val xc = kx_max(k, x, kx_f32(k, -104.0f));
    ir_val n = kx_floor(k, kx_fma_f(k, xc, 1.44269504088896341f, 0.5f));
    ir_val nn = kx_neg(k, n);
    ir_val r = kx_fma(k, nn, kx_f32(k, 0.693145751953125f), xc);
    r = kx_fma(k, nn, kx_f32(k, 1.428606765330187e-6f), r);
    /* e^r on the device (|r| <= 0.35: a few ulps), times 2^n where that is a normal f32 */
    ir_val ni = kx_max(k, kx_as(k, n, IR_I32), kx_i32(k, -126));
    ir_val e = kx_mul(k, ir_un(k.ir, IR_OP_EXP, r), pow2(k, ni));
    return kx_select(k, kx_lt_f(k, x, -87.0f), kx_f32(k, 0.0f), e);
}
