/* kiln serve's HTTP core on libmicrohttpd, one thread per connection: a connection's
 * thread reads the body, waits for the slot (in a bounded queue), renders and tokenizes
 * the prompt and either generates the whole answer itself or hands the slot to a worker
 * thread that streams Server-Sent Events through a small locked queue of bytes. A client
 * that goes away makes the next write fail; libmicrohttpd then frees the response, which
 * cancels the worker at its next token. */
#include "http.h"

#include "api.h"
#include "api_response.h"
#include "generate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* ---- the server and its slot ------------------------------------------------------------ */

typedef struct server {
    const srv_config *cfg;
    gen_session *session; /* the slot's: kept between requests for prefix reuse */
    char bos[128];
    int32_t end_turn;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy;
    uint32_t waiting;
    atomic_bool stopping;
    atomic_uint_fast64_t next_id;
    /* for /metrics, under mu */
    uint64_t requests, prompt_tokens, cached_tokens, completion_tokens;
    double generate_s;
} server;

typedef enum { SLOT_OK, SLOT_FULL, SLOT_STOPPING } slot_status;

static slot_status slot_acquire(server *s) {
    slot_status st = SLOT_OK;
    pthread_mutex_lock(&s->mu);
    if (s->busy && s->waiting >= s->cfg->queue) st = SLOT_FULL;
    else {
        s->waiting++;
        while (s->busy && !atomic_load(&s->stopping)) pthread_cond_wait(&s->cv, &s->mu);
        s->waiting--;
        if (atomic_load(&s->stopping)) st = SLOT_STOPPING;
        else s->busy = true;
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

static void slot_release(server *s) {
    pthread_mutex_lock(&s->mu);
    s->busy = false;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ---- responses ---------------------------------------------------------------------------- */

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, char *text, const char *type) {
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                                  "\"code\":null}}";
        text = strdup(oom);
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        if (!text) return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE) MHD_add_response_header(r, "Retry-After", "1");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_error(struct MHD_Connection *c, const srv_error *e, const char *allow) {
    char *j = srv_error_json(e);
    if (!allow) return send_text(c, (unsigned)e->status, j, "application/json");
    struct MHD_Response *r = j ? MHD_create_response_from_buffer(strlen(j), j, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!r) {
        free(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)e->status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result fail(struct MHD_Connection *c, int status, const char *param, const char *code,
                            const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result fail(struct MHD_Connection *c, int status, const char *param, const char *code,
                            const char *fmt, ...) {
    srv_error e;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_error_set(&e, status, param, code, "%s", msg);
    return send_error(c, &e, NULL);
}

/* ---- a request's prompt ------------------------------------------------------------------- */

/* The prompt's ids: chat messages through the template (the template writes BOS), a
 * completion's text with the model's BOS. 0, or -1 with e filled. */
static int prompt_ids(server *s, const srv_request *r, int32_t **ids, uint32_t *n, srv_error *e) {
    const srv_config *cfg = s->cfg;
    char err[256];
    char *text = NULL;
    const char *p;
    size_t len;
    bool add_special;
    *ids = NULL;
    if (r->endpoint == SRV_CHAT) {
        chat_msg *msgs = (chat_msg *)r->messages;
        chat_msg *owned = NULL;
        size_t nm = r->n_messages;
        if (cfg->default_system && (nm == 0 || strcmp(msgs[0].role, "system"))) {
            owned = malloc((nm + 1) * sizeof *owned);
            if (!owned) return srv_error_set(e, 500, NULL, NULL, "out of memory"), -1;
            owned[0] = (chat_msg){"system", cfg->default_system};
            memcpy(owned + 1, msgs, nm * sizeof *msgs);
            msgs = owned;
            nm++;
        }
        text = chat_render(cfg->family, msgs, nm, true, s->bos, err, sizeof err);
        free(owned);
        if (!text) return srv_error_set(e, 400, "messages", NULL, "%s", err), -1;
        p = text;
        len = strlen(text);
        add_special = false;
    } else {
        p = r->prompt;
        len = strlen(p);
        add_special = true;
    }
    int rc = -1;
    if (tok_utf8_invalid_at(p, len)) {
        srv_error_set(e, 400, r->endpoint == SRV_CHAT ? "messages" : "prompt", NULL, "the prompt is not valid UTF-8");
        goto out;
    }
    int64_t k = tok_encode(cfg->tok, p, len, add_special, true, NULL, 0, err, sizeof err);
    if (k < 0) {
        srv_error_set(e, 400, NULL, NULL, "%s", err);
        goto out;
    }
    *ids = malloc(((size_t)k + 1) * sizeof **ids);
    if (!*ids) {
        srv_error_set(e, 500, NULL, NULL, "out of memory");
        goto out;
    }
    k = tok_encode(cfg->tok, p, len, add_special, true, *ids, (size_t)k + 1, err, sizeof err);
    if (k < 0) {
        srv_error_set(e, 400, NULL, NULL, "%s", err);
        goto out;
    }
    *n = (uint32_t)k;
    if (*n == 0) {
        srv_error_set(e, 400, r->endpoint == SRV_CHAT ? "messages" : "prompt", NULL,
                      "the prompt is empty and this model adds no BOS token");
        goto out;
    }
    if (*n >= cfg->engine->n_ctx) {
        srv_error_set(e, 400, r->endpoint == SRV_CHAT ? "messages" : "prompt", "context_length_exceeded",
                      "the prompt has %u tokens but the context holds %u", *n, cfg->engine->n_ctx);
        goto out;
    }
    rc = 0;
out:
    if (rc) {
        free(*ids);
        *ids = NULL;
    }
    free(text);
    return rc;
}

/* ---- generation --------------------------------------------------------------------------- */

typedef struct buf { char *p; size_t n, cap; } buf;

static bool buf_add(buf *b, const char *p, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return false;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

/* One request's generation, shared by the connection thread and (streaming) a worker. */
typedef struct job {
    server *srv;
    srv_request req;
    int32_t *ids;
    uint32_t n_ids;
    char id[48];
    int64_t created;
    /* streaming: the queue of SSE bytes, guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    buf q;
    size_t q_off;
    bool done, failed;
    atomic_bool cancel;
    pthread_t worker;
    bool worker_started;
    buf text; /* non-streaming: the whole answer */
} job;

static int emit_collect(void *ctx, const char *text, size_t len) {
    job *j = ctx;
    if (atomic_load(&j->srv->stopping)) return 1;
    return buf_add(&j->text, text, len) ? 0 : 1;
}

static void push(job *j, char *event) {
    pthread_mutex_lock(&j->mu);
    if (!event || !buf_add(&j->q, event, strlen(event))) j->failed = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    free(event);
}

static srv_chunk chunk_base(const job *j) {
    return (srv_chunk){.id = j->id, .created = j->created, .model = j->srv->cfg->model_id,
                       .include_usage = j->req.include_usage};
}

static char *make_chunk(const job *j, const srv_chunk *c) {
    return j->req.endpoint == SRV_CHAT ? srv_chat_chunk(c) : srv_text_chunk(c);
}

static int emit_stream(void *ctx, const char *text, size_t len) {
    job *j = ctx;
    if (atomic_load(&j->cancel) || atomic_load(&j->srv->stopping)) return 1;
    srv_chunk c = chunk_base(j);
    c.text = text;
    c.text_len = len;
    push(j, make_chunk(j, &c));
    return j->failed;
}

/* Runs the generation on the slot's session (the caller holds the slot). */
static int generate(job *j, gen_emit emit, gen_result *res, char *err, size_t errlen) {
    server *s = j->srv;
    sampler *smp = samp_create(&j->req.samp, s->cfg->engine->n_vocab);
    if (!smp) return snprintf(err, errlen, "out of memory"), -1;
    gen_params gp = {.max_tokens = j->req.max_tokens,
                     .stop = (const char *const *)j->req.stop,
                     .n_stop = j->req.n_stop,
                     .extra_eog = j->req.endpoint == SRV_CHAT ? s->end_turn : -1};
    memset(res, 0, sizeof *res);
    int rc = gen_run(s->session, smp, j->ids, j->n_ids, &gp, emit, j, res, err, errlen);
    samp_free(smp);
    pthread_mutex_lock(&s->mu);
    s->prompt_tokens += res->n_prompt, s->cached_tokens += res->n_reused;
    s->completion_tokens += res->n_generated, s->generate_s += res->t_generate;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static srv_usage usage_of(const gen_result *r) {
    return (srv_usage){.prompt_tokens = r->n_prompt, .completion_tokens = r->n_generated,
                       .cached_tokens = r->n_reused};
}

static void *worker_main(void *arg) {
    job *j = arg;
    bool chat = j->req.endpoint == SRV_CHAT;
    if (chat) {
        srv_chunk c = chunk_base(j);
        c.role = true;
        push(j, make_chunk(j, &c));
    }
    gen_result res;
    char err[256];
    int rc = generate(j, emit_stream, &res, err, sizeof err);
    slot_release(j->srv);
    if (rc) {
        srv_error e;
        srv_error_set(&e, 500, NULL, NULL, "%s", err);
        char *ej = srv_error_json(&e);
        if (ej) {
            size_t n = strlen(ej) + 16;
            char *ev = malloc(n);
            if (ev) snprintf(ev, n, "data: %s\n\n", ej);
            push(j, ev);
        }
        free(ej);
    } else {
        srv_chunk c = chunk_base(j);
        c.finish_reason = srv_finish_reason(res.finish);
        push(j, make_chunk(j, &c));
        if (j->req.include_usage) {
            srv_usage u = usage_of(&res);
            push(j, srv_usage_chunk(chat, j->id, j->created, j->srv->cfg->model_id, &u));
        }
    }
    free(res.ids);
    pthread_mutex_lock(&j->mu);
    if (!buf_add(&j->q, SRV_SSE_DONE, strlen(SRV_SSE_DONE))) j->failed = true;
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

static void job_free(job *j) {
    if (!j) return;
    srv_request_free(&j->req);
    free(j->ids);
    free(j->q.p);
    free(j->text.p);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* libmicrohttpd's reader: blocks (this connection's own thread) until bytes or the end. */
static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    job *j = cls;
    pthread_mutex_lock(&j->mu);
    while (j->q_off == j->q.n && !j->done && !j->failed) pthread_cond_wait(&j->cv, &j->mu);
    ssize_t got;
    if (j->failed) got = MHD_CONTENT_READER_END_WITH_ERROR;
    else if (j->q_off == j->q.n) got = MHD_CONTENT_READER_END_OF_STREAM;
    else {
        size_t n = j->q.n - j->q_off;
        if (n > max) n = max;
        memcpy(out, j->q.p + j->q_off, n);
        j->q_off += n;
        if (j->q_off == j->q.n) j->q_off = j->q.n = 0;
        got = (ssize_t)n;
    }
    pthread_mutex_unlock(&j->mu);
    return got;
}

/* Called when the response ends or the client went away: stop the worker, free. */
static void stream_free(void *cls) {
    job *j = cls;
    atomic_store(&j->cancel, true);
    if (j->worker_started) pthread_join(j->worker, NULL);
    job_free(j);
}

/* ---- request handling --------------------------------------------------------------------- */

typedef struct conn {
    buf body;
    bool too_large;
} conn;

static bool authorized(server *s, struct MHD_Connection *c) {
    const char *key = s->cfg->api_key;
    if (!key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    return h && !strncmp(h, "Bearer ", 7) && !strcmp(h + 7, key);
}

static enum MHD_Result completion(server *s, struct MHD_Connection *c, srv_endpoint ep, const conn *cn) {
    pthread_mutex_lock(&s->mu);
    s->requests++;
    pthread_mutex_unlock(&s->mu);
    const srv_config *cfg = s->cfg;
    srv_limits lim = {.max_tokens = cfg->engine->n_ctx, .default_max_tokens = cfg->engine->n_ctx,
                      .defaults = cfg->samp};
    srv_error e;
    job *j = calloc(1, sizeof *j);
    if (!j) return fail(c, 500, NULL, NULL, "out of memory");
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->srv = s;
    if (srv_request_parse(&j->req, ep, cn->body.p ? cn->body.p : "", cn->body.n, &lim, &e)) {
        job_free(j);
        return send_error(c, &e, NULL);
    }
    /* the generation loop does not hand out its logits yet: refused, not answered null */
    if (j->req.logprobs) {
        job_free(j);
        srv_error_set(&e, 400, "logprobs", "unsupported_parameter", "logprobs are not supported by this server yet");
        return send_error(c, &e, NULL);
    }
    snprintf(j->id, sizeof j->id, "%s-%016llx", ep == SRV_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&s->next_id, 1));
    j->created = (int64_t)time(NULL);
    slot_status st = slot_acquire(s);
    if (st != SLOT_OK) {
        job_free(j);
        return fail(c, 503, NULL, NULL, st == SLOT_FULL ? "the server is busy: try again shortly"
                                                        : "the server is shutting down");
    }
    if (prompt_ids(s, &j->req, &j->ids, &j->n_ids, &e)) {
        slot_release(s);
        job_free(j);
        return send_error(c, &e, NULL);
    }
    if (j->req.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, j, stream_free);
        if (!r) {
            slot_release(s);
            job_free(j);
            return MHD_NO;
        }
        if (pthread_create(&j->worker, NULL, worker_main, j)) {
            slot_release(s);
            j->failed = true; /* the reader ends the response with an error */
        } else {
            j->worker_started = true;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r); /* stream_free runs when the response is done with */
        return ok;
    }
    gen_result res;
    char err[256];
    int rc = generate(j, emit_collect, &res, err, sizeof err);
    slot_release(s);
    enum MHD_Result ok;
    if (rc) ok = fail(c, 500, NULL, NULL, "%s", err);
    else {
        srv_completion sc = {.id = j->id, .created = j->created, .model = cfg->model_id,
                             .text = j->text.p ? j->text.p : "", .text_len = j->text.n,
                             .finish_reason = srv_finish_reason(res.finish), .usage = usage_of(&res)};
        ok = send_text(c, 200, ep == SRV_CHAT ? srv_chat_response(&sc) : srv_text_response(&sc), "application/json");
    }
    free(res.ids);
    job_free(j);
    return ok;
}

/* GET /metrics: Prometheus' text format. */
static char *metrics_text(server *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t req = s->requests, pt = s->prompt_tokens, ct = s->cached_tokens, gt = s->completion_tokens;
    double gs = s->generate_s;
    uint32_t waiting = s->waiting, busy = s->busy;
    pthread_mutex_unlock(&s->mu);
    size_t cap = 2048;
    char *out = malloc(cap);
    if (!out) return NULL;
    int n = snprintf(out, cap,
                     "# HELP kiln_requests_total Completion requests received.\n"
                     "# TYPE kiln_requests_total counter\nkiln_requests_total %llu\n"
                     "# HELP kiln_prompt_tokens_total Prompt tokens of finished requests.\n"
                     "# TYPE kiln_prompt_tokens_total counter\nkiln_prompt_tokens_total %llu\n"
                     "# HELP kiln_prompt_tokens_cached_total Prompt tokens reused from the slot's cache.\n"
                     "# TYPE kiln_prompt_tokens_cached_total counter\nkiln_prompt_tokens_cached_total %llu\n"
                     "# HELP kiln_completion_tokens_total Tokens generated.\n"
                     "# TYPE kiln_completion_tokens_total counter\nkiln_completion_tokens_total %llu\n"
                     "# HELP kiln_generate_seconds_total Time spent generating (after the prompt).\n"
                     "# TYPE kiln_generate_seconds_total counter\nkiln_generate_seconds_total %.6f\n"
                     "# HELP kiln_tokens_per_second Generated tokens per second of generation, overall.\n"
                     "# TYPE kiln_tokens_per_second gauge\nkiln_tokens_per_second %.3f\n"
                     "# HELP kiln_queue_depth Requests waiting for a slot.\n"
                     "# TYPE kiln_queue_depth gauge\nkiln_queue_depth %u\n"
                     "# HELP kiln_slots_busy Slots generating.\n"
                     "# TYPE kiln_slots_busy gauge\nkiln_slots_busy %u\n",
                     (unsigned long long)req, (unsigned long long)pt, (unsigned long long)ct, (unsigned long long)gt,
                     gs, gs > 0 ? (double)gt / gs : 0.0, waiting, busy);
    if (n < 0 || (size_t)n >= cap) {
        free(out);
        return NULL;
    }
    return out;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *s = cls;
    conn *cn = *con_cls;
    if (!cn) {
        cn = calloc(1, sizeof *cn);
        if (!cn) return MHD_NO;
        *con_cls = cn;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cn->too_large) {
            if (cn->body.n + *upload_size > SRV_BODY_LIMIT) {
                cn->too_large = true;
                free(cn->body.p);
                cn->body = (buf){0};
            } else if (!buf_add(&cn->body, upload, *upload_size)) {
                return MHD_NO;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    int which = !strcmp(url, "/v1/chat/completions") ? 0 : !strcmp(url, "/v1/completions") ? 1
              : !strcmp(url, "/v1/models") ? 2 : !strcmp(url, "/health") ? 3 : !strcmp(url, "/metrics") ? 4 : -1;
    if (which < 0) return fail(c, 404, NULL, "not_found", "no such endpoint: %s %.128s", method, url);
    bool want_post = which < 2;
    if (want_post ? !post : !get) {
        srv_error e;
        srv_error_set(&e, 405, NULL, "method_not_allowed", "%s does not take %s", url, method);
        return send_error(c, &e, want_post ? "POST" : "GET");
    }
    if (which == 3) return send_text(c, 200, strdup("{\"status\":\"ok\"}"), "application/json");
    if (which == 4) return send_text(c, 200, metrics_text(s), "text/plain; version=0.0.4");
    if (!authorized(s, c)) return fail(c, 401, NULL, "invalid_api_key", "a valid API key is required (Authorization: Bearer KEY)");
    if (which == 2) {
        const char *ids[1] = {s->cfg->model_id};
        return send_text(c, 200, srv_models_response(ids, 1, (int64_t)time(NULL)), "application/json");
    }
    if (cn->too_large)
        return fail(c, 413, NULL, "request_too_large", "the request body is over %u bytes", SRV_BODY_LIMIT);
    return completion(s, c, which == 0 ? SRV_CHAT : SRV_COMPLETION, cn);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    conn *cn = *con_cls;
    if (cn) free(cn->body.p);
    free(cn);
    *con_cls = NULL;
}

/* ---- the daemon --------------------------------------------------------------------------- */

int srv_serve(const srv_config *cfg) {
    server s = {.cfg = cfg, .end_turn = -1};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    atomic_init(&s.stopping, false);
    atomic_init(&s.next_id, ((uint64_t)time(NULL) << 20));
    int rc = 1;
    struct MHD_Daemon *d = NULL;
    s.session = gen_session_create(cfg->engine, cfg->tok);
    if (!s.session) {
        fprintf(stderr, "kiln: out of memory\n");
        goto out;
    }
    if (tok_bos(cfg->tok) >= 0) {
        int64_t k = tok_piece(cfg->tok, tok_bos(cfg->tok), true, s.bos, sizeof s.bos - 1);
        s.bos[k > 0 && k < (int64_t)sizeof s.bos ? k : 0] = 0;
    }
    s.end_turn = tok_find(cfg->tok, chat_end_of_turn(cfg->family));

    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(cfg->port)};
    if (inet_pton(AF_INET, cfg->host, &sa.sin_addr) != 1) {
        fprintf(stderr, "kiln: --listen: '%s' is not an IPv4 address\n", cfg->host);
        goto out;
    }
    /* SIGINT and SIGTERM go to sigwait below, in this thread only. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG, 0,
                         NULL, NULL, handle, &s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                         MHD_OPTION_NOTIFY_COMPLETED, completed, &s, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)256, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "kiln: cannot listen on %s:%u: %s\n", cfg->host, (unsigned)cfg->port, strerror(errno));
        goto out;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_in bound;
    socklen_t blen = sizeof bound;
    unsigned port = cfg->port;
    if (info && getsockname(info->listen_fd, (struct sockaddr *)&bound, &blen) == 0) port = ntohs(bound.sin_port);
    printf("listening on http://%s:%u\n", cfg->host, port);
    fflush(stdout);
    int sig = 0;
    while (sigwait(&sigs, &sig) != 0) {}
    fprintf(stderr, "kiln: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    atomic_store(&s.stopping, true);
    pthread_mutex_lock(&s.mu);
    pthread_cond_broadcast(&s.cv);
    pthread_mutex_unlock(&s.mu);
    MHD_stop_daemon(d);
    rc = 0;
out:
    gen_session_free(s.session);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
    return rc;
}
