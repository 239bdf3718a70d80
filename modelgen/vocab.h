/* modelgen/vocab — a tokenizer vocabulary as GGUF holds it (tokenizer.ggml.*), for the
 * tools that write models: kiln's default byte-level vocab, padding, and writing the keys
 * as llama.cpp's converter does. */
#ifndef KILN_MODELGEN_VOCAB_H
#define KILN_MODELGEN_VOCAB_H

#include "base/error.h"
#include "gguf/gguf.h"
#include "text/tok_index.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tok_vocab {
    char *model;          /* tokenizer.ggml.model: "gpt2" for byte-level BPE */
    char *pre;            /* tokenizer.ggml.pre: "llama-bpe", "qwen2", "gpt-2", ... */
    uint64_t n_tokens;
    gguf_str *tokens;     /* owned bytes */
    int32_t *types;       /* llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte */
    uint64_t n_merges;
    char **merges;        /* "a b" */
    int64_t bos_id, eos_id, pad_id, unk_id, eot_id;   /* -1 when absent */
    int add_bos, add_eos;  /* -1 when unspecified, else 0/1 */
    char *chat_template;   /* NULL when none */
    /* SpecialVocab also knows these; -1 / unspecified when absent. cls_id is kept but
     * not written: gguf-py's writer has no handler for it any more. */
    int64_t sep_id, cls_id, mask_id;
    int add_sep;
    /* eot_id is found by name (<|eot_id|>, <|im_end|>) for kiln's own use; the converter
     * writes tokenizer.ggml.eot_token_id only when a TemplateProcessing post-processor
     * moved eos away from tokenizer_config's eos_token. Then this is 1. */
    int write_eot;
} tok_vocab;

/* An empty vocab: NULL pointers, ids -1, flags unspecified. */
void tok_vocab_init(tok_vocab *v);

/* kiln's default when no tokenizer is given: byte-level BPE ("gpt2" model, "default" pre):
 * 256 byte tokens in GPT-2's byte-to-unicode spelling, then <|begin_of_text|> (bos,
 * control), <|end_of_text|> (eos, control), then deterministic merged tokens ("Ġ"+letter,
 * lowercase letter pairs) with their merges, then filled to vocab_size; error if
 * vocab_size is too small to hold bytes + specials */
int tok_vocab_bytelevel(uint64_t vocab_size, tok_vocab *out, kiln_err *err);
/* grow to vocab_size with "[PAD{id}]" tokens of type unused (llama.cpp's convention);
 * error if the vocab is already larger */
int tok_vocab_pad(tok_vocab *v, uint64_t vocab_size, kiln_err *err);
/* write the tokenizer.ggml.* keys (+ tokenizer.chat_template) through the writer, named
 * and typed as llama.cpp writes them (tokens: arr[str]; token_type: arr[i32]; merges:
 * arr[str]; ids: u32; add_bos_token/add_eos_token: bool; ...). Refuses what llama.cpp
 * cannot load: duplicate token strings, ids out of range, a gpt2 vocab without merges
 * key (an empty merges array is written instead). */
int tok_vocab_write(const tok_vocab *v, gguf_writer *w, kiln_err *err);
void tok_vocab_free(tok_vocab *v);

/* Id of the token spelled s (NUL-terminated), or -1. Linear; for tests and tools. */
int64_t tok_vocab_find(const tok_vocab *v, const char *s);
/* 1 if llama.cpp (as studied) knows this tokenizer.ggml.pre name; unknown names load
 * there with the "default" pre-tokenizer and a warning. */
int tok_pre_known(const char *name);

#endif
