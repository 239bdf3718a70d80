/* kiln serve under a storm of malformed requests: mutated chat and completion bodies
 * (byte flips, truncation, random bytes, NULs, invalid UTF-8, deep nesting, huge
 * numbers, duplicated keys), garbage request lines and headers, wrong Content-Lengths,
 * slow partial sends closed early, clients that leave without reading, random methods
 * and paths. The server must stay up, answer every complete request with a well-formed
 * HTTP response (4xx for bad input, 200 when a mutation happens to be valid), answer a
 * valid request after the storm exactly as before it, and not grow its RSS by more than
 * RSS_BOUND_MIB (a leak). Seeded: the seed is printed, KILN_FUZZ_SEED replays it and
 * every request is derived from (seed, index), so a failure names the request that
 * reproduces it. KILN_FUZZ_N changes the count (default 10000); KILN_FUZZ_TRACE=1 prints
 * each exchange's index, kind and seconds. */
#include "tests/util/testutil.h"
#include "tests/util/testutil_serve.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_DEFAULT 10000
#define N_WORKERS 4
#define RSS_BOUND_MIB 64
#define MAX_FAILS 8
#define SLOW_S 20 /* an exchange that takes half of this fails; the socket gives up at it */

static ts_server srv = {.pid = -1};

static void fini(void) { ts_kill(&srv); }

/* 10,000 requests take seconds in a release build; ASan + UBSan make them slower. */
TestSuite(serve_fuzz, .fini = fini, .timeout = 240);

/* ---- a PRNG per request: splitmix64 of (seed, index) -------------------------------------- */

typedef struct rng { uint64_t s; } rng;

