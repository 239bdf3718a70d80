/* A streamed request: the worker turns the generation into Server-Sent Events in the
 * job's small locked queue of bytes; the connection's thread reads them out as the
 * response's body. A client that goes away makes the next write fail; libmicrohttpd then
 * frees the response, which cancels the job at its next token. */
#include "base/error.h"
#include "server/http_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

static void push(job *j, char *event) {
    pthread_mutex_lock(&j->mu);
    if (!event || !srv_buf_add(&j->q, event, strlen(event))) j->failed = true;
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

/* A chunk (its text, reasoning or call fields set by the caller) with the
 * log-probabilities of the next n entries (when asked for). */
static void push_chunk(job *j, srv_chunk *c, size_t n) {
    lp_state *L = &j->lps;
    if (L->on) {
        static const srv_token_logprob none;
        c->logprobs = n ? L->lp + L->head : &none; /* none yet: an empty list, not null */
        c->n_logprobs = n;
        c->text_offset = L->base + L->raw;
        for (size_t i = 0; i < n; i++) L->raw += L->lp[L->head + i].tok.len;
        L->head += n;
    }
    push(j, make_chunk(j, c));
}

/* A content or reasoning chunk; the log-probabilities ready so far go with it. */
static int push_part(void *ctx, srv_part part, const char *s, size_t n) {
    job *j = ctx;
    srv_chunk c = chunk_base(j);
    if (part == SRV_REASONING) c.reasoning = s, c.reasoning_len = n;
    else c.text = s, c.text_len = n;
    push_chunk(j, &c, j->lp_ready);
    j->lp_ready = 0;
    return j->failed;
}

/* Content, unless it may be a tool call: then it is held (from the family's tag on, or
 * all of it where a call is the whole reply) until the end decides. */
static int route_content(void *ctx, srv_part part, const char *s, size_t n) {
    job *j = ctx;
    if (part == SRV_REASONING || !j->tools_on) return push_part(j, part, s, n);
    const char *tag = srv_calls_tag(j->srv->cfg->family);
    if (!srv_buf_add(&j->calls, s, n)) return j->failed = true, 1;
    if (j->in_call || !tag) return 0;
    size_t k = strlen(tag), cut = j->calls.n, keep = 0;
    for (size_t i = 0; i + k <= j->calls.n; i++)
        if (!memcmp(j->calls.p + i, tag, k)) {
            cut = i;
            j->in_call = true;
            break;
        }
    if (!j->in_call) /* the longest end that may start the tag */
        for (keep = k - 1 < j->calls.n ? k - 1 : j->calls.n; keep > 0; keep--)
            if (!memcmp(j->calls.p + j->calls.n - keep, tag, keep)) break;
    if (!j->in_call) cut = j->calls.n - keep;
    int rc = cut ? push_part(j, SRV_CONTENT, j->calls.p, cut) : 0;
    memmove(j->calls.p, j->calls.p + cut, j->calls.n - cut);
    j->calls.n -= cut;
    j->calls.p[j->calls.n] = 0;
    return rc;
}

static int emit_stream(void *ctx, const char *text, size_t len) {
    job *j = ctx;
    if (atomic_load(&j->cancel) || atomic_load(&j->srv->stopping)) return 1;
    j->lps.emitted += len;
    lp_state *L = &j->lps;
    j->lp_ready = L->n > L->head ? srv_spans_ready(L->span + L->head, L->n - L->head, L->emitted) : 0;
    if (j->req.endpoint != SRV_CHAT) return push_part(j, SRV_CONTENT, text, len);
    if (j->split_think) return srv_think_feed(&j->think, text, len, false, route_content, j) ? 1 : 0;
    return route_content(j, SRV_CONTENT, text, len);
}

/* The end of a chat's text: what the splitter held, then the held text as tool calls
 * (each its head, then its arguments) or, when it is none, as content. Whether calls
 * went out. */
static bool flush_chat(job *j) {
    if (j->split_think) srv_think_feed(&j->think, "", 0, true, route_content, j);
    if (!j->calls.n) return false;
    srv_calls calls;
    int got = srv_calls_parse(j->srv->cfg->family, j->calls.p, j->calls.n,
                              (uint64_t)j->created ^ atomic_load(&j->srv->next_id), &calls);
    if (got <= 0) {
        push_part(j, SRV_CONTENT, j->calls.p, j->calls.n);
        return false;
    }
    if (calls.content_len) push_part(j, SRV_CONTENT, j->calls.p, calls.content_len);
    for (size_t i = 0; i < calls.n; i++) {
        srv_chunk c = chunk_base(j);
        c.call = &calls.call[i];
        c.call_index = (uint32_t)i;
        c.call_head = true;
        push_chunk(j, &c, 0);
        const char *a = calls.call[i].arguments;
        size_t n = strlen(a), half = n / 2; /* the arguments in two fragments, as a client must join them */
        for (int k = 0; k < 2; k++) {
            c.call_head = false;
            c.call_args = a + (k ? half : 0);
            c.call_args_len = k ? n - half : half;
            if (c.call_args_len) push_chunk(j, &c, 0);
        }
    }
    srv_calls_free(&calls);
    return true;
}

/* A streamed request on the slot: SSE events into the job's queue, [DONE] last. */
void srv_stream_run(slot *sl, job *j) {
    bool chat = j->req.endpoint == SRV_CHAT;
    if (chat) {
        srv_chunk c = chunk_base(j);
        c.role = true;
        push(j, make_chunk(j, &c));
    }
    gen_result res;
    kiln_err err = {0};
    int rc = srv_job_generate(sl, j, emit_stream, &res, &err);
    srv_slot_release(sl);
    if (rc) {
        srv_error e;
        srv_error_set(&e, err.code == KILN_ERR_FULL ? 503 : 500, NULL, NULL, "%s", err.msg);
        push(j, srv_error_chunk(&e));
    } else {
        lp_state *L = &j->lps;
        bool called = chat && flush_chat(j);
        size_t rest = L->n > L->head ? srv_spans_rest(L->span + L->head, L->n - L->head, res.finish == GEN_STOP_STRING,
                                               L->emitted)
                              : 0;
        if (rest) { /* tokens whose text was held to the end */
            srv_chunk c = chunk_base(j);
            c.text = "";
            push_chunk(j, &c, rest);
        }
        srv_chunk c = chunk_base(j);
        c.finish_reason = called ? "tool_calls" : srv_finish_reason(res.finish);
        push(j, make_chunk(j, &c));
        if (j->req.include_usage) {
            srv_usage u = srv_job_usage(&res);
            push(j, srv_usage_chunk(chat, j->id, j->created, j->srv->cfg->model_id, &u));
        }
    }
    free(res.ids);
    pthread_mutex_lock(&j->mu);
    if (!srv_buf_add(&j->q, SRV_SSE_DONE, strlen(SRV_SSE_DONE))) j->failed = true;
    j->done = true; /* the job is not touched after this: its owner may free it */
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
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
    srv_job_wait(j);
    srv_job_free(j);
}

/* A streamed request on slot sl: the response reads what the worker queues. */
enum MHD_Result srv_stream_start(struct MHD_Connection *c, slot *sl, job *j) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, j, stream_free);
    if (!r) {
        srv_slot_release(sl);
        srv_job_free(j);
        return MHD_NO;
    }
    srv_slot_dispatch(sl, j); /* before queueing: a refused response's stream_free waits for the job */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r); /* stream_free runs when the response is done with */
    return ok;
}
