/* The Vulkan runtime: one logical device per physical device, implementing
 * runtime/device.h with kernels emitted as SPIR-V by spv_emit. */
#ifndef KILN_BACKEND_SPIRV_VK_DEVICE_H
#define KILN_BACKEND_SPIRV_VK_DEVICE_H

#include "base/error.h"
#include "runtime/device.h"

/* Opens Vulkan physical device `index` (vulkan:N). caps_override is a --caps list (NULL
 * for none). NULL with err when there is no such device or it cannot be used. */
rt_device *vk_device_open(uint32_t index, const char *caps_override, kiln_err *err);

#endif
