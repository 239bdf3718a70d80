/* A minimal Vulkan harness for the SPIR-V tests (spirv_test.h): runs emitted kernels on
 * the first device. */
#include "tests/backend-spirv/spirv_test.h"

static bool has_ext(const VkExtensionProperties *e, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (!strcmp(e[i].extensionName, name)) return true;
    return false;
}

/* Opens the first Vulkan 1.3 device with a compute queue; false when there is none. */
bool vkh_open(vkh *h) {
    memset(h, 0, sizeof *h);
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "kiln-test-spirv",
                             .apiVersion = VK_API_VERSION_1_3};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    if (vkCreateInstance(&ici, NULL, &h->inst) != VK_SUCCESS) return false;
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(h->inst, &n, NULL);
    VkPhysicalDevice pds[16];
    if (n > 16) n = 16;
    if (!n || vkEnumeratePhysicalDevices(h->inst, &n, pds) < 0) return false;
    uint32_t qf = UINT32_MAX;
    for (uint32_t i = 0; i < n && qf == UINT32_MAX; i++) {
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(pds[i], &p);
        if (p.apiVersion < VK_API_VERSION_1_3) continue;
        uint32_t nq = 0;
        vkGetPhysicalDeviceQueueFamilyProperties(pds[i], &nq, NULL);
        VkQueueFamilyProperties qp[32];
        if (nq > 32) nq = 32;
        vkGetPhysicalDeviceQueueFamilyProperties(pds[i], &nq, qp);
        for (uint32_t j = 0; j < nq; j++)
            if (qp[j].queueFlags & VK_QUEUE_COMPUTE_BIT) {
                qf = j;
                h->pd = pds[i];
                snprintf(h->name, sizeof h->name, "%s", p.deviceName);
                break;
            }
    }
    if (qf == UINT32_MAX) return false;
    vkGetPhysicalDeviceMemoryProperties(h->pd, &h->mem);

    /* what the device offers, as caps, and the features to enable for it */
    VkPhysicalDeviceVulkan11Properties p11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &p11};
    vkGetPhysicalDeviceProperties2(h->pd, &p2);
    uint32_t next = 0;
    vkEnumerateDeviceExtensionProperties(h->pd, NULL, &next, NULL);
    VkExtensionProperties *ext = calloc(next ? next : 1, sizeof *ext);
    if (!ext) return false;
    vkEnumerateDeviceExtensionProperties(h->pd, NULL, &next, ext);
    bool coop = has_ext(ext, next, "VK_KHR_cooperative_matrix"), bf16 = has_ext(ext, next, "VK_KHR_shader_bfloat16");
    free(ext);

    vkp_bf16_features fb = {.sType = VKP_STYPE_BF16_FEATURES};
    vkp_coopmat_features fc = {.sType = VKP_STYPE_COOPMAT_FEATURES, .pNext = bf16 ? &fb : NULL};
    VkPhysicalDeviceVulkan13Features f13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
                                            .pNext = coop ? (void *)&fc : bf16 ? (void *)&fb : NULL};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = &f13};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .pNext = &f12};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    vkGetPhysicalDeviceFeatures2(h->pd, &f2);

    rt_caps *c = &h->caps;
    c->backend = RT_VULKAN;
    c->subgroup_size = c->subgroup_min = c->subgroup_max = p11.subgroupSize;
    bool cs = p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT;
    c->subgroup_arith = cs && (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    c->subgroup_shuffle = cs && (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) &&
                          (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT);
    c->f16_arith = f12.shaderFloat16;
    c->storage16 = f11.storageBuffer16BitAccess;
    c->shared_bytes = p2.properties.limits.maxComputeSharedMemorySize;
    c->max_workgroup = p2.properties.limits.maxComputeWorkGroupInvocations;
    if (coop && fc.cooperativeMatrix) {
        vkh_get_coopmat_fn get =
            (vkh_get_coopmat_fn)vkGetInstanceProcAddr(h->inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
        uint32_t np = 0;
        vkp_coopmat_props props[64];
        if (get && get(h->pd, &np, NULL) == VK_SUCCESS) {
            if (np > 64) np = 64;
            for (uint32_t i = 0; i < np; i++) props[i] = (vkp_coopmat_props){.sType = VKP_STYPE_COOPMAT_PROPERTIES};
            get(h->pd, &np, props);
            for (uint32_t i = 0; i < np && c->n_mma < RT_MAX_MMA_SHAPES; i++) {
                const vkp_coopmat_props *p = &props[i];
                int ab = p->AType == 0 ? IR_F16 : p->AType == 1000141000 ? IR_BF16 : -1; /* VkComponentTypeKHR */
                int acc = p->CType == 0 ? IR_F16 : p->CType == 1 ? IR_F32 : -1;
                if (p->scope != 3 || ab < 0 || acc < 0 || p->AType != p->BType || p->CType != p->ResultType) continue;
                if (ab == IR_BF16 && !(bf16 && fb.shaderBFloat16CooperativeMatrix)) continue;
                c->mma[c->n_mma++] = (rt_mma_shape){p->MSize, p->NSize, p->KSize, (uint32_t)ab, (uint32_t)acc};
            }
        }
    }
    c->bf16_arith = bf16 && fb.shaderBFloat16Type;

    /* enable only what the emitted kernels may use */
    VkPhysicalDeviceFeatures2 e2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    VkPhysicalDeviceVulkan11Features e11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features e12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan13Features e13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    vkp_coopmat_features ec = {.sType = VKP_STYPE_COOPMAT_FEATURES, .cooperativeMatrix = c->n_mma > 0};
    vkp_bf16_features eb = {.sType = VKP_STYPE_BF16_FEATURES, .shaderBFloat16Type = c->bf16_arith,
                            .shaderBFloat16CooperativeMatrix = c->bf16_arith && fb.shaderBFloat16CooperativeMatrix};
    e2.pNext = &e11;
    e11.pNext = &e12;
    e12.pNext = &e13;
    void **tail = &e13.pNext;
    const char *exts[2];
    uint32_t n_ext = 0;
    if (c->n_mma) {
        *tail = &ec;
        tail = &ec.pNext;
        exts[n_ext++] = "VK_KHR_cooperative_matrix";
    }
    if (c->bf16_arith) {
        *tail = &eb;
        exts[n_ext++] = "VK_KHR_shader_bfloat16";
    }
    e2.features.shaderInt64 = f2.features.shaderInt64;
    e11.storageBuffer16BitAccess = f11.storageBuffer16BitAccess;
    e12.shaderFloat16 = f12.shaderFloat16;
    e12.vulkanMemoryModel = f12.vulkanMemoryModel;
    e13.maintenance4 = f13.maintenance4; /* LocalSizeId */
    float prio = 1;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = qf,
                                   .queueCount = 1, .pQueuePriorities = &prio};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .pNext = &e2,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci,
                              .enabledExtensionCount = n_ext,
                              .ppEnabledExtensionNames = exts};
    if (vkCreateDevice(h->pd, &dci, NULL, &h->dev) != VK_SUCCESS) return false;
    vkGetDeviceQueue(h->dev, qf, 0, &h->q);
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = qf};
    return vkCreateCommandPool(h->dev, &pci, NULL, &h->pool) == VK_SUCCESS;
}

