/* Streaming GGUF writer (v3). Metadata and tensor infos are held until begin_data;
 * tensor bytes go straight to the file, so a multi-GB model never sits in memory. */
#define _POSIX_C_SOURCE 200809L
#include "gguf/gguf.h"
#include "gguf/names.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct wtensor {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint64_t offset, nbytes;
} wtensor;

struct gguf_writer {
    char *path, *tmp_path;
    FILE *f;
    uint32_t alignment;
    /* metadata */
    char **keys;
    gguf_value *values;
    uint64_t n_kv, cap_kv;
    gguf_names key_index;
    /* tensors */
    wtensor *tensors;
    uint64_t n_tensors, cap_tensors;
    uint64_t data_size; /* running, padded */
    /* data phase */
    bool began, finished;
    uint64_t cur, cur_done;
    void **allocs;
    size_t n_allocs, cap_allocs;
};

static void *walloc(gguf_writer *w, size_t bytes) {
    if (w->n_allocs == w->cap_allocs) {
        size_t cap = w->cap_allocs ? 2 * w->cap_allocs : 64;
        void **a = realloc(w->allocs, cap * sizeof *a);
        if (!a) return NULL;
        w->allocs = a;
        w->cap_allocs = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p) w->allocs[w->n_allocs++] = p;
    return p;
}

