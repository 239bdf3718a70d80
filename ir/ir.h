/* ir/ — kiln's kernel IR: what kernels/ writes and both emitters (SPIR-V, PTX via LLVM)
 * lower. It knows nothing of either target.
 *
 * A kernel is a function of buffer parameters (global arrays with an element type),
 * scalar parameters (push constants / kernel arguments) and specialization constants.
 * Values are SSA. Control flow is structured: `for` (with loop-carried values) and
 * `if`/`else` (with results), each closed by an explicit yield, because SPIR-V needs
 * merge blocks; LLVM takes the same shape as phis. Memory is reached only through
 * (buffer or workgroup array, element index): no pointer arithmetic, so every access
 * names its array, and masked accesses name their bound.
 *
 * Everything lives in the kernel's arena and is freed with it. Builder calls that get
 * wrong input do not abort: they record the first error (ir_kernel_error) and return
 * IR_NONE, and the verifier refuses the kernel. */
#ifndef KILN_IR_IR_H
#define KILN_IR_IR_H

#include "base/error.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef uint32_t ir_val;  /* an SSA value; IR_NONE = 0 is no value */
typedef uint32_t ir_type; /* an interned type */
typedef uint32_t ir_buf;  /* a buffer parameter (index among buffer params) */
typedef uint32_t ir_shm;  /* a workgroup-memory array (index among them) */
#define IR_NONE 0u

/* ---- types ---------------------------------------------------------------------------- */

typedef enum ir_scalar { IR_BOOL, IR_I32, IR_U32, IR_I64, IR_U64, IR_F16, IR_BF16, IR_F32, IR_SCALAR_COUNT } ir_scalar;

typedef enum ir_type_kind { IR_T_SCALAR, IR_T_VECTOR, IR_T_FRAG } ir_type_kind;

/* Matrix fragments: a cooperative tile the whole subgroup holds. A is M x K, B is K x N,
 * ACC is M x N; A and B hold f16 or bf16, ACC f32 (or f16). A workgroup fragment (wg) is
 * held by the whole workgroup instead (VK_NV_cooperative_matrix2's workgroup scope: the
 * compiler stages its operands through workgroup memory), 1..1024 per dimension. */
typedef enum ir_frag_use { IR_FRAG_A, IR_FRAG_B, IR_FRAG_ACC } ir_frag_use;

typedef struct ir_type_desc {
    ir_type_kind kind;
    ir_scalar elem;
    uint32_t lanes;       /* vectors: 2, 3 or 4 (scalars: 1, fragments: 0) */
    ir_frag_use use;      /* fragments */
    uint32_t m, n, k;     /* fragments: the A/B/ACC shape of the multiply it takes part in (1..256) */
    bool wg;              /* fragments: held by the workgroup, not a subgroup */
} ir_type_desc;

typedef struct ir_kernel ir_kernel;

ir_type ir_t_scalar(ir_kernel *k, ir_scalar s);
ir_type ir_t_vector(ir_kernel *k, ir_scalar s, uint32_t lanes);
ir_type ir_t_frag(ir_kernel *k, ir_frag_use use, ir_scalar elem, uint32_t m, uint32_t n, uint32_t kk);
ir_type ir_t_frag_wg(ir_kernel *k, ir_frag_use use, ir_scalar elem, uint32_t m, uint32_t n, uint32_t kk);
const ir_type_desc *ir_type_get(const ir_kernel *k, ir_type t); /* NULL for 0 and unknown types */
ir_type ir_type_of(const ir_kernel *k, ir_val v);
const char *ir_scalar_name(ir_scalar s); /* "bool", "i32", ..., "bf16", "f32" */
/* Scalar kinds: the one definition the builder, the passes and both emitters use. */
bool ir_scalar_is_int(ir_scalar s);        /* i32 u32 i64 u64 */
bool ir_scalar_is_float(ir_scalar s);      /* f16 bf16 f32 */
bool ir_scalar_is_signed(ir_scalar s);     /* i32 i64 */
uint32_t ir_scalar_bits(ir_scalar s);      /* 16, 32 or 64; bool 1 (a register bit, never in memory); 0 unknown */
ir_scalar ir_scalar_unsigned(ir_scalar s); /* i32 -> u32, i64 -> u64; any other scalar itself */

/* ---- kernels and parameters ----------------------------------------------------------------- */

/* Names (of the kernel, params, specs and shared arrays) are C identifiers of 1..64
 * characters; params, specs and shared arrays share one namespace (the printer's @name). A
 * bad name is a builder error, not a NULL kernel (NULL means out of memory). */
ir_kernel *ir_kernel_create(const char *name);
void ir_kernel_destroy(ir_kernel *k);
/* A deep copy of k with its own arena (values keep their numbers): what the emitters
 * lower, leaving k as it was built. NULL when out of memory or a for/if is still open. */
ir_kernel *ir_kernel_clone(const ir_kernel *k);
const char *ir_kernel_name(const ir_kernel *k);
/* The first builder error ("" when none), as text and with its code (out of memory, or
 * invalid input for every misuse). */
const char *ir_kernel_error(const ir_kernel *k);
const kiln_err *ir_kernel_err(const ir_kernel *k);

