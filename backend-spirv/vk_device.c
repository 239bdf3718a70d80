/* Vulkan implementation of runtime/device.h. Buffers are device-local and reached
 * through one host-visible staging buffer; each kernel is a compute pipeline (descriptor
 * set 0: its buffers in order; push constants: its scalars); a recording is a command
 * buffer with its own descriptor sets, submitted again for every replay. */
#include "backend-spirv/vk_device.h"

#include "backend-spirv/spv_emit.h"
#include "backend-spirv/vk_instance.h"
#include "backend-spirv/vk_khr.h"
#include "backend-spirv/vk_probe.h"
#include "base/error.h"
#include "runtime/cache_dir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

typedef struct vk_dev {
    rt_device base;
    VkInstance instance;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t queue_family;
    VkCommandPool cmd_pool;
    VkFence fence;
    bool spin; /* poll the fence (a GPU; not a CPU implementation, whose threads need the cores) */
    VkPhysicalDeviceMemoryProperties mem;
    VkBuffer staging;
    VkDeviceMemory staging_mem;
    void *staging_map;
    size_t staging_size;
    bool subgroup_control; /* the pipeline can ask for caps.subgroup_size */
    bool budget;           /* VK_EXT_memory_budget: the heaps' free bytes can be asked again */
    VkPipelineCache cache;
    char cache_path[512];  /* "" when there is nowhere to keep it */
} vk_dev;

struct rt_buffer {
    VkBuffer buf;
    VkDeviceMemory mem;   /* VK_NULL_HANDLE: a view of another buffer's memory */
    VkDeviceSize offset;  /* where a view starts in buf */
    size_t size;
    void *map; /* host-visible buffers: mapped for good, copies are memcpy (a view: its start) */
};

struct rt_kernel {
    VkShaderModule module;
    VkDescriptorSetLayout set_layout;
    VkPipelineLayout layout;
    VkPipeline pipeline;
    uint32_t n_params, n_buffers, n_scalars;
    bool *is_buffer; /* per parameter */
};

struct rt_recording {
    VkCommandBuffer cmd;
    VkDescriptorPool pool;
};

static int vk_fail(kiln_err *err, const char *what, VkResult r) {
    kiln_fail(err, KILN_ERR_DEVICE, "vulkan: %s failed (VkResult %d)", what, (int)r);
    return -1;
}

/* ---- memory ------------------------------------------------------------------------ */

static int find_memory(const vk_dev *d, uint32_t bits, VkMemoryPropertyFlags want) {
    for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (d->mem.memoryTypes[i].propertyFlags & want) == want) return (int)i;
    return -1;
}

static int make_buffer(vk_dev *d, size_t size, VkBufferUsageFlags usage, VkMemoryPropertyFlags props, VkBuffer *buf,
                       VkDeviceMemory *mem, kiln_err *err) {
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size ? size : 4, .usage = usage,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = vkCreateBuffer(d->dev, &bi, NULL, buf);
    if (r) return vk_fail(err, "vkCreateBuffer", r);
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(d->dev, *buf, &req);
    /* host memory the host reads back (logits, downloads) wants the CPU cache: reading
     * uncached write-combined memory runs at a fraction of memcpy speed */
    int type = props & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
                   ? find_memory(d, req.memoryTypeBits, props | VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
                   : -1;
    if (type < 0) type = find_memory(d, req.memoryTypeBits, props);
    if (type < 0) {
        vkDestroyBuffer(d->dev, *buf, NULL);
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "vulkan: no memory type for a %zu-byte buffer", size);
        return -1;
    }
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size,
                               .memoryTypeIndex = (uint32_t)type};
    if ((r = vkAllocateMemory(d->dev, &ai, NULL, mem))) {
        vkDestroyBuffer(d->dev, *buf, NULL);
        kiln_fail(err, KILN_ERR_NOMEM, "vulkan: cannot allocate %zu bytes of device memory (VkResult %d)", size,
                  (int)r);
        return -1;
    }
    vkBindBufferMemory(d->dev, *buf, *mem, 0);
    return 0;
}

