/* A small open-addressing index from NUL-terminated names to positions, used for
 * metadata keys and tensor names (duplicate checks at load, lookups after). */
#ifndef KILN_GGUF_NAMES_H
#define KILN_GGUF_NAMES_H

#include <stdint.h>

typedef struct gguf_names {
    const char **names; /* borrowed */
    uint64_t *idx;
    uint64_t cap;       /* power of two, > 2x entries */
} gguf_names;

int gguf_names_init(gguf_names *m, uint64_t n_max);
void gguf_names_free(gguf_names *m);
int64_t gguf_names_find(const gguf_names *m, const char *name); /* -1 if absent */
void gguf_names_put(gguf_names *m, const char *name, uint64_t i); /* name must be absent */

#endif
