/* Log-probabilities: computed from a logits row, written in chat's and the legacy
 * completions' shapes, and matched to the streamed text they belong to. */
#include "server/api_json.h"

#include <math.h>

/* Keeps the k best (logit, id) pairs in top[0..*m), best first, ties to the lower id
 * (ids arrive in increasing order, so an equal logit never displaces). */
static void keep(int32_t *ids, float *vals, uint32_t k, uint32_t *m, int32_t id, float v) {
    if (*m == k && !(v > vals[k - 1])) return;
    uint32_t j = *m < k ? (*m)++ : k - 1;
    for (; j > 0 && v > vals[j - 1]; j--) ids[j] = ids[j - 1], vals[j] = vals[j - 1];
    ids[j] = id, vals[j] = v;
}

int srv_logprobs(const float *logits, uint32_t n, int32_t chosen, uint32_t k, double *chosen_lp, int32_t *top_ids,
                 double *top_lps, uint32_t *n_top) {
    if (k > SRV_MAX_TOP_LOGPROBS) k = SRV_MAX_TOP_LOGPROBS;
    *n_top = 0;
    if (chosen < 0 || (uint32_t)chosen >= n) return -1;
    double max = -INFINITY;
    float vals[SRV_MAX_TOP_LOGPROBS];
    for (uint32_t i = 0; i < n; i++) {
        if (!isfinite(logits[i])) continue;
        if (logits[i] > max) max = logits[i];
        if (k) keep(top_ids, vals, k, n_top, (int32_t)i, logits[i]);
    }
    if (max == -INFINITY) return -1;
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        if (isfinite(logits[i])) sum += exp((double)logits[i] - max);
    double lse = max + log(sum); /* sum >= 1: the max's own term */
    *chosen_lp = isfinite(logits[chosen]) ? (double)logits[chosen] - lse : -INFINITY;
    for (uint32_t j = 0; j < *n_top; j++) top_lps[j] = (double)vals[j] - lse;
    return 0;
}

/* JSON has no -inf; OpenAI writes this floor for tokens it deems impossible. */
static json_t *logprob(double lp) { return json_real(isfinite(lp) ? lp : -9999.0); }

static json_t *bytes(const srv_logprob_alt *a) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < a->len; i++) json_array_append_new(arr, json_integer((unsigned char)a->text[i]));
    return arr;
}

static json_t *entry(const srv_logprob_alt *a) {
    return json_pack("{s:o,s:o,s:o}", "token", srv_json_text(a->text, a->len), "logprob", logprob(a->logprob),
                     "bytes", bytes(a));
}

json_t *srv_json_logprobs_chat(const srv_token_logprob *lp, size_t n) {
    if (!lp) return json_null();
    json_t *content = json_array();
    for (size_t i = 0; content && i < n; i++) {
        json_t *top = json_array(), *e = entry(&lp[i].tok);
        for (uint32_t j = 0; top && j < lp[i].n_top; j++) json_array_append_new(top, entry(&lp[i].top[j]));
        if (e && top) json_object_set_new(e, "top_logprobs", top);
        else json_decref(top);
        if (json_array_append_new(content, e)) return json_decref(content), NULL;
    }
    return json_pack("{s:o}", "content", content);
}

json_t *srv_json_logprobs_legacy(const srv_token_logprob *lp, size_t n, size_t text_offset) {
    if (!lp) return json_null();
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (size_t i = 0; toks && lps && tops && offs && i < n; i++) {
        json_array_append_new(toks, srv_json_text(lp[i].tok.text, lp[i].tok.len));
        json_array_append_new(lps, logprob(lp[i].tok.logprob));
        json_t *top = json_object();
        for (uint32_t j = 0; top && j < lp[i].n_top; j++) {
            json_t *key = srv_json_text(lp[i].top[j].text, lp[i].top[j].len);
            if (key) json_object_set_new(top, json_string_value(key), logprob(lp[i].top[j].logprob));
            json_decref(key);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)text_offset));
        text_offset += lp[i].tok.len;
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops, "text_offset",
                     offs);
}

size_t srv_spans_ready(const srv_token_span *span, size_t n, size_t emitted) {
    size_t k = 0, last = 0;
    while (k < n && span[k].end <= emitted) {
        k++;
        if (span[k - 1].end > span[k - 1].start) last = k;
    }
    return last;
}

size_t srv_spans_rest(const srv_token_span *span, size_t n, bool stopped, size_t emitted) {
    size_t k = 0;
    while (k < n && (!stopped || span[k].start < emitted)) k++;
    return k;
}
