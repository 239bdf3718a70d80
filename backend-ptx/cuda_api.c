/* Finds the CUDA driver at run time: dlopen("libcuda.so.1") and dlsym of each entry point
 * kiln uses (cuda_api.h), then cuInit. Done once per process; the library stays loaded
 * (unloading a GPU driver while its threads live is asking for trouble). */
#include "backend-ptx/cuda_api.h"

#include "base/error.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static cu_api api;
static const cu_api *loaded;
static char load_err[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* A symbol's address into a function-pointer slot (POSIX guarantees the round trip). */
static int resolve(void *lib, void *slot, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        snprintf(load_err, sizeof load_err, "libcuda.so.1 lacks %s (driver too old?)", name);
        return -1;
    }
    memcpy(slot, &p, sizeof p);
    return 0;
}

static void load_once(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(load_err, sizeof load_err, "libcuda.so.1 not found (%s)", why ? why : "dlopen failed");
        return;
    }
    static const struct {
        size_t off;
        const char *name;
    } syms[] = {
        {offsetof(cu_api, Init), "cuInit"},
        {offsetof(cu_api, DriverGetVersion), "cuDriverGetVersion"},
        {offsetof(cu_api, GetErrorName), "cuGetErrorName"},
        {offsetof(cu_api, DeviceGetCount), "cuDeviceGetCount"},
        {offsetof(cu_api, DeviceGet), "cuDeviceGet"},
        {offsetof(cu_api, DeviceGetName), "cuDeviceGetName"},
        {offsetof(cu_api, DeviceGetAttribute), "cuDeviceGetAttribute"},
        {offsetof(cu_api, DeviceTotalMem), "cuDeviceTotalMem_v2"},
        {offsetof(cu_api, DevicePrimaryCtxRetain), "cuDevicePrimaryCtxRetain"},
        {offsetof(cu_api, DevicePrimaryCtxRelease), "cuDevicePrimaryCtxRelease_v2"},
        {offsetof(cu_api, CtxSetCurrent), "cuCtxSetCurrent"},
        {offsetof(cu_api, CtxGetCurrent), "cuCtxGetCurrent"},
        {offsetof(cu_api, MemGetInfo), "cuMemGetInfo_v2"},
        {offsetof(cu_api, MemAlloc), "cuMemAlloc_v2"},
        {offsetof(cu_api, MemFree), "cuMemFree_v2"},
        {offsetof(cu_api, MemHostAlloc), "cuMemHostAlloc"},
        {offsetof(cu_api, MemHostGetDevicePointer), "cuMemHostGetDevicePointer_v2"},
        {offsetof(cu_api, MemFreeHost), "cuMemFreeHost"},
        {offsetof(cu_api, MemcpyHtoDAsync), "cuMemcpyHtoDAsync_v2"},
        {offsetof(cu_api, MemcpyDtoHAsync), "cuMemcpyDtoHAsync_v2"},
        {offsetof(cu_api, ModuleLoadDataEx), "cuModuleLoadDataEx"},
        {offsetof(cu_api, ModuleGetFunction), "cuModuleGetFunction"},
        {offsetof(cu_api, ModuleUnload), "cuModuleUnload"},
        {offsetof(cu_api, FuncSetAttribute), "cuFuncSetAttribute"},
        {offsetof(cu_api, LaunchKernel), "cuLaunchKernel"},
        {offsetof(cu_api, StreamCreate), "cuStreamCreate"},
        {offsetof(cu_api, StreamDestroy), "cuStreamDestroy_v2"},
        {offsetof(cu_api, StreamSynchronize), "cuStreamSynchronize"},
        {offsetof(cu_api, StreamBeginCapture), "cuStreamBeginCapture_v2"},
        {offsetof(cu_api, StreamEndCapture), "cuStreamEndCapture"},
        {offsetof(cu_api, GraphInstantiateWithFlags), "cuGraphInstantiateWithFlags"},
        {offsetof(cu_api, GraphLaunch), "cuGraphLaunch"},
        {offsetof(cu_api, GraphExecDestroy), "cuGraphExecDestroy"},
        {offsetof(cu_api, GraphDestroy), "cuGraphDestroy"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (resolve(lib, (char *)&api + syms[i].off, syms[i].name)) return;
    void *ex = dlsym(lib, "cuLaunchKernelEx"); /* optional: caps.grid_dep stays off without it */
    if (ex) memcpy(&api.LaunchKernelEx, &ex, sizeof ex);
    void *up = dlsym(lib, "cuGraphUpload"); /* optional: a recording's first replay then uploads it */
    if (up) memcpy(&api.GraphUpload, &up, sizeof up);
    void *tm = dlsym(lib, "cuTensorMapEncodeTiled"); /* optional: caps.tma stays off without it */
    if (tm) memcpy(&api.TensorMapEncodeTiled, &tm, sizeof tm);
    CUresult r = api.Init(0);
    if (r != CUDA_SUCCESS) {
        char name[32];
        snprintf(load_err, sizeof load_err, "cuInit: %s", cu_error_name(&api, r, name));
        return;
    }
    loaded = &api;
}

const cu_api *cu_load(kiln_err *err) {
    pthread_once(&once, load_once);
    if (!loaded && err) kiln_fail(err, KILN_ERR_DEVICE, "%s", load_err);
    return loaded;
}

const char *cu_error_name(const cu_api *cu, CUresult r, char buf[32]) {
    const char *s = NULL;
    if (cu && cu->GetErrorName && cu->GetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
    snprintf(buf, 32, "CUresult %d", r);
    return buf;
}
