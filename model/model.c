#include "model/model.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct want { const gguf_tensor **dst; char name[64]; uint64_t ne0, ne1, ne2; bool optional; } want;

static int check(const gguf_file *g, const want *w, kiln_err *err) {
    const gguf_tensor *t = gguf_find_tensor(g, w->name);
    *w->dst = NULL;
    if (!t) {
        if (w->optional) return 0;
        kiln_fail(err, KILN_ERR_INVALID, "tensor '%s' is missing", w->name);
        return -1;
    }
    uint64_t ne2 = w->ne2 ? w->ne2 : 1;
    if (t->ne[0] != w->ne0 || t->ne[1] != w->ne1 || t->ne[2] != ne2 || t->ne[3] != 1) {
        char want3[32] = "";
        if (ne2 > 1) snprintf(want3, sizeof want3, ", %llu", (unsigned long long)ne2);
        kiln_fail(err, KILN_ERR_INVALID, "tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu%s]",
                  w->name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                  (unsigned long long)t->ne[3], (unsigned long long)w->ne0, (unsigned long long)w->ne1, want3);
        return -1;
    }
    if (!gguf_type_info_of(t->type)->convertible) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "tensor '%s' has type %s, which kiln cannot convert yet", w->name,
                  gguf_type_info_of(t->type)->name);
        return -1;
    }
    *w->dst = t;
    return 0;
}

#define WANT3(dst_, ne0_, ne1_, ne2_, opt_, ...)                                                              \
    do {                                                                                                     \
        want w_ = {.dst = &(dst_), .ne0 = (ne0_), .ne1 = (ne1_), .ne2 = (ne2_), .optional = (opt_)};         \
        snprintf(w_.name, sizeof w_.name, __VA_ARGS__);                                                       \
        if (check(g, &w_, err)) return -1;                                                                   \
    } while (0)
#define WANT(dst_, ne0_, ne1_, opt_, ...) WANT3(dst_, ne0_, ne1_, 1, opt_, __VA_ARGS__)

/* A layer's feed-forward: the dense SwiGLU, or the router and the experts' 3-D tensors
 * (and qwen35moe's shared expert). */
static int find_ffn(model *m, uint32_t l, kiln_err *err) {
    const gguf_file *g = m->file;
    const arch_hparams *hp = &m->hp;
    model_layer *L = &m->layers[l];
    uint64_t d = hp->n_embd, f = hp->n_ff;
    if (!hp->n_expert) {
        WANT(L->w_gate, d, f, false, "blk.%u.ffn_gate.weight", l);
        WANT(L->w_up, d, f, false, "blk.%u.ffn_up.weight", l);
        WANT(L->w_down, f, d, false, "blk.%u.ffn_down.weight", l);
        return 0;
    }
    uint64_t ne = hp->n_expert, fe = hp->n_ff_exp, fs = hp->n_ff_shexp;
    WANT(L->ffn_gate_inp, d, ne, false, "blk.%u.ffn_gate_inp.weight", l);
    WANT3(L->ffn_gate_exps, d, fe, ne, false, "blk.%u.ffn_gate_exps.weight", l);
    WANT3(L->ffn_up_exps, d, fe, ne, false, "blk.%u.ffn_up_exps.weight", l);
    WANT3(L->ffn_down_exps, fe, d, ne, false, "blk.%u.ffn_down_exps.weight", l);
    if (!fs) return 0;
    WANT(L->ffn_gate_inp_shexp, d, 1, false, "blk.%u.ffn_gate_inp_shexp.weight", l);
    WANT(L->ffn_gate_shexp, d, fs, false, "blk.%u.ffn_gate_shexp.weight", l);
    WANT(L->ffn_up_shexp, d, fs, false, "blk.%u.ffn_up_shexp.weight", l);
    WANT(L->ffn_down_shexp, fs, d, false, "blk.%u.ffn_down_shexp.weight", l);
    return 0;
}

/* Qwen3.5's trunk, by layer kind, with llama.cpp's names and shapes (its
 * load_arch_tensors); blocks past the trunk (nextn_predict_layers) are not read. */
