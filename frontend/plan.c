#include "plan.h"

#include "kernels.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KERNELS 32

typedef struct plan_layer {
    rt_buffer *attn_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv, *q_norm, *k_norm, *ffn_norm, *w_gate, *w_up, *w_down;
    rt_buffer *kc, *vc;
} plan_layer;

typedef struct plan_engine {
    engine base;
    const model *m;
    rt_device *d;
    arch_hparams hp;
    ir_scalar dt;
    char name[200];
    uint32_t q_dim, kv_dim;
    rt_buffer *tok_embd, *output, *output_norm;
    plan_layer *L;
    /* activations of one token; x ping-pongs between xa and xb across residual adds */
    rt_buffer *xa, *xb, *h, *q, *qb, *k, *kb, *v, *vb, *att, *o, *g, *u, *act, *logits, *tok, *pos;
    rt_kernel *kern[MAX_KERNELS];
    uint32_t n_kern;
    rt_launch *launch;
    rt_arg *args;
    uint32_t n_launch, cap_launch, n_args, cap_args;
    rt_recording *step;
} plan_engine;

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- buffers ---------------------------------------------------------------------------- */

static rt_buffer *alloc(plan_engine *p, size_t bytes, char *err, size_t errlen) {
    return p->d->ops->alloc(p->d, bytes, err, errlen);
}

/* A weight tensor converted to the plan's 16-bit type and uploaded. */
static rt_buffer *upload_weight(plan_engine *p, const gguf_tensor *t, char *err, size_t errlen) {
    if (!t) return NULL;
    uint64_t n = gguf_tensor_nelements(t);
    uint16_t *host = malloc(n * 2);
    if (!host) return fail(err, errlen, "out of memory converting '%s'", t->name), NULL;
    gguf_error ge;
    int rc = p->dt == IR_BF16 ? gguf_tensor_rows_bf16(t, 0, gguf_tensor_nrows(t), host, &ge)
                              : gguf_tensor_rows_f16(t, 0, gguf_tensor_nrows(t), host, &ge);
    rt_buffer *b = NULL;
    if (rc) fail(err, errlen, "%s", ge.msg);
    else if ((b = alloc(p, n * 2, err, errlen)) && p->d->ops->upload(p->d, b, 0, host, n * 2, err, errlen)) {
        p->d->ops->release(p->d, b);
        b = NULL;
    }
    free(host);
    return b;
}

/* ---- kernels and the recorded step ------------------------------------------------------ */

static rt_kernel *compile(plan_engine *p, ir_kernel *k, char *err, size_t errlen) {
    if (!k) return NULL;
    rt_kernel *c = p->n_kern < MAX_KERNELS ? p->d->ops->compile(p->d, k, NULL, err, errlen) : NULL;
    if (p->n_kern >= MAX_KERNELS) fail(err, errlen, "too many kernels");
    ir_kernel_destroy(k);
    if (c) p->kern[p->n_kern++] = c;
    return c;
}

/* Appends a launch; args are copied. */
static int add(plan_engine *p, rt_kernel *k, uint32_t gx, uint32_t gy, uint32_t n, const rt_arg *args) {
    if (p->n_launch == p->cap_launch) {
        uint32_t cap = p->cap_launch ? 2 * p->cap_launch : 64;
        rt_launch *l = realloc(p->launch, cap * sizeof *l);
        if (!l) return -1;
        p->launch = l;
        p->cap_launch = cap;
    }
    rt_arg *a = malloc(n * sizeof *a);
    if (!a) return -1;
    memcpy(a, args, n * sizeof *a);
    p->launch[p->n_launch++] = (rt_launch){k, {gx, gy, 1}, a, n};
    return 0;
}

#define A(b) ((rt_arg){(b), 0})

