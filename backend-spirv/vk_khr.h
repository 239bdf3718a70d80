/* Vulkan structures newer than Debian 12's headers (1.3.239): VK_KHR_cooperative_matrix,
 * VK_KHR_shader_bfloat16 and VK_NV_cooperative_matrix2, declared under our own names from the Vulkan registry's
 * values so kiln builds with old and new vulkan_core.h alike. Shared by the probe (which
 * reads them) and the device (which enables them). */
#ifndef KILN_BACKEND_SPIRV_VK_KHR_H
#define KILN_BACKEND_SPIRV_VK_KHR_H

#include <vulkan/vulkan.h>

#define VKP_STYPE_COOPMAT_FEATURES ((VkStructureType)1000506000)
#define VKP_STYPE_COOPMAT_PROPERTIES ((VkStructureType)1000506001)
#define VKP_STYPE_COOPMAT_DEVICE_PROPERTIES ((VkStructureType)1000506002)
#define VKP_STYPE_BF16_FEATURES ((VkStructureType)1000141000)
enum { VKP_COMPONENT_F16 = 0, VKP_COMPONENT_F32 = 1, VKP_COMPONENT_BF16 = 1000141000 }; /* VkComponentTypeKHR */
enum { VKP_SCOPE_WORKGROUP = 2, VKP_SCOPE_SUBGROUP = 3 };                               /* VkScopeKHR */
#define VKP_STYPE_COOPMAT2_FEATURES ((VkStructureType)1000593000)
#define VKP_STYPE_COOPMAT_FLEX_PROPERTIES ((VkStructureType)1000593001)
#define VKP_STYPE_COOPMAT2_PROPERTIES ((VkStructureType)1000593002)

typedef struct vkp_coopmat_props {
    VkStructureType sType;
    void *pNext;
    uint32_t MSize, NSize, KSize;
    int32_t AType, BType, CType, ResultType;
    VkBool32 saturatingAccumulation;
    int32_t scope;
} vkp_coopmat_props;

typedef struct vkp_coopmat_features {
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrix, cooperativeMatrixRobustBufferAccess;
} vkp_coopmat_features;

typedef struct vkp_coopmat_device_props {
    VkStructureType sType;
    void *pNext;
    VkShaderStageFlags cooperativeMatrixSupportedStages;
} vkp_coopmat_device_props;

typedef struct vkp_bf16_features {
    VkStructureType sType;
    void *pNext;
    VkBool32 shaderBFloat16Type, shaderBFloat16DotProduct, shaderBFloat16CooperativeMatrix;
} vkp_bf16_features;

/* VK_NV_cooperative_matrix2 */
typedef struct vkp_coopmat2_features {
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrixWorkgroupScope, cooperativeMatrixFlexibleDimensions, cooperativeMatrixReductions,
        cooperativeMatrixConversions, cooperativeMatrixPerElementOperations, cooperativeMatrixTensorAddressing,
        cooperativeMatrixBlockLoads;
} vkp_coopmat2_features;

typedef struct vkp_coopmat2_props {
    VkStructureType sType;
    void *pNext;
    uint32_t cooperativeMatrixWorkgroupScopeMaxWorkgroupSize, cooperativeMatrixFlexibleDimensionsMaxDimension,
        cooperativeMatrixWorkgroupScopeReservedSharedMemory;
} vkp_coopmat2_props;

typedef struct vkp_coopmat_flex_props {
    VkStructureType sType;
    void *pNext;
    uint32_t MGranularity, NGranularity, KGranularity;
    int32_t AType, BType, CType, ResultType;
    VkBool32 saturatingAccumulation;
    int32_t scope;
    uint32_t workgroupInvocations;
} vkp_coopmat_flex_props;

#endif
