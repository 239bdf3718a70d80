/* The oracle's forward pass for llama, qwen2 and qwen3, written to be read.
 *
 * Contract rounding points (contract mode rounds each to the 16-bit type, as a GPU plan
 * stores it between kernels; f32 mode rounds nothing):
 *   1. the residual stream x: the embedding row, and x after each residual add
 *   2. each RMSNorm output (normalized x times the norm weight)
 *   3. the q, k, v projections (after their bias), then q and k after the per-head
 *      q/k norm (qwen3) and after rope; k and v are cached as rounded
 *   4. the attention output (all heads, before the output projection)
 *   5. the output projection, the gate and up projections, silu(gate) * up, the down
 *      projection
 * Logits stay f32. Every dot product, norm sum and softmax sum accumulates in f32. */
#include "base/error.h"
#include "gguf/half.h"
#include "oracle/oracle.h"
#include "oracle/pool.h"
#include "oracle/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct orc_layer {
    orc_weight wq, wk, wv, wo, w_gate, w_up, w_down;
    float *attn_norm, *ffn_norm, *bq, *bk, *bv, *q_norm, *k_norm; /* NULL when absent */
} orc_layer;

typedef struct orc_engine {
    engine base;
    const model *m;
    arch_hparams hp;
    orc_mode mode;
    uint32_t dtype; /* the 16-bit type of contract mode */
    char name[96];
    orc_weight tok_embd, output;
    float *output_norm, *rope_freqs;
    orc_layer *layers;
    uint32_t q_dim, kv_dim, v_dim, o_dim;
    float *k_cache, *v_cache; /* [layer][position][kv_dim or v_dim] */
    orc_pool *pool;
    float *scores; /* attention scores: n_ctx per pool worker */
    /* activations for up to cap tokens */
    uint32_t cap;
    float *x, *h, *q, *k, *v, *att, *o, *g, *u;
} orc_engine;

const char *orc_mode_name(orc_mode m) { return m == ORC_F32 ? "f32" : "contract"; }

/* ---- rounding ----------------------------------------------------------------------- */

static void round16(const orc_engine *e, float *x, uint64_t n) {
    if (e->mode == ORC_F32) return;
    if (e->dtype == GGUF_T_BF16)
        for (uint64_t i = 0; i < n; i++) x[i] = gguf_bf16_to_f32(gguf_f32_to_bf16(x[i]));
    else
        for (uint64_t i = 0; i < n; i++) x[i] = gguf_f16_to_f32(gguf_f32_to_f16(x[i]));
}

/* ---- loading ------------------------------------------------------------------------ */

/* A 1-D weight (norm, bias, rope factors) as f32 values, rounded like any weight. */
static float *load_vector(const orc_engine *e, const gguf_tensor *t, kiln_err *err) {
    if (!t) return NULL;
    float *v = malloc(t->ne[0] * sizeof *v);
    kiln_err ge;
    if (!v || gguf_tensor_rows_f32(t, 0, 1, v, &ge)) {
        if (v) kiln_err_wrap(err, &ge, NULL);
        else kiln_fail_oom(err, NULL);
        free(v);
        return NULL;
    }
    round16(e, v, t->ne[0]);
    return v;
}

