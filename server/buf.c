/* The server's growable byte strings: request bodies, a job's answer and its queue of
 * Server-Sent Events. */
#include "server/http_internal.h"

#include <stdlib.h>
#include <string.h>

bool srv_buf_add(buf *b, const char *p, size_t n) {
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
