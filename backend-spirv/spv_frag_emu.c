/* Matrix fragments without cooperative matrices (caps.mma_emulated: the test switch
 * debug-emulate-coopmat, for lavapipe in CI), so the kernels built on fragments run where
 * no matrix units are. A subgroup fragment of R x C elements is an array of R*C/S f32 in
 * each invocation (S = caps.subgroup_size): element e = r*C + c, row-major, is slot e / S
 * of lane e % S. Loads and stores address each slot's element; an mma stores A and B into
 * a workgroup scratch array (a region per subgroup, in the 16-bit type: exact) and each
 * invocation sums its own elements of C over K in order, one fma a product. Elementwise
 * products of accumulators are per slot. Correct, not fast. */
#include "backend-spirv/spv_internal.h"

#include <spirv/unified1/GLSL.std.450.h>

#define MAX_SLOTS SPV_EMU_MAX_SLOTS

static uint32_t rows_of(const ir_type_desc *d) { return d->use == IR_FRAG_B ? d->k : d->m; }
static uint32_t cols_of(const ir_type_desc *d) { return d->use == IR_FRAG_A ? d->k : d->n; }

static uint32_t slots_of(const spv_ctx *x, const ir_type_desc *d) {
    return rows_of(d) * cols_of(d) / x->c->subgroup_size;
}

uint32_t spv_emu_scratch_elems(uint32_t m, uint32_t n, uint32_t k) { return m * k + k * n; }

uint32_t spv_emu_frag_type(spv_ctx *x, const ir_type_desc *d) {
    uint32_t s = x->c->subgroup_size, e = rows_of(d) * cols_of(d);
    int ab = d->use == IR_FRAG_ACC ? -1 : (int)d->elem, acc = d->use == IR_FRAG_ACC ? (int)d->elem : -1;
    if (d->wg) {
        spv_fail(x, "workgroup fragments are not emulated (debug-emulate-coopmat emulates subgroup ones)");
        return 0;
    }
    if (!spv_mma_find(x->c, d->m, d->n, d->k, ab, acc)) {
        spv_fail(x, "fragment %ux%ux%u of %s is not one of the emulated shapes (caps.mma)", d->m, d->n, d->k,
                 ir_scalar_name(d->elem));
        return 0;
    }
    if (!s || e % s || e / s > MAX_SLOTS) {
        spv_fail(x, "an emulated %u-element fragment needs a subgroup of a size dividing it (%u)", e, s);
        return 0;
    }
    return spv_b_type(&x->b, SpvOpTypeArray, (uint32_t[]){spv_t_f32(x), spv_c_u32(x, e / s)}, 2);
}

/* ---- values ----------------------------------------------------------------------------------- */

static uint32_t to_f32(spv_ctx *x, ir_scalar s, uint32_t v) {
    return s == IR_F16 && x->f16_native ? spv_fn1(x, SpvOpFConvert, spv_t_f32(x), v) : v;
}
static uint32_t from_f32(spv_ctx *x, ir_scalar s, uint32_t v) {
    return s == IR_F16 && x->f16_native ? spv_fn1(x, SpvOpFConvert, spv_t_rep_s(x, s), v) : v;
}

static uint32_t slot(spv_ctx *x, uint32_t arr, uint32_t i) {
    return spv_fn2(x, SpvOpCompositeExtract, spv_t_f32(x), arr, i);
}

static uint32_t construct(spv_ctx *x, uint32_t type, const uint32_t *parts, uint32_t n) {
    uint32_t o[2 + MAX_SLOTS] = {type, spv_b_id(&x->b)};
    for (uint32_t i = 0; i < n; i++) o[2 + i] = parts[i];
    spv_b_emit(&x->b, SPV_SEC_FUNCTION, SpvOpCompositeConstruct, o, 2 + n);
    return o[1];
}

static uint32_t u32c(spv_ctx *x, uint32_t v) { return spv_c_u32(x, v); }
static uint32_t add(spv_ctx *x, uint32_t a, uint32_t b) { return spv_fn2(x, SpvOpIAdd, spv_t_u32(x), a, b); }
static uint32_t mul(spv_ctx *x, uint32_t a, uint32_t b) { return spv_fn2(x, SpvOpIMul, spv_t_u32(x), a, b); }

