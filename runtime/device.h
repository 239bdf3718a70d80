/* The device interface both GPU backends implement (Vulkan in backend-spirv/, CUDA in
 * backend-ptx/): buffers, compiling an IR kernel, launching, synchronizing, and a
 * sequence of launches recorded once and replayed (a Vulkan command buffer, a CUDA
 * graph). What changes between replays (the token, the position) lives in a small
 * device buffer the kernels read, so a replay needs no patching. */
#ifndef KILN_RUNTIME_DEVICE_H
#define KILN_RUNTIME_DEVICE_H

#include "base/error.h"
#include "ir/ir.h"
#include "runtime/caps.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rt_device rt_device;
typedef struct rt_buffer rt_buffer;
typedef struct rt_kernel rt_kernel;
typedef struct rt_recording rt_recording;

/* One launch: a compiled kernel, its grid of workgroups, and one argument per kernel
 * parameter in declaration order (buffers and scalars). */
typedef struct rt_arg {
    rt_buffer *buf;    /* buffer parameters */
    uint32_t bits;     /* scalar parameters: u32/i32 value or f32 bits */
} rt_arg;

typedef struct rt_launch {
    rt_kernel *kernel;
    uint32_t groups[3];
    const rt_arg *args;
    uint32_t n_args;
} rt_launch;

/* The alignment of a view's offset: the largest minStorageBufferOffsetAlignment Vulkan
 * allows, so a view made on one device is valid on every other. */
#define RT_VIEW_ALIGN 256

typedef struct rt_device_ops {
    rt_buffer *(*alloc)(rt_device *d, size_t bytes, kiln_err *err);
    /* A buffer in memory the host maps (system memory the device reads and writes over
     * the bus): for a recording's small inputs and outputs (token ids, position,
     * logits), whose upload and download are then plain copies, without a submission. */
    rt_buffer *(*alloc_host)(rt_device *d, size_t bytes, kiln_err *err);
    /* bytes of parent from offset, as a buffer of its own: no memory of its own (a kernel
     * bound to it sees parent's bytes from offset on; uploads and downloads reach them),
     * released before parent. offset a multiple of RT_VIEW_ALIGN. */
    rt_buffer *(*view)(rt_device *d, rt_buffer *parent, size_t offset, size_t bytes, kiln_err *err);
    void (*release)(rt_device *d, rt_buffer *b);
    /* The bytes b was allocated with: what a launch may reach through it (the plan
     * checks each binding against its kernel's extents). */
    size_t (*size)(rt_device *d, const rt_buffer *b);
    int (*upload)(rt_device *d, rt_buffer *b, size_t offset, const void *src, size_t n, kiln_err *err);
    int (*download)(rt_device *d, rt_buffer *b, size_t offset, void *dst, size_t n, kiln_err *err);
    /* Compiles a verified kernel; spec constants take spec_values[i] for the i-th
     * (NULL: their defaults). */
    rt_kernel *(*compile)(rt_device *d, const ir_kernel *k, const double *spec_values, kiln_err *err);
    void (*release_kernel)(rt_device *d, rt_kernel *k);
    /* Runs launches in order (each sees the previous one's writes) and waits. */
    int (*run)(rt_device *d, const rt_launch *l, uint32_t n, kiln_err *err);
    /* Records launches once; replay submits them again and waits. */
    rt_recording *(*record)(rt_device *d, const rt_launch *l, uint32_t n, kiln_err *err);
    int (*replay)(rt_device *d, rt_recording *r, kiln_err *err);
    void (*release_recording)(rt_device *d, rt_recording *r);
    /* The bytes the device has free now, every process's allocations counted (NULL where
     * the backend cannot tell: the probe's caps.free_bytes is all there is). 0, or -1. */
    int (*free_memory)(rt_device *d, uint64_t *free_bytes);
    void (*destroy)(rt_device *d);
} rt_device_ops;

/* A launch's arguments against its kernel's n_params parameters (is_buffer[i]: whether
 * parameter i is a buffer): the count, and a buffer for every buffer parameter. 0, or -1
 * with err. For the backends, before they touch a launch. */
int rt_check_launch(const rt_launch *l, uint32_t n_params, const bool *is_buffer, kiln_err *err);
/* The check every backend's view runs: bytes > 0 from offset (a multiple of RT_VIEW_ALIGN)
 * within a buffer of parent_bytes. 0, or -1 with err. */
int rt_check_view(size_t parent_bytes, size_t offset, size_t bytes, kiln_err *err);

struct rt_device {
    const rt_device_ops *ops;
    rt_caps caps;
    rt_debug debug; /* the --caps test switches the device was opened with */
    char label[32]; /* "vulkan:0", "cuda:0" */
    bool host_cores; /* it computes on the host's CPUs (lavapipe): threads waiting for it sleep, never spin */
    /* What the device took out of its caps after opening, and why ("" nothing): a variant
     * its driver refused at load (the CUDA JIT serializing wgmma clears caps.wgmma); the
     * caller builds that kernel again from the caps as they now are. */
    char fallback[256];
};

#endif
