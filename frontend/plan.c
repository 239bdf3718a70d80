/* The execution plan on a device: weights uploaded once (q, k and v fused into one matrix
 * per layer, so one product serves all three), every buffer allocated once for a block of
 * n_block tokens, and two recordings replayed through a small input buffer info =
 * {position, token count} and the token ids:
 *   decode   one token: qkv matvec (+bias) with the attention norm in front of it,
 *            qk_prep (q/k norm, rope, cache store), attention (runs of the positions
 *            in parallel, then their merge), o matvec + residual, gate/up matvec with
 *            the ffn norm in front and SwiGLU behind, down matvec + residual: 7
 *            launches per layer (9 where the norms do not fit in the products'
 *            workgroup memory);
 *   prefill  a block of up to n_block tokens: the same with matrix products, prefill
 *            attention, separate gate/up products and SwiGLU; the block's last row goes
 *            to the logits head.
 * Each kernel's numbers follow the oracle's contract rounding points (oracle/forward.c):
 * the fused epilogues round where the oracle rounds. */
#include "plan.h"
#include "plan_tune.h"

#include "kernels.h"
#include "progress.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The kernels of a plan, by role. */
enum {
    K_EMBED, K_NORM, K_MV_QKV, K_QK_PREP, K_ATTN, K_MV_O, K_MV_FFN, K_MV_DOWN, K_MV_OUT,
    K_MM_QKV, K_ATTN_PREFILL, K_MM_O, K_MM_FF, K_MM_DOWN, K_SWIGLU, K_TAKE_LAST, K_ATTN_MERGE, K_STAGE, K_ARGMAX,
    K_COUNT
};
static const char *const k_role[K_COUNT] = {
    "embed", "rmsnorm", "decode_qkv", "qk_prep", "attn_decode", "decode_o", "decode_gate_up_swiglu",
    "decode_down", "logits", "prefill_qkv", "attn_prefill", "prefill_o", "prefill_gate_up", "prefill_down",
    "prefill_swiglu", "take_last", "attn_merge", "stage_inputs", "argmax"};

/* What the kernels are built from. */
typedef struct plan_shape {
    arch_hparams hp;
    ir_scalar dt;
    uint32_t q_dim, kv_dim, qkv_dim, n_ctx, n_block;
    bool bias, freqs;
    bool fuse_norm; /* the decode step's norms inside the products after them (kn_matvec_norm) */
    uint32_t n_slots; /* plans that will share one upload of the weights (for the memory check) */
} plan_shape;

/* kn_matvec_norm keeps a row of f32 in workgroup memory: where it fits. */
static bool can_fuse_norm(const plan_shape *s, const rt_caps *c) {
    return (uint64_t)s->hp.n_embd * 4 + 512 <= c->shared_bytes;
}

/* Builds kernel i for the shape; its grid (x, y) where it follows from the shape. */
static ir_kernel *build_kernel(const plan_shape *s, const rt_caps *c, int i, uint32_t g[2], char *err, size_t errlen) {
    const arch_hparams *hp = &s->hp;
    uint32_t d = hp->n_embd, nb = s->n_block;
    ir_scalar dt = s->dt;
    g[0] = g[1] = 1;
    kn_rope_opts rope = {hp->n_rot, hp->rope_neox, hp->rope_base,
                         hp->rope_scaling == ROPE_SCALING_LINEAR && hp->rope_scale_factor > 0 ? 1.0f / hp->rope_scale_factor
                                                                                                : 1.0f,
                         s->freqs};
    unsigned bias = s->bias ? KN_EPI_BIAS : 0;
    switch (i) {
    case K_EMBED: return kn_embed(c, hp->n_vocab, d, dt, &g[0], err, errlen);
    case K_NORM: return kn_rmsnorm(c, d, dt, hp->rms_eps, err, errlen);
    case K_MV_QKV:
        return s->fuse_norm ? kn_matvec_norm(c, s->qkv_dim, d, dt, dt, bias, hp->rms_eps, &g[0], err, errlen)
                            : kn_matvec(c, s->qkv_dim, d, dt, dt, bias, &g[0], err, errlen);
    case K_QK_PREP:
        return kn_qk_prep(c, hp->n_head, hp->n_head_kv, hp->head_dim_k, &rope, hp->qk_norm, hp->rms_eps, s->n_ctx, dt,
                          err, errlen);
    case K_ATTN:
        return kn_attn_decode(c, hp->n_head, hp->n_head_kv, hp->head_dim_k, s->n_ctx,
                              kn_attn_splits(c, hp->n_head, s->n_ctx), dt, g, err, errlen);
    case K_ATTN_MERGE:
        return kn_attn_merge(c, hp->n_head, hp->head_dim_k, s->n_ctx, kn_attn_splits(c, hp->n_head, s->n_ctx), dt,
                             &g[0], err, errlen);
    case K_MV_O: return kn_matvec(c, d, s->q_dim, dt, dt, KN_EPI_RESIDUAL, &g[0], err, errlen);
    case K_MV_FFN:
        return s->fuse_norm ? kn_matvec_norm(c, hp->n_ff, d, dt, dt, KN_EPI_SWIGLU, hp->rms_eps, &g[0], err, errlen)
                            : kn_matvec(c, hp->n_ff, d, dt, dt, KN_EPI_SWIGLU, &g[0], err, errlen);
    case K_MV_DOWN: return kn_matvec(c, d, hp->n_ff, dt, dt, KN_EPI_RESIDUAL, &g[0], err, errlen);
    case K_MV_OUT:
        return s->fuse_norm ? kn_matvec_norm(c, hp->n_vocab, d, dt, IR_F32, KN_EPI_NONE, hp->rms_eps, &g[0], err, errlen)
                            : kn_matvec(c, hp->n_vocab, d, dt, IR_F32, KN_EPI_NONE, &g[0], err, errlen);
    case K_MM_QKV: return kn_matmul(c, s->qkv_dim, d, nb, dt, bias, g, err, errlen);
    case K_ATTN_PREFILL:
        return kn_attn_prefill(c, hp->n_head, hp->n_head_kv, hp->head_dim_k, s->qkv_dim, s->n_ctx, nb, dt, g, err,
                               errlen);
    case K_MM_O: return kn_matmul(c, d, s->q_dim, nb, dt, KN_EPI_RESIDUAL, g, err, errlen);
    case K_MM_FF: return kn_matmul(c, hp->n_ff, d, nb, dt, KN_EPI_NONE, g, err, errlen);
    case K_MM_DOWN: return kn_matmul(c, d, hp->n_ff, nb, dt, KN_EPI_RESIDUAL, g, err, errlen);
    case K_SWIGLU: return kn_swiglu(c, nb * hp->n_ff, dt, &g[0], err, errlen);
    case K_TAKE_LAST: return kn_take_last(c, d, nb, dt, &g[0], err, errlen);
    case K_STAGE: return kn_stage_inputs(c, nb, &g[0], err, errlen);
    case K_ARGMAX: return kn_argmax(c, hp->n_vocab, err, errlen);
    }
    return NULL;
}

