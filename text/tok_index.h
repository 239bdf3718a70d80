/* text/tok_index — token strings as GGUF holds them (tokenizer.ggml.tokens): llama.cpp's
 * token types, the vocabulary's size bound, and a hash index over token strings. */
#ifndef KILN_TEXT_TOK_INDEX_H
#define KILN_TEXT_TOK_INDEX_H

#include "base/error.h"
#include "gguf/gguf.h"

#include <stddef.h>
#include <stdint.h>

/* llama.cpp's token types (tokenizer.ggml.token_type) */
enum {
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

/* Largest vocabulary accepted (real ones stay under 300k; this bounds what a bad id can
 * make us allocate). */
#define TOK_MAX_VOCAB (1u << 24)

/* Open-addressing index over an array of byte strings (gguf_str keys[]), by position. */
typedef struct tok_index {
    uint32_t *slot; /* entry + 1; 0 = empty */
    size_t mask;
} tok_index;

int tok_index_init(tok_index *ix, uint64_t n);
/* Inserts entry i of keys; returns the earlier entry with the same bytes, or -1. */
int64_t tok_index_put(tok_index *ix, const gguf_str *keys, uint32_t i);
int64_t tok_index_get(const tok_index *ix, const gguf_str *keys, const char *p, size_t n);
void tok_index_free(tok_index *ix);

/* Shared by the tokenizer files: a NUL-terminated copy of n bytes. */
char *tok_dup_bytes(const char *p, size_t n);

#endif