/* ---- loops ------------------------------------------------------------------------------------ */

/* A loop over [0, n) that the compiler is asked not to unroll (lavapipe compiles each
 * fragment op once, not once a slot). The fragments it walks sit in a Function variable
 * of their array type, declared in the entry block (spv_emu_declare_vars). */
typedef struct emu_loop {
    uint32_t header, cont, merge, iv, iv_next;
} emu_loop;

static void loop_begin(spv_ctx *x, emu_loop *l, uint32_t n) {
    uint32_t pre = x->label, cond = spv_b_id(&x->b), body = spv_b_id(&x->b), tu = spv_t_u32(x);
    l->header = spv_b_id(&x->b), l->cont = spv_b_id(&x->b), l->merge = spv_b_id(&x->b);
    l->iv = spv_b_id(&x->b), l->iv_next = spv_b_id(&x->b);
    spv_op_branch(x, l->header);
    spv_op_label(x, l->header);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpPhi, 6, tu, l->iv, u32c(x, 0), pre, l->iv_next, l->cont);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpLoopMerge, 3, l->merge, l->cont, SpvLoopControlDontUnrollMask);
    spv_op_branch(x, cond);
    spv_op_label(x, cond);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpBranchConditional, 3,
                spv_fn2(x, SpvOpULessThan, spv_t_bool(x), l->iv, u32c(x, n)), body, l->merge);
    spv_op_label(x, body);
}

static void loop_end(spv_ctx *x, emu_loop *l) {
    spv_op_branch(x, l->cont);
    spv_op_label(x, l->cont);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpIAdd, 4, spv_t_u32(x), l->iv_next, l->iv, u32c(x, 1));
    spv_op_branch(x, l->header);
    spv_op_label(x, l->merge);
}

/* The Function variable for fragments of n slots, and a pointer to its slot i (a value). */
static uint32_t var_of(spv_ctx *x, uint32_t n) {
    if (n > MAX_SLOTS || !x->emu_var[n]) spv_fail(x, "no emulated fragment variable of %u slots", n);
    return n <= MAX_SLOTS ? x->emu_var[n] : 0;
}
static uint32_t var_slot(spv_ctx *x, uint32_t var, uint32_t i) {
    return spv_fn2(x, SpvOpAccessChain, spv_t_ptr(x, SpvStorageClassFunction, spv_t_f32(x)), var, i);
}

/* A fragment's n slots into var, and back as a value of type t: slot by slot (Mesa 22.3's
 * lavapipe mishandled whole-array stores and loads of a variable indexed in loops). */
static void var_put(spv_ctx *x, uint32_t var, uint32_t frag, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) spv_op_store(x, var_slot(x, var, u32c(x, i)), slot(x, frag, i));
}
static uint32_t var_get(spv_ctx *x, uint32_t var, uint32_t t, uint32_t n) {
    uint32_t parts[MAX_SLOTS];
    for (uint32_t i = 0; i < n; i++) parts[i] = spv_op_load(x, spv_t_f32(x), var_slot(x, var, u32c(x, i)));
    return construct(x, t, parts, n);
}

/* Slots a loop iteration takes: lavapipe (Mesa 22.3) ends a shader's loops once they
 * have run 65535 iterations in all, so a kernel of many chunks must not spend one an
 * element; a few slots an iteration keep the count low and the code small. */
#define MOVE_UNROLL 8u
#define MMA_UNROLL 1u
static uint32_t unroll_of(uint32_t n, uint32_t u) {
    while (n % u) u /= 2;
    return u;
}

/* slot iv * u + j (values) */
static uint32_t slot_at(spv_ctx *x, uint32_t iv, uint32_t u, uint32_t j) {
    return add(x, mul(x, iv, u32c(x, u)), u32c(x, j));
}

/* e = i * S + lane: the element of slot i (a value) in this invocation */
static uint32_t elem_of(spv_ctx *x, uint32_t i, uint32_t lane) {
    return add(x, mul(x, i, u32c(x, x->c->subgroup_size)), lane);
}

/* ---- loads, stores, fills ----------------------------------------------------------------------- */

