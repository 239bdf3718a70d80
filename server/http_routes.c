/* One connection's request (libmicrohttpd, the connection's own thread): the body up to
 * the limit, the route and its method, the API key, then the endpoint: health, metrics,
 * models, or a completion that waits for a slot and is answered whole or streamed. */
#include "server/http_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

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

static enum MHD_Result completion(server *s, struct MHD_Connection *c, srv_endpoint ep, const conn *cn) {
    pthread_mutex_lock(&s->mu);
    s->requests++;
    pthread_mutex_unlock(&s->mu);
    srv_error e;
    job *j = srv_job_create(s, ep, cn->body.p ? cn->body.p : "", cn->body.n, &e);
    if (!j) return srv_send_error(c, &e, NULL, NULL);
    slot *sl = NULL;
    slot_status st = srv_slot_acquire(s, j->ids, j->n_ids, &sl);
    if (st != SLOT_OK) {
        srv_job_free(j);
        return srv_fail(c, 503, NULL, NULL, st == SLOT_FULL ? "the server is busy: try again shortly"
                                                            : "the server is shutting down");
    }
    if (j->req.stream) return srv_stream_start(c, sl, j);
    srv_slot_dispatch(sl, j);
    srv_job_wait(j);
    /* a generation the server cut (a plain request's text is cut only by a shutdown, or by
     * memory for it running out) is no answer: 503 (a balancer sends it to another replica)
     * or 500, never a 200 whose text ends early */
    if (!j->rc && j->res.finish == GEN_CALLER) {
        j->rc = -1;
        if (atomic_load(&s->stopping)) kiln_fail(&j->err, KILN_ERR_FULL, "the server is shutting down");
        else kiln_fail(&j->err, KILN_ERR_NOMEM, "out of memory for the completion's text");
    }
    /* a KV pool taken by the other requests: 503 with Retry-After, as a full queue */
    int status = j->err.code == KILN_ERR_FULL ? 503 : 500;
    enum MHD_Result ok = j->rc ? srv_fail(c, status, NULL, NULL, "%s", j->err.msg)
                               : srv_send_text(c, 200, srv_job_answer(j), "application/json");
    srv_job_free(j);
    return ok;
}

enum MHD_Result srv_handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
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
            } else if (!srv_buf_add(&cn->body, upload, *upload_size)) {
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
    if (which < 0) return srv_fail(c, 404, NULL, "not_found", "no such endpoint: %s %.128s", method, url);
    bool want_post = which < 2; /* the rest are GETs */
    if (want_post ? !post : !get) {
        srv_error e;
        srv_error_set(&e, 405, NULL, "method_not_allowed", "%s does not take %s", url, method);
        return srv_send_error(c, &e, MHD_HTTP_HEADER_ALLOW, want_post ? "POST" : "GET");
    }
    if (which == 3) return srv_send_text(c, 200, strdup("{\"status\":\"ok\"}"), "application/json");
    if (which == 4) return srv_send_text(c, 200, srv_metrics_text(s), "text/plain; version=0.0.4");
    if (!authorized(s, c)) {
        srv_error e;
        srv_error_set(&e, 401, NULL, "invalid_api_key", "a valid API key is required (Authorization: Bearer KEY)");
        return srv_send_error(c, &e, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    }
    if (which == 2) {
        const char *ids[1] = {s->cfg->model_id};
        return srv_send_text(c, 200, srv_models_response(ids, 1, (int64_t)time(NULL)), "application/json");
    }
    if (which == 5) { /* GET /v1/models/ID (the client's models.retrieve) */
        if (strcmp(url + 11, s->cfg->model_id))
            return srv_fail(c, 404, "model", "model_not_found", "the model '%.128s' does not exist", url + 11);
        return srv_send_text(c, 200, srv_model_response(s->cfg->model_id, (int64_t)time(NULL)), "application/json");
    }
    if (cn->too_large)
        return srv_fail(c, 413, NULL, "request_too_large", "the request body is over %u bytes", SRV_BODY_LIMIT);
    return completion(s, c, which == 0 ? SRV_CHAT : SRV_COMPLETION, cn);
}

void srv_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    conn *cn = *con_cls;
    if (cn) free(cn->body.p);
    free(cn);
    *con_cls = NULL;
}
