/* Divergence analysis: quanta, top-k, comparing two runs of one prompt, and verdicts.
 * Pure functions of logits, so the verdict logic is tested without any device. */
#include "diverge/diverge.h"

#include "generate/sampler.h"
#include "gguf/gguf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double dv_quantum(double x, uint32_t dtype) {
    bool half = dtype == GGUF_T_F16;
    int mant = half ? 10 : 7, emin = half ? -14 : -126;
    double a = fabs(x);
    int e = a > 0 && isfinite(a) ? ilogb(a) : emin;
    if (e < emin) e = emin; /* subnormals share the smallest normal's spacing */
    return ldexp(1.0, e - mant);
}

uint32_t dv_topk(const float *logits, uint32_t n, dv_cand *out, uint32_t k) {
    uint32_t have = 0;
    for (uint32_t i = 0; i < n && k; i++) {
        float v = logits[i];
        if (isnan(v)) continue;
        /* ids arrive in increasing order: an equal logit already held keeps its place */
        if (have == k && !(v > out[k - 1].logit)) continue;
        uint32_t j = have < k ? have++ : k - 1;
        while (j > 0 && out[j - 1].logit < v) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = (dv_cand){(int32_t)i, v};
    }
    return have;
}

bool dv_is_near_tie(double gap_a, double gap_b) { return gap_a <= DV_NEAR_TIE_QUANTA && gap_b <= DV_NEAR_TIE_QUANTA; }

double dv_gap_quanta(const float *l, int32_t mine, int32_t theirs, uint32_t dtype) {
    if (mine < 0 || theirs < 0) return INFINITY; /* a side with no finite logit: nothing explains it */
    double g = ((double)l[mine] - l[theirs]) / dv_quantum(l[mine], dtype);
    return isnan(g) ? INFINITY : g;
}

/* One side's view of the contested pair: mine (its pick) against theirs. */
static void side_of(const float *l, uint32_t n_vocab, int32_t mine, int32_t theirs, uint32_t dtype, dv_side *s) {
    s->n_top = dv_topk(l, n_vocab, s->top, DV_TOPK);
    s->gap_quanta = dv_gap_quanta(l, mine, theirs, dtype);
    s->tie = mine >= 0 && theirs >= 0 && l[mine] == l[theirs];
}

static void first_divergence(const dv_run *a, const dv_run *b, uint32_t n_vocab, uint32_t n_steps, uint32_t dtype,
                             dv_divergence *d) {
    memset(d, 0, sizeof *d);
    uint32_t s = 0;
    while (s < n_steps && a->tokens[s] == b->tokens[s]) s++;
    d->step = s;
    if (s == n_steps) return;
    d->diverged = true;
    d->token_a = a->tokens[s], d->token_b = b->tokens[s];
    size_t at = (size_t)s * n_vocab;
    side_of(a->greedy + at, n_vocab, d->token_a, d->token_b, dtype, &d->a);
    side_of(b->greedy + at, n_vocab, d->token_b, d->token_a, dtype, &d->b);
    d->near_tie = dv_is_near_tie(d->a.gap_quanta, d->b.gap_quanta);
}

static dv_step forced_step(const float *a, const float *b, uint32_t n_vocab) {
    double max_abs = 0, max_ref = 0;
    for (uint32_t v = 0; v < n_vocab; v++) {
        double d = fabs((double)b[v] - a[v]);
        if (isnan(d)) d = INFINITY; /* a NaN on one side is as wrong as it gets */
        if (d > max_abs) max_abs = d;
        if (fabs(a[v]) > max_ref) max_ref = fabs(a[v]);
    }
    dv_step s = {.max_abs = max_abs, .rel = max_abs / (max_ref > 0 && isfinite(max_ref) ? max_ref : 1.0)};
    s.top1_agree = samp_argmax(a, n_vocab) == samp_argmax(b, n_vocab);
    return s;
}

