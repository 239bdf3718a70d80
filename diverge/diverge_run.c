/* Driving the engines of a divergence report: the reference's greedy pass, each other
 * engine teacher-forced on the reference's tokens and then free on its own from where it
 * first leaves them, and every comparison of one prompt. */
#include "base/error.h"
#include "diverge/diverge.h"
#include "generate/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dv_run_free(dv_run *r) {
    if (!r) return;
    if (r->greedy != r->forced) free(r->greedy);
    free(r->forced);
    free(r->tokens);
    memset(r, 0, sizeof *r);
}

/* The engine's own picks from step `from` on (its logits at `from` already in greedy),
 * the KV cache rewound to that step. A step with no finite logit ends the path: the
 * rest is -1 with NaN logits. */
static int continue_greedy(engine *e, uint32_t n_prompt, uint32_t from, uint32_t n_steps, dv_run *r, kiln_err *err) {
    uint32_t nv = e->n_vocab;
    for (uint32_t s = from; s + 1 < n_steps; s++) {
        if (r->tokens[s] < 0) {
            for (uint32_t t = s + 1; t < n_steps; t++) {
                r->tokens[t] = -1;
                for (uint32_t v = 0; v < nv; v++) r->greedy[(size_t)t * nv + v] = NAN;
            }
            return 0;
        }
        float *next = r->greedy + (size_t)(s + 1) * nv;
        if (engine_eval(e, &r->tokens[s], 1, n_prompt + s, next, false, err)) return -1;
        r->tokens[s + 1] = samp_argmax(next, nv);
    }
    return 0;
}

int dv_run_engine(engine *e, const int32_t *prompt, uint32_t n_prompt, const int32_t *ref_tokens, uint32_t n_steps,
                  dv_run *out, kiln_err *err) {
    memset(out, 0, sizeof *out);
    uint32_t nv = e->n_vocab;
    if (!n_steps || !n_prompt)
        return kiln_fail(err, KILN_ERR_INVALID, "nothing to run (no steps or an empty prompt)"), -1;
    if ((uint64_t)n_prompt + n_steps > e->n_ctx)
        return kiln_fail(err, KILN_ERR_INVALID, "%u prompt tokens + %u steps exceed the context of %u", n_prompt,
                         n_steps, e->n_ctx),
               -1;
    size_t nlog = (size_t)n_steps * nv;
    out->tokens = calloc(n_steps, sizeof *out->tokens);
    out->forced = malloc(nlog * sizeof *out->forced);
    out->greedy = ref_tokens ? malloc(nlog * sizeof *out->greedy) : out->forced;
    if (!out->tokens || !out->forced || !out->greedy) {
        dv_run_free(out);
        return kiln_fail(err, KILN_ERR_NOMEM, "out of memory for %u steps of %u logits", n_steps, nv), -1;
    }
    if (engine_eval(e, prompt, n_prompt, 0, out->forced, false, err)) goto fail;
    for (uint32_t s = 0; s < n_steps; s++) {
        out->tokens[s] = samp_argmax(out->forced + (size_t)s * nv, nv);
        if (s + 1 == n_steps) break;
        const int32_t *feed = ref_tokens ? &ref_tokens[s] : &out->tokens[s];
        if (*feed < 0) {
            kiln_fail(err, KILN_ERR_INVALID, "no finite logit at step %u", s);
            goto fail;
        }
        if (engine_eval(e, feed, 1, n_prompt + s, out->forced + (size_t)(s + 1) * nv, false, err)) goto fail;
    }
    if (!ref_tokens) return 0;
    /* up to and including its first different pick, the context was its own greedy one */
    uint32_t d = 0;
    while (d < n_steps && out->tokens[d] == ref_tokens[d]) d++;
    uint32_t same = d < n_steps ? d + 1 : n_steps;
    memcpy(out->greedy, out->forced, (size_t)same * nv * sizeof *out->greedy);
    if (d < n_steps && continue_greedy(e, n_prompt, d, n_steps, out, err)) goto fail;
    return 0;
fail:
    dv_run_free(out);
    return -1;
}