enum { IR_READ = 1, IR_WRITE = 2 };
/* A global array of elem (not bool); access is IR_READ, IR_WRITE or both. */
ir_buf ir_param_buffer(ir_kernel *k, const char *name, ir_scalar elem, unsigned access);
/* The elements of b the kernel may read or write at the shape it was built for (its
 * extent): what a buffer bound to it must hold, which a plan checks when it binds one.
 * ir_buffer_extent: n elements (1..2^48) whatever the grid. ir_buffer_extent_per_group: n
 * elements for each workgroup of the launch grid along dimension dim (0..2), for kernels
 * whose rows follow the grid (one row per workgroup). A builder error when b is not a
 * buffer or n is out of range. */
void ir_buffer_extent(ir_kernel *k, ir_buf b, uint64_t n);
void ir_buffer_extent_per_group(ir_kernel *k, ir_buf b, uint32_t dim, uint64_t n);
/* A scalar argument (i32, u32 or f32), set per launch. */
ir_val ir_param_scalar(ir_kernel *k, const char *name, ir_scalar s);
/* A specialization constant (bool, i32, u32 or f32) with its default, fixed at compile
 * time by the backend or folded by ir_specialize. */
ir_val ir_spec_const(ir_kernel *k, const char *name, ir_scalar s, double dflt);
/* Workgroup size: constants, or a u32 spec constant for x (then y = z = 1). The verifier
 * checks each dimension is 1..1024 and the product <= 1024 (for a spec, its default). */
void ir_set_workgroup(ir_kernel *k, uint32_t x, uint32_t y, uint32_t z);
void ir_set_workgroup_spec(ir_kernel *k, ir_val x_spec);
/* A hint: the kernel is meant to run n (1..32) workgroups at once per compute unit, so a
 * target that sizes registers per kernel keeps them within that budget (PTX:
 * .minnctapersm; SPIR-V has no such hint and ignores it). 0: no hint. */
void ir_set_occupancy(ir_kernel *k, uint32_t n);
uint32_t ir_occupancy(const ir_kernel *k);
/* A workgroup (shared) memory array of count (1..2^24) elements of a non-bool scalar. */
ir_shm ir_shared_array(ir_kernel *k, const char *name, ir_scalar elem, uint32_t count);
/* A workgroup array that may reuse the memory of `base` (an array that overlays nothing),
 * within base's bytes: for a phase of a kernel that no longer needs base (an epilogue after
 * the staging ring). The two never share values: after a store to one, the other's
 * contents are undefined, so uses of the two are separated by a barrier. A backend may
 * give it memory of its own (SPIR-V does; PTX places it at base's offset). */
ir_shm ir_shared_overlay(ir_kernel *k, const char *name, ir_scalar elem, uint32_t count, ir_shm base);

/* ---- values ----------------------------------------------------------------------------- */

ir_val ir_const_bool(ir_kernel *k, bool v);
ir_val ir_const_i32(ir_kernel *k, int32_t v);
ir_val ir_const_u32(ir_kernel *k, uint32_t v);
ir_val ir_const_f32(ir_kernel *k, float v);

typedef enum ir_op {
    /* constants, parameters, ids */
    IR_OP_CONST, IR_OP_PARAM, IR_OP_SPEC, IR_OP_ID,
    /* arithmetic (operands and result of one type; ints or floats, scalars or vectors;
     * REM on floats has the dividend's sign, like fmod) */
    IR_OP_ADD, IR_OP_SUB, IR_OP_MUL, IR_OP_DIV, IR_OP_REM, IR_OP_MIN, IR_OP_MAX,
    IR_OP_AND, IR_OP_OR, IR_OP_XOR, IR_OP_SHL, IR_OP_SHR, /* bits: ints and bools (and/or/xor) */
    IR_OP_NEG, IR_OP_NOT, IR_OP_ABS, /* NEG ints/floats, NOT ints/bools, ABS signed ints/floats */
    IR_OP_EXP, IR_OP_LOG, IR_OP_SQRT, IR_OP_RSQRT, IR_OP_TANH, IR_OP_SIN, IR_OP_COS, IR_OP_FLOOR, /* f32 (or f32 vectors) */
    IR_OP_ROUNDEVEN, /* f32: to the nearest integer, ties to even (what the 16-bit lowering rounds with) */
    IR_OP_FMA, /* f32 or f16, scalars or vectors */
    IR_OP_CMP, IR_OP_SELECT,
    IR_OP_CONVERT, IR_OP_BITCAST,
    IR_OP_VEC, IR_OP_EXTRACT,
    /* memory */
    IR_OP_LOAD, IR_OP_STORE, IR_OP_LOAD_MASKED, IR_OP_STORE_MASKED,
    IR_OP_SHM_LOAD, IR_OP_SHM_STORE,
    IR_OP_ATOMIC,
    IR_OP_BARRIER, IR_OP_FENCE,
    IR_OP_ASYNC_COPY, IR_OP_ASYNC_COMMIT, IR_OP_ASYNC_WAIT,
    /* subgroup */
    IR_OP_SG_REDUCE, IR_OP_SG_SHUFFLE, IR_OP_SG_SHUFFLE_XOR, IR_OP_SG_BROADCAST,
    /* matrix fragments */
    IR_OP_FRAG_FILL, IR_OP_FRAG_LOAD, IR_OP_FRAG_STORE, IR_OP_FRAG_MMA, IR_OP_FRAG_MUL_ADD,
    IR_OP_FRAG_LOAD_TENSOR,
    IR_OP_FRAG_ELEMS, IR_OP_FRAG_FROM_ELEMS, IR_OP_FRAG_PAIR_SUB,
    IR_OP_WG_MMA, IR_OP_WG_WAIT,
    /* ordering with other kernels and workgroups, and the tensor copy engine (ir.h's last
     * section: grid.wait and prefetch are hints a target may drop; the rest is sm_90's) */
    IR_OP_GRID_WAIT, IR_OP_PREFETCH,
    IR_OP_MBAR_INIT, IR_OP_MBAR_ARRIVE, IR_OP_MBAR_EXPECT, IR_OP_MBAR_WAIT, IR_OP_TMA_LOAD, IR_OP_CLUSTER_SYNC,
    /* structured control flow */
    IR_OP_FOR, IR_OP_IF, IR_OP_YIELD,
    IR_OP_COUNT
} ir_op;

