/* Qwen3.5's Gated DeltaNet layer (llama.cpp's build_layer_attn_linear, with its fused
 * gated_delta_net and ssm_conv CPU ops as the reference), for n tokens of one sequence:
 *
 *   qkv = W_qkv h, z = W_z h, b = W_beta h, a = W_alpha h          (per token)
 *   x = silu(causal depthwise conv of qkv over the last conv_kernel inputs)
 *       (tap conv_kernel-1 multiplies the current token; the state holds the K-1 before)
 *   x = [q: k heads x state | k: k heads x state | v: v heads x state]
 *   q, k = each k head divided by max(|.|_2, rms_eps)
 *   per v head j (k head j % k_heads: ggml's tiled broadcast, not repeat-interleave):
 *     g = softplus(a_j + dt_bias_j) * ssm_a_j,  beta = sigmoid(b_j)
 *     S = exp(g) S;  d = beta (v_j - S^T k);  S = S + k d^T;  o_j = S^T q / sqrt(state)
 *   y_j = rmsnorm(o_j) * ssm_norm * silu(z_j);  out = W_out y
 *
 * S (state x state per v head) is held transposed: row c (a v dim) over the k dims.
 * Contract rounding points (beside forward.c's list): the qkv, z, beta and alpha
 * projections and the output projection (as every product), the convolution's output
 * after its silu, and y (the gated norm's output, the output projection's input). The
 * l2 norms, the gates, S and o stay f32: they live inside the recurrence kernel, which
 * is expected to fuse the gated norm of its own v head. S and the convolution state
 * (which holds the rounded qkv inputs) are f32 in both modes. */
#include "base/error.h"
#include "oracle/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int orc_deltanet_load(orc_engine *e, uint32_t l, kiln_err *err) {
    const model_layer *ml = &e->m->layers[l];
    orc_layer *L = &e->layers[l];
    uint32_t want = e->mode == ORC_F32 ? GGUF_T_F32 : e->dtype;
    if (orc_weight_load(&L->ssm_qkv, ml->ssm_qkv, want, false, err) || orc_weight_load(&L->ssm_z, ml->ssm_z, want, false, err) ||
        orc_weight_load(&L->ssm_beta, ml->ssm_beta, want, false, err) ||
        orc_weight_load(&L->ssm_alpha, ml->ssm_alpha, want, false, err) ||
        orc_weight_load(&L->ssm_out, ml->ssm_out, want, false, err))
        return -1;
    /* the depthwise filter, dt bias and decay rates are kept f32 like rope factors: the
     * file stores them so and the decay compounds over the whole sequence */
    if (!(L->ssm_conv = orc_load_vector(e, ml->ssm_conv, false, err)) ||
        !(L->ssm_dt_bias = orc_load_vector(e, ml->ssm_dt_bias, false, err)) ||
        !(L->ssm_a = orc_load_vector(e, ml->ssm_a, false, err)) ||
        !(L->ssm_norm = orc_load_vector(e, ml->ssm_norm, true, err)))
        return -1;
    return 0;
}

void orc_deltanet_free(orc_layer *L) {
    orc_weight *ws[] = {&L->ssm_qkv, &L->ssm_z, &L->ssm_beta, &L->ssm_alpha, &L->ssm_out};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) orc_weight_free(ws[i]);
    free(L->ssm_conv);
    free(L->ssm_dt_bias);
    free(L->ssm_a);
    free(L->ssm_norm);
}

static size_t conv_bytes(const orc_engine *e) {
    return (size_t)e->hp.n_recurrent * (e->hp.ssm_conv_kernel - 1) * e->conv_dim * sizeof(float);
}

static size_t s_bytes(const orc_engine *e) {
    const arch_hparams *hp = &e->hp;
    return (size_t)hp->n_recurrent * hp->ssm_v_heads * hp->ssm_state * hp->ssm_state * sizeof(float);
}

void orc_deltanet_reset(orc_engine *e) {
    if (!e->hp.n_recurrent) return;
    memset(e->conv_state, 0, conv_bytes(e));
    memset(e->ssm_S, 0, s_bytes(e));
}

