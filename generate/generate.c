#include "generate/generate.h"

#include "base/clock.h"
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct gen_session {
    engine *e;
    const tokenizer *t;
    int32_t *cached; /* [n_ctx]: the tokens at each cached position */
    float *logits;   /* [n_vocab] */
};

gen_session *gen_session_create(engine *e, const tokenizer *t) {
    gen_session *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->e = e;
    s->t = t;
    s->cached = malloc((size_t)e->n_ctx * sizeof *s->cached);
    s->logits = malloc((size_t)e->n_vocab * sizeof *s->logits);
    if (!s->cached || !s->logits) {
        gen_session_free(s);
        return NULL;
    }
    return s;
}

void gen_session_free(gen_session *s) {
    if (!s) return;
    free(s->cached);
    free(s->logits);
    free(s);
}

uint32_t gen_session_cached(const gen_session *s) { return s->e->n_past; }

uint32_t gen_session_prefix(const gen_session *s, const int32_t *prompt, uint32_t n) {
    if (n == 0) return 0;
    uint32_t same = 0, limit = s->e->n_past < n - 1 ? s->e->n_past : n - 1;
    while (same < limit && s->cached[same] == prompt[same]) same++;
    return same;
}

const char *gen_finish_name(gen_finish f) {
    static const char *const names[] = {"eog", "stop", "length", "cancelled", "context"};
    return f <= GEN_CONTEXT ? names[f] : "?";
}

/* Text produced but not yet emitted: held while it could still be the start of a stop
 * string. */
typedef struct pending {
    char *buf;
    size_t n, cap;
} pending;

static int pend_add(pending *p, const char *s, size_t n) {
    if (p->n + n + 1 > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->n + n + 1) cap *= 2;
        char *b = realloc(p->buf, cap);
        if (!b) return -1;
        p->buf = b;
        p->cap = cap;
    }
    memcpy(p->buf + p->n, s, n);
    p->n += n;
    p->buf[p->n] = 0;
    return 0;
}

/* Emits what can no longer become part of a stop string; *stopped when one appeared
 * (the text before it is emitted, the rest dropped). Returns the emit callback's
 * verdict. */
static int flush_safe(pending *p, const gen_params *gp, gen_emit emit, void *ctx, bool final, bool *stopped) {
    size_t cut = p->n, keep_from = p->n;
    for (size_t i = 0; i < gp->n_stop; i++) {
        const char *hit = gp->stop[i][0] ? strstr(p->buf, gp->stop[i]) : NULL;
        if (hit && (size_t)(hit - p->buf) < cut) cut = (size_t)(hit - p->buf), *stopped = true;
    }
    if (!*stopped && !final)
        for (size_t i = 0; i < gp->n_stop; i++) { /* the longest tail that is a stop string's head */
            size_t ls = strlen(gp->stop[i]);
            for (size_t k = ls > 1 ? ls - 1 : 0; k > 0; k--)
                if (k <= p->n && memcmp(p->buf + p->n - k, gp->stop[i], k) == 0) {
                    if (p->n - k < keep_from) keep_from = p->n - k;
                    break;
                }
        }
    size_t out = *stopped ? cut : keep_from;
    int rc = out ? emit(ctx, p->buf, out) : 0;
    if (*stopped) p->n = 0;
    else {
        memmove(p->buf, p->buf + out, p->n - out);
        p->n -= out;
    }
    if (p->buf) p->buf[p->n] = 0;
    return rc;
}

/* The grammar's mask for the next token, or NULL with err. */
static const uint64_t *grammar_mask(gram_match *g, kiln_err *err) {
    const uint64_t *mask = gram_match_mask(g);
    if (!mask) {
        if (gram_match_too_complex(g)) kiln_fail(err, KILN_ERR_INVALID, "the grammar is too complex to follow");
        else kiln_fail(err, KILN_ERR_NOMEM, "out of memory (grammar mask)");
    }
    return mask;
}

/* The grammar's mask as an engine's argmax mask (n bits in u32 words; the end-of-generation
 * tokens allowed only where the grammar accepts, as gram_apply_mask). 0, or -1 with err. */
static int grammar_allow(gram_match *g, const int32_t eog[3], uint32_t n, uint32_t *allow, kiln_err *err) {
    const uint64_t *mask = grammar_mask(g, err);
    if (!mask) return -1;
    for (uint32_t w = 0; w < (n + 31) / 32; w++) allow[w] = (uint32_t)(mask[w / 2] >> (w % 2 * 32));
    bool ok = gram_match_accepting(g);
    for (int i = 0; i < 3; i++) {
        if (eog[i] < 0 || (uint32_t)eog[i] >= n) continue;
        uint32_t bit = 1u << (eog[i] % 32);
        allow[eog[i] / 32] = ok ? allow[eog[i] / 32] | bit : allow[eog[i] / 32] & ~bit;
    }
    return 0;
}

