/* kiln dump MODEL (--spirv DIR | --ptx DIR) [--device vulkan:N|cuda:N] [--sm sm_XX] [--caps LIST]
 * [--dtype T] [--ctx N]: every kernel a plan builds for the model, with kiln's IR
 * (ROLE.ir), the IR after the emitter's target rewrites (ROLE.lowered.ir: ir/lower.h) and
 *   --spirv: the SPIR-V module (ROLE.spv) and its disassembly (ROLE.spvasm), each module
 *            validated; the kernels plan_create would compile for an opened Vulkan
 *            device (its caps, less --caps), or without one for the spec-minimum Vulkan
 *            caps with 16-bit storage (which kiln's kernels need), less --caps;
 *   --ptx:   the LLVM IR kiln wrote (ROLE.ll) and the PTX LLVM made of it (ROLE.ptx), for
 *            an opened CUDA device (its caps, less --caps), or without one for CUDA's
 *            defaults at --sm (default sm_80), less --caps. kiln never assembles PTX
 *            itself (the driver does): check it with ptxas if you have one. */
#include "backend-ptx/cuda_probe.h"
#include "backend-ptx/ptx_emit.h"
#include "backend-spirv/spv_emit.h"
#include "base/error.h"
#include "cli/cli.h"
#include "devices/devices.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "plan/plan.h"
#include "runtime/caps.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char usage[] =
    "usage: kiln dump MODEL (--spirv DIR | --ptx DIR) [--device vulkan:N|cuda:N] [--sm sm_XX] [--caps LIST]\n"
    "                 [--dtype bf16|f16] [--ctx N]\n"
    "  --spirv DIR  DIR/ROLE.spv, ROLE.spvasm, ROLE.ir and ROLE.lowered.ir (the IR as the emitter\n"
    "               takes it) for every kernel of the model's plan, each module validated; without\n"
    "               --device, for spec-minimum Vulkan caps with 16-bit storage less --caps\n"
    "  --ptx DIR    DIR/ROLE.ll, ROLE.ptx, ROLE.ir and ROLE.lowered.ir; with --device cuda:N for that\n"
    "               GPU, else for CUDA at --sm (default sm_80) less --caps\n";

typedef struct dump_ctx {
    const char *dir;
    const rt_caps *caps;
    bool ptx;
    int failed, unchecked, written;
} dump_ctx;

static int write_file(const char *dir, const char *role, const char *ext, const void *data, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s", dir, role, ext);
    FILE *f = fopen(path, "wb");
    if (!f) return cli_fail("cannot write %s: %s", path, strerror(errno)), -1;
    size_t w = fwrite(data, 1, n, f);
    if (fclose(f) != 0 || w != n) return cli_fail("cannot write %s", path), -1;
    return 0;
}

/* ROLE.lowered.ir: the kernel after the IR's target rewrites, as the emitter takes it. */
static int write_lowered(dump_ctx *c, const char *role, ir_kernel *low) {
    char *text = low ? ir_print(low) : NULL;
    int rc = text ? write_file(c->dir, role, "lowered.ir", text, strlen(text)) : -1;
    free(text);
    ir_kernel_destroy(low);
    return rc;
}

static void one_ptx(dump_ctx *c, const char *role, const ir_kernel *k) {
    char *ptx = NULL, *ll = NULL;
    kiln_err err;
    if (ptx_emit(k, c->caps, &ptx, &ll, &err)) {
        cli_fail("%s: %s", role, err.msg);
        c->failed++;
        return;
    }
    char *text = ir_print(k);
    if (write_file(c->dir, role, "ptx", ptx, strlen(ptx)) || write_file(c->dir, role, "ll", ll, strlen(ll)) ||
        (text && write_file(c->dir, role, "ir", text, strlen(text))) ||
        write_lowered(c, role, ptx_lowered(k, c->caps, &err))) {
        c->failed++;
    } else {
        c->written++;
        printf("%-24s %7zu bytes of PTX for %s\n", role, strlen(ptx), ptx_target_arch(c->caps));
    }
    free(text);
    free(ptx);
    free(ll);
}

static void one_kernel(void *ctx, const char *role, const ir_kernel *k) {
    dump_ctx *c = ctx;
    if (c->ptx) {
        one_ptx(c, role, k);
        return;
    }
    spv_module m = {0};
    kiln_err err = {0};
    if (spv_emit(k, c->caps, &m, &err)) {
        cli_fail("%s: %s", role, err.msg);
        c->failed++;
        return;
    }
    char *text = ir_print(k), *dis = spv_disassemble(&m);
    int bad = write_file(c->dir, role, "spv", m.words, m.n * 4) ||
              (text && write_file(c->dir, role, "ir", text, strlen(text))) ||
              write_lowered(c, role, spv_lowered(k, c->caps, &err)) ||
              (dis && write_file(c->dir, role, "spvasm", dis, strlen(dis)));
    const char *status = "valid";
    if (!bad && spv_validate(&m, &err)) {
        if (spv_needs_newer_tools(&m)) {
            status = "not validated (SPIRV-Tools too old for cooperative matrices / bf16)";
            c->unchecked++;
        } else {
            cli_fail("%s: invalid module: %s", role, err.msg);
            bad = 1;
        }
    }
    if (bad) c->failed++;
    else {
        c->written++;
        printf("%-24s %7zu words  %s\n", role, m.n, status);
    }
    free(text);
    free(dis);
    spv_module_free(&m);
}

