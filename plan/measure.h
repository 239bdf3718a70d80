/* What bounds a device (docs/ARCHITECTURE.md, performance method): the memory bandwidth
 * kiln measures with a large copy (kn_copy), the chip's published dense 16-bit matrix
 * peak from a table of known devices, and, beside them, the rate kiln's own prefill
 * product (kn_matmul) reaches: a kernel rate, reported, never a floor's denominator.
 * Shared by `kiln probe --measure` and `kiln bench`. */
#ifndef KILN_PLAN_MEASURE_H
#define KILN_PLAN_MEASURE_H

#include "base/error.h"
#include "runtime/device.h"

#include <stddef.h>
#include <stdint.h>

typedef struct measure_result {
    double bandwidth_gbps;      /* (bytes read + bytes written) / s, in 1e9 bytes */
    double matmul_gflops;       /* kiln's product kernel: 2 * rows * cols * tokens / s, in 1e9 */
    double peak_bandwidth_gbps; /* the device's published peaks, where kiln knows them; 0: unknown */
    double peak_gflops;         /* dense 16-bit matrix rate (bf16/f16 in, f32 accumulators) */
    uint64_t copy_bytes;        /* bytes of the copy's source (and of its destination) */
    uint32_t mm_rows, mm_cols, mm_tokens;
    const char *mm_dtype;       /* "bf16" or "f16": the one with matrix units, bf16 first */
    double frag_gflops;         /* kiln's fragments alone (kn_frag_rate); 0: no matrix units */
    uint32_t frag_m, frag_n, frag_k;
} measure_result;

/* Measures d (sizes scaled down on lavapipe, a CPU, so it takes seconds). 0, or -1 with
 * err (a kernel that does not build or compile, memory the device lacks). */
int measure_device(rt_device *d, measure_result *r, kiln_err *err);
/* The published peaks of the device named name (its caps' name); both 0 when kiln does not
 * know it. */
void measure_peaks(const char *name, double *gbps, double *gflops);

/* The floors `kiln bench` divides by: tokens/s no engine could pass on the device.
 *   decode:  bandwidth / bytes read per token;
 *   prefill: n / max(bytes / bandwidth, flops / peak) for n tokens that read bytes and do
 *            flops; 0 (unknown) when the peak is, never kiln's own kernel rate. *bound
 *            (may be NULL) says which term set it: "memory" or "compute" ("" unknown). */
double measure_decode_floor(const measure_result *m, double bytes_per_token);
double measure_prefill_floor(const measure_result *m, uint32_t n, double bytes, double flops, const char **bound);

#endif