static int ensure_staging(vk_dev *d, size_t n, kiln_err *err) {
    if (n <= d->staging_size) return 0;
    if (d->staging) {
        vkUnmapMemory(d->dev, d->staging_mem);
        vkDestroyBuffer(d->dev, d->staging, NULL);
        vkFreeMemory(d->dev, d->staging_mem, NULL);
        d->staging = VK_NULL_HANDLE;
        d->staging_size = 0;
    }
    size_t size = 1 << 20;
    while (size < n) size *= 2;
    if (make_buffer(d, size, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                    VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, &d->staging,
                    &d->staging_mem, err))
        return -1;
    VkResult r = vkMapMemory(d->dev, d->staging_mem, 0, VK_WHOLE_SIZE, 0, &d->staging_map);
    if (r) return vk_fail(err, "vkMapMemory", r);
    d->staging_size = size;
    return 0;
}

/* One-off command buffer: record with fn, submit, wait. */
/* Waits for the device's fence by polling it for up to 50 ms, then blocking. A blocking
 * wait sleeps the thread and the driver's wake-up costs tens to hundreds of microseconds
 * per submission, a few percent of a decode step; CUDA's default synchronisation spins
 * the same way. Not on a CPU implementation (lavapipe), whose threads need the cores. */
static VkResult wait_fence(vk_dev *d) {
    if (!d->spin) return vkWaitForFences(d->dev, 1, &d->fence, VK_TRUE, UINT64_MAX);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        VkResult r = vkGetFenceStatus(d->dev, d->fence);
        if (r != VK_NOT_READY) return r;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000ll + (t.tv_nsec - t0.tv_nsec) > 50000000ll) break;
    }
    return vkWaitForFences(d->dev, 1, &d->fence, VK_TRUE, UINT64_MAX);
}

static int submit_once(vk_dev *d, void (*fn)(VkCommandBuffer, void *), void *ctx, kiln_err *err) {
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = d->cmd_pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = 1};
    VkCommandBuffer cb;
    VkResult r = vkAllocateCommandBuffers(d->dev, &ai, &cb);
    if (r) return vk_fail(err, "vkAllocateCommandBuffers", r);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    vkBeginCommandBuffer(cb, &bi);
    fn(cb, ctx);
    vkEndCommandBuffer(cb);
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
    vkResetFences(d->dev, 1, &d->fence);
    r = vkQueueSubmit(d->queue, 1, &si, d->fence);
    if (!r) r = wait_fence(d);
    vkFreeCommandBuffers(d->dev, d->cmd_pool, 1, &cb);
    return r ? vk_fail(err, "queue submit", r) : 0;
}

typedef struct copy_job { VkBuffer src, dst; VkBufferCopy region; } copy_job;

static void record_copy(VkCommandBuffer cb, void *ctx) {
    copy_job *j = ctx;
    vkCmdCopyBuffer(cb, j->src, j->dst, 1, &j->region);
}

static rt_buffer *alloc_buffer(vk_dev *d, size_t bytes, bool host, kiln_err *err) {
    rt_buffer *b = calloc(1, sizeof *b);
    if (!b) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), NULL;
    VkMemoryPropertyFlags props = host ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                                       : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    if (make_buffer(d, bytes,
                    VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                        VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                    props, &b->buf, &b->mem, err)) {
        free(b);
        return NULL;
    }
    VkResult r = host ? vkMapMemory(d->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map) : VK_SUCCESS;
    if (r) {
        vkDestroyBuffer(d->dev, b->buf, NULL);
        vkFreeMemory(d->dev, b->mem, NULL);
        free(b);
        return vk_fail(err, "vkMapMemory", r), NULL;
    }
    b->size = bytes;
    return b;
}

static rt_buffer *vk_alloc(rt_device *base, size_t bytes, kiln_err *err) {
    return alloc_buffer((vk_dev *)base, bytes, false, err);
}

static rt_buffer *vk_alloc_host(rt_device *base, size_t bytes, kiln_err *err) {
    return alloc_buffer((vk_dev *)base, bytes, true, err);
}

static size_t vk_size(rt_device *base, const rt_buffer *b) {
    (void)base;
    return b->size;
}

