/* Constrained decoding: a GBNF-like grammar (docs/grammar.md) compiled to byte-level
 * rules, a matcher that follows the bytes generated so far, and the mask of the tokens
 * that can continue them.
 *
 * The matcher's state is a set of parse stacks (as llama.cpp's grammar), but stacks are
 * hash-consed nodes (position, parent) and sets of them are interned, so a state is one
 * number; a state's transition on a byte is cached, and the token mask of a state is
 * computed once, by walking a prefix tree of the vocabulary's bytes against the state
 * (a subtree whose prefix no stack accepts is skipped), then cached. In a JSON string
 * the state after each character is the same set, so a long string costs one walk. */
#ifndef KILN_GENERATE_GRAMMAR_H
#define KILN_GENERATE_GRAMMAR_H

#include "base/error.h"
#include "text/tok.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A compiled grammar: immutable, shared by any number of matchers. */
typedef struct gram gram;

/* Parses GBNF text (rules "name ::= ...", the start rule "root"). NULL with err
 * (KILN_ERR_INVALID naming the line and what is wrong; left recursion, an undefined
 * rule and a missing root are refused). */
gram *gram_parse(const char *text, kiln_err *err);
void gram_free(gram *g);

/* A vocabulary's bytes as a prefix tree, built once per tokenizer (control tokens, which
 * have no bytes, are never allowed by a grammar; end-of-generation tokens are allowed
 * where the grammar may end). */
typedef struct gram_vocab gram_vocab;

gram_vocab *gram_vocab_create(const tokenizer *t, kiln_err *err);
/* The same from n raw pieces (tests): piece i is token i; len 0 marks a control token. */
gram_vocab *gram_vocab_from_pieces(const char *const *pieces, const size_t *lens, uint32_t n, kiln_err *err);
void gram_vocab_free(gram_vocab *v);
uint32_t gram_vocab_size(const gram_vocab *v);

/* One generation's matcher. */
typedef struct gram_match gram_match;

gram_match *gram_match_create(const gram *g, const gram_vocab *v, kiln_err *err);
void gram_match_free(gram_match *m);
/* Back to the start (the caches stay: they depend only on the grammar and vocabulary). */
void gram_match_reset(gram_match *m);
/* Feeds bytes; 0, or -1 when the grammar does not allow them (the state is unchanged). */
int gram_match_bytes(gram_match *m, const char *s, size_t n);
/* Feeds a token's bytes; -1 when not allowed. */
int gram_match_token(gram_match *m, int32_t id);
/* Whether the bytes so far are a whole sentence of the grammar. */
bool gram_match_accepting(const gram_match *m);
/* Whether nothing but the end may follow (a whole sentence no byte extends). */
bool gram_match_done(const gram_match *m);
/* The tokens whose bytes can follow, as a bitset of (n_vocab + 63) / 64 words (bit i of
 * word i / 64 is token i); end-of-generation tokens are not set (the caller allows them
 * when gram_match_accepting). The words point into the matcher's cache: valid until
 * the next call on m. NULL when out of memory. */
const uint64_t *gram_match_mask(gram_match *m);

/* Whether a NULL mask or a refused step was the grammar's fault: following it needed more
 * work per step than a matcher allows (otherwise: out of memory). */
bool gram_match_too_complex(const gram_match *m);

/* Masks logits[n_vocab] in place: -inf for every token the mask forbids, except eog[i]
 * (n_eog of them, -1 entries skipped) when allow_eog. */
void gram_apply_mask(const uint64_t *mask, float *logits, uint32_t n_vocab, const int32_t *eog, size_t n_eog,
                     bool allow_eog);

#endif