/* The memory's element type: the fragment's own (no reinterpretation in emulation). */
static bool same_elem(spv_ctx *x, const ir_type_desc *d, bool shm, uint32_t at) {
    ir_scalar m = shm ? x->shm[at].d->elem : x->buf[at].p->elem;
    if (m == d->elem) return true;
    spv_fail(x, "an emulated fragment of %s loads or stores %s memory; it takes its own element type",
             ir_scalar_name(d->elem), ir_scalar_name(m));
    return false;
}

static void load_store(spv_ctx *x, const ir_inst *in) {
    bool load = in->op == IR_OP_FRAG_LOAD, shm = in->imm[2] != 0, row_major = in->imm[1] & IR_FRAG_ROW_MAJOR;
    uint32_t o = load ? 0 : 1;
    if (!ir_emit_need(&x->e, in, 2 + o)) return;
    uint32_t at = spv_imm_u32(x, in, 0, shm ? x->n_shm : x->n_buf, shm ? "workgroup array" : "buffer");
    ir_type ft = load ? in->type : ir_type_of(x->k, in->operand[0]);
    const ir_type_desc *d = ir_type_get(x->k, ft);
    uint32_t t = spv_t_rep(x, ft);
    if (x->e.failed || !t || !d || !same_elem(x, d, shm, at)) return;
    uint32_t base = spv_V(x, in->operand[o]), stride = spv_V(x, in->operand[o + 1]), cols = u32c(x, cols_of(d));
    uint32_t lane = spv_load_id(x, IR_ID_SG_LANE, 0), var = var_of(x, slots_of(x, d));
    if (!var) return;
    if (!load) var_put(x, var, spv_V(x, in->operand[0]), slots_of(x, d));
    emu_loop l;
    uint32_t n = slots_of(x, d), u = unroll_of(n, MOVE_UNROLL);
    loop_begin(x, &l, n / u);
    for (uint32_t j = 0; j < u; j++) {
        uint32_t i = slot_at(x, l.iv, u, j), e = elem_of(x, i, lane);
        uint32_t r = spv_fn2(x, SpvOpUDiv, spv_t_u32(x), e, cols), c = spv_fn2(x, SpvOpUMod, spv_t_u32(x), e, cols);
        uint32_t idx =
            row_major ? add(x, base, add(x, mul(x, r, stride), c)) : add(x, base, add(x, mul(x, c, stride), r));
        uint32_t p = var_slot(x, var, i);
        if (load) {
            uint32_t v = shm ? spv_shm_load1(x, at, idx) : spv_buf_load(x, at, idx, 1);
            spv_op_store(x, p, to_f32(x, d->elem, v));
        } else {
            uint32_t v = from_f32(x, d->elem, spv_op_load(x, spv_t_f32(x), p));
            if (shm) spv_shm_store1(x, at, idx, v);
            else spv_buf_store(x, at, idx, 1, v);
        }
    }
    loop_end(x, &l);
    if (load) spv_def(x, in->result, var_get(x, var, t, slots_of(x, d)));
}

static void fill(spv_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 1)) return;
    const ir_type_desc *d = ir_type_get(x->k, in->type);
    uint32_t t = spv_t_rep(x, in->type);
    if (!t || !d) return;
    uint32_t v = to_f32(x, d->elem, spv_V(x, in->operand[0])), parts[MAX_SLOTS], n = slots_of(x, d);
    for (uint32_t i = 0; i < n; i++) parts[i] = v;
    spv_def(x, in->result, construct(x, t, parts, n));
}

/* ---- products ---------------------------------------------------------------------------------- */

static void subgroup_barrier(spv_ctx *x) {
    uint32_t sg = u32c(x, SCOPE_SUBGROUP);
    uint32_t sem = u32c(x, SpvMemorySemanticsAcquireReleaseMask | SpvMemorySemanticsWorkgroupMemoryMask);
    spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpControlBarrier, 3, sg, sg, sem);
}

static uint32_t scratch_ptr(spv_ctx *x, uint32_t index) {
    return spv_fn2(x, SpvOpAccessChain, spv_t_ptr(x, SpvStorageClassWorkgroup, x->emu_scratch_elem),
                   x->emu_scratch_var, index);
}

