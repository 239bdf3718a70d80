#include "tests/util/testutil_vk.h"

#include "backend-ptx/cuda_device.h"
#include "backend-ptx/cuda_probe.h"
#include "backend-spirv/spv_emit.h"
#include "backend-spirv/vk_device.h"
#include "backend-spirv/vk_probe.h"
#include "base/error.h"
#include "gguf/half.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* KILN_TEST_DEVICE=cuda:N runs the kernel and whole-model suites on a CUDA device instead
 * of the first Vulkan one: the same tests, through the other backend. */
static rt_device *open_cuda_or_skip(const char *dev, const char *caps) {
    rt_caps all[8];
    uint32_t n = 0, idx = 0;
    kiln_err err = {0};
    cr_assert_eq(sscanf(dev, "cuda:%u", &idx), 1, "KILN_TEST_DEVICE=%s: expected cuda:N", dev);
    cr_assert_eq(cuda_probe_devices(all, 8, &n, &err), 0, "%s", err.msg);
    if (idx >= n) cr_assert_fail("KILN_TEST_DEVICE=%s: no such CUDA device (%u found) %s", dev, n, err.msg);
    rt_device *d = cuda_device_open(idx, caps, &err);
    cr_assert_not_null(d, "%s", err.msg);
    return d;
}

rt_device *tu_vk_open_or_skip(const char *caps) {
    const char *dev = getenv("KILN_TEST_DEVICE");
    if (dev && !strncmp(dev, "cuda:", 5)) return open_cuda_or_skip(dev, caps);
    rt_caps all[4];
    uint32_t n = 0;
    kiln_err err = {0};
    vk_probe_devices(all, 4, &n, &err);
    /* on a machine that has a GPU, a device that fails to appear is a failure, not a skip */
    const char *req = getenv("KILN_REQUIRE_VULKAN");
    if (n == 0 && req && *req && strcmp(req, "0"))
        cr_assert_fail("no Vulkan device under KILN_REQUIRE_VULKAN: %s", err.msg);
    if (n == 0) cr_skip_test("no Vulkan device: %s", err.msg);
    rt_device *d = vk_device_open(0, caps, &err);
    cr_assert_not_null(d, "%s", err.msg);
    return d;
}

rt_buffer *tu_vk_upload(rt_device *d, const void *src, size_t bytes) {
    kiln_err err = {0};
    rt_buffer *b = d->ops->alloc(d, bytes, &err);
    cr_assert_not_null(b, "%s", err.msg);
    cr_assert_eq(d->ops->upload(d, b, 0, src, bytes, &err), 0, "%s", err.msg);
    return b;
}

void tu_vk_reupload(rt_device *d, rt_buffer *b, const void *src, size_t bytes) {
    kiln_err err = {0};
    cr_assert_eq(d->ops->upload(d, b, 0, src, bytes, &err), 0, "%s", err.msg);
}

void tu_vk_download(rt_device *d, rt_buffer *b, void *dst, size_t bytes) {
    kiln_err err = {0};
    cr_assert_eq(d->ops->download(d, b, 0, dst, bytes, &err), 0, "%s", err.msg);
}

const char *tu_dname(ir_scalar t) { return t == IR_BF16 ? "bf16" : "f16"; }
uint16_t tu_to16(ir_scalar t, float f) { return t == IR_BF16 ? gguf_f32_to_bf16(f) : gguf_f32_to_f16(f); }
float tu_from16(ir_scalar t, uint16_t h) { return t == IR_BF16 ? gguf_bf16_to_f32(h) : gguf_f16_to_f32(h); }
uint16_t tu_nan16(ir_scalar t) { return t == IR_BF16 ? 0x7fc0 : 0x7e00; }

rt_buffer *tu_vk_poisoned16(rt_device *d, ir_scalar t, size_t n, size_t guard) {
    uint16_t *p = malloc((n + guard) * 2);
    cr_assert_not_null(p);
    for (size_t i = 0; i < n + guard; i++) p[i] = tu_nan16(t);
    rt_buffer *b = tu_vk_upload(d, p, (n + guard) * 2);
    free(p);
    return b;
}

double tu_ulp16(ir_scalar t, double v) {
    int e;
    frexp(fabs(v), &e); /* |v| = m * 2^e, m in [0.5, 1) */
    int mant = t == IR_BF16 ? 7 : 10, emin = t == IR_BF16 ? -126 : -14;
    if (e - 1 < emin) e = emin + 1;
    return ldexp(1.0, e - 1 - mant);
}

void tu_caps_min(rt_caps *c) {
    rt_caps_default(c, RT_VULKAN);
    c->storage16 = true;
}

