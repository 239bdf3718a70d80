/* The plan's recordings: the launches of a decode step and of a prefill block, in order,
 * each with its kernel's buffers bound by parameter name (plan_bind: checked against the
 * kernel's parameters and extents, then positional), recorded once and replayed. */
#include "base/error.h"
#include "plan/plan_internal.h"

#include <stdlib.h>
#include <string.h>

/* A recording under way: launches append to p->launch until the first failure, whose
 * message err keeps (every later add does nothing). */
typedef struct recorder {
    plan_engine *p;
    rt_kernel *const *kern; /* the block's kernels, parameters and grids (decode: the plan's) */
    const plan_sig *sig;
    const uint32_t (*grid)[2];
    uint32_t nb; /* the block's tokens (0: a decode step) */
    bool step;   /* a step of several slots' tokens (plan_record_batch), not a prompt's block */
    kiln_err *err;
    int rc;
    /* a block's qkv and gate/up products take the norm before them (plan_skinny_norm, as
     * built: built_norm): X the un-normalized rows, wn the norm's weight, no K_NORM (16-bit
     * layers only) */
    bool norm_qkv, norm_ff;
} recorder;

/* Whether the block's kernel i takes the norm before it (plan_skinny_norm), as it was built
 * (a capability the device gave up meanwhile may have changed the decision since). */
static bool built_norm(const recorder *R, int i) {
    const char *k = R->sig[i].kernel;
    return k && !strcmp(k, "kn_matmul_skinny_norm");
}

/* Appends a launch of kernel k (parameters sig) on {gx, gy, 1}, its n buffers bound by name. */
static void add_k(recorder *R, rt_kernel *k, const plan_sig *sig, uint32_t gx, uint32_t gy, const plan_arg *args,
                  uint32_t n) {
    plan_engine *p = R->p;
    if (R->rc) return;
    if (p->n_launch == p->cap_launch) {
        uint32_t cap = p->cap_launch ? 2 * p->cap_launch : 64;
        rt_launch *l = realloc(p->launch, cap * sizeof *l);
        if (!l) {
            R->rc = kiln_fail(R->err, KILN_ERR_NOMEM, "out of memory");
            return;
        }
        p->launch = l;
        p->cap_launch = cap;
    }
    rt_launch l = {k, {gx, gy, 1}, NULL, sig->n_params};
    rt_arg *a;
    if ((R->rc = plan_bind(p->d, sig, l.groups, args, n, &a, R->err))) return;
    l.args = a;
    p->launch[p->n_launch++] = l;
}

/* Appends a launch of the block's kernel i on {gx, gy, 1}. */
static void add(recorder *R, int i, uint32_t gx, uint32_t gy, const plan_arg *args, uint32_t n) {
    add_k(R, R->kern[i], &R->sig[i], gx, gy, args, n);
}

/* A product (or the embedding) of role i on a weight of the parts' types qt: 16-bit where
 * qt[0] < 0 (add's launch), else the plan's quantized variant on its own grid (the
 * embedding's rows, gy, the caller's). */
static void add_w(recorder *R, int i, const int8_t qt[KN_Q_PARTS], uint32_t gx, uint32_t gy, const plan_arg *args,
                  uint32_t n) {
    if (R->rc) return;
    if (qt[0] < 0) return add(R, i, gx, gy, args, n);
    bool block = i == K_MM_QKV || i == K_MM_O || i == K_MM_FF || i == K_MM_DOWN || i == K_MM_OUT ||
                 i == K_MOE_GATE_UP_G || i == K_MOE_DOWN_G;
    const plan_qvar *v = plan_qvariant(R->p, i, block ? R->nb : 0, qt, R->err);
    if (!v) {
        R->rc = -1;
        return;
    }
    /* the embedding's rows and a token's experts' grid y: the caller's (the tokens) */
    bool caller_gy = i == K_EMBED || i == K_MOE_GATE_UP || i == K_MOE_DOWN;
    add_k(R, v->k, &v->sig, v->grid[0], caller_gy ? gy : v->grid[1], args, n);
}

