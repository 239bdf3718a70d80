/* kiln diverge MODEL: greedy decoding on the reference oracle and on each device, side by
 * side, with a verdict per device (diverge/diverge.h does the analysis and writes the
 * reports; this file parses flags, reads prompts and opens the engines). */
#include "base/error.h"
#include "cli/cli.h"
#include "devices/devices.h"
#include "diverge/diverge.h"
#include "oracle/oracle.h"
#include "plan/plan.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kiln diverge MODEL.gguf [--device D ...] [--prompts FILE] [-n N] [flags]\n"
    "  --device D          cpu (the oracle itself) | vulkan:N | cuda:N, repeatable (default: every Vulkan\n"
    "                      and CUDA device kiln probe lists)\n"
    "  --prompts FILE      one prompt per line, or JSON lines {\"prompt\": \"...\"} (default: 6 built in)\n"
    "  -n N                greedy steps per prompt (default 32)\n"
    "  --oracle-mode M     the reference: contract (default) | f32; the other mode runs beside it to show\n"
    "                      the contract's own cost\n"
    "  --dtype T           bf16 | f16: the 16-bit type (default: the file's)\n"
    "  --json FILE         also write the report as JSON (schema: docs/diverge.schema.json)\n"
    "  --html FILE         also write an HTML page with plots (inline SVG, no script)\n"
    "  --caps LIST         --caps overrides for every GPU device (kiln probe --help); debug-fault is a\n"
    "                      test switch that makes the logits head deliberately wrong\n"
    "The Markdown report goes to stdout. Exit status: 0 when every device's divergences are near-ties\n"
    "(<= 2 quanta of the 16-bit type) or there are none; 3 when some divergence is not explained (a bug to\n"
    "chase); 1 for a model, prompt file or device that fails; 2 for a bad flag or value.\n";

#define MAX_DEVICES 16
#define EXIT_UNEXPLAINED 3

static const char *const default_prompts[] = {
    "Once upon a time, there was a little girl named Lily.",
    "The cat sat on the mat and looked at the",
    "Tom and his dog went to the park. They",
    "1, 2, 3, 4, 5, 6,",
    "Q: What is the capital of France?\nA:",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
};

typedef struct opts {
    const char *model, *prompts_file, *json, *html, *caps;
    const char *devices[MAX_DEVICES];
    uint32_t n_devices, n_steps;
    orc_options orc;
} opts;

typedef struct prompt_list {
    char **text;
    uint32_t n, cap;
} prompt_list;

/* ---- flags --------------------------------------------------------------------------------- */

/* 0, 1 (--help printed) or EXIT_USAGE (printed). */
static int parse_flag(opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(usage, stdout), 1;
    static const char *const with_value[] = {"--device", "--prompts", "-n",     "--oracle-mode",
                                             "--dtype",  "--json",    "--html", "--caps"};
    size_t k = 0, nk = sizeof with_value / sizeof with_value[0];
    while (k < nk && strcmp(a, with_value[k])) k++;
    if (k == nk) {
        if (a[0] == '-' && a[1]) return cli_usage_error(usage, "unknown flag '%s'", a);
        if (o->model) return cli_usage_error(usage, "more than one model given");
        o->model = a;
        return 0;
    }
    const char *v = cli_flag_value(argc, argv, i);
    if (!v) return cli_usage_error(usage, "%s needs a value", a);
    uint64_t u;
    kiln_err msg = {0};
    switch (k) {
    case 0:
        dev_label dl;
        if (!dev_parse(v, false, &dl))
            return cli_usage_error(usage, "--device %s: expected cpu, vulkan:N or cuda:N", v);
        if (o->n_devices == MAX_DEVICES) return cli_usage_error(usage, "at most %d devices", MAX_DEVICES);
        o->devices[o->n_devices++] = v;
        break;
    case 1: o->prompts_file = v; break;
    case 2:
        if (!cli_parse_u64(v, 1, 4096, &u)) return cli_usage_error(usage, "-n: '%s' is not a step count in 1..4096", v);
        o->n_steps = (uint32_t)u;
        break;
    case 3:
        if (!strcmp(v, "contract")) o->orc.mode = ORC_CONTRACT;
        else if (!strcmp(v, "f32")) o->orc.mode = ORC_F32;
        else return cli_usage_error(usage, "--oracle-mode: expected contract or f32, not '%s'", v);
        break;
    case 4:
        if (!strcmp(v, "bf16")) o->orc.dtype = GGUF_T_BF16;
        else if (!strcmp(v, "f16")) o->orc.dtype = GGUF_T_F16;
        else return cli_usage_error(usage, "--dtype: expected bf16 or f16, not '%s'", v);
        break;
    case 5: o->json = v; break;
    case 6: o->html = v; break;
    case 7:
        if (rt_caps_override_check(v, &msg)) return cli_usage_error(usage, "--caps: %s", msg.msg);
        o->caps = v;
        break;
    }
    return 0;
}

