/* The PTX emitter's driver (ptx_emit.h): checks the kernel and caps, declares the entry
 * function, its parameters, workgroup arrays and constants, walks the structured body
 * (for -> header/body/latch with phis, if -> then/else/merge with phis), then hands the
 * module to ptx_target.c for O2 and PTX. */
#include "backend-ptx/ptx_emit.h"

#include "backend-ptx/ptx_internal.h"
#include "base/error.h"
#include "ir/lower.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <llvm-c/DebugInfo.h>

#define STATIC_SHARED_LIMIT (48u * 1024u) /* PTX's limit for static .shared */

/* ---- errors and values --------------------------------------------------------------------- */

void ptx_fail(ptx_ctx *x, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ir_emit_vfail(&x->e, fmt, ap);
    va_end(ap);
}

bool ptx_tinfo(ptx_ctx *x, ir_type t, ir_scalar *s, uint32_t *lanes) {
    if (ir_emit_tinfo(&x->e, t, s, lanes)) return true;
    ptx_fail(x, "a matrix fragment where a scalar or vector belongs");
    return false;
}

static LLVMTypeRef t_of(ptx_ctx *x, ir_type t) {
    const ir_type_desc *d = ir_type_get(x->k, t);
    if (d && d->kind == IR_T_FRAG) return ptx_frag_type(x, t);
    ir_scalar s;
    uint32_t n;
    if (!ptx_tinfo(x, t, &s, &n)) return ptx_t_i32(x);
    return ptx_t_rep(x, s, n);
}

/* ---- structured control flow ---------------------------------------------------------------- */

static const ir_inst *emit_region(ptx_ctx *x, const ir_region *r);

static LLVMBasicBlockRef block(ptx_ctx *x, const char *name) {
    return LLVMAppendBasicBlockInContext(x->lc, x->fn, name);
}

/* Loop unrolling hints on a loop's back edge (llvm.loop metadata): LLVM's own threshold
 * leaves a 32-step dot product over a head rolled, one load in flight per lane per
 * step, which made decode attention 2.3x slower on CUDA than on NVIDIA's Vulkan compiler
 * (H200). Innermost loops of modest bodies only: one of up to 64 steps known here is
 * unrolled whole, any other by 4, the remainder left to LLVM; loops around loops stay
 * rolled (unrolled, the matmul grew to 2 MB of PTX that took the driver seconds to
 * load). */
static bool has_loop(const ir_region *r) {
    for (uint32_t i = 0; i < r->n; i++) {
        const ir_inst *in = r->inst[i];
        if (!in) continue;
        if (in->op == IR_OP_FOR) return true;
        for (uint32_t j = 0; j < in->n_region; j++)
            if (has_loop(&in->region[j])) return true;
    }
    return false;
}

static uint32_t n_insts(const ir_region *r) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->n; i++) {
        const ir_inst *in = r->inst[i];
        if (!in) continue;
        n++;
        for (uint32_t j = 0; j < in->n_region; j++) n += n_insts(&in->region[j]);
    }
    return n;
}

/* A pipeline's loop: its waits and warpgroup products gain nothing unrolled, and a copy
 * per chunk of a 128-register accumulator's asm grew one kernel's PTX sevenfold (ptxas: 29 s). */
static bool has_pipeline(const ir_region *r) {
    return ir_emit_find_op(r, IR_OP_WG_MMA) || ir_emit_find_op(r, IR_OP_MBAR_WAIT) ||
           ir_emit_find_op(r, IR_OP_TMA_LOAD);
}