static rt_buffer *vk_view(rt_device *base, rt_buffer *parent, size_t off, size_t bytes, kiln_err *err) {
    (void)base;
    if (rt_check_view(parent->size, off, bytes, err)) return NULL;
    rt_buffer *b = calloc(1, sizeof *b);
    if (!b) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), NULL;
    *b = (rt_buffer){.buf = parent->buf, .offset = parent->offset + off, .size = bytes,
                     .map = parent->map ? (char *)parent->map + off : NULL};
    return b;
}

static void vk_release(rt_device *base, rt_buffer *b) {
    vk_dev *d = (vk_dev *)base;
    if (!b) return;
    if (!b->mem) { /* a view */
        free(b);
        return;
    }
    if (b->map) vkUnmapMemory(d->dev, b->mem);
    vkDestroyBuffer(d->dev, b->buf, NULL);
    vkFreeMemory(d->dev, b->mem, NULL);
    free(b);
}

static int check_range(const rt_buffer *b, size_t off, size_t n, kiln_err *err) {
    if (off > b->size || n > b->size - off) {
        kiln_fail(err, KILN_ERR_INVALID, "copy of %zu bytes at %zu is outside a %zu-byte buffer", n, off, b->size);
        return -1;
    }
    return 0;
}

static int vk_upload(rt_device *base, rt_buffer *b, size_t off, const void *src, size_t n, kiln_err *err) {
    vk_dev *d = (vk_dev *)base;
    if (check_range(b, off, n, err)) return -1;
    if (b->map) return memcpy((char *)b->map + off, src, n), 0; /* no replay is in flight: calls wait */
    if (ensure_staging(d, n, err)) return -1;
    if (!n) return 0;
    memcpy(d->staging_map, src, n);
    copy_job j = {d->staging, b->buf, {0, b->offset + off, n}};
    return submit_once(d, record_copy, &j, err);
}

static int vk_download(rt_device *base, rt_buffer *b, size_t off, void *dst, size_t n, kiln_err *err) {
    vk_dev *d = (vk_dev *)base;
    if (check_range(b, off, n, err)) return -1;
    if (b->map) return memcpy(dst, (char *)b->map + off, n), 0;
    if (ensure_staging(d, n, err)) return -1;
    if (!n) return 0;
    copy_job j = {b->buf, d->staging, {b->offset + off, 0, n}};
    if (submit_once(d, record_copy, &j, err)) return -1;
    memcpy(dst, d->staging_map, n);
    return 0;
}

/* ---- kernels ----------------------------------------------------------------------- */

static void vk_release_kernel(rt_device *base, rt_kernel *k) {
    vk_dev *d = (vk_dev *)base;
    if (!k) return;
    if (k->pipeline) vkDestroyPipeline(d->dev, k->pipeline, NULL);
    if (k->layout) vkDestroyPipelineLayout(d->dev, k->layout, NULL);
    if (k->set_layout) vkDestroyDescriptorSetLayout(d->dev, k->set_layout, NULL);
    if (k->module) vkDestroyShaderModule(d->dev, k->module, NULL);
    free(k->is_buffer);
    free(k);
}