/* ---- prompts ------------------------------------------------------------------------------- */

static int add_prompt(prompt_list *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? l->cap * 2 : 8;
        char **t = realloc(l->text, cap * sizeof *t);
        if (!t) return -1;
        l->text = t, l->cap = cap;
    }
    if (!(l->text[l->n] = strndup(s, n))) return -1;
    l->n++;
    return 0;
}

static void free_prompts(prompt_list *l) {
    for (uint32_t i = 0; i < l->n; i++) free(l->text[i]);
    free(l->text);
}

/* One line of a prompts file: a JSON object with a string "prompt", or the text itself. */
static int parse_line(prompt_list *l, const char *path, unsigned lineno, const char *line, size_t n) {
    if (line[0] != '{') return add_prompt(l, line, n) ? cli_fail("out of memory") : 0;
    json_error_t je;
    json_t *o = json_loadb(line, n, 0, &je);
    json_t *p = o ? json_object_get(o, "prompt") : NULL;
    int rc = 0;
    if (!o) rc = cli_fail("%s:%u: bad JSON: %s", path, lineno, je.text);
    else if (!json_is_string(p)) rc = cli_fail("%s:%u: expected {\"prompt\": \"...\"}", path, lineno);
    else if (add_prompt(l, json_string_value(p), json_string_length(p))) rc = cli_fail("out of memory");
    json_decref(o);
    return rc;
}

