/* The capability probe (docs/ARCHITECTURE.md): one struct every backend fills from its device, with
 * spec-minimum defaults, read by kernel builders to choose variants and by the
 * emitters to choose instructions. `--caps` overrides (no-coopmat, no-f16, subgroup=16,
 * ...) force the other variants on any device, so every variant can be tested. */
#ifndef KILN_RUNTIME_CAPS_H
#define KILN_RUNTIME_CAPS_H

#include "base/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum rt_backend { RT_CPU, RT_VULKAN, RT_CUDA } rt_backend;

/* One cooperative-matrix (MMA) shape a device offers: C[MxN] (+)= A[MxK] B[KxN]. In
 * caps.wg_mma, m n k are granularities instead (any multiple of each, up to
 * caps.wg_mma_max_dim) for workgroups of exactly `invocations`. */
typedef struct rt_mma_shape {
    uint32_t m, n, k;
    uint32_t ab_type;   /* ir_scalar of A and B (IR_F16 or IR_BF16) */
    uint32_t acc_type;  /* ir_scalar of C (IR_F32 or IR_F16) */
    uint32_t invocations; /* wg_mma: the workgroup's size; 0 in mma */
} rt_mma_shape;

#define RT_MAX_MMA_SHAPES 16

typedef struct rt_caps {
    rt_backend backend;
    char vendor[32];          /* "NVIDIA", "Mesa", ... */
    char name[128];           /* "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)" */
    char driver[64];          /* driver version text */
    uint32_t api_version;     /* Vulkan: VK_MAKE_API_VERSION; CUDA: driver API (e.g. 13000) */
    uint32_t compute_capability; /* CUDA: major*10+minor (90 for sm_90); 0 elsewhere */

    uint32_t subgroup_size;   /* the size kernels are built for */
    uint32_t subgroup_min, subgroup_max; /* what the device can be asked for */
    bool subgroup_arith;      /* reduce add/min/max */
    bool subgroup_shuffle;    /* shuffle, shuffle_xor, broadcast */

    bool f16_arith;           /* f16 arithmetic in kernels */
    bool bf16_arith;          /* bf16 arithmetic (VK_KHR_shader_bfloat16 / sm_80+) */
    bool int8_arith;
    bool storage16;           /* 16-bit loads/stores from buffers */
    bool atomic_f32_add;      /* float atomic add on buffers */
    bool wgmma;               /* warpgroup matrix products from workgroup memory (wgmma, sm_90a) */
    bool async_copy;          /* asynchronous buffer -> workgroup memory copies in flight while
                               * the kernel computes (cp.async, sm_80+); without it the IR's
                               * async.copy is a plain load and store */
    bool grid_dep;            /* programmatic dependent launch (sm_90+, cuLaunchKernelEx): a kernel
                               * may be scheduled while the one before it ends, and waits for it
                               * (griddepcontrol.wait) before it touches memory */
    bool tma;                 /* the tensor copy engine, memory barriers and clusters of workgroups
                               * (sm_90, cuTensorMapEncodeTiled and cuLaunchKernelEx): tma.load,
                               * mbar.*, cluster.sync */

    uint32_t n_mma;           /* cooperative-matrix / mma shapes offered (0: none) */
    rt_mma_shape mma[RT_MAX_MMA_SHAPES];
    /* Workgroup-scope cooperative matrices of flexible dimensions, loaded with tensor
     * addressing (VK_NV_cooperative_matrix2's workgroupScope, flexibleDimensions and
     * tensorAddressing features, all three): granularities per type and workgroup size;
     * 0: none. wg_mma_reserved_shared: the workgroup memory the compiler keeps for their
     * staging, out of shared_bytes. */
    uint32_t n_wg_mma;
    rt_mma_shape wg_mma[RT_MAX_MMA_SHAPES];
    uint32_t wg_mma_max_dim, wg_mma_reserved_shared;
    /* The test switch debug-emulate-coopmat on a Vulkan device without cooperative
     * matrices (lavapipe): caps.mma offers 16x16x16 f16 fragments that the SPIR-V emitter
     * builds from plain loads, stores and a workgroup scratch array of
     * mma_emulated_shared bytes (already taken out of shared_bytes), so the kernels built on
     * fragments run in CI. Correct, never fast; never set by a probe. */
    bool mma_emulated;
    uint32_t mma_emulated_shared;

    uint32_t shared_bytes;    /* workgroup memory per workgroup */
    uint32_t max_workgroup;   /* invocations per workgroup */
    uint64_t max_buffer_bytes; /* the largest buffer one kernel parameter may bind (Vulkan:
                                * maxStorageBufferRange); 0: no limit */
    uint32_t shared_per_cu;   /* workgroup memory per SM / CU, all resident workgroups (0: unknown) */
    uint64_t l2_bytes;        /* last-level GPU cache (0: unknown; Vulkan has no core query) */
    uint32_t compute_units;   /* SMs / CUs / cores */
    uint64_t memory_bytes, free_bytes;
    bool memory_limited; /* memory_bytes is a limit the user set (--mem-limit), not the device's */
} rt_caps;

