/* ir/ internals shared by the builder, verifier, printer and passes. Not for other rooms:
 * they read a kernel only through ir.h. */
#ifndef KILN_IR_IR_INTERNAL_H
#define KILN_IR_IR_INTERNAL_H

#include "base/error.h"
#include "ir/ir.h"
#include "ir/lower.h"

#include <stdarg.h>

/* One arena block; its data follows the header (rounded up to IR_ALIGN). */
typedef struct ir_block {
    struct ir_block *next;
    size_t cap, used;
} ir_block;

#define IR_ALIGN 16u
#define IR_MAX_NAME 64u
#define IR_MAX_TENSOR_MAPS 8u

typedef struct ir_value_info {
    ir_inst *def;  /* NULL once a pass removed it */
    ir_type type;
    bool closed;   /* its region has ended: the builder no longer accepts it as an operand */
} ir_value_info;

struct ir_for {
    ir_inst *inst;
    uint32_t n;
    bool ended;
};

struct ir_if {
    ir_inst *inst;
    uint32_t n;
    uint32_t phase;   /* 0: building then, 1: building else, 2: ended */
    ir_type *types;   /* result types, known from the then-yields */
};

/* An open construct and the region being appended to. */
typedef struct ir_open {
    ir_inst *inst;
    uint32_t region;
} ir_open;

struct ir_kernel {
    ir_block *blocks;
    char name[IR_MAX_NAME + 1];
    kiln_err error; /* the first builder error */
    bool failed;

    ir_type_desc *types;   /* [0] unused: type 0 is no type */
    uint32_t n_types, cap_types;
    ir_value_info *vals;   /* [0] unused: value 0 is IR_NONE */
    uint32_t n_vals, cap_vals;

    ir_param *params;
    uint32_t n_params, cap_params;
    uint32_t *buffers;     /* param index of each buffer */
    uint32_t n_buffers, cap_buffers;
    ir_spec *specs;
    uint32_t n_specs, cap_specs;
    ir_shared_decl *shared;
    uint32_t n_shared, cap_shared;

    uint32_t wg[3];
    ir_val wg_spec;
    bool wg_set;
    uint32_t occupancy; /* ir_set_occupancy: workgroups per compute unit, 0 none */
    bool launch_early;  /* ir_set_launch_early */
    uint32_t cluster;   /* ir_set_cluster: workgroups a cluster along x (0 or 1: none) */
    ir_tensor_map_decl tmaps[IR_MAX_TENSOR_MAPS];
    uint32_t n_tmaps;

    ir_region body;
    ir_open *open;
    uint32_t n_open, cap_open;
};

