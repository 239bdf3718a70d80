/* The Vulkan probe against the devices this machine has. On the dev machines that is
 * Mesa's lavapipe (../shared/device/observed/lavapipe-selftest-v.txt); where the probe
 * finds no device the device tests skip by name. */
#include "backend-spirv/vk_probe.h"
#include "base/error.h"
#include "ir/ir.h"
#include "runtime/caps.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXDEV 16

static rt_caps dev[MAXDEV];
static uint32_t ndev;
static kiln_err note = {0};

static void probe_or_skip(void) {
    int rc = vk_probe_devices(dev, MAXDEV, &ndev, &note);
    cr_assert_eq(rc, 0, "vk_probe_devices: %s", note.msg);
    if (!ndev) {
        cr_assert(!strncmp(note.msg, "no Vulkan devices: ", 19), "note: '%s'", note.msg);
        cr_skip_test("%s", note.msg);
    }
}

static bool pow2(uint32_t v) { return v && !(v & (v - 1)); }

static const rt_caps *find_lavapipe(void) {
    for (uint32_t i = 0; i < ndev; i++)
        if (strstr(dev[i].name, "llvmpipe")) return &dev[i];
    return NULL;
}

/* What any conformant device reports, and what the struct promises. */
Test(vk_probe, every_device_is_plausible) {
    probe_or_skip();
    cr_assert_leq(ndev, MAXDEV);
    for (uint32_t i = 0; i < ndev; i++) {
        const rt_caps *c = &dev[i];
        cr_assert_eq(c->backend, RT_VULKAN);
        cr_assert_lt(strnlen(c->name, sizeof c->name), sizeof c->name);
        cr_assert_lt(strnlen(c->vendor, sizeof c->vendor), sizeof c->vendor);
        cr_assert_lt(strnlen(c->driver, sizeof c->driver), sizeof c->driver);
        cr_assert(c->name[0] && c->vendor[0] && c->driver[0], "device %u: empty identity", i);
        cr_assert_geq(c->api_version, (1u << 22), "device %u: api version below 1.0", i);
        cr_assert_eq(c->compute_capability, 0);
        cr_assert(pow2(c->subgroup_size) && pow2(c->subgroup_min) && pow2(c->subgroup_max));
        cr_assert(c->subgroup_min <= c->subgroup_size && c->subgroup_size <= c->subgroup_max);
        cr_assert_leq(c->subgroup_max, 128);
        cr_assert_geq(c->shared_bytes, 16384, "the spec's minimum");
        cr_assert_geq(c->max_workgroup, 128, "the spec's minimum");
        cr_assert_leq(c->n_mma, RT_MAX_MMA_SHAPES);
        for (uint32_t j = 0; j < c->n_mma; j++) {
            const rt_mma_shape *s = &c->mma[j];
            cr_assert(s->m && s->n && s->k);
            cr_assert((s->ab_type == IR_F16 && c->f16_arith) || (s->ab_type == IR_BF16 && c->bf16_arith));
            cr_assert(s->acc_type == IR_F32 || (s->acc_type == IR_F16 && c->f16_arith));
        }
        cr_assert_gt(c->memory_bytes, 0);
        cr_assert_leq(c->free_bytes, c->memory_bytes);
        char text[4096];
        size_t n = rt_caps_describe(c, text, sizeof text);
        cr_assert_lt(n, sizeof text);
        cr_assert(strstr(text, "backend: vulkan\n"));
    }
}

/* lavapipe as the self-test saw it: 8 lanes per 256 bits of SIMD, no matrix units, no
 * bf16; on Mesa 22.3.6 every number the self-test printed. */
