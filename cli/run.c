/* kiln run MODEL -p TEXT: generate text from a prompt, streamed as it is produced. */
#include "base/clock.h"
#include "base/error.h"
#include "cli/cli.h"
#include "cli/model_opts.h"
#include "generate/generate.h"
#include "plan/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage[] =
    "usage: kiln run MODEL.gguf -p TEXT [-n N] [flags]\n"
    "  -p TEXT                  the prompt ('-' reads it from stdin); BOS is added as the model says\n"
    "  -n N                     tokens to generate (default 128)\n"
    "  --stop S                 stop when S appears (repeatable)\n"
    "  --ids                    also print the generated token ids\n"
    "  --truncate               keep the end of a prompt longer than the context\n"
    "  --no-echo                do not print the prompt before the generated text\n"
    "  --profile                after the run, time each kernel of a decode step and of a prefill\n"
    "                           block (GPU devices)\n"
    "  --profile-tokens N       the profiled prefill block's tokens (default: a full block)\n"
    "  --profile-step N         also a step of N slots' tokens decoding together (kiln serve\n"
    "                           --parallel; the plan is made for N slots)\n"
    "  --token-log FILE         a line per token generated: seconds since generation began and\n"
    "                           tokens so far (decode speed over time)\n" CLI_CONSTRAINT_USAGE MODEL_OPTS_USAGE;

#define MAX_STOPS 16

/* Generated text goes to stdout; with --token-log a line per token to the log (a token
 * whose text is empty or held back still counts). */
typedef struct tok_log {
    FILE *f;
    double t0;
} tok_log;

