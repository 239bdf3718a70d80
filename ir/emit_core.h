/* ir/emit_core.h — what both emitters (backend-ptx, backend-spirv) share, so each holds
 * only its target's instructions: the value table (IR value -> the target's value: an
 * LLVMValueRef, a SPIR-V id), the error that names the instruction being emitted, the
 * operand and type checks every lowering starts with, the op classes an emitter
 * dispatches on, and the walk over a region. It knows no target. */
#ifndef KILN_IR_EMIT_CORE_H
#define KILN_IR_EMIT_CORE_H

#include "base/error.h"
#include "ir/ir.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What an emitter does with an op: the dispatch of both emitters' walks. */
typedef enum ir_op_class {
    IR_CLASS_DECL,     /* CONST, PARAM, SPEC: declared before the walk */
    IR_CLASS_ID,       /* ID */
    IR_CLASS_ARITH,    /* ADD .. ROUNDEVEN, FMA: binary, unary and fused arithmetic */
    IR_CLASS_CMP,      /* CMP */
    IR_CLASS_SELECT,   /* SELECT */
    IR_CLASS_CONVERT,  /* CONVERT */
    IR_CLASS_BITCAST,  /* BITCAST */
    IR_CLASS_VECTOR,   /* VEC, EXTRACT */
    IR_CLASS_MEMORY,   /* LOAD, STORE, their masked forms, SHM_LOAD, SHM_STORE */
    IR_CLASS_ATOMIC,   /* ATOMIC */
    IR_CLASS_BARRIER,  /* BARRIER, FENCE */
    IR_CLASS_ASYNC,    /* ASYNC_COPY, ASYNC_COMMIT, ASYNC_WAIT (lowered away where a target has none) */
    IR_CLASS_SUBGROUP, /* SG_REDUCE, SG_SHUFFLE, SG_SHUFFLE_XOR, SG_BROADCAST */
    IR_CLASS_FRAGMENT, /* FRAG_FILL, FRAG_LOAD, FRAG_STORE, FRAG_MMA, FRAG_ELEMS, FRAG_FROM_ELEMS, FRAG_PAIR_SUB, WG_MMA, WG_WAIT */
    IR_CLASS_SYNC,     /* GRID_WAIT, PREFETCH (hints a target may drop), MBAR_*, TMA_LOAD, CLUSTER_SYNC */
    IR_CLASS_CONTROL,  /* FOR, IF, YIELD */
    IR_CLASS_UNKNOWN
} ir_op_class;

ir_op_class ir_op_class_of(ir_op op);

/* One emitter run's shared state; an emitter's context holds one. */
typedef struct ir_emit {
    const ir_kernel *k;
    const char *target; /* "ptx", "spirv": the first word of every message */
    kiln_err *err;      /* the caller's error for the first failure (may be NULL) */
    kiln_code code;     /* what a failure is: unsupported (the kernel needs what the caps lack)
                         * unless an emitter says otherwise before failing */
    bool failed;
    const ir_inst *cur; /* the instruction being emitted, named in messages */
    uintptr_t *val;     /* IR value -> the target's value, 0 while undefined */
    uint32_t n_val;
} ir_emit;

/* Sets e up for k (its value table sized for every value); 0, or -1 (and failed, out of
 * memory) when the table cannot be allocated. */
int ir_emit_init(ir_emit *e, const ir_kernel *k, const char *target, kiln_err *err);
void ir_emit_free(ir_emit *e);

/* The first failure wins: "TARGET: kernel 'K': %N = OP: what" (the op named when one is
 * being emitted, its result when it has one), coded e->code; later calls change nothing.
 * ir_emit_fail_code sets the code first (out of memory, a target library's failure). */
void ir_emit_fail_code(ir_emit *e, kiln_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void ir_emit_fail(ir_emit *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ir_emit_vfail(ir_emit *e, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* The target value of v; 0 (and a failure) when v has none yet. */
uintptr_t ir_emit_get(ir_emit *e, ir_val v);
/* Whether v already has a target value (no failure when not). */
bool ir_emit_has(const ir_emit *e, ir_val v);
/* Records v's target value; a failure when v is out of range or t is 0. */
void ir_emit_set(ir_emit *e, ir_val v, uintptr_t t);
/* in has at least n operands (else a failure). */
bool ir_emit_need(ir_emit *e, const ir_inst *in, uint32_t n);
/* The element and lane count of a scalar or vector type: false for fragments (no
 * failure: the caller says what it expected) and for unknown types (a failure). */
bool ir_emit_tinfo(ir_emit *e, ir_type t, ir_scalar *s, uint32_t *lanes);

/* Emits each instruction of r with emit_inst (e->cur set to it, restored after), until a
 * failure; returns the region's closing YIELD, if any. */
typedef void (*ir_emit_inst_fn)(void *ctx, const ir_inst *in);
const ir_inst *ir_emit_region(ir_emit *e, const ir_region *r, ir_emit_inst_fn emit_inst, void *ctx);

/* The first instruction in r (recursively) of class c, or NULL. */
const ir_inst *ir_emit_find_class(const ir_region *r, ir_op_class c);
/* The first instruction in r (recursively) of op, or NULL. */
const ir_inst *ir_emit_find_op(const ir_region *r, ir_op op);

#endif