static rt_kernel *vk_compile(rt_device *base, const ir_kernel *ir, const double *spec_values, kiln_err *err) {
    vk_dev *d = (vk_dev *)base;
    if (ir_verify(ir, err)) return NULL;
    spv_module m = {0};
    if (spv_emit(ir, &base->caps, &m, err)) return NULL;
    rt_kernel *k = calloc(1, sizeof *k);
    uint32_t np = ir_n_params(ir), ns = ir_n_specs(ir);
    VkDescriptorSetLayoutBinding *binds = calloc(np ? np : 1, sizeof *binds);
    VkSpecializationMapEntry *entries = calloc(ns ? ns : 1, sizeof *entries);
    uint32_t *spec_data = calloc(ns ? ns : 1, sizeof *spec_data);
    if (!k || !binds || !entries || !spec_data || !(k->is_buffer = calloc(np ? np : 1, sizeof *k->is_buffer))) {
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    k->n_params = np;
    for (uint32_t i = 0; i < np; i++) {
        const ir_param *p = ir_param_at(ir, i);
        k->is_buffer[i] = p->is_buffer;
        if (p->is_buffer)
            binds[k->n_buffers] = (VkDescriptorSetLayoutBinding){.binding = k->n_buffers,
                                                                 .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                                 .descriptorCount = 1,
                                                                 .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT},
            k->n_buffers++;
        else k->n_scalars++;
    }
    for (uint32_t i = 0; i < ns; i++) {
        const ir_spec *s = ir_spec_at(ir, i);
        double v = spec_values ? spec_values[i] : s->dflt;
        if (s->type == IR_F32) {
            float f = (float)v;
            memcpy(&spec_data[i], &f, 4);
        } else if (s->type == IR_I32) {
            int32_t x = (int32_t)v;
            memcpy(&spec_data[i], &x, 4);
        } else {
            spec_data[i] = (uint32_t)v; /* u32, and bool as VkBool32 */
        }
        entries[i] = (VkSpecializationMapEntry){.constantID = i, .offset = 4 * i, .size = 4};
    }
    VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = m.n * 4,
                                   .pCode = m.words};
    VkResult r = vkCreateShaderModule(d->dev, &mi, NULL, &k->module);
    if (r) {
        vk_fail(err, "vkCreateShaderModule", r);
        goto fail;
    }
    VkDescriptorSetLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = k->n_buffers, .pBindings = binds};
    if ((r = vkCreateDescriptorSetLayout(d->dev, &li, NULL, &k->set_layout))) {
        vk_fail(err, "vkCreateDescriptorSetLayout", r);
        goto fail;
    }
    VkPushConstantRange pc = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = 4 * k->n_scalars};
    VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                      .pSetLayouts = &k->set_layout, .pushConstantRangeCount = k->n_scalars ? 1 : 0,
                                      .pPushConstantRanges = &pc};
    if ((r = vkCreatePipelineLayout(d->dev, &pli, NULL, &k->layout))) {
        vk_fail(err, "vkCreatePipelineLayout", r);
        goto fail;
    }
    VkSpecializationInfo si = {.mapEntryCount = ns, .pMapEntries = entries, .dataSize = 4 * ns, .pData = spec_data};
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo sg = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
        .requiredSubgroupSize = base->caps.subgroup_size};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .pNext = d->subgroup_control ? &sg : NULL,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = k->module,
                  .pName = "main",
                  .pSpecializationInfo = ns ? &si : NULL},
        .layout = k->layout};
    if ((r = vkCreateComputePipelines(d->dev, d->cache, 1, &ci, NULL, &k->pipeline))) {
        vk_fail(err, "vkCreateComputePipelines", r);
        goto fail;
    }
    free(binds);
    free(entries);
    free(spec_data);
    spv_module_free(&m);
    return k;
fail:
    free(binds);
    free(entries);
    free(spec_data);
    spv_module_free(&m);
    vk_release_kernel(base, k);
    return NULL;
}

/* ---- launches ------------------------------------------------------------------------ */

static int check_launch(const rt_launch *l, kiln_err *err) {
    if (!l->kernel) return kiln_fail(err, KILN_ERR_INVALID, "launch without a kernel"), -1;
    return rt_check_launch(l, l->kernel->n_params, l->kernel->is_buffer, err);
}

/* Records launches into cb, with descriptor sets from pool, and a barrier after each so
 * the next launch sees its writes. */