const char *ir_op_name(ir_op op);

/* Binary (ADD..SHR), unary (NEG..ROUNDEVEN) and FMA arithmetic. Ints are two's complement;
 * DIV/REM/SHR follow the operand's signedness (I32/I64 signed, U32/U64 unsigned). */
ir_val ir_bin(ir_kernel *k, ir_op op, ir_val a, ir_val b);
ir_val ir_un(ir_kernel *k, ir_op op, ir_val a);
ir_val ir_fma(ir_kernel *k, ir_val a, ir_val b, ir_val c);

typedef enum ir_cmp { IR_EQ, IR_NE, IR_LT, IR_LE, IR_GT, IR_GE } ir_cmp; /* floats: ordered */
ir_val ir_compare(ir_kernel *k, ir_cmp c, ir_val a, ir_val b); /* -> bool (or bool vector) */
ir_val ir_select(ir_kernel *k, ir_val cond, ir_val a, ir_val b);

/* Value conversion: int <-> int (wrap or extend by signedness), int <-> f32 (float to
 * int rounds toward zero), f32 -> f16 / bf16 rounds to nearest even, f16 / bf16 -> f32
 * exact; no other pairs (no bool, no f16 <-> bf16, no int <-> f16). Vectors convert lane by
 * lane. Converting or bitcasting to the operand's own type returns the operand itself. */
ir_val ir_convert(ir_kernel *k, ir_val a, ir_type to);
/* f32 -> f16 / bf16 of a value the type holds exactly (convert.exact): the representation
 * changes, nothing rounds; for a value the type does not hold, the result is one of
 * the type's values near it, which one unspecified (bf16 on PTX: the top 16 bits). */
ir_val ir_convert_exact(ir_kernel *k, ir_val a, ir_type to);
ir_val ir_bitcast(ir_kernel *k, ir_val a, ir_type to); /* same bit width */
ir_val ir_vec(ir_kernel *k, const ir_val *lanes, uint32_t n);
ir_val ir_extract(ir_kernel *k, ir_val v, uint32_t lane);

/* All ids are u32; SG_* take dim 0 only. */
typedef enum ir_id_kind {
    IR_ID_GLOBAL,      /* global invocation id (dim 0-2), u32 */
    IR_ID_LOCAL,       /* id within the workgroup */
    IR_ID_GROUP,       /* workgroup id */
    IR_ID_NUM_GROUPS,  /* workgroups in the dispatch */
    IR_ID_SG_ID,       /* subgroup index within the workgroup (dim 0) */
    IR_ID_SG_LANE,     /* lane within the subgroup */
    IR_ID_SG_SIZE,     /* lanes per subgroup */
    IR_ID_WARPGROUP,   /* the invocation's warpgroup: 4 subgroups of 32 (dim 0; wg.mma's unit) */
    IR_ID_CLUSTER_RANK, /* the workgroup's rank in its cluster (dim 0; 0 without clusters) */
    IR_ID_COUNT
} ir_id_kind;
ir_val ir_id(ir_kernel *k, ir_id_kind kind, uint32_t dim);

/* ---- memory ------------------------------------------------------------------------------- */

/* Element index is u32. lanes > 1 loads/stores a vector of consecutive elements starting
 * at index (the caller keeps index a multiple of lanes). */
ir_val ir_load(ir_kernel *k, ir_buf b, ir_val index, uint32_t lanes);
void ir_store(ir_kernel *k, ir_buf b, ir_val index, ir_val value);
/* Tensor ends: lanes whose index + lane >= limit read fallback (a scalar of the element
 * type) and are not written. */
ir_val ir_load_masked(ir_kernel *k, ir_buf b, ir_val index, uint32_t lanes, ir_val limit, ir_val fallback);
void ir_store_masked(ir_kernel *k, ir_buf b, ir_val index, ir_val value, ir_val limit);
ir_val ir_shm_load(ir_kernel *k, ir_shm s, ir_val index, uint32_t lanes);
void ir_shm_store(ir_kernel *k, ir_shm s, ir_val index, ir_val value);
/* Workgroup execution and memory barrier (workgroup and global memory); must be reached
 * by the whole workgroup (uniform control flow). The verifier checks this conservatively:
 * no barrier inside an if whose condition, or a for whose bounds, depend on an id other
 * than GROUP, NUM_GROUPS or SG_SIZE (or on an atomic's result). */
