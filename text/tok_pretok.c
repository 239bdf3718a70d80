/* Pre-tokenizers of byte-level BPE vocabularies, as llama.cpp runs them (llama-vocab.cpp
 * names a list of regexes per tokenizer.ggml.pre; unicode.cpp applies them in order, each
 * one splitting every piece the previous left: matches and the gaps between them both
 * become pieces). Each regex here is a direct matcher over code points, not a regex
 * engine: the lists are few and fixed. Unicode categories come from utf8proc; `\s` is
 * Unicode White_Space, which is what llama.cpp's tables (made with Python's `regex`) and
 * Hugging Face's engines use. */
#include "text/tok_pretok.h"

#include "base/error.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- code point classes ---------------------------------------------------------------- */

/* Every code point gets at least one category bit, so a zero class means "outside the
 * piece" (llama.cpp's out-of-range flags), which no class test matches. */
enum {
    PT_L = 1 << 0,  /* \p{L} */
    PT_N = 1 << 1,  /* \p{N} */
    PT_P = 1 << 2,  /* \p{P} */
    PT_S = 1 << 3,  /* \p{S} */
    PT_M = 1 << 4,  /* \p{M} */
    PT_Z = 1 << 5,  /* \p{Z} */
    PT_C = 1 << 6,  /* \p{C}, unassigned included */
    PT_WS = 1 << 7, /* \s */
};

static uint8_t pt_class(uint32_t cp) {
    uint8_t f;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        f = PT_L; break;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        f = PT_N; break;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
        f = PT_P; break;
    case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
        f = PT_S; break;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        f = PT_M; break;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
        f = PT_Z | PT_WS; break; /* every Z code point is White_Space */
    default:
        f = PT_C; break;
    }
    /* White_Space outside Z: TAB..CR and NEL (utf8proc has no property for it). */
    if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x85) f |= PT_WS;
    return f;
}

/* ---- the text, decoded once ------------------------------------------------------------ */

typedef struct pt_text {
    uint32_t *cp; /* code points */
    uint8_t *cl;  /* their classes */
    size_t *off;  /* byte offset of each code point; off[n] = byte length */
    size_t n;
} pt_text;

/* Strict UTF-8 (no overlongs, surrogates or values past U+10FFFF): llama.cpp would
 * substitute U+FFFD, but our callers ask for an error instead. Returns the length of the
 * sequence at s[0..rem), or 0 if it is invalid. */
static size_t pt_utf8_next(const unsigned char *s, size_t rem, uint32_t *out) {
    unsigned c = s[0];
    if (c < 0x80) { *out = c; return 1; }
    size_t k;
    uint32_t v;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) { k = 2; v = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) {
        k = 3; v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4; v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    if (rem < k) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    *out = v;
    return k;
}

static void pt_text_free(pt_text *t) {
    free(t->cp);
    free(t->cl);
    free(t->off);
}

static int pt_text_decode(pt_text *t, const char *text, size_t len, kiln_err *err) {
    memset(t, 0, sizeof *t);
    if (len >= SIZE_MAX / sizeof *t->off)
        return kiln_fail(err, KILN_ERR_INVALID, "pre-tokenizer: text too long (%zu bytes)", len);
    /* at most one code point per byte; + 1 so a zero length still allocates */
    t->cp = malloc((len + 1) * sizeof *t->cp);
    t->cl = malloc(len + 1);
    t->off = malloc((len + 1) * sizeof *t->off);
    if (!t->cp || !t->cl || !t->off) {
        pt_text_free(t);
        return kiln_fail(err, KILN_ERR_NOMEM, "pre-tokenizer: out of memory for %zu bytes of text", len);
    }
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, n = 0;
    while (i < len) {
        uint32_t cp;
        size_t k = pt_utf8_next(s + i, len - i, &cp);
        if (!k) {
            pt_text_free(t);
            return kiln_fail(err, KILN_ERR_INVALID, "pre-tokenizer: invalid UTF-8 at byte %zu", i);
        }
        t->cp[n] = cp;
        t->cl[n] = pt_class(cp);
        t->off[n] = i;
        n++;
        i += k;
    }
    t->off[n] = len;
    t->n = n;
    return 0;
}

/* ---- piece boundaries ------------------------------------------------------------------ */

