/* The process's one Vulkan instance, shared by the probe and every device opened. */
#ifndef KILN_BACKEND_SPIRV_VK_INSTANCE_H
#define KILN_BACKEND_SPIRV_VK_INSTANCE_H

#include <vulkan/vulkan.h>

/* The instance (created on first use, kept until the process exits) and the API version
 * it was created for: the loader's, capped at 1.3. A failure is returned and not kept, so
 * a later call tries again. */
VkResult vk_instance(VkInstance *inst, uint32_t *api_version);

#endif
