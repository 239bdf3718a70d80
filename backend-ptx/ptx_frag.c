/* Matrix fragments for the PTX emitter, lowered to the warp-wide mma.sync.m16n8k16 of
 * sm_80+ (f16/bf16 A and B, f32 accumulators): each lane holds the fragment elements
 * PTX assigns it (ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4 and
 * t = lane % 4:
 *   A 16x16, 8 elements: e -> row g + 8 * ((e >> 1) & 1), column 2t + (e & 1) + 8 * (e >> 2)
 *   B 16x8,  4 elements: e -> row (k) 2t + (e & 1) + 8 * (e >> 1), column (n) g
 *   C 16x8,  4 f32:      e -> row g + 8 * (e >> 1), column 2t + (e & 1)
 * In LLVM a fragment is a vector: A <8 x i16>, B <4 x i16> (the raw 16-bit values, which
 * the instruction takes packed two to a 32-bit register, lower index in the low half)
 * and C <4 x float>. Loads and stores move each lane's elements one by one, so any base,
 * stride and layout the IR allows works; where a 16-bit fragment's pairs (e, e + 1) lie
 * next to each other in a buffer (A row-major, B column-major: along k) and base and
 * stride are even, a load takes each pair as one 32-bit word instead (a uniform branch on
 * (base | stride) & 1, which LLVM folds where it can prove it). From workgroup memory the
 * same pairs come through ldmatrix where base and stride are multiples of 8. */
#include "backend-ptx/ptx_internal.h"

#include <stdio.h>
#include <string.h>

static LLVMTypeRef t_i16(ptx_ctx *x) { return LLVMInt16TypeInContext(x->lc); }
static LLVMTypeRef t_f32(ptx_ctx *x) { return LLVMFloatTypeInContext(x->lc); }

/* The one fragment family lowered: 16x8x16, A/B f16 or bf16, accumulators f32. */
static const ir_type_desc *frag_desc(ptx_ctx *x, ir_type t) {
    const ir_type_desc *d = ir_type_get(x->k, t);
    if (!d || d->kind != IR_T_FRAG) {
        ptx_fail(x, "not a fragment type");
        return NULL;
    }
    if (d->wg) {
        ptx_fail(x, "workgroup fragments (VK_NV_cooperative_matrix2's workgroup scope) have no PTX lowering");
        return NULL;
    }
    bool ab = d->use != IR_FRAG_ACC;
    if (!ab && d->m == 64 && d->k == 16 && d->n >= 8 && d->n <= 256 && d->n % 8 == 0 && d->elem == IR_F32) {
        if (x->sm < 90 || !x->c->wgmma) {
            ptx_fail(x, "warpgroup accumulators (m64) need wgmma: sm_90a and caps.wgmma (sm_%u)", x->sm);
            return NULL;
        }
        return d;
    }
    if (x->sm < 80) {
        ptx_fail(x, "matrix fragments need mma.sync (sm_80 or newer), not sm_%u", x->sm);
        return NULL;
    }
    if (d->m != 16 || d->n != 8 || d->k != 16 || (ab && d->elem != IR_F16 && d->elem != IR_BF16) ||
        (!ab && d->elem != IR_F32)) {
        ptx_fail(x, "fragment %ux%ux%u of %s: PTX lowers m16n8k16 (f16/bf16 inputs, f32 accumulators) only", d->m, d->n,
                 d->k, ir_scalar_name(d->elem));
        return NULL;
    }
    return d;
}

/* A 8, B 4, accumulators 4 (16x8) or n / 2 (a warpgroup's m64 x n: 16 rows a warp) */
static uint32_t frag_count(const ir_type_desc *d) {
    return d->use == IR_FRAG_A ? 8 : d->use == IR_FRAG_B ? 4 : d->m == 64 ? d->n / 2 : 4;
}

