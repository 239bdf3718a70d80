/* The capability struct's common part: per-backend defaults, every --caps item, bad
 * items, overrides that only ever take away, and the stable text `kiln probe` prints. */
#include "base/error.h"
#include "ir/ir.h"
#include "runtime/caps.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A device that offers a little of everything (an H200-like card with a wider subgroup
 * range, so subgroup=N has room to move). */
static rt_caps rich(void) {
    rt_caps c;
    rt_caps_default(&c, RT_VULKAN);
    snprintf(c.vendor, sizeof c.vendor, "NVIDIA");
    snprintf(c.name, sizeof c.name, "NVIDIA H200");
    snprintf(c.driver, sizeof c.driver, "NVIDIA 580.159.04");
    c.api_version = (1u << 22) | (4u << 12) | 312u;
    c.subgroup_size = 32, c.subgroup_min = 8, c.subgroup_max = 64;
    c.subgroup_arith = c.subgroup_shuffle = true;
    c.f16_arith = c.bf16_arith = c.int8_arith = c.storage16 = c.atomic_f32_add = true;
    const rt_mma_shape shapes[] = {{16, 16, 16, IR_F16, IR_F32},
                                   {16, 8, 16, IR_F16, IR_F16},
                                   {16, 16, 16, IR_BF16, IR_F32},
                                   {16, 8, 8, IR_F16, IR_F32}};
    c.n_mma = 4;
    memcpy(c.mma, shapes, sizeof shapes);
    /* VK_NV_cooperative_matrix2's workgroup scope, as the H200's driver lists it */
    const rt_mma_shape wg[] = {
        {16, 16, 16, IR_F16, IR_F32, 64}, {32, 32, 16, IR_F16, IR_F32, 256}, {32, 32, 16, IR_BF16, IR_F32, 256}};
    c.n_wg_mma = 3;
    memcpy(c.wg_mma, wg, sizeof wg);
    c.wg_mma_max_dim = 1024, c.wg_mma_reserved_shared = 8192;
    c.shared_bytes = 48 * 1024;
    c.max_workgroup = 1024;
    c.max_buffer_bytes = UINT32_MAX;
    c.compute_units = 132;
    c.memory_bytes = 150754820096ull;
    c.free_bytes = 100000000000ull;
    return c;
}

static const char *describe(const rt_caps *c) {
    static char buf[4][4096];
    static int k;
    k = (k + 1) % 4;
    size_t n = rt_caps_describe(c, buf[k], sizeof buf[k]);
    cr_assert_lt(n, sizeof buf[k]);
    cr_assert_eq(n, strlen(buf[k]));
    return buf[k];
}

/* after may only lack what before had: every flag, range, size and shape a subset. */
static void assert_only_took(const rt_caps *before, const rt_caps *after) {
    cr_assert_eq(after->backend, before->backend);
    cr_assert_str_eq(after->name, before->name);
    cr_assert_eq(after->memory_bytes, before->memory_bytes);
#define LE(f) cr_assert_leq((int)after->f, (int)before->f, #f " grew")
    LE(subgroup_arith);
    LE(subgroup_shuffle);
    LE(f16_arith);
    LE(bf16_arith);
    LE(int8_arith);
    LE(storage16);
    LE(atomic_f32_add);
#undef LE
    cr_assert_leq(after->shared_bytes, before->shared_bytes);
    cr_assert_leq(after->max_workgroup, before->max_workgroup);
    cr_assert_geq(after->subgroup_min, before->subgroup_min);
    cr_assert_leq(after->subgroup_max, before->subgroup_max);
    cr_assert(after->subgroup_min <= after->subgroup_size && after->subgroup_size <= after->subgroup_max);
    cr_assert_leq(after->n_mma, before->n_mma);
    for (uint32_t i = 0; i < after->n_mma; i++) {
        bool found = false;
        for (uint32_t j = 0; j < before->n_mma && !found; j++)
            found = !memcmp(&after->mma[i], &before->mma[j], sizeof after->mma[i]);
        cr_assert(found, "shape %u was not offered before", i);
    }
    cr_assert_leq(after->n_wg_mma, before->n_wg_mma);
    for (uint32_t i = 0; i < after->n_wg_mma; i++) {
        bool found = false;
        for (uint32_t j = 0; j < before->n_wg_mma && !found; j++)
            found = !memcmp(&after->wg_mma[i], &before->wg_mma[j], sizeof after->wg_mma[i]);
        cr_assert(found, "workgroup shape %u was not offered before", i);
    }
}

