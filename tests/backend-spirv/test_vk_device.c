/* The Vulkan runtime on whatever Vulkan device this machine has (lavapipe in CI): IR
 * kernels compiled through the SPIR-V emitter, launched, recorded and replayed, with
 * guard regions around outputs. Skipped by name when no Vulkan device exists. */
#include "backend-spirv/vk_device.h"
#include "backend-spirv/vk_probe.h"
#include "base/error.h"
#include "ir/ir.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_dev.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


Test(vk_device, axpy_at_odd_sizes_with_guards) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_dev_axpy(d);
    d->ops->destroy(d);
}

/* A recording is one command buffer, resubmitted. */
Test(vk_device, record_once_replay_many) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_dev_record_replay(d);
    d->ops->destroy(d);
}

Test(vk_device, host_buffers_in_and_out_of_replays) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_dev_host_buffers(d);
    d->ops->destroy(d);
}

Test(vk_device, views_of_a_buffer) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_dev_views(d);
    d->ops->destroy(d);
}

Test(vk_device, free_memory_where_told) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_dev_free_memory(d, false);
    d->ops->destroy(d);
}

/* Pipelines go to a cache file per driver build that the next start reads; a damaged
 * file is ignored, not trusted. */
Test(vk_device, pipeline_cache_on_disk) {
    const char *dir = tu_tmpdir();
    setenv("KILN_CACHE_DIR", dir, 1);
    rt_device *d = tu_vk_open_or_skip(NULL);
    kiln_err err = {0};
    ir_kernel *k = tu_dev_axpy_kernel();
    rt_kernel *ck = d->ops->compile(d, k, NULL, &err);
    cr_assert_not_null(ck, "%s", err.msg);
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
    cr_assert_not_null(ck = d->ops->compile(d, k, NULL, &err), "%s", err.msg);
    d->ops->release_kernel(d, ck);
    d->ops->destroy(d);
    /* a damaged file: ignored */
    cr_assert(tu_write_file(path, "not a pipeline cache at all, just junk bytes", 44));
    d = tu_vk_open_or_skip(NULL);
    cr_assert_not_null(ck = d->ops->compile(d, k, NULL, &err), "%s", err.msg);
    d->ops->release_kernel(d, ck);
    d->ops->destroy(d);
    ir_kernel_destroy(k);
}