/* The types of a weight of one part. */
#define QT1(t) ((const int8_t[KN_Q_PARTS]){(t), -1, -1})
/* ADD_W(kernel, types, gx, gy, {"name", buffer}, ...) as ADD, through add_w. */
#define ADD_W(i, qt, gx, gy, ...)                                                                                    \
    add_w(R, (i), (qt), (gx), (gy), (const plan_arg[]){__VA_ARGS__},                                                   \
          sizeof((const plan_arg[]){__VA_ARGS__}) / sizeof(plan_arg))

/* ADD(kernel, gx, gy, {"name", buffer}, ...) in a function with a recorder R. */
#define ADD(i, gx, gy, ...)                                                                                          \
    add(R, (i), (gx), (gy), (const plan_arg[]){__VA_ARGS__}, sizeof((const plan_arg[]){__VA_ARGS__}) / sizeof(plan_arg))

/* The buffers of the qkv product and of qk_prep vary with the model's options. */
static void add_qkv(recorder *R, int kern, const plan_layer *L, bool prefill) {
    plan_engine *p = R->p;
    const uint32_t *g = R->grid[kern];
    /* the matmul names its activations X, Y; the matvec x, y; q, k and v in their blocks
     * are three weights (W, W1, W2) */
    bool quant = L->qt_qkv[0] >= 0;
    bool fused = prefill ? R->norm_qkv && !quant : p->s.fuse_norm; /* the norm of xa inside the product */
    plan_arg a[7] = {{"W", quant ? L->qkv_part[0] : L->wqkv}, {prefill ? "X" : "x", fused ? p->xa : p->h},
                     {prefill ? "Y" : "y", p->qkv}};
    uint32_t n = 3;
    if (quant) a[n++] = (plan_arg){"W1", L->qkv_part[1]}, a[n++] = (plan_arg){"W2", L->qkv_part[2]};
    if (prefill) a[n++] = (plan_arg){"info", p->info};
    if (p->s.bias) a[n++] = (plan_arg){"b", L->bqkv};
    if (fused) a[n++] = (plan_arg){"wn", L->attn_norm};
    add_w(R, kern, L->qt_qkv, g[0], g[1], a, n);
}


/* The norm weights and rope factors of the attention's prep form (where it has one). */
static uint32_t prep_args(const plan_engine *p, const plan_layer *L, plan_arg *a) {
    uint32_t n = 0;
    if (!plan_attn_prep(&p->s, &p->d->caps)) return 0;
    if (p->s.hp.qk_norm) a[n++] = (plan_arg){"q_norm", L->q_norm}, a[n++] = (plan_arg){"k_norm", L->k_norm};
    if (p->s.freqs) a[n++] = (plan_arg){"freqs", p->freqs};
    return n;
}

static void add_qk_prep(recorder *R, const plan_layer *L, uint32_t gy) {
    plan_engine *p = R->p;
    plan_arg a[8] = {{"qkv", p->qkv}, {"kcache", L->kc}, {"vcache", L->vc}, {"info", p->info}};
    uint32_t n = 4;
    if (p->s.hp.qk_norm) a[n++] = (plan_arg){"q_norm", L->q_norm}, a[n++] = (plan_arg){"k_norm", L->k_norm};
    if (p->s.freqs) a[n++] = (plan_arg){"freqs", p->freqs};
    if (p->pages) a[n++] = (plan_arg){"pages", p->pages};
    add(R, K_QK_PREP, kn_qk_prep_groups(&p->d->caps, p->s.hp.n_head, p->s.hp.n_head_kv, p->s.hp.head_dim_k,
                                          p->s.hp.n_rot, gy), gy, a, n);
}

/* qwen35: the output gate's product (from h) beside q/k/v, then att times sigmoid(gate)
 * into gated, the output product's input. */
static void add_gate_product(recorder *R, const plan_layer *L, bool prefill) {
    plan_engine *p = R->p;
    int k = prefill ? K_MM_AGATE : K_MV_AGATE;
    if (prefill)
        ADD(k, R->grid[k][0], R->grid[k][1], {"W", L->w_agate}, {"X", p->h}, {"Y", p->agate}, {"info", p->info});
    else if (p->s.fuse_norm)
        ADD(k, R->grid[k][0], 1, {"W", L->w_agate}, {"x", p->xa}, {"y", p->agate}, {"wn", L->attn_norm});
    else
        ADD(k, R->grid[k][0], 1, {"W", L->w_agate}, {"x", p->h}, {"y", p->agate});
}

