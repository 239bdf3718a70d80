/* kernels/ — the model's kernels written with the IR builder. Each builder takes the
 * shapes (written into the IR as constants) and the device's caps, and returns a
 * verified kernel, or NULL with err (invalid input: bad shapes, a dtype that is not
 * bf16/f16; unsupported: caps that cannot run it; out of memory).
 *
 * The numerical contract (docs/ARCHITECTURE.md): activations and weights are `dtype` (IR_BF16 or
 * IR_F16) in buffers; every sum is f32; norms, rope and activations compute in f32;
 * results are rounded to dtype once, on store (round to nearest even).
 *
 * Buffer and scalar parameters are listed per kernel by name, in declaration order, with
 * the elements each may touch (its extent, declared in the IR: what the plan checks when
 * it binds a buffer to the name, plan/plan_bind.h). The launch grid is given per kernel; builders whose grid follows from
 * the shapes also return it through groups (may be NULL). */
#ifndef KILN_KERNELS_KERNELS_H
#define KILN_KERNELS_KERNELS_H

#include "base/error.h"
#include "ir/ir.h"
#include "kernels/kn_quant.h"
#include "runtime/caps.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* y[r][c] = (x[r][c] * scale_r) * w[c], scale_r = 1 / sqrt(mean_c(x[r][c]^2) + eps).
 * Params: x (dtype, read), w (dtype, read, n), y (dtype, write).
 * Grid: one workgroup per row: groups = {n_rows, 1, 1}. */
ir_kernel *kn_rmsnorm(const rt_caps *c, uint32_t n, ir_scalar dtype, float eps, kiln_err *err);
/* The per-head variant (qwen3 q/k norm): the same math on rows of head_dim with one
 * head_dim weight shared by every head, with a workgroup sized for short rows.
 * Grid: one workgroup per (token, head): groups = {n_tokens * n_heads, 1, 1}. */
ir_kernel *kn_rmsnorm_heads(const rt_caps *c, uint32_t head_dim, ir_scalar dtype, float eps, kiln_err *err);

/* Prefill kernels run a block of up to n_max tokens recorded once: they are launched for
 * n_max and read the block's first position and token count from a u32 buffer
 * info = {pos0, n} (n <= n_max), so one recording serves every prompt length. Rows of
 * activations at t >= n hold anything; kernels may read them but write none. */

/* Epilogues fused into the matrix products (flags, or'ed):
 *   KN_EPI_BIAS      + b[r] (dtype) in f32 before the one rounding (qwen2's q/k/v bias)
 *   KN_EPI_RESIDUAL  y = round(round(sum) + res[r]): the contract's residual add, fused
 *                    (res is dtype, the same shape as y, a different buffer)
 *   KN_EPI_SWIGLU    (kn_matvec only) W is the gate's weight and Wu the up's (same
 *                    shape): y[r] = round(silu(round(g_r)) * round(u_r)),
 *                    silu(g) = g / (1 + exp(-g)), the contract's SwiGLU, fused
 *   KN_EPI_FAULT     (kn_matvec with out = IR_F32 only) + 0.5 * (r % 7): an error planted on
 *                    purpose (rt_debug.fault_logits), large enough to change greedy
 *                    tokens, so `kiln diverge` can be shown to flag a wrong logits head
 *   KN_EPI_F32       (kn_matmul, kn_matmul_skinny) Y is f32: the sums unrounded, the logits
 *                    head of a step of several tokens (as kn_matvec's out = IR_F32)
 * SWIGLU takes neither of the others, F32 none; extra params come in the order b, res, Wu. */
enum { KN_EPI_NONE = 0, KN_EPI_BIAS = 1, KN_EPI_RESIDUAL = 2, KN_EPI_SWIGLU = 4, KN_EPI_FAULT = 8, KN_EPI_F32 = 16 };

/* y[r] = sum_c W[r * cols + c] * x[c] for r < rows (W row-major, as GGUF stores a
 * [cols, rows] tensor), then the epilogue. out is dtype, or IR_F32 for the logits head
 * (no epilogue then).
 * Params: W (dtype, read), x (dtype, read, cols), y (out, write, rows), then b (dtype,
 * read, rows) with KN_EPI_BIAS, res (dtype, read, rows) with KN_EPI_RESIDUAL, Wu (dtype,
 * read, rows * cols) with KN_EPI_SWIGLU.
 * Grid: groups = {*groups_x, 1, 1} (a few rows per workgroup, one per subgroup, where
 * the caps offer subgroup reduce; one row per workgroup otherwise). Where
 * kn_matvec_strided(c), also any smaller grid {1..*groups_x, 1, 1}: the rows are strided
 * over the workgroups launched, each row computed the same way whoever computes it, so
 * the result does not depend on the grid (plan_tune picks the fastest on the device). */
bool kn_matvec_strided(const rt_caps *c);
ir_kernel *kn_matvec(const rt_caps *c, uint32_t rows, uint32_t cols, ir_scalar dtype, ir_scalar out, unsigned epi,
                     uint32_t *groups_x, kiln_err *err);

/* kn_matvec of the RMSNorm of x: every workgroup first computes h = round((x * scale) *
 * wn) (kn_rmsnorm's row, scale from the same f32 sums) into workgroup memory, then the
 * products read h there: the decode step's norm and the product after it in one launch.
 * Params: as kn_matvec (x is the un-normalized row), then wn (dtype, read, cols).
 * NULL when a row of f32 does not fit the caps' workgroup memory. */
ir_kernel *kn_matvec_norm(const rt_caps *c, uint32_t rows, uint32_t cols, ir_scalar dtype, ir_scalar out, unsigned epi,
                          float eps, uint32_t *groups_x, kiln_err *err);

