/* qk_prep's work for one token inside another kernel (kernels/qk_prep.c): the decode
 * attention that prepares its own heads (kn_attn_decode_merged with a kn_attn_prep). */
#ifndef KILN_KERNELS_KN_QK_H
#define KILN_KERNELS_KN_QK_H

#include "kernels/kernels.h"
#include "kernels/kn_common.h"

typedef struct kn_qk_token {
    const kn_rope_opts *rope;
    bool qk_norm;
    float eps;
    uint32_t n_head, n_head_kv, head_dim, wg; /* wg: the kernel's workgroup */
    ir_scalar dtype;
    ir_buf qkv, qn, kn, freqs; /* the raw rows; q_norm and k_norm (qk_norm); rope factors (rope->freq_factors) */
} kn_qk_token;

/* The rope table of position p, then q head qh and kv head kvh of the raw qkv row starting
 * at src, normed (qk_norm) and roped exactly as kn_qk_prep does (a subgroup a head, its
 * subgroup form), into workgroup arrays q_s and k_s (head_dim f32 each: the dtype values
 * kn_qk_prep stores), and v head kvh as it is into v_s. Uniform control flow (barriers
 * inside); ends with a barrier. Only where kn_qk_token_ok. */
void kn_qk_token_heads(kx k, const kn_qk_token *t, ir_val p, ir_val src, ir_val qh, ir_val kvh, ir_shm q_s,
                       ir_shm k_s, ir_shm v_s);
/* The rope and norm options kn_qk_prep accepts, on caps where kn_qk_prep takes a subgroup
 * a head (subgroup sums: its numbers do not depend on the workgroup), t->wg a whole number
 * of subgroups. */
bool kn_qk_token_ok(const rt_caps *c, const kn_qk_token *t);

#endif