void vkh_close(vkh *h) {
    if (h->dev) {
        vkDeviceWaitIdle(h->dev);
        if (h->pool) vkDestroyCommandPool(h->dev, h->pool, NULL);
        vkDestroyDevice(h->dev, NULL);
    }
    if (h->inst) vkDestroyInstance(h->inst, NULL);
    memset(h, 0, sizeof *h);
}

/* The test's precondition: a device, or the test is skipped (by name). */
void vkh_require(vkh *h) {
    if (!vkh_open(h)) {
        vkh_close(h);
        cr_skip_test("no Vulkan 1.3 device with a compute queue");
    }
    cr_log_info("vulkan device: %s", h->name);
}

void vkbuf_make(vkh *h, vkbuf *b, size_t bytes) {
    memset(b, 0, sizeof *b);
    b->n = bytes;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = bytes,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT};
    cr_assert_eq(vkCreateBuffer(h->dev, &bci, NULL, &b->b), VK_SUCCESS);
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(h->dev, b->b, &req);
    uint32_t want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, type = UINT32_MAX;
    for (uint32_t i = 0; i < h->mem.memoryTypeCount && type == UINT32_MAX; i++)
        if ((req.memoryTypeBits & (1u << i)) && (h->mem.memoryTypes[i].propertyFlags & want) == want) type = i;
    cr_assert_neq(type, UINT32_MAX, "no host-visible memory");
    VkMemoryAllocateInfo mai = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size, .memoryTypeIndex = type};
    cr_assert_eq(vkAllocateMemory(h->dev, &mai, NULL, &b->m), VK_SUCCESS);
    cr_assert_eq(vkBindBufferMemory(h->dev, b->b, b->m, 0), VK_SUCCESS);
    cr_assert_eq(vkMapMemory(h->dev, b->m, 0, VK_WHOLE_SIZE, 0, &b->p), VK_SUCCESS);
}

void vkbuf_free(vkh *h, vkbuf *b) {
    if (b->m) vkFreeMemory(h->dev, b->m, NULL);
    if (b->b) vkDestroyBuffer(h->dev, b->b, NULL);
    memset(b, 0, sizeof *b);
}