/* kn_matvec and kn_matvec_norm on block-quantized weights (kn_quant.h): the parts'
 * matrices stacked (W, then W1, W2: each part's rows x cols, u32 words of its layout),
 * or with SWIGLU two parts of equal rows, the gate (W) and the up (Wu), each of its own
 * type. The other parameters, epilogues and grid as kn_matvec (norm: kn_matvec_norm's,
 * eps). Each sub-block sums as s * sum(q x) + m * sum(x). */
ir_kernel *kn_matvec_q(const rt_caps *c, const kn_qpart *parts, uint32_t n_parts, uint32_t cols, ir_scalar dtype,
                       ir_scalar out, unsigned epi, uint32_t *groups_x, kiln_err *err);
ir_kernel *kn_matvec_q_norm(const rt_caps *c, const kn_qpart *parts, uint32_t n_parts, uint32_t cols,
                            ir_scalar dtype, ir_scalar out, unsigned epi, float eps, uint32_t *groups_x,
                            kiln_err *err);
/* kn_matmul on block-quantized weights (parts as kn_matvec_q: W, W1, W2 stacked), the same
 * X, Y, info, b, res, epilogues BIAS, RESIDUAL or F32 (Y in f32, the sums as they are),
 * n_max a multiple of 8; general-purpose lanes (every device).
 * Grid: groups = {groups[0], groups[1], 1}. */
ir_kernel *kn_matmul_q(const rt_caps *c, const kn_qpart *parts, uint32_t n_parts, uint32_t cols, uint32_t n_max,
                       ir_scalar dtype, unsigned epi, uint32_t groups[2], kiln_err *err);

/* The prefill projections: Y[t][r] = sum_c W[r * cols + c] * X[t * cols + c] for r < rows
 * and t < n = info[1], then the epilogue (KN_EPI_BIAS and/or KN_EPI_RESIDUAL, res being
 * [n_max][rows]); rows t >= n of Y are not written. X is read in whole tiles of tokens:
 * it must be allocated for n_max rows, n_max a multiple of 64. Cooperative matrices of
 * dtype x dtype -> f32 where the caps offer them and the shape tiles evenly; a tiled
 * kernel in workgroup memory otherwise.
 * Params: W (dtype, read), X (dtype, read, n_max * cols), Y (dtype, write, n_max * rows),
 * info (u32, read, 2), then b (dtype, read, rows) with KN_EPI_BIAS, then res (dtype,
 * read, n_max * rows) with KN_EPI_RESIDUAL.
 * Grid: groups = {groups[0], groups[1], 1}; workgroups whose tokens all lie at t >= n
 * return at once. */
ir_kernel *kn_matmul(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype, unsigned epi,
                     uint32_t groups[2], kiln_err *err);
/* Where kn_matmul takes KN_EPI_SWIGLU (the warpgroup variant only): W the gate, then Wu
 * (dtype, read, rows x cols) the up, Y = silu(round(W X)) * round(Wu X) rounded, as the
 * separate products and kn_swiglu give; refused by name elsewhere. */
bool kn_matmul_swiglu_ok(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype);

/* kn_matmul on warpgroup products (wgmma, sm_90a; matmul_wg.c), which kn_matmul takes
 * where its grid covers half the compute units: the same parameters, epilogues (BIAS,
 * RESIDUAL) and results up to summation order, tiles of 128 tokens x 128, 192 or 256 rows;
 * where kn_matmul_wg_ok (caps.wgmma, asynchronous copies, cols a multiple of 8).
 * KILN_MATMUL_WG=tile_r,kc,stages,async names another shape (taken whatever the grid),
 * KILN_MATMUL_WG=0 turns it off. */
bool kn_matmul_wg_ok(const rt_caps *c, ir_scalar dtype, uint32_t cols);
ir_kernel *kn_matmul_wg(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype, unsigned epi,
                        uint32_t groups[2], kiln_err *err);
/* kn_matmul on the tensor copy engine and warpgroup products (sm_90a; matmul_tma.c), which
 * kn_matmul takes first where caps.tma and caps.wgmma: the same parameters, epilogues
 * (BIAS, RESIDUAL, SWIGLU) and results up to summation order; a producer subgroup copies
 * tiles of 128 tokens x 128, 192 or 256 rows by tensor maps into a ring of memory barriers
 * for two consumer warpgroups (in clusters of two sharing W's tile where forced and the
 * token tiles pair up). Grid: {groups[0], 1}, a multiple of the cluster.
 * KILN_MATMUL_TMA=tile_r,cluster names a shape, KILN_MATMUL_TMA=0 turns it off. */
ir_kernel *kn_matmul_tma(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype,
                         unsigned epi, uint32_t groups[2], kiln_err *err);
/* Whether kn_matmul builds the tma variant for this product (and kn_matmul_tma builds it). */
bool kn_matmul_tma_ok(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype, unsigned epi);

/* kn_matmul for short blocks: the same parameters, math and epilogues (BIAS, RESIDUAL),
 * each weight read once for all n_max <= 64 tokens on matrix fragments (a workgroup per 16
 * or 32 rows, its subgroups splitting the columns): a short prompt costs about a weight
 * read. Only where kn_matmul_skinny_ok: the caps' dtype x dtype -> f32 16x8x16 fragments
 * (CUDA: in subgroups of 32, their elements loaded by the kernel; elsewhere cooperative
 * matrices of 16x8x16 or 16x16x16 loaded whole from the buffers), rows a multiple of 16,
 * cols of 32, n_max up to 64 in whole fragments of 8 (or 16) tokens, and the f32 sums
 * within workgroup memory (for every epilogue). Epilogues BIAS, RESIDUAL, or SWIGLU:
 * W the gate and Wu (rows x cols, read) the up, Y = silu(round(W X)) * round(Wu X)
 * rounded, as separate products and kn_swiglu give. Grid: groups = {groups[0], 1}; past
 * 64 tokens, n_max a multiple of 64 runs blocks of 64 on y: {groups[0], n_max / 64} (a
 * product of few rows, whose tiled kernel's grid would leave the device idle). */