static void add_gate(recorder *R, bool prefill) {
    plan_engine *p = R->p;
    int k = prefill ? K_GATE_BLOCK : K_GATE;
    ADD(k, R->grid[k][0], 1, {"x", p->att}, {"gate", p->agate}, {"out", p->gated});
}

/* qwen35's Gated DeltaNet mixer: xa (normed into h for a block; in the product where
 * fused) to xb = xa + out(deltanet(conv(qkv))). A decode step's input products are one
 * (the stacked weight into dn_in1, read through its views); a block's are three. */
static void add_deltanet(recorder *R, const plan_layer *L, bool prefill) {
    plan_engine *p = R->p;
    const uint32_t (*g)[2] = R->grid;
    int kc = prefill ? K_CONV_BLOCK : K_CONV, kd = prefill ? K_DELTANET_BLOCK : K_DELTANET;
    rt_buffer *qkv = prefill ? p->dn_qkv : p->dn_in1_qkv, *z = prefill ? p->dn_z : p->dn_in1_z;
    rt_buffer *ba = prefill ? p->dn_ba : p->dn_in1_ba;
    if (prefill) {
        struct { int k; rt_buffer *w, *y; } pr[3] = {{K_MM_DN_QKV, L->dn_qkv, p->dn_qkv}, {K_MM_DN_Z, L->dn_z, p->dn_z},
                                                     {K_MM_DN_BA, L->dn_ba, p->dn_ba}};
        for (int i = 0; i < 3; i++)
            ADD(pr[i].k, g[pr[i].k][0], g[pr[i].k][1], {"W", pr[i].w}, {"X", p->h}, {"Y", pr[i].y}, {"info", p->info});
    } else if (p->s.fuse_norm) {
        ADD(K_MV_DN_IN, g[K_MV_DN_IN][0], 1, {"W", L->dn_in}, {"x", p->xa}, {"y", p->dn_in1}, {"wn", L->attn_norm});
    } else {
        ADD(K_MV_DN_IN, g[K_MV_DN_IN][0], 1, {"W", L->dn_in}, {"x", p->h}, {"y", p->dn_in1});
    }
    ADD(kc, g[kc][0], 1, {"qkv", qkv}, {"w", L->dn_conv}, {"state", L->conv_state}, {"x", p->dn_x},
        {"info", p->info});
    if (prefill) { /* the window moved on, then the chunked delta rule's three launches */
        ADD(K_CONV_STATE, g[K_CONV_STATE][0], 1, {"qkv", qkv}, {"state", L->conv_state}, {"info", p->info});
        ADD(K_DN_PREP, g[K_DN_PREP][0], g[K_DN_PREP][1], {"x", p->dn_x}, {"ba", ba}, {"dt_bias", L->dn_dt_bias},
            {"ssm_a", L->dn_a}, {"qk", p->dn_qk}, {"uw", p->dn_uw}, {"p", p->dn_p}, {"gl", p->dn_gl},
            {"info", p->info});
        ADD(kd, g[kd][0], g[kd][1], {"qk", p->dn_qk}, {"uw", p->dn_uw}, {"p", p->dn_p}, {"gl", p->dn_gl},
            {"S", L->S}, {"o", p->dn_o}, {"info", p->info});
        ADD(K_DN_NORM, g[K_DN_NORM][0], g[K_DN_NORM][1], {"o", p->dn_o}, {"z", z}, {"norm", L->dn_norm},
            {"y", p->dn_y}, {"info", p->info});
    } else { /* the delta rule's step (o in f32), then its gated norm */
        ADD(kd, g[kd][0], g[kd][1], {"x", p->dn_x}, {"ba", ba}, {"dt_bias", L->dn_dt_bias}, {"ssm_a", L->dn_a},
            {"S", L->S}, {"o", p->dn_o}, {"info", p->info});
        ADD(K_DN_NORM_DECODE, g[K_DN_NORM_DECODE][0], 1, {"o", p->dn_o}, {"z", z}, {"norm", L->dn_norm},
            {"y", p->dn_y}, {"info", p->info});
    }
    if (prefill)
        ADD_W(K_MM_DN_OUT, QT1(L->qt_dn_out), g[K_MM_DN_OUT][0], g[K_MM_DN_OUT][1], {"W", L->dn_out}, {"X", p->dn_y},
              {"Y", p->xb}, {"info", p->info}, {"res", p->xa});
    else
        ADD_W(K_MV_DN_OUT, QT1(L->qt_dn_out), g[K_MV_DN_OUT][0], 1, {"W", L->dn_out}, {"x", p->dn_y}, {"y", p->xb},
              {"res", p->xa});
}

