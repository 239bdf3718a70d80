/* The plan's weights and memory: every tensor converted to the plan's 16-bit type and
 * uploaded once (q, k and v fused into one matrix per layer), borrowed by sibling plans,
 * and the whole plan's bytes checked against the device before anything is allocated. */
#include "base/error.h"
#include "plan/plan_internal.h"
#include "plan/plan_quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rt_buffer *plan_alloc(plan_engine *p, size_t bytes, kiln_err *err) {
    uint64_t cap = (uint64_t)p->d->debug.alloc_kib << 10;
    if (cap && p->dev_bytes + bytes > cap)
        return kiln_fail(err, KILN_ERR_NOMEM, "%s: out of device memory (debug-alloc-kib: %llu bytes past %u KiB)",
                         p->d->label, (unsigned long long)(p->dev_bytes + bytes), p->d->debug.alloc_kib),
               NULL;
    rt_buffer *b = p->d->ops->alloc(p->d, bytes, err);
    if (b) p->dev_bytes += bytes;
    return b;
}

int plan_zero(rt_device *d, rt_buffer *b, kiln_err *err) {
    size_t bytes = d->ops->size(d, b);
    void *zero = calloc(1, bytes ? bytes : 1);
    int rc = !zero ? kiln_fail(err, KILN_ERR_NOMEM, "out of memory") : d->ops->upload(d, b, 0, zero, bytes, err);
    free(zero);
    return rc ? -1 : 0;
}

rt_buffer *plan_alloc_zeroed(rt_device *d, size_t bytes, kiln_err *err) {
    rt_buffer *b = d->ops->alloc(d, bytes, err);
    if (b && plan_zero(d, b, err)) {
        d->ops->release(d, b);
        return NULL;
    }
    return b;
}

void plan_release(plan_engine *p, rt_buffer *b) {
    if (!b) return;
    size_t n = p->d->ops->size(p->d, b);
    p->dev_bytes = p->dev_bytes > n ? p->dev_bytes - n : 0;
    p->d->ops->release(p->d, b);
}

/* The host scratch for ne 16-bit values: one buffer for every tensor (fresh pages fault). */
static int scratch_for(plan_engine *p, uint64_t ne, const gguf_tensor *t, kiln_err *err) {
    if (ne > p->scratch_n) {
        free(p->scratch);
        p->scratch = malloc(ne * 2);
        p->scratch_n = p->scratch ? ne : 0;
    }
    return p->scratch ? 0 : kiln_fail(err, KILN_ERR_NOMEM, "out of memory converting '%s'", t->name);
}

int plan_upload_rows(plan_engine *p, rt_buffer *b, uint64_t at, const gguf_tensor *t, uint64_t r0, uint64_t n,
                       kiln_err *err) {
    uint64_t ne = n * t->ne[0];
    if (scratch_for(p, ne, t, err)) return -1;
    kiln_err ge;
    if (p->s.dt == IR_BF16 ? gguf_tensor_rows_bf16(t, r0, n, p->scratch, &ge)
                           : gguf_tensor_rows_f16(t, r0, n, p->scratch, &ge))
        return kiln_err_wrap(err, &ge, NULL);
    return p->d->ops->upload(p->d, b, at * 2, p->scratch, ne * 2, err);
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
        if (plan_upload_rows(p, b, at, t[i], 0, gguf_tensor_nrows(t[i]), err)) {
            p->d->ops->release(p->d, b);
            b = NULL;
        }
        at += gguf_tensor_nelements(t[i]);
    }
    return b;
}

static rt_buffer *upload_weight(plan_engine *p, const gguf_tensor *t, kiln_err *err) {
    return upload_concat(p, &t, 1, err);
}

/* The layout a block-quantized tensor takes on the device (kernels/kn_quant.h). */
static int quant_layout(const gguf_tensor *t, kn_qlayout *L, kiln_err *err) {
    uint64_t rows = gguf_tensor_nrows(t);
    int q = plan_qtype(t->type);
    if (q < 0 || rows > UINT32_MAX || t->ne[0] > UINT32_MAX)
        return kiln_fail(err, KILN_ERR_UNSUPPORTED, "'%s': no device layout for its type or its %llu rows", t->name,
                         (unsigned long long)rows);
    return kn_qlayout_of((kn_qtype)q, (uint32_t)rows, (uint32_t)t->ne[0], L, err);
}

