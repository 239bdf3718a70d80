/* The Vulkan side of the capability probe: one rt_caps per physical device, in the
 * loader's enumeration order (so index N is the device `vulkan:N` opens). */
#ifndef KILN_BACKEND_SPIRV_VK_PROBE_H
#define KILN_BACKEND_SPIRV_VK_PROBE_H

#include "base/error.h"
#include "runtime/caps.h"

#include <stddef.h>
#include <stdint.h>

/* Fills out[0..*n) for the first max devices. No driver (ICD) for the loader, no instance
 * or no device is not an error: *n = 0 and err holds a note ("no Vulkan devices: ...") for
 * the caller to print; err also notes devices left out past max. err is "" when there is
 * nothing to say. Returns -1 (with err) only on bad arguments or when the host runs out
 * of memory. */
int vk_probe_devices(rt_caps *out, uint32_t max, uint32_t *n, kiln_err *err);

#endif