LLVMTypeRef ptx_frag_type(ptx_ctx *x, ir_type t) {
    const ir_type_desc *d = frag_desc(x, t);
    if (!d) return ptx_t_i32(x);
    return LLVMVectorType(d->use == IR_FRAG_ACC ? t_f32(x) : t_i16(x), frag_count(d));
}

/* (row, column) of this lane's element e */
static void coord(ptx_ctx *x, const ir_type_desc *d, LLVMValueRef g, LLVMValueRef t2, uint32_t e, LLVMValueRef *r,
                  LLVMValueRef *c) {
    uint32_t dr, dc;
    switch (d->use) {
    case IR_FRAG_A: dr = 8 * ((e >> 1) & 1), dc = (e & 1) + 8 * (e >> 2); break;
    case IR_FRAG_B: dr = (e & 1) + 8 * (e >> 1), dc = 0; break;
    default: dr = 8 * ((e >> 1) & 1), dc = (e & 1) + 8 * (e >> 2); break; /* 16x8, and each 8 columns of m64 */
    }
    /* A and C: rows from g, columns from 2t; B: rows (k) from 2t, columns (n) from g */
    LLVMValueRef rb = d->use == IR_FRAG_B ? t2 : g, cb = d->use == IR_FRAG_B ? g : t2;
    *r = LLVMBuildAdd(x->b, rb, ptx_c_i32(x, dr), "");
    *c = LLVMBuildAdd(x->b, cb, ptx_c_i32(x, dc), "");
}

/* element pointer of (r, c) at base with stride, row- or column-major, in the array p
 * of 16- or 32-bit elements */
static LLVMValueRef at(ptx_ctx *x, LLVMValueRef p, LLVMTypeRef et, LLVMValueRef base, LLVMValueRef stride,
                       bool row_major, LLVMValueRef r, LLVMValueRef c) {
    LLVMValueRef i = LLVMBuildAdd(x->b, base,
                                  row_major ? LLVMBuildAdd(x->b, LLVMBuildMul(x->b, r, stride, ""), c, "")
                                            : LLVMBuildAdd(x->b, LLVMBuildMul(x->b, c, stride, ""), r, ""),
                                  "");
    LLVMValueRef i64 = LLVMBuildZExt(x->b, i, LLVMInt64TypeInContext(x->lc), "");
    return LLVMBuildInBoundsGEP2(x->b, et, p, &i64, 1, "");
}

/* the array a FRAG_LOAD/STORE names: a buffer's pointer or a workgroup array */
static LLVMValueRef array_of(ptx_ctx *x, const ir_inst *in) {
    int64_t idx = in->imm[0];
    bool shm = in->imm[2];
    if (idx < 0 || (uint64_t)idx >= (shm ? x->n_shm : x->n_buf)) {
        ptx_fail(x, "fragment %s %lld out of range", shm ? "array" : "buffer", (long long)idx);
        return NULL;
    }
    return shm ? x->shm[idx] : x->buf[idx];
}

/* g = lane / 4 (plus 16 rows per warp of a warpgroup's m64 accumulator), t2 = 2 (lane % 4) */
static void lane_coords(ptx_ctx *x, const ir_type_desc *d, LLVMValueRef *g, LLVMValueRef *t2) {
    LLVMValueRef lane = ptx_load_id(x, IR_ID_SG_LANE, 0);
    *g = LLVMBuildLShr(x->b, lane, ptx_c_i32(x, 2), "");
    if (d->m == 64) {
        LLVMValueRef w = LLVMBuildAnd(x->b, ptx_load_id(x, IR_ID_SG_ID, 0), ptx_c_i32(x, 3), "");
        *g = LLVMBuildAdd(x->b, *g, LLVMBuildShl(x->b, w, ptx_c_i32(x, 4), ""), "");
    }
    *t2 = LLVMBuildShl(x->b, LLVMBuildAnd(x->b, lane, ptx_c_i32(x, 3), ""), ptx_c_i32(x, 1), "");
}