/* Block-quantized tensors of one type and width kept in their blocks: repacked one after
 * another into the rows of one layout's planes (its kn_qtype in *qt). */
static rt_buffer *upload_quant_concat(plan_engine *p, const gguf_tensor *const *t, int n, int8_t *qt,
                                      kiln_err *err) {
    kn_qlayout L;
    uint64_t rows = 0;
    for (int i = 0; i < n; i++) rows += gguf_tensor_nrows(t[i]);
    if (quant_layout(t[0], &L, err)) return NULL;
    if (n > 1 && rows > UINT32_MAX)
        return kiln_fail(err, KILN_ERR_UNSUPPORTED, "'%s': %llu rows with those after it", t[0]->name,
                         (unsigned long long)rows),
               NULL;
    if ((n > 1 && kn_qlayout_of(L.type, (uint32_t)rows, L.cols, &L, err)) || scratch_for(p, 2 * L.words, t[0], err))
        return NULL;
    uint32_t *words = (uint32_t *)p->scratch;
    memset(words, 0, L.words * 4);
    kn_qlayout first = L;
    first.rows = (uint32_t)gguf_tensor_nrows(t[0]); /* the first tensor's rows of the same planes, threaded */
    int bad = plan_quant_pack_all(t[0], &first, words, 0, err);
    uint32_t at = first.rows;
    for (int i = 1; i < n && !bad; at += (uint32_t)gguf_tensor_nrows(t[i]), i++)
        bad = plan_quant_pack(t[i], 0, (uint32_t)gguf_tensor_nrows(t[i]), &L, at, words, err);
    rt_buffer *b = NULL;
    if (!bad && (b = plan_alloc(p, L.words * 4, err)) && p->d->ops->upload(p->d, b, 0, words, L.words * 4, err))
        p->d->ops->release(p->d, b), b = NULL;
    *qt = (int8_t)L.type;
    return b;
}

/* Weights one after another in one buffer: in their blocks where the model keeps them (qt
 * their type), else in 16 bits (qt -1). */
static rt_buffer *upload_matrix_concat(plan_engine *p, const gguf_tensor *const *t, int n, bool keep, int8_t *qt,
                                       kiln_err *err) {
    *qt = -1;
    return keep ? upload_quant_concat(p, t, n, qt, err) : upload_concat(p, t, n, err);
}

static rt_buffer *upload_quant(plan_engine *p, const gguf_tensor *t, int8_t *qt, kiln_err *err) {
    return upload_quant_concat(p, &t, 1, qt, err);
}

static rt_buffer *upload_matrix(plan_engine *p, const gguf_tensor *t, bool keep, int8_t *qt, kiln_err *err) {
    return upload_matrix_concat(p, &t, 1, keep, qt, err);
}

/* A layer's experts of a kind (0 gate, 1 up, 2 down), all resident: the 3-D tensor, then
 * a shared expert's matrix as expert n_expert (plan_shape_of counts it in), in 16 bits or
 * in their blocks (kept so only where the types match: model.c). */
static rt_buffer *upload_experts(plan_engine *p, const model_layer *ml, int kind, int8_t *qt, kiln_err *err) {
    uint64_t r0;
    const gguf_tensor *t[2] = {model_expert_matrix(ml, kind, 0, &r0), NULL};
    if (p->m->hp.n_ff_shexp) t[1] = model_expert_matrix(ml, kind, p->m->hp.n_expert, &r0);
    return upload_matrix_concat(p, t, t[1] ? 2 : 1, ml->q_exps, qt, err);
}

/* Tensors in f32, one after another in one buffer (the router's rows, then a shared
 * expert's gate row). */
static rt_buffer *upload_f32_concat(plan_engine *p, const gguf_tensor *const *t, int n, kiln_err *err) {
    uint64_t ne = 0;
    for (int i = 0; i < n; i++) ne += gguf_tensor_nelements(t[i]);
    float *host = malloc(ne * 4);
    kiln_err ge;
    rt_buffer *b = NULL;
    if (!host) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory converting '%s'", t[0]->name), NULL;
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (gguf_tensor_rows_f32(t[i], 0, gguf_tensor_nrows(t[i]), host + at, &ge)) {
            kiln_err_wrap(err, &ge, NULL);
            free(host);
            return NULL;
        }
        at += gguf_tensor_nelements(t[i]);
    }
    if ((b = plan_alloc(p, ne * 4, err)) && p->d->ops->upload(p->d, b, 0, host, ne * 4, err))
        plan_release(p, b), b = NULL;
    free(host);
    return b;
}

