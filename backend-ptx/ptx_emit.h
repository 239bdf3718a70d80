/* backend-ptx/ — the PTX emitter: a verified IR kernel -> LLVM IR (LLVM-C API) -> LLVM's
 * O2 pipeline -> PTX text from LLVM's NVPTX target. Nothing but libLLVM at run time.
 *
 * The module it writes: one `.entry` named after the kernel; its parameters follow the
 * IR's declaration order: buffers as global pointers (addrspace 1, .u64; no noalias,
 * since kiln's plans never promise buffers do not alias), scalars by value (i32, u32,
 * f32). The workgroup size becomes `.reqntid x, y, z`. Workgroup arrays are static
 * `.shared` arrays where they fit PTX's static limit (48 KiB in all); past it they are
 * 16-byte aligned offsets into one `.extern .shared` array, which the launch sizes
 * (ptx_dynamic_shared_bytes); either way at most caps.shared_bytes.
 *
 * Spec constants are emitted with their defaults (folded by LLVM): a caller that wants
 * other values runs ir_specialize on the kernel first. A spec-constant workgroup size
 * likewise takes its default.
 *
 * Target: sm_XX from caps.compute_capability (0 -> sm_80; an architecture newer than
 * LLVM 19 knows gets the newest it knows, sm_90, which the driver JIT-compiles forward),
 * PTX ISA 8.0 (+ptx80), which driver 580 loads. Below sm_50 is refused.
 *
 * Before emitting, the kernel is lowered (ir/lower.h, ptx_lowered): masked accesses
 * become ifs around plain accesses, 16-bit arithmetic f32 arithmetic and conversions.
 *
 * Numerics (docs/ARCHITECTURE.md's contract): f16 and bf16 are 16-bit integers in memory and f32 in
 * registers; f32 -> bf16 rounds to nearest even with integer ops (written out in the IR),
 * f32 -> f16 with cvt.rn.f16.f32; both -> f32 exact. f32 add/sub/mul stay separate `.rn` instructions
 * (no contraction; FMA only where the IR says FMA); div and sqrt are IEEE (div.rn,
 * sqrt.rn); RSQRT is 1 / sqrt (two roundings); EXP/LOG/SIN/COS use PTX's approximate
 * ex2/lg2/sin/cos (.approx.f32), TANH tanh.approx.f32 (sm_75+; via ex2 below).
 * Subgroups are CUDA warps of 32 lanes (caps.subgroup_size must be 32): reduce is a
 * butterfly of shfl.sync.bfly, shuffles and broadcast shfl.sync.idx / .bfly, all with the
 * full mask, so each subgroup op must be reached by whole warps, and kernels using them
 * need a workgroup size that is a multiple of 32 (refused otherwise).
 * Vector loads/stores of `lanes` elements assume the index is a multiple of lanes (the
 * IR's rule) and buffers aligned to 16 bytes (cuMemAlloc gives 256).
 *
 * Matrix fragments: mma.sync m16n8k16 (f16/bf16 inputs, f32 accumulators, sm_80+; see
 * ptx_frag.c for the lanes' elements); warpgroup accumulators (m64 x n x k16, f32) and
 * wg.mma are wgmma (ptx_wgmma.c), which makes the module `.target sm_90a` (the JIT refuses
 * wgmma on plain sm_90) and needs caps.wgmma; other shapes are refused.
 *
 * Refused with a message naming the instruction: other fragment shapes, f16/bf16 arithmetic without caps.f16_arith / bf16_arith, f32 atomic add on
 * buffers without caps.atomic_f32_add, subgroup ops without the caps' flags, limits the
 * caps do not allow. */
#ifndef KILN_BACKEND_PTX_PTX_EMIT_H
#define KILN_BACKEND_PTX_PTX_EMIT_H

#include "base/error.h"
#include "ir/ir.h"
#include "runtime/caps.h"

#include <stdbool.h>
#include <stddef.h>

/* Emits k (which must pass ir_verify; ptx_emit checks) for a CUDA device with caps c.
 * 0 with *ptx the malloc'ed PTX text and, when llvm_ir is not NULL, *llvm_ir the
 * malloc'ed LLVM IR kiln wrote (before optimization); or -1 with a one-line err, both
 * outputs NULL. Never aborts on bad input. Thread-safe (one LLVM context per call). */
int ptx_emit(const ir_kernel *k, const rt_caps *c, char **ptx, char **llvm_ir, kiln_err *err);

/* The kernel ptx_emit emits for caps c: a copy of k after the IR's target rewrites
 * (ir/lower.h), for reading (kiln dump writes it as ROLE.lowered.ir). The caller
 * destroys it; NULL with a one-line err. */
ir_kernel *ptx_lowered(const ir_kernel *k, const rt_caps *c, kiln_err *err);

/* ptx_emit through a cache on disk (runtime/cache_dir.h's folder, ptx-<key>.ptx), so a
 * second start runs no LLVM. The key hashes the kernel's printed IR, the caps fields the
 * emitter reads and the emitter's and LLVM's versions; the file's first line (a PTX
 * comment) repeats it, and a file without it is ignored and rewritten. *hit says whether
 * the PTX came from the disk. Without a cache folder it is plain ptx_emit. */
int ptx_emit_cached(const ir_kernel *k, const rt_caps *c, char **ptx, bool *hit, kiln_err *err);

/* The dynamic shared memory a launch of k must ask for: 0 when its workgroup arrays fit
 * PTX's static 48 KiB (they are static then), else all of them, each rounded up to 16
 * bytes (the driver needs the function's MAX_DYNAMIC_SHARED_SIZE_BYTES raised past 48 KiB). */
uint32_t ptx_dynamic_shared_bytes(const ir_kernel *k);

/* "sm_90" etc.: the architecture ptx_emit targets for caps c (NULL when refused). */
const char *ptx_target_arch(const rt_caps *c);

/* Whether ptx_emit gives kernels for caps c the griddepcontrol prologue (caps.grid_dep on
 * sm_90+), so a device launches them with programmatic stream serialization. */
bool ptx_uses_grid_dep(const rt_caps *c);

#endif