void ir_barrier(ir_kernel *k);
/* A memory fence at device scope (acquire and release, buffers): the invocation's buffer
 * stores before it are seen by any invocation of the launch, in any workgroup, that sees an
 * atomic the first made after it and fences before its own later loads (the classic "last
 * workgroup to count in does the rest" handoff). Needs no uniform control flow. */
void ir_fence(ir_kernel *k);

/* Asynchronous copies from a buffer into workgroup memory (cp.async on sm_80+; a plain
 * load and store where a target has none, ir/lower.h): dst[dst_index + i] = src_index + i <
 * limit ? src[src_index + i] : 0 for i < count, where src's and dst's element types are
 * the same, count * the element's bytes is 4, 8 or 16, and both indices are multiples of
 * count. The copy is the invocation's until it commits its copies as a group
 * (ir_async_commit) and waits for all but the last `pending` (0..7) of its groups
 * (ir_async_wait); the data is then the invocation's to read, and the workgroup's after a
 * barrier. Groups are per invocation: every invocation commits and waits the same way. */
void ir_async_copy(ir_kernel *k, ir_shm dst, ir_val dst_index, ir_buf src, ir_val src_index, uint32_t count,
                   ir_val limit);
void ir_async_commit(ir_kernel *k);
void ir_async_wait(ir_kernel *k, uint32_t pending);

typedef enum ir_atomic_op { IR_ATOMIC_ADD, IR_ATOMIC_MIN, IR_ATOMIC_MAX, IR_ATOMIC_XCHG } ir_atomic_op;
/* On a buffer (shm == false: target is an ir_buf, which needs IR_READ | IR_WRITE) or a
 * workgroup array; value is the element type; returns the old value. ADD takes
 * i32/u32/f32; MIN/MAX i32/u32; XCHG any 32-bit type (i32/u32/f32). */
ir_val ir_atomic(ir_kernel *k, ir_atomic_op op, bool shm, uint32_t target, ir_val index, ir_val value);

/* ---- subgroups ---------------------------------------------------------------------------- */

typedef enum ir_reduce { IR_REDUCE_ADD, IR_REDUCE_MIN, IR_REDUCE_MAX } ir_reduce;
/* reduce: i32/u32/f32 scalars; shuffles and broadcast: those or vectors of them; lane u32 */
ir_val ir_sg_reduce(ir_kernel *k, ir_reduce r, ir_val v);      /* over the subgroup; all lanes get it */
ir_val ir_sg_shuffle(ir_kernel *k, ir_val v, ir_val lane);     /* v from another lane */
ir_val ir_sg_shuffle_xor(ir_kernel *k, ir_val v, ir_val mask); /* v from lane ^ mask */
ir_val ir_sg_broadcast(ir_kernel *k, ir_val v, ir_val lane);   /* lane must be uniform */

/* ---- matrix fragments --------------------------------------------------------------------- */

/* FRAG_LOAD/STORE's imm[1] flags: row-major; base and stride multiples of 16 bytes
 * (ir_frag_load_aligned, buffer loads only) */
#define IR_FRAG_ROW_MAJOR 1
#define IR_FRAG_ALIGNED16 2
ir_val ir_frag_fill(ir_kernel *k, ir_type frag, ir_val scalar);
/* Tile at element base with a row stride of `stride` elements (row_major) or a column
 * stride (column-major), from a buffer (shm == false) or a workgroup array. */
ir_val ir_frag_load(ir_kernel *k, ir_type frag, bool shm, uint32_t src, ir_val base, ir_val stride, bool row_major);
/* ir_frag_load from a buffer of 16-bit elements whose base and stride the kernel promises
 * are multiples of 8 elements (16 bytes): an emitter may then read it 16 bytes a lane
 * (SPIR-V: through a view of the buffer as 16-byte words; a 2-byte pointer leaves the
 * driver 2-byte loads). A base or stride off that grid reads the wrong elements. */
ir_val ir_frag_load_aligned(ir_kernel *k, ir_type frag, uint32_t src, ir_val base, ir_val stride, bool row_major);
void ir_frag_store(ir_kernel *k, ir_val frag, bool shm, uint32_t dst, ir_val base, ir_val stride, bool row_major);
/* A workgroup fragment (A or B) from a tensor of n_rows x n_cols elements stored row-major
 * from the buffer's first element (row stride n_cols), its elements outside the tensor 0:
 * A (M x K) element (i, j) = T[row0 + i][col0 + j]; B (K x N) element (i, j) =
 * T[row0 + i][col0 + j], or with `transposed` T[row0 + j][col0 + i] (B's columns are T's
 * rows: a weight matrix stored one output per row). Operands u32 and uniform over the
 * workgroup (SPIR-V: VK_NV_cooperative_matrix2's tensor-addressed loads; PTX refuses it). */
#define IR_FRAG_TRANSPOSED 1
ir_val ir_frag_load_tensor(ir_kernel *k, ir_type frag, uint32_t src, ir_val row0, ir_val col0, ir_val n_rows,
                           ir_val n_cols, bool transposed);
ir_val ir_frag_mma(ir_kernel *k, ir_val a, ir_val b, ir_val acc); /* acc + a * b */
/* a * b + c element by element, three subgroup ACC fragments of one f32 type (a sub-block's
 * sums scaled by a fragment of its scales, say; the product rounds, then the sum: SPIR-V's
 * component-wise OpFMul and OpFAdd on cooperative matrices, PTX's on the registers). */
