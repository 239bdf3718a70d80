/* The CUDA runtime (backend-ptx/cuda_*): without a driver or GPU (CI), the probe reports
 * no devices with a note, opening cuda:N fails with a message, and the kiln command says
 * so without crashing; with a GPU, IR kernels emitted as PTX are launched, recorded into
 * CUDA graphs and replayed (guard regions around outputs, host-mapped buffers), and a
 * whole model runs against the contract-mode oracle. The device tests are skipped by
 * name when there is no CUDA device, unless KILN_REQUIRE_CUDA=1, when they fail. */
#include "backend-ptx/cuda_device.h"
#include "backend-ptx/cuda_probe.h"
#include "base/error.h"
#include "gguf/gguf.h"
#include "ir/ir.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_dev.h"
#include "tests/util/testutil_plan.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t probe(rt_caps *all, uint32_t max, kiln_err *note) {
    uint32_t n = 0;
    cr_assert_eq(cuda_probe_devices(all, max, &n, note), 0, "%s", note->msg);
    return n;
}

static rt_device *open_or_skip(const char *caps) {
    rt_caps all[4];
    kiln_err err = {0};
    uint32_t n = probe(all, 4, &err);
    const char *req = getenv("KILN_REQUIRE_CUDA");
    if (n == 0 && req && *req && strcmp(req, "0"))
        cr_assert_fail("no CUDA device under KILN_REQUIRE_CUDA: %s", err.msg);
    if (n == 0) cr_skip_test("no CUDA device: %s", err.msg);
    rt_device *d = cuda_device_open(0, caps, &err);
    cr_assert_not_null(d, "%s", err.msg);
    cr_assert_str_eq(d->label, "cuda:0");
    return d;
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- without a device (this machine), and on any ------------------------------------------ */

Test(cuda, probe_reports_a_note_not_an_error) {
    rt_caps all[16];
    kiln_err note;
    kiln_fail(&note, KILN_ERR_INTERNAL, "junk");
    uint32_t n = probe(all, 16, &note);
    if (n == 0) {
        cr_assert(strstr(note.msg, "no CUDA devices: "), "%s", note.msg);
        cr_assert(!strchr(note.msg, '\n'), "one line: %s", note.msg);
    }
    for (uint32_t i = 0; i < n; i++) {
        const rt_caps *c = &all[i];
        cr_assert_eq(c->backend, RT_CUDA);
        cr_assert(c->name[0] && c->compute_capability >= 30, "%s cc %u", c->name, c->compute_capability);
        cr_assert_eq(c->subgroup_size, 32);
        cr_assert(c->subgroup_arith && c->subgroup_shuffle && c->storage16 && c->atomic_f32_add);
        /* the opt-in limit the dynamic shared memory reaches (227 KiB on the H200) */
        cr_assert(c->shared_bytes >= 48 * 1024 && c->shared_bytes <= 256 * 1024, "%u", c->shared_bytes);
        cr_assert_eq(c->async_copy, c->compute_capability >= 80);
        cr_assert_eq(c->wgmma, c->compute_capability == 90);
        cr_assert(c->max_workgroup >= 256 && c->compute_units > 0);
        cr_assert(c->shared_per_cu >= c->shared_bytes && c->l2_bytes >= (1u << 20), "shared/SM %u, L2 %llu",
                  c->shared_per_cu, (unsigned long long)c->l2_bytes);
        cr_assert(c->memory_bytes > 0 && c->free_bytes <= c->memory_bytes);
        cr_assert(c->api_version >= 11000, "%u", c->api_version);
        /* the mma.sync shapes the emitter lowers, from sm_80 (and none before) */
        cr_assert_eq(c->n_mma, c->compute_capability >= 80 ? 2u : 0u, "%u shapes at cc %u", c->n_mma,
                     c->compute_capability);
        for (uint32_t s = 0; s < c->n_mma; s++)
            cr_assert(c->mma[s].m == 16 && c->mma[s].n == 8 && c->mma[s].k == 16 && c->mma[s].acc_type == IR_F32);
        cr_assert_eq(c->max_buffer_bytes, 0);
    }
    /* the count alone, and bad arguments */
    uint32_t n0 = 99;
    cr_assert_eq(cuda_probe_devices(NULL, 0, &n0, &note), 0, "%s", note.msg);
    cr_assert_eq(n0, 0);
    if (n) cr_assert(strstr(note.msg, "only the first 0 probed"), "%s", note.msg);
    cr_assert_eq(cuda_probe_devices(all, 1, NULL, &note), -1);
    cr_assert_eq(cuda_probe_devices(NULL, 4, &n0, &note), -1);
    cr_assert_eq(cuda_probe_devices(all, 4, &n0, NULL), 0); /* no room for a note is fine */
}

Test(cuda, open_of_a_missing_device_fails_with_a_message) {
    rt_caps all[16];
    kiln_err note = {0};
    kiln_err err = {0};
    uint32_t n = probe(all, 16, &note);
    rt_device *d = cuda_device_open(n, NULL, &err); /* one past the last */
    cr_assert_null(d);
    char want[64];
    snprintf(want, sizeof want, "no CUDA device cuda:%u (%u found)", n, n);
    cr_assert(strstr(err.msg, want), "%s", err.msg);
    if (n == 0) cr_assert(strstr(err.msg, "no CUDA devices: "), "the probe's note says why: %s", err.msg);
    cr_assert_null(cuda_device_open(63, NULL, &err));
    cr_assert(strstr(err.msg, "cuda:63"), "%s", err.msg);
}

Test(cuda, kiln_command_without_a_device) {
    char out[65536];
    char err[8192];
    rt_caps all[4];
    kiln_err note = {0};
    uint32_t n = probe(all, 4, &note);
    cr_assert_eq(tu_run_kiln((const char *const[]){"probe", NULL}, out, sizeof out, err, sizeof err), 0, "%s", err);
    cr_assert(strstr(out, "cpu"), "%s", out);
    if (n == 0) {
        cr_assert(strstr(err, "kiln: no CUDA devices: "), "a note on stderr: %s", err);
        cr_assert(!strstr(out, "cuda:"), "%s", out);
    } else {
        cr_assert(strstr(out, "cuda:0"), "%s", out);
        cr_assert(strstr(out, "compute_capability"), "%s", out);
    }
    cr_assert_eq(tu_run_kiln((const char *const[]){"probe", "--json", NULL}, out, sizeof out, err, sizeof err), 0,
                 "%s", err);
    cr_assert_eq(out[0], '[', "%s", out);
    if (n) cr_assert(strstr(out, "\"cuda:0\"") && strstr(out, "\"backend\": \"cuda\""), "%s", out);

    const char *m = tu_data_file("models/stories260K.gguf");
    if (n == 0) {
        cr_assert_eq(tu_run_kiln((const char *const[]){"run", m, "-p", "x", "--device", "cuda:0", NULL}, out,
                                 sizeof out, err, sizeof err),
                     1, "%s", err);
        cr_assert(strstr(err, "cuda:0"), "%s", err);
        cr_assert(!strstr(err, "not built yet"), "%s", err);
    }
    cr_assert_eq(tu_run_kiln((const char *const[]){"run", m, "-p", "x", "--device", "cuda:x", NULL}, out, sizeof out,
                             err, sizeof err),
                 2, "%s", err);
    cr_assert(strstr(err, "cuda:N"), "%s", err);
    cr_assert_eq(tu_run_kiln((const char *const[]){"run", m, "-p", "x", "--device", "cuda:64", NULL}, out, sizeof out,
                             err, sizeof err),
                 2, "%s", err);
    cr_assert_eq(tu_run_kiln((const char *const[]){"run", m, "-p", "x", "--device", "cuda:", NULL}, out, sizeof out,
                             err, sizeof err),
                 2, "%s", err);
}

/* ---- on a CUDA device ---------------------------------------------------------------------- */

Test(cuda, axpy_at_odd_sizes_with_guards) {
    rt_device *d = open_or_skip(NULL);
    tu_dev_axpy(d);
    d->ops->destroy(d);
}

Test(cuda, views_of_a_buffer) {
    rt_device *d = open_or_skip(NULL);
    tu_dev_views(d);
    d->ops->destroy(d);
}

/* the driver's count of the card's free memory follows an allocation (the expert cache's
 * recheck reads it) */
Test(cuda, free_memory_follows_allocations) {
    rt_device *d = open_or_skip(NULL);
    tu_dev_free_memory(d, true);
    d->ops->destroy(d);
}

/* A recording is a CUDA graph. */
Test(cuda, record_once_replay_many) {
    rt_device *d = open_or_skip(NULL);
    tu_dev_record_replay(d);
    /* a grid y past 65535: the driver refuses, with its call named */
    kiln_err err = {0};
    ir_kernel *k = tu_dev_axpy_kernel();
    rt_kernel *ck = d->ops->compile(d, k, NULL, &err);
    cr_assert_not_null(ck, "%s", err.msg);
    rt_buffer *b = d->ops->alloc(d, 64, &err);
    cr_assert_not_null(b, "%s", err.msg);
    rt_arg args[5] = {{b, 0}, {b, 0}, {b, 0}, {NULL, 1}, {NULL, 0}};
    rt_launch too_big = {ck, {1, 1u << 20, 1}, args, 5};
    cr_assert_eq(d->ops->run(d, &too_big, 1, &err), -1);
    cr_assert(strstr(err.msg, "cuda:0: cuLaunchKernel"), "%s", err.msg);
    d->ops->release(d, b);
    d->ops->release_kernel(d, ck);
    ir_kernel_destroy(k);
    d->ops->destroy(d);
}

/* Launches overlap their neighbours where caps.grid_dep holds (sm_90+: programmatic
 * dependent launch), so each kernel must still see the whole of the one before it: a chain
 * of 32 dependent launches over 16 MiB, run and recorded (replayed twice), gives exact
 * counts in every element, with and without the overlap. */
static void chain(rt_device *d) {
    kiln_err err = {0};
    ir_kernel *k = tu_dev_axpy_kernel();
    rt_kernel *ck = d->ops->compile(d, k, NULL, &err);
    cr_assert_not_null(ck, "%s", err.msg);
    uint32_t n = 4u << 20, steps = 32;
    float *h = malloc((size_t)n * 4);
    cr_assert_not_null(h);
    for (uint32_t i = 0; i < n; i++) h[i] = (float)(i % 1000);
    rt_buffer *b[2] = {d->ops->alloc(d, (size_t)n * 4, &err), d->ops->alloc(d, (size_t)n * 4, &err)};
    rt_buffer *ones = d->ops->alloc(d, (size_t)n * 4, &err);
    cr_assert(b[0] && b[1] && ones, "%s", err.msg);
    cr_assert_eq(d->ops->upload(d, b[0], 0, h, (size_t)n * 4, &err), 0, "%s", err.msg);
    for (uint32_t i = 0; i < n; i++) h[i] = 1.0f;
    cr_assert_eq(d->ops->upload(d, ones, 0, h, (size_t)n * 4, &err), 0, "%s", err.msg);
    rt_arg args[32][5];
    rt_launch l[32];
    for (uint32_t i = 0; i < steps; i++) { /* b[(i + 1) % 2] = b[i % 2] + 1 */
        rt_arg a[5] = {{ones, 0}, {b[i % 2], 0}, {b[(i + 1) % 2], 0}, {NULL, n}, {NULL, fbits(1.0f)}};
        memcpy(args[i], a, sizeof a);
        l[i] = (rt_launch){ck, {n / 64, 1, 1}, args[i], 5};
    }
    cr_assert_eq(d->ops->run(d, l, steps, &err), 0, "%s", err.msg);
    rt_recording *rec = d->ops->record(d, l, steps, &err);
    cr_assert_not_null(rec, "%s", err.msg);
    for (int r = 0; r < 2; r++) cr_assert_eq(d->ops->replay(d, rec, &err), 0, "%s", err.msg);
    cr_assert_eq(d->ops->download(d, b[0], 0, h, (size_t)n * 4, &err), 0, "%s", err.msg);
    for (uint32_t i = 0; i < n; i++)
        cr_assert_eq(h[i], (float)(i % 1000 + 3 * steps), "element %u: %g after %u launches", i, h[i], 3 * steps);
    d->ops->release_recording(d, rec);
    for (int i = 0; i < 2; i++) d->ops->release(d, b[i]);
    d->ops->release(d, ones);
    d->ops->release_kernel(d, ck);
    ir_kernel_destroy(k);
    free(h);
}

Test(cuda, chained_launches_see_each_others_writes, .timeout = 120) {
    rt_device *d = open_or_skip(NULL);
    if (d->caps.compute_capability >= 90 && d->caps.api_version >= 12030)
        cr_assert(d->caps.grid_dep, "sm_90+ with driver API 12.3+ should overlap launches");
    chain(d);
    d->ops->destroy(d);
    d = open_or_skip("no-grid-dep");
    cr_assert(!d->caps.grid_dep);
    chain(d);
    d->ops->destroy(d);
}

Test(cuda, host_buffers_in_and_out_of_replays) {
    rt_device *d = open_or_skip(NULL);
    tu_dev_host_buffers(d);
    d->ops->destroy(d);
}

/* Two opens of one GPU share its primary context: closing one leaves the other working;
 * destroy frees what the caller left allocated; --caps apply and bad ones are refused. */
Test(cuda, devices_share_the_context_and_destroy_frees_leftovers) {
    rt_device *d1 = open_or_skip(NULL), *d2 = open_or_skip("subgroup=32,workgroup=256,no-atomic-f32");
    kiln_err err = {0};
    cr_assert_eq(d2->caps.max_workgroup, 256);
    cr_assert(!d2->caps.atomic_f32_add);
    cr_assert_null(cuda_device_open(0, "subgroup=64", &err), "a device cannot be made to offer more");
    cr_assert(strstr(err.msg, "subgroup"), "%s", err.msg);
    ir_kernel *k = tu_dev_axpy_kernel();
    rt_kernel *k1 = d1->ops->compile(d1, k, NULL, &err), *k2 = d2->ops->compile(d2, k, NULL, &err);
    cr_assert(k1 && k2, "%s", err.msg);
    rt_buffer *left = d1->ops->alloc(d1, 1 << 20, &err), *left_h = d1->ops->alloc_host(d1, 64, &err);
    cr_assert(left && left_h, "%s", err.msg);
    rt_arg a1[5] = {{left, 0}, {left, 0}, {left, 0}, {NULL, 16}, {NULL, 0}};
    rt_launch l1 = {k1, {1, 1, 1}, a1, 5};
    cr_assert_not_null(d1->ops->record(d1, &l1, 1, &err), "%s", err.msg);
    d1->ops->destroy(d1); /* with a buffer, a host buffer, a kernel and a recording still held */

    float v[64], out[64];
    for (int i = 0; i < 64; i++) v[i] = (float)i;
    rt_buffer *b = d2->ops->alloc(d2, sizeof v, &err);
    cr_assert_not_null(b, "%s", err.msg);
    cr_assert_eq(d2->ops->upload(d2, b, 0, v, sizeof v, &err), 0, "%s", err.msg);
    rt_arg a2[5] = {{b, 0}, {b, 0}, {b, 0}, {NULL, 64}, {NULL, fbits(1.0f)}};
    rt_launch l2 = {k2, {1, 1, 1}, a2, 5};
    cr_assert_eq(d2->ops->run(d2, &l2, 1, &err), 0, "%s", err.msg);
    cr_assert_eq(d2->ops->download(d2, b, 0, out, sizeof out, &err), 0, "%s", err.msg);
    for (int i = 0; i < 64; i++) cr_assert_eq(out[i], 2.0f * (float)i, "%d: %g", i, out[i]);
    d2->ops->release(d2, b);
    d2->ops->release_kernel(d2, k2);
    ir_kernel_destroy(k);
    d2->ops->destroy(d2);
}

/* What the emitter or the driver refuses comes back as a message. */
Test(cuda, compile_errors_are_messages) {
    rt_device *d = open_or_skip(NULL);
    kiln_err err = {0};
    ir_kernel *k = ir_kernel_create("spec_scale");
    ir_buf y = ir_param_buffer(k, "y", IR_F32, IR_WRITE);
    ir_val s = ir_spec_const(k, "scale", IR_F32, 2.0);
    ir_set_workgroup(k, 32, 1, 1);
    ir_val i = ir_id(k, IR_ID_GLOBAL, 0);
    ir_store(k, y, i, ir_bin(k, IR_OP_MUL, s, ir_convert(k, i, ir_t_scalar(k, IR_F32))));
    cr_assert_eq(ir_verify(k, &err), 0, "%s (%s)", err.msg, ir_kernel_error(k));
    double dflt = 2.0, other = 3.0;
    rt_kernel *ck = d->ops->compile(d, k, &dflt, &err);
    cr_assert_not_null(ck, "defaults are what the emitter folds: %s", err.msg);
    d->ops->release_kernel(d, ck);
    cr_assert_null(d->ops->compile(d, k, &other, &err));
    cr_assert(strstr(err.msg, "scale") && strstr(err.msg, "ir_specialize"), "%s", err.msg);
    ir_kernel_destroy(k);
    d->ops->destroy(d);
}

/* ---- a whole model against the oracle ------------------------------------------------------ */

static double compare_on(const char *caps, const char *path, uint32_t dtype, uint32_t steps, const int32_t *prompt,
                         uint32_t n_prompt, uint32_t n_block) {
    rt_device *d = open_or_skip(caps);
    double worst = tu_plan_compare(d, caps, path, dtype, steps, prompt, n_prompt, n_block, NULL);
    d->ops->destroy(d);
    return worst;
}

Test(cuda, stories260k_against_the_oracle, .timeout = 600) {
    rt_device *d = open_or_skip(NULL); /* skip before asking for the data */
    d->ops->destroy(d);
    const char *path = tu_data_file("models/stories260K.gguf");
    int32_t bos = 1;
    const char *variants[] = {NULL, "no-subgroup-arith", "workgroup=64"};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        double worst = compare_on(variants[v], path, GGUF_T_BF16, 64, &bos, 1, 0);
        cr_assert_lt(worst, 1e-2, "caps=%s: logits relative error %.3e", variants[v] ? variants[v] : "device", worst);
    }
    /* a prompt through several prefill blocks and a partial one */
    int32_t ids[400];
    uint32_t n = tu_story_ids(path, ids, 400);
    double worst = compare_on(NULL, path, GGUF_T_BF16, 8, ids, n, 64);
    cr_assert_lt(worst, 1e-2, "story prompt: logits relative error %.3e", worst);
}