static int record_launches(vk_dev *d, VkCommandBuffer cb, VkDescriptorPool pool, const rt_launch *l, uint32_t n,
                           kiln_err *err) {
    for (uint32_t i = 0; i < n; i++) {
        const rt_kernel *k = l[i].kernel;
        VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                          .descriptorPool = pool, .descriptorSetCount = 1,
                                          .pSetLayouts = &k->set_layout};
        VkDescriptorSet set;
        VkResult r = vkAllocateDescriptorSets(d->dev, &ai, &set);
        if (r) return vk_fail(err, "vkAllocateDescriptorSets", r);
        uint32_t push[64], nb = 0, nsc = 0;
        VkDescriptorBufferInfo infos[64];
        VkWriteDescriptorSet writes[64];
        if (k->n_buffers > 64 || k->n_scalars > 64)
            return kiln_fail(err, KILN_ERR_INVALID, "too many kernel parameters"), -1;
        for (uint32_t a = 0; a < l[i].n_args; a++) {
            if (k->is_buffer[a]) {
                const rt_buffer *bb = l[i].args[a].buf; /* a view: its bytes only */
                infos[nb] = (VkDescriptorBufferInfo){bb->buf, bb->offset, bb->mem ? VK_WHOLE_SIZE : bb->size};
                writes[nb] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = set,
                                                    .dstBinding = nb, .descriptorCount = 1,
                                                    .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                    .pBufferInfo = &infos[nb]};
                nb++;
            } else {
                push[nsc++] = l[i].args[a].bits;
            }
        }
        vkUpdateDescriptorSets(d->dev, nb, writes, 0, NULL);
        vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipeline);
        vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->layout, 0, 1, &set, 0, NULL);
        if (nsc) vkCmdPushConstants(cb, k->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 4 * nsc, push);
        vkCmdDispatch(cb, l[i].groups[0], l[i].groups[1], l[i].groups[2]);
        VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                              .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                              .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                               VK_ACCESS_TRANSFER_READ_BIT};
        vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                             VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, NULL,
                             0, NULL);
    }
    /* host-visible outputs: the fence wait alone does not make shader writes visible */
    VkMemoryBarrier hb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &hb, 0, NULL, 0,
                         NULL);
    return 0;
}

static void vk_release_recording(rt_device *base, rt_recording *r) {
    vk_dev *d = (vk_dev *)base;
    if (!r) return;
    if (r->cmd) vkFreeCommandBuffers(d->dev, d->cmd_pool, 1, &r->cmd);
    if (r->pool) vkDestroyDescriptorPool(d->dev, r->pool, NULL);
    free(r);
}

static rt_recording *vk_record(rt_device *base, const rt_launch *l, uint32_t n, kiln_err *err) {
    vk_dev *d = (vk_dev *)base;
    uint32_t n_bufs = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (check_launch(&l[i], err)) return NULL;
        n_bufs += l[i].kernel->n_buffers;
    }
    rt_recording *rec = calloc(1, sizeof *rec);
    if (!rec) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), NULL;
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, n_bufs ? n_bufs : 1};
    VkDescriptorPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = n ? n : 1,
                                     .poolSizeCount = 1, .pPoolSizes = &ps};
    VkResult r = vkCreateDescriptorPool(d->dev, &pi, NULL, &rec->pool);
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = d->cmd_pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = 1};
    if (!r) r = vkAllocateCommandBuffers(d->dev, &ai, &rec->cmd);
    if (r) {
        vk_fail(err, "creating a recording", r);
        vk_release_recording(base, rec);
        return NULL;
    }
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vkBeginCommandBuffer(rec->cmd, &bi);
    int rc = record_launches(d, rec->cmd, rec->pool, l, n, err);
    vkEndCommandBuffer(rec->cmd);
    if (rc) {
        vk_release_recording(base, rec);
        return NULL;
    }
    return rec;
}

static int vk_replay(rt_device *base, rt_recording *rec, kiln_err *err) {
    vk_dev *d = (vk_dev *)base;
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &rec->cmd};
    vkResetFences(d->dev, 1, &d->fence);
    VkResult r = vkQueueSubmit(d->queue, 1, &si, d->fence);
    if (!r) r = wait_fence(d);
    return r ? vk_fail(err, "replay", r) : 0;
}

static int vk_run(rt_device *base, const rt_launch *l, uint32_t n, kiln_err *err) {
    rt_recording *rec = vk_record(base, l, n, err);
    if (!rec) return -1;
    int rc = vk_replay(base, rec, err);
    vk_release_recording(base, rec);
    return rc;
}

/* ---- the pipeline cache on disk ------------------------------------------------------------ */

/* $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; one file per driver
 * build (the device's pipelineCacheUUID), which the driver also checks on load. */
