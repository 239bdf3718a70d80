/* The oracle's forward pass for llama, qwen2, qwen3 and qwen35 (Qwen3.5's hybrid: its
 * Gated DeltaNet layers are in deltanet.c), written to be read.
 *
 * Contract rounding points (contract mode rounds each to the 16-bit type, as a GPU plan
 * stores it between kernels; f32 mode rounds nothing):
 *   1. the residual stream x: the embedding row, and x after each residual add
 *   2. each RMSNorm output (normalized x times the norm weight)
 *   3. the q, k, v projections (after their bias), then q and k after the per-head
 *      q/k norm (qwen3) and after rope; k and v are cached as rounded
 *   4. the attention output (all heads, before the output projection); for qwen35 also
 *      that output times sigmoid(gate) (the 2x-wide q|gate projection is rounded as a
 *      whole like any projection): the GPU plans apply the gate in its own elementwise
 *      kernel after the attention kernels, which round their output as for every model
 *   5. the output projection, the gate and up projections, silu(gate) * up, the down
 *      projection
 *   6. qwen35's DeltaNet layers: the points listed in deltanet.c
 * Logits stay f32. Every dot product, norm sum and softmax sum accumulates in f32.
 *
 * Qwen3.5's DeltaNet layers carry a recurrent state (the convolution's last inputs, a
 * state matrix per value head) for the one sequence, beside the KV cache. The engine
 * interface lets a caller rewind by evaluating at any pos <= n_past (and
 * engine_truncate lowers n_past unseen); a recurrent state cannot step back, so an
 * eval at a position before the state's end restores a snapshot at or before it (the
 * state at the start of one of the last few evals, or before its last token), else the
 * zero state, and replays the remembered tokens from there (rewind_state below:
 * bit-identical to the first pass). */
#include "base/error.h"
#include "gguf/half.h"
#include "oracle/internal.h"
#include "oracle/oracle.h"
#include "base/pool.h"
#include "oracle/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *orc_mode_name(orc_mode m) { return m == ORC_F32 ? "f32" : "contract"; }

/* ---- rounding ----------------------------------------------------------------------- */

void orc_round16(const orc_engine *e, float *x, uint64_t n) {
    if (e->mode == ORC_F32) return;
    if (e->dtype == GGUF_T_BF16)
        for (uint64_t i = 0; i < n; i++) x[i] = gguf_bf16_to_f32(gguf_f32_to_bf16(x[i]));
    else
        for (uint64_t i = 0; i < n; i++) x[i] = gguf_f16_to_f32(gguf_f32_to_f16(x[i]));
}

/* ---- loading ------------------------------------------------------------------------ */

/* A weight vector (norm, bias, rope factors, a small filter) as f32 values. */
float *orc_load_vector(const orc_engine *e, const gguf_tensor *t, bool round, kiln_err *err) {
    if (!t) return NULL;
    uint64_t rows = gguf_tensor_nrows(t), n = t->ne[0] * rows;
    float *v = malloc(n * sizeof *v);
    kiln_err ge;
    if (!v || gguf_tensor_rows_f32(t, 0, rows, v, &ge)) {
        if (v) kiln_err_wrap(err, &ge, NULL);
        else kiln_fail_oom(err, NULL);
        free(v);
        return NULL;
    }
    if (round) orc_round16(e, v, n);
    return v;
}

static float *load_vector(const orc_engine *e, const gguf_tensor *t, kiln_err *err) {
    return orc_load_vector(e, t, true, err);
}

