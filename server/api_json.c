#include "server/api_json.h"

#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at p (RFC 3629: no overlongs, no surrogates,
 * nothing above U+10FFFF), or 0. */
static size_t utf8_seq(const unsigned char *p, size_t n) {
    unsigned c = p[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) {
        len = 2;
    } else if (c < 0xF0) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c < 0xF5) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len || p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    return len;
}

json_t *srv_json_text(const char *s, size_t n) {
    if (!s) return json_string("");
    json_t *j = json_stringn(s, n);
    if (j) return j;
    unsigned char *buf = malloc(3 * n + 1), *o = buf;
    if (!buf) return NULL;
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(p + i, n - i);
        if (k) {
            memcpy(o, p + i, k), o += k, i += k;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3), o += 3, i++;
        }
    }
    j = json_stringn((const char *)buf, (size_t)(o - buf));
    free(buf);
    return j;
}

char *srv_json_dump(json_t *j) {
    if (!j) return NULL;
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return text;
}
