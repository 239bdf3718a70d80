/* The CUDA side of the capability probe: one rt_caps per device the driver enumerates,
 * in its order (so index N is the device `cuda:N` opens). */
#ifndef KILN_BACKEND_PTX_CUDA_PROBE_H
#define KILN_BACKEND_PTX_CUDA_PROBE_H

#include "base/error.h"
#include "runtime/caps.h"

#include <stddef.h>
#include <stdint.h>

/* Fills out[0..*n) for the first max devices. No libcuda.so.1, cuInit failing (no GPU,
 * no driver) or no device is not an error: *n = 0 and err holds a note ("no CUDA devices:
 * ...") for the caller to print; err also notes devices left out past max, and is "" when
 * there is nothing to say. Returns -1 (with err) only on bad arguments. */
/* The parts of the caps that follow from c->compute_capability alone (the probe, and
 * `kiln dump --ptx --sm` without a device): the mma.sync shapes and asynchronous copies
 * from sm_80, the architecture's opt-in shared memory per block (the probe then puts the
 * device's own figure), no f16/bf16 scalar arithmetic. */
void cuda_caps_of_arch(rt_caps *c);

int cuda_probe_devices(rt_caps *out, uint32_t max, uint32_t *n, kiln_err *err);

#endif