/* The logits of the row x: the output norm fused into the head where it can be. */
static void add_logits(recorder *R, rt_buffer *x) {
    plan_engine *p = R->p;
    uint32_t gx = R->grid[K_MV_OUT][0];
    if (p->s.fuse_norm) {
        ADD_W(K_MV_OUT, QT1(p->qt_out), gx, 1, {"W", p->output}, {"x", x}, {"y", p->logits}, {"wn", p->output_norm});
    } else {
        ADD(K_NORM, 1, 1, {"x", x}, {"w", p->output_norm}, {"y", p->hl});
        ADD_W(K_MV_OUT, QT1(p->qt_out), gx, 1, {"W", p->output}, {"x", p->hl}, {"y", p->logits});
    }
    ADD(K_ARGMAX, 1, 1, {"logits", p->logits}, {"out", p->best}, {"allow", p->allow});
}


/* A mixture of experts' feed-forward for nb tokens (1: a decode step), xb to xa: the norm,
 * the router's choice, the chosen experts' SwiGLU rows, their down products' weighted sum
 * with the residual (kernels/moe.c; the choice stays on the device). A prompt's block
 * (grouped) reads each expert once for the tokens that chose it; a decode step and a step
 * of slots' tokens read each token's experts. */
static void add_moe(recorder *R, const plan_layer *L, uint32_t nb, bool grouped) {
    plan_engine *p = R->p;
    const uint32_t (*g)[2] = R->grid;
    /* an expert cache: the recording ends after the router for the host's part
     * (plan_moe_cache.c), and the experts' kernels read its slots (moe_csel) and the
     * misses' products; a decode step hands the host its choice and input in host memory */
    bool cached = p->s.moe_slots > 0, to_host = cached && !grouped && nb == 1;
    ADD(K_NORM, nb, 1, {"x", p->xb}, {"w", L->ffn_norm}, {"y", p->h});
    if (to_host) ADD(K_MOE_H_COPY, g[K_MOE_H_COPY][0], 1, {"src", p->h}, {"dst", p->moe_h_host});
    ADD(K_MOE_SCORES, g[K_MOE_SCORES][0], nb, {"h", p->h}, {"router", L->router}, {"scores", p->moe_scores});
    ADD(K_MOE_ROUTE, 1, nb, {"scores", p->moe_scores}, {"sel", to_host ? p->moe_sel_host : p->moe_sel},
        {"wt", p->moe_wt});
    rt_buffer *sel = cached ? p->moe_csel : p->moe_sel;
    const int8_t qt_gu[KN_Q_PARTS] = {L->qt_exps[0], L->qt_exps[1], -1}; /* -1: 16-bit experts */
    if (cached && !R->rc) R->rc = plan_moe_cut(p, (uint32_t)(L - p->L), PLAN_CUT_ROUTE, R->err);
    /* the cache's products take the slots held now, last (kernels.h): one argument fewer
     * where nothing is cached */
    rt_buffer *ns = p->moe_nslots;
#define CACHED_N(a) (sizeof(a) / sizeof(a)[0] - !cached)
    if (grouped) {
        ADD(K_MOE_GROUP, 1, 1, {"sel", sel}, {"info", p->info}, {"rank", p->moe_rank}, {"off", p->moe_off},
            {"list", p->moe_list});
        const plan_arg gu[] = {{"h", p->h},         {"gate", L->gate_exps},  {"up", L->up_exps}, {"off", p->moe_off},
                               {"list", p->moe_list}, {"act", p->moe_act}, {"slots", ns}};
        const plan_arg dn[] = {{"act", p->moe_act}, {"down", L->down_exps}, {"off", p->moe_off},
                               {"list", p->moe_list}, {"yc", p->moe_yc},     {"slots", ns}};
        add_w(R, K_MOE_GATE_UP_G, qt_gu, g[K_MOE_GATE_UP_G][0], g[K_MOE_GATE_UP_G][1], gu, CACHED_N(gu));
        add_w(R, K_MOE_DOWN_G, QT1(L->qt_exps[2]), g[K_MOE_DOWN_G][0], g[K_MOE_DOWN_G][1], dn, CACHED_N(dn));
        /* the host may run these three again with other experts in the slots */
        if (cached && !R->rc) R->rc = plan_moe_cut(p, (uint32_t)(L - p->L), PLAN_CUT_PASS, R->err);
        const plan_arg cb[] = {{"yc", p->moe_yc}, {"wt", p->moe_wt}, {"res", p->xb},       {"y", p->xa},
                               {"info", p->info}, {"sel", sel},      {"miss", p->moe_miss}};
        add(R, K_MOE_COMBINE, g[K_MOE_COMBINE][0], g[K_MOE_COMBINE][1], cb, cached ? 7 : 5);
        return;
    }
    const plan_arg gu[] = {{"h", p->h}, {"gate", L->gate_exps}, {"up", L->up_exps}, {"sel", sel}, {"act", p->moe_act},
                           {"slots", ns}};
    add_w(R, K_MOE_GATE_UP, qt_gu, g[K_MOE_GATE_UP][0], nb, gu, CACHED_N(gu));
    const plan_arg dn[] = {{"act", p->moe_act}, {"down", L->down_exps}, {"sel", sel},         {"wt", p->moe_wt},
                           {"res", p->xb},      {"y", p->xa},           {"miss", p->moe_miss}, {"slots", ns}};
    add_w(R, K_MOE_DOWN, QT1(L->qt_exps[2]), g[K_MOE_DOWN][0], nb, dn, cached ? 8 : 6);
#undef CACHED_N
}