typedef struct plan_layer {
    rt_buffer *attn_norm, *wqkv, *bqkv, *q_norm, *k_norm, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
    rt_buffer *kc, *vc;
} plan_layer;

typedef struct plan_engine {
    engine base;
    const model *m;
    rt_device *d;
    plan_shape s;
    char name[200];
    const struct plan_engine *owner; /* NULL: the weight buffers are this plan's; else owner's, borrowed */
    rt_buffer *tok_embd, *output, *output_norm, *freqs;
    plan_layer *L;
    uint16_t *scratch; /* host copy of a converted tensor while the weights load */
    uint64_t scratch_n;
    /* activations for n_block tokens (decode uses row 0); the residual stream x
     * ping-pongs between xa and xb through the fused residual adds */
    rt_buffer *xa, *xb, *h, *qkv, *att, *g, *u, *act, *last, *hl, *logits, *tok, *info;
    rt_buffer *tok_h, *info_h; /* what the host writes (host-mapped); tok and info are their device copies */
    rt_buffer *best;           /* the logits' argmax and max (host-mapped), for greedy decoding */
    rt_buffer *part; /* the decode attention's per-run softmax partials (f32) */
    rt_kernel *kern[K_COUNT];
    uint32_t grid[K_COUNT][2];
    uint32_t n_kern;
    rt_launch *launch;
    uint32_t n_launch, cap_launch, n_decode_launch;
    rt_recording *decode, *prefill;
    progress prog; /* while the plan is made: layers uploaded, then kernels compiled */
} plan_engine;

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int shape_of(const model *m, uint32_t dtype, uint32_t n_ctx, uint32_t n_block, plan_shape *s, char *err,
                    size_t errlen) {
    const arch_hparams *hp = &m->hp;
    if (hp->rope_scaling == ROPE_SCALING_YARN)
        return fail(err, errlen, "YaRN rope scaling is not supported (the oracle lacks it too)");
    if (hp->head_dim_k != hp->head_dim_v)
        return fail(err, errlen, "key and value head sizes differ (%u, %u): not on the GPU path yet", hp->head_dim_k,
                    hp->head_dim_v);
    memset(s, 0, sizeof *s);
    s->hp = *hp;
    uint32_t dt = dtype ? dtype : m->file_dtype == GGUF_T_F16 ? GGUF_T_F16 : GGUF_T_BF16;
    s->dt = dt == GGUF_T_F16 ? IR_F16 : IR_BF16;
    s->q_dim = hp->n_head * hp->head_dim_k;
    s->kv_dim = hp->n_head_kv * hp->head_dim_k;
    s->qkv_dim = s->q_dim + 2 * s->kv_dim;
    s->n_ctx = n_ctx ? n_ctx : hp->n_ctx_train ? hp->n_ctx_train : 4096;
    /* a block of prompt tokens: the matmul's tile multiple, no more than the context needs */
    uint32_t want = n_block ? n_block : 512;
    uint32_t cap = (s->n_ctx + 63) / 64 * 64;
    s->n_block = ((want < cap ? want : cap) + 63) / 64 * 64;
    s->bias = hp->qkv_bias;
    s->freqs = m->rope_freqs != NULL;
    s->n_slots = 1;
    return 0;
}

