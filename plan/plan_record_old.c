/* TEMPORARY (removed in the next commit): the recordings as bound by position before launches were bound by name, for the check that both record the same launches. */
/* The plan's recordings: the launches of a decode step and of a prefill block, in order,
 * each with its kernel's arguments, recorded once and replayed. */
#include "plan/plan_internal.h"
int plan_old_record_decode(plan_engine *p);
int plan_old_record_prefill(plan_engine *p);

#include <stdlib.h>

/* Appends a launch of kernel i; args are copied. */
static int add(plan_engine *p, int i, uint32_t gx, uint32_t gy, uint32_t n, rt_buffer *const *bufs) {
    if (p->n_launch == p->cap_launch) {
        uint32_t cap = p->cap_launch ? 2 * p->cap_launch : 64;
        rt_launch *l = realloc(p->launch, cap * sizeof *l);
        if (!l) return -1;
        p->launch = l;
        p->cap_launch = cap;
    }
    rt_arg *a = malloc(n * sizeof *a);
    if (!a) return -1;
    for (uint32_t j = 0; j < n; j++) a[j] = (rt_arg){bufs[j], 0};
    p->launch[p->n_launch++] = (rt_launch){p->kern[i], {gx, gy, 1}, a, n};
    return 0;
}

#define ADD(i, gx, gy, ...) \
    add(p, (i), (gx), (gy), sizeof((rt_buffer *[]){__VA_ARGS__}) / sizeof(rt_buffer *), (rt_buffer *[]){__VA_ARGS__})

/* The args of the qkv product and of qk_prep vary with the model's options. */
static int add_qkv(plan_engine *p, int kern, const plan_layer *L, bool prefill) {
    const uint32_t *g = p->grid[kern];
    bool fused = !prefill && p->s.fuse_norm; /* the norm of xa inside the product */
    rt_buffer *a[6] = {L->wqkv, fused ? p->xa : p->h, p->qkv};
    uint32_t n = 3;
    if (prefill) a[n++] = p->info;
    if (p->s.bias) a[n++] = L->bqkv;
    if (fused) a[n++] = L->attn_norm;
    return add(p, kern, g[0], g[1], n, a);
}


static int add_qk_prep(plan_engine *p, const plan_layer *L, uint32_t gy) {
    rt_buffer *a[7] = {p->qkv, L->kc, L->vc, p->info};
    uint32_t n = 4;
    if (p->s.hp.qk_norm) a[n++] = L->q_norm, a[n++] = L->k_norm;
    if (p->s.freqs) a[n++] = p->freqs;
    return add(p, K_QK_PREP, p->s.hp.n_head + 2 * p->s.hp.n_head_kv, gy, n, a);
}

/* The logits of the row x: the output norm fused into the head where it can be. */
static int add_logits(plan_engine *p, rt_buffer *x) {
    uint32_t gx = p->grid[K_MV_OUT][0];
    int r = p->s.fuse_norm ? ADD(K_MV_OUT, gx, 1, p->output, x, p->logits, p->output_norm)
                           : ADD(K_NORM, 1, 1, x, p->output_norm, p->hl) | ADD(K_MV_OUT, gx, 1, p->output, p->hl, p->logits);
    return r | ADD(K_ARGMAX, 1, 1, p->logits, p->best);
}


int plan_old_record_decode(plan_engine *p) {
    const arch_hparams *hp = &p->s.hp;
    uint32_t (*g)[2] = p->grid;
    bool fused = p->s.fuse_norm;
    int r = ADD(K_STAGE, 1, 1, p->tok_h, p->tok, p->info_h, p->info);
    r |= ADD(K_EMBED, g[K_EMBED][0], 1, p->tok_embd, p->tok, p->xa);
    for (uint32_t l = 0; l < hp->n_layer && !r; l++) {
        const plan_layer *L = &p->L[l];
        if (!fused) r |= ADD(K_NORM, 1, 1, p->xa, L->attn_norm, p->h);
        r |= add_qkv(p, K_MV_QKV, L, false);
        r |= add_qk_prep(p, L, 1);
        r |= ADD(K_ATTN, g[K_ATTN][0], g[K_ATTN][1], p->qkv, L->kc, L->vc, p->part, p->info);
        r |= ADD(K_ATTN_MERGE, g[K_ATTN_MERGE][0], 1, p->part, p->att, p->info);
        r |= ADD(K_MV_O, g[K_MV_O][0], 1, L->wo, p->att, p->xb, p->xa);
        if (fused) {
            r |= ADD(K_MV_FFN, g[K_MV_FFN][0], 1, L->w_gate, p->xb, p->act, L->w_up, L->ffn_norm);
        } else {
            r |= ADD(K_NORM, 1, 1, p->xb, L->ffn_norm, p->h);
            r |= ADD(K_MV_FFN, g[K_MV_FFN][0], 1, L->w_gate, p->h, p->act, L->w_up);
        }
        r |= ADD(K_MV_DOWN, g[K_MV_DOWN][0], 1, L->w_down, p->act, p->xa, p->xb);
    }
    return r | add_logits(p, p->xa);
}


int plan_old_record_prefill(plan_engine *p) {
    const arch_hparams *hp = &p->s.hp;
    uint32_t (*g)[2] = p->grid, nb = p->s.n_block;
    int r = ADD(K_STAGE, g[K_STAGE][0], 1, p->tok_h, p->tok, p->info_h, p->info);
    r |= ADD(K_EMBED, g[K_EMBED][0], nb, p->tok_embd, p->tok, p->xa);
    for (uint32_t l = 0; l < hp->n_layer && !r; l++) {
        const plan_layer *L = &p->L[l];
        r |= ADD(K_NORM, nb, 1, p->xa, L->attn_norm, p->h);
        r |= add_qkv(p, K_MM_QKV, L, true);
        r |= add_qk_prep(p, L, nb);
        r |= ADD(K_ATTN_PREFILL, g[K_ATTN_PREFILL][0], g[K_ATTN_PREFILL][1], p->qkv, L->kc, L->vc, p->att, p->info);
        r |= ADD(K_MM_O, g[K_MM_O][0], g[K_MM_O][1], L->wo, p->att, p->xb, p->info, p->xa);
        r |= ADD(K_NORM, nb, 1, p->xb, L->ffn_norm, p->h);
        r |= ADD(K_MM_FF, g[K_MM_FF][0], g[K_MM_FF][1], L->w_gate, p->h, p->g, p->info);
        r |= ADD(K_MM_FF, g[K_MM_FF][0], g[K_MM_FF][1], L->w_up, p->h, p->u, p->info);
        r |= ADD(K_SWIGLU, g[K_SWIGLU][0], 1, p->g, p->u, p->act);
        r |= ADD(K_MM_DOWN, g[K_MM_DOWN][0], g[K_MM_DOWN][1], L->w_down, p->act, p->xa, p->info, p->xb);
    }
    r |= ADD(K_TAKE_LAST, g[K_TAKE_LAST][0], 1, p->xa, p->info, p->last);
    return r | add_logits(p, p->last);
}
