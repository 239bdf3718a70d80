/* Why one instance for the whole process: the loader unloads the driver (ICD) when the
 * last instance is destroyed, and NVIDIA's driver, loaded and unloaded about twenty times
 * in one process, then fails to load again (vkCreateInstance:
 * VK_ERROR_INCOMPATIBLE_DRIVER; H200, driver 580.159.04, in the whole-model tests that
 * open a device per variant). Keeping it also saves creating an instance per open. */
#include "backend-spirv/vk_instance.h"

#include <pthread.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static VkInstance shared;
static uint32_t shared_api;

VkResult vk_instance(VkInstance *inst, uint32_t *api_version) {
    pthread_mutex_lock(&lock);
    VkResult r = VK_SUCCESS;
    if (!shared) {
        uint32_t iver = VK_API_VERSION_1_0;
        PFN_vkEnumerateInstanceVersion eiv =
            (PFN_vkEnumerateInstanceVersion)vkGetInstanceProcAddr(NULL, "vkEnumerateInstanceVersion");
        if (eiv && eiv(&iver) != VK_SUCCESS) iver = VK_API_VERSION_1_0;
        /* asking for more than 1.3 gains nothing; a 1.0 loader must be asked for 1.0 */
        uint32_t want = iver >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : iver;
        VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                 .pApplicationName = "kiln",
                                 .pEngineName = "kiln",
                                 .apiVersion = want};
        VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
        r = vkCreateInstance(&ici, NULL, &shared);
        if (r == VK_SUCCESS) shared_api = want;
        else shared = VK_NULL_HANDLE;
    }
    *inst = shared;
    if (api_version) *api_version = shared_api;
    pthread_mutex_unlock(&lock);
    return r;
}
