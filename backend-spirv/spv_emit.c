/* The SPIR-V emitter (spv_emit.h): walks a verified IR kernel once, writing SSA SPIR-V
 * with structured control flow into a spv_builder. */
#include "backend-spirv/spv_emit.h"

#include "backend-spirv/spv_internal.h"
#include "backend-spirv/spv_khr.h"
#include "base/error.h"
#include "ir/lower.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spirv/unified1/GLSL.std.450.h>

/* ---- errors and values ------------------------------------------------------------------- */

void spv_fail(spv_ctx *x, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ir_emit_vfail(&x->e, fmt, ap);
    va_end(ap);
}

/* 16-bit floats that live in f32 registers. */
bool spv_widened(const spv_ctx *x, ir_scalar s) { return s == IR_BF16 || (s == IR_F16 && !x->f16_native); }

/* ---- structured control flow ------------------------------------------------------------------ */

static const ir_inst *emit_region(spv_ctx *x, const ir_region *r);

static void emit_for(spv_ctx *x, const ir_inst *in) {
    uint32_t n = in->n_results;
    if (!ir_emit_need(&x->e, in, 3 + n) || in->n_block_arg != n + 1 || in->n_region < 1) {
        spv_fail(x, "malformed for");
        return;
    }
    ir_scalar is;
    uint32_t il;
    if (!ir_emit_tinfo(&x->e, ir_type_of(x->k, in->operand[0]), &is, &il) || il != 1 || !ir_scalar_is_int(is)) {
        spv_fail(x, "loop bounds must be integers");
        return;
    }
    uint32_t lo = spv_V(x, in->operand[0]), hi = spv_V(x, in->operand[1]), step = spv_V(x, in->operand[2]);
    uint32_t tiv = spv_t_rep_s(x, is);
    uint32_t pre = x->label;
    uint32_t header = spv_b_id(&x->b), cond = spv_b_id(&x->b), body = spv_b_id(&x->b), cont = spv_b_id(&x->b),
             merge = spv_b_id(&x->b);
    spv_op_branch(x, header);
    spv_op_label(x, header);
    uint32_t iv = spv_b_id(&x->b), iv_next = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpPhi, 6, tiv, iv, lo, pre, iv_next, cont);
    spv_def(x, in->block_arg[0], iv);
    size_t *patch = calloc(n ? n : 1, sizeof *patch);
    if (!patch) {
        spv_fail(x, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t phi = spv_b_id(&x->b);
        /* the yielded value is known after the body: patched below */
        patch[i] = spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpPhi, 6, spv_t_rep(x, ir_type_of(x->k, in->results[i])),
                               phi, spv_V(x, in->operand[3 + i]), pre, 0, cont);
        spv_def(x, in->block_arg[1 + i], phi);
        spv_def(x, in->results[i], phi);
    }
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpLoopMerge, 3, merge, cont, SpvLoopControlMaskNone);
    spv_op_branch(x, cond);
    spv_op_label(x, cond);
    uint32_t c = spv_fn2(x, ir_scalar_is_signed(is) ? SpvOpSLessThan : SpvOpULessThan, spv_t_bool(x), iv, hi);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpBranchConditional, 3, c, body, merge);
    spv_op_label(x, body);
    const ir_inst *y = emit_region(x, &in->region[0]);
    if (n && (!y || y->n_operand != n)) spv_fail(x, "loop body does not yield %u values", n);
    spv_op_branch(x, cont);
    spv_op_label(x, cont);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpIAdd, 4, tiv, iv_next, iv, step);
    spv_op_branch(x, header);
    for (uint32_t i = 0; i < n && !x->e.failed; i++)
        spv_b_patch(&x->b, SPV_SEC_FUNCTION, patch[i] + 5, spv_V(x, y->operand[i]));
    free(patch);
    spv_op_label(x, merge);
}