int plan_record_decode(plan_engine *p, kiln_err *err) {
    recorder rec = {p, p->kern, p->sig, (const uint32_t(*)[2])p->grid, 0, false, err, 0}, *R = &rec;
    const arch_hparams *hp = &p->s.hp;
    const uint32_t (*g)[2] = R->grid;
    bool fused = p->s.fuse_norm;
    ADD(K_STAGE, 1, 1, {"tok_host", p->tok_h}, {"tok", p->tok}, {"info_host", p->info_h}, {"info", p->info});
    ADD_W(K_EMBED, QT1(p->qt_embd), g[K_EMBED][0], 1, {"table", p->tok_embd}, {"tok", p->tok}, {"out", p->xa});
    bool gated = arch_is_qwen35(hp->arch);
    for (uint32_t l = 0; l < hp->n_layer && !R->rc; l++) {
        const plan_layer *L = &p->L[l];
        if (!fused) ADD(K_NORM, 1, 1, {"x", p->xa}, {"w", L->attn_norm}, {"y", p->h});
        if (gated && hp->recurrent[l]) {
            add_deltanet(R, L, false);
        } else {
            add_qkv(R, K_MV_QKV, L, false);
            if (gated) add_gate_product(R, L, false);
            bool prep = plan_attn_prep(&p->s, &p->d->caps); /* the attention does qk_prep's work */
            if (!prep) add_qk_prep(R, L, 1);
            plan_arg a[11] = {{prep ? "qkv" : "q", p->qkv}, {"kcache", L->kc}, {"vcache", L->vc}, {"part", p->part},
                              {"pos", p->info}};
            uint32_t na = 5;
            if (p->pages) a[na++] = (plan_arg){"pages", p->pages};
            na += prep_args(p, L, a + na);
            if (p->s.attn_merged) a[na++] = (plan_arg){"count", p->attn_count}, a[na++] = (plan_arg){"out", p->att};
            add(R, K_ATTN, g[K_ATTN][0], g[K_ATTN][1], a, na);
            if (!p->s.attn_merged)
                ADD(K_ATTN_MERGE, g[K_ATTN_MERGE][0], 1, {"part", p->part}, {"out", p->att}, {"pos", p->info});
            if (gated) add_gate(R, false);
            ADD_W(K_MV_O, QT1(L->qt_o), g[K_MV_O][0], 1, {"W", L->wo}, {"x", gated ? p->gated : p->att},
                  {"y", p->xb}, {"res", p->xa});
        }
        const int8_t ffn_qt[KN_Q_PARTS] = {L->qt_gate, L->qt_up, -1};
        if (hp->n_expert) {
            add_moe(R, L, 1, false);
            continue;
        }
        if (fused) {
            ADD_W(K_MV_FFN, ffn_qt, g[K_MV_FFN][0], 1, {"W", L->w_gate}, {"x", p->xb}, {"y", p->act}, {"Wu", L->w_up},
                  {"wn", L->ffn_norm});
        } else {
            ADD(K_NORM, 1, 1, {"x", p->xb}, {"w", L->ffn_norm}, {"y", p->h});
            ADD_W(K_MV_FFN, ffn_qt, g[K_MV_FFN][0], 1, {"W", L->w_gate}, {"x", p->h}, {"y", p->act},
                  {"Wu", L->w_up});
        }
        ADD_W(K_MV_DOWN, QT1(L->qt_down), g[K_MV_DOWN][0], 1, {"W", L->w_down}, {"x", p->act}, {"y", p->xa},
              {"res", p->xb});
    }
    add_logits(R, p->xa);
    return R->rc;
}


