/* backend-spirv/ — a SPIR-V module builder: one word segment per logical-layout section,
 * de-duplicated types and constants, capability and extension sets. It knows SPIR-V's
 * module layout, not kiln's IR (the spv_*.c emitter files lower onto it). */
#ifndef KILN_BACKEND_SPIRV_SPV_BUILDER_H
#define KILN_BACKEND_SPIRV_SPV_BUILDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <spirv/unified1/spirv.h>

/* The sections in the order SPIR-V's logical layout requires (2.4 of the spec). */
typedef enum spv_section {
    SPV_SEC_CAPABILITY, SPV_SEC_EXTENSION, SPV_SEC_EXT_IMPORT, SPV_SEC_MEMORY_MODEL,
    SPV_SEC_ENTRY_POINT, SPV_SEC_EXEC_MODE, SPV_SEC_DEBUG, SPV_SEC_ANNOTATION,
    SPV_SEC_GLOBAL,   /* types, constants, global variables */
    SPV_SEC_FUNCTION,
    SPV_SEC_COUNT
} spv_section;

typedef struct spv_words {
    uint32_t *w;
    size_t n, cap;
} spv_words;

typedef struct spv_dedup {
    uint32_t hash, id;
    size_t off, len; /* the key in spv_builder.keys */
} spv_dedup;

#define SPV_MAX_EXTENSIONS 16

typedef struct spv_builder {
    spv_words sec[SPV_SEC_COUNT];
    uint32_t next_id;
    bool oom;           /* an allocation failed: every later call is a no-op */
    spv_words keys;     /* de-duplication keys: opcode, result type or 0, operands */
    spv_dedup *tab;
    size_t tab_cap, tab_n;
    uint32_t *caps;
    size_t n_caps, cap_caps;
    const char *ext[SPV_MAX_EXTENSIONS]; /* string literals */
    size_t n_ext;
    uint32_t glsl;      /* the GLSL.std.450 import, 0 until asked for */
} spv_builder;

void spv_b_init(spv_builder *b);
void spv_b_free(spv_builder *b);
uint32_t spv_b_id(spv_builder *b);

/* Appends op with n operand words to section s; returns the instruction's word offset in
 * that section (for patching forward references, e.g. loop phis). */
size_t spv_b_emit(spv_builder *b, spv_section s, uint32_t op, const uint32_t *ops, uint32_t n);
/* The same with the operands as arguments (each a uint32_t). */
size_t spv_b_emitv(spv_builder *b, spv_section s, uint32_t op, uint32_t n, ...);
/* An instruction with a literal string between leading and trailing operands (OpName,
 * OpMemberName, OpEntryPoint, OpExtension, OpExtInstImport). */
void spv_b_emit_str(spv_builder *b, spv_section s, uint32_t op, const uint32_t *pre, uint32_t npre,
                    const char *str, const uint32_t *post, uint32_t npost);
/* Patches one word of an emitted instruction. */
void spv_b_patch(spv_builder *b, spv_section s, size_t at, uint32_t word);

/* A type (result id first) or constant (result type, then result id), created once per
 * distinct opcode and operands. */
uint32_t spv_b_type(spv_builder *b, uint32_t op, const uint32_t *ops, uint32_t n);
uint32_t spv_b_const(spv_builder *b, uint32_t op, uint32_t type, const uint32_t *ops, uint32_t n);

void spv_b_capability(spv_builder *b, uint32_t cap);
bool spv_b_has_capability(const spv_builder *b, uint32_t cap);
void spv_b_extension(spv_builder *b, const char *name); /* name: a string literal */
uint32_t spv_b_glsl(spv_builder *b);

/* The module: header (version, bound), capabilities (sorted), extensions, then the
 * sections. 0, or -1 when out of memory. *out is malloc'ed. */
int spv_b_finish(spv_builder *b, uint32_t version, uint32_t **out, size_t *n);

#endif
