/* Row copies by an index read from a u32 buffer, so a recorded step replays with new
 * tokens: the token embedding, and the pick of a prefill block's last row for the
 * logits head. The copies move 16-bit values untouched. */
#include "base/error.h"
#include "kernels/kn_common.h"

/* out[out_base + c] = src[row * n + c] for c < n, row = the index kernel's caller
 * computed; a row >= n_rows reads zeros (the mask of the row past the table). */
static void copy_row(kx k, ir_buf src, ir_buf out, ir_val row, ir_val out_base, uint32_t n_rows, uint32_t n,
                     ir_scalar dtype, uint32_t v) {
    ir_val i = kx_global(k);
    ir_if *in = kx_if(k, kx_lt_c(k, i, n / v));
    ir_val past = kx_u32(k, n_rows);
    ir_val r = kx_select(k, kx_lt(k, row, past), row, past);
    ir_val col = kx_mul_c(k, i, v);
    ir_val at = kx_idx(k, r, n, col);
    ir_val zero = kx_as(k, kx_f32(k, 0.0f), dtype);
    ir_val val = kx_load_masked(k, src, at, v, kx_u32(k, n_rows * n), zero);
    kx_store(k, out, kx_add(k, out_base, col), val);
    kx_end_if(k, in);
}

static int check(const char *who, const rt_caps *c, uint32_t n_rows, uint32_t n, ir_scalar dtype, kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return -1;
    /* the row past the table (an out-of-range index's) must still have u32 indices */
    if (n_rows == 0 || n == 0 || ((uint64_t)n_rows + 1) * n > UINT32_MAX) {
        kiln_fail(err, KILN_ERR_INVALID, "%s: bad shape (%u rows of %u)", who, n_rows, n);
        return -1;
    }
    return 0;
}

ir_kernel *kn_embed(const rt_caps *c, uint32_t n_vocab, uint32_t n_embd, ir_scalar dtype, uint32_t *groups_x,
                    kiln_err *err) {
    if (check("kn_embed", c, n_vocab, n_embd, dtype, err)) return NULL;
    kx k = {kn_create("kn_embed", err), c};
    if (!k.ir) return NULL;
    ir_buf tab = kx_buffer(k, "table", dtype, IR_READ, (uint64_t)n_vocab * n_embd);
    ir_buf tb = kx_buffer_per_group(k, "tok", IR_U32, IR_READ, 1, 1); /* token t of the launch is grid row y */
    ir_buf out = kx_buffer_per_group(k, "out", dtype, IR_WRITE, 1, n_embd);
    uint32_t wg = kn_workgroup(c, 256), v = kn_vec_width(n_embd);
    kx_workgroup(k, wg);
    ir_val t = kx_group(k, 1);
    ir_val out_row = kx_mul_c(k, t, n_embd), tok = kx_load(k, tb, t, 1);
    copy_row(k, tab, out, tok, out_row, n_vocab, n_embd, dtype, v);
    if (groups_x) *groups_x = (n_embd / v + wg - 1) / wg;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_take_last(const rt_caps *c, uint32_t n, uint32_t n_max, ir_scalar dtype, uint32_t *groups_x,
                        kiln_err *err) {
    if (check("kn_take_last", c, n_max, n, dtype, err)) return NULL;
    kx k = {kn_create("kn_take_last", err), c};
    if (!k.ir) return NULL;
    kn_launch_early(k); /* a short kernel: the next may start (kn_early.c) */
    ir_buf x = kx_buffer(k, "x", dtype, IR_READ, (uint64_t)n_max * n), ib = kx_buffer(k, "info", IR_U32, IR_READ, 2);
    ir_buf out = kx_buffer(k, "out", dtype, IR_WRITE, n);
    uint32_t wg = kn_workgroup(c, 256), v = kn_vec_width(n);
    kx_workgroup(k, wg);
    /* row info[1] - 1; n = 0 wraps to a row past the block: zeros, not a read before x */
    ir_val one = kx_u32(k, 1);
    ir_val last = kx_sub(k, kx_load_c(k, ib, 1), one);
    copy_row(k, x, out, last, kx_u32(k, 0), n_max, n, dtype, v);
    if (groups_x) *groups_x = (n / v + wg - 1) / wg;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_stage_inputs(const rt_caps *c, uint32_t n_tok, uint32_t *groups_x, kiln_err *err) {
    if (!c || n_tok == 0) {
        kiln_fail(err, KILN_ERR_INVALID, "kn_stage_inputs: bad shape (%u tokens)", n_tok);
        return NULL;
    }
    kx k = {kn_create("kn_stage_inputs", err), c};
    if (!k.ir) return NULL;
    ir_buf ts = kx_buffer(k, "tok_host", IR_U32, IR_READ, n_tok), td = kx_buffer(k, "tok", IR_U32, IR_WRITE, n_tok);
    ir_buf is = kx_buffer(k, "info_host", IR_U32, IR_READ, 2), id = kx_buffer(k, "info", IR_U32, IR_WRITE, 2);
    uint32_t wg = kn_workgroup(c, 256);
    kx_workgroup(k, wg);
    ir_val i = kx_global(k);
    ir_if *a = kx_if(k, kx_lt_c(k, i, n_tok));
    kx_store(k, td, i, kx_load(k, ts, i, 1));
    kx_end_if(k, a);
    ir_if *b = kx_if(k, kx_lt_c(k, i, 2));
    kx_store(k, id, i, kx_load(k, is, i, 1));
    kx_end_if(k, b);
    if (groups_x) *groups_x = (n_tok + wg - 1) / wg;
    return kn_finish(k.ir, err);
}