/* A small tensor (a filter, a bias, decay rates) as f32, as the file holds it. */
static rt_buffer *upload_f32(plan_engine *p, const gguf_tensor *t, kiln_err *err) {
    return upload_f32_concat(p, &t, 1, err);
}

/* The router in f32: the experts' rows, then a shared expert's gate row as one more
 * (kn_moe_route's shared form reads its score last). */
static rt_buffer *upload_router(plan_engine *p, const model_layer *ml, kiln_err *err) {
    const gguf_tensor *t[2] = {ml->ffn_gate_inp, ml->ffn_gate_inp_shexp};
    return upload_f32_concat(p, t, t[1] ? 2 : 1, err);
}

/* A qwen35 full-attention layer: attn_q holds per head its query rows, then its output
 * gate's; the query rows go to the fused q/k/v weight (as any model's q), the gate's to
 * a weight of their own. */
static int upload_gated_qkv(plan_engine *p, const model_layer *ml, plan_layer *L, kiln_err *err) {
    const arch_hparams *hp = &p->s.hp;
    uint64_t d = hp->n_embd, dk = hp->head_dim_k;
    if (!(L->wqkv = plan_alloc(p, (uint64_t)p->s.qkv_dim * d * 2, err)) ||
        !(L->w_agate = plan_alloc(p, (uint64_t)p->s.q_dim * d * 2, err)))
        return -1;
    for (uint32_t h = 0; h < hp->n_head; h++)
        if (plan_upload_rows(p, L->wqkv, h * dk * d, ml->wq, 2 * h * dk, dk, err) ||
            plan_upload_rows(p, L->w_agate, h * dk * d, ml->wq, 2 * h * dk + dk, dk, err))
            return -1;
    uint64_t kv = p->s.kv_dim;
    return plan_upload_rows(p, L->wqkv, p->s.q_dim * d, ml->wk, 0, kv, err) ||
                   plan_upload_rows(p, L->wqkv, (p->s.q_dim + kv) * d, ml->wv, 0, kv, err)
               ? -1
               : 0;
}

/* A qwen35 Gated DeltaNet layer's weights: the products' in the 16-bit type (the input
 * products' stacked in one buffer, zero rows between parts: plan_dn_rows), the
 * convolution's filter, dt bias and decay rates in f32 (as the oracle keeps them). */
static int upload_deltanet(plan_engine *p, const model_layer *ml, plan_layer *L, kiln_err *err) {
    const plan_shape *s = &p->s;
    rt_device *d = p->d;
    uint64_t cols = s->hp.n_embd, nv = s->hp.ssm_v_heads, row_bytes = cols * 2;
    if (!(L->dn_in = plan_alloc(p, s->dn_in_rows * row_bytes, err))) return -1;
    const gguf_tensor *part[4] = {ml->ssm_qkv, ml->ssm_z, ml->ssm_beta, ml->ssm_alpha};
    uint64_t at[4] = {0, s->dn_z_row, s->dn_ba_row, s->dn_ba_row + nv}, end[4] = {s->dn_z_row, s->dn_ba_row,
                                                                                  s->dn_ba_row + nv, s->dn_in_rows};
    for (int i = 0; i < 4; i++) {
        uint64_t rows = gguf_tensor_nrows(part[i]);
        if (plan_upload_rows(p, L->dn_in, at[i] * cols, part[i], 0, rows, err)) return -1;
        if (at[i] + rows < end[i]) { /* the zero rows up to the next part */
            uint64_t n = (end[i] - at[i] - rows) * row_bytes;
            void *zero = calloc(1, n);
            int rc = zero ? d->ops->upload(d, L->dn_in, (at[i] + rows) * row_bytes, zero, n, err)
                          : kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
            free(zero);
            if (rc) return -1;
        }
    }
    if (!(L->dn_qkv = d->ops->view(d, L->dn_in, 0, s->conv_dim * row_bytes, err)) ||
        !(L->dn_z = d->ops->view(d, L->dn_in, s->dn_z_row * row_bytes, s->dn_v_dim * row_bytes, err)) ||
        !(L->dn_ba = d->ops->view(d, L->dn_in, s->dn_ba_row * row_bytes, 2 * nv * row_bytes, err)))
        return -1;
    if (!(L->dn_out = upload_matrix(p, ml->ssm_out, ml->q_dn_out, &L->qt_dn_out, err)) ||
        !(L->dn_norm = upload_weight(p, ml->ssm_norm, err)))
        return -1;
    return !(L->dn_conv = upload_f32(p, ml->ssm_conv, err)) || !(L->dn_dt_bias = upload_f32(p, ml->ssm_dt_bias, err)) ||
                   !(L->dn_a = upload_f32(p, ml->ssm_a, err))
               ? -1
               : 0;
}