static int build_step(plan_engine *p, char *err, size_t errlen) {
    const arch_hparams *hp = &p->hp;
    const rt_caps *c = &p->d->caps;
    uint32_t d = hp->n_embd, gx_embed, gx_q, gx_kv, gx_o, gx_ff, gx_down, gx_out, gx_add, gx_addq, gx_addkv, gx_swi,
             gx_rq, gx_rk, gx_kvs;
    rt_kernel *embed = compile(p, kn_embed(c, hp->n_vocab, d, p->dt, &gx_embed, err, errlen), err, errlen);
    rt_kernel *norm = compile(p, kn_rmsnorm(c, d, p->dt, hp->rms_eps, err, errlen), err, errlen);
    rt_kernel *mv_q = compile(p, kn_matvec(c, p->q_dim, d, p->dt, p->dt, &gx_q, err, errlen), err, errlen);
    rt_kernel *mv_kv = compile(p, kn_matvec(c, p->kv_dim, d, p->dt, p->dt, &gx_kv, err, errlen), err, errlen);
    rt_kernel *mv_o = compile(p, kn_matvec(c, d, p->q_dim, p->dt, p->dt, &gx_o, err, errlen), err, errlen);
    rt_kernel *mv_ff = compile(p, kn_matvec(c, hp->n_ff, d, p->dt, p->dt, &gx_ff, err, errlen), err, errlen);
    rt_kernel *mv_down = compile(p, kn_matvec(c, d, hp->n_ff, p->dt, p->dt, &gx_down, err, errlen), err, errlen);
    rt_kernel *mv_out = compile(p, kn_matvec(c, hp->n_vocab, d, p->dt, IR_F32, &gx_out, err, errlen), err, errlen);
    rt_kernel *add_d = compile(p, kn_add(c, d, p->dt, &gx_add, err, errlen), err, errlen);
    rt_kernel *swi = compile(p, kn_swiglu(c, hp->n_ff, p->dt, &gx_swi, err, errlen), err, errlen);
    rt_kernel *rope_q = compile(p, kn_rope(c, hp->n_head, hp->head_dim_k, hp->n_rot, hp->rope_neox, hp->rope_base,
                                           p->dt, &gx_rq, err, errlen), err, errlen);
    rt_kernel *rope_k = compile(p, kn_rope(c, hp->n_head_kv, hp->head_dim_k, hp->n_rot, hp->rope_neox, hp->rope_base,
                                           p->dt, &gx_rk, err, errlen), err, errlen);
    rt_kernel *kvs = compile(p, kn_kv_store(c, p->kv_dim, p->base.n_ctx, p->dt, &gx_kvs, err, errlen), err, errlen);
    rt_kernel *attn = compile(p, kn_attn_decode(c, hp->n_head, hp->n_head_kv, hp->head_dim_k, p->base.n_ctx, p->dt,
                                                NULL, err, errlen), err, errlen);
    if (!embed || !norm || !mv_q || !mv_kv || !mv_o || !mv_ff || !mv_down || !mv_out || !add_d || !swi || !rope_q ||
        !rope_k || !kvs || !attn)
        return -1;
    rt_kernel *add_q = NULL, *add_kv = NULL, *qkn = NULL;
    if (hp->qkv_bias) {
        add_q = compile(p, kn_add(c, p->q_dim, p->dt, &gx_addq, err, errlen), err, errlen);
        add_kv = compile(p, kn_add(c, p->kv_dim, p->dt, &gx_addkv, err, errlen), err, errlen);
        if (!add_q || !add_kv) return -1;
    }
    if (hp->qk_norm && !(qkn = compile(p, kn_rmsnorm_heads(c, hp->head_dim_k, p->dt, hp->rms_eps, err, errlen), err,
                                       errlen)))
        return -1;

    int r = add(p, embed, gx_embed, 1, 3, (rt_arg[]){A(p->tok_embd), A(p->tok), A(p->xa)});
    for (uint32_t l = 0; l < hp->n_layer && !r; l++) {
        const plan_layer *L = &p->L[l];
        r |= add(p, norm, 1, 1, 3, (rt_arg[]){A(p->xa), A(L->attn_norm), A(p->h)});
        r |= add(p, mv_q, gx_q, 1, 3, (rt_arg[]){A(L->wq), A(p->h), A(p->q)});
        r |= add(p, mv_kv, gx_kv, 1, 3, (rt_arg[]){A(L->wk), A(p->h), A(p->k)});
        r |= add(p, mv_kv, gx_kv, 1, 3, (rt_arg[]){A(L->wv), A(p->h), A(p->v)});
        rt_buffer *q = p->q, *k = p->k, *v = p->v;
        if (hp->qkv_bias) { /* an extra rounding the oracle does not have: the bias belongs in the matvec */
            r |= add(p, add_q, gx_addq, 1, 3, (rt_arg[]){A(p->q), A(L->bq), A(p->qb)});
            r |= add(p, add_kv, gx_addkv, 1, 3, (rt_arg[]){A(p->k), A(L->bk), A(p->kb)});
            r |= add(p, add_kv, gx_addkv, 1, 3, (rt_arg[]){A(p->v), A(L->bv), A(p->vb)});
            q = p->qb, k = p->kb, v = p->vb;
        }
        if (hp->qk_norm) {
            rt_buffer *qn = q == p->q ? p->qb : p->q, *kn = k == p->k ? p->kb : p->k;
            r |= add(p, qkn, hp->n_head, 1, 3, (rt_arg[]){A(q), A(L->q_norm), A(qn)});
            r |= add(p, qkn, hp->n_head_kv, 1, 3, (rt_arg[]){A(k), A(L->k_norm), A(kn)});
            q = qn, k = kn;
        }
        r |= add(p, rope_q, gx_rq, 1, 2, (rt_arg[]){A(q), A(p->pos)});
        r |= add(p, rope_k, gx_rk, 1, 2, (rt_arg[]){A(k), A(p->pos)});
        r |= add(p, kvs, gx_kvs, 1, 5, (rt_arg[]){A(k), A(v), A(L->kc), A(L->vc), A(p->pos)});
        r |= add(p, attn, hp->n_head, 1, 5, (rt_arg[]){A(q), A(L->kc), A(L->vc), A(p->att), A(p->pos)});
        r |= add(p, mv_o, gx_o, 1, 3, (rt_arg[]){A(L->wo), A(p->att), A(p->o)});
        r |= add(p, add_d, gx_add, 1, 3, (rt_arg[]){A(p->xa), A(p->o), A(p->xb)});
        r |= add(p, norm, 1, 1, 3, (rt_arg[]){A(p->xb), A(L->ffn_norm), A(p->h)});
        r |= add(p, mv_ff, gx_ff, 1, 3, (rt_arg[]){A(L->w_gate), A(p->h), A(p->g)});
        r |= add(p, mv_ff, gx_ff, 1, 3, (rt_arg[]){A(L->w_up), A(p->h), A(p->u)});
        r |= add(p, swi, gx_swi, 1, 3, (rt_arg[]){A(p->g), A(p->u), A(p->act)});
        r |= add(p, mv_down, gx_down, 1, 3, (rt_arg[]){A(L->w_down), A(p->act), A(p->o)});
        r |= add(p, add_d, gx_add, 1, 3, (rt_arg[]){A(p->xb), A(p->o), A(p->xa)});
    }
    r |= add(p, norm, 1, 1, 3, (rt_arg[]){A(p->xa), A(p->output_norm), A(p->h)});
    r |= add(p, mv_out, gx_out, 1, 3, (rt_arg[]){A(p->output), A(p->h), A(p->logits)});
    if (r) return fail(err, errlen, "out of memory");
    p->step = p->d->ops->record(p->d, p->launch, p->n_launch, err, errlen);
    return p->step ? 0 : -1;
}

