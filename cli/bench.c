/* kiln bench MODEL: prompt processing (pp<N>) and generation (tg<N>) speed per device in
 * llama-bench's units, with load time, time to first token, and each figure as a fraction
 * of its floor from the device's measured bandwidth and the chip's matrix peak
 * (plan/measure.h).
 * Method: bench/README.md. */
#include "base/clock.h"
#include "base/error.h"
#include "cli/cli.h"
#include "cli/model_opts.h"
#include "devices/devices.h"
#include "plan/measure.h"
#include "plan/plan.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef KILN_COMMIT
#define KILN_COMMIT "unknown"
#endif

static const char usage[] =
    "usage: kiln bench MODEL.gguf [-p 128,512,2048] [-n 128] [-r 3] [--device D ...] [-o md|json|csv] [flags]\n"
    "  -p LIST        prompt lengths to prefill, comma-separated (pp<N>; default 128,512,2048; 0: none)\n"
    "  -n N           tokens to generate greedily after a 1-token prompt (tg<N>; default 128; 0: none)\n"
    "  -r N           timed repetitions per test (default 3), after one warm-up reported apart\n"
    "  --warm S       on a GPU, run the tests untimed for S seconds first (default 1; 0: no)\n"
    "  --device D     cpu | cuda:N | vulkan:N, repeatable (default: every device `kiln probe` lists)\n"
    "  -o FORMAT      md (a table, default) | json | csv, on stdout\n"
    "  --plot FILE    also write a bar chart of tokens/s per device and test (SVG)\n"
    "  --caps LIST    take GPU capabilities away (kiln probe --help lists them)\n"
    "  --ctx N        context length (must hold the largest test)  --threads N (the oracle's)\n"
    "  --block N      prompt tokens per prefill block on a GPU (rounded up to a multiple of 64; default 512)\n"
    "  --dtype T      bf16 | f16  --oracle-mode contract | f32\n";

#define MAX_PP 16
#define MAX_DEVICES 33 /* the oracle, 16 CUDA and 16 Vulkan devices, as kiln probe */
#define MAX_TESTS (MAX_PP + 1)
#define MAX_TOKENS (1u << 20)

typedef enum { OUT_MD, OUT_JSON, OUT_CSV } out_format;

typedef struct bench_opts {
    const char *path, *plot;
    uint32_t pp[MAX_PP], n_pp, n_tg, reps;
    double warm_s; /* a GPU's untimed run before its tests (warm_device) */
    char devices[MAX_DEVICES][24];
    uint32_t n_dev;
    out_format out;
    model_opts mo; /* --ctx, --caps, --dtype, --threads, --oracle-mode */
} bench_opts;

typedef struct test_result {
    char name[16]; /* "pp512", "tg128" */
    bool prefill;
    uint32_t n; /* tokens per repetition */
    double warmup_tps;
    double *tps; /* reps samples */
    double mean, stddev;
    double floor_tps;        /* 0: unknown (no measured bandwidth, or prefill on a chip of unknown peak) */
    const char *floor_bound; /* "memory", "compute", "" unknown */
} test_result;

typedef struct device_result {
    char label[24], name[128], driver[64], engine[96];
    bool gpu;
    uint32_t n_ctx;
    uint32_t n_block; /* a GPU plan's prompt tokens per prefill block (0: the oracle) */
    uint64_t weight_bytes; /* what the weights take on a GPU (plan_weight_bytes; 0: the oracle) */
    bool cache;              /* an expert cache: only part of the experts on the device */
    engine_expert_stats xs;  /* its counters after the tests */
    double load_s, ttft_s;
    bool measured;
    measure_result meas;
    test_result tests[MAX_TESTS];
    uint32_t n_tests;
} device_result;

/* What the floors need from the model (the same on every device). */
typedef struct model_facts {
    const char *file;             /* the path's last component */
    const char *dtype;            /* the 16-bit type the engines use */
    uint64_t params, head_params; /* every tensor's; token_embd's and an untied output's */
    uint64_t expert_params;       /* a mixture of experts' ffn_*_exps (0 elsewhere) */
    double expert_share;          /* the experts a token uses, over all (n_expert_used / n_expert) */
    uint32_t n_layer, n_head, head_dim_k, head_dim_v, kv_dim, n_vocab, n_embd;
} model_facts;

/* Progress is for a person watching: nothing when stderr is a file or a pipe. */
static bool progress_on;

