/* kiln serve's every endpoint and error path over raw HTTP: a table of requests (method,
 * path, Authorization, Content-Type, body) and the answer OpenAI's API gives to each:
 * the status and the error object {"error":{"message","type","param","code"}}, whose
 * param names the offending field. One server (stories260K on the CPU oracle) answers
 * the whole table; every row is checked and reported, not just the first that fails. */
#include "tests/util/testutil.h"
#include "tests/util/testutil_serve.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ts_server srv = {.pid = -1};

static void fini(void) { ts_kill(&srv); }

TestSuite(serve_errors, .fini = fini, .timeout = 120);

static const char ANY[] = "<any>";  /* code/param: not checked */
static const char NOCT[] = "<none>"; /* no Content-Type header */
#define AK "Bearer " TS_KEY
#define FORM "application/x-www-form-urlencoded"

typedef struct row {
    const char *method, *path;
    const char *auth;  /* the Authorization header's value; NULL: none */
    const char *body;  /* NULL: no body, no Content-Length */
    int status;
    const char *code;  /* the error's code; NULL: JSON null; ANY */
    const char *param; /* the error's param; NULL: JSON null; ANY */
    const char *allow; /* 405: the Allow header */
    const char *ct;    /* Content-Type; NULL: application/json with a body; NOCT: none */
} row;

/* Bodies: a chat or a completion of one token plus extra fields. */
#define CHAT(f) "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":1" f "}"
#define CHAT0(f) "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]" f "}"
#define CMPL(f) "{\"prompt\":\"Once\",\"max_tokens\":1" f "}"
#define MSG(m) "{\"max_tokens\":1,\"messages\":" m "}"
#define P_CHAT(f, param) {"POST", "/v1/chat/completions", AK, CHAT(f), 400, ANY, param}
#define P_CMPL(f, param) {"POST", "/v1/completions", AK, CMPL(f), 400, ANY, param}
#define OK_CHAT(body) {"POST", "/v1/chat/completions", AK, body, 200}
#define OK_CMPL(body) {"POST", "/v1/completions", AK, body, 200}