/* The fragment's elements one by one. */
static LLVMValueRef load_elements(ptx_ctx *x, const ir_inst *in, const ir_type_desc *d, LLVMValueRef p,
                                  LLVMValueRef base, LLVMValueRef stride, LLVMValueRef g, LLVMValueRef t2) {
    bool acc = d->use == IR_FRAG_ACC;
    LLVMTypeRef et = acc ? t_f32(x) : t_i16(x);
    LLVMValueRef v = LLVMGetPoison(ptx_frag_type(x, in->type));
    for (uint32_t e = 0; e < frag_count(d); e++) {
        LLVMValueRef r, c;
        coord(x, d, g, t2, e, &r, &c);
        bool rm = (in->imm[1] & IR_FRAG_ROW_MAJOR) != 0;
        LLVMValueRef ld = LLVMBuildLoad2(x->b, et, at(x, p, et, base, stride, rm, r, c), "");
        LLVMSetAlignment(ld, acc ? 4 : 2);
        v = LLVMBuildInsertElement(x->b, v, ld, ptx_c_i32(x, e), "");
    }
    return v;
}

/* The 16-bit pairs (e, e + 1) as 32-bit words: their first element's address is even
 * when base and stride are. */
static LLVMValueRef load_pairs(ptx_ctx *x, const ir_inst *in, const ir_type_desc *d, LLVMValueRef p, LLVMValueRef base,
                               LLVMValueRef stride, LLVMValueRef g, LLVMValueRef t2) {
    LLVMTypeRef i32 = ptx_t_i32(x), i16 = t_i16(x);
    uint32_t n = frag_count(d) / 2;
    LLVMValueRef w = LLVMGetPoison(LLVMVectorType(i32, n));
    for (uint32_t e = 0; e < 2 * n; e += 2) {
        LLVMValueRef r, c;
        coord(x, d, g, t2, e, &r, &c);
        bool rm = (in->imm[1] & IR_FRAG_ROW_MAJOR) != 0;
        LLVMValueRef ld = LLVMBuildLoad2(x->b, i32, at(x, p, i16, base, stride, rm, r, c), "");
        LLVMSetAlignment(ld, 4);
        w = LLVMBuildInsertElement(x->b, w, ld, ptx_c_i32(x, e / 2), "");
    }
    return LLVMBuildBitCast(x->b, w, ptx_frag_type(x, in->type), "");
}

/* From workgroup memory, where the pairs lie along the rows of 8x8 tiles (A row-major,
 * B column-major) and base and stride are multiples of 8 (each tile row 16 aligned
 * bytes): ldmatrix, which hands every lane its pairs of 8x8 tiles from row addresses the
 * lanes give. A (x4) takes tiles (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15),
 * (rows 8-15, k 8-15), its registers 0..3 in that order; B (x2) the tiles of k 0-7 and
 * 8-15, the tile rows being B's 8 columns; B row-major (x2.trans) the same tiles stored as
 * 8 rows of k, each 8 columns long. Lane l gives row l % 8 of tile l / 8. */
