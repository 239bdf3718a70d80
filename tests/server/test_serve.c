/* kiln serve end to end: the real binary on the CPU oracle with stories260K (and Qwen3.5's
 * tiny model on a Vulkan device), on a port it picks itself (--listen 127.0.0.1:0), spoken
 * to over HTTP/1.0 sockets. */
#include "tests/util/testutil.h"
#include "tests/util/testutil_serve.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KEY TS_KEY

static ts_server srv = {.pid = -1};

/* Starts kiln serve on stories260K (testutil_serve.c) with --queue 4 and the flags in
 * extra (NULL-terminated, may be NULL; a later --queue wins). */
static void start_server_with(const char *const *extra) {
    const char *argv[24] = {"--queue", "4"};
    size_t n = 2;
    for (size_t i = 0; extra && extra[i] && n + 1 < sizeof argv / sizeof argv[0]; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    ts_start(&srv, tu_data_file("models/stories260K.gguf"), argv, NULL);
}

static void start_server(void) { start_server_with(NULL); }

static void stop_server(void) { ts_kill(&srv); }

static int connect_server(void) {
    int fd = ts_connect(&srv, 30);
    cr_assert(fd >= 0, "cannot connect to the server");
    return fd;
}

static void send_request(int fd, const char *method, const char *path, const char *auth, const char *body) {
    char head[1024];
    size_t blen = body ? strlen(body) : 0;
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n%s%s%sContent-Length: %zu\r\n%s\r\n",
                     method, path, auth ? "Authorization: Bearer " : "", auth ? auth : "", auth ? "\r\n" : "", blen,
                     body ? "Content-Type: application/json\r\n" : "");
    cr_assert_eq(write(fd, head, (size_t)n), n);
    if (blen) cr_assert_eq(write(fd, body, blen), (ssize_t)blen);
}

typedef struct resp {
    int status;
    char *head; /* headers (malloc'ed, with the body) */
    char *body;
} resp;

/* One request on a fresh connection; reads until the server closes it. */
static resp request(const char *method, const char *path, const char *auth, const char *body) {
    int fd = connect_server();
    send_request(fd, method, path, auth, body);
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    ssize_t k;
    while ((k = read(fd, b + n, cap - n - 1)) > 0) {
        n += (size_t)k;
        if (n + 1 == cap) b = realloc(b, cap *= 2);
    }
    cr_assert_eq(k, 0, "read failed or timed out");
    close(fd);
    b[n] = 0;
    resp r = {0, b, NULL};
    cr_assert(sscanf(b, "HTTP/1.%*d %d", &r.status) == 1, "response: %s", b);
    char *sep = strstr(b, "\r\n\r\n");
    cr_assert(sep);
    r.body = sep + 4;
    return r;
}

static json_t *parse(const resp *r) {
    json_error_t je;
    json_t *j = json_loads(r->body, 0, &je);
    cr_assert(j, "not JSON (%s): %s", je.text, r->body);
    return j;
}

/* An error response: the status and OpenAI's error object. */
static void expect_error(resp r, int status, const char *code) {
    cr_assert_eq(r.status, status, "status %d, body %s", r.status, r.body);
    json_t *j = parse(&r);
    json_t *e = json_object_get(j, "error");
    cr_assert(json_is_string(json_object_get(e, "message")), "%s", r.body);
    cr_assert(json_is_string(json_object_get(e, "type")), "%s", r.body);
    cr_assert(json_object_get(e, "param") && json_object_get(e, "code"), "%s", r.body);
    if (code) cr_assert_str_eq(json_string_value(json_object_get(e, "code")), code, "%s", r.body);
    json_decref(j);
    free(r.head);
}

static const char chat_body[] =
    "{\"model\":\"stories260K\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],"
    "\"max_tokens\":24}";

TestSuite(serve, .fini = stop_server, .timeout = 60);

