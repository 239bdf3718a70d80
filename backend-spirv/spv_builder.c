/* The SPIR-V module builder (spv_builder.h). */
#include "backend-spirv/spv_builder.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void spv_b_init(spv_builder *b) {
    memset(b, 0, sizeof *b);
    b->next_id = 1;
}

void spv_b_free(spv_builder *b) {
    for (int i = 0; i < SPV_SEC_COUNT; i++) free(b->sec[i].w);
    free(b->keys.w);
    free(b->tab);
    free(b->caps);
    memset(b, 0, sizeof *b);
}

uint32_t spv_b_id(spv_builder *b) { return b->next_id++; }

static bool words_reserve(spv_builder *b, spv_words *v, size_t more) {
    if (b->oom) return false;
    if (v->n + more <= v->cap) return true;
    size_t cap = v->cap ? v->cap : 64;
    while (cap < v->n + more) cap *= 2;
    uint32_t *w = realloc(v->w, cap * sizeof *w);
    if (!w) {
        b->oom = true;
        return false;
    }
    v->w = w;
    v->cap = cap;
    return true;
}

size_t spv_b_emit(spv_builder *b, spv_section s, uint32_t op, const uint32_t *ops, uint32_t n) {
    spv_words *v = &b->sec[s];
    size_t at = v->n;
    /* the word count lives in 16 bits; kiln's instructions are far shorter */
    if (n + 1 > 0xffffu) {
        b->oom = true;
        return at;
    }
    if (!words_reserve(b, v, n + 1u)) return at;
    v->w[v->n++] = ((n + 1u) << 16) | (op & 0xffffu);
    for (uint32_t i = 0; i < n; i++) v->w[v->n++] = ops[i];
    return at;
}

size_t spv_b_emitv(spv_builder *b, spv_section s, uint32_t op, uint32_t n, ...) {
    uint32_t ops[16];
    if (n > 16) {
        b->oom = true;
        return b->sec[s].n;
    }
    va_list ap;
    va_start(ap, n);
    for (uint32_t i = 0; i < n; i++) ops[i] = va_arg(ap, uint32_t);
    va_end(ap);
    return spv_b_emit(b, s, op, ops, n);
}

void spv_b_emit_str(spv_builder *b, spv_section s, uint32_t op, const uint32_t *pre, uint32_t npre,
                    const char *str, const uint32_t *post, uint32_t npost) {
    size_t len = strlen(str);
    size_t sw = len / 4 + 1; /* a NUL always ends the literal */
    size_t n = npre + sw + npost;
    if (n + 1 > 0xffffu) {
        b->oom = true;
        return;
    }
    spv_words *v = &b->sec[s];
    if (!words_reserve(b, v, n + 1)) return;
    v->w[v->n++] = ((uint32_t)(n + 1) << 16) | (op & 0xffffu);
    for (uint32_t i = 0; i < npre; i++) v->w[v->n++] = pre[i];
    uint32_t *dst = &v->w[v->n];
    memset(dst, 0, sw * 4);
    for (size_t i = 0; i < len; i++) dst[i / 4] |= (uint32_t)(unsigned char)str[i] << (8 * (i % 4));
    v->n += sw;
    for (uint32_t i = 0; i < npost; i++) v->w[v->n++] = post[i];
}

void spv_b_patch(spv_builder *b, spv_section s, size_t at, uint32_t word) {
    if (b->oom || at >= b->sec[s].n) return;
    b->sec[s].w[at] = word;
}

static uint32_t hash_words(const uint32_t *w, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= w[i];
        h *= 16777619u;
        h ^= h >> 15;
    }
    return h;
}

static bool tab_grow(spv_builder *b) {
    size_t cap = b->tab_cap ? b->tab_cap * 2 : 256;
    spv_dedup *t = calloc(cap, sizeof *t);
    if (!t) {
        b->oom = true;
        return false;
    }
    for (size_t i = 0; i < b->tab_cap; i++) {
        if (!b->tab[i].id) continue;
        size_t j = b->tab[i].hash & (cap - 1);
        while (t[j].id) j = (j + 1) & (cap - 1);
        t[j] = b->tab[i];
    }
    free(b->tab);
    b->tab = t;
    b->tab_cap = cap;
    return true;
}

/* Looks key up; when absent, emits it into the global section with a fresh id placed
 * after `type` (constants) or first (types). */