static const row rows[] = {
    /* routing */
    {"GET", "/nope", AK, NULL, 404, ANY, NULL},
    {"POST", "/v1/nope", AK, CHAT(""), 404, ANY, NULL},
    {"GET", "/v1/chat/completions", AK, NULL, 405, ANY, NULL, "POST"},
    {"PUT", "/v1/chat/completions", AK, CHAT(""), 405, ANY, NULL, "POST"},
    {"GET", "/v1/completions", AK, NULL, 405, ANY, NULL, "POST"},
    {"DELETE", "/v1/completions", AK, NULL, 405, ANY, NULL, "POST"},
    {"POST", "/v1/models", AK, "{}", 405, ANY, NULL, "GET"},
    {"DELETE", "/v1/models", AK, NULL, 405, ANY, NULL, "GET"},
    {"POST", "/health", NULL, "{}", 405, ANY, NULL, "GET"},
    {"POST", "/metrics", NULL, "{}", 405, ANY, NULL, "GET"},
    /* authentication: everything but /health and /metrics */
    {"GET", "/health", NULL, NULL, 200},
    {"GET", "/health", "Bearer wrong", NULL, 200},
    {"GET", "/metrics", NULL, NULL, 200},
    {"GET", "/v1/models", AK, NULL, 200},
    {"GET", "/v1/models", NULL, NULL, 401, "invalid_api_key", NULL},
    {"GET", "/v1/models", "Bearer wrong", NULL, 401, "invalid_api_key", NULL},
    {"POST", "/v1/chat/completions", NULL, CHAT(""), 401, "invalid_api_key", NULL},
    {"POST", "/v1/chat/completions", "Bearer wrong", CHAT(""), 401, "invalid_api_key", NULL},
    {"POST", "/v1/completions", "Bearer ", CMPL(""), 401, "invalid_api_key", NULL},
    {"POST", "/v1/completions", "Bearer test-ke", CMPL(""), 401, "invalid_api_key", NULL},
    {"POST", "/v1/completions", "Bearer test-key2", CMPL(""), 401, "invalid_api_key", NULL},
    {"POST", "/v1/completions", "Basic dGVzdC1rZXk6", CMPL(""), 401, "invalid_api_key", NULL},
    {"POST", "/v1/completions", TS_KEY, CMPL(""), 401, "invalid_api_key", NULL},
    /* the body as a whole */
    {"POST", "/v1/chat/completions", AK, "", 400, ANY, NULL},
    {"POST", "/v1/completions", AK, NULL, 400, ANY, NULL},
    {"POST", "/v1/chat/completions", AK, "{\"messages\": [}", 400, ANY, NULL},
    {"POST", "/v1/completions", AK, CMPL("") "x", 400, ANY, NULL},
    {"POST", "/v1/completions", AK, "{\"prompt\":\"Once\",}", 400, ANY, NULL},
    {"POST", "/v1/completions", AK, "{'prompt':'Once'}", 400, ANY, NULL},
    {"POST", "/v1/completions", AK, "[]", 400, ANY, NULL},
    {"POST", "/v1/completions", AK, "\"Once\"", 400, ANY, NULL},
    {"POST", "/v1/completions", AK, "null", 400, ANY, NULL},
    {"POST", "/v1/chat/completions", AK, "42", 400, ANY, NULL},
    {"POST", "/v1/completions", AK, "\xff" CMPL(""), 400, ANY, NULL},
    {"POST", "/v1/completions", AK, CMPL(",\"max_tokens\":99999999999999999999999"), 400, ANY, NULL},
    {"POST", "/v1/completions", AK, CMPL(",\"temperature\":1e400"), 400, ANY, NULL},
    /* JSON is JSON whatever the Content-Type says (curl -d sends a form type) */
    {"POST", "/v1/completions", AK, CMPL(""), 200, .ct = NOCT},
    {"POST", "/v1/completions", AK, CMPL(""), 200, .ct = FORM},
    /* text: invalid UTF-8 and escapes that are no character, in content and prompt */
    {"POST", "/v1/chat/completions", AK, MSG("[{\"role\":\"user\",\"content\":\"a\xc3\x28 b\"}]"), 400, ANY, NULL},
    {"POST", "/v1/chat/completions", AK, MSG("[{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]"), 400, ANY, NULL},
    {"POST", "/v1/chat/completions", AK, MSG("[{\"role\":\"user\",\"content\":\"\\ud800\"}]"), 400, ANY, NULL},
    {"POST", "/v1/completions", AK, "{\"prompt\":\"\xc0\xaf\",\"max_tokens\":1}", 400, ANY, NULL},
    {"POST", "/v1/completions", AK, "{\"prompt\":\"\xf8\x88\x80\x80\x80\",\"max_tokens\":1}", 400, ANY, NULL},
    {"POST", "/v1/completions", AK, "{\"prompt\":\"abc\xe2\x82\",\"max_tokens\":1}", 400, ANY, NULL},
    OK_CHAT(MSG("[{\"role\":\"user\",\"content\":\"h\xc3\xa9llo \xe6\x97\xa5 \xf0\x9f\x8e\x89 \\u00e9\"}]")),
    /* model */
    P_CHAT(",\"model\":5", "model"),
    P_CMPL(",\"model\":[\"stories260K\"]", "model"),
    /* messages */
    {"POST", "/v1/chat/completions", AK, "{\"max_tokens\":1}", 400, ANY, "messages"},
    {"POST", "/v1/chat/completions", AK, MSG("\"Hi\""), 400, ANY, "messages"},
    {"POST", "/v1/chat/completions", AK, MSG("{\"role\":\"user\",\"content\":\"Hi\"}"), 400, ANY, "messages"},
    {"POST", "/v1/chat/completions", AK, MSG("[]"), 400, ANY, "messages"},
    {"POST", "/v1/chat/completions", AK, MSG("[5]"), 400, ANY, "messages[0]"},
    {"POST", "/v1/chat/completions", AK, MSG("[\"Hi\"]"), 400, ANY, "messages[0]"},
    {"POST", "/v1/chat/completions", AK, MSG("[{\"content\":\"Hi\"}]"), 400, ANY, "messages[0].role"},
    {"POST", "/v1/chat/completions", AK, MSG("[{\"role\":5,\"content\":\"Hi\"}]"), 400, ANY, "messages[0].role"},
    {"POST", "/v1/chat/completions", AK, MSG("[{\"role\":\"wizard\",\"content\":\"Hi\"}]"), 400, ANY,
     "messages[0].role"},
    {"POST", "/v1/chat/completions", AK, MSG("[{\"role\":\"USER\",\"content\":\"Hi\"}]"), 400, ANY,
     "messages[0].role"},
    {"POST", "/v1/chat/completions", AK, MSG("[{\"role\":\"user\"}]"), 400, ANY, "messages[0].content"},
    {"POST", "/v1/chat/completions", AK, MSG("[{\"role\":\"user\",\"content\":5}]"), 400, ANY, "messages[0].content"},
    {"POST", "/v1/chat/completions", AK, MSG("[{\"role\":\"user\",\"content\":true}]"), 400, ANY,
     "messages[0].content"},
    {"POST", "/v1/chat/completions", AK, MSG("[{\"role\":\"user\",\"content\":{\"text\":\"Hi\"}}]"), 400, ANY,
     "messages[0].content"},
    {"POST", "/v1/chat/completions", AK,
     MSG("[{\"role\":\"system\",\"content\":\"Be brief\"},{\"role\":\"user\",\"content\":[\"Hi\"]}]"), 400, ANY,
     "messages[1].content[0]"},
    {"POST", "/v1/chat/completions", AK, MSG("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":5}]}]"), 400,
     ANY, "messages[0].content[0]"},
    {"POST", "/v1/chat/completions", AK,
     MSG("[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://x/y.png\"}}]}]"),
     400, ANY, "messages[0].content[0]"},
    OK_CHAT(MSG("[{\"role\":\"developer\",\"content\":\"Be brief\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                "\"text\":\"Hi\"},{\"type\":\"text\",\"text\":\" there\"}]}]")),
    /* prompt */
    {"POST", "/v1/completions", AK, "{\"max_tokens\":1}", 400, ANY, "prompt"},
    {"POST", "/v1/completions", AK, "{\"prompt\":5,\"max_tokens\":1}", 400, ANY, "prompt"},
    {"POST", "/v1/completions", AK, "{\"prompt\":true,\"max_tokens\":1}", 400, ANY, "prompt"},
    {"POST", "/v1/completions", AK, "{\"prompt\":{\"text\":\"Once\"},\"max_tokens\":1}", 400, ANY, "prompt"},
    {"POST", "/v1/completions", AK, "{\"prompt\":[],\"max_tokens\":1}", 400, ANY, "prompt"},
    {"POST", "/v1/completions", AK, "{\"prompt\":[\"a\",\"b\"],\"max_tokens\":1}", 400, ANY, "prompt"},
    {"POST", "/v1/completions", AK, "{\"prompt\":[5],\"max_tokens\":1}", 400, ANY, "prompt"},
    OK_CMPL("{\"prompt\":[\"Once\"],\"max_tokens\":1}"),
    /* max_tokens, max_completion_tokens: integers >= 1 and within the context */
    {"POST", "/v1/chat/completions", AK, CHAT0(",\"max_tokens\":\"5\""), 400, ANY, "max_tokens"},
    {"POST", "/v1/chat/completions", AK, CHAT0(",\"max_tokens\":1.5"), 400, ANY, "max_tokens"},
    {"POST", "/v1/chat/completions", AK, CHAT0(",\"max_tokens\":1e3"), 400, ANY, "max_tokens"},
    {"POST", "/v1/chat/completions", AK, CHAT0(",\"max_tokens\":0"), 400, ANY, "max_tokens"},
    {"POST", "/v1/chat/completions", AK, CHAT0(",\"max_tokens\":-1"), 400, ANY, "max_tokens"},
    {"POST", "/v1/chat/completions", AK, CHAT0(",\"max_tokens\":true"), 400, ANY, "max_tokens"},
    {"POST", "/v1/chat/completions", AK, CHAT0(",\"max_tokens\":1000000000"), 400, ANY, "max_tokens"},
    {"POST", "/v1/completions", AK, "{\"prompt\":\"Once\",\"max_tokens\":9223372036854775807}", 400, ANY,
     "max_tokens"},
    {"POST", "/v1/chat/completions", AK, CHAT0(",\"max_completion_tokens\":\"5\""), 400, ANY, "max_completion_tokens"},
    {"POST", "/v1/chat/completions", AK, CHAT0(",\"max_completion_tokens\":2.5"), 400, ANY, "max_completion_tokens"},
    {"POST", "/v1/chat/completions", AK, CHAT0(",\"max_completion_tokens\":0"), 400, ANY, "max_completion_tokens"},
    {"POST", "/v1/chat/completions", AK, CHAT0(",\"max_completion_tokens\":-7"), 400, ANY, "max_completion_tokens"},
    {"POST", "/v1/chat/completions", AK, CHAT0(",\"max_completion_tokens\":1000000000"), 400, ANY,
     "max_completion_tokens"},
    OK_CHAT(CHAT0(",\"max_completion_tokens\":1")),
    /* sampling */
    P_CHAT(",\"temperature\":\"hot\"", "temperature"),
    P_CHAT(",\"temperature\":true", "temperature"),
    P_CHAT(",\"temperature\":[]", "temperature"),
    P_CHAT(",\"temperature\":-0.5", "temperature"),
    P_CMPL(",\"temperature\":2.5", "temperature"),
    P_CHAT(",\"top_p\":\"x\"", "top_p"),
    P_CHAT(",\"top_p\":1.5", "top_p"),
    P_CMPL(",\"top_p\":-0.1", "top_p"),
    P_CHAT(",\"top_k\":\"x\"", "top_k"),
    P_CHAT(",\"top_k\":-1", "top_k"),
    P_CMPL(",\"top_k\":1.5", "top_k"),
    P_CHAT(",\"min_p\":\"x\"", "min_p"),
    P_CHAT(",\"min_p\":1.5", "min_p"),
    P_CMPL(",\"min_p\":-0.1", "min_p"),
    P_CHAT(",\"presence_penalty\":\"x\"", "presence_penalty"),
    P_CHAT(",\"presence_penalty\":2.5", "presence_penalty"),
    P_CMPL(",\"presence_penalty\":-2.5", "presence_penalty"),
    P_CHAT(",\"frequency_penalty\":{}", "frequency_penalty"),
    P_CHAT(",\"frequency_penalty\":3", "frequency_penalty"),
    P_CMPL(",\"frequency_penalty\":-3", "frequency_penalty"),
    P_CHAT(",\"repetition_penalty\":\"x\"", "repetition_penalty"),
    P_CHAT(",\"repetition_penalty\":0", "repetition_penalty"),
    P_CMPL(",\"repetition_penalty\":-1", "repetition_penalty"),
    P_CHAT(",\"seed\":\"x\"", "seed"),
    P_CHAT(",\"seed\":1.5", "seed"),
    P_CMPL(",\"seed\":{}", "seed"),
    OK_CHAT(CHAT(",\"temperature\":0.7,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"presence_penalty\":0.5,"
                 "\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,\"seed\":-3")),
    /* stop */
    P_CHAT(",\"stop\":5", "stop"),
    P_CHAT(",\"stop\":{}", "stop"),
    P_CHAT(",\"stop\":[1]", "stop"),
    P_CMPL(",\"stop\":[\"a\",null]", "stop"),
    P_CMPL(",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]", "stop"),
    OK_CMPL(CMPL(",\"stop\":[\"a\",\"b\",\"c\",\"d\"]")),
    /* n: one choice per request */
    P_CHAT(",\"n\":2", "n"),
    P_CHAT(",\"n\":0", "n"),
    P_CHAT(",\"n\":\"1\"", "n"),
    P_CMPL(",\"n\":1.5", "n"),
    OK_CMPL(CMPL(",\"n\":1")),
    /* stream and stream_options */
    P_CHAT(",\"stream\":\"yes\"", "stream"),
    P_CMPL(",\"stream\":1", "stream"),
    P_CHAT(",\"stream\":true,\"stream_options\":5", "stream_options"),
    P_CHAT(",\"stream\":true,\"stream_options\":[]", "stream_options"),
    P_CHAT(",\"stream\":true,\"stream_options\":{\"include_usage\":\"yes\"}", "stream_options.include_usage"),
    P_CHAT(",\"stream_options\":{\"include_usage\":true}", "stream_options"),
    P_CMPL(",\"stream\":false,\"stream_options\":{\"include_usage\":true}", "stream_options"),
    /* logprobs: chat takes a boolean and top_logprobs 0..20, completions an integer 0..5 */
    P_CHAT(",\"logprobs\":\"yes\"", "logprobs"),
    P_CHAT(",\"logprobs\":1", "logprobs"),
    P_CHAT(",\"logprobs\":true,\"top_logprobs\":\"x\"", "top_logprobs"),
    P_CHAT(",\"logprobs\":true,\"top_logprobs\":-1", "top_logprobs"),
    P_CHAT(",\"logprobs\":true,\"top_logprobs\":21", "top_logprobs"),
    P_CHAT(",\"logprobs\":true,\"top_logprobs\":1.5", "top_logprobs"),
    P_CHAT(",\"top_logprobs\":2", "top_logprobs"),
    P_CMPL(",\"logprobs\":\"x\"", "logprobs"),
    P_CMPL(",\"logprobs\":true", "logprobs"),
    P_CMPL(",\"logprobs\":6", "logprobs"),
    P_CMPL(",\"logprobs\":-1", "logprobs"),
    /* null is "the default" for every optional field; unknown fields are ignored */
    OK_CHAT(CHAT(",\"model\":null,\"temperature\":null,\"top_p\":null,\"top_k\":null,\"min_p\":null,"
                 "\"presence_penalty\":null,\"frequency_penalty\":null,\"repetition_penalty\":null,\"seed\":null,"
                 "\"stop\":null,\"n\":null,\"stream\":null,\"stream_options\":null,\"logprobs\":null,"
                 "\"top_logprobs\":null,\"max_completion_tokens\":null,\"user\":\"u1\",\"future_field\":[1,{}]")),
    OK_CMPL(CMPL(",\"model\":\"any-name\",\"suffix\":null,\"echo\":false,\"logprobs\":null")),
};