ir_val ir_frag_mul_add(ir_kernel *k, ir_val a, ir_val b, ir_val c);
/* The invocation's own elements of a 16x8x16 family fragment, in the order of the
 * targets that expose them (PTX's mma.m16n8k16; SPIR-V's cooperative matrices do not, and
 * refuse these by name), with g = lane / 4 and t = lane % 4:
 *   ACC 16x8 f32, 4 elements: e at row g + 8 (e >> 1), column 2t + (e & 1)
 *   A 16x16 f16/bf16, 8:      e at row g + 8 ((e >> 1) & 1), column 2t + (e & 1) + 8 (e >> 2)
 *   B 16x8 f16/bf16, 4:       e at row (k) 2t + (e & 1) + 8 (e >> 1), column (n) g
 * so the accumulators of columns 0..7 and 8..15 of a product give, element for element,
 * the A fragment of a 16x16 tile (a softmax of scores kept in registers, then P V).
 * ir_frag_elems: an ACC's 4 elements as a vector of 4 f32. ir_frag_from_elems: the
 * fragment of type frag from its elements: an ACC from one vector of 4 f32 (lo, hi
 * IR_NONE), an A from two vectors of 4 of its 16-bit type (elements 0..3, then 4..7), a B
 * from one vector of 4 (hi IR_NONE). Since a product sums over k, A and B built with
 * the same permutation of k give the same sums in another order (kn_matmul_skinny: a
 * lane's 8 consecutive columns in one 16-byte load). An A or B may also come from the
 * registers' words: an A from one vector of 4 u32, a B from one vector of 2 u32, each word
 * two elements' 16-bit patterns, the lower-numbered element in the low half (hi IR_NONE). */
ir_val ir_frag_elems(ir_kernel *k, ir_val acc);
ir_val ir_frag_from_elems(ir_kernel *k, ir_type frag, ir_val lo, ir_val hi);
/* a - b on words as frag.from_elems takes them (u32 scalars or vectors of one type): each
 * word's two 16-bit halves as values of elem (f16 or bf16) subtracted pairwise, each
 * difference rounded to elem (exact where elem holds it: a code decoded by OR-ing it
 * into a float's mantissa, less that float). PTX only, as frag.elems. */
ir_val ir_frag_pair_sub(ir_kernel *k, ir_scalar elem, ir_val a, ir_val b);

/* Warpgroup matrix products (wgmma, sm_90a): acc + A * B, where acc is an f32 accumulator
 * fragment of m64 x n x k16 (n a multiple of 8, 8..256) held by a warpgroup: 4 consecutive
 * subgroups of 32 (the workgroup a multiple of 128 invocations), each its 16 rows. A
 * (64 x 16 k_steps) and B (16 k_steps x n, kept as n rows of k: Bᵀ) are read from
 * workgroup arrays of one 16-bit float type, as 8x8 core matrices of 16-byte rows: A's
 * (r, k) at a_base + (r / 8) * a_sbo + (k / 8) * a_lbo + (r % 8) * 8 + k % 8, B's (k, c)
 * likewise at its (c, k) with b_base, b_sbo, b_lbo: element indices, multiples of 8 (u32
 * values; k_steps 1..8 products along k, in order). Every invocation of the warpgroup
 * takes part (uniform control flow, as a barrier's). */
ir_val ir_wg_mma(ir_kernel *k, ir_val acc, ir_shm a, ir_val a_base, ir_val a_sbo, ir_val a_lbo, ir_shm b,
                 ir_val b_base, ir_val b_sbo, ir_val b_lbo, uint32_t k_steps);
/* ir_wg_mma with flags (IR_WG_MMA_*):
 * - IR_WG_MMA_SW128: A and B in the 128-byte swizzled layout instead of plain core
 *   matrices: rows of 64 elements (128 bytes), 8 rows an atom of 1024 bytes at
 *   base + (r / 8) * sbo + (k / 64) * lbo, within which (r, k) is at
 *   (r % 8) * 64 + (((k / 8) ^ r) % 8) * 8 + k % 8; base, sbo and lbo multiples of 512
 *   elements (atoms 1024-byte aligned: a backend aligns the arrays of a kernel with
 *   wg.mma so). The eight 16-byte pieces of a row land in distinct banks for every row of
 *   an atom, so the products read workgroup memory without conflicts.
 * - IR_WG_MMA_ASYNC: the products are left in flight (one committed group of the
 *   warpgroup's): the accumulator returned may only be the acc of another wg.mma or of
 *   ir_wg_wait, directly or carried by a loop into them, and A and B must not be stored
 *   to until a wait covers the group. ir_wg_wait returns acc once at most `pending`
 *   (0..7) of the warpgroup's groups are in flight; with 0, acc is complete and may be
 *   read. So a chunk's products overlap the staging of the next ones:
 *     for c: barrier; stage chunk c + d; acc = wg.mma.async(acc, c); acc = wg.wait(acc, 1)
 *     acc = wg.wait(acc, 0) */
ir_val ir_wg_mma_flags(ir_kernel *k, ir_val acc, ir_shm a, ir_val a_base, ir_val a_sbo, ir_val a_lbo, ir_shm b,
                       ir_val b_base, ir_val b_sbo, ir_val b_lbo, uint32_t k_steps, unsigned flags);