int cmd_dump(int argc, char **argv) {
    const char *path = NULL, *dir = NULL, *device = NULL, *caps_list = NULL, *sm = NULL;
    bool ptx = false;
    uint32_t dtype = 0;
    uint64_t n_ctx = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--spirv") || !strcmp(a, "--ptx") || !strcmp(a, "--device") || !strcmp(a, "--caps") ||
                   !strcmp(a, "--dtype") || !strcmp(a, "--ctx") || !strcmp(a, "--sm")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v) return cli_usage_error(usage, "%s needs a value", a);
            if (!strcmp(a, "--spirv") || !strcmp(a, "--ptx")) {
                if (dir) return cli_usage_error(usage, "one of --spirv and --ptx, once");
                dir = v, ptx = !strcmp(a, "--ptx");
            } else if (!strcmp(a, "--sm")) sm = v;
            else if (!strcmp(a, "--device")) device = v;
            else if (!strcmp(a, "--caps")) caps_list = v;
            else if (!strcmp(a, "--ctx")) {
                if (!cli_parse_u64(v, 1, 1u << 24, &n_ctx)) return cli_usage_error(usage, "bad --ctx '%s'", v);
            } else if (!strcmp(v, "bf16")) dtype = GGUF_T_BF16;
            else if (!strcmp(v, "f16")) dtype = GGUF_T_F16;
            else return cli_usage_error(usage, "--dtype is bf16 or f16, not '%s'", v);
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error(usage, "unknown flag '%s'", a);
        } else if (!path) {
            path = a;
        } else {
            return cli_usage_error(usage, "one model only ('%s' too)", a);
        }
    }
    if (!path) return cli_usage_error(usage, "no model given");
    if (!dir) return cli_usage_error(usage, "--spirv DIR or --ptx DIR is required");
    uint64_t cc = 80;
    if (sm && (!ptx || strncmp(sm, "sm_", 3) || !cli_parse_u64(sm + 3, 50, 120, &cc)))
        return cli_usage_error(usage, "--sm is sm_XX (50..120) with --ptx, not '%s'", sm);
    if (ptx && device && sm) return cli_usage_error(usage, "--sm or --device, not both");
    kiln_err err = {0};
    if (caps_list && rt_caps_override_check(caps_list, &err)) return cli_usage_error(usage, "%s", err.msg);
    const char *want = ptx ? "cuda:" : "vulkan:";
    dev_label dl = {ptx ? DEV_CUDA : DEV_VULKAN, 0};
    if (device && (!dev_parse(device, false, &dl) || dl.kind != (ptx ? DEV_CUDA : DEV_VULKAN)))
        return cli_usage_error(usage, "--device is %sN with --%s, not '%s'", want, ptx ? "ptx" : "spirv", device);

    rt_caps caps;
    rt_debug dbg = {0};
    rt_debug_from_list(&dbg, caps_list);
    rt_device *dev = NULL;
    if (device) {
        dev = dev_open(dl, caps_list, &err);
        if (!dev) return cli_fail("%s", err.msg);
        caps = dev->caps;
        dev->ops->destroy(dev);
    } else if (ptx) {
        rt_caps_default(&caps, RT_CUDA);
        caps.compute_capability = (uint32_t)cc;
        cuda_caps_of_arch(&caps);
        if (caps_list && rt_caps_override(&caps, caps_list, &err)) return cli_usage_error(usage, "%s", err.msg);
    } else {
        rt_caps_default(&caps, RT_VULKAN);
        caps.storage16 = true;
        if (caps_list && rt_caps_override(&caps, caps_list, &err)) return cli_usage_error(usage, "%s", err.msg);
    }
    if (mkdir(dir, 0777) && errno != EEXIST) return cli_fail("cannot create %s: %s", dir, strerror(errno));
    model *m = model_load(path, &err);
    if (!m) return cli_fail("%s", err.msg);
    dump_ctx c = {dir, &caps, ptx, 0, 0, 0};
    int rc = plan_each_kernel(m, &caps, &dbg, dtype, (uint32_t)n_ctx, one_kernel, &c, &err);
    model_free(m);
    if (rc) return cli_fail("%s", err.msg);
    printf("%d kernels written to %s%s", c.written, dir, c.unchecked ? "" : "\n");
    if (c.unchecked) printf(" (%d not validated: SPIRV-Tools too old)\n", c.unchecked);
    return c.failed ? EXIT_BADFILE : 0;
}
