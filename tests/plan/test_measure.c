/* The floors `kiln bench` divides by: the chip's published peaks, the larger of the
 * memory and compute terms for prefill, nothing when the peak is unknown, and never kiln's
 * own kernel rate. */
#include "plan/measure.h"

#include <criterion/criterion.h>
#include <string.h>

Test(measure, peaks_by_name_most_specific_first) {
    double gbps, gflops;
    measure_peaks("NVIDIA H200", &gbps, &gflops);
    cr_assert_float_eq(gflops, 989000, 1e-9);
    cr_assert_float_eq(gbps, 4800, 1e-9);
    measure_peaks("NVIDIA H200 NVL", &gbps, &gflops);
    cr_assert_float_eq(gflops, 835000, 1e-9, "NVL before the plain H200");
    measure_peaks("NVIDIA H100 PCIe", &gbps, &gflops);
    cr_assert_float_eq(gflops, 756000, 1e-9);
    measure_peaks("NVIDIA H100 80GB HBM3", &gbps, &gflops);
    cr_assert_float_eq(gflops, 989000, 1e-9);
    measure_peaks("llvmpipe (LLVM 15.0.6, 256 bits)", &gbps, &gflops);
    cr_assert(gbps == 0 && gflops == 0, "a device kiln does not know has no peak");
    measure_peaks(NULL, &gbps, &gflops);
    cr_assert(gbps == 0 && gflops == 0);
}

Test(measure, prefill_floor_is_the_larger_term) {
    measure_result m;
    memset(&m, 0, sizeof m);
    m.bandwidth_gbps = 4000, m.peak_gflops = 1000000, m.matmul_gflops = 100000;
    const char *bound;
    /* 16 GB of weights (4 ms) against 2e12 FLOPs (2 ms): memory-bound, 24 tokens / 4 ms */
    double f = measure_prefill_floor(&m, 24, 16e9, 2e12, &bound);
    cr_assert_float_eq(f, 24 / 4e-3, 1e-6);
    cr_assert_str_eq(bound, "memory");
    /* 8e13 FLOPs (80 ms) against 4 ms of bytes: compute-bound at the chip's peak */
    f = measure_prefill_floor(&m, 512, 16e9, 8e13, &bound);
    cr_assert_float_eq(f, 512 / 80e-3, 1e-6);
    cr_assert_str_eq(bound, "compute");
    /* kiln's kernel rate takes no part: a slower kernel gives the same floor */
    m.matmul_gflops = 1;
    cr_assert_float_eq(measure_prefill_floor(&m, 512, 16e9, 8e13, NULL), 512 / 80e-3, 1e-6);
}

Test(measure, unknown_peak_gives_no_prefill_floor) {
    measure_result m;
    memset(&m, 0, sizeof m);
    m.bandwidth_gbps = 20, m.matmul_gflops = 50;
    const char *bound = "x";
    cr_assert_eq(measure_prefill_floor(&m, 64, 1e6, 1e9, &bound), 0);
    cr_assert_str_eq(bound, "");
    cr_assert_float_eq(measure_decode_floor(&m, 1e6), 20e9 / 1e6, 1e-6, "decode needs only the bandwidth");
    m.bandwidth_gbps = 0;
    cr_assert_eq(measure_decode_floor(&m, 1e6), 0);
    m.bandwidth_gbps = 20;
    cr_assert_eq(measure_decode_floor(&m, 0), 0);
    m.peak_gflops = 1000;
    cr_assert_eq(measure_prefill_floor(&m, 0, 1e6, 1e9, NULL), 0, "no tokens");
}
