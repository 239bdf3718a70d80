/* Pre-tokenizers of byte-level BPE vocabs: split text into the pieces BPE merges within,
 * exactly as the regexes that llama.cpp's `tokenizer.ggml.pre` names do (Hugging Face
 * `tokenizers` semantics). Unicode categories come from utf8proc. */
#ifndef KILN_TEXT_TOK_PRETOK_H
#define KILN_TEXT_TOK_PRETOK_H

#include "base/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tok_span { size_t start, len; } tok_span; /* byte offsets into the text */

/* Is this tokenizer.ggml.pre name handled? (llama.cpp's names: "default", "gpt-2",
 * "llama-bpe", "llama3", "qwen2", "deepseek-llm", "deepseek-coder", "falcon",
 * "starcoder", "refact", "mpt", "olmo", "gpt-neox"(=default) ...) */
int tok_pretok_known(const char *pre);

/* Splits valid UTF-8 text[0..len) into spans covering it in order, without gaps.
 * *spans is (re)allocated with malloc; *n receives the count. 0 on success; -1 with err
 * for an unknown pre name, invalid UTF-8 or out of memory. */
int tok_pretok_split(const char *pre, const char *text, size_t len, tok_span **spans, size_t *n, kiln_err *err);

#endif