void orc_snapshot_take(orc_engine *e) {
    for (int i = 0; i < ORC_SNAPSHOTS; i++)
        if (e->snap[i].valid && e->snap[i].pos == e->rs_pos) return;
    orc_snapshot *s = &e->snap[e->snap_next];
    if (!s->S) {
        s->conv = malloc(conv_bytes(e) ? conv_bytes(e) : 1);
        s->S = malloc(s_bytes(e));
        if (!s->conv || !s->S) {
            free(s->conv), free(s->S);
            s->conv = s->S = NULL;
            return;
        }
    }
    memcpy(s->conv, e->conv_state, conv_bytes(e));
    memcpy(s->S, e->ssm_S, s_bytes(e));
    s->pos = e->rs_pos;
    s->valid = true;
    e->snap_next = (e->snap_next + 1) % ORC_SNAPSHOTS;
}

void orc_snapshot_drop_after(orc_engine *e, uint32_t pos) {
    for (int i = 0; i < ORC_SNAPSHOTS; i++)
        if (e->snap[i].pos > pos) e->snap[i].valid = false;
}

uint32_t orc_snapshot_restore(orc_engine *e, uint32_t pos) {
    const orc_snapshot *best = NULL;
    for (int i = 0; i < ORC_SNAPSHOTS; i++)
        if (e->snap[i].valid && e->snap[i].pos <= pos && (!best || e->snap[i].pos > best->pos)) best = &e->snap[i];
    if (!best) {
        orc_deltanet_reset(e);
        return 0;
    }
    memcpy(e->conv_state, best->conv, conv_bytes(e));
    memcpy(e->ssm_S, best->S, s_bytes(e));
    return best->pos;
}

void orc_snapshot_free(orc_engine *e) {
    for (int i = 0; i < ORC_SNAPSHOTS; i++) {
        free(e->snap[i].conv);
        free(e->snap[i].S);
    }
}

