/* Typed metadata lookups: a missing key or a value of another type is a clear error. */
#include "gguf/gguf.h"

#include <stdio.h>

static const gguf_value *want(const gguf_file *g, const char *key, gguf_vtype t, kiln_err *err) {
    const gguf_value *v = gguf_find(g, key);
    if (!v) {
        kiln_fail(err, KILN_ERR_INVALID, "metadata key '%s' is missing", key);
        return NULL;
    }
    if (t != GGUF_VT_COUNT && v->type != t) {
        if (err)
            kiln_fail(err, KILN_ERR_INVALID, "metadata key '%s' has type %s, expected %s", key,
                      gguf_vtype_name(v->type), gguf_vtype_name(t));
        return NULL;
    }
    return v;
}

int gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out, kiln_err *err) {
    const gguf_value *v = want(g, key, GGUF_VT_U32, err);
    if (!v) return -1;
    *out = (uint32_t)v->v.u;
    return 0;
}

int gguf_get_i32(const gguf_file *g, const char *key, int32_t *out, kiln_err *err) {
    const gguf_value *v = want(g, key, GGUF_VT_I32, err);
    if (!v) return -1;
    *out = (int32_t)v->v.i;
    return 0;
}

int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out, kiln_err *err) {
    const gguf_value *v = want(g, key, GGUF_VT_U64, err);
    if (!v) return -1;
    *out = v->v.u;
    return 0;
}

int gguf_get_f32(const gguf_file *g, const char *key, float *out, kiln_err *err) {
    const gguf_value *v = want(g, key, GGUF_VT_F32, err);
    if (!v) return -1;
    *out = (float)v->v.f;
    return 0;
}

int gguf_get_bool(const gguf_file *g, const char *key, bool *out, kiln_err *err) {
    const gguf_value *v = want(g, key, GGUF_VT_BOOL, err);
    if (!v) return -1;
    *out = v->v.b;
    return 0;
}

int gguf_get_str(const gguf_file *g, const char *key, gguf_str *out, kiln_err *err) {
    const gguf_value *v = want(g, key, GGUF_VT_STR, err);
    if (!v) return -1;
    *out = v->v.str;
    return 0;
}

int gguf_get_int(const gguf_file *g, const char *key, int64_t *out, kiln_err *err) {
    const gguf_value *v = want(g, key, GGUF_VT_COUNT, err);
    if (!v) return -1;
    switch (v->type) {
    case GGUF_VT_I8: case GGUF_VT_I16: case GGUF_VT_I32: case GGUF_VT_I64:
        *out = v->v.i;
        return 0;
    case GGUF_VT_U8: case GGUF_VT_U16: case GGUF_VT_U32: case GGUF_VT_U64:
        if (v->v.u > (uint64_t)INT64_MAX) break;
        *out = (int64_t)v->v.u;
        return 0;
    default:
        if (err)
            kiln_fail(err, KILN_ERR_INVALID, "metadata key '%s' has type %s, expected an integer", key,
                      gguf_vtype_name(v->type));
        return -1;
    }
    kiln_fail(err, KILN_ERR_INVALID, "metadata key '%s' value does not fit in int64", key);
    return -1;
}

int gguf_get_float(const gguf_file *g, const char *key, double *out, kiln_err *err) {
    const gguf_value *v = want(g, key, GGUF_VT_COUNT, err);
    if (!v) return -1;
    if (v->type != GGUF_VT_F32 && v->type != GGUF_VT_F64) {
        if (err)
            kiln_fail(err, KILN_ERR_INVALID, "metadata key '%s' has type %s, expected a float", key,
                      gguf_vtype_name(v->type));
        return -1;
    }
    *out = v->v.f;
    return 0;
}

int gguf_get_arr(const gguf_file *g, const char *key, gguf_vtype elem, const gguf_array **out,
                 kiln_err *err) {
    const gguf_value *v = want(g, key, GGUF_VT_ARR, err);
    if (!v) return -1;
    if (elem != GGUF_VT_COUNT && v->v.arr.type != elem) {
        if (err)
            kiln_fail(err, KILN_ERR_INVALID, "metadata key '%s' is an array of %s, expected %s", key,
                      gguf_vtype_name(v->v.arr.type), gguf_vtype_name(elem));
        return -1;
    }
    *out = &v->v.arr;
    return 0;
}
