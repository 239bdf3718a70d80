/* Kernel expressions: the IR builder (ir/ir.h) under names that let a kernel read as the
 * math it computes. One value, kx, holds the kernel being built and the device's caps;
 * every helper is one builder call or a fixed composition of a few.
 *
 *   kx_add(k, a, b)       a + b  (and sub, mul, div, rem, min, max, and, or, xor, shl, shr)
 *   kx_mul_c(k, a, 4)     a * 4  (the _c forms take a u32 constant, _f an f32, _i an i32)
 *   kx_idx(k, r, n, c)    r * n + c, the index of column c of row r in rows of n
 *   kx_lt(k, a, b)        a < b  (and le, gt, ge, eq, ne, with _c and _f forms)
 *
 * Value numbers follow the order of builder calls, and a kernel's printed IR is part of
 * its contract (kiln dump). A helper builds its constant after its operands (C evaluates
 * the arguments first), then the instruction. Two built operands of one call would be
 * built in an unspecified order: build one of them into a named value first. */
#ifndef KILN_KERNELS_KN_EXPR_H
#define KILN_KERNELS_KN_EXPR_H

#include "ir/ir.h"
#include "runtime/caps.h"

typedef struct kx {
    ir_kernel *ir;       /* the kernel being built */
    const rt_caps *caps; /* the device it is built for */
} kx;

/* ---- parameters ------------------------------------------------------------------------ */

/* A buffer parameter and the elements the kernel reads or writes in it (its extent). */
static inline ir_buf kx_buffer(kx k, const char *name, ir_scalar elem, unsigned access, uint64_t extent) {
    ir_buf b = ir_param_buffer(k.ir, name, elem, access);
    ir_buffer_extent(k.ir, b, extent);
    return b;
}
/* A buffer whose rows follow the grid: extent elements for each workgroup along dim. */
static inline ir_buf kx_buffer_per_group(kx k, const char *name, ir_scalar elem, unsigned access, uint32_t dim,
                                         uint64_t extent) {
    ir_buf b = ir_param_buffer(k.ir, name, elem, access);
    ir_buffer_extent_per_group(k.ir, b, dim, extent);
    return b;
}

/* The workgroup: n invocations along x. */
static inline void kx_workgroup(kx k, uint32_t n) { ir_set_workgroup(k.ir, n, 1, 1); }
/* A workgroup-memory array of count elements. */
static inline ir_shm kx_shared(kx k, const char *name, ir_scalar elem, uint32_t count) {
    return ir_shared_array(k.ir, name, elem, count);
}

/* ---- constants, types, ids ------------------------------------------------------------- */

static inline ir_val kx_u32(kx k, uint32_t v) { return ir_const_u32(k.ir, v); }
static inline ir_val kx_i32(kx k, int32_t v) { return ir_const_i32(k.ir, v); }
static inline ir_val kx_f32(kx k, float v) { return ir_const_f32(k.ir, v); }

/* The scalar type s, or its vector of lanes (> 1). */
static inline ir_type kx_t(kx k, ir_scalar s, uint32_t lanes) {
    return lanes == 1 ? ir_t_scalar(k.ir, s) : ir_t_vector(k.ir, s, lanes);
}

static inline ir_val kx_local(kx k) { return ir_id(k.ir, IR_ID_LOCAL, 0); }          /* within the workgroup */
static inline ir_val kx_global(kx k) { return ir_id(k.ir, IR_ID_GLOBAL, 0); }        /* within the grid */
static inline ir_val kx_group(kx k, uint32_t dim) { return ir_id(k.ir, IR_ID_GROUP, dim); }
static inline ir_val kx_n_groups(kx k) { return ir_id(k.ir, IR_ID_NUM_GROUPS, 0); }
static inline ir_val kx_sg_id(kx k) { return ir_id(k.ir, IR_ID_SG_ID, 0); }          /* subgroup in the workgroup */
static inline ir_val kx_sg_lane(kx k) { return ir_id(k.ir, IR_ID_SG_LANE, 0); }
static inline ir_val kx_sg_size(kx k) { return ir_id(k.ir, IR_ID_SG_SIZE, 0); }
/* An id times a constant n, the constant built first (as the kernels' IR has it): the
 * invocation's first element (local * n), the workgroup's first row or tile (group * n),
 * a grid-stride loop's step (workgroups * n). */
