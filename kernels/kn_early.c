/* The overlap of a kernel's start with the kernel before it (ir.h: ir_grid_wait,
 * ir_set_launch_early, ir_prefetch). Short kernels (norms, q/k preparation, attention
 * over a short block, the decode step's attention) let the next kernel be scheduled
 * when they start; a product launched that way brings the first of its weights into the
 * L2 cache while it waits, so the memory system streams weights through what were idle
 * microseconds. Where the device has no programmatic dependent launch, both are no-ops. */
#include "kernels/kn_common.h"

#include <stdlib.h>
#include <string.h>

/* Bytes a grid prefetches at most: about half the H200's 60 MiB L2, what the memory
 * delivers in the ~8 us a short kernel runs. */
#define PREFETCH_BUDGET (32u << 20)

/* Off unless KILN_EARLY=1 (read when a kernel is built): measured on the H200 (qwen3-8b,
 * 2026-12-04), the short kernels ran 1 us faster each, but the products launched early sat
 * packed on the first SMs to free up and their prefetches competed with their own loads:
 * the 24-token block replayed in 5.78 ms against 5.14 without, decode 202.7 tok/s
 * against 211.6. */
static bool early_on(void) {
    const char *e = getenv("KILN_EARLY");
    return e && strcmp(e, "1") == 0;
}

void kn_launch_early(kx k) {
    if (early_on()) ir_set_launch_early(k.ir, true);
}

void kn_prefetch_rows(kx k, ir_buf w, ir_val row0, uint32_t rows_per_group, uint32_t rows, uint32_t cols,
                      uint32_t elems_per_word, uint32_t n_mats) {
    uint64_t row_bytes = 2ull * cols, group_bytes = row_bytes * rows_per_group * n_mats;
    if (!early_on() || row_bytes % 16 || row_bytes > (1u << 24) || !group_bytes) return;
    /* the workgroups launched first (the lowest ids) take the budget */
    uint32_t groups = (uint32_t)(PREFETCH_BUDGET / group_bytes);
    if (!groups) return;
    ir_val lid = kx_local(k);
    ir_val row = kx_add(k, row0, lid);
    ir_val first = kx_lt_c(k, kx_group(k, 0), groups);
    ir_val mine = kx_lt_c(k, lid, rows_per_group);
    ir_val in = kx_lt_c(k, row, rows);
    ir_val on = kx_and(k, first, kx_and(k, mine, in));
    ir_if *f = kx_if(k, on);
    ir_prefetch(k.ir, w, kx_mul_c(k, row, cols / elems_per_word), (uint32_t)row_bytes);
    kx_end_if(k, f);
}