ir_val ir_wg_wait(ir_kernel *k, ir_val acc, uint32_t pending);

/* ---- ordering and the tensor copy engine ------------------------------------------------------ */

/* Programmatic dependent launch (PTX's griddepcontrol, where caps.grid_dep): a kernel's
 * workgroups may start before the kernel before it has ended, and wait for it (its
 * memory visible) at grid.wait. A kernel without one waits on entry; one with a grid.wait
 * (one at most, in the body's top level) does only the work before it early: ids,
 * arithmetic, prefetches and control flow holding only those (no access to memory, no
 * barrier). A target without the feature ignores it. */
void ir_grid_wait(ir_kernel *k);
/* The kernel lets the next kernel be scheduled as soon as every one of its workgroups has
 * started, not as each ends: for short kernels whose successor prefetches before its
 * grid.wait (that successor's workgroups then sit on the device while this one runs). */
void ir_set_launch_early(ir_kernel *k, bool early);
bool ir_launch_early(const ir_kernel *k);
/* A hint: bytes (a multiple of 16, 16..2^24) of b from element index (its address a
 * multiple of 16 bytes, within the buffer) will be read soon; sm_90 brings them into the
 * L2 cache (cp.async.bulk.prefetch.L2), other targets ignore it. */
void ir_prefetch(ir_kernel *k, ir_buf b, ir_val index, uint32_t bytes);

/* Workgroups launched in clusters of n (1, 2, 4 or 8) along the grid's x (sm_90: their
 * workgroup memories reach each other); 1, the default, is no cluster. The grid's x must
 * be a multiple of n. */
void ir_set_cluster(ir_kernel *k, uint32_t n);
uint32_t ir_cluster(const ir_kernel *k);
/* All invocations of every workgroup in the cluster meet here (a barrier across the
 * cluster, release and acquire: uniform control flow, as a barrier's). */
void ir_cluster_sync(ir_kernel *k);

/* Memory barriers (mbarrier, sm_90) in a workgroup array of u64, one element each, for
 * producer / consumer pipelines without workgroup barriers. init: the barrier at index
 * completes a phase once `count` arrivals (and the bytes expected of it) have come; one
 * invocation inits, and the inits are everyone's after a barrier or cluster.sync.
 * arrive: one arrival on the workgroup's own barrier, or with cta (u32, IR_NONE: own)
 * on the barrier at the same index in that workgroup of the cluster. expect: an arrival
 * that also makes the phase wait for `bytes` more bytes of tma.load. wait: returns once
 * the phase of the given parity (u32 0 or 1; phases alternate 0, 1, 0, ... from the
 * init) has completed; waiting for parity 1 before any phase completed returns at once,
 * so a producer's first pass over fresh "slot empty" barriers needs no arrivals. */
void ir_mbar_init(ir_kernel *k, ir_shm bars, ir_val index, ir_val count);
void ir_mbar_arrive(ir_kernel *k, ir_shm bars, ir_val index, ir_val cta);
void ir_mbar_expect(ir_kernel *k, ir_shm bars, ir_val index, ir_val bytes);
void ir_mbar_wait(ir_kernel *k, ir_shm bars, ir_val index, ir_val parity);

/* A 2D tensor over buffer b (of a 16-bit type) for the tensor copy engine: `outer` rows of
 * `inner` elements (a multiple of 8), copied in boxes of box_outer (1..256) rows of
 * box_inner elements (128 bytes: the box rows land in workgroup memory in the 128-byte
 * swizzled layout wg.mma's IR_WG_MMA_SW128 reads, the array's start 1024-byte aligned);
 * elements past the tensor read as zero. The CUDA backend encodes it for the buffer a
 * launch binds to b (cuTensorMapEncodeTiled) and passes it with the launch. Returns its
 * index (0, 1, ...); at most 8 a kernel. */
uint32_t ir_tensor_map(ir_kernel *k, ir_buf b, uint32_t inner, uint32_t outer, uint32_t box_inner,
                       uint32_t box_outer);
typedef struct ir_tensor_map_decl {
    ir_buf buf;
    uint32_t inner, outer, box_inner, box_outer;
} ir_tensor_map_decl;
uint32_t ir_n_tensor_maps(const ir_kernel *k);
const ir_tensor_map_decl *ir_tensor_map_at(const ir_kernel *k, uint32_t i);
/* tma.load: the box of tensor map `map` whose first element is (c_inner, c_outer) (u32;
 * c_inner a multiple of box_inner) into dst from element dst_index (a multiple of 512: 1024
 * bytes), completing box bytes on the barrier bars[bar_index] (which an expect announced).
 * With cta_mask (u32, IR_NONE: none) the box lands at the same place in every workgroup of
 * the cluster whose rank's bit is set, completing bytes on each one's barrier at
 * bar_index. The invocation that issues it needs no others. */
void ir_tma_load(ir_kernel *k, ir_shm dst, ir_val dst_index, uint32_t map, ir_val c_inner, ir_val c_outer,
                 ir_shm bars, ir_val bar_index, ir_val cta_mask);

/* ---- structured control flow --------------------------------------------------------------- */