static void scratch_store(spv_ctx *x, uint32_t index, uint32_t v) {
    if (x->f16_native) v = spv_fn1(x, SpvOpFConvert, x->emu_scratch_elem, v); /* exact: a 16-bit value */
    spv_op_store(x, scratch_ptr(x, index), v);
}

static uint32_t scratch_load(spv_ctx *x, uint32_t index) {
    uint32_t v = spv_op_load(x, x->emu_scratch_elem, scratch_ptr(x, index));
    return x->f16_native ? spv_fn1(x, SpvOpFConvert, spv_t_f32(x), v) : v;
}

/* A fragment's slots into the subgroup's scratch from base (row-major: element e at e). */
static void to_scratch(spv_ctx *x, uint32_t frag, uint32_t n, uint32_t base, uint32_t lane) {
    uint32_t var = var_of(x, n);
    if (!var) return;
    var_put(x, var, frag, n);
    emu_loop l;
    uint32_t u = unroll_of(n, MOVE_UNROLL);
    loop_begin(x, &l, n / u);
    for (uint32_t j = 0; j < u; j++) {
        uint32_t i = slot_at(x, l.iv, u, j);
        scratch_store(x, add(x, base, elem_of(x, i, lane)), spv_op_load(x, spv_t_f32(x), var_slot(x, var, i)));
    }
    loop_end(x, &l);
}

/* acc + a x b: A and B into the subgroup's scratch, then for each of the invocation's
 * elements of C a loop over K. */
static void mma(spv_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 3)) return;
    const ir_type_desc *da = ir_type_get(x->k, ir_type_of(x->k, in->operand[0]));
    const ir_type_desc *db = ir_type_get(x->k, ir_type_of(x->k, in->operand[1]));
    const ir_type_desc *dc = ir_type_get(x->k, in->type);
    uint32_t t = spv_t_rep(x, in->type);
    if (!da || !db || !dc || !t || x->e.failed) return;
    if (!x->emu_scratch_var) {
        spv_fail(x, "emulated mma without its scratch array");
        return;
    }
    uint32_t M = dc->m, N = dc->n, K = da->k, nc = slots_of(x, dc), var = var_of(x, nc);
    uint32_t lane = spv_load_id(x, IR_ID_SG_LANE, 0), sg = spv_load_id(x, IR_ID_SG_ID, 0);
    uint32_t base = mul(x, sg, u32c(x, x->emu_scratch)), b_base = add(x, base, u32c(x, M * K));
    if (!var) return;
    subgroup_barrier(x); /* the last product's readers are done */
    to_scratch(x, spv_V(x, in->operand[0]), slots_of(x, da), base, lane);
    to_scratch(x, spv_V(x, in->operand[1]), slots_of(x, db), b_base, lane);
    subgroup_barrier(x);
    var_put(x, var, spv_V(x, in->operand[2]), nc);
    emu_loop li;
    uint32_t u = unroll_of(nc, MMA_UNROLL);
    loop_begin(x, &li, nc / u);
    for (uint32_t j = 0; j < u; j++) {
        uint32_t i = slot_at(x, li.iv, u, j), e = elem_of(x, i, lane), p = var_slot(x, var, i);
        uint32_t a_row = add(x, base, mul(x, spv_fn2(x, SpvOpUDiv, spv_t_u32(x), e, u32c(x, N)), u32c(x, K)));
        uint32_t b_col = add(x, b_base, spv_fn2(x, SpvOpUMod, spv_t_u32(x), e, u32c(x, N)));
        uint32_t sum = spv_op_load(x, spv_t_f32(x), p);
        for (uint32_t kk = 0; kk < K; kk++) {
            uint32_t av = scratch_load(x, add(x, a_row, u32c(x, kk))), bv = scratch_load(x, add(x, b_col, u32c(x, kk * N)));
            sum = spv_ext3(x, spv_t_f32(x), GLSLstd450Fma, av, bv, sum);
        }
        spv_op_store(x, p, sum);
    }
    loop_end(x, &li);
    spv_def(x, in->result, var_get(x, var, t, nc));
}