static uint64_t next(rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint32_t below(rng *r, uint32_t n) { return (uint32_t)(next(r) % n); }
static bool chance(rng *r, uint32_t percent) { return below(r, 100) < percent; }
static const char *pick(rng *r, const char *const *list, size_t n) { return list[below(r, (uint32_t)n)]; }
#define PICK(r, list) pick((r), (list), sizeof(list) / sizeof(list)[0])

/* ---- growable bytes ----------------------------------------------------------------------- */

typedef struct bytes { char *p; size_t n, cap; } bytes;

static void put(bytes *b, const void *p, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) abort();
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void puts_(bytes *b, const char *s) { put(b, s, strlen(s)); }
static void putf(bytes *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(bytes *b, const char *fmt, ...) {
    char tmp[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    put(b, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}
static void insert(bytes *b, size_t at, const void *p, size_t n) {
    put(b, p, n); /* grow, then move into place */
    memmove(b->p + at + n, b->p + at, b->n - n - at);
    memcpy(b->p + at, p, n);
}
static void erase(bytes *b, size_t at, size_t n) {
    memmove(b->p + at, b->p + at + n, b->n - at - n);
    b->n -= n;
    b->p[b->n] = 0;
}

/* ---- bodies ------------------------------------------------------------------------------- */

static const char *const bases[] = {
    "{\"model\":\"stories260K\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\","
    "\"content\":\"Hello there\"}],\"max_tokens\":2,\"max_completion_tokens\":2,\"temperature\":0,\"stream\":false}",
    "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}]}],\"max_tokens\":2,"
    "\"max_completion_tokens\":2,\"stream\":true,\"stream_options\":{\"include_usage\":true},\"stop\":[\"\\n\"]}",
    "{\"prompt\":\"Once upon a time\",\"max_tokens\":2,\"stop\":[\"x\",\"y\"],\"seed\":7,\"top_k\":3}",
    "{\"prompt\":[\"Once\"],\"max_tokens\":2,\"stream\":true,\"temperature\":0.5,\"top_p\":0.9,\"n\":1}",
};
static const char *const endpoint_of_base[] = {"/v1/chat/completions", "/v1/chat/completions", "/v1/completions",
                                               "/v1/completions"};

static const char *const bad_utf8[] = {
    "\xff", "\xc3\x28", "\xed\xa0\x80", "\xc0\xaf", "\xe2\x82", "\xf8\x88\x80\x80\x80", "\xf4\x90\x80\x80",
    "\x80", "\xfe\xfe", "\xef\xbf\xbe"};
static const char *const fragments[] = {
    ",\"max_tokens\":2",  ",\"max_tokens\":3", "\"max_tokens\":1,", "1e999", "-1e999", "99999999999999999999999",
    "-0", "0.0000001", "null", "true", "[]", "{}", "\"\\ud800\"", "\"\\u0000\"", "\"\\udfff\\ud800\"",
    ",\"n\":2", ",\"stream\":true", ",\"logprobs\":true", ",\"top_logprobs\":3", ",\"temperature\":1e308",
    ",\"seed\":-9223372036854775808", ",\"stop\":[\"\",\"\"]", ",\"messages\":null", ",\"prompt\":[[[]]]",
    "\"\\\\\\\"\"", "\\", "\"", ":", ",", "]", "}", "{\"a\":", "[", "\t\r\n ",
};

/* One to four mutations of a valid body. */
static void mutate(rng *r, bytes *b) {
    int k = 1 + (int)below(r, 4);
    for (int m = 0; m < k && b->n; m++) {
        size_t at = below(r, (uint32_t)b->n + 1), len;
        switch (below(r, 11)) {
        case 0: if (at < b->n) b->p[at] ^= (char)(1u << below(r, 8)); break;
        case 1: if (at < b->n) b->p[at] = (char)below(r, 256); break;
        case 2: {
            char rb[16];
            len = 1 + below(r, 16);
            for (size_t i = 0; i < len; i++) rb[i] = (char)below(r, 256);
            insert(b, at, rb, len);
            break;
        }
        case 3: insert(b, at, "\0", 1); break;
        case 4: { const char *s = PICK(r, bad_utf8); insert(b, at, s, strlen(s)); break; }
        case 5: len = below(r, (uint32_t)(b->n - at) + 1); erase(b, at, len); break;
        case 6: { /* duplicate a range (keys twice, repeated fragments) */
            size_t from = below(r, (uint32_t)b->n);
            len = 1 + below(r, (uint32_t)(b->n - from));
            char *copy = malloc(len);
            memcpy(copy, b->p + from, len);
            insert(b, at, copy, len);
            free(copy);
            break;
        }
        case 7: b->n = at, b->p[at] = 0; break; /* truncate */
        case 8: { /* a number grown huge */
            char digits[64];
            len = 1 + below(r, 40);
            for (size_t i = 0; i < len; i++) digits[i] = (char)('0' + below(r, 10));
            insert(b, at, digits, len);
            break;
        }
        case 9: { const char *s = PICK(r, fragments); insert(b, at, s, strlen(s)); break; }
        default: if (at + 1 < b->n) { char t = b->p[at]; b->p[at] = b->p[at + 1]; b->p[at + 1] = t; } break;
        }
    }
}

/* Whether the server would generate more than 4 tokens for this body: it parses with the
 * same jansson, and max_completion_tokens wins over max_tokens; absent means the whole
 * context. Such mutations are drawn again, so valid requests stay cheap. */
static bool too_long(const bytes *b) {
    json_t *j = json_loadb(b->p, b->n, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return false;
    }
    json_int_t eff = -1;
    const char *keys[] = {"max_tokens", "max_completion_tokens"};
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(j, keys[k]);
        if (v && !json_is_null(v)) {
            if (!json_is_integer(v)) eff = 0; /* a 400 */
            else if (eff != 0) eff = json_integer_value(v);
        }
    }
    json_decref(j);
    return eff < 0 || eff > 4;
}

static void mutated_body(rng *r, bytes *b, const char **path) {
    int base = (int)below(r, 4);
    *path = endpoint_of_base[base];
    for (int tries = 0; tries < 32; tries++) {
        b->n = 0;
        puts_(b, bases[base]);
        mutate(r, b);
        if (!too_long(b)) return;
    }
    b->n = 0;
    puts_(b, bases[base]);
}

/* Bodies built to hit the parser's limits. */
static void structural_body(rng *r, bytes *b, const char **path) {
    bool chat = chance(r, 50);
    *path = chat ? "/v1/chat/completions" : "/v1/completions";
    const char *head = chat ? "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2,"
                            : "{\"prompt\":\"Once\",\"max_tokens\":2,";
    puts_(b, head);
    static const char *const fields[] = {"model", "messages", "prompt", "temperature", "top_p", "top_k", "min_p",
                                         "presence_penalty", "frequency_penalty", "repetition_penalty", "seed",
                                         "stop", "n", "stream", "stream_options", "logprobs", "top_logprobs",
                                         "max_tokens", "max_completion_tokens", "x"};
    switch (below(r, 8)) {
    case 0: { /* nesting far deeper than the parser's limit */
        size_t depth = 1000 + below(r, 100000);
        putf(b, "\"%s\":", PICK(r, fields));
        for (size_t i = 0; i < depth; i++) puts_(b, chance(r, 50) ? "[" : "{\"a\":");
        break;
    }
    case 1: { /* balanced nesting near the limit */
        size_t depth = 1 + below(r, 3000);
        putf(b, "\"%s\":", PICK(r, fields));
        for (size_t i = 0; i < depth; i++) puts_(b, "[");
        for (size_t i = 0; i < depth; i++) puts_(b, "]");
        puts_(b, "}");
        break;
    }
    case 2: { /* huge and odd numbers */
        static const char *const nums[] = {"1e400", "-1e400", "1e-400", "123456789012345678901234567890",
                                           "-9223372036854775809", "9223372036854775807", "-9223372036854775808",
                                           "0e0", "-0.0", "4.9e-324", "1.7976931348623157e308", "2", "3.0"};
        putf(b, "\"%s\":%s}", PICK(r, fields), PICK(r, nums));
        break;
    }
    case 3: { /* duplicated keys, the last one valid or not */
        const char *f = PICK(r, fields);
        putf(b, "\"%s\":1,\"%s\":\"x\",\"%s\":null,\"max_tokens\":%u}", f, f, f, 1 + below(r, 4));
        break;
    }
    case 4: { /* a long string, in a field or a key */
        size_t n = 1 + below(r, 200000);
        putf(b, "\"%s\":\"", chance(r, 50) ? PICK(r, fields) : "k");
        char *s = malloc(n);
        for (size_t i = 0; i < n; i++) s[i] = (char)('a' + below(r, 26));
        put(b, s, n);
        free(s);
        puts_(b, "\"}");
        break;
    }
    case 5: { /* every field at once with a random type */
        static const char *const vals[] = {"null", "0", "-1", "1", "2.5", "\"\"", "\"x\"", "[]", "{}", "[\"a\"]",
                                           "true", "false", "{\"include_usage\":true}", "[{\"type\":\"text\"}]"};
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
            if (chance(r, 40)) putf(b, "\"%s\":%s,", fields[i], PICK(r, vals));
        puts_(b, "\"max_tokens\":1}");
        break;
    }
    case 6: { /* escapes: surrogates, NUL, control characters */
        static const char *const esc[] = {"\\ud800", "\\udc00", "\\ud83d\\ude00", "\\u0000", "\\u001f", "\\uffff",
                                          "\\x41", "\\'", "\\u12", "\\uzzzz", "\\\"", "\\/", "\x01", "\t"};
        puts_(b, chat ? "\"messages\":[{\"role\":\"user\",\"content\":\"" : "\"prompt\":\"");
        for (int i = 0, n = 1 + (int)below(r, 6); i < n; i++) puts_(b, PICK(r, esc));
        puts_(b, chat ? "\"}]}" : "\"}");
        break;
    }
    default: { /* many messages or stop strings */
        size_t n = 1 + below(r, 2000);
        puts_(b, "\"stop\":[");
        for (size_t i = 0; i < n; i++) putf(b, "%s\"s%zu\"", i ? "," : "", i);
        puts_(b, "]}");
        break;
    }
    }
}

/* ---- requests ----------------------------------------------------------------------------- */

static const char *const methods[] = {"GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "TRACE",
                                      "get", "post", "P0ST", "BREW", "X-" "CUSTOM"};
static const char *const paths[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics",
                                    "/", "/v1", "/v1/", "/v1/chat/completions/", "/V1/MODELS", "/v1/models/stories260K",
                                    "/../../etc/passwd", "/%00", "/%zz", "/v1/completions?x=1&y", "*", "/health#frag",
                                    "//v1//models", "/v1/chat/completions%20", "/\xc3\xa9", "/\xff"};
static const char *const auths[] = {"Bearer " TS_KEY, "Bearer " TS_KEY, "Bearer wrong", "Bearer ", "bearer " TS_KEY,
                                    "Basic dGVzdA==", TS_KEY, "Bearer " TS_KEY " extra", "Bearer\t" TS_KEY};
static const char *const ctypes[] = {"application/json", "application/json; charset=utf-8", "text/plain",
                                     "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "",
                                     "application/json; charset=latin1"};

typedef enum { NEED_ANSWER, MAY_CLOSE, NO_READ } expect_t;

typedef struct req {
    bytes b;
    expect_t expect;
    bool shut_wr;   /* half-close after sending */
    size_t send_n;  /* bytes to send (slow/abandoned: a prefix) */
    int pieces;     /* >1: sent in pieces with pauses */
    const char *kind;
} req;

/* A request line, headers for auth and type, and Content-Length for the body. */
static void head(rng *r, bytes *b, const char *method, const char *path, size_t body_n, bool with_body) {
    putf(b, "%s %s HTTP/1.%d\r\nHost: 127.0.0.1\r\nConnection: close\r\n", method, path, chance(r, 90) ? 1 : 0);
    if (chance(r, 95)) putf(b, "Authorization: %s\r\n", chance(r, 90) ? "Bearer " TS_KEY : PICK(r, auths));
    if (with_body) {
        putf(b, "Content-Type: %s\r\n", chance(r, 85) ? "application/json" : PICK(r, ctypes));
        putf(b, "Content-Length: %zu\r\n", body_n);
    }
    puts_(b, "\r\n");
}

static void make_request(rng *r, req *q) {
    bytes body = {0};
    const char *path;
    q->b.n = 0;
    q->expect = NEED_ANSWER;
    q->shut_wr = true;
    q->pieces = 1;
    uint32_t k = below(r, 100);
    if (k < 45) { /* a mutated valid body */
        q->kind = "mutated body";
        mutated_body(r, &body, &path);
        head(r, &q->b, "POST", path, body.n, true);
        put(&q->b, body.p, body.n);
    } else if (k < 55) {
        q->kind = "structural body";
        structural_body(r, &body, &path);
        head(r, &q->b, "POST", path, body.n, true);
        put(&q->b, body.p, body.n);
    } else if (k < 63) { /* random method and path, with or without a small body */
        q->kind = "method/path";
        bool with = chance(r, 50);
        const char *m = PICK(r, methods);
        const char *p = PICK(r, paths);
        char longp[3000];
        if (chance(r, 5)) {
            size_t n = 1 + below(r, sizeof longp - 2);
            longp[0] = '/';
            for (size_t i = 1; i < n; i++) longp[i] = (char)('!' + below(r, 94));
            longp[n] = 0;
            for (size_t i = 1; i < n; i++)
                if (longp[i] == ' ' || longp[i] == '#') longp[i] = '_';
            p = longp;
        }
        const char *bd = "{\"prompt\":\"Once\",\"max_tokens\":1}";
        head(r, &q->b, m, p, strlen(bd), with);
        if (with) puts_(&q->b, bd);
        /* HEAD is answered without a body; TRACE/CONNECT-like methods may be refused by the library */
        q->expect = NEED_ANSWER;
    } else if (k < 73) { /* garbage request lines and headers */
        q->kind = "garbage head";
        q->expect = MAY_CLOSE;
        switch (below(r, 5)) {
        case 0: { /* random bytes then the blank line */
            size_t n = below(r, 300);
            for (size_t i = 0; i < n; i++) { char c = (char)below(r, 256); put(&q->b, &c, 1); }
            puts_(&q->b, "\r\n\r\n");
            break;
        }
        case 1: /* a valid line, random header bytes */
            putf(&q->b, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
            for (size_t i = 0, n = below(r, 200); i < n; i++) {
                char c = (char)below(r, 256);
                put(&q->b, &c, 1);
            }
            puts_(&q->b, "\r\n\r\n");
            break;
        case 2: { /* header lines without colon, folded, empty names, huge */
            static const char *const hs[] = {"NoColon\r\n", " folded\r\n", ": empty-name\r\n", "X-A:\r\n",
                                             "X-B: \x01\x02\x7f\r\n", "Content-Length: 0\r\n",
                                             "Transfer-Encoding: chunked\r\n", "Expect: 100-continue\r\n",
                                             "Host: a\r\nHost: b\r\n", "X-\xff: \xfe\r\n", "\r\n"};
            putf(&q->b, "%s %s HTTP/1.1\r\nConnection: close\r\n", PICK(r, methods), PICK(r, paths));
            for (int i = 0, n = 1 + (int)below(r, 4); i < n; i++) puts_(&q->b, PICK(r, hs));
            if (chance(r, 10)) {
                puts_(&q->b, "X-Big: ");
                for (size_t i = 0, n = 1000 + below(r, 70000); i < n; i++) puts_(&q->b, "a");
                puts_(&q->b, "\r\n");
            }
            puts_(&q->b, "\r\n");
            break;
        }
        case 3: { /* odd versions and line ends */
            static const char *const lines[] = {"GET /health HTTP/2.0\r\n\r\n", "GET /health HTTP/1.1\n\n",
                                                "GET /health\r\n\r\n", "GET\r\n\r\n", " GET /health HTTP/1.1\r\n\r\n",
                                                "GET  /health  HTTP/1.1\r\n\r\n", "GET /health HTTP/1.1\r\r\r\n\r\n",
                                                "GET /health HTTP/1.10\r\n\r\n", "GET /health http/1.1\r\n\r\n",
                                                "\r\n\r\nGET /health HTTP/1.1\r\nConnection: close\r\n\r\n",
                                                "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"};
            puts_(&q->b, PICK(r, lines));
            break;
        }
        default: { /* a chunked body that is not */
            putf(&q->b, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer " TS_KEY
                        "\r\nTransfer-Encoding: chunked\r\n\r\n");
            static const char *const chunks[] = {"zz\r\nabc\r\n0\r\n\r\n", "ffffffffffffffffff\r\n",
                                                 "5\r\nab\r\n0\r\n\r\n", "-1\r\n\r\n", "0\r\n\r\n",
                                                 "1;ext=1\r\n{\r\n0\r\n\r\n", "3\r\n{}}\r\n0\r\nTrailer: x\r\n\r\n"};
            puts_(&q->b, PICK(r, chunks));
            break;
        }
        }
    } else if (k < 83) { /* wrong Content-Length */
        q->kind = "content-length";
        mutated_body(r, &body, &path);
        if (chance(r, 30)) { body.n = 0; puts_(&body, bases[2]); path = "/v1/completions"; }
        putf(&q->b, "POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer " TS_KEY
                    "\r\nContent-Type: application/json\r\n", path);
        uint32_t w = below(r, 6);
        if (w == 0) { /* short: the server reads a prefix */
            putf(&q->b, "Content-Length: %u\r\n\r\n", body.n ? below(r, (uint32_t)body.n) : 0u);
            put(&q->b, body.p, body.n);
        } else if (w == 1) { /* long: the body never completes */
            putf(&q->b, "Content-Length: %zu\r\n\r\n", body.n + 1 + below(r, 100000));
            put(&q->b, body.p, body.n);
            q->expect = MAY_CLOSE;
        } else if (w <= 3) { /* not a length: answered at once, so no body follows */
            static const char *const bad[] = {"-5", "99999999999999999999", "abc", "18446744073709551616"};
            putf(&q->b, "Content-Length: %s\r\n\r\n", PICK(r, bad));
        } else { /* odd spellings, duplicates: the library may answer or refuse */
            static const char *const odd[] = {"+12", "0x10", "12abc", "", " 7 ", "1, 1", "1\r\nContent-Length: 2",
                                              "007"};
            putf(&q->b, "Content-Length: %s\r\n\r\n", PICK(r, odd));
            put(&q->b, body.p, body.n);
            q->expect = MAY_CLOSE;
        }
    } else if (k < 93) { /* slow partial sends */
        q->kind = "slow send";
        mutated_body(r, &body, &path);
        head(r, &q->b, "POST", path, body.n, true);
        put(&q->b, body.p, body.n);
        q->pieces = 2 + (int)below(r, 3);
        if (chance(r, 70)) { /* closed early: no answer to wait for */
            q->send_n = below(r, (uint32_t)q->b.n);
            q->expect = NO_READ;
            q->shut_wr = false;
        }
    } else { /* a valid request, and the client leaves without reading (or mid-answer) */
        q->kind = "abandoned";
        int base = (int)below(r, 4);
        puts_(&body, bases[base]);
        head(r, &q->b, "POST", endpoint_of_base[base], body.n, true);
        put(&q->b, body.p, body.n);
        q->expect = NO_READ;
        q->shut_wr = false;
    }
    if (q->expect != NO_READ) q->send_n = q->b.n;
    else if (!q->send_n) q->send_n = q->b.n;
    free(body.p);
}

/* ---- running ------------------------------------------------------------------------------ */

static struct {
    pthread_mutex_t mu;
    int fails;
    char msg[MAX_FAILS][1200];
    atomic_long next;
    long end;
    uint64_t seed;
    long status_count[6]; /* by hundreds */
    long closed;          /* no answer where allowed */
    long s503, s505;
} run = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void escape(const char *p, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 32 && c < 127 && c != '\\') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    out[o] = 0;
}

static void failed(long i, const req *q, const char *why, const ts_resp *r) {
    pthread_mutex_lock(&run.mu);
    if (run.fails < MAX_FAILS) {
        char reqs[500], resp[400] = "";
        escape(q->b.p, q->b.n < 240 ? q->b.n : 240, reqs, sizeof reqs);
        if (r && r->raw) escape(r->raw, r->n < 180 ? r->n : 180, resp, sizeof resp);
        snprintf(run.msg[run.fails], sizeof run.msg[0], "seed %" PRIu64 " request %ld (%s): %s\n  sent: %s\n  got: %s",
                 run.seed, i, q->kind, why, reqs, resp);
    }
    run.fails++;
    pthread_mutex_unlock(&run.mu);
}

static void pause_ms(int ms) { nanosleep(&(struct timespec){.tv_nsec = ms * 1000000L}, NULL); }

/* Checks one answer: a status line, kiln's errors in OpenAI's shape, no 5xx but 503. */
static void judge(long i, const req *q, const ts_resp *r) {
    if (!r->raw || r->n == 0) {
        if (q->expect == NEED_ANSWER) failed(i, q, "no answer to a complete request", r);
        else {
            pthread_mutex_lock(&run.mu);
            run.closed++;
            pthread_mutex_unlock(&run.mu);
        }
        return;
    }
    if (!r->status) return failed(i, q, "not a well-formed HTTP status line", r);
    pthread_mutex_lock(&run.mu);
    run.status_count[r->status / 100]++;
    run.s503 += r->status == 503;
    run.s505 += r->status == 505;
    pthread_mutex_unlock(&run.mu);
    if (r->status >= 500 && r->status != 503 && r->status != 505) return failed(i, q, "a server error", r);
    char ct[128] = "";
    ts_header(r, "Content-Type", ct, sizeof ct);
    bool json = !strncmp(ct, "application/json", 16);
    /* the body as far as Content-Length says, when it all came (a reset may cut it) */
    char cl[32];
    size_t body_n = r->body_n;
    if (ts_header(r, "Content-Length", cl, sizeof cl)) {
        size_t want = (size_t)strtoull(cl, NULL, 10);
        if (want > body_n) json = false;
        else body_n = want;
    } else if (!r->closed_ok) {
        json = false;
    }
    if (!strncmp(q->b.p, "HEAD ", 5)) json = false; /* the answer to HEAD has no body */
    if (r->status >= 400 && json) {
        json_t *j = json_loadb(r->body, body_n, 0, NULL);
        json_t *e = json_object_get(j, "error");
        bool ok = json_is_string(json_object_get(e, "message")) && json_is_string(json_object_get(e, "type")) &&
                  json_object_get(e, "param") && json_object_get(e, "code");
        json_decref(j);
        if (!ok) return failed(i, q, "an error body not in OpenAI's shape", r);
    }
    if (r->status == 200 && json) {
        json_t *j = json_loadb(r->body, body_n, 0, NULL);
        bool ok = json_is_object(j);
        json_decref(j);
        if (!ok) return failed(i, q, "a 200 whose body is not a JSON object", r);
    }
    if (r->status == 200 && strstr(ct, "text/event-stream") && r->closed_ok && !strstr(r->body, "data: [DONE]"))
        return failed(i, q, "a stream that ended without [DONE]", r);
}

static void one(long i) {
    rng r = {run.seed ^ ((uint64_t)i * 0xd1b54a32d192ed03ull)};
    next(&r);
    req q = {0};
    make_request(&r, &q);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int fd = ts_connect(&srv, SLOW_S);
    if (fd < 0) {
        failed(i, &q, "cannot connect (is the server down?)", NULL);
        free(q.b.p);
        return;
    }
    size_t sent = 0;
    bool ok = true;
    for (int p = 0; p < q.pieces && ok; p++) {
        size_t upto = p + 1 == q.pieces ? q.send_n : q.send_n * (size_t)(p + 1) / (size_t)q.pieces;
        if (upto > sent) ok = ts_send_all(fd, q.b.p + sent, upto - sent);
        sent = upto;
        if (q.pieces > 1 && p + 1 < q.pieces) pause_ms((int)below(&r, 3));
    }
    if (q.expect == NO_READ) {
        if (q.send_n == q.b.n && chance(&r, 30)) { /* a whole request: read a little of the answer first */
            char tmp[64];
            ssize_t k = read(fd, tmp, sizeof tmp);
            (void)k;
        }
        close(fd);
        free(q.b.p);
        return;
    }
    if (q.shut_wr) shutdown(fd, SHUT_WR);
    size_t n;
    bool clean;
    char *raw = ts_read_all(fd, &n, &clean);
    close(fd);
    ts_resp resp;
    ts_parse(&resp, raw, n, clean);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (getenv("KILN_FUZZ_TRACE")) fprintf(stderr, "%ld %s %.3f\n", i, q.kind, dt);
    if (dt > SLOW_S / 2) {
        char why[64];
        snprintf(why, sizeof why, "the exchange took %.1f s", dt);
        failed(i, &q, why, &resp);
    }
    if (!clean && n == 0 && q.expect == NEED_ANSWER && !ok) {
        /* the send failed and nothing came back: the server refused mid-request */
        q.expect = MAY_CLOSE;
    }
    judge(i, &q, &resp);
    ts_resp_free(&resp);
    free(q.b.p);
}

static void *worker(void *arg) {
    (void)arg;
    long i;
    while ((i = atomic_fetch_add(&run.next, 1)) < run.end) one(i);
    return NULL;
}

static void storm(long from, long to) {
    atomic_store(&run.next, from);
    run.end = to;
    pthread_t t[N_WORKERS];
    for (int w = 0; w < N_WORKERS; w++) cr_assert_eq(pthread_create(&t[w], NULL, worker, NULL), 0);
    for (int w = 0; w < N_WORKERS; w++) pthread_join(t[w], NULL);
}

/* A greedy chat answer: the reference before and after the storm. */
static char *greedy(void) {
    ts_resp r = ts_request(&srv, "POST", "/v1/chat/completions", TS_KEY,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],\"max_tokens\":12,"
                           "\"temperature\":0}");
    cr_assert_eq(r.status, 200, "%s", r.raw);
    json_t *j = json_loadb(r.body, r.body_n, 0, NULL);
    const char *c = json_string_value(
        json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "content"));
    cr_assert(c, "%s", r.body);
    char *s = strdup(c);
    json_decref(j);
    ts_resp_free(&r);
    return s;
}

/* Sanitizer reports in the server's stderr: errors always; leaks when a frame is kiln's
 * (as scripts/test.sh judges them). Whether there was a leak report. */
static bool check_sanitizers(void) {
    char *err = ts_stderr(&srv);
    cr_assert(err);
    cr_expect(!strstr(err, "ERROR: AddressSanitizer"), "the server's AddressSanitizer report:\n%.6000s",
              strstr(err, "ERROR: AddressSanitizer"));
    cr_expect(!strstr(err, "runtime error:"), "UndefinedBehaviorSanitizer in the server:\n%.3000s",
              strstr(err, "runtime error:"));
    const char *leak = strstr(err, "ERROR: LeakSanitizer");
    if (leak) {
        char root[1100];
        snprintf(root, sizeof root, "%s/", getenv("KILN_SOURCE_DIR") ? getenv("KILN_SOURCE_DIR") : KILN_SOURCE_DIR);
        cr_expect(!strstr(leak, root), "the server leaked memory in kiln's code:\n%.8000s", leak);
    }
    free(err);
    return leak != NULL;
}

Test(serve_fuzz, storm) {
    const char *model = tu_data_file("models/stories260K.gguf");
    const char *s = getenv("KILN_FUZZ_SEED");
    run.seed = s && *s ? strtoull(s, NULL, 0) : ((uint64_t)time(NULL) << 16) ^ (uint64_t)getpid();
    const char *ns = getenv("KILN_FUZZ_N");
    long total = ns && *ns ? strtol(ns, NULL, 10) : N_DEFAULT;
    fprintf(stderr, "serve_fuzz: seed %" PRIu64 " (replay: KILN_FUZZ_SEED=%" PRIu64 "), %ld requests\n", run.seed,
            run.seed, total);
    cr_log_info("serve_fuzz: seed %" PRIu64, run.seed);
    /* ASan's quarantine holds freed memory (256 MiB by default): small, so RSS measures leaks */
    char asan[1024];
    const char *ao = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%squarantine_size_mb=8", ao ? ao : "", ao && *ao ? ":" : "");
    /* glibc gives threads arenas of their own, and one thread per connection spreads the
     * heap over many: two arenas keep RSS a measure of what is live */
    setenv("MALLOC_ARENA_MAX", "2", 0);
    ts_start(&srv, model, (const char *const[]){"--queue", "64", NULL}, asan);
    char *before = greedy();

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long warm = total / 10;
    storm(0, warm);
    cr_assert(ts_alive(&srv), "the server died during the first %ld requests (seed %" PRIu64 ")", warm, run.seed);
    long rss0 = ts_rss_kib(&srv);
    storm(warm, total);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_assert(ts_alive(&srv), "the server died (seed %" PRIu64 "); its stderr: %s", run.seed, ts_stderr(&srv));
    long rss1 = ts_rss_kib(&srv);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    fprintf(stderr,
            "serve_fuzz: %ld requests in %.1f s; answers 2xx %ld, 4xx %ld, 5xx %ld (503 %ld, 505 %ld), closed without "
            "answer %ld; RSS %ld -> %ld KiB\n",
            total, secs, run.status_count[2], run.status_count[4], run.status_count[5], run.s503, run.s505, run.closed,
            rss0, rss1);
    for (int f = 0; f < run.fails && f < MAX_FAILS; f++) cr_log_error("%s", run.msg[f]);
    cr_expect_eq(run.fails, 0, "%d of %ld requests were answered wrongly (seed %" PRIu64 "); the first:\n%s", run.fails,
                 total, run.seed, run.msg[0]);
    cr_expect(rss1 - rss0 < RSS_BOUND_MIB * 1024, "the server's RSS grew from %ld to %ld KiB (seed %" PRIu64 ")", rss0,
              rss1, run.seed);

    /* the same answer as before the storm, then a clean exit */
    char *after = greedy();
    cr_expect_str_eq(after, before, "a valid request after the storm is answered differently");
    ts_resp r = ts_request(&srv, "GET", "/health", NULL, NULL);
    cr_expect_eq(r.status, 200);
    ts_resp_free(&r);
    free(before);
    free(after);
    int st = ts_term(&srv, 60);
    bool leaks = check_sanitizers();
    cr_expect(st != -1 && WIFEXITED(st) && (WEXITSTATUS(st) == 0 || leaks),
              "the server did not exit 0 on SIGTERM (wait status %d)", st);
}
