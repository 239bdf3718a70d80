/* backend-spirv/ — the SPIR-V emitter: a verified IR kernel -> SPIR-V 1.6 words for a
 * Vulkan 1.3 compute pipeline, written by kiln itself (no glslang, no shaderc). The kernel
 * is lowered first (ir/lower.h, spv_lowered): masked accesses become ifs around plain
 * accesses, 16-bit arithmetic f32 arithmetic and conversions, and rounding to f16/bf16 is
 * written out in IR ops.
 *
 * The module it writes: one GLCompute entry point "main"; buffer i is a StorageBuffer
 * block { elem data[]; } at descriptor set 0, binding i (bf16 kept as 16-bit unsigned
 * ints); scalar parameters are the members of one push-constant block, 4 bytes each, in
 * declaration order; spec constant i has SpecId i; a spec-constant workgroup size uses
 * LocalSizeId (the device must enable maintenance4, core in Vulkan 1.3).
 *
 * What the device must enable for a module: storageBuffer16BitAccess (16-bit buffers),
 * shaderFloat16 (caps.f16_arith), shaderInt64 (i64/u64 values: caps has no flag for it),
 * maintenance4 (spec-constant workgroup size); for fragments VK_KHR_cooperative_matrix and
 * vulkanMemoryModel (SPIR-V requires the Vulkan memory model with CooperativeMatrixKHR:
 * such modules use it, with non-private buffer/workgroup accesses and QueueFamily-scope
 * atomics), and for bf16 fragments VK_KHR_shader_bfloat16 (shaderBFloat16Type and
 * shaderBFloat16CooperativeMatrix).
 *
 * Features are used only when the caps offer them, and a kernel that needs what the caps
 * lack is refused with a message naming the instruction and the missing capability:
 *   f16 arithmetic -> caps.f16_arith; bf16 arithmetic -> caps.bf16_arith (computed in f32,
 *   rounded to bf16 after each op); 16-bit buffers -> caps.storage16 (no 32-bit packing
 *   fallback yet); subgroup reduce -> subgroup_arith; shuffles/broadcast ->
 *   subgroup_shuffle; f32 atomic add on buffers -> atomic_f32_add; fragments -> a matching
 *   caps.mma shape, f16 fragments also f16_arith, bf16 fragments bf16_arith
 *   (VK_KHR_shader_bfloat16).
 * Without caps.f16_arith, f16 values live in f32 registers (loads/stores/conversions,
 * compares, selects and shuffles work; rounding to f16 is done exactly with f32 ops, in
 * the IR). */
#ifndef KILN_BACKEND_SPIRV_SPV_EMIT_H
#define KILN_BACKEND_SPIRV_SPV_EMIT_H

#include "base/error.h"
#include "ir/ir.h"
#include "runtime/caps.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct spv_module {
    uint32_t *words;
    size_t n;
} spv_module;

/* Emits k (which must pass ir_verify; spv_emit checks) for a device with caps c.
 * 0, or -1 with err (out is then empty). The same kernel and caps give the same words. */
int spv_emit(const ir_kernel *k, const rt_caps *c, spv_module *out, kiln_err *err);
void spv_module_free(spv_module *m);
/* The kernel spv_emit emits for caps c: a copy of k after the IR's target rewrites
 * (ir/lower.h), for reading (kiln dump writes it as ROLE.lowered.ir). The caller
 * destroys it; NULL with a one-line err. */
ir_kernel *spv_lowered(const ir_kernel *k, const rt_caps *c, kiln_err *err);

/* SPIRV-Tools validation for Vulkan 1.3 (0, or -1 with the validator's message) and
 * disassembly (malloc'ed text, NULL on failure). These link SPIRV-Tools; Debian 12's
 * (2023.1) predates SPV_KHR_cooperative_matrix and SPV_KHR_bfloat16 and rejects modules
 * with fragments as unknown opcodes (tests/backend-spirv then use $KILN_SPIRV_VAL). */
int spv_validate(const spv_module *m, kiln_err *err);
char *spv_disassemble(const spv_module *m);
/* Whether m declares a capability Debian 12's SPIRV-Tools (2023.1) predates (cooperative
 * matrices, bf16), so its validator cannot judge the module. */
bool spv_needs_newer_tools(const spv_module *m);

#endif
