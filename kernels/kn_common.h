/* Helpers shared by the kernel builders (not part of kernels.h). */
#ifndef KILN_KERNELS_KN_COMMON_H
#define KILN_KERNELS_KN_COMMON_H

#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/kn_expr.h"

#include <stdarg.h>

/* 0 when dtype is bf16/f16 and the caps can hold it in buffers; -1 with err otherwise. */
int kn_check_dtype(const rt_caps *c, ir_scalar dtype, kiln_err *err);
/* The largest power of two <= min(want, caps.max_workgroup, 1024), at least 1. */
uint32_t kn_workgroup(const rt_caps *c, uint32_t want);
/* The widest vector (4, 2 or 1 elements) that divides n, so vector loads never straddle
 * a row end and the loop bound alone masks the tail. */
uint32_t kn_vec_width(uint32_t n);
/* The sum of v over the workgroup of wg invocations (wg a power of two), in every
 * invocation: subgroup reduce then workgroup memory across subgroups where the caps
 * offer it, a workgroup-memory tree otherwise. Contains barriers: call it in uniform
 * control flow, once per shm name. */
ir_val kn_wg_sum(kx k, uint32_t wg, ir_val v, const char *shm_name);
/* Sum of the lanes of an f32 vector (or v itself for a scalar), lane 0 first. */
ir_val kn_lane_sum(kx k, ir_val v, uint32_t lanes);
/* -1 with err when epi has flags outside allowed, or SWIGLU with another flag. */
int kn_check_epi(const char *who, unsigned epi, unsigned allowed, kiln_err *err);
/* The fused epilogue of a product (kernels.h, KN_EPI_*) on an f32 sum: the bias
 * b[b_index] (BIAS), the rounding to dtype, the residual res[res_index] and a second
 * rounding (RESIDUAL). Returns the dtype value to store. b/res are ignored without
 * their flag. */
ir_val kn_epilogue(kx k, unsigned epi, ir_val sum, ir_buf b, ir_val b_index, ir_buf res, ir_val res_index,
                   ir_scalar dtype);
/* silu(g) * u in f32, silu(g) = g / (1 + exp(-g)), as the oracle writes it. */
ir_val kn_silu_mul(kx k, ir_val g, ir_val u);
/* Gated DeltaNet's gates (kernels/deltanet*.c): softplus(x) = log(1 + exp(x)) (x past
 * 20: x, as ggml), sigmoid(x) = 1 / (1 + exp(-x)), and the l2 norm's divisor's inverse
 * 1 / max(sqrt(ss), eps) from a sum of squares. log is the device's. */
ir_val kn_softplus(kx k, ir_val x);
ir_val kn_sigmoid(kx k, ir_val x);
ir_val kn_l2_inv(kx k, ir_val ss, float eps);
/* f32 scalar divide, square root and exp to the oracle's precision (correctly rounded
 * but for rare last-bit cases; exp within about an ulp, subnormals included), built from
 * fma around the device's approximations, which Vulkan allows to be a few ulps off. */
ir_val kn_fdiv(kx k, ir_val a, ir_val b);
ir_val kn_fsqrt(kx k, ir_val x);
ir_val kn_exp(kx k, ir_val x);
/* exp(x) for x <= 0 (-inf and below -87 give 0, where e^x < 2^-125; NaN gives no NaN): x = n ln2 + r as
 * kn_exp, e^r from the device's exp on |r| <= 0.35 (a few ulps), times 2^n: within about
 * 2^-22 of e^x at a third of kn_exp's instructions, for softmax weights, which are at most
 * 1 and summed to at least 1. */
ir_val kn_exp_nonpositive(kx k, ir_val x);
/* kn_early.c: the kernel lets the next one be scheduled as soon as it starts
 * (ir_set_launch_early), for short kernels whose successor prefetches. */
void kn_launch_early(kx k);
/* Before the kernel's grid.wait: invocation i of a workgroup prefetches row row0 + i (i <
 * rows_per_group, the row < rows) of w, rows of cols 16-bit elements held elems_per_word
 * to a buffer element, where the workgroup is among the first whose rows (n_mats weights
 * of them: W and Wu) fit the prefetch budget. The caller then calls ir_grid_wait. */
void kn_prefetch_rows(kx k, ir_buf w, ir_val row0, uint32_t rows_per_group, uint32_t rows, uint32_t cols,
                      uint32_t elems_per_word, uint32_t n_mats);
/* Verifies k: k, or NULL (k destroyed) with the builder's or verifier's message. */
ir_kernel *kn_finish(ir_kernel *k, kiln_err *err);
/* ir_kernel_create, with the out-of-memory message. */
ir_kernel *kn_create(const char *name, kiln_err *err);