static void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void progress(const char *fmt, ...) {
    if (!progress_on) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("kiln bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- flags --------------------------------------------------------------------------- */

static bool parse_pp_list(const char *v, bench_opts *o) {
    o->n_pp = 0;
    if (!strcmp(v, "0")) return true;
    char item[32];
    for (const char *p = v;; p++) {
        size_t n = strcspn(p, ",");
        uint64_t u;
        if (n == 0 || n >= sizeof item || o->n_pp == MAX_PP) return false;
        memcpy(item, p, n), item[n] = 0;
        if (!cli_parse_u64(item, 1, MAX_TOKENS, &u)) return false;
        o->pp[o->n_pp++] = (uint32_t)u;
        p += n;
        if (!*p) return true;
    }
}

/* One of bench's own flags with its value at argv[*i]: 1 consumed, 0 not one, -1 printed. */
static int parse_own_flag(bench_opts *o, int argc, char **argv, int *i) {
    static const char *const flags[] = {"-p", "-n", "-r", "--device", "-o", "--plot", "--warm"};
    const char *a = argv[*i];
    size_t k = 0;
    while (k < sizeof flags / sizeof flags[0] && strcmp(a, flags[k])) k++;
    if (k == sizeof flags / sizeof flags[0]) return 0;
    const char *v = cli_flag_value(argc, argv, i);
    if (!v) return cli_usage_error(usage, "%s needs a value", a), -1;
    uint64_t u;
    switch (k) {
    case 0:
        if (!parse_pp_list(v, o))
            return cli_usage_error(usage, "-p: '%s' is not a list of up to %d prompt lengths in 1..%u", v, MAX_PP,
                                   MAX_TOKENS),
                   -1;
        break;
    case 1:
        if (!cli_parse_u64(v, 0, MAX_TOKENS, &u)) return cli_usage_error(usage, "-n: '%s' is not a token count", v), -1;
        o->n_tg = (uint32_t)u;
        break;
    case 2:
        if (!cli_parse_u64(v, 1, 1000, &u)) return cli_usage_error(usage, "-r: '%s' is not a count in 1..1000", v), -1;
        o->reps = (uint32_t)u;
        break;
    case 3:
        dev_label dl;
        if (!dev_parse(v, false, &dl))
            return cli_usage_error(usage, "--device %s: expected cpu, cuda:N or vulkan:N", v), -1;
        if (o->n_dev == MAX_DEVICES) return cli_usage_error(usage, "at most %d --device flags", MAX_DEVICES), -1;
        snprintf(o->devices[o->n_dev++], sizeof o->devices[0], "%s", v);
        break;
    case 4:
        if (!strcmp(v, "md"))
            o->out = OUT_MD;
        else if (!strcmp(v, "json"))
            o->out = OUT_JSON;
        else if (!strcmp(v, "csv"))
            o->out = OUT_CSV;
        else
            return cli_usage_error(usage, "-o: '%s' is not md, json or csv", v), -1;
        break;
    case 5: {
        size_t n = strlen(v);
        if (n < 5 || strcmp(v + n - 4, ".svg")) return cli_usage_error(usage, "--plot: '%s' is not a .svg file", v), -1;
        o->plot = v;
        break;
    }
    case 6: {
        char *end;
        double w = strtod(v, &end);
        if (end == v || *end || !(w >= 0 && w <= 60))
            return cli_usage_error(usage, "--warm: '%s' is not a number of seconds in 0..60", v), -1;
        o->warm_s = w;
        break;
    }
    }
    return 1;
}

/* 0, or the exit status of a usage error (printed). */
static int parse_args(bench_opts *o, int argc, char **argv, bool *help) {
    model_opts_init(&o->mo);
    o->pp[0] = 128, o->pp[1] = 512, o->pp[2] = 2048, o->n_pp = 3;
    o->n_tg = 128, o->reps = 3, o->warm_s = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *help = true;
            return 0;
        }
        if (!strcmp(a, "--device")) { /* repeatable here, unlike run's */
            if (parse_own_flag(o, argc, argv, &i) < 0) return EXIT_USAGE;
            continue;
        }
        int r = model_opts_parse(&o->mo, argc, argv, &i, usage);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        if ((r = parse_own_flag(o, argc, argv, &i)) < 0) return EXIT_USAGE;
        if (r > 0) continue;
        if (a[0] == '-' && a[1]) return cli_usage_error(usage, "unknown flag '%s'", a);
        if (o->path) return cli_usage_error(usage, "more than one model given");
        o->path = a;
    }
    if (!o->path) return cli_usage_error(usage, "no model given");
    if (o->mo.sampling_set) return cli_usage_error(usage, "bench generates greedily: sampling flags do not apply");
    if (!o->n_pp && !o->n_tg) return cli_usage_error(usage, "nothing to measure: -p 0 and -n 0");
    if (model_opts_check(&o->mo, usage)) return EXIT_USAGE;
    return 0;
}