static inline ir_val kx_local_times(kx k, uint32_t n) {
    ir_val c = kx_u32(k, n);
    return ir_bin(k.ir, IR_OP_MUL, kx_local(k), c);
}
static inline ir_val kx_group_times(kx k, uint32_t dim, uint32_t n) {
    ir_val c = kx_u32(k, n);
    return ir_bin(k.ir, IR_OP_MUL, kx_group(k, dim), c);
}
static inline ir_val kx_n_groups_times(kx k, uint32_t n) {
    ir_val c = kx_u32(k, n);
    return ir_bin(k.ir, IR_OP_MUL, kx_n_groups(k), c);
}

/* ---- arithmetic ------------------------------------------------------------------------ */

static inline ir_val kx_add(kx k, ir_val a, ir_val b) { return ir_bin(k.ir, IR_OP_ADD, a, b); }
static inline ir_val kx_sub(kx k, ir_val a, ir_val b) { return ir_bin(k.ir, IR_OP_SUB, a, b); }
static inline ir_val kx_mul(kx k, ir_val a, ir_val b) { return ir_bin(k.ir, IR_OP_MUL, a, b); }
static inline ir_val kx_div(kx k, ir_val a, ir_val b) { return ir_bin(k.ir, IR_OP_DIV, a, b); }
static inline ir_val kx_rem(kx k, ir_val a, ir_val b) { return ir_bin(k.ir, IR_OP_REM, a, b); }
static inline ir_val kx_min(kx k, ir_val a, ir_val b) { return ir_bin(k.ir, IR_OP_MIN, a, b); }
static inline ir_val kx_max(kx k, ir_val a, ir_val b) { return ir_bin(k.ir, IR_OP_MAX, a, b); }
static inline ir_val kx_and(kx k, ir_val a, ir_val b) { return ir_bin(k.ir, IR_OP_AND, a, b); }
static inline ir_val kx_or(kx k, ir_val a, ir_val b) { return ir_bin(k.ir, IR_OP_OR, a, b); }
static inline ir_val kx_xor(kx k, ir_val a, ir_val b) { return ir_bin(k.ir, IR_OP_XOR, a, b); }
static inline ir_val kx_shl(kx k, ir_val a, ir_val b) { return ir_bin(k.ir, IR_OP_SHL, a, b); }
static inline ir_val kx_shr(kx k, ir_val a, ir_val b) { return ir_bin(k.ir, IR_OP_SHR, a, b); }

/* a op c for a u32 constant c */
static inline ir_val kx_add_c(kx k, ir_val a, uint32_t c) { return kx_add(k, a, kx_u32(k, c)); }
static inline ir_val kx_sub_c(kx k, ir_val a, uint32_t c) { return kx_sub(k, a, kx_u32(k, c)); }
static inline ir_val kx_mul_c(kx k, ir_val a, uint32_t c) { return kx_mul(k, a, kx_u32(k, c)); }
static inline ir_val kx_div_c(kx k, ir_val a, uint32_t c) { return kx_div(k, a, kx_u32(k, c)); }
static inline ir_val kx_rem_c(kx k, ir_val a, uint32_t c) { return kx_rem(k, a, kx_u32(k, c)); }
static inline ir_val kx_min_c(kx k, ir_val a, uint32_t c) { return kx_min(k, a, kx_u32(k, c)); }
static inline ir_val kx_max_c(kx k, ir_val a, uint32_t c) { return kx_max(k, a, kx_u32(k, c)); }
static inline ir_val kx_and_c(kx k, ir_val a, uint32_t c) { return kx_and(k, a, kx_u32(k, c)); }
static inline ir_val kx_shl_c(kx k, ir_val a, uint32_t c) { return kx_shl(k, a, kx_u32(k, c)); }
static inline ir_val kx_shr_c(kx k, ir_val a, uint32_t c) { return kx_shr(k, a, kx_u32(k, c)); }
/* ... for an i32 constant, and an f32 one */
static inline ir_val kx_add_i(kx k, ir_val a, int32_t c) { return kx_add(k, a, kx_i32(k, c)); }
static inline ir_val kx_and_i(kx k, ir_val a, int32_t c) { return kx_and(k, a, kx_i32(k, c)); }
static inline ir_val kx_add_f(kx k, ir_val a, float c) { return kx_add(k, a, kx_f32(k, c)); }
static inline ir_val kx_mul_f(kx k, ir_val a, float c) { return kx_mul(k, a, kx_f32(k, c)); }
static inline ir_val kx_min_f(kx k, ir_val a, float c) { return kx_min(k, a, kx_f32(k, c)); }