int plan_each_kernel(const model *m, const rt_caps *c, uint32_t dtype, uint32_t n_ctx,
                     void (*fn)(void *ctx, const char *role, const ir_kernel *k), void *ctx, char *err, size_t errlen) {
    plan_shape s;
    if (shape_of(m, dtype, n_ctx, 0, &s, err, errlen)) return -1;
    s.fuse_norm = can_fuse_norm(&s, c);
    for (int i = 0; i < K_COUNT; i++) {
        uint32_t g[2];
        ir_kernel *k = build_kernel(&s, c, i, g, err, errlen);
        if (!k) return -1;
        fn(ctx, k_role[i], k);
        ir_kernel_destroy(k);
    }
    return 0;
}

/* ---- buffers ---------------------------------------------------------------------------- */

static rt_buffer *alloc(plan_engine *p, size_t bytes, char *err, size_t errlen) {
    return p->d->ops->alloc(p->d, bytes, err, errlen);
}

/* Tensors converted to the plan's 16-bit type and uploaded one after another into one
 * buffer (the fused qkv weight and bias); NULL tensors are skipped. */
static rt_buffer *upload_concat(plan_engine *p, const gguf_tensor *const *t, int n, char *err, size_t errlen) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += t[i] ? gguf_tensor_nelements(t[i]) : 0;
    if (!total) return NULL;
    rt_buffer *b = alloc(p, total * 2, err, errlen);
    uint64_t at = 0;
    for (int i = 0; i < n && b; i++) {
        if (!t[i]) continue;
        uint64_t ne = gguf_tensor_nelements(t[i]);
        if (ne > p->scratch_n) { /* one host buffer for every tensor: fresh pages fault */
            free(p->scratch);
            p->scratch = malloc(ne * 2);
            p->scratch_n = p->scratch ? ne : 0;
        }
        uint16_t *host = p->scratch;
        gguf_error ge;
        int rc = !host ? fail(err, errlen, "out of memory converting '%s'", t[i]->name)
                 : (p->s.dt == IR_BF16 ? gguf_tensor_rows_bf16(t[i], 0, gguf_tensor_nrows(t[i]), host, &ge)
                                       : gguf_tensor_rows_f16(t[i], 0, gguf_tensor_nrows(t[i]), host, &ge))
                     ? fail(err, errlen, "%s", ge.msg)
                     : p->d->ops->upload(p->d, b, at * 2, host, ne * 2, err, errlen);
        if (rc) {
            p->d->ops->release(p->d, b);
            b = NULL;
        }
        at += ne;
    }
    return b;
}

static rt_buffer *upload_weight(plan_engine *p, const gguf_tensor *t, char *err, size_t errlen) {
    return upload_concat(p, &t, 1, err, errlen);
}

/* ---- the recordings ----------------------------------------------------------------------- */

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

