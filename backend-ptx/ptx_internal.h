/* The PTX emitter's shared state: one ctx per ptx_emit call, passed between the
 * lowering files (ptx_emit.c walks the kernel, ptx_ops.c lowers arithmetic and
 * conversions, ptx_mem.c memory and atomics, ptx_sg.c ids, barriers and subgroups,
 * ptx_target.c owns LLVM's target machine). */
#ifndef KILN_BACKEND_PTX_PTX_INTERNAL_H
#define KILN_BACKEND_PTX_PTX_INTERNAL_H

#include "base/error.h"
#include "ir/emit_core.h"
#include "ir/ir.h"
#include "runtime/caps.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

typedef struct ptx_ctx {
    ir_emit e;            /* the value table (IR value -> LLVMValueRef), errors, the instruction being lowered */
    const ir_kernel *k;
    const rt_caps *c;
    unsigned sm;          /* the target architecture, e.g. 90 */
    bool arch_a;          /* sm_XXa: the kernel uses wg.mma */

    LLVMContextRef lc;
    LLVMModuleRef m;
    LLVMBuilderRef b;
    LLVMValueRef fn;

    LLVMValueRef *buf;    /* buffer index -> its pointer argument */
    uint32_t n_buf;
    LLVMValueRef *shm;    /* workgroup array -> its addrspace(3) global */
    uint32_t n_shm;
    uint32_t wg[3];       /* the workgroup size */
    char map_param[8][96]; /* each tensor map's .param symbol (ptx_sync.c's tma.load names it) */
} ptx_ctx;

/* ---- ptx_emit.c: the emitter core's calls, typed for LLVM ---- */
void ptx_fail(ptx_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline LLVMValueRef ptx_V(ptx_ctx *x, ir_val v) { return (LLVMValueRef)ir_emit_get(&x->e, v); }
static inline void ptx_def(ptx_ctx *x, ir_val v, LLVMValueRef r) { ir_emit_set(&x->e, v, (uintptr_t)r); }
/* the scalar and lane count of a scalar/vector type; false (and failed) for fragments */
bool ptx_tinfo(ptx_ctx *x, ir_type t, ir_scalar *s, uint32_t *lanes);

/* ---- ptx_ops.c: types, constants, arithmetic, conversions ---- */
LLVMTypeRef ptx_t_rep(ptx_ctx *x, ir_scalar s, uint32_t lanes);   /* a value in registers */
LLVMTypeRef ptx_t_store(ptx_ctx *x, ir_scalar s, uint32_t lanes); /* an element in memory */
LLVMTypeRef ptx_t_i32(ptx_ctx *x);
LLVMValueRef ptx_c_i32(ptx_ctx *x, uint32_t v);
LLVMValueRef ptx_c_scalar(ptx_ctx *x, ir_scalar s, uint64_t bits);
LLVMValueRef ptx_c_splat(ptx_ctx *x, ir_scalar s, uint32_t lanes, uint64_t bits); /* lanes 1: the scalar */
LLVMValueRef ptx_call(ptx_ctx *x, const char *name, LLVMTypeRef ret, LLVMTypeRef *args, LLVMValueRef *vals, unsigned n);
LLVMValueRef ptx_to_storage(ptx_ctx *x, ir_scalar s, uint32_t lanes, LLVMValueRef v);
LLVMValueRef ptx_from_storage(ptx_ctx *x, ir_scalar s, uint32_t lanes, LLVMValueRef v);
void ptx_emit_arith(ptx_ctx *x, const ir_inst *in);
void ptx_emit_cmp(ptx_ctx *x, const ir_inst *in);
void ptx_emit_convert(ptx_ctx *x, const ir_inst *in);
void ptx_emit_bitcast(ptx_ctx *x, const ir_inst *in);

/* ---- ptx_mem.c ---- */
void ptx_emit_memory(ptx_ctx *x, const ir_inst *in);
/* &array[index] for elements of s (index u32, zero-extended: the IR's indices are unsigned) */
LLVMValueRef ptx_elem_ptr(ptx_ctx *x, LLVMValueRef base, ir_scalar s, LLVMValueRef index);
void ptx_emit_atomic(ptx_ctx *x, const ir_inst *in);

/* ---- ptx_sg.c ---- */
LLVMValueRef ptx_load_id(ptx_ctx *x, ir_id_kind kind, uint32_t dim);
void ptx_emit_barrier(ptx_ctx *x, const ir_inst *in); /* BARRIER and FENCE */
void ptx_emit_subgroup(ptx_ctx *x, const ir_inst *in);

/* ---- ptx_frag.c: matrix fragments as mma.sync m16n8k16 (sm_80+) ---- */
LLVMTypeRef ptx_frag_type(ptx_ctx *x, ir_type t);
void ptx_emit_frag(ptx_ctx *x, const ir_inst *in);

/* ---- ptx_wgmma.c: warpgroup products (sm_90a) ---- */
void ptx_emit_wgmma(ptx_ctx *x, const ir_inst *in);
void ptx_emit_wg_wait(ptx_ctx *x, const ir_inst *in);

/* ---- ptx_sync.c: grid.wait, prefetch, memory barriers, tma.load, cluster.sync ---- */
void ptx_emit_sync(ptx_ctx *x, const ir_inst *in);
/* One asm statement of text with side effects and a memory clobber, no operands. */
void ptx_emit_text(ptx_ctx *x, const char *text);

/* ---- ptx_async.c ---- */
void ptx_emit_async(ptx_ctx *x, const ir_inst *in);

/* ---- ptx_target.c ---- */
/* the architecture for caps (0 and a message when refused) */
unsigned ptx_pick_sm(const rt_caps *c, kiln_err *why);
/* Runs O2 on m and writes PTX for sm (malloc'ed text), or NULL with a message. */
char *ptx_compile(LLVMModuleRef m, unsigned sm, bool arch_a, kiln_err *err);
/* Sets m's triple and data layout for NVPTX; -1 with a message if LLVM lacks the target. */
int ptx_prepare_module(LLVMModuleRef m, unsigned sm, bool arch_a, kiln_err *err);

#endif