static int find_qwen35(model *m, kiln_err *err) {
    const gguf_file *g = m->file;
    const arch_hparams *hp = &m->hp;
    uint64_t d = hp->n_embd, dk = hp->head_dim_k, q = (uint64_t)hp->n_head * dk, kv = (uint64_t)hp->n_head_kv * dk,
             ks = (uint64_t)hp->ssm_k_heads * hp->ssm_state, vs = (uint64_t)hp->ssm_v_heads * hp->ssm_state,
             nv = hp->ssm_v_heads;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        model_layer *L = &m->layers[l];
        WANT(L->attn_norm, d, 1, false, "blk.%u.attn_norm.weight", l);
        WANT(L->ffn_norm, d, 1, false, "blk.%u.post_attention_norm.weight", l);
        if (hp->recurrent[l]) {
            WANT(L->ssm_qkv, d, 2 * ks + vs, false, "blk.%u.attn_qkv.weight", l);
            WANT(L->ssm_z, d, vs, false, "blk.%u.attn_gate.weight", l);
            WANT(L->ssm_conv, hp->ssm_conv_kernel, 2 * ks + vs, false, "blk.%u.ssm_conv1d.weight", l);
            WANT(L->ssm_dt_bias, nv, 1, false, "blk.%u.ssm_dt.bias", l);
            WANT(L->ssm_a, nv, 1, false, "blk.%u.ssm_a", l);
            WANT(L->ssm_beta, d, nv, false, "blk.%u.ssm_beta.weight", l);
            WANT(L->ssm_alpha, d, nv, false, "blk.%u.ssm_alpha.weight", l);
            WANT(L->ssm_norm, hp->ssm_state, 1, false, "blk.%u.ssm_norm.weight", l);
            WANT(L->ssm_out, vs, d, false, "blk.%u.ssm_out.weight", l);
        } else {
            WANT(L->wq, d, 2 * q, false, "blk.%u.attn_q.weight", l);
            WANT(L->wk, d, kv, false, "blk.%u.attn_k.weight", l);
            WANT(L->wv, d, kv, false, "blk.%u.attn_v.weight", l);
            WANT(L->wo, q, d, false, "blk.%u.attn_output.weight", l);
            WANT(L->q_norm, dk, 1, false, "blk.%u.attn_q_norm.weight", l);
            WANT(L->k_norm, dk, 1, false, "blk.%u.attn_k_norm.weight", l);
        }
        if (find_ffn(m, l, err)) return -1;
    }
    return 0;
}

static int find_tensors(model *m, kiln_err *err) {
    const gguf_file *g = m->file;
    const arch_hparams *hp = &m->hp;
    uint64_t d = hp->n_embd, q = (uint64_t)hp->n_head * hp->head_dim_k, k = (uint64_t)hp->n_head_kv * hp->head_dim_k,
             v = (uint64_t)hp->n_head_kv * hp->head_dim_v, o = (uint64_t)hp->n_head * hp->head_dim_v;
    WANT(m->tok_embd, d, hp->n_vocab, false, "token_embd.weight");
    WANT(m->output_norm, d, 1, false, "output_norm.weight");
    WANT(m->output, d, hp->n_vocab, true, "output.weight");
    if (!m->output) m->output = m->tok_embd;
    WANT(m->rope_freqs, hp->n_rot / 2, 1, true, "rope_freqs.weight");
    if (arch_is_qwen35(hp->arch)) return find_qwen35(m, err);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        model_layer *L = &m->layers[l];
        WANT(L->attn_norm, d, 1, false, "blk.%u.attn_norm.weight", l);
        WANT(L->wq, d, q, false, "blk.%u.attn_q.weight", l);
        WANT(L->wk, d, k, false, "blk.%u.attn_k.weight", l);
        WANT(L->wv, d, v, false, "blk.%u.attn_v.weight", l);
        WANT(L->wo, o, d, false, "blk.%u.attn_output.weight", l);
        bool bias = hp->qkv_bias;
        WANT(L->bq, q, 1, !bias, "blk.%u.attn_q.bias", l);
        WANT(L->bk, k, 1, !bias, "blk.%u.attn_k.bias", l);
        WANT(L->bv, v, 1, !bias, "blk.%u.attn_v.bias", l);
        WANT(L->q_norm, hp->head_dim_k, 1, !hp->qk_norm, "blk.%u.attn_q_norm.weight", l);
        WANT(L->k_norm, hp->head_dim_k, 1, !hp->qk_norm, "blk.%u.attn_k_norm.weight", l);
        WANT(L->ffn_norm, d, 1, false, "blk.%u.ffn_norm.weight", l);
        if (find_ffn(m, l, err)) return -1;
    }
    return 0;
}

