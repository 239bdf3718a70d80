/* GGUF reader: maps the file, then validates every count, length, offset and size before
 * anything is read through it. Values point into the mapping. */
#define _POSIX_C_SOURCE 200809L
#include "gguf/gguf.h"
#include "gguf/names.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct gguf_file {
    const uint8_t *base;
    uint64_t size;
    bool mapped;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    char **keys;
    gguf_value *values;
    uint64_t *kv_offsets; /* file offset of each entry, for messages */
    uint64_t n_tensors;
    gguf_tensor *tensors;
    gguf_names key_index;
    gguf_names tensor_index;
    /* side allocations for string arrays and nested arrays, freed on close */
    void **allocs;
    size_t n_allocs, cap_allocs;
};

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    kiln_err *err;
} cursor;

/* kiln_fail with the offset first: "at byte N: ...". */
static int fail(kiln_err *err, kiln_code code, uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(kiln_err *err, kiln_code code, uint64_t offset, const char *fmt, ...) {
    if (!err) return -1;
    err->code = code;
    int k = snprintf(err->msg, sizeof err->msg, "at byte %llu: ", (unsigned long long)offset);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg + k, sizeof err->msg - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

static int need(cursor *c, uint64_t n, const char *what) {
    if (n > c->size - c->pos)
        return fail(c->err, KILN_ERR_INVALID, c->pos, "%s (%llu bytes) runs past the end of the file (%llu bytes)",
                    what, (unsigned long long)n, (unsigned long long)c->size);
    return 0;
}

static int rd(cursor *c, void *out, uint64_t n, const char *what) {
    if (need(c, n, what)) return -1;
    memcpy(out, c->base + c->pos, n);
    c->pos += n;
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static int rd_u64(cursor *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

static int rd_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t at = c->pos, len;
    if (rd_u64(c, &len, what)) return -1;
    if (len > c->size - c->pos)
        return fail(c->err, KILN_ERR_INVALID, at, "%s length %llu runs past the end of the file (%llu bytes)", what,
                    (unsigned long long)len, (unsigned long long)c->size);
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return 0;
}

static void *track(gguf_file *g, size_t bytes) {
    if (g->n_allocs == g->cap_allocs) {
        size_t cap = g->cap_allocs ? g->cap_allocs * 2 : 16;
        void **a = realloc(g->allocs, cap * sizeof *a);
        if (!a) return NULL;
        g->allocs = a;
        g->cap_allocs = cap;
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (p) g->allocs[g->n_allocs++] = p;
    return p;
}

/* Smallest number of file bytes one element of this type can occupy: bounds counts. */
static uint64_t min_elem_bytes(gguf_vtype t) {
    if (t == GGUF_VT_STR) return 8;
    if (t == GGUF_VT_ARR) return 12;
    return gguf_vtype_size(t);
}

static int rd_value(gguf_file *g, cursor *c, gguf_vtype t, gguf_value *v, int depth);

static int rd_array(gguf_file *g, cursor *c, gguf_value *v, int depth) {
    uint64_t at = c->pos;
    uint32_t et;
    uint64_t n;
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return fail(c->err, KILN_ERR_INVALID, at, "arrays nested deeper than %d levels", GGUF_MAX_ARRAY_DEPTH);
    if (rd_u32(c, &et, "array element type")) return -1;
    if (et >= GGUF_VT_COUNT)
        return fail(c->err, KILN_ERR_INVALID, at, "unknown array element type %u", et);
    if (rd_u64(c, &n, "array count")) return -1;
    uint64_t min = min_elem_bytes((gguf_vtype)et);
    if (n > (c->size - c->pos) / min)
        return fail(c->err, KILN_ERR_INVALID, at + 4, "array count %llu cannot fit in the %llu bytes left in the file",
                    (unsigned long long)n, (unsigned long long)(c->size - c->pos));
    v->type = GGUF_VT_ARR;
    v->v.arr.type = (gguf_vtype)et;
    v->v.arr.n = n;
    if (et == GGUF_VT_STR) {
        gguf_str *s = track(g, n * sizeof *s);
        if (!s)
            return fail(c->err, KILN_ERR_NOMEM, at, "out of memory for an array of %llu strings",
                        (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++)
            if (rd_str(c, &s[i], "string in array")) return -1;
        v->v.arr.data = s;
    } else if (et == GGUF_VT_ARR) {
        gguf_value *a = track(g, n * sizeof *a);
        if (!a)
            return fail(c->err, KILN_ERR_NOMEM, at, "out of memory for an array of %llu arrays", (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++)
            if (rd_array(g, c, &a[i], depth + 1)) return -1;
        v->v.arr.data = a;
    } else {
        if (et == GGUF_VT_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (c->base[c->pos + i] > 1)
                    return fail(c->err, KILN_ERR_INVALID, c->pos + i, "bool value %u is neither 0 nor 1",
                                c->base[c->pos + i]);
        v->v.arr.data = c->base + c->pos;
        c->pos += n * min;
    }
    return 0;
}

static int rd_value(gguf_file *g, cursor *c, gguf_vtype t, gguf_value *v, int depth) {
    uint64_t at = c->pos;
    v->type = t;
    if (t == GGUF_VT_STR) return rd_str(c, &v->v.str, "string value");
    if (t == GGUF_VT_ARR) return rd_array(g, c, v, depth);
    uint8_t raw[8];
    if (rd(c, raw, gguf_vtype_size(t), "metadata value")) return -1;
    if (t == GGUF_VT_BOOL && raw[0] > 1)
        return fail(c->err, KILN_ERR_INVALID, at, "bool value %u is neither 0 nor 1", raw[0]);
    gguf_array one = {t, 1, raw};
    gguf_value e = gguf_arr_at(&one, 0);
    v->v = e.v;
    return 0;
}

gguf_value gguf_arr_at(const gguf_array *a, uint64_t i) {
    gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = a->type;
    const uint8_t *p = (const uint8_t *)a->data + i * gguf_vtype_size(a->type);
    switch (a->type) {
    case GGUF_VT_U8: v.v.u = p[0]; break;
    case GGUF_VT_I8: v.v.i = (int8_t)p[0]; break;
    case GGUF_VT_U16: { uint16_t x; memcpy(&x, p, 2); v.v.u = x; break; }
    case GGUF_VT_I16: { int16_t x; memcpy(&x, p, 2); v.v.i = x; break; }
    case GGUF_VT_U32: { uint32_t x; memcpy(&x, p, 4); v.v.u = x; break; }
    case GGUF_VT_I32: { int32_t x; memcpy(&x, p, 4); v.v.i = x; break; }
    case GGUF_VT_F32: { float x; memcpy(&x, p, 4); v.v.f = x; break; }
    case GGUF_VT_BOOL: v.v.b = p[0] != 0; break;
    case GGUF_VT_U64: { uint64_t x; memcpy(&x, p, 8); v.v.u = x; break; }
    case GGUF_VT_I64: { int64_t x; memcpy(&x, p, 8); v.v.i = x; break; }
    case GGUF_VT_F64: { double x; memcpy(&x, p, 8); v.v.f = x; break; }
    case GGUF_VT_STR: v.v.str = ((const gguf_str *)a->data)[i]; break;
    case GGUF_VT_ARR: v = ((const gguf_value *)a->data)[i]; break;
    default: break;
    }
    return v;
}

static int rd_kvs(gguf_file *g, cursor *c) {
    for (uint64_t i = 0; i < g->n_kv; i++) {
        uint64_t at = c->pos;
        g->kv_offsets[i] = at;
        gguf_str key;
        if (rd_str(c, &key, "metadata key")) return -1;
        if (key.len == 0 || key.len > GGUF_MAX_KEY)
            return fail(c->err, KILN_ERR_INVALID, at, "metadata key length %llu is not in 1..%d",
                        (unsigned long long)key.len, GGUF_MAX_KEY);
        if (memchr(key.ptr, 0, key.len)) return fail(c->err, KILN_ERR_INVALID, at, "metadata key contains a NUL byte");
        g->keys[i] = strndup(key.ptr, key.len);
        if (!g->keys[i]) return fail(c->err, KILN_ERR_NOMEM, at, "out of memory");
        if (gguf_names_find(&g->key_index, g->keys[i]) >= 0)
            return fail(c->err, KILN_ERR_INVALID, at, "duplicate metadata key '%s'", g->keys[i]);
        gguf_names_put(&g->key_index, g->keys[i], i);
        uint64_t tat = c->pos;
        uint32_t t;
        if (rd_u32(c, &t, "metadata value type")) return -1;
        if (t >= GGUF_VT_COUNT)
            return fail(c->err, KILN_ERR_INVALID, tat, "unknown metadata value type %u for key '%s'", t, g->keys[i]);
        if (rd_value(g, c, (gguf_vtype)t, &g->values[i], 0)) return -1;
    }
    return 0;
}

static int rd_tensor_infos(gguf_file *g, cursor *c) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint64_t at = c->pos;
        t->info_offset = at;
        gguf_str name;
        if (rd_str(c, &name, "tensor name")) return -1;
        if (name.len == 0 || name.len > GGUF_MAX_TENSOR_NAME)
            return fail(c->err, KILN_ERR_INVALID, at, "tensor name length %llu is not in 1..%d",
                        (unsigned long long)name.len, GGUF_MAX_TENSOR_NAME);
        if (memchr(name.ptr, 0, name.len)) return fail(c->err, KILN_ERR_INVALID, at, "tensor name contains a NUL byte");
        t->name = strndup(name.ptr, name.len);
        if (!t->name) return fail(c->err, KILN_ERR_NOMEM, at, "out of memory");
        if (gguf_names_find(&g->tensor_index, t->name) >= 0)
            return fail(c->err, KILN_ERR_INVALID, at, "duplicate tensor name '%s'", t->name);
        gguf_names_put(&g->tensor_index, t->name, i);
        uint64_t dat = c->pos;
        if (rd_u32(c, &t->n_dims, "tensor n_dims")) return -1;
        if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
            return fail(c->err, KILN_ERR_INVALID, dat, "tensor '%s' has n_dims %u (must be 1..%d)", t->name, t->n_dims,
                        GGUF_MAX_DIMS);
        uint64_t nel = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t nat = c->pos;
            if (rd_u64(c, &t->ne[d], "tensor dimension")) return -1;
            if (t->ne[d] == 0)
                return fail(c->err, KILN_ERR_INVALID, nat, "tensor '%s' has a zero dimension ne[%u]", t->name, d);
            if (t->ne[d] > (uint64_t)INT64_MAX || __builtin_mul_overflow(nel, t->ne[d], &nel) ||
                nel > (uint64_t)INT64_MAX)
                return fail(c->err, KILN_ERR_INVALID, nat, "tensor '%s' dimensions overflow 64 bits", t->name);
        }
        uint64_t tat = c->pos;
        if (rd_u32(c, &t->type, "tensor type")) return -1;
        const gguf_type_info *ti = gguf_type_info_of(t->type);
        if (!ti) return fail(c->err, KILN_ERR_INVALID, tat, "tensor '%s' has unknown type %u", t->name, t->type);
        if (t->ne[0] % ti->block)
            return fail(c->err, KILN_ERR_INVALID, dat,
                        "tensor '%s' row length %llu is not a multiple of %s's block of %u", t->name,
                        (unsigned long long)t->ne[0], ti->name, ti->block);
        if (__builtin_mul_overflow(nel / ti->block, (uint64_t)ti->block_bytes, &t->nbytes))
            return fail(c->err, KILN_ERR_INVALID, dat, "tensor '%s' byte size overflows 64 bits", t->name);
        uint64_t oat = c->pos;
        if (rd_u64(c, &t->offset, "tensor offset")) return -1;
        if (t->offset % g->alignment)
            return fail(c->err, KILN_ERR_INVALID, oat, "tensor '%s' offset %llu is not aligned to %u", t->name,
                        (unsigned long long)t->offset, g->alignment);
    }
    return 0;
}

static int cmp_by_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int check_tensor_data(gguf_file *g, kiln_err *err) {
    if (g->n_tensors == 0) return 0;
    if (g->data_offset > g->size)
        return fail(err, KILN_ERR_INVALID, g->size, "data section (at byte %llu) starts past the end of the file",
                    (unsigned long long)g->data_offset);
    uint64_t room = g->size - g->data_offset;
    gguf_tensor **order = malloc(g->n_tensors * sizeof *order);
    if (!order) return fail(err, KILN_ERR_NOMEM, 0, "out of memory");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        if (t->offset > room || t->nbytes > room - t->offset) {
            free(order);
            return fail(err, KILN_ERR_INVALID, t->info_offset,
                        "tensor '%s' data [%llu, +%llu) lies outside the file (data section holds %llu bytes)",
                        t->name, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                        (unsigned long long)room);
        }
        t->data = g->base + g->data_offset + t->offset;
        order[i] = t;
    }
    qsort(order, g->n_tensors, sizeof *order, cmp_by_offset);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const gguf_tensor *p = order[i - 1], *t = order[i];
        if (p->offset + p->nbytes > t->offset) {
            int r = fail(err, KILN_ERR_INVALID, t->info_offset,
                         "tensor '%s' data at %llu overlaps tensor '%s' [%llu, +%llu)", t->name,
                         (unsigned long long)t->offset, p->name, (unsigned long long)p->offset,
                         (unsigned long long)p->nbytes);
            free(order);
            return r;
        }
    }
    free(order);
    return 0;
}

static int rd_alignment(gguf_file *g, kiln_err *err) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gguf_names_find(&g->key_index, "general.alignment");
    if (i < 0) return 0;
    const gguf_value *v = &g->values[i];
    if (v->type != GGUF_VT_U32)
        return fail(err, KILN_ERR_INVALID, g->kv_offsets[i], "general.alignment has type %s, expected u32",
                    gguf_vtype_name(v->type));
    if (v->v.u == 0 || (v->v.u & (v->v.u - 1)))
        return fail(err, KILN_ERR_INVALID, g->kv_offsets[i], "general.alignment %llu is not a power of two",
                    (unsigned long long)v->v.u);
    g->alignment = (uint32_t)v->v.u;
    return 0;
}

static int parse(gguf_file *g, kiln_err *err) {
    cursor c = {g->base, g->size, 0, err};
    char magic[4];
    if (rd(&c, magic, 4, "magic")) return -1;
    if (memcmp(magic, GGUF_MAGIC, 4)) return fail(err, KILN_ERR_INVALID, 0, "bad magic: not a GGUF file");
    if (rd_u32(&c, &g->version, "version")) return -1;
    if (g->version != 2 && g->version != 3) {
        if (g->version == 1)
            return fail(err, KILN_ERR_UNSUPPORTED, 4, "GGUF version 1 is not supported (v2 and v3 are)");
        return fail(err, KILN_ERR_UNSUPPORTED, 4, "unsupported GGUF version %u%s", g->version,
                    (g->version & 0xffff) == 0 ? " (a big-endian file?)" : "");
    }
    if (rd_u64(&c, &g->n_tensors, "tensor count")) return -1;
    if (rd_u64(&c, &g->n_kv, "metadata count")) return -1;
    /* each metadata entry is >= 13 bytes, each tensor info >= 33 */
    if (g->n_kv > (c.size - c.pos) / 13)
        return fail(err, KILN_ERR_INVALID, 16, "metadata count %llu cannot fit in the file",
                    (unsigned long long)g->n_kv);
    if (g->n_tensors > (c.size - c.pos) / 33)
        return fail(err, KILN_ERR_INVALID, 8, "tensor count %llu cannot fit in the file",
                    (unsigned long long)g->n_tensors);
    g->keys = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->keys);
    g->values = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->values);
    g->kv_offsets = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv_offsets);
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    if (!g->keys || !g->values || !g->kv_offsets || !g->tensors || gguf_names_init(&g->key_index, g->n_kv) ||
        gguf_names_init(&g->tensor_index, g->n_tensors))
        return fail(err, KILN_ERR_NOMEM, 0, "out of memory");
    if (rd_kvs(g, &c)) return -1;
    if (rd_alignment(g, err)) return -1;
    if (rd_tensor_infos(g, &c)) return -1;
    g->data_offset = c.pos + (g->alignment - c.pos % g->alignment) % g->alignment;
    return check_tensor_data(g, err);
}

