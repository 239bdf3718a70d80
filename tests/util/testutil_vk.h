/* Helpers shared by the tests that run kernels on a Vulkan device: open the first
 * device (skipping the test by name when there is none), move bytes, and 16-bit values. */
#ifndef KILN_TESTS_TESTUTIL_VK_H
#define KILN_TESTS_TESTUTIL_VK_H

#include "runtime/device.h"

#include <stddef.h>
#include <stdint.h>

/* The GPU under test: the first Vulkan device, or with KILN_TEST_DEVICE=cuda:N that
 * CUDA device (the kernel and plan suites then run through the PTX backend). */
rt_device *tu_vk_open_or_skip(const char *caps);
rt_buffer *tu_vk_upload(rt_device *d, const void *src, size_t bytes);
void tu_vk_reupload(rt_device *d, rt_buffer *b, const void *src, size_t bytes);
void tu_vk_download(rt_device *d, rt_buffer *b, void *dst, size_t bytes);

const char *tu_dname(ir_scalar t); /* "bf16" or "f16" */
uint16_t tu_to16(ir_scalar t, float f);
float tu_from16(ir_scalar t, uint16_t h);
uint16_t tu_nan16(ir_scalar t);
/* A device buffer of n 16-bit values plus guard more, all tu_nan16: outputs poisoned, a
 * guard region past them. */
rt_buffer *tu_vk_poisoned16(rt_device *d, ir_scalar t, size_t n, size_t guard);
/* A device buffer of n u32 words plus guard more, all TU_POISON32; the n words read back
 * (malloc'ed) with the guard checked untouched (what: the test's name for the buffer). */
#define TU_POISON32 0xdeadbeefu
rt_buffer *tu_vk_poisoned32(rt_device *d, size_t n, size_t guard);
uint32_t *tu_vk_fetch32(rt_device *d, rt_buffer *b, size_t n, size_t guard, const char *what);
/* The same for n 16-bit values of a tu_vk_poisoned16 buffer (the guard still tu_nan16). */
uint16_t *tu_vk_fetch16(rt_device *d, rt_buffer *b, ir_scalar t, size_t n, size_t guard, const char *what);
/* Compiles k, runs it once on {gx, gy, 1} with args, releases it. */
void tu_vk_launch(rt_device *d, const ir_kernel *k, uint32_t gx, uint32_t gy, const rt_arg *args, uint32_t n);
/* k distinct values below range into out (k <= range), from the test data generator. */
void tu_rand_distinct(uint32_t *out, uint32_t k, uint32_t range);
/* One unit in the last place of the 16-bit type at |v|'s magnitude (subnormal floor). */
double tu_ulp16(ir_scalar t, double v);

/* Caps to build kernel variants for without the device: the spec-minimum Vulkan caps
 * plus 16-bit buffers (which the kernels need), and an H200 as Vulkan reports it. */
void tu_caps_min(rt_caps *c);
void tu_caps_h200(rt_caps *c);
/* Validates a module: SPIRV-Tools in-process; for modules it is too old to read
 * (cooperative matrices, bf16), the newer spirv-val named by $KILN_SPIRV_VAL when set,
 * else TU_VAL_UNCHECKED. Fails the test on an invalid module. */
typedef enum { TU_VAL_OK, TU_VAL_EXTERNAL, TU_VAL_UNCHECKED } tu_val_how;
struct spv_module;
tu_val_how tu_spv_validate(const struct spv_module *m, const char *what);
/* The builder gave a kernel (else fail with its err), it emits for c, and the module
 * validates; the kernel is destroyed. */
void tu_emit_ok(ir_kernel *k, const rt_caps *c, const char *err, const char *what);

/* The oracle's attend for one token at position pos, step for step in f32: q
 * [n_head][hd] (the token's row), caches [n_ctx][n_head_kv * hd] (f32 values of the
 * 16-bit data), out [n_head][hd]; tol gets each output's error bound for a kernel that
 * sums in another order (derived at the top of tests/test_kernels_attn.c). */
void tu_attend_ref(const float *q, const float *kc, const float *vc, uint32_t n_head, uint32_t n_head_kv, uint32_t hd,
                   uint32_t pos, float *out, double *tol);

/* A deterministic generator for test data (one stream per process): tu_seed, then
 * uniform u32s or floats in [lo, hi); tu_rand16 gives n random 16-bit values in [lo, hi)
 * and (malloc'ed, where as_f32 is not NULL) their exact f32 values. */
void tu_seed(uint64_t s);
uint32_t tu_rnd32(void);
float tu_urand(float lo, float hi);
uint16_t *tu_rand16(ir_scalar t, size_t n, float lo, float hi, float **as_f32);

/* Compiles k for d (failing the test with the message otherwise); runs one launch and waits. */
rt_kernel *tu_vk_compile(rt_device *d, const ir_kernel *k);
void tu_vk_run(rt_device *d, rt_kernel *ck, uint32_t gx, uint32_t gy, const rt_arg *args, uint32_t n);

#endif
