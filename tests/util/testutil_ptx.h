/* Test helpers for the PTX path without a GPU: CUDA caps as the probe fills them for an
 * architecture, and ptxas (the CUDA toolkit's, where installed) assembling emitted PTX. */
#ifndef KILN_TESTS_TESTUTIL_PTX_H
#define KILN_TESTS_TESTUTIL_PTX_H

#include "ir/ir.h"
#include "runtime/caps.h"

/* CUDA caps for compute capability cc (90 for sm_90), as the probe fills them. */
rt_caps tu_cuda_caps(unsigned cc);
/* ptxas on PATH or at /usr/local/cuda/bin/ptxas; NULL when absent. */
const char *tu_ptxas_path(void);
/* Assembles ptx for arch ("sm_90") where ptxas exists; fails the test with its output. */
void tu_ptxas_assemble(const char *ptx, const char *arch, const char *what);
/* Verifies k (kept) and emits it for caps c, failing the test on either; the PTX (free it). */
char *tu_ptx_emit_ok(const ir_kernel *k, const rt_caps *c);
/* Emits k (kept) for caps c and assembles the PTX for their architecture. */
void tu_ptx_assembles(const ir_kernel *k, const rt_caps *c, const char *what);

#endif