static int record_decode(plan_engine *p) {
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

static int record_prefill(plan_engine *p) {
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

/* The decode step's products on the grids measured fastest on the device (plan_tune.c
 * says why), before anything is recorded; the prefill block's logits head takes the
 * decode step's. Only where the products accept any grid (kn_matvec_strided: not on
 * CUDA); a plan that borrows another's weights takes that plan's grids, not measuring
 * again. */
static int tune_products(plan_engine *p, char *err, size_t errlen) {
    static const int mv[] = {K_MV_QKV, K_MV_O, K_MV_FFN, K_MV_DOWN, K_MV_OUT};
    enum { N_MV = sizeof mv / sizeof mv[0] };
    rt_device *d = p->d;
    if (!kn_matvec_strided(&d->caps)) return 0;
    rt_kernel *mk[N_MV];
    uint32_t chosen[N_MV] = {0};
    for (int i = 0; i < N_MV; i++) mk[i] = p->kern[mv[i]];
    if (p->owner) {
        for (int i = 0; i < N_MV; i++) chosen[i] = p->owner->grid[mv[i]][0];
        for (uint32_t j = 0; j < p->n_launch; j++)
            for (int i = 0; i < N_MV; i++)
                if (p->launch[j].kernel == mk[i]) p->launch[j].groups[0] = chosen[i];
    } else {
        int32_t tok0 = 0;
        uint32_t info0[2] = {0, 1}; /* token 0 at position 0: the step's replays need valid inputs */
        if (d->ops->upload(d, p->tok_h, 0, &tok0, sizeof tok0, err, errlen) ||
            d->ops->upload(d, p->info_h, 0, info0, sizeof info0, err, errlen) ||
            plan_tune_grids(d, p->launch, p->n_launch, mk, N_MV, chosen, err, errlen))
            return -1;
    }
    for (int i = 0; i < N_MV; i++)
        if (chosen[i]) p->grid[mv[i]][0] = chosen[i];
    return 0;
}

static int build(plan_engine *p, char *err, size_t errlen) {
    for (int i = 0; i < K_COUNT; i++) {
        ir_kernel *k = build_kernel(&p->s, &p->d->caps, i, p->grid[i], err, errlen);
        if (!k) return -1;
        p->kern[i] = p->d->ops->compile(p->d, k, NULL, err, errlen);
        ir_kernel_destroy(k);
        if (!p->kern[i]) return -1;
        p->n_kern++;
        progress_update(&p->prog, p->s.hp.n_layer + p->n_kern);
    }
    if (record_decode(p)) return fail(err, errlen, "out of memory");
    p->n_decode_launch = p->n_launch;
    if (tune_products(p, err, errlen)) return -1;
    if (!(p->decode = p->d->ops->record(p->d, p->launch, p->n_launch, err, errlen))) return -1;
    if (record_prefill(p)) return fail(err, errlen, "out of memory");
    p->prefill = p->d->ops->record(p->d, p->launch + p->n_decode_launch, p->n_launch - p->n_decode_launch, err, errlen);
    return p->prefill ? 0 : -1;
}

/* ---- the engine ------------------------------------------------------------------------- */

/* Runs one recording for tokens [0, n) at pos (n <= n_block; decode: n == 1). */
static int step(plan_engine *p, rt_recording *rec, const int32_t *tokens, uint32_t n, uint32_t pos, char *err,
                size_t errlen) {
    rt_device *d = p->d;
    uint32_t info[2] = {pos, n};
    return d->ops->upload(d, p->tok_h, 0, tokens, (size_t)n * 4, err, errlen) ||
                   d->ops->upload(d, p->info_h, 0, info, sizeof info, err, errlen) || d->ops->replay(d, rec, err, errlen)
               ? -1
               : 0;
}

/* Evaluates tokens through the recordings; the last step's logits (and their argmax)
 * stay on the device for the caller to read. all: a decode step per token, each token's
 * logits copied to logits[t] as it goes. */
static int run_tokens(plan_engine *p, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits, bool all,
                      char *err, size_t errlen) {
    engine *base = &p->base;
    if (n == 0) return fail(err, errlen, "no tokens to evaluate");
    if (pos > base->n_past) return fail(err, errlen, "position %u is past the %u cached positions", pos, base->n_past);
    if ((uint64_t)pos + n > base->n_ctx)
        return fail(err, errlen, "%u tokens at position %u exceed the context of %u", n, pos, base->n_ctx);
    for (uint32_t t = 0; t < n; t++)
        if (tokens[t] < 0 || (uint32_t)tokens[t] >= p->s.hp.n_vocab)
            return fail(err, errlen, "token id %d is outside the vocabulary of %u", tokens[t], p->s.hp.n_vocab);
    rt_device *d = p->d;
    base->n_past = pos;
    size_t row = (size_t)p->s.hp.n_vocab * 4;
    for (uint32_t t = 0; t < n;) {
        /* logits of every token need a decode step each; otherwise blocks of the prompt */
        uint32_t m = all || n - t == 1 ? 1 : n - t < p->s.n_block ? n - t : p->s.n_block;
        if (step(p, m == 1 ? p->decode : p->prefill, tokens + t, m, pos + t, err, errlen)) return -1;
        t += m;
        base->n_past = pos + t;
        if (all && d->ops->download(d, p->logits, 0, logits + (size_t)(t - 1) * p->s.hp.n_vocab, row, err, errlen))
            return -1;
    }
    return 0;
}

static int plan_eval(engine *base, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits, bool all, char *err,
                     size_t errlen) {
    plan_engine *p = (plan_engine *)base;
    if (run_tokens(p, tokens, n, pos, logits, all, err, errlen)) return -1;
    return all ? 0 : p->d->ops->download(p->d, p->logits, 0, logits, (size_t)p->s.hp.n_vocab * 4, err, errlen);
}

static int plan_eval_argmax(engine *base, const int32_t *tokens, uint32_t n, uint32_t pos, int32_t *best, char *err,
                            size_t errlen) {
    plan_engine *p = (plan_engine *)base;
    uint32_t out[2];
    if (run_tokens(p, tokens, n, pos, NULL, false, err, errlen) ||
        p->d->ops->download(p->d, p->best, 0, out, sizeof out, err, errlen))
        return -1;
    float mx;
    memcpy(&mx, &out[1], 4);
    *best = mx == -INFINITY || out[0] >= p->s.hp.n_vocab ? -1 : (int32_t)out[0];
    return 0;
}

static void plan_destroy(engine *base) {
    plan_engine *p = (plan_engine *)base;
    rt_device *d = p->d;
    if (p->decode) d->ops->release_recording(d, p->decode);
    if (p->prefill) d->ops->release_recording(d, p->prefill);
    for (uint32_t i = 0; i < p->n_launch; i++) free((void *)p->launch[i].args);
    free(p->launch);
    for (int i = 0; i < K_COUNT; i++)
        if (p->kern[i]) d->ops->release_kernel(d, p->kern[i]);
    bool own = !p->owner; /* borrowed weights stay with their owner */
    rt_buffer *bufs[] = {own ? p->tok_embd : NULL, own && p->output != p->tok_embd ? p->output : NULL,
                         own ? p->output_norm : NULL, own ? p->freqs : NULL, p->xa,
                         p->xb, p->h, p->qkv, p->att, p->g, p->u, p->act, p->last, p->hl, p->logits, p->tok, p->info,
                         p->part, p->tok_h, p->info_h, p->best};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) d->ops->release(d, bufs[i]);
    for (uint32_t l = 0; p->L && l < p->s.hp.n_layer; l++) {
        plan_layer *L = &p->L[l];
        rt_buffer *lb[] = {L->attn_norm, L->wqkv, L->bqkv, L->q_norm, L->k_norm, L->wo,
                           L->ffn_norm, L->w_gate, L->w_up, L->w_down, L->kc, L->vc};
        for (size_t i = own ? 0 : 10; i < sizeof lb / sizeof lb[0]; i++)
            if (lb[i]) d->ops->release(d, lb[i]);
    }
    free(p->L);
    free(p->scratch);
    free(p);
}

static const engine_ops plan_ops = {plan_eval, plan_destroy, plan_eval_argmax};

void plan_counts(const engine *e, uint32_t *n_kernels, uint32_t *n_launches) {
    const plan_engine *p = (const plan_engine *)e;
    *n_kernels = p->n_kern;
    *n_launches = p->n_decode_launch;
}

uint32_t plan_block(const engine *e) { return ((const plan_engine *)e)->s.n_block; }

/* Weight (or cache) bytes one launch of kernel i reads in a decode step at position pos:
 * what bounds it, for the profile's bandwidth column (0: not a streaming kernel). */
static uint64_t decode_bytes(const plan_shape *s, int i, uint32_t pos) {
    const arch_hparams *hp = &s->hp;
    uint64_t d = hp->n_embd, e = 2; /* bf16/f16 */
    switch (i) {
    case K_MV_QKV: return e * s->qkv_dim * d;
    case K_MV_O: return e * d * s->q_dim;
    case K_MV_FFN: return 2 * e * hp->n_ff * d;
    case K_MV_DOWN: return e * d * hp->n_ff;
    case K_MV_OUT: return e * hp->n_vocab * d;
    case K_ATTN: return 2 * e * (uint64_t)(pos + 1) * s->kv_dim;
    default: return 0;
    }
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* FLOPs one launch of prefill kernel i does for a full block (0: not a matrix kernel):
 * for the profile's rate column. */
static uint64_t prefill_flops(const plan_shape *s, int i) {
    const arch_hparams *hp = &s->hp;
    uint64_t d = hp->n_embd, nb = s->n_block;
    switch (i) {
    case K_MM_QKV: return 2 * nb * s->qkv_dim * d;
    case K_MM_O: return 2 * nb * d * s->q_dim;
    case K_MM_FF: return 2 * nb * hp->n_ff * d;
    case K_MM_DOWN: return 2 * nb * d * hp->n_ff;
    case K_ATTN_PREFILL: return 2ull * 2 * hp->n_head * hp->head_dim_k * (nb * (nb + 1) / 2); /* causal, from 0 */
    default: return 0;
    }
}

/* Times the recording rec (launches [first, first + count) of p->launch) replayed reps
 * times, then each launch run reps times back to back, and prints them by role. */
static int profile_span(plan_engine *p, rt_recording *rec, uint32_t first, uint32_t count, uint32_t reps, bool prefill,
                        uint32_t pos, FILE *out, char *err, size_t errlen) {
    rt_device *d = p->d;
    rt_launch *l = malloc(reps * sizeof *l);
    if (!l) return fail(err, errlen, "out of memory");
    double t_role[K_COUNT] = {0};
    uint32_t n_role[K_COUNT] = {0}, grid_role[K_COUNT] = {0};
    double t0 = now_s();
    for (uint32_t r = 0; r < reps; r++)
        if (d->ops->replay(d, rec, err, errlen)) return free(l), -1;
    double t_step = (now_s() - t0) / reps;
    for (uint32_t i = first; i < first + count; i++) {
        int k = 0;
        while (k < K_COUNT && p->kern[k] != p->launch[i].kernel) k++;
        for (uint32_t r = 0; r < reps; r++) l[r] = p->launch[i];
        if (d->ops->run(d, l, 1, err, errlen)) return free(l), -1; /* warm */
        t0 = now_s();
        if (d->ops->run(d, l, reps, err, errlen)) return free(l), -1;
        t_role[k] += (now_s() - t0) / reps;
        n_role[k]++;
        grid_role[k] = p->launch[i].groups[0] * p->launch[i].groups[1];
    }
    free(l);
    double sum = 0;
    if (prefill)
        fprintf(out, "prefill block of %u tokens on %s, each launch run %u times back to back:\n", p->s.n_block,
                d->label, reps);
    else
        fprintf(out, "decode step on %s at position %u, each launch run %u times back to back:\n", d->label, pos, reps);
    fprintf(out, "  %-24s %8s %8s %10s %10s %9s\n", "kernel", "launches", "grid", "us each", "us/step",
            prefill ? "TFLOP/s" : "GB/s");
    for (int k = 0; k < K_COUNT; k++) {
        if (!n_role[k]) continue;
        double each = t_role[k] / n_role[k];
        uint64_t b = prefill ? prefill_flops(&p->s, k) : decode_bytes(&p->s, k, pos);
        fprintf(out, "  %-24s %8u %8u %10.2f %10.1f", k_role[k], n_role[k], grid_role[k], each * 1e6, t_role[k] * 1e6);
        if (b) fprintf(out, prefill ? " %9.2f" : " %9.1f", b / each * (prefill ? 1e-12 : 1e-9));
        fputc('\n', out);
        sum += t_role[k];
    }
    if (prefill)
        fprintf(out, "  sum of launches %.1f us; the recorded block replayed: %.1f us (%.0f tok/s)\n", sum * 1e6,
                t_step * 1e6, p->s.n_block / t_step);
    else
        fprintf(out, "  sum of launches %.1f us; the recorded step replayed: %.1f us (%.1f tok/s)\n", sum * 1e6,
                t_step * 1e6, 1.0 / t_step);
    return 0;
}

int plan_profile(engine *e, uint32_t reps, FILE *out, char *err, size_t errlen) {
    if (e->ops != &plan_ops) return fail(err, errlen, "a profile needs a GPU device (the oracle runs no kernels)");
    plan_engine *p = (plan_engine *)e;
    if (reps == 0) reps = 1;
    uint32_t pos = e->n_past ? e->n_past - 1 : 0;
    if (profile_span(p, p->decode, 0, p->n_decode_launch, reps, false, pos, out, err, errlen)) return -1;
    /* a full prefill block from position 0 (token 0 throughout), fewer repeats: each
     * launch is a block's worth of work */
    uint32_t nb = p->s.n_block, info[2] = {0, nb};
    int32_t *zeros = calloc(nb, sizeof *zeros);
    if (!zeros) return fail(err, errlen, "out of memory");
    rt_device *d = p->d;
    int rc = d->ops->upload(d, p->tok_h, 0, zeros, (size_t)nb * 4, err, errlen) ||
                     d->ops->upload(d, p->info_h, 0, info, sizeof info, err, errlen) ||
                     profile_span(p, p->prefill, p->n_decode_launch, p->n_launch - p->n_decode_launch,
                                  reps < 10 ? reps : 10, true, 0, out, err, errlen)
                 ? -1
                 : 0;
    free(zeros);
    e->n_past = 0; /* the cache now holds the profile's block, not the run's tokens */
    return rc;
}

/* Activation bytes for a block of nb tokens. */
static uint64_t act_bytes(const plan_shape *s, const rt_caps *c, uint32_t nb) {
    const arch_hparams *hp = &s->hp;
    return 2ull * nb * (3ull * hp->n_embd + s->qkv_dim + s->q_dim + 3ull * hp->n_ff) + 4ull * hp->n_embd +
           4ull * hp->n_vocab + 8ull * nb + 24 + 4ull * hp->n_head * kn_attn_splits(c, hp->n_head, s->n_ctx) * (hp->head_dim_k + 2);
}

/* Bytes the plan will hold on the device, and its largest single buffer (named in what),
 * to refuse up front what cannot fit. */
static uint64_t plan_bytes(const model *m, const plan_shape *s, const rt_caps *c, uint64_t *largest, char *what,
                           size_t what_len) {
    const arch_hparams *hp = &s->hp;
    uint64_t w = 0, big = 0;
    const gguf_file *g = m->file;
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        uint64_t b = gguf_tensor_nelements(t) * 2;
        w += b;
        if (b > big) big = b, snprintf(what, what_len, "the weight '%s'", t->name);
    }
    uint64_t cache = (uint64_t)s->n_ctx * s->kv_dim * 2, widest = s->qkv_dim > hp->n_ff ? s->qkv_dim : hp->n_ff;
    struct { uint64_t bytes; const char *name; } other[] = {
        {(uint64_t)s->qkv_dim * hp->n_embd * 2, "the fused q/k/v weight of a layer"},
        {cache, "the KV cache of a layer (try --ctx)"},
        {(uint64_t)s->n_block * widest * 2, "an activation of a prefill block"},
        {4ull * hp->n_vocab, "the logits"}};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        if (other[i].bytes > big) big = other[i].bytes, snprintf(what, what_len, "%s", other[i].name);
    *largest = big;
    return w + (uint64_t)s->n_slots * (2 * hp->n_layer * cache + act_bytes(s, c, s->n_block));
}

/* What the device refuses, or 0: the whole plan past its memory, or one buffer past what
 * a kernel may bind. */
static int check_fit(const model *m, const plan_shape *s, const rt_device *d, char *err, size_t errlen) {
    char what[160];
    uint64_t largest, need = plan_bytes(m, s, &d->caps, &largest, what, sizeof what);
    uint64_t have = d->caps.memory_bytes, lim = d->caps.max_buffer_bytes;
    if (have && need > have && s->n_slots > 1)
        return fail(err, errlen,
                    "%s: the model needs %.2f GiB with %u slots of a %u-token context (one copy of the weights, "
                    "a KV cache per slot); the device has %.2f GiB (try --ctx or fewer slots)",
                    d->label, need / 1073741824.0, s->n_slots, s->n_ctx, have / 1073741824.0);
    if (have && need > have)
        return fail(err, errlen,
                    "%s: the model needs %.2f GiB with a %u-token context; the device has %.2f GiB (try --ctx)",
                    d->label, need / 1073741824.0, s->n_ctx, have / 1073741824.0);
    if (lim && largest > lim)
        return fail(err, errlen,
                    "%s: %s takes %.1f MiB at a %u-token context; the device binds at most %.1f MiB per buffer "
                    "(maxStorageBufferRange)",
                    d->label, what, largest / 1048576.0, s->n_ctx, lim / 1048576.0);
    return 0;
}

/* Every weight converted and uploaded (q, k, v fused), progress per layer. 0 or -1. */
static int upload_weights(plan_engine *p, char *err, size_t errlen) {
    const model *m = p->m;
    int bad = !(p->tok_embd = upload_weight(p, m->tok_embd, err, errlen)) ||
              !(p->output_norm = upload_weight(p, m->output_norm, err, errlen)) ||
              (m->rope_freqs && !(p->freqs = upload_weight(p, m->rope_freqs, err, errlen)));
    if (!bad) p->output = m->output == m->tok_embd ? p->tok_embd : upload_weight(p, m->output, err, errlen);
    bad |= !p->output;
    for (uint32_t l = 0; l < p->s.hp.n_layer && !bad; l++) {
        const model_layer *ml = &m->layers[l];
        plan_layer *L = &p->L[l];
        const gguf_tensor *qkv[3] = {ml->wq, ml->wk, ml->wv}, *b[3] = {ml->bq, ml->bk, ml->bv};
        bad = !(L->wqkv = upload_concat(p, qkv, 3, err, errlen)) ||
              (p->s.bias && !(L->bqkv = upload_concat(p, b, 3, err, errlen)));
        const gguf_tensor *t[7] = {ml->attn_norm, ml->q_norm, ml->k_norm, ml->wo, ml->ffn_norm, ml->w_gate, ml->w_up};
        rt_buffer **dst[7] = {&L->attn_norm, &L->q_norm, &L->k_norm, &L->wo, &L->ffn_norm, &L->w_gate, &L->w_up};
        for (int i = 0; i < 7 && !bad; i++)
            if (t[i] && !(*dst[i] = upload_weight(p, t[i], err, errlen))) bad = 1;
        if (!bad && !(L->w_down = upload_weight(p, ml->w_down, err, errlen))) bad = 1;
        progress_update(&p->prog, l + 1);
    }
    return bad ? -1 : 0;
}

/* The owner's weight buffers, read-only in every kernel, so plans can share them. */
static int borrow_weights(plan_engine *p, const plan_engine *o) {
    p->tok_embd = o->tok_embd, p->output = o->output, p->output_norm = o->output_norm, p->freqs = o->freqs;
    for (uint32_t l = 0; l < p->s.hp.n_layer; l++) {
        plan_layer *L = &p->L[l];
        const plan_layer *K = &o->L[l];
        *L = (plan_layer){K->attn_norm, K->wqkv, K->bqkv, K->q_norm, K->k_norm, K->wo, K->ffn_norm, K->w_gate,
                          K->w_up, K->w_down, NULL, NULL};
    }
    progress_update(&p->prog, p->s.hp.n_layer);
    return 0;
}

/* A plan of shape s0 (checked to fit); owner: the plan whose weight buffers it borrows,
 * or NULL to upload its own. */
static engine *make(const model *m, rt_device *d, const plan_shape *s0, const plan_engine *owner, char *err,
                    size_t errlen) {
    plan_shape s = *s0;
    const arch_hparams *hp = &s.hp;
    plan_engine *p = calloc(1, sizeof *p);
    if (!p || !(p->L = calloc(hp->n_layer, sizeof *p->L))) {
        free(p);
        return fail(err, errlen, "out of memory"), NULL;
    }
    p->m = m;
    p->d = d;
    p->owner = owner;
    s.fuse_norm = can_fuse_norm(&s, &d->caps);
    p->s = s;
    p->base.ops = &plan_ops;
    p->base.n_vocab = hp->n_vocab;
    p->base.n_ctx = s.n_ctx;
    snprintf(p->name, sizeof p->name, "%s (%s, %s)", d->label, d->caps.name, s.dt == IR_BF16 ? "bf16" : "f16");
    p->base.name = p->name;
    char what[96];
    snprintf(what, sizeof what, "%s: %s", d->label, owner ? "another slot's cache and kernels" : "weights and kernels");
    progress_begin(&p->prog, what, (uint64_t)hp->n_layer + K_COUNT);
    int bad = owner ? borrow_weights(p, owner) : upload_weights(p, err, errlen);
    for (uint32_t l = 0; l < hp->n_layer && !bad; l++) {
        size_t cache = (size_t)s.n_ctx * s.kv_dim * 2;
        bad = !(p->L[l].kc = alloc(p, cache, err, errlen)) || !(p->L[l].vc = alloc(p, cache, err, errlen));
    }
    free(p->scratch);
    p->scratch = NULL;
    size_t nb = s.n_block;
    struct { rt_buffer **b; size_t bytes; } acts[] = {
        {&p->xa, nb * hp->n_embd * 2}, {&p->xb, nb * hp->n_embd * 2}, {&p->h, nb * hp->n_embd * 2},
        {&p->qkv, nb * s.qkv_dim * 2}, {&p->att, nb * s.q_dim * 2}, {&p->g, nb * hp->n_ff * 2},
        {&p->u, nb * hp->n_ff * 2}, {&p->act, nb * hp->n_ff * 2}, {&p->last, hp->n_embd * 2},
        {&p->hl, hp->n_embd * 2}, {&p->logits, (size_t)hp->n_vocab * 4}, {&p->tok, nb * 4}, {&p->info, 8},
        {&p->tok_h, nb * 4}, {&p->info_h, 8}, {&p->best, 8},
        {&p->part, (size_t)hp->n_head * kn_attn_splits(&d->caps, hp->n_head, s.n_ctx) * (hp->head_dim_k + 2) * 4}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0] && !bad; i++) {
        /* what the host writes or reads each step lives in host memory */
        bool host = acts[i].b == &p->logits || acts[i].b == &p->tok_h || acts[i].b == &p->info_h ||
                    acts[i].b == &p->best;
        if (!(*acts[i].b = (host ? d->ops->alloc_host : d->ops->alloc)(d, acts[i].bytes, err, errlen))) bad = 1;
    }
    /* One replay of each recording now, so the driver's first-use work (final pipeline
     * compiles, page mappings) lands in load time, not in the first prompt: the prefill
     * for no tokens (every product and attention tile returns at once), a decode step at
     * position 0 (its cache row is rewritten by the first real token). */
    int32_t tok0 = 0;
    if (bad || build(p, err, errlen) || step(p, p->prefill, &tok0, 0, 0, err, errlen) ||
        step(p, p->decode, &tok0, 1, 0, err, errlen)) {
        progress_end(&p->prog, false);
        plan_destroy(&p->base);
        return NULL;
    }
    progress_end(&p->prog, true);
    return &p->base;
}