static void unroll_hint(ptx_ctx *x, const ir_inst *in, LLVMValueRef br, LLVMValueRef lo, LLVMValueRef hi,
                        LLVMValueRef step) {
    if (has_loop(&in->region[0]) || has_pipeline(&in->region[0])) { /* kept rolled: LLVM would unroll it whole once its inner loops are */
        LLVMMetadataRef off = LLVMMDStringInContext2(x->lc, "llvm.loop.unroll.disable", 24);
        LLVMMetadataRef self = LLVMTemporaryMDNode(x->lc, NULL, 0), hint = LLVMMDNodeInContext2(x->lc, &off, 1);
        LLVMMetadataRef ops[2] = {self, hint};
        LLVMMetadataRef id = LLVMMDNodeInContext2(x->lc, ops, 2);
        LLVMMetadataReplaceAllUsesWith(self, id);
        LLVMSetMetadata(br, LLVMGetMDKindIDInContext(x->lc, "llvm.loop", 9), LLVMMetadataAsValue(x->lc, id));
        return;
    }
    uint64_t trips = UINT64_MAX;
    if (LLVMIsAConstantInt(lo) && LLVMIsAConstantInt(hi) && LLVMIsAConstantInt(step)) {
        uint64_t l = LLVMConstIntGetZExtValue(lo), h = LLVMConstIntGetZExtValue(hi),
                 st = LLVMConstIntGetZExtValue(step);
        if (st && h >= l && l < (1ull << 31) && h < (1ull << 31)) trips = (h - l + st - 1) / st;
    }
    uint32_t body = n_insts(&in->region[0]);
    if (body > 400) return; /* a big body (a matmul's K chunk): LLVM's own judgement */
    LLVMMetadataRef hint;
    if (trips <= 64 && trips * body <= 8192) {
        LLVMMetadataRef full = LLVMMDStringInContext2(x->lc, "llvm.loop.unroll.full", 21);
        hint = LLVMMDNodeInContext2(x->lc, &full, 1);
    } else {
        LLVMMetadataRef ops[2] = {LLVMMDStringInContext2(x->lc, "llvm.loop.unroll.count", 22),
                                  LLVMValueAsMetadata(LLVMConstInt(LLVMInt32TypeInContext(x->lc), 4, 0))};
        hint = LLVMMDNodeInContext2(x->lc, ops, 2);
    }
    /* a loop id is a node whose first operand is itself */
    LLVMMetadataRef self = LLVMTemporaryMDNode(x->lc, NULL, 0);
    LLVMMetadataRef ops[2] = {self, hint};
    LLVMMetadataRef id = LLVMMDNodeInContext2(x->lc, ops, 2);
    LLVMMetadataReplaceAllUsesWith(self, id);
    LLVMSetMetadata(br, LLVMGetMDKindIDInContext(x->lc, "llvm.loop", 9), LLVMMetadataAsValue(x->lc, id));
}