static LLVMValueRef load_ldmatrix(ptx_ctx *x, const ir_inst *in, const ir_type_desc *d, LLVMValueRef p,
                                  LLVMValueRef base, LLVMValueRef stride, bool trans) {
    LLVMTypeRef i32 = ptx_t_i32(x);
    LLVMValueRef lane = ptx_load_id(x, IR_ID_SG_LANE, 0);
    LLVMValueRef r = LLVMBuildAnd(x->b, lane, ptx_c_i32(x, 7), "");
    LLVMValueRef tile = LLVMBuildAnd(x->b, LLVMBuildLShr(x->b, lane, ptx_c_i32(x, 3), ""), ptx_c_i32(x, 3), "");
    bool a = d->use == IR_FRAG_A;
    LLVMValueRef row, k;
    if (a) { /* tile bit 0: rows + 8; bit 1: k + 8 */
        row = LLVMBuildAdd(x->b, r,
                           LLVMBuildShl(x->b, LLVMBuildAnd(x->b, tile, ptx_c_i32(x, 1), ""), ptx_c_i32(x, 3), ""), "");
        k = LLVMBuildShl(x->b, LLVMBuildLShr(x->b, tile, ptx_c_i32(x, 1), ""), ptx_c_i32(x, 3), "");
    } else if (!trans) { /* tile bit 0: k + 8 (lanes 16-31 repeat 0-15: .x2 ignores their addresses) */
        row = r;
        k = LLVMBuildShl(x->b, LLVMBuildAnd(x->b, tile, ptx_c_i32(x, 1), ""), ptx_c_i32(x, 3), "");
    } else { /* B row-major: the tile rows are B's k (8 consecutive n each), transposed on the way */
        row = LLVMBuildAdd(x->b, r,
                           LLVMBuildShl(x->b, LLVMBuildAnd(x->b, tile, ptx_c_i32(x, 1), ""), ptx_c_i32(x, 3), ""), "");
        k = ptx_c_i32(x, 0);
    }
    /* A: (row, k) row-major; B: column `row` (n), k down it, column-major */
    LLVMValueRef at_ = LLVMBuildAdd(x->b, base, LLVMBuildAdd(x->b, LLVMBuildMul(x->b, row, stride, ""), k, ""), "");
    LLVMValueRef i64 = LLVMBuildZExt(x->b, at_, LLVMInt64TypeInContext(x->lc), "");
    LLVMValueRef ptr = LLVMBuildInBoundsGEP2(x->b, t_i16(x), p, &i64, 1, "");
    uint32_t n = a ? 4 : 2;
    LLVMTypeRef rt[4] = {i32, i32, i32, i32}, pt = LLVMTypeOf(ptr);
    LLVMValueRef call = ptx_call(x,
                                 a       ? "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16.p3"
                                 : trans ? "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x2.trans.b16.p3"
                                         : "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x2.b16.p3",
                                 LLVMStructTypeInContext(x->lc, rt, n, 0), &pt, &ptr, 1);
    LLVMValueRef w = LLVMGetPoison(LLVMVectorType(i32, n));
    for (uint32_t i = 0; i < n; i++)
        w = LLVMBuildInsertElement(x->b, w, LLVMBuildExtractValue(x->b, call, i, ""), ptx_c_i32(x, i), "");
    return LLVMBuildBitCast(x->b, w, ptx_frag_type(x, in->type), "");
}