/* ---- the engine ------------------------------------------------------------------------- */

static int plan_eval(engine *base, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits, bool all, char *err,
                     size_t errlen) {
    plan_engine *p = (plan_engine *)base;
    if (n == 0) return fail(err, errlen, "no tokens to evaluate");
    if (pos > base->n_past) return fail(err, errlen, "position %u is past the %u cached positions", pos, base->n_past);
    if ((uint64_t)pos + n > base->n_ctx)
        return fail(err, errlen, "%u tokens at position %u exceed the context of %u", n, pos, base->n_ctx);
    for (uint32_t t = 0; t < n; t++)
        if (tokens[t] < 0 || (uint32_t)tokens[t] >= p->hp.n_vocab)
            return fail(err, errlen, "token id %d is outside the vocabulary of %u", tokens[t], p->hp.n_vocab);
    rt_device *d = p->d;
    base->n_past = pos;
    /* One recorded step per token; prompts in large blocks come with the prefill kernels. */
    for (uint32_t t = 0; t < n; t++) {
        uint32_t tok = (uint32_t)tokens[t], at = pos + t;
        if (d->ops->upload(d, p->tok, 0, &tok, 4, err, errlen) || d->ops->upload(d, p->pos, 0, &at, 4, err, errlen) ||
            d->ops->replay(d, p->step, err, errlen))
            return -1;
        base->n_past = at + 1;
        if (all || t == n - 1) {
            float *dst = logits + (all ? (size_t)t * p->hp.n_vocab : 0);
            if (d->ops->download(d, p->logits, 0, dst, (size_t)p->hp.n_vocab * 4, err, errlen)) return -1;
        }
    }
    return 0;
}