bool kn_matmul_skinny_ok(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype);
ir_kernel *kn_matmul_skinny(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype,
                            unsigned epi, uint32_t groups[2], kiln_err *err);
/* kn_matmul_skinny of the RMSNorm of X: each live token's scale first (kn_rmsnorm's,
 * from f32 sums in another order), then X's elements h = round((x * scale) * wn) as they
 * are loaded: the short block's norm and the product after it in one launch, the results
 * those of kn_rmsnorm then kn_matmul_skinny but for the scale's summation order. Params: as
 * kn_matmul_skinny (X the un-normalized rows), then wn (dtype, read, cols). The same
 * epilogues and grid. Only where kn_matmul_skinny_norm_ok: CUDA's fragments (whose
 * elements the kernel loads itself; not Vulkan's), subgroup reduce, and the skinny
 * shape with each token's scale also in workgroup memory. */
bool kn_matmul_skinny_norm_ok(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype);
ir_kernel *kn_matmul_skinny_norm(const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype,
                                 unsigned epi, float eps, uint32_t groups[2], kiln_err *err);

/* out[i] = a[i] + b[i] (the residual add). Params: a, b (dtype, read), out (dtype, write).
 * out[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u (SwiGLU). Params: g, u, out.
 * out[i] = x[i] * (1 / (1 + exp(-gate[i]))) (qwen35's attention output gate). Params: x,
 * gate, out. Each computes in f32 and rounds once.
 * Grid: groups = {*groups_x, 1, 1} (a grid-stride loop covers any n). */
ir_kernel *kn_add(const rt_caps *c, uint32_t n, ir_scalar dtype, uint32_t *groups_x, kiln_err *err);
ir_kernel *kn_swiglu(const rt_caps *c, uint32_t n, ir_scalar dtype, uint32_t *groups_x, kiln_err *err);
ir_kernel *kn_sigmoid_gate(const rt_caps *c, uint32_t n, ir_scalar dtype, uint32_t *groups_x, kiln_err *err);

/* Rotary embedding in place on x = [n_tokens][n_heads][head_dim], the first n_rot dims of
 * each head (pairs (2i, 2i+1), or (i, i + n_rot/2) when neox), token t at position
 * pos[0] + t; pos is a u32 buffer so a recorded step replays with a new position. Angles
 * follow llama.cpp / the oracle: theta_0 = pos, theta_{i+1} = theta_i * base^(-2/n_rot)
 * in f32, one rounding per step.
 * Params: x (dtype, read/write), pos (u32, read, 1).
 * Grid: groups = {*groups_x, n_tokens, 1}. */
ir_kernel *kn_rope(const rt_caps *c, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, bool neox, float base,
                   ir_scalar dtype, uint32_t *groups_x, kiln_err *err);

/* dst[i] = src[i] for i < n, u32 words copied bit for bit in vectors (the widest that
 * divides n): the copy `kiln probe --measure` times for the memory bandwidth.
 * Params: src (u32, read, n), dst (u32, write, n).
 * Grid: groups = {*groups_x, 1, 1} (a grid-stride loop covers any n). */
ir_kernel *kn_copy(const rt_caps *c, uint32_t n, uint32_t *groups_x, kiln_err *err);
/* dst[i] = 0 for i < n, as kn_copy walks it. Params: dst (u32, write, n). Grid: kn_copy's. */
ir_kernel *kn_zero(const rt_caps *c, uint32_t n, uint32_t *groups_x, kiln_err *err);
/* The matrix units' rate through kiln's fragments (`kiln probe --measure`): each subgroup
 * of 4 a workgroup runs iters rounds of 8 independent products of register fragments of
 * kn_frag_rate_shape's shape (the largest of dt into f32 up to 16x16x32; NULL: none), then
 * stores its accumulators; *flops: the launch's. Params: ones (dt, read: ones, m*k or k*n
 * elements, the larger), out (f32, write, groups * KN_FRAG_RATE_FRAGS fragments of m*n).
 * Grid: groups = {groups, 1, 1}. */
#define KN_FRAG_RATE_FRAGS 32 /* accumulators stored per workgroup: 4 subgroups of 8 */
const rt_mma_shape *kn_frag_rate_shape(const rt_caps *c, ir_scalar dt);
ir_kernel *kn_frag_rate(const rt_caps *c, ir_scalar dt, uint32_t iters, uint32_t groups, double *flops,
                        kiln_err *err);

/* out[0] = the index of the largest of logits[0..n) (ties to the lowest index; NaN counts
 * as -inf: the host's samp_argmax), out[1] = that largest value's f32 bits (-inf: there
 * was nothing else, and the host decides what then).
 * Params: logits (f32, read, n), out (u32, write, 2). Grid: groups = {1, 1, 1}. */
ir_kernel *kn_argmax(const rt_caps *c, uint32_t n, kiln_err *err);
/* The same for each of rows rows: row y of logits (f32, read, rows * n) into out[2y],
 * out[2y + 1] (u32, write, 2 * rows). Grid: groups = {1, rows, 1}. */
ir_kernel *kn_argmax_rows(const rt_caps *c, uint32_t n, uint32_t rows, kiln_err *err);
/* kn_argmax_rows over the entries whose bit is set in allow (u32, read, rows * ceil(n / 32):
 * row y's entry v at word y * ceil(n / 32) + v / 32, bit v % 32), the others skipped; a row
 * with none allowed gets index UINT32_MAX and -inf. */
ir_kernel *kn_argmax_masked(const rt_caps *c, uint32_t n, uint32_t rows, kiln_err *err);