static int load_weights(orc_engine *e, kiln_err *err) {
    const model *m = e->m;
    uint32_t want = e->mode == ORC_F32 ? GGUF_T_F32 : e->dtype;
    if (orc_weight_load(&e->tok_embd, m->tok_embd, want, err) ||
        orc_weight_load(&e->output, m->output, want, err))
        return -1;
    if (!(e->output_norm = load_vector(e, m->output_norm, err))) return -1;
    if (m->rope_freqs) {
        /* rope factors divide angles; they are not activations or matrix weights */
        orc_mode saved = e->mode;
        e->mode = ORC_F32;
        e->rope_freqs = load_vector(e, m->rope_freqs, err);
        e->mode = saved;
        if (!e->rope_freqs) return -1;
    }
    for (uint32_t l = 0; l < e->hp.n_layer; l++) {
        const model_layer *ml = &m->layers[l];
        orc_layer *L = &e->layers[l];
        if (orc_weight_load(&L->wq, ml->wq, want, err) || orc_weight_load(&L->wk, ml->wk, want, err) ||
            orc_weight_load(&L->wv, ml->wv, want, err) || orc_weight_load(&L->wo, ml->wo, want, err) ||
            orc_weight_load(&L->w_gate, ml->w_gate, want, err) ||
            orc_weight_load(&L->w_up, ml->w_up, want, err) ||
            orc_weight_load(&L->w_down, ml->w_down, want, err))
            return -1;
        if (!(L->attn_norm = load_vector(e, ml->attn_norm, err)) ||
            !(L->ffn_norm = load_vector(e, ml->ffn_norm, err)))
            return -1;
        const gguf_tensor *opt[5] = {ml->bq, ml->bk, ml->bv, ml->q_norm, ml->k_norm};
        float **dst[5] = {&L->bq, &L->bk, &L->bv, &L->q_norm, &L->k_norm};
        for (int i = 0; i < 5; i++)
            if (opt[i] && !(*dst[i] = load_vector(e, opt[i], err))) return -1;
    }
    return 0;
}

/* ---- the pieces --------------------------------------------------------------------- */

static void rmsnorm(float *out, const float *x, const float *w, uint32_t n, float eps) {
    float ss = 0;
    for (uint32_t i = 0; i < n; i++) ss += x[i] * x[i];
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (uint32_t i = 0; i < n; i++) out[i] = (x[i] * scale) * w[i];
}

typedef struct matmul_job {
    const orc_weight *w;
    const float *in;  /* [n][w->cols] */
    float *out;       /* [n][w->rows] */
    uint32_t n;
} matmul_job;

static void matmul_rows(void *ctx, uint64_t r0, uint64_t r1, int worker) {
    (void)worker;
    const matmul_job *j = ctx;
    uint64_t cols = j->w->cols, rows = j->w->rows;
    for (uint64_t r = r0; r < r1; r++)
        for (uint32_t t = 0; t < j->n; t++) j->out[t * rows + r] = orc_weight_dot(j->w, r, j->in + t * cols);
}

/* out[t] = W in[t] (+ bias), rounded: threads split W's rows, each read once for all tokens. */
static void matmul(orc_engine *e, const orc_weight *w, const float *bias, const float *in, float *out, uint32_t n) {
    matmul_job j = {w, in, out, n};
    orc_pool_run(e->pool, matmul_rows, &j, w->rows);
    if (bias)
        for (uint32_t t = 0; t < n; t++)
            for (uint64_t r = 0; r < w->rows; r++) out[t * w->rows + r] += bias[r];
    round16(e, out, (uint64_t)n * w->rows);
}

/* Rotates the first n_rot dims of one head at position pos. llama.cpp's angles:
 * theta_i = pos * base^(-2i/n_rot) / freq_factor_i, the power built by repeated
 * multiplication in f32; pairs (2i, 2i+1) normally, (i, i + n_rot/2) for neox. */