/* A prefill attention kernel's parameters, declared in this order: q (dtype, n_max *
 * q_stride), kcache and vcache (the cache's rows, paged or not, of kv_dim), out (n_max *
 * n_head * hd), info (u32 pos0, n) and, paged, the sequence's pages. */
typedef struct kn_attn_bufs {
    ir_buf q, kc, vc, out, info, pages;
} kn_attn_bufs;
void kn_attn_prefill_bufs(kx k, ir_scalar dt, uint32_t n_max, uint32_t q_stride, uint32_t n_head, uint32_t hd,
                          uint64_t kv_dim, uint32_t n_ctx, const kn_pages *pg, kn_attn_bufs *b);

/* A prefill attention workgroup's place (attn_prefill_mma.c, attn_prefill_coop.c): group
 * x takes hpt heads of one kv head (group query heads each) from head0, its keys and values
 * at kv_off in a cache row; group y a block of tpt tokens from t0, the last (longest) block
 * first; from info = {pos0, n}, the valid tokens t < n_valid: t < n, t < n_max and pos0 + t
 * < n_ctx (computed without wrapping). blocks: the grid's y. */
typedef struct kn_attn_place {
    ir_val head0, kv_off, t0, pos0, n_valid;
    uint32_t blocks;
} kn_attn_place;
void kn_attn_place_of(kx k, ir_buf info, uint32_t hpt, uint32_t group, uint32_t hd, uint32_t tpt, uint32_t n_max,
                      uint32_t n_ctx, kn_attn_place *p);

/* p >= p0 && p < n_ctx: a token's cache position p = p0 + t inside the cache and not
 * wrapped past 2^32. */
ir_val kn_in_cache(kx k, ir_val p, ir_val p0, uint32_t n_ctx);

/* A paged cache (kn_pages; NULL: none): the page of position p in the table tab from entry
 * tab0 (an entry past the pool stays as it is: the caller decides), and the row of a page. */
ir_val kn_page_of(kx k, const kn_pages *pg, ir_buf tab, ir_val tab0, ir_val p);
ir_val kn_page_row(kx k, const kn_pages *pg, ir_val page, ir_val p);
/* The cache row of position p: row0 + p unpaged, else its page's row with a page past the
 * pool read as the last (reads never leave the pool). */
ir_val kn_cache_row(kx k, const kn_pages *pg, ir_buf tab, ir_val tab0, ir_val row0, ir_val p);

/* Rope's angle chain (kn_rope, kn_qk_prep): theta_to = th * theta_scale^(to - from) for
 * th = theta_from, by to - from f32 multiplications, one rounding each, as the oracle
 * and llama.cpp build it (theta_scale = powf(base, -2 / n_rot) on the host). */
ir_val kn_rope_theta(kx k, ir_val th, ir_val from, ir_val to, float theta_scale);
/* sin and cos of an f32 angle (|th| < ~1e5) to about an ulp: a Cody-Waite reduction by
 * pi/2 and polynomials in f32 fma. Not the device's sin/cos, which Vulkan lets be as coarse as
 * 2^-11 absolute and NVIDIA's are ~2^-21: each difference from the oracle's libm turns a
 * few more 16-bit roundings of q and k the other way. */
void kn_sincos(kx k, ir_val th, ir_val *sin_out, ir_val *cos_out);
/* The pair (x0, x1) rotated by the angle whose cosine and sine are cs and sn:
 * o0 = x0 cs - x1 sn, o1 = x0 sn + x1 cs, in f32. */
void kn_rotate(kx k, ir_val x0, ir_val x1, ir_val cs, ir_val sn, ir_val *o0, ir_val *o1);
/* The RMSNorm scale of x[base .. base + n): 1 / sqrt(sum(x^2) / n + eps), sums in f32,
 * the same in every invocation of the workgroup of wg. Invocation lid reads vectors of
 * kn_vec_width(n) at lid * v, lid * v + wg * v, ... (base a multiple of that width).
 * Contains kn_wg_sum's barriers: uniform control flow, one shm name per call. */
ir_val kn_rms_scale(kx k, uint32_t wg, ir_buf x, ir_val base, uint32_t n, float eps, const char *shm_name);
/* The scale of a row of n from its f32 sum of squares: 1 / sqrt(total / n + eps), each step
 * correctly rounded (kn_rms_scale's last steps). */
ir_val kn_rms_of_sum(kx k, ir_val total, uint32_t n, float eps);

#endif