/* A mixture of experts' feed-forward (moe.c), n tokens as grid y = n, the choice on the
 * device: kn_moe_scores (h [n x n_embd] dtype, router [n_expert x n_embd] f32 -> scores
 * [n x n_expert] f32; grid {*groups_x, n}); kn_moe_route (scores -> sel [n x k] u32, wt
 * [n x k] f32; grid {1, n}; shared: expert n_expert - 1 is a shared one, every token's
 * last choice, weighted by the sigmoid of its score); kn_moe_gate_up (h, gate and up [n_expert x n_ff x
 * n_embd], sel -> act [n x k x n_ff]; grid {*groups_x, n}); kn_moe_down (act, down
 * [n_expert x n_embd x n_ff], sel, wt, res [n x n_embd] -> y [n x n_embd] = res + the
 * experts' weighted sum; grid {*groups_x, n}). Buffers in that order. */
ir_kernel *kn_moe_scores(const rt_caps *c, uint32_t n_embd, uint32_t n_expert, ir_scalar dtype, uint32_t *groups_x,
                         kiln_err *err);
ir_kernel *kn_moe_route(const rt_caps *c, uint32_t n_expert, uint32_t k_used, bool shared, kiln_err *err);
ir_kernel *kn_moe_gate_up(const rt_caps *c, uint32_t n_embd, uint32_t n_ff, uint32_t n_expert, uint32_t k_used,
                          ir_scalar dtype, bool cached, uint32_t *groups_x, kiln_err *err);
ir_kernel *kn_moe_down(const rt_caps *c, uint32_t n_ff, uint32_t n_embd, uint32_t n_expert, uint32_t k_used,
                       ir_scalar dtype, bool cached, uint32_t *groups_x, kiln_err *err);
/* A block of nb tokens grouped by expert (moe.c), after kn_moe_route: kn_moe_group (sel
 * [nb x k], info (n = info[1] live tokens), rank (scratch, nb x k), off [n_expert + 1],
 * list [nb x k]; grid {1, 1}); kn_moe_gate_up_g (h, gate, up, off, list, act; grid
 * {*groups_x, 1}); kn_moe_down_g (act, down, off, list, yc [nb x k x n_embd]; grid
 * {*groups_x, 1}); kn_moe_combine (yc, wt, res, y, info; grid {*groups_x, nb}). */
ir_kernel *kn_moe_group(const rt_caps *c, uint32_t n_expert, uint32_t k_used, uint32_t nb, bool cached, kiln_err *err);
ir_kernel *kn_moe_gate_up_g(const rt_caps *c, uint32_t n_embd, uint32_t n_ff, uint32_t n_expert, uint32_t k_used,
                            uint32_t nb, ir_scalar dtype, bool cached, uint32_t *groups_x, kiln_err *err);
ir_kernel *kn_moe_down_g(const rt_caps *c, uint32_t n_ff, uint32_t n_embd, uint32_t n_expert, uint32_t k_used,
                         uint32_t nb, ir_scalar dtype, bool cached, uint32_t *groups_x, kiln_err *err);
/* kn_moe_gate_up_g and kn_moe_down_g on matrix fragments (moe_mma.c): the same parameters
 * and results up to the order of f32 sums, grid {groups[0], groups[1]} (experts x row
 * tiles, runs of 64 of an expert's choices); where kn_moe_g_mma_ok (a 16-bit fragment
 * shape, n_in a multiple of 4, the workgroup memory of gate/up's SwiGLU or of down). */
bool kn_moe_g_mma_ok(const rt_caps *c, ir_scalar dtype, uint32_t n_in, bool swiglu);
ir_kernel *kn_moe_gate_up_g_mma(const rt_caps *c, uint32_t n_embd, uint32_t n_ff, uint32_t n_expert, uint32_t k_used,
                                uint32_t nb, ir_scalar dtype, bool cached, uint32_t groups[2], kiln_err *err);
ir_kernel *kn_moe_down_g_mma(const rt_caps *c, uint32_t n_ff, uint32_t n_embd, uint32_t n_expert, uint32_t k_used,
                             uint32_t nb, ir_scalar dtype, bool cached, uint32_t groups[2], kiln_err *err);
ir_kernel *kn_moe_combine(const rt_caps *c, uint32_t n_embd, uint32_t k_used, uint32_t nb, ir_scalar dtype,
                          bool cached, uint32_t *groups_x, kiln_err *err);
/* Where experts are cached (the plan's expert cache: plan/plan_moe_cache.c), sel holds
 * each choice's slot, or KN_MOE_MISS for a choice the host computes: kn_moe_gate_up skips
 * it, kn_moe_down (buffer "miss" after y, [n x k x n_embd]) and kn_moe_combine ("sel",
 * then "miss", after info) take its rounded product from miss, kn_moe_group lists it in
 * a bin past the last (off then has n_expert + 2 entries). The cached products take a
 * last buffer "slots" (u32, one word): the slots the weights' buffers hold now, read at
 * run time, so one kernel serves every slot count (n_expert is then only a bound: the
 * model's experts; a slot at or past "slots" is clamped in, or its list left empty); the
 * 16-bit weights declare one expert's extent. The quantized kernels' planes are laid out
 * for n_expert experts, so those are built for the slots held (n_expert = slots). */
#define KN_MOE_MISS 0xffffffffu
/* The experts' products on block-quantized experts (moe_q.c; kn_quant.h's planes of the
 * [n_expert x rows x cols] tensors, u32 words): kn_moe_gate_up_q (gate of type qg, up of
 * qu), kn_moe_down_q (down of qd), kn_moe_gate_up_g_q and kn_moe_down_g_q take the same
 * buffers, grids, rounding and cached variants as their 16-bit kernels. */
ir_kernel *kn_moe_gate_up_q(const rt_caps *c, uint32_t n_embd, uint32_t n_ff, uint32_t n_expert, uint32_t k_used,
                            kn_qtype qg, kn_qtype qu, ir_scalar dtype, bool cached, uint32_t *groups_x, kiln_err *err);
