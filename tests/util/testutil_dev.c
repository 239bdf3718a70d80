/* Conformance checks of runtime/device.h that every backend must pass (Vulkan, CUDA):
 * the tests of each backend open their device and call these. */
#include "tests/util/testutil_dev.h"

#include "base/error.h"
#include "ir/ir.h"
#include "kernels/kernels.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* y[i] = a[i] + s * x[i] for i < n, 64 invocations per workgroup. */
ir_kernel *tu_dev_axpy_kernel(void) {
    ir_kernel *k = ir_kernel_create("axpy");
    ir_buf a = ir_param_buffer(k, "a", IR_F32, IR_READ), x = ir_param_buffer(k, "x", IR_F32, IR_READ);
    ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_val n = ir_param_scalar(k, "n", IR_U32), s = ir_param_scalar(k, "s", IR_F32);
    ir_set_workgroup(k, 64, 1, 1);
    ir_val i = ir_id(k, IR_ID_GLOBAL, 0);
    ir_if *f = ir_if_begin(k, ir_compare(k, IR_LT, i, n), 0);
    ir_store(k, y, i, ir_fma(k, s, ir_load(k, x, i, 1), ir_load(k, a, i, 1)));
    ir_if_end(k, f, NULL);
    kiln_err err = {0};
    cr_assert_eq(ir_verify(k, &err), 0, "%s (%s)", err.msg, ir_kernel_error(k));
    return k;
}

void tu_dev_axpy(rt_device *d) {
    kiln_err err = {0};
    ir_kernel *k = tu_dev_axpy_kernel();
    rt_kernel *ck = d->ops->compile(d, k, NULL, &err);
    cr_assert_not_null(ck, "%s", err.msg);
    const uint32_t sizes[] = {1, 7, 63, 64, 65, 200, 1000, 4097, 1000003};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        uint32_t n = sizes[si], guard = 64;
        float *a = malloc(n * 4), *x = malloc(n * 4), *y = malloc((n + guard) * 4);
        for (uint32_t i = 0; i < n; i++) a[i] = (float)i * 0.5f, x[i] = (float)(i % 13) - 6.0f;
        for (uint32_t i = 0; i < n + guard; i++) y[i] = NAN; /* poison, and a guard region past n */
        rt_buffer *ba = d->ops->alloc(d, n * 4, &err), *bx = d->ops->alloc(d, n * 4, &err),
                  *by = d->ops->alloc(d, (n + guard) * 4, &err);
        cr_assert(ba && bx && by, "%s", err.msg);
        cr_assert_eq(d->ops->upload(d, ba, 0, a, n * 4, &err), 0, "%s", err.msg);
        cr_assert_eq(d->ops->upload(d, bx, 0, x, n * 4, &err), 0, "%s", err.msg);
        cr_assert_eq(d->ops->upload(d, by, 0, y, (n + guard) * 4, &err), 0, "%s", err.msg);
        rt_arg args[5] = {{ba, 0}, {bx, 0}, {by, 0}, {NULL, n}, {NULL, fbits(2.5f)}};
        rt_launch l = {ck, {(n + 63) / 64, 1, 1}, args, 5};
        cr_assert_eq(d->ops->run(d, &l, 1, &err), 0, "%s", err.msg);
        cr_assert_eq(d->ops->download(d, by, 0, y, (n + guard) * 4, &err), 0, "%s", err.msg);
        for (uint32_t i = 0; i < n; i++) {
            float want = fmaf(2.5f, x[i], a[i]);
            cr_assert_eq(fbits(y[i]), fbits(want), "n=%u i=%u: %g != %g", n, i, y[i], want);
        }
        for (uint32_t i = n; i < n + guard; i++) cr_assert(isnan(y[i]), "n=%u: wrote past the end at %u", n, i);
        /* a partial download at an offset */
        float part[3];
        cr_assert_eq(d->ops->download(d, by, 4 * (n - 1), part, 12, &err), 0, "%s", err.msg);
        cr_assert_eq(fbits(part[0]), fbits(fmaf(2.5f, x[n - 1], a[n - 1])));
        cr_assert(isnan(part[1]) && isnan(part[2]));
        d->ops->release(d, ba);
        d->ops->release(d, bx);
        d->ops->release(d, by);
        free(a);
        free(x);
        free(y);
    }
    /* a launch of zero workgroups does nothing, as on Vulkan */
    rt_buffer *b = d->ops->alloc(d, 4, &err);
    cr_assert_not_null(b, "%s", err.msg);
    rt_arg args[5] = {{b, 0}, {b, 0}, {b, 0}, {NULL, 1}, {NULL, 0}};
    rt_launch none = {ck, {0, 1, 1}, args, 5};
    cr_assert_eq(d->ops->run(d, &none, 1, &err), 0, "%s", err.msg);
    d->ops->release(d, b);
    d->ops->release_kernel(d, ck);
    ir_kernel_destroy(k);
}

