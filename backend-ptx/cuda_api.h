/* The few CUDA driver API entry points and types kiln uses, declared here rather than
 * taken from cuda.h: kiln builds and runs without the CUDA toolkit and finds the driver
 * (libcuda.so.1) with dlopen at run time. Values are the driver ABI's (cuda.h, CUDA 13.0);
 * versioned names (_v2) are the ones cuda.h maps the plain names to, so the ABI matches. */
#ifndef KILN_BACKEND_PTX_CUDA_API_H
#define KILN_BACKEND_PTX_CUDA_API_H

#include "base/error.h"

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

/* cuLaunchKernelEx's configuration (CUDA 12.0+): a launch attribute is an id padded to 8
 * bytes and a 64-byte value union, of which kiln sets one 32-bit field. */
typedef struct CUlaunchAttribute {
    int id;
    char pad[4];
    union {
        char bytes[64];
        unsigned u32;
    } value;
} CUlaunchAttribute;
typedef struct CUlaunchConfig {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_OUT_OF_MEMORY = 2,

    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
    CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
    CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,

    CU_JIT_INFO_LOG_BUFFER = 3,
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
    CU_JIT_ERROR_LOG_BUFFER = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,

    CU_MEMHOSTALLOC_PORTABLE = 0x01,
    CU_MEMHOSTALLOC_DEVICEMAP = 0x02,

    CU_STREAM_NON_BLOCKING = 0x1,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,

    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,

    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,

    /* cuTensorMapEncodeTiled's enumerations (cuda.h's CUtensorMap*) */
    CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
    CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
    CU_TENSOR_MAP_SWIZZLE_128B = 3,
    CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0, /* elements past the tensor read as zero */
};

/* An encoded tensor map: 128 opaque bytes, 64-byte aligned, passed to a kernel by value. */
typedef struct CUtensorMap {
    _Alignas(64) unsigned long long opaque[16];
} CUtensorMap;

/* The driver's entry points, resolved by name from libcuda.so.1. */
typedef struct cu_api {
    CUresult (*Init)(unsigned flags);
    CUresult (*DriverGetVersion)(int *version);
    CUresult (*GetErrorName)(CUresult r, const char **name);
    CUresult (*DeviceGetCount)(int *count);
    CUresult (*DeviceGet)(CUdevice *dev, int ordinal);
    CUresult (*DeviceGetName)(char *name, int len, CUdevice dev);
    CUresult (*DeviceGetAttribute)(int *value, int attrib, CUdevice dev);
    CUresult (*DeviceTotalMem)(size_t *bytes, CUdevice dev);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice dev);
    CUresult (*CtxSetCurrent)(CUcontext ctx);
    CUresult (*CtxGetCurrent)(CUcontext *ctx);
    CUresult (*MemGetInfo)(size_t *free_bytes, size_t *total_bytes);
    CUresult (*MemAlloc)(CUdeviceptr *p, size_t bytes);
    CUresult (*MemFree)(CUdeviceptr p);
    CUresult (*MemHostAlloc)(void **p, size_t bytes, unsigned flags);
    CUresult (*MemHostGetDevicePointer)(CUdeviceptr *dp, void *p, unsigned flags);
    CUresult (*MemFreeHost)(void *p);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t n, CUstream s);
    CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t n, CUstream s);
    CUresult (*ModuleLoadDataEx)(CUmodule *m, const void *image, unsigned n_opts, int *opts, void **values);
    CUresult (*ModuleGetFunction)(CUfunction *f, CUmodule m, const char *name);
    CUresult (*ModuleUnload)(CUmodule m);
    CUresult (*FuncSetAttribute)(CUfunction f, int attrib, int value);
    CUresult (*LaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shared_bytes, CUstream s, void **params, void **extra);
    /* optional (NULL where the driver predates CUDA 12): launches with attributes */
    CUresult (*LaunchKernelEx)(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
    /* optional (CUDA 12.0+): a tensor map for the tensor copy engine (caps.tma stays off without it) */
    CUresult (*TensorMapEncodeTiled)(CUtensorMap *map, int dtype, unsigned rank, void *addr,
                                     const unsigned long long *dims, const unsigned long long *strides,
                                     const unsigned *box, const unsigned *elem_strides, int interleave, int swizzle,
                                     int l2_promotion, int oob_fill);
    CUresult (*StreamCreate)(CUstream *s, unsigned flags);
    CUresult (*StreamDestroy)(CUstream s);
    CUresult (*StreamSynchronize)(CUstream s);
    CUresult (*StreamBeginCapture)(CUstream s, int mode);
    CUresult (*StreamEndCapture)(CUstream s, CUgraph *g);
    CUresult (*GraphInstantiateWithFlags)(CUgraphExec *e, CUgraph g, unsigned long long flags);
    CUresult (*GraphLaunch)(CUgraphExec e, CUstream s);
    /* optional (CUDA 11.1+; NULL without): a graph's upload ahead of its first launch */
    CUresult (*GraphUpload)(CUgraphExec e, CUstream s);
    CUresult (*GraphExecDestroy)(CUgraphExec e);
    CUresult (*GraphDestroy)(CUgraph g);
} cu_api;

/* Loads libcuda.so.1, resolves every entry point and calls cuInit(0), once per process
 * (later calls return the first outcome). The table, or NULL with err saying why: no
 * driver library, a symbol missing (a driver too old), or cuInit failing (no GPU). */
const cu_api *cu_load(kiln_err *err);

/* "CUDA_ERROR_OUT_OF_MEMORY" for r (or "CUresult N" when the driver does not know it). */
const char *cu_error_name(const cu_api *cu, CUresult r, char buf[32]);

#endif
