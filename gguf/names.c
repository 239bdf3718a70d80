#include "gguf/names.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

int gguf_names_init(gguf_names *m, uint64_t n_max) {
    uint64_t cap = 16;
    while (cap < 2 * n_max + 1) cap *= 2;
    m->cap = cap;
    m->names = calloc(cap, sizeof *m->names);
    m->idx = calloc(cap, sizeof *m->idx);
    return m->names && m->idx ? 0 : -1;
}

void gguf_names_free(gguf_names *m) {
    free(m->names);
    free(m->idx);
    m->names = NULL;
    m->idx = NULL;
}

int64_t gguf_names_find(const gguf_names *m, const char *name) {
    if (!m->names) return -1;
    for (uint64_t h = hash(name) & (m->cap - 1);; h = (h + 1) & (m->cap - 1)) {
        if (!m->names[h]) return -1;
        if (strcmp(m->names[h], name) == 0) return (int64_t)m->idx[h];
    }
}

void gguf_names_put(gguf_names *m, const char *name, uint64_t i) {
    uint64_t h = hash(name) & (m->cap - 1);
    while (m->names[h]) h = (h + 1) & (m->cap - 1);
    m->names[h] = name;
    m->idx[h] = i;
}
