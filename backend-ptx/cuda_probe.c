/* Reads a CUDA device's capabilities from the driver (cuDeviceGetAttribute and friends)
 * into rt_caps, starting from rt_caps_default(RT_CUDA). Matrix fragments: the one shape
 * the emitter lowers, mma.sync m16n8k16 with f16 or bf16 inputs and f32 accumulators, on
 * sm_80 and newer. What kiln's PTX emitter does not use stays off: f16/bf16 scalar
 * arithmetic (16-bit values live in f32 registers). */
#include "backend-ptx/cuda_probe.h"

#include "backend-ptx/cuda_api.h"
#include "base/error.h"
#include "ir/ir.h"

#include <stdio.h>
#include <string.h>

void cuda_caps_of_arch(rt_caps *c) {
    c->f16_arith = c->bf16_arith = c->int8_arith = false;
    c->n_mma = 0;
    memset(c->mma, 0, sizeof c->mma);
    c->async_copy = c->compute_capability >= 80;
    c->wgmma = c->compute_capability == 90; /* sm_90a's: not forward to later architectures */
    c->grid_dep = c->compute_capability >= 90; /* griddepcontrol: PTX 7.8, sm_90 */
    c->tma = c->compute_capability >= 90;      /* cp.async.bulk.tensor, mbarrier tx counts, clusters: PTX 8.0 */
    /* the per-block opt-in limit of dynamic shared memory each architecture has (the
     * CUDA programming guide's table), for caps made without a device (kiln dump --sm) */
    uint32_t cc = c->compute_capability, kib = cc >= 90               ? 227
                                               : cc == 80 || cc == 87 ? 163
                                               : cc >= 86             ? 99
                                               : cc >= 75             ? 64
                                               : cc >= 70             ? 96
                                                                      : 48;
    c->shared_bytes = kib * 1024;
    if (c->compute_capability >= 80) {
        c->mma[c->n_mma++] = (rt_mma_shape){16, 8, 16, IR_BF16, IR_F32};
        c->mma[c->n_mma++] = (rt_mma_shape){16, 8, 16, IR_F16, IR_F32};
    }
}

static int attr(const cu_api *cu, CUdevice dev, int which) {
    int v = 0;
    return cu->DeviceGetAttribute(&v, which, dev) == CUDA_SUCCESS ? v : 0;
}

/* Free memory needs a context: the device's primary context, retained for the query and
 * released after, with the thread's current context put back. 0 when it cannot be had. */
static uint64_t free_memory(const cu_api *cu, CUdevice dev) {
    CUcontext prev = NULL, ctx = NULL;
    size_t fr = 0, total = 0;
    if (cu->CtxGetCurrent(&prev) != CUDA_SUCCESS) prev = NULL;
    if (cu->DevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) return 0;
    if (cu->CtxSetCurrent(ctx) != CUDA_SUCCESS || cu->MemGetInfo(&fr, &total) != CUDA_SUCCESS) fr = 0;
    cu->CtxSetCurrent(prev);
    cu->DevicePrimaryCtxRelease(dev);
    return fr;
}

static void fill(const cu_api *cu, CUdevice dev, int driver_version, rt_caps *c) {
    rt_caps_default(c, RT_CUDA);
    snprintf(c->vendor, sizeof c->vendor, "NVIDIA");
    if (cu->DeviceGetName(c->name, (int)sizeof c->name, dev) != CUDA_SUCCESS) snprintf(c->name, sizeof c->name, "?");
    c->name[sizeof c->name - 1] = '\0';
    /* the driver API gives its own version, not the driver package's (that is NVML's) */
    snprintf(c->driver, sizeof c->driver, "CUDA driver API %d.%d", driver_version / 1000, driver_version % 1000 / 10);
    c->api_version = (uint32_t)driver_version;
    c->compute_capability = (uint32_t)(attr(cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
                                       attr(cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
    int warp = attr(cu, dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    if (warp > 0) c->subgroup_size = c->subgroup_min = c->subgroup_max = (uint32_t)warp;
    int threads = attr(cu, dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    if (threads > 0) c->max_workgroup = (uint32_t)threads;
    /* Past PTX's static 48 KiB a kernel's workgroup arrays are dynamic shared memory
     * (ptx_emit.h), which the device loader allows up to the opt-in limit (227 KiB on the
     * H200); where the driver reports no opt-in, the plain per-block limit. */
    int shared = attr(cu, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    if (shared <= 0) shared = attr(cu, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    c->compute_units = (uint32_t)attr(cu, dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    int per_sm = attr(cu, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    int l2 = attr(cu, dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    c->shared_per_cu = per_sm > 0 ? (uint32_t)per_sm : 0;
    c->l2_bytes = l2 > 0 ? (uint64_t)l2 : 0;
    size_t total = 0;
    if (cu->DeviceTotalMem(&total, dev) == CUDA_SUCCESS) c->memory_bytes = total;
    c->free_bytes = free_memory(cu, dev);
    cuda_caps_of_arch(c);
    /* launch attributes need cuLaunchKernelEx; recorded steps keep the overlap from 12.3 */
    if (!cu->LaunchKernelEx || driver_version < 12030) c->grid_dep = false;
    /* tensor maps are encoded on the host; clusters are a launch attribute */
    if (!cu->TensorMapEncodeTiled || !cu->LaunchKernelEx) c->tma = false;
    if (shared > 0) c->shared_bytes = (uint32_t)shared; /* the device's own word over the table's */
    c->max_buffer_bytes = 0;                            /* a kernel reaches any allocation through a 64-bit pointer */
}

int cuda_probe_devices(rt_caps *out, uint32_t max, uint32_t *n, kiln_err *err) {
    kiln_err_clear(err);
    if (!n || (!out && max)) {
        if (err) kiln_fail(err, KILN_ERR_INVALID, "cuda_probe_devices: bad arguments");
        return -1;
    }
    *n = 0;
    kiln_err why = {0};
    const cu_api *cu = cu_load(&why);
    if (!cu) {
        if (err) kiln_fail(err, KILN_ERR_UNAVAILABLE, "no CUDA devices: %s", why.msg);
        return 0;
    }
    int count = 0, version = 0;
    CUresult r = cu->DeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count <= 0) {
        char name[32];
        if (err)
            kiln_fail(err, KILN_ERR_UNAVAILABLE, "no CUDA devices: %s",
                      r != CUDA_SUCCESS ? cu_error_name(cu, r, name) : "the driver reports none");
        return 0;
    }
    if (cu->DriverGetVersion(&version) != CUDA_SUCCESS) version = 0;
    for (int i = 0; i < count && *n < max; i++) {
        CUdevice dev;
        if (cu->DeviceGet(&dev, i) != CUDA_SUCCESS) break; /* keep indices equal to ordinals */
        fill(cu, dev, version, &out[*n]);
        ++*n;
    }
    if ((uint32_t)count > *n && err)
        kiln_fail(err, KILN_ERR_UNAVAILABLE, "%d CUDA devices, only the first %u probed", count, *n);
    return 0;
}