static int load_weights(orc_engine *e, kiln_err *err) {
    const model *m = e->m;
    uint32_t want = e->mode == ORC_F32 ? GGUF_T_F32 : e->dtype;
    if (orc_weight_load(&e->tok_embd, m->tok_embd, want, m->q_embd, err) ||
        orc_weight_load(&e->output, m->output, want, m->q_output, err))
        return -1;
    if (!(e->output_norm = load_vector(e, m->output_norm, err))) return -1;
    /* rope factors divide angles; they are not activations or matrix weights */
    if (m->rope_freqs && !(e->rope_freqs = orc_load_vector(e, m->rope_freqs, false, err))) return -1;
    for (uint32_t l = 0; l < e->hp.n_layer; l++) {
        const model_layer *ml = &m->layers[l];
        orc_layer *L = &e->layers[l];
        if (e->hp.recurrent[l] ? orc_deltanet_load(e, l, err)
                               : orc_weight_load(&L->wq, ml->wq, want, ml->q_qkv, err) ||
                                     orc_weight_load(&L->wk, ml->wk, want, ml->q_qkv, err) ||
                                     orc_weight_load(&L->wv, ml->wv, want, ml->q_qkv, err) ||
                                     orc_weight_load(&L->wo, ml->wo, want, ml->q_o, err))
            return -1;
        if (e->hp.n_expert ? orc_moe_load(e, l, err)
                           : orc_weight_load(&L->w_gate, ml->w_gate, want, ml->q_ffn, err) ||
                                 orc_weight_load(&L->w_up, ml->w_up, want, ml->q_ffn, err) ||
                                 orc_weight_load(&L->w_down, ml->w_down, want, ml->q_down, err))
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

void orc_rmsnorm(float *out, const float *x, const float *w, uint32_t n, float eps) {
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
void orc_matmul(orc_engine *e, const orc_weight *w, const float *bias, const float *in, float *out, uint32_t n) {
    matmul_job j = {w, in, out, n};
    pool_run(e->pool, matmul_rows, &j, w->rows);
    if (bias)
        for (uint32_t t = 0; t < n; t++)
            for (uint64_t r = 0; r < w->rows; r++) out[t * w->rows + r] += bias[r];
    orc_round16(e, out, (uint64_t)n * w->rows);
}

/* Rotates the first n_rot dims of one head at position pos. llama.cpp's angles:
 * theta_i = pos * base^(-2i/n_rot) / freq_factor_i, the power built by repeated
 * multiplication in f32; pairs (2i, 2i+1) normally, (i, i + n_rot/2) for neox.
 * qwen35's IMROPE pairs as neox and gives pair i the position of section
 * (i mod the sections' sum) interleaved t, h, w, t, h, w, ...: for text, t, h and w are
 * the token's position and e is 0, so a pair that falls to e (past 3 x a section's
 * size) does not turn. With sections covering the pairs, it is plain neox rope. */
static bool imrope_pair_is_e(const uint32_t sec[4], uint32_t i) {
    uint32_t sum = sec[0] + sec[1] + sec[2] + sec[3], s = i % sum;
    if (s % 3 == 1 && s < 3 * sec[1]) return false;
    if (s % 3 == 2 && s < 3 * sec[2]) return false;
    if (s % 3 == 0 && s < 3 * sec[0]) return false;
    return true;
}

static void rope(const orc_engine *e, float *x, uint32_t pos) {
    const arch_hparams *hp = &e->hp;
    uint32_t half = hp->n_rot / 2;
    float theta_scale = powf(hp->rope_base, -2.0f / (float)hp->n_rot);
    float freq_scale =
        hp->rope_scaling == ROPE_SCALING_LINEAR && hp->rope_scale_factor > 0 ? 1.0f / hp->rope_scale_factor : 1.0f;
    bool imrope = arch_is_qwen35(hp->arch);
    float theta = (float)pos;
    for (uint32_t i = 0; i < half; i++, theta *= theta_scale) {
        float th = freq_scale * (e->rope_freqs ? theta / e->rope_freqs[i] : theta);
        if (imrope && imrope_pair_is_e(hp->rope_sections, i)) th = 0;
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
    size_t slot = e->kv_slot[j->layer];
    const float *kc = e->k_cache + slot * e->base.n_ctx * e->kv_dim;
    const float *vc = e->v_cache + slot * e->base.n_ctx * e->v_dim;
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

/* The attention mixer: e->h (normed) to e->o. */
static void attention(orc_engine *e, uint32_t l, uint32_t pos, uint32_t n) {
    const arch_hparams *hp = &e->hp;
    const orc_layer *L = &e->layers[l];
    uint32_t dk = hp->head_dim_k;
    if (arch_is_qwen35(hp->arch)) { /* per head [query | gate] */
        orc_matmul(e, &L->wq, NULL, e->h, e->qg, n);
        for (uint32_t t = 0; t < n; t++)
            for (uint32_t h = 0; h < hp->n_head; h++) {
                const float *src = e->qg + (size_t)t * 2 * e->q_dim + (size_t)h * 2 * dk;
                memcpy(e->q + (size_t)t * e->q_dim + (size_t)h * dk, src, dk * sizeof(float));
                memcpy(e->gate + (size_t)t * e->o_dim + (size_t)h * dk, src + dk, dk * sizeof(float));
            }
    } else {
        orc_matmul(e, &L->wq, L->bq, e->h, e->q, n);
    }
    orc_matmul(e, &L->wk, L->bk, e->h, e->k, n);
    orc_matmul(e, &L->wv, L->bv, e->h, e->v, n);
    for (uint32_t t = 0; t < n; t++) {
        float *q = e->q + (size_t)t * e->q_dim, *k = e->k + (size_t)t * e->kv_dim;
        if (L->q_norm) {
            for (uint32_t h = 0; h < hp->n_head; h++) orc_rmsnorm(q + h * dk, q + h * dk, L->q_norm, dk, hp->rms_eps);
            for (uint32_t h = 0; h < hp->n_head_kv; h++) orc_rmsnorm(k + h * dk, k + h * dk, L->k_norm, dk, hp->rms_eps);
            orc_round16(e, q, e->q_dim);
            orc_round16(e, k, e->kv_dim);
        }
        for (uint32_t h = 0; h < hp->n_head; h++) rope(e, q + h * dk, pos + t);
        for (uint32_t h = 0; h < hp->n_head_kv; h++) rope(e, k + h * dk, pos + t);
        orc_round16(e, q, e->q_dim);
        orc_round16(e, k, e->kv_dim);
        size_t slot = (size_t)e->kv_slot[l] * e->base.n_ctx + pos + t;
        memcpy(e->k_cache + slot * e->kv_dim, k, e->kv_dim * sizeof *k);
        memcpy(e->v_cache + slot * e->v_dim, e->v + (size_t)t * e->v_dim, e->v_dim * sizeof(float));
    }
    attn_job aj = {e, l, pos, n};
    pool_run(e->pool, attend, &aj, (uint64_t)n * hp->n_head);
    orc_round16(e, e->att, (uint64_t)n * e->o_dim);
    if (arch_is_qwen35(hp->arch)) { /* the output gate: its own rounding point (4) */
        for (uint64_t i = 0; i < (uint64_t)n * e->o_dim; i++) e->att[i] *= 1.0f / (1.0f + expf(-e->gate[i]));
        orc_round16(e, e->att, (uint64_t)n * e->o_dim);
    }
    orc_matmul(e, &L->wo, NULL, e->att, e->o, n);
}

static void layer_forward(orc_engine *e, uint32_t l, uint32_t pos, uint32_t n) {
    const arch_hparams *hp = &e->hp;
    const orc_layer *L = &e->layers[l];
    uint32_t d = hp->n_embd;

    for (uint32_t t = 0; t < n; t++) orc_rmsnorm(e->h + (size_t)t * d, e->x + (size_t)t * d, L->attn_norm, d, hp->rms_eps);
    orc_round16(e, e->h, (uint64_t)n * d);
    if (hp->recurrent[l]) orc_deltanet(e, l, n);
    else attention(e, l, pos, n);
    for (uint64_t i = 0; i < (uint64_t)n * d; i++) e->x[i] += e->o[i];
    orc_round16(e, e->x, (uint64_t)n * d);

    for (uint32_t t = 0; t < n; t++) orc_rmsnorm(e->h + (size_t)t * d, e->x + (size_t)t * d, L->ffn_norm, d, hp->rms_eps);
    orc_round16(e, e->h, (uint64_t)n * d);
    if (hp->n_expert) {
        orc_moe(e, l, n);
        for (uint64_t i = 0; i < (uint64_t)n * d; i++) e->x[i] += e->o[i];
        orc_round16(e, e->x, (uint64_t)n * d);
        return;
    }
    orc_matmul(e, &L->w_gate, NULL, e->h, e->g, n);
    orc_matmul(e, &L->w_up, NULL, e->h, e->u, n);
    for (uint64_t i = 0; i < (uint64_t)n * hp->n_ff; i++) {
        float g = e->g[i];
        e->g[i] = g / (1.0f + expf(-g)) * e->u[i]; /* SwiGLU */
    }
    orc_round16(e, e->g, (uint64_t)n * hp->n_ff);
    orc_matmul(e, &L->w_down, NULL, e->g, e->o, n);
    for (uint64_t i = 0; i < (uint64_t)n * d; i++) e->x[i] += e->o[i];
    orc_round16(e, e->x, (uint64_t)n * d);
}

/* ---- the engine interface ------------------------------------------------------------ */

static int grow(orc_engine *e, uint32_t n) {
    if (n <= e->cap) return 0;
    const arch_hparams *hp = &e->hp;
    bool gated = arch_is_qwen35(hp->arch), dn = hp->n_recurrent > 0;
    size_t ffe = hp->n_ff_exp > hp->n_ff_shexp ? hp->n_ff_exp : hp->n_ff_shexp; /* an expert's, the shared one's */
    struct { float **p; size_t per; } bufs[] = {
        {&e->x, hp->n_embd}, {&e->h, hp->n_embd}, {&e->q, e->q_dim}, {&e->k, e->kv_dim}, {&e->v, e->v_dim},
        {&e->att, e->o_dim}, {&e->o, hp->n_embd}, {&e->g, hp->n_ff}, {&e->u, hp->n_ff},
        {&e->qg, gated ? 2 * e->q_dim : 0}, {&e->gate, gated ? e->o_dim : 0},
        {&e->dn_qkv, dn ? e->conv_dim : 0}, {&e->dn_x, dn ? e->conv_dim : 0}, {&e->dn_z, dn ? e->ssm_vdim : 0},
        {&e->dn_b, dn ? hp->ssm_v_heads : 0}, {&e->dn_a, dn ? hp->ssm_v_heads : 0}, {&e->dn_o, dn ? e->ssm_vdim : 0},
        {&e->moe_p, hp->n_expert}, {&e->moe_w, hp->n_expert_used}, {&e->moe_y, (size_t)hp->n_expert_used * hp->n_embd},
        {&e->moe_in, hp->n_expert ? hp->n_embd : 0}, {&e->moe_g, ffe}, {&e->moe_u, ffe}};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (!bufs[i].per) continue;
        float *p = realloc(*bufs[i].p, (size_t)n * bufs[i].per * sizeof(float));
        if (!p) return -1;
        *bufs[i].p = p;
    }
    uint32_t **ids[2] = {&e->moe_sel, &e->moe_at};
    for (int i = 0; i < 2 && hp->n_expert; i++) {
        uint32_t *p = realloc(*ids[i], (size_t)n * hp->n_expert_used * sizeof **ids[i]);
        if (!p) return -1;
        *ids[i] = p;
    }
    e->cap = n;
    return 0;
}

/* Embeds tokens[0, n) and runs every layer at positions pos.. (no logits). */
static void trunk(orc_engine *e, const int32_t *tokens, uint32_t n, uint32_t pos) {
    const arch_hparams *hp = &e->hp;
    for (uint32_t t = 0; t < n; t++) orc_weight_row(&e->tok_embd, (uint64_t)tokens[t], e->x + (size_t)t * hp->n_embd);
    orc_round16(e, e->x, (uint64_t)n * hp->n_embd);
    for (uint32_t l = 0; l < hp->n_layer; l++) layer_forward(e, l, pos, n);
    e->rs_pos = pos + n;
}

/* The recurrent state cannot step back: to evaluate at pos < rs_pos, restore the latest
 * snapshot at or before pos (the state at the start of each of the last few evals and
 * before the last token of each; ORC_SNAPSHOTS in all), else zero the state, and re-evaluate the remembered tokens from there to pos in
 * blocks (the KV entries they rewrite come out identical, as every step is the same per
 * token however the tokens are grouped). Re-evaluating the last token or going back into
 * the last few evals is cheap; anything older costs a prefill of pos tokens. */
#define REPLAY_BLOCK 256u
static void rewind_state(orc_engine *e, uint32_t pos) {
    uint32_t from = orc_snapshot_restore(e, pos);
    e->rs_pos = from;
    for (uint32_t p = from; p < pos; p += REPLAY_BLOCK) {
        uint32_t n = pos - p < REPLAY_BLOCK ? pos - p : REPLAY_BLOCK;
        trunk(e, e->hist + p, n, p);
    }
    e->replayed += pos - from;
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
    if (hp->n_recurrent && pos > e->rs_pos)
        return kiln_fail(err, KILN_ERR_INVALID, "position %u is past the %u positions of the recurrent state", pos,
                         e->rs_pos),
               -1;
    uint32_t need = n;
    if (hp->n_recurrent && pos != e->rs_pos && need < (pos < REPLAY_BLOCK ? pos : REPLAY_BLOCK))
        need = pos < REPLAY_BLOCK ? pos : REPLAY_BLOCK;
    if (grow(e, need)) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory for %u tokens", need), -1;

    base->n_past = pos; /* entries past pos are overwritten or dropped */
    /* with a recurrent state: snapshots at pos and, when only the last token's logits are
     * wanted, before that last token (the tokens then go in two groups, which changes
     * nothing), so re-evaluating the last token replays nothing */
    bool split = hp->n_recurrent && n > 1 && !all;
    if (hp->n_recurrent) {
        orc_snapshot_drop_after(e, pos);                /* their tokens change now */
        if (pos != e->rs_pos) rewind_state(e, pos);     /* pos <= n_past <= rs_pos */
        if (pos) orc_snapshot_take(e);
    }
    if (split) {
        trunk(e, tokens, n - 1, pos);
        orc_snapshot_take(e);
        trunk(e, tokens + n - 1, 1, pos + n - 1);
    } else {
        trunk(e, tokens, n, pos);
    }
    if (e->hist) memcpy(e->hist + pos, tokens, n * sizeof *tokens);
    base->n_past = pos + n;

    uint32_t first = all ? 0 : n - 1, m = n - first;
    const float *x = split ? e->x : e->x + (size_t)first * hp->n_embd; /* the rows of the logits */
    for (uint32_t t = 0; t < m; t++)
        orc_rmsnorm(e->h + (size_t)t * hp->n_embd, x + (size_t)t * hp->n_embd, e->output_norm, hp->n_embd,
                    hp->rms_eps);
    orc_round16(e, e->h, (uint64_t)m * hp->n_embd);
    matmul_job j = {&e->output, e->h, logits, m};
    pool_run(e->pool, matmul_rows, &j, e->output.rows); /* logits stay f32 */
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
        orc_deltanet_free(L);
        orc_moe_free(L);
    }
    free(e->layers);
    free(e->k_cache);
    free(e->v_cache);
    free(e->scores);
    free(e->kv_slot);
    free(e->rs_slot);
    free(e->conv_state);
    free(e->ssm_S);
    free(e->hist);
    orc_snapshot_free(e);
    float *bufs[] = {e->x,  e->h,    e->q,      e->k,    e->v,    e->att,  e->o,  e->g, e->u,
                     e->qg, e->gate, e->dn_qkv, e->dn_x, e->dn_z, e->dn_b, e->dn_a, e->dn_o,
                     e->moe_p, e->moe_w, e->moe_y, e->moe_in, e->moe_g, e->moe_u};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(e->moe_sel);
    free(e->moe_at);
    pool_destroy(e->pool);
    free(e);
}

static const engine_ops orc_ops = {orc_eval, orc_destroy, NULL};

uint64_t orc_replayed_positions(const engine *base) {
    return base->ops == &orc_ops ? ((const orc_engine *)base)->replayed : 0;
}

/* The per-layer slots in the KV cache and the recurrent states, and their memory. */
static int alloc_state(orc_engine *e) {
    const arch_hparams *hp = &e->hp;
    e->kv_slot = calloc(hp->n_layer, sizeof *e->kv_slot);
    e->rs_slot = calloc(hp->n_layer, sizeof *e->rs_slot);
    if (!e->kv_slot || !e->rs_slot) return -1;
    uint32_t n_rec = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        e->kv_slot[l] = e->rs_slot[l] = UINT32_MAX;
        if (hp->recurrent[l]) e->rs_slot[l] = n_rec++;
        else e->kv_slot[l] = e->n_attn++;
    }
    size_t cache = (size_t)e->n_attn * e->base.n_ctx;
    e->k_cache = malloc((cache ? cache * e->kv_dim : 1) * sizeof(float));
    e->v_cache = malloc((cache ? cache * e->v_dim : 1) * sizeof(float));
    if (!e->k_cache || !e->v_cache) return -1;
    if (!n_rec) return 0;
    e->conv_dim = 2 * hp->ssm_k_heads * hp->ssm_state + hp->ssm_inner;
    e->ssm_vdim = hp->ssm_inner;
    size_t conv = (size_t)n_rec * (hp->ssm_conv_kernel - 1) * e->conv_dim;
    e->conv_state = malloc((conv ? conv : 1) * sizeof(float));
    e->ssm_S = malloc((size_t)n_rec * hp->ssm_v_heads * hp->ssm_state * hp->ssm_state * sizeof(float));
    e->hist = malloc((size_t)e->base.n_ctx * sizeof *e->hist);
    if (!e->conv_state || !e->ssm_S || !e->hist) return -1;
    orc_deltanet_reset(e);
    return 0;
}

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
    e->layers = calloc(hp->n_layer, sizeof *e->layers);
    e->pool = pool_create(o->threads);
    if (e->pool) e->scores = malloc((size_t)pool_threads(e->pool) * e->base.n_ctx * sizeof *e->scores);
    if (!e->layers || !e->pool || !e->scores || alloc_state(e)) {
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
