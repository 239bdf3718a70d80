#include "plan/measure.h"

#include "base/clock.h"
#include "base/error.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_LAUNCHES 32

/* How much work each measurement does: large enough on a GPU that launch overheads
 * vanish and the copy spills every cache; small on lavapipe, whose two cores would
 * otherwise take minutes. */
typedef struct sizes {
    uint64_t copy_bytes;
    uint32_t mm_rows, mm_cols, mm_tokens;
    uint32_t launches, reps; /* launches per recording, timed replays */
    uint32_t frag_iters;     /* rounds of kn_frag_rate */
} sizes;

/* Published peaks (memory bandwidth GB/s; dense bf16/f16 matrix GFLOP/s with f32
 * accumulators, no sparsity), matched on the device's name, most specific first. */
static const struct {
    const char *name;
    double gbps, gflops;
} peaks[] = {
    {"H200 NVL", 4800, 835000},   {"H200", 4800, 989000},       {"H100 NVL", 3900, 835000},
    {"H100 PCIe", 2000, 756000},  {"H100", 3350, 989000},       {"A100 80GB PCIe", 1935, 312000},
    {"A100-SXM4-80GB", 2039, 312000}, {"A100", 1555, 312000},   {"L40S", 864, 362000},
    {"L4", 300, 121000},          {"A10", 600, 125000},
};

void measure_peaks(const char *name, double *gbps, double *gflops) {
    *gbps = *gflops = 0;
    for (size_t i = 0; name && i < sizeof peaks / sizeof peaks[0]; i++)
        if (strstr(name, peaks[i].name)) {
            *gbps = peaks[i].gbps, *gflops = peaks[i].gflops;
            return;
        }
}

double measure_decode_floor(const measure_result *m, double bytes_per_token) {
    return m->bandwidth_gbps > 0 && bytes_per_token > 0 ? m->bandwidth_gbps * 1e9 / bytes_per_token : 0;
}

double measure_prefill_floor(const measure_result *m, uint32_t n, double bytes, double flops, const char **bound) {
    if (bound) *bound = "";
    if (!(m->peak_gflops > 0) || !(m->bandwidth_gbps > 0) || n == 0) return 0;
    double t_mem = bytes / (m->bandwidth_gbps * 1e9), t_math = flops / (m->peak_gflops * 1e9);
    if (bound) *bound = t_mem > t_math ? "memory" : "compute";
    double t = t_mem > t_math ? t_mem : t_math;
    return t > 0 ? n / t : 0;
}

static sizes pick_sizes(const rt_caps *c) {
    if (strstr(c->name, "llvmpipe")) return (sizes){16u << 20, 512, 512, 128, 4, 3, 64};
    sizes s = {256u << 20, 4096, 4096, 512, 20, 5, 8192};
    if (c->max_buffer_bytes && s.copy_bytes > c->max_buffer_bytes) s.copy_bytes = c->max_buffer_bytes / 16 * 16;
    if (c->memory_bytes && s.copy_bytes > c->memory_bytes / 8) s.copy_bytes = c->memory_bytes / 8 / 16 * 16;
    return s;
}

/* The 16-bit type the device has matrix units for (bf16 first); bf16 when it has none. */
static ir_scalar pick_dtype(const rt_caps *c) {
    bool f16 = false;
    for (uint32_t i = 0; i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        if (c->mma[i].acc_type != IR_F32) continue;
        if (c->mma[i].ab_type == IR_BF16) return IR_BF16;
        f16 |= c->mma[i].ab_type == IR_F16;
    }
    return f16 ? IR_F16 : IR_BF16;
}

/* Seconds per launch of l: recorded `launches` times over, replayed once to warm up, then
 * the fastest of `reps` replays. */
static int time_launch(rt_device *d, const rt_launch *l, const sizes *s, double *sec, kiln_err *err) {
    rt_launch ls[MAX_LAUNCHES];
    for (uint32_t i = 0; i < s->launches; i++) ls[i] = *l;
    rt_recording *rec = d->ops->record(d, ls, s->launches, err);
    if (!rec) return -1;
    int rc = d->ops->replay(d, rec, err);
    double best = INFINITY;
    for (uint32_t i = 0; i < s->reps && rc == 0; i++) {
        double t0 = clock_now_s();
        rc = d->ops->replay(d, rec, err);
        double t = clock_now_s() - t0;
        if (t < best) best = t;
    }
    d->ops->release_recording(d, rec);
    *sec = best / s->launches;
    return rc;
}

/* Compiles a built kernel (NULL: the builder failed, its message in err). */
static rt_kernel *compile(rt_device *d, ir_kernel *k, kiln_err *err) {
    if (!k) return NULL;
    rt_kernel *ck = d->ops->compile(d, k, NULL, err);
    ir_kernel_destroy(k);
    return ck;
}

static int measure_copy(rt_device *d, const sizes *s, measure_result *r, kiln_err *err) {
    uint32_t gx = 0;
    rt_kernel *ck = compile(d, kn_copy(&d->caps, (uint32_t)(s->copy_bytes / 4), &gx, err), err);
    rt_buffer *src = ck ? d->ops->alloc(d, s->copy_bytes, err) : NULL;
    rt_buffer *dst = src ? d->ops->alloc(d, s->copy_bytes, err) : NULL;
    int rc = -1;
    if (dst) {
        rt_arg args[2] = {{src, 0}, {dst, 0}};
        rt_launch l = {ck, {gx, 1, 1}, args, 2};
        double sec;
        if ((rc = time_launch(d, &l, s, &sec, err)) == 0)
            r->bandwidth_gbps = 2.0 * (double)s->copy_bytes / sec * 1e-9;
        r->copy_bytes = s->copy_bytes;
    }
    if (dst) d->ops->release(d, dst);
    if (src) d->ops->release(d, src);
    if (ck) d->ops->release_kernel(d, ck);
    return rc;
}

