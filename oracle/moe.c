/* A mixture of experts' feed-forward (qwen3moe; llama.cpp's build_moe_ffn with softmax
 * gating and renormalised weights), for n tokens, from e->h (the normed input) to e->o:
 *
 *   p = softmax(router h)                     f32: the router's weights stay f32 in both
 *                                             modes (its scores choose experts)
 *   the n_expert_used largest p, largest first (a tie goes to the lower expert), and their
 *   weights w_k = p_k / sum of the chosen p
 *   y_k = down_k(silu(gate_k h) * up_k h)     each product rounded, as the dense FFN's
 *   o = sum_k w_k y_k                         f32, in the chosen order, rounded once
 *
 * qwen35moe adds a shared expert, every token's, after the routed ones in the same sum:
 *   o = sum_k w_k y_k + sigmoid(g . h) y_s    g the f32 row ffn_gate_inp_shexp, y_s the
 *                                             shared SwiGLU's output, rounded as y_k
 *
 * Each expert runs once for all the tokens that chose it (their rows gathered), so the
 * threads read its weights once per call. */
#include "oracle/internal.h"

#include <math.h>
#include <string.h>

int orc_moe_load(orc_engine *e, uint32_t l, kiln_err *err) {
    const model_layer *ml = &e->m->layers[l];
    orc_layer *L = &e->layers[l];
    uint32_t want = e->mode == ORC_F32 ? GGUF_T_F32 : e->dtype;
    bool keep = ml->q_exps; /* kept in their blocks: their exact values (model.h) */
    if (orc_weight_load(&L->router, ml->ffn_gate_inp, GGUF_T_F32, false, err) ||
        orc_weight_load(&L->gate_exps, ml->ffn_gate_exps, want, keep, err) ||
        orc_weight_load(&L->up_exps, ml->ffn_up_exps, want, keep, err) ||
        orc_weight_load(&L->down_exps, ml->ffn_down_exps, want, keep, err))
        return -1;
    if (!ml->ffn_gate_shexp) return 0;
    return orc_weight_load(&L->shexp_gate_inp, ml->ffn_gate_inp_shexp, GGUF_T_F32, false, err) ||
                   orc_weight_load(&L->gate_shexp, ml->ffn_gate_shexp, want, keep, err) ||
                   orc_weight_load(&L->up_shexp, ml->ffn_up_shexp, want, keep, err) ||
                   orc_weight_load(&L->down_shexp, ml->ffn_down_shexp, want, keep, err)
               ? -1
               : 0;
}

void orc_moe_free(orc_layer *L) {
    orc_weight *ws[] = {&L->router,         &L->gate_exps,  &L->up_exps,    &L->down_exps,
                        &L->shexp_gate_inp, &L->gate_shexp, &L->up_shexp, &L->down_shexp};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) orc_weight_free(ws[i]);
}

/* Token t's experts and weights from its router scores p[n_expert] (softmaxed in place). */
static void route(const arch_hparams *hp, float *p, uint32_t *sel, float *w) {
    uint32_t ne = hp->n_expert, k = hp->n_expert_used;
    float max = p[0], sum = 0;
    for (uint32_t x = 1; x < ne; x++) max = p[x] > max ? p[x] : max;
    for (uint32_t x = 0; x < ne; x++) sum += p[x] = expf(p[x] - max);
    for (uint32_t x = 0; x < ne; x++) p[x] /= sum;
    uint64_t taken[(ARCH_MAX_EXPERTS + 63) / 64] = {0};
    float chosen = 0;
    for (uint32_t j = 0; j < k; j++) {
        uint32_t best = UINT32_MAX;
        for (uint32_t x = 0; x < ne; x++)
            if (!(taken[x / 64] >> (x % 64) & 1) && (best == UINT32_MAX || p[x] > p[best])) best = x;
        taken[best / 64] |= 1ull << (best % 64);
        sel[j] = best, w[j] = p[best];
        chosen += p[best];
    }
    for (uint32_t j = 0; j < k; j++) w[j] /= chosen;
}