Test(caps, default_vulkan_is_the_spec_minimum) {
    rt_caps c;
    memset(&c, 0x5a, sizeof c);
    rt_caps_default(&c, RT_VULKAN);
    cr_assert_eq(c.backend, RT_VULKAN);
    cr_assert_eq(c.subgroup_size, 4);
    cr_assert_eq(c.subgroup_min, 4);
    cr_assert_eq(c.subgroup_max, 4);
    cr_assert(!c.subgroup_arith && !c.subgroup_shuffle);
    cr_assert(!c.f16_arith && !c.bf16_arith && !c.int8_arith && !c.storage16 && !c.atomic_f32_add);
    cr_assert_eq(c.n_mma, 0);
    cr_assert_eq(c.shared_bytes, 16384);
    cr_assert_eq(c.max_workgroup, 128);
    cr_assert_eq(c.compute_units, 0);
    cr_assert_eq(c.memory_bytes, 0);
    cr_assert_str_empty(c.name);
    cr_assert_str_empty(c.vendor);
}

Test(caps, default_cuda) {
    rt_caps c;
    rt_caps_default(&c, RT_CUDA);
    cr_assert_eq(c.backend, RT_CUDA);
    cr_assert_eq(c.subgroup_size, 32);
    cr_assert_eq(c.subgroup_min, 32);
    cr_assert_eq(c.subgroup_max, 32);
    cr_assert(c.subgroup_arith && c.subgroup_shuffle && c.storage16 && c.atomic_f32_add);
    cr_assert(!c.f16_arith && !c.bf16_arith && !c.int8_arith, "these depend on the architecture");
    cr_assert_eq(c.n_mma, 0);
    cr_assert_eq(c.shared_bytes, 48 * 1024);
    cr_assert_eq(c.max_workgroup, 1024);
}

Test(caps, default_cpu_describes_the_oracle) {
    rt_caps c;
    rt_caps_default(&c, RT_CPU);
    cr_assert_eq(c.backend, RT_CPU);
    cr_assert_str_eq(c.name, "cpu (oracle)");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cr_assert_eq(c.compute_units, (uint32_t)cores);
    cr_assert_geq(c.compute_units, 1);
    uint64_t mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    cr_assert_eq(c.memory_bytes, mem);
    cr_assert_gt(c.free_bytes, 0);
    cr_assert_leq(c.free_bytes, c.memory_bytes);
    cr_assert_eq(c.subgroup_size, 1);
    cr_assert_eq(c.n_mma, 0);
    cr_assert(strstr(describe(&c), "name: cpu (oracle)\n"));
    cr_assert(strstr(describe(&c), "backend: cpu\n"));
}

