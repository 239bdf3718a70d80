/* gguf/ — reading (mmap, validated before use) and streaming writing of GGUF files.
 *
 * Every offset and size in a file is checked before anything is read through it;
 * a file that fails gets one error line naming the problem and the byte offset.
 * Values read from a file point into the mapping (no copies); they live as long
 * as the gguf_file. */
#ifndef KILN_GGUF_GGUF_H
#define KILN_GGUF_GGUF_H

#include "base/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_TENSOR_NAME 63 /* llama.cpp's GGML_MAX_NAME - 1 */
#define GGUF_MAX_KEY 65535
#define GGUF_MAX_ARRAY_DEPTH 8  /* arrays of arrays nest at most this deep */

/* Errors are base/error.h's kiln_err: one line, no trailing newline; "at byte N: ..." when
 * the offset is known. */

/* ---- metadata values -------------------------------------------------------------------- */

typedef enum gguf_vtype {
    GGUF_VT_U8 = 0, GGUF_VT_I8 = 1, GGUF_VT_U16 = 2, GGUF_VT_I16 = 3,
    GGUF_VT_U32 = 4, GGUF_VT_I32 = 5, GGUF_VT_F32 = 6, GGUF_VT_BOOL = 7,
    GGUF_VT_STR = 8, GGUF_VT_ARR = 9, GGUF_VT_U64 = 10, GGUF_VT_I64 = 11,
    GGUF_VT_F64 = 12,
    GGUF_VT_COUNT
} gguf_vtype;

typedef struct gguf_str {
    const char *ptr; /* not NUL-terminated */
    uint64_t len;
} gguf_str;

typedef struct gguf_array {
    gguf_vtype type; /* element type */
    uint64_t n;
    /* scalars: n packed little-endian elements (maybe unaligned: read with gguf_arr_at);
     * GGUF_VT_STR: gguf_str[n]; GGUF_VT_ARR: gguf_value[n] */
    const void *data;
} gguf_array;

typedef struct gguf_value {
    gguf_vtype type;
    union {
        uint64_t u;   /* U8 U16 U32 U64 */
        int64_t i;    /* I8 I16 I32 I64 */
        double f;     /* F32 (widened exactly) F64 */
        bool b;       /* BOOL */
        gguf_str str; /* STR */
        gguf_array arr; /* ARR */
    } v;
} gguf_value;

const char *gguf_vtype_name(gguf_vtype t);          /* "u32", "str", ...; "?" if unknown */
size_t gguf_vtype_size(gguf_vtype t);               /* bytes of a scalar in the file; 0 for STR/ARR */
gguf_value gguf_arr_at(const gguf_array *a, uint64_t i); /* element i (caller keeps i < n) */

/* ---- tensor types ----------------------------------------------------------------------- */

typedef enum gguf_ttype {
    GGUF_T_F32 = 0, GGUF_T_F16 = 1, GGUF_T_Q4_0 = 2, GGUF_T_Q4_1 = 3,
    GGUF_T_Q5_0 = 6, GGUF_T_Q5_1 = 7, GGUF_T_Q8_0 = 8, GGUF_T_Q8_1 = 9,
    GGUF_T_Q2_K = 10, GGUF_T_Q3_K = 11, GGUF_T_Q4_K = 12, GGUF_T_Q5_K = 13,
    GGUF_T_Q6_K = 14, GGUF_T_Q8_K = 15,
    GGUF_T_IQ2_XXS = 16, GGUF_T_IQ2_XS = 17, GGUF_T_IQ3_XXS = 18, GGUF_T_IQ1_S = 19,
    GGUF_T_IQ4_NL = 20, GGUF_T_IQ3_S = 21, GGUF_T_IQ2_S = 22, GGUF_T_IQ4_XS = 23,
    GGUF_T_I8 = 24, GGUF_T_I16 = 25, GGUF_T_I32 = 26, GGUF_T_I64 = 27, GGUF_T_F64 = 28,
    GGUF_T_IQ1_M = 29, GGUF_T_BF16 = 30, GGUF_T_TQ1_0 = 34, GGUF_T_TQ2_0 = 35,
    GGUF_T_MXFP4 = 39, GGUF_T_NVFP4 = 40, GGUF_T_Q1_0 = 41, GGUF_T_Q2_0 = 42,
    GGUF_T_COUNT = 43
} gguf_ttype;