static void emit_if(spv_ctx *x, const ir_inst *in) {
    uint32_t n = in->n_results;
    if (!ir_emit_need(&x->e, in, 1) || in->n_region < 1) {
        spv_fail(x, "malformed if");
        return;
    }
    /* the builder closes a missing else with an empty yield: no else block for it */
    bool has_else = n > 0;
    for (uint32_t i = 0; in->n_region > 1 && i < in->region[1].n; i++)
        has_else |= in->region[1].inst[i] && in->region[1].inst[i]->op != IR_OP_YIELD;
    uint32_t then_l = spv_b_id(&x->b), else_l = has_else ? spv_b_id(&x->b) : 0, merge = spv_b_id(&x->b);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpSelectionMerge, 2, merge, SpvSelectionControlMaskNone);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpBranchConditional, 3, spv_V(x, in->operand[0]), then_l,
                has_else ? else_l : merge);
    spv_op_label(x, then_l);
    const ir_inst *yt = emit_region(x, &in->region[0]);
    uint32_t then_end = x->label;
    spv_op_branch(x, merge);
    const ir_inst *ye = NULL;
    uint32_t else_end = 0;
    if (has_else) {
        spv_op_label(x, else_l);
        ye = emit_region(x, &in->region[1]);
        else_end = x->label;
        spv_op_branch(x, merge);
    }
    spv_op_label(x, merge);
    if (!n) return;
    if (!has_else || !yt || !ye || yt->n_operand != n || ye->n_operand != n) {
        spv_fail(x, "if with %u results needs both branches to yield them", n);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t phi = spv_b_id(&x->b);
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpPhi, 6, spv_t_rep(x, ir_type_of(x->k, in->results[i])), phi,
                    spv_V(x, yt->operand[i]), then_end, spv_V(x, ye->operand[i]), else_end);
        spv_def(x, in->results[i], phi);
    }
}

/* ---- the walk ------------------------------------------------------------------------------- */

static void emit_convert(spv_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 1)) return;
    ir_scalar fs, ts;
    uint32_t fn, tn;
    if (!ir_emit_tinfo(&x->e, ir_type_of(x->k, in->operand[0]), &fs, &fn) ||
        !ir_emit_tinfo(&x->e, in->type, &ts, &tn) || fn != tn) {
        spv_fail(x, "convert needs scalars or vectors of the same width");
        return;
    }
    spv_def(x, in->result, spv_convert(x, fs, ts, tn, spv_V(x, in->operand[0]), in->imm[0] == 1));
}

static void emit_vector(spv_ctx *x, const ir_inst *in) {
    if (in->op == IR_OP_VEC) {
        if (in->n_operand < 2 || in->n_operand > 4) {
            spv_fail(x, "vectors have 2 to 4 lanes");
            return;
        }
        uint32_t o[6] = {spv_t_rep(x, in->type), spv_b_id(&x->b)};
        for (uint32_t i = 0; i < in->n_operand; i++) o[2 + i] = spv_V(x, in->operand[i]);
        spv_b_emit(&x->b, SPV_SEC_FUNCTION, SpvOpCompositeConstruct, o, 2 + in->n_operand);
        spv_def(x, in->result, o[1]);
        return;
    }
    if (!ir_emit_need(&x->e, in, 1)) return;
    spv_def(x, in->result,
            spv_fn2(x, SpvOpCompositeExtract, spv_t_rep(x, in->type), spv_V(x, in->operand[0]), (uint32_t)in->imm[0]));
}