/* Checks one answer against its row; every mismatch is a failed expectation naming the row. */
static void check(const char *label, const row *w, const ts_resp *r) {
    cr_expect_eq(r->status, w->status, "%s: status %d, want %d: %.400s", label, r->status, w->status, r->raw);
    if (r->status != w->status) return;
    char ct[128] = "";
    ts_header(r, "Content-Type", ct, sizeof ct);
    if (w->allow) {
        char allow[64] = "";
        cr_expect(ts_header(r, "Allow", allow, sizeof allow), "%s: 405 without Allow", label);
        cr_expect_str_eq(allow, w->allow, "%s: Allow: %s", label, allow);
    }
    if (w->status == 401) { /* RFC 9110: a 401 names the scheme it wants */
        char auth[64] = "";
        cr_expect(ts_header(r, "WWW-Authenticate", auth, sizeof auth), "%s: 401 without WWW-Authenticate", label);
        cr_expect_str_eq(auth, "Bearer", "%s: WWW-Authenticate: %s", label, auth);
    }
    if (w->status == 200) {
        if (strstr(ct, "json")) {
            json_t *j = json_loadb(r->body, r->body_n, 0, NULL);
            cr_expect(json_is_object(j), "%s: 200 with a body that is no JSON object: %.300s", label, r->body);
            json_decref(j);
        }
        return;
    }
    cr_expect(!strncmp(ct, "application/json", 16), "%s: error with Content-Type '%s'", label, ct);
    json_error_t je;
    json_t *j = json_loadb(r->body, r->body_n, 0, &je);
    cr_expect(j, "%s: error body is not JSON (%s): %.300s", label, je.text, r->body);
    if (!j) return;
    json_t *e = json_object_get(j, "error");
    cr_expect(json_is_object(e) && json_object_size(j) == 1, "%s: not {\"error\":{...}}: %s", label, r->body);
    json_t *msg = json_object_get(e, "message"), *type = json_object_get(e, "type");
    json_t *param = json_object_get(e, "param"), *code = json_object_get(e, "code");
    cr_expect(json_is_string(msg) && json_string_length(msg) > 0, "%s: message: %s", label, r->body);
    /* OpenAI types every 4xx invalid_request_error; its clients tell them apart by status */
    cr_expect(json_is_string(type) && !strcmp(json_string_value(type), "invalid_request_error"), "%s: type: %s",
              label, r->body);
    cr_expect(json_is_string(param) || json_is_null(param), "%s: param must be a string or null: %s", label,
              r->body);
    cr_expect(json_is_string(code) || json_is_null(code), "%s: code must be a string or null: %s", label, r->body);
    if (w->param != ANY) {
        if (!w->param) cr_expect(json_is_null(param), "%s: param should be null: %s", label, r->body);
        else
            cr_expect(json_is_string(param) && !strcmp(json_string_value(param), w->param),
                      "%s: param should be \"%s\": %s", label, w->param, r->body);
    }
    if (w->code != ANY) {
        if (!w->code) cr_expect(json_is_null(code), "%s: code should be null: %s", label, r->body);
        else
            cr_expect(json_is_string(code) && !strcmp(json_string_value(code), w->code),
                      "%s: code should be \"%s\": %s", label, w->code, r->body);
    }
    json_decref(j);
}

