/* The plan's kernels for block-quantized weights (issue 18): a layer's products take the
 * types its tensors have (Q4_K_M gives attn_v and ffn_down Q6_K on some layers and Q4_K
 * on the rest), so these kernels are variants by role, block size and the parts' types,
 * compiled when a recording first launches one, shared by every launch that matches. */
#include "base/error.h"
#include "plan/plan_internal.h"

#include <stdlib.h>
#include <string.h>

/* The rows of an experts' tensor on the device: every expert's, or the cache's slots'. */
static uint32_t moe_rows(const plan_shape *s, uint32_t rows) {
    return (s->moe_slots ? s->moe_slots : s->hp.n_expert) * rows;
}

/* The parts of role i's weight for types qt: q, k and v for the qkv products; gate and
 * up for decode's SwiGLU product; one part elsewhere. */
static uint32_t parts_of(const plan_shape *s, int i, const int8_t *qt, kn_qpart *parts) {
    uint32_t d = s->hp.n_embd, ff = s->hp.n_ff;
    switch (i) {
    case K_MV_QKV: case K_MM_QKV:
        parts[0] = (kn_qpart){(kn_qtype)qt[0], s->q_dim};
        parts[1] = (kn_qpart){(kn_qtype)qt[1], s->kv_dim};
        parts[2] = (kn_qpart){(kn_qtype)qt[2], s->kv_dim};
        return 3;
    case K_MV_FFN:
        parts[0] = (kn_qpart){(kn_qtype)qt[0], ff};
        parts[1] = (kn_qpart){(kn_qtype)qt[1], ff};
        return 2;
    case K_MV_O: case K_MM_O: case K_MV_DOWN: case K_MM_DOWN: case K_MV_DN_OUT: case K_MM_DN_OUT:
        parts[0] = (kn_qpart){(kn_qtype)qt[0], d};
        return 1;
    case K_MM_FF: parts[0] = (kn_qpart){(kn_qtype)qt[0], ff}; return 1;
    /* the experts' 3-D tensors, every expert's rows */
    case K_MOE_GATE_UP: case K_MOE_GATE_UP_G:
        parts[0] = (kn_qpart){(kn_qtype)qt[0], moe_rows(s, s->hp.n_ff_exp)};
        parts[1] = (kn_qpart){(kn_qtype)qt[1], moe_rows(s, s->hp.n_ff_exp)};
        return 2;
    case K_MOE_DOWN: case K_MOE_DOWN_G: parts[0] = (kn_qpart){(kn_qtype)qt[0], moe_rows(s, d)}; return 1;
    default: parts[0] = (kn_qpart){(kn_qtype)qt[0], s->hp.n_vocab}; return 1; /* the logits heads */
    }
}

ir_kernel *plan_build_qkernel(const plan_shape *s, const rt_caps *c, int i, const int8_t qt[KN_Q_PARTS], uint32_t g[2],
                              kiln_err *err) {
    const arch_hparams *hp = &s->hp;
    uint32_t d = hp->n_embd, ff = hp->n_ff, nb = s->n_block;
    ir_scalar dt = s->dt;
    kn_qpart parts[KN_Q_PARTS];
    uint32_t np = parts_of(s, i, qt, parts);
    unsigned bias = s->bias ? KN_EPI_BIAS : 0, fault = s->fault_logits ? KN_EPI_FAULT : KN_EPI_NONE;
    /* the experts' products over the cache's slots where experts are cached */
    bool cached = s->moe_slots > 0;
    uint32_t n_exp = cached ? s->moe_slots : hp->n_expert;
    g[0] = g[1] = 1;
    /* the decode products fuse the norm before them where the plan does (plan_can_fuse_norm) */
#define MV(cols, out, epi)                                                                                            \
    (s->fuse_norm && i != K_MV_O && i != K_MV_DOWN && i != K_MV_DN_OUT                                                 \
         ? kn_matvec_q_norm(c, parts, np, cols, dt, out, epi, hp->rms_eps, &g[0], err)                                 \
         : kn_matvec_q(c, parts, np, cols, dt, out, epi, &g[0], err))
    switch (i) {
    case K_EMBED: return kn_embed_q(c, (kn_qtype)qt[0], hp->n_vocab, d, dt, &g[0], err);
    case K_MV_QKV: return MV(d, dt, bias);
    case K_MV_O: return MV(s->q_dim, dt, KN_EPI_RESIDUAL);
    case K_MV_FFN: return MV(d, dt, KN_EPI_SWIGLU);
    case K_MV_DOWN: return MV(ff, dt, KN_EPI_RESIDUAL);
    case K_MV_OUT: return MV(d, IR_F32, fault);
    case K_MM_QKV: return kn_matmul_q(c, parts, np, d, nb, dt, bias, g, err);
    case K_MM_O: return kn_matmul_q(c, parts, np, s->q_dim, nb, dt, KN_EPI_RESIDUAL, g, err);
    case K_MM_FF: return kn_matmul_q(c, parts, np, d, nb, dt, KN_EPI_NONE, g, err);
    case K_MM_DOWN: return kn_matmul_q(c, parts, np, ff, nb, dt, KN_EPI_RESIDUAL, g, err);
    case K_MM_OUT: return kn_matmul_q(c, parts, np, d, nb, dt, KN_EPI_F32, g, err);
    case K_MV_DN_OUT: return MV(s->dn_v_dim, dt, KN_EPI_RESIDUAL);
    case K_MM_DN_OUT: return kn_matmul_q(c, parts, np, s->dn_v_dim, nb, dt, KN_EPI_RESIDUAL, g, err);
    case K_MOE_GATE_UP:
        return kn_moe_gate_up_q(c, d, hp->n_ff_exp, n_exp, hp->n_expert_used, (kn_qtype)qt[0], (kn_qtype)qt[1], dt,
                                cached, &g[0], err);
    case K_MOE_DOWN:
        return kn_moe_down_q(c, hp->n_ff_exp, d, n_exp, hp->n_expert_used, (kn_qtype)qt[0], dt, cached, &g[0], err);
    case K_MOE_GATE_UP_G:
        return kn_moe_gate_up_g_q(c, d, hp->n_ff_exp, n_exp, hp->n_expert_used, nb, (kn_qtype)qt[0], (kn_qtype)qt[1],
                                  dt, cached, &g[0], err);
    case K_MOE_DOWN_G:
        return kn_moe_down_g_q(c, hp->n_ff_exp, d, n_exp, hp->n_expert_used, nb, (kn_qtype)qt[0], dt, cached, &g[0],
                               err);
    }
#undef MV
    kiln_fail(err, KILN_ERR_INTERNAL, "no quantized kernel for the role %s", plan_role[i]);
    return NULL;
}