typedef struct gguf_type_info {
    const char *name;    /* as ggml names it: "F32", "Q4_K", ... */
    uint32_t block;      /* elements per block */
    uint32_t block_bytes;
    bool convertible;    /* kiln can turn it into f32/bf16/f16 rows */
} gguf_type_info;

/* NULL for a type number ggml does not define (or has removed). */
const gguf_type_info *gguf_type_info_of(uint32_t type);
/* Whether kiln computes on the type in its blocks (Q4_0..Q8_0 and Q2_K..Q6_K): a weight of
 * such a type enters every product at its exact dequantized value (the oracle's contract
 * mode and the device plans alike), where other types are converted to 16 bits at load. */
bool gguf_type_is_block_quant(uint32_t type);
/* Parse a type name ("bf16", "Q4_K"; case-insensitive); -1 if unknown. */
int gguf_type_from_name(const char *name);

/* ---- reading ---------------------------------------------------------------------------- */

typedef struct gguf_tensor {
    const char *name;       /* NUL-terminated copy */
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous row length; unused dims are 1 */
    uint32_t type;          /* gguf_ttype */
    uint64_t offset;        /* relative to the data section */
    uint64_t nbytes;
    uint64_t info_offset;   /* file offset of this tensor's info record (for messages) */
    const uint8_t *data;    /* into the mapping */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Map and validate a file. NULL on failure, with err filled. */
gguf_file *gguf_open(const char *path, kiln_err *err);
/* Validate a buffer the caller keeps alive (fuzzing, tests). */
gguf_file *gguf_open_memory(const void *data, size_t size, kiln_err *err);
void gguf_close(gguf_file *g);

uint32_t gguf_version(const gguf_file *g);
uint64_t gguf_file_size(const gguf_file *g);
uint32_t gguf_alignment(const gguf_file *g);
uint64_t gguf_data_offset(const gguf_file *g); /* file offset of the data section */

uint64_t gguf_n_kv(const gguf_file *g);
const char *gguf_kv_key(const gguf_file *g, uint64_t i);
const gguf_value *gguf_kv_value(const gguf_file *g, uint64_t i);
const gguf_value *gguf_find(const gguf_file *g, const char *key); /* NULL if absent */

/* Typed lookups: 0 on success; -1 with err naming the key when it is missing or of
 * another type. gguf_get_int takes any integer type whose value fits; gguf_get_float
 * takes f32 or f64. */
int gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out, kiln_err *err);
int gguf_get_i32(const gguf_file *g, const char *key, int32_t *out, kiln_err *err);
int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out, kiln_err *err);
int gguf_get_f32(const gguf_file *g, const char *key, float *out, kiln_err *err);
int gguf_get_bool(const gguf_file *g, const char *key, bool *out, kiln_err *err);
int gguf_get_str(const gguf_file *g, const char *key, gguf_str *out, kiln_err *err);
int gguf_get_int(const gguf_file *g, const char *key, int64_t *out, kiln_err *err);
int gguf_get_float(const gguf_file *g, const char *key, double *out, kiln_err *err);
/* elem = GGUF_VT_COUNT accepts any element type. */
int gguf_get_arr(const gguf_file *g, const char *key, gguf_vtype elem, const gguf_array **out,
                 kiln_err *err);
/* Compare a gguf_str with a C string. */
bool gguf_str_eq(gguf_str s, const char *c);

uint64_t gguf_n_tensors(const gguf_file *g);
const gguf_tensor *gguf_tensor_at(const gguf_file *g, uint64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name); /* NULL if absent */

uint64_t gguf_tensor_nelements(const gguf_tensor *t);
uint64_t gguf_tensor_nrows(const gguf_tensor *t); /* product of ne[1..] */

/* ---- conversion ------------------------------------------------------------------------- */

/* Decode n elements (a multiple of the type's block) of packed type data into f32.
 * 0 on success, -1 if the type is not convertible or n is not a whole number of blocks. */
int gguf_decode_f32(uint32_t type, const void *src, float *dst, uint64_t n);

