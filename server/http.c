/* kiln serve's HTTP core on libmicrohttpd, one thread per connection, and one worker
 * thread per slot: a connection's thread reads the body, tokenizes the prompt, waits for a
 * free slot (in a bounded FIFO queue), picks the free slot whose cache holds the longest
 * part of the prompt and hands the job to its worker. A plain request's thread then waits
 * for the answer; a streamed one's reads Server-Sent Events from a small locked queue of
 * bytes the worker fills. A client that goes away makes the next write fail;
 * libmicrohttpd then frees the response, which cancels the job at its next token. */
#include "server/http.h"

#include "generate/generate.h"
#include "server/api.h"
#include "server/api_response.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
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
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

/* ---- the server and its slots ------------------------------------------------------------- */

typedef struct job job;
typedef struct server server;

typedef struct slot {
    server *srv;
    engine *engine;
    gen_session *session; /* kept between requests for prefix reuse */
    pthread_t worker;
    bool started;
    /* under srv->mu */
    bool busy;            /* a request holds the slot */
    uint64_t last_used;   /* when it last took a request: ties go to the least recent */
    job *job;             /* handed to the worker, not yet taken */
} slot;

struct server {
    const srv_config *cfg;
    slot *slots;
    uint32_t n_slots;
    char bos[128];
    int32_t end_turn;
    pthread_mutex_t mu;
    pthread_cond_t cv;    /* a slot freed, a job handed to a worker, stopping */
    uint32_t busy, waiting;
    uint64_t ticket_next, ticket_serving; /* waiting requests take slots in arrival order */
    uint64_t uses;
    bool quit;            /* the workers end (after the daemon stopped) */
    atomic_bool stopping;
    atomic_uint_fast64_t next_id;
    /* for /metrics, under mu */
    uint64_t requests, prompt_tokens, cached_tokens, completion_tokens;
    double generate_s;
};

typedef enum { SLOT_OK, SLOT_FULL, SLOT_STOPPING } slot_status;

/* The free slot for prompt ids[n]: the longest cached prefix, where it covers at least
 * half of the prompt (a shared BOS alone should not make a request evict another
 * conversation's cache for one token; llama.cpp's server has the same 0.5 threshold);
 * without one, the slot holding the least (nothing lost), ties to the least recently
 * used. The caller holds mu and knows one is free. */
static slot *slot_pick(server *s, const int32_t *ids, uint32_t n) {
    slot *best = NULL;
    uint32_t best_same = 0, best_held = 0;
    for (uint32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->busy) continue;
        uint32_t held = gen_session_cached(sl->session), same = gen_session_prefix(sl->session, ids, n);
        if (2 * (uint64_t)same < n) same = 0;
        bool better = !best || same > best_same;
        if (best && same == best_same)
            better = same ? sl->last_used < best->last_used /* equal reuse: the older */
                          : held < best_held || (held == best_held && sl->last_used < best->last_used);
        if (better) best = sl, best_same = same, best_held = held;
    }
    return best;
}