/* The row's request as bytes (body_n: the body's length, for bodies with NULs). */
static char *build(const row *w, const char *body, size_t body_n, size_t *n) {
    size_t cap = strlen(w->path) + body_n + 512;
    char *b = malloc(cap);
    cr_assert(b);
    const char *ct = w->ct == NOCT ? NULL : w->ct ? w->ct : body ? "application/json" : NULL;
    int h = snprintf(b, cap, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n", w->method, w->path);
    if (w->auth) h += snprintf(b + h, cap - (size_t)h, "Authorization: %s\r\n", w->auth);
    if (ct) h += snprintf(b + h, cap - (size_t)h, "Content-Type: %s\r\n", ct);
    if (body) h += snprintf(b + h, cap - (size_t)h, "Content-Length: %zu\r\n", body_n);
    h += snprintf(b + h, cap - (size_t)h, "\r\n");
    if (body) memcpy(b + h, body, body_n);
    *n = (size_t)h + (body ? body_n : 0);
    return b;
}

static void run_row(const char *label, const row *w, const char *body, size_t body_n) {
    size_t n;
    char *req = build(w, body, body_n, &n);
    ts_resp r;
    bool ok = ts_exchange(&srv, req, n, false, 60, &r);
    free(req);
    cr_expect(ok, "%s: no connection", label);
    if (ok) check(label, w, &r);
    ts_resp_free(&r);
}

Test(serve_errors, table) {
    ts_start(&srv, tu_data_file("models/stories260K.gguf"), NULL, NULL);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const row *w = &rows[i];
        char label[320];
        snprintf(label, sizeof label, "row %zu (%s %s %.160s)", i, w->method, w->path, w->body ? w->body : "");
        run_row(label, w, w->body, w->body ? strlen(w->body) : 0);
    }
    cr_assert(ts_alive(&srv), "the server died");
}

