/* Tensor and metadata value types. Block sizes and byte sizes follow ggml's
 * type_traits (ggml.c) and block structs (ggml-common.h); a wrong byte size here
 * would misplace every tensor after the first in a file. */
#include "gguf/gguf.h"

#include <ctype.h>

#define CONV true
#define RAW false

/* Numbers ggml retired (4, 5, 31-33, 36-38) have no name and read as undefined. */
static const gguf_type_info gguf_types[GGUF_T_COUNT] = {
    [GGUF_T_F32] = {"F32", 1, 4, CONV},
    [GGUF_T_F16] = {"F16", 1, 2, CONV},
    [GGUF_T_Q4_0] = {"Q4_0", 32, 18, CONV},      /* d, 16 nibble bytes */
    [GGUF_T_Q4_1] = {"Q4_1", 32, 20, CONV},      /* d, m, 16 */
    [GGUF_T_Q5_0] = {"Q5_0", 32, 22, CONV},      /* d, qh[4], 16 */
    [GGUF_T_Q5_1] = {"Q5_1", 32, 24, CONV},      /* d, m, qh[4], 16 */
    [GGUF_T_Q8_0] = {"Q8_0", 32, 34, CONV},      /* d, 32 */
    [GGUF_T_Q8_1] = {"Q8_1", 32, 36, RAW},       /* d, s, 32 */
    [GGUF_T_Q2_K] = {"Q2_K", 256, 84, CONV},     /* scales 16, qs 64, d, dmin */
    [GGUF_T_Q3_K] = {"Q3_K", 256, 110, CONV},    /* hmask 32, qs 64, scales 12, d */
    [GGUF_T_Q4_K] = {"Q4_K", 256, 144, CONV},    /* d, dmin, scales 12, qs 128 */
    [GGUF_T_Q5_K] = {"Q5_K", 256, 176, CONV},    /* d, dmin, scales 12, qh 32, qs 128 */
    [GGUF_T_Q6_K] = {"Q6_K", 256, 210, CONV},    /* ql 128, qh 64, scales 16, d */
    [GGUF_T_Q8_K] = {"Q8_K", 256, 292, RAW},     /* f32 d, qs 256, i16 bsums[16] */
    [GGUF_T_IQ2_XXS] = {"IQ2_XXS", 256, 66, RAW},
    [GGUF_T_IQ2_XS] = {"IQ2_XS", 256, 74, RAW},
    [GGUF_T_IQ3_XXS] = {"IQ3_XXS", 256, 98, RAW},
    [GGUF_T_IQ1_S] = {"IQ1_S", 256, 50, RAW},
    [GGUF_T_IQ4_NL] = {"IQ4_NL", 32, 18, RAW},
    [GGUF_T_IQ3_S] = {"IQ3_S", 256, 110, RAW},
    [GGUF_T_IQ2_S] = {"IQ2_S", 256, 82, RAW},
    [GGUF_T_IQ4_XS] = {"IQ4_XS", 256, 136, RAW},
    [GGUF_T_I8] = {"I8", 1, 1, RAW},
    [GGUF_T_I16] = {"I16", 1, 2, RAW},
    [GGUF_T_I32] = {"I32", 1, 4, RAW},
    [GGUF_T_I64] = {"I64", 1, 8, RAW},
    [GGUF_T_F64] = {"F64", 1, 8, RAW},
    [GGUF_T_IQ1_M] = {"IQ1_M", 256, 56, RAW},    /* qs 32, qh 16, scales 8; no d */
    [GGUF_T_BF16] = {"BF16", 1, 2, CONV},
    [GGUF_T_TQ1_0] = {"TQ1_0", 256, 54, RAW},    /* qs 48, qh 4, d */
    [GGUF_T_TQ2_0] = {"TQ2_0", 256, 66, RAW},    /* qs 64, d */
    [GGUF_T_MXFP4] = {"MXFP4", 32, 17, RAW},     /* e8m0 e, 16 */
    [GGUF_T_NVFP4] = {"NVFP4", 64, 36, RAW},
    [GGUF_T_Q1_0] = {"Q1_0", 128, 18, RAW},
    [GGUF_T_Q2_0] = {"Q2_0", 64, 18, RAW},
};

const gguf_type_info *gguf_type_info_of(uint32_t type) {
    if (type >= GGUF_T_COUNT || !gguf_types[type].name)
        return NULL;
    return &gguf_types[type];
}

bool gguf_type_is_block_quant(uint32_t type) {
    const gguf_type_info *ti = gguf_type_info_of(type);
    return ti && ti->convertible && ti->block > 1;
}

static bool gguf_name_eq_nocase(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return false;
    return *a == *b;
}

int gguf_type_from_name(const char *name) {
    if (!name)
        return -1;
    for (uint32_t t = 0; t < GGUF_T_COUNT; t++)
        if (gguf_types[t].name && gguf_name_eq_nocase(gguf_types[t].name, name))
            return (int)t;
    return -1;
}

static const struct {
    const char *name;
    size_t size;
} gguf_vtypes[GGUF_VT_COUNT] = {
    [GGUF_VT_U8] = {"u8", 1},   [GGUF_VT_I8] = {"i8", 1},     [GGUF_VT_U16] = {"u16", 2},
    [GGUF_VT_I16] = {"i16", 2}, [GGUF_VT_U32] = {"u32", 4},   [GGUF_VT_I32] = {"i32", 4},
    [GGUF_VT_F32] = {"f32", 4}, [GGUF_VT_BOOL] = {"bool", 1}, [GGUF_VT_STR] = {"str", 0},
    [GGUF_VT_ARR] = {"arr", 0}, [GGUF_VT_U64] = {"u64", 8},   [GGUF_VT_I64] = {"i64", 8},
    [GGUF_VT_F64] = {"f64", 8},
};

const char *gguf_vtype_name(gguf_vtype t) {
    /* the enum may hold any number read from a file: compare unsigned */
    if ((unsigned)t >= GGUF_VT_COUNT)
        return "?";
    return gguf_vtypes[t].name;
}

size_t gguf_vtype_size(gguf_vtype t) {
    if ((unsigned)t >= GGUF_VT_COUNT)
        return 0;
    return gguf_vtypes[t].size;
}