static void emit_inst(void *ctx, const ir_inst *in) {
    spv_ctx *x = ctx;
    switch (ir_op_class_of(in->op)) {
    case IR_CLASS_DECL:
        if (in->result && in->result <= x->e.n_val && !ir_emit_has(&x->e, in->result))
            spv_fail(x, "not declared up front");
        return;
    case IR_CLASS_ID: spv_def(x, in->result, spv_load_id(x, (ir_id_kind)in->imm[0], (uint32_t)in->imm[1])); return;
    case IR_CLASS_ARITH: spv_emit_arith(x, in); return;
    case IR_CLASS_CMP: spv_emit_cmp(x, in); return;
    case IR_CLASS_SELECT:
        if (!ir_emit_need(&x->e, in, 3)) return;
        spv_def(x, in->result,
                spv_fn3(x, SpvOpSelect, spv_t_rep(x, in->type), spv_V(x, in->operand[0]), spv_V(x, in->operand[1]),
                        spv_V(x, in->operand[2])));
        return;
    case IR_CLASS_CONVERT: emit_convert(x, in); return;
    case IR_CLASS_BITCAST: spv_emit_bitcast(x, in); return;
    case IR_CLASS_VECTOR: emit_vector(x, in); return;
    case IR_CLASS_MEMORY: spv_emit_memory(x, in); return;
    case IR_CLASS_ATOMIC: spv_emit_atomic(x, in); return;
    case IR_CLASS_BARRIER: spv_emit_barrier(x, in); return;
    case IR_CLASS_ASYNC: spv_fail(x, "asynchronous copies reach SPIR-V lowered (ir/lower_async.c)"); return;
    case IR_CLASS_SUBGROUP: spv_emit_subgroup(x, in); return;
    case IR_CLASS_FRAGMENT: spv_emit_frag(x, in); return;
    case IR_CLASS_SYNC: /* grid.wait and prefetch are hints Vulkan has no use for */
        if (in->op != IR_OP_GRID_WAIT && in->op != IR_OP_PREFETCH)
            spv_fail(x, "memory barriers, clusters and the tensor copy engine (%s) are CUDA's (sm_90)",
                     ir_op_name(in->op));
        return;
    case IR_CLASS_CONTROL:
        if (in->op == IR_OP_FOR)
            emit_for(x, in);
        else if (in->op == IR_OP_IF)
            emit_if(x, in);
        return; /* a YIELD is read by its construct */
    default: spv_fail(x, "unknown op %d", (int)in->op); return;
    }
}

/* Emits a region; returns its closing YIELD, if any. */
static const ir_inst *emit_region(spv_ctx *x, const ir_region *r) { return ir_emit_region(&x->e, r, emit_inst, x); }

/* ---- declarations ----------------------------------------------------------------------------- */

static bool is_frag_op(ir_op op) { return op >= IR_OP_FRAG_FILL && op <= IR_OP_FRAG_LOAD_TENSOR; }

/* Before anything is declared: does the kernel use fragments (then the module takes the
 * Vulkan memory model), which workgroup arrays do fragments touch (they take the
 * fragment's element type), and which f32 arrays are exchanged atomically (kept as bits)? */
static void scan_frags(spv_ctx *x, const ir_region *r, int depth) {
    for (uint32_t i = 0; i < r->n && depth < 1000; i++) {
        const ir_inst *in = r->inst[i];
        if (!in) continue;
        if (is_frag_op(in->op)) x->vulkan_mm = !x->emu;
        if (x->emu && (in->op == IR_OP_FRAG_LOAD || in->op == IR_OP_FRAG_MMA)) spv_emu_note_type(x, in->type);
        if (x->emu && (in->op == IR_OP_FRAG_STORE || in->op == IR_OP_FRAG_MMA))
            for (uint32_t j = 0; j < in->n_operand && j < 2; j++) spv_emu_note_type(x, ir_type_of(x->k, in->operand[j]));
        if (in->op == IR_OP_FRAG_MMA && x->emu && in->n_operand == 3) {
            const ir_type_desc *a = ir_type_get(x->k, ir_type_of(x->k, in->operand[0]));
            uint32_t need = a ? spv_emu_scratch_elems(a->m, a->n, a->k) : 0;
            if (need > x->emu_scratch) x->emu_scratch = need;
        }
        if (in->op == IR_OP_FENCE) x->fence = true;
        bool on_shm = in->imm[2] == 1 && in->imm[0] >= 0 && (uint64_t)in->imm[0] < x->n_shm;
        if ((in->op == IR_OP_FRAG_LOAD || in->op == IR_OP_FRAG_STORE) && on_shm) x->shm[in->imm[0]].frag = true;
        if (in->op == IR_OP_ATOMIC && on_shm && in->imm[1] == IR_ATOMIC_XCHG && x->shm[in->imm[0]].d->elem == IR_F32)
            x->shm[in->imm[0]].xchg_f32 = true;
        for (uint32_t j = 0; j < in->n_region && j < 2; j++) scan_frags(x, &in->region[j], depth + 1);
    }
}