/* Every device kiln probe lists: the oracle, each CUDA device, each Vulkan device. */
static int default_devices(bench_opts *o) {
    dev_found found[1 + 2 * DEV_MAX_PER_BACKEND];
    uint32_t n = 0;
    char note[640];
    kiln_err why;
    if (dev_enumerate(found, sizeof found / sizeof found[0], &n, true, note, sizeof note, &why))
        return cli_fail("%s", why.msg);
    if (note[0]) progress("%s", note);
    for (uint32_t i = 0; i < n && o->n_dev < MAX_DEVICES; i++)
        snprintf(o->devices[o->n_dev++], sizeof o->devices[0], "%s", found[i].label);
    return 0;
}

/* ---- the model's sizes and the floors ------------------------------------------------ */

static void model_facts_of(const model *m, const bench_opts *o, model_facts *f) {
    const char *slash = strrchr(o->path, '/');
    f->file = slash ? slash + 1 : o->path;
    /* the engines' default: the file's 16-bit type, bf16 for F32 and quantized files */
    uint32_t dt = o->mo.orc.dtype ? o->mo.orc.dtype : m->file_dtype;
    f->dtype = dt == GGUF_T_F16 ? "f16" : "bf16";
    f->params = f->head_params = f->expert_params = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(m->file); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->file, i);
        uint64_t n = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) n *= t->ne[d];
        f->params += n;
        if (t == m->tok_embd || t == m->output) f->head_params += n; /* counted once when tied */
        if (strstr(t->name, "_exps.")) f->expert_params += n;
    }
    const arch_hparams *hp = &m->hp;
    f->expert_share = hp->n_expert ? (double)hp->n_expert_used / hp->n_expert : 1.0;
    f->n_layer = hp->n_layer, f->n_head = hp->n_head, f->n_vocab = hp->n_vocab, f->n_embd = hp->n_embd;
    f->head_dim_k = hp->head_dim_k, f->head_dim_v = hp->head_dim_v;
    f->kv_dim = hp->n_head_kv * (hp->head_dim_k + hp->head_dim_v) / 2;
}

/* A prefill of n tokens: 2 FLOPs per non-embedding parameter a token uses per token (of a
 * mixture of experts, its chosen experts' share), the logits of the last token, and causal
 * attention (token t attends t + 1 positions: q.k and p.v). */
static double prefill_flops(const model_facts *f, uint32_t n) {
    double used = (double)(f->params - f->head_params) - (1.0 - f->expert_share) * (double)f->expert_params;
    double body = 2.0 * used * n;
    double logits = 2.0 * f->n_vocab * (double)f->n_embd;
    double attended = (double)n * (n + 1) / 2;
    return body + logits + 2.0 * f->n_layer * f->n_head * (double)(f->head_dim_k + f->head_dim_v) * attended;
}

/* Bytes a prefill of n tokens must move at least: every weight read once as the device
 * holds them (w: 16 bits, or a quantized weight's blocks), and the n tokens' K and V
 * written to the cache. */
static double prefill_bytes(const model_facts *f, double w, uint32_t n) {
    return w + 2.0 * 2.0 * f->n_layer * (double)f->kv_dim * n;
}

/* Bytes one decode step reads at the mean position of tg<n> (steps at positions 1..n,
 * step p reading p + 1 cache positions): every weight once (w; of a mixture of experts only
 * the chosen experts', which the device holds in 16 bits), and K and V. */
static double decode_bytes(const model_facts *f, double w, uint32_t n) {
    double mean_positions = (n + 3) / 2.0;
    w -= (1.0 - f->expert_share) * 2.0 * (double)f->expert_params;
    return w + 2.0 * 2.0 * f->n_layer * (double)f->kv_dim * mean_positions;
}

static void set_floors(device_result *d, const model_facts *f) {
    double w = d->weight_bytes ? (double)d->weight_bytes : 2.0 * (double)f->params;
    /* an expert cache: part of the weights on the device, the rest on the host; no floor */
    for (uint32_t i = 0; i < d->n_tests && d->measured && !d->cache; i++) {
        test_result *t = &d->tests[i];
        t->floor_bound = "memory";
        t->floor_tps = t->prefill ? measure_prefill_floor(&d->meas, t->n, prefill_bytes(f, w, t->n),
                                                          prefill_flops(f, t->n), &t->floor_bound)
                                  : measure_decode_floor(&d->meas, decode_bytes(f, w, t->n));
    }
}

/* ---- running the tests --------------------------------------------------------------- */

typedef struct runner {
    engine *e;
    int32_t *tokens; /* the prompt: deterministic ids, any valid ones will do */
    float *logits;   /* for an engine without eval_argmax */
    kiln_err err;
} runner;

