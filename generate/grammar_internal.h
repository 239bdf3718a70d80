/* The compiled grammar shared by grammar_parse.c (which builds it) and grammar.c (which
 * matches it): byte-level rules, flattened. Internal to generate/. */
#ifndef KILN_GENERATE_GRAMMAR_INTERNAL_H
#define KILN_GENERATE_GRAMMAR_INTERNAL_H

#include "generate/grammar.h"

#include <stdint.h>

#define GRAM_END INT32_MIN /* ends an alternative */

/* A symbol: >= 0 a rule, < 0 the byte class -(s + 1), GRAM_END. An alternative is a run of
 * symbols ending with GRAM_END; rule r's alternatives start at sym positions
 * alt[rule_alt[r] .. rule_alt[r + 1]). */
struct gram {
    int32_t *sym;
    uint32_t n_sym;
    uint32_t *alt;
    uint32_t *rule_alt; /* [n_rule + 1] */
    uint32_t n_rule, root;
    uint8_t (*cls)[32]; /* byte bitmaps */
    uint32_t n_cls;
};

static inline bool gram_cls_has(const uint8_t *c, unsigned b) { return c[b >> 3] >> (b & 7) & 1; }

#endif