Test(serve, health_models_and_errors) {
    start_server();
    resp r = request("GET", "/health", NULL, NULL);
    cr_assert_eq(r.status, 200);
    cr_assert(strstr(r.body, "\"ok\""), "%s", r.body);
    free(r.head);
    r = request("GET", "/v1/models", KEY, NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *j = parse(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "object")), "list");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id")),
                     "stories260K");
    json_decref(j);
    free(r.head);
    expect_error(request("POST", "/v1/chat/completions", "wrong", chat_body), 401, "invalid_api_key");
    expect_error(request("POST", "/v1/chat/completions", NULL, chat_body), 401, "invalid_api_key");
    expect_error(request("GET", "/v1/models", NULL, NULL), 401, "invalid_api_key");
    expect_error(request("GET", "/nope", KEY, NULL), 404, NULL);
    expect_error(request("GET", "/v1/chat/completions", KEY, NULL), 405, NULL);
    expect_error(request("POST", "/health", KEY, "{}"), 405, NULL);
    expect_error(request("POST", "/v1/chat/completions", KEY, "{\"messages\": [}"), 400, NULL);
    expect_error(request("POST", "/v1/completions", KEY, "{\"prompt\": 5}"), 400, NULL);
    expect_error(
        request("POST", "/v1/chat/completions", KEY, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}"), 400,
        NULL);
    /* a body over the limit */
    size_t big = (1u << 20) + 100;
    char *b = malloc(big + 1);
    memset(b, 'a', big);
    b[big] = 0;
    expect_error(request("POST", "/v1/completions", KEY, b), 413, NULL);
    /* a prompt over the context (stories260K on the oracle: 2048 positions) */
    const char *word = "Once upon a time there was a dog. ";
    size_t wl = strlen(word), reps = 20000 / wl;
    strcpy(b, "{\"prompt\":\"");
    for (size_t i = 0; i < reps; i++) strcat(b, word);
    strcat(b, "\"}");
    expect_error(request("POST", "/v1/completions", KEY, b), 400, "context_length_exceeded");
    free(b);
    /* and it still answers */
    r = request("GET", "/health", NULL, NULL);
    cr_assert_eq(r.status, 200);
    free(r.head);
}

