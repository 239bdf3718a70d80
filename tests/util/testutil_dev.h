/* Conformance checks every device backend must pass (tests/testutil_dev.c). */
#ifndef KILN_TESTS_TESTUTIL_DEV_H
#define KILN_TESTS_TESTUTIL_DEV_H

#include "runtime/device.h"

/* y[i] = a[i] + s * x[i] for i < n (params a, x, y, n, s), 64 invocations per workgroup. */
ir_kernel *tu_dev_axpy_kernel(void);
/* Does k's printed IR hold needle (a variant's mark: "frag.mma", "async.copy", a parameter)? */
bool tu_ir_has(const ir_kernel *k, const char *needle);
/* A product epilogue's name (kernels.h's KN_EPI_ flags): none, bias, res, bias+res, f32. */
const char *tu_epi_name(unsigned epi);
/* axpy at odd sizes up to 1000003 with poisoned guard regions after the outputs, a
 * partial download at an offset, a launch of zero workgroups. */
void tu_dev_axpy(rt_device *d);
/* record once, replay many (each launch sees the previous one's writes), run and replay
 * interleaved, an empty recording, bad launches refused without harm. */
void tu_dev_record_replay(rt_device *d);
/* host-mapped buffers as a recording's inputs and outputs, with range checks. */
void tu_dev_host_buffers(rt_device *d);
/* views of a buffer: kernels, uploads and downloads through them, bad views refused. */
void tu_dev_views(rt_device *d);
/* The device's free memory, where its backend can tell: within the memory the probe saw,
 * and (strict: a driver that counts allocations exactly, CUDA's) down by most of a 256 MiB
 * buffer while it is held. */
void tu_dev_free_memory(rt_device *d, bool strict);

#endif