Test(vk_probe, lavapipe_matches_the_selftest) {
    probe_or_skip();
    const rt_caps *c = find_lavapipe();
    if (!c) cr_skip_test("no lavapipe among %u Vulkan device(s)", ndev);
    cr_assert_str_eq(c->vendor, "Mesa");
    cr_assert(strstr(c->driver, "llvmpipe"), "driver '%s'", c->driver);
    cr_assert_geq(c->api_version, (1u << 22) | (1u << 12), "lavapipe offers at least Vulkan 1.1");
    const char *bits = strstr(c->name, " bits)");
    cr_assert(bits, "name '%s'", c->name);
    const char *p = bits;
    while (p > c->name && p[-1] >= '0' && p[-1] <= '9') p--;
    unsigned width = (unsigned)atoi(p);
    cr_assert(width == 128 || width == 256 || width == 512, "SIMD width %u", width);
    cr_assert_eq(c->subgroup_size, width / 32, "one lane per 32-bit element of the SIMD width");
    cr_assert_eq(c->subgroup_min, c->subgroup_size);
    cr_assert_eq(c->subgroup_max, c->subgroup_size);
    cr_assert(c->subgroup_arith && c->subgroup_shuffle);
    cr_assert(c->f16_arith && c->int8_arith && c->storage16);
    cr_assert(!c->bf16_arith);
    cr_assert_eq(c->n_mma, 0, "lavapipe has no VK_KHR_cooperative_matrix");
    cr_assert_eq(c->compute_units, 0, "unknown for a CPU device");
    uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    cr_assert_leq(c->memory_bytes, ram);
    if (strstr(c->driver, "Mesa 22.3.6")) {
        cr_assert_eq(c->api_version, (1u << 22) | (3u << 12) | 230u, "API 1.3.230");
        cr_assert_str_eq(c->name, "llvmpipe (LLVM 15.0.6, 256 bits)");
        cr_assert_str_eq(c->driver, "llvmpipe Mesa 22.3.6 (LLVM 15.0.6)");
        cr_assert_eq(c->subgroup_size, 8);
        cr_assert_eq(c->shared_bytes, 32768);
        cr_assert_eq(c->max_workgroup, 1024);
        cr_assert(c->atomic_f32_add, "VK_EXT_shader_atomic_float with buffer f32 add");
        if (ram >= (2ull << 30)) cr_assert_eq(c->memory_bytes, 2ull << 30, "one 2 GiB heap");
        cr_assert_eq(c->free_bytes, 0, "no VK_EXT_memory_budget: unknown");
    }
    /* the overrides behave on a real device */
    rt_caps t = *c;
    kiln_err err = {0};
    cr_assert_eq(rt_caps_override(&t, "no-f16,no-storage16,workgroup=256", &err), 0, "%s", err.msg);
    cr_assert(!t.f16_arith && !t.storage16 && t.max_workgroup == 256);
    char item[32];
    snprintf(item, sizeof item, "subgroup=%u", c->subgroup_max * 2);
    t = *c;
    cr_assert_eq(rt_caps_override(&t, item, &err), -1);
    cr_assert(strstr(err.msg, item), "%s", err.msg);
}

/* Probing twice gives the same devices in the same order (vulkan:N stays N). */
Test(vk_probe, repeatable_and_bounded) {
    probe_or_skip();
    rt_caps again[MAXDEV];
    uint32_t n2 = 0;
    kiln_err err = {0};
    cr_assert_eq(vk_probe_devices(again, MAXDEV, &n2, &err), 0, "%s", err.msg);
    cr_assert_eq(n2, ndev);
    for (uint32_t i = 0; i < ndev; i++) {
        cr_assert_str_eq(again[i].name, dev[i].name);
        cr_assert_eq(again[i].subgroup_size, dev[i].subgroup_size);
        cr_assert_eq(again[i].n_mma, dev[i].n_mma);
        cr_assert_eq(again[i].memory_bytes, dev[i].memory_bytes);
    }
    /* room for fewer than there are: the first ones, and a note */
    rt_caps one;
    uint32_t n1 = 99;
    cr_assert_eq(vk_probe_devices(&one, 1, &n1, &err), 0, "%s", err.msg);
    cr_assert_eq(n1, 1);
    cr_assert_str_eq(one.name, dev[0].name);
    if (ndev > 1) cr_assert(strstr(err.msg, "only the first 1 probed"), "%s", err.msg);
    n1 = 99;
    cr_assert_eq(vk_probe_devices(NULL, 0, &n1, &err), 0, "%s", err.msg);
    cr_assert_eq(n1, 0);
    cr_assert(strstr(err.msg, "only the first 0 probed"), "%s", err.msg);
}

Test(vk_probe, bad_arguments) {
    kiln_err err = {0};
    rt_caps c;
    cr_assert_eq(vk_probe_devices(&c, 1, NULL, &err), -1);
    cr_assert(strlen(err.msg) > 0);
    uint32_t n = 7;
    cr_assert_eq(vk_probe_devices(NULL, 4, &n, &err), -1);
    cr_assert_eq(vk_probe_devices(NULL, 4, &n, NULL), -1, "no message buffer is fine too");
}

/* A machine whose loader finds no driver (the CI without a GPU and without Mesa): no
 * devices and a note, not a failure. Criterion runs each test in its own process, so
 * the environment set here stays here. */
Test(vk_probe, no_driver_is_not_an_error) {
    cr_assert_eq(setenv("VK_DRIVER_FILES", "/nonexistent/kiln_no_icd.json", 1), 0);
    cr_assert_eq(setenv("VK_ICD_FILENAMES", "/nonexistent/kiln_no_icd.json", 1), 0);
    unsetenv("VK_ADD_DRIVER_FILES");
    rt_caps c[2];
    uint32_t n = 5;
    kiln_err err = {0};
    cr_assert_eq(vk_probe_devices(c, 2, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(n, 0);
    cr_assert(!strncmp(err.msg, "no Vulkan devices: ", 19), "note: '%s'", err.msg);
    /* twice in one process: nothing left behind by the first try */
    cr_assert_eq(vk_probe_devices(c, 2, &n, NULL), 0);
    cr_assert_eq(n, 0);
}
