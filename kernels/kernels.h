/* kernels/ — the model's kernels written with the IR builder. Each builder takes the
 * shapes (written into the IR as constants) and the device's caps, and returns a
 * verified kernel, or NULL with a message in err (bad shapes, a dtype that is not
 * bf16/f16, caps that cannot run it, out of memory).
 *
 * The numerical contract (DESIGN.md): activations and weights are `dtype` (IR_BF16 or
 * IR_F16) in buffers; every sum is f32; norms, rope and activations compute in f32;
 * results are rounded to dtype once, on store (round to nearest even).
 *
 * Buffer and scalar parameters are listed per kernel in declaration order (the order of
 * rt_launch.args). The launch grid is given per kernel; builders whose grid follows from
 * the shapes also return it through groups (may be NULL). */
#ifndef KILN_KERNELS_H
#define KILN_KERNELS_H

#include "caps.h"
#include "ir.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* y[r][c] = (x[r][c] * scale_r) * w[c], scale_r = 1 / sqrt(mean_c(x[r][c]^2) + eps).
 * Params: x (dtype, read), w (dtype, read, n), y (dtype, write).
 * Grid: one workgroup per row: groups = {n_rows, 1, 1}. */
ir_kernel *kn_rmsnorm(const rt_caps *c, uint32_t n, ir_scalar dtype, float eps, char *err, size_t errlen);
/* The per-head variant (qwen3 q/k norm): the same math on rows of head_dim with one
 * head_dim weight shared by every head, with a workgroup sized for short rows.
 * Grid: one workgroup per (token, head): groups = {n_tokens * n_heads, 1, 1}. */
ir_kernel *kn_rmsnorm_heads(const rt_caps *c, uint32_t head_dim, ir_scalar dtype, float eps, char *err, size_t errlen);

/* y[r] = sum_c W[r * cols + c] * x[c] for r < rows (W row-major, as GGUF stores a
 * [cols, rows] tensor). out is dtype, or IR_F32 for the logits head.
 * Params: W (dtype, read), x (dtype, read, cols), y (out, write, rows).
 * Grid: groups = {*groups_x, 1, 1} (a few rows per workgroup, one per subgroup, where
 * the caps offer subgroup reduce; one row per workgroup otherwise). */
ir_kernel *kn_matvec(const rt_caps *c, uint32_t rows, uint32_t cols, ir_scalar dtype, ir_scalar out,
                     uint32_t *groups_x, char *err, size_t errlen);

/* out[i] = a[i] + b[i] (the residual add). Params: a, b (dtype, read), out (dtype, write).
 * out[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u (SwiGLU). Params: g, u, out.
 * Grid: groups = {*groups_x, 1, 1} (a grid-stride loop covers any n). */
ir_kernel *kn_add(const rt_caps *c, uint32_t n, ir_scalar dtype, uint32_t *groups_x, char *err, size_t errlen);
ir_kernel *kn_swiglu(const rt_caps *c, uint32_t n, ir_scalar dtype, uint32_t *groups_x, char *err, size_t errlen);

/* Rotary embedding in place on x = [n_tokens][n_heads][head_dim], the first n_rot dims of
 * each head (pairs (2i, 2i+1), or (i, i + n_rot/2) when neox), token t at position
 * pos[0] + t; pos is a u32 buffer so a recorded step replays with a new position. Angles
 * follow llama.cpp / the oracle: theta_0 = pos, theta_{i+1} = theta_i * base^(-2/n_rot)
 * in f32, one rounding per step.
 * Params: x (dtype, read/write), pos (u32, read, 1).
 * Grid: groups = {*groups_x, n_tokens, 1}. */
ir_kernel *kn_rope(const rt_caps *c, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, bool neox, float base,
                   ir_scalar dtype, uint32_t *groups_x, char *err, size_t errlen);

/* out[0] = the index of the largest of logits[0..n) (ties to the lowest index).
 * Params: logits (f32, read, n), out (u32, write, 1). Grid: groups = {1, 1, 1}. */
ir_kernel *kn_argmax(const rt_caps *c, uint32_t n, char *err, size_t errlen);

/* out[c] = table[token * n_embd + c] with token = tok[0]; a token >= n_vocab gives a row
 * of zeros instead of a read past the table.
 * Params: table (dtype, read, n_vocab * n_embd), tok (u32, read, 1), out (dtype, write).
 * Grid: groups = {*groups_x, 1, 1}. */
ir_kernel *kn_embed(const rt_caps *c, uint32_t n_vocab, uint32_t n_embd, ir_scalar dtype, uint32_t *groups_x,
                    char *err, size_t errlen);

/* The KV-cache store: kcache[p * kv_dim + i] = k[t * kv_dim + i] and the same for v, bit for
 * bit, for token t of the launch at p = pos[0] + t; caches are [n_ctx][kv_dim] row-major,
 * one buffer per layer for K and one for V. A p >= n_ctx (or one that wrapped past 2^32)
 * writes nothing.
 * Params: k, v (dtype, read, n_tokens * kv_dim), kcache, vcache (dtype, write,
 * n_ctx * kv_dim), pos (u32, read, 1).
 * Grid: groups = {*groups_x, n_tokens, 1}. */
ir_kernel *kn_kv_store(const rt_caps *c, uint32_t kv_dim, uint32_t n_ctx, ir_scalar dtype, uint32_t *groups_x,
                       char *err, size_t errlen);

/* One token's attention (decode): for query head h (kv head h / (n_head / n_head_kv)),
 * s_p = (q_h . k_p) * (1 / sqrt(head_dim)) for p = 0..pos[0], softmax in f32 (max
 * subtracted, f32 sum), out_h = sum_p softmax_p * v_p rounded to dtype. kcache/vcache are
 * [n_ctx][n_head_kv * head_dim] as kn_kv_store writes them (head_dim_v == head_dim_k). A
 * pos[0] >= n_ctx writes nothing. Any n_ctx: an online softmax over blocks of positions.
 * Params: q (dtype, read, n_head * head_dim), kcache, vcache (dtype, read), out (dtype,
 * write, n_head * head_dim), pos (u32, read, 1).
 * Grid: one workgroup per query head: groups = {n_head, 1, 1} (= *groups_x). */
ir_kernel *kn_attn_decode(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t n_ctx,
                          ir_scalar dtype, uint32_t *groups_x, char *err, size_t errlen);

#endif
