/* The tokenizer kiln runs: loaded from a GGUF's tokenizer.ggml.* keys, it encodes text
 * to ids and ids back to text exactly as llama.cpp does (llama-vocab.cpp): SentencePiece
 * style ("llama": scores, byte fallback, dummy-prefix space) and byte-level BPE ("gpt2",
 * with the pre-tokenizer that tokenizer.ggml.pre names). */
#ifndef KILN_TEXT_TOK_H
#define KILN_TEXT_TOK_H

#include "base/error.h"
#include "gguf/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer;

/* NULL with err on a missing/bad key or an unsupported tokenizer.ggml.model. */
tokenizer *tok_load(const gguf_file *g, kiln_err *err);
void tok_free(tokenizer *t);

uint32_t tok_n_vocab(const tokenizer *t);
int32_t tok_bos(const tokenizer *t); /* -1 when the model has none */
int32_t tok_eos(const tokenizer *t);
int32_t tok_eot(const tokenizer *t); /* end of turn (<|eot_id|>, <|im_end|>, <end_of_turn>, ...) or -1 */
bool tok_add_bos(const tokenizer *t); /* does encoding with add_special prepend BOS */
/* Does tok_stream drop the first piece's leading space (SentencePiece's dummy prefix). */
bool tok_space_prefix(const tokenizer *t);
/* Ends generation: eos, eot and the other end-of-generation tokens llama.cpp knows. */
bool tok_is_eog(const tokenizer *t, int32_t id);
/* Id of a token spelled exactly s (e.g. "<|im_end|>"), or -1. */
int32_t tok_find(const tokenizer *t, const char *s);

/* Encodes text[0..len) (must be valid UTF-8, else -1 with err). add_special: BOS/EOS as
 * the model's add_bos/add_eos say; parse_special: control and user-defined tokens
 * written in the text are matched as single tokens (otherwise they are plain text).
 * Writes up to cap ids and returns how many there are (call again with more room if
 * larger than cap), or -1 with err. Same results as llama_tokenize. */
int64_t tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                   int32_t *ids, size_t cap, kiln_err *err);

/* The bytes one token stands for (SPM: "▁" is a space, <0xNN> a byte; BPE: GPT-2's
 * byte-to-unicode undone). Control tokens give their text only when special is true.
 * Returns the length (may exceed cap; nothing past cap is written), or -1 for a bad id. */
int64_t tok_piece(const tokenizer *t, int32_t id, bool special, char *buf, size_t cap);

/* Streaming detokenization: never emits part of a UTF-8 character; an SPM model's
 * leading dummy-prefix space after BOS is removed as llama.cpp does. */
typedef struct tok_stream {
    const tokenizer *t;
    char held[8]; /* bytes of an unfinished UTF-8 character */
    size_t n_held;
    bool first;   /* nothing emitted yet */
} tok_stream;
void tok_stream_init(tok_stream *s, const tokenizer *t);
/* As tok_stream_init, for text that follows prompt[0..n): the dummy-prefix space is only
 * removed at the start of a text, so where the prompt already renders text (anything but
 * BOS and control tokens) the first piece keeps its space ("Once upon" + " a time"), as
 * llama.cpp prints a continuation. */
void tok_stream_init_after(tok_stream *s, const tokenizer *t, const int32_t *prompt, size_t n);
/* Appends id's text; writes what is complete to out (up to cap, returns the length). */
size_t tok_stream_push(tok_stream *s, int32_t id, char *out, size_t cap);
/* Whatever is still held, as U+FFFD replacement characters. */
size_t tok_stream_flush(tok_stream *s, char *out, size_t cap);

/* 0 when text is valid UTF-8, else the byte offset + 1 of the first bad byte. */
size_t tok_utf8_invalid_at(const char *text, size_t len);

#endif
