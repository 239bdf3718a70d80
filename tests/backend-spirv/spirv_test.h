/* Shared pieces of the SPIR-V emitter's tests (tests/backend-spirv/test_spirv*.c): the
 * capability sets, the kernels covering every IR op (spirv_kernels.c), the case matrix,
 * and a minimal Vulkan harness that runs emitted kernels on the first device
 * (spirv_vkh.c). */
#ifndef KILN_TESTS_BACKEND_SPIRV_SPIRV_TEST_H
#define KILN_TESTS_BACKEND_SPIRV_SPIRV_TEST_H

#include "backend-spirv/spv_emit.h"
#include "backend-spirv/vk_khr.h"
#include "ir/ir.h"
#include "runtime/caps.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

/* ---- capability sets ------------------------------------------------------------------------ */

enum { CAPS_LAVAPIPE, CAPS_H200, CAPS_MIN, CAPS_STORAGE_ONLY, N_CAPS };
extern const char *const caps_name[N_CAPS];

/* ---- builder shorthands ------------------------------------------------------------------- */

#define TS(s) ir_t_scalar(k, IR_##s)
#define TV(s, n) ir_t_vector(k, IR_##s, n)
#define CU(v) ir_const_u32(k, v)
#define CI(v) ir_const_i32(k, v)
#define CF(v) ir_const_f32(k, v)
#define BIN(op, a, b) ir_bin(k, IR_OP_##op, a, b)
#define UN(op, a) ir_un(k, IR_OP_##op, a)
#define GID ir_id(k, IR_ID_GLOBAL, 0)

/* ---- the matrix: each kernel under each caps set ------------------------------------------ */

#define OK NULL
typedef struct kcase {
    const char *name;
    ir_kernel *(*build)(void);
    const char *expect[N_CAPS]; /* NULL: must emit and validate; else a part of the refusal */
} kcase;
extern const kcase cases[];
extern const size_t n_cases;
#define N_CASES n_cases

/* ---- a minimal Vulkan harness: run emitted kernels on the first device -------------------------- */

typedef VkResult(VKAPI_PTR *vkh_get_coopmat_fn)(VkPhysicalDevice, uint32_t *, vkp_coopmat_props *);

typedef struct vkh {
    VkInstance inst;
    VkPhysicalDevice pd;
    VkDevice dev;
    VkQueue q;
    VkCommandPool pool;
    VkPhysicalDeviceMemoryProperties mem;
    rt_caps caps;
    char name[256];
} vkh;

typedef struct vkbuf {
    VkBuffer b;
    VkDeviceMemory m;
    void *p;
    size_t n;
} vkbuf;

void caps_fill(rt_caps *c, int which);
ir_kernel *k_arith_f32(void);
ir_kernel *k_arith_int(void);
ir_kernel *k_arith_i64(void);
ir_kernel *k_arith_f16(void);
ir_kernel *k_arith_bf16(void);
ir_kernel *k_convert(void);
ir_kernel *k_bitcast16(void);
void memory_body(ir_kernel *k, ir_buf b, ir_val n, ir_val fallback);
ir_kernel *k_memory32(void);
ir_kernel *k_memory16(void);
ir_kernel *k_shared(void);
ir_kernel *k_subgroup(void);
ir_kernel *k_atomic(void);
ir_kernel *k_atomic_fadd(void);
ir_kernel *k_control(void);
ir_kernel *k_spec(void);
ir_kernel *k_push(void);
ir_kernel *frag_kernel(const char *name, ir_scalar ab, ir_scalar acc, uint32_t M, uint32_t N, uint32_t K);
ir_kernel *k_frag_aligned(ir_scalar ab); /* A loaded by ir_frag_load_aligned */
ir_kernel *k_frag_f16(void);
ir_kernel *k_frag_bf16(void);
ir_kernel *k_frag_f16acc(void);
ir_kernel *build_checked(const kcase *kc);
bool vkh_open(vkh *h);
void vkh_close(vkh *h);
void vkh_require(vkh *h);
void vkbuf_make(vkh *h, vkbuf *b, size_t bytes);
void vkbuf_free(vkh *h, vkbuf *b);
void vkh_run(vkh *h, const spv_module *m, vkbuf *bufs, uint32_t nbuf, const void *pc, uint32_t pc_bytes,
             const uint32_t *spec, uint32_t nspec, uint32_t groups);

#endif