static bool all_quant(const gguf_tensor *a, const gguf_tensor *b, const gguf_tensor *c) {
    const gguf_tensor *t[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (t[i] && !gguf_type_is_block_quant(t[i]->type)) return false;
    return true;
}

/* A shared expert's matrices of the experts' types and widths, or none: the plan stacks
 * it after the experts as one more. */
static bool same_types(const model_layer *L) {
    return !L->ffn_gate_shexp ||
           (L->ffn_gate_shexp->type == L->ffn_gate_exps->type && L->ffn_up_shexp->type == L->ffn_up_exps->type &&
            L->ffn_down_shexp->type == L->ffn_down_exps->type);
}

/* Which products keep their quantized blocks on the device (model.h), and how many
 * block-quantized matrices are converted instead. */
static void quant_groups(model *m) {
    bool qwen35 = arch_is_qwen35(m->hp.arch); /* its q/k/v and DeltaNet inputs are stacked in 16 bits */
    m->q_embd = all_quant(m->tok_embd, NULL, NULL);
    m->q_output = all_quant(m->output, NULL, NULL);
    uint32_t quant = 0, kept = m->q_embd + (m->output != m->tok_embd && m->q_output);
    for (uint64_t i = 0; i < gguf_n_tensors(m->file); i++) quant += gguf_type_is_block_quant(gguf_tensor_at(m->file, i)->type);
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        model_layer *L = &m->layers[l];
        L->q_qkv = !qwen35 && all_quant(L->wq, L->wk, L->wv);
        L->q_o = L->wo && all_quant(L->wo, NULL, NULL);
        L->q_ffn = L->w_gate && all_quant(L->w_gate, L->w_up, NULL);
        L->q_down = L->w_down && all_quant(L->w_down, NULL, NULL);
        L->q_dn_out = L->ssm_out && all_quant(L->ssm_out, NULL, NULL);
        L->q_exps = L->ffn_gate_exps && all_quant(L->ffn_gate_exps, L->ffn_up_exps, L->ffn_down_exps) && same_types(L);
        kept +=
            3 * L->q_qkv + L->q_o + 2 * L->q_ffn + L->q_down + L->q_dn_out + (L->ffn_gate_shexp ? 6 : 3) * L->q_exps;
    }
    m->n_converted = quant - kept;
}

bool model_keeps_blocks(const model *m, const gguf_tensor *t) {
    if (!t || !gguf_type_is_block_quant(t->type)) return false;
    if (t == m->tok_embd && m->q_embd) return true;
    if (t == m->output) return m->q_output;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const model_layer *L = &m->layers[l];
        if (t == L->wq || t == L->wk || t == L->wv) return L->q_qkv;
        if (t == L->wo) return L->q_o;
        if (t == L->w_gate || t == L->w_up) return L->q_ffn;
        if (t == L->w_down) return L->q_down;
        if (t == L->ssm_out) return L->q_dn_out;
        if (t == L->ffn_gate_exps || t == L->ffn_up_exps || t == L->ffn_down_exps || t == L->ffn_gate_shexp ||
            t == L->ffn_up_shexp || t == L->ffn_down_shexp)
            return L->q_exps;
    }
    return false;
}

const gguf_tensor *model_expert_matrix(const model_layer *L, int kind, uint32_t e, uint64_t *row0) {
    const gguf_tensor *exps[3] = {L->ffn_gate_exps, L->ffn_up_exps, L->ffn_down_exps};
    const gguf_tensor *shared[3] = {L->ffn_gate_shexp, L->ffn_up_shexp, L->ffn_down_shexp};
    const gguf_tensor *t = exps[kind]; /* [cols, rows, n_expert] */
    bool own = e < t->ne[2];
    *row0 = own ? (uint64_t)e * t->ne[1] : 0;
    return own ? t : shared[kind];
}

model *model_load(const char *path, kiln_err *err) {
    model *m = calloc(1, sizeof *m);
    if (!m) {
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    kiln_err ge;
    m->file = gguf_open(path, &ge);
    if (!m->file) {
        kiln_err_wrap(err, &ge, "%s", path);
        free(m);
        return NULL;
    }
    if (arch_read_hparams(m->file, &m->hp, &ge)) {
        kiln_err_wrap(err, &ge, "%s", path);
        model_free(m);
        return NULL;
    }
    m->layers = calloc(m->hp.n_layer, sizeof *m->layers);
    kiln_err msg = {0};
    if (!m->layers || find_tensors(m, &msg)) {
        if (m->layers) kiln_err_wrap(err, &msg, "%s", path);
        else kiln_fail(err, KILN_ERR_NOMEM, "%s: out of memory", path);
        model_free(m);
        return NULL;
    }
    const model_layer *L0 = &m->layers[0];
    /* a qwen35 layer 0 is a DeltaNet layer */
    uint32_t t = (L0->wq ? L0->wq : L0->ssm_qkv ? L0->ssm_qkv : L0->w_gate ? L0->w_gate : L0->ffn_gate_exps)->type;
    m->file_dtype = t == GGUF_T_BF16 || t == GGUF_T_F16 ? t : GGUF_T_F32;
    quant_groups(m);
    return m;
}

void model_free(model *m) {
    if (!m) return;
    gguf_close(m->file);
    free(m->layers);
    free(m);
}

char *model_chat_template(const model *m) {
    gguf_str src;
    if (gguf_get_str(m->file, "tokenizer.chat_template", &src, NULL)) return NULL;
    char *s = malloc(src.len + 1);
    if (s) {
        memcpy(s, src.ptr, src.len);
        s[src.len] = 0;
    }
    return s;
}
