/* CUDA implementation of runtime/device.h through the driver API (cuda_api.h). The
 * device's primary context (shared with anything else in the process that uses the same
 * GPU) and one non-blocking stream carry all work: copies, launches, and graph replays are
 * issued on that stream and waited for, so every call is synchronous to its caller and
 * each launch sees the previous one's writes. A kernel is a module JIT-compiled by the
 * driver from ptx_emit's PTX; a recording is a CUDA graph captured from the stream.
 * Host buffers are pinned host memory mapped into the device (cuMemHostAlloc with
 * DEVICEMAP|PORTABLE; kernels get cuMemHostGetDevicePointer's address, which equals the
 * host pointer under unified addressing but need not), so their copies are memcpy. */
#include "backend-ptx/cuda_device.h"

#include "backend-ptx/cuda_api.h"
#include "backend-ptx/cuda_probe.h"
#include "backend-ptx/ptx_emit.h"
#include "base/error.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU_MAX_PARAMS 64

/* Every object the device hands out is on one of its lists, so destroy frees leftovers. */
typedef struct cu_node {
    struct cu_node *prev, *next;
} cu_node;

typedef struct cu_dev {
    rt_device base;
    const cu_api *cu;
    CUdevice dev;
    CUcontext ctx; /* the retained primary context; NULL until retained */
    CUstream stream;
    cu_node buffers, kernels, recordings;
    uint64_t held; /* bytes of device memory kiln's buffers hold (views and host memory not counted) */
} cu_dev;

struct rt_buffer {
    cu_node node;
    CUdeviceptr ptr; /* what kernels get */
    void *host;      /* host buffers: the mapped pinned memory */
    size_t size;
    bool view;       /* a view of another buffer's memory: nothing of its own to free */
};

struct rt_kernel {
    cu_node node;
    CUmodule module;
    CUfunction fn;
    uint32_t block[3];
    uint32_t dynamic_shared; /* bytes each launch asks for (ptx_dynamic_shared_bytes) */
    bool grid_dep;           /* emitted with griddepcontrol (caps.grid_dep): launched so it may overlap */
    uint32_t cluster;        /* workgroups a cluster along x (ir_cluster; 1: none) */
    uint32_t n_params;
    bool is_buffer[CU_MAX_PARAMS];
    /* its tensor maps (ir_tensor_map), encoded per launch for the buffer bound to buf_param
     * and passed after the IR's parameters */
    uint32_t n_maps;
    struct {
        uint32_t buf_param, inner, outer, box_inner, box_outer;
        int dtype;
    } map[8];
};

struct rt_recording {
    cu_node node;
    CUgraphExec exec; /* NULL when no launch was recorded */
};

static void list_init(cu_node *head) { head->prev = head->next = head; }

static void list_add(cu_node *head, cu_node *n) {
    n->prev = head->prev, n->next = head;
    head->prev->next = n, head->prev = n;
}

static void list_del(cu_node *n) {
    n->prev->next = n->next, n->next->prev = n->prev;
    n->prev = n->next = n;
}

/* "cuda:N: <call>: <error name>" into err; -1. */
static int cu_fail(const cu_dev *d, kiln_err *err, const char *call, CUresult r) {
    char buf[32];
    /* out of memory is the caller's to handle (an expert cache takes fewer slots), not a broken device */
    kiln_fail(err, r == CUDA_ERROR_OUT_OF_MEMORY ? KILN_ERR_NOMEM : KILN_ERR_DEVICE, "%s: %s: %s", d->base.label, call,
              cu_error_name(d->cu, r, buf));
    return -1;
}

/* Appends " (...)" detail to a message already in err. */
static void append(kiln_err *err, const char *detail) {
    if (!err) return;
    size_t n = strnlen(err->msg, sizeof err->msg);
    if (n + 1 < sizeof err->msg) snprintf(err->msg + n, sizeof err->msg - n, " (%s)", detail);
}

