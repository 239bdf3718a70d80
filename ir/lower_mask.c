/* Masked accesses at tensor ends (lower.h): load.masked / store.masked of `lanes`
 * elements at index with limit become
 *
 *   %lt = cmp.lt index, limit             lane 0 is in bounds
 *   %room = sub limit, index              (wraps when index >= limit; %lt guards that)
 *   %all = and %lt, (cmp.ge %room, lanes)
 *   if %all { the plain access of the whole vector }
 *   else { lane by lane: if lane l is in bounds (%lt, and %room > l for l > 0) the scalar
 *          access of index + l, else (loads) the fallback; a load's lanes make the vector }
 *
 * and a scalar one (lanes 1) the if on %lt alone. The common case stays one access of
 * the whole vector; no lane at or past limit is read or written, and no address past it
 * is formed on a taken path. A masked load's result keeps its value number: the if that
 * replaces it yields it. */
#include "ir/ir_internal.h"

/* What every lane of one masked access shares. */
typedef struct masked {
    const ir_inst *in;
    bool load;
    uint32_t lanes;
    ir_val index, limit, value; /* value: a store's, or a load's fallback */
    ir_type elem;               /* the scalar element type */
} masked;

/* "lane l is in bounds": %lt, and for l > 0 also %room > l. */
static ir_val lane_ok(ir_rw *w, ir_val lt, ir_val room, uint32_t l) {
    if (!l)
        return lt;
    ir_type tb = ir_t_scalar(w->k, IR_BOOL);
    ir_val fits = ir_rw_op(w, IR_OP_CMP, tb, room, ir_rw_u32(w, l), IR_GT);
    return fits ? ir_rw_op(w, IR_OP_AND, tb, lt, fits, 0) : IR_NONE;
}

/* Appends, to the region r, the plain access of `lanes` elements at index (lanes 1: the
 * element of lane l alone, at index + l). Returns a load's value (else 1), IR_NONE when
 * out of memory. */
static ir_val access(ir_rw *w, const masked *m, ir_region *r, uint32_t l, uint32_t lanes) {
    ir_region *out = w->out;
    w->out = r;
    ir_val at = l ? ir_rw_op(w, IR_OP_ADD, ir_t_scalar(w->k, IR_U32), m->index, ir_rw_u32(w, l), 0) : m->index;
    ir_val v = IR_NONE;
    if (m->load) {
        ir_type t = lanes == 1 ? m->elem : m->in->type;
        ir_inst *ld = at ? ir_rw_inst(w, IR_OP_LOAD, t, &at, 1, m->in->imm[0], lanes, 0) : NULL;
        v = ld ? ld->result : IR_NONE;
    } else {
        ir_val value =
            lanes == 1 && m->lanes > 1 ? ir_rw_op(w, IR_OP_EXTRACT, m->elem, m->value, IR_NONE, l) : m->value;
        ir_val ops[2] = { at, value };
        v = at && value && ir_rw_inst(w, IR_OP_STORE, 0, ops, 2, m->in->imm[0], lanes, 0) ? 1 : IR_NONE;
    }
    w->out = out;
    return v;
}

/* if cond { the access of lane l } else { the fallback }: the lane's value (else 1). */
static ir_val one_lane(ir_rw *w, const masked *m, ir_val cond, uint32_t l, const ir_val *result) {
    ir_inst *f = cond ? ir_rw_if(w, cond, m->load, &m->elem, result) : NULL;
    ir_val v = f ? access(w, m, &f->region[0], l, 1) : IR_NONE;
    if (!v || !ir_rw_yield(w, &f->region[0], &v, m->load) || !ir_rw_yield(w, &f->region[1], &m->value, m->load))
        return IR_NONE;
    return m->load ? f->results[0] : 1;
}

static int lower_one(ir_rw *w, ir_inst *in, void *ctx) {
    (void)ctx;
    if (in->op != IR_OP_LOAD_MASKED && in->op != IR_OP_STORE_MASKED)
        return 0;
    ir_kernel *k = w->k;
    bool load = in->op == IR_OP_LOAD_MASKED;
    masked m = { .in = in, .load = load, .lanes = (uint32_t)in->imm[1], .index = in->operand[0],
                 .limit = in->operand[load ? 1 : 2], .value = in->operand[load ? 2 : 1] };
    ir_scalar e;
    if (!ir_type_elem(k, ir_type_of(k, m.value), &e, NULL))
        return -1;
    m.elem = ir_t_scalar(k, e);
    ir_type tb = ir_t_scalar(k, IR_BOOL), tu = ir_t_scalar(k, IR_U32);
    ir_val lt = ir_rw_op(w, IR_OP_CMP, tb, m.index, m.limit, IR_LT);
    if (m.lanes == 1)
        return one_lane(w, &m, lt, 0, load ? &in->result : NULL) ? 1 : -1;

    ir_val room = lt ? ir_rw_op(w, IR_OP_SUB, tu, m.limit, m.index, 0) : IR_NONE;
    ir_val fits = room ? ir_rw_op(w, IR_OP_CMP, tb, room, ir_rw_u32(w, m.lanes), IR_GE) : IR_NONE;
    ir_val all = fits ? ir_rw_op(w, IR_OP_AND, tb, lt, fits, 0) : IR_NONE;
    ir_inst *f = all ? ir_rw_if(w, all, load, NULL, load ? &in->result : NULL) : NULL;
    if (!f)
        return -1;
    ir_val whole = access(w, &m, &f->region[0], 0, m.lanes);
    if (!whole || !ir_rw_yield(w, &f->region[0], &whole, load))
        return -1;
    /* lane by lane, in the else region */
    ir_region *out = w->out;
    w->out = &f->region[1];
    ir_val lane[4] = { 0 };
    bool ok = true;
    for (uint32_t l = 0; l < m.lanes && l < 4 && ok; l++)
        ok = (lane[l] = one_lane(w, &m, lane_ok(w, lt, room, l), l, NULL)) != IR_NONE;
    ir_inst *vec = ok && load ? ir_rw_inst(w, IR_OP_VEC, in->type, lane, m.lanes, 0, 0, 0) : NULL;
    w->out = out;
    if (!ok || (load && !vec))
        return -1;
    return ir_rw_yield(w, &f->region[1], load ? &vec->result : NULL, load) ? 1 : -1;
}

int ir_lower_masked(ir_kernel *k) { return ir_rw_run(k, lower_one, NULL) ? 0 : -1; }