/* Fragment types and mma shapes against the caps, first: a device without cooperative
 * matrices is the clearest reason to refuse such a kernel. */
static void check_frags(spv_ctx *x, const ir_region *r, int depth) {
    for (uint32_t i = 0; i < r->n && !x->e.failed && depth < 1000; i++) {
        const ir_inst *in = r->inst[i];
        if (!in) continue;
        x->e.cur = in;
        if (in->op == IR_OP_FRAG_FILL || in->op == IR_OP_FRAG_LOAD || in->op == IR_OP_FRAG_MMA || in->op == IR_OP_FRAG_MUL_ADD ||
            in->op == IR_OP_FRAG_LOAD_TENSOR)
            spv_t_rep(x, in->type);
        if (in->op == IR_OP_FRAG_STORE && in->n_operand) spv_t_rep(x, ir_type_of(x->k, in->operand[0]));
        for (uint32_t j = 0; j < in->n_region && j < 2; j++) check_frags(x, &in->region[j], depth + 1);
    }
    if (!depth) x->e.cur = NULL;
}

static void declare_shared(spv_ctx *x) {
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < x->n_shm; i++) {
        shm_info *si = &x->shm[i];
        const ir_shared_decl *d = si->d;
        x->e.cur = NULL;
        uint32_t elem;
        uint32_t size;
        if (si->frag && !x->emu && (d->elem == IR_F16 || d->elem == IR_BF16) && !spv_t_frag_component(x, d->elem))
            return;
        if (d->elem == IR_BF16 && si->frag && !x->emu) {
            si->mode = SHM_BF16_NATIVE;
            elem = spv_t_bf16(x);
            size = 2;
        } else if (si->xchg_f32) {
            si->mode = SHM_F32_BITS;
            elem = spv_t_u32(x);
            size = 4;
        } else {
            si->mode = SHM_REP;
            elem = spv_t_rep_s(x, d->elem);
            size = spv_widened(x, d->elem) || ir_scalar_bits(d->elem) < 8 ? 4 : ir_scalar_bits(d->elem) / 8;
        }
        if (!d->count) {
            spv_fail(x, "workgroup array '%s' has no elements", d->name);
            return;
        }
        /* Where fragments load or store workgroup memory, every array is a whole number of
         * 16-byte words: a fragment's pointer must be 16-byte aligned, and NVIDIA's driver
         * places the arrays one after another at their elements' alignment, so a 4-byte
         * flag before a fragment array (in the driver's order, not the declarations')
         * shifted every fragment load from it (attn_prefill_coop.c on the H100's Vulkan:
         * wrong scores and values until the flag took 16 bytes). */
        uint64_t count = d->count;
        if (x->vulkan_mm) count = (count * size + 15) / 16 * 16 / size;
        bytes += (uint64_t)size * count;
        uint32_t arr = spv_b_type(&x->b, SpvOpTypeArray, (uint32_t[]){elem, spv_c_u32(x, (uint32_t)count)}, 2);
        si->elem_type = elem;
        si->var = spv_global_var(x, spv_t_ptr(x, SpvStorageClassWorkgroup, arr), SpvStorageClassWorkgroup);
        spv_name(x, si->var, d->name);
    }
    if (x->c->shared_bytes && bytes > x->c->shared_bytes)
        spv_fail(
            x,
            "workgroup arrays need %llu bytes (16-bit floats take 4 without native f16/bf16); caps.shared_bytes is %u",
            (unsigned long long)bytes, x->c->shared_bytes);
}