static void emit_for(ptx_ctx *x, const ir_inst *in) {
    uint32_t n = in->n_results;
    if (!ir_emit_need(&x->e, in, 3 + n) || in->n_block_arg != n + 1 || in->n_region < 1) {
        ptx_fail(x, "malformed for");
        return;
    }
    ir_scalar is;
    uint32_t il;
    if (!ptx_tinfo(x, ir_type_of(x->k, in->operand[0]), &is, &il)) return;
    if (il != 1 || !(is == IR_I32 || is == IR_U32)) {
        ptx_fail(x, "loop bounds must be i32 or u32");
        return;
    }
    LLVMValueRef lo = ptx_V(x, in->operand[0]), hi = ptx_V(x, in->operand[1]), step = ptx_V(x, in->operand[2]);
    LLVMValueRef *init = calloc(n ? n : 1, sizeof *init), *phi = calloc(n ? n : 1, sizeof *phi);
    if (!init || !phi) {
        free(init);
        free(phi);
        ptx_fail(x, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < n; i++) init[i] = ptx_V(x, in->operand[3 + i]);
    if (x->e.failed) goto out;
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(x->b);
    LLVMBasicBlockRef header = block(x, "for"), body = block(x, "body"), latch = block(x, "latch"),
                      exit = block(x, "endfor");
    LLVMBuildBr(x->b, header);
    LLVMPositionBuilderAtEnd(x->b, header);
    LLVMValueRef iv = LLVMBuildPhi(x->b, LLVMTypeOf(lo), "iv");
    LLVMAddIncoming(iv, &lo, &pre, 1);
    ptx_def(x, in->block_arg[0], iv);
    for (uint32_t i = 0; i < n; i++) {
        phi[i] = LLVMBuildPhi(x->b, t_of(x, ir_type_of(x->k, in->results[i])), "");
        LLVMAddIncoming(phi[i], &init[i], &pre, 1);
        ptx_def(x, in->block_arg[1 + i], phi[i]);
        ptx_def(x, in->results[i], phi[i]); /* the values the header holds when the loop exits */
    }
    LLVMValueRef c = LLVMBuildICmp(x->b, is == IR_I32 ? LLVMIntSLT : LLVMIntULT, iv, hi, "");
    LLVMBuildCondBr(x->b, c, body, exit);
    LLVMPositionBuilderAtEnd(x->b, body);
    const ir_inst *y = emit_region(x, &in->region[0]);
    if (x->e.failed) goto out;
    if (n && (!y || y->n_operand != n)) {
        ptx_fail(x, "loop body does not yield %u values", n);
        goto out;
    }
    LLVMValueRef *yv = init; /* reused for the yields */
    for (uint32_t i = 0; i < n; i++) yv[i] = ptx_V(x, y->operand[i]);
    if (x->e.failed) goto out;
    LLVMBuildBr(x->b, latch);
    LLVMPositionBuilderAtEnd(x->b, latch);
    LLVMValueRef next = LLVMBuildAdd(x->b, iv, step, "");
    unroll_hint(x, in, LLVMBuildBr(x->b, header), lo, hi, step);
    LLVMAddIncoming(iv, &next, &latch, 1);
    for (uint32_t i = 0; i < n; i++) LLVMAddIncoming(phi[i], &yv[i], &latch, 1);
    LLVMPositionBuilderAtEnd(x->b, exit);
out:
    free(init);
    free(phi);
}

static void emit_if(ptx_ctx *x, const ir_inst *in) {
    uint32_t n = in->n_results;
    if (!ir_emit_need(&x->e, in, 1) || in->n_region < 2) {
        ptx_fail(x, "malformed if");
        return;
    }
    LLVMValueRef cond = ptx_V(x, in->operand[0]);
    if (x->e.failed) return;
    LLVMBasicBlockRef then_l = block(x, "then"), else_l = block(x, "else"), merge = block(x, "endif");
    LLVMBuildCondBr(x->b, cond, then_l, else_l);
    LLVMPositionBuilderAtEnd(x->b, then_l);
    const ir_inst *yt = emit_region(x, &in->region[0]);
    if (x->e.failed) return;
    LLVMBasicBlockRef then_end = LLVMGetInsertBlock(x->b);
    LLVMBuildBr(x->b, merge);
    LLVMPositionBuilderAtEnd(x->b, else_l);
    const ir_inst *ye = emit_region(x, &in->region[1]);
    if (x->e.failed) return;
    LLVMBasicBlockRef else_end = LLVMGetInsertBlock(x->b);
    LLVMBuildBr(x->b, merge);
    LLVMPositionBuilderAtEnd(x->b, merge);
    if (!n) return;
    if (!yt || !ye || yt->n_operand != n || ye->n_operand != n) {
        ptx_fail(x, "if with %u results needs both branches to yield them", n);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        LLVMValueRef v[2] = {ptx_V(x, yt->operand[i]), ptx_V(x, ye->operand[i])};
        if (x->e.failed) return;
        LLVMBasicBlockRef from[2] = {then_end, else_end};
        LLVMValueRef phi = LLVMBuildPhi(x->b, t_of(x, ir_type_of(x->k, in->results[i])), "");
        LLVMAddIncoming(phi, v, from, 2);
        ptx_def(x, in->results[i], phi);
    }
}

/* ---- the walk ------------------------------------------------------------------------------- */

static void emit_vector(ptx_ctx *x, const ir_inst *in) {
    if (in->op == IR_OP_VEC) {
        if (in->n_operand < 2 || in->n_operand > 4) {
            ptx_fail(x, "vectors have 2 to 4 lanes");
            return;
        }
        LLVMValueRef r = LLVMGetPoison(t_of(x, in->type));
        for (uint32_t i = 0; i < in->n_operand && !x->e.failed; i++)
            r = LLVMBuildInsertElement(x->b, r, ptx_V(x, in->operand[i]), ptx_c_i32(x, i), "");
        if (!x->e.failed) ptx_def(x, in->result, r);
        return;
    }
    if (!ir_emit_need(&x->e, in, 1)) return;
    LLVMValueRef v = ptx_V(x, in->operand[0]);
    if (!x->e.failed) ptx_def(x, in->result, LLVMBuildExtractElement(x->b, v, ptx_c_i32(x, (uint32_t)in->imm[0]), ""));
}

static void emit_inst(void *ctx, const ir_inst *in) {
    ptx_ctx *x = ctx;
    switch (ir_op_class_of(in->op)) {
    case IR_CLASS_DECL:
        if (in->result && in->result <= x->e.n_val && !ir_emit_has(&x->e, in->result))
            ptx_fail(x, "not declared up front");
        return;
    case IR_CLASS_ID: ptx_def(x, in->result, ptx_load_id(x, (ir_id_kind)in->imm[0], (uint32_t)in->imm[1])); return;
    case IR_CLASS_ARITH: ptx_emit_arith(x, in); return;
    case IR_CLASS_CMP: ptx_emit_cmp(x, in); return;
    case IR_CLASS_SELECT: {
        if (!ir_emit_need(&x->e, in, 3)) return;
        LLVMValueRef c = ptx_V(x, in->operand[0]), a = ptx_V(x, in->operand[1]), b = ptx_V(x, in->operand[2]);
        if (!x->e.failed) ptx_def(x, in->result, LLVMBuildSelect(x->b, c, a, b, ""));
        return;
    }
    case IR_CLASS_CONVERT: ptx_emit_convert(x, in); return;
    case IR_CLASS_BITCAST: ptx_emit_bitcast(x, in); return;
    case IR_CLASS_VECTOR: emit_vector(x, in); return;
    case IR_CLASS_MEMORY: ptx_emit_memory(x, in); return;
    case IR_CLASS_ATOMIC: ptx_emit_atomic(x, in); return;
    case IR_CLASS_BARRIER: ptx_emit_barrier(x, in); return;
    case IR_CLASS_ASYNC: ptx_emit_async(x, in); return;
    case IR_CLASS_SUBGROUP: ptx_emit_subgroup(x, in); return;
    case IR_CLASS_FRAGMENT: ptx_emit_frag(x, in); return;
    case IR_CLASS_SYNC: ptx_emit_sync(x, in); return;
    case IR_CLASS_CONTROL:
        if (in->op == IR_OP_FOR)
            emit_for(x, in);
        else if (in->op == IR_OP_IF)
            emit_if(x, in);
        return; /* a YIELD is read by its construct */
    default: ptx_fail(x, "unknown op %d", (int)in->op); return;
    }
}

/* Emits a region; returns its closing YIELD, if any. */
static const ir_inst *emit_region(ptx_ctx *x, const ir_region *r) { return ir_emit_region(&x->e, r, emit_inst, x); }

/* ---- declarations ----------------------------------------------------------------------------- */

/* The IR's parameters, then one 128-byte, 64-byte aligned .param per tensor map (the
 * device's launch passes the encoded maps there, ptx_sync.c names them). */
static void declare_function(ptx_ctx *x) {
    uint32_t np = ir_n_params(x->k), nm = ir_n_tensor_maps(x->k);
    LLVMTypeRef *pt = calloc(np + nm ? np + nm : 1, sizeof *pt);
    if (!pt) {
        ptx_fail(x, "out of memory");
        return;
    }
    LLVMTypeRef gptr = LLVMPointerTypeInContext(x->lc, 1);
    for (uint32_t i = 0; i < np && !x->e.failed; i++) {
        const ir_param *p = ir_param_at(x->k, i);
        if (p->is_buffer) {
            pt[i] = gptr;
        } else if (p->elem == IR_I32 || p->elem == IR_U32 || p->elem == IR_F32) {
            pt[i] = ptx_t_rep(x, p->elem, 1);
        } else {
            ptx_fail(x, "scalar parameter '%s' is %s; kernel arguments take i32, u32 or f32", p->name,
                     ir_scalar_name(p->elem));
        }
    }
    if (x->e.failed) {
        free(pt);
        return;
    }
    for (uint32_t i = 0; i < nm; i++) pt[np + i] = LLVMPointerTypeInContext(x->lc, 0);
    LLVMTypeRef ft = LLVMFunctionType(LLVMVoidTypeInContext(x->lc), pt, np + nm, 0);
    free(pt);
    x->fn = LLVMAddFunction(x->m, ir_kernel_name(x->k), ft);
    LLVMTypeRef map_t = LLVMArrayType2(LLVMInt8TypeInContext(x->lc), 128);
    unsigned byval = LLVMGetEnumAttributeKindForName("byval", 5), align = LLVMGetEnumAttributeKindForName("align", 5);
    for (uint32_t i = 0; i < nm && i < 8; i++) {
        LLVMAddAttributeAtIndex(x->fn, np + i + 1, LLVMCreateTypeAttribute(x->lc, byval, map_t));
        LLVMAddAttributeAtIndex(x->fn, np + i + 1, LLVMCreateEnumAttribute(x->lc, align, 64));
        /* NVPTX names a kernel's parameters <function>_param_<index> */
        snprintf(x->map_param[i], sizeof x->map_param[i], "%s_param_%u", ir_kernel_name(x->k), np + i);
    }
    uint32_t nb = 0;
    for (uint32_t i = 0; i < np; i++) {
        const ir_param *p = ir_param_at(x->k, i);
        LLVMValueRef a = LLVMGetParam(x->fn, i);
        LLVMSetValueName2(a, p->name, strlen(p->name));
        if (p->is_buffer) {
            if (nb < x->n_buf) x->buf[nb] = a;
            nb++;
        } else {
            ptx_def(x, p->value, a);
        }
    }
    /* buffers by their index among buffers (ir_buffer_param maps it to the param) */
    for (uint32_t b = 0; b < x->n_buf; b++) {
        uint32_t pi = ir_buffer_param(x->k, b);
        if (pi >= np) {
            ptx_fail(x, "buffer %u has no parameter", b);
            return;
        }
        x->buf[b] = LLVMGetParam(x->fn, pi);
    }
}

/* Workgroup arrays start at 16-byte boundaries, or 1024 in a module with warpgroup
 * products or tensor copies (their swizzled atoms are 1024-byte aligned). */
static uint64_t shared_align(const ir_kernel *k) {
    const ir_region *body = ir_kernel_body(k);
    return ir_emit_find_op(body, IR_OP_WG_MMA) || ir_emit_find_op(body, IR_OP_TMA_LOAD) ? 1024 : 16;
}

/* An array's bytes rounded up to the alignment. */
static uint64_t shared_span(const ir_shared_decl *d, uint64_t align) {
    return ((uint64_t)(ir_scalar_bits(d->elem) / 8) * d->count + align - 1) / align * align;
}

uint32_t ptx_dynamic_shared_bytes(const ir_kernel *k) {
    uint64_t bytes = 0, align = k ? shared_align(k) : 16;
    for (uint32_t i = 0; k && i < ir_n_shared(k); i++) {
        const ir_shared_decl *d = ir_shared_at(k, i);
        if (d && !d->overlays) bytes += shared_span(d, align);
    }
    return bytes > STATIC_SHARED_LIMIT && bytes <= UINT32_MAX ? (uint32_t)bytes : 0;
}

/* Static .shared arrays, or (past PTX's 48 KiB static limit) offsets into one extern
 * .shared array the launch sizes (ptx_emit.h). */
static void declare_shared(ptx_ctx *x) {
    uint64_t bytes = 0, align = shared_align(x->k);
    bool dynamic = ptx_dynamic_shared_bytes(x->k) != 0;
    LLVMTypeRef i8 = LLVMInt8TypeInContext(x->lc);
    LLVMValueRef pool = NULL;
    if (dynamic) {
        pool = LLVMAddGlobalInAddressSpace(x->m, LLVMArrayType2(i8, 0), "kiln_dynamic_shared", 3);
        LLVMSetLinkage(pool, LLVMExternalLinkage);
        LLVMSetAlignment(pool, (unsigned)align);
    }
    for (uint32_t i = 0; i < x->n_shm && !x->e.failed; i++) {
        const ir_shared_decl *d = ir_shared_at(x->k, i);
        if (!d || !d->count || d->elem == IR_BOOL) {
            ptx_fail(x, "workgroup array %u is malformed", i);
            return;
        }
        if (d->overlays) { /* its base's memory (verified: declared earlier, large enough) */
            if (d->overlays > i || !x->shm[d->overlays - 1]) {
                ptx_fail(x, "workgroup array %u overlays a later one", i);
                return;
            }
            x->shm[i] = x->shm[d->overlays - 1];
            continue;
        }
        if (dynamic) {
            LLVMValueRef off = LLVMConstInt(LLVMInt64TypeInContext(x->lc), bytes, 0);
            x->shm[i] = LLVMConstInBoundsGEP2(i8, pool, &off, 1);
        } else {
            LLVMTypeRef at = LLVMArrayType2(ptx_t_store(x, d->elem, 1), d->count);
            LLVMValueRef g = LLVMAddGlobalInAddressSpace(x->m, at, d->name, 3);
            LLVMSetLinkage(g, LLVMInternalLinkage);
            LLVMSetInitializer(g, LLVMGetPoison(at)); /* .shared cannot be initialized */
            LLVMSetAlignment(g, (unsigned)align);
            x->shm[i] = g;
        }
        bytes += shared_span(d, align);
    }
    if (x->e.failed) return;
    if (x->c->shared_bytes && bytes > x->c->shared_bytes)
        ptx_fail(x, "workgroup arrays need %llu bytes; caps.shared_bytes is %u", (unsigned long long)bytes,
                 x->c->shared_bytes);
}

/* Spec constants take their defaults (ptx_emit.h); constants anywhere become LLVM constants. */
static void declare_constants(ptx_ctx *x) {
    for (uint32_t i = 0; i < ir_n_specs(x->k) && !x->e.failed; i++) {
        const ir_spec *s = ir_spec_at(x->k, i);
        LLVMValueRef c;
        switch (s->type) {
        case IR_BOOL: c = ptx_c_scalar(x, IR_BOOL, s->dflt != 0); break;
        case IR_I32: c = ptx_c_scalar(x, IR_I32, (uint32_t)(int32_t)s->dflt); break;
        case IR_U32: c = ptx_c_scalar(x, IR_U32, (uint32_t)s->dflt); break;
        case IR_F32: {
            float f = (float)s->dflt;
            uint32_t u;
            memcpy(&u, &f, 4);
            c = ptx_c_scalar(x, IR_F32, u);
            break;
        }
        default:
            ptx_fail(x, "spec constant '%s' is %s; spec constants are bool, i32, u32 or f32", s->name,
                     ir_scalar_name(s->type));
            return;
        }
        ptx_def(x, s->value, c);
    }
    for (uint32_t v = 1; v <= x->e.n_val && !x->e.failed; v++) {
        const ir_inst *d = ir_def(x->k, v);
        if (!d || d->op != IR_OP_CONST || d->result != v) continue;
        ir_scalar s;
        uint32_t n;
        x->e.cur = d;
        if (!ptx_tinfo(x, d->type, &s, &n)) return;
        ptx_def(x, v, ptx_c_splat(x, s, n, (uint64_t)d->imm[0])); /* a lowering's vector constants: every lane */
    }
    x->e.cur = NULL;
}

/* nvvm.annotations: the function is a kernel, with its exact block size (.reqntid) and
 * the occupancy it asks for (.minnctapersm: ptxas then keeps registers within it). */
static void annotate(ptx_ctx *x) {
    LLVMTypeRef i32 = ptx_t_i32(x);
    const char *keys[5] = {"kernel", "reqntidx", "reqntidy", "reqntidz", "minctasm"};
    uint32_t vals[5] = {1, x->wg[0], x->wg[1], x->wg[2], ir_occupancy(x->k)};
    for (int i = 0; i < (vals[4] ? 5 : 4); i++) {
        LLVMMetadataRef md[3] = {LLVMValueAsMetadata(x->fn), LLVMMDStringInContext2(x->lc, keys[i], strlen(keys[i])),
                                 LLVMValueAsMetadata(LLVMConstInt(i32, vals[i], 0))};
        LLVMValueRef node = LLVMMetadataAsValue(x->lc, LLVMMDNodeInContext2(x->lc, md, 3));
        LLVMAddNamedMetadataOperand(x->m, "nvvm.annotations", node);
    }
}

static void workgroup_size(ptx_ctx *x) {
    ir_val spec = IR_NONE;
    ir_workgroup(x->k, x->wg, &spec);
    if (spec != IR_NONE) { /* emitted with the spec's default, like every spec constant */
        for (uint32_t i = 0; i < ir_n_specs(x->k); i++)
            if (ir_spec_at(x->k, i)->value == spec) x->wg[0] = (uint32_t)ir_spec_at(x->k, i)->dflt;
        x->wg[1] = x->wg[2] = 1;
    }
    uint64_t inv = (uint64_t)x->wg[0] * x->wg[1] * x->wg[2];
    if (!inv || inv > 1024)
        ptx_fail(x, "workgroup %ux%ux%u has %llu invocations; CUDA allows 1..1024", x->wg[0], x->wg[1], x->wg[2],
                 (unsigned long long)inv);
    else if (x->c->max_workgroup && inv > x->c->max_workgroup)
        ptx_fail(x, "workgroup %ux%ux%u has %llu invocations; caps.max_workgroup is %u", x->wg[0], x->wg[1], x->wg[2],
                 (unsigned long long)inv, x->c->max_workgroup);
}

/* Programmatic dependent launch (caps.grid_dep): the device launches every kernel with
 * programmatic stream serialization, so its workgroups may be scheduled before the kernel
 * before it has ended. Each first waits until that kernel has finished and its memory is
 * visible (griddepcontrol.wait: a no-op when launched without the attribute), so nothing
 * is read or written before it and the results are those of plain stream order. A
 * workgroup lets the next kernel be scheduled (launch_dependents) only at its end (one
 * that returns early does so by ending): the next kernel's launch then overlaps the last
 * workgroups' tails. Triggered at the start instead, the waiting workgroups took the
 * first compute units to free up, packed as tight as occupancy allows, and one-wave
 * memory-bound kernels ran on part of the device (the H200: qwen3-0.6b pp512 -19%). */

static int emit_module(ptx_ctx *x) {
    const ir_kernel *k = x->k;
    if (x->c->subgroup_size != 32) {
        ptx_fail(x, "caps.subgroup_size is %u; CUDA subgroups are warps of 32", x->c->subgroup_size);
        return -1;
    }
    workgroup_size(x);
    if (x->e.failed) return -1;
    const ir_inst *sgi = ir_emit_find_class(ir_kernel_body(k), IR_CLASS_SUBGROUP);
    if (sgi && (x->wg[0] * x->wg[1] * x->wg[2]) % 32) {
        x->e.cur = sgi;
        ptx_fail(x, "subgroup ops need whole warps: workgroup %ux%ux%u is not a multiple of 32", x->wg[0], x->wg[1],
                 x->wg[2]);
        return -1;
    }
    x->n_buf = ir_n_buffers(k);
    x->n_shm = ir_n_shared(k);
    x->buf = calloc(x->n_buf ? x->n_buf : 1, sizeof *x->buf);
    x->shm = calloc(x->n_shm ? x->n_shm : 1, sizeof *x->shm);
    if (!x->buf || !x->shm) {
        ptx_fail(x, "out of memory");
        return -1;
    }
    kiln_err terr = {0};
    if (ptx_prepare_module(x->m, x->sm, x->arch_a, &terr)) {
        ptx_fail(x, "%s", terr.msg);
        return -1;
    }
    declare_function(x);
    if (!x->e.failed) declare_shared(x);
    if (!x->e.failed) declare_constants(x);
    if (x->e.failed) return -1;
    LLVMPositionBuilderAtEnd(x->b, block(x, "entry"));
    /* a kernel that launches early lets the next one be scheduled before its own wait;
     * one with a grid.wait waits there (ptx_sync.c), any other on entry */
    bool dep = ptx_uses_grid_dep(x->c), early = ir_launch_early(k);
    if (dep && early) ptx_emit_text(x, "griddepcontrol.launch_dependents;");
    if (dep && !ir_emit_find_op(ir_kernel_body(k), IR_OP_GRID_WAIT)) ptx_emit_text(x, "griddepcontrol.wait;");
    emit_region(x, ir_kernel_body(k));
    if (x->e.failed) return -1;
    x->e.cur = NULL;
    if (dep && !early) ptx_emit_text(x, "griddepcontrol.launch_dependents;");
    LLVMBuildRetVoid(x->b);
    annotate(x);
    return 0;
}

/* The IR's target rewrites this emitter relies on (ir/lower.h): f16 and bf16 live in f32
 * registers; f32 -> f16 rounds with cvt.rn.f16.f32, f32 -> bf16 with cvt.rn.bf16.f32 on sm_80+
 * (in the IR's integer ops below: PTX has no such conversion before sm_80). */
static ir_lower_opts lower_opts(const rt_caps *c) {
    return (ir_lower_opts){.async_sync = !c->async_copy || ptx_pick_sm(c, NULL) < 80,
                           .masked = true,
                           .bf16 = {.in_f32 = true, .arith = c->bf16_arith, .round = ptx_pick_sm(c, NULL) < 80},
                           .f16 = {.in_f32 = true, .arith = c->f16_arith, .round = false}};
}

ir_kernel *ptx_lowered(const ir_kernel *k, const rt_caps *c, kiln_err *err) {
    kiln_err_clear(err);
    if (!k || !c) {
        kiln_fail(err, KILN_ERR_INVALID, "ptx: no kernel or caps");
        return NULL;
    }
    ir_kernel *low = ir_kernel_clone(k);
    if (!low) {
        kiln_fail(err, KILN_ERR_NOMEM, "ptx: kernel '%s': out of memory", ir_kernel_name(k));
        return NULL;
    }
    ir_lower_opts o = lower_opts(c);
    kiln_err lerr = {0};
    if (ir_lower(low, &o, &lerr)) {
        kiln_err_wrap(err, &lerr, "ptx: kernel '%s'", ir_kernel_name(k));
        ir_kernel_destroy(low);
        return NULL;
    }
    return low;
}

int ptx_emit(const ir_kernel *k, const rt_caps *c, char **ptx, char **llvm_ir, kiln_err *err) {
    kiln_err_clear(err);
    if (ptx) *ptx = NULL;
    if (llvm_ir) *llvm_ir = NULL;
    if (!k || !c || !ptx) {
        kiln_fail(err, KILN_ERR_INVALID, "ptx: no kernel, caps or output");
        return -1;
    }
    kiln_err verr = {0};
    if (ir_verify(k, &verr)) {
        kiln_err_wrap(err, &verr, "ptx: kernel '%s' does not verify", ir_kernel_name(k));
        return -1;
    }
    kiln_err why = {0};
    unsigned sm = ptx_pick_sm(c, &why);
    if (!sm) {
        kiln_err_wrap(err, &why, "ptx: kernel '%s'", ir_kernel_name(k));
        return -1;
    }
    ir_kernel *low = ptx_lowered(k, c, err);
    if (!low) return -1;
    ptx_ctx x;
    memset(&x, 0, sizeof x);
    x.k = low;
    x.c = c;
    x.sm = sm;
    /* warpgroup products exist only as sm_90a's (the JIT refuses them on plain sm_90) */
    const ir_inst *wg = ir_emit_find_op(ir_kernel_body(low), IR_OP_WG_MMA);
    x.arch_a = wg != NULL && sm == 90 && c->wgmma; /* elsewhere the instruction is refused */
    x.lc = LLVMContextCreate();
    x.m = LLVMModuleCreateWithNameInContext(ir_kernel_name(k), x.lc);
    x.b = LLVMCreateBuilderInContext(x.lc);
    int rc = ir_emit_init(&x.e, low, "ptx", err) ? -1 : emit_module(&x);
    if (!rc && llvm_ir) {
        char *s = LLVMPrintModuleToString(x.m);
        *llvm_ir = s ? strdup(s) : NULL;
        LLVMDisposeMessage(s);
        if (!*llvm_ir) {
            ptx_fail(&x, "out of memory");
            rc = -1;
        }
    }
    if (!rc) {
        kiln_err cerr = {0};
        *ptx = ptx_compile(x.m, sm, x.arch_a, &cerr);
        if (!*ptx) {
            x.e.cur = NULL;
            ptx_fail(&x, "%s", cerr.msg);
            rc = -1;
        }
    }
    if (rc && llvm_ir) {
        free(*llvm_ir);
        *llvm_ir = NULL;
    }
    LLVMDisposeBuilder(x.b);
    LLVMDisposeModule(x.m);
    LLVMContextDispose(x.lc);
    ir_emit_free(&x.e);
    free(x.buf);
    free(x.shm);
    ir_kernel_destroy(low);
    return rc;
}
