/* The Vulkan runtime on whatever Vulkan device this machine has (lavapipe in CI): IR
 * kernels compiled through the SPIR-V emitter, launched, recorded and replayed, with
 * guard regions around outputs. Skipped by name when no Vulkan device exists. */
#include "ir.h"
#include "testutil.h"
#include "testutil_vk.h"
#include "vk_device.h"
#include "vk_probe.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* y[i] = a[i] + s * x[i] for i < n, 64 invocations per workgroup. */
static ir_kernel *axpy(void) {
    ir_kernel *k = ir_kernel_create("axpy");
    ir_buf a = ir_param_buffer(k, "a", IR_F32, IR_READ), x = ir_param_buffer(k, "x", IR_F32, IR_READ);
    ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_val n = ir_param_scalar(k, "n", IR_U32), s = ir_param_scalar(k, "s", IR_F32);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i = ir_id(k, IR_ID_GLOBAL, 0);
    ir_if *f = ir_if_begin(k, ir_compare(k, IR_LT, i, n), 0);
    ir_val v = ir_fma(k, s, ir_load(k, x, i, 1), ir_load(k, a, i, 1));
    ir_store(k, y, i, v);
    ir_if_end(k, f, NULL);
    char err[256];
    cr_assert_eq(ir_verify(k, err, sizeof err), 0, "%s (%s)", err, ir_kernel_error(k));
    return k;
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

Test(vk_device, axpy_at_odd_sizes_with_guards) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    char err[512];
    ir_kernel *k = axpy();
    rt_kernel *ck = d->ops->compile(d, k, NULL, err, sizeof err);
    cr_assert_not_null(ck, "%s", err);
    const uint32_t sizes[] = {1, 7, 63, 64, 65, 200, 1000, 4097};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        uint32_t n = sizes[si], guard = 64;
        float *a = malloc(n * 4), *x = malloc(n * 4), *y = malloc((n + guard) * 4);
        for (uint32_t i = 0; i < n; i++) a[i] = (float)i * 0.5f, x[i] = (float)(i % 13) - 6.0f;
        for (uint32_t i = 0; i < n + guard; i++) y[i] = NAN; /* poison, and a guard region past n */
        rt_buffer *ba = d->ops->alloc(d, n * 4, err, sizeof err), *bx = d->ops->alloc(d, n * 4, err, sizeof err),
                  *by = d->ops->alloc(d, (n + guard) * 4, err, sizeof err);
        cr_assert(ba && bx && by, "%s", err);
        cr_assert_eq(d->ops->upload(d, ba, 0, a, n * 4, err, sizeof err), 0, "%s", err);
        cr_assert_eq(d->ops->upload(d, bx, 0, x, n * 4, err, sizeof err), 0, "%s", err);
        cr_assert_eq(d->ops->upload(d, by, 0, y, (n + guard) * 4, err, sizeof err), 0, "%s", err);
        rt_arg args[5] = {{ba, 0}, {bx, 0}, {by, 0}, {NULL, n}, {NULL, fbits(2.5f)}};
        rt_launch l = {ck, {(n + 63) / 64, 1, 1}, args, 5};
        cr_assert_eq(d->ops->run(d, &l, 1, err, sizeof err), 0, "%s", err);
        cr_assert_eq(d->ops->download(d, by, 0, y, (n + guard) * 4, err, sizeof err), 0, "%s", err);
        for (uint32_t i = 0; i < n; i++) {
            float want = fmaf(2.5f, x[i], a[i]);
            cr_assert_eq(fbits(y[i]), fbits(want), "n=%u i=%u: %g != %g", n, i, y[i], want);
        }
        for (uint32_t i = n; i < n + guard; i++) cr_assert(isnan(y[i]), "n=%u: wrote past the end at %u", n, i);
        d->ops->release(d, ba);
        d->ops->release(d, bx);
        d->ops->release(d, by);
        free(a);
        free(x);
        free(y);
    }
    d->ops->release_kernel(d, ck);
    ir_kernel_destroy(k);
    d->ops->destroy(d);
}