/* Ends of pieces (code point indices), in order; a piece starts where the last ended. */
typedef struct pt_ends {
    size_t *v;
    size_t n, cap;
    bool oom;
} pt_ends;

static void pt_push(pt_ends *e, size_t end) {
    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 64;
        size_t *v = realloc(e->v, cap * sizeof *v);
        if (!v) { e->oom = true; return; }
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n++] = end;
}

/* A stage splits the piece [a, b) by appending the ends of its sub-pieces to out. */
typedef void (*pt_stage)(const pt_text *t, size_t a, size_t b, pt_ends *out);

/* Class of code point i of a piece ending at b, 0 past its end. */
static inline uint8_t cl_at(const pt_text *t, size_t i, size_t b) { return i < b ? t->cl[i] : 0; }

static inline bool is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }

/* ---- the hand-written GPT-2 and Llama-3 splitters -------------------------------------- */

/* 's|'t|'re|'ve|'m|'ll|'d (lower case, or ASCII case-insensitive): length or 0. */
static size_t contraction(const pt_text *t, size_t i, size_t b, bool any_case) {
    if (t->cp[i] != '\'' || i + 1 >= b) return 0;
    uint32_t c1 = t->cp[i + 1];
    if (any_case && c1 >= 'A' && c1 <= 'Z') c1 += 32;
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (i + 2 >= b) return 0;
    uint32_t c2 = t->cp[i + 2];
    if (any_case && c2 >= 'A' && c2 <= 'Z') c2 += 32;
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

/* Length of the run of \s starting at i; *last_crlf gets the end of its last \r or \n
 * (0 if none). */
static size_t ws_run(const pt_text *t, size_t i, size_t b, size_t *last_crlf) {
    size_t k = 0;
    *last_crlf = 0;
    while (i + k < b && (t->cl[i + k] & PT_WS)) {
        if (is_crlf(t->cp[i + k])) *last_crlf = i + k + 1;
        k++;
    }
    return k;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static void st_gpt2(const pt_text *t, size_t a, size_t b, pt_ends *out) {
    size_t i = a;
    while (i < b) {
        size_t k = contraction(t, i, b, false);
        if (k) { pt_push(out, i += k); continue; }
        bool sp = t->cp[i] == ' ';
        uint8_t f = sp ? cl_at(t, i + 1, b) : t->cl[i];
        uint8_t want = f & PT_L ? PT_L : f & PT_N ? PT_N : 0;
        if (want) { /* ' ?\p{L}+' or ' ?\p{N}+' */
            size_t j = i + sp;
            while (cl_at(t, j, b) & want) j++;
            pt_push(out, i = j);
            continue;
        }
        if (f && !(f & (PT_WS | PT_L | PT_N))) { /* ' ?[^\s\p{L}\p{N}]+' */
            size_t j = i + sp;
            for (uint8_t g; (g = cl_at(t, j, b)) && !(g & (PT_WS | PT_L | PT_N));) j++;
            pt_push(out, i = j);
            continue;
        }
        size_t crlf;
        k = ws_run(t, i, b, &crlf);
        /* \s+(?!\S): a run followed by a non-space gives that one back */
        if (k > 1 && i + k < b) k--;
        pt_push(out, i += k ? k : 1);
    }
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}
 * | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static void split_llama3(const pt_text *t, size_t a, size_t b, pt_ends *out, size_t max_digits) {
    size_t i = a;
    while (i < b) {
        size_t k = contraction(t, i, b, true);
        if (k) { pt_push(out, i += k); continue; }
        uint32_t c = t->cp[i];
        uint8_t f = t->cl[i];
        if (!is_crlf(c) && !(f & PT_N) && ((f & PT_L) || (cl_at(t, i + 1, b) & PT_L))) {
            size_t j = i + 1; /* the letter, or the one non-letter allowed before them */
            while (cl_at(t, j, b) & PT_L) j++;
            pt_push(out, i = j);
            continue;
        }
        if (f & PT_N) {
            size_t j = i;
            while (j - i < max_digits && (cl_at(t, j, b) & PT_N)) j++;
            pt_push(out, i = j);
            continue;
        }
        bool sp = c == ' ';
        uint8_t f2 = sp ? cl_at(t, i + 1, b) : f;
        if (f2 && !(f2 & (PT_WS | PT_L | PT_N))) {
            size_t j = i + sp;
            for (uint8_t g; (g = cl_at(t, j, b)) && !(g & (PT_WS | PT_L | PT_N));) j++;
            while (j < b && is_crlf(t->cp[j])) j++;
            pt_push(out, i = j);
            continue;
        }
        size_t crlf;
        k = ws_run(t, i, b, &crlf);
        if (crlf) { pt_push(out, i = crlf); continue; } /* \s*[\r\n]+ backtracks to the last */
        if (k > 1 && i + k < b) k--;
        pt_push(out, i += k ? k : 1);
    }
}

static void st_llama3(const pt_text *t, size_t a, size_t b, pt_ends *out) { split_llama3(t, a, b, out, 3); }
static void st_qwen2(const pt_text *t, size_t a, size_t b, pt_ends *out) { split_llama3(t, a, b, out, 1); }

/* ---- single regexes that isolate their matches ----------------------------------------- */

/* Length of the match starting exactly at i, or 0. */
typedef size_t (*pt_match)(const pt_text *t, size_t i, size_t b);

/* Leftmost matches, one after the other; matches and the gaps between them are pieces. */
static void isolate(const pt_text *t, size_t a, size_t b, pt_ends *out, pt_match m) {
    size_t gap = a;
    for (size_t i = a; i < b;) {
        size_t k = m(t, i, b);
        if (!k) { i++; continue; }
        if (i > gap) pt_push(out, i);
        pt_push(out, i += k);
        gap = i;
    }
    if (gap < b) pt_push(out, b);
}

static size_t run_of(const pt_text *t, size_t i, size_t b, uint8_t cls) {
    size_t j = i;
    while (j < b && (t->cl[j] & cls)) j++;
    return j - i;
}

/* \p{N} */
static size_t m_digit(const pt_text *t, size_t i, size_t b) { (void)b; return (t->cl[i] & PT_N) ? 1 : 0; }
/* \p{N}+ */
static size_t m_digits(const pt_text *t, size_t i, size_t b) { return run_of(t, i, b, PT_N); }
/* [\r\n] */
static size_t m_crlf(const pt_text *t, size_t i, size_t b) { (void)b; return is_crlf(t->cp[i]); }

/* [0-9][0-9][0-9] */
static size_t m_ascii3(const pt_text *t, size_t i, size_t b) {
    if (i + 3 > b) return 0;
    for (size_t j = i; j < i + 3; j++)
        if (t->cp[j] < '0' || t->cp[j] > '9') return 0;
    return 3;
}

/* [\p{P}\$\+<=>\^~\|]+ (default), with ` too (falcon) */
static size_t punct_run(const pt_text *t, size_t i, size_t b, const char *extra) {
    size_t j = i;
    while (j < b && ((t->cl[j] & PT_P) || (t->cp[j] < 0x80 && t->cp[j] && strchr(extra, (int)t->cp[j])))) j++;
    return j - i;
}
static size_t m_punct_default(const pt_text *t, size_t i, size_t b) { return punct_run(t, i, b, "$+<=>^~|"); }
static size_t m_punct_falcon(const pt_text *t, size_t i, size_t b) { return punct_run(t, i, b, "$+<=>^~|`"); }

/* \s?X+ where X is a class bit: the space is taken only when X follows it. */
static size_t opt_space_run(const pt_text *t, size_t i, size_t b, uint8_t cls) {
    size_t sp = (t->cl[i] & PT_WS) && (cl_at(t, i + 1, b) & cls) ? 1 : 0;
    size_t k = run_of(t, i + sp, b, cls);
    return k ? sp + k : 0;
}
/* \s?\p{L}+ */
static size_t m_sp_letters(const pt_text *t, size_t i, size_t b) { return opt_space_run(t, i, b, PT_L); }
/* \s?\p{P}+ */
static size_t m_sp_punct(const pt_text *t, size_t i, size_t b) { return opt_space_run(t, i, b, PT_P); }

/* \s+$ : only the trailing run can match, so find it from the end (a scan per start
 * position would be quadratic on long inner runs). */
static void st_trailing_ws(const pt_text *t, size_t a, size_t b, pt_ends *out) {
    size_t s = b;
    while (s > a && (t->cl[s - 1] & PT_WS)) s--;
    if (s > a && s < b) pt_push(out, s);
    pt_push(out, b);
}

/* ---- DeepSeek's literal character classes ---------------------------------------------- */

/* The bracket expressions of DeepSeek's regexes, as code point ranges. They are part of
 * the regexes (tokenizer.json), not Unicode data, so they are written out here. */
typedef struct pt_range { uint32_t lo, hi; } pt_range;

/* [A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚ
 *  Ḁ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄ
 *  Ⰰ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃] */
static const pt_range DS_LETTERS[] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA},
    {0x1BC, 0x1BF}, {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377},
    {0x37B, 0x37D}, {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C},
    {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556},
    {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF},
    {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},
    {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC},
    {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113},
    {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128},
    {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE},
    {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787},
    {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

/* [!-/:-~！-／：-～‘-‟　-。] */
static const pt_range DS_PUNCT[] = {
    {0x21, 0x2F}, {0x3A, 0x7E}, {0x2018, 0x201F}, {0x3000, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
};

/* [一-龥ࠀ-一가-퟿] */
static const pt_range DS_CJK[] = {
    {0x800, 0x9FA5}, {0xAC00, 0xD7FF}, /* 一-龥 and ࠀ-一 overlap at 一 */
};

#define PT_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* llama.cpp matches these classes against text whose non-ASCII spaces were replaced by
 * U+000B (std::wregex's \s knows only ASCII), so a space never falls in them. */
static bool in_ranges(const pt_text *t, size_t i, const pt_range *r, size_t n) {
    if (t->cl[i] & PT_WS) return false;
    uint32_t c = t->cp[i];
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < r[mid].lo) hi = mid;
        else if (c > r[mid].hi) lo = mid + 1;
        else return true;
    }
    return false;
}

static size_t ranges_run(const pt_text *t, size_t i, size_t b, const pt_range *r, size_t n) {
    size_t j = i;
    while (j < b && in_ranges(t, j, r, n)) j++;
    return j - i;
}

/* \s?[class]+ */
static size_t opt_space_ranges(const pt_text *t, size_t i, size_t b, const pt_range *r, size_t n) {
    size_t sp = (t->cl[i] & PT_WS) && i + 1 < b && in_ranges(t, i + 1, r, n) ? 1 : 0;
    size_t k = ranges_run(t, i + sp, b, r, n);
    return k ? sp + k : 0;
}
static size_t m_ds_letters(const pt_text *t, size_t i, size_t b) {
    return opt_space_ranges(t, i, b, DS_LETTERS, PT_COUNT(DS_LETTERS));
}
static size_t m_ds_punct(const pt_text *t, size_t i, size_t b) {
    return opt_space_ranges(t, i, b, DS_PUNCT, PT_COUNT(DS_PUNCT));
}
static size_t m_ds_cjk(const pt_text *t, size_t i, size_t b) { return ranges_run(t, i, b, DS_CJK, PT_COUNT(DS_CJK)); }

/* ---- stages as lists ------------------------------------------------------------------- */

#define ISOLATE_STAGE(name, m) \
    static void name(const pt_text *t, size_t a, size_t b, pt_ends *out) { isolate(t, a, b, out, m); }
ISOLATE_STAGE(st_digit, m_digit)
ISOLATE_STAGE(st_digits, m_digits)
ISOLATE_STAGE(st_crlf, m_crlf)
ISOLATE_STAGE(st_ascii3, m_ascii3)
ISOLATE_STAGE(st_punct_default, m_punct_default)
ISOLATE_STAGE(st_punct_falcon, m_punct_falcon)
ISOLATE_STAGE(st_sp_letters, m_sp_letters)
ISOLATE_STAGE(st_sp_punct, m_sp_punct)
ISOLATE_STAGE(st_ds_letters, m_ds_letters)
ISOLATE_STAGE(st_ds_punct, m_ds_punct)
ISOLATE_STAGE(st_ds_cjk, m_ds_cjk)

#define PT_MAX_STAGES 6

typedef struct pt_family {
    const char *const *names;
    pt_stage stages[PT_MAX_STAGES]; /* NULL-terminated when shorter */
} pt_family;

/* The llama.cpp names that share each list (llama-vocab.cpp). */
static const char *const N_GPT2[] = {
    "gpt-2", "mpt", "olmo", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
    "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "jais",
    "trillion", "granite-docling", "exaone4",
    "gpt-neox", /* not a llama.cpp name; GPT-NeoX's tokenizer.json uses the GPT-2 regex */
    NULL};
static const char *const N_DEFAULT[] = {"default", NULL};
static const char *const N_LLAMA3[] = {
    "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
    "jina-v5-nano", "dbrx", "smaug-bpe", "glm4", "chatglm-bpe", NULL};
static const char *const N_QWEN2[] = {
    "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open",
    "grok-2", NULL};
static const char *const N_DS_LLM[] = {"deepseek-llm", NULL};
static const char *const N_DS_CODER[] = {"deepseek-coder", NULL};
static const char *const N_FALCON[] = {"falcon", NULL};
static const char *const N_STARCODER[] = {
    "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2", NULL};

static const pt_family FAMILIES[] = {
    {N_GPT2, {st_gpt2}},
    /* llama.cpp's list for "default" is not the GPT-2 regex alone */
    {N_DEFAULT, {st_punct_default, st_gpt2, st_digits, st_ascii3}},
    {N_LLAMA3, {st_llama3}},
    {N_QWEN2, {st_qwen2}},
    {N_DS_LLM, {st_crlf, st_ds_letters, st_ds_punct, st_trailing_ws, st_ds_cjk, st_digits}},
    {N_DS_CODER, {st_crlf, st_sp_letters, st_sp_punct, st_ds_cjk, st_digit}},
    {N_FALCON, {st_punct_falcon, st_gpt2, st_ascii3}},
    {N_STARCODER, {st_digit, st_gpt2}},
};

static const pt_family *pt_find(const char *pre) {
    if (!pre) return NULL;
    for (size_t f = 0; f < PT_COUNT(FAMILIES); f++)
        for (const char *const *nm = FAMILIES[f].names; *nm; nm++)
            if (strcmp(*nm, pre) == 0) return &FAMILIES[f];
    return NULL;
}

int tok_pretok_known(const char *pre) { return pt_find(pre) != NULL; }

int tok_pretok_split(const char *pre, const char *text, size_t len, tok_span **spans, size_t *n, kiln_err *err) {
    if (n) *n = 0;
    if (!spans || !n) return kiln_fail(err, KILN_ERR_INVALID, "pre-tokenizer: no place for the spans");
    if (!text && len) return kiln_fail(err, KILN_ERR_INVALID, "pre-tokenizer: no text");
    const pt_family *fam = pt_find(pre);
    if (!fam)
        return kiln_fail(err, KILN_ERR_UNSUPPORTED, "pre-tokenizer: unknown tokenizer.ggml.pre '%s'",
                         pre ? pre : "(null)");

    pt_text t;
    if (pt_text_decode(&t, text, len, err)) return -1;

    pt_ends cur = {0}, next = {0};
    if (t.n) pt_push(&cur, t.n);
    for (int s = 0; s < PT_MAX_STAGES && fam->stages[s] && !cur.oom; s++) {
        next.n = 0;
        size_t a = 0;
        for (size_t p = 0; p < cur.n && !next.oom; p++) {
            fam->stages[s](&t, a, cur.v[p], &next);
            a = cur.v[p];
        }
        pt_ends tmp = cur;
        cur = next;
        next = tmp;
    }
    int rc = 0;
    if (cur.oom || next.oom) {
        rc = kiln_fail(err, KILN_ERR_NOMEM, "pre-tokenizer: out of memory");
    } else if (cur.n) {
        tok_span *sp = realloc(*spans, cur.n * sizeof *sp);
        if (!sp) {
            rc = kiln_fail(err, KILN_ERR_NOMEM, "pre-tokenizer: out of memory for %zu spans", cur.n);
        } else {
            size_t a = 0;
            for (size_t p = 0; p < cur.n; p++) {
                sp[p].start = t.off[a];
                sp[p].len = t.off[cur.v[p]] - t.off[a];
                a = cur.v[p];
            }
            *spans = sp;
            *n = cur.n;
        }
    }
    free(cur.v);
    free(next.v);
    pt_text_free(&t);
    return rc;
}