/* ---- arena and errors (kernel.c) ---- */
void *ir_alloc(ir_kernel *k, size_t size); /* zeroed; NULL (and an error) when out of memory */
/* Grows an arena array to hold need elements; returns the (maybe moved) array or NULL. */
void *ir_grow(ir_kernel *k, void *arr, uint32_t *cap, uint32_t need, size_t esz);
/* Records the kernel's first builder error (invalid input); ir_fail_oom: out of memory. */
void ir_fail(ir_kernel *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ir_fail_oom(ir_kernel *k);
bool ir_region_push(ir_kernel *k, ir_region *r, ir_inst *in);
ir_val ir_new_value(ir_kernel *k, ir_inst *def, ir_type t);
ir_type ir_type_find(const ir_kernel *k, const ir_type_desc *d); /* 0 if never interned */

/* ---- type helpers (types.c, values.c) ---- */
/* The element of a scalar or vector type; false for fragments and bad types. */
bool ir_type_elem(const ir_kernel *k, ir_type t, ir_scalar *elem, uint32_t *lanes);
/* Why a type descriptor is malformed (vector lanes, fragment shape), or NULL. */
const char *ir_type_problem(const ir_type_desc *d);
void ir_type_str(const ir_kernel *k, ir_type t, char *buf, size_t len);
bool ir_op_has_result(ir_op op);
bool ir_op_is_effect(ir_op op); /* stores, atomics, barriers, frag stores: never removed */
/* A spec value as its CONST encoding; 0, or -1 with why it does not fit the type. */
int ir_encode_spec_value(ir_scalar s, double v, int64_t *out, const char **why);

/* ---- the builder's core (values.c), used by memory.c and control.c ---- */
/* The region being appended to: the innermost open construct's, else the body. */
ir_region *ir_current(ir_kernel *k);
/* An operand must be a value whose region is still open (else a builder error). */
bool ir_use_ok(ir_kernel *k, const char *fn, ir_val v);
bool ir_uses_ok(ir_kernel *k, const char *fn, const ir_val *v, uint32_t n);
/* Checks an instruction with the verifier's rules, then appends it to the innermost open
 * region. Returns it, or NULL (with the error) when it breaks a rule. */
ir_inst *ir_build(ir_kernel *k, const char *fn, ir_op op, ir_type type, const ir_val *ops, uint32_t n, int64_t imm0,
                  int64_t imm1, int64_t imm2);
static inline ir_val ir_result_of(const ir_inst *in) { return in ? in->result : IR_NONE; }

/* ---- rewriting (lower.c): what the lowering passes build with ---- */
/* Passes append new instructions to `out` (the region being rewritten) without the
 * builder's checks; ir_lower verifies the kernel when they are done. */
typedef struct ir_rw {
    ir_kernel *k;
    ir_region *out;   /* where new instructions go */
    ir_region consts; /* the pass's constants, put at the top of the body when it ends */
} ir_rw;
/* For each instruction of every region (a construct's regions first, then the construct):
 * 1 when it appended the instruction's replacement to w->out, 0 to keep it, -1 on failure. */
typedef int (*ir_rw_fn)(ir_rw *w, ir_inst *in, void *ctx);
/* Runs fn over k's body; false when out of memory or fn failed. */
bool ir_rw_run(ir_kernel *k, ir_rw_fn fn, void *ctx);
/* The constant of t (encoding as CONST's imm[0]), one per pass and value. */
ir_val ir_rw_const(ir_rw *w, ir_type t, int64_t bits);
ir_val ir_rw_u32(ir_rw *w, uint32_t v);
/* Appends op to w->out with a new result value (when op has one); NULL when out of memory. */
ir_inst *ir_rw_inst(ir_rw *w, ir_op op, ir_type t, const ir_val *ops, uint32_t n, int64_t imm0, int64_t imm1,
                    int64_t imm2);
/* The same with an existing value as its result: v keeps its number and type and now
 * names the new instruction (which replaces its old definition). */
ir_inst *ir_rw_inst_into(ir_rw *w, ir_val v, ir_op op, const ir_val *ops, uint32_t n, int64_t imm0, int64_t imm1,
                         int64_t imm2);
/* The result of a new one- or two-operand instruction (b IR_NONE: one); IR_NONE when out of memory. */
ir_val ir_rw_op(ir_rw *w, ir_op op, ir_type t, ir_val a, ir_val b, int64_t imm0);
/* Appends an if on cond with n results to w->out: the values `results` (which keep their
 * numbers and now name the if's results) or, when NULL, new values of types[]. Both
 * regions are empty until filled and closed with ir_rw_yield. */
ir_inst *ir_rw_if(ir_rw *w, ir_val cond, uint32_t n, const ir_type *types, const ir_val *results);
bool ir_rw_yield(ir_rw *w, ir_region *r, const ir_val *v, uint32_t n);

/* ---- the lowering passes (lower.h): 0, or -1 (out of memory, with the kernel's error) ---- */
int ir_lower_async(ir_kernel *k);                          /* lower_async.c */
int ir_lower_masked(ir_kernel *k);                         /* lower_mask.c */
int ir_lower_half(ir_kernel *k, const ir_lower_opts *o); /* lower_half.c */

/* ---- verifier pieces (verify.c) ---- */
/* The per-op typing rules, shared by the builder (before it appends) and the verifier.
 * Operands must be values (1..n); their types may be anything. */
bool ir_check_op(const ir_kernel *k, const ir_inst *in, char *msg, size_t len);

/* ---- text (print.c) ---- */
typedef struct ir_sb {
    char *s;
    size_t n, cap;
    bool oom;
} ir_sb;
void ir_sb_printf(ir_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One instruction's line without indentation or newline (FOR/IF: their opening line). */
void ir_sb_inst(ir_sb *b, const ir_kernel *k, const ir_inst *in);

/* ---- constants (passes.c, print.c) ---- */
/* The CONST encoding of imm[0]: bool 0/1, i32 sign-extended, u32 zero-extended, f32 bits. */
static inline float ir_bits_f32(uint32_t u) { union { uint32_t u; float f; } x = { .u = u }; return x.f; }
static inline uint32_t ir_f32_bits(float f) { union { float f; uint32_t u; } x = { .f = f }; return x.u; }

#endif