static void rope(const orc_engine *e, float *x, uint32_t pos) {
    const arch_hparams *hp = &e->hp;
    uint32_t half = hp->n_rot / 2;
    float theta_scale = powf(hp->rope_base, -2.0f / (float)hp->n_rot);
    float freq_scale =
        hp->rope_scaling == ROPE_SCALING_LINEAR && hp->rope_scale_factor > 0 ? 1.0f / hp->rope_scale_factor : 1.0f;
    float theta = (float)pos;
    for (uint32_t i = 0; i < half; i++, theta *= theta_scale) {
        float th = freq_scale * (e->rope_freqs ? theta / e->rope_freqs[i] : theta);
        float c = cosf(th), s = sinf(th);
        uint32_t a = hp->rope_neox ? i : 2 * i, b = hp->rope_neox ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

typedef struct attn_job {
    orc_engine *e;
    uint32_t layer, pos, n;
} attn_job;

/* One (token, head) pair per item: causal softmax(q k / sqrt(d)) v over the cache. */
static void attend(void *ctx, uint64_t i0, uint64_t i1, int worker) {
    const attn_job *j = ctx;
    orc_engine *e = j->e;
    const arch_hparams *hp = &e->hp;
    uint32_t dk = hp->head_dim_k, dv = hp->head_dim_v, group = hp->n_head / hp->n_head_kv;
    float *scores = e->scores + (size_t)worker * e->base.n_ctx; /* a context's worth per worker */
    const float *kc = e->k_cache + (size_t)j->layer * e->base.n_ctx * e->kv_dim;
    const float *vc = e->v_cache + (size_t)j->layer * e->base.n_ctx * e->v_dim;
    float scale = 1.0f / sqrtf((float)dk);
    for (uint64_t item = i0; item < i1; item++) {
        uint32_t t = (uint32_t)(item / hp->n_head), h = (uint32_t)(item % hp->n_head), kvh = h / group;
        uint32_t n_keys = j->pos + t + 1;
        const float *q = e->q + (size_t)t * e->q_dim + (size_t)h * dk;
        float mx = -INFINITY;
        for (uint32_t p = 0; p < n_keys; p++) {
            const float *k = kc + (size_t)p * e->kv_dim + (size_t)kvh * dk;
            float s = 0;
            for (uint32_t d = 0; d < dk; d++) s += q[d] * k[d];
            scores[p] = s * scale;
            if (scores[p] > mx) mx = scores[p];
        }
        float sum = 0;
        for (uint32_t p = 0; p < n_keys; p++) sum += scores[p] = expf(scores[p] - mx);
        float *out = e->att + (size_t)t * e->o_dim + (size_t)h * dv;
        for (uint32_t d = 0; d < dv; d++) out[d] = 0;
        for (uint32_t p = 0; p < n_keys; p++) {
            const float *v = vc + (size_t)p * e->v_dim + (size_t)kvh * dv;
            float wgt = scores[p] / sum;
            for (uint32_t d = 0; d < dv; d++) out[d] += wgt * v[d];
        }
    }
}

static void layer_forward(orc_engine *e, uint32_t l, uint32_t pos, uint32_t n) {
    const arch_hparams *hp = &e->hp;
    const orc_layer *L = &e->layers[l];
    uint32_t d = hp->n_embd, dk = hp->head_dim_k;

    for (uint32_t t = 0; t < n; t++) rmsnorm(e->h + (size_t)t * d, e->x + (size_t)t * d, L->attn_norm, d, hp->rms_eps);
    round16(e, e->h, (uint64_t)n * d);
    matmul(e, &L->wq, L->bq, e->h, e->q, n);
    matmul(e, &L->wk, L->bk, e->h, e->k, n);
    matmul(e, &L->wv, L->bv, e->h, e->v, n);
    for (uint32_t t = 0; t < n; t++) {
        float *q = e->q + (size_t)t * e->q_dim, *k = e->k + (size_t)t * e->kv_dim;
        if (L->q_norm) {
            for (uint32_t h = 0; h < hp->n_head; h++) rmsnorm(q + h * dk, q + h * dk, L->q_norm, dk, hp->rms_eps);
            for (uint32_t h = 0; h < hp->n_head_kv; h++) rmsnorm(k + h * dk, k + h * dk, L->k_norm, dk, hp->rms_eps);
            round16(e, q, e->q_dim);
            round16(e, k, e->kv_dim);
        }
        for (uint32_t h = 0; h < hp->n_head; h++) rope(e, q + h * dk, pos + t);
        for (uint32_t h = 0; h < hp->n_head_kv; h++) rope(e, k + h * dk, pos + t);
        round16(e, q, e->q_dim);
        round16(e, k, e->kv_dim);
        size_t slot = (size_t)l * e->base.n_ctx + pos + t;
        memcpy(e->k_cache + slot * e->kv_dim, k, e->kv_dim * sizeof *k);
        memcpy(e->v_cache + slot * e->v_dim, e->v + (size_t)t * e->v_dim, e->v_dim * sizeof(float));
    }
    attn_job aj = {e, l, pos, n};
    orc_pool_run(e->pool, attend, &aj, (uint64_t)n * hp->n_head);
    round16(e, e->att, (uint64_t)n * e->o_dim);
    matmul(e, &L->wo, NULL, e->att, e->o, n);
    for (uint64_t i = 0; i < (uint64_t)n * d; i++) e->x[i] += e->o[i];
    round16(e, e->x, (uint64_t)n * d);

    for (uint32_t t = 0; t < n; t++) rmsnorm(e->h + (size_t)t * d, e->x + (size_t)t * d, L->ffn_norm, d, hp->rms_eps);
    round16(e, e->h, (uint64_t)n * d);
    matmul(e, &L->w_gate, NULL, e->h, e->g, n);
    matmul(e, &L->w_up, NULL, e->h, e->u, n);
    for (uint64_t i = 0; i < (uint64_t)n * hp->n_ff; i++) {
        float g = e->g[i];
        e->g[i] = g / (1.0f + expf(-g)) * e->u[i]; /* SwiGLU */
    }
    round16(e, e->g, (uint64_t)n * hp->n_ff);
    matmul(e, &L->w_down, NULL, e->g, e->o, n);
    for (uint64_t i = 0; i < (uint64_t)n * d; i++) e->x[i] += e->o[i];
    round16(e, e->x, (uint64_t)n * d);
}

/* ---- the engine interface ------------------------------------------------------------ */

static int grow(orc_engine *e, uint32_t n) {
    if (n <= e->cap) return 0;
    const arch_hparams *hp = &e->hp;
    struct { float **p; size_t per; } bufs[] = {
        {&e->x, hp->n_embd}, {&e->h, hp->n_embd}, {&e->q, e->q_dim}, {&e->k, e->kv_dim}, {&e->v, e->v_dim},
        {&e->att, e->o_dim}, {&e->o, hp->n_embd}, {&e->g, hp->n_ff}, {&e->u, hp->n_ff}};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        float *p = realloc(*bufs[i].p, (size_t)n * bufs[i].per * sizeof(float));
        if (!p) return -1;
        *bufs[i].p = p;
    }
    e->cap = n;
    return 0;
}

static int orc_eval(engine *base, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits, bool all,
                    kiln_err *err) {
    orc_engine *e = (orc_engine *)base;
    const arch_hparams *hp = &e->hp;
    if (n == 0) return kiln_fail(err, KILN_ERR_INVALID, "no tokens to evaluate"), -1;
    if (pos > base->n_past)
        return kiln_fail(err, KILN_ERR_INVALID, "position %u is past the %u cached positions", pos, base->n_past), -1;
    if ((uint64_t)pos + n > base->n_ctx)
        return kiln_fail(err, KILN_ERR_INVALID, "%u tokens at position %u exceed the context of %u", n, pos,
                         base->n_ctx),
               -1;
    for (uint32_t t = 0; t < n; t++)
        if (tokens[t] < 0 || (uint32_t)tokens[t] >= hp->n_vocab)
            return kiln_fail(err, KILN_ERR_INVALID, "token id %d is outside the vocabulary of %u", tokens[t],
                             hp->n_vocab),
                   -1;
    if (grow(e, n)) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory for %u tokens", n), -1;

    for (uint32_t t = 0; t < n; t++) orc_weight_row(&e->tok_embd, (uint64_t)tokens[t], e->x + (size_t)t * hp->n_embd);
    round16(e, e->x, (uint64_t)n * hp->n_embd);
    base->n_past = pos; /* entries past pos are overwritten or dropped */
    for (uint32_t l = 0; l < hp->n_layer; l++) layer_forward(e, l, pos, n);
    base->n_past = pos + n;

    uint32_t first = all ? 0 : n - 1, m = n - first;
    for (uint32_t t = 0; t < m; t++)
        rmsnorm(e->h + (size_t)t * hp->n_embd, e->x + (size_t)(first + t) * hp->n_embd, e->output_norm, hp->n_embd,
                hp->rms_eps);
    round16(e, e->h, (uint64_t)m * hp->n_embd);
    matmul_job j = {&e->output, e->h, logits, m};
    orc_pool_run(e->pool, matmul_rows, &j, e->output.rows); /* logits stay f32 */
    return 0;
}

static void orc_destroy(engine *base) {
    orc_engine *e = (orc_engine *)base;
    orc_weight_free(&e->tok_embd);
    orc_weight_free(&e->output);
    free(e->output_norm);
    free(e->rope_freqs);
    for (uint32_t l = 0; e->layers && l < e->hp.n_layer; l++) {
        orc_layer *L = &e->layers[l];
        orc_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) orc_weight_free(ws[i]);
        float *vs[] = {L->attn_norm, L->ffn_norm, L->bq, L->bk, L->bv, L->q_norm, L->k_norm};
        for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) free(vs[i]);
    }
    free(e->layers);
    free(e->k_cache);
    free(e->v_cache);
    free(e->scores);
    float *bufs[] = {e->x, e->h, e->q, e->k, e->v, e->att, e->o, e->g, e->u};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    orc_pool_destroy(e->pool);
    free(e);
}