const plan_qvar *plan_qvariant(plan_engine *p, int i, uint32_t nb, const int8_t qt[KN_Q_PARTS], kiln_err *err) {
    for (uint32_t j = 0; j < p->n_qvar; j++) {
        const plan_qvar *v = &p->qvar[j];
        if (v->role == i && v->nb == nb && v->slots == p->s.moe_slots && !memcmp(v->qt, qt, KN_Q_PARTS)) return v;
    }
    if (p->n_qvar == p->cap_qvar) {
        uint32_t cap = p->cap_qvar ? 2 * p->cap_qvar : 16;
        plan_qvar *q = realloc(p->qvar, cap * sizeof *q);
        if (!q) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), NULL;
        p->qvar = q, p->cap_qvar = cap;
    }
    plan_qvar *v = &p->qvar[p->n_qvar];
    memset(v, 0, sizeof *v);
    v->role = i, v->nb = nb, v->slots = p->s.moe_slots;
    memcpy(v->qt, qt, KN_Q_PARTS);
    plan_shape s = p->s;
    if (nb) s.n_block = nb;
    if (!(v->k = plan_compile_qkernel(p->d, &s, i, qt, v->grid, &v->sig, err))) return NULL;
    kn_qpart parts[KN_Q_PARTS];
    uint32_t np = i == K_EMBED ? 0 : parts_of(&s, i, qt, parts);
    bool moe = i == K_MOE_GATE_UP || i == K_MOE_DOWN || i == K_MOE_GATE_UP_G || i == K_MOE_DOWN_G;
    uint32_t cols = i == K_MV_O || i == K_MM_O                                 ? s.q_dim
                    : i == K_MV_DOWN || i == K_MM_DOWN                         ? s.hp.n_ff
                    : i == K_MOE_DOWN || i == K_MOE_DOWN_G                     ? s.hp.n_ff_exp
                                                                               : s.hp.n_embd;
    for (uint32_t j = 0; j < np; j++) {
        kn_qlayout L;
        if (!kn_qlayout_of(parts[j].type, parts[j].rows, cols, &L, NULL)) v->wbytes += L.words * 4;
    }
    if (moe && i != K_MOE_GATE_UP_G && i != K_MOE_DOWN_G) /* a token's experts only */
        v->wbytes = v->wbytes / (s.moe_slots ? s.moe_slots : s.hp.n_expert) * s.hp.n_expert_used;
    p->n_qvar++;
    return v;
}

const plan_qvar *plan_qvar_of(const plan_engine *p, const rt_kernel *k) {
    for (uint32_t j = 0; j < p->n_qvar; j++)
        if (p->qvar[j].k == k) return &p->qvar[j];
    return NULL;
}

void plan_qvar_release(plan_engine *p) {
    for (uint32_t j = 0; j < p->n_qvar; j++) {
        p->d->ops->release_kernel(p->d, p->qvar[j].k);
        plan_sig_free(&p->qvar[j].sig);
    }
    free(p->qvar);
    p->qvar = NULL;
    p->n_qvar = p->cap_qvar = 0;
}