/* A layer's attention and FFN weights of a dense architecture: q, k and v fused (16-bit)
 * or each in its blocks, the rest each in its own buffer. */
static int upload_dense_layer(plan_engine *p, const model_layer *ml, plan_layer *L, kiln_err *err) {
    const gguf_tensor *qkv[3] = {ml->wq, ml->wk, ml->wv}, *b[3] = {ml->bq, ml->bk, ml->bv};
    if (ml->q_qkv) {
        for (int i = 0; i < 3; i++)
            if (!(L->qkv_part[i] = upload_quant(p, qkv[i], &L->qt_qkv[i], err))) return -1;
    } else if (!(L->wqkv = upload_concat(p, qkv, 3, err))) {
        return -1;
    }
    return (p->s.bias && !(L->bqkv = upload_concat(p, b, 3, err))) ||
                   !(L->wo = upload_matrix(p, ml->wo, ml->q_o, &L->qt_o, err)) ? -1 : 0;
}

/* Every weight converted and uploaded (q, k, v fused), progress per layer. 0 or -1. */
int plan_upload_weights(plan_engine *p, kiln_err *err) {
    const model *m = p->m;
    for (uint32_t l = 0; l < p->s.hp.n_layer; l++) {
        plan_layer *L = &p->L[l];
        L->qt_qkv[0] = L->qt_qkv[1] = L->qt_qkv[2] = L->qt_o = L->qt_gate = L->qt_up = L->qt_down = L->qt_dn_out = -1;
        L->qt_exps[0] = L->qt_exps[1] = L->qt_exps[2] = -1;
    }
    p->qt_out = -1;
    int bad = !(p->tok_embd = upload_matrix(p, m->tok_embd, m->q_embd, &p->qt_embd, err)) ||
              !(p->output_norm = upload_weight(p, m->output_norm, err)) ||
              (m->rope_freqs && !(p->freqs = upload_weight(p, m->rope_freqs, err)));
    if (!bad && m->output == m->tok_embd) p->output = p->tok_embd, p->qt_out = p->qt_embd;
    else if (!bad) p->output = upload_matrix(p, m->output, m->q_output, &p->qt_out, err);
    bad |= !p->output;
    for (uint32_t l = 0; l < p->s.hp.n_layer && !bad; l++) {
        const model_layer *ml = &m->layers[l];
        plan_layer *L = &p->L[l];
        if (arch_is_qwen35(p->s.hp.arch))
            bad = p->s.hp.recurrent[l] ? upload_deltanet(p, ml, L, err) : upload_gated_qkv(p, ml, L, err);
        else
            bad = upload_dense_layer(p, ml, L, err);
        if (arch_is_qwen35(p->s.hp.arch) && !bad && ml->wo &&
            !(L->wo = upload_matrix(p, ml->wo, ml->q_o, &L->qt_o, err)))
            bad = 1;
        const gguf_tensor *t[4] = {ml->attn_norm, ml->q_norm, ml->k_norm, ml->ffn_norm};
        rt_buffer **dst[4] = {&L->attn_norm, &L->q_norm, &L->k_norm, &L->ffn_norm};
        for (int i = 0; i < 4 && !bad; i++)
            if (t[i] && !(*dst[i] = upload_weight(p, t[i], err))) bad = 1;
        if (p->s.hp.n_expert && p->s.moe_slots) /* the router f32, the cache's slots (plan_moe_cache.c) */
            bad = bad || !(L->router = upload_router(p, ml, err)) || plan_moe_upload(p, l, err);
        else if (p->s.hp.n_expert) /* the experts in their blocks where the model keeps them, the router f32 */
            bad = bad || !(L->router = upload_router(p, ml, err)) ||
                  !(L->gate_exps = upload_experts(p, ml, 0, &L->qt_exps[0], err)) ||
                  !(L->up_exps = upload_experts(p, ml, 1, &L->qt_exps[1], err)) ||
                  !(L->down_exps = upload_experts(p, ml, 2, &L->qt_exps[2], err));
        else
            bad = bad || !(L->w_gate = upload_matrix(p, ml->w_gate, ml->q_ffn, &L->qt_gate, err)) ||
                  !(L->w_up = upload_matrix(p, ml->w_up, ml->q_ffn, &L->qt_up, err)) ||
                  !(L->w_down = upload_matrix(p, ml->w_down, ml->q_down, &L->qt_down, err));
        progress_update(&p->prog, l + 1);
    }
    return bad ? -1 : 0;
}