/* Makes the device's context current on the calling thread: each entry point does, so
 * devices (and threads) can be mixed freely. */
static int bind(const cu_dev *d, kiln_err *err) {
    CUresult r = d->cu->CtxSetCurrent(d->ctx);
    return r ? cu_fail(d, err, "cuCtxSetCurrent", r) : 0;
}

/* ---- memory ------------------------------------------------------------------------ */

static rt_buffer *alloc_buffer(cu_dev *d, size_t bytes, bool host, kiln_err *err) {
    if (bind(d, err)) return NULL;
    rt_buffer *b = calloc(1, sizeof *b);
    if (!b) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), NULL;
    size_t n = bytes ? bytes : 4; /* the driver refuses empty allocations */
    char size[96];
    snprintf(size, sizeof size, "%zu bytes", bytes);
    CUresult r;
    if (host) {
        r = d->cu->MemHostAlloc(&b->host, n, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
        if (r) {
            cu_fail(d, err, "cuMemHostAlloc", r), append(err, size), free(b);
            return NULL;
        }
        if ((r = d->cu->MemHostGetDevicePointer(&b->ptr, b->host, 0))) {
            cu_fail(d, err, "cuMemHostGetDevicePointer", r);
            d->cu->MemFreeHost(b->host), free(b);
            return NULL;
        }
    } else if ((r = d->cu->MemAlloc(&b->ptr, n))) {
        /* what a refusal needs to be understood: kiln's own share and the driver's count */
        size_t fr = 0, total = 0;
        if (r == CUDA_ERROR_OUT_OF_MEMORY && d->cu->MemGetInfo(&fr, &total) == CUDA_SUCCESS)
            snprintf(size, sizeof size, "%zu bytes; kiln holds %llu MiB, %zu MiB free", bytes,
                     (unsigned long long)(d->held >> 20), fr >> 20);
        cu_fail(d, err, "cuMemAlloc", r), append(err, size), free(b);
        return NULL;
    } else {
        d->held += n;
    }
    b->size = bytes;
    list_add(&d->buffers, &b->node);
    return b;
}

static rt_buffer *cu_alloc(rt_device *base, size_t bytes, kiln_err *err) {
    return alloc_buffer((cu_dev *)base, bytes, false, err);
}

static rt_buffer *cu_alloc_host(rt_device *base, size_t bytes, kiln_err *err) {
    return alloc_buffer((cu_dev *)base, bytes, true, err);
}

static rt_buffer *cu_view(rt_device *base, rt_buffer *parent, size_t off, size_t bytes, kiln_err *err) {
    cu_dev *d = (cu_dev *)base;
    if (rt_check_view(parent->size, off, bytes, err)) return NULL;
    rt_buffer *b = calloc(1, sizeof *b);
    if (!b) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), NULL;
    *b = (rt_buffer){.ptr = parent->ptr + off, .host = parent->host ? (char *)parent->host + off : NULL,
                     .size = bytes, .view = true};
    list_add(&d->buffers, &b->node);
    return b;
}

static void free_buffer(cu_dev *d, rt_buffer *b) {
    if (!b->view) {
        if (b->host) d->cu->MemFreeHost(b->host);
        else d->cu->MemFree(b->ptr), d->held -= b->size ? b->size : 4;
    }
    list_del(&b->node);
    free(b);
}

static size_t cu_size(rt_device *base, const rt_buffer *b) {
    (void)base;
    return b->size;
}

/* The device's free bytes now, as the driver counts them (every process's allocations). */
static int cu_free_memory(rt_device *base, uint64_t *free_bytes) {
    cu_dev *d = (cu_dev *)base;
    size_t fr = 0, total = 0;
    if (d->cu->CtxSetCurrent(d->ctx) != CUDA_SUCCESS || d->cu->MemGetInfo(&fr, &total) != CUDA_SUCCESS) return -1;
    *free_bytes = fr;
    return 0;
}

