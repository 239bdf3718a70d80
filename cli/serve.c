/* kiln serve MODEL: an OpenAI-compatible HTTP server (server/http.c) over one model. */
#include "base/error.h"
#include "cli/cli.h"
#include "cli/model_opts.h"
#include "gguf/gguf.h"
#include "server/http.h"
#include "text/chat.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: kiln serve MODEL.gguf [--listen HOST:PORT] [--api-key KEY] [--parallel N] [flags]\n"
    "  --listen HOST:PORT       IPv4 address and port (default 127.0.0.1:8080; port 0 picks a free one);\n"
    "                           the first line on stdout is \"listening on http://HOST:PORT\"\n"
    "  --api-key KEY            require Authorization: Bearer KEY (not on /health)\n"
    "  --parallel N             slots: requests generated at once, 1..64 (default 1), in steps that take\n"
    "                           every busy slot's next token and chunks of waiting prompts. On a GPU the\n"
    "                           slots share one KV cache of --ctx positions in pages of 64: a sequence\n"
    "                           takes pages as it grows, up to all of them, and an idle slot's cached tail\n"
    "                           goes to one that needs it; a request waits while its prompt has no room,\n"
    "                           and a stream that finds none ends as at the context's end (\"length\"). The\n"
    "                           CPU oracle gives each slot its own engine and cache of --ctx positions\n"
    "  --batch-tokens N         tokens a step evaluates at most: a longer prompt goes in chunks between\n"
    "                           the decoding slots' steps (default 2048, 1..65536)\n"
    "  --queue N                requests that may wait for a slot or for room in the cache; more get 503\n"
    "                           with Retry-After (default 16)\n"
    "  --step-log FILE          a line per step (--parallel > 1): its calls and tokens, how long the\n"
    "                           oldest waited, how long it ran (for measuring)\n"
    "  --chat-template NAME     default: detected from the model's tokenizer.chat_template, else chatml\n"
    "  --reasoning-format F     auto (default): a reply's <think> block is returned as reasoning_content;\n"
    "                           none: it stays in content\n"
    "  endpoints: POST /v1/chat/completions, POST /v1/completions (logprobs supported), GET /v1/models,\n"
    "  GET /health, GET /metrics\n"
    "  the sampling flags set the defaults a request's fields override\n" MODEL_OPTS_USAGE;

/* The model id: the file's name without folders or ".gguf". */
static char *model_id(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 5 && !strcmp(b + n - 5, ".gguf")) n -= 5;
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, b, n);
        s[n] = 0;
    }
    return s;
}

/* SIGINT and SIGTERM are blocked before the model loads, so that no thread started from
 * then on (thread pools, a driver's) can take one and end the process while the server
 * stops cleanly on it (srv_serve waits for them with sigwait); until the server runs, this
 * thread waits for them instead and ends the process as the signal would have. */
static void *load_watch(void *arg) {
    const sigset_t *sigs = arg;
    int sig = 0;
    while (sigwait(sigs, &sig) != 0) {}
    static const char msg[] = "kiln: stopped while loading\n";
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {}
    _exit(128 + sig);
    return NULL;
}