ir_kernel *kn_moe_down_q(const rt_caps *c, uint32_t n_ff, uint32_t n_embd, uint32_t n_expert, uint32_t k_used,
                         kn_qtype qd, ir_scalar dtype, bool cached, uint32_t *groups_x, kiln_err *err);
ir_kernel *kn_moe_gate_up_g_q(const rt_caps *c, uint32_t n_embd, uint32_t n_ff, uint32_t n_expert, uint32_t k_used,
                              uint32_t nb, kn_qtype qg, kn_qtype qu, ir_scalar dtype, bool cached,
                              uint32_t *groups_x, kiln_err *err);
ir_kernel *kn_moe_down_g_q(const rt_caps *c, uint32_t n_ff, uint32_t n_embd, uint32_t n_expert, uint32_t k_used,
                           uint32_t nb, kn_qtype qd, ir_scalar dtype, bool cached, uint32_t *groups_x,
                           kiln_err *err);

/* out[t][c] = table[tok[t] * n_embd + c] for the launch's tokens t (grid y); a token >=
 * n_vocab gives a row of zeros instead of a read past the table.
 * Params: table (dtype, read, n_vocab * n_embd), tok (u32, read, n_tokens), out (dtype,
 * write, n_tokens * n_embd).
 * Grid: groups = {*groups_x, n_tokens, 1}. */
ir_kernel *kn_embed(const rt_caps *c, uint32_t n_vocab, uint32_t n_embd, ir_scalar dtype, uint32_t *groups_x,
                    kiln_err *err);
/* kn_embed from a block-quantized table (kn_quant.h's words of n_vocab x n_embd of type q):
 * out[t][c] = the value ggml's dequantization gives, rounded to dtype. Same parameters
 * and grid. */
ir_kernel *kn_embed_q(const rt_caps *c, kn_qtype q, uint32_t n_vocab, uint32_t n_embd, ir_scalar dtype,
                      uint32_t *groups_x, kiln_err *err);

/* A step's inputs from the host-mapped buffers the host writes into device memory, once
 * per replay, so the kernels after it read them there: a read of host memory crosses the
 * bus each time (every workgroup of every kernel reading the position did). tok[i] =
 * tok_host[i] for i < n_tok, info[i] = info_host[i] for i < 2.
 * Params: tok_host (u32, read, n_tok), tok (u32, write, n_tok), info_host (u32, read, 2),
 * info (u32, write, 2). Grid: groups = {*groups_x, 1, 1}. */
ir_kernel *kn_stage_inputs(const rt_caps *c, uint32_t n_tok, uint32_t *groups_x, kiln_err *err);

/* out[c] = x[(info[1] - 1) * n + c]: the last row of a prefill block (kernels below), for
 * the logits head. n = info[1] = 0 or > n_max gives zeros.
 * Params: x (dtype, read, n_max * n), info (u32, read, 2), out (dtype, write, n).
 * Grid: groups = {*groups_x, 1, 1}. */
ir_kernel *kn_take_last(const rt_caps *c, uint32_t n, uint32_t n_max, ir_scalar dtype, uint32_t *groups_x,
                        kiln_err *err);

/* A paged KV cache (kiln serve's slots sharing one pool): each layer's K and V caches are a
 * pool of n_pages pages of `rows` rows (a power of two) of kv_dim values; position p of
 * sequence s lives at row pages[s * stride + p / rows] * rows + p % rows, where pages (u32,
 * read, a "pages" parameter) is the sequences' page tables, stride entries each (a
 * single-sequence kernel gets its sequence's stride entries). A sequence holds at most
 * stride * rows positions (the kernels' n_ctx). A page past the pool is none: a store to
 * it writes nothing, a read of it reads the pool's last page (the host never asks). */
typedef struct kn_pages {
    uint32_t rows, n_pages, stride;
} kn_pages;
/* NULL, or err: the paging's shape (rows a power of two of 1..4096, n_pages and stride at
 * least 1, the pool's rows and n_ctx * kv_dim u32 indices). */
int kn_pages_check(const kn_pages *pg, uint64_t kv_dim, const char *who, kiln_err *err);

/* The KV-cache store: kcache[p * kv_dim + i] = k[t * kv_dim + i] and the same for v, bit for
 * bit, for token t of the launch at p = pos[0] + t; caches are [n_ctx][kv_dim] row-major,
 * one buffer per layer for K and one for V. A p >= n_ctx (or one that wrapped past 2^32)
 * writes nothing.
 * Params: k, v (dtype, read, n_tokens * kv_dim), kcache, vcache (dtype, write,
 * n_ctx * kv_dim), pos (u32, read, 1).
 * Grid: groups = {*groups_x, n_tokens, 1}. */
ir_kernel *kn_kv_store(const rt_caps *c, uint32_t kv_dim, uint32_t n_ctx, ir_scalar dtype, uint32_t *groups_x,
                       kiln_err *err);

/* One token's attention (decode), in two launches: for query head h (kv head h / (n_head
 * / n_head_kv)), s_p = (q_h . k_p) * (1 / sqrt(head_dim)) for p = 0..pos[0], softmax in
 * f32 (max subtracted, f32 sum), out_h = sum_p softmax_p * v_p rounded to dtype.
 * kcache/vcache are [n_ctx][n_head_kv * head_dim] as kn_kv_store writes them (head_dim_v
 * == head_dim_k). A pos[0] >= n_ctx writes nothing. Any n_ctx.
 * kn_attn_decode: workgroup (h, s) attends the s-th of n_split equal runs of the keys and
 * leaves f32 (max, sum, unnormalised acc[head_dim]) of its run at part[(h * n_split + s)
 * * (head_dim + 2)]. Params: q (dtype, read, n_head * head_dim), kcache, vcache (dtype,
 * read), part (f32, write, n_head * n_split * (head_dim + 2)), pos (u32, read, 1).
 * Grid: groups = {n_head, n_split, 1} (written to groups).
 * kn_attn_merge: combines the runs of each head into out. Params: part (f32, read), out
 * (dtype, write, n_head * head_dim), pos (u32, read, 1). Grid: {n_head, 1, 1} (= *groups_x).
 * kn_attn_splits: the n_split a plan uses: enough workgroups to fill the device twice
 * over, at most 64 and no runs shorter than 16 positions of the context. */