/* A block's feed-forward, xb to xa: the norm, the gate and up products with SwiGLU (one
 * launch where ff_swiglu and the weights are 16-bit, the norm in it too where norm_ff),
 * the down product with the residual. */
static void add_block_ffn(recorder *R, const plan_layer *L, uint32_t nb, bool ff_swiglu) {
    plan_engine *p = R->p;
    const uint32_t (*g)[2] = R->grid;
    if (p->s.hp.n_expert) return add_moe(R, L, nb, !R->step);
    bool fused = R->norm_ff && L->qt_gate < 0; /* the norm inside the product, with SwiGLU (plan_skinny_norm) */
    if (!fused) ADD(K_NORM, nb, 1, {"x", p->xb}, {"w", L->ffn_norm}, {"y", p->h});
    if (fused) {
        ADD(K_MM_FF, g[K_MM_FF][0], g[K_MM_FF][1], {"W", L->w_gate}, {"Wu", L->w_up}, {"X", p->xb}, {"Y", p->act},
            {"info", p->info}, {"wn", L->ffn_norm});
    } else if (L->qt_gate >= 0) {
        ADD_W(K_MM_FF, QT1(L->qt_gate), 0, 0, {"W", L->w_gate}, {"X", p->h}, {"Y", p->g}, {"info", p->info});
        ADD_W(K_MM_FF, QT1(L->qt_up), 0, 0, {"W", L->w_up}, {"X", p->h}, {"Y", p->u}, {"info", p->info});
        ADD(K_SWIGLU, g[K_SWIGLU][0], 1, {"g", p->g}, {"u", p->u}, {"out", p->act});
    } else if (ff_swiglu) {
        ADD(K_MM_FF, g[K_MM_FF][0], g[K_MM_FF][1], {"W", L->w_gate}, {"Wu", L->w_up}, {"X", p->h}, {"Y", p->act},
            {"info", p->info});
    } else {
        ADD(K_MM_FF, g[K_MM_FF][0], g[K_MM_FF][1], {"W", L->w_gate}, {"X", p->h}, {"Y", p->g}, {"info", p->info});
        ADD(K_MM_FF, g[K_MM_FF][0], g[K_MM_FF][1], {"W", L->w_up}, {"X", p->h}, {"Y", p->u}, {"info", p->info});
        ADD(K_SWIGLU, g[K_SWIGLU][0], 1, {"g", p->g}, {"u", p->u}, {"out", p->act});
    }
    ADD_W(K_MM_DOWN, QT1(L->qt_down), g[K_MM_DOWN][0], g[K_MM_DOWN][1], {"W", L->w_down}, {"X", p->act},
          {"Y", p->xa}, {"info", p->info}, {"res", p->xb});
}