engine *plan_create_slots(const model *m, rt_device *d, uint32_t dtype, uint32_t n_ctx, uint32_t n_block,
                          uint32_t n_slots, char *err, size_t errlen) {
    plan_shape s;
    char why[256];
    if (shape_of(m, dtype, n_ctx, n_block, &s, why, sizeof why))
        return fail(err, errlen, "%s: %s", d->label, why), NULL;
    s.n_slots = n_slots ? n_slots : 1;
    /* no --ctx: the model's context, halved until it fits (down to 256 positions) */
    while (!n_ctx && s.n_ctx > 256 && check_fit(m, &s, d, why, sizeof why)) {
        s.n_ctx = s.n_ctx / 2 > 256 ? s.n_ctx / 2 : 256;
        if (s.n_block > (s.n_ctx + 63) / 64 * 64) s.n_block = (s.n_ctx + 63) / 64 * 64;
    }
    if (check_fit(m, &s, d, err, errlen)) return NULL;
    return make(m, d, &s, NULL, err, errlen);
}

engine *plan_create(const model *m, rt_device *d, uint32_t dtype, uint32_t n_ctx, uint32_t n_block, char *err,
                    size_t errlen) {
    return plan_create_slots(m, d, dtype, n_ctx, n_block, 1, err, errlen);
}

engine *plan_create_sibling(engine *first, char *err, size_t errlen) {
    if (!first || first->ops != &plan_ops) return fail(err, errlen, "not a plan"), NULL;
    const plan_engine *o = (const plan_engine *)first;
    if (o->owner) o = o->owner;
    return make(o->m, o->d, &o->s, o, err, errlen);
}