ir_kernel *kn_attn_decode(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t n_ctx,
                          uint32_t n_split, ir_scalar dtype, uint32_t groups[2], kiln_err *err);
ir_kernel *kn_attn_merge(const rt_caps *c, uint32_t n_head, uint32_t head_dim, uint32_t n_ctx, uint32_t n_split,
                         ir_scalar dtype, uint32_t *groups_x, kiln_err *err);
/* The same for a step's tokens of several sequences (a server's slots decoding together):
 * token b's query is q[b * q_stride ..], its position and sequence tokpos[2b] and
 * tokpos[2b + 1] (u32, read, 2 * batch), its keys rows seq * n_ctx + 0..pos of kcache /
 * vcache (a pool of n_seq caches of n_ctx rows); part holds batch times the runs, out is
 * [batch][n_head * head_dim]. A token whose position is past n_ctx or sequence past n_seq
 * gets no output. Grids: decode {n_head, n_split * batch} (y = b * n_split + s), merge
 * {n_head, batch}. Params as the single-token kernels' with tokpos for pos. */
ir_kernel *kn_attn_decode_batch(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                                uint32_t n_ctx, uint32_t n_split, uint32_t n_seq, uint32_t batch, uint32_t q_stride,
                                ir_scalar dtype, uint32_t groups[2], kiln_err *err);
ir_kernel *kn_attn_merge_batch(const rt_caps *c, uint32_t n_head, uint32_t head_dim, uint32_t n_ctx, uint32_t n_split,
                               uint32_t n_seq, uint32_t batch, ir_scalar dtype, uint32_t *groups_x, kiln_err *err);
uint32_t kn_attn_splits(const rt_caps *c, uint32_t n_head, uint32_t n_ctx);
/* Either decode above with its merge in the same launch: the last of a token's head's
 * n_split workgroups to finish (counted in count: u32, read/write, n_head per token, zero
 * before the first launch and left zero by each) merges the runs as the merge kernel
 * does, bit for bit, into out (dtype, write, [token][n_head * head_dim]). One launch a
 * layer fewer. more (NULL: one token, unpaged, q prepared):
 *   pg: a paged cache (n_ctx then its rows), or NULL;
 *   batch 0: one token (pos); else a step's tokens (tokpos, n_seq, q_stride as
 *     kn_attn_decode_batch);
 *   rope set: kn_qk_prep's work for the token is done here too, so its launch goes as
 *     well: every workgroup reads the raw qkv row ("qkv" for "q": one token's row, or
 *     q_stride apart) and makes its q head and kv head (rope, qk_norm with q_norm and
 *     k_norm, freqs with rope->freq_factors: kn_qk_prep's values bit for bit), uses the
 *     token's own key and value from there, and the kv head's first q head's workgroup
 *     whose run holds the position writes them to the caches (read and written then).
 * Params: the decode's (part read and written), pages, [q_norm, k_norm], [freqs], count,
 * out. Grid as the decode's. */
typedef struct kn_attn_more {
    const kn_pages *pg;
    uint32_t n_seq, batch, q_stride;
    const struct kn_rope_opts *rope;
    bool qk_norm;
    float eps;
} kn_attn_more;
ir_kernel *kn_attn_decode_merged(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                                 uint32_t n_ctx, uint32_t n_split, const kn_attn_more *more, ir_scalar dtype,
                                 uint32_t groups[2], kiln_err *err);
/* Whether the prep form takes these options on c (it needs kn_qk_prep's subgroup form). */
bool kn_attn_prep_ok(const rt_caps *c, uint32_t head_dim, const struct kn_rope_opts *rope, bool qk_norm, float eps);
/* The decode pair's first launch over a paged cache (kn_pages): the same results, the keys
 * of position p at its page's row; n_ctx = stride * rows for the merge. One sequence
 * (pages: its stride entries) or a step's tokens of n_seq (pages: n_seq * stride). */
ir_kernel *kn_attn_decode_paged(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                                const kn_pages *pg, uint32_t n_split, ir_scalar dtype, uint32_t groups[2],
                                kiln_err *err);
ir_kernel *kn_attn_decode_batch_paged(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                                      const kn_pages *pg, uint32_t n_split, uint32_t n_seq, uint32_t batch,
                                      uint32_t q_stride, ir_scalar dtype, uint32_t groups[2], kiln_err *err);

/* Causal attention of a prefill block: query token t < n = info[1] sits at position
 * p_t = info[0] + t and attends cache positions 0..p_t (its own included: kn_qk_prep has
 * stored the block's keys and values before), head h on kv head h / (n_head /
 * n_head_kv); scores (q . k) / sqrt(head_dim), softmax in f32 as kn_attn_decode, out
 * rounded to dtype once. q is read with a row stride of q_stride elements (the q part of
 * a fused qkv row): head h of token t at q[t * q_stride + h * head_dim]. A p_t >= n_ctx
 * writes nothing; rows t >= n are not written.
 * Params: q (dtype, read, n_max * q_stride), kcache, vcache (dtype, read, n_ctx * n_head_kv
 * * head_dim), out (dtype, write, n_max * n_head * head_dim), info (u32, read, 2).
 * Grid: groups = {groups[0], groups[1], 1}. */
ir_kernel *kn_attn_prefill(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t q_stride,
                           uint32_t n_ctx, uint32_t n_max, ir_scalar dtype, uint32_t groups[2], kiln_err *err);