int dv_compare(const dv_run *a, const dv_run *b, uint32_t n_vocab, uint32_t n_steps, uint32_t dtype,
               dv_comparison *out) {
    memset(out, 0, sizeof *out);
    out->steps = calloc(n_steps ? n_steps : 1, sizeof *out->steps);
    if (!out->steps) return -1;
    out->n_steps = n_steps;
    first_divergence(a, b, n_vocab, n_steps, dtype, &out->div);
    uint32_t agree = 0;
    for (uint32_t s = 0; s < n_steps; s++) {
        size_t at = (size_t)s * n_vocab;
        dv_step st = forced_step(a->forced + at, b->forced + at, n_vocab);
        out->steps[s] = st;
        agree += st.top1_agree;
        out->mean_rel += st.rel, out->mean_abs += st.max_abs;
        if (s == 0 || st.rel > out->worst_rel) out->worst_rel = st.rel, out->worst_step = s;
    }
    if (n_steps) {
        out->agreement = (double)agree / n_steps;
        out->mean_rel /= n_steps, out->mean_abs /= n_steps;
    }
    return 0;
}

void dv_comparison_free(dv_comparison *c) {
    if (!c) return;
    free(c->steps);
    c->steps = NULL;
}

uint32_t dv_pair_index(uint32_t n_dev, uint32_t i, uint32_t j) {
    /* pairs (i, *) come after the n_dev - 1 + ... + n_dev - i of the rows above */
    return i * n_dev - i * (i + 1) / 2 + (j - i - 1);
}

bool dv_device_explained(const dv_report *r, uint32_t d) {
    for (uint32_t p = 0; p < r->n_prompts; p++) {
        const dv_divergence *v = &r->prompts[p].vs_ref[d].div;
        if (v->diverged && !v->near_tie) return false;
    }
    return true;
}

static size_t append(char *buf, size_t cap, size_t k, const char *s) {
    size_t n = strlen(s);
    if (k + n >= cap) n = k < cap ? cap - k - 1 : 0;
    memcpy(buf + k, s, n);
    buf[k + n] = '\0';
    return k + n;
}

void dv_verdict(const dv_report *r, uint32_t d, char *buf, size_t cap) {
    uint32_t diverged = 0, unexplained = 0;
    for (uint32_t p = 0; p < r->n_prompts; p++) {
        const dv_divergence *v = &r->prompts[p].vs_ref[d].div;
        diverged += v->diverged;
        unexplained += v->diverged && !v->near_tie;
    }
    char line[1024];
    if (!diverged)
        snprintf(line, sizeof line, "%s: explained: identical to the reference to the end on all %u prompts",
                 r->dev_labels[d], r->n_prompts);
    else if (!unexplained)
        snprintf(line, sizeof line,
                 "%s: explained: %u of %u prompts diverge, every divergence a near-tie (<= %g quanta)",
                 r->dev_labels[d], diverged, r->n_prompts, DV_NEAR_TIE_QUANTA);
    else
        snprintf(line, sizeof line, "%s: NOT explained: %u of %u divergences are wider than %g quanta, a bug to chase:",
                 r->dev_labels[d], unexplained, diverged, DV_NEAR_TIE_QUANTA);
    size_t k = append(buf, cap, 0, line);
    uint32_t shown = 0;
    for (uint32_t p = 0; p < r->n_prompts && unexplained; p++) {
        const dv_divergence *v = &r->prompts[p].vs_ref[d].div;
        if (!v->diverged || v->near_tie) continue;
        if (shown++ == 3) {
            snprintf(line, sizeof line, "; and %u more", unexplained - 3);
            append(buf, cap, k, line);
            return;
        }
        char ta[320], tb[320];
        dv_token_text(r->tok, v->token_a, ta, sizeof ta);
        dv_token_text(r->tok, v->token_b, tb, sizeof tb);
        snprintf(line, sizeof line, "%s prompt %u step %u: reference %s, device %s (gaps %.1f / %.1f quanta)",
                 shown > 1 ? ";" : "", p + 1, v->step, ta, tb, v->a.gap_quanta, v->b.gap_quanta);
        k = append(buf, cap, k, line);
    }
}