static void emit_load(ptx_ctx *x, const ir_inst *in) {
    const ir_type_desc *d = frag_desc(x, in->type);
    LLVMValueRef p = array_of(x, in);
    if (!d || !p || !ir_emit_need(&x->e, in, 2)) return;
    LLVMValueRef base = ptx_V(x, in->operand[0]), stride = ptx_V(x, in->operand[1]), g, t2;
    lane_coords(x, d, &g, &t2);
    bool row_major = (in->imm[1] & IR_FRAG_ROW_MAJOR) != 0;
    bool pairs_adjacent = (d->use == IR_FRAG_A && row_major) || (d->use == IR_FRAG_B && !row_major);
    /* B row-major in workgroup memory: ldmatrix's transposing form */
    bool trans = in->imm[2] && d->use == IR_FRAG_B && row_major;
    if (d->use == IR_FRAG_ACC || (!pairs_adjacent && !trans)) {
        ptx_def(x, in->result, load_elements(x, in, d, p, base, stride, g, t2));
        return;
    }
    /* workgroup memory: ldmatrix where base and stride are multiples of 8 (a uniform
     * branch LLVM folds where it proves it, as in the staged products) */
    bool shm = in->imm[2] != 0;
    LLVMValueRef odd = LLVMBuildAnd(x->b, LLVMBuildOr(x->b, base, stride, ""), ptx_c_i32(x, shm ? 7 : 1), "");
    LLVMValueRef even = LLVMBuildICmp(x->b, LLVMIntEQ, odd, ptx_c_i32(x, 0), "");
    LLVMBasicBlockRef bp = LLVMAppendBasicBlockInContext(x->lc, x->fn, "frag_pairs");
    LLVMBasicBlockRef be = LLVMAppendBasicBlockInContext(x->lc, x->fn, "frag_elems");
    LLVMBasicBlockRef bj = LLVMAppendBasicBlockInContext(x->lc, x->fn, "frag_loaded");
    LLVMBuildCondBr(x->b, even, bp, be);
    LLVMPositionBuilderAtEnd(x->b, bp);
    LLVMValueRef vp =
        shm ? load_ldmatrix(x, in, d, p, base, stride, trans) : load_pairs(x, in, d, p, base, stride, g, t2);
    LLVMBasicBlockRef bp_end = LLVMGetInsertBlock(x->b);
    LLVMBuildBr(x->b, bj);
    LLVMPositionBuilderAtEnd(x->b, be);
    LLVMValueRef ve = load_elements(x, in, d, p, base, stride, g, t2);
    LLVMBasicBlockRef be_end = LLVMGetInsertBlock(x->b);
    LLVMBuildBr(x->b, bj);
    LLVMPositionBuilderAtEnd(x->b, bj);
    LLVMValueRef phi = LLVMBuildPhi(x->b, ptx_frag_type(x, in->type), "");
    LLVMValueRef vals[2] = {vp, ve};
    LLVMBasicBlockRef from[2] = {bp_end, be_end};
    LLVMAddIncoming(phi, vals, from, 2);
    ptx_def(x, in->result, phi);
}

static void emit_store(ptx_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 3)) return;
    const ir_type_desc *d = frag_desc(x, ir_type_of(x->k, in->operand[0]));
    LLVMValueRef p = array_of(x, in);
    if (!d || !p) return;
    LLVMValueRef v = ptx_V(x, in->operand[0]), base = ptx_V(x, in->operand[1]), stride = ptx_V(x, in->operand[2]);
    LLVMValueRef g, t2;
    lane_coords(x, d, &g, &t2);
    bool acc = d->use == IR_FRAG_ACC;
    LLVMTypeRef et = acc ? t_f32(x) : t_i16(x);
    for (uint32_t e = 0; e < frag_count(d); e++) {
        LLVMValueRef r, c;
        coord(x, d, g, t2, e, &r, &c);
        LLVMValueRef st = LLVMBuildStore(x->b, LLVMBuildExtractElement(x->b, v, ptx_c_i32(x, e), ""),
                                         at(x, p, et, base, stride, (in->imm[1] & IR_FRAG_ROW_MAJOR) != 0, r, c));
        LLVMSetAlignment(st, acc ? 4 : 2);
    }
}

static void emit_fill(ptx_ctx *x, const ir_inst *in) {
    const ir_type_desc *d = frag_desc(x, in->type);
    if (!d || !ir_emit_need(&x->e, in, 1)) return;
    LLVMValueRef s = ptx_V(x, in->operand[0]);
    ir_scalar ss;
    uint32_t lanes;
    if (!ptx_tinfo(x, ir_type_of(x->k, in->operand[0]), &ss, &lanes)) return;
    /* A/B hold raw 16-bit values: the scalar (of the element type, in an f32 register) as its bits */
    if (d->use != IR_FRAG_ACC) s = ptx_to_storage(x, d->elem, 1, s);
    LLVMValueRef v = LLVMGetPoison(ptx_frag_type(x, in->type));
    for (uint32_t e = 0; e < frag_count(d); e++) v = LLVMBuildInsertElement(x->b, v, s, ptx_c_i32(x, e), "");
    ptx_def(x, in->result, v);
}

