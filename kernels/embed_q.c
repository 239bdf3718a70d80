/* The token embedding from a block-quantized table (kn_quant.h): each value decoded as
 * ggml's dequantize_row_* computes it, s * (code - offset) then + m (two roundings, never
 * fused), and rounded to the activations' type once, as the oracle rounds the row it
 * decodes. */
#include "base/error.h"
#include "kernels/kn_common.h"
#include "kernels/quant_ir.h"

ir_kernel *kn_embed_q(const rt_caps *c, kn_qtype qt, uint32_t n_vocab, uint32_t n_embd, ir_scalar dtype,
                      uint32_t *groups_x, kiln_err *err) {
    kn_qlayout L;
    if (kn_check_dtype(c, dtype, err) || kn_qlayout_of(qt, n_vocab, n_embd, &L, err)) return NULL;
    const kn_qformat *f = kn_qformat_of(qt);
    kx k = {kn_create("kn_embed_q", err), c};
    if (!k.ir) return NULL;
    ir_buf tab = kx_buffer(k, "table", IR_U32, IR_READ, L.words);
    ir_buf tb = kx_buffer_per_group(k, "tok", IR_U32, IR_READ, 1, 1); /* token t of the launch is grid row y */
    ir_buf out = kx_buffer_per_group(k, "out", dtype, IR_WRITE, 1, n_embd);
    uint32_t wg = kn_workgroup(c, 64), chunks = n_embd / KN_Q_CHUNK;
    kx_workgroup(k, wg);
    ir_val t = kx_group(k, 1), i = kx_global(k);
    ir_if *in = kx_if(k, kx_lt_c(k, i, chunks));
    ir_val tok = kx_load(k, tb, t, 1);
    ir_val c0 = kx_mul_c(k, i, KN_Q_CHUNK), out0 = kx_idx(k, t, n_embd, c0);
    ir_val zero = kx_as(k, kx_f32(k, 0.0f), dtype);
    ir_if *known = kx_if(k, kx_lt_c(k, tok, n_vocab));
    ir_val e0 = kx_add(k, kx_mul_c(k, tok, n_embd), c0), q[KN_Q_CHUNK];
    kn_q_chunk(k, &L, tab, e0, q);
    ir_val sub0 = kx_shr_c(k, e0, f->sub == 16 ? 4 : 5);
    for (uint32_t b = 0; b < KN_Q_CHUNK / f->sub; b++) {
        ir_val s, m;
        kn_q_sub_scale(k, &L, tab, b ? kx_add_c(k, sub0, b) : sub0, &s, &m);
        for (uint32_t j = 0; j < f->sub; j++) {
            ir_val v = kx_mul(k, s, q[b * f->sub + j]);
            if (m != IR_NONE) v = kx_add(k, v, m);
            kx_store(k, out, kx_add_c(k, out0, b * f->sub + j), kx_as(k, v, dtype));
        }
    }
    kx_else(k, known); /* a token past the vocabulary: a row of zeros */
    for (uint32_t j = 0; j < KN_Q_CHUNK; j++) kx_store(k, out, kx_add_c(k, out0, j), zero);
    kx_end_if(k, known);
    kx_end_if(k, in);
    if (groups_x) *groups_x = (chunks + wg - 1) / wg;
    return kn_finish(k.ir, err);
}
