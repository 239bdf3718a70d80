/* Shared by tok.c, tok_spm.c and tok_bpe.c: the loaded tokenizer and the two encoders.
 * Not part of the public API (tok.h). */
#ifndef KILN_TEXT_TOK_INTERNAL_H
#define KILN_TEXT_TOK_INTERNAL_H

#include "base/error.h"
#include "text/tok.h"
#include "text/tok_index.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Token attributes as llama.cpp keeps them (llama_token_attr bits); the name-based
 * detections add bits to the types the file gives. */
enum {
    TOK_ATTR_UNKNOWN = 1u << 0,
    TOK_ATTR_UNUSED = 1u << 1,
    TOK_ATTR_NORMAL = 1u << 2,
    TOK_ATTR_CONTROL = 1u << 3,
    TOK_ATTR_USER_DEFINED = 1u << 4,
    TOK_ATTR_BYTE = 1u << 5,
    TOK_ATTR_LSTRIP = 1u << 7,
    TOK_ATTR_RSTRIP = 1u << 8,
    TOK_ATTR_EOG = 1u << 16, /* kiln's: member of the end-of-generation set */
};

typedef enum { TOK_KIND_SPM, TOK_KIND_BPE } tok_kind;

struct tokenizer {
    tok_kind kind;
    char *model, *pre;   /* tokenizer.ggml.model / .pre ("default" when a BPE file has none) */
    uint32_t n;          /* tokens */
    gguf_str *text;      /* token bytes, in arena */
    uint32_t *attr;
    float *score;
    char *arena;         /* tokens' and merges' bytes: the tokenizer outlives the gguf_file */
    tok_index ix;        /* token text -> id */

    int32_t bos, eos, eot, eom, unk, sep, pad;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;

    int32_t *special;    /* control, user-defined and unknown tokens, longest text first */
    uint32_t n_special;

    /* SPM: the byte-fallback token of each byte (<0xNN>, else the 1-byte token), -1 if none */
    int32_t spm_byte[256];

    /* BPE: merges "a b" in rank order and an index over them */
    gguf_str *merges;
    uint64_t n_merges;
    tok_index merge_ix;
};

/* A growable id list. */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;
int tok_ids_push(tok_ids *o, int32_t id);

static inline int64_t tok_lookup(const tokenizer *t, const char *p, size_t n) {
    return tok_index_get(&t->ix, t->text, p, n);
}

/* Length of the UTF-8 sequence a lead byte announces (1 for stray bytes), as llama.cpp's
 * unicode_len_utf8 does. */
static inline size_t tok_utf8_len(unsigned char c) {
    static const unsigned char lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

/* SentencePiece merge by score over text (dummy prefix added, spaces already "▁"). */
int tok_spm_encode(const tokenizer *t, const char *text, size_t len, tok_ids *out, kiln_err *err);

/* Byte-level BPE load-time setup (merge index) and its release. */
int tok_bpe_init(tokenizer *t, kiln_err *err);
void tok_bpe_free(tokenizer *t);
/* Pre-tokenizes text with t->pre and merges each span by rank. */
int tok_bpe_encode(const tokenizer *t, const char *text, size_t len, tok_ids *out, kiln_err *err);
/* GPT-2's byte-to-unicode undone on a token's text; writes up to cap, returns the length. */
size_t tok_bpe_unmap(const char *s, size_t n, char *buf, size_t cap);

/* A binary heap of T ordered by BEFORE(const T *, const T *), for the merge queues of
 * both SPM and BPE: NAME with NAME##_push (0, or -1 out of memory) and NAME##_pop
 * (n > 0). Generated per element type so the queues stay as fast as hand-written ones. */
#define TOK_HEAP(NAME, T, BEFORE)                                                          \
    typedef struct NAME {                                                                 \
        T *v;                                                                             \
        size_t n, cap;                                                                    \
    } NAME;                                                                               \
    static int NAME##_push(NAME *h, T p) {                                                \
        if (h->n == h->cap) {                                                             \
            size_t cap = h->cap ? 2 * h->cap : 64;                                        \
            T *v = realloc(h->v, cap * sizeof *v);                                        \
            if (!v) return -1;                                                            \
            h->v = v;                                                                     \
            h->cap = cap;                                                                 \
        }                                                                                 \
        size_t i = h->n++;                                                                \
        while (i > 0) {                                                                   \
            size_t up = (i - 1) / 2;                                                      \
            if (!BEFORE(&p, &h->v[up])) break;                                            \
            h->v[i] = h->v[up];                                                           \
            i = up;                                                                       \
        }                                                                                 \
        h->v[i] = p;                                                                      \
        return 0;                                                                         \
    }                                                                                     \
    static T NAME##_pop(NAME *h) {                                                        \
        T top = h->v[0], last = h->v[--h->n];                                             \
        size_t i = 0;                                                                     \
        for (;;) {                                                                        \
            size_t c = 2 * i + 1;                                                         \
            if (c >= h->n) break;                                                         \
            if (c + 1 < h->n && BEFORE(&h->v[c + 1], &h->v[c])) c++;                      \
            if (!BEFORE(&h->v[c], &last)) break;                                          \
            h->v[i] = h->v[c];                                                            \
            i = c;                                                                        \
        }                                                                                 \
        if (h->n) h->v[i] = last;                                                         \
        return top;                                                                       \
    }

#endif