int plan_record_prefill(plan_engine *p, const plan_prefill *b, kiln_err *err) {
    uint32_t nb = b ? b->n : p->s.n_block;
    recorder rec = {p, b ? b->kern : p->kern, b ? b->sig : p->sig, (const uint32_t(*)[2])(b ? b->grid : p->grid), nb,
                    false, err, 0},
             *R = &rec;
    const arch_hparams *hp = &p->s.hp;
    const uint32_t (*g)[2] = R->grid;
    plan_shape sb = p->s;
    sb.n_block = nb;
    bool ff_swiglu = plan_ff_swiglu(&sb, &p->d->caps); /* as plan_build_kernel built K_MM_FF */
    R->norm_qkv = built_norm(R, K_MM_QKV), R->norm_ff = built_norm(R, K_MM_FF);
    ADD(K_STAGE, g[K_STAGE][0], 1, {"tok_host", p->tok_h}, {"tok", p->tok}, {"info_host", p->info_h},
        {"info", p->info});
    ADD_W(K_EMBED, QT1(p->qt_embd), g[K_EMBED][0], nb, {"table", p->tok_embd}, {"tok", p->tok}, {"out", p->xa});
    bool gated = arch_is_qwen35(hp->arch);
    for (uint32_t l = 0; l < hp->n_layer && !R->rc; l++) {
        const plan_layer *L = &p->L[l];
        if (!R->norm_qkv || L->qt_qkv[0] >= 0) ADD(K_NORM, nb, 1, {"x", p->xa}, {"w", L->attn_norm}, {"y", p->h});
        if (gated && hp->recurrent[l]) {
            add_deltanet(R, L, true);
        } else {
            add_qkv(R, K_MM_QKV, L, true);
            if (gated) add_gate_product(R, L, true);
            add_qk_prep(R, L, nb);
            plan_arg a[6] = {{"q", p->qkv}, {"kcache", L->kc}, {"vcache", L->vc}, {"out", p->att}, {"info", p->info},
                             {"pages", p->pages}};
            add(R, K_ATTN_PREFILL, g[K_ATTN_PREFILL][0], g[K_ATTN_PREFILL][1], a, p->pages ? 6 : 5);
            if (gated) add_gate(R, true);
            ADD_W(K_MM_O, QT1(L->qt_o), g[K_MM_O][0], g[K_MM_O][1], {"W", L->wo}, {"X", gated ? p->gated : p->att},
                  {"Y", p->xb}, {"info", p->info}, {"res", p->xa});
        }
        add_block_ffn(R, L, nb, ff_swiglu);
    }
    ADD(K_TAKE_LAST, g[K_TAKE_LAST][0], 1, {"x", p->xa}, {"info", p->info}, {"out", p->last});
    add_logits(R, p->last);
    return R->rc;
}


/* A step of b->n slots' tokens (row t: token btok_tok[t] at its position of its slot's
 * cache, btok_pos[2t], btok_pos[2t + 1]; rows past the step's count are padding that
 * writes nothing): the short block's products over the step's rows, the cache stores and
 * attention over the pool, then every row's logits and argmax. */