static void declare_push_constants(spv_ctx *x) {
    uint32_t np = ir_n_params(x->k), ns = 0;
    uint32_t members[PUSH_CONSTANT_BYTES / 4];
    for (uint32_t i = 0; i < np; i++) {
        const ir_param *p = ir_param_at(x->k, i);
        x->pc_member[i] = UINT32_MAX;
        if (!p || p->is_buffer) continue;
        if (p->elem != IR_I32 && p->elem != IR_U32 && p->elem != IR_F32) {
            spv_fail(x, "scalar parameter '%s' is %s; push constants take i32, u32 or f32", p->name,
                     ir_scalar_name(p->elem));
            return;
        }
        if (ns == PUSH_CONSTANT_BYTES / 4) {
            spv_fail(x, "more than %u scalar parameters: push constants hold %u bytes", PUSH_CONSTANT_BYTES / 4,
                     PUSH_CONSTANT_BYTES);
            return;
        }
        x->pc_member[i] = ns;
        members[ns++] = spv_t_rep_s(x, p->elem);
    }
    if (!ns) return;
    uint32_t st = spv_b_id(&x->b);
    uint32_t o[1 + PUSH_CONSTANT_BYTES / 4];
    o[0] = st;
    memcpy(o + 1, members, ns * sizeof *members);
    spv_b_emit(&x->b, SPV_SEC_GLOBAL, SpvOpTypeStruct, o, 1 + ns);
    spv_decorate(x, st, SpvDecorationBlock, 0, 0);
    spv_name(x, st, "Params");
    for (uint32_t i = 0; i < np; i++) {
        if (x->pc_member[i] == UINT32_MAX) continue;
        uint32_t m = x->pc_member[i];
        spv_b_emitv(&x->b, SPV_SEC_ANNOTATION, SpvOpMemberDecorate, 4, st, m, SpvDecorationOffset, 4 * m);
        const ir_param *p = ir_param_at(x->k, i);
        spv_b_emit_str(&x->b, SPV_SEC_DEBUG, SpvOpMemberName, (uint32_t[]){st, m}, 2, p->name ? p->name : "", NULL, 0);
    }
    x->pc_var = spv_global_var(x, spv_t_ptr(x, SpvStorageClassPushConstant, st), SpvStorageClassPushConstant);
    spv_name(x, x->pc_var, "params");
}

/* The scalar parameters' values, loaded once in the entry block. */
static void load_push_constants(spv_ctx *x) {
    uint32_t np = ir_n_params(x->k);
    for (uint32_t i = 0; i < np && !x->e.failed; i++) {
        if (x->pc_member[i] == UINT32_MAX) continue;
        const ir_param *p = ir_param_at(x->k, i);
        uint32_t t = spv_t_rep_s(x, p->elem);
        uint32_t ptr = spv_fn2(x, SpvOpAccessChain, spv_t_ptr(x, SpvStorageClassPushConstant, t), x->pc_var,
                               spv_c_u32(x, x->pc_member[i]));
        spv_def(x, p->value, spv_fn1(x, SpvOpLoad, t, ptr));
    }
}

static void declare_specs(spv_ctx *x) {
    uint32_t n = ir_n_specs(x->k);
    for (uint32_t i = 0; i < n && !x->e.failed; i++) {
        const ir_spec *s = ir_spec_at(x->k, i);
        uint32_t id = spv_b_id(&x->b);
        switch (s->type) {
        case IR_BOOL:
            spv_b_emitv(&x->b, SPV_SEC_GLOBAL, s->dflt != 0 ? SpvOpSpecConstantTrue : SpvOpSpecConstantFalse, 2,
                        spv_t_bool(x), id);
            break;
        case IR_I32:
        case IR_U32: {
            uint32_t bits = s->type == IR_I32 ? (uint32_t)(int32_t)s->dflt : (uint32_t)s->dflt;
            if (!(s->dflt >= -2147483648.0 && s->dflt <= 4294967295.0)) bits = 0;
            spv_b_emitv(&x->b, SPV_SEC_GLOBAL, SpvOpSpecConstant, 3, spv_t_rep_s(x, s->type), id, bits);
            break;
        }
        case IR_F32: {
            float f = (float)s->dflt;
            uint32_t bits;
            memcpy(&bits, &f, 4);
            spv_b_emitv(&x->b, SPV_SEC_GLOBAL, SpvOpSpecConstant, 3, spv_t_f32(x), id, bits);
            break;
        }
        default:
            spv_fail(x, "spec constant '%s' is %s; spec constants are bool, i32, u32 or f32", s->name,
                     ir_scalar_name(s->type));
            return;
        }
        spv_decorate(x, id, SpvDecorationSpecId, 1, i);
        spv_name(x, id, s->name);
        spv_def(x, s->value, id);
    }
}

