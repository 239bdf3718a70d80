/* Byte-level BPE as llama.cpp's llm_tokenizer_bpe_session does it: the pre-tokenizer cuts
 * the text into spans; each span's bytes are spelled with GPT-2's byte-to-unicode alphabet;
 * adjacent symbols are merged by the rank of their pair in tokenizer.ggml.merges (lowest
 * rank, then leftmost, first); each final symbol is its token. */
#include "base/error.h"
#include "text/tok_internal.h"
#include "text/tok_pretok.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- GPT-2's byte <-> unicode alphabet ------------------------------------------------ */

/* Printable Latin-1 bytes keep their code point; the others take 256, 257, ... in byte
 * order: 0..32 -> 256..288, 127..160 -> 289..322, 173 -> 323. */
static bool printable(unsigned b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

static unsigned byte_cp(unsigned b) {
    return printable(b) ? b : b <= 32 ? 256 + b : b <= 160 ? b + 162 : 323;
}

/* The byte a code point spells, or -1 when it is outside the alphabet. */
static int cp_byte(uint32_t cp) {
    if (cp < 256) return printable(cp) ? (int)cp : -1;
    if (cp <= 288) return (int)(cp - 256);
    if (cp <= 322) return (int)(cp - 162);
    return cp == 323 ? 173 : -1;
}

/* The spelling of byte b in UTF-8 (1 or 2 bytes). */
static size_t spell(unsigned b, char out[2]) {
    unsigned cp = byte_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* ---- merge ranks ------------------------------------------------------------------------ */

int tok_bpe_init(tokenizer *t, kiln_err *err) {
    if (tok_index_init(&t->merge_ix, t->n_merges)) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    /* A repeated merge keeps its first rank, as llama.cpp's map emplace does. */
    for (uint64_t i = 0; i < t->n_merges; i++) tok_index_put(&t->merge_ix, t->merges, (uint32_t)i);
    return 0;
}

void tok_bpe_free(tokenizer *t) {
    tok_index_free(&t->merge_ix);
}

/* ---- encoding --------------------------------------------------------------------------- */

typedef struct {
    size_t start, n; /* bytes of the spelled word; n == 0 once merged into the left neighbour */
    int32_t prev, next;
} bpe_sym;

typedef struct {
    int32_t left, right;
    int64_t rank;
    size_t size;
} bpe_pair;

static bool before(const bpe_pair *a, const bpe_pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

TOK_HEAP(bpe_heap, bpe_pair, before)

/* Scratch buffers reused across the spans of one call. */
typedef struct {
    char *word, *key;
    size_t word_cap;
    bpe_sym *sym;
    size_t sym_cap;
    bpe_heap heap;
} bpe_work;

static int grow(bpe_work *w, size_t span_len) {
    size_t need = 2 * span_len + 1;
    if (need > w->word_cap) {
        char *a = realloc(w->word, need), *b = a ? realloc(w->key, need + 1) : NULL;
        if (a) w->word = a;
        if (b) w->key = b;
        if (!a || !b) return -1;
        w->word_cap = need;
    }
    if (span_len > w->sym_cap) {
        bpe_sym *s = realloc(w->sym, span_len * sizeof *s);
        if (!s) return -1;
        w->sym = s;
        w->sym_cap = span_len;
    }
    return 0;
}

static int try_pair(const tokenizer *t, bpe_work *w, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return 0;
    const bpe_sym *a = &w->sym[l], *b = &w->sym[r];
    /* Symbols never hold a space (0x20 is spelled "Ġ"), so "left right" names the pair
     * exactly as llama.cpp's split of each merge at its first space does. */
    memcpy(w->key, w->word + a->start, a->n);
    w->key[a->n] = ' ';
    memcpy(w->key + a->n + 1, w->word + b->start, b->n);
    int64_t rank = tok_index_get(&t->merge_ix, t->merges, w->key, a->n + 1 + b->n);
    if (rank < 0) return 0;
    return bpe_heap_push(&w->heap, (bpe_pair){l, r, rank, a->n + b->n});
}

static int encode_span(const tokenizer *t, bpe_work *w, const char *p, size_t len, tok_ids *out) {
    size_t wl = 0;
    for (size_t i = 0; i < len; i++) {
        size_t k = spell((unsigned char)p[i], w->word + wl);
        w->sym[i] = (bpe_sym){wl, k, (int32_t)i - 1, i + 1 == len ? -1 : (int32_t)i + 1};
        wl += k;
    }
    if (t->ignore_merges) {
        int64_t id = tok_lookup(t, w->word, wl);
        if (id >= 0) return tok_ids_push(out, (int32_t)id);
    }
    w->heap.n = 0;
    for (size_t i = 1; i < len; i++)
        if (try_pair(t, w, (int32_t)i - 1, (int32_t)i)) return -1;
    while (w->heap.n) {
        bpe_pair q = bpe_heap_pop(&w->heap);
        bpe_sym *l = &w->sym[q.left], *r = &w->sym[q.right];
        /* Starts never move and a symbol only grows by taking its right neighbour, so equal
         * sizes mean the pair's text is unchanged (llama.cpp compares the strings). */
        if (l->n == 0 || r->n == 0 || l->n + r->n != q.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->sym[r->next].prev = q.left;
        if (try_pair(t, w, l->prev, q.left) || try_pair(t, w, q.left, l->next)) return -1;
    }
    for (int32_t i = 0; i != -1; i = w->sym[i].next) {
        const char *s = w->word + w->sym[i].start;
        size_t n = w->sym[i].n;
        int64_t id = tok_lookup(t, s, n);
        if (id >= 0) {
            if (tok_ids_push(out, (int32_t)id)) return -1;
            continue;
        }
        /* No such token: llama.cpp tries each byte of the spelling as a one-byte token and
         * drops the bytes that are none. */
        for (size_t j = 0; j < n; j++) {
            int64_t bid = tok_lookup(t, s + j, 1);
            if (bid >= 0 && tok_ids_push(out, (int32_t)bid)) return -1;
        }
    }
    return 0;
}

int tok_bpe_encode(const tokenizer *t, const char *text, size_t len, tok_ids *out, kiln_err *err) {
    if (len == 0) return 0;
    tok_span *spans = NULL;
    size_t n_spans = 0;
    if (tok_pretok_split(t->pre, text, len, &spans, &n_spans, err)) {
        free(spans);
        return -1;
    }
    bpe_work w = {0};
    int rc = 0;
    for (size_t i = 0; i < n_spans && rc == 0; i++) {
        const tok_span *sp = &spans[i];
        if (sp->start > len || sp->len > len - sp->start) {
            rc = kiln_fail(err, KILN_ERR_INVALID, "pre-tokenizer '%s' gave a span outside the text", t->pre);
            break;
        }
        if (sp->len == 0) continue;
        if (sp->len > INT32_MAX) {
            rc = kiln_fail(err, KILN_ERR_INVALID, "a pre-tokenizer span of %zu bytes is too long", sp->len);
            break;
        }
        if (grow(&w, sp->len) || encode_span(t, &w, text + sp->start, sp->len, out))
            rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    }
    free(spans);
    free(w.word);
    free(w.key);
    free(w.sym);
    free(w.heap.v);
    return rc;
}

/* ---- decoding --------------------------------------------------------------------------- */

static void put(char *buf, size_t cap, size_t *n, const char *p, size_t k) {
    if (*n < cap) memcpy(buf + *n, p, k < cap - *n ? k : cap - *n);
    *n += k;
}

/* Lenient decode of one code point (llama.cpp replaces a bad sequence by U+FFFD and moves
 * one byte on). */
static uint32_t next_cp(const unsigned char *s, size_t n, size_t *i) {
    unsigned char c = s[*i];
    size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (k == 0 || *i + k > n) {
        (*i)++;
        return 0xFFFD;
    }
    uint32_t cp = k == 1 ? c : k == 2 ? (c & 0x1Fu) : k == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (size_t j = 1; j < k; j++) {
        if ((s[*i + j] & 0xC0) != 0x80) {
            (*i)++;
            return 0xFFFD;
        }
        cp = (cp << 6) | (s[*i + j] & 0x3Fu);
    }
    *i += k;
    return cp;
}

size_t tok_bpe_unmap(const char *s, size_t n, char *buf, size_t cap) {
    const unsigned char *u = (const unsigned char *)s;
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = next_cp(u, n, &i);
        int byte = cp_byte(cp);
        if (byte >= 0) {
            char b = (char)byte;
            put(buf, cap, &out, &b, 1);
            continue;
        }
        /* Outside the alphabet: llama.cpp writes "[UNK_BYTE_0x" + the character's UTF-8 in
         * hex + the whole token text + "]". */
        char hex[2 * 4];
        size_t hl = 0;
        unsigned char enc[4];
        size_t el;
        if (cp < 0x80) {
            enc[0] = (unsigned char)cp, el = 1;
        } else if (cp < 0x800) {
            enc[0] = (unsigned char)(0xC0 | (cp >> 6)), enc[1] = (unsigned char)(0x80 | (cp & 0x3F)), el = 2;
        } else if (cp < 0x10000) {
            enc[0] = (unsigned char)(0xE0 | (cp >> 12)), enc[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            enc[2] = (unsigned char)(0x80 | (cp & 0x3F)), el = 3;
        } else {
            enc[0] = (unsigned char)(0xF0 | ((cp >> 18) & 0x07)), enc[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
            enc[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)), enc[3] = (unsigned char)(0x80 | (cp & 0x3F)), el = 4;
        }
        static const char digits[] = "0123456789abcdef";
        for (size_t j = 0; j < el; j++) {
            hex[hl++] = digits[enc[j] >> 4];
            hex[hl++] = digits[enc[j] & 15];
        }
        put(buf, cap, &out, "[UNK_BYTE_0x", 12);
        put(buf, cap, &out, hex, hl);
        put(buf, cap, &out, s, n);
        put(buf, cap, &out, "]", 1);
    }
    return out;
}