static void plan_destroy(engine *base) {
    plan_engine *p = (plan_engine *)base;
    rt_device *d = p->d;
    if (p->step) d->ops->release_recording(d, p->step);
    for (uint32_t i = 0; i < p->n_launch; i++) free((void *)p->launch[i].args);
    free(p->launch);
    for (uint32_t i = 0; i < p->n_kern; i++) d->ops->release_kernel(d, p->kern[i]);
    rt_buffer *bufs[] = {p->tok_embd, p->output == p->tok_embd ? NULL : p->output, p->output_norm, p->xa, p->xb, p->h,
                         p->q, p->qb, p->k, p->kb, p->v, p->vb, p->att, p->o, p->g, p->u, p->act, p->logits, p->tok,
                         p->pos};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) d->ops->release(d, bufs[i]);
    for (uint32_t l = 0; p->L && l < p->hp.n_layer; l++) {
        plan_layer *L = &p->L[l];
        rt_buffer *lb[] = {L->attn_norm, L->wq, L->wk, L->wv, L->wo, L->bq, L->bk, L->bv, L->q_norm, L->k_norm,
                           L->ffn_norm, L->w_gate, L->w_up, L->w_down, L->kc, L->vc};
        for (size_t i = 0; i < sizeof lb / sizeof lb[0]; i++)
            if (lb[i]) d->ops->release(d, lb[i]);
    }
    free(p->L);
    free(p);
}

static const engine_ops plan_ops = {plan_eval, plan_destroy};

void plan_counts(const engine *e, uint32_t *n_kernels, uint32_t *n_launches) {
    const plan_engine *p = (const plan_engine *)e;
    *n_kernels = p->n_kern;
    *n_launches = p->n_launch;
}

/* Bytes the plan will hold on the device, to refuse up front what cannot fit. */
static uint64_t plan_bytes(const model *m, uint32_t n_ctx, uint32_t q_dim, uint32_t kv_dim) {
    const arch_hparams *hp = &m->hp;
    uint64_t w = 0;
    const gguf_file *g = m->file;
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) w += gguf_tensor_nelements(gguf_tensor_at(g, i)) * 2;
    uint64_t kv = 2ull * hp->n_layer * n_ctx * kv_dim * 2;
    uint64_t act = 2ull * (4ull * hp->n_embd + 3ull * q_dim + 4ull * kv_dim + 3ull * hp->n_ff) + 4ull * hp->n_vocab;
    return w + kv + act;
}

