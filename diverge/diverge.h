/* Divergence analysis (docs/ARCHITECTURE.md, "Divergence reports"): engines run greedy decoding on
 * the same prompt and are compared with a reference (the contract oracle) and with each
 * other: where their greedy tokens first differ, the top candidates on each side and the
 * gap between the two contested tokens in quanta of the 16-bit type; and, teacher-forced
 * on the reference's tokens so every step stays comparable, the logits error per step.
 * A divergence is explained when it is a near-tie (both sides' gaps within
 * DV_NEAR_TIE_QUANTA): summation order can flip it; anything wider is a bug to chase.
 * The report writers (Markdown, JSON, HTML) read the data model below. */
#ifndef KILN_DIVERGE_DIVERGE_H
#define KILN_DIVERGE_DIVERGE_H

#include "base/error.h"
#include "model/engine.h"
#include "text/tok.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define DV_TOPK 5
#define DV_NEAR_TIE_QUANTA 2.0

/* The spacing of the 16-bit type's (GGUF_T_BF16 or GGUF_T_F16) values at magnitude x
 * (the smallest normal's spacing below it). */
double dv_quantum(double x, uint32_t dtype);

typedef struct dv_cand {
    int32_t id;
    float logit;
} dv_cand;

/* The k largest logits, largest first, ties to the lower id, NaN never chosen; returns
 * how many were written (min(k, n)). Never sorts the whole vocabulary. */
uint32_t dv_topk(const float *logits, uint32_t n, dv_cand *out, uint32_t k);

/* One engine's results on one prompt over n_steps greedy steps. */
typedef struct dv_run {
    int32_t *tokens;   /* [n_steps] its own greedy picks */
    float *greedy;     /* [n_steps][n_vocab] logits along its own greedy path */
    float *forced;     /* [n_steps][n_vocab] logits along the reference's tokens */
} dv_run;

/* Runs e on prompt for n_steps steps. ref_tokens NULL: e is the reference (its greedy path
 * is the forced one). Otherwise e is teacher-forced on ref_tokens, then, from its first
 * pick that differs, continues on its own picks (the KV cache rewound there), so both
 * paths cost one pass plus the steps after the divergence. The context must hold
 * n_prompt + n_steps. 0, or -1 with err. */
int dv_run_engine(engine *e, const int32_t *prompt, uint32_t n_prompt, const int32_t *ref_tokens, uint32_t n_steps,
                  dv_run *out, kiln_err *err);
void dv_run_free(dv_run *r);

/* One side of a first divergence. */
typedef struct dv_side {
    dv_cand top[DV_TOPK];
    uint32_t n_top;
    double gap_quanta;  /* its logit of its pick minus that of the other side's pick, in
                         * quanta at its pick's magnitude (>= 0) */
    bool tie;           /* the two contested tokens' logits are exactly equal here */
} dv_side;

typedef struct dv_divergence {
    bool diverged;        /* false: identical to the end */
    uint32_t step;        /* identical tokens before the first that differs */
    int32_t token_a, token_b; /* each side's pick there */
    dv_side a, b;
    bool near_tie;        /* explained: both gaps <= DV_NEAR_TIE_QUANTA */
} dv_divergence;

typedef struct dv_step {
    double max_abs;       /* max |b - a| over the vocabulary (inf for a non-finite logit) */
    double rel;           /* max_abs / max |a| */
    bool top1_agree;
} dv_step;

/* b measured against a (a is the reference side). */
typedef struct dv_comparison {
    dv_divergence div;
    dv_step *steps;       /* [n_steps], teacher-forced */
    uint32_t n_steps;
    double agreement;     /* fraction of forced steps whose top-1 agree */
    uint32_t worst_step;  /* the largest relative error's step */
    double worst_rel, mean_rel, mean_abs;
} dv_comparison;

/* Compares two runs of the same prompt. 0, or -1 (out of memory). */
int dv_compare(const dv_run *a, const dv_run *b, uint32_t n_vocab, uint32_t n_steps, uint32_t dtype,
               dv_comparison *out);
void dv_comparison_free(dv_comparison *c);
/* The verdict rule on one divergence's gaps. */
bool dv_is_near_tie(double gap_a, double gap_b);
/* One side's gap at a contested step: its logit of its pick (mine) minus that of the other
 * side's pick (theirs), in quanta at its pick's magnitude; +inf where no pick (< 0) or the
 * logits are not comparable. With dv_is_near_tie, the one near-tie rule (the whole-model
 * tests use it too). */
double dv_gap_quanta(const float *logits, int32_t mine, int32_t theirs, uint32_t dtype);

/* ---- a whole report ------------------------------------------------------------------- */

typedef struct dv_prompt {
    char *text;
    uint32_t n_tokens;
    int32_t *ref_tokens;      /* [n_steps] the reference's greedy tokens */
    dv_comparison *vs_ref;    /* [n_dev] each device against the reference */
    dv_comparison *pairs;     /* [n_dev * (n_dev - 1) / 2]: (0,1), (0,2), ..., (1,2), ... */
    dv_comparison contract;   /* the other oracle mode against the reference */
    bool has_contract;
} dv_prompt;

typedef struct dv_report {
    const char *model;        /* the model's path */
    const char *ref_name;     /* the reference engine's name */
    const char *other_name;   /* the other oracle mode's name (NULL: not run) */
    const char *ref_mode;     /* "contract" or "f32" */
    uint32_t dtype;           /* GGUF_T_BF16 or GGUF_T_F16: the plans' 16-bit type */
    uint32_t n_vocab, n_steps;
    uint32_t n_dev;
    const char **dev_labels;  /* "vulkan:0" */
    const char **dev_names;   /* the engines' names */
    uint32_t n_prompts;
    dv_prompt *prompts;
    const tokenizer *tok;     /* for token pieces */
} dv_report;

/* Index of pair (i, j), i < j, in dv_prompt.pairs. */
uint32_t dv_pair_index(uint32_t n_dev, uint32_t i, uint32_t j);
/* Whether every divergence of device d (against the reference) is a near-tie. */
bool dv_device_explained(const dv_report *r, uint32_t d);
/* The device's verdict line: explained (identical, or every divergence a near-tie), or
 * NOT explained with where (prompt, step, tokens, gaps) for the first few. */
void dv_verdict(const dv_report *r, uint32_t d, char *buf, size_t cap);
void dv_prompt_free(dv_prompt *p, uint32_t n_dev);

/* The engines of one prompt: the reference, the other oracle mode (may be NULL), devices. */
typedef struct dv_engines {
    engine *ref, *other;
    engine **devs;
    uint32_t n_dev;
} dv_engines;

/* Runs every engine on one prompt's tokens and fills p (text and n_tokens are the
 * caller's). 0, or -1 with err naming the engine that failed. */
int dv_analyze_prompt(const dv_engines *en, const dv_report *r, const int32_t *ids, uint32_t n_ids, dv_prompt *p,
                      kiln_err *err);

/* A token as printable text: its piece with control characters escaped, quoted. */
void dv_token_text(const tokenizer *t, int32_t id, char *buf, size_t cap);

/* Writers. Each returns 0, or -1 with err (a write error, out of memory). */
int dv_write_markdown(const dv_report *r, FILE *f, kiln_err *err);
int dv_write_json(const dv_report *r, const char *path, kiln_err *err);
int dv_write_html(const dv_report *r, const char *path, kiln_err *err);

#endif