/* d = a * b + c through inline PTX: the 16-bit pairs packed into 32-bit registers */
static void emit_mma(ptx_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 3)) return;
    const ir_type_desc *da = frag_desc(x, ir_type_of(x->k, in->operand[0]));
    const ir_type_desc *db = frag_desc(x, ir_type_of(x->k, in->operand[1]));
    const ir_type_desc *dc = frag_desc(x, ir_type_of(x->k, in->operand[2]));
    if (!da || !db || !dc) return;
    if (dc->m != 16) {
        ptx_fail(x, "frag.mma takes 16x8 accumulators; a warpgroup's m64 is wg.mma's");
        return;
    }
    if (da->elem != db->elem) {
        ptx_fail(x, "mma of %s by %s", ir_scalar_name(da->elem), ir_scalar_name(db->elem));
        return;
    }
    LLVMTypeRef i32 = ptx_t_i32(x), f32 = t_f32(x);
    LLVMValueRef a = LLVMBuildBitCast(x->b, ptx_V(x, in->operand[0]), LLVMVectorType(i32, 4), "");
    LLVMValueRef b = LLVMBuildBitCast(x->b, ptx_V(x, in->operand[1]), LLVMVectorType(i32, 2), "");
    LLVMValueRef c = ptx_V(x, in->operand[2]);
    LLVMValueRef args[10];
    LLVMTypeRef at_[10];
    for (uint32_t i = 0; i < 4; i++) args[i] = LLVMBuildExtractElement(x->b, a, ptx_c_i32(x, i), ""), at_[i] = i32;
    for (uint32_t i = 0; i < 2; i++)
        args[4 + i] = LLVMBuildExtractElement(x->b, b, ptx_c_i32(x, i), ""), at_[4 + i] = i32;
    for (uint32_t i = 0; i < 4; i++)
        args[6 + i] = LLVMBuildExtractElement(x->b, c, ptx_c_i32(x, i), ""), at_[6 + i] = f32;
    LLVMTypeRef rt[4] = {f32, f32, f32, f32};
    LLVMTypeRef ret = LLVMStructTypeInContext(x->lc, rt, 4, 0);
    LLVMTypeRef fty = LLVMFunctionType(ret, at_, 10, 0);
    char text[200];
    const char *ty = da->elem == IR_BF16 ? "bf16" : "f16";
    snprintf(text, sizeof text,
             "mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32 {$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, "
             "{$10,$11,$12,$13};",
             ty, ty);
    static const char cons[] = "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f";
    LLVMValueRef asm_ =
        LLVMGetInlineAsm(fty, text, strlen(text), (char *)cons, sizeof cons - 1, 0, 0, LLVMInlineAsmDialectATT, 0);
    LLVMValueRef call = LLVMBuildCall2(x->b, fty, asm_, args, 10, "");
    LLVMValueRef dv = LLVMGetPoison(LLVMVectorType(f32, 4));
    for (uint32_t i = 0; i < 4; i++)
        dv = LLVMBuildInsertElement(x->b, dv, LLVMBuildExtractValue(x->b, call, i, ""), ptx_c_i32(x, i), "");
    ptx_def(x, in->result, dv);
}

/* frag.elems / frag.from_elems: the lane's elements are the fragment's LLVM vector (an ACC
 * is <4 x float> either way; an A's or B's 16-bit elements go to their storage form, an
 * A's two halves joined). */