/* row * n + col: element col of row `row` in rows of n elements */
static inline ir_val kx_idx(kx k, ir_val row, uint32_t n, ir_val col) { return kx_add(k, kx_mul_c(k, row, n), col); }

static inline ir_val kx_neg(kx k, ir_val a) { return ir_un(k.ir, IR_OP_NEG, a); }
static inline ir_val kx_not(kx k, ir_val a) { return ir_un(k.ir, IR_OP_NOT, a); }
static inline ir_val kx_abs(kx k, ir_val a) { return ir_un(k.ir, IR_OP_ABS, a); }
static inline ir_val kx_floor(kx k, ir_val a) { return ir_un(k.ir, IR_OP_FLOOR, a); }
static inline ir_val kx_sqrt(kx k, ir_val a) { return ir_un(k.ir, IR_OP_SQRT, a); } /* the device's */
static inline ir_val kx_fma(kx k, ir_val a, ir_val b, ir_val c) { return ir_fma(k.ir, a, b, c); } /* a * b + c */
/* a * b + c for f32 constants b and c (c built first): a polynomial's step */
static inline ir_val kx_fma_f(kx k, ir_val a, float b, float c) {
    ir_val cc = kx_f32(k, c);
    return ir_fma(k.ir, a, kx_f32(k, b), cc);
}

/* ---- compares and select --------------------------------------------------------------- */

static inline ir_val kx_lt(kx k, ir_val a, ir_val b) { return ir_compare(k.ir, IR_LT, a, b); }
static inline ir_val kx_le(kx k, ir_val a, ir_val b) { return ir_compare(k.ir, IR_LE, a, b); }
static inline ir_val kx_gt(kx k, ir_val a, ir_val b) { return ir_compare(k.ir, IR_GT, a, b); }
static inline ir_val kx_ge(kx k, ir_val a, ir_val b) { return ir_compare(k.ir, IR_GE, a, b); }
static inline ir_val kx_eq(kx k, ir_val a, ir_val b) { return ir_compare(k.ir, IR_EQ, a, b); }
static inline ir_val kx_ne(kx k, ir_val a, ir_val b) { return ir_compare(k.ir, IR_NE, a, b); }
static inline ir_val kx_lt_c(kx k, ir_val a, uint32_t c) { return kx_lt(k, a, kx_u32(k, c)); }
static inline ir_val kx_eq_c(kx k, ir_val a, uint32_t c) { return kx_eq(k, a, kx_u32(k, c)); }
static inline ir_val kx_lt_f(kx k, ir_val a, float c) { return kx_lt(k, a, kx_f32(k, c)); }
static inline ir_val kx_le_f(kx k, ir_val a, float c) { return kx_le(k, a, kx_f32(k, c)); }
static inline ir_val kx_gt_f(kx k, ir_val a, float c) { return kx_gt(k, a, kx_f32(k, c)); }
/* cond ? a : b */
static inline ir_val kx_select(kx k, ir_val cond, ir_val a, ir_val b) { return ir_select(k.ir, cond, a, b); }

/* ---- conversions and vectors ------------------------------------------------------------ */