void tu_caps_h200(rt_caps *c) {
    rt_caps_default(c, RT_VULKAN);
    c->subgroup_size = c->subgroup_min = c->subgroup_max = 32;
    c->subgroup_arith = c->subgroup_shuffle = true;
    c->f16_arith = c->bf16_arith = c->storage16 = c->int8_arith = c->atomic_f32_add = true;
    c->shared_bytes = 48 * 1024;
    c->max_workgroup = 1024;
    c->max_buffer_bytes = UINT32_MAX;
    /* the driver's f16/bf16 cooperative-matrix shapes (../shared/device/README.md) */
    const rt_mma_shape mma[] = {{16, 16, 16, IR_F16, IR_F16}, {16, 8, 16, IR_F16, IR_F16}, {16, 8, 8, IR_F16, IR_F16},
                                {16, 16, 16, IR_F16, IR_F32}, {16, 8, 16, IR_F16, IR_F32}, {16, 8, 8, IR_F16, IR_F32},
                                {16, 16, 16, IR_BF16, IR_F32}};
    c->n_mma = sizeof mma / sizeof mma[0];
    for (uint32_t i = 0; i < c->n_mma; i++) c->mma[i] = mma[i];
    /* VK_NV_cooperative_matrix2's workgroup scope: the f16/bf16 -> f32 granularities */
    const rt_mma_shape wg[] = {{16, 16, 16, IR_F16, IR_F32, 32},   {16, 16, 16, IR_BF16, IR_F32, 32},
                               {16, 16, 16, IR_F16, IR_F32, 64},   {16, 16, 16, IR_BF16, IR_F32, 64},
                               {32, 16, 16, IR_F16, IR_F32, 128},  {32, 16, 16, IR_BF16, IR_F32, 128},
                               {32, 32, 16, IR_F16, IR_F32, 256},  {32, 32, 16, IR_BF16, IR_F32, 256}};
    c->n_wg_mma = sizeof wg / sizeof wg[0];
    for (uint32_t i = 0; i < c->n_wg_mma; i++) c->wg_mma[i] = wg[i];
    c->wg_mma_max_dim = 1024, c->wg_mma_reserved_shared = 8192;
}

/* SPIRV-Tools in-process; for modules it cannot read, $KILN_SPIRV_VAL (a newer
 * spirv-val) when set. */
tu_val_how tu_spv_validate(const spv_module *m, const char *what) {
    kiln_err err = {0};
    if (spv_validate(m, &err) == 0) return TU_VAL_OK;
    cr_assert(spv_needs_newer_tools(m), "%s: %s", what, err.msg);
    const char *ext = getenv("KILN_SPIRV_VAL");
    if (!ext || !*ext) return TU_VAL_UNCHECKED;
    char path[] = "/tmp/kiln-spv-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, m->words, m->n * 4), (ssize_t)(m->n * 4));
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' --target-env vulkan1.3 '%s' 2>&1", ext, path);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "cannot run %s", ext);
    size_t got = fread(err.msg, 1, sizeof err.msg - 1, p);
    err.msg[got] = 0;
    int rc = pclose(p);
    unlink(path);
    cr_assert_eq(rc, 0, "%s: %s: %s", what, ext, err.msg);
    return TU_VAL_EXTERNAL;
}

void tu_emit_ok(ir_kernel *k, const rt_caps *c, const char *err, const char *what) {
    cr_assert_not_null(k, "%s: %s", what, err);
    spv_module m = {0};
    kiln_err e2 = {0};
    cr_assert_eq(spv_emit(k, c, &m, &e2), 0, "%s: %s", what, e2.msg);
    tu_spv_validate(&m, what);
    spv_module_free(&m);
    ir_kernel_destroy(k);
}

/* The oracle's attend (oracle/forward.c) for one token, with the tolerance per output
 * derived at the top of tests/test_kernels_attn.c. */