/* A block of a block-quantized type (gguf_type_is_block_quant) taken apart: element j's
 * value as ggml decodes it is s * (code[j] - offset) + m in f32, where
 *   Q4_0, Q5_0, Q8_0:  s = d; offset 8, 16, 128 (Q8_0's code is its signed byte + 128)
 *   Q4_1, Q5_1:        s = d, m = dm
 *   Q3_K, Q6_K:        s = d * sc[sub] (sub-blocks of 16), offset 4, 32
 *   Q2_K:              s = d * sc[sub], m = -(dm * mn[sub]) (sub-blocks of 16)
 *   Q4_K, Q5_K:        s = d * sc[sub], m = -(dm * mn[sub]) (sub-blocks of 32)
 * with d and dm f16 bits (d * sc one f32 product, as ggml rounds it). -1 for another type. */
typedef struct gguf_qblock {
    uint8_t code[256];
    uint16_t d, dm;
    int8_t sc[16];
    uint8_t mn[16];
} gguf_qblock;
int gguf_block_unpack(uint32_t type, const uint8_t *block, gguf_qblock *out);

/* Whether kiln can write the type from f32 (gguf_quantize_rows): the block-quantized
 * types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K. */
bool gguf_type_quantizable(uint32_t type);
/* Quantize n f32 values (a whole number of the type's blocks) into dst, ggml's blocks
 * (the type's block_bytes per block), choosing codes and scales by the method of ggml's
 * reference quantizers (quantize.c); deterministic. -1 with err for a type it does not
 * write, a partial block, or a value that is not finite or beyond f16's +-65504. */
int gguf_quantize_rows(uint32_t type, const float *src, void *dst, uint64_t n, kiln_err *err);

/* Rows [row0, row0+nrows) of a tensor as f32 / bf16 / f16 (round to nearest even). */
int gguf_tensor_rows_f32(const gguf_tensor *t, uint64_t row0, uint64_t nrows, float *dst,
                         kiln_err *err);
int gguf_tensor_rows_bf16(const gguf_tensor *t, uint64_t row0, uint64_t nrows, uint16_t *dst,
                          kiln_err *err);
int gguf_tensor_rows_f16(const gguf_tensor *t, uint64_t row0, uint64_t nrows, uint16_t *dst,
                         kiln_err *err);

/* ---- writing ---------------------------------------------------------------------------- */

/* A streaming writer: add metadata and tensor infos, then begin_data, then write each
 * tensor's bytes in order, in as many pieces as the caller likes. The file is written
 * to PATH.tmp and renamed on finish, so a failed write never leaves a half file. The
 * alignment is general.alignment when that key is added (u32, a power of two), else 32. */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_create(const char *path, kiln_err *err);
/* Deep-copies the value. Rejects a duplicate key. */
int gguf_writer_add_kv(gguf_writer *w, const char *key, const gguf_value *v, kiln_err *err);
int gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v, kiln_err *err);
int gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v, kiln_err *err);
int gguf_writer_add_f32(gguf_writer *w, const char *key, float v, kiln_err *err);
int gguf_writer_add_bool(gguf_writer *w, const char *key, bool v, kiln_err *err);
int gguf_writer_add_str(gguf_writer *w, const char *key, const char *s, kiln_err *err);
/* Array of scalars: data holds n packed little-endian elements of type elem. */
int gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *data,
                        uint64_t n, kiln_err *err);
/* Array of NUL-terminated strings. */
int gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n,
                            kiln_err *err);
/* Array of strings with explicit lengths (tokens may hold any bytes). */
int gguf_writer_add_arr_gstr(gguf_writer *w, const char *key, const gguf_str *strs, uint64_t n,
                             kiln_err *err);
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const uint64_t *ne, kiln_err *err);
/* Writes header, metadata, tensor infos and padding. No adds after this. */
int gguf_writer_begin_data(gguf_writer *w, kiln_err *err);
/* Appends bytes to the current tensor; a piece may span tensors. */
int gguf_writer_write(gguf_writer *w, const void *bytes, size_t n, kiln_err *err);
/* Checks every tensor got all its bytes, flushes, renames into place. */
int gguf_writer_finish(gguf_writer *w, kiln_err *err);
/* Frees; removes the temporary file if finish did not succeed. */
void gguf_writer_destroy(gguf_writer *w);

uint64_t gguf_writer_n_tensors(const gguf_writer *w);
uint64_t gguf_writer_tensor_nbytes(const gguf_writer *w, uint64_t i);

#endif
