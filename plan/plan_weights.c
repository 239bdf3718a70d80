/* The plan's weights and memory: every tensor converted to the plan's 16-bit type and
 * uploaded once (q, k and v fused into one matrix per layer), borrowed by sibling plans,
 * and the whole plan's bytes checked against the device before anything is allocated. */
#include "base/error.h"
#include "plan/plan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rt_buffer *plan_alloc(plan_engine *p, size_t bytes, kiln_err *err) {
    return p->d->ops->alloc(p->d, bytes, err);
}

/* Tensors converted to the plan's 16-bit type and uploaded one after another into one
 * buffer (the fused qkv weight and bias); NULL tensors are skipped. */
static rt_buffer *upload_concat(plan_engine *p, const gguf_tensor *const *t, int n, kiln_err *err) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += t[i] ? gguf_tensor_nelements(t[i]) : 0;
    if (!total) return NULL;
    rt_buffer *b = plan_alloc(p, total * 2, err);
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
        kiln_err ge;
        int rc = !host ? kiln_fail(err, KILN_ERR_NOMEM, "out of memory converting '%s'", t[i]->name)
                 : (p->s.dt == IR_BF16 ? gguf_tensor_rows_bf16(t[i], 0, gguf_tensor_nrows(t[i]), host, &ge)
                                       : gguf_tensor_rows_f16(t[i], 0, gguf_tensor_nrows(t[i]), host, &ge))
                     ? kiln_err_wrap(err, &ge, NULL)
                     : p->d->ops->upload(p->d, b, at * 2, host, ne * 2, err);
        if (rc) {
            p->d->ops->release(p->d, b);
            b = NULL;
        }
        at += ne;
    }
    return b;
}


static rt_buffer *upload_weight(plan_engine *p, const gguf_tensor *t, kiln_err *err) {
    return upload_concat(p, &t, 1, err);
}

/* Every weight converted and uploaded (q, k, v fused), progress per layer. 0 or -1. */
int plan_upload_weights(plan_engine *p, kiln_err *err) {
    const model *m = p->m;
    int bad = !(p->tok_embd = upload_weight(p, m->tok_embd, err)) ||
              !(p->output_norm = upload_weight(p, m->output_norm, err)) ||
              (m->rope_freqs && !(p->freqs = upload_weight(p, m->rope_freqs, err)));
    if (!bad) p->output = m->output == m->tok_embd ? p->tok_embd : upload_weight(p, m->output, err);
    bad |= !p->output;
    for (uint32_t l = 0; l < p->s.hp.n_layer && !bad; l++) {
        const model_layer *ml = &m->layers[l];
        plan_layer *L = &p->L[l];
        const gguf_tensor *qkv[3] = {ml->wq, ml->wk, ml->wv}, *b[3] = {ml->bq, ml->bk, ml->bv};
        bad = !(L->wqkv = upload_concat(p, qkv, 3, err)) ||
              (p->s.bias && !(L->bqkv = upload_concat(p, b, 3, err)));
        const gguf_tensor *t[7] = {ml->attn_norm, ml->q_norm, ml->k_norm, ml->wo, ml->ffn_norm, ml->w_gate, ml->w_up};
        rt_buffer **dst[7] = {&L->attn_norm, &L->q_norm, &L->k_norm, &L->wo, &L->ffn_norm, &L->w_gate, &L->w_up};
        for (int i = 0; i < 7 && !bad; i++)
            if (t[i] && !(*dst[i] = upload_weight(p, t[i], err))) bad = 1;
        if (!bad && !(L->w_down = upload_weight(p, ml->w_down, err))) bad = 1;
        progress_update(&p->prog, l + 1);
    }
    return bad ? -1 : 0;
}

/* The owner's weight buffers, read-only in every kernel, so plans can share them. */
int plan_borrow_weights(plan_engine *p, const plan_engine *o) {
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

/* Activation bytes for a block of nb tokens. */
static uint64_t act_bytes(const plan_shape *s, const rt_caps *c, uint32_t nb) {
    const arch_hparams *hp = &s->hp;
    return 2ull * nb * (3ull * hp->n_embd + s->qkv_dim + s->q_dim + 3ull * hp->n_ff) + 4ull * hp->n_embd +
           4ull * hp->n_vocab + 8ull * nb + 24 +
           4ull * hp->n_head * kn_attn_splits(c, hp->n_head, s->n_ctx) * (hp->head_dim_k + 2);
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
int plan_check_fit(const model *m, const plan_shape *s, const rt_device *d, kiln_err *err) {
    char what[160];
    uint64_t largest, need = plan_bytes(m, s, &d->caps, &largest, what, sizeof what);
    uint64_t have = d->caps.memory_bytes, lim = d->caps.max_buffer_bytes;
    if (have && need > have && s->n_slots > 1)
        return kiln_fail(err, KILN_ERR_NOMEM,
                         "%s: the model needs %.2f GiB with %u slots of a %u-token context (one copy of the weights, "
                         "a KV cache per slot); the device has %.2f GiB (try --ctx or fewer slots)",
                         d->label, need / 1073741824.0, s->n_slots, s->n_ctx, have / 1073741824.0);
    if (have && need > have)
        return kiln_fail(err, KILN_ERR_NOMEM,
                         "%s: the model needs %.2f GiB with a %u-token context; the device has %.2f GiB (try --ctx)",
                         d->label, need / 1073741824.0, s->n_ctx, have / 1073741824.0);
    if (lim && largest > lim)
        return kiln_fail(err, KILN_ERR_UNSUPPORTED,
                         "%s: %s takes %.1f MiB at a %u-token context; the device binds at most %.1f MiB per buffer "
                         "(maxStorageBufferRange)",
                         d->label, what, largest / 1048576.0, s->n_ctx, lim / 1048576.0);
    return 0;
}