/* Each item alone on the rich device: exactly the fields it names change. */
Test(caps, every_override_item) {
    const rt_caps base = rich();
    rt_caps got, want;

    got = base, want = base;
    cr_assert_eq(rt_caps_override(&got, "no-coopmat", NULL), 0);
    want.n_mma = want.n_wg_mma = 0; /* workgroup scope builds on the subgroup matrices */
    memset(want.mma, 0, sizeof want.mma);
    memset(want.wg_mma, 0, sizeof want.wg_mma);
    cr_assert_str_eq(describe(&got), describe(&want));
    cr_assert(strstr(describe(&got), "mma: none\nwg_mma: none\n"));

    got = base, want = base;
    cr_assert_eq(rt_caps_override(&got, "no-coopmat2", NULL), 0);
    want.n_wg_mma = 0;
    memset(want.wg_mma, 0, sizeof want.wg_mma);
    cr_assert_str_eq(describe(&got), describe(&want));
    cr_assert(strstr(describe(&got), "16x8x8 f16*f16+f32\nwg_mma: none\n"));

    got = base, want = base;
    cr_assert_eq(rt_caps_override(&got, "no-f16", NULL), 0);
    want.f16_arith = false;
    want.n_mma = 1; /* f16 fragments go with f16 arithmetic; the bf16*bf16+f32 shape stays */
    want.mma[0] = base.mma[2];
    want.n_wg_mma = 1;
    want.wg_mma[0] = base.wg_mma[2];
    cr_assert_str_eq(describe(&got), describe(&want));

    got = base, want = base;
    cr_assert_eq(rt_caps_override(&got, "no-bf16", NULL), 0);
    want.bf16_arith = false;
    want.n_mma = 3;
    want.mma[2] = base.mma[3];
    want.n_wg_mma = 2;
    cr_assert_str_eq(describe(&got), describe(&want));

    got = base, want = base;
    cr_assert_eq(rt_caps_override(&got, "no-storage16", NULL), 0);
    want.storage16 = false;
    cr_assert_str_eq(describe(&got), describe(&want));

    got = base, want = base;
    cr_assert_eq(rt_caps_override(&got, "no-subgroup-arith", NULL), 0);
    want.subgroup_arith = false;
    cr_assert_str_eq(describe(&got), describe(&want));

    got = base, want = base;
    cr_assert_eq(rt_caps_override(&got, "no-subgroup-shuffle", NULL), 0);
    want.subgroup_shuffle = false;
    cr_assert_str_eq(describe(&got), describe(&want));

    got = base, want = base;
    cr_assert_eq(rt_caps_override(&got, "no-atomic-f32", NULL), 0);
    want.atomic_f32_add = false;
    cr_assert_str_eq(describe(&got), describe(&want));

    /* the sm_90 items, on caps that have them */
    static const char *const sm90[] = {"no-wgmma", "no-grid-dep", "no-tma"};
    for (size_t i = 0; i < 3; i++) {
        got = base, got.wgmma = got.grid_dep = got.tma = true;
        want = got;
        cr_assert_eq(rt_caps_override(&got, sm90[i], NULL), 0, "%s", sm90[i]);
        *(i == 0 ? &want.wgmma : i == 1 ? &want.grid_dep : &want.tma) = false;
        cr_assert_str_eq(describe(&got), describe(&want), "%s", sm90[i]);
    }

    /* subgroup=N: kernels are built for N; the device's range stays as it is */
    const uint32_t sizes[] = {8, 16, 32, 64};
    for (size_t i = 0; i < 4; i++) {
        char item[32];
        snprintf(item, sizeof item, "subgroup=%u", sizes[i]);
        got = base, want = base;
        cr_assert_eq(rt_caps_override(&got, item, NULL), 0, "%s", item);
        want.subgroup_size = sizes[i];
        cr_assert_str_eq(describe(&got), describe(&want));
    }

    got = base, want = base;
    cr_assert_eq(rt_caps_override(&got, "shared=16384", NULL), 0);
    want.shared_bytes = 16384;
    cr_assert_str_eq(describe(&got), describe(&want));
    got = base;
    cr_assert_eq(rt_caps_override(&got, "shared=49152", NULL), 0, "the device's own value is allowed");
    cr_assert_eq(got.shared_bytes, 49152);
    got = base;
    cr_assert_eq(rt_caps_override(&got, "shared=0", NULL), 0, "no workgroup memory at all");
    cr_assert_eq(got.shared_bytes, 0);

    got = base, want = base;
    cr_assert_eq(rt_caps_override(&got, "workgroup=256", NULL), 0);
    want.max_workgroup = 256;
    cr_assert_str_eq(describe(&got), describe(&want));
    got = base;
    cr_assert_eq(rt_caps_override(&got, "workgroup=1024", NULL), 0);
    cr_assert_eq(got.max_workgroup, 1024);
}

