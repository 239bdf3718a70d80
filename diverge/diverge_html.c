/* The divergence report as one self-contained HTML page: verdicts, and per prompt an
 * inline SVG plot of each engine's logits relative error per step (log scale) and a strip
 * of its top-1 agreement. No script and nothing fetched from elsewhere. */
#include "base/error.h"
#include "diverge/diverge.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define PLOT_W 720
#define PLOT_H 240
#define MARGIN 56
#define LOG_FLOOR (-8.0) /* relative errors below 1e-8 (and exact zeros) sit on the floor */

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"};
#define N_COLORS (sizeof colors / sizeof colors[0])

static void put_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

/* The comparisons a prompt's plots show: each device against the reference, then the
 * other oracle mode. */
static uint32_t plotted(const dv_report *r, const dv_prompt *p, const dv_comparison **cs, const char **names) {
    uint32_t n = 0;
    for (uint32_t d = 0; d < r->n_dev; d++) cs[n] = &p->vs_ref[d], names[n++] = r->dev_labels[d];
    if (p->has_contract) cs[n] = &p->contract, names[n++] = "other oracle mode";
    return n;
}

static double x_of(uint32_t s, uint32_t steps) {
    return MARGIN + (steps > 1 ? (double)s / (steps - 1) : 0.5) * (PLOT_W - 2 * MARGIN);
}

static double y_of(double rel) {
    double l = rel > 0 ? log10(rel) : LOG_FLOOR;
    if (!isfinite(l) || l > 0) l = 0; /* an infinite error sits on the ceiling, 1 */
    if (l < LOG_FLOOR) l = LOG_FLOOR;
    return 20 + (-l / -LOG_FLOOR) * (PLOT_H - 50);
}

static void error_plot(FILE *f, const dv_report *r, const dv_comparison **cs, const char **names, uint32_t n) {
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" role=\"img\">\n", PLOT_W, PLOT_H);
    for (int e = 0; e >= (int)LOG_FLOOR; e -= 2) {
        double y = y_of(pow(10, e));
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"4\" y=\"%.1f\" font-size=\"11\">1e%d</text>\n",
                MARGIN, y, PLOT_W - MARGIN, y, y + 4, e);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\">step (0..%u), teacher-forced</text>\n", PLOT_W / 2 - 60,
            PLOT_H - 8, r->n_steps - 1);
    for (uint32_t k = 0; k < n; k++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", colors[k % N_COLORS]);
        for (uint32_t s = 0; s < r->n_steps; s++)
            fprintf(f, "%.1f,%.1f ", x_of(s, r->n_steps), y_of(cs[k]->steps[s].rel));
        fprintf(f, "\"/>\n<text x=\"%d\" y=\"%u\" font-size=\"11\" fill=\"%s\">", PLOT_W - 200,
                14 + 12 * k, colors[k % N_COLORS]);
        put_escaped(f, names[k]);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
}

static void agreement_strip(FILE *f, const dv_report *r, const dv_comparison **cs, const char **names, uint32_t n) {
    uint32_t cell = r->n_steps ? (PLOT_W - 2 * MARGIN) / r->n_steps : 1;
    if (!cell) cell = 1;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%u\" role=\"img\">\n", PLOT_W,
            16 * n + 4);
    for (uint32_t k = 0; k < n; k++) {
        fprintf(f, "<text x=\"0\" y=\"%u\" font-size=\"10\">", 16 * k + 12);
        put_escaped(f, names[k]);
        fputs("</text>\n", f);
        for (uint32_t s = 0; s < r->n_steps; s++)
            fprintf(
                f, "<rect x=\"%u\" y=\"%u\" width=\"%u\" height=\"14\" fill=\"%s\"><title>step %u: %s</title></rect>\n",
                MARGIN + 60 + s * cell, 16 * k + 2, cell > 1 ? cell - 1 : 1,
                cs[k]->steps[s].top1_agree ? "#4caf50" : "#e53935", s,
                cs[k]->steps[s].top1_agree ? "top-1 agrees" : "top-1 differs");
    }
    fputs("</svg>\n", f);
}

static void write_prompt(FILE *f, const dv_report *r, uint32_t i, const dv_comparison **cs, const char **names) {
    const dv_prompt *p = &r->prompts[i];
    fprintf(f, "<h2>Prompt %u (%u tokens)</h2>\n<blockquote>", i + 1, p->n_tokens);
    put_escaped(f, p->text);
    fputs("</blockquote>\n<ul>\n", f);
    uint32_t n = plotted(r, p, cs, names);
    for (uint32_t k = 0; k < n; k++) {
        const dv_divergence *v = &cs[k]->div;
        fputs("<li>", f);
        put_escaped(f, names[k]);
        if (!v->diverged) fputs(": identical to the end", f);
        else
            fprintf(f, ": %u identical tokens, then %s (gaps %.2f / %.2f quanta)", v->step,
                    v->near_tie ? "a near-tie" : "<strong>NOT a near-tie</strong>", v->a.gap_quanta, v->b.gap_quanta);
        fputs("</li>\n", f);
    }
    fputs("</ul>\n<h3>Logits relative error per step</h3>\n", f);
    error_plot(f, r, cs, names, n);
    fputs("<h3>Top-1 agreement per step</h3>\n", f);
    agreement_strip(f, r, cs, names, n);
}

int dv_write_html(const dv_report *r, const char *path, kiln_err *err) {
    FILE *f = fopen(path, "w");
    if (!f) return kiln_fail(err, KILN_ERR_INVALID, "%s: %s", path, strerror(errno)), -1;
    const dv_comparison *cs[r->n_dev + 1];
    const char *names[r->n_dev + 1];
    char line[4096];
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>kiln diverge</title>\n"
          "<style>body{font-family:sans-serif;max-width:60em;margin:1em auto}svg{display:block;margin:0.5em 0}"
          ".bad{color:#c62828;font-weight:bold}.good{color:#2e7d32}</style></head><body>\n<h1>kiln diverge: ",
          f);
    put_escaped(f, r->model);
    fputs("</h1>\n<p>Reference: ", f);
    put_escaped(f, r->ref_name);
    fprintf(f, "; %u greedy steps per prompt; a divergence is explained when both sides' gaps are within %g quanta."
               "</p>\n<h2>Verdicts</h2>\n<ul>\n",
            r->n_steps, DV_NEAR_TIE_QUANTA);
    if (!r->n_dev) fputs("<li>no devices: only the oracle ran</li>\n", f);
    for (uint32_t d = 0; d < r->n_dev; d++) {
        dv_verdict(r, d, line, sizeof line);
        fprintf(f, "<li class=\"%s\">", dv_device_explained(r, d) ? "good" : "bad");
        put_escaped(f, line);
        fputs("</li>\n", f);
    }
    fputs("</ul>\n", f);
    for (uint32_t i = 0; i < r->n_prompts; i++) write_prompt(f, r, i, cs, names);
    fputs("</body></html>\n", f);
    bool bad = ferror(f) != 0;
    if (fclose(f) || bad) return kiln_fail(err, KILN_ERR_UNAVAILABLE, "%s: write error", path), -1;
    return 0;
}