static void cu_release(rt_device *base, rt_buffer *b) {
    cu_dev *d = (cu_dev *)base;
    kiln_err err = {0};
    if (!b) return;
    bind(d, &err);
    free_buffer(d, b);
}

static int check_range(const rt_buffer *b, size_t off, size_t n, kiln_err *err) {
    if (off > b->size || n > b->size - off) {
        kiln_fail(err, KILN_ERR_INVALID, "copy of %zu bytes at %zu is outside a %zu-byte buffer", n, off, b->size);
        return -1;
    }
    return 0;
}

/* Waits for the stream; -1 with err naming the call when it (or work on it) failed. */
static int sync_stream(cu_dev *d, kiln_err *err) {
    CUresult r = d->cu->StreamSynchronize(d->stream);
    return r ? cu_fail(d, err, "cuStreamSynchronize", r) : 0;
}

/* Copies go on the device's stream and are waited for: ordered after every launch and
 * synchronous to the caller, without the legacy stream's implicit ordering. */
static int cu_upload(rt_device *base, rt_buffer *b, size_t off, const void *src, size_t n, kiln_err *err) {
    cu_dev *d = (cu_dev *)base;
    if (check_range(b, off, n, err)) return -1;
    if (!n) return 0;
    if (b->host) return memcpy((char *)b->host + off, src, n), 0; /* no launch is in flight: calls wait */
    if (bind(d, err)) return -1;
    CUresult r = d->cu->MemcpyHtoDAsync(b->ptr + off, src, n, d->stream);
    if (r) return cu_fail(d, err, "cuMemcpyHtoDAsync", r);
    return sync_stream(d, err);
}

static int cu_download(rt_device *base, rt_buffer *b, size_t off, void *dst, size_t n, kiln_err *err) {
    cu_dev *d = (cu_dev *)base;
    if (check_range(b, off, n, err)) return -1;
    if (!n) return 0;
    if (b->host) return memcpy(dst, (char *)b->host + off, n), 0;
    if (bind(d, err)) return -1;
    CUresult r = d->cu->MemcpyDtoHAsync(dst, b->ptr + off, n, d->stream);
    if (r) return cu_fail(d, err, "cuMemcpyDtoHAsync", r);
    return sync_stream(d, err);
}

/* ---- kernels ----------------------------------------------------------------------- */

static void free_kernel(cu_dev *d, rt_kernel *k) {
    if (k->module) d->cu->ModuleUnload(k->module);
    list_del(&k->node);
    free(k);
}

static void cu_release_kernel(rt_device *base, rt_kernel *k) {
    cu_dev *d = (cu_dev *)base;
    kiln_err err = {0};
    if (!k) return;
    bind(d, &err);
    free_kernel(d, k);
}

/* The one `.entry` name in the PTX (LLVM may rewrite characters PTX does not allow in
 * identifiers, so the IR's name is only the fallback). */
static void entry_name(const char *ptx, const char *fallback, char *out, size_t cap) {
    const char *e = strstr(ptx, ".entry ");
    size_t n = 0;
    if (e) {
        e += 7;
        while (*e == ' ' || *e == '\t') e++;
        n = strcspn(e, "( \t\r\n");
    }
    if (!n || n >= cap) snprintf(out, cap, "%s", fallback);
    else memcpy(out, e, n), out[n] = '\0';
}