static int emit_stdout(void *ctx, const char *text, size_t len) {
    (void)ctx;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

static void log_token(void *ctx, uint32_t n_generated) {
    tok_log *tl = ctx;
    fprintf(tl->f, "%.4f %u\n", clock_now_s() - tl->t0, n_generated);
    fflush(tl->f);
}

char *cli_read_all(FILE *f, size_t *len) {
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    size_t k;
    while (b && (k = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (n + 1 == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    if (b) b[n] = 0;
    *len = n;
    return b;
}

/* Tokenizes a prompt with the model's BOS and special tokens, as llama.cpp's tools do. */
int cli_tokenize_prompt(const tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids,
                        uint32_t *n) {
    kiln_err err = {0};
    size_t bad = tok_utf8_invalid_at(text, len);
    if (bad) return cli_fail("the prompt is not valid UTF-8 (byte %zu)", bad - 1);
    int64_t k = tok_encode(t, text, len, add_special, true, NULL, 0, &err);
    if (k < 0) return cli_fail("%s", err.msg);
    *ids = malloc(((size_t)k + 1) * sizeof **ids);
    if (!*ids) return cli_fail("out of memory");
    k = tok_encode(t, text, len, add_special, true, *ids, (size_t)k + 1, &err);
    if (k < 0) return cli_fail("%s", err.msg);
    *n = (uint32_t)k;
    return 0;
}

int cmd_run(int argc, char **argv) {
    model_opts mo;
    model_opts_init(&mo);
    const char *path = NULL, *prompt = NULL, *stops[MAX_STOPS], *schema_path = NULL, *grammar_path = NULL, *token_log = NULL;
    size_t n_stop = 0;
    uint64_t n_gen = 128;
    bool ids_out = false, truncate = false, echo = true, profile = false;
    uint64_t profile_tokens = 0, profile_step = 0; /* 0: a full block; no step */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = model_opts_parse(&mo, argc, argv, &i, usage);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--profile-tokens")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v || !cli_parse_u64(v, 1, 1u << 20, &profile_tokens))
                return cli_usage_error(usage, "--profile-tokens needs a token count of at least 1");
            profile = true;
        } else if (!strcmp(a, "--profile-step")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v || !cli_parse_u64(v, 2, 64, &profile_step))
                return cli_usage_error(usage, "--profile-step needs a count of slots from 2 to 64");
            profile = true;
            mo.slots = (uint32_t)profile_step;
        } else if (!strcmp(a, "--json-schema") || !strcmp(a, "--grammar")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v) return cli_usage_error(usage, "%s needs a file", a);
            if (schema_path || grammar_path) return cli_usage_error(usage, "give one of --json-schema and --grammar");
            *(!strcmp(a, "--grammar") ? &grammar_path : &schema_path) = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "-n") || !strcmp(a, "--stop")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v) return cli_usage_error(usage, "%s needs a value", a);
            if (!strcmp(a, "-p")) prompt = v;
            else if (!strcmp(a, "-n")) {
                if (!cli_parse_u64(v, 1, 1u << 24, &n_gen))
                    return cli_usage_error(usage, "-n: '%s' is not a token count of at least 1", v);
            } else {
                if (!*v) return cli_usage_error(usage, "--stop needs a non-empty string");
                if (n_stop == MAX_STOPS) return cli_usage_error(usage, "at most %d --stop strings", MAX_STOPS);
                stops[n_stop++] = v;
            }
        } else if (!strcmp(a, "--ids")) ids_out = true;
        else if (!strcmp(a, "--truncate")) truncate = true;
        else if (!strcmp(a, "--no-echo")) echo = false;
        else if (!strcmp(a, "--profile")) profile = true;
        else if (!strcmp(a, "--token-log")) {
            if (!(token_log = cli_flag_value(argc, argv, &i)) || !*token_log)
                return cli_usage_error(usage, "--token-log needs a file");
        } else if (a[0] == '-' && a[1]) return cli_usage_error(usage, "unknown flag '%s'", a);
        else if (path) return cli_usage_error(usage, "more than one model given");
        else path = a;
    }
    if (!path) return cli_usage_error(usage, "no model given");
    if (!prompt) return cli_usage_error(usage, "-p TEXT is required ('-' reads stdin)");
    if (model_opts_check(&mo, usage)) return EXIT_USAGE;

    double t_start = clock_now_s(); /* time to first token counts from here: load, compile, prompt */
    size_t plen = strlen(prompt);
    char *owned = NULL;
    if (!strcmp(prompt, "-")) {
        owned = cli_read_all(stdin, &plen);
        if (!owned) return cli_fail("cannot read the prompt from stdin");
        prompt = owned;
    }
    model *m = NULL;
    tokenizer *t = NULL;
    engine *e = NULL;
    gen_session *s = NULL;
    sampler *smp = NULL;
    int32_t *ids = NULL;
    gen_result res = {0};
    cli_constraint con = {0};
    int rc = model_opts_open(&mo, path, &m, &t, &e);
    if (rc) goto out;
    uint32_t n = 0;
    if ((rc = cli_tokenize_prompt(t, prompt, plen, true, &ids, &n))) goto out;
    if (n == 0) {
        rc = cli_fail("the prompt is empty and this model adds no BOS token: nothing to start from");
        goto out;
    }
    if (n >= e->n_ctx) {
        if (!truncate) {
            rc = cli_fail("the prompt has %u tokens but the context holds %u (use --truncate to keep the end, or "
                          "--ctx)",
                          n, e->n_ctx);
            goto out;
        }
        uint32_t keep = e->n_ctx / 2;
        memmove(ids, ids + (n - keep), keep * sizeof *ids);
        n = keep;
        fprintf(stderr, "kiln: prompt truncated to its last %u tokens\n", keep);
    }
    s = gen_session_create(e, t);
    smp = samp_create(&mo.samp, e->n_vocab);
    if (!s || !smp) {
        rc = cli_fail("out of memory");
        goto out;
    }
    if (echo) {
        fwrite(prompt, 1, plen, stdout);
        fflush(stdout);
    }
    if ((rc = cli_constraint_open(schema_path, grammar_path, t, &con))) goto out;
    kiln_err err = {0};
    double t_ready = clock_now_s();
    tok_log tl = {NULL, t_ready};
    if (token_log && !(tl.f = fopen(token_log, "w"))) {
        rc = cli_fail("--token-log: cannot write '%s'", token_log);
        goto out;
    }
    gen_params gp = {.max_tokens = (uint32_t)n_gen, .stop = stops, .n_stop = n_stop, .extra_eog = -1,
                     .grammar = con.m, .token_ctx = &tl, .on_step = tl.f ? log_token : NULL};
    int gr = gen_run(s, smp, ids, n, &gp, emit_stdout, NULL, &res, &err);
    if (tl.f) fclose(tl.f);
    if (gr) {
        rc = cli_fail("%s", err.msg);
        goto out;
    }
    putchar('\n');
    if (ids_out) {
        printf("ids:");
        for (uint32_t i = 0; i < res.n_generated; i++) printf(" %d", res.ids[i]);
        putchar('\n');
    }
    fflush(stdout);
    fprintf(stderr, "\n%s: prompt %u tokens in %.3f s (%.1f tok/s); generated %u tokens in %.3f s (%.1f tok/s); %s\n",
            e->name, res.n_prompt, res.t_prompt, res.t_prompt > 0 ? res.n_prompt / res.t_prompt : 0.0,
            res.n_generated, res.t_generate,
            res.t_generate > 0 && res.n_generated > 1 ? (res.n_generated - 1) / res.t_generate : 0.0,
            gen_finish_name(res.finish));
    fprintf(stderr, "%s: first token %.3f s after start (model load and kernel compile %.3f s, prompt %.3f s)\n",
            e->name, t_ready - t_start + res.t_prompt, t_ready - t_start, res.t_prompt);
    if (mo.dev)
        fprintf(stderr, "%s: weights on the device: %.1f MiB\n", e->name, plan_weight_bytes(e) / 1048576.0);
    engine_expert_stats xs;
    if (engine_expert_stats_of(e, &xs))
        fprintf(stderr,
                "%s: expert cache: %u of %u experts a layer on the device; %.1f%% of %llu choices hit it (the rest on "
                "the host); %llu experts swapped in, %llu resizes (%.2f s, %.2f s of it recording; %llu experts kept on the "
                "device through them)\n",
                e->name, xs.slots, xs.experts, xs.hits + xs.misses ? 100.0 * xs.hits / (xs.hits + xs.misses) : 0.0,
                (unsigned long long)(xs.hits + xs.misses), (unsigned long long)xs.swaps,
                (unsigned long long)xs.resizes, xs.resize_s, xs.resize_record_s, (unsigned long long)xs.kept);
    if (profile && plan_profile(e, 100, (uint32_t)profile_tokens, (uint32_t)profile_step, stderr, &err))
        rc = cli_fail("--profile: %s", err.msg);
out:
    cli_constraint_close(&con);
    free(res.ids);
    free(ids);
    free(owned);
    samp_free(smp);
    gen_session_free(s);
    model_opts_close(&mo, m, t, e);
    return rc;
}