/* The memory a plan may take, capped at limit bytes (0: no cap): memory_bytes and
 * free_bytes lowered to it, memory_limited set where it lowered either. */
void rt_caps_limit_memory(rt_caps *c, uint64_t limit);

/* Test switches, not capabilities, kept out of rt_caps so that no kernel builder reads
 * one as a property of the device: `--caps` items that make a plan wrong on purpose, so
 * the tools that must catch a wrong kernel can be shown to. All false by default. */
typedef struct rt_debug {
    bool fault_logits; /* debug-fault: the logits head adds 0.5 * (row % 7) (kiln diverge's planted fault) */
    uint32_t alloc_kib; /* debug-alloc-kib=N: a plan's device buffers fail past N KiB in all (a device
                         * with less room than its driver reports), 0: no such cap */
} rt_debug;

/* The minimums the Vulkan 1.3 spec (and kiln) guarantee: subgroup 4..4, no 16-bit
 * types, no coopmat, 16 KiB workgroup memory, 128 invocations, 128 MiB buffers. */
void rt_caps_default(rt_caps *c, rt_backend b);

/* Applies a comma-separated override list to caps read from a device:
 *   no-coopmat | no-coopmat2 | no-f16 | no-bf16 | no-storage16 | no-subgroup-arith | no-subgroup-shuffle
 *   | no-atomic-f32 | no-async-copy | no-wgmma | no-grid-dep | no-tma | subgroup=N (a power of two within [min, max]) | shared=BYTES (<= the
 *   device's) | workgroup=N (<= the device's) | debug-fault | debug-alloc-kib=N | debug-emulate-coopmat.
 * Overrides only take capabilities away (a device cannot be made to offer more), but for
 * debug-emulate-coopmat (caps.mma_emulated: a Vulkan device with no cooperative matrices,
 * f16 arithmetic and 16-bit buffers gets emulated f16 fragments; elsewhere it changes
 * nothing). debug-fault and debug-alloc-kib are test switches (rt_debug), accepted here and
 * left to rt_debug_from_list.
 * 0, or -1 with a message naming the bad item. */
int rt_caps_override(rt_caps *c, const char *list, kiln_err *err);
/* The same list checked for syntax alone (unknown items, malformed numbers, subgroup not
 * a power of two, workgroup=0), as a command does when it parses its flags, before any
 * device is known. 0, or -1 with a message naming the bad item. */
int rt_caps_override_check(const char *list, kiln_err *err);

/* The test switches a list rt_caps_override_check accepts turns on (debug-fault) set in d;
 * the other items leave d alone. */
void rt_debug_from_list(rt_debug *d, const char *list);

/* One "key: value" line per field, for `kiln probe`, into buf; returns the length it needs
 * (as snprintf: without the NUL, so the text fit when it is < cap; buf may be NULL with cap 0). */
size_t rt_caps_describe(const rt_caps *c, char *buf, size_t cap);

#endif
