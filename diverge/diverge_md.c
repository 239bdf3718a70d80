/* The divergence report as Markdown: verdicts first, then a summary table, then per
 * prompt the first divergences (top candidates on each side) and the per-step errors. */
#include "base/error.h"
#include "diverge/diverge.h"
#include "gguf/gguf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *dtype_name(uint32_t t) { return t == GGUF_T_F16 ? "f16" : "bf16"; }

/* The name of the side a comparison measures against, and of the measured side. */
typedef struct cmp_ref {
    const dv_comparison *c;
    const char *a, *b;
} cmp_ref;

/* One row of the summary: the comparisons of one engine across prompts, col[prompt]. */
static void summary_row(FILE *f, const dv_report *r, const char *a, const char *b, const dv_comparison *col) {
    uint32_t identical = 0, worst_p = 0;
    double agree = 0, mean = 0, mean_abs = 0, worst = -1;
    for (uint32_t p = 0; p < r->n_prompts; p++) {
        identical += !col[p].div.diverged;
        agree += col[p].agreement, mean += col[p].mean_rel, mean_abs += col[p].mean_abs;
        if (col[p].worst_rel > worst) worst = col[p].worst_rel, worst_p = p;
    }
    double n = r->n_prompts;
    fprintf(f, "| %s | %s | %u/%u | %.1f%% | %.3g | %.3g (prompt %u, step %u) | %.3g |\n", b, a, identical,
            r->n_prompts, 100 * agree / n, mean / n, worst, worst_p + 1, col[worst_p].worst_step, mean_abs / n);
}

static void write_summary(FILE *f, const dv_report *r) {
    dv_comparison *col = r->n_prompts ? malloc(r->n_prompts * sizeof *col) : NULL;
    if (!col) return;
    fprintf(f, "## Summary (teacher-forced on the reference's tokens)\n\n"
               "| engine | against | identical to the end | top-1 agreement | mean rel. error | worst rel. error | "
               "mean max-abs error |\n|---|---|---|---|---|---|---|\n");
    for (uint32_t d = 0; d < r->n_dev; d++) {
        for (uint32_t p = 0; p < r->n_prompts; p++) col[p] = r->prompts[p].vs_ref[d];
        summary_row(f, r, "reference", r->dev_labels[d], col);
        for (uint32_t j = d + 1; j < r->n_dev; j++) {
            for (uint32_t p = 0; p < r->n_prompts; p++) col[p] = r->prompts[p].pairs[dv_pair_index(r->n_dev, d, j)];
            summary_row(f, r, r->dev_labels[d], r->dev_labels[j], col);
        }
    }
    if (r->other_name) {
        for (uint32_t p = 0; p < r->n_prompts; p++) col[p] = r->prompts[p].contract;
        summary_row(f, r, "reference", "other oracle mode (the contract's cost)", col);
    }
    fputc('\n', f);
    free(col);
}

static void write_divergence(FILE *f, const dv_report *r, const cmp_ref *cr) {
    const dv_divergence *v = &cr->c->div;
    char ta[320], tb[320];
    dv_token_text(r->tok, v->token_a, ta, sizeof ta);
    dv_token_text(r->tok, v->token_b, tb, sizeof tb);
    fprintf(f, "#### %s vs %s: first divergence at step %u (%s)\n\n", cr->b, cr->a, v->step,
            v->near_tie ? "a near-tie" : "NOT a near-tie");
    fprintf(f, "%s picks %s, %s picks %s; gap %.2f quanta on %s's side%s, %.2f on %s's%s.\n\n", cr->a, ta, cr->b, tb,
            v->a.gap_quanta, cr->a, v->a.tie ? " (an exact tie)" : "", v->b.gap_quanta, cr->b,
            v->b.tie ? " (an exact tie)" : "");
    fprintf(f, "| rank | %s | logit | %s | logit |\n|---|---|---|---|---|\n", cr->a, cr->b);
    uint32_t n = v->a.n_top > v->b.n_top ? v->a.n_top : v->b.n_top;
    for (uint32_t i = 0; i < n; i++) {
        char xa[320] = "", xb[320] = "", la[32] = "", lb[32] = "";
        if (i < v->a.n_top)
            dv_token_text(r->tok, v->a.top[i].id, xa, sizeof xa), snprintf(la, sizeof la, "%.6g", v->a.top[i].logit);
        if (i < v->b.n_top)
            dv_token_text(r->tok, v->b.top[i].id, xb, sizeof xb), snprintf(lb, sizeof lb, "%.6g", v->b.top[i].logit);
        fprintf(f, "| %u | %s | %s | %s | %s |\n", i + 1, xa, la, xb, lb);
    }
    fputc('\n', f);
}