/* A device buffer of n 16-bit ones: real numbers, so no path slows on NaN or subnormals. */
static rt_buffer *ones16(rt_device *d, ir_scalar dt, size_t n, kiln_err *err) {
    uint16_t *h = malloc(n * 2);
    if (!h) {
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory (%zu bytes)", n * 2);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) h[i] = dt == IR_BF16 ? 0x3f80 : 0x3c00;
    rt_buffer *b = d->ops->alloc(d, n * 2, err);
    if (b && d->ops->upload(d, b, 0, h, n * 2, err)) {
        d->ops->release(d, b);
        b = NULL;
    }
    free(h);
    return b;
}

static int measure_matmul(rt_device *d, const sizes *s, measure_result *r, kiln_err *err) {
    ir_scalar dt = pick_dtype(&d->caps);
    uint32_t groups[2] = {0, 0};
    uint32_t rows = s->mm_rows, cols = s->mm_cols, tok = s->mm_tokens;
    bool wgmma = d->caps.wgmma;
    rt_kernel *ck = compile(d, kn_matmul(&d->caps, rows, cols, tok, dt, KN_EPI_NONE, groups, err), err);
    if (!ck && wgmma && !d->caps.wgmma && err && err->code == KILN_ERR_UNSUPPORTED) {
        /* the device gave up wgmma for this refusal (rt_device's fallback): the next variant */
        kiln_err_clear(err);
        ck = compile(d, kn_matmul(&d->caps, rows, cols, tok, dt, KN_EPI_NONE, groups, err), err);
    }
    rt_buffer *w = ck ? ones16(d, dt, (size_t)rows * cols, err) : NULL;
    rt_buffer *x = w ? ones16(d, dt, (size_t)tok * cols, err) : NULL;
    rt_buffer *y = x ? d->ops->alloc(d, (size_t)tok * rows * 2, err) : NULL;
    rt_buffer *info = y ? d->ops->alloc(d, 2 * sizeof(uint32_t), err) : NULL;
    const uint32_t info_h[2] = {0, tok};
    int rc = -1;
    if (info && d->ops->upload(d, info, 0, info_h, sizeof info_h, err) == 0) {
        rt_arg args[4] = {{w, 0}, {x, 0}, {y, 0}, {info, 0}};
        rt_launch l = {ck, {groups[0], groups[1], 1}, args, 4};
        double sec;
        if ((rc = time_launch(d, &l, s, &sec, err)) == 0)
            r->matmul_gflops = 2.0 * rows * cols * (double)tok / sec * 1e-9;
        r->mm_rows = rows, r->mm_cols = cols, r->mm_tokens = tok;
        r->mm_dtype = dt == IR_BF16 ? "bf16" : "f16";
    }
    rt_buffer *bufs[4] = {info, y, x, w};
    for (int i = 0; i < 4; i++)
        if (bufs[i]) d->ops->release(d, bufs[i]);
    if (ck) d->ops->release_kernel(d, ck);
    return rc;
}

/* The fragments' rate (kn_frag_rate), where the device has matrix units: 4 workgroups a
 * compute unit, iterations enough for milliseconds a launch at a petaflop. */
static int measure_frags(rt_device *d, const sizes *s, measure_result *r, kiln_err *err) {
    ir_scalar dt = pick_dtype(&d->caps);
    const rt_mma_shape *sh = kn_frag_rate_shape(&d->caps, dt);
    if (!sh) return 0;
    uint32_t groups = 4 * (d->caps.compute_units ? d->caps.compute_units : 64), iters = s->frag_iters;
    double flops = 0;
    rt_kernel *ck = compile(d, kn_frag_rate(&d->caps, dt, iters, groups, &flops, err), err);
    uint32_t n_ones = sh->m * sh->k > sh->k * sh->n ? sh->m * sh->k : sh->k * sh->n;
    rt_buffer *ones = ck ? ones16(d, dt, n_ones, err) : NULL;
    rt_buffer *out = ones ? d->ops->alloc(d, (size_t)groups * KN_FRAG_RATE_FRAGS * sh->m * sh->n * 4, err) : NULL;
    int rc = -1;
    if (out) {
        rt_arg args[2] = {{ones, 0}, {out, 0}};
        rt_launch l = {ck, {groups, 1, 1}, args, 2};
        double sec;
        if ((rc = time_launch(d, &l, s, &sec, err)) == 0) r->frag_gflops = flops / sec * 1e-9;
        r->frag_m = sh->m, r->frag_n = sh->n, r->frag_k = sh->k;
    }
    if (out) d->ops->release(d, out);
    if (ones) d->ops->release(d, ones);
    if (ck) d->ops->release_kernel(d, ck);
    return rc;
}

int measure_device(rt_device *d, measure_result *r, kiln_err *err) {
    memset(r, 0, sizeof *r);
    sizes s = pick_sizes(&d->caps);
    measure_peaks(d->caps.name, &r->peak_bandwidth_gbps, &r->peak_gflops);
    kiln_err msg = {0};
    if (measure_copy(d, &s, r, &msg)) {
        kiln_err_wrap(err, &msg, "%s: copy", d->label);
        return -1;
    }
    if (measure_matmul(d, &s, r, &msg)) {
        kiln_err_wrap(err, &msg, "%s: matmul", d->label);
        return -1;
    }
    if (measure_frags(d, &s, r, &msg)) {
        kiln_err_wrap(err, &msg, "%s: fragments", d->label);
        return -1;
    }
    return 0;
}