static slot_status slot_acquire(server *s, const int32_t *ids, uint32_t n, slot **out) {
    slot_status st = SLOT_OK;
    pthread_mutex_lock(&s->mu);
    if ((s->busy == s->n_slots || s->waiting) && s->waiting >= s->cfg->queue) st = SLOT_FULL;
    else {
        uint64_t mine = s->ticket_next++;
        s->waiting++;
        while ((s->busy == s->n_slots || s->ticket_serving != mine) && !atomic_load(&s->stopping))
            pthread_cond_wait(&s->cv, &s->mu);
        s->waiting--;
        if (atomic_load(&s->stopping)) st = SLOT_STOPPING;
        else {
            slot *sl = slot_pick(s, ids, n);
            sl->busy = true;
            sl->last_used = ++s->uses;
            s->busy++;
            s->ticket_serving++;
            pthread_cond_broadcast(&s->cv); /* the next in line, if another slot is free */
            *out = sl;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

static void slot_release(slot *sl) {
    server *s = sl->srv;
    pthread_mutex_lock(&s->mu);
    sl->busy = false;
    s->busy--;
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

/* An OpenAI error object; with a header (name: value) where the status calls for one
 * (405's Allow, 401's WWW-Authenticate). */
static enum MHD_Result send_error(struct MHD_Connection *c, const srv_error *e, const char *hdr, const char *value) {
    char *j = srv_error_json(e);
    if (!hdr) return send_text(c, (unsigned)e->status, j, "application/json");
    struct MHD_Response *r = j ? MHD_create_response_from_buffer(strlen(j), j, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!r) {
        free(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(r, hdr, value);
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
    return send_error(c, &e, NULL, NULL);
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
    if (*n >= cfg->engines[0]->n_ctx) {
        srv_error_set(e, 400, r->endpoint == SRV_CHAT ? "messages" : "prompt", "context_length_exceeded",
                      "the prompt has %u tokens but the context holds %u", *n, cfg->engines[0]->n_ctx);
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

/* A request's log-probabilities: one entry per generated token, reported in the order
 * the text that holds them goes out. */
typedef struct lp_state {
    bool on;
    uint32_t k;          /* alternatives per token */
    tok_stream mirror;   /* the loop's detokenizer, fed the same tokens: where each text ends */
    size_t produced;     /* bytes the mirror produced */
    size_t emitted;      /* bytes emitted (streaming) */
    size_t head;         /* entries [0, head) are reported (streaming) */
    size_t raw;          /* token bytes of the reported entries (legacy text_offset) */
    size_t base;         /* the legacy text_offset of the first token: the prompt's bytes */
    srv_token_logprob *lp;
    srv_token_span *span; /* where each entry's text lies in the output */
    char **text;          /* each entry's token and alternatives' bytes (its texts point here) */
    size_t n, cap;
    bool failed;         /* out of memory */
} lp_state;

/* One request's generation, shared by the connection thread and the slot's worker. */
struct job {
    server *srv;
    srv_request req;
    int32_t *ids;
    uint32_t n_ids;
    char id[48];
    int64_t created;
    lp_state lps;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;           /* the worker is finished with the job (under mu) */
    /* streaming: the queue of SSE bytes, guarded by mu */
    buf q;
    size_t q_off;
    bool failed;
    atomic_bool cancel;
    /* plain: the whole answer and how it went */
    buf text;
    gen_result res;
    int rc;
    char err[256];
};

/* The bytes of id's text as it appears in the output: the first piece loses the dummy
 * prefix's space as tok_stream drops it. Appends to *b; the length, or -1. */
static int64_t piece_add(const tokenizer *t, int32_t id, bool first, buf *b) {
    char small[256];
    int64_t n = tok_piece(t, id, false, small, sizeof small);
    if (n < 0) return -1;
    char *p = (size_t)n <= sizeof small ? small : malloc((size_t)n);
    if (!p) return -1;
    if (p != small) tok_piece(t, id, false, p, (size_t)n);
    size_t off = first && n > 0 && p[0] == ' ' && tok_space_prefix(t) ? 1 : 0;
    bool ok = buf_add(b, p + off, (size_t)n - off);
    if (p != small) free(p);
    return ok ? n - (int64_t)off : -1;
}

/* gen_on_token: the token's log-probability and its best alternatives from the raw
 * logits, with their texts; where its text will lie in the output. */
static int on_token(void *ctx, int32_t id, const float *logits, uint32_t n_vocab) {
    job *j = ctx;
    lp_state *L = &j->lps;
    const tokenizer *t = j->srv->cfg->tok;
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 64;
        srv_token_logprob *lp = realloc(L->lp, cap * sizeof *lp);
        if (lp) L->lp = lp;
        srv_token_span *sp = lp ? realloc(L->span, cap * sizeof *sp) : NULL;
        if (sp) L->span = sp;
        char **tx = sp ? realloc(L->text, cap * sizeof *tx) : NULL;
        if (tx) L->text = tx;
        if (!tx) return L->failed = true, 1;
        L->cap = cap;
    }
    int32_t top_ids[SRV_MAX_TOP_LOGPROBS];
    double top_lps[SRV_MAX_TOP_LOGPROBS], lp;
    uint32_t n_top;
    if (srv_logprobs(logits, n_vocab, id, L->k, &lp, top_ids, top_lps, &n_top)) lp = -INFINITY, n_top = 0;
    /* the texts, one after another in one buffer: pointers are set once it stops moving */
    bool first = L->mirror.first;
    buf b = {0};
    int64_t len[1 + SRV_MAX_TOP_LOGPROBS];
    for (uint32_t i = 0; i <= n_top; i++)
        if ((len[i] = piece_add(t, i ? top_ids[i - 1] : id, first, &b)) < 0) return free(b.p), L->failed = true, 1;
    srv_token_logprob *e = &L->lp[L->n];
    const char *p = b.p ? b.p : "";
    e->tok = (srv_logprob_alt){p, (size_t)len[0], lp};
    p += len[0];
    for (uint32_t i = 0; i < n_top; i++) {
        e->top[i] = (srv_logprob_alt){p, (size_t)len[i + 1], top_lps[i]};
        p += len[i + 1];
    }
    e->n_top = n_top;
    char out[4096]; /* tok_stream_push's bound, as the loop's */
    size_t start = L->produced;
    L->produced += tok_stream_push(&L->mirror, id, out, sizeof out);
    L->text[L->n] = b.p;
    L->span[L->n++] = (srv_token_span){start, L->produced};
    return 0;
}

static void lp_free(lp_state *L) {
    for (size_t i = 0; i < L->n; i++) free(L->text[i]);
    free(L->lp);
    free(L->span);
    free(L->text);
}

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

/* A content chunk with the log-probabilities of the next n entries (when asked for). */
static void push_text(job *j, const char *text, size_t len, size_t n) {
    lp_state *L = &j->lps;
    srv_chunk c = chunk_base(j);
    c.text = text;
    c.text_len = len;
    if (L->on) {
        static const srv_token_logprob none;
        c.logprobs = n ? L->lp + L->head : &none; /* none yet: an empty list, not null */
        c.n_logprobs = n;
        c.text_offset = L->base + L->raw;
        for (size_t i = 0; i < n; i++) L->raw += L->lp[L->head + i].tok.len;
        L->head += n;
    }
    push(j, make_chunk(j, &c));
}

static int emit_stream(void *ctx, const char *text, size_t len) {
    job *j = ctx;
    if (atomic_load(&j->cancel) || atomic_load(&j->srv->stopping)) return 1;
    j->lps.emitted += len;
    lp_state *L = &j->lps;
    push_text(j, text, len, L->n > L->head ? srv_spans_ready(L->span + L->head, L->n - L->head, L->emitted) : 0);
    return j->failed;
}

/* Runs the generation on the slot's session (the job holds the slot). */
static int generate(slot *sl, job *j, gen_emit emit, gen_result *res, char *err, size_t errlen) {
    server *s = j->srv;
    sampler *smp = samp_create(&j->req.samp, sl->engine->n_vocab);
    if (!smp) return snprintf(err, errlen, "out of memory"), -1;
    gen_params gp = {.max_tokens = j->req.max_tokens,
                     .stop = (const char *const *)j->req.stop,
                     .n_stop = j->req.n_stop,
                     .extra_eog = j->req.endpoint == SRV_CHAT ? s->end_turn : -1,
                     .on_token = j->lps.on ? on_token : NULL,
                     .token_ctx = j};
    memset(res, 0, sizeof *res);
    int rc = gen_run(sl->session, smp, j->ids, j->n_ids, &gp, emit, j, res, err, errlen);
    samp_free(smp);
    if (rc == 0 && j->lps.failed) rc = -1, snprintf(err, errlen, "out of memory");
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

/* A streamed request on the slot: SSE events into the job's queue, [DONE] last. */
static void run_stream(slot *sl, job *j) {
    bool chat = j->req.endpoint == SRV_CHAT;
    if (chat) {
        srv_chunk c = chunk_base(j);
        c.role = true;
        push(j, make_chunk(j, &c));
    }
    gen_result res;
    char err[256];
    int rc = generate(sl, j, emit_stream, &res, err, sizeof err);
    slot_release(sl);
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
        lp_state *L = &j->lps;
        size_t rest = L->n > L->head ? srv_spans_rest(L->span + L->head, L->n - L->head,
                                                      res.finish == GEN_STOP_STRING, L->emitted)
                                     : 0;
        if (rest) push_text(j, "", 0, rest); /* tokens whose text was held to the end */
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
    j->done = true; /* the job is not touched after this: its owner may free it */
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void run_plain(slot *sl, job *j) {
    j->rc = generate(sl, j, emit_collect, &j->res, j->err, sizeof j->err);
    slot_release(sl);
    pthread_mutex_lock(&j->mu);
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* A slot's worker: runs the jobs handed to the slot, one at a time, until quit. */
static void *slot_main(void *arg) {
    slot *sl = arg;
    server *s = sl->srv;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!sl->job && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
        job *j = sl->job;
        sl->job = NULL;
        pthread_mutex_unlock(&s->mu);
        if (!j) return NULL;
        if (j->req.stream) run_stream(sl, j);
        else run_plain(sl, j);
    }
}

static void slot_dispatch(slot *sl, job *j) {
    server *s = sl->srv;
    pthread_mutex_lock(&s->mu);
    sl->job = j;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void job_wait(job *j) {
    pthread_mutex_lock(&j->mu);
    while (!j->done) pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
}

static void job_free(job *j) {
    if (!j) return;
    srv_request_free(&j->req);
    free(j->ids);
    free(j->q.p);
    free(j->text.p);
    free(j->res.ids);
    lp_free(&j->lps);
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

/* Called when the response ends or the client went away: stop the job, wait for the
 * worker to let go of it, free. */
static void stream_free(void *cls) {
    job *j = cls;
    atomic_store(&j->cancel, true);
    job_wait(j);
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
    return h && !strncasecmp(h, "Bearer ", 7) && !strcmp(h + 7, key); /* the scheme is case-insensitive */
}

/* A streamed request on slot sl: the response reads what the worker queues. */
static enum MHD_Result start_stream(struct MHD_Connection *c, slot *sl, job *j) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, j, stream_free);
    if (!r) {
        slot_release(sl);
        job_free(j);
        return MHD_NO;
    }
    slot_dispatch(sl, j); /* before queueing: a refused response's stream_free waits for the job */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r); /* stream_free runs when the response is done with */
    return ok;
}

static enum MHD_Result completion(server *s, struct MHD_Connection *c, srv_endpoint ep, const conn *cn) {
    pthread_mutex_lock(&s->mu);
    s->requests++;
    pthread_mutex_unlock(&s->mu);
    const srv_config *cfg = s->cfg;
    srv_limits lim = {.max_tokens = cfg->engines[0]->n_ctx, .default_max_tokens = cfg->engines[0]->n_ctx,
                      .defaults = cfg->samp};
    srv_error e;
    job *j = calloc(1, sizeof *j);
    if (!j) return fail(c, 500, NULL, NULL, "out of memory");
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->srv = s;
    if (srv_request_parse(&j->req, ep, cn->body.p ? cn->body.p : "", cn->body.n, &lim, &e) ||
        prompt_ids(s, &j->req, &j->ids, &j->n_ids, &e)) {
        job_free(j);
        return send_error(c, &e, NULL, NULL);
    }
    j->lps.on = j->req.logprobs;
    j->lps.k = j->req.top_logprobs;
    j->lps.base = ep == SRV_COMPLETION ? strlen(j->req.prompt) : 0;
    tok_stream_init_after(&j->lps.mirror, cfg->tok, j->ids, j->n_ids); /* as gen_run's */
    snprintf(j->id, sizeof j->id, "%s-%016llx", ep == SRV_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&s->next_id, 1));
    j->created = (int64_t)time(NULL);
    slot *sl = NULL;
    slot_status st = slot_acquire(s, j->ids, j->n_ids, &sl);
    if (st != SLOT_OK) {
        job_free(j);
        return fail(c, 503, NULL, NULL, st == SLOT_FULL ? "the server is busy: try again shortly"
                                                        : "the server is shutting down");
    }
    if (j->req.stream) return start_stream(c, sl, j);
    slot_dispatch(sl, j);
    job_wait(j);
    enum MHD_Result ok;
    if (j->rc) ok = fail(c, 500, NULL, NULL, "%s", j->err);
    else {
        const lp_state *L = &j->lps;
        srv_completion sc = {.id = j->id, .created = j->created, .model = cfg->model_id,
                             .text = j->text.p ? j->text.p : "", .text_len = j->text.n,
                             .finish_reason = srv_finish_reason(j->res.finish), .usage = usage_of(&j->res)};
        if (L->on) {
            static const srv_token_logprob none;
            sc.logprobs = L->n ? L->lp : &none;
            sc.n_logprobs = srv_spans_rest(L->span, L->n, j->res.finish == GEN_STOP_STRING, j->text.n);
            sc.text_offset = L->base;
        }
        ok = send_text(c, 200, ep == SRV_CHAT ? srv_chat_response(&sc) : srv_text_response(&sc), "application/json");
    }
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
              : !strcmp(url, "/v1/models") ? 2 : !strcmp(url, "/health") ? 3 : !strcmp(url, "/metrics") ? 4
              : !strncmp(url, "/v1/models/", 11) && url[11] ? 5 : -1;
    if (which < 0) return fail(c, 404, NULL, "not_found", "no such endpoint: %s %.128s", method, url);
    bool want_post = which < 2; /* the rest are GETs */
    if (want_post ? !post : !get) {
        srv_error e;
        srv_error_set(&e, 405, NULL, "method_not_allowed", "%s does not take %s", url, method);
        return send_error(c, &e, MHD_HTTP_HEADER_ALLOW, want_post ? "POST" : "GET");
    }
    if (which == 3) return send_text(c, 200, strdup("{\"status\":\"ok\"}"), "application/json");
    if (which == 4) return send_text(c, 200, metrics_text(s), "text/plain; version=0.0.4");
    if (!authorized(s, c)) {
        srv_error e;
        srv_error_set(&e, 401, NULL, "invalid_api_key", "a valid API key is required (Authorization: Bearer KEY)");
        return send_error(c, &e, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    }
    if (which == 2) {
        const char *ids[1] = {s->cfg->model_id};
        return send_text(c, 200, srv_models_response(ids, 1, (int64_t)time(NULL)), "application/json");
    }
    if (which == 5) { /* GET /v1/models/ID (the client's models.retrieve) */
        if (strcmp(url + 11, s->cfg->model_id))
            return fail(c, 404, "model", "model_not_found", "the model '%.128s' does not exist", url + 11);
        return send_text(c, 200, srv_model_response(s->cfg->model_id, (int64_t)time(NULL)), "application/json");
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

/* The slots' sessions; their workers start later, once the signals are blocked. */
static int slots_create(server *s) {
    const srv_config *cfg = s->cfg;
    s->n_slots = cfg->parallel ? cfg->parallel : 1;
    s->slots = calloc(s->n_slots, sizeof *s->slots);
    if (!s->slots) return -1;
    for (uint32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        sl->srv = s;
        sl->engine = cfg->engines[i];
        if (!(sl->session = gen_session_create(sl->engine, cfg->tok))) return -1;
    }
    return 0;
}

static int slots_start(server *s) {
    for (uint32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (pthread_create(&sl->worker, NULL, slot_main, sl)) return -1;
        sl->started = true;
    }
    return 0;
}

/* Ends the workers (every job is finished: the daemon has stopped) and frees the slots. */
static void slots_free(server *s) {
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (uint32_t i = 0; s->slots && i < s->n_slots; i++) {
        if (s->slots[i].started) pthread_join(s->slots[i].worker, NULL);
        gen_session_free(s->slots[i].session);
    }
    free(s->slots);
}

int srv_serve(const srv_config *cfg) {
    server s = {.cfg = cfg, .end_turn = -1};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    atomic_init(&s.stopping, false);
    atomic_init(&s.next_id, ((uint64_t)time(NULL) << 20));
    int rc = 1;
    struct MHD_Daemon *d = NULL;
    if (slots_create(&s)) {
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
    /* SIGINT and SIGTERM go to sigwait below, in this thread only (the threads started
     * from here on inherit the mask). */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (slots_start(&s)) {
        fprintf(stderr, "kiln: cannot start the slots' threads: %s\n", strerror(errno));
        goto out;
    }
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
    MHD_stop_daemon(d); /* waits for the connections, and so for their jobs */
    rc = 0;
out:
    slots_free(&s);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
    return rc;
}