static float dot(const float *a, const float *b, uint32_t n) {
    float s = 0;
    for (uint32_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The causal convolution for n tokens and the state update: the window of token t is
 * rows t .. t+K-1 of [state (K-1 rows) ; qkv (n rows)]. */
static void conv(orc_engine *e, const orc_layer *L, float *state, uint32_t n) {
    uint32_t K = e->hp.ssm_conv_kernel, C = e->conv_dim;
    for (uint32_t t = 0; t < n; t++) {
        float *out = e->dn_x + (size_t)t * C;
        for (uint32_t c = 0; c < C; c++) {
            float s = 0;
            for (uint32_t i = 0; i < K; i++) {
                uint32_t r = t + i;
                float in = r < K - 1 ? state[(size_t)r * C + c] : e->dn_qkv[(size_t)(r - (K - 1)) * C + c];
                s += in * L->ssm_conv[(size_t)c * K + i];
            }
            out[c] = s / (1.0f + expf(-s)); /* silu */
        }
    }
    /* the new state: rows n .. n+K-2 of the same sequence (sources lie at or after their
     * destinations, so ascending order reads each before it is overwritten) */
    for (uint32_t r = 0; r + 1 < K; r++) {
        uint32_t src = n + r;
        const float *from = src < K - 1 ? state + (size_t)src * C : e->dn_qkv + (size_t)(src - (K - 1)) * C;
        memmove(state + (size_t)r * C, from, C * sizeof(float));
    }
    orc_round16(e, e->dn_x, (uint64_t)n * C);
}

typedef struct recur_job {
    orc_engine *e;
    float *S; /* this layer's states */
    uint32_t n;
} recur_job;

/* One v head per item, its tokens in order. */
static void recur(void *ctx, uint64_t j0, uint64_t j1, int worker) {
    (void)worker;
    const recur_job *jb = ctx;
    orc_engine *e = jb->e;
    const arch_hparams *hp = &e->hp;
    uint32_t dk = hp->ssm_state, dv = hp->ssm_state, nk = hp->ssm_k_heads, nv = hp->ssm_v_heads, C = e->conv_dim;
    float scale = 1.0f / sqrtf((float)dk);
    for (uint64_t j = j0; j < j1; j++) {
        float *M = jb->S + j * (size_t)dv * dk;
        uint32_t kh = (uint32_t)(j % nk);
        for (uint32_t t = 0; t < jb->n; t++) {
            const float *x = e->dn_x + (size_t)t * C;
            const float *q = x + (size_t)kh * dk, *k = x + (size_t)(nk + kh) * dk, *v = x + (size_t)2 * nk * dk + j * dv;
            float decay = expf(e->dn_a[(size_t)t * nv + j]), beta = e->dn_b[(size_t)t * nv + j];
            float *o = e->dn_o + (size_t)t * e->ssm_vdim + j * dv;
            for (uint32_t c = 0; c < dv; c++) {
                float *row = M + (size_t)c * dk;
                for (uint32_t i = 0; i < dk; i++) row[i] *= decay;
                float d = (v[c] - dot(row, k, dk)) * beta;
                for (uint32_t i = 0; i < dk; i++) row[i] += k[i] * d;
                o[c] = dot(row, q, dk) * scale;
            }
        }
    }
}

void orc_deltanet(orc_engine *e, uint32_t l, uint32_t n) {
    const arch_hparams *hp = &e->hp;
    const orc_layer *L = &e->layers[l];
    uint32_t r = e->rs_slot[l], K = hp->ssm_conv_kernel, C = e->conv_dim, dk = hp->ssm_state, nk = hp->ssm_k_heads,
             nv = hp->ssm_v_heads, dv = hp->ssm_state;
    float *state = e->conv_state + (size_t)r * (K - 1) * C;
    float *S = e->ssm_S + (size_t)r * nv * dv * dk;

    orc_matmul(e, &L->ssm_qkv, NULL, e->h, e->dn_qkv, n);
    orc_matmul(e, &L->ssm_z, NULL, e->h, e->dn_z, n);
    orc_matmul(e, &L->ssm_beta, NULL, e->h, e->dn_b, n);
    orc_matmul(e, &L->ssm_alpha, NULL, e->h, e->dn_a, n);
    conv(e, L, state, n);

    for (uint32_t t = 0; t < n; t++) {
        float *x = e->dn_x + (size_t)t * C;
        for (uint32_t h = 0; h < 2 * nk; h++) { /* the q heads, then the k heads */
            float *y = x + (size_t)h * dk;
            float s = dot(y, y, dk), inv = 1.0f / fmaxf(sqrtf(s), hp->rms_eps);
            for (uint32_t i = 0; i < dk; i++) y[i] *= inv;
        }
        for (uint32_t j = 0; j < nv; j++) {
            float *a = &e->dn_a[(size_t)t * nv + j], *b = &e->dn_b[(size_t)t * nv + j];
            float sp = *a + L->ssm_dt_bias[j];
            sp = sp > 20.0f ? sp : logf(1.0f + expf(sp)); /* softplus, as ggml */
            *a = sp * L->ssm_a[j];                          /* g: the log of the decay */
            *b = 1.0f / (1.0f + expf(-*b));                 /* beta */
        }
    }
    recur_job jb = {e, S, n};
    pool_run(e->pool, recur, &jb, nv);

    for (uint32_t t = 0; t < n; t++)
        for (uint32_t j = 0; j < nv; j++) {
            float *o = e->dn_o + (size_t)t * e->ssm_vdim + (size_t)j * dv;
            const float *z = e->dn_z + (size_t)t * e->ssm_vdim + (size_t)j * dv;
            orc_rmsnorm(o, o, L->ssm_norm, dv, hp->rms_eps);
            for (uint32_t c = 0; c < dv; c++) o[c] *= z[c] / (1.0f + expf(-z[c]));
        }
    orc_round16(e, e->dn_o, (uint64_t)n * e->ssm_vdim);
    orc_matmul(e, &L->ssm_out, NULL, e->dn_o, e->o, n);
}
