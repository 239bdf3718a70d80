/* libmicrohttpd replies: JSON or text with an out-of-memory fallback, and OpenAI's error
 * objects. */
#include "server/http_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum MHD_Result srv_send_text(struct MHD_Connection *c, unsigned status, char *text, const char *type) {
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

enum MHD_Result srv_send_error(struct MHD_Connection *c, const srv_error *e, const char *hdr, const char *value) {
    char *j = srv_error_json(e);
    if (!hdr) return srv_send_text(c, (unsigned)e->status, j, "application/json");
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

enum MHD_Result srv_fail(struct MHD_Connection *c, int status, const char *param, const char *code, const char *fmt,
                         ...) {
    srv_error e;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_error_set(&e, status, param, code, "%s", msg);
    return srv_send_error(c, &e, NULL, NULL);
}
