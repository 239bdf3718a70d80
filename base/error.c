#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int kiln_fail(kiln_err *e, kiln_code code, const char *fmt, ...) {
    if (!e) return -1;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int kiln_fail_oom(kiln_err *e, const char *what) {
    return what ? kiln_fail(e, KILN_ERR_NOMEM, "out of memory %s", what)
                : kiln_fail(e, KILN_ERR_NOMEM, "out of memory");
}

int kiln_err_prefix(kiln_err *e, const char *fmt, ...) {
    if (!e) return -1;
    char head[KILN_ERR_MSG];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    /* head + ": " + the old message, cut to fit (the context comes first) */
    size_t nh = strlen(head), nb = strnlen(e->msg, sizeof e->msg - 1), cap = sizeof e->msg - 1;
    if (nh > cap) nh = cap;
    size_t sep = nh + 2 <= cap ? 2 : cap - nh, keep = nh + sep + nb <= cap ? nb : cap - nh - sep;
    memmove(e->msg + nh + sep, e->msg, keep);
    memcpy(e->msg, head, nh);
    memcpy(e->msg + nh, ": ", sep);
    e->msg[nh + sep + keep] = '\0';
    return -1;
}

int kiln_err_wrap(kiln_err *dst, const kiln_err *src, const char *fmt, ...) {
    if (!dst) return -1;
    if (dst != src) *dst = *src;
    if (!fmt) return -1;
    char head[KILN_ERR_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    return kiln_err_prefix(dst, "%s", head);
}

void kiln_err_clear(kiln_err *e) {
    if (!e) return;
    e->code = KILN_OK;
    e->msg[0] = '\0';
}

const char *kiln_code_name(kiln_code c) {
    static const char *const names[KILN_CODE_COUNT] = {"ok", "invalid input", "unsupported", "unavailable",
                                                       "out of memory", "device failure", "internal error",
                                                       "full for now"};
    return (unsigned)c < KILN_CODE_COUNT ? names[c] : "unknown error";
}