/* Creates the pipeline from m (spec constants: spec[i] as 4 bytes each for SpecId i),
 * binds bufs at bindings 0.., pushes pc, dispatches groups x 1 x 1 and waits. */
void vkh_run(vkh *h, const spv_module *m, vkbuf *bufs, uint32_t nbuf, const void *pc, uint32_t pc_bytes,
                    const uint32_t *spec, uint32_t nspec, uint32_t groups) {
    VkDevice d = h->dev;
    VkShaderModuleCreateInfo smci = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = m->n * 4, .pCode = m->words};
    VkShaderModule sm;
    cr_assert_eq(vkCreateShaderModule(d, &smci, NULL, &sm), VK_SUCCESS);
    VkDescriptorSetLayoutBinding lb[8];
    for (uint32_t i = 0; i < nbuf; i++)
        lb[i] = (VkDescriptorSetLayoutBinding){.binding = i, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                               .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dslci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = nbuf, .pBindings = lb};
    VkDescriptorSetLayout dsl;
    cr_assert_eq(vkCreateDescriptorSetLayout(d, &dslci, NULL, &dsl), VK_SUCCESS);
    VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = 128};
    VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                       .pSetLayouts = &dsl, .pushConstantRangeCount = 1, .pPushConstantRanges = &pcr};
    VkPipelineLayout pl;
    cr_assert_eq(vkCreatePipelineLayout(d, &plci, NULL, &pl), VK_SUCCESS);
    VkSpecializationMapEntry me[8];
    for (uint32_t i = 0; i < nspec; i++)
        me[i] = (VkSpecializationMapEntry){.constantID = i, .offset = 4 * i, .size = 4};
    VkSpecializationInfo si = {.mapEntryCount = nspec, .pMapEntries = me, .dataSize = 4 * nspec, .pData = spec};
    VkComputePipelineCreateInfo cpci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = sm, .pName = "main", .pSpecializationInfo = nspec ? &si : NULL},
        .layout = pl};
    VkPipeline pipe;
    cr_assert_eq(vkCreateComputePipelines(d, VK_NULL_HANDLE, 1, &cpci, NULL, &pipe), VK_SUCCESS);
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, nbuf};
    VkDescriptorPoolCreateInfo dpci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = 1, .poolSizeCount = 1, .pPoolSizes = &ps};
    VkDescriptorPool dp;
    cr_assert_eq(vkCreateDescriptorPool(d, &dpci, NULL, &dp), VK_SUCCESS);
    VkDescriptorSetAllocateInfo dsai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, .descriptorPool = dp,
                                        .descriptorSetCount = 1, .pSetLayouts = &dsl};
    VkDescriptorSet ds;
    cr_assert_eq(vkAllocateDescriptorSets(d, &dsai, &ds), VK_SUCCESS);
    VkDescriptorBufferInfo dbi[8];
    VkWriteDescriptorSet w[8];
    for (uint32_t i = 0; i < nbuf; i++) {
        dbi[i] = (VkDescriptorBufferInfo){bufs[i].b, 0, VK_WHOLE_SIZE};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet = ds,
                                      .dstBinding = i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &dbi[i]};
    }
    vkUpdateDescriptorSets(d, nbuf, w, 0, NULL);
    VkCommandBufferAllocateInfo cbai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = h->pool,
                                        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    VkCommandBuffer cb;
    cr_assert_eq(vkAllocateCommandBuffers(d, &cbai, &cb), VK_SUCCESS);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    vkBeginCommandBuffer(cb, &bi);
    vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &ds, 0, NULL);
    uint8_t pcb[128] = {0};
    if (pc_bytes) memcpy(pcb, pc, pc_bytes);
    vkCmdPushConstants(cb, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, 128, pcb);
    vkCmdDispatch(cb, groups, 1, 1);
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0,
                         NULL);
    vkEndCommandBuffer(cb);
    VkSubmitInfo sub = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
    cr_assert_eq(vkQueueSubmit(h->q, 1, &sub, VK_NULL_HANDLE), VK_SUCCESS);
    cr_assert_eq(vkQueueWaitIdle(h->q), VK_SUCCESS);
    vkFreeCommandBuffers(d, h->pool, 1, &cb);
    vkDestroyDescriptorPool(d, dp, NULL);
    vkDestroyPipeline(d, pipe, NULL);
    vkDestroyPipelineLayout(d, pl, NULL);
    vkDestroyDescriptorSetLayout(d, dsl, NULL);
    vkDestroyShaderModule(d, sm, NULL);
}

/* Every kernel of the matrix the device's caps allow, emitted for those caps and compiled
 * by the driver (vkCreateComputePipelines), not run. */