/* The text of a non-streaming chat answer; *cached gets usage's cached tokens. */
static char *chat_once(const char *body, long *cached, long *completion) {
    resp r = request("POST", "/v1/chat/completions", KEY, body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *j = parse(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    cr_assert_str_eq(json_string_value(json_object_get(msg, "role")), "assistant");
    char *text = strdup(json_string_value(json_object_get(msg, "content")));
    json_t *u = json_object_get(j, "usage");
    cr_assert(json_integer_value(json_object_get(u, "prompt_tokens")) > 0);
    *completion = (long)json_integer_value(json_object_get(u, "completion_tokens"));
    *cached = (long)json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    json_decref(j);
    free(r.head);
    return text;
}

Test(serve, chat_matches_kiln_chat_and_reuses_prefix) {
    start_server();
    long cached, completion;
    char *a = chat_once(chat_body, &cached, &completion);
    cr_assert_eq(cached, 0);
    cr_assert(completion > 0 && completion <= 24);
    char *b = chat_once(chat_body, &cached, &completion);
    cr_assert(cached > 0, "the second identical request reuses the prefix");
    cr_assert_str_eq(a, b, "a warm run answers as a cold one");
    /* kiln chat through the same template, greedy, same -n */
    static char out[1 << 16], err[1 << 16];
    int rc = tu_run_kiln_input((const char *const[]){"chat", tu_data_file("models/stories260K.gguf"),
                                                     "--chat-template", "chatml", "-n", "24", NULL},
                               "Hello there\n", out, sizeof out, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    size_t n = strlen(out);
    cr_assert(n > 0 && out[n - 1] == '\n');
    out[n - 1] = 0;
    cr_assert_str_eq(a, out);
    free(a);
    free(b);
}

Test(serve, completion_matches_kiln_run) {
    start_server();
    resp r = request("POST", "/v1/completions", KEY, "{\"prompt\":\"Once upon a time\",\"max_tokens\":32}");
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *j = parse(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "object")), "text_completion");
    const char *text = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    static char out[1 << 16], err[1 << 16];
    int rc = tu_run_kiln((const char *const[]){"run", tu_data_file("models/stories260K.gguf"), "-p",
                                               "Once upon a time", "-n", "32", "--no-echo", NULL},
                         out, sizeof out, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    size_t n = strlen(out);
    cr_assert(n > 0 && out[n - 1] == '\n');
    out[n - 1] = 0;
    cr_assert_str_eq(text, out);
    json_decref(j);
    free(r.head);
    /* /metrics (no key, as /health): the request and its 32 tokens counted */
    r = request("GET", "/metrics", NULL, NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    const char *want[] = {"# TYPE kiln_requests_total counter\nkiln_requests_total 1\n",
                          "kiln_completion_tokens_total 32\n", "# TYPE kiln_tokens_per_second gauge\n",
                          "kiln_queue_depth 0\n", "kiln_slots_busy 0\n", "kiln_prompt_tokens_total "};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(r.body, want[i]), "no '%s' in %s", want[i], r.body);
    free(r.head);
}

/* Parses an SSE body: the concatenated deltas, the finish reason, whether [DONE] ended it
 * and the usage chunk's completion tokens (-1 without one). */
static void parse_sse(const char *body, bool chat, char *text, size_t cap, char *finish, bool *done, long *usage) {
    *text = 0;
    *finish = 0;
    *done = false;
    *usage = -1;
    const char *p = body;
    while (*p) {
        const char *e = strstr(p, "\n\n");
        cr_assert(e, "an event without its blank line: %s", p);
        cr_assert(!*done, "events after [DONE]");
        cr_assert(!strncmp(p, "data: ", 6), "%.*s", (int)(e - p), p);
        if (!strncmp(p, "data: [DONE]\n\n", 14)) *done = true;
        else {
            json_error_t je;
            json_t *j = json_loadb(p + 6, (size_t)(e - p - 6), 0, &je);
            cr_assert(j, "%s: %.*s", je.text, (int)(e - p), p);
            json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
            if (!ch)
                *usage = (long)json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
            else {
                json_t *t =
                    chat ? json_object_get(json_object_get(ch, "delta"), "content") : json_object_get(ch, "text");
                if (json_is_string(t)) strncat(text, json_string_value(t), cap - strlen(text) - 1);
                json_t *f = json_object_get(ch, "finish_reason");
                if (json_is_string(f)) strcpy(finish, json_string_value(f));
            }
            json_decref(j);
        }
        p = e + 2;
    }
}

Test(serve, streaming) {
    start_server();
    long cached, completion;
    char *want = chat_once(chat_body, &cached, &completion);
    resp r = request("POST", "/v1/chat/completions", KEY,
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],\"max_tokens\":24,"
                     "\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_assert(strstr(r.head, "text/event-stream"), "%s", r.head);
    char text[8192], finish[32];
    bool done;
    long usage;
    parse_sse(r.body, true, text, sizeof text, finish, &done, &usage);
    cr_assert(done, "no [DONE]: %s", r.body);
    cr_assert_str_eq(text, want);
    cr_assert(!strcmp(finish, "length") || !strcmp(finish, "stop"), "%s", finish);
    cr_assert_eq(usage, completion);
    free(r.head);
    r = request("POST", "/v1/completions", KEY, "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"stream\":true}");
    cr_assert_eq(r.status, 200, "%s", r.body);
    parse_sse(r.body, false, text, sizeof text, finish, &done, &usage);
    cr_assert(done && usage == -1 && text[0], "%s", r.body);
    cr_assert_str_eq(finish, "length");
    free(r.head);
    free(want);
}

Test(serve, disconnect_mid_stream) {
    start_server();
    for (int round = 0; round < 3; round++) {
        int fd = connect_server();
        send_request(fd, "POST", "/v1/completions", KEY,
                     "{\"prompt\":\"Once upon a time\",\"max_tokens\":2000,\"stream\":true}");
        char buf[512];
        ssize_t k = read(fd, buf, sizeof buf); /* the headers and the first events */
        cr_assert(k > 0);
        close(fd);
    }
    long cached, completion;
    char *a = chat_once(chat_body, &cached, &completion);
    cr_assert(completion > 0);
    free(a);
    resp r = request("GET", "/health", NULL, NULL);
    cr_assert_eq(r.status, 200);
    free(r.head);
}

Test(serve, sigterm_exits_zero) {
    start_server();
    /* a stream in flight when the signal comes */
    int fd = connect_server();
    send_request(fd, "POST", "/v1/completions", KEY, "{\"prompt\":\"Once\",\"max_tokens\":2000,\"stream\":true}");
    char buf[256];
    cr_assert(read(fd, buf, sizeof buf) > 0);
    int status = ts_term(&srv, 30);
    cr_assert(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    while (read(fd, buf, sizeof buf) > 0) {}
    close(fd);
}

/* ---- logprobs ----------------------------------------------------------------------------- */

/* Appends an entry's "bytes" to out (NUL-terminated, cap bytes). */
static void add_bytes(json_t *entry, char *out, size_t cap) {
    size_t n = strlen(out), i;
    json_t *b;
    cr_assert(json_is_array(json_object_get(entry, "bytes")));
    json_array_foreach(json_object_get(entry, "bytes"), i, b) {
        cr_assert(n + 1 < cap);
        out[n++] = (char)json_integer_value(b);
    }
    out[n] = 0;
}

/* Chat's logprobs.content entries under greedy decoding, each with k alternatives: every
 * log-probability <= 0, the alternatives best first and led by the chosen token (the
 * argmax); the tokens' bytes concatenated into text. */
static void check_chat_entries(json_t *content, size_t k, char *text, size_t cap) {
    size_t i;
    json_t *e;
    cr_assert(json_is_array(content));
    json_array_foreach(content, i, e) {
        double lp = json_real_value(json_object_get(e, "logprob"));
        cr_assert(lp <= 0, "entry %zu: logprob %g", i, lp);
        json_t *top = json_object_get(e, "top_logprobs");
        cr_assert_eq(json_array_size(top), k, "entry %zu", i);
        for (size_t t = 0; t < k; t++) {
            double v = json_real_value(json_object_get(json_array_get(top, t), "logprob"));
            cr_assert(v <= 0);
            if (t) cr_assert(v <= json_real_value(json_object_get(json_array_get(top, t - 1), "logprob")),
                             "entry %zu: alternatives not sorted", i);
        }
        cr_assert_eq(lp, json_real_value(json_object_get(json_array_get(top, 0), "logprob")),
                     "entry %zu: the greedy pick is the most likely token", i);
        cr_assert_str_eq(json_string_value(json_object_get(e, "token")),
                         json_string_value(json_object_get(json_array_get(top, 0), "token")));
        add_bytes(e, text, cap);
    }
}

static const char lp_chat[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],\"max_tokens\":24,"
                              "\"temperature\":0,\"logprobs\":true,\"top_logprobs\":3%s}";

Test(serve, chat_logprobs) {
    start_server();
    char body[512], text[8192] = "";
    snprintf(body, sizeof body, lp_chat, "");
    resp r = request("POST", "/v1/chat/completions", KEY, body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *j = parse(&r);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    const char *content = json_string_value(json_object_get(json_object_get(ch, "message"), "content"));
    json_t *entries = json_object_get(json_object_get(ch, "logprobs"), "content");
    json_int_t completion = json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
    cr_assert(completion > 0);
    cr_assert_eq((json_int_t)json_array_size(entries), completion, "one entry per completion token");
    check_chat_entries(entries, 3, text, sizeof text);
    cr_assert_str_eq(text, content, "the tokens make up the message");

    /* streamed: the same entries, spread over the chunks that carry their text */
    snprintf(body, sizeof body, lp_chat, ",\"stream\":true");
    resp s = request("POST", "/v1/chat/completions", KEY, body);
    cr_assert_eq(s.status, 200, "%s", s.body);
    json_t *all = json_array();
    char streamed[8192] = "";
    for (const char *p = s.body; *p;) {
        const char *e = strstr(p, "\n\n");
        cr_assert(e);
        if (strncmp(p, "data: [DONE]", 12)) {
            json_t *ev = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
            cr_assert(ev);
            json_t *c = json_array_get(json_object_get(ev, "choices"), 0);
            json_t *t = json_object_get(json_object_get(c, "delta"), "content");
            json_t *l = json_object_get(c, "logprobs");
            if (json_is_string(t) && !json_object_get(json_object_get(c, "delta"), "role")) {
                strcat(streamed, json_string_value(t));
                cr_assert(json_is_array(json_object_get(l, "content")), "a content chunk without logprobs");
            }
            if (json_is_object(l)) json_array_extend(all, json_object_get(l, "content"));
            json_decref(ev);
        }
        p = e + 2;
    }
    cr_assert_str_eq(streamed, content);
    cr_assert_eq(json_array_size(all), json_array_size(entries), "none lost, none repeated");
    for (size_t i = 0; i < json_array_size(all); i++)
        cr_assert(json_equal(json_array_get(all, i), json_array_get(entries, i)), "entry %zu differs", i);
    json_decref(all);
    json_decref(j);
    free(r.head);
    free(s.head);
}

/* /v1/completions' legacy logprobs; with a stop string, the tokens behind it are not
 * reported, streamed or not. */
static json_t *legacy(const char *extra, char *text, size_t cap) {
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"max_tokens\":32,\"logprobs\":2%s}", extra);
    resp r = request("POST", "/v1/completions", KEY, body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *lp = json_object(), *toks = json_array(), *lps = json_array(), *offs = json_array();
    text[0] = 0;
    bool stream = strstr(extra, "stream") != NULL;
    for (const char *p = r.body; *p;) { /* one body, or one event after another */
        const char *e = stream ? strstr(p, "\n\n") : p + strlen(p);
        cr_assert(e);
        if (!stream || strncmp(p, "data: [DONE]", 12)) {
            json_t *ev = stream ? json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL) : json_loads(p, 0, NULL);
            cr_assert(ev);
            json_t *c = json_array_get(json_object_get(ev, "choices"), 0), *l = json_object_get(c, "logprobs");
            strncat(text, json_string_value(json_object_get(c, "text")), cap - strlen(text) - 1);
            if (json_is_object(l)) {
                json_array_extend(toks, json_object_get(l, "tokens"));
                json_array_extend(lps, json_object_get(l, "token_logprobs"));
                json_array_extend(offs, json_object_get(l, "text_offset"));
                size_t i;
                json_t *top;
                json_array_foreach(json_object_get(l, "top_logprobs"), i, top) {
                    cr_assert(json_object_size(top) >= 1 && json_object_size(top) <= 2);
                }
            }
            json_decref(ev);
        }
        p = stream ? e + 2 : e;
    }
    json_object_set_new(lp, "tokens", toks);
    json_object_set_new(lp, "token_logprobs", lps);
    json_object_set_new(lp, "text_offset", offs);
    free(r.head);
    return lp;
}

Test(serve, completion_legacy_logprobs_and_stop) {
    start_server();
    char text[4096], joined[4096] = "";
    json_t *lp = legacy("", text, sizeof text);
    json_t *toks = json_object_get(lp, "tokens");
    cr_assert_eq(json_array_size(toks), 32);
    size_t off = strlen("Once upon a time"); /* offsets count from the prompt's start */
    for (size_t i = 0; i < 32; i++) {
        cr_assert(json_real_value(json_array_get(json_object_get(lp, "token_logprobs"), i)) <= 0);
        cr_assert_eq((size_t)json_integer_value(json_array_get(json_object_get(lp, "text_offset"), i)),
                     off + strlen(joined));
        strcat(joined, json_string_value(json_array_get(toks, i)));
    }
    cr_assert_str_eq(joined, text);
    json_t *st = legacy(",\"stream\":true", text, sizeof text);
    cr_assert(json_equal(st, lp), "streamed logprobs differ");
    json_decref(st);

    /* a stop string in the middle: the answer ends before it, and so do the tokens */
    char stop[8], extra[64], cut[4096];
    size_t at = strlen(joined) / 2;
    memcpy(stop, joined + at, 4);
    stop[4] = 0;
    size_t keep = (size_t)(strstr(joined, stop) - joined);
    snprintf(extra, sizeof extra, ",\"stop\":\"%s\"", stop);
    for (int stream = 0; stream < 2; stream++) {
        if (stream) strcat(extra, ",\"stream\":true");
        json_t *sl = legacy(extra, cut, sizeof cut);
        cr_assert_eq(strlen(cut), keep, "'%s' cut at '%s'", cut, stop);
        json_t *t = json_object_get(sl, "tokens");
        size_t n = json_array_size(t), len = 0;
        cr_assert(n > 0 && n < 32);
        for (size_t i = 0; i < n; i++) {
            cr_assert(len < keep, "token %zu starts past the stop string", i);
            len += strlen(json_string_value(json_array_get(t, i)));
            cr_assert(json_equal(json_array_get(t, i), json_array_get(toks, i)));
        }
        cr_assert(len >= keep, "the tokens cover the answer");
        json_decref(sl);
    }
    json_decref(lp);
}

/* ---- slots -------------------------------------------------------------------------------- */

/* A streamed request read alongside others: its text, and the order (a counter shared by
 * the readers) in which its first content and its finish arrived. */
typedef struct stream_conn {
    int fd;
    char buf[1 << 16];
    size_t n, parsed;
    char text[16384];
    int first, finish;
    bool eof;
} stream_conn;

/* Parses the complete events read so far. */
static void stream_events(stream_conn *c, int *order) {
    char *p, *e;
    c->buf[c->n] = 0;
    if (c->parsed == 0) {
        p = strstr(c->buf, "\r\n\r\n");
        if (!p) return;
        c->parsed = (size_t)(p + 4 - c->buf);
    }
    while ((e = strstr(p = c->buf + c->parsed, "\n\n"))) {
        c->parsed = (size_t)(e + 2 - c->buf);
        if (!strncmp(p, "data: [DONE]", 12)) continue;
        json_t *ev = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
        cr_assert(ev, "%.*s", (int)(e - p), p);
        json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
        const char *t = json_string_value(json_object_get(ch, "text"));
        if (t && *t) {
            if (!c->first) c->first = ++*order;
            strcat(c->text, t);
        }
        if (json_is_string(json_object_get(ch, "finish_reason"))) c->finish = ++*order;
        json_decref(ev);
    }
}

/* Reads the streams side by side until each ends. */
static void read_streams(stream_conn *c, size_t n) {
    int order = 0;
    for (size_t open = n; open;) {
        open = 0;
        fd_set rd;
        FD_ZERO(&rd);
        int top = 0;
        for (size_t i = 0; i < n; i++)
            if (!c[i].eof) FD_SET(c[i].fd, &rd), top = c[i].fd > top ? c[i].fd : top, open++;
        if (!open) break;
        struct timeval tv = {.tv_sec = 30};
        cr_assert(select(top + 1, &rd, NULL, NULL, &tv) > 0, "the streams stalled");
        for (size_t i = 0; i < n; i++) {
            if (c[i].eof || !FD_ISSET(c[i].fd, &rd)) continue;
            ssize_t k = read(c[i].fd, c[i].buf + c[i].n, sizeof c[i].buf - c[i].n - 1);
            cr_assert(k >= 0);
            if (k == 0) c[i].eof = true, close(c[i].fd);
            c[i].n += (size_t)k;
            stream_events(&c[i], &order);
        }
    }
}

static char *completion_text(const char *prompt, int max_tokens, long *cached, long *prompt_tokens) {
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":%d}", prompt, max_tokens);
    resp r = request("POST", "/v1/completions", KEY, body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *j = parse(&r);
    char *t = strdup(json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text")));
    json_t *u = json_object_get(j, "usage");
    if (cached) *cached = (long)json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"),
                                                                   "cached_tokens"));
    if (prompt_tokens) *prompt_tokens = (long)json_integer_value(json_object_get(u, "prompt_tokens"));
    json_decref(j);
    free(r.head);
    return t;
}

static const char *const two_prompts[2] = {"Once upon a time", "The little dog ran to the park"};

/* Two streamed requests at once on two slots. */
static void two_streams(stream_conn *c, int max_tokens) {
    for (int i = 0; i < 2; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":%d,\"stream\":true}", two_prompts[i],
                 max_tokens);
        memset(&c[i], 0, sizeof c[i]);
        c[i].fd = connect_server();
        send_request(c[i].fd, "POST", "/v1/completions", KEY, body);
    }
    read_streams(c, 2);
}

/* Two streams at once on a server started with args: both start before either ends, each
 * answers as it does alone, and most steps take both slots' tokens; returns the metrics. */
static char *two_streams_at_once(const char *const *args) {
    start_server_with(args);
    static stream_conn c[2];
    two_streams(c, 200);
    for (int i = 0; i < 2; i++) cr_assert(c[i].first && c[i].finish, "stream %d: %s", i, c[i].buf);
    int first = c[0].first > c[1].first ? c[0].first : c[1].first;
    int finish = c[0].finish < c[1].finish ? c[0].finish : c[1].finish;
    cr_assert(first < finish, "both started before either finished (first %d %d, finish %d %d)", c[0].first,
              c[1].first, c[0].finish, c[1].finish);
    for (int i = 0; i < 2; i++) { /* as each answers alone */
        char *alone = completion_text(two_prompts[i], 200, NULL, NULL);
        cr_assert_str_eq(c[i].text, alone, "stream %d", i);
        free(alone);
    }
    resp r = request("GET", "/metrics", NULL, NULL);
    cr_assert(strstr(r.body, "kiln_slots_busy 0\n") && strstr(r.body, "kiln_requests_total 4\n"), "%s", r.body);
    /* the slots stepped together: most steps took both slots' tokens */
    const char *two = strstr(r.body, "kiln_step_batch_size_bucket{le=\"2\"} "), *one = strstr(r.body, "kiln_step_batch_size_bucket{le=\"1\"} ");
    const char *count = strstr(r.body, "kiln_step_batch_size_count ");
    cr_assert(one && two && count && strstr(r.body, "kiln_step_seconds_bucket{le=\"+Inf\"}"), "%s", r.body);
    long n1 = atol(one + strlen("kiln_step_batch_size_bucket{le=\"1\"} ")), n2 = atol(two + strlen("kiln_step_batch_size_bucket{le=\"2\"} "));
    cr_assert(n2 - n1 >= 40, "%ld steps of two calls (of %ld steps)", n2 - n1, atol(count + 27));
    char *body = strdup(r.body);
    free(r.head);
    return body;
}

/* The oracle's engines take their turns inside a step (they have no eval_step). */
Test(serve, parallel_slots_generate_at_once) {
    char *m = two_streams_at_once((const char *const[]){"--parallel", "2", NULL});
    cr_assert(strstr(m, "kiln_step_tokens_together_total 0\n"), "%s", m);
    free(m);
}

/* A GPU plan's slots decode in one pass over the weights (plan/plan_batch.c): the same
 * text as each request alone, most tokens evaluated together. */
Test(serve, parallel_slots_on_the_gpu_step_together, .timeout = 240) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    d->ops->destroy(d);
    char *m = two_streams_at_once((const char *const[]){"--parallel", "2", "--device", "vulkan:0", NULL});
    const char *t = strstr(m, "\nkiln_step_tokens_together_total ");
    cr_assert(t, "%s", m);
    long together = atol(t + strlen("\nkiln_step_tokens_together_total "));
    cr_assert(together >= 80, "%ld tokens evaluated together", together);
    free(m);
}

