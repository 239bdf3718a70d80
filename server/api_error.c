#include "server/api.h"
#include "server/api_json.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void srv_error_set(srv_error *e, int status, const char *param, const char *code, const char *fmt, ...) {
    e->status = status;
    e->type = status >= 500 ? "server_error" : "invalid_request_error";
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

/* Messages may quote request bytes cut anywhere: srv_json_text keeps the reply valid. */
json_t *srv_json_error(const srv_error *e) {
    return json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", srv_json_text(e->message, strlen(e->message)),
                     "type", e->type ? e->type : "server_error", "param",
                     e->param[0] ? srv_json_text(e->param, strlen(e->param)) : json_null(), "code",
                     e->code ? json_string(e->code) : json_null());
}

char *srv_error_json(const srv_error *e) { return srv_json_dump(srv_json_error(e)); }