/* Sizes: the body limit (1 MiB) on both sides, and a prompt longer than the context. */
Test(serve_errors, sizes) {
    ts_start(&srv, tu_data_file("models/stories260K.gguf"), NULL, NULL);
    const size_t limit = 1u << 20;
    char *b = malloc(limit + 101);
    cr_assert(b);
    /* exactly the limit: a small request padded with JSON whitespace is answered */
    const char *small = CMPL("");
    memset(b, ' ', limit);
    memcpy(b, small, strlen(small));
    run_row("1 MiB body", &(row){"POST", "/v1/completions", AK, "", 200}, b, limit);
    run_row("1 MiB + 1 body", &(row){"POST", "/v1/completions", AK, "", 413, ANY, NULL}, b, limit + 1);
    memset(b, 'a', limit + 100);
    run_row("garbage over 1 MiB", &(row){"POST", "/v1/chat/completions", AK, "", 413, ANY, NULL}, b, limit + 100);
    /* a prompt over stories260K's 2048 positions, on both endpoints */
    const char *word = "Once upon a time there was a dog. ";
    size_t wl = strlen(word), n = 0;
    n += (size_t)sprintf(b, "{\"max_tokens\":1,\"prompt\":\"");
    for (size_t i = 0; i < 20000 / wl; i++, n += wl) memcpy(b + n, word, wl);
    n += (size_t)sprintf(b + n, "\"}");
    run_row("prompt over the context",
            &(row){"POST", "/v1/completions", AK, "", 400, "context_length_exceeded", "prompt"}, b, n);
    n = (size_t)sprintf(b, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"");
    for (size_t i = 0; i < 20000 / wl; i++, n += wl) memcpy(b + n, word, wl);
    n += (size_t)sprintf(b + n, "\"}]}");
    run_row("chat over the context",
            &(row){"POST", "/v1/chat/completions", AK, "", 400, "context_length_exceeded", "messages"}, b, n);
    free(b);
    cr_assert(ts_alive(&srv), "the server died");
    ts_resp r = ts_request(&srv, "GET", "/health", NULL, NULL);
    cr_assert_eq(r.status, 200);
    ts_resp_free(&r);
}