Test(serve, batch_tokens_bounds) {
    static char out[4096], err[4096];
    const char *bad[] = {"0", "65537", "x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = tu_run_kiln((const char *const[]){"serve", tu_data_file("models/stories260K.gguf"), "--batch-tokens",
                                                   bad[i], NULL},
                             out, sizeof out, err, sizeof err);
        cr_assert_eq(rc, 2, "--batch-tokens %s: %d", bad[i], rc);
        cr_assert(strstr(err, "--batch-tokens") && strstr(err, "1 to 65536"), "%s", err);
    }
}

/* A request goes to the free slot that holds the longest part of its prompt: with the two
 * prompts in two slots, each prompt again reuses all of its cache, whatever the order. */
Test(serve, parallel_prefix_reuse_picks_the_slot) {
    start_server_with((const char *const[]){"--parallel", "2", NULL});
    static stream_conn c[2];
    two_streams(c, 200); /* at once: one slot each */
    const int order[3] = {0, 0, 1}; /* the least recently used slot would be the wrong one twice */
    for (int i = 0; i < 3; i++) {
        long cached, prompt;
        char *t = completion_text(two_prompts[order[i]], 4, &cached, &prompt);
        cr_assert_eq(cached, prompt - 1, "request %d (prompt %d): %ld of %ld cached", i, order[i], cached, prompt);
        free(t);
    }
}