/* Evaluates tokens at pos and gives the greedy next token (0 when no logit is finite). */
static int eval_next(runner *r, const int32_t *tok, uint32_t n, uint32_t pos, int32_t *next) {
    engine *e = r->e;
    if (e->ops->eval_argmax) {
        if (e->ops->eval_argmax(e, tok, n, pos, next, &r->err)) return -1;
    } else {
        if (engine_eval(e, tok, n, pos, r->logits, false, &r->err)) return -1;
        *next = samp_argmax(r->logits, e->n_vocab);
    }
    if (*next < 0) *next = 0;
    return 0;
}

/* One repetition: tokens per second of a prefill of n at position 0, or of n greedy steps
 * after a 1-token prompt (the prompt is not timed). */
static int run_once(runner *r, const test_result *t, double *tps) {
    int32_t next;
    if (t->prefill) {
        double t0 = clock_now_s();
        if (eval_next(r, r->tokens, t->n, 0, &next)) return -1;
        *tps = t->n / (clock_now_s() - t0);
        return 0;
    }
    if (eval_next(r, r->tokens, 1, 0, &next)) return -1;
    double t0 = clock_now_s();
    for (uint32_t i = 0; i < t->n; i++)
        if (eval_next(r, &next, 1, 1 + i, &next)) return -1;
    *tps = t->n / (clock_now_s() - t0);
    return 0;
}

