/* The CUDA runtime: one device's primary context and a stream, implementing
 * runtime/device.h with kernels emitted as PTX by ptx_emit and loaded by the driver. */
#ifndef KILN_BACKEND_PTX_CUDA_DEVICE_H
#define KILN_BACKEND_PTX_CUDA_DEVICE_H

#include "base/error.h"
#include "runtime/device.h"

/* Opens CUDA device `index` (cuda:N, the driver's ordinal). caps_override is a --caps
 * list (NULL for none). NULL with err when there is no such device (no driver, no GPU)
 * or it cannot be used. */
rt_device *cuda_device_open(uint32_t index, const char *caps_override, kiln_err *err);

#endif