/* A recording replays the same launches; what changes between replays lives in a buffer. */
Test(vk_device, record_once_replay_many) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    char err[512];
    /* acc[i] += step[0] for i < n: each replay adds the current step value */
    ir_kernel *k = ir_kernel_create("accumulate");
    ir_buf acc = ir_param_buffer(k, "acc", IR_F32, IR_READ | IR_WRITE), step = ir_param_buffer(k, "step", IR_F32, IR_READ);
    ir_val n = ir_param_scalar(k, "n", IR_U32);
    ir_set_workgroup(k, 32, 1, 1);
    ir_val i = ir_id(k, IR_ID_GLOBAL, 0);
    ir_if *f = ir_if_begin(k, ir_compare(k, IR_LT, i, n), 0);
    ir_store(k, acc, i, ir_bin(k, IR_OP_ADD, ir_load(k, acc, i, 1), ir_load(k, step, ir_const_u32(k, 0), 1)));
    ir_if_end(k, f, NULL);
    rt_kernel *ck = d->ops->compile(d, k, NULL, err, sizeof err);
    cr_assert_not_null(ck, "%s (%s)", err, ir_kernel_error(k));
    uint32_t len = 100;
    float zero[100] = {0}, out[100];
    rt_buffer *b = d->ops->alloc(d, sizeof zero, err, sizeof err), *s = d->ops->alloc(d, 4, err, sizeof err);
    cr_assert(b && s, "%s", err);
    cr_assert_eq(d->ops->upload(d, b, 0, zero, sizeof zero, err, sizeof err), 0);
    rt_arg args[3] = {{b, 0}, {s, 0}, {NULL, len}};
    rt_launch l = {ck, {(len + 31) / 32, 1, 1}, args, 3};
    rt_launch two[2] = {l, l}; /* the second launch must see the first's writes */
    rt_recording *rec = d->ops->record(d, two, 2, err, sizeof err);
    cr_assert_not_null(rec, "%s", err);
    float total = 0;
    for (int r = 1; r <= 5; r++) {
        float v = (float)r;
        cr_assert_eq(d->ops->upload(d, s, 0, &v, 4, err, sizeof err), 0);
        cr_assert_eq(d->ops->replay(d, rec, err, sizeof err), 0, "%s", err);
        total += 2 * v;
    }
    cr_assert_eq(d->ops->download(d, b, 0, out, sizeof out, err, sizeof err), 0);
    for (uint32_t j = 0; j < len; j++) cr_assert_eq(out[j], total, "%u: %g", j, out[j]);
    /* bad use is refused, not crashed on */
    cr_assert_eq(d->ops->upload(d, s, 2, zero, 4, err, sizeof err), -1);
    cr_assert(strstr(err, "outside"), "%s", err);
    rt_launch bad = {ck, {1, 1, 1}, args, 2};
    cr_assert_eq(d->ops->run(d, &bad, 1, err, sizeof err), -1);
    d->ops->release_recording(d, rec);
    d->ops->release(d, b);
    d->ops->release(d, s);
    d->ops->release_kernel(d, ck);
    ir_kernel_destroy(k);
    d->ops->destroy(d);
}

/* Host-mapped buffers as a recording's inputs and outputs: the step value written by the
 * host before each replay is read by the kernel, and the kernel's writes into a host
 * buffer are what the host reads after it; range checks as for device buffers. */