gguf_writer *gguf_writer_create(const char *path, kiln_err *err) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) {
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    size_t n = strlen(path);
    w->path = strdup(path);
    w->tmp_path = malloc(n + 5);
    if (!w->path || !w->tmp_path) {
        gguf_writer_destroy(w);
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memcpy(w->tmp_path, path, n);
    memcpy(w->tmp_path + n, ".tmp", 5);
    w->f = fopen(w->tmp_path, "wb");
    if (!w->f) {
        kiln_fail(err, KILN_ERR_UNAVAILABLE, "cannot create %s: %s", w->tmp_path, strerror(errno));
        gguf_writer_destroy(w);
        return NULL;
    }
    setvbuf(w->f, NULL, _IOFBF, 1 << 20);
    return w;
}

void gguf_writer_destroy(gguf_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    if (!w->finished && w->tmp_path && w->f) unlink(w->tmp_path);
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    for (uint64_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    for (size_t i = 0; i < w->n_allocs; i++) free(w->allocs[i]);
    free(w->allocs);
    free(w->keys);
    free(w->values);
    free(w->tensors);
    gguf_names_free(&w->key_index);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

/* Deep copy so the caller's buffers (or a reader's mapping) need not outlive the writer. */
static int copy_value(gguf_writer *w, gguf_value *dst, const gguf_value *src, int depth) {
    *dst = *src;
    if (src->type == GGUF_VT_STR) {
        char *p = walloc(w, src->v.str.len);
        if (!p) return -1;
        memcpy(p, src->v.str.ptr, src->v.str.len);
        dst->v.str.ptr = p;
    } else if (src->type == GGUF_VT_ARR) {
        const gguf_array *a = &src->v.arr;
        if (depth >= GGUF_MAX_ARRAY_DEPTH || a->type >= GGUF_VT_COUNT) return -1;
        if (a->type == GGUF_VT_STR || a->type == GGUF_VT_ARR) {
            size_t esz = a->type == GGUF_VT_STR ? sizeof(gguf_str) : sizeof(gguf_value);
            if (a->n > SIZE_MAX / esz) return -1;
            void *p = walloc(w, a->n * esz);
            if (!p) return -1;
            dst->v.arr.data = p;
            for (uint64_t i = 0; i < a->n; i++) {
                gguf_value e = gguf_arr_at(a, i), c;
                if (copy_value(w, &c, &e, depth + 1)) return -1;
                if (a->type == GGUF_VT_STR) ((gguf_str *)p)[i] = c.v.str;
                else ((gguf_value *)p)[i] = c;
            }
        } else {
            size_t bytes = a->n * gguf_vtype_size(a->type);
            void *p = walloc(w, bytes);
            if (!p) return -1;
            memcpy(p, a->data, bytes);
            dst->v.arr.data = p;
        }
    } else if (src->type >= GGUF_VT_COUNT) {
        return -1;
    }
    return 0;
}

int gguf_writer_add_kv(gguf_writer *w, const char *key, const gguf_value *v, kiln_err *err) {
    if (w->began) return kiln_fail(err, KILN_ERR_INVALID, "metadata key '%s' added after the data began", key);
    size_t klen = strlen(key);
    if (klen == 0 || klen > GGUF_MAX_KEY)
        return kiln_fail(err, KILN_ERR_INVALID, "metadata key length %zu is not in 1..%d", klen, GGUF_MAX_KEY);
    if (w->n_kv == w->cap_kv) {
        uint64_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        char **k = realloc(w->keys, cap * sizeof *k);
        if (k) w->keys = k;
        gguf_value *vs = realloc(w->values, cap * sizeof *vs);
        if (vs) w->values = vs;
        gguf_names idx;
        if (!k || !vs || gguf_names_init(&idx, cap)) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        for (uint64_t i = 0; i < w->n_kv; i++) gguf_names_put(&idx, w->keys[i], i);
        gguf_names_free(&w->key_index);
        w->key_index = idx;
        w->cap_kv = cap;
    }
    if (gguf_names_find(&w->key_index, key) >= 0)
        return kiln_fail(err, KILN_ERR_INVALID, "duplicate metadata key '%s'", key);
    if (strcmp(key, "general.alignment") == 0) {
        if (v->type != GGUF_VT_U32 || v->v.u == 0 || (v->v.u & (v->v.u - 1)))
            return kiln_fail(err, KILN_ERR_INVALID, "general.alignment must be a u32 power of two");
        if (w->n_tensors)
            return kiln_fail(err, KILN_ERR_INVALID, "general.alignment must be set before any tensor is added");
        w->alignment = (uint32_t)v->v.u;
    }
    char *k = strdup(key);
    if (!k || copy_value(w, &w->values[w->n_kv], v, 0)) {
        free(k);
        return kiln_fail(err, KILN_ERR_INVALID, "cannot store metadata key '%s' (out of memory or a bad value)", key);
    }
    w->keys[w->n_kv] = k;
    gguf_names_put(&w->key_index, k, w->n_kv);
    w->n_kv++;
    return 0;
}

int gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t x, kiln_err *err) {
    gguf_value v = {.type = GGUF_VT_U32, .v.u = x};
    return gguf_writer_add_kv(w, key, &v, err);
}

int gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t x, kiln_err *err) {
    gguf_value v = {.type = GGUF_VT_I32, .v.i = x};
    return gguf_writer_add_kv(w, key, &v, err);
}

int gguf_writer_add_f32(gguf_writer *w, const char *key, float x, kiln_err *err) {
    gguf_value v = {.type = GGUF_VT_F32, .v.f = x};
    return gguf_writer_add_kv(w, key, &v, err);
}

int gguf_writer_add_bool(gguf_writer *w, const char *key, bool x, kiln_err *err) {
    gguf_value v = {.type = GGUF_VT_BOOL, .v.b = x};
    return gguf_writer_add_kv(w, key, &v, err);
}

int gguf_writer_add_str(gguf_writer *w, const char *key, const char *s, kiln_err *err) {
    gguf_value v = {.type = GGUF_VT_STR, .v.str = {s, strlen(s)}};
    return gguf_writer_add_kv(w, key, &v, err);
}

int gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *data, uint64_t n,
                        kiln_err *err) {
    if (elem == GGUF_VT_STR || elem == GGUF_VT_ARR || elem >= GGUF_VT_COUNT)
        return kiln_fail(err, KILN_ERR_INVALID, "metadata key '%s': gguf_writer_add_arr takes scalar elements", key);
    gguf_value v = {.type = GGUF_VT_ARR, .v.arr = {elem, n, data}};
    return gguf_writer_add_kv(w, key, &v, err);
}

int gguf_writer_add_arr_gstr(gguf_writer *w, const char *key, const gguf_str *strs, uint64_t n,
                             kiln_err *err) {
    gguf_value v = {.type = GGUF_VT_ARR, .v.arr = {GGUF_VT_STR, n, strs}};
    return gguf_writer_add_kv(w, key, &v, err);
}

int gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n,
                            kiln_err *err) {
    gguf_str *s = malloc((n ? n : 1) * sizeof *s);
    if (!s) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < n; i++) s[i] = (gguf_str){strs[i], strlen(strs[i])};
    int r = gguf_writer_add_arr_gstr(w, key, s, n, err);
    free(s);
    return r;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const uint64_t *ne, kiln_err *err) {
    if (w->began) return kiln_fail(err, KILN_ERR_INVALID, "tensor '%s' added after the data began", name);
    size_t len = strlen(name);
    if (len == 0 || len > GGUF_MAX_TENSOR_NAME)
        return kiln_fail(err, KILN_ERR_INVALID, "tensor name '%s' length %zu is not in 1..%d", name, len,
                         GGUF_MAX_TENSOR_NAME);
    const gguf_type_info *ti = gguf_type_info_of(type);
    if (!ti) return kiln_fail(err, KILN_ERR_INVALID, "tensor '%s': unknown type %u", name, type);
    if (n_dims == 0 || n_dims > GGUF_MAX_DIMS)
        return kiln_fail(err, KILN_ERR_INVALID, "tensor '%s': n_dims %u", name, n_dims);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return kiln_fail(err, KILN_ERR_INVALID, "duplicate tensor name '%s'", name);
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    uint64_t nel = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        t.ne[d] = ne[d];
        if (ne[d] == 0 || ne[d] > (uint64_t)INT64_MAX || __builtin_mul_overflow(nel, ne[d], &nel))
            return kiln_fail(err, KILN_ERR_INVALID, "tensor '%s': bad dimension ne[%u] = %llu", name, d,
                             (unsigned long long)ne[d]);
    }
    if (t.ne[0] % ti->block)
        return kiln_fail(err, KILN_ERR_INVALID, "tensor '%s': row length %llu is not a multiple of %s's block of %u",
                         name, (unsigned long long)t.ne[0], ti->name, ti->block);
    if (__builtin_mul_overflow(nel / ti->block, (uint64_t)ti->block_bytes, &t.nbytes))
        return kiln_fail(err, KILN_ERR_INVALID, "tensor '%s': size overflows", name);
    t.offset = w->data_size;
    uint64_t padded = t.nbytes + (w->alignment - t.nbytes % w->alignment) % w->alignment;
    if (__builtin_add_overflow(w->data_size, padded, &w->data_size))
        return kiln_fail(err, KILN_ERR_INVALID, "data section overflows");
    if (w->n_tensors == w->cap_tensors) {
        uint64_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        wtensor *a = realloc(w->tensors, cap * sizeof *a);
        if (!a) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        w->tensors = a;
        w->cap_tensors = cap;
    }
    t.name = strdup(name);
    if (!t.name) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    w->tensors[w->n_tensors++] = t;
    return 0;
}

static int put(gguf_writer *w, const void *p, size_t n, kiln_err *err) {
    if (n && fwrite(p, 1, n, w->f) != n)
        return kiln_fail(err, KILN_ERR_UNAVAILABLE, "write to %s failed: %s", w->tmp_path, strerror(errno));
    return 0;
}

static int put_u32(gguf_writer *w, uint32_t v, kiln_err *err) { return put(w, &v, 4, err); }
static int put_u64(gguf_writer *w, uint64_t v, kiln_err *err) { return put(w, &v, 8, err); }

static int put_str(gguf_writer *w, const char *p, uint64_t n, kiln_err *err) {
    return put_u64(w, n, err) || put(w, p, n, err) ? -1 : 0;
}

static int put_zeros(gguf_writer *w, uint64_t n, kiln_err *err) {
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (put(w, zeros, k, err)) return -1;
        n -= k;
    }
    return 0;
}

static int put_payload(gguf_writer *w, const gguf_value *v, kiln_err *err) {
    uint8_t raw[8];
    switch (v->type) {
    case GGUF_VT_STR: return put_str(w, v->v.str.ptr, v->v.str.len, err);
    case GGUF_VT_ARR: {
        const gguf_array *a = &v->v.arr;
        if (put_u32(w, a->type, err) || put_u64(w, a->n, err)) return -1;
        if (a->type == GGUF_VT_STR || a->type == GGUF_VT_ARR) {
            for (uint64_t i = 0; i < a->n; i++) {
                gguf_value e = gguf_arr_at(a, i);
                if (put_payload(w, &e, err)) return -1;
            }
            return 0;
        }
        return put(w, a->data, a->n * gguf_vtype_size(a->type), err);
    }
    case GGUF_VT_U8: case GGUF_VT_U16: case GGUF_VT_U32: case GGUF_VT_U64:
    case GGUF_VT_I8: case GGUF_VT_I16: case GGUF_VT_I32: case GGUF_VT_I64:
        memcpy(raw, &v->v.u, 8); /* u and i share storage; little-endian: low bytes first */
        return put(w, raw, gguf_vtype_size(v->type), err);
    case GGUF_VT_F32: { float f = (float)v->v.f; return put(w, &f, 4, err); }
    case GGUF_VT_F64: return put(w, &v->v.f, 8, err);
    case GGUF_VT_BOOL: raw[0] = v->v.b; return put(w, raw, 1, err);
    default: return kiln_fail(err, KILN_ERR_INVALID, "bad metadata type %d", (int)v->type);
    }
}

