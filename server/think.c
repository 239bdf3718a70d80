/* The think-block splitter (server/tools.h). */
#include "server/tools.h"

#include <stdlib.h>
#include <string.h>

enum { T_START, T_THINK, T_AFTER, T_CONTENT };

static const char open_tag[] = "<think>", close_tag[] = "</think>";

void srv_think_init(srv_think *t, bool opened) {
    memset(t, 0, sizeof *t);
    t->state = opened ? T_THINK : T_START;
}

bool srv_think_opened(const char *prompt) {
    size_t n = strlen(prompt);
    while (n && (prompt[n - 1] == '\n' || prompt[n - 1] == ' ')) n--;
    return n >= 7 && !memcmp(prompt + n - 7, open_tag, 7);
}

static bool space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* The length of the longest end of s[n] that is a proper start of tag. */
static size_t partial(const char *s, size_t n, const char *tag) {
    size_t k = strlen(tag) - 1;
    for (k = k < n ? k : n; k > 0; k--)
        if (!memcmp(s + n - k, tag, k)) return k;
    return 0;
}

int srv_think_feed(srv_think *t, const char *s, size_t n, bool final, srv_think_out out, void *ctx) {
    size_t len = t->n_hold + n;
    char *buf = malloc(len + 1);
    if (!buf) return -1;
    memcpy(buf, t->hold, t->n_hold);
    memcpy(buf + t->n_hold, s, n);
    t->n_hold = 0;
    size_t i = 0;
    int rc = 0;
    while (i < len && !rc) {
        const char *p = buf + i;
        size_t left = len - i;
        if (t->state == T_START) {
            size_t w = 0;
            while (w < left && space(p[w])) w++;
            size_t rest = left - w, k = rest < 7 ? rest : 7;
            if (rest >= 7 && !memcmp(p + w, open_tag, 7)) {
                t->state = T_THINK;
                i += w + 7;
            } else if (!final && !memcmp(p + w, open_tag, k) && left < sizeof t->hold) {
                memcpy(t->hold, p, left), t->n_hold = left; /* maybe "<think>" still */
                i = len;
            } else {
                t->state = T_CONTENT;
            }
        } else if (t->state == T_THINK) {
            const char *end = NULL;
            for (size_t k = 0; k + 8 <= left && !end; k++)
                if (!memcmp(p + k, close_tag, 8)) end = p + k;
            if (end) {
                if (end > p) rc = out(ctx, SRV_REASONING, p, (size_t)(end - p));
                t->state = T_AFTER;
                i += (size_t)(end - p) + 8;
            } else {
                size_t keep = final ? 0 : partial(p, left, close_tag);
                if (left > keep) rc = out(ctx, SRV_REASONING, p, left - keep);
                memcpy(t->hold, p + left - keep, keep), t->n_hold = keep;
                i = len;
            }
        } else if (t->state == T_AFTER) {
            while (i < len && space(buf[i])) i++;
            if (i < len) t->state = T_CONTENT;
        } else {
            rc = out(ctx, SRV_CONTENT, p, left);
            i = len;
        }
    }
    free(buf);
    return rc;
}
