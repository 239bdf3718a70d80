/* GBNF text to byte-level rules. Character classes and '.' are sets of code points; they
 * become rules over UTF-8 byte sequences (a class of ASCII only stays one byte class),
 * so the matcher sees bytes, as the vocabulary's prefix tree does. Repetitions become
 * right-recursive helper rules (the matcher calls them in tail position, so a long
 * repetition does not deepen its stacks). Left recursion is refused: a matcher would
 * expand it forever. */
#include "generate/grammar_internal.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

#define MAX_NEST 64       /* parentheses */
#define MAX_REPEAT 1000   /* {m,n} bounds */
#define MAX_SYMS (1u << 24)

typedef struct seq {
    int32_t *s;
    uint32_t n, cap;
} seq;

typedef struct brule {
    char *name;
    seq *alts;
    uint32_t n_alts, cap;
    bool defined;
    int line; /* where first referenced or defined */
} brule;

typedef struct pb {
    brule *r;
    uint32_t n, cap;
    uint8_t (*cls)[32];
    uint32_t n_cls, cap_cls;
    uint64_t total; /* symbols so far, against MAX_SYMS */
    const char *p;
    int line, nest;
    kiln_err *err;
    bool failed;
} pb;

static int fail(pb *b, const char *fmt, const char *what) {
    if (!b->failed) kiln_fail(b->err, KILN_ERR_INVALID, fmt, b->line, what);
    b->failed = true;
    return -1;
}

static int oom(pb *b) {
    if (!b->failed) kiln_fail(b->err, KILN_ERR_NOMEM, "grammar: out of memory");
    b->failed = true;
    return -1;
}

static bool grow(void **p, uint32_t *cap, uint32_t need, size_t elem) {
    if (need <= *cap) return true;
    uint32_t c = *cap ? *cap : 8;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static int seq_add(pb *b, seq *s, int32_t v) {
    if (++b->total > MAX_SYMS) return fail(b, "grammar: line %d: the grammar is too large%s", "");
    if (!grow((void **)&s->s, &s->cap, s->n + 1, sizeof *s->s)) return oom(b);
    s->s[s->n++] = v;
    return 0;
}

/* A new rule (name NULL: anonymous); its id, or -1. */
static int32_t rule_new(pb *b, const char *name, size_t len) {
    if (!grow((void **)&b->r, &b->cap, b->n + 1, sizeof *b->r)) return oom(b);
    brule *r = &b->r[b->n];
    memset(r, 0, sizeof *r);
    r->line = b->line;
    if (name) {
        if (!(r->name = malloc(len + 1))) return oom(b);
        memcpy(r->name, name, len);
        r->name[len] = 0;
    }
    return (int32_t)b->n++;
}

static int32_t rule_named(pb *b, const char *name, size_t len) {
    for (uint32_t i = 0; i < b->n; i++)
        if (b->r[i].name && strlen(b->r[i].name) == len && !memcmp(b->r[i].name, name, len)) return (int32_t)i;
    return rule_new(b, name, len);
}

static seq *alt_new(pb *b, int32_t rule) {
    brule *r = &b->r[rule];
    if (!grow((void **)&r->alts, &r->cap, r->n_alts + 1, sizeof *r->alts)) return oom(b), NULL;
    seq *s = &r->alts[r->n_alts++];
    memset(s, 0, sizeof *s);
    return s;
}

/* The symbol of a byte class (classes are shared). */
static int32_t class_sym(pb *b, const uint8_t bits[32]) {
    for (uint32_t i = 0; i < b->n_cls; i++)
        if (!memcmp(b->cls[i], bits, 32)) return -(int32_t)i - 1;
    if (!grow((void **)&b->cls, &b->cap_cls, b->n_cls + 1, sizeof *b->cls)) return oom(b), 0;
    memcpy(b->cls[b->n_cls], bits, 32);
    return -(int32_t)b->n_cls++ - 1;
}

static int32_t byte_range_sym(pb *b, unsigned lo, unsigned hi) {
    uint8_t bits[32] = {0};
    for (unsigned c = lo; c <= hi; c++) bits[c >> 3] |= (uint8_t)(1u << (c & 7));
    return class_sym(b, bits);
}

/* ---- code points to UTF-8 byte sequences ---------------------------------------------- */

typedef struct cp_range {
    uint32_t lo, hi;
} cp_range;

static int utf8_len(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

static void utf8_put(uint32_t c, uint8_t *o) {
    int n = utf8_len(c);
    if (n == 1) o[0] = (uint8_t)c;
    else if (n == 2) o[0] = (uint8_t)(0xc0 | c >> 6), o[1] = (uint8_t)(0x80 | (c & 0x3f));
    else if (n == 3)
        o[0] = (uint8_t)(0xe0 | c >> 12), o[1] = (uint8_t)(0x80 | (c >> 6 & 0x3f)), o[2] = (uint8_t)(0x80 | (c & 0x3f));
    else
        o[0] = (uint8_t)(0xf0 | c >> 18), o[1] = (uint8_t)(0x80 | (c >> 12 & 0x3f)),
        o[2] = (uint8_t)(0x80 | (c >> 6 & 0x3f)), o[3] = (uint8_t)(0x80 | (c & 0x3f));
}

/* Adds to rule the alternatives spelling [lo, hi] (one encoded length, no surrogates):
 * split until every byte position is a plain range (the method of regex engines'
 * UTF-8 sequence compilers). */
static int utf8_alts(pb *b, int32_t rule, uint32_t lo, uint32_t hi) {
    int n = utf8_len(lo);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) return utf8_alts(b, rule, lo, lo | m) || utf8_alts(b, rule, (lo | m) + 1, hi) ? -1 : 0;
            if ((hi & m) != m) return utf8_alts(b, rule, lo, (hi & ~m) - 1) || utf8_alts(b, rule, hi & ~m, hi) ? -1 : 0;
        }
    }
    uint8_t a[4], z[4];
    utf8_put(lo, a);
    utf8_put(hi, z);
    seq *s = alt_new(b, rule);
    if (!s) return -1;
    for (int i = 0; i < n; i++)
        if (seq_add(b, s, byte_range_sym(b, a[i], z[i]))) return -1;
    return seq_add(b, s, GRAM_END);
}

