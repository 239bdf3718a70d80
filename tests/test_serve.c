/* kiln serve end to end: the real binary on the CPU oracle with stories260K, on a port
 * it picks itself (--listen 127.0.0.1:0), spoken to over HTTP/1.0 sockets. */
#include "testutil.h"

#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KEY "test-key"

static pid_t server_pid = -1;
static int server_port;

/* Starts kiln serve MODEL --listen 127.0.0.1:0 --api-key KEY and reads its port. */
static void start_server(void) {
    const char *model = tu_data_file("models/stories260K.gguf");
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        FILE *null = fopen("/dev/null", "w");
        if (null) dup2(fileno(null), 2);
        execl(KILN_BIN, KILN_BIN, "serve", model, "--listen", "127.0.0.1:0", "--api-key", KEY, "--queue", "4",
              (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    server_pid = pid;
    FILE *f = fdopen(p[0], "r");
    char line[256] = "";
    cr_assert(fgets(line, sizeof line, f), "the server printed nothing");
    fclose(f);
    cr_assert(sscanf(line, "listening on http://127.0.0.1:%d", &server_port) == 1, "first line: %s", line);
}

static void stop_server(void) {
    if (server_pid > 0) {
        kill(server_pid, SIGKILL);
        waitpid(server_pid, NULL, 0);
        server_pid = -1;
    }
}

static int connect_server(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct timeval tv = {.tv_sec = 30};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)server_port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
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

static const char chat_body[] = "{\"model\":\"stories260K\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],"
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
    expect_error(request("POST", "/v1/chat/completions", KEY, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}"),
                 400, NULL);
    /* not answered with null logprobs: refused until the loop hands out its logits */
    expect_error(request("POST", "/v1/chat/completions", KEY,
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true}"),
                 400, "unsupported_parameter");
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
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) cr_assert(strstr(r.body, want[i]), "no '%s' in %s", want[i], r.body);
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
            if (!ch) *usage = (long)json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
            else {
                json_t *t = chat ? json_object_get(json_object_get(ch, "delta"), "content") : json_object_get(ch, "text");
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
    cr_assert_eq(kill(server_pid, SIGTERM), 0);
    int status;
    cr_assert_eq(waitpid(server_pid, &status, 0), server_pid);
    server_pid = -1;
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    while (read(fd, buf, sizeof buf) > 0) {}
    close(fd);
}
