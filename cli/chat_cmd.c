/* kiln chat MODEL: an interactive multi-turn chat through the model's chat template.
 * The whole conversation is rendered each turn, and the session evaluates only the
 * tokens its KV cache does not already hold. */
#include "base/error.h"
#include "cli/cli.h"
#include "cli/model_opts.h"
#include "generate/generate.h"
#include "text/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: kiln chat MODEL.gguf [--system TEXT] [--chat-template NAME] [-n N] [flags]\n"
    "  reads one user message per line from stdin; an empty line is skipped, /exit or EOF ends\n"
    "  --system TEXT            a system message first\n"
    "  --chat-template NAME     default: detected from the model's tokenizer.chat_template;\n"
    "                           names: chatml qwen3 llama3 llama3-always-gen llama3.1 llama2 mistral\n"
    "                           mistral-v1 mistral-v3 mistral-v3-tekken mistral-v7 mistral-v7-tekken\n"
    "                           gemma gemma3 phi3\n"
    "  -n N                     at most N tokens per reply (default 1024)\n" CLI_CONSTRAINT_USAGE MODEL_OPTS_USAGE;

typedef struct reply { char *buf; size_t n, cap; } reply;

static int collect(void *ctx, const char *text, size_t len) {
    reply *r = ctx;
    if (r->n + len + 1 > r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 1024;
        while (cap < r->n + len + 1) cap *= 2;
        char *b = realloc(r->buf, cap);
        if (!b) return 1;
        r->buf = b;
        r->cap = cap;
    }
    memcpy(r->buf + r->n, text, len);
    r->n += len;
    r->buf[r->n] = 0;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

/* The family: --chat-template, else detected from the model's template. */
static int pick_family(const char *src, const char *name, chat_family *f) {
    if (name) {
        int k = chat_family_from_name(name);
        if (k < 0) return cli_usage_error(usage, "--chat-template: unknown template '%s'", name);
        *f = (chat_family)k;
        return 0;
    }
    if (!src) return cli_fail("the model has no tokenizer.chat_template: name one with --chat-template NAME");
    int k = chat_detect(src);
    if (k < 0)
        return cli_fail("the model's chat template is not one kiln recognizes: name one with --chat-template NAME");
    *f = (chat_family)k;
    return 0;
}

int cmd_chat(int argc, char **argv) {
    model_opts mo;
    model_opts_init(&mo);
    const char *path = NULL, *system = NULL, *tmpl = NULL, *schema_path = NULL, *grammar_path = NULL;
    cli_constraint con = {0};
    uint64_t n_gen = 1024;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = model_opts_parse(&mo, argc, argv, &i, usage);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--json-schema") || !strcmp(a, "--grammar")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v) return cli_usage_error(usage, "%s needs a file", a);
            if (schema_path || grammar_path) return cli_usage_error(usage, "give one of --json-schema and --grammar");
            *(!strcmp(a, "--grammar") ? &grammar_path : &schema_path) = v;
        } else if (!strcmp(a, "--system") || !strcmp(a, "--chat-template") || !strcmp(a, "-n")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v) return cli_usage_error(usage, "%s needs a value", a);
            if (!strcmp(a, "--system")) system = v;
            else if (!strcmp(a, "--chat-template")) tmpl = v;
            else if (!cli_parse_u64(v, 1, 1u << 24, &n_gen))
                return cli_usage_error(usage, "-n: '%s' is not a token count of at least 1", v);
        } else if (a[0] == '-' && a[1]) return cli_usage_error(usage, "unknown flag '%s'", a);
        else if (path) return cli_usage_error(usage, "more than one model given");
        else path = a;
    }
    if (!path) return cli_usage_error(usage, "no model given");
    if (model_opts_check(&mo, usage)) return EXIT_USAGE;

    model *m = NULL;
    tokenizer *t = NULL;
    engine *e = NULL;
    gen_session *s = NULL;
    sampler *smp = NULL;
    chat_msg *msgs = NULL;
    size_t n_msgs = 0;
    char *line = NULL;
    size_t line_cap = 0;
    chat_family fam = CHAT_CHATML;
    char *src = NULL, *default_system = NULL;
    int rc = model_opts_open(&mo, path, &m, &t, &e);
    if (rc) goto out;
    src = model_chat_template(m);
    if ((rc = pick_family(src, tmpl, &fam))) goto out;
    kiln_err msg = {0};
    if (!system && src && chat_default_system(src, &default_system, &msg) == 0 && default_system)
        system = default_system; /* what the template writes when a conversation has no system turn */
    if ((rc = cli_constraint_open(schema_path, grammar_path, t, &con))) goto out;
    s = gen_session_create(e, t);
    smp = samp_create(&mo.samp, e->n_vocab);
    char bos[128] = "";
    if (tok_bos(t) >= 0) {
        int64_t k = tok_piece(t, tok_bos(t), true, bos, sizeof bos - 1);
        bos[k > 0 && k < (int64_t)sizeof bos ? k : 0] = 0;
    }
    if (!s || !smp) {
        rc = cli_fail("out of memory");
        goto out;
    }
    if (system) {
        msgs = realloc(msgs, sizeof *msgs);
        msgs[n_msgs++] = (chat_msg){"system", strdup(system)};
    }
    bool tty = isatty(0);
    int32_t end_turn = tok_find(t, chat_end_of_turn(fam));
    for (;;) {
        if (tty) fputs("> ", stdout), fflush(stdout);
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) break;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        if (got == 0) continue;
        if (!strcmp(line, "/exit")) break;
        if (tok_utf8_invalid_at(line, (size_t)got)) {
            fprintf(stderr, "kiln: that line is not valid UTF-8; ignored\n");
            continue;
        }
        chat_msg *nm = realloc(msgs, (n_msgs + 2) * sizeof *msgs);
        if (!nm) {
            rc = cli_fail("out of memory");
            break;
        }
        msgs = nm;
        msgs[n_msgs++] = (chat_msg){"user", strdup(line)};
        kiln_err err = {0};
        char *prompt = chat_render(fam, msgs, n_msgs, true, bos, &err);
        int32_t *ids = NULL;
        uint32_t n = 0;
        if (!prompt || cli_tokenize_prompt(t, prompt, strlen(prompt), false, &ids, &n)) {
            if (!prompt) fprintf(stderr, "kiln: %s\n", err.msg);
            free(prompt);
            free((char *)msgs[--n_msgs].content);
            continue;
        }
        free(prompt);
        reply rep = {0};
        gen_result res;
        gen_params gp = {.max_tokens = (uint32_t)n_gen, .extra_eog = end_turn, .grammar = con.m};
        if (con.m) gram_match_reset(con.m); /* each reply is one sentence of the grammar */
        int g = gen_run(s, smp, ids, n, &gp, collect, &rep, &res, &err);
        free(ids);
        free(res.ids);
        if (g) {
            fprintf(stderr, "kiln: %s\n", err.msg);
            free(rep.buf);
            free((char *)msgs[--n_msgs].content);
            continue;
        }
        putchar('\n');
        if (tty)
            fprintf(stderr, "[%u prompt tokens, %u reused; %u generated, %.1f tok/s]\n", res.n_prompt, res.n_reused,
                    res.n_generated, res.t_generate > 0 ? res.n_generated / res.t_generate : 0.0);
        msgs[n_msgs++] = (chat_msg){"assistant", rep.buf ? rep.buf : strdup("")};
    }
out:
    cli_constraint_close(&con);
    free(src);
    free(default_system);
    for (size_t i = 0; i < n_msgs; i++) free((char *)msgs[i].content);
    free(msgs);
    free(line);
    samp_free(smp);
    gen_session_free(s);
    model_opts_close(&mo, m, t, e);
    return rc;
}