/* A set of code point ranges as one symbol: a byte class when all are ASCII, else a rule
 * with one alternative for the ASCII part and one per UTF-8 sequence. */
static int32_t cp_set_sym(pb *b, const cp_range *r, uint32_t n) {
    uint8_t ascii[32] = {0};
    bool any_ascii = false, wide = false;
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t c = r[i].lo; c <= r[i].hi && c < 0x80; c++) ascii[c >> 3] |= (uint8_t)(1u << (c & 7)), any_ascii = true;
        if (r[i].hi >= 0x80) wide = true;
    }
    if (!wide) {
        if (any_ascii) return class_sym(b, ascii);
        fail(b, "grammar: line %d: an empty character class%s", "");
        return 0;
    }
    int32_t rule = rule_new(b, NULL, 0);
    if (rule < 0) return 0;
    if (any_ascii) {
        int32_t c = class_sym(b, ascii);
        seq *s = alt_new(b, rule);
        if (!s || seq_add(b, s, c) || seq_add(b, s, GRAM_END)) return 0;
    }
    static const uint32_t bounds[][2] = {{0x80, 0x7ff}, {0x800, 0xd7ff}, {0xe000, 0xffff}, {0x10000, 0x10ffff}};
    for (uint32_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) {
            uint32_t lo = r[i].lo > bounds[k][0] ? r[i].lo : bounds[k][0];
            uint32_t hi = r[i].hi < bounds[k][1] ? r[i].hi : bounds[k][1];
            if (lo <= hi && utf8_alts(b, rule, lo, hi)) return 0;
        }
    return rule;
}

/* ---- lexing ------------------------------------------------------------------------------ */