void dv_prompt_free(dv_prompt *p, uint32_t n_dev) {
    if (!p) return;
    for (uint32_t d = 0; p->vs_ref && d < n_dev; d++) dv_comparison_free(&p->vs_ref[d]);
    for (uint32_t k = 0; p->pairs && k < n_dev * (n_dev - 1) / 2; k++) dv_comparison_free(&p->pairs[k]);
    dv_comparison_free(&p->contract);
    free(p->vs_ref);
    free(p->pairs);
    free(p->ref_tokens);
    free(p->text);
    memset(p, 0, sizeof *p);
}

static int run_named(engine *e, const int32_t *ids, uint32_t n, const int32_t *ref, uint32_t steps, dv_run *out,
                     kiln_err *err) {
    kiln_err why = {0};
    if (!dv_run_engine(e, ids, n, ref, steps, out, &why)) return 0;
    kiln_err_wrap(err, &why, "%s", e->name);
    return -1;
}

static int compare_or_fail(const dv_run *a, const dv_run *b, const dv_report *r, dv_comparison *out, kiln_err *err) {
    if (!dv_compare(a, b, r->n_vocab, r->n_steps, r->dtype, out)) return 0;
    kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    return -1;
}

int dv_analyze_prompt(const dv_engines *en, const dv_report *r, const int32_t *ids, uint32_t n_ids, dv_prompt *p,
                      kiln_err *err) {
    uint32_t nd = en->n_dev, npairs = nd * (nd ? nd - 1 : 0) / 2, steps = r->n_steps;
    dv_run ref, other = {0}, *runs = calloc(nd ? nd : 1, sizeof *runs);
    p->vs_ref = calloc(nd ? nd : 1, sizeof *p->vs_ref);
    p->pairs = calloc(npairs ? npairs : 1, sizeof *p->pairs);
    p->ref_tokens = calloc(steps, sizeof *p->ref_tokens);
    int rc = -1;
    if (!runs || !p->vs_ref || !p->pairs || !p->ref_tokens) {
        free(runs);
        return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), -1;
    }
    if (run_named(en->ref, ids, n_ids, NULL, steps, &ref, err)) {
        free(runs);
        return -1;
    }
    memcpy(p->ref_tokens, ref.tokens, steps * sizeof *ref.tokens);
    if (en->other) {
        if (run_named(en->other, ids, n_ids, ref.tokens, steps, &other, err) ||
            compare_or_fail(&ref, &other, r, &p->contract, err))
            goto out;
        p->has_contract = true;
    }
    for (uint32_t d = 0; d < nd; d++)
        if (run_named(en->devs[d], ids, n_ids, ref.tokens, steps, &runs[d], err) ||
            compare_or_fail(&ref, &runs[d], r, &p->vs_ref[d], err))
            goto out;
    for (uint32_t i = 0; i < nd; i++)
        for (uint32_t j = i + 1; j < nd; j++)
            if (compare_or_fail(&runs[i], &runs[j], r, &p->pairs[dv_pair_index(nd, i, j)], err)) goto out;
    rc = 0;
out:
    for (uint32_t d = 0; d < nd; d++) dv_run_free(&runs[d]);
    free(runs);
    dv_run_free(&other);
    dv_run_free(&ref);
    return rc;
}

void dv_token_text(const tokenizer *t, int32_t id, char *buf, size_t cap) {
    char piece[64];
    int64_t n = id >= 0 && t ? tok_piece(t, id, true, piece, sizeof piece) : -1;
    if (n < 0) {
        snprintf(buf, cap, "%d", id);
        return;
    }
    if (n > (int64_t)sizeof piece) n = sizeof piece;
    size_t k = (size_t)snprintf(buf, cap, "%d \"", id);
    bool utf8 = tok_utf8_invalid_at(piece, (size_t)n) == 0; /* a byte token is a part of a character */
    /* escaped so a piece can sit in a Markdown table cell, a JSON string or an HTML page */
    for (int64_t i = 0; i < n && k + 6 < cap; i++) {
        unsigned char ch = (unsigned char)piece[i];
        if (ch < 0x20 || ch == 0x7f || (ch >= 0x80 && !utf8) || ch == '"' || ch == '\\' || ch == '|' || ch == '<' ||
            ch == '>' || ch == '&')
            k += (size_t)snprintf(buf + k, cap - k, "\\x%02x", ch);
        else buf[k++] = (char)ch;
    }
    if (k + 2 <= cap) buf[k++] = '"';
    buf[k < cap ? k : cap - 1] = '\0';
}