/* a * b + c per slot: the product rounds, then the sum (as OpFMul, OpFAdd) */
static void mul_add(spv_ctx *x, const ir_inst *in) {
    if (!ir_emit_need(&x->e, in, 3)) return;
    const ir_type_desc *d = ir_type_get(x->k, in->type);
    uint32_t t = spv_t_rep(x, in->type), parts[MAX_SLOTS];
    if (!t || !d) return;
    uint32_t a = spv_V(x, in->operand[0]), b = spv_V(x, in->operand[1]), c = spv_V(x, in->operand[2]);
    uint32_t n = slots_of(x, d), f = spv_t_f32(x);
    for (uint32_t i = 0; i < n; i++)
        parts[i] = spv_fn2(x, SpvOpFAdd, f, spv_fn2(x, SpvOpFMul, f, slot(x, a, i), slot(x, b, i)), slot(x, c, i));
    spv_def(x, in->result, construct(x, t, parts, n));
}

void spv_emu_note_type(spv_ctx *x, ir_type t) {
    const ir_type_desc *d = ir_type_get(x->k, t);
    uint32_t s = x->c->subgroup_size;
    if (!d || d->kind != IR_T_FRAG || !s) return;
    uint32_t n = rows_of(d) * cols_of(d) / s;
    if (n && n <= MAX_SLOTS) x->emu_var[n] = 1; /* declared by spv_emu_declare_vars */
}

void spv_emu_declare_vars(spv_ctx *x) {
    for (uint32_t n = 1; x->emu && n <= MAX_SLOTS; n++) {
        if (!x->emu_var[n]) continue;
        uint32_t arr = spv_b_type(&x->b, SpvOpTypeArray, (uint32_t[]){spv_t_f32(x), u32c(x, n)}, 2);
        uint32_t ptr = spv_t_ptr(x, SpvStorageClassFunction, arr), id = spv_b_id(&x->b);
        spv_b_emitv(&x->b, SPV_SEC_FUNCTION, SpvOpVariable, 3, ptr, id, SpvStorageClassFunction);
        x->emu_var[n] = id;
    }
}

void spv_emu_declare_scratch(spv_ctx *x) {
    if (!x->emu || !x->emu_scratch) return;
    uint32_t wg[3] = {0, 0, 0};
    ir_val spec = IR_NONE;
    ir_workgroup(x->k, wg, &spec);
    uint64_t inv = (uint64_t)wg[0] * wg[1] * wg[2], sg = x->c->subgroup_size;
    if (spec != IR_NONE || !inv || inv % sg) {
        spv_fail(x, "emulated fragments need a literal workgroup size of whole subgroups");
        return;
    }
    uint32_t size = x->f16_native ? 2 : 4;
    uint64_t count = inv / sg * x->emu_scratch;
    if (count * size > x->c->mma_emulated_shared) {
        spv_fail(x, "emulated fragments of %llu subgroups need %llu bytes of scratch; %u are reserved",
                 (unsigned long long)(inv / sg), (unsigned long long)(count * size), x->c->mma_emulated_shared);
        return;
    }
    x->emu_scratch_elem = x->f16_native ? spv_t_rep_s(x, IR_F16) : spv_t_f32(x);
    uint32_t arr = spv_b_type(&x->b, SpvOpTypeArray, (uint32_t[]){x->emu_scratch_elem, u32c(x, (uint32_t)count)}, 2);
    x->emu_scratch_var = spv_global_var(x, spv_t_ptr(x, SpvStorageClassWorkgroup, arr), SpvStorageClassWorkgroup);
    spv_name(x, x->emu_scratch_var, "frag_scratch");
}

void spv_emu_frag(spv_ctx *x, const ir_inst *in) {
    switch (in->op) {
    case IR_OP_FRAG_FILL: fill(x, in); return;
    case IR_OP_FRAG_LOAD:
    case IR_OP_FRAG_STORE: load_store(x, in); return;
    case IR_OP_FRAG_MMA: mma(x, in); return;
    case IR_OP_FRAG_MUL_ADD: mul_add(x, in); return;
    default: spv_fail(x, "%s is not emulated (debug-emulate-coopmat)", ir_op_name(in->op)); return;
    }
}