/* A prompt that shares only BOS with a slot's cache takes the empty slot rather than
 * evicting that cache, so the first conversation is still whole afterwards. */
Test(serve, parallel_unrelated_prompt_keeps_the_other_cache) {
    start_server_with((const char *const[]){"--parallel", "2", NULL});
    long cached, prompt;
    for (int i = 0; i < 3; i++) {
        char *t = completion_text(two_prompts[i == 1], 4, &cached, &prompt);
        free(t);
        if (i == 2) cr_assert_eq(cached, prompt - 1, "%ld of %ld cached", cached, prompt);
        else cr_assert_eq(cached, 0, "request %d: %ld cached (an empty slot)", i, cached);
    }
}

static void expect_busy(void) {
    resp r = request("POST", "/v1/completions", KEY, "{\"prompt\":\"Once\",\"max_tokens\":4}");
    cr_assert_eq(r.status, 503, "%s", r.head);
    cr_assert(strstr(r.head, "Retry-After: 1\r\n"), "%s", r.head);
    free(r.head);
}

Test(serve, full_queue_answers_503) {
    start_server_with((const char *const[]){"--parallel", "1", "--queue", "0", NULL});
    int fd = connect_server();
    send_request(fd, "POST", "/v1/completions", KEY, "{\"prompt\":\"Once\",\"max_tokens\":2000,\"stream\":true}");
    char buf[512];
    cr_assert(read(fd, buf, sizeof buf) > 0); /* generating */
    expect_busy();
    close(fd); /* cancelled at its next token: the slot frees shortly */
    int status = 0;
    for (int i = 0; i < 200 && status != 200; i++) {
        resp r = request("POST", "/v1/completions", KEY, "{\"prompt\":\"Once\",\"max_tokens\":4}");
        status = r.status;
        free(r.head);
        if (status != 200) nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
    }
    cr_assert_eq(status, 200);
}