/* for (iv = lo; iv < hi; iv += step) with n carried values: inside, the body sees iv and
 * the carried values; it ends with ir_for_end's yields; after it, the results are the
 * last yields (the inits when the loop runs zero times). lo/hi/step are i32 or u32 (one
 * type; a constant step must be positive). Results get their value numbers at
 * ir_for_end (ir_for_result is IR_NONE before). A construct that could not begin returns
 * NULL; every ir_for_* / ir_if_* call takes NULL and then returns IR_NONE or does nothing. */
typedef struct ir_for ir_for;
ir_for *ir_for_begin(ir_kernel *k, ir_val lo, ir_val hi, ir_val step, uint32_t n, const ir_val *init);
ir_val ir_for_iv(const ir_for *f);
ir_val ir_for_arg(const ir_for *f, uint32_t i);
void ir_for_end(ir_kernel *k, ir_for *f, const ir_val *yields);
ir_val ir_for_result(const ir_for *f, uint32_t i);

/* if (cond) { ... yield a } else { ... yield b }, giving n results (typed by the
 * then-yields; numbered at ir_if_end). cond is a bool scalar. With n == 0 the else may be
 * empty: ir_if_else is optional then, and the IF still gets an else region holding only
 * an empty yield. */
typedef struct ir_if ir_if;
ir_if *ir_if_begin(ir_kernel *k, ir_val cond, uint32_t n);
void ir_if_else(ir_kernel *k, ir_if *f, const ir_val *then_yields);
void ir_if_end(ir_kernel *k, ir_if *f, const ir_val *yields); /* else's yields (or then's if no else) */
ir_val ir_if_result(const ir_if *f, uint32_t i);

/* ---- reading a kernel (emitters, passes, printer) ----------------------------------------- */

typedef struct ir_inst ir_inst;

typedef struct ir_region {
    ir_inst **inst;
    uint32_t n, cap;
} ir_region;

struct ir_inst {
    ir_op op;
    ir_val result;        /* IR_NONE for stores, barriers, yields */
    ir_type type;         /* the result's type */
    ir_val *operand;      /* arena */
    uint32_t n_operand;
    /* op-specific:
     *   CONST      imm[0] = value: bool 0/1, i32 sign-extended, u32 zero-extended, f32 its
     *              bits (zero-extended); constants are only ever bool, i32, u32 or f32; a
     *              lowering pass (ir/lower.h) also makes vectors of them: every lane imm[0]
     *   CONVERT    imm[0] = 1 for convert.exact (ir/lower.h: f32 -> f16/bf16 of a value the
     *              target type holds exactly, so nothing rounds), else 0
     *   PARAM      imm[0] = index among all params;  SPEC imm[0] = index among specs
     *   ID         imm[0] = ir_id_kind, imm[1] = dim
     *   CMP        imm[0] = ir_cmp;  SG_REDUCE imm[0] = ir_reduce;  EXTRACT imm[0] = lane
     *   LOAD, LOAD_MASKED, STORE, STORE_MASKED, SHM_LOAD, SHM_STORE
     *              imm[0] = buffer (ir_buf) or shm index, imm[1] = lanes (1, 2 or 4)
     *   ATOMIC     imm[0] = buffer or shm index, imm[1] = ir_atomic_op, imm[2] = 1 if shm
     *   FRAG_LOAD, FRAG_STORE
     *              imm[0] = buffer or shm index, imm[1] = IR_FRAG_ROW_MAJOR | IR_FRAG_ALIGNED16, imm[2] = 1 if shm
     *   FRAG_LOAD_TENSOR imm[0] = buffer, imm[1] = IR_FRAG_TRANSPOSED or 0
     *   ASYNC_COPY imm[0] = shm index (dst), imm[1] = buffer (src), imm[2] = count
     *   ASYNC_WAIT imm[0] = pending
     *   WG_MMA     imm[0] = A's workgroup array, imm[1] = B's, imm[2] = k_steps | flags
     *              (IR_WG_MMA_ASYNC, IR_WG_MMA_SW128: ir_wg_mma_flags)
     *   WG_WAIT    imm[0] = pending
     *   PREFETCH   imm[0] = buffer, imm[1] = bytes
     *   MBAR_*     imm[0] = the barriers' workgroup array; ARRIVE imm[1] = 1 with a cta operand
     *   TMA_LOAD   imm[0] = dst array, imm[1] = tensor map, imm[2] = the barriers' array
     * operands, in order:
     *   LOAD/SHM_LOAD [index]; STORE/SHM_STORE [index, value]; LOAD_MASKED [index, limit,
     *   fallback]; STORE_MASKED [index, value, limit]; ATOMIC [index, value]; SELECT [cond,
     *   a, b]; SG_SHUFFLE* / SG_BROADCAST [value, lane]; FRAG_FILL [scalar]; FRAG_LOAD
     *   [base, stride]; FRAG_STORE [frag, base, stride]; FRAG_MMA [a, b, acc]; FRAG_LOAD_TENSOR [row0, col0,
     *   n_rows, n_cols]; FRAG_ELEMS [acc]; FRAG_FROM_ELEMS [lo(, hi)]; FRAG_PAIR_SUB [a, b] imm[0] = elem; ASYNC_COPY
     *   [dst_index, src_index, limit]; WG_MMA [acc, a_base, a_sbo, a_lbo, b_base, b_sbo,
     *   b_lbo]; WG_WAIT [acc]; PREFETCH [index]; MBAR_INIT [index, count];
     *   MBAR_ARRIVE [index(, cta)]; MBAR_EXPECT [index, bytes]; MBAR_WAIT [index, parity];
     *   TMA_LOAD [dst_index, c_inner, c_outer, bar_index(, cta_mask)]; FOR [lo, hi, step,
     *   inits...]; IF [cond]; YIELD [values...] */
    int64_t imm[3];
    /* FOR: body (region 0; its block arguments are block_arg[]: iv then carried values);
     * IF: then (0) and else (1), always both. Each region ends with exactly one YIELD. */
    ir_region region[2];
    uint32_t n_region;
    ir_val *block_arg;    /* FOR: iv then the n carried values seen inside the body */
    uint32_t n_block_arg;
    ir_val *results;      /* FOR/IF: the n results after the construct */
    uint32_t n_results;
};