static void cache_open(vk_dev *d) {
    VkPhysicalDeviceProperties pr;
    vkGetPhysicalDeviceProperties(d->phys, &pr);
    char base[400];
    if (rt_cache_dir(base, sizeof base) == 0) {
        char uuid[2 * VK_UUID_SIZE + 1];
        for (unsigned i = 0; i < VK_UUID_SIZE; i++) snprintf(uuid + 2 * i, 3, "%02x", pr.pipelineCacheUUID[i]);
        snprintf(d->cache_path, sizeof d->cache_path, "%s/vk-%04x-%04x-%s.bin", base, pr.vendorID, pr.deviceID, uuid);
    }
    void *data = NULL;
    size_t n = 0;
    FILE *f = d->cache_path[0] ? fopen(d->cache_path, "rb") : NULL;
    if (f) {
        if (fseek(f, 0, SEEK_END) == 0) {
            long len = ftell(f);
            if (len > 0 && len < (1L << 30) && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)len)))
                n = fread(data, 1, (size_t)len, f);
        }
        fclose(f);
    }
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO, .initialDataSize = n,
                                    .pInitialData = n ? data : NULL};
    if (vkCreatePipelineCache(d->dev, &ci, NULL, &d->cache) != VK_SUCCESS) { /* a bad file: start empty */
        ci.initialDataSize = 0, ci.pInitialData = NULL;
        if (vkCreatePipelineCache(d->dev, &ci, NULL, &d->cache) != VK_SUCCESS) d->cache = VK_NULL_HANDLE;
    }
    free(data);
}

static void cache_save(vk_dev *d) {
    size_t n = 0;
    if (!d->cache || !d->cache_path[0] || vkGetPipelineCacheData(d->dev, d->cache, &n, NULL) != VK_SUCCESS || !n)
        return;
    void *data = malloc(n);
    if (data && vkGetPipelineCacheData(d->dev, d->cache, &n, data) == VK_SUCCESS)
        rt_cache_write(d->cache_path, data, n);
    free(data);
}

/* ---- the device ------------------------------------------------------------------------ */

static void vk_destroy(rt_device *base) {
    vk_dev *d = (vk_dev *)base;
    if (!d) return;
    if (d->dev) {
        vkDeviceWaitIdle(d->dev);
        if (d->staging) {
            vkUnmapMemory(d->dev, d->staging_mem);
            vkDestroyBuffer(d->dev, d->staging, NULL);
            vkFreeMemory(d->dev, d->staging_mem, NULL);
        }
        cache_save(d);
        if (d->cache) vkDestroyPipelineCache(d->dev, d->cache, NULL);
        if (d->fence) vkDestroyFence(d->dev, d->fence, NULL);
        if (d->cmd_pool) vkDestroyCommandPool(d->dev, d->cmd_pool, NULL);
        vkDestroyDevice(d->dev, NULL);
    }
    free(d);
}

/* Whether the physical device offers extension name. */
static bool has_device_ext(VkPhysicalDevice pd, const char *name) {
    uint32_t n = 0;
    if (vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) || !n) return false;
    VkExtensionProperties *e = malloc(n * sizeof *e);
    bool found = false;
    if (e && !vkEnumerateDeviceExtensionProperties(pd, NULL, &n, e))
        for (uint32_t i = 0; i < n && !found; i++) found = !strncmp(e[i].extensionName, name, VK_MAX_EXTENSION_NAME_SIZE);
    free(e);
    return found;
}

/* The largest device-local heap's budget less its usage (every process's, as the driver
 * counts them; the probe's rule for the heap): where VK_EXT_memory_budget is offered. */
static int vk_free_memory(rt_device *base, uint64_t *free_bytes) {
    vk_dev *d = (vk_dev *)base;
    if (!d->budget) return -1;
    VkPhysicalDeviceMemoryBudgetPropertiesEXT b = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 m2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, .pNext = &b};
    vkGetPhysicalDeviceMemoryProperties2(d->phys, &m2);
    const VkPhysicalDeviceMemoryProperties *mp = &m2.memoryProperties;
    uint32_t best = UINT32_MAX;
    for (int want_local = 1; want_local >= 0 && best == UINT32_MAX; want_local--)
        for (uint32_t h = 0; h < mp->memoryHeapCount && h < VK_MAX_MEMORY_HEAPS; h++) {
            if (want_local && !(mp->memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)) continue;
            if (best == UINT32_MAX || mp->memoryHeaps[h].size > mp->memoryHeaps[best].size) best = h;
        }
    if (best == UINT32_MAX) return -1;
    *free_bytes = b.heapBudget[best] > b.heapUsage[best] ? b.heapBudget[best] - b.heapUsage[best] : 0;
    return 0;
}

