/* Helpers shared by the kernel builders (not part of kernels.h). */
#ifndef KILN_KN_COMMON_H
#define KILN_KN_COMMON_H

#include "kernels.h"

#include <stdarg.h>

void kn_fail(char *err, size_t errlen, const char *fmt, ...);
/* 0 when dtype is bf16/f16 and the caps can hold it in buffers; -1 with err otherwise. */
int kn_check_dtype(const rt_caps *c, ir_scalar dtype, char *err, size_t errlen);
/* The largest power of two <= min(want, caps.max_workgroup, 1024), at least 1. */
uint32_t kn_workgroup(const rt_caps *c, uint32_t want);
/* The widest vector (4, 2 or 1 elements) that divides n, so vector loads never straddle
 * a row end and the loop bound alone masks the tail. */
uint32_t kn_vec_width(uint32_t n);
/* The sum of v over the workgroup of wg invocations (wg a power of two), in every
 * invocation: subgroup reduce then workgroup memory across subgroups where the caps
 * offer it, a workgroup-memory tree otherwise. Contains barriers: call it in uniform
 * control flow, once per shm name. */
ir_val kn_wg_sum(ir_kernel *k, const rt_caps *c, uint32_t wg, ir_val v, const char *shm_name);
/* Sum of the lanes of an f32 vector (or v itself for a scalar), lane 0 first. */
ir_val kn_lane_sum(ir_kernel *k, ir_val v, uint32_t lanes);
/* Verifies k: k, or NULL (k destroyed) with the builder's or verifier's message. */
ir_kernel *kn_finish(ir_kernel *k, char *err, size_t errlen);
/* ir_kernel_create, with the out-of-memory message. */
ir_kernel *kn_create(const char *name, char *err, size_t errlen);

#endif
