/* Fills rt_caps from each Vulkan physical device: properties, features and limits read
 * through the properties2/features2 chains, each link only where the device's version or
 * its extension list says the driver knows it. */
#include "backend-spirv/vk_probe.h"

#include "backend-spirv/vk_instance.h"
#include "backend-spirv/vk_khr.h"
#include "base/error.h"
#include "ir/ir.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

typedef VkResult(VKAPI_PTR *vkp_get_coopmat_fn)(VkPhysicalDevice, uint32_t *, vkp_coopmat_props *);

/* ---- small helpers ----------------------------------------------------------------------- */

/* Why there are fewer devices than asked for (no driver, none found, some left out): a
 * note with a 0 return, coded unavailable. */
static void note(kiln_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(kiln_err *err, const char *fmt, ...) {
    if (!err) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = KILN_ERR_UNAVAILABLE;
}

static const char *result_name(VkResult r) {
    switch (r) {
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER (no usable Vulkan driver/ICD)";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    default: return "an unexpected VkResult";
    }
}

/* Copies a driver's string (bounded by its array) into a caps field, cut to fit. */
static void copy_text(char *dst, size_t cap, const char *src, size_t src_cap) {
    size_t n = strnlen(src, src_cap);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static bool has_ext(const VkExtensionProperties *e, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (!strncmp(e[i].extensionName, name, VK_MAX_EXTENSION_NAME_SIZE)) return true;
    return false;
}

/* The device's extensions (malloc'd); 0, or -1 when out of memory. A driver that fails to
 * list them is taken to have none. */
static int device_extensions(VkPhysicalDevice pd, VkExtensionProperties **out, uint32_t *n) {
    *out = NULL;
    *n = 0;
    for (int tries = 0; tries < 4; tries++) {
        uint32_t cnt = 0;
        if (vkEnumerateDeviceExtensionProperties(pd, NULL, &cnt, NULL) != VK_SUCCESS) return 0;
        VkExtensionProperties *e = calloc(cnt ? cnt : 1, sizeof *e);
        if (!e) return -1;
        VkResult r = vkEnumerateDeviceExtensionProperties(pd, NULL, &cnt, e);
        if (r == VK_SUCCESS) {
            *out = e;
            *n = cnt;
            return 0;
        }
        free(e);
        if (r != VK_INCOMPLETE) return 0;
    }
    return 0;
}

static const char *vendor_name(uint32_t id) {
    switch (id) {
    case 0x1002: return "AMD";
    case 0x1010: return "ImgTec";
    case 0x106B: return "Apple";
    case 0x10DE: return "NVIDIA";
    case 0x13B5: return "ARM";
    case 0x5143: return "Qualcomm";
    case 0x8086: return "Intel";
    case VK_VENDOR_ID_MESA: return "Mesa";
    default: return NULL;
    }
}

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* ---- cooperative matrices ---------------------------------------------------------------- */

static void add_mma(rt_caps *c, uint32_t m, uint32_t n, uint32_t k, uint32_t ab, uint32_t acc) {
    for (uint32_t i = 0; i < c->n_mma; i++) {
        const rt_mma_shape *s = &c->mma[i];
        if (s->m == m && s->n == n && s->k == k && s->ab_type == ab && s->acc_type == acc) return;
    }
    if (c->n_mma < RT_MAX_MMA_SHAPES) c->mma[c->n_mma++] = (rt_mma_shape){m, n, k, ab, acc};
}

static uint32_t ir_type_of_component(int32_t t) {
    switch (t) {
    case VKP_COMPONENT_F16: return IR_F16;
    case VKP_COMPONENT_BF16: return IR_BF16;
    case VKP_COMPONENT_F32: return IR_F32;
    default: return IR_SCALAR_COUNT; /* int8 and fp8 shapes have no rt_mma_shape type */
    }
}

/* The component types kiln's fragments can express: A = B in f16 or bf16, C = Result in
 * f16 or f32, no saturation; a type only if the device's arithmetic on it is on. */
static bool kiln_types(const rt_caps *c, bool bf16_ok, int32_t a, int32_t b, int32_t cc, int32_t res, VkBool32 sat) {
    uint32_t ab = ir_type_of_component(a), acc = ir_type_of_component(cc);
    if (sat || a != b || cc != res) return false;
    return ((ab == IR_F16 && c->f16_arith) || (ab == IR_BF16 && bf16_ok)) &&
           ((acc == IR_F16 && c->f16_arith) || acc == IR_F32);
}

/* Keeps the subgroup-scope shapes kiln's fragments can express: A = B in f16 or bf16,
 * C = Result in f16 or f32, no saturation; a type only if the device's arithmetic on it
 * is on (the fragment types need it in SPIR-V). 0, or -1 when out of memory. */
static int read_coopmat(VkInstance inst, VkPhysicalDevice pd, bool bf16_ok, rt_caps *c) {
    vkp_get_coopmat_fn get =
        (vkp_get_coopmat_fn)vkGetInstanceProcAddr(inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
    if (!get) return 0;
    uint32_t cnt = 0;
    if (get(pd, &cnt, NULL) != VK_SUCCESS || !cnt) return 0;
    vkp_coopmat_props *p = calloc(cnt, sizeof *p);
    if (!p) return -1;
    for (uint32_t i = 0; i < cnt; i++) p[i].sType = VKP_STYPE_COOPMAT_PROPERTIES;
    VkResult r = get(pd, &cnt, p);
    if (r == VK_SUCCESS || r == VK_INCOMPLETE) {
        for (uint32_t i = 0; i < cnt; i++) {
            const vkp_coopmat_props *q = &p[i];
            if (q->scope != VKP_SCOPE_SUBGROUP ||
                !kiln_types(c, bf16_ok, q->AType, q->BType, q->CType, q->ResultType, q->saturatingAccumulation))
                continue;
            if (!q->MSize || !q->NSize || !q->KSize) continue;
            add_mma(c, q->MSize, q->NSize, q->KSize, ir_type_of_component(q->AType), ir_type_of_component(q->CType));
        }
    }
    free(p);
    return 0;
}

typedef VkResult(VKAPI_PTR *vkp_get_flex_fn)(VkPhysicalDevice, uint32_t *, vkp_coopmat_flex_props *);

/* VK_NV_cooperative_matrix2's workgroup-scope shapes of flexible dimensions, by the same
 * rules as read_coopmat's, where the subgroup shapes were kept. 0, or -1 when out of
 * memory. */
static int read_coopmat2(VkInstance inst, VkPhysicalDevice pd, bool bf16_ok, rt_caps *c) {
    vkp_get_flex_fn get = (vkp_get_flex_fn)vkGetInstanceProcAddr(
        inst, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV");
    if (!get || !c->n_mma) return 0;
    uint32_t cnt = 0;
    if (get(pd, &cnt, NULL) != VK_SUCCESS || !cnt) return 0;
    vkp_coopmat_flex_props *p = calloc(cnt, sizeof *p);
    if (!p) return -1;
    for (uint32_t i = 0; i < cnt; i++) p[i].sType = VKP_STYPE_COOPMAT_FLEX_PROPERTIES;
    VkResult r = get(pd, &cnt, p);
    for (uint32_t i = 0; (r == VK_SUCCESS || r == VK_INCOMPLETE) && i < cnt && c->n_wg_mma < RT_MAX_MMA_SHAPES; i++) {
        const vkp_coopmat_flex_props *q = &p[i];
        uint32_t ab = ir_type_of_component(q->AType), acc = ir_type_of_component(q->CType);
        if (q->scope != VKP_SCOPE_WORKGROUP || !q->workgroupInvocations ||
            !kiln_types(c, bf16_ok, q->AType, q->BType, q->CType, q->ResultType, q->saturatingAccumulation))
            continue;
        if (!q->MGranularity || !q->NGranularity || !q->KGranularity) continue;
        c->wg_mma[c->n_wg_mma++] =
            (rt_mma_shape){q->MGranularity, q->NGranularity, q->KGranularity, ab, acc, q->workgroupInvocations};
    }
    free(p);
    return 0;
}

/* ---- one device -------------------------------------------------------------------------- */

#define CHAIN(tail, s)                                                                                                 \
    do {                                                                                                               \
        *(tail) = &(s);                                                                                                \
        (tail) = &(s).pNext;                                                                                           \
    } while (0)

static int probe_one(VkInstance inst, uint32_t inst_api, VkPhysicalDevice pd, rt_caps *c) {
    rt_caps_default(c, RT_VULKAN);
    VkPhysicalDeviceProperties p0;
    vkGetPhysicalDeviceProperties(pd, &p0);
    uint32_t api = min_u32(p0.apiVersion, inst_api);
    bool v11 = api >= VK_API_VERSION_1_1, v12 = api >= VK_API_VERSION_1_2, v13 = api >= VK_API_VERSION_1_3;

    VkExtensionProperties *ext;
    uint32_t next;
    if (device_extensions(pd, &ext, &next)) return -1;
    bool x_driver = v12 || has_ext(ext, next, "VK_KHR_driver_properties");
    bool x_sgsc = v13 || has_ext(ext, next, "VK_EXT_subgroup_size_control");
    bool x_f16i8 = v12 || has_ext(ext, next, "VK_KHR_shader_float16_int8");
    bool x_s16 = v11 || has_ext(ext, next, "VK_KHR_16bit_storage");
    bool x_atomf = has_ext(ext, next, "VK_EXT_shader_atomic_float");
    bool x_coop = has_ext(ext, next, "VK_KHR_cooperative_matrix");
    bool x_coop2 = x_coop && has_ext(ext, next, "VK_NV_cooperative_matrix2");
    bool x_bf16 = has_ext(ext, next, "VK_KHR_shader_bfloat16");
    bool x_budget = has_ext(ext, next, "VK_EXT_memory_budget");
    bool x_nvsm = has_ext(ext, next, "VK_NV_shader_sm_builtins");
    bool x_amdcore = has_ext(ext, next, "VK_AMD_shader_core_properties");
    free(ext);

    /* properties */
    VkPhysicalDeviceDriverProperties drv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceSubgroupSizeControlProperties sgsc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
    vkp_coopmat_device_props cmp = {.sType = VKP_STYPE_COOPMAT_DEVICE_PROPERTIES};
    vkp_coopmat2_props cm2p = {.sType = VKP_STYPE_COOPMAT2_PROPERTIES};
    VkPhysicalDeviceShaderSMBuiltinsPropertiesNV nvsm = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
    VkPhysicalDeviceShaderCorePropertiesAMD amd = {.sType =
                                                       VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    void **tail = &p2.pNext;
    if (v11) {
        CHAIN(tail, sg);
        if (x_driver) CHAIN(tail, drv);
        if (x_sgsc) CHAIN(tail, sgsc);
        if (x_coop) CHAIN(tail, cmp);
        if (x_coop2) CHAIN(tail, cm2p);
        if (x_nvsm) CHAIN(tail, nvsm);
        if (x_amdcore) CHAIN(tail, amd);
        vkGetPhysicalDeviceProperties2(pd, &p2);
    } else {
        p2.properties = p0;
    }
    const VkPhysicalDeviceProperties *P = &p2.properties;

    /* features */
    VkPhysicalDeviceShaderFloat16Int8Features f16i8 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDeviceSubgroupSizeControlFeatures sgscf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    VkPhysicalDeviceShaderAtomicFloatFeaturesEXT atomf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT};
    vkp_coopmat_features cmf = {.sType = VKP_STYPE_COOPMAT_FEATURES};
    vkp_coopmat2_features cm2f = {.sType = VKP_STYPE_COOPMAT2_FEATURES};
    vkp_bf16_features bf16 = {.sType = VKP_STYPE_BF16_FEATURES};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    if (v11) {
        tail = &f2.pNext;
        if (x_f16i8) CHAIN(tail, f16i8);
        if (x_s16) CHAIN(tail, s16);
        if (x_sgsc) CHAIN(tail, sgscf);
        if (x_atomf) CHAIN(tail, atomf);
        if (x_coop) CHAIN(tail, cmf);
        if (x_coop2) CHAIN(tail, cm2f);
        if (x_bf16) CHAIN(tail, bf16);
        vkGetPhysicalDeviceFeatures2(pd, &f2);
    }

    /* identity */
    const char *vn = vendor_name(P->vendorID);
    if (vn)
        copy_text(c->vendor, sizeof c->vendor, vn, strlen(vn) + 1);
    else
        snprintf(c->vendor, sizeof c->vendor, "0x%04x", P->vendorID);
    copy_text(c->name, sizeof c->name, P->deviceName, sizeof P->deviceName);
    if (x_driver && v11 && drv.driverName[0]) {
        char text[2 * VK_MAX_DRIVER_NAME_SIZE + 2];
        size_t k = strnlen(drv.driverName, sizeof drv.driverName);
        memcpy(text, drv.driverName, k);
        size_t ki = strnlen(drv.driverInfo, sizeof drv.driverInfo);
        if (ki) {
            text[k++] = ' ';
            memcpy(text + k, drv.driverInfo, ki);
            k += ki;
        }
        text[k] = '\0';
        copy_text(c->driver, sizeof c->driver, text, sizeof text);
    } else {
        uint32_t d = P->driverVersion; /* NVIDIA packs 10.8.8.6 bits; most others as VK_MAKE_VERSION */
        if (P->vendorID == 0x10DE)
            snprintf(c->driver, sizeof c->driver, "%u.%u.%u", d >> 22, d >> 14 & 0xff, d >> 6 & 0xff);
        else
            snprintf(c->driver, sizeof c->driver, "%u.%u.%u", d >> 22, d >> 12 & 0x3ff, d & 0xfff);
    }
    c->api_version = p0.apiVersion;

    /* subgroups: what compute shaders may use */
    if (v11 && sg.subgroupSize && !(sg.subgroupSize & (sg.subgroupSize - 1))) {
        c->subgroup_size = c->subgroup_min = c->subgroup_max = sg.subgroupSize;
        bool compute = sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT;
        c->subgroup_arith = compute && (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
        /* broadcast is a ballot-class instruction in SPIR-V (GroupNonUniformBallot) */
        c->subgroup_shuffle = compute && (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) &&
                              (sg.supportedOperations & VK_SUBGROUP_FEATURE_BALLOT_BIT);
        /* Other sizes only where a compute pipeline may ask for them. */
        if (x_sgsc && sgscf.subgroupSizeControl && (sgsc.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
            sgsc.minSubgroupSize && sgsc.minSubgroupSize <= sg.subgroupSize &&
            sgsc.maxSubgroupSize >= sg.subgroupSize) {
            c->subgroup_min = sgsc.minSubgroupSize;
            c->subgroup_max = sgsc.maxSubgroupSize;
        }
    }

    /* arithmetic and storage */
    c->f16_arith = x_f16i8 && f16i8.shaderFloat16;
    c->int8_arith = x_f16i8 && f16i8.shaderInt8;
    c->storage16 = x_s16 && s16.storageBuffer16BitAccess;
    c->atomic_f32_add = x_atomf && atomf.shaderBufferFloat32AtomicAdd;
    /* SPIR-V's bf16 type allows conversions, dot products and matrix fragments only: kiln
     * treats the type itself as bf16 support, like sm_80+. */
    c->bf16_arith = x_bf16 && bf16.shaderBFloat16Type;
    if (x_coop && v11 && cmf.cooperativeMatrix && (cmp.cooperativeMatrixSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT))
        if (read_coopmat(inst, pd, c->bf16_arith && bf16.shaderBFloat16CooperativeMatrix, c)) return -1;
    /* workgroup scope: kiln's kernels take all three of these features together */
    if (x_coop2 && v11 && cm2f.cooperativeMatrixWorkgroupScope && cm2f.cooperativeMatrixFlexibleDimensions &&
        cm2f.cooperativeMatrixTensorAddressing) {
        if (read_coopmat2(inst, pd, c->bf16_arith && bf16.shaderBFloat16CooperativeMatrix, c)) return -1;
        c->wg_mma_max_dim = cm2p.cooperativeMatrixFlexibleDimensionsMaxDimension;
        c->wg_mma_reserved_shared = cm2p.cooperativeMatrixWorkgroupScopeReservedSharedMemory;
        uint32_t k = 0; /* workgroups the device allows */
        for (uint32_t i = 0; i < c->n_wg_mma; i++)
            if (c->wg_mma[i].invocations <= cm2p.cooperativeMatrixWorkgroupScopeMaxWorkgroupSize)
                c->wg_mma[k++] = c->wg_mma[i];
        c->n_wg_mma = k;
    }

    /* limits */
    c->shared_bytes = P->limits.maxComputeSharedMemorySize;
    c->max_workgroup = P->limits.maxComputeWorkGroupInvocations;
    c->max_buffer_bytes = P->limits.maxStorageBufferRange;
    if (x_nvsm && v11)
        c->compute_units = nvsm.shaderSMCount;
    else if (x_amdcore && v11)
        c->compute_units = amd.shaderEngineCount * amd.shaderArraysPerEngineCount * amd.computeUnitsPerShaderArray;

    /* memory: the largest device-local heap (any heap if none says so) */
    VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 m2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
    bool have_budget = x_budget && v11;
    if (have_budget) {
        m2.pNext = &budget;
        vkGetPhysicalDeviceMemoryProperties2(pd, &m2);
    } else {
        vkGetPhysicalDeviceMemoryProperties(pd, &m2.memoryProperties);
    }
    const VkPhysicalDeviceMemoryProperties *mp = &m2.memoryProperties;
    uint32_t best = UINT32_MAX;
    for (int want_local = 1; want_local >= 0 && best == UINT32_MAX; want_local--)
        for (uint32_t h = 0; h < mp->memoryHeapCount && h < VK_MAX_MEMORY_HEAPS; h++) {
            bool local = mp->memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT;
            if (want_local && !local) continue;
            if (best == UINT32_MAX || mp->memoryHeaps[h].size > mp->memoryHeaps[best].size) best = h;
        }
    if (best != UINT32_MAX) {
        c->memory_bytes = mp->memoryHeaps[best].size;
        /* heapBudget already counts this process's usage of the heap */
        if (have_budget && budget.heapBudget[best] > budget.heapUsage[best])
            c->free_bytes = budget.heapBudget[best] - budget.heapUsage[best];
        if (c->free_bytes > c->memory_bytes) c->free_bytes = c->memory_bytes;
    }
    return 0;
}

/* ---- all devices ------------------------------------------------------------------------- */

int vk_probe_devices(rt_caps *out, uint32_t max, uint32_t *n, kiln_err *err) {
    kiln_err_clear(err);
    if (!n || (!out && max)) return kiln_fail(err, KILN_ERR_INVALID, "vk_probe_devices: no place for the results");
    *n = 0;

    VkInstance inst = VK_NULL_HANDLE;
    uint32_t want = 0;
    VkResult r = vk_instance(&inst, &want);
    if (r == VK_ERROR_OUT_OF_HOST_MEMORY)
        return kiln_fail(err, KILN_ERR_DEVICE, "vkCreateInstance: %s", result_name(r));
    if (r != VK_SUCCESS) return note(err, "no Vulkan devices: vkCreateInstance: %s", result_name(r)), 0;

    int rc = 0;
    uint32_t npd = 0;
    VkPhysicalDevice *pds = NULL;
    for (int tries = 0; tries < 4; tries++) {
        npd = 0;
        r = vkEnumeratePhysicalDevices(inst, &npd, NULL);
        if (r != VK_SUCCESS || !npd) break;
        free(pds);
        pds = calloc(npd, sizeof *pds);
        if (!pds) {
            r = VK_ERROR_OUT_OF_HOST_MEMORY;
            break;
        }
        r = vkEnumeratePhysicalDevices(inst, &npd, pds);
        if (r != VK_INCOMPLETE) break;
    }
    if (r == VK_ERROR_OUT_OF_HOST_MEMORY) {
        kiln_fail(err, KILN_ERR_NOMEM, "vkEnumeratePhysicalDevices: %s", result_name(r));
        rc = -1;
    } else if (r != VK_SUCCESS) {
        note(err, "no Vulkan devices: vkEnumeratePhysicalDevices: %s", result_name(r));
    } else if (!npd) {
        note(err, "no Vulkan devices: the loader found no physical device");
    } else {
        uint32_t take = min_u32(npd, max);
        for (uint32_t i = 0; i < take && !rc; i++) {
            if (probe_one(inst, want, pds[i], &out[i])) {
                note(err, "probing Vulkan device %u: out of host memory", i);
                rc = -1;
            }
        }
        if (!rc) {
            *n = take;
            if (npd > take) note(err, "%u Vulkan devices, only the first %u probed", npd, take);
        }
    }
    free(pds);
    return rc;
}
