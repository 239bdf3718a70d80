/* Helpers for the tests that start the real `kiln serve` and speak HTTP to it over
 * sockets (test_serve_errors.c, test_serve_fuzz.c, test_serve_openai.c). Only
 * ts_start asserts; the socket helpers return failures, so threads may use them. */
#ifndef KILN_TESTS_TESTUTIL_SERVE_H
#define KILN_TESTS_TESTUTIL_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define TS_KEY "test-key"

typedef struct ts_server {
    pid_t pid;       /* -1 when not running */
    int port;
    char err[600];   /* the server's stderr, a file in tu_tmpdir() */
} ts_server;

/* kiln serve MODEL --listen 127.0.0.1:0 --api-key TS_KEY [extra...] (extra NULL-terminated,
 * or NULL); waits for the "listening on" line. The child gets env_extra (NAME=VALUE, or
 * NULL) put into its environment. */
void ts_start(ts_server *s, const char *model, const char *const *extra, const char *env_extra);
/* SIGKILL and reap; safe to call twice. */
void ts_kill(ts_server *s);
/* SIGTERM and reap; the wait status, or -1 when it did not exit within timeout_s. */
int ts_term(ts_server *s, int timeout_s);
/* Whether the server process is still running. */
bool ts_alive(ts_server *s);
/* The server's VmRSS in KiB (0 when unreadable). */
long ts_rss_kib(const ts_server *s);
/* The server's stderr so far (malloc'ed, NUL-terminated). */
char *ts_stderr(const ts_server *s);

/* A TCP connection to the server with send/receive timeouts; -1 on failure. */
int ts_connect(const ts_server *s, int timeout_s);
bool ts_send_all(int fd, const void *p, size_t n);
/* Reads until the peer closes (or a timeout/reset). Malloc'ed, NUL-terminated; *n its
 * length; *clean whether it ended with an orderly close (not an error or timeout). */
char *ts_read_all(int fd, size_t *n, bool *clean);

/* A parsed HTTP response (over raw, which it owns). */
typedef struct ts_resp {
    int status;       /* 0 when raw does not start with a well-formed status line */
    char *raw;
    size_t n;
    const char *body; /* after the blank line; "" when there is none */
    size_t body_n;
    bool closed_ok;   /* the server closed the connection in order */
} ts_resp;

/* Sends req[len] on a fresh connection, half-closes when shut_wr, reads the answer. */
bool ts_exchange(const ts_server *s, const void *req, size_t len, bool shut_wr, int timeout_s, ts_resp *r);
/* Parses raw[n] into r (takes raw). */
void ts_parse(ts_resp *r, char *raw, size_t n, bool clean);
/* A header's value (case-insensitive name) copied into out; false when absent. */
bool ts_header(const ts_resp *r, const char *name, char *out, size_t cap);
void ts_resp_free(ts_resp *r);

/* "METHOD PATH HTTP/1.1" with Host, Connection: close, Authorization: Bearer auth (when
 * auth), Content-Type: application/json (when body), Content-Length and the body:
 * a malloc'ed request, its length in *n. */
char *ts_build(const char *method, const char *path, const char *auth, const char *body, size_t body_n,
               size_t *n);
/* One request built by ts_build; asserts it got a well-formed answer. */
ts_resp ts_request(const ts_server *s, const char *method, const char *path, const char *auth, const char *body);

#endif
