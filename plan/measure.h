/* The rates a GPU device reaches with kiln's own kernels, the denominators of `kiln
 * bench`'s floors (docs/ARCHITECTURE.md, performance method): memory bandwidth from a large copy
 * (kn_copy) and the matrix rate of the prefill product (kn_matmul), each timed over
 * replays of a recording. Shared by `kiln probe --measure` and `kiln bench`. */
#ifndef KILN_PLAN_MEASURE_H
#define KILN_PLAN_MEASURE_H

#include "base/error.h"
#include "runtime/device.h"

#include <stddef.h>
#include <stdint.h>

typedef struct measure_result {
    double bandwidth_gbps;      /* (bytes read + bytes written) / s, in 1e9 bytes */
    double matmul_gflops;       /* 2 * rows * cols * tokens / s, in 1e9 */
    double peak_bandwidth_gbps; /* the device's published peaks, where kiln knows them; 0: unknown */
    double peak_gflops;         /* dense 16-bit matrix rate */
    uint64_t copy_bytes;        /* bytes of the copy's source (and of its destination) */
    uint32_t mm_rows, mm_cols, mm_tokens;
    const char *mm_dtype;       /* "bf16" or "f16": the one with matrix units, bf16 first */
} measure_result;

/* Measures d (sizes scaled down on lavapipe, a CPU, so it takes seconds). 0, or -1 with
 * err (a kernel that does not build or compile, memory the device lacks). */
int measure_device(rt_device *d, measure_result *r, kiln_err *err);

#endif