int cmd_serve(int argc, char **argv) {
    model_opts mo;
    model_opts_init(&mo);
    const char *path = NULL, *listen = "127.0.0.1:8080", *api_key = NULL, *tmpl = NULL, *step_log = NULL;
    uint64_t parallel = 1, queue = 16;
    bool reasoning_none = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = model_opts_parse(&mo, argc, argv, &i, usage);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--listen") || !strcmp(a, "--api-key") || !strcmp(a, "--parallel") ||
                   !strcmp(a, "--queue") || !strcmp(a, "--chat-template") || !strcmp(a, "--batch-tokens") ||
                   !strcmp(a, "--step-log") || !strcmp(a, "--reasoning-format")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v) return cli_usage_error(usage, "%s needs a value", a);
            if (!strcmp(a, "--listen")) listen = v;
            else if (!strcmp(a, "--reasoning-format")) {
                if (strcmp(v, "auto") && strcmp(v, "none"))
                    return cli_usage_error(usage, "--reasoning-format: '%s': expected auto or none", v);
                reasoning_none = !strcmp(v, "none");
            }
            else if (!strcmp(a, "--api-key")) {
                if (!*v) return cli_usage_error(usage, "--api-key needs a non-empty key");
                api_key = v;
            } else if (!strcmp(a, "--chat-template")) tmpl = v;
            else if (!strcmp(a, "--step-log")) step_log = v;
            else if (!strcmp(a, "--batch-tokens")) {
                uint64_t b;
                if (!cli_parse_u64(v, 1, 65536, &b))
                    return cli_usage_error(usage, "--batch-tokens: '%s': expected a number of tokens from 1 to 65536", v);
                mo.batch.step_tokens = (uint32_t)b;
            } else if (!strcmp(a, "--parallel")) {
                if (!cli_parse_u64(v, 1, SRV_MAX_PARALLEL, &parallel))
                    return cli_usage_error(usage, "--parallel: '%s': expected a number of slots from 1 to %u", v,
                                           SRV_MAX_PARALLEL);
            } else if (!cli_parse_u64(v, 0, 4096, &queue))
                return cli_usage_error(usage, "--queue: bad value '%s'", v);
        } else if (a[0] == '-' && a[1]) return cli_usage_error(usage, "unknown flag '%s'", a);
        else if (path) return cli_usage_error(usage, "more than one model given");
        else path = a;
    }
    if (!path) return cli_usage_error(usage, "no model given");
    const char *colon = strrchr(listen, ':');
    uint64_t port;
    char host[64];
    if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof host ||
        !cli_parse_u64(colon + 1, 0, 65535, &port))
        return cli_usage_error(usage, "--listen: '%s' is not HOST:PORT", listen);
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = 0;
    int fam = CHAT_CHATML;
    if (tmpl && (fam = chat_family_from_name(tmpl)) < 0)
        return cli_usage_error(usage, "--chat-template: unknown template '%s'", tmpl);
    if (model_opts_check(&mo, usage)) return EXIT_USAGE;
    if (step_log && !(mo.batch.log = fopen(step_log, "w"))) return cli_fail("--step-log %s: %s", step_log, strerror(errno));

    model *m = NULL;
    tokenizer *t = NULL;
    engine *e[SRV_MAX_PARALLEL] = {0};
    char *src = NULL, *default_system = NULL, *id = NULL;
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    pthread_t watch;
    bool watching = pthread_create(&watch, NULL, load_watch, &sigs) == 0;
    int rc = model_opts_open_n(&mo, path, (uint32_t)parallel, &m, &t, e);
    if (watching) { /* from here a signal waits for srv_serve's sigwait */
        pthread_cancel(watch);
        pthread_join(watch, NULL);
    }
    if (rc) goto out;
    src = model_chat_template(m);
    if (!tmpl) {
        int k = src ? chat_detect(src) : -1;
        if (k >= 0) fam = k;
        else
            fprintf(stderr, "kiln: %s; chats use chatml (name one with --chat-template NAME)\n",
                    src ? "the model's chat template is not one kiln recognizes" : "the model has no chat template");
    }
    kiln_err msg = {0};
    if (src && chat_default_system(src, &default_system, &msg)) {
        rc = cli_fail("%s", msg.msg);
        goto out;
    }
    id = model_id(path);
    if (!id) {
        rc = cli_fail("out of memory");
        goto out;
    }
    srv_config cfg = {.host = host, .port = (uint16_t)port, .api_key = api_key, .model_id = id, .engines = e,
                      .tok = t, .family = (chat_family)fam, .default_system = default_system, .samp = &mo.samp,
                      .reasoning_none = reasoning_none,
                      .parallel = (uint32_t)parallel, .queue = (uint32_t)queue};
    rc = srv_serve(&cfg);
out:
    free(src);
    free(default_system);
    free(id);
    model_opts_close_n(&mo, m, t, e, (uint32_t)parallel);
    if (mo.batch.log) fclose(mo.batch.log);
    return rc;
}