/* Constants anywhere in the kernel become module constants. */
static void declare_constants(spv_ctx *x) {
    for (uint32_t v = 1; v <= x->e.n_val && !x->e.failed; v++) {
        const ir_inst *d = ir_def(x->k, v);
        if (!d || d->op != IR_OP_CONST || d->result != v) continue;
        ir_scalar s;
        uint32_t n;
        x->e.cur = d;
        if (!ir_emit_tinfo(&x->e, d->type, &s, &n)) {
            spv_fail(x, "constants are scalars");
            return;
        }
        /* a lowering's vector constants: every lane the same */
        spv_def(x, v, spv_c_splat(x, spv_t_rep_s(x, s), n, spv_c_scalar(x, s, (uint64_t)d->imm[0])));
    }
    x->e.cur = NULL;
}

static void decorate_buffers(spv_ctx *x) {
    for (uint32_t b = 0; b < x->n_buf; b++) {
        buf_info *bi = &x->buf[b];
        uint32_t views = 0;
        for (int v = 0; v < N_VIEW_LANES; v++) views += bi->var[v] != 0;
        for (int v = 0; v < N_VIEW_LANES; v++) {
            uint32_t var = bi->var[v];
            if (!var) continue;
            spv_decorate(x, var, SpvDecorationDescriptorSet, 1, 0);
            spv_decorate(x, var, SpvDecorationBinding, 1, b);
            if (!(bi->p->access & IR_WRITE)) spv_decorate(x, var, SpvDecorationNonWritable, 0, 0);
            if (!(bi->p->access & IR_READ) && !bi->atomic) spv_decorate(x, var, SpvDecorationNonReadable, 0, 0);
            /* another workgroup's stores, read after a fence, bypass incoherent caches (the Vulkan
             * memory model's non-private accesses and visibility semantics do that instead) */
            if (x->fence && !x->vulkan_mm && (bi->p->access & IR_WRITE))
                spv_decorate(x, var, SpvDecorationCoherent, 0, 0);
            /* two views of one written buffer may overlap: without Aliased SPIR-V assumes not */
            if (views > 1 && (bi->p->access & IR_WRITE)) spv_decorate(x, var, SpvDecorationAliased, 0, 0);
        }
    }
}