/* One line of the JIT's log: newlines become "; ", trailing space goes. */
static void flatten(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\r')) s[--n] = '\0';
    for (char *p = s; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

static rt_kernel *cu_compile(rt_device *base, const ir_kernel *ir, const double *spec_values, kiln_err *err) {
    cu_dev *d = (cu_dev *)base;
    /* ptx_emit folds spec constants to their defaults; other values need ir_specialize
     * on the kernel before compiling, which a const kernel cannot get here */
    for (uint32_t i = 0; spec_values && i < ir_n_specs(ir); i++) {
        const ir_spec *s = ir_spec_at(ir, i);
        if (spec_values[i] != s->dflt) {
            kiln_fail(err, KILN_ERR_UNSUPPORTED,
                      "%s: kernel '%s': spec constant '%s' = %g: the CUDA backend takes defaults only "
                      "(ir_specialize the kernel first)",
                      base->label, ir_kernel_name(ir), s->name, spec_values[i]);
            return NULL;
        }
    }
    uint32_t np = ir_n_params(ir);
    if (np > CU_MAX_PARAMS) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "%s: kernel '%s' has %u parameters (at most %d)", base->label,
                  ir_kernel_name(ir), np, CU_MAX_PARAMS);
        return NULL;
    }
    char *ptx = NULL;
    if (ptx_emit_cached(ir, &base->caps, &ptx, NULL, err)) return NULL;
    if (bind(d, err)) return free(ptx), NULL;
    rt_kernel *k = calloc(1, sizeof *k);
    if (!k) return free(ptx), kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), NULL;
    list_add(&d->kernels, &k->node);
    char log[2048] = "", info[2048] = "", name[256];
    int opts[4] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
                   CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
    void *vals[4] = {log, (void *)(uintptr_t)sizeof log, info, (void *)(uintptr_t)sizeof info};
    CUresult r = d->cu->ModuleLoadDataEx(&k->module, ptx, 4, opts, vals);
    if (r) {
        char what[300];
        snprintf(what, sizeof what, "cuModuleLoadDataEx of kernel '%s'", ir_kernel_name(ir));
        cu_fail(d, err, what, r);
        log[sizeof log - 1] = '\0';
        flatten(log);
        if (log[0]) append(err, log);
        goto fail;
    }
    /* ptxas warnings that it serialized wgmma (C7510, C7511, C7515): the variant would run
     * slowly, so it is refused and the device drops wgmma from its caps (rt_device's
     * fallback says so); the caller builds the kernel again */
    info[sizeof info - 1] = '\0';
    if (strstr(info, "C7510") || strstr(info, "C7511") || strstr(info, "C7515")) {
        flatten(info);
        kiln_fail(err, KILN_ERR_UNSUPPORTED,
                  "%s: kernel '%s': the JIT serialized its wgmma (slow; --caps no-wgmma builds without): %s",
                  base->label, ir_kernel_name(ir), info);
        if (base->caps.wgmma) {
            base->caps.wgmma = false;
            snprintf(base->fallback, sizeof base->fallback, "no wgmma: the JIT serialized it in kernel '%s'",
                     ir_kernel_name(ir));
        }
        goto fail;
    }
    entry_name(ptx, ir_kernel_name(ir), name, sizeof name);
    if ((r = d->cu->ModuleGetFunction(&k->fn, k->module, name))) {
        char what[300];
        snprintf(what, sizeof what, "cuModuleGetFunction '%s'", name);
        cu_fail(d, err, what, r);
        goto fail;
    }
    k->grid_dep = ptx_uses_grid_dep(&base->caps);
    /* past 48 KiB the function must be allowed its dynamic shared memory first */
    k->dynamic_shared = ptx_dynamic_shared_bytes(ir);
    if (k->dynamic_shared &&
        (r = d->cu->FuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)k->dynamic_shared))) {
        char what[340];
        snprintf(what, sizeof what, "cuFuncSetAttribute '%s' (%u bytes of dynamic shared memory)", name,
                 k->dynamic_shared);
        cu_fail(d, err, what, r);
        goto fail;
    }
    ir_val spec;
    ir_workgroup(ir, k->block, &spec); /* a spec workgroup size has its default, as emitted */
    k->n_params = np;
    for (uint32_t i = 0; i < np; i++) k->is_buffer[i] = ir_param_at(ir, i)->is_buffer;
    k->cluster = ir_cluster(ir);
    k->n_maps = ir_n_tensor_maps(ir) < 8 ? ir_n_tensor_maps(ir) : 8;
    for (uint32_t i = 0; i < k->n_maps; i++) {
        const ir_tensor_map_decl *m = ir_tensor_map_at(ir, i);
        uint32_t bp = ir_buffer_param(ir, m->buf);
        k->map[i].buf_param = bp, k->map[i].inner = m->inner, k->map[i].outer = m->outer;
        k->map[i].box_inner = m->box_inner, k->map[i].box_outer = m->box_outer;
        k->map[i].dtype = ir_param_at(ir, bp)->elem == IR_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    }
    free(ptx);
    return k;
