/* The SPIR-V emitter's shared state: one spv_ctx per spv_emit call, passed between the
 * lowering files (spv_emit.c walks the kernel and declares the module's interface,
 * spv_types.c owns types, constants and the instruction writers, spv_ops.c lowers
 * arithmetic, compares and conversions, spv_mem.c buffers, workgroup arrays and atomics,
 * spv_sg.c ids and subgroups, spv_frag.c cooperative-matrix fragments). */
#ifndef KILN_BACKEND_SPIRV_SPV_INTERNAL_H
#define KILN_BACKEND_SPIRV_SPV_INTERNAL_H

#include "backend-spirv/spv_builder.h"
#include "ir/emit_core.h"
#include "ir/ir.h"
#include "runtime/caps.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SPV_VERSION_1_6 0x00010600u
#define PUSH_CONSTANT_BYTES 128u /* Vulkan's guaranteed maxPushConstantsSize */

/* Vulkan semantics and scopes (constants in the module). */
enum {
    SCOPE_DEVICE = 1,
    SCOPE_WORKGROUP = 2,
    SCOPE_SUBGROUP = 3,
    SCOPE_QUEUE_FAMILY = 5, /* the Vulkan memory model's device-wide scope without VulkanMemoryModelDeviceScope */
    SEM_RELAXED = 0,
    SEM_BARRIER = SpvMemorySemanticsAcquireReleaseMask | SpvMemorySemanticsWorkgroupMemoryMask |
                  SpvMemorySemanticsUniformMemoryMask,
};

/* How a workgroup array stores its elements. */
typedef enum shm_mode {
    SHM_REP,         /* in the value representation (f16 widened to f32 when not native) */
    SHM_BF16_NATIVE, /* bf16 read by fragments: the SPV_KHR_bfloat16 type */
    SHM_F32_BITS     /* f32 exchanged atomically: kept as u32 bits (float atomics need a feature) */
} shm_mode;

/* Views of a buffer: scalars, 2-vectors, 4-vectors, and an f32 buffer's bits as u32 (for
 * atomic exchange: Vulkan allows f32 atomics only with shaderBufferFloat32Atomics). */
#define N_VIEW_LANES 5
#define VIEW_BITS 0u   /* the lanes argument that asks for the u32 view */
#define VIEW_WORDS4 8u /* ... for the view as 16-byte words (u32 x 4): aligned fragment loads */

typedef struct buf_info {
    const ir_param *p;
    uint32_t var[N_VIEW_LANES]; /* per view; 0 until used */
    bool atomic;
} buf_info;

typedef struct shm_info {
    const ir_shared_decl *d;
    shm_mode mode;
    bool frag;   /* read or written by fragment loads/stores */
    bool xchg_f32; /* f32 exchanged atomically */
    uint32_t var, elem_type;
} shm_info;

typedef struct spv_ctx {
    ir_emit e; /* the value table (IR value -> SPIR-V id), errors, the instruction being lowered */
    const ir_kernel *k;
    const rt_caps *c;
    spv_builder b;

    bool f16_native;
    bool vulkan_mm; /* fragments need the Vulkan memory model (SPIR-V validation rule) */
    bool fence;     /* the kernel fences at device scope: its written buffers are Coherent (GLSL450 model) */
    bool emu;       /* fragments emulated (caps.mma_emulated) */
    uint32_t emu_scratch;     /* elements of the emulated mma's scratch a subgroup needs (0: no mma) */
    uint32_t emu_scratch_var; /* its workgroup array, and the array's element type */
    uint32_t emu_scratch_elem;
#define SPV_EMU_MAX_SLOTS 64 /* 16 x 16 over 4 lanes */
    uint32_t emu_var[SPV_EMU_MAX_SLOTS + 1]; /* Function variables of the fragments' arrays, by slots */
    uint32_t label; /* the block being written */

    buf_info *buf;
    uint32_t n_buf;
    shm_info *shm;
    uint32_t n_shm;
    uint32_t builtin[IR_ID_COUNT];
    uint32_t pc_var;
    uint32_t *pc_member; /* param index -> push-constant member, or UINT32_MAX */

    uint32_t *iface; /* global variables, for OpEntryPoint */
    uint32_t n_iface, cap_iface;
} spv_ctx;

/* ---- spv_types.c ---- */
uint32_t spv_t_void(spv_ctx *x);
uint32_t spv_t_bool(spv_ctx *x);
uint32_t spv_t_u32(spv_ctx *x);
uint32_t spv_t_float(spv_ctx *x, uint32_t w);
uint32_t spv_t_f32(spv_ctx *x);
uint32_t spv_t_bf16(spv_ctx *x);
uint32_t spv_t_vec(spv_ctx *x, uint32_t elem, uint32_t n);
uint32_t spv_t_ptr(spv_ctx *x, uint32_t sc, uint32_t t);
uint32_t spv_t_rep_s(spv_ctx *x, ir_scalar s);
uint32_t spv_t_rep_sn(spv_ctx *x, ir_scalar s, uint32_t n);
uint32_t spv_t_store_s(spv_ctx *x, ir_scalar s);
uint32_t spv_c_u32(spv_ctx *x, uint32_t v);
const rt_mma_shape *spv_mma_find(const rt_caps *c, uint32_t m, uint32_t n, uint32_t k, int ab, int acc);
uint32_t spv_t_frag_component(spv_ctx *x, ir_scalar s);
/* caps.wg_mma's entry for a workgroup fragment m x n x k (types as spv_mma_find's) of the
 * kernel's workgroup size, or NULL. */