static int read_prompts(const char *path, prompt_list *l) {
    FILE *f = fopen(path, "r");
    if (!f) return cli_fail("%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    unsigned lineno = 0;
    int rc = 0;
    while (!rc && (n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        if (n > 0) rc = parse_line(l, path, lineno, line, (size_t)n);
    }
    if (!rc && ferror(f)) rc = cli_fail("%s: read error", path);
    if (!rc && !l->n) rc = cli_fail("%s: no prompts in the file", path);
    free(line);
    fclose(f);
    return rc;
}

/* ---- engines ------------------------------------------------------------------------------- */

typedef struct session {
    model *m;
    tokenizer *t;
    engine *ref, *other;
    engine *devs[MAX_DEVICES];
    rt_device *rt[MAX_DEVICES];
    const char *labels[MAX_DEVICES], *names[MAX_DEVICES];
    char label_buf[MAX_DEVICES][24];
    uint32_t n_dev;
} session;

/* Every CUDA and Vulkan device the probe finds (a missing driver is no device). */
static void default_devices(session *s) {
    dev_found found[1 + 2 * DEV_MAX_PER_BACKEND];
    uint32_t n = 0;
    char note[640];
    kiln_err why;
    dev_enumerate(found, sizeof found / sizeof found[0], &n, false, note, sizeof note, &why);
    for (uint32_t i = 0; i < n && s->n_dev < MAX_DEVICES; i++)
        snprintf(s->label_buf[s->n_dev++], sizeof s->label_buf[0], "%s", found[i].label);
}

static int open_device(session *s, uint32_t i, const opts *o, uint32_t n_ctx) {
    kiln_err err = {0};
    const char *label = s->label_buf[i];
    s->labels[i] = label;
    dev_label dl = {DEV_CPU, 0};
    dev_parse(label, false, &dl); /* checked when parsed, or found by dev_enumerate */
    if (dl.kind == DEV_CPU) {
        orc_options oo = o->orc;
        oo.n_ctx = n_ctx;
        s->devs[i] = orc_create(s->m, &oo, &err);
    } else {
        s->rt[i] = dev_open(dl, o->caps, &err);
        if (!s->rt[i]) return cli_fail("--device %s: %s", label, err.msg);
        s->devs[i] = plan_create(s->m, s->rt[i], o->orc.dtype, n_ctx, 0, &err);
    }
    if (!s->devs[i]) return cli_fail("%s on %s: %s", o->model, label, err.msg);
    s->names[i] = s->devs[i]->name;
    return 0;
}

static int open_engines(session *s, const opts *o, uint32_t n_ctx) {
    kiln_err err = {0};
    orc_options ro = o->orc, oo = o->orc;
    ro.n_ctx = oo.n_ctx = n_ctx;
    oo.mode = ro.mode == ORC_CONTRACT ? ORC_F32 : ORC_CONTRACT;
    if (!(s->ref = orc_create(s->m, &ro, &err)) || !(s->other = orc_create(s->m, &oo, &err)))
        return cli_fail("%s: %s", o->model, err.msg);
    for (uint32_t i = 0; i < o->n_devices; i++)
        snprintf(s->label_buf[i], sizeof s->label_buf[0], "%s", o->devices[i]);
    s->n_dev = o->n_devices;
    if (!o->n_devices) default_devices(s);
    for (uint32_t i = 0; i < s->n_dev; i++)
        if (open_device(s, i, o, n_ctx)) return EXIT_BADFILE;
    return 0;
}

static void close_session(session *s) {
    for (uint32_t i = 0; i < MAX_DEVICES; i++) {
        engine_destroy(s->devs[i]);
        if (s->rt[i]) s->rt[i]->ops->destroy(s->rt[i]);
    }
    engine_destroy(s->other);
    engine_destroy(s->ref);
    tok_free(s->t);
    model_free(s->m);
}

/* ---- the run ------------------------------------------------------------------------------- */

typedef struct tokenized {
    int32_t *ids;
    uint32_t n;
} tokenized;

/* Tokenizes every prompt; the context the engines need. 0, or 1 (printed). */
static int tokenize_all(const session *s, const prompt_list *pl, tokenized *tk, uint32_t n_steps, uint32_t *n_ctx) {
    uint32_t longest = 0;
    for (uint32_t i = 0; i < pl->n; i++) {
        if (cli_tokenize_prompt(s->t, pl->text[i], strlen(pl->text[i]), true, &tk[i].ids, &tk[i].n)) return 1;
        if (!tk[i].n)
            return cli_fail("prompt %u is empty and the model adds no BOS token: nothing to start from", i + 1);
        if (tk[i].n > longest) longest = tk[i].n;
    }
    uint64_t need = ((uint64_t)longest + n_steps + 63) / 64 * 64;
    uint32_t train = s->m->hp.n_ctx_train;
    if (train && need > train) need = (uint64_t)longest + n_steps;
    if (train && need > train)
        return cli_fail("the longest prompt (%u tokens) and %u steps exceed the model's context of %u", longest,
                        n_steps, train);
    *n_ctx = (uint32_t)need;
    return 0;
}

static int analyze(session *s, dv_report *r, const prompt_list *pl, const tokenized *tk) {
    dv_engines en = {s->ref, s->other, s->devs, s->n_dev};
    kiln_err err = {0};
    for (uint32_t i = 0; i < pl->n; i++) {
        fprintf(stderr, "kiln diverge: prompt %u/%u (%u tokens), %u steps on %u engines\n", i + 1, pl->n, tk[i].n,
                r->n_steps, s->n_dev + 2);
        r->prompts[i].n_tokens = tk[i].n;
        if (!(r->prompts[i].text = strdup(pl->text[i]))) return cli_fail("out of memory");
        r->n_prompts = i + 1;
        if (dv_analyze_prompt(&en, r, tk[i].ids, tk[i].n, &r->prompts[i], &err))
            return cli_fail("prompt %u: %s", i + 1, err.msg);
    }
    return 0;
}

static int write_reports(const dv_report *r, const opts *o) {
    kiln_err err = {0};
    if (dv_write_markdown(r, stdout, &err)) return cli_fail("%s", err.msg);
    if (o->json && dv_write_json(r, o->json, &err)) return cli_fail("%s", err.msg);
    if (o->html && dv_write_html(r, o->html, &err)) return cli_fail("%s", err.msg);
    for (uint32_t d = 0; d < r->n_dev; d++)
        if (!dv_device_explained(r, d)) return EXIT_UNEXPLAINED;
    return 0;
}

static int run(const opts *o, const prompt_list *pl) {
    session s = {0};
    dv_report r = {.model = o->model, .ref_mode = orc_mode_name(o->orc.mode), .n_steps = o->n_steps};
    tokenized *tk = calloc(pl->n, sizeof *tk);
    r.prompts = calloc(pl->n, sizeof *r.prompts);
    kiln_err err = {0};
    uint32_t n_ctx = 0;
    int rc = 0;
    if (!tk || !r.prompts) rc = cli_fail("out of memory");
    else if (!(s.m = model_load(o->model, &err))) rc = cli_fail("%s", err.msg);
    else if (!(s.t = tok_load(s.m->file, &err))) rc = cli_fail("%s: %s", o->model, err.msg);
    else if (tok_n_vocab(s.t) != s.m->hp.n_vocab)
        rc = cli_fail("%s: the tokenizer has %u tokens but the model's vocab is %u", o->model, tok_n_vocab(s.t),
                      s.m->hp.n_vocab);
    if (!rc) rc = tokenize_all(&s, pl, tk, o->n_steps, &n_ctx);
    if (!rc) rc = open_engines(&s, o, n_ctx);
    if (!rc) {
        r.ref_name = s.ref->name, r.other_name = s.other->name, r.tok = s.t;
        r.dtype = o->orc.dtype ? o->orc.dtype : s.m->file_dtype == GGUF_T_F16 ? GGUF_T_F16 : GGUF_T_BF16;
        r.n_vocab = s.m->hp.n_vocab, r.n_dev = s.n_dev, r.dev_labels = s.labels, r.dev_names = s.names;
        rc = analyze(&s, &r, pl, tk);
    }
    if (!rc) rc = write_reports(&r, o);
    for (uint32_t i = 0; r.prompts && i < r.n_prompts; i++) dv_prompt_free(&r.prompts[i], r.n_dev);
    for (uint32_t i = 0; tk && i < pl->n; i++) free(tk[i].ids);
    free(r.prompts);
    free(tk);
    close_session(&s);
    return rc;
}

int cmd_diverge(int argc, char **argv) {
    opts o = {.n_steps = 32, .orc = {.mode = ORC_CONTRACT}};
    for (int i = 1; i < argc; i++) {
        int r = parse_flag(&o, argc, argv, &i);
        if (r == 1) return 0;
        if (r) return r;
    }
    if (!o.model) return cli_usage_error(usage, "no model given");
    prompt_list pl = {0};
    int rc = 0;
    if (o.prompts_file) rc = read_prompts(o.prompts_file, &pl);
    for (size_t i = 0; !o.prompts_file && !rc && i < sizeof default_prompts / sizeof default_prompts[0]; i++)
        if (add_prompt(&pl, default_prompts[i], strlen(default_prompts[i]))) rc = cli_fail("out of memory");
    if (!rc) rc = run(&o, &pl);
    free_prompts(&pl);
    return rc;
}
