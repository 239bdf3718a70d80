#include "tests/util/testutil_serve.h"

#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *kiln_bin(void) {
    const char *b = getenv("KILN_BIN");
    return b && *b ? b : KILN_BIN;
}

void ts_start(ts_server *s, const char *model, const char *const *extra, const char *env_extra) {
    static int seq;
    char name[64];
    snprintf(name, sizeof name, "serve-%d-%d.err", (int)getpid(), seq++);
    snprintf(s->err, sizeof s->err, "%s", tu_tmp(name));
    s->pid = -1;
    s->port = 0;
    const char *argv[32] = {kiln_bin(), "serve", model, "--listen", "127.0.0.1:0", "--api-key", TS_KEY};
    int argc = 7;
    for (int i = 0; extra && extra[i] && argc < 31; i++) argv[argc++] = extra[i];
    argv[argc] = NULL;
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a test killed by its timeout takes its server along */
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        int e = open(s->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (e >= 0) dup2(e, 2);
        if (env_extra) {
            char kv[512];
            snprintf(kv, sizeof kv, "%s", env_extra);
            char *eq = strchr(kv, '=');
            if (eq) {
                *eq = 0;
                setenv(kv, eq + 1, 1);
            }
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    s->pid = pid;
    FILE *f = fdopen(p[0], "r");
    char line[256] = "";
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!got || sscanf(line, "listening on http://127.0.0.1:%d", &s->port) != 1) {
        char *err = ts_stderr(s);
        ts_kill(s);
        cr_assert_fail("kiln serve did not start (first line '%s'): %s", line, err);
    }
}

void ts_kill(ts_server *s) {
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = -1;
    }
}

int ts_term(ts_server *s, int timeout_s) {
    if (s->pid <= 0) return -1;
    kill(s->pid, SIGTERM);
    int status;
    for (int i = 0; i < timeout_s * 100; i++) {
        pid_t w = waitpid(s->pid, &status, WNOHANG);
        if (w == s->pid) {
            s->pid = -1;
            return status;
        }
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    ts_kill(s);
    return -1;
}

bool ts_alive(ts_server *s) {
    if (s->pid <= 0) return false;
    int status;
    if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
        s->pid = -1;
        return false;
    }
    return true;
}

long ts_rss_kib(const ts_server *s) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)s->pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

char *ts_stderr(const ts_server *s) {
    FILE *f = fopen(s->err, "rb");
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    if (f) {
        size_t k;
        while ((k = fread(b + n, 1, cap - n - 1, f)) > 0) {
            n += k;
            if (n + 1 == cap) {
                char *q = realloc(b, cap * 2);
                if (!q) break;
                b = q;
                cap *= 2;
            }
        }
        fclose(f);
    }
    b[n] = 0;
    return b;
}

int ts_connect(const ts_server *s, int timeout_s) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = timeout_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int rc;
    while ((rc = connect(fd, (struct sockaddr *)&sa, sizeof sa)) != 0 && errno == EINTR) {}
    if (rc != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

bool ts_send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        c += k;
        n -= (size_t)k;
    }
    return true;
}

char *ts_read_all(int fd, size_t *n, bool *clean) {
    size_t cap = 1 << 14, len = 0;
    char *b = malloc(cap);
    ssize_t k = -1;
    while (b) {
        k = read(fd, b + len, cap - len - 1);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        len += (size_t)k;
        if (len + 1 == cap) {
            char *q = realloc(b, cap * 2);
            if (!q) {
                free(b);
                b = NULL;
                break;
            }
            b = q;
            cap *= 2;
        }
    }
    if (b) b[len] = 0;
    *n = len;
    *clean = k == 0;
    return b;
}

void ts_parse(ts_resp *r, char *raw, size_t n, bool clean) {
    *r = (ts_resp){.raw = raw, .n = n, .body = "", .closed_ok = clean};
    if (!raw) return;
    int status = 0, used = 0;
    /* "HTTP/1.x NNN " then a reason phrase and CRLF */
    if (n >= 13 && !strncmp(raw, "HTTP/1.", 7) && isdigit((unsigned char)raw[7]) && raw[8] == ' ' &&
        sscanf(raw + 9, "%3d%n", &status, &used) == 1 && used == 3 && raw[12] == ' ' && status >= 100 &&
        status <= 599 && memchr(raw, '\n', n))
        r->status = status;
    char *sep = strstr(raw, "\r\n\r\n");
    if (sep) {
        r->body = sep + 4;
        r->body_n = n - (size_t)(r->body - raw);
    }
}

bool ts_header(const ts_resp *r, const char *name, char *out, size_t cap) {
    if (!r->raw) return false;
    const char *end = strstr(r->raw, "\r\n\r\n");
    if (!end) end = r->raw + r->n;
    size_t nl = strlen(name);
    for (const char *p = strstr(r->raw, "\r\n"); p && p < end; p = strstr(p + 2, "\r\n")) {
        const char *h = p + 2;
        if (h + nl < end && !strncasecmp(h, name, nl) && h[nl] == ':') {
            const char *v = h + nl + 1;
            while (*v == ' ') v++;
            const char *e = strstr(v, "\r\n");
            size_t len = e ? (size_t)(e - v) : strlen(v);
            if (len >= cap) len = cap - 1;
            memcpy(out, v, len);
            out[len] = 0;
            return true;
        }
    }
    return false;
}

void ts_resp_free(ts_resp *r) {
    free(r->raw);
    r->raw = NULL;
}

bool ts_exchange(const ts_server *s, const void *req, size_t len, bool shut_wr, int timeout_s, ts_resp *r) {
    *r = (ts_resp){.body = ""};
    int fd = ts_connect(s, timeout_s);
    if (fd < 0) return false;
    bool sent = ts_send_all(fd, req, len);
    if (sent && shut_wr) shutdown(fd, SHUT_WR);
    size_t n;
    bool clean;
    /* read even after a failed send: the server may have answered (413) and closed */
    char *raw = ts_read_all(fd, &n, &clean);
    close(fd);
    ts_parse(r, raw, n, clean);
    return raw != NULL;
}

char *ts_build(const char *method, const char *path, const char *auth, const char *body, size_t body_n,
               size_t *n) {
    size_t cap = strlen(method) + strlen(path) + (auth ? strlen(auth) : 0) + body_n + 256;
    char *b = malloc(cap);
    if (!b) return NULL;
    int h = snprintf(b, cap, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s%s%s", method, path,
                     auth ? "Authorization: Bearer " : "", auth ? auth : "", auth ? "\r\n" : "",
                     body ? "Content-Type: application/json\r\n" : "");
    if (body) h += snprintf(b + h, cap - (size_t)h, "Content-Length: %zu\r\n", body_n);
    h += snprintf(b + h, cap - (size_t)h, "\r\n");
    if (body) memcpy(b + h, body, body_n);
    *n = (size_t)h + (body ? body_n : 0);
    return b;
}

ts_resp ts_request(const ts_server *s, const char *method, const char *path, const char *auth, const char *body) {
    size_t n;
    char *req = ts_build(method, path, auth, body, body ? strlen(body) : 0, &n);
    cr_assert(req);
    ts_resp r;
    bool ok = ts_exchange(s, req, n, false, 60, &r);
    free(req);
    cr_assert(ok, "no connection to the server");
    cr_assert(r.status, "not an HTTP response to %s %s: '%.300s'", method, path, r.raw);
    return r;
}