static int emit_module(spv_ctx *x, spv_module *out) {
    const ir_kernel *k = x->k;
    spv_builder *b = &x->b;
    if (ir_cluster(k) > 1 || ir_n_tensor_maps(k)) {
        spv_fail(x, "clusters of workgroups and tensor maps are CUDA's (sm_90); Vulkan has neither");
        return -1;
    }
    spv_b_capability(b, SpvCapabilityShader);

    x->n_buf = ir_n_buffers(k);
    x->n_shm = ir_n_shared(k);
    x->buf = calloc(x->n_buf ? x->n_buf : 1, sizeof *x->buf);
    x->shm = calloc(x->n_shm ? x->n_shm : 1, sizeof *x->shm);
    x->pc_member = calloc(ir_n_params(k) ? ir_n_params(k) : 1, sizeof *x->pc_member);
    if (!x->buf || !x->shm || !x->pc_member) {
        spv_fail(x, "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < x->n_buf; i++) {
        x->buf[i].p = ir_param_at(k, ir_buffer_param(k, i));
        if (!x->buf[i].p || !x->buf[i].p->is_buffer) {
            spv_fail(x, "buffer %u has no parameter", i);
            return -1;
        }
    }
    for (uint32_t i = 0; i < x->n_shm; i++) {
        x->shm[i].d = ir_shared_at(k, i);
        if (!x->shm[i].d) {
            spv_fail(x, "workgroup array %u missing", i);
            return -1;
        }
    }

    uint32_t wg[3];
    ir_val wg_spec = IR_NONE;
    ir_workgroup(k, wg, &wg_spec);

    const ir_inst *wgmma = ir_emit_find_op(ir_kernel_body(k), IR_OP_WG_MMA);
    if (wgmma) {
        x->e.cur = wgmma;
        spv_fail(x, "warpgroup matrix products (wgmma, sm_90a) have no SPIR-V equivalent");
        return -1;
    }
    scan_frags(x, ir_kernel_body(k), 0);
    check_frags(x, ir_kernel_body(k), 0);
    uint32_t fn_type = spv_b_type(b, SpvOpTypeFunction, (uint32_t[]){spv_t_void(x)}, 1);
    uint32_t main_fn = spv_b_id(b);
    spv_name(x, main_fn, "main");
    for (uint32_t i = 0; i < x->n_buf && !x->e.failed; i++) spv_buf_view(x, i, 1);
    if (!x->e.failed) declare_push_constants(x);
    if (!x->e.failed) declare_specs(x);
    if (!x->e.failed) declare_shared(x);
    if (!x->e.failed) spv_emu_declare_scratch(x);
    if (!x->e.failed) declare_constants(x);

    /* workgroup size */
    uint32_t spec_id = 0;
    if (!x->e.failed) {
        if (wg_spec != IR_NONE) {
            const ir_inst *d = ir_def(k, wg_spec);
            ir_scalar s;
            uint32_t n;
            if (!d || d->op != IR_OP_SPEC || !ir_emit_tinfo(&x->e, d->type, &s, &n) || n != 1 ||
                (s != IR_U32 && s != IR_I32)) {
                spv_fail(x, "the workgroup size spec constant must be an i32/u32 spec constant");
            } else {
                spec_id = spv_V(x, wg_spec);
                for (uint32_t i = 0; i < ir_n_specs(k); i++)
                    if (ir_spec_at(k, i)->value == wg_spec) wg[0] = (uint32_t)ir_spec_at(k, i)->dflt;
                wg[1] = wg[2] = 1;
            }
        }
        uint64_t inv = (uint64_t)wg[0] * wg[1] * wg[2];
        if (!inv)
            spv_fail(x, "workgroup size %ux%ux%u is empty", wg[0], wg[1], wg[2]);
        else if (x->c->max_workgroup && inv > x->c->max_workgroup)
            spv_fail(x, "workgroup %ux%ux%u has %llu invocations; caps.max_workgroup is %u", wg[0], wg[1], wg[2],
                     (unsigned long long)inv, x->c->max_workgroup);
    }

    /* the function */
    if (!x->e.failed) {
        spv_b_emitv(b, SPV_SEC_FUNCTION, SpvOpFunction, 4, spv_t_void(x), main_fn, SpvFunctionControlMaskNone, fn_type);
        spv_op_label(x, spv_b_id(b));
        spv_emu_declare_vars(x); /* Function variables come first in the entry block */
        load_push_constants(x);
        emit_region(x, ir_kernel_body(k));
        x->e.cur = NULL;
        spv_b_emitv(b, SPV_SEC_FUNCTION, SpvOpReturn, 0);
        spv_b_emitv(b, SPV_SEC_FUNCTION, SpvOpFunctionEnd, 0);
    }
    if (x->e.failed) return -1;
    decorate_buffers(x);
    if (x->vulkan_mm) spv_b_capability(b, SpvCapabilityVulkanMemoryModel);
    spv_b_emitv(b, SPV_SEC_MEMORY_MODEL, SpvOpMemoryModel, 2, SpvAddressingModelLogical,
                x->vulkan_mm ? SpvMemoryModelVulkan : SpvMemoryModelGLSL450);

    uint32_t pre[2] = {SpvExecutionModelGLCompute, main_fn};
    spv_b_emit_str(b, SPV_SEC_ENTRY_POINT, SpvOpEntryPoint, pre, 2, "main", x->iface, x->n_iface);
    if (spec_id)
        spv_b_emitv(b, SPV_SEC_EXEC_MODE, SpvOpExecutionModeId, 5, main_fn, SpvExecutionModeLocalSizeId, spec_id,
                    spv_c_u32(x, 1), spv_c_u32(x, 1));
    else
        spv_b_emitv(b, SPV_SEC_EXEC_MODE, SpvOpExecutionMode, 5, main_fn, SpvExecutionModeLocalSize, wg[0], wg[1],
                    wg[2]);

    if (spv_b_finish(b, SPV_VERSION_1_6, &out->words, &out->n)) {
        spv_fail(x, "out of memory");
        return -1;
    }
    return 0;
}

/* The IR's target rewrites this emitter relies on (ir/lower.h): bf16 lives in f32
 * registers, f16 too without native f16 arithmetic; both round from f32 in the IR (f16
 * even where native: NVIDIA's compiler folds an f32 -> f16 -> f32 OpFConvert pair away). */
static ir_lower_opts lower_opts(const rt_caps *c) {
    return (ir_lower_opts){.async_sync = true, /* no asynchronous copies in SPIR-V */
                           .masked = true,
                           .bf16 = {.in_f32 = true, .arith = c->bf16_arith, .round = true},
                           .f16 = {.in_f32 = !c->f16_arith, .arith = c->f16_arith, .round = true}};
}

ir_kernel *spv_lowered(const ir_kernel *k, const rt_caps *c, kiln_err *err) {
    kiln_err_clear(err);
    if (!k || !c) {
        if (err) kiln_fail(err, KILN_ERR_INVALID, "spirv: no kernel or no caps");
        return NULL;
    }
    ir_kernel *low = ir_kernel_clone(k);
    if (!low) {
        if (err) kiln_fail(err, KILN_ERR_NOMEM, "spirv: kernel '%s': out of memory", ir_kernel_name(k));
        return NULL;
    }
    ir_lower_opts o = lower_opts(c);
    kiln_err lerr = {0};
    if (ir_lower(low, &o, &lerr)) {
        if (err) kiln_err_wrap(err, &lerr, "spirv: kernel '%s'", ir_kernel_name(k));
        ir_kernel_destroy(low);
        return NULL;
    }
    return low;
}

int spv_emit(const ir_kernel *k, const rt_caps *c, spv_module *out, kiln_err *err) {
    kiln_err_clear(err);
    if (!out) return -1;
    out->words = NULL;
    out->n = 0;
    if (!k || !c) {
        if (err) kiln_fail(err, KILN_ERR_INVALID, "spirv: no kernel or no caps");
        return -1;
    }
    kiln_err verr = {0};
    if (ir_verify(k, &verr)) {
        if (err) kiln_err_wrap(err, &verr, "spirv: kernel '%s' does not verify", ir_kernel_name(k));
        return -1;
    }
    ir_kernel *low = spv_lowered(k, c, err);
    if (!low) return -1;
    spv_ctx x;
    memset(&x, 0, sizeof x);
    x.k = low;
    x.c = c;
    x.f16_native = c->f16_arith;
    x.emu = c->mma_emulated;
    spv_b_init(&x.b);
    int rc = ir_emit_init(&x.e, low, "spirv", err) ? -1 : emit_module(&x, out);
    if (x.b.oom && !x.e.failed) spv_fail(&x, "out of memory");
    if (x.e.failed) rc = -1;
    if (rc) spv_module_free(out);
    spv_b_free(&x.b);
    ir_emit_free(&x.e);
    free(x.buf);
    free(x.shm);
    free(x.pc_member);
    free(x.iface);
    ir_kernel_destroy(low);
    return rc;
}

void spv_module_free(spv_module *m) {
    if (!m) return;
    free(m->words);
    m->words = NULL;
    m->n = 0;
}
