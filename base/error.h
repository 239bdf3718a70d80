/* base/error — the one error every room reports: a code that says what kind of failure
 * it was (what a caller may decide on: the CLI's exit status, the server's HTTP status, a
 * retry) and a message that says what failed, for a person. Nothing compares messages.
 *
 * A function that can fail takes `kiln_err *err` last (NULL: the caller wants no
 * message) and returns -1 or NULL after kiln_fail; a caller adds where it was
 * ("vulkan:0: ...") with kiln_err_prefix before passing the error up. */
#ifndef KILN_BASE_ERROR_H
#define KILN_BASE_ERROR_H

#include <stdbool.h>
#include <stddef.h>

typedef enum kiln_code {
    KILN_OK = 0,
    KILN_ERR_INVALID,     /* bad input: a file, a flag, a request, an argument, a shape */
    KILN_ERR_UNSUPPORTED, /* well formed, but kiln, or this device, does not do it */
    KILN_ERR_UNAVAILABLE, /* a driver, device, file or service that is not there or is busy */
    KILN_ERR_NOMEM,       /* out of host or device memory */
    KILN_ERR_DEVICE,      /* the device or its driver failed */
    KILN_ERR_INTERNAL,    /* kiln broke one of its own rules: a bug */
    KILN_ERR_FULL,        /* a shared resource is taken for now (the KV cache's pages): try again later */
    KILN_CODE_COUNT
} kiln_code;

#define KILN_ERR_MSG 512

typedef struct kiln_err {
    kiln_code code;
    char msg[KILN_ERR_MSG];
} kiln_err;

/* Sets *e (when e is not NULL) to code and the printf-formatted message, replacing what it
 * held; returns -1. */
int kiln_fail(kiln_err *e, kiln_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* kiln_fail with the out-of-memory message ("out of memory", then " " and what, when what
 * is not NULL). */
int kiln_fail_oom(kiln_err *e, const char *what);
/* Prepends the formatted context and ": " to e's message, keeping its code (a message cut
 * at KILN_ERR_MSG keeps its start); returns -1. Nothing when e is NULL. */
int kiln_err_prefix(kiln_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* *dst = *src (code and message), then the formatted context prefixed as kiln_err_prefix
 * does (fmt NULL: none): an inner call's error passed up with where it happened. dst may
 * be NULL; returns -1. */
int kiln_err_wrap(kiln_err *dst, const kiln_err *src, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Clears e to KILN_OK with an empty message. */
void kiln_err_clear(kiln_err *e);
/* "invalid input", "unsupported", "unavailable", "out of memory", "device failure",
 * "internal error" ("ok" for KILN_OK). */
const char *kiln_code_name(kiln_code c);

#endif