static void skip_ws(pb *b, bool newlines) {
    for (;;) {
        char c = *b->p;
        if (c == ' ' || c == '\t' || c == '\r') b->p++;
        else if (c == '#') while (*b->p && *b->p != '\n') b->p++;
        else if (c == '\n' && newlines) b->p++, b->line++;
        else return;
    }
}

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Whether a new rule ("name ::=") starts at p, past blank lines and comments. */
static bool rule_starts(const char *p) {
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
        if (*p != '#') break;
        while (*p && *p != '\n') p++;
    }
    if (!name_char(*p)) return false;
    while (name_char(*p)) p++;
    while (*p == ' ' || *p == '\t') p++;
    return !strncmp(p, "::=", 3);
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One character of a literal or class: an escape or a UTF-8 character. */
static int read_char(pb *b, uint32_t *out) {
    const unsigned char *u = (const unsigned char *)b->p;
    if (*u == '\\') {
        char e = (char)u[1];
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                int h = hexval((char)u[2 + i]);
                if (h < 0) return fail(b, "grammar: line %d: a bad \\%s escape", e == 'x' ? "x" : e == 'u' ? "u" : "U");
                v = v << 4 | (uint32_t)h;
            }
            if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
                return fail(b, "grammar: line %d: an escape that is not a Unicode scalar value%s", "");
            b->p += 2 + digits;
            *out = v;
            return 0;
        }
        static const char from[] = "ntr0", to[] = "\n\t\r\0";
        const char *k = e ? strchr(from, e) : NULL;
        if (!e || e == '\n') return fail(b, "grammar: line %d: a dangling backslash%s", "");
        *out = k ? (uint32_t)(unsigned char)to[k - from] : (uint32_t)(unsigned char)e;
        b->p += 2;
        return 0;
    }
    if (*u < 0x80) {
        if (!*u || *u == '\n') return fail(b, "grammar: line %d: an unterminated literal or class%s", "");
        *out = *u;
        b->p++;
        return 0;
    }
    int n = *u >= 0xf0 ? 4 : *u >= 0xe0 ? 3 : *u >= 0xc2 ? 2 : 0;
    if (!n || *u > 0xf4) return fail(b, "grammar: line %d: invalid UTF-8%s", "");
    uint32_t c = *u & (0x7f >> n);
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xc0) != 0x80) return fail(b, "grammar: line %d: invalid UTF-8%s", "");
        c = c << 6 | (u[i] & 0x3f);
    }
    if (utf8_len(c) != n || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return fail(b, "grammar: line %d: invalid UTF-8%s", "");
    b->p += n;
    *out = c;
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* [...] or [^...] after the '['; the class's symbol. */
static int32_t char_class(pb *b) {
    bool neg = *b->p == '^';
    if (neg) b->p++;
    cp_range *r = NULL;
    uint32_t n = 0, cap = 0;
    while (*b->p != ']') {
        uint32_t lo, hi;
        if (read_char(b, &lo)) goto bad;
        hi = lo;
        if (b->p[0] == '-' && b->p[1] != ']') {
            b->p++;
            if (read_char(b, &hi)) goto bad;
            if (hi < lo) {
                fail(b, "grammar: line %d: a character range runs backwards%s", "");
                goto bad;
            }
        }
        if (!grow((void **)&r, &cap, n + 2, sizeof *r)) {
            oom(b);
            goto bad;
        }
        r[n++] = (cp_range){lo, hi};
    }
    b->p++;
    qsort(r, n, sizeof *r, cmp_range);
    if (neg) { /* the complement over every scalar value; surrogates are left to cp_set_sym */
        cp_range *c = malloc((n + 1) * sizeof *c);
        if (!c) {
            oom(b);
            goto bad;
        }
        uint32_t m = 0, next = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (r[i].lo > next) c[m++] = (cp_range){next, r[i].lo - 1};
            if (r[i].hi + 1 > next) next = r[i].hi + 1;
        }
        if (next <= 0x10ffff) c[m++] = (cp_range){next, 0x10ffff};
        free(r);
        r = c;
        n = m;
    }
    int32_t s = cp_set_sym(b, r, n);
    free(r);
    return s;
bad:
    free(r);
    return 0;
}

/* ---- rules --------------------------------------------------------------------------------- */