int plan_record_batch(plan_engine *p, const plan_prefill *b, bool prep, kiln_err *err) {
    /* prep: the bucket's kernels with the attention's prep form for K_ATTN_BATCH */
    rt_kernel *kern[K_COUNT];
    plan_sig sig[K_COUNT];
    uint32_t grid[K_COUNT][2];
    memcpy(kern, b->kern, sizeof kern), memcpy(sig, b->sig, sizeof sig), memcpy(grid, b->grid, sizeof grid);
    if (prep) {
        kern[K_ATTN_BATCH] = b->attn_prep, sig[K_ATTN_BATCH] = b->sig_prep;
        grid[K_ATTN_BATCH][0] = b->grid_prep[0], grid[K_ATTN_BATCH][1] = b->grid_prep[1];
    }
    recorder rec = {p, kern, sig, (const uint32_t(*)[2])grid, b->n, true, err, 0}, *R = &rec;
    const arch_hparams *hp = &p->s.hp;
    const uint32_t (*g)[2] = R->grid;
    uint32_t nb = b->n;
    plan_shape sb = p->s;
    sb.n_block = nb;
    bool ff_swiglu = plan_ff_swiglu(&sb, &p->d->caps); /* as plan_build_kernel built K_MM_FF */
    R->norm_qkv = built_norm(R, K_MM_QKV), R->norm_ff = built_norm(R, K_MM_FF);
    ADD(K_STAGE_BATCH, g[K_STAGE_BATCH][0], 1, {"tok_host", p->btok_h}, {"tok", p->btok}, {"info_host", p->info_h},
        {"info", p->info});
    ADD_W(K_EMBED, QT1(p->qt_embd), g[K_EMBED][0], nb, {"table", p->tok_embd}, {"tok", p->btok_tok}, {"out", p->xa});
    for (uint32_t l = 0; l < hp->n_layer && !R->rc; l++) {
        const plan_layer *L = &p->L[l];
        if (!R->norm_qkv || L->qt_qkv[0] >= 0) ADD(K_NORM, nb, 1, {"x", p->xa}, {"w", L->attn_norm}, {"y", p->h});
        add_qkv(R, K_MM_QKV, L, true);
        plan_arg a[8] = {{"qkv", p->qkv}, {"kcache", p->kpool[l]}, {"vcache", p->vpool[l]}, {"tokpos", p->btok_pos}};
        uint32_t na = 4;
        if (hp->qk_norm) a[na++] = (plan_arg){"q_norm", L->q_norm}, a[na++] = (plan_arg){"k_norm", L->k_norm};
        if (p->s.freqs) a[na++] = (plan_arg){"freqs", p->freqs};
        if (p->pages_dev) a[na++] = (plan_arg){"pages", p->pages_dev};
        if (!prep) add(R, K_QK_PREP_BATCH, g[K_QK_PREP_BATCH][0], g[K_QK_PREP_BATCH][1], a, na);
        plan_arg at[11] = {{prep ? "qkv" : "q", p->qkv}, {"kcache", p->kpool[l]}, {"vcache", p->vpool[l]},
                           {"part", p->bpart},            {"tokpos", p->btok_pos}};
        uint32_t nt = 5;
        if (p->pages_dev) at[nt++] = (plan_arg){"pages", p->pages_dev};
        if (prep) nt += prep_args(p, L, at + nt);
        if (p->s.attn_merged) at[nt++] = (plan_arg){"count", p->bcount}, at[nt++] = (plan_arg){"out", p->att};
        add(R, K_ATTN_BATCH, g[K_ATTN_BATCH][0], g[K_ATTN_BATCH][1], at, nt);
        if (!p->s.attn_merged)
            ADD(K_ATTN_MERGE_BATCH, g[K_ATTN_MERGE_BATCH][0], g[K_ATTN_MERGE_BATCH][1], {"part", p->bpart},
                {"out", p->att}, {"tokpos", p->btok_pos});
        ADD_W(K_MM_O, QT1(L->qt_o), g[K_MM_O][0], g[K_MM_O][1], {"W", L->wo}, {"X", p->att}, {"Y", p->xb},
              {"info", p->info}, {"res", p->xa});
        add_block_ffn(R, L, nb, ff_swiglu);
    }
    ADD(K_NORM, nb, 1, {"x", p->xa}, {"w", p->output_norm}, {"y", p->h});
    ADD_W(K_MM_OUT, QT1(p->qt_out), g[K_MM_OUT][0], g[K_MM_OUT][1], {"W", p->output}, {"X", p->h},
          {"Y", p->blogits}, {"info", p->info});
    ADD(K_ARGMAX_BATCH, g[K_ARGMAX_BATCH][0], g[K_ARGMAX_BATCH][1], {"logits", p->blogits}, {"out", p->bbest},
        {"allow", p->ballow});
    return R->rc;
}