/* HTTP/1.1 details: keep-alive (an error, then an answer on the same connection) and a
 * chunked request body. */
Test(serve_errors, keep_alive_and_chunked) {
    ts_start(&srv, tu_data_file("models/stories260K.gguf"), NULL, NULL);
    int fd = ts_connect(&srv, 30);
    cr_assert(fd >= 0);
    const char *bad = "{\"prompt\":5}", *good = CMPL("");
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: " AK "\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\n\r\n%s"
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: " AK "\r\nContent-Type: "
                     "application/json\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(bad), bad, strlen(good), good);
    cr_assert(ts_send_all(fd, req, (size_t)n));
    size_t len;
    bool clean;
    char *raw = ts_read_all(fd, &len, &clean);
    close(fd);
    cr_assert(raw);
    cr_assert(!strncmp(raw, "HTTP/1.1 400 ", 13), "%s", raw);
    char *second = strstr(raw + 1, "HTTP/1.1 ");
    cr_assert(second && !strncmp(second, "HTTP/1.1 200 ", 13), "no second answer: %s", raw);
    cr_assert(strstr(second, "\"text_completion\""), "%s", second);
    free(raw);

    n = snprintf(req, sizeof req,
                 "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: " AK "\r\nContent-Type: "
                 "application/json\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n%.5s\r\n%zx\r\n%s\r\n"
                 "0\r\n\r\n",
                 good, strlen(good) - 5, good + 5);
    ts_resp r;
    cr_assert(ts_exchange(&srv, req, (size_t)n, false, 30, &r));
    cr_assert_eq(r.status, 200, "%s", r.raw);
    cr_assert(strstr(r.body, "\"text_completion\""), "%s", r.body);
    ts_resp_free(&r);
}