static void emit_elems(ptx_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 1)) return;
    if (in->op == IR_OP_FRAG_ELEMS) {
        if (frag_desc(x, ir_type_of(x->k, in->operand[0]))) ptx_def(x, in->result, ptx_V(x, in->operand[0]));
        return;
    }
    const ir_type_desc *d = frag_desc(x, in->type);
    if (!d) return;
    if (d->use == IR_FRAG_ACC) {
        ptx_def(x, in->result, ptx_V(x, in->operand[0]));
        return;
    }
    const ir_type_desc *w = in->n_operand == 1 ? ir_type_get(x->k, ir_type_of(x->k, in->operand[0])) : NULL;
    if (w && w->kind == IR_T_VECTOR && w->elem == IR_U32) {
        /* the registers' words: two 16-bit elements each, the lower in the low half */
        ptx_def(x, in->result, LLVMBuildBitCast(x->b, ptx_V(x, in->operand[0]), ptx_frag_type(x, in->type), ""));
        return;
    }
    if (d->use == IR_FRAG_B) {
        ptx_def(x, in->result, ptx_to_storage(x, d->elem, 4, ptx_V(x, in->operand[0])));
        return;
    }
    if (!ir_emit_need(&x->e, in, 2)) return;
    LLVMValueRef lo = ptx_to_storage(x, d->elem, 4, ptx_V(x, in->operand[0]));
    LLVMValueRef hi = ptx_to_storage(x, d->elem, 4, ptx_V(x, in->operand[1]));
    LLVMValueRef idx[8];
    for (uint32_t i = 0; i < 8; i++) idx[i] = ptx_c_i32(x, i);
    ptx_def(x, in->result, LLVMBuildShuffleVector(x->b, lo, hi, LLVMConstVector(idx, 8), ""));
}

/* frag.pair_sub: the words as pairs of 16-bit floats, subtracted (sub.bf16x2 / sub.f16x2) */
static void emit_pair_sub(ptx_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 2)) return;
    ir_scalar s;
    uint32_t n;
    if (!ir_emit_tinfo(&x->e, in->type, &s, &n)) return;
    LLVMTypeRef h = in->imm[0] == IR_BF16 ? LLVMBFloatTypeInContext(x->lc) : LLVMHalfTypeInContext(x->lc);
    LLVMTypeRef pairs = LLVMVectorType(h, 2 * n), words = LLVMTypeOf(ptx_V(x, in->operand[0]));
    LLVMValueRef a = LLVMBuildBitCast(x->b, ptx_V(x, in->operand[0]), pairs, "");
    LLVMValueRef b = LLVMBuildBitCast(x->b, ptx_V(x, in->operand[1]), pairs, "");
    ptx_def(x, in->result, LLVMBuildBitCast(x->b, LLVMBuildFSub(x->b, a, b, ""), words, ""));
}

/* frag.mul_add: an accumulator's registers are a vector of f32 */
static void emit_mul_add(ptx_ctx *x, const ir_inst *in) {
    LLVMValueRef p = LLVMBuildFMul(x->b, ptx_V(x, in->operand[0]), ptx_V(x, in->operand[1]), "");
    ptx_def(x, in->result, LLVMBuildFAdd(x->b, p, ptx_V(x, in->operand[2]), ""));
}

void ptx_emit_frag(ptx_ctx *x, const ir_inst *in) {
    switch (in->op) {
    case IR_OP_FRAG_FILL: emit_fill(x, in); break;
    case IR_OP_FRAG_LOAD: emit_load(x, in); break;
    case IR_OP_FRAG_STORE: emit_store(x, in); break;
    case IR_OP_FRAG_MMA: emit_mma(x, in); break;
    case IR_OP_FRAG_MUL_ADD: emit_mul_add(x, in); break;
    case IR_OP_FRAG_ELEMS: case IR_OP_FRAG_FROM_ELEMS: emit_elems(x, in); break;
    case IR_OP_FRAG_PAIR_SUB: emit_pair_sub(x, in); break;
    case IR_OP_WG_MMA: ptx_emit_wgmma(x, in); break;
    case IR_OP_WG_WAIT: ptx_emit_wg_wait(x, in); break;
    case IR_OP_FRAG_LOAD_TENSOR: ptx_fail(x, "tensor-addressed fragment loads (VK_NV_cooperative_matrix2) have no PTX lowering"); break;
    default: ptx_fail(x, "not a fragment instruction"); break;
    }
}
