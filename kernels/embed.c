/* Row copies by an index read from a u32 buffer, so a recorded step replays with new
 * tokens: the token embedding, and the pick of a prefill block's last row for the
 * logits head. The copies move 16-bit values untouched. */
#include "kernels/kn_common.h"

/* out[t][c] = src[row * n + c] for c < n, row = the index kernel's caller computed; a row
 * >= n_rows reads zeros (the mask of the row past the table). */
static void copy_row(ir_kernel *k, ir_buf src, ir_buf out, ir_val row, ir_val out_base, uint32_t n_rows, uint32_t n,
                     ir_scalar dtype, uint32_t v) {
    ir_val i = ir_id(k, IR_ID_GLOBAL, 0);
    ir_if *in = ir_if_begin(k, ir_compare(k, IR_LT, i, ir_const_u32(k, n / v)), 0);
    ir_val nr = ir_const_u32(k, n_rows);
    ir_val r = ir_select(k, ir_compare(k, IR_LT, row, nr), row, nr);
    ir_val col = ir_bin(k, IR_OP_MUL, i, ir_const_u32(k, v));
    ir_val at = ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_MUL, r, ir_const_u32(k, n)), col);
    ir_val zero = ir_convert(k, ir_const_f32(k, 0.0f), ir_t_scalar(k, dtype));
    ir_val val = ir_load_masked(k, src, at, v, ir_const_u32(k, n_rows * n), zero);
    ir_store(k, out, ir_bin(k, IR_OP_ADD, out_base, col), val);
    ir_if_end(k, in, NULL);
}

static int check(const char *who, const rt_caps *c, uint32_t n_rows, uint32_t n, ir_scalar dtype, char *err,
                 size_t errlen) {
    if (kn_check_dtype(c, dtype, err, errlen)) return -1;
    /* the row past the table (an out-of-range index's) must still have u32 indices */
    if (n_rows == 0 || n == 0 || ((uint64_t)n_rows + 1) * n > UINT32_MAX) {
        kn_fail(err, errlen, "%s: bad shape (%u rows of %u)", who, n_rows, n);
        return -1;
    }
    return 0;
}

ir_kernel *kn_embed(const rt_caps *c, uint32_t n_vocab, uint32_t n_embd, ir_scalar dtype, uint32_t *groups_x,
                    char *err, size_t errlen) {
    if (check("kn_embed", c, n_vocab, n_embd, dtype, err, errlen)) return NULL;
    ir_kernel *k = kn_create("kn_embed", err, errlen);
    if (!k) return NULL;
    ir_buf tab = ir_param_buffer(k, "table", dtype, IR_READ), tb = ir_param_buffer(k, "tok", IR_U32, IR_READ);
    ir_buf out = ir_param_buffer(k, "out", dtype, IR_WRITE);
    ir_buffer_extent(k, tab, (uint64_t)n_vocab * n_embd);
    ir_buffer_extent_per_group(k, tb, 1, 1); /* token t of the launch is grid row y */
    ir_buffer_extent_per_group(k, out, 1, n_embd);
    uint32_t wg = kn_workgroup(c, 256), v = kn_vec_width(n_embd);
    ir_set_workgroup(k, wg, 1, 1);
    ir_val t = ir_id(k, IR_ID_GROUP, 1);
    copy_row(k, tab, out, ir_load(k, tb, t, 1), ir_bin(k, IR_OP_MUL, t, ir_const_u32(k, n_embd)), n_vocab, n_embd,
             dtype, v);
    if (groups_x) *groups_x = (n_embd / v + wg - 1) / wg;
    return kn_finish(k, err, errlen);
}

ir_kernel *kn_take_last(const rt_caps *c, uint32_t n, uint32_t n_max, ir_scalar dtype, uint32_t *groups_x, char *err,
                        size_t errlen) {
    if (check("kn_take_last", c, n_max, n, dtype, err, errlen)) return NULL;
    ir_kernel *k = kn_create("kn_take_last", err, errlen);
    if (!k) return NULL;
    ir_buf x = ir_param_buffer(k, "x", dtype, IR_READ), ib = ir_param_buffer(k, "info", IR_U32, IR_READ);
    ir_buf out = ir_param_buffer(k, "out", dtype, IR_WRITE);
    ir_buffer_extent(k, x, (uint64_t)n_max * n);
    ir_buffer_extent(k, ib, 2);
    ir_buffer_extent(k, out, n);
    uint32_t wg = kn_workgroup(c, 256), v = kn_vec_width(n);
    ir_set_workgroup(k, wg, 1, 1);
    /* n = 0 wraps to a row past the block: zeros, not a read before x */
    ir_val last = ir_bin(k, IR_OP_SUB, ir_load(k, ib, ir_const_u32(k, 1), 1), ir_const_u32(k, 1));
    copy_row(k, x, out, last, ir_const_u32(k, 0), n_max, n, dtype, v);
    if (groups_x) *groups_x = (n / v + wg - 1) / wg;
    return kn_finish(k, err, errlen);
}

ir_kernel *kn_stage_inputs(const rt_caps *c, uint32_t n_tok, uint32_t *groups_x, char *err, size_t errlen) {
    if (!c || n_tok == 0) {
        kn_fail(err, errlen, "kn_stage_inputs: bad shape (%u tokens)", n_tok);
        return NULL;
    }
    ir_kernel *k = kn_create("kn_stage_inputs", err, errlen);
    if (!k) return NULL;
    ir_buf ts = ir_param_buffer(k, "tok_host", IR_U32, IR_READ), td = ir_param_buffer(k, "tok", IR_U32, IR_WRITE);
    ir_buf is = ir_param_buffer(k, "info_host", IR_U32, IR_READ), id = ir_param_buffer(k, "info", IR_U32, IR_WRITE);
    ir_buffer_extent(k, ts, n_tok);
    ir_buffer_extent(k, td, n_tok);
    ir_buffer_extent(k, is, 2);
    ir_buffer_extent(k, id, 2);
    uint32_t wg = kn_workgroup(c, 256);
    ir_set_workgroup(k, wg, 1, 1);
    ir_val i = ir_id(k, IR_ID_GLOBAL, 0);
    ir_if *a = ir_if_begin(k, ir_compare(k, IR_LT, i, ir_const_u32(k, n_tok)), 0);
    ir_store(k, td, i, ir_load(k, ts, i, 1));
    ir_if_end(k, a, NULL);
    ir_if *b = ir_if_begin(k, ir_compare(k, IR_LT, i, ir_const_u32(k, 2)), 0);
    ir_store(k, id, i, ir_load(k, is, i, 1));
    ir_if_end(k, b, NULL);
    if (groups_x) *groups_x = (n_tok + wg - 1) / wg;
    return kn_finish(k, err, errlen);
}
