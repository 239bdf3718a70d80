/* SentencePiece-style encoding as llama.cpp's llm_tokenizer_spm does it: start from UTF-8
 * characters, repeatedly merge the adjacent pair whose concatenation is the vocab token
 * with the highest score (leftmost on ties), then spell what is no token with byte-fallback
 * tokens. The caller has added the dummy prefix and turned spaces into "▁". */
#include "base/error.h"
#include "text/tok_internal.h"

#include <stdint.h>
#include <stdlib.h>

typedef struct {
    size_t start, n; /* bytes of text; n == 0 once merged into the left neighbour */
    int32_t prev, next;
} spm_sym;

typedef struct {
    int32_t left, right;
    float score;
    size_t size; /* bytes of the pair when pushed: a later size mismatch means it is stale */
} spm_pair;

/* Higher score first, then the leftmost pair (llama.cpp's llm_bigram_spm ordering). */
static bool before(const spm_pair *a, const spm_pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

TOK_HEAP(spm_heap, spm_pair, before)

static int try_pair(const tokenizer *t, const char *text, const spm_sym *s, int32_t l, int32_t r, spm_heap *h) {
    if (l < 0 || r < 0) return 0;
    size_t size = s[l].n + s[r].n;
    int64_t id = tok_lookup(t, text + s[l].start, size);
    if (id < 0) return 0;
    return spm_heap_push(h, (spm_pair){l, r, t->score[id], size});
}

int tok_spm_encode(const tokenizer *t, const char *text, size_t len, tok_ids *out, kiln_err *err) {
    if (len == 0) return 0;
    if (len > INT32_MAX) return kiln_fail(err, KILN_ERR_INVALID, "text of %zu bytes is too long to tokenize", len);
    size_t n = 0;
    spm_sym *s = malloc(len * sizeof *s); /* at most one symbol per byte */
    spm_heap h = {0};
    int rc = -1;
    if (!s) goto oom;
    for (size_t off = 0; off < len; n++) {
        size_t cl = tok_utf8_len((unsigned char)text[off]);
        if (cl > len - off) cl = len - off;
        s[n] = (spm_sym){off, cl, (int32_t)n - 1, off + cl == len ? -1 : (int32_t)n + 1};
        off += cl;
    }
    for (size_t i = 1; i < n; i++)
        if (try_pair(t, text, s, (int32_t)i - 1, (int32_t)i, &h)) goto oom;
    while (h.n) {
        spm_pair p = spm_heap_pop(&h);
        spm_sym *l = &s[p.left], *r = &s[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = p.left;
        if (try_pair(t, text, s, l->prev, p.left, &h) || try_pair(t, text, s, p.left, l->next, &h)) goto oom;
    }
    /* Every merged symbol is a token (pairs are only pushed for tokens); a single character
     * that is not becomes its bytes. */
    for (int32_t i = 0; i != -1; i = s[i].next) {
        int64_t id = tok_lookup(t, text + s[i].start, s[i].n);
        if (id >= 0) {
            if (tok_ids_push(out, (int32_t)id)) goto oom;
            continue;
        }
        for (size_t j = 0; j < s[i].n; j++) {
            unsigned char b = (unsigned char)text[s[i].start + j];
            int32_t bid = t->spm_byte[b] >= 0 ? t->spm_byte[b] : t->unk;
            if (bid < 0) {
                rc = kiln_fail(err, KILN_ERR_INVALID,
                               "byte 0x%02X has no byte-fallback token and the vocab has no unknown token", b);
                goto done;
            }
            if (tok_ids_push(out, bid)) goto oom;
        }
    }
    rc = 0;
    goto done;
oom:
    rc = kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
done:
    free(s);
    free(h.v);
    return rc;
}
