/* A request's log-probabilities: for each generated token (gen_on_token), its
 * log-probability and best alternatives from the raw logits, their texts, and where the
 * token's text will lie in the output. */
#include "server/http_internal.h"

#include <math.h>
#include <stdlib.h>

/* The bytes of id's text as it appears in the output: the first piece loses the dummy
 * prefix's space as tok_stream drops it. Appends to *b; the length, or -1. */
static int64_t piece_add(const tokenizer *t, int32_t id, bool first, buf *b) {
    char small[256];
    int64_t n = tok_piece(t, id, false, small, sizeof small);
    if (n < 0) return -1;
    char *p = (size_t)n <= sizeof small ? small : malloc((size_t)n);
    if (!p) return -1;
    if (p != small) tok_piece(t, id, false, p, (size_t)n);
    size_t off = first && n > 0 && p[0] == ' ' && tok_space_prefix(t) ? 1 : 0;
    bool ok = srv_buf_add(b, p + off, (size_t)n - off);
    if (p != small) free(p);
    return ok ? n - (int64_t)off : -1;
}

/* gen_on_token: the token's log-probability and its best alternatives from the raw
 * logits, with their texts; where its text will lie in the output. */
int srv_lp_on_token(void *ctx, int32_t id, const float *logits, uint32_t n_vocab) {
    job *j = ctx;
    lp_state *L = &j->lps;
    const tokenizer *t = j->srv->cfg->tok;
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 64;
        srv_token_logprob *lp = realloc(L->lp, cap * sizeof *lp);
        if (lp) L->lp = lp;
        srv_token_span *sp = lp ? realloc(L->span, cap * sizeof *sp) : NULL;
        if (sp) L->span = sp;
        char **tx = sp ? realloc(L->text, cap * sizeof *tx) : NULL;
        if (tx) L->text = tx;
        if (!tx) return L->failed = true, 1;
        L->cap = cap;
    }
    int32_t top_ids[SRV_MAX_TOP_LOGPROBS];
    double top_lps[SRV_MAX_TOP_LOGPROBS], lp;
    uint32_t n_top;
    if (srv_logprobs(logits, n_vocab, id, L->k, &lp, top_ids, top_lps, &n_top)) lp = -INFINITY, n_top = 0;
    /* the texts, one after another in one buffer: pointers are set once it stops moving */
    bool first = L->mirror.first;
    buf b = {0};
    int64_t len[1 + SRV_MAX_TOP_LOGPROBS];
    for (uint32_t i = 0; i <= n_top; i++)
        if ((len[i] = piece_add(t, i ? top_ids[i - 1] : id, first, &b)) < 0) return free(b.p), L->failed = true, 1;
    srv_token_logprob *e = &L->lp[L->n];
    const char *p = b.p ? b.p : "";
    e->tok = (srv_logprob_alt){p, (size_t)len[0], lp};
    p += len[0];
    for (uint32_t i = 0; i < n_top; i++) {
        e->top[i] = (srv_logprob_alt){p, (size_t)len[i + 1], top_lps[i]};
        p += len[i + 1];
    }
    e->n_top = n_top;
    char out[4096]; /* tok_stream_push's bound, as the loop's */
    size_t start = L->produced;
    L->produced += tok_stream_push(&L->mirror, id, out, sizeof out);
    L->text[L->n] = b.p;
    L->span[L->n++] = (srv_token_span){start, L->produced};
    return 0;
}

void srv_lp_free(lp_state *L) {
    for (size_t i = 0; i < L->n; i++) free(L->text[i]);
    free(L->lp);
    free(L->span);
    free(L->text);
}