/* What OpenAI's API and HTTP ask for beyond the table: GET /v1/models/{model}
 * (the client's models.retrieve) and the auth scheme, which HTTP compares without
 * regard to case. */
Test(serve_errors, model_retrieve_and_auth_scheme) {
    ts_start(&srv, tu_data_file("models/stories260K.gguf"), NULL, NULL);
    ts_resp r = ts_request(&srv, "GET", "/v1/models/stories260K", TS_KEY, NULL);
    cr_expect_eq(r.status, 200, "GET /v1/models/stories260K: %s", r.raw);
    if (r.status == 200) {
        json_t *j = json_loadb(r.body, r.body_n, 0, NULL);
        cr_expect_str_eq(json_string_value(json_object_get(j, "id")), "stories260K", "%s", r.body);
        cr_expect_str_eq(json_string_value(json_object_get(j, "object")), "model", "%s", r.body);
        json_decref(j);
    }
    ts_resp_free(&r);
    r = ts_request(&srv, "GET", "/v1/models/no-such-model", TS_KEY, NULL);
    cr_expect_eq(r.status, 404, "%s", r.raw);
    cr_expect(strstr(r.body, "\"model_not_found\""), "GET /v1/models/no-such-model: %s", r.body);
    ts_resp_free(&r);
    run_row("auth scheme in lower case", &(row){"GET", "/v1/models", "bearer " TS_KEY, NULL, 200}, NULL, 0);
}