static const engine_ops orc_ops = {orc_eval, orc_destroy, NULL};

engine *orc_create(const model *m, const orc_options *o, kiln_err *err) {
    if (o->dtype && o->dtype != GGUF_T_BF16 && o->dtype != GGUF_T_F16) {
        kiln_fail(err, KILN_ERR_INVALID, "the oracle's 16-bit type must be bf16 or f16");
        return NULL;
    }
    if (m->hp.rope_scaling == ROPE_SCALING_YARN) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "rope scaling 'yarn' is not supported by the oracle yet");
        return NULL;
    }
    orc_engine *e = calloc(1, sizeof *e);
    if (!e) {
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    e->m = m;
    e->hp = m->hp;
    e->mode = o->mode;
    e->dtype = o->dtype ? o->dtype : m->file_dtype == GGUF_T_F16 ? GGUF_T_F16 : GGUF_T_BF16;
    const arch_hparams *hp = &e->hp;
    e->q_dim = hp->n_head * hp->head_dim_k;
    e->kv_dim = hp->n_head_kv * hp->head_dim_k;
    e->v_dim = hp->n_head_kv * hp->head_dim_v;
    e->o_dim = hp->n_head * hp->head_dim_v;
    e->base.ops = &orc_ops;
    e->base.n_vocab = hp->n_vocab;
    e->base.n_ctx = o->n_ctx ? o->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (e->mode == ORC_F32) snprintf(e->name, sizeof e->name, "cpu (oracle, f32)");
    else snprintf(e->name, sizeof e->name, "cpu (oracle, contract %s)", e->dtype == GGUF_T_BF16 ? "bf16" : "f16");
    e->base.name = e->name;
    size_t cache = (size_t)hp->n_layer * e->base.n_ctx;
    e->layers = calloc(hp->n_layer, sizeof *e->layers);
    e->k_cache = malloc(cache * e->kv_dim * sizeof(float));
    e->v_cache = malloc(cache * e->v_dim * sizeof(float));
    e->pool = orc_pool_create(o->threads);
    if (e->pool) e->scores = malloc((size_t)orc_pool_threads(e->pool) * e->base.n_ctx * sizeof *e->scores);
    if (!e->layers || !e->k_cache || !e->v_cache || !e->pool || !e->scores) {
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory for a KV cache of %u positions", e->base.n_ctx);
        orc_destroy(&e->base);
        return NULL;
    }
    if (load_weights(e, err)) {
        orc_destroy(&e->base);
        return NULL;
    }
    return &e->base;
}