static void write_steps(FILE *f, const dv_report *r, const dv_prompt *p, const cmp_ref *cs, uint32_t n) {
    fprintf(f, "| step | reference token |");
    for (uint32_t i = 0; i < n; i++) fprintf(f, " %s max-abs | rel. | top-1 |", cs[i].b);
    fprintf(f, "\n|---|---|");
    for (uint32_t i = 0; i < n; i++) fprintf(f, "---|---|---|");
    fputc('\n', f);
    for (uint32_t s = 0; s < r->n_steps; s++) {
        char t[320];
        dv_token_text(r->tok, p->ref_tokens[s], t, sizeof t);
        fprintf(f, "| %u | %s |", s, t);
        for (uint32_t i = 0; i < n; i++) {
            const dv_step *st = &cs[i].c->steps[s];
            fprintf(f, " %.3g | %.3g | %s |", st->max_abs, st->rel, st->top1_agree ? "yes" : "**no**");
        }
        fputc('\n', f);
    }
    fputc('\n', f);
}

static void write_prompt(FILE *f, const dv_report *r, uint32_t i, cmp_ref *cs) {
    const dv_prompt *p = &r->prompts[i];
    fprintf(f, "## Prompt %u (%u tokens)\n\n> %s\n\n", i + 1, p->n_tokens, p->text);
    uint32_t n = 0;
    for (uint32_t d = 0; d < r->n_dev; d++) cs[n++] = (cmp_ref){&p->vs_ref[d], "reference", r->dev_labels[d]};
    for (uint32_t a = 0; a < r->n_dev; a++)
        for (uint32_t b = a + 1; b < r->n_dev; b++)
            cs[n++] = (cmp_ref){&p->pairs[dv_pair_index(r->n_dev, a, b)], r->dev_labels[a], r->dev_labels[b]};
    if (p->has_contract) cs[n++] = (cmp_ref){&p->contract, "reference", "other oracle mode"};
    fprintf(f, "| engine | against | identical tokens | top-1 agreement | mean rel. error | worst rel. error (step) |\n"
               "|---|---|---|---|---|---|\n");
    for (uint32_t k = 0; k < n; k++) {
        const dv_comparison *c = cs[k].c;
        char same[48];
        if (c->div.diverged) snprintf(same, sizeof same, "%u", c->div.step);
        else snprintf(same, sizeof same, "identical to the end");
        fprintf(f, "| %s | %s | %s | %.1f%% | %.3g | %.3g (%u) |\n", cs[k].b, cs[k].a, same, 100 * c->agreement,
                c->mean_rel, c->worst_rel, c->worst_step);
    }
    fputc('\n', f);
    for (uint32_t k = 0; k < n; k++)
        if (cs[k].c->div.diverged) write_divergence(f, r, &cs[k]);
    if (n) write_steps(f, r, p, cs, n);
}

int dv_write_markdown(const dv_report *r, FILE *f, kiln_err *err) {
    uint32_t ncmp = r->n_dev + r->n_dev * (r->n_dev ? r->n_dev - 1 : 0) / 2 + 1;
    cmp_ref *cs = malloc(ncmp * sizeof *cs);
    char *line = malloc(4096);
    if (!cs || !line) {
        free(cs);
        free(line);
        return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), -1;
    }
    fprintf(f, "# kiln diverge: %s\n\n", r->model);
    fprintf(f, "Reference: %s (%s mode). 16-bit type %s; %u greedy steps per prompt; a divergence is explained "
               "when the two contested tokens are within %g quanta on both sides.\n",
            r->ref_name, r->ref_mode, dtype_name(r->dtype), r->n_steps, DV_NEAR_TIE_QUANTA);
    if (r->other_name) fprintf(f, "Other oracle mode (the contract's own cost): %s.\n", r->other_name);
    fprintf(f, "\n## Verdicts\n\n");
    if (!r->n_dev) fprintf(f, "- no devices: only the oracle ran\n");
    for (uint32_t d = 0; d < r->n_dev; d++) {
        dv_verdict(r, d, line, 4096);
        fprintf(f, "- %s (%s)\n", line, r->dev_names[d]);
    }
    fputc('\n', f);
    write_summary(f, r);
    for (uint32_t i = 0; i < r->n_prompts; i++) write_prompt(f, r, i, cs);
    free(cs);
    free(line);
    if (fflush(f) || ferror(f))
        return kiln_fail(err, KILN_ERR_UNAVAILABLE, "writing the report: %s", strerror(errno)), -1;
    return 0;
}
