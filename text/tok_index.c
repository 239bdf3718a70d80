/* Token strings: a hash index over byte strings (duplicates, added-token lookups) and the
 * small helpers the tokenizer files share. */
#include "text/tok_index.h"

#include "base/error.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *tok_dup_bytes(const char *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

/* ---- a hash index over byte strings (duplicates, added-token lookups) ------------------ */

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

int tok_index_init(tok_index *ix, uint64_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    ix->slot = calloc(cap, sizeof *ix->slot);
    ix->mask = cap - 1;
    return ix->slot ? 0 : -1;
}

/* Inserts entry i of keys; returns the earlier entry with the same bytes, or -1. */
int64_t tok_index_put(tok_index *ix, const gguf_str *keys, uint32_t i) {
    size_t h = (size_t)hash_bytes(keys[i].ptr, keys[i].len) & ix->mask;
    for (;; h = (h + 1) & ix->mask) {
        uint32_t s = ix->slot[h];
        if (!s) {
            ix->slot[h] = i + 1;
            return -1;
        }
        const gguf_str *k = &keys[s - 1];
        if (k->len == keys[i].len && memcmp(k->ptr, keys[i].ptr, k->len) == 0) return s - 1;
    }
}

int64_t tok_index_get(const tok_index *ix, const gguf_str *keys, const char *p, size_t n) {
    size_t h = (size_t)hash_bytes(p, n) & ix->mask;
    for (;; h = (h + 1) & ix->mask) {
        uint32_t s = ix->slot[h];
        if (!s) return -1;
        const gguf_str *k = &keys[s - 1];
        if (k->len == n && memcmp(k->ptr, p, n) == 0) return s - 1;
    }
}

void tok_index_free(tok_index *ix) {
    free(ix->slot);
    ix->slot = NULL;
}