/* acc[i] += step[0] for i < n: each replay adds the current step value. */
static ir_kernel *accumulate(void) {
    ir_kernel *k = ir_kernel_create("accumulate");
    ir_buf acc = ir_param_buffer(k, "acc", IR_F32, IR_READ | IR_WRITE),
           step = ir_param_buffer(k, "step", IR_F32, IR_READ);
    ir_val n = ir_param_scalar(k, "n", IR_U32);
    ir_set_workgroup(k, 32, 1, 1);
    ir_val i = ir_id(k, IR_ID_GLOBAL, 0);
    ir_if *f = ir_if_begin(k, ir_compare(k, IR_LT, i, n), 0);
    ir_store(k, acc, i, ir_bin(k, IR_OP_ADD, ir_load(k, acc, i, 1), ir_load(k, step, ir_const_u32(k, 0), 1)));
    ir_if_end(k, f, NULL);
    return k;
}

void tu_dev_record_replay(rt_device *d) {
    kiln_err err = {0};
    ir_kernel *k = accumulate();
    rt_kernel *ck = d->ops->compile(d, k, NULL, &err);
    cr_assert_not_null(ck, "%s (%s)", err.msg, ir_kernel_error(k));
    uint32_t len = 100;
    float zero[100] = {0}, out[100];
    rt_buffer *b = d->ops->alloc(d, sizeof zero, &err), *s = d->ops->alloc(d, 4, &err);
    cr_assert(b && s, "%s", err.msg);
    cr_assert_eq(d->ops->upload(d, b, 0, zero, sizeof zero, &err), 0);
    rt_arg args[3] = {{b, 0}, {s, 0}, {NULL, len}};
    rt_launch l = {ck, {(len + 31) / 32, 1, 1}, args, 3};
    rt_launch two[2] = {l, l}; /* the second launch must see the first's writes */
    rt_recording *rec = d->ops->record(d, two, 2, &err);
    cr_assert_not_null(rec, "%s", err.msg);
    float total = 0;
    for (int r = 1; r <= 5; r++) {
        float v = (float)r;
        cr_assert_eq(d->ops->upload(d, s, 0, &v, 4, &err), 0);
        cr_assert_eq(d->ops->replay(d, rec, &err), 0, "%s", err.msg);
        total += 2 * v;
    }
    cr_assert_eq(d->ops->download(d, b, 0, out, sizeof out, &err), 0);
    for (uint32_t j = 0; j < len; j++) cr_assert_eq(out[j], total, "%u: %g", j, out[j]);
    /* run and replay interleave on one stream */
    float one = 1;
    cr_assert_eq(d->ops->upload(d, s, 0, &one, 4, &err), 0);
    cr_assert_eq(d->ops->run(d, &l, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(d->ops->replay(d, rec, &err), 0, "%s", err.msg);
    cr_assert_eq(d->ops->download(d, b, 0, out, sizeof out, &err), 0);
    for (uint32_t j = 0; j < len; j++) cr_assert_eq(out[j], total + 3, "%u: %g", j, out[j]);
    /* an empty recording replays as nothing */
    rt_recording *empty = d->ops->record(d, NULL, 0, &err);
    cr_assert_not_null(empty, "%s", err.msg);
    cr_assert_eq(d->ops->replay(d, empty, &err), 0, "%s", err.msg);
    d->ops->release_recording(d, empty);
    /* bad use is refused, not crashed on, and leaves the device usable */
    cr_assert_eq(d->ops->upload(d, s, 2, zero, 4, &err), -1);
    cr_assert(strstr(err.msg, "outside"), "%s", err.msg);
    rt_launch bad = {ck, {1, 1, 1}, args, 2};
    cr_assert_eq(d->ops->run(d, &bad, 1, &err), -1);
    cr_assert_null(d->ops->record(d, &bad, 1, &err));
    rt_arg nobuf[3] = {{NULL, 0}, {s, 0}, {NULL, len}};
    rt_launch bad2 = {ck, {1, 1, 1}, nobuf, 3};
    cr_assert_eq(d->ops->run(d, &bad2, 1, &err), -1);
    cr_assert(strstr(err.msg, "without a buffer"), "%s", err.msg);
    cr_assert_eq(d->ops->replay(d, rec, &err), 0, "%s", err.msg);
    d->ops->release_recording(d, rec);
    d->ops->release(d, b);
    d->ops->release(d, s);
    d->ops->release_kernel(d, ck);
    ir_kernel_destroy(k);
}

void tu_dev_host_buffers(rt_device *d) {
    kiln_err err = {0};
    ir_kernel *k = tu_dev_axpy_kernel();
    rt_kernel *ck = d->ops->compile(d, k, NULL, &err);
    cr_assert_not_null(ck, "%s", err.msg);
    uint32_t n = 1000, guard = 16;
    float *a = malloc(n * 4), *y = malloc((n + guard) * 4), *x = malloc(n * 4);
    for (uint32_t i = 0; i < n; i++) a[i] = (float)i;
    for (uint32_t i = 0; i < n + guard; i++) y[i] = NAN;
    rt_buffer *ba = d->ops->alloc(d, n * 4, &err), *bx = d->ops->alloc_host(d, n * 4, &err),
              *by = d->ops->alloc_host(d, (n + guard) * 4, &err);
    cr_assert(ba && bx && by, "%s", err.msg);
    /* the sizes the plan checks each binding against: what was asked for, host or not */
    cr_assert_eq(d->ops->size(d, ba), n * 4);
    cr_assert_eq(d->ops->size(d, by), (n + guard) * 4);
    cr_assert_eq(d->ops->upload(d, ba, 0, a, n * 4, &err), 0, "%s", err.msg);
    cr_assert_eq(d->ops->upload(d, by, 0, y, (n + guard) * 4, &err), 0, "%s", err.msg);
    rt_arg args[5] = {{ba, 0}, {bx, 0}, {by, 0}, {NULL, n}, {NULL, fbits(1.0f)}};
    rt_launch l = {ck, {(n + 63) / 64, 1, 1}, args, 5};
    rt_recording *rec = d->ops->record(d, &l, 1, &err);
    cr_assert_not_null(rec, "%s", err.msg);
    for (int r = 0; r < 3; r++) {
        for (uint32_t i = 0; i < n; i++) x[i] = (float)(r * 7 + (int)(i % 5));
        cr_assert_eq(d->ops->upload(d, bx, 0, x, n * 4, &err), 0, "%s", err.msg);
        cr_assert_eq(d->ops->replay(d, rec, &err), 0, "%s", err.msg);
        cr_assert_eq(d->ops->download(d, by, 0, y, (n + guard) * 4, &err), 0, "%s", err.msg);
        for (uint32_t i = 0; i < n; i++) cr_assert_eq(y[i], a[i] + x[i], "replay %d [%u]: %g", r, i, y[i]);
        for (uint32_t i = n; i < n + guard; i++) cr_assert(isnan(y[i]), "wrote past the end at %u", i);
    }
    cr_assert_eq(d->ops->upload(d, bx, n * 4 - 2, x, 4, &err), -1);
    cr_assert(strstr(err.msg, "outside"), "%s", err.msg);
    cr_assert_eq(d->ops->download(d, by, (n + guard) * 4, y, 1, &err), -1);
    cr_assert_eq(d->ops->download(d, by, (n + guard) * 4, y, 0, &err), 0, "an empty copy at the end");
    rt_buffer *empty = d->ops->alloc_host(d, 0, &err);
    cr_assert_not_null(empty, "%s", err.msg);
    d->ops->release(d, empty);
    d->ops->release_recording(d, rec);
    d->ops->release(d, ba), d->ops->release(d, bx), d->ops->release(d, by);
    d->ops->release_kernel(d, ck);
    ir_kernel_destroy(k);
    free(a), free(x), free(y);
}


/* Views: a kernel bound to a view reads and writes the parent's bytes from the view's
 * offset and nothing past its end; uploads and downloads through a view reach the same
 * bytes; a misaligned, empty or out-of-range view is refused. */
void tu_dev_views(rt_device *d) {
    kiln_err err = {0};
    ir_kernel *k = tu_dev_axpy_kernel();
    rt_kernel *ck = d->ops->compile(d, k, NULL, &err);
    cr_assert_not_null(ck, "%s", err.msg);
    enum { N = 4096, AT = 1024, LEN = 200 }; /* floats; the views at 4 * AT bytes */
    float *host = malloc(N * 4), *got = malloc(N * 4);
    for (uint32_t i = 0; i < N; i++) host[i] = (float)i;
    rt_buffer *p = d->ops->alloc(d, N * 4, &err), *q = d->ops->alloc(d, N * 4, &err);
    cr_assert(p && q, "%s", err.msg);
    cr_assert_eq(d->ops->upload(d, p, 0, host, N * 4, &err), 0, "%s", err.msg);
    for (uint32_t i = 0; i < N; i++) got[i] = NAN;
    cr_assert_eq(d->ops->upload(d, q, 0, got, N * 4, &err), 0, "%s", err.msg);
    rt_buffer *src = d->ops->view(d, p, 4 * AT, LEN * 4, &err), *dst = d->ops->view(d, q, 8 * AT, LEN * 4, &err);
    cr_assert(src && dst, "%s", err.msg);
    cr_assert_eq(d->ops->size(d, src), LEN * 4);
    /* dst = src + 2 * src through the views */
    rt_arg args[5] = {{src, 0}, {src, 0}, {dst, 0}, {NULL, LEN}, {NULL, fbits(2.0f)}};
    rt_launch l = {ck, {(LEN + 63) / 64, 1, 1}, args, 5};
    cr_assert_eq(d->ops->run(d, &l, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(d->ops->download(d, q, 0, got, N * 4, &err), 0, "%s", err.msg);
    for (uint32_t i = 0; i < N; i++) {
        bool in = i >= 2 * AT && i < 2 * AT + LEN;
        if (in) cr_assert_eq(got[i], 3.0f * (float)(AT + i - 2 * AT), "i=%u: %g", i, got[i]);
        else cr_assert(isnan(got[i]), "i=%u outside the view written: %g", i, got[i]);
    }
    /* an upload through a view lands at its offset; a download through it reads back */
    float in[4] = {-1, -2, -3, -4}, out[4];
    cr_assert_eq(d->ops->upload(d, src, 8, in, sizeof in, &err), 0, "%s", err.msg);
    cr_assert_eq(d->ops->download(d, p, 4 * AT + 8, out, sizeof out, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(in, out, sizeof in), 0);
    cr_assert_eq(d->ops->download(d, src, 8, out, sizeof out, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(in, out, sizeof in), 0);
    cr_assert_neq(d->ops->upload(d, src, LEN * 4 - 4, in, sizeof in, &err), 0, "a copy past the view's end");
    /* refused: misaligned, empty, past the end */
    cr_assert_null(d->ops->view(d, p, RT_VIEW_ALIGN / 2, 64, &err));
    cr_assert(strstr(err.msg, "aligned"), "%s", err.msg);
    cr_assert_null(d->ops->view(d, p, 0, 0, &err));
    cr_assert_null(d->ops->view(d, p, N * 4 - RT_VIEW_ALIGN, RT_VIEW_ALIGN + 4, &err));
    cr_assert_null(d->ops->view(d, p, (size_t)N * 8, 4, &err));
    d->ops->release(d, src), d->ops->release(d, dst);
    d->ops->release(d, p), d->ops->release(d, q);
    d->ops->release_kernel(d, ck);
    ir_kernel_destroy(k);
    free(host), free(got);
}

void tu_dev_free_memory(rt_device *d, bool strict) {
    uint64_t before = 0, during = 0;
    if (!d->ops->free_memory || d->ops->free_memory(d, &before)) {
        cr_assert(!strict, "%s: no free memory to read", d->label);
        return;
    }
    cr_assert_gt(before, 0, "%s: nothing free", d->label);
    cr_assert(!d->caps.memory_bytes || before <= d->caps.memory_bytes, "%s: %llu free of %llu", d->label,
              (unsigned long long)before, (unsigned long long)d->caps.memory_bytes);
    if (!strict) return;
    kiln_err err = {0};
    rt_buffer *b = d->ops->alloc(d, 256u << 20, &err);
    cr_assert_not_null(b, "%s", err.msg);
    cr_assert_eq(d->ops->free_memory(d, &during), 0);
    d->ops->release(d, b);
    cr_assert_geq(before - during, 128u << 20, "%s: %llu free before a 256 MiB buffer, %llu with it", d->label,
                  (unsigned long long)before, (unsigned long long)during);
}

bool tu_ir_has(const ir_kernel *k, const char *needle) {
    char *text = ir_print(k);
    cr_assert_not_null(text);
    bool found = strstr(text, needle) != NULL;
    free(text);
    return found;
}

const char *tu_epi_name(unsigned epi) {
    if (epi & KN_EPI_F32) return "f32";
    static const char *const names[4] = {"none", "bias", "res", "bias+res"};
    return names[epi & 3];
}