/* The next token under a grammar: the logits masked to what it allows (in place, or in
 * masked when the raw logits must stay for the token callback), then sampled. */
static int constrained_pick(gen_session *s, sampler *smp, gram_match *g, float *masked, const int32_t eog[3],
                            int32_t *id, kiln_err *err) {
    uint32_t n = s->e->n_vocab;
    const uint64_t *mask = grammar_mask(g, err);
    if (!mask) return -1;
    float *lg = s->logits;
    if (masked) lg = memcpy(masked, s->logits, (size_t)n * sizeof *masked);
    gram_apply_mask(mask, lg, n, eog, 3, gram_match_accepting(g));
    *id = samp_sample(smp, lg);
    if (*id < 0)
        return kiln_fail(err, KILN_ERR_INVALID,
                         "no token can continue the grammar here (the vocabulary cannot spell what it requires)");
    return 0;
}

int gen_run(gen_session *s, sampler *smp, const int32_t *prompt, uint32_t n_prompt, const gen_params *p, gen_emit emit,
            void *ctx, gen_result *r, kiln_err *err) {
    engine *e = s->e;
    memset(r, 0, sizeof *r);
    if (n_prompt == 0) return kiln_fail(err, KILN_ERR_INVALID, "empty prompt"), -1;
    if (n_prompt >= e->n_ctx)
        return kiln_fail(err, KILN_ERR_INVALID, "the prompt has %u tokens; the context holds %u", n_prompt, e->n_ctx),
               -1;
    r->ids = malloc(((size_t)p->max_tokens + 1) * sizeof *r->ids);
    if (!r->ids) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), -1;

    /* reuse the cached prefix; at least the last prompt token is evaluated for its logits */
    uint32_t same = gen_session_prefix(s, prompt, n_prompt);
    r->n_prompt = n_prompt;
    r->n_reused = same;
    double t0 = clock_now_s();
    /* greedy decoding without penalties needs only the argmax: where the engine offers it,
     * 4 bytes per token come back instead of the vocabulary's logits (not when a caller
     * wants every token's logits) */
    bool fast = e->ops->eval_argmax && samp_is_greedy(smp) && !p->on_token && !p->grammar;
    /* the same under a grammar where the engine takes its mask: the pick stays on the device */
    bool gfast = e->ops->eval_argmax_masked && samp_is_greedy(smp) && !p->on_token && p->grammar;
    const int32_t eog[3] = {tok_eos(s->t), tok_eot(s->t), p->extra_eog};
    uint32_t *allow = gfast ? malloc(((size_t)e->n_vocab + 31) / 32 * 4) : NULL;
    if (gfast && !allow) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), -1;
    int32_t next = -1, last = prompt[n_prompt - 1];
    if (gfast ? grammar_allow(p->grammar, eog, e->n_vocab, allow, err) ||
                    e->ops->eval_argmax_masked(e, prompt + same, n_prompt - same, same, allow, &next, err)
        : fast ? e->ops->eval_argmax(e, prompt + same, n_prompt - same, same, &next, err)
               : engine_eval(e, prompt + same, n_prompt - same, same, s->logits, false, err)) {
        free(allow);
        return -1;
    }
    memcpy(s->cached + same, prompt + same, (n_prompt - same) * sizeof *prompt);
    r->t_prompt = clock_now_s() - t0;
    /* with a grammar and a token callback the callback sees the raw logits, the sampler a
     * masked copy */
    float *masked = p->grammar && p->on_token ? malloc((size_t)e->n_vocab * sizeof *masked) : NULL;
    if (p->grammar && p->on_token && !masked) return free(allow), kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), -1;
    samp_reset(smp);
    for (uint32_t i = 0; i < n_prompt; i++) samp_accept(smp, prompt[i]);

    tok_stream ts;
    tok_stream_init_after(&ts, s->t, prompt, n_prompt);
    pending pend = {0};
    char piece[4096]; /* tok_stream_push needs 3 x (longest piece + 4) */
    bool stopped = false;
    int rc = 0;
    r->finish = GEN_LENGTH;
    t0 = clock_now_s();
    /* greedy and plain where the engine splits eval_argmax: each next evaluation queued before
     * the token's own work (its text, stop strings, stream), which then overlaps the wait for
     * the step that evaluates it beside other slots' tokens (a server's steps otherwise wait
     * for the slowest caller's work: ~0.2 ms a step of 1.2 ms, qwen3-0.6b on an H100) */
    bool pipe = fast && e->ops->submit_argmax && e->ops->wait_argmax;
    int32_t sent_tok = -1, ahead = -1; /* the submitted call's token and answer */
    for (uint32_t i = 0; i < p->max_tokens; i++) {
        int32_t id = fast || gfast ? next : -1;
        if ((fast || gfast) && id < 0) { /* nothing beat -inf: the logits, and the sampler's verdict on them */
            if (engine_eval(e, &last, 1, e->n_past - 1, s->logits, false, err)) {
                rc = -1;
                break;
            }
        }
        if (p->grammar && id < 0) {
            if (constrained_pick(s, smp, p->grammar, masked, eog, &id, err)) {
                rc = -1;
                break;
            }
        } else if (id < 0) {
            id = samp_sample(smp, s->logits);
        }
        if (id < 0) {
            rc = -1;
            kiln_fail(err, KILN_ERR_INVALID, "no token can be sampled: every logit is NaN or -inf");
            break;
        }
        if (tok_is_eog(s->t, id) || id == p->extra_eog) {
            r->finish = GEN_EOG;
            break;
        }
        if (p->grammar && gram_match_token(p->grammar, id)) {
            rc = -1;
            kiln_fail(err, KILN_ERR_INTERNAL, "the grammar refused token %d after its mask allowed it", id);
            break;
        }
        r->ids[r->n_generated++] = id;
        bool sent = false;
        uint32_t at = e->n_past;
        if (pipe && i + 1 < p->max_tokens && at + 1 < e->n_ctx) {
            sent_tok = id;
            if (e->ops->submit_argmax(e, &sent_tok, 1, at, &ahead, err)) {
                rc = -1;
                break;
            }
            sent = true;
        }
        samp_accept(smp, id);
        if (p->on_step) p->on_step(p->token_ctx, r->n_generated);
        if (p->on_token && p->on_token(p->token_ctx, id, s->logits, e->n_vocab)) { /* never sent: on_token turns pipe off */
            r->finish = GEN_CALLER;
            break;
        }
        size_t n = tok_stream_push(&ts, id, piece, sizeof piece);
        int end = pend_add(&pend, piece, n) ? 1 /* out of memory */
                  : flush_safe(&pend, p, emit, ctx, false, &stopped) ? 2 /* the caller's */
                  : stopped ? 3 : 0;
        if (sent) {
            kiln_err werr = {0};
            int wrc = e->ops->wait_argmax(e, &werr);
            if (end || wrc) e->n_past = at; /* the submitted token is not kept */
            if (!end && wrc) {
                if (werr.code == KILN_ERR_FULL) { /* a shared cache with no room left: as the context's end */
                    r->finish = GEN_CONTEXT;
                    break;
                }
                if (err) *err = werr;
                rc = -1;
                break;
            }
        }
        if (end == 1) {
            rc = -1;
            kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
            break;
        }
        if (end) {
            r->finish = end == 2 ? GEN_CALLER : GEN_STOP_STRING;
            break;
        }
        if (sent) {
            s->cached[at] = id;
            last = id;
            next = ahead;
            continue;
        }
        if (p->grammar && gram_match_done(p->grammar)) { /* nothing may follow: as if the model ended */
            r->finish = GEN_EOG;
            break;
        }
        if (i + 1 == p->max_tokens) break;
        uint32_t pos = e->n_past;
        if (pos + 1 >= e->n_ctx) {
            r->finish = GEN_CONTEXT;
            break;
        }
        if (gfast ? grammar_allow(p->grammar, eog, e->n_vocab, allow, err) ||
                        e->ops->eval_argmax_masked(e, &id, 1, pos, allow, &next, err)
            : fast ? e->ops->eval_argmax(e, &id, 1, pos, &next, err)
                   : engine_eval(e, &id, 1, pos, s->logits, false, err)) {
            if (err && err->code == KILN_ERR_FULL) { /* a shared cache with no room left: as the context's end */
                kiln_err_clear(err);
                r->finish = GEN_CONTEXT;
                break;
            }
            rc = -1;
            break;
        }
        s->cached[pos] = id;
        last = id;
    }
    if (rc == 0 && r->finish != GEN_CALLER && !stopped) {
        size_t n = tok_stream_flush(&ts, piece, sizeof piece);
        if (pend_add(&pend, piece, n) == 0) flush_safe(&pend, p, emit, ctx, true, &stopped);
        if (stopped) r->finish = GEN_STOP_STRING;
    }
    r->t_generate = clock_now_s() - t0;
    free(pend.buf);
    free(masked);
    free(allow);
    return rc;
}