engine *plan_create(const model *m, rt_device *d, uint32_t dtype, uint32_t n_ctx, char *err, size_t errlen) {
    const arch_hparams *hp = &m->hp;
    if (hp->rope_scaling != ROPE_SCALING_NONE || m->rope_freqs)
        return fail(err, errlen, "%s: rope scaling is not on the GPU path yet (run it on --device cpu)", d->label),
               NULL;
    if (hp->head_dim_k != hp->head_dim_v)
        return fail(err, errlen, "%s: key and value head sizes differ (%u, %u): not on the GPU path yet", d->label,
                    hp->head_dim_k, hp->head_dim_v),
               NULL;
    plan_engine *p = calloc(1, sizeof *p);
    if (!p) return fail(err, errlen, "out of memory"), NULL;
    p->m = m;
    p->d = d;
    p->hp = *hp;
    uint32_t dt = dtype ? dtype : m->file_dtype == GGUF_T_F16 ? GGUF_T_F16 : GGUF_T_BF16;
    p->dt = dt == GGUF_T_F16 ? IR_F16 : IR_BF16;
    p->q_dim = hp->n_head * hp->head_dim_k;
    p->kv_dim = hp->n_head_kv * hp->head_dim_k;
    p->base.ops = &plan_ops;
    p->base.n_vocab = hp->n_vocab;
    p->base.n_ctx = n_ctx ? n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    snprintf(p->name, sizeof p->name, "%s (%s, %s)", d->label, d->caps.name, p->dt == IR_BF16 ? "bf16" : "f16");
    p->base.name = p->name;
    uint64_t need = plan_bytes(m, p->base.n_ctx, p->q_dim, p->kv_dim), have = d->caps.memory_bytes;
    if (have && need > have) {
        fail(err, errlen, "%s: the model needs %.2f GiB with a %u-token context; the device has %.2f GiB (try --ctx)",
             d->label, need / 1073741824.0, p->base.n_ctx, have / 1073741824.0);
        free(p);
        return NULL;
    }
    if (!(p->L = calloc(hp->n_layer, sizeof *p->L))) {
        free(p);
        return fail(err, errlen, "out of memory"), NULL;
    }
    size_t e = 2; /* bytes per 16-bit element */
    int bad = !(p->tok_embd = upload_weight(p, m->tok_embd, err, errlen)) ||
              !(p->output_norm = upload_weight(p, m->output_norm, err, errlen));
    if (!bad) p->output = m->output == m->tok_embd ? p->tok_embd : upload_weight(p, m->output, err, errlen);
    bad |= !p->output;
    for (uint32_t l = 0; l < hp->n_layer && !bad; l++) {
        const model_layer *ml = &m->layers[l];
        plan_layer *L = &p->L[l];
        const gguf_tensor *t[14] = {ml->attn_norm, ml->wq, ml->wk, ml->wv, ml->wo, ml->bq, ml->bk,
                                    ml->bv, ml->q_norm, ml->k_norm, ml->ffn_norm, ml->w_gate, ml->w_up, ml->w_down};
        rt_buffer **dst[14] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->bq, &L->bk,
                               &L->bv, &L->q_norm, &L->k_norm, &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 14 && !bad; i++)
            if (t[i] && !(*dst[i] = upload_weight(p, t[i], err, errlen))) bad = 1;
        if (!bad) {
            size_t cache = (size_t)p->base.n_ctx * p->kv_dim * e;
            bad = !(L->kc = alloc(p, cache, err, errlen)) || !(L->vc = alloc(p, cache, err, errlen));
        }
    }
    struct { rt_buffer **b; size_t bytes; } acts[] = {
        {&p->xa, hp->n_embd * e}, {&p->xb, hp->n_embd * e}, {&p->h, hp->n_embd * e}, {&p->q, p->q_dim * e},
        {&p->qb, p->q_dim * e}, {&p->k, p->kv_dim * e}, {&p->kb, p->kv_dim * e}, {&p->v, p->kv_dim * e},
        {&p->vb, p->kv_dim * e}, {&p->att, p->q_dim * e}, {&p->o, hp->n_embd * e}, {&p->g, hp->n_ff * e},
        {&p->u, hp->n_ff * e}, {&p->act, hp->n_ff * e}, {&p->logits, (size_t)hp->n_vocab * 4}, {&p->tok, 4},
        {&p->pos, 4}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0] && !bad; i++)
        if (!(*acts[i].b = alloc(p, acts[i].bytes, err, errlen))) bad = 1;
    if (bad || build_step(p, err, errlen)) {
        plan_destroy(&p->base);
        return NULL;
    }
    return &p->base;
}
