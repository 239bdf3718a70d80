/* kiln dump MODEL --spirv DIR [--device vulkan:N] [--caps LIST] [--dtype T] [--ctx N]:
 * every kernel a plan builds for the model, as SPIR-V (ROLE.spv), its disassembly
 * (ROLE.spvasm) and kiln's IR (ROLE.ir), each module validated. The kernels are the ones
 * plan_create would compile: for an opened device (its caps, less --caps), or without
 * one for the spec-minimum Vulkan caps with 16-bit storage (which kiln's kernels
 * need), less --caps. */
#include "caps.h"
#include "cli.h"
#include "gguf.h"
#include "model.h"
#include "plan.h"
#include "spv_emit.h"
#include "vk_device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char usage[] =
    "usage: kiln dump MODEL --spirv DIR [--device vulkan:N] [--caps LIST] [--dtype bf16|f16] [--ctx N]\n"
    "  writes DIR/ROLE.spv, ROLE.spvasm and ROLE.ir for every kernel of the model's plan and\n"
    "  validates each module; without --device, for spec-minimum Vulkan caps with 16-bit\n"
    "  storage less --caps\n";

typedef struct dump_ctx {
    const char *dir;
    const rt_caps *caps;
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

/* Debian 12's SPIRV-Tools (2023.1) cannot read cooperative-matrix or bf16 modules. */
static int too_new_for_validator(const spv_module *m) {
    for (size_t i = 5; i < m->n;) {
        uint32_t wc = m->words[i] >> 16, op = m->words[i] & 0xffff;
        if (!wc) break;
        if (op == 17 && wc == 2 && (m->words[i + 1] == 6022 || m->words[i + 1] == 5116)) return 1;
        i += wc;
    }
    return 0;
}

static void one_kernel(void *ctx, const char *role, const ir_kernel *k) {
    dump_ctx *c = ctx;
    spv_module m = {0};
    char err[1024];
    if (spv_emit(k, c->caps, &m, err, sizeof err)) {
        cli_fail("%s: %s", role, err);
        c->failed++;
        return;
    }
    char *text = ir_print(k), *dis = spv_disassemble(&m);
    int bad = write_file(c->dir, role, "spv", m.words, m.n * 4) ||
              (text && write_file(c->dir, role, "ir", text, strlen(text))) ||
              (dis && write_file(c->dir, role, "spvasm", dis, strlen(dis)));
    const char *status = "valid";
    if (!bad && spv_validate(&m, err, sizeof err)) {
        if (too_new_for_validator(&m)) {
            status = "not validated (SPIRV-Tools too old for cooperative matrices / bf16)";
            c->unchecked++;
        } else {
            cli_fail("%s: invalid module: %s", role, err);
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
    const char *path = NULL, *dir = NULL, *device = NULL, *caps_list = NULL;
    uint32_t dtype = 0;
    uint64_t n_ctx = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--spirv") || !strcmp(a, "--device") || !strcmp(a, "--caps") || !strcmp(a, "--dtype") ||
                   !strcmp(a, "--ctx")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v) return cli_usage_error(usage, "%s needs a value", a);
            if (!strcmp(a, "--spirv")) dir = v;
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
    if (!dir) return cli_usage_error(usage, "--spirv DIR is required");
    char err[1024];
    if (caps_list && rt_caps_override_check(caps_list, err, sizeof err)) return cli_usage_error(usage, "%s", err);
    uint64_t index = 0;
    if (device && (strncmp(device, "vulkan:", 7) || !cli_parse_u64(device + 7, 0, 15, &index)))
        return cli_usage_error(usage, "--device is vulkan:N, not '%s'", device);

    rt_caps caps;
    rt_device *dev = NULL;
    if (device) {
        if (!(dev = vk_device_open((uint32_t)index, caps_list, err, sizeof err))) return cli_fail("%s", err);
        caps = dev->caps;
        dev->ops->destroy(dev);
    } else {
        rt_caps_default(&caps, RT_VULKAN);
        caps.storage16 = true;
        if (caps_list && rt_caps_override(&caps, caps_list, err, sizeof err)) return cli_usage_error(usage, "%s", err);
    }
    if (mkdir(dir, 0777) && errno != EEXIST) return cli_fail("cannot create %s: %s", dir, strerror(errno));
    model *m = model_load(path, err, sizeof err);
    if (!m) return cli_fail("%s", err);
    dump_ctx c = {dir, &caps, 0, 0, 0};
    int rc = plan_each_kernel(m, &caps, dtype, (uint32_t)n_ctx, one_kernel, &c, err, sizeof err);
    model_free(m);
    if (rc) return cli_fail("%s", err);
    printf("%d kernels written to %s%s", c.written, dir, c.unchecked ? "" : "\n");
    if (c.unchecked) printf(" (%d not validated: SPIRV-Tools too old)\n", c.unchecked);
    return c.failed ? EXIT_BADFILE : 0;
}