static gguf_file *open_buffer(const void *data, size_t size, bool mapped, kiln_err *err) {
    gguf_file *g = calloc(1, sizeof *g);
    if (!g) {
        fail(err, KILN_ERR_NOMEM, 0, "out of memory");
        if (mapped) munmap((void *)data, size);
        return NULL;
    }
    g->base = data;
    g->size = size;
    g->mapped = mapped;
    if (parse(g, err)) {
        gguf_close(g);
        return NULL;
    }
    return g;
}

gguf_file *gguf_open_memory(const void *data, size_t size, kiln_err *err) {
    return open_buffer(data, size, false, err);
}

gguf_file *gguf_open(const char *path, kiln_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        kiln_fail(err, KILN_ERR_UNAVAILABLE, "cannot open: %s", strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        kiln_fail(err, KILN_ERR_INVALID, "not a regular file");
        close(fd);
        return NULL;
    }
    if (st.st_size == 0) {
        close(fd);
        fail(err, KILN_ERR_INVALID, 0, "empty file: not a GGUF file");
        return NULL;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        kiln_fail(err, KILN_ERR_UNAVAILABLE, "cannot map: %s", strerror(errno));
        return NULL;
    }
    return open_buffer(p, (size_t)st.st_size, true, err);
}

void gguf_close(gguf_file *g) {
    if (!g) return;
    if (g->keys)
        for (uint64_t i = 0; i < g->n_kv; i++) free(g->keys[i]);
    if (g->tensors)
        for (uint64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    for (size_t i = 0; i < g->n_allocs; i++) free(g->allocs[i]);
    free(g->allocs);
    free(g->keys);
    free(g->values);
    free(g->kv_offsets);
    free(g->tensors);
    gguf_names_free(&g->key_index);
    gguf_names_free(&g->tensor_index);
    if (g->mapped) munmap((void *)g->base, g->size);
    free(g);
}

uint32_t gguf_version(const gguf_file *g) { return g->version; }
uint64_t gguf_file_size(const gguf_file *g) { return g->size; }
uint32_t gguf_alignment(const gguf_file *g) { return g->alignment; }
uint64_t gguf_data_offset(const gguf_file *g) { return g->data_offset; }
uint64_t gguf_n_kv(const gguf_file *g) { return g->n_kv; }
const char *gguf_kv_key(const gguf_file *g, uint64_t i) { return g->keys[i]; }
const gguf_value *gguf_kv_value(const gguf_file *g, uint64_t i) { return &g->values[i]; }
uint64_t gguf_n_tensors(const gguf_file *g) { return g->n_tensors; }
const gguf_tensor *gguf_tensor_at(const gguf_file *g, uint64_t i) { return &g->tensors[i]; }

const gguf_value *gguf_find(const gguf_file *g, const char *key) {
    int64_t i = gguf_names_find(&g->key_index, key);
    return i < 0 ? NULL : &g->values[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name) {
    int64_t i = gguf_names_find(&g->tensor_index, name);
    return i < 0 ? NULL : &g->tensors[i];
}

uint64_t gguf_tensor_nelements(const gguf_tensor *t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

uint64_t gguf_tensor_nrows(const gguf_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

bool gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}
