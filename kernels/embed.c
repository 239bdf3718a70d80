/* Token embedding: copy one row of the table, the token read from a u32 buffer so a
 * recorded step replays with a new token. The copy moves 16-bit values untouched. */
#include "kn_common.h"

ir_kernel *kn_embed(const rt_caps *c, uint32_t n_vocab, uint32_t n_embd, ir_scalar dtype, uint32_t *groups_x,
                    char *err, size_t errlen) {
    if (kn_check_dtype(c, dtype, err, errlen)) return NULL;
    /* the row past the table (an out-of-range token's) must still have u32 indices */
    if (n_vocab == 0 || n_embd == 0 || ((uint64_t)n_vocab + 1) * n_embd > UINT32_MAX) {
        kn_fail(err, errlen, "kn_embed: bad shape (vocab %u, n_embd %u)", n_vocab, n_embd);
        return NULL;
    }
    ir_kernel *k = kn_create("kn_embed", err, errlen);
    if (!k) return NULL;
    ir_buf tab = ir_param_buffer(k, "table", dtype, IR_READ), tb = ir_param_buffer(k, "tok", IR_U32, IR_READ);
    ir_buf out = ir_param_buffer(k, "out", dtype, IR_WRITE);
    uint32_t wg = kn_workgroup(c, 256), v = kn_vec_width(n_embd), nv = n_embd / v;
    ir_set_workgroup(k, wg, 1, 1);
    ir_val i = ir_id(k, IR_ID_GLOBAL, 0);
    ir_if *in = ir_if_begin(k, ir_compare(k, IR_LT, i, ir_const_u32(k, nv)), 0);
    ir_val tok = ir_load(k, tb, ir_const_u32(k, 0), 1), nvoc = ir_const_u32(k, n_vocab);
    /* a bad token reads the row past the table, which the mask turns into zeros */
    ir_val row = ir_select(k, ir_compare(k, IR_LT, tok, nvoc), tok, nvoc);
    ir_val col = ir_bin(k, IR_OP_MUL, i, ir_const_u32(k, v));
    ir_val at = ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_MUL, row, ir_const_u32(k, n_embd)), col);
    ir_val zero = ir_convert(k, ir_const_f32(k, 0.0f), ir_t_scalar(k, dtype));
    ir_val val = ir_load_masked(k, tab, at, v, ir_const_u32(k, n_vocab * n_embd), zero);
    ir_store(k, out, col, val);
    ir_if_end(k, in, NULL);
    if (groups_x) *groups_x = (nv + wg - 1) / wg;
    return kn_finish(k, err, errlen);
}