static void mean_stddev(const double *x, uint32_t n, double *mean, double *sd) {
    double s = 0, ss = 0;
    for (uint32_t i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (uint32_t i = 0; i < n; i++) ss += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
}

static int run_test(runner *r, const bench_opts *o, const char *label, test_result *t) {
    if (!(t->tps = calloc(o->reps, sizeof *t->tps))) return cli_fail("out of memory");
    for (uint32_t k = 0; k <= o->reps; k++) {
        progress("%s %s: %s %u of %u", label, t->name, k ? "repetition" : "warm-up", k ? k : 1, k ? o->reps : 1);
        double tps;
        if (run_once(r, t, &tps)) return cli_fail("%s %s: %s", label, t->name, r->err.msg);
        if (k)
            t->tps[k - 1] = tps;
        else
            t->warmup_tps = tps;
    }
    mean_stddev(t->tps, o->reps, &t->mean, &t->stddev);
    return 0;
}

/* Every test once, untimed, again until warm_s has passed: a GPU that sat idle while the
 * model loaded runs at its idle clocks until work has kept it busy a while, and short
 * tests do not keep it busy. On the H200 (Vulkan, qwen3.5-0.8b) a 24-token prompt right
 * after the load took 30.7 ms a repetition, 8.6 ms after a pp512 test had run; the
 * per-test warm-up alone did not lift it. */
static int warm_device(runner *r, const bench_opts *o, const device_result *d) {
    if (o->warm_s <= 0) return 0;
    progress("%s: warming the device for %.1f s", d->label, o->warm_s);
    double t0 = clock_now_s(), tps;
    while (clock_now_s() - t0 < o->warm_s)
        for (uint32_t i = 0; i < d->n_tests; i++)
            if (run_once(r, &d->tests[i], &tps)) return cli_fail("%s warm-up: %s", d->label, r->err.msg);
    return 0;
}

static void plan_tests(const bench_opts *o, device_result *d) {
    for (uint32_t i = 0; i < o->n_pp; i++) {
        test_result *t = &d->tests[d->n_tests++];
        t->prefill = true, t->n = o->pp[i];
        snprintf(t->name, sizeof t->name, "pp%u", t->n);
    }
    if (o->n_tg) {
        test_result *t = &d->tests[d->n_tests++];
        t->n = o->n_tg;
        snprintf(t->name, sizeof t->name, "tg%u", t->n);
    }
}

/* The context positions the largest test needs. */
static uint32_t ctx_needed(const bench_opts *o) {
    uint32_t need = o->n_tg ? o->n_tg + 1 : 0;
    for (uint32_t i = 0; i < o->n_pp; i++)
        if (o->pp[i] > need) need = o->pp[i];
    return need;
}

static int run_tests(runner *r, const bench_opts *o, device_result *d) {
    engine *e = r->e;
    uint32_t need = ctx_needed(o), longest = 1; /* tg's prompt is one token */
    if (need > e->n_ctx)
        return cli_fail("%s: the context holds %u positions but the largest test needs %u: pass --ctx %u (or "
                        "smaller -p / -n)",
                        d->label, e->n_ctx, need, need);
    for (uint32_t i = 0; i < o->n_pp; i++)
        if (o->pp[i] > longest) longest = o->pp[i];
    if (!(r->tokens = malloc(longest * sizeof *r->tokens))) return cli_fail("out of memory");
    for (uint32_t i = 0; i < longest; i++) r->tokens[i] = (int32_t)((i * 7919u + 1) % e->n_vocab);
    if (d->gpu && warm_device(r, o, d)) return EXIT_BADFILE;
    for (uint32_t i = 0; i < d->n_tests; i++)
        if (run_test(r, o, d->label, &d->tests[i])) return EXIT_BADFILE;
    return 0;
}

/* Loads the model and an engine on the device (timed: the load time), evaluates one token
 * (the time to first token), runs the tests, then measures the device with the engine
 * gone. 0, or 1 (printed). */
static int bench_device(const bench_opts *o, const char *label, device_result *d, model_facts *f) {
    model_opts mo = o->mo;
    mo.device = label;
    snprintf(d->label, sizeof d->label, "%s", label);
    d->gpu = strcmp(label, "cpu") != 0;
    plan_tests(o, d);
    model *m = NULL;
    tokenizer *tk = NULL;
    runner r = {0};
    progress("%s: loading %s", label, o->path);
    double t0 = clock_now_s();
    int rc = model_opts_open(&mo, o->path, &m, &tk, &r.e);
    d->load_s = clock_now_s() - t0;
    if (rc) goto out;
    model_facts_of(m, o, f);
    snprintf(d->engine, sizeof d->engine, "%s", r.e->name);
    snprintf(d->name, sizeof d->name, "%s", mo.dev ? mo.dev->caps.name : r.e->name);
    snprintf(d->driver, sizeof d->driver, "%s", mo.dev ? mo.dev->caps.driver : "");
    d->n_ctx = r.e->n_ctx;
    d->n_block = d->gpu ? plan_block(r.e) : 0;
    d->weight_bytes = d->gpu ? plan_weight_bytes(r.e) : 0;
    if (!r.e->ops->eval_argmax && !(r.logits = malloc(r.e->n_vocab * sizeof *r.logits))) {
        rc = cli_fail("out of memory");
        goto out;
    }
    int32_t next;
    if (eval_next(&r, &(int32_t){1}, 1, 0, &next)) {
        rc = cli_fail("%s: %s", label, r.err.msg);
        goto out;
    }
    d->ttft_s = clock_now_s() - t0;
    if ((rc = run_tests(&r, o, d))) goto out;
    d->cache = engine_expert_stats_of(r.e, &d->xs);
    engine_destroy(r.e);
    r.e = NULL;
    if (mo.dev) {
        progress("%s: measuring bandwidth and matrix rate", label);
        if (measure_device(mo.dev, &d->meas, &r.err)) {
            rc = cli_fail("%s", r.err.msg);
            goto out;
        }
        d->measured = true;
        set_floors(d, f);
    }
out:
    free(r.tokens);
    free(r.logits);
    model_opts_close(&mo, m, tk, r.e);
    return rc;
}

/* ---- output: markdown ---------------------------------------------------------------- */

/* Text for a table cell: '|' would end it, a newline the row. */
static const char *md_cell(const char *s, char *buf, size_t cap) {
    size_t i = 0;
    for (; s[i] && i + 1 < cap; i++) buf[i] = s[i] == '|' || s[i] == '\n' ? '/' : s[i];
    buf[i] = 0;
    return i ? buf : "-";
}

static void md_rate(double v, char *buf, size_t cap) {
    if (v > 0)
        snprintf(buf, cap, "%.2f", v);
    else
        snprintf(buf, cap, "-");
}

static void print_md(const bench_opts *o, const model_facts *f, const device_result *d, uint32_t nd) {
    char a[160], b[160], bw[32], pk[32], mx[32];
    printf("kiln %s, %s (%s, %.2f M params), caps: %s; ", KILN_COMMIT, f->file, f->dtype, f->params * 1e-6,
           o->mo.caps ? o->mo.caps : "as probed");
    if (o->mo.n_block) printf("prefill blocks of %u tokens; ", o->mo.n_block);
    printf("%u repetitions after 1 warm-up", o->reps);
    if (o->warm_s > 0) printf(" (GPUs: every test run untimed for %.1f s first)", o->warm_s);
    printf("\n\n");
    printf("| device | name | driver | load s | first token s | weights MiB | bandwidth GB/s | matrix peak GFLOP/s | "
           "kiln's matmul GFLOP/s |\n");
    printf("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (uint32_t i = 0; i < nd; i++) {
        md_rate(d[i].measured ? d[i].meas.bandwidth_gbps : 0, bw, sizeof bw);
        md_rate(d[i].measured ? d[i].meas.peak_gflops : 0, pk, sizeof pk);
        md_rate(d[i].measured ? d[i].meas.matmul_gflops : 0, mx, sizeof mx);
        char wb[32];
        md_rate(d[i].weight_bytes / 1048576.0, wb, sizeof wb);
        printf("| %s | %s | %s | %.3f | %.3f | %s | %s | %s | %s |\n", d[i].label, md_cell(d[i].name, a, sizeof a),
               md_cell(d[i].driver, b, sizeof b), d[i].load_s, d[i].ttft_s, wb, bw, pk, mx);
    }
    for (uint32_t i = 0; i < nd; i++)
        if (d[i].cache)
            printf("\n%s: expert cache of %u of %u experts a layer on the device; %.1f%% of %llu choices on it, the "
                   "rest on the host; %llu experts swapped in, %llu resizes (no floor: the host's part has none)\n",
                   d[i].label, d[i].xs.slots, d[i].xs.experts,
                   d[i].xs.hits + d[i].xs.misses ? 100.0 * d[i].xs.hits / (d[i].xs.hits + d[i].xs.misses) : 0.0,
                   (unsigned long long)(d[i].xs.hits + d[i].xs.misses), (unsigned long long)d[i].xs.swaps,
                   (unsigned long long)d[i].xs.resizes);
    printf("\n| model | device | test | t/s | warm-up t/s | fraction of floor |\n");
    printf("| --- | --- | --- | ---: | ---: | ---: |\n");
    for (uint32_t i = 0; i < nd; i++)
        for (uint32_t j = 0; j < d[i].n_tests; j++) {
            const test_result *t = &d[i].tests[j];
            char frac[32];
            if (t->floor_tps > 0)
                snprintf(frac, sizeof frac, "%.3f", t->mean / t->floor_tps);
            else
                snprintf(frac, sizeof frac, "-");
            printf("| %s %s | %s | %s | %.2f ± %.2f | %.2f | %s |\n", md_cell(f->file, a, sizeof a), f->dtype,
                   d[i].label, t->name, t->mean, t->stddev, t->warmup_tps, frac);
        }
}

/* ---- output: JSON -------------------------------------------------------------------- */

/* Driver and device strings are not promised to be UTF-8; anything else becomes '?'. */
static json_t *json_text(const char *s) {
    char tmp[256];
    size_t n = strnlen(s, sizeof tmp - 1);
    for (size_t i = 0; i < n; i++) tmp[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
    return json_stringn(tmp, n);
}

static json_t *json_rate(double v) { return v > 0 ? json_real(v) : json_null(); }

static json_t *json_test(const test_result *t, uint32_t reps) {
    json_t *samples = json_array();
    for (uint32_t i = 0; i < reps; i++) json_array_append_new(samples, json_real(t->tps[i]));
    const char *bound = t->floor_tps > 0 && t->floor_bound ? t->floor_bound : "";
    return json_pack("{s:s,s:s,s:I,s:f,s:f,s:o,s:f,s:o,s:o,s:o}", "test", t->name, "kind", t->prefill ? "pp" : "tg",
                     "n_tokens", (json_int_t)t->n, "tps_mean", t->mean, "tps_stddev", t->stddev, "tps_samples", samples,
                     "warmup_tps", t->warmup_tps, "floor_tps", json_rate(t->floor_tps), "floor_bound",
                     bound[0] ? json_string(bound) : json_null(), "fraction_of_floor",
                     t->floor_tps > 0 ? json_real(t->mean / t->floor_tps) : json_null());
}

static json_t *json_measure(const device_result *d) {
    if (!d->measured) return json_null();
    const measure_result *m = &d->meas;
    /* matmul_gflops is kiln's own product kernel: reported, never a floor */
    return json_pack("{s:f,s:f,s:o,s:o}", "bandwidth_gbps", m->bandwidth_gbps, "matmul_gflops", m->matmul_gflops,
                     "peak_bandwidth_gbps", json_rate(m->peak_bandwidth_gbps), "peak_gflops",
                     json_rate(m->peak_gflops));
}

static json_t *json_device(const bench_opts *o, const device_result *d) {
    json_t *tests = json_array();
    for (uint32_t i = 0; i < d->n_tests; i++) json_array_append_new(tests, json_test(&d->tests[i], o->reps));
    json_t *xs = d->cache ? json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "slots", (json_int_t)d->xs.slots, "experts",
                                      (json_int_t)d->xs.experts, "hits", (json_int_t)d->xs.hits, "misses",
                                      (json_int_t)d->xs.misses, "swaps", (json_int_t)d->xs.swaps, "resizes",
                                      (json_int_t)d->xs.resizes, "kept", (json_int_t)d->xs.kept)
                          : json_null();
    return json_pack("{s:s,s:o,s:o,s:o,s:o,s:I,s:o,s:o,s:o,s:f,s:f,s:o,s:o}", "device", d->label, "name",
                     json_text(d->name), "driver", d->gpu ? json_text(d->driver) : json_null(), "engine",
                     json_text(d->engine), "caps", d->gpu && o->mo.caps ? json_text(o->mo.caps) : json_null(), "n_ctx",
                     (json_int_t)d->n_ctx, "n_block", d->gpu ? json_integer(d->n_block) : json_null(), "weight_bytes",
                     d->gpu ? json_integer((json_int_t)d->weight_bytes) : json_null(), "expert_cache", xs, "load_s",
                     d->load_s, "ttft_s",
                     d->ttft_s, "measured", json_measure(d), "tests", tests);
}

static int print_json(const bench_opts *o, const model_facts *f, const device_result *d, uint32_t nd) {
    json_t *devs = json_array();
    for (uint32_t i = 0; i < nd; i++) json_array_append_new(devs, json_device(o, &d[i]));
    json_t *doc = json_pack("{s:s,s:o,s:o,s:s,s:I,s:o,s:I,s:I,s:f,s:o}", "kiln_commit", KILN_COMMIT, "model",
                            json_text(f->file), "model_path", json_text(o->path), "dtype", f->dtype, "params",
                            (json_int_t)f->params, "caps", o->mo.caps ? json_text(o->mo.caps) : json_null(),
                            "repetitions", (json_int_t)o->reps, "warmup_repetitions", (json_int_t)1, "gpu_warm_s",
                            o->warm_s, "devices", devs);
    bool ok = doc && json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0;
    json_decref(doc);
    if (!ok) return cli_fail("cannot write JSON");
    putchar('\n');
    return 0;
}

/* ---- output: CSV --------------------------------------------------------------------- */

/* A field quoted when it holds a comma, a quote or a line break (RFC 4180). */
static void csv_field(const char *s, bool last) {
    if (strpbrk(s, ",\"\r\n")) {
        putchar('"');
        for (; *s; s++) {
            if (*s == '"') putchar('"');
            putchar(*s);
        }
        putchar('"');
    } else {
        fputs(s, stdout);
    }
    putchar(last ? '\n' : ',');
}

static void csv_number(double v, bool known, bool last) {
    char buf[32] = "";
    if (known) snprintf(buf, sizeof buf, "%.6g", v);
    csv_field(buf, last);
}

static void print_csv(const bench_opts *o, const model_facts *f, const device_result *d, uint32_t nd) {
    puts("model,dtype,device,name,driver,kiln_commit,caps,test,n_tokens,repetitions,tps_mean,tps_stddev,warmup_tps,"
         "floor_tps,fraction_of_floor,load_s,ttft_s,weight_bytes,bandwidth_gbps,matmul_gflops");
    for (uint32_t i = 0; i < nd; i++)
        for (uint32_t j = 0; j < d[i].n_tests; j++) {
            const test_result *t = &d[i].tests[j];
            const measure_result *m = &d[i].meas;
            bool floor = t->floor_tps > 0;
            csv_field(f->file, false), csv_field(f->dtype, false), csv_field(d[i].label, false);
            csv_field(d[i].name, false), csv_field(d[i].driver, false), csv_field(KILN_COMMIT, false);
            csv_field(d[i].gpu && o->mo.caps ? o->mo.caps : "", false), csv_field(t->name, false);
            csv_number(t->n, true, false), csv_number(o->reps, true, false);
            csv_number(t->mean, true, false), csv_number(t->stddev, true, false);
            csv_number(t->warmup_tps, true, false), csv_number(t->floor_tps, floor, false);
            csv_number(floor ? t->mean / t->floor_tps : 0, floor, false);
            csv_number(d[i].load_s, true, false), csv_number(d[i].ttft_s, true, false);
            char wb[24] = "";
            if (d[i].gpu) snprintf(wb, sizeof wb, "%llu", (unsigned long long)d[i].weight_bytes);
            csv_field(wb, false);
            csv_number(m->bandwidth_gbps, d[i].measured, false), csv_number(m->matmul_gflops, d[i].measured, true);
        }
}

/* ---- output: SVG --------------------------------------------------------------------- */

static void svg_text(FILE *fp, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", fp); break;
        case '<': fputs("&lt;", fp); break;
        case '>': fputs("&gt;", fp); break;
        case '"': fputs("&quot;", fp); break;
        default: fputc((unsigned char)*s < 0x80 ? *s : '?', fp);
        }
    }
}

