/* text/ — the growing output buffer and the string pieces the chat renderers and the
 * default-system reader share (not part of chat.h). */
#ifndef KILN_TEXT_CHAT_BUF_H
#define KILN_TEXT_CHAT_BUF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A growing NUL-terminated buffer; oom once an allocation failed (every later put is ignored). */
typedef struct cbuf {
    char *p;
    size_t n, cap;
    bool oom;
} cbuf;

static inline void put(cbuf *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    if (n > SIZE_MAX / 2 - b->n) { /* keeps the doubling below from overflowing */
        b->oom = true;
        return;
    }
    size_t need = b->n + n + 1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static inline void puts_(cbuf *b, const char *s) { put(b, s, strlen(s)); }

/* A piece of a string, not NUL-terminated. */
typedef struct span {
    const char *p;
    size_t n;
} span;

static inline span whole(const char *s) { return (span){s, strlen(s)}; }
static inline void put_span(cbuf *b, span s) { put(b, s.p, s.n); }

#endif