static int alternates(pb *b, int32_t rule);

/* symbols s[from..n) as one symbol (a new rule when there are several). */
static int32_t as_one(pb *b, seq *s, uint32_t from) {
    if (s->n - from == 1) return s->s[--s->n];
    int32_t r = rule_new(b, NULL, 0);
    if (r < 0) return 0;
    seq *a = alt_new(b, r);
    if (!a) return 0;
    for (uint32_t i = from; i < s->n; i++)
        if (seq_add(b, a, s->s[i])) return 0;
    if (seq_add(b, a, GRAM_END)) return 0;
    s->n = from;
    return r;
}

/* x{min,max} (max < 0: unbounded) in place of s[from..n). */
static int repeat(pb *b, seq *s, uint32_t from, long min, long max) {
    if (s->n == from) return fail(b, "grammar: line %d: a repetition of nothing%s", "");
    int32_t x = as_one(b, s, from);
    if (b->failed) return -1;
    for (long i = 0; i < min; i++)
        if (seq_add(b, s, x)) return -1;
    if (max == min) return 0;
    /* rest ::= x rest | (unbounded), or opt_k ::= x opt_{k-1} | nested k = max - min times */
    int32_t tail = -1;
    long k = max < 0 ? 1 : max - min;
    for (long i = 0; i < k; i++) {
        int32_t r = rule_new(b, NULL, 0);
        if (r < 0) return -1;
        seq *a = alt_new(b, r);
        if (!a || seq_add(b, a, x)) return -1;
        if (max < 0 ? seq_add(b, a, r) : tail >= 0 ? seq_add(b, a, tail) : 0) return -1;
        if (seq_add(b, a, GRAM_END)) return -1;
        seq *empty = alt_new(b, r);
        if (!empty || seq_add(b, empty, GRAM_END)) return -1;
        tail = r;
    }
    return seq_add(b, s, tail);
}

static long number(pb *b) {
    if (*b->p < '0' || *b->p > '9') return -1;
    long v = 0;
    while (*b->p >= '0' && *b->p <= '9') {
        v = v * 10 + (*b->p++ - '0');
        if (v > MAX_REPEAT) return -2;
    }
    return v;
}

static int postfix(pb *b, seq *s, uint32_t from) {
    char c = *b->p;
    if (c == '*' || c == '+' || c == '?') {
        b->p++;
        return repeat(b, s, from, c == '+', c == '?' ? 1 : -1);
    }
    if (c != '{') return 0;
    b->p++;
    skip_ws(b, false);
    long min = number(b), max;
    skip_ws(b, false);
    if (min == -2) return fail(b, "grammar: line %d: a repetition bound over %s", "1000");
    if (min < 0) return fail(b, "grammar: line %d: expected a number after '{'%s", "");
    if (*b->p == ',') {
        b->p++;
        skip_ws(b, false);
        max = *b->p == '}' ? -1 : number(b);
        if (max == -2) return fail(b, "grammar: line %d: a repetition bound over %s", "1000");
        if (max != -1 && max < min) return fail(b, "grammar: line %d: {m,n} with n < m%s", "");
        if (max < 0 && *b->p != '}') return fail(b, "grammar: line %d: expected a number or '}'%s", "");
    } else {
        max = min;
    }
    skip_ws(b, false);
    if (*b->p != '}') return fail(b, "grammar: line %d: expected '}'%s", "");
    b->p++;
    return repeat(b, s, from, min, max);
}