/* The owner's weight buffers, read-only in every kernel, so plans can share them. */
int plan_borrow_weights(plan_engine *p, const plan_engine *o) {
    p->tok_embd = o->tok_embd, p->output = o->output, p->output_norm = o->output_norm, p->freqs = o->freqs;
    p->qt_embd = o->qt_embd, p->qt_out = o->qt_out;
    for (uint32_t l = 0; l < p->s.hp.n_layer; l++) {
        plan_layer *L = &p->L[l];
        *L = o->L[l]; /* the weights; the caches and states are each plan's */
        L->kc = L->vc = L->conv_state = L->S = NULL;
    }
    progress_update(&p->prog, p->s.hp.n_layer);
    return 0;
}

/* Activation bytes for a block of nb tokens. */
static uint64_t act_bytes(const plan_shape *s, const rt_caps *c, uint32_t nb) {
    const arch_hparams *hp = &s->hp;
    uint64_t q35 = arch_is_qwen35(hp->arch)
                       ? 2ull * s->q_dim + 2ull * s->conv_dim + 2ull * s->dn_v_dim + 2ull * hp->ssm_v_heads
                       : 0;
    kn_deltanet_scratch dn = {0};
    kiln_err ignored = {0}; /* a shape without chunks fails later, by name, where the plan allocates them */
    if (arch_is_qwen35(hp->arch) && hp->n_recurrent && plan_dn_scratch(s, c, &dn, &ignored))
        dn = (kn_deltanet_scratch){0};
    /* qwen3moe: the choices, their weights, SwiGLU rows and products, the grouping, scores */
    uint64_t nk = (uint64_t)nb * hp->n_expert_used;
    uint64_t moe = hp->n_expert ? nk * (16 + 2ull * hp->n_ff_exp + 2ull * hp->n_embd) + 4ull * (hp->n_expert + 2) +
                                      4ull * nb * hp->n_expert
                                : 0;
    return moe + 4ull * (dn.qk + dn.uw + dn.p + dn.gl + dn.o) +
           2ull * nb * (3ull * hp->n_embd + s->qkv_dim + s->q_dim + 3ull * hp->n_ff + q35) + 4ull * hp->n_embd +
           4ull * hp->n_vocab + 8ull * nb + 24 +
           4ull * hp->n_head * kn_attn_splits(c, hp->n_head, s->n_ctx) * (hp->head_dim_k + 2);
}

/* Bytes of the model's weights on the device: each in its blocks where the model keeps
 * them (kn_quant.h's planes), else in 16 bits; the experts' 3-D tensors only their cache's
 * share where slots > 0 (of n_expert), with a shared expert's matrices counted among them;
 * the largest named in what. */
static uint64_t weight_bytes(const model *m, uint32_t slots, bool blocks, uint64_t *largest, char *what,
                             size_t what_len) {
    uint64_t w = 0, big = 0;
    const gguf_file *g = m->file;
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        kn_qlayout L;
        kiln_err ignored = {0}; /* a tensor without a layout fails by name where it is uploaded */
        uint64_t b = model_keeps_blocks(m, t) && !quant_layout(t, &L, &ignored) ? L.words * 4
                                                                                  : gguf_tensor_nelements(t) * 2;
        /* a shared expert sits in the experts' buffers as one more (plan_moe_shared) */
        uint32_t ne = m->hp.n_expert, all = ne + (m->hp.n_ff_shexp ? 1 : 0);
        if (ne && strstr(t->name, "_exps.")) /* only the cache's slots where cached */
            b = (blocks || !slots ? b : gguf_tensor_nelements(t) * 2) / ne * (slots ? slots : all);
        if (strstr(t->name, "_shexp.") && !strstr(t->name, "gate_inp")) b = 0;
        w += b;
        if (b > big) big = b, snprintf(what, what_len, "the weight '%s'", t->name);
    }
    *largest = big;
    return w;
}

uint64_t plan_weight_bytes(const engine *e) {
    uint64_t big;
    char what[8];
    const plan_engine *p = (const plan_engine *)e;
    return weight_bytes(p->m, p->s.moe_slots, p->s.moe_blocks, &big, what, sizeof what);
}