Test(caps, lists_of_items) {
    const rt_caps base = rich();
    rt_caps got = base, want = base;
    kiln_err err;
    kiln_fail(&err, KILN_ERR_INTERNAL, "stale");
    cr_assert_eq(rt_caps_override(&got, " no-f16 ,\tworkgroup=512, subgroup=16,no-atomic-f32 ", &err), 0);
    cr_assert_str_empty(err.msg, "err is cleared on success");
    cr_assert_eq(err.code, KILN_OK);
    want.f16_arith = false;
    want.n_mma = 1;
    want.mma[0] = base.mma[2];
    want.n_wg_mma = 1;
    want.wg_mma[0] = base.wg_mma[2];
    memset(&want.wg_mma[1], 0, sizeof want.wg_mma[1] * 2);
    want.max_workgroup = 512;
    want.subgroup_size = 16;
    want.atomic_f32_add = false;
    cr_assert_str_eq(describe(&got), describe(&want));

    /* the same item twice, and later items narrowing earlier ones */
    got = base;
    cr_assert_eq(rt_caps_override(&got, "no-f16,no-f16,shared=32768,shared=1024", NULL), 0);
    cr_assert_eq(got.shared_bytes, 1024);
    got = base;
    cr_assert_eq(rt_caps_override(&got, "subgroup=64,subgroup=16", NULL), 0);
    cr_assert_eq(got.subgroup_size, 16, "the last one counts");
    cr_assert_eq(got.subgroup_min, 8);
    cr_assert_eq(got.subgroup_max, 64);

    /* nothing to override */
    const char *empty[] = {NULL, "", "   ", "\t"};
    for (size_t i = 0; i < 4; i++) {
        got = base;
        cr_assert_eq(rt_caps_override(&got, empty[i], NULL), 0);
        cr_assert_str_eq(describe(&got), describe(&base));
    }
}