#define SVG_LABEL_W 180
#define SVG_BAR_W 440
#define SVG_ROW_H 22
#define SVG_TOP 56

/* A horizontal bar per device and test, grouped by test; each test's bars share a scale
 * (its fastest device fills the width), since pp and tg rates differ by orders of
 * magnitude. Each bar is labelled with its t/s. */
static int write_svg(const char *path, const model_facts *f, const device_result *d, uint32_t nd) {
    static const char *const colors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1"};
    FILE *fp = fopen(path, "w");
    if (!fp) return cli_fail("--plot: cannot write %s", path);
    uint32_t n_tests = nd ? d[0].n_tests : 0, rows = n_tests * (nd + 1);
    uint32_t width = SVG_LABEL_W + SVG_BAR_W + 120, height = SVG_TOP + rows * SVG_ROW_H + 10;
    fprintf(fp,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%u\" height=\"%u\" font-family=\"sans-serif\" "
            "font-size=\"12\">\n",
            width, height);
    fprintf(fp, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"10\" y=\"20\" font-size=\"15\">");
    svg_text(fp, f->file);
    fprintf(fp, " (%s): tokens/s per device and test</text>\n", f->dtype);
    fprintf(fp,
            "<text x=\"10\" y=\"38\" fill=\"#555\">kiln %s; mean of the timed repetitions; bars scaled per "
            "test</text>\n",
            KILN_COMMIT);
    uint32_t y = SVG_TOP;
    for (uint32_t j = 0; j < n_tests; j++) {
        double top = 0;
        for (uint32_t i = 0; i < nd; i++) top = fmax(top, d[i].tests[j].mean);
        fprintf(fp, "<text x=\"10\" y=\"%u\" font-weight=\"bold\">%s</text>\n", y + 15, d[0].tests[j].name);
        y += SVG_ROW_H;
        for (uint32_t i = 0; i < nd; i++, y += SVG_ROW_H) {
            double w = top > 0 ? d[i].tests[j].mean / top * SVG_BAR_W : 0;
            fprintf(fp, "<text x=\"20\" y=\"%u\">", y + 15);
            svg_text(fp, d[i].label);
            fprintf(fp, "</text>\n<rect x=\"%u\" y=\"%u\" width=\"%.1f\" height=\"%u\" fill=\"%s\"/>\n", SVG_LABEL_W,
                    y + 3, w, SVG_ROW_H - 6, colors[i % (sizeof colors / sizeof colors[0])]);
            fprintf(fp, "<text x=\"%.1f\" y=\"%u\">%.2f</text>\n", SVG_LABEL_W + w + 6, y + 15, d[i].tests[j].mean);
        }
    }
    fputs("</svg>\n", fp);
    if (fclose(fp)) return cli_fail("--plot: cannot write %s", path);
    return 0;
}