fail:
    free(ptx);
    free_kernel(d, k);
    return NULL;
}

/* ---- launches ------------------------------------------------------------------------ */

static int check_launch(const rt_launch *l, kiln_err *err) {
    if (!l->kernel) return kiln_fail(err, KILN_ERR_INVALID, "launch without a kernel"), -1;
    return rt_check_launch(l, l->kernel->n_params, l->kernel->is_buffer, err);
}

/* Tensor map i of k for the buffer at ptr: rows of inner 16-bit elements, boxes in the
 * 128-byte swizzle (ir.h's ir_tensor_map). */
static int encode_map(cu_dev *d, const rt_kernel *k, uint32_t i, CUdeviceptr ptr, CUtensorMap *out, kiln_err *err) {
    unsigned long long dims[2] = {k->map[i].inner, k->map[i].outer}, stride = 2ull * k->map[i].inner;
    unsigned box[2] = {k->map[i].box_inner, k->map[i].box_outer}, es[2] = {1, 1};
    CUresult r = d->cu->TensorMapEncodeTiled(out, k->map[i].dtype, 2, (void *)(uintptr_t)ptr, dims, &stride, box, es,
                                             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (!r) return 0;
    cu_fail(d, err, "cuTensorMapEncodeTiled", r);
    char what[96];
    snprintf(what, sizeof what, "%u x %u in boxes of %u x %u", k->map[i].outer, k->map[i].inner, box[1], box[0]);
    append(err, what);
    return -1;
}

/* Issues the launches on the stream: buffers as device pointers, scalars as their 32
 * bits, in parameter order, then the tensor maps (the driver copies the values at the
 * call). A launch with no workgroups does nothing, as a Vulkan dispatch of zero groups.
 * *issued counts them. */
static int enqueue(cu_dev *d, const rt_launch *l, uint32_t n, uint32_t *issued, kiln_err *err) {
    *issued = 0;
    for (uint32_t i = 0; i < n; i++) {
        const rt_kernel *k = l[i].kernel;
        const uint32_t *g = l[i].groups;
        if (!g[0] || !g[1] || !g[2]) continue;
        CUdeviceptr ptrs[CU_MAX_PARAMS];
        uint32_t bits[CU_MAX_PARAMS];
        void *params[CU_MAX_PARAMS + 8];
        CUtensorMap maps[8];
        for (uint32_t a = 0; a < l[i].n_args; a++) {
            if (k->is_buffer[a]) ptrs[a] = l[i].args[a].buf->ptr, params[a] = &ptrs[a];
            else bits[a] = l[i].args[a].bits, params[a] = &bits[a];
        }
        for (uint32_t m = 0; m < k->n_maps; m++) {
            if (encode_map(d, k, m, ptrs[k->map[m].buf_param], &maps[m], err)) return -1;
            params[l[i].n_args + m] = &maps[m];
        }
        if (k->cluster > 1 && g[0] % k->cluster)
            return kiln_fail(err, KILN_ERR_INVALID, "%s: a grid of %u workgroups along x in clusters of %u",
                             d->base.label, g[0], k->cluster);
        CUresult r;
        if (k->grid_dep || k->cluster > 1) { /* its prologue waits for the kernel before it (ptx_emit.c) */
            CUlaunchAttribute a[2] = {{.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, .value.u32 = 1}};
            unsigned na = k->grid_dep ? 1 : 0;
            if (k->cluster > 1) {
                unsigned dim[3] = {k->cluster, 1, 1};
                a[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
                memcpy(a[na].value.bytes, dim, sizeof dim);
                na++;
            }
            CUlaunchConfig cfg = {g[0], g[1], g[2], k->block[0], k->block[1], k->block[2], k->dynamic_shared,
                                  d->stream, a, na};
            r = d->cu->LaunchKernelEx(&cfg, k->fn, l[i].n_args + k->n_maps ? params : NULL, NULL);
        } else {
            r = d->cu->LaunchKernel(k->fn, g[0], g[1], g[2], k->block[0], k->block[1], k->block[2],
                                    k->dynamic_shared, d->stream, l[i].n_args + k->n_maps ? params : NULL, NULL);
        }
        if (r) {
            char what[64];
            snprintf(what, sizeof what, "cuLaunchKernel (launch %u)", i);
            return cu_fail(d, err, what, r);
        }
        ++*issued;
    }
    return 0;
}

static int cu_run(rt_device *base, const rt_launch *l, uint32_t n, kiln_err *err) {
    cu_dev *d = (cu_dev *)base;
    for (uint32_t i = 0; i < n; i++)
        if (check_launch(&l[i], err)) return -1;
    if (bind(d, err)) return -1;
    uint32_t issued;
    if (enqueue(d, l, n, &issued, err)) {
        d->cu->StreamSynchronize(d->stream); /* leave the stream idle for the next call */
        return -1;
    }
    return sync_stream(d, err);
}

static void free_recording(cu_dev *d, rt_recording *r) {
    if (r->exec) d->cu->GraphExecDestroy(r->exec);
    list_del(&r->node);
    free(r);
}

static void cu_release_recording(rt_device *base, rt_recording *r) {
    cu_dev *d = (cu_dev *)base;
    kiln_err err = {0};
    if (!r) return;
    bind(d, &err);
    free_recording(d, r);
}

/* The launches captured from the stream into a graph, instantiated once; the graph itself
 * is not kept (the executable graph holds its own copy). */
static rt_recording *cu_record(rt_device *base, const rt_launch *l, uint32_t n, kiln_err *err) {
    cu_dev *d = (cu_dev *)base;
    for (uint32_t i = 0; i < n; i++)
        if (check_launch(&l[i], err)) return NULL;
    if (bind(d, err)) return NULL;
    rt_recording *rec = calloc(1, sizeof *rec);
    if (!rec) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), NULL;
    list_add(&d->recordings, &rec->node);
    /* thread-local mode: another thread's unrelated driver calls do not end this capture */
    CUresult r = d->cu->StreamBeginCapture(d->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (r) {
        cu_fail(d, err, "cuStreamBeginCapture", r);
        goto fail;
    }
    uint32_t issued = 0;
    int rc = enqueue(d, l, n, &issued, err);
    CUgraph graph = NULL;
    r = d->cu->StreamEndCapture(d->stream, &graph); /* always: the stream must leave capture mode */
    if (rc || r) {
        if (!rc) cu_fail(d, err, "cuStreamEndCapture", r);
        if (graph) d->cu->GraphDestroy(graph);
        goto fail;
    }
    if (issued) r = d->cu->GraphInstantiateWithFlags(&rec->exec, graph, 0);
    d->cu->GraphDestroy(graph);
    if (r) {
        rec->exec = NULL;
        cu_fail(d, err, "cuGraphInstantiateWithFlags", r);
        goto fail;
    }
    /* uploaded now, not at its first replay: a server's slot that has not yet served a
     * request would otherwise pay it in that request's first token (a hint: the first
     * replay uploads it where this fails) */
    if (rec->exec && d->cu->GraphUpload) d->cu->GraphUpload(rec->exec, d->stream);
    return rec;
fail:
    free_recording(d, rec);
    return NULL;
}

static int cu_replay(rt_device *base, rt_recording *rec, kiln_err *err) {
    cu_dev *d = (cu_dev *)base;
    if (!rec) return kiln_fail(err, KILN_ERR_INVALID, "replay of no recording"), -1;
    if (!rec->exec) return 0;
    if (bind(d, err)) return -1;
    CUresult r = d->cu->GraphLaunch(rec->exec, d->stream);
    if (r) return cu_fail(d, err, "cuGraphLaunch", r);
    return sync_stream(d, err);
}

/* ---- the device ------------------------------------------------------------------------ */

static void cu_destroy(rt_device *base) {
    cu_dev *d = (cu_dev *)base;
    if (!d) return;
    if (d->ctx) {
        d->cu->CtxSetCurrent(d->ctx);
        if (d->stream) d->cu->StreamSynchronize(d->stream);
        while (d->recordings.next != &d->recordings) free_recording(d, (rt_recording *)d->recordings.next);
        while (d->kernels.next != &d->kernels) free_kernel(d, (rt_kernel *)d->kernels.next);
        while (d->buffers.next != &d->buffers) free_buffer(d, (rt_buffer *)d->buffers.next);
        if (d->stream) d->cu->StreamDestroy(d->stream);
        d->cu->CtxSetCurrent(NULL);
        d->cu->DevicePrimaryCtxRelease(d->dev);
    }
    free(d);
}

static const rt_device_ops cu_ops = {
    .alloc = cu_alloc, .alloc_host = cu_alloc_host, .view = cu_view, .release = cu_release, .size = cu_size,
    .upload = cu_upload, .download = cu_download, .compile = cu_compile, .release_kernel = cu_release_kernel,
    .run = cu_run, .record = cu_record, .replay = cu_replay, .release_recording = cu_release_recording,
    .free_memory = cu_free_memory, .destroy = cu_destroy};

rt_device *cuda_device_open(uint32_t index, const char *caps_override, kiln_err *err) {
    cu_dev *d = calloc(1, sizeof *d);
    rt_caps *all = calloc((size_t)index + 1, sizeof *all);
    if (!d || !all) return free(d), free(all), kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), NULL;
    d->base.ops = &cu_ops;
    list_init(&d->buffers), list_init(&d->kernels), list_init(&d->recordings);
    snprintf(d->base.label, sizeof d->base.label, "cuda:%u", index);
    /* The primary context (not cuCtxCreate, which CUDA 13 remaps to _v4's signature) is
     * retained before the probe, whose free-memory query would otherwise create and
     * destroy it once more. */
    int count = 0;
    if ((d->cu = cu_load(NULL)) && d->cu->DeviceGetCount(&count) == CUDA_SUCCESS && index < (uint32_t)count &&
        d->cu->DeviceGet(&d->dev, (int)index) == CUDA_SUCCESS) {
        CUresult r = d->cu->DevicePrimaryCtxRetain(&d->ctx, d->dev);
        if (r) {
            d->ctx = NULL;
            cu_fail(d, err, "cuDevicePrimaryCtxRetain", r);
            goto fail;
        }
    }
    uint32_t n = 0;
    kiln_err note = {0};
    if (cuda_probe_devices(all, index + 1, &n, &note) || index >= n || !d->ctx) {
        kiln_fail(err, KILN_ERR_UNAVAILABLE, "no CUDA device cuda:%u (%u found)%s%s", index, n, note.msg[0] ? ": " : "",
                  note.msg);
        goto fail;
    }
    d->base.caps = all[index];
    if (caps_override && rt_caps_override(&d->base.caps, caps_override, err)) goto fail;
    rt_debug_from_list(&d->base.debug, caps_override);
    if (bind(d, err)) goto fail;
    CUresult r = d->cu->StreamCreate(&d->stream, CU_STREAM_NON_BLOCKING);
    if (r) {
        d->stream = NULL;
        cu_fail(d, err, "cuStreamCreate", r);
        goto fail;
    }
    free(all);
    return &d->base;
fail:
    free(all);
    cu_destroy(&d->base);
    return NULL;
}