const rt_mma_shape *spv_wg_mma_find(spv_ctx *x, uint32_t m, uint32_t n, uint32_t k, int ab, int acc);
uint32_t spv_t_rep(spv_ctx *x, ir_type t);
uint32_t spv_c_scalar(spv_ctx *x, ir_scalar s, uint64_t bits);
uint32_t spv_c_splat(spv_ctx *x, uint32_t scalar_type, uint32_t n, uint32_t c);
uint32_t spv_c_u32n(spv_ctx *x, uint32_t n, uint32_t v);
uint32_t spv_fn1(spv_ctx *x, uint32_t op, uint32_t type, uint32_t a);
uint32_t spv_fn2(spv_ctx *x, uint32_t op, uint32_t type, uint32_t a, uint32_t b);
uint32_t spv_fn3(spv_ctx *x, uint32_t op, uint32_t type, uint32_t a, uint32_t b, uint32_t c);
uint32_t spv_ext1(spv_ctx *x, uint32_t type, uint32_t inst, uint32_t a);
uint32_t spv_ext2(spv_ctx *x, uint32_t type, uint32_t inst, uint32_t a, uint32_t b);
uint32_t spv_ext3(spv_ctx *x, uint32_t type, uint32_t inst, uint32_t a, uint32_t b, uint32_t c);
void spv_op_label(spv_ctx *x, uint32_t l);
void spv_op_branch(spv_ctx *x, uint32_t to);
uint32_t spv_op_load(spv_ctx *x, uint32_t type, uint32_t ptr);
void spv_op_store(spv_ctx *x, uint32_t ptr, uint32_t v);
void spv_name(spv_ctx *x, uint32_t id, const char *s);
void spv_decorate(spv_ctx *x, uint32_t id, uint32_t dec, int nargs, uint32_t a);
uint32_t spv_global_var(spv_ctx *x, uint32_t ptr_type, uint32_t sc);
/* ---- spv_ops.c ---- */
/* exact: convert.exact, whose value the 16-bit type holds already (ir/lower.h) */
uint32_t spv_convert(spv_ctx *x, ir_scalar from, ir_scalar to, uint32_t n, uint32_t v, bool exact);
bool spv_check_arith(spv_ctx *x, ir_scalar s);
void spv_emit_arith(spv_ctx *x, const ir_inst *in);
void spv_emit_cmp(spv_ctx *x, const ir_inst *in);
void spv_emit_bitcast(spv_ctx *x, const ir_inst *in);
/* ---- spv_mem.c ---- */
uint32_t spv_buf_view(spv_ctx *x, uint32_t b, uint32_t lanes);
uint32_t spv_buf_ptr(spv_ctx *x, uint32_t b, uint32_t lanes, uint32_t index);
uint32_t spv_lane_of(spv_ctx *x, ir_scalar s, uint32_t lanes, uint32_t v, uint32_t l);
uint32_t spv_shm_ptr(spv_ctx *x, uint32_t s, uint32_t index);
/* Values in their representation (spv_t_rep): lanes (1, 2 or 4) consecutive elements of
 * buffer b from index (a multiple of lanes); one element of workgroup array s. */
uint32_t spv_buf_load(spv_ctx *x, uint32_t b, uint32_t index, uint32_t lanes);
void spv_buf_store(spv_ctx *x, uint32_t b, uint32_t index, uint32_t lanes, uint32_t v);
uint32_t spv_shm_load1(spv_ctx *x, uint32_t s, uint32_t index);
void spv_shm_store1(spv_ctx *x, uint32_t s, uint32_t index, uint32_t v);
uint32_t spv_imm_u32(spv_ctx *x, const ir_inst *in, int i, uint32_t max, const char *what);
void spv_emit_memory(spv_ctx *x, const ir_inst *in);
void spv_emit_atomic(spv_ctx *x, const ir_inst *in);
/* ---- spv_sg.c ---- */
uint32_t spv_load_id(spv_ctx *x, ir_id_kind kind, uint32_t dim);
void spv_emit_subgroup(spv_ctx *x, const ir_inst *in);
void spv_emit_barrier(spv_ctx *x, const ir_inst *in); /* BARRIER and FENCE */
/* ---- spv_frag.c ---- */
void spv_emit_frag(spv_ctx *x, const ir_inst *in);
/* ---- spv_frag_emu.c: fragments without cooperative matrices (caps.mma_emulated) ---- */
uint32_t spv_emu_frag_type(spv_ctx *x, const ir_type_desc *d);
void spv_emu_frag(spv_ctx *x, const ir_inst *in);
/* the scratch array's elements a subgroup needs for an mma of m x n x k */
uint32_t spv_emu_scratch_elems(uint32_t m, uint32_t n, uint32_t k);
void spv_emu_declare_scratch(spv_ctx *x);
/* Before the function: a fragment type the emulated ops walk (noted in the scan), then its
 * variable declared in the entry block. */
void spv_emu_note_type(spv_ctx *x, ir_type t);
void spv_emu_declare_vars(spv_ctx *x);
/* ---- spv_emit.c ---- */
void spv_fail(spv_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool spv_widened(const spv_ctx *x, ir_scalar s);
static inline uint32_t spv_V(spv_ctx *x, ir_val v) { return (uint32_t)ir_emit_get(&x->e, v); }
static inline void spv_def(spv_ctx *x, ir_val v, uint32_t id) { ir_emit_set(&x->e, v, id); }

#endif