Test(caps, bad_items_name_the_item_and_change_nothing) {
    const rt_caps base = rich();
    struct {
        const char *list, *want;
    } bad[] = {
        {"no-frobnicate", "unknown caps item 'no-frobnicate'"},
        {"No-F16", "unknown caps item 'No-F16'"},
        {"no-f16,bogus", "'bogus'"},
        {"f16", "unknown caps item 'f16'"},
        {"no-f16=1", "caps item 'no-f16=1': takes no value"},
        {"no-coopmat=", "'no-coopmat=': takes no value"},
        {"subgroup", "caps item 'subgroup': needs =N"},
        {"shared", "'shared': needs =N"},
        {"workgroup", "'workgroup': needs =N"},
        {"subgroup=", "'subgroup=': '' is not a decimal number"},
        {"subgroup=abc", "'subgroup=abc': 'abc' is not a decimal number"},
        {"subgroup=-8", "'subgroup=-8'"},
        {"subgroup=+8", "'subgroup=+8'"},
        {"subgroup=8x", "'subgroup=8x'"},
        {"subgroup=0x10", "'subgroup=0x10'"},
        {"subgroup= 8", "'subgroup= 8'"},
        {"subgroup=12", "'subgroup=12': 12 is not a power of two"},
        {"subgroup=0", "'subgroup=0': 0 is not a power of two"},
        {"subgroup=4", "'subgroup=4': the device's subgroup sizes are 8..64"},
        {"subgroup=128", "'subgroup=128'"},
        {"subgroup=99999999999", "'subgroup=99999999999'"},
        {"shared=49153", "'shared=49153': the device offers 49152 bytes"},
        {"shared=4294967296", "'shared=4294967296'"},
        {"shared=1.5", "'shared=1.5'"},
        {"workgroup=0", "'workgroup=0': a workgroup needs at least 1 invocation"},
        {"workgroup=1025", "'workgroup=1025': the device allows 1024 invocations"},
        {"no-f16,,no-bf16", "empty caps item (number 2)"},
        {"no-f16,", "empty caps item (number 2)"},
        {",no-f16", "empty caps item (number 1)"},
        {" , ", "empty caps item (number 1)"},
        {"no-f16;no-bf16", "unknown caps item 'no-f16;no-bf16'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rt_caps got = base;
        kiln_err err = {0};
        cr_assert_eq(rt_caps_override(&got, bad[i].list, &err), -1, "'%s' accepted", bad[i].list);
        cr_assert(strstr(err.msg, bad[i].want), "'%s': message '%s' lacks '%s'", bad[i].list, err.msg, bad[i].want);
        cr_assert_str_eq(describe(&got), describe(&base), "'%s' changed the caps", bad[i].list);
    }
    /* the error is coded invalid input; an absent one is safe */
    rt_caps got = base;
    kiln_err e = {0};
    cr_assert_eq(rt_caps_override(&got, "no-frobnicate", &e), -1);
    cr_assert_eq(e.code, KILN_ERR_INVALID);
    cr_assert(strstr(e.msg, "'no-frobnicate'"), "%s", e.msg);
    cr_assert_eq(rt_caps_override(&got, "no-frobnicate", NULL), -1);
    cr_assert_eq(rt_caps_override(NULL, "no-f16", NULL), -1);
}

Test(caps, syntax_check_without_a_device) {
    kiln_err err = {0};
    cr_assert_eq(rt_caps_override_check("no-coopmat,no-f16,no-bf16,no-storage16,no-subgroup-arith,"
                                        "no-subgroup-shuffle,no-atomic-f32,subgroup=128,shared=1048576,workgroup=4096",
                                        &err),
                 0, "%s", err.msg);
    cr_assert_eq(rt_caps_override_check(NULL, &err), 0);
    cr_assert_eq(rt_caps_override_check("subgroup=12", &err), -1);
    cr_assert(strstr(err.msg, "'subgroup=12'"));
    cr_assert_eq(rt_caps_override_check("workgroup=0", &err), -1);
    cr_assert_eq(rt_caps_override_check("no-fp8", &err), -1);
    cr_assert(strstr(err.msg, "'no-fp8'"));
}

Test(caps, overrides_never_add) {
    /* A device with nothing: every item either changes nothing or is refused. */
    rt_caps none;
    rt_caps_default(&none, RT_VULKAN);
    const char *flags[] = {"no-coopmat",        "no-coopmat2",         "no-f16",       "no-bf16", "no-storage16",
                           "no-subgroup-arith", "no-subgroup-shuffle", "no-atomic-f32"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        rt_caps got = none;
        cr_assert_eq(rt_caps_override(&got, flags[i], NULL), 0);
        cr_assert_str_eq(describe(&got), describe(&none), "%s", flags[i]);
    }
    const char *more[] = {"subgroup=8",   "subgroup=2",    "shared=16385",
                          "shared=65536", "workgroup=129", "workgroup=1024"};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
        rt_caps got = none;
        cr_assert_eq(rt_caps_override(&got, more[i], NULL), -1, "%s", more[i]);
        cr_assert_str_eq(describe(&got), describe(&none));
    }

    /* Random lists on the rich device (a fixed seed, so a failure repeats): what applies
     * only takes away; what is refused leaves the caps as they were. */
    const rt_caps base = rich();
    const char *pool[] = {"no-coopmat",        "no-coopmat2",         "no-f16",        "no-bf16",      "no-storage16",
                          "no-subgroup-arith", "no-subgroup-shuffle", "no-atomic-f32", "subgroup=4",   "subgroup=8",
                          "subgroup=16",       "subgroup=32",         "subgroup=64",   "subgroup=128", "shared=0",
                          "shared=32768",      "shared=49152",        "shared=65536",  "workgroup=1",  "workgroup=64",
                          "workgroup=1024",    "workgroup=2048"};
    const size_t npool = sizeof pool / sizeof pool[0];
    uint32_t seed = 12345;
    int applied = 0;
    for (int iter = 0; iter < 3000; iter++) {
        char list[512] = "";
        size_t len = 0;
        seed = seed * 1664525u + 1013904223u;
        int items = 1 + (int)(seed >> 28) % 5;
        for (int j = 0; j < items; j++) {
            seed = seed * 1664525u + 1013904223u;
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", j ? "," : "", pool[(seed >> 16) % npool]);
        }
        rt_caps got = base;
        if (rt_caps_override(&got, list, NULL) == 0) {
            applied++;
            assert_only_took(&base, &got);
            /* applying the same list again takes nothing more (or is refused, when a later
             * item narrowed what an earlier one asks for: "shared=32768,shared=0") */
            rt_caps again = got;
            (void)rt_caps_override(&again, list, NULL);
            cr_assert_str_eq(describe(&again), describe(&got), "%s", list);
        } else {
            cr_assert_str_eq(describe(&got), describe(&base), "%s", list);
        }
    }
    cr_assert_gt(applied, 500, "the random lists mostly apply (%d)", applied);
}