/* kn_attn_prefill's variant on 16x8x16 matrix fragments (attn_prefill_mma.c), which it
 * picks where kn_attn_prefill_mma_ok (the fragments, and a grid of at least half the
 * compute units): the same parameters and results (up to summation order). */
bool kn_attn_prefill_mma_ok(const rt_caps *c, ir_scalar dtype, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                            uint32_t n_max);
/* (pg: NULL, or a paged cache already checked, n_ctx = stride * rows) */
ir_kernel *kn_attn_prefill_mma(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                               uint32_t q_stride, uint32_t n_ctx, const kn_pages *pg, uint32_t n_max, ir_scalar dtype,
                               uint32_t groups[2], kiln_err *err);
/* kn_attn_prefill's variant on 16x16x16 cooperative matrices whose elements the target
 * does not expose (attn_prefill_coop.c: Vulkan's KHR cooperative matrices; the softmax
 * through workgroup memory), which it picks where kn_attn_prefill_mma_ok is not and
 * kn_attn_prefill_coop_ok is (the shape, head_dim <= 128, the memory, a grid of at least
 * half the compute units; opt-in, KILN_ATTN_COOP=1, until it is right on a device): the same parameters and
 * results (up to summation order). */
bool kn_attn_prefill_coop_ok(const rt_caps *c, ir_scalar dtype, uint32_t n_head, uint32_t n_head_kv,
                             uint32_t head_dim, uint32_t n_max);
/* (pg: NULL, or a paged cache already checked, n_ctx = stride * rows) */
ir_kernel *kn_attn_prefill_coop(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                                uint32_t q_stride, uint32_t n_ctx, const kn_pages *pg, uint32_t n_max,
                                ir_scalar dtype, uint32_t groups[2], kiln_err *err);
/* kn_attn_prefill over a paged cache (kn_pages; pages: the sequence's stride entries), n_ctx
 * = stride * rows, on the fragments where kn_attn_prefill_mma_ok. */
ir_kernel *kn_attn_prefill_paged(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                                 uint32_t q_stride, const kn_pages *pg, uint32_t n_max, ir_scalar dtype,
                                 uint32_t groups[2], kiln_err *err);

/* Rope options shared by the kernels that rotate: the pairing, the base, a linear
 * frequency scale (1 / factor; 1 when unscaled) and whether per-pair frequency factors
 * (llama 3's rope_freqs, n_rot / 2 values of dtype) divide the angles:
 * angle_i = freq_scale * theta_i / factor_i, theta as kn_rope. */
typedef struct kn_rope_opts {
    uint32_t n_rot;
    bool neox;
    float base, freq_scale;
    bool freq_factors;
} kn_rope_opts;

/* Everything between the qkv projection and attention, in one launch, for tokens t < n =
 * info[1] at positions info[0] + t: qkv is [n_max][(n_head + 2 * n_head_kv) * head_dim],
 * each row q heads, then k heads, then v heads. Workgroup (x, token t) takes heads
 * j = x, x + groups_x, ..:
 *   q head: per-head RMSNorm with q_norm (when qk_norm; rounded), rope (rounded), written
 *           back in place;
 *   k head: the same with k_norm, written to kcache[p * kv_dim + kvh * head_dim ..];
 *   v head: copied bit for bit to vcache[p * kv_dim + ..]
 * with kv_dim = n_head_kv * head_dim and p = info[0] + t; p >= n_ctx writes nothing.
 * Params: qkv (dtype, read/write), kcache, vcache (dtype, write, n_ctx * kv_dim), info
 * (u32, read, 2), then q_norm, k_norm (dtype, read, head_dim) when qk_norm, then
 * freqs (dtype, read, n_rot / 2) when rope.freq_factors.
 * Where the caps have subgroup sums, each subgroup of a workgroup takes heads of its own
 * (x * subgroups + s, stepping by the grid's subgroups), a whole workgroup one at a time
 * otherwise.
 * Grid: groups = {any groups_x >= 1, n_max, 1}: the same numbers whatever groups_x;
 * kn_qk_prep_groups gives the one for a block of n_max tokens (a head a subgroup for
 * short blocks, up to 4 for long ones: the angle table is computed once a workgroup). */
uint32_t kn_qk_prep_groups(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t n_rot,
                           uint32_t n_max);
ir_kernel *kn_qk_prep(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                      const kn_rope_opts *rope, bool qk_norm, float eps, uint32_t n_ctx, ir_scalar dtype,
                      kiln_err *err);
/* kn_qk_prep for a step's tokens of several sequences: token t (grid row y) at position
 * tokpos[2t] of sequence tokpos[2t + 1] (u32, read, 2 a row of the grid), its k and v into
 * that sequence's rows (seq * n_ctx + position) of a pool of n_seq caches; a token past
 * the context or the pool writes nothing, q included. Params as kn_qk_prep's with tokpos
 * for info. */
ir_kernel *kn_qk_prep_batch(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                            const kn_rope_opts *rope, bool qk_norm, float eps, uint32_t n_ctx, uint32_t n_seq,
                            ir_scalar dtype, kiln_err *err);
/* Both over a paged cache (kn_pages): k and v of position p to its page's row, nothing where
 * the page is none; n_ctx = stride * rows. */
ir_kernel *kn_qk_prep_paged(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                            const kn_rope_opts *rope, bool qk_norm, float eps, const kn_pages *pg, ir_scalar dtype,
                            kiln_err *err);
ir_kernel *kn_qk_prep_batch_paged(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                                  const kn_rope_opts *rope, bool qk_norm, float eps, const kn_pages *pg,
                                  uint32_t n_seq, ir_scalar dtype, kiln_err *err);

/* One line per kernel family ("matmul (prefill): workgroup 128, cooperative matrices
 * 16x16x16 bf16\n", ...): the variants the builders choose for caps c, read off kernels
 * built for a qwen3-0.6b-shaped model in bf16. As snprintf: returns the length needed. */