/* ---- command ------------------------------------------------------------------------- */

int cmd_bench(int argc, char **argv) {
    static bench_opts o;
    static device_result dev[MAX_DEVICES];
    bool help = false;
    memset(&o, 0, sizeof o);
    memset(dev, 0, sizeof dev);
    int rc = parse_args(&o, argc, argv, &help);
    if (rc) return rc;
    if (help) {
        fputs(usage, stdout);
        return 0;
    }
    progress_on = isatty(STDERR_FILENO);
    if (!o.n_dev && (rc = default_devices(&o))) return rc;
    model_facts facts = {0};
    /* a device that fails (its message printed) leaves the others' results standing: they
     * are reported, and the exit status says one failed */
    uint32_t nd = 0, failed = 0;
    for (uint32_t i = 0; i < o.n_dev; i++) {
        if (bench_device(&o, o.devices[i], &dev[nd], &facts) == 0) {
            nd++;
            continue;
        }
        failed++;
        for (uint32_t j = 0; j < dev[nd].n_tests; j++) free(dev[nd].tests[j].tps);
        memset(&dev[nd], 0, sizeof dev[nd]);
    }
    if (nd) {
        if (o.out == OUT_JSON)
            rc = print_json(&o, &facts, dev, nd);
        else if (o.out == OUT_CSV)
            print_csv(&o, &facts, dev, nd);
        else
            print_md(&o, &facts, dev, nd);
        if (rc == 0 && o.plot) rc = write_svg(o.plot, &facts, dev, nd);
    }
    for (uint32_t i = 0; i < nd; i++)
        for (uint32_t j = 0; j < dev[i].n_tests; j++) free(dev[i].tests[j].tps);
    return rc ? rc : failed ? EXIT_BADFILE : 0;
}