Test(caps, describe_is_stable) {
    const rt_caps c = rich();
    const char *want = "backend: vulkan\n"
                       "vendor: NVIDIA\n"
                       "name: NVIDIA H200\n"
                       "driver: NVIDIA 580.159.04\n"
                       "api_version: 1.4.312\n"
                       "compute_capability: -\n"
                       "subgroup_size: 32\n"
                       "subgroup_min: 8\n"
                       "subgroup_max: 64\n"
                       "subgroup_arith: yes\n"
                       "subgroup_shuffle: yes\n"
                       "f16_arith: yes\n"
                       "bf16_arith: yes\n"
                       "int8_arith: yes\n"
                       "storage16: yes\n"
                       "atomic_f32_add: yes\n"
                       "async_copy: no\n"
                       "wgmma: no\n"
                       "grid_dep: no\n"
                       "tma: no\n"
                       "mma: 16x16x16 f16*f16+f32, 16x8x16 f16*f16+f16, 16x16x16 bf16*bf16+f32, 16x8x8 f16*f16+f32\n"
                       "wg_mma: 16x16x16/64 f16*f16+f32, 32x32x16/256 f16*f16+f32, 32x32x16/256 bf16*bf16+f32 "
                       "(granularities / invocations; up to 1024, 8192 bytes of workgroup memory reserved)\n"
                       "shared_bytes: 49152 (48 KiB)\n"
                       "max_workgroup: 1024\n"
                       "max_buffer_bytes: 4294967295 (4.00 GiB)\n"
                       "shared_per_cu: 0 (unknown)\n"
                       "l2_bytes: 0 (unknown)\n"
                       "compute_units: 132\n"
                       "memory_bytes: 150754820096 (140.40 GiB)\n"
                       "free_bytes: 100000000000 (93.13 GiB)\n";
    cr_assert_str_eq(describe(&c), want);
    cr_assert_str_eq(describe(&c), describe(&c), "the same text every time");

    /* CUDA versions and compute capability; unknowns and empty strings */
    rt_caps cu;
    rt_caps_default(&cu, RT_CUDA);
    cu.api_version = 13000;
    cu.compute_capability = 90;
    const char *d = describe(&cu);
    cr_assert(strstr(d, "backend: cuda\nvendor: -\nname: -\ndriver: -\napi_version: 13.0\ncompute_capability: 9.0\n"),
              "%s", d);
    cr_assert(
        strstr(
            d,
            "mma: none\nwg_mma: none\nshared_bytes: 49152 (48 KiB)\nmax_workgroup: 1024\nmax_buffer_bytes: no limit\n"
            "shared_per_cu: 0 (unknown)\nl2_bytes: 0 (unknown)\n"
            "compute_units: 0 (unknown)\n"
            "memory_bytes: 0 (unknown)\nfree_bytes: 0 (unknown)\n"),
        "%s", d);

    /* a line per field, whatever the driver put in its strings */
    rt_caps odd = c;
    memset(odd.name, 'x', sizeof odd.name); /* no NUL at all */
    memcpy(odd.vendor, "a\nb", 4);
    d = describe(&odd);
    int lines = 0;
    for (const char *p = d; *p; p++) lines += *p == '\n';
    cr_assert_eq(lines, 30, "%s", d);
    cr_assert(strstr(d, "vendor: a?b\n"));

    /* sizing: NULL buffer, short buffers */
    size_t need = rt_caps_describe(&c, NULL, 0);
    cr_assert_eq(need, strlen(want));
    char small[40];
    memset(small, '#', sizeof small);
    cr_assert_eq(rt_caps_describe(&c, small, sizeof small), need);
    cr_assert_eq(strlen(small), sizeof small - 1);
    cr_assert(!strncmp(small, want, sizeof small - 1));
    char one[1] = {'#'};
    cr_assert_eq(rt_caps_describe(&c, one, 1), need);
    cr_assert_eq(one[0], '\0');
}