Test(serve, parallel_bounds) {
    static char out[4096], err[4096];
    const char *bad[] = {"0", "65", "x", "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = tu_run_kiln((const char *const[]){"serve", tu_data_file("models/stories260K.gguf"), "--parallel",
                                                   bad[i], NULL},
                             out, sizeof out, err, sizeof err);
        cr_assert_eq(rc, 2, "--parallel %s: %d", bad[i], rc);
        cr_assert(strstr(err, "--parallel") && strstr(err, "1 to 64"), "%s", err);
    }
}

/* Qwen3.5 on a GPU plan (lavapipe in CI): the same prompt three times gives the same text;
 * the second finds the whole prompt cached (its last token evaluated again: the recurrent
 * state replayed from the prompt's start once), the third restores the snapshot that
 * replay left; a prompt that continues the first answer reuses the cache past the prompt,
 * into the generated tokens (a rewind to a decode-time snapshot and a short replay). */
Test(serve, qwen35_on_the_gpu_reuses_its_recurrent_state, .timeout = 240) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    d->ops->destroy(d);
    ts_start(&srv, tu_data_file("models/qwen35-tiny.gguf"), (const char *const[]){"--device", "vulkan:0", NULL},
             NULL);
    const char *p = "Once upon a time";
    long cached, prompt, again;
    char *a = completion_text(p, 12, &cached, &prompt);
    cr_assert_eq(cached, 0);
    for (int i = 0; i < 2; i++) {
        char *b = completion_text(p, 12, &cached, &again);
        cr_assert_eq(again, prompt);
        cr_assert_eq(cached, prompt - 1, "request %d: %ld of %ld cached", i + 2, cached, prompt);
        cr_assert_str_eq(b, a, "request %d", i + 2);
        free(b);
    }
    json_t *body = json_pack("{s:s+,s:i}", "prompt", p, a, "max_tokens", 4);
    char *text = json_dumps(body, 0);
    resp r = request("POST", "/v1/completions", KEY, text);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *j = parse(&r);
    json_t *u = json_object_get(j, "usage");
    long c = (long)json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    long n = (long)json_integer_value(json_object_get(u, "prompt_tokens"));
    cr_log_info("qwen35 on vulkan:0: prompt %ld tokens, again %ld cached; the continuation %ld of %ld", prompt,
                prompt - 1, c, n);
    cr_assert(c > prompt && c < n, "the continuation: %ld of %ld cached (the first prompt %ld)", c, n, prompt);
    json_decref(j), json_decref(body);
    free(text), free(r.head), free(a);
}