size_t kn_describe(const rt_caps *c, char *buf, size_t cap);

/* Qwen3.5's Gated DeltaNet (kernels/deltanet.c), token by token over a block of up to
 * n_max tokens (info = {pos0, n}), in the oracle's arithmetic (oracle/deltanet.c).
 *
 * kn_ssm_conv: the causal depthwise convolution of `taps` (2..8) over rows of `channels`:
 * x[t][c] = round(silu(sum_i in_i w[c][i])) where in_0 .. in_{taps-2} are the inputs before
 * token t (the state's rows, oldest first, then the block's) and in_{taps-1} = qkv[t][c];
 * state ((taps-1) x channels, f32) then holds the latest taps-1 inputs. w: channels x taps
 * f32. Params: qkv (dtype), w, state, x (dtype), info. Grid: groups[0] workgroups. */
ir_kernel *kn_ssm_conv(const rt_caps *c, uint32_t channels, uint32_t taps, uint32_t n_max, ir_scalar dtype,
                       uint32_t groups[2], kiln_err *err);

/* The same convolution token-parallel for a prefill block: kn_ssm_conv_block (qkv, w,
 * state, x, info; the state only read) then kn_ssm_conv_state (qkv, state, info: the
 * window moved past the block's n tokens). Launched in that order they give
 * kn_ssm_conv's x and state bit for bit. */
ir_kernel *kn_ssm_conv_block(const rt_caps *c, uint32_t channels, uint32_t taps, uint32_t n_max, ir_scalar dtype,
                             uint32_t groups[2], kiln_err *err);
ir_kernel *kn_ssm_conv_state(const rt_caps *c, uint32_t channels, uint32_t taps, uint32_t n_max, ir_scalar dtype,
                             uint32_t groups[2], kiln_err *err);

/* kn_deltanet: the gated delta rule. x: the convolution's output, rows of 2 k_heads
 * state + v_heads state (q heads, k heads, v heads); ba: the beta and alpha projections
 * (rows of 2 v_heads: beta's, then alpha's; one product of their stacked weights); dt_bias, ssm_a: v_heads f32; S: v_heads x state x state f32, head j's
 * S[i][c] at (j state + i) state + c (i a k dim, c a v dim), read and written; o: rows of
 * v_heads state, f32, the heads' outputs before their gated norm (kn_deltanet_norm below,
 * launched after on o, z and norm). Value head j takes k head j % k_heads. Grid:
 * groups[0] = v_heads by groups[1] blocks of a head's value dims. */
/* The largest state (head) size the delta-rule kernels take, token and chunked alike: the
 * decode kernel holds up to this many state values an invocation in registers. */
#define KN_DELTANET_MAX_STATE 128
typedef struct kn_deltanet_shape {
    uint32_t k_heads, v_heads, state, n_max;
    uint32_t chunk; /* the chunked kernels' tokens a chunk: 0 chooses (a power of two, 8..64) */
} kn_deltanet_shape;
ir_kernel *kn_deltanet(const rt_caps *c, const kn_deltanet_shape *shape, ir_scalar dtype, float eps,
                       uint32_t groups[2], kiln_err *err);

/* The same recurrence over a prefill block in chunks (kernels/deltanet_chunk.c), three
 * launches in order: kn_deltanet_prep (x, ba, dt_bias, ssm_a, qk, uw, p, gl, info; all
 * chunks at once), kn_deltanet_scan (qk, uw, p, gl, S, o, info; the chunks in order, the
 * state read and written) and kn_deltanet_norm (o, z, norm, y, info: y = rmsnorm(o) norm
 * silu(z) per token and head, z and y rows of v_heads state in dtype; also kn_deltanet's). qk, uw, p, gl and o are f32 scratch of the sizes below (elements), which
 * kn_deltanet_scratch_of gives with the chunk it takes for the caps' workgroup memory
 * (KILN_ERR_UNSUPPORTED where even chunks of 8 do not fit). Each builder's grid is
 * groups[0] x groups[1]. */
typedef struct kn_deltanet_scratch {
    uint32_t chunk, n_chunks;
    uint64_t qk, uw, p, gl, o;
} kn_deltanet_scratch;
int kn_deltanet_scratch_of(const rt_caps *c, const kn_deltanet_shape *shape, kn_deltanet_scratch *out,
                           kiln_err *err);
ir_kernel *kn_deltanet_prep(const rt_caps *c, const kn_deltanet_shape *shape, ir_scalar dtype, float eps,
                            uint32_t groups[2], kiln_err *err);
ir_kernel *kn_deltanet_scan(const rt_caps *c, const kn_deltanet_shape *shape, uint32_t groups[2], kiln_err *err);
/* kn_deltanet_scan's variant on 16x8x16 matrix fragments (deltanet_scan_mma.c), which it
 * builds where kn_deltanet_scan_mma_ok (CUDA's bf16 fragments, a state a multiple of 16 up
 * to 128, chunks of 16 tokens or more): the same parameters, its own grid. */
bool kn_deltanet_scan_mma_ok(const rt_caps *c, const kn_deltanet_shape *shape);
/* The largest chunk whose two staging slots the fragment scan fits in workgroup memory (0
 * where it does not apply): the chunk kn_deltanet_scratch_of takes at most when it chooses. */
uint32_t kn_deltanet_mma_chunk(const rt_caps *c, const kn_deltanet_shape *shape);
ir_kernel *kn_deltanet_scan_mma(const rt_caps *c, const kn_deltanet_shape *shape, uint32_t groups[2], kiln_err *err);
ir_kernel *kn_deltanet_norm(const rt_caps *c, const kn_deltanet_shape *shape, ir_scalar dtype, float eps,
                            uint32_t groups[2], kiln_err *err);

#endif
