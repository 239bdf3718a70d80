/* kiln probe [--caps LIST] [--json] [--measure]: what every device offers kernels — the
 * CPU oracle, each CUDA device and each Vulkan device — after the --caps overrides, so an
 * A/B run can be checked before it starts; with --measure, each GPU's bandwidth and matrix
 * rate with kiln's own kernels (the floors of `kiln bench`). */
#include "base/error.h"
#include "cli/cli.h"
#include "devices/devices.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "plan/measure.h"
#include "runtime/caps.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: kiln probe [--caps LIST] [--json] [--measure]\n"
    "  --caps LIST  take capabilities away, comma-separated: no-coopmat no-coopmat2 no-f16 no-bf16 no-storage16\n"
    "               no-subgroup-arith no-subgroup-shuffle no-atomic-f32 no-async-copy no-wgmma no-grid-dep no-tma subgroup=N shared=BYTES workgroup=N;\n"
    "               and test switches: debug-fault makes the logits head wrong on purpose,\n"
    "               debug-alloc-kib=N makes a plan's device buffers fail past N KiB in all,\n"
    "               debug-emulate-coopmat gives a Vulkan device without cooperative matrices emulated\n"
    "               f16 ones (slow: for running those kernels' logic in tests)\n"
    "  --json       one JSON array, one object per device\n"
    "  --measure    time each GPU's memory bandwidth (a copy kernel) and matrix rate (the prefill\n"
    "               matrix product): the floors `kiln bench` divides by\n";

typedef struct probed {
    char label[24];    /* "cpu", "cuda:0", "vulkan:0" */
    rt_caps caps;
    bool refused;      /* the overrides did not fit this device: caps are as probed */
    kiln_err why;      /* why, when refused */
    dev_label id;
    bool measured;
    measure_result meas;
    char fallback[256]; /* what measuring made the device give up (rt_device's), "" nothing */
} probed;

/* ---- text ------------------------------------------------------------------------------ */

/* Calls fn for each line of the kernel variants the device gets (GPU devices only). */
static void each_variant(const probed *d, void (*fn)(void *ctx, const char *line, size_t n), void *ctx) {
    if (d->caps.backend == RT_CPU) return;
    char buf[2048];
    kn_describe(&d->caps, buf, sizeof buf);
    for (const char *p = buf; *p;) {
        size_t n = strcspn(p, "\n");
        fn(ctx, p, n);
        p += n + (p[n] == '\n');
    }
}

static void print_variant(void *ctx, const char *line, size_t n) {
    (void)ctx;
    printf("    %.*s\n", (int)n, line);
}

static void json_variant(void *ctx, const char *line, size_t n) { json_array_append_new(ctx, json_stringn(line, n)); }

/* "peak 4800" or "peak unknown", for the measured lines. */
static void peak_text(double peak, const char *unit, char *buf, size_t cap) {
    if (peak > 0) snprintf(buf, cap, "peak %.0f %s", peak, unit);
    else snprintf(buf, cap, "peak unknown");
}

static void print_measured(const measure_result *m) {
    char peak[64];
    peak_text(m->peak_bandwidth_gbps, "GB/s", peak, sizeof peak);
    printf("  measured bandwidth: %.1f GB/s (copy of %.0f MiB; %s)\n", m->bandwidth_gbps,
           (double)m->copy_bytes / (1 << 20), peak);
    if (m->peak_gflops > 0) printf("  matrix peak: %.0f GFLOP/s (the chip's dense 16-bit rate)\n", m->peak_gflops);
    else printf("  matrix peak: unknown (kiln bench gives no prefill floor)\n");
    printf("  kernel rate: %.1f GFLOP/s (kiln's matmul %ux%ux%u %s)\n", m->matmul_gflops, m->mm_rows, m->mm_cols,
           m->mm_tokens, m->mm_dtype);
    if (m->frag_gflops > 0)
        printf("  fragment rate: %.1f GFLOP/s (%ux%ux%u %s fragments in registers: the matrix units through this "
               "backend)\n",
               m->frag_gflops, m->frag_m, m->frag_n, m->frag_k, m->mm_dtype);
}

static void print_text(const probed *d, uint32_t nd, const char *caps_list) {
    char buf[4096];
    for (uint32_t i = 0; i < nd; i++) {
        if (i) putchar('\n');
        printf("%s\n", d[i].label);
        if (caps_list)
            printf("  overrides: %s%s\n", d[i].refused ? "refused: " : "applied", d[i].refused ? d[i].why.msg : "");
        rt_caps_describe(&d[i].caps, buf, sizeof buf);
        for (const char *p = buf; *p;) { /* indented under the device's label */
            size_t n = strcspn(p, "\n");
            printf("  %.*s\n", (int)n, p);
            p += n + (p[n] == '\n');
        }
        if (d[i].caps.backend != RT_CPU) printf("  kernels (a qwen3-0.6b-shaped model, bf16):\n");
        each_variant(&d[i], print_variant, NULL);
        if (d[i].measured) print_measured(&d[i].meas);
        if (d[i].fallback[0]) printf("  fallback: %s\n", d[i].fallback);
    }
}