static const rt_device_ops vk_ops = {
    .alloc = vk_alloc, .alloc_host = vk_alloc_host, .view = vk_view, .release = vk_release, .size = vk_size,
    .upload = vk_upload, .download = vk_download, .compile = vk_compile, .release_kernel = vk_release_kernel,
    .run = vk_run, .record = vk_record, .replay = vk_replay, .release_recording = vk_release_recording,
    .free_memory = vk_free_memory, .destroy = vk_destroy};

rt_device *vk_device_open(uint32_t index, const char *caps_override, kiln_err *err) {
    rt_caps all[16];
    uint32_t n = 0;
    if (vk_probe_devices(all, 16, &n, err) || index >= n) {
        if (index >= n) kiln_fail(err, KILN_ERR_UNAVAILABLE, "no Vulkan device vulkan:%u (%u found)", index, n);
        return NULL;
    }
    vk_dev *d = calloc(1, sizeof *d);
    if (!d) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), NULL;
    d->base.ops = &vk_ops;
    d->base.caps = all[index];
    snprintf(d->base.label, sizeof d->base.label, "vulkan:%u", index);
    rt_caps *c = &d->base.caps;
    if (caps_override && rt_caps_override(c, caps_override, err)) goto fail;
    rt_debug_from_list(&d->base.debug, caps_override);

    VkResult r = vk_instance(&d->instance, NULL);
    if (r) {
        vk_fail(err, "vkCreateInstance", r);
        goto fail;
    }
    uint32_t np = 0;
    vkEnumeratePhysicalDevices(d->instance, &np, NULL);
    VkPhysicalDevice phys[16];
    if (np > 16) np = 16;
    vkEnumeratePhysicalDevices(d->instance, &np, phys);
    if (index >= np) {
        kiln_fail(err, KILN_ERR_UNAVAILABLE, "no Vulkan device vulkan:%u", index);
        goto fail;
    }
    d->phys = phys[index];
    VkPhysicalDeviceProperties dp;
    vkGetPhysicalDeviceProperties(d->phys, &dp);
    d->spin = dp.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU;
    d->base.host_cores = !d->spin;
    vkGetPhysicalDeviceMemoryProperties(d->phys, &d->mem);
    d->budget = VK_API_VERSION_MINOR(dp.apiVersion) >= 1 && has_device_ext(d->phys, "VK_EXT_memory_budget");
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, NULL);
    VkQueueFamilyProperties qf[32];
    if (nq > 32) nq = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, qf);
    d->queue_family = UINT32_MAX;
    for (uint32_t i = 0; i < nq && d->queue_family == UINT32_MAX; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) d->queue_family = i;
    if (d->queue_family == UINT32_MAX) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "vulkan:%u has no compute queue", index);
        goto fail;
    }

    /* Enable what the caps promise kernels (and nothing the device lacks). */
    VkPhysicalDeviceVulkan13Features f13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = &f13};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .pNext = &f12};
    VkPhysicalDeviceFeatures2 have = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    vkGetPhysicalDeviceFeatures2(d->phys, &have);
    VkPhysicalDeviceVulkan13Features e13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
                                            .subgroupSizeControl = f13.subgroupSizeControl,
                                            .computeFullSubgroups = f13.computeFullSubgroups,
                                            .maintenance4 = f13.maintenance4};
    VkPhysicalDeviceVulkan12Features e12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = &e13,
                                            .shaderFloat16 = c->f16_arith && f12.shaderFloat16,
                                            .shaderInt8 = c->int8_arith && f12.shaderInt8,
                                            .storageBuffer8BitAccess = f12.storageBuffer8BitAccess,
                                            .vulkanMemoryModel = f12.vulkanMemoryModel};
    VkPhysicalDeviceVulkan11Features e11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .pNext = &e12,
                                            .storageBuffer16BitAccess = c->storage16 && f11.storageBuffer16BitAccess};
    VkPhysicalDeviceFeatures2 want = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &e11};
    /* The extensions behind cooperative matrices, the bf16 type and float atomics: the
     * probe saw their features, so enabling them cannot fail for want of support. The
     * caps (after --caps) decide; what is not enabled leaves the caps. */
    const char *exts[4];
    uint32_t n_ext = 0;
    bool bf16_mma = false;
    for (uint32_t i = 0; i < c->n_mma; i++) bf16_mma |= c->mma[i].ab_type == IR_BF16;
    vkp_coopmat_features ecm = {.sType = VKP_STYPE_COOPMAT_FEATURES, .cooperativeMatrix = VK_TRUE};
    vkp_coopmat2_features ecm2 = {.sType = VKP_STYPE_COOPMAT2_FEATURES,
                                  .cooperativeMatrixWorkgroupScope = VK_TRUE,
                                  .cooperativeMatrixFlexibleDimensions = VK_TRUE,
                                  .cooperativeMatrixTensorAddressing = VK_TRUE};
    vkp_bf16_features ebf = {.sType = VKP_STYPE_BF16_FEATURES, .shaderBFloat16Type = VK_TRUE,
                             .shaderBFloat16CooperativeMatrix = bf16_mma};
    VkPhysicalDeviceShaderAtomicFloatFeaturesEXT eaf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT,
        .shaderBufferFloat32AtomicAdd = VK_TRUE};
    void **tail = &e13.pNext;
    if (c->mma_emulated) { /* plain SPIR-V (spv_frag_emu.c): no extension */
    } else if (c->n_mma && f12.vulkanMemoryModel) { /* fragments need the Vulkan memory model */
        exts[n_ext++] = "VK_KHR_cooperative_matrix";
        *tail = &ecm, tail = &ecm.pNext;
    } else {
        c->n_mma = 0;
    }
    if (c->n_mma && c->n_wg_mma) {
        exts[n_ext++] = "VK_NV_cooperative_matrix2";
        *tail = &ecm2, tail = &ecm2.pNext;
    } else {
        c->n_wg_mma = 0;
    }
    if (c->bf16_arith) {
        exts[n_ext++] = "VK_KHR_shader_bfloat16";
        *tail = &ebf, tail = &ebf.pNext;
    } else { /* bf16 fragments need the type */
        uint32_t k = 0;
        for (uint32_t i = 0; i < c->n_mma; i++)
            if (c->mma[i].ab_type != IR_BF16) c->mma[k++] = c->mma[i];
        c->n_mma = k;
        k = 0;
        for (uint32_t i = 0; i < c->n_wg_mma; i++)
            if (c->wg_mma[i].ab_type != IR_BF16) c->wg_mma[k++] = c->wg_mma[i];
        c->n_wg_mma = k;
    }
    if (c->atomic_f32_add) {
        exts[n_ext++] = "VK_EXT_shader_atomic_float";
        *tail = &eaf, tail = &eaf.pNext;
    }
    want.features.shaderInt64 = have.features.shaderInt64;
    c->f16_arith = e12.shaderFloat16;
    c->int8_arith = e12.shaderInt8;
    c->storage16 = e11.storageBuffer16BitAccess;
    d->subgroup_control = f13.subgroupSizeControl && c->subgroup_min != c->subgroup_max;

    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                  .queueFamilyIndex = d->queue_family, .queueCount = 1, .pQueuePriorities = &prio};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .pNext = &want,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qi,
                              .enabledExtensionCount = n_ext,
                              .ppEnabledExtensionNames = exts};
    if ((r = vkCreateDevice(d->phys, &dci, NULL, &d->dev))) {
        vk_fail(err, "vkCreateDevice", r);
        goto fail;
    }
    vkGetDeviceQueue(d->dev, d->queue_family, 0, &d->queue);
    VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = d->queue_family};
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = vkCreateCommandPool(d->dev, &cpi, NULL, &d->cmd_pool)) ||
        (r = vkCreateFence(d->dev, &fi, NULL, &d->fence))) {
        vk_fail(err, "creating the command pool", r);
        goto fail;
    }
    cache_open(d);
    return &d->base;
fail:
    vk_destroy(&d->base);
    return NULL;
}