void tu_attend_ref(const float *q, const float *kc, const float *vc, uint32_t n_head, uint32_t n_head_kv,
                       uint32_t hd, uint32_t pos, float *out, double *tol) {
    uint32_t group = n_head / n_head_kv, kv_dim = n_head_kv * hd, n_keys = pos + 1;
    float *scores = malloc((size_t)n_keys * sizeof *scores);
    double *eps = malloc((size_t)n_keys * sizeof *eps);
    cr_assert(scores && eps);
    float scale = 1.0f / sqrtf((float)hd);
    for (uint32_t h = 0; h < n_head; h++) {
        uint32_t kvh = h / group;
        const float *qh = q + (size_t)h * hd;
        float mx = -INFINITY;
        double delta = 0;
        for (uint32_t p = 0; p < n_keys; p++) {
            const float *k = kc + (size_t)p * kv_dim + (size_t)kvh * hd;
            float s = 0;
            double mag = 0;
            for (uint32_t i = 0; i < hd; i++) s += qh[i] * k[i], mag += fabs((double)qh[i] * k[i]);
            scores[p] = s * scale;
            if (scores[p] > mx) mx = scores[p];
            double ds = scale * 2.0 * hd * ldexp(1.0, -24) * mag + ldexp(1.0, -23) * fabs(scores[p]);
            if (ds > delta) delta = ds;
        }
        for (uint32_t p = 0; p < n_keys; p++)
            eps[p] = (4.0 + 3.0 * n_keys + 3.0 * ((double)mx - scores[p])) * ldexp(1.0, -23);
        float sum = 0;
        for (uint32_t p = 0; p < n_keys; p++) sum += scores[p] = expf(scores[p] - mx);
        float *o = out + (size_t)h * hd;
        for (uint32_t i = 0; i < hd; i++) o[i] = 0;
        double eps_bar = 0;
        for (uint32_t p = 0; p < n_keys; p++) eps_bar += eps[p] * scores[p] / sum;
        for (uint32_t i = 0; i < hd; i++) {
            double wabs = 0, weps = 0;
            for (uint32_t p = 0; p < n_keys; p++) {
                double w = (double)scores[p] / sum, av = fabs(vc[(size_t)p * kv_dim + (size_t)kvh * hd + i]);
                wabs += w * av, weps += eps[p] * w * av;
            }
            tol[(size_t)h * hd + i] =
                (2.0 * expm1(2.0 * delta) + eps_bar + (4.0 * n_keys + 8.0) * ldexp(1.0, -24)) * wabs + weps;
        }
        for (uint32_t p = 0; p < n_keys; p++) {
            const float *v = vc + (size_t)p * kv_dim + (size_t)kvh * hd;
            float wgt = scores[p] / sum;
            for (uint32_t i = 0; i < hd; i++) o[i] += wgt * v[i];
        }
    }
    free(scores), free(eps);
}

rt_kernel *tu_vk_compile(rt_device *d, const ir_kernel *k) {
    kiln_err err = {0};
    rt_kernel *ck = d->ops->compile(d, k, NULL, &err);
    cr_assert_not_null(ck, "%s: %s", ir_kernel_name(k), err.msg);
    return ck;
}

void tu_vk_run(rt_device *d, rt_kernel *ck, uint32_t gx, uint32_t gy, const rt_arg *args, uint32_t n) {
    kiln_err err = {0};
    rt_launch l = {ck, {gx, gy, 1}, args, n};
    cr_assert_eq(d->ops->run(d, &l, 1, &err), 0, "%s", err.msg);
}

static uint64_t rng_state;
void tu_seed(uint64_t s) { rng_state = s * 0x9e3779b97f4a7c15ull + 1; }
uint32_t tu_rnd32(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 32);
}
float tu_urand(float lo, float hi) { return lo + (hi - lo) * (float)((tu_rnd32() >> 8) / 16777216.0); }

uint16_t *tu_rand16(ir_scalar t, size_t n, float lo, float hi, float **as_f32) {
    uint16_t *h = malloc(n * 2);
    float *f = malloc(n * 4);
    cr_assert(h && f);
    for (size_t i = 0; i < n; i++) h[i] = tu_to16(t, tu_urand(lo, hi)), f[i] = tu_from16(t, h[i]);
    if (as_f32) *as_f32 = f;
    else free(f);
    return h;
}

rt_buffer *tu_vk_poisoned32(rt_device *d, size_t n, size_t guard) {
    uint32_t *p = malloc((n + guard) * 4);
    cr_assert(p);
    for (size_t i = 0; i < n + guard; i++) p[i] = TU_POISON32;
    rt_buffer *b = tu_vk_upload(d, p, (n + guard) * 4);
    free(p);
    return b;
}

uint32_t *tu_vk_fetch32(rt_device *d, rt_buffer *b, size_t n, size_t guard, const char *what) {
    uint32_t *p = malloc((n + guard) * 4);
    cr_assert(p);
    tu_vk_download(d, b, p, (n + guard) * 4);
    for (size_t i = n; i < n + guard; i++) cr_assert_eq(p[i], TU_POISON32, "%s: wrote past the end at %zu", what, i);
    return p;
}

uint16_t *tu_vk_fetch16(rt_device *d, rt_buffer *b, ir_scalar t, size_t n, size_t guard, const char *what) {
    uint16_t *p = malloc((n + guard) * 2);
    cr_assert(p);
    tu_vk_download(d, b, p, (n + guard) * 2);
    for (size_t i = n; i < n + guard; i++) cr_assert_eq(p[i], tu_nan16(t), "%s: wrote past the end at %zu", what, i);
    return p;
}

void tu_vk_launch(rt_device *d, const ir_kernel *k, uint32_t gx, uint32_t gy, const rt_arg *args, uint32_t n) {
    rt_kernel *ck = tu_vk_compile(d, k);
    tu_vk_run(d, ck, gx, gy, args, n);
    d->ops->release_kernel(d, ck);
}

void tu_rand_distinct(uint32_t *out, uint32_t k, uint32_t range) {
    cr_assert(k <= range);
    for (uint32_t j = 0; j < k; j++) {
        bool again;
        do {
            out[j] = tu_rnd32() % range, again = false;
            for (uint32_t i = 0; i < j; i++) again |= out[i] == out[j];
        } while (again);
    }
}