/* out[m x rows of down] = down(round(silu(gate x) * up x)) for m rows x (each product
 * rounded, as the dense FFN's); g and u hold m x (gate's rows). */
static void swiglu_ffn(orc_engine *e, const orc_weight *gate, const orc_weight *up, const orc_weight *down,
                       const float *x, float *g, float *u, float *out, uint32_t m) {
    uint64_t f = gate->rows;
    orc_matmul(e, gate, NULL, x, g, m);
    orc_matmul(e, up, NULL, x, u, m);
    for (uint64_t i = 0; i < (uint64_t)m * f; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    orc_round16(e, g, (uint64_t)m * f);
    orc_matmul(e, down, NULL, g, out, m);
}

/* Rows [r0, r0 + rows) of w: one expert's matrix of a 3-D tensor. */
static orc_weight rows_of(const orc_weight *w, uint64_t r0, uint64_t rows) {
    orc_weight v = *w;
    uint64_t row_bytes = w->row_bytes ? w->row_bytes : w->cols * (w->type == GGUF_T_F32 ? 4 : 2);
    v.data = (const uint8_t *)w->data + r0 * row_bytes;
    v.rows = rows;
    v.owned = NULL;
    return v;
}

void orc_moe(orc_engine *e, uint32_t l, uint32_t n) {
    const arch_hparams *hp = &e->hp;
    const orc_layer *L = &e->layers[l];
    uint32_t d = hp->n_embd, ne = hp->n_expert, k = hp->n_expert_used, f = hp->n_ff_exp;
    /* the router: f32 scores of the rounded input, no rounding */
    for (uint32_t t = 0; t < n; t++) {
        float *p = e->moe_p + (size_t)t * ne;
        for (uint32_t x = 0; x < ne; x++) p[x] = orc_weight_dot(&L->router, x, e->h + (size_t)t * d);
        route(hp, p, e->moe_sel + (size_t)t * k, e->moe_w + (size_t)t * k);
    }
    /* each expert over the tokens that chose it; y[t][j] its output for choice j */
    for (uint32_t x = 0; x < ne; x++) {
        uint32_t m = 0;
        for (uint32_t i = 0; i < n * k; i++)
            if (e->moe_sel[i] == x) {
                memcpy(e->moe_in + (size_t)m * d, e->h + (size_t)(i / k) * d, d * sizeof(float));
                e->moe_at[m++] = i;
            }
        if (!m) continue;
        orc_weight gate = rows_of(&L->gate_exps, (uint64_t)x * f, f), up = rows_of(&L->up_exps, (uint64_t)x * f, f);
        orc_weight down = rows_of(&L->down_exps, (uint64_t)x * d, d);
        swiglu_ffn(e, &gate, &up, &down, e->moe_in, e->moe_g, e->moe_u, e->moe_in, m);
        for (uint32_t i = 0; i < m; i++)
            memcpy(e->moe_y + (size_t)e->moe_at[i] * d, e->moe_in + (size_t)i * d, d * sizeof(float));
    }
    bool shared = L->gate_shexp.data != NULL; /* its output for every token into moe_in */
    if (shared) swiglu_ffn(e, &L->gate_shexp, &L->up_shexp, &L->down_shexp, e->h, e->moe_g, e->moe_u, e->moe_in, n);
    for (uint32_t t = 0; t < n; t++) {
        float *o = e->o + (size_t)t * d;
        const float *w = e->moe_w + (size_t)t * k, *y = e->moe_y + (size_t)t * k * d;
        for (uint32_t c = 0; c < d; c++) o[c] = w[0] * y[c];
        for (uint32_t j = 1; j < k; j++)
            for (uint32_t c = 0; c < d; c++) o[c] += w[j] * y[(size_t)j * d + c];
        if (!shared) continue;
        float gate = orc_weight_dot(&L->shexp_gate_inp, 0, e->h + (size_t)t * d);
        float ws = 1.0f / (1.0f + expf(-gate));
        const float *ys = e->moe_in + (size_t)t * d;
        for (uint32_t c = 0; c < d; c++) o[c] += ws * ys[c];
    }
    orc_round16(e, e->o, (uint64_t)n * d);
}
