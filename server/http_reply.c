/* libmicrohttpd replies: JSON or text with an out-of-memory fallback, and OpenAI's error
 * objects. */
#include "server/http_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* text (malloc'ed; NULL: the out-of-memory error instead, without hdr) with its content
 * type and, where hdr is not NULL, the header hdr: value. */
static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, char *text, const char *type, const char *hdr,
                             const char *value) {
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                                  "\"code\":null}}";
        text = strdup(oom);
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        hdr = NULL;
        if (!text) return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE) MHD_add_response_header(r, "Retry-After", "1");
    if (hdr) MHD_add_response_header(r, hdr, value);
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

enum MHD_Result srv_send_text(struct MHD_Connection *c, unsigned status, char *text, const char *type) {
    return reply(c, status, text, type, NULL, NULL);
}

enum MHD_Result srv_send_error(struct MHD_Connection *c, const srv_error *e, const char *hdr, const char *value) {
    return reply(c, (unsigned)e->status, srv_error_json(e), "application/json", hdr, value);
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
