/* The divergence report as one JSON document (docs/diverge.schema.json describes it). */
#include "base/error.h"
#include "diverge/diverge.h"
#include "gguf/gguf.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>

/* JSON has no infinities or NaNs: those become null. */
static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *token(const dv_report *r, int32_t id) {
    char t[320];
    dv_token_text(r->tok, id, t, sizeof t);
    return json_pack("{s:I,s:s}", "id", (json_int_t)id, "text", t);
}

static json_t *side(const dv_report *r, const dv_side *s) {
    json_t *top = json_array();
    for (uint32_t i = 0; i < s->n_top; i++) {
        json_t *c = token(r, s->top[i].id);
        json_object_set_new(c, "logit", num(s->top[i].logit));
        json_array_append_new(top, c);
    }
    return json_pack("{s:o,s:o,s:b}", "top", top, "gap_quanta", num(s->gap_quanta), "tie", (int)s->tie);
}

static json_t *comparison(const dv_report *r, const char *a, const char *b, const dv_comparison *c) {
    const dv_divergence *v = &c->div;
    json_t *div = json_null();
    if (v->diverged)
        div = json_pack("{s:I,s:o,s:o,s:o,s:o,s:b}", "step", (json_int_t)v->step, "token_a", token(r, v->token_a),
                        "token_b", token(r, v->token_b), "side_a", side(r, &v->a), "side_b", side(r, &v->b),
                        "near_tie", (int)v->near_tie);
    json_t *steps = json_array();
    for (uint32_t s = 0; s < c->n_steps; s++)
        json_array_append_new(steps, json_pack("{s:o,s:o,s:b}", "max_abs", num(c->steps[s].max_abs), "rel",
                                               num(c->steps[s].rel), "top1_agree", (int)c->steps[s].top1_agree));
    return json_pack("{s:s,s:s,s:I,s:b,s:o,s:{s:o,s:o,s:I,s:o,s:o,s:o}}", "a", a, "b", b, "identical_tokens",
                     (json_int_t)v->step, "diverged", (int)v->diverged, "divergence", div, "forced", "steps", steps,
                     "agreement", num(c->agreement), "worst_step", (json_int_t)c->worst_step, "worst_rel",
                     num(c->worst_rel), "mean_rel", num(c->mean_rel), "mean_max_abs", num(c->mean_abs));
}

static json_t *prompt(const dv_report *r, const dv_prompt *p) {
    json_t *toks = json_array(), *vs = json_array(), *pairs = json_array();
    for (uint32_t s = 0; s < r->n_steps; s++) json_array_append_new(toks, token(r, p->ref_tokens[s]));
    for (uint32_t d = 0; d < r->n_dev; d++)
        json_array_append_new(vs, comparison(r, "reference", r->dev_labels[d], &p->vs_ref[d]));
    for (uint32_t i = 0; i < r->n_dev; i++)
        for (uint32_t j = i + 1; j < r->n_dev; j++)
            json_array_append_new(pairs, comparison(r, r->dev_labels[i], r->dev_labels[j],
                                                    &p->pairs[dv_pair_index(r->n_dev, i, j)]));
    json_t *o = json_pack("{s:s,s:I,s:o,s:o,s:o}", "text", p->text, "n_tokens", (json_int_t)p->n_tokens,
                          "reference_tokens", toks, "vs_reference", vs, "pairs", pairs);
    if (o && p->has_contract)
        json_object_set_new(o, "contract_cost", comparison(r, "reference", r->other_name, &p->contract));
    return o;
}

static json_t *devices(const dv_report *r) {
    json_t *a = json_array();
    char line[4096];
    for (uint32_t d = 0; d < r->n_dev; d++) {
        dv_verdict(r, d, line, sizeof line);
        json_t *where = json_array();
        for (uint32_t p = 0; p < r->n_prompts; p++) {
            const dv_divergence *v = &r->prompts[p].vs_ref[d].div;
            if (v->diverged && !v->near_tie)
                json_array_append_new(where, json_pack("{s:I,s:I,s:o,s:o}", "prompt", (json_int_t)p + 1, "step",
                                                       (json_int_t)v->step, "reference_token", token(r, v->token_a),
                                                       "device_token", token(r, v->token_b)));
        }
        json_array_append_new(a, json_pack("{s:s,s:s,s:b,s:s,s:o}", "device", r->dev_labels[d], "name",
                                           r->dev_names[d], "explained", (int)dv_device_explained(r, d), "verdict",
                                           line, "unexplained", where));
    }
    return a;
}

int dv_write_json(const dv_report *r, const char *path, kiln_err *err) {
    json_t *ps = json_array();
    for (uint32_t p = 0; p < r->n_prompts; p++) json_array_append_new(ps, prompt(r, &r->prompts[p]));
    json_t *doc =
        json_pack("{s:s,s:s,s:s,s:o,s:s,s:I,s:I,s:f,s:o,s:o}", "tool", "kiln diverge", "model", r->model, "reference",
                  r->ref_name, "other_oracle", r->other_name ? json_string(r->other_name) : json_null(), "dtype",
                  r->dtype == GGUF_T_F16 ? "f16" : "bf16", "steps", (json_int_t)r->n_steps, "n_vocab",
                  (json_int_t)r->n_vocab, "near_tie_quanta", DV_NEAR_TIE_QUANTA, "devices", devices(r), "prompts", ps);
    json_t *mode = doc ? json_string(r->ref_mode) : NULL;
    if (!doc || !mode) {
        json_decref(doc);
        return kiln_fail(err, KILN_ERR_NOMEM, "cannot build the JSON report (out of memory or text that is not UTF-8)"),
               -1;
    }
    json_object_set_new(doc, "reference_mode", mode);
    int rc = json_dump_file(doc, path, JSON_INDENT(1) | JSON_ENSURE_ASCII);
    json_decref(doc);
    if (rc) return kiln_fail(err, KILN_ERR_UNAVAILABLE, "%s: cannot write the JSON report", path), -1;
    return 0;
}