int gguf_writer_begin_data(gguf_writer *w, kiln_err *err) {
    if (w->began) return kiln_fail(err, KILN_ERR_INVALID, "begin_data called twice");
    w->began = true;
    if (put(w, GGUF_MAGIC, 4, err) || put_u32(w, 3, err) || put_u64(w, w->n_tensors, err) ||
        put_u64(w, w->n_kv, err))
        return -1;
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (put_str(w, w->keys[i], strlen(w->keys[i]), err) || put_u32(w, w->values[i].type, err) ||
            put_payload(w, &w->values[i], err))
            return -1;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        if (put_str(w, t->name, strlen(t->name), err) || put_u32(w, t->n_dims, err)) return -1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (put_u64(w, t->ne[d], err)) return -1;
        if (put_u32(w, t->type, err) || put_u64(w, t->offset, err)) return -1;
    }
    if (w->n_tensors == 0) return 0; /* like ggml: no padding when there is no data section */
    long pos = ftell(w->f);
    if (pos < 0) return kiln_fail(err, KILN_ERR_UNAVAILABLE, "ftell failed: %s", strerror(errno));
    return put_zeros(w, (w->alignment - (uint64_t)pos % w->alignment) % w->alignment, err);
}

int gguf_writer_write(gguf_writer *w, const void *bytes, size_t n, kiln_err *err) {
    if (!w->began) return kiln_fail(err, KILN_ERR_INVALID, "tensor data written before begin_data");
    const uint8_t *p = bytes;
    while (n) {
        if (w->cur >= w->n_tensors)
            return kiln_fail(err, KILN_ERR_INVALID, "more tensor data written than the tensors hold");
        const wtensor *t = &w->tensors[w->cur];
        uint64_t left = t->nbytes - w->cur_done;
        size_t k = n < left ? n : (size_t)left;
        if (put(w, p, k, err)) return -1;
        p += k;
        n -= k;
        w->cur_done += k;
        if (w->cur_done == t->nbytes) {
            if (put_zeros(w, (w->alignment - t->nbytes % w->alignment) % w->alignment, err)) return -1;
            w->cur++;
            w->cur_done = 0;
        }
    }
    return 0;
}

int gguf_writer_finish(gguf_writer *w, kiln_err *err) {
    if (!w->began && gguf_writer_begin_data(w, err)) return -1;
    if (w->cur < w->n_tensors)
        return kiln_fail(err, KILN_ERR_INVALID, "tensor '%s' got %llu of its %llu bytes", w->tensors[w->cur].name,
                         (unsigned long long)w->cur_done, (unsigned long long)w->tensors[w->cur].nbytes);
    int rc = fflush(w->f);
    if (rc == 0) rc = fsync(fileno(w->f));
    if (fclose(w->f) != 0) rc = -1;
    w->f = NULL;
    if (rc != 0) {
        unlink(w->tmp_path);
        return kiln_fail(err, KILN_ERR_UNAVAILABLE, "cannot write %s: %s", w->tmp_path, strerror(errno));
    }
    if (rename(w->tmp_path, w->path) != 0) {
        int e = errno;
        unlink(w->tmp_path);
        return kiln_fail(err, KILN_ERR_UNAVAILABLE, "cannot rename %s to %s: %s", w->tmp_path, w->path, strerror(e));
    }
    w->finished = true;
    return 0;
}

uint64_t gguf_writer_n_tensors(const gguf_writer *w) { return w->n_tensors; }
uint64_t gguf_writer_tensor_nbytes(const gguf_writer *w, uint64_t i) { return w->tensors[i].nbytes; }