typedef struct ir_param {
    const char *name;
    bool is_buffer;
    ir_scalar elem;       /* buffers: element; scalars: type */
    unsigned access;      /* buffers */
    uint64_t extent;      /* buffers: elements the kernel reads or writes (0 unknown), or per */
    uint32_t extent_dim;  /* workgroup along extent_dim when extent_per_group */
    bool extent_per_group;
    ir_val value;         /* scalars: the PARAM value */
} ir_param;

typedef struct ir_spec {
    const char *name;
    ir_scalar type;
    double dflt;
    ir_val value;
} ir_spec;

typedef struct ir_shared_decl {
    const char *name;
    ir_scalar elem;
    uint32_t count;
    uint32_t overlays; /* 1 + the array whose memory it may reuse (ir_shared_overlay), 0 none */
} ir_shared_decl;

#define IR_WG_MMA_ASYNC 256 /* in WG_MMA's imm[2]: the products are left in flight */
#define IR_WG_MMA_SW128 512 /* in WG_MMA's imm[2]: A and B in the 128-byte swizzled layout */
#define IR_WG_MMA_STEPS 255 /* WG_MMA's imm[2]: the k steps */

/* PARAM and SPEC instructions are in no region: they are defined at kernel entry and
 * visible everywhere (reach them through ir_param_at / ir_spec_at or ir_def). */
const ir_region *ir_kernel_body(const ir_kernel *k);
uint32_t ir_n_params(const ir_kernel *k);   /* buffers and scalars, in declaration order */
const ir_param *ir_param_at(const ir_kernel *k, uint32_t i);
/* The elements a buffer bound to parameter p must hold for a launch of groups (0 when p
 * declares no extent, or is a scalar). */
uint64_t ir_param_extent(const ir_param *p, const uint32_t groups[3]);
uint32_t ir_n_buffers(const ir_kernel *k);
uint32_t ir_buffer_param(const ir_kernel *k, ir_buf b); /* its index among all params (UINT32_MAX if none) */
uint32_t ir_n_specs(const ir_kernel *k);
const ir_spec *ir_spec_at(const ir_kernel *k, uint32_t i);
uint32_t ir_n_shared(const ir_kernel *k);
const ir_shared_decl *ir_shared_at(const ir_kernel *k, ir_shm s);
/* x_spec IR_NONE if constant; with a spec, xyz is {its default, 1, 1} */
void ir_workgroup(const ir_kernel *k, uint32_t xyz[3], ir_val *x_spec);
uint32_t ir_n_values(const ir_kernel *k);   /* values are 1..n */
/* The instruction that defines v (CONST/PARAM/SPEC/ID/... or FOR/IF for their results
 * and block arguments); NULL for IR_NONE, unknown values and values a pass removed.
 * Values keep their numbers through passes (gaps appear). */
const ir_inst *ir_def(const ir_kernel *k, ir_val v);

/* ---- verification, printing, passes -------------------------------------------------------- */

/* Every rule (types of operands, defined-before-use in structured scopes, yields that
 * match, access modes, fragment shapes, masks, ...). 0, or -1 with one line naming the
 * instruction and the rule. A kernel with a builder error or an open for/if fails with
 * that. err may be NULL. */
int ir_verify(const ir_kernel *k, kiln_err *err);
/* The stable text form (same kernel, same text), malloc'ed. */
char *ir_print(const ir_kernel *k);

/* Replace spec constants named in names[] by values[] and fold what becomes constant
 * (arithmetic, compares, selects, ifs on a constant condition, loops that run zero
 * times). Unnamed spec constants stay (renumbered: a replaced spec leaves ir_spec_at's
 * list, its value becomes a CONST at the top of the body, keeping its number; a replaced
 * workgroup spec makes the workgroup size constant). Folding gives the device's bits:
 * IEEE f32 and wrapping ints; it leaves division by zero, NaN or subnormal f32, out of
 * range float-to-int and transcendentals to the device. The kernel must verify before;
 * unknown names or values that do not fit the spec's type fail with the kernel unchanged;
 * the result is verified again (-1 if, say, a folded step or workgroup size is invalid:
 * then discard the kernel). */
int ir_specialize(ir_kernel *k, const char *const *names, const double *values, uint32_t n, kiln_err *err);
/* Remove instructions whose results are unused and that have no effect (stores, atomics,
 * barriers, fragment stores and constructs holding them stay), until none is left. Does
 * nothing while a for/if is still open. */
void ir_dce(ir_kernel *k);

#endif