/* One alternative's symbols into s, up to '|', ')' or the rule's end. */
static int sequence(pb *b, seq *s) {
    for (;;) {
        skip_ws(b, b->nest > 0 || !rule_starts(b->p));
        char c = *b->p;
        if (!c || c == '|' || c == ')' || (c == '\n')) return seq_add(b, s, GRAM_END);
        uint32_t from = s->n;
        if (c == '"') {
            b->p++;
            while (*b->p != '"') {
                uint32_t cp;
                if (read_char(b, &cp)) return -1;
                uint8_t u[4];
                utf8_put(cp, u);
                for (int i = 0; i < utf8_len(cp); i++)
                    if (seq_add(b, s, byte_range_sym(b, u[i], u[i]))) return -1;
            }
            b->p++;
        } else if (c == '[') {
            b->p++;
            int32_t x = char_class(b);
            if (b->failed || seq_add(b, s, x)) return -1;
        } else if (c == '.') {
            b->p++;
            cp_range any = {0, 0x10ffff};
            int32_t x = cp_set_sym(b, &any, 1);
            if (b->failed || seq_add(b, s, x)) return -1;
        } else if (c == '(') {
            b->p++;
            if (++b->nest > MAX_NEST) return fail(b, "grammar: line %d: parentheses nested deeper than %s", "64");
            int32_t r = rule_new(b, NULL, 0);
            if (r < 0 || alternates(b, r)) return -1;
            if (*b->p != ')') return fail(b, "grammar: line %d: expected ')'%s", "");
            b->p++;
            b->nest--;
            if (seq_add(b, s, r)) return -1;
        } else if (name_char(c)) {
            const char *n0 = b->p;
            while (name_char(*b->p)) b->p++;
            int32_t r = rule_named(b, n0, (size_t)(b->p - n0));
            if (r < 0 || seq_add(b, s, r)) return -1;
        } else {
            char what[8] = {c, 0};
            return fail(b, "grammar: line %d: unexpected '%s'", what);
        }
        if (postfix(b, s, from)) return -1;
    }
}

static int alternates(pb *b, int32_t rule) {
    for (;;) {
        seq *s = alt_new(b, rule);
        if (!s || sequence(b, s)) return -1;
        if (*b->p != '|') return 0;
        b->p++;
    }
}

static int definition(pb *b) {
    const char *n0 = b->p;
    while (name_char(*b->p)) b->p++;
    if (b->p == n0) return fail(b, "grammar: line %d: expected a rule name%s", "");
    int32_t r = rule_named(b, n0, (size_t)(b->p - n0));
    if (r < 0) return -1;
    if (b->r[r].defined) return fail(b, "grammar: line %d: rule '%s' is defined twice", b->r[r].name);
    b->r[r].defined = true;
    b->r[r].line = b->line;
    skip_ws(b, false);
    if (strncmp(b->p, "::=", 3)) return fail(b, "grammar: line %d: expected '::=' after '%s'", b->r[r].name);
    b->p += 3;
    if (alternates(b, r)) return -1;
    if (*b->p == ')') return fail(b, "grammar: line %d: an unmatched ')'%s", "");
    return 0;
}

/* ---- checks and flattening ------------------------------------------------------------ */

/* Left recursion: a rule reachable from itself through leftmost symbols (past nullable
 * rules). */
static int check_left_recursion(pb *b) {
    bool *nullable = calloc(b->n, 1);
    uint8_t *mark = calloc(b->n, 1);
    uint32_t *stack = malloc(2 * (size_t)b->n * sizeof *stack + 1);
    int rc = 0;
    if (!nullable || !mark || !stack) {
        rc = oom(b);
        goto out;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < b->n; r++)
            for (uint32_t a = 0; !nullable[r] && a < b->r[r].n_alts; a++) {
                const seq *s = &b->r[r].alts[a];
                uint32_t i = 0;
                while (s->s[i] != GRAM_END && s->s[i] >= 0 && nullable[s->s[i]]) i++;
                if (s->s[i] == GRAM_END) nullable[r] = changed = true;
            }
    }
    /* depth-first over the leftmost-call graph; mark 1 = on the path, 2 = done */
    for (uint32_t start = 0; start < b->n && !rc; start++) {
        if (mark[start]) continue;
        uint32_t top = 0;
        stack[top++] = start, stack[top++] = 0;
        mark[start] = 1;
        while (top && !rc) {
            uint32_t r = stack[top - 2], k = stack[top - 1]++;
            /* the k-th leftmost callee of r, counting over alternatives */
            int32_t callee = -1;
            for (uint32_t a = 0, seen = 0; a < b->r[r].n_alts && callee < 0; a++) {
                const seq *s = &b->r[r].alts[a];
                for (uint32_t i = 0; s->s[i] != GRAM_END && s->s[i] >= 0; i++) {
                    if (seen++ == k) {
                        callee = s->s[i];
                        break;
                    }
                    if (!nullable[s->s[i]]) break;
                }
            }
            if (callee < 0) {
                mark[r] = 2;
                top -= 2;
            } else if (mark[callee] == 1) {
                rc = fail(b, "grammar: line %d: left recursion through rule '%s'",
                          b->r[callee].name ? b->r[callee].name : b->r[r].name ? b->r[r].name : "(a group)");
            } else if (!mark[callee]) {
                mark[callee] = 1;
                stack[top++] = (uint32_t)callee, stack[top++] = 0;
            }
        }
    }