static uint32_t dedup(spv_builder *b, uint32_t op, uint32_t type, const uint32_t *ops, uint32_t n) {
    if (b->oom) return 0;
    if ((b->tab_n + 1) * 2 > b->tab_cap && !tab_grow(b)) return 0;
    uint32_t key[20];
    if (n + 2 > 20) {
        b->oom = true;
        return 0;
    }
    key[0] = op;
    key[1] = type;
    if (n) memcpy(key + 2, ops, n * sizeof *ops);
    size_t klen = n + 2;
    uint32_t h = hash_words(key, klen);
    size_t j = h & (b->tab_cap - 1);
    while (b->tab[j].id) {
        spv_dedup *e = &b->tab[j];
        if (e->hash == h && e->len == klen && !memcmp(b->keys.w + e->off, key, klen * 4)) return e->id;
        j = (j + 1) & (b->tab_cap - 1);
    }
    if (!words_reserve(b, &b->keys, klen)) return 0;
    size_t off = b->keys.n;
    memcpy(b->keys.w + off, key, klen * 4);
    b->keys.n += klen;
    uint32_t id = spv_b_id(b);
    uint32_t w[20];
    uint32_t m = 0;
    if (type) w[m++] = type;
    w[m++] = id;
    if (n) memcpy(w + m, ops, n * sizeof *ops);
    spv_b_emit(b, SPV_SEC_GLOBAL, op, w, m + n);
    b->tab[j] = (spv_dedup){.hash = h, .id = id, .off = off, .len = klen};
    b->tab_n++;
    return id;
}

uint32_t spv_b_type(spv_builder *b, uint32_t op, const uint32_t *ops, uint32_t n) { return dedup(b, op, 0, ops, n); }

uint32_t spv_b_const(spv_builder *b, uint32_t op, uint32_t type, const uint32_t *ops, uint32_t n) {
    return dedup(b, op, type, ops, n);
}

bool spv_b_has_capability(const spv_builder *b, uint32_t cap) {
    for (size_t i = 0; i < b->n_caps; i++)
        if (b->caps[i] == cap) return true;
    return false;
}

void spv_b_capability(spv_builder *b, uint32_t cap) {
    if (b->oom || spv_b_has_capability(b, cap)) return;
    if (b->n_caps == b->cap_caps) {
        size_t nc = b->cap_caps ? b->cap_caps * 2 : 16;
        uint32_t *c = realloc(b->caps, nc * sizeof *c);
        if (!c) {
            b->oom = true;
            return;
        }
        b->caps = c;
        b->cap_caps = nc;
    }
    b->caps[b->n_caps++] = cap;
}

void spv_b_extension(spv_builder *b, const char *name) {
    for (size_t i = 0; i < b->n_ext; i++)
        if (!strcmp(b->ext[i], name)) return;
    if (b->n_ext == SPV_MAX_EXTENSIONS) {
        b->oom = true;
        return;
    }
    b->ext[b->n_ext++] = name;
}

uint32_t spv_b_glsl(spv_builder *b) {
    if (!b->glsl) {
        b->glsl = spv_b_id(b);
        spv_b_emit_str(b, SPV_SEC_EXT_IMPORT, SpvOpExtInstImport, &b->glsl, 1, "GLSL.std.450", NULL, 0);
    }
    return b->glsl;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

int spv_b_finish(spv_builder *b, uint32_t version, uint32_t **out, size_t *n) {
    *out = NULL;
    *n = 0;
    /* sorted so that the same module comes out whatever order features were met in */
    if (b->n_caps) qsort(b->caps, b->n_caps, sizeof *b->caps, cmp_u32);
    if (b->n_ext) qsort(b->ext, b->n_ext, sizeof *b->ext, cmp_str);
    b->sec[SPV_SEC_CAPABILITY].n = 0;
    b->sec[SPV_SEC_EXTENSION].n = 0;
    for (size_t i = 0; i < b->n_caps; i++) spv_b_emit(b, SPV_SEC_CAPABILITY, SpvOpCapability, &b->caps[i], 1);
    for (size_t i = 0; i < b->n_ext; i++)
        spv_b_emit_str(b, SPV_SEC_EXTENSION, SpvOpExtension, NULL, 0, b->ext[i], NULL, 0);
    if (b->oom) return -1;
    size_t total = 5;
    for (int s = 0; s < SPV_SEC_COUNT; s++) total += b->sec[s].n;
    uint32_t *w = malloc(total * sizeof *w);
    if (!w) return -1;
    w[0] = SpvMagicNumber;
    w[1] = version;
    w[2] = 0; /* generator: kiln has no registered tool id */
    w[3] = b->next_id;
    w[4] = 0;
    size_t at = 5;
    for (int s = 0; s < SPV_SEC_COUNT; s++) {
        if (b->sec[s].n) memcpy(w + at, b->sec[s].w, b->sec[s].n * sizeof *w);
        at += b->sec[s].n;
    }
    *out = w;
    *n = total;
    return 0;
}