/* Bytes the plan will hold on the device, and its largest single buffer (named in what),
 * to refuse up front what cannot fit. */
static uint64_t plan_bytes(const model *m, const plan_shape *s, const rt_caps *c, uint64_t *largest, char *what,
                           size_t what_len) {
    const arch_hparams *hp = &s->hp;
    uint64_t big, w = weight_bytes(m, s->moe_slots, s->moe_blocks, &big, what, what_len);
    /* one layer's cache: n_ctx rows, or with slots a pool of whole pages they share */
    uint64_t rows = s->n_slots > 1 ? (s->n_ctx + PLAN_PAGE_ROWS - 1) / PLAN_PAGE_ROWS * PLAN_PAGE_ROWS : s->n_ctx;
    uint64_t cache = rows * s->kv_dim * 2, widest = s->qkv_dim > hp->n_ff ? s->qkv_dim : hp->n_ff;
    struct { uint64_t bytes; const char *name; } other[] = {
        {m->layers[0].q_qkv ? 0 : (uint64_t)s->qkv_dim * hp->n_embd * 2, "the fused q/k/v weight of a layer"},
        {cache, "the KV cache of a layer (try --ctx)"},
        {(uint64_t)s->n_block * widest * 2, "an activation of a prefill block"},
        {4ull * hp->n_vocab, "the logits"}};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        if (other[i].bytes > big) big = other[i].bytes, snprintf(what, what_len, "%s", other[i].name);
    *largest = big;
    /* KV caches for the full-attention layers; qwen35's DeltaNet layers hold a state
     * instead (f32: the convolution's last inputs and a state matrix per value head) */
    size_t s_at, stride;
    uint64_t state = arch_is_qwen35(hp->arch) ? plan_state_layout(s, &s_at, &stride) : 0;
    uint32_t n_attn = arch_is_qwen35(hp->arch) ? hp->n_layer - hp->n_recurrent : hp->n_layer;
    /* the state and its PLAN_SNAPSHOTS copies */
    return w + 2 * n_attn * cache + (uint64_t)s->n_slots * ((1 + PLAN_SNAPSHOTS) * state + act_bytes(s, c, s->n_block)) +
           plan_batch_bytes(s, c);
}

uint64_t plan_bytes_of(const model *m, const plan_shape *s, const rt_device *d) {
    uint64_t largest;
    char what[160];
    return plan_bytes(m, s, &d->caps, &largest, what, sizeof what);
}

/* What the device refuses, or 0: the whole plan past its memory, or one buffer past what
 * a kernel may bind. */
int plan_check_fit(const model *m, const plan_shape *s, const rt_device *d, kiln_err *err) {
    char what[160];
    uint64_t largest, need = plan_bytes(m, s, &d->caps, &largest, what, sizeof what);
    uint64_t have = d->caps.memory_bytes, lim = d->caps.max_buffer_bytes;
    bool small = need < (1ull << 30) && have < (1ull << 30); /* a test's model and limit, in MiB */
    double unit = small ? 1048576.0 : 1073741824.0;
    const char *u = small ? "MiB" : "GiB";
    if (have && need > have && s->n_slots > 1)
        return kiln_fail(err, KILN_ERR_NOMEM,
                         "%s: the model needs %.2f GiB with %u slots sharing a %u-token KV cache (one copy of the "
                         "weights, activations per slot); the device has %.2f GiB (try --ctx or fewer slots)",
                         d->label, need / 1073741824.0, s->n_slots, s->n_ctx, have / 1073741824.0);
    if (have && need > have)
        return kiln_fail(err, KILN_ERR_NOMEM, "%s: the model needs %.2f %s with a %u-token context%s; %s %.2f %s (try --ctx)",
                         d->label, need / unit, u, s->n_ctx,
                         s->moe_slots ? " and one expert a layer on the device (the others on the host)" : "",
                         d->caps.memory_limited ? "--mem-limit allows" : "the device has", have / unit, u);
    if (lim && largest > lim)
        return kiln_fail(err, KILN_ERR_UNSUPPORTED,
                         "%s: %s takes %.1f MiB at a %u-token context; the device binds at most %.1f MiB per buffer "
                         "(maxStorageBufferRange)",
                         d->label, what, largest / 1048576.0, s->n_ctx, lim / 1048576.0);
    return 0;
}