Test(vk_device, host_buffers_in_and_out_of_replays) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    char err[512];
    ir_kernel *k = axpy();
    rt_kernel *ck = d->ops->compile(d, k, NULL, err, sizeof err);
    cr_assert_not_null(ck, "%s", err);
    uint32_t n = 1000, guard = 16;
    float *a = malloc(n * 4), *y = malloc((n + guard) * 4);
    for (uint32_t i = 0; i < n; i++) a[i] = (float)i;
    for (uint32_t i = 0; i < n + guard; i++) y[i] = NAN;
    rt_buffer *ba = d->ops->alloc(d, n * 4, err, sizeof err), *bx = d->ops->alloc_host(d, n * 4, err, sizeof err),
              *by = d->ops->alloc_host(d, (n + guard) * 4, err, sizeof err);
    cr_assert(ba && bx && by, "%s", err);
    cr_assert_eq(d->ops->upload(d, ba, 0, a, n * 4, err, sizeof err), 0, "%s", err);
    cr_assert_eq(d->ops->upload(d, by, 0, y, (n + guard) * 4, err, sizeof err), 0, "%s", err);
    rt_arg args[5] = {{ba, 0}, {bx, 0}, {by, 0}, {NULL, n}, {NULL, fbits(1.0f)}};
    rt_launch l = {ck, {(n + 63) / 64, 1, 1}, args, 5};
    rt_recording *rec = d->ops->record(d, &l, 1, err, sizeof err);
    cr_assert_not_null(rec, "%s", err);
    float *x = malloc(n * 4);
    for (int r = 0; r < 3; r++) {
        for (uint32_t i = 0; i < n; i++) x[i] = (float)(r * 7 + (int)(i % 5));
        cr_assert_eq(d->ops->upload(d, bx, 0, x, n * 4, err, sizeof err), 0, "%s", err);
        cr_assert_eq(d->ops->replay(d, rec, err, sizeof err), 0, "%s", err);
        cr_assert_eq(d->ops->download(d, by, 0, y, (n + guard) * 4, err, sizeof err), 0, "%s", err);
        for (uint32_t i = 0; i < n; i++) cr_assert_eq(y[i], a[i] + x[i], "replay %d [%u]: %g", r, i, y[i]);
        for (uint32_t i = n; i < n + guard; i++) cr_assert(isnan(y[i]), "wrote past the end at %u", i);
    }
    cr_assert_eq(d->ops->upload(d, bx, n * 4 - 2, x, 4, err, sizeof err), -1);
    cr_assert(strstr(err, "outside"), "%s", err);
    cr_assert_eq(d->ops->download(d, by, (n + guard) * 4, y, 1, err, sizeof err), -1);
    d->ops->release_recording(d, rec);
    d->ops->release(d, ba), d->ops->release(d, bx), d->ops->release(d, by);
    d->ops->release_kernel(d, ck);
    ir_kernel_destroy(k);
    free(a), free(x), free(y);
    d->ops->destroy(d);
}

/* Pipelines go to a cache file per driver build that the next start reads; a damaged
 * file is ignored, not trusted. */
Test(vk_device, pipeline_cache_on_disk) {
    const char *dir = tu_tmpdir();
    setenv("KILN_CACHE_DIR", dir, 1);
    rt_device *d = tu_vk_open_or_skip(NULL);
    char err[512];
    ir_kernel *k = axpy();
    rt_kernel *ck = d->ops->compile(d, k, NULL, err, sizeof err);
    cr_assert_not_null(ck, "%s", err);
    d->ops->release_kernel(d, ck);
    d->ops->destroy(d);
    char cmd[700], path[700] = "";
    snprintf(cmd, sizeof cmd, "ls %s/vk-*.bin 2>/dev/null", dir);
    FILE *ls = popen(cmd, "r");
    cr_assert_not_null(ls);
    if (!fgets(path, sizeof path, ls)) path[0] = 0;
    pclose(ls);
    path[strcspn(path, "\n")] = 0;
    cr_assert(path[0], "no cache file in %s", dir);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    cr_assert_gt(ftell(f), 16, "the cache file is empty");
    fclose(f);
    /* the next start reads it and still compiles */
    d = tu_vk_open_or_skip(NULL);
    cr_assert_not_null(ck = d->ops->compile(d, k, NULL, err, sizeof err), "%s", err);
    d->ops->release_kernel(d, ck);
    d->ops->destroy(d);
    /* a damaged file: ignored */
    cr_assert(tu_write_file(path, "not a pipeline cache at all, just junk bytes", 44));
    d = tu_vk_open_or_skip(NULL);
    cr_assert_not_null(ck = d->ops->compile(d, k, NULL, err, sizeof err), "%s", err);
    d->ops->release_kernel(d, ck);
    d->ops->destroy(d);
    ir_kernel_destroy(k);
}
