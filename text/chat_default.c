/* A ChatML template's default system message (chat.h: chat_default_system), read from the
 * template's text: the literal or template text of the system turn it writes when a
 * conversation starts without one. */
#include "base/error.h"
#include "text/chat.h"
#include "text/chat_buf.h"

static void put_utf8(cbuf *b, uint32_t cp) {
    char u[4];
    size_t k;
    if (cp < 0x80) {
        u[0] = (char)cp, k = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f)), k = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 0x3f)), k = 3;
        u[2] = (char)(0x80 | (cp & 0x3f));
    } else {
        u[0] = (char)(0xf0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 0x3f)), k = 4;
        u[2] = (char)(0x80 | (cp >> 6 & 0x3f)), u[3] = (char)(0x80 | (cp & 0x3f));
    }
    put(b, u, k);
}

static int hex_value(char h) {
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    if (h >= 'A' && h <= 'F') return h - 'A' + 10;
    return -1;
}

/* A Jinja string literal's escapes, as Python's unicode-escape decodes them; an escape it
 * does not know keeps its backslash. False where Jinja would reject the literal. */
static bool unescape_literal(span s, cbuf *out) {
    static const char simple[] = "n\nt\tr\r\\\\''\"\"a\ab\bf\fv\v";
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] != '\\' || i + 1 == s.n) {
            put(out, s.p + i, 1);
            continue;
        }
        char e = s.p[++i];
        const char *hit = NULL;
        for (const char *q = simple; *q && !hit; q += 2)
            if (*q == e) hit = q + 1;
        if (hit) {
            put(out, hit, 1);
        } else if (e == '\n') { /* a line continuation */
        } else if (e >= '0' && e <= '7') { /* up to three octal digits */
            uint32_t cp = (uint32_t)(e - '0');
            for (int k = 0; k < 2 && i + 1 < s.n && s.p[i + 1] >= '0' && s.p[i + 1] <= '7'; k++)
                cp = cp << 3 | (uint32_t)(s.p[++i] - '0');
            put_utf8(out, cp);
        } else if (e == 'x' || e == 'u' || e == 'U') {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < digits; k++) {
                int v = i + 1 < s.n ? hex_value(s.p[++i]) : -1;
                if (v < 0) return false;
                cp = cp << 4 | (uint32_t)v;
            }
            if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
            put_utf8(out, cp);
        } else {
            put(out, s.p + i - 1, 2);
        }
    }
    return true;
}

/* Where a default system text ends early: at its literal's closing quote, or (as template
 * text) at a Jinja tag. */
static bool ends_early(span text, char quote) {
    for (size_t i = 0; i < text.n; i++) {
        if (quote && text.p[i] == quote && (i == 0 || text.p[i - 1] != '\\')) return true;
        if (!quote && text.p[i] == '{' && i + 1 < text.n && strchr("{%#", text.p[i + 1])) return true;
    }
    return false;
}

/* Templates with a default write the whole system turn as one literal,
 * '<|im_start|>system\nYou are ...<|im_end|>\n' (in a Jinja string, where \n may be an
 * escape or a real newline) or as template text between tags. A system turn built from
 * the messages continues with a closing quote or with {{ instead. */
int chat_default_system(const char *t, char **out, kiln_err *err) {
    if (out) *out = NULL;
    if (!t || !out) return 0;
    static const char head[] = "<|im_start|>system";
    for (const char *at = strstr(t, head); at; at = strstr(at + 1, head)) {
        const char *p = at + sizeof head - 1;
        char quote = at > t && (at[-1] == '\'' || at[-1] == '"') ? at[-1] : 0;
        if (quote && p[0] == '\\' && p[1] == 'n') p += 2;
        else if (*p == '\n') p++;
        else continue;
        const char *end = strstr(p, "<|im_end|>");
        if (!end || end == p) continue;
        span text = {p, (size_t)(end - p)};
        if (ends_early(text, quote)) continue;
        cbuf b = {0};
        if (quote) {
            if (!unescape_literal(text, &b)) {
                free(b.p);
                continue;
            }
        } else {
            put_span(&b, text);
        }
        if (b.oom) {
            free(b.p);
            kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
            return -1;
        }
        if (!b.p) continue; /* empty after unescaping */
        *out = b.p;
        return 0;
    }
    return 0;
}