/* ---- JSON ------------------------------------------------------------------------------ */

/* Driver strings are not promised to be UTF-8; anything else becomes '?'. */
static json_t *json_text(const char *s, size_t cap) {
    char tmp[256];
    size_t n = strnlen(s, cap < sizeof tmp ? cap : sizeof tmp - 1);
    for (size_t i = 0; i < n; i++) tmp[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
    return json_stringn(tmp, n);
}

static const char *type_name(uint32_t t) {
    switch (t) {
    case IR_F16: return "f16";
    case IR_BF16: return "bf16";
    case IR_F32: return "f32";
    default: return "?";
    }
}

/* A peak kiln does not know is null. */
static json_t *json_peak(double v) { return v > 0 ? json_real(v) : json_null(); }

static json_t *json_measured(const measure_result *m) {
    json_t *o = json_pack("{s:f,s:o,s:I,s:f,s:o,s:I,s:I,s:I,s:s}", "bandwidth_gbps", m->bandwidth_gbps,
                     "peak_bandwidth_gbps", json_peak(m->peak_bandwidth_gbps), "copy_bytes",
                     (json_int_t)m->copy_bytes, "matmul_gflops", m->matmul_gflops, "peak_gflops",
                     json_peak(m->peak_gflops), "matmul_rows", (json_int_t)m->mm_rows, "matmul_cols",
                     (json_int_t)m->mm_cols, "matmul_tokens", (json_int_t)m->mm_tokens, "matmul_dtype", m->mm_dtype);
    /* null where the device has no matrix units */
    if (o) json_object_set_new(o, "fragment_gflops", m->frag_gflops > 0 ? json_real(m->frag_gflops) : json_null());
    return o;
}

static json_t *json_device(const probed *d, const char *caps_list) {
    const rt_caps *c = &d->caps;
    static const char *const backends[] = {"cpu", "vulkan", "cuda"};
    json_t *mma = json_array();
    for (uint32_t i = 0; i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++)
        json_array_append_new(mma, json_pack("{s:I,s:I,s:I,s:s,s:s}", "m", (json_int_t)c->mma[i].m, "n",
                                             (json_int_t)c->mma[i].n, "k", (json_int_t)c->mma[i].k, "ab",
                                             type_name(c->mma[i].ab_type), "acc", type_name(c->mma[i].acc_type)));
    json_t *wg = json_array();
    for (uint32_t i = 0; i < c->n_wg_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->wg_mma[i];
        json_array_append_new(wg, json_pack("{s:I,s:I,s:I,s:s,s:s,s:I}", "m", (json_int_t)s->m, "n", (json_int_t)s->n,
                                            "k", (json_int_t)s->k, "ab", type_name(s->ab_type), "acc",
                                            type_name(s->acc_type), "invocations", (json_int_t)s->invocations));
    }
    json_t *o = json_pack(
        "{s:s,s:s,s:o,s:o,s:o,s:I,s:I,s:I,s:I,s:I,s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:b,s:o,s:o,s:I,s:I,s:I,s:I,s:I,s:I}", "device",
        d->label, "backend", (unsigned)c->backend <= RT_CUDA ? backends[c->backend] : "unknown", "vendor",
        json_text(c->vendor, sizeof c->vendor), "name", json_text(c->name, sizeof c->name), "driver",
        json_text(c->driver, sizeof c->driver), "api_version", (json_int_t)c->api_version, "compute_capability",
        (json_int_t)c->compute_capability, "subgroup_size", (json_int_t)c->subgroup_size, "subgroup_min",
        (json_int_t)c->subgroup_min, "subgroup_max", (json_int_t)c->subgroup_max, "subgroup_arith",
        (int)c->subgroup_arith, "subgroup_shuffle", (int)c->subgroup_shuffle, "f16_arith", (int)c->f16_arith,
        "bf16_arith", (int)c->bf16_arith, "int8_arith", (int)c->int8_arith, "storage16", (int)c->storage16,
        "atomic_f32_add", (int)c->atomic_f32_add, "async_copy", (int)c->async_copy, "wgmma", (int)c->wgmma,
        "grid_dep", (int)c->grid_dep, "tma", (int)c->tma, "mma", mma, "wg_mma", wg, "shared_bytes", (json_int_t)c->shared_bytes,
        "max_workgroup", (json_int_t)c->max_workgroup, "max_buffer_bytes", (json_int_t)c->max_buffer_bytes,
        "compute_units", (json_int_t)c->compute_units, "memory_bytes", (json_int_t)c->memory_bytes, "free_bytes",
        (json_int_t)c->free_bytes);
    if (o && c->backend != RT_CPU) {
        json_t *ks = json_array();
        each_variant(d, json_variant, ks);
        json_object_set_new(o, "kernels", ks);
    }
    if (o && d->measured) json_object_set_new(o, "measured", json_measured(&d->meas));
    if (o && d->fallback[0]) json_object_set_new(o, "fallback", json_text(d->fallback, sizeof d->fallback));
    if (o && caps_list) {
        json_t *ov = json_pack("{s:o,s:b}", "list", json_text(caps_list, strlen(caps_list) + 1), "applied",
                               !d->refused);
        if (ov && d->refused) json_object_set_new(ov, "error", json_text(d->why.msg, sizeof d->why.msg));
        json_object_set_new(o, "overrides", ov ? ov : json_null());
    }
    return o;
}

static int print_json(const probed *d, uint32_t nd, const char *caps_list) {
    json_t *arr = json_array();
    bool ok = arr != NULL;
    for (uint32_t i = 0; ok && i < nd; i++) ok = json_array_append_new(arr, json_device(&d[i], caps_list)) == 0;
    if (ok) ok = json_dumpf(arr, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0;
    json_decref(arr);
    if (!ok) return cli_fail("cannot write JSON");
    putchar('\n');
    return 0;
}

/* ---- command ------------------------------------------------------------------------------ */

/* Opens the device with the caps shown for it (the overrides, unless it refused them) and
 * measures it. 0, or -1 with err. */
static int measure_one(probed *d, const char *caps_list, kiln_err *err) {
    if (isatty(STDERR_FILENO)) fprintf(stderr, "kiln: measuring %s...\n", d->label);
    const char *caps = d->refused ? NULL : caps_list;
    rt_device *dev = dev_open(d->id, caps, err);
    if (!dev) return -1;
    int rc = measure_device(dev, &d->meas, err);
    if (dev->fallback[0]) { /* the caps as the device now runs them */
        snprintf(d->fallback, sizeof d->fallback, "%s", dev->fallback);
        d->caps = dev->caps;
    }
    dev->ops->destroy(dev);
    d->measured = rc == 0;
    return rc;
}

int cmd_probe(int argc, char **argv) {
    const char *caps_list = NULL;
    bool json = false, measure = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = true;
        else if (strcmp(argv[i], "--measure") == 0) measure = true;
        else if (strcmp(argv[i], "--caps") == 0) {
            if (!(caps_list = cli_flag_value(argc, argv, &i))) return cli_usage_error(usage, "--caps needs a value");
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        } else if (argv[i][0] == '-') return cli_usage_error(usage, "unknown flag '%s'", argv[i]);
        else return cli_usage_error(usage, "unexpected argument '%s'", argv[i]);
    }
    kiln_err err = {0};
    /* A malformed list is the user's mistake on any machine: refuse it before probing. */
    if (caps_list && rt_caps_override_check(caps_list, &err))
        return cli_usage_error(usage, "--caps: %s", err.msg);

    static probed dev[1 + 2 * DEV_MAX_PER_BACKEND];
    static dev_found found[1 + 2 * DEV_MAX_PER_BACKEND];
    memset(dev, 0, sizeof dev);
    uint32_t nd = 0;
    char note[640];
    if (dev_enumerate(found, sizeof found / sizeof found[0], &nd, true, note, sizeof note, &err))
        return cli_fail("%s", err.msg);
    if (note[0]) fprintf(stderr, "kiln: %s\n", note); /* no CUDA or Vulkan driver or GPU here, or devices left out */
    for (uint32_t i = 0; i < nd; i++) {
        memcpy(dev[i].label, found[i].label, sizeof dev[i].label);
        dev[i].caps = found[i].caps;
        dev[i].id = found[i].id;
    }

    /* A list that is well formed but asks a device for more than it has (subgroup=16 on
     * an 8-wide device) is shown per device rather than hiding the others. */
    for (uint32_t i = 0; caps_list && i < nd; i++)
        dev[i].refused = rt_caps_override(&dev[i].caps, caps_list, &dev[i].why) != 0;

    for (uint32_t i = 0; measure && i < nd; i++)
        if (dev[i].caps.backend != RT_CPU && measure_one(&dev[i], caps_list, &err))
            return cli_fail("--measure: %s", err.msg);

    if (json) return print_json(dev, nd, caps_list);
    print_text(dev, nd, caps_list);
    return 0;
}