static inline ir_val kx_convert(kx k, ir_val v, ir_type t) { return ir_convert(k.ir, v, t); }
static inline ir_val kx_bitcast(kx k, ir_val v, ir_type t) { return ir_bitcast(k.ir, v, t); }
/* v converted to scalar s (an f32 to dtype rounds to nearest even): one scalar */
static inline ir_val kx_as(kx k, ir_val v, ir_scalar s) { return ir_convert(k.ir, v, ir_t_scalar(k.ir, s)); }
static inline ir_val kx_vec(kx k, const ir_val *lanes, uint32_t n) { return ir_vec(k.ir, lanes, n); }
/* n copies of v (v itself when n is 1) */
static inline ir_val kx_splat(kx k, ir_val v, uint32_t n) {
    ir_val l[4] = {v, v, v, v};
    return n == 1 ? v : ir_vec(k.ir, l, n);
}
static inline ir_val kx_lane(kx k, ir_val v, uint32_t lane) { return ir_extract(k.ir, v, lane); }

/* ---- memory ------------------------------------------------------------------------------ */

static inline ir_val kx_load(kx k, ir_buf b, ir_val i, uint32_t lanes) { return ir_load(k.ir, b, i, lanes); }
/* the one element b[i] at a constant index */
static inline ir_val kx_load_c(kx k, ir_buf b, uint32_t i) { return ir_load(k.ir, b, kx_u32(k, i), 1); }
static inline void kx_store(kx k, ir_buf b, ir_val i, ir_val v) { ir_store(k.ir, b, i, v); }
/* b[i .. i + lanes), lanes at or past limit reading fallback */
static inline ir_val kx_load_masked(kx k, ir_buf b, ir_val i, uint32_t lanes, ir_val limit, ir_val fallback) {
    return ir_load_masked(k.ir, b, i, lanes, limit, fallback);
}
static inline ir_val kx_shm_load(kx k, ir_shm s, ir_val i, uint32_t lanes) { return ir_shm_load(k.ir, s, i, lanes); }
static inline void kx_shm_store(kx k, ir_shm s, ir_val i, ir_val v) { ir_shm_store(k.ir, s, i, v); }
static inline void kx_barrier(kx k) { ir_barrier(k.ir); }

/* ---- subgroups --------------------------------------------------------------------------- */

static inline ir_val kx_sg_sum(kx k, ir_val v) { return ir_sg_reduce(k.ir, IR_REDUCE_ADD, v); }
static inline ir_val kx_sg_min(kx k, ir_val v) { return ir_sg_reduce(k.ir, IR_REDUCE_MIN, v); }
static inline ir_val kx_sg_max(kx k, ir_val v) { return ir_sg_reduce(k.ir, IR_REDUCE_MAX, v); }
/* v from lane ^ mask */
static inline ir_val kx_sg_xor(kx k, ir_val v, uint32_t mask) { return ir_sg_shuffle_xor(k.ir, v, kx_u32(k, mask)); }

/* ---- control flow ------------------------------------------------------------------------ */

/* for (*iv = lo; *iv < hi; *iv += step) { ... kx_end_for }, nothing carried; a loop
 * with carried values is ir_for_begin / ir_for_end on k.ir. */
static inline ir_for *kx_for(kx k, ir_val lo, ir_val hi, ir_val step, ir_val *iv) {
    ir_for *f = ir_for_begin(k.ir, lo, hi, step, 0, NULL);
    *iv = ir_for_iv(f);
    return f;
}
static inline void kx_end_for(kx k, ir_for *f) { ir_for_end(k.ir, f, NULL); }

/* if (cond) { ... [kx_else ...] kx_end_if }, no results; one with results is ir_if_begin
 * / ir_if_else / ir_if_end on k.ir. */
static inline ir_if *kx_if(kx k, ir_val cond) { return ir_if_begin(k.ir, cond, 0); }
static inline void kx_else(kx k, ir_if *f) { ir_if_else(k.ir, f, NULL); }
static inline void kx_end_if(kx k, ir_if *f) { ir_if_end(k.ir, f, NULL); }

#endif