out:
    free(nullable);
    free(mark);
    free(stack);
    return rc;
}

static gram *flatten(pb *b, int32_t root) {
    gram *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    uint32_t n_alt = 0, n_sym = 0;
    for (uint32_t r = 0; r < b->n; r++) {
        n_alt += b->r[r].n_alts;
        for (uint32_t a = 0; a < b->r[r].n_alts; a++) n_sym += b->r[r].alts[a].n;
    }
    g->sym = malloc((size_t)n_sym * sizeof *g->sym);
    g->alt = malloc((size_t)n_alt * sizeof *g->alt + 1);
    g->rule_alt = malloc(((size_t)b->n + 1) * sizeof *g->rule_alt);
    g->cls = malloc((size_t)b->n_cls * sizeof *g->cls + 1);
    if (!g->sym || !g->alt || !g->rule_alt || !g->cls) {
        gram_free(g);
        return NULL;
    }
    uint32_t ai = 0, si = 0;
    for (uint32_t r = 0; r < b->n; r++) {
        g->rule_alt[r] = ai;
        for (uint32_t a = 0; a < b->r[r].n_alts; a++) {
            g->alt[ai++] = si;
            memcpy(g->sym + si, b->r[r].alts[a].s, b->r[r].alts[a].n * sizeof *g->sym);
            si += b->r[r].alts[a].n;
        }
    }
    g->rule_alt[b->n] = ai;
    g->n_sym = n_sym;
    g->n_rule = b->n;
    g->root = (uint32_t)root;
    memcpy(g->cls, b->cls, (size_t)b->n_cls * sizeof *g->cls);
    g->n_cls = b->n_cls;
    return g;
}

gram *gram_parse(const char *text, kiln_err *err) {
    if (!text) return kiln_fail(err, KILN_ERR_INVALID, "grammar: no text"), NULL;
    pb b = {.p = text, .line = 1, .err = err};
    for (;;) {
        skip_ws(&b, true);
        if (!*b.p) break;
        if (definition(&b)) break;
    }
    int32_t root = -1;
    for (uint32_t i = 0; !b.failed && i < b.n; i++) {
        if (b.r[i].name && !b.r[i].defined) {
            b.line = b.r[i].line;
            fail(&b, "grammar: line %d: rule '%s' is used but not defined", b.r[i].name);
        }
        if (b.r[i].name && !strcmp(b.r[i].name, "root")) root = (int32_t)i;
    }
    if (!b.failed && root < 0) kiln_fail(err, KILN_ERR_INVALID, "grammar: no 'root' rule"), b.failed = true;
    if (!b.failed) check_left_recursion(&b);
    gram *g = b.failed ? NULL : flatten(&b, root);
    if (!b.failed && !g) kiln_fail(err, KILN_ERR_NOMEM, "grammar: out of memory");
    for (uint32_t i = 0; i < b.n; i++) {
        for (uint32_t a = 0; a < b.r[i].n_alts; a++) free(b.r[i].alts[a].s);
        free(b.r[i].alts);
        free(b.r[i].name);
    }
    free(b.r);
    free(b.cls);
    return g;
}

void gram_free(gram *g) {
    if (!g) return;
    free(g->sym);
    free(g->alt);
    free(g->rule_alt);
    free(g->cls);
    free(g);
}
