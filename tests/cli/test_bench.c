/* kiln bench and kiln probe --measure: the copy kernel they time (bit for bit at odd
 * sizes, guard after the output), and the commands end to end on the `tiny` synth model
 * and stories260K on the oracle and the GPU under test: every output format parses and
 * holds every device and test, the warm-up apart; bad input exits 2 or 1 with a message.
 * GPU cases skip by name without a device. */
#include "base/error.h"
#include "kernels/kernels.h"
#include "plan/measure.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64
#define POISON 0xdeadbeefu

#define BIG (1 << 20)
static char out[BIG], err[BIG];

#define RUN(...) tu_run_kiln((const char *const[]){__VA_ARGS__, NULL}, out, sizeof out, err, sizeof err)

/* The GPU the CLI cases use: the device the kernel suites test (KILN_TEST_DEVICE=cuda:N),
 * else vulkan:0; skips the test without one. */
static const char *gpu_or_skip(void) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    d->ops->destroy(d);
    const char *dev = getenv("KILN_TEST_DEVICE");
    return dev && !strncmp(dev, "cuda:", 5) ? dev : "vulkan:0";
}

/* ---- kn_copy ------------------------------------------------------------------------- */

static void copy_case(rt_device *d, uint32_t n) {
    kiln_err msg = {0};
    uint32_t gx = 0;
    ir_kernel *k = kn_copy(&d->caps, n, &gx, &msg);
    cr_assert_not_null(k, "n=%u: %s", n, msg.msg);
    uint32_t *src = malloc(n * 4u), *dst = malloc((n + GUARD) * 4u);
    for (uint32_t i = 0; i < n; i++) src[i] = tu_rnd32();
    for (uint32_t i = 0; i < n + GUARD; i++) dst[i] = POISON;
    rt_buffer *bs = tu_vk_upload(d, src, n * 4u), *bd = tu_vk_upload(d, dst, (n + GUARD) * 4u);
    rt_kernel *ck = tu_vk_compile(d, k);
    rt_arg args[2] = {{bs, 0}, {bd, 0}};
    tu_vk_run(d, ck, gx, 1, args, 2);
    tu_vk_download(d, bd, dst, (n + GUARD) * 4u);
    for (uint32_t i = 0; i < n; i++) cr_assert_eq(dst[i], src[i], "n=%u: [%u] %08x != %08x", n, i, dst[i], src[i]);
    for (uint32_t i = n; i < n + GUARD; i++) cr_assert_eq(dst[i], POISON, "n=%u: wrote past the end at %u", n, i);
    d->ops->release_kernel(d, ck);
    d->ops->release(d, bs), d->ops->release(d, bd);
    free(src), free(dst);
    ir_kernel_destroy(k);
}

Test(bench, copy_kernel_odd_sizes_with_guards) {
    /* every vector width (1, 2, 4) and a grid-stride loop that wraps (workgroup=32) */
    const uint32_t sizes[] = {1, 2, 3, 7, 1001, 4096, 4098, 65537, 300004};
    const char *const variants[] = {NULL, "workgroup=32"};
    tu_seed(7);
    for (size_t v = 0; v < 2; v++) {
        rt_device *d = tu_vk_open_or_skip(variants[v]);
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) copy_case(d, sizes[i]);
        d->ops->destroy(d);
    }
}

Test(bench, copy_kernel_refuses_nothing_to_copy) {
    rt_caps c;
    tu_caps_min(&c);
    kiln_err msg = {0};
    cr_assert_null(kn_copy(&c, 0, NULL, &msg));
    cr_assert(strstr(msg.msg, "n is 0"), "%s", msg.msg);
}

/* ---- kiln bench ---------------------------------------------------------------------- */

static const char *tiny_model(void) { return tu_synth_tiny("bench-tiny.gguf", "qwen3", "bf16"); }

/* Whether the markdown's device table gives dev a matrix peak (its 7th cell). */
static bool peak_known_in_md(const char *dev) {
    char want[64];
    snprintf(want, sizeof want, "\n| %s | ", dev);
    const char *row = strstr(out, want);
    cr_assert_not_null(row, "no device row for %s in:\n%s", dev, out);
    const char *cell = row + 1;
    for (int bar = 1; bar < 8 && cell; bar++) cell = strchr(cell + 1, '|'); /* to the 8th bar: the peak's cell */
    cr_assert_not_null(cell);
    return cell[2] != '-';
}

/* The table row of device dev and test test in the markdown output, or NULL. */
static const char *md_row(const char *dev, const char *test) {
    char want[128];
    snprintf(want, sizeof want, "| %s | %s | ", dev, test);
    return strstr(out, want);
}

Test(bench, tiny_markdown_on_the_oracle_and_the_gpu, .timeout = 120) {
    const char *gpu = gpu_or_skip();
    const char *model = tiny_model();
    /* bench's own lines only: the plan's "done in" line for a load over 2 s (a slow
     * sanitizer build) is tests/test_progress.c's to check */
    setenv("KILN_NO_PROGRESS", "1", 1);
    int rc = RUN("bench", model, "-p", "8,24", "-n", "6", "-r", "2", "--device", "cpu", "--device", gpu);
    unsetenv("KILN_NO_PROGRESS");
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert_eq(err[0], 0, "stderr is not a TTY: nothing on it, got: %s", err);
    cr_assert(strstr(out, "bench-tiny.gguf (bf16"), "%s", out);
    cr_assert(strstr(out, "2 repetitions after 1 warm-up (GPUs: every test run untimed for 1.0 s first)"), "%s", out);
    cr_assert(strstr(out, "| model | device | test | t/s | warm-up t/s | fraction of floor |"), "%s", out);
    bool gpu_peak_known = peak_known_in_md(gpu);
    const char *devs[2] = {"cpu", gpu}, *tests[3] = {"pp8", "pp24", "tg6"};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            const char *row = md_row(devs[i], tests[j]);
            cr_assert_not_null(row, "no row for %s %s in:\n%s", devs[i], tests[j], out);
            double mean, sd, warm;
            char frac[32];
            const char *cells = row + strlen(devs[i]) + strlen(tests[j]) + 8;
            cr_assert_eq(sscanf(cells, "%lf ± %lf | %lf | %31s", &mean, &sd, &warm, frac), 4, "row: %.200s", row);
            cr_assert(mean > 0 && sd >= 0 && warm > 0, "row: %.200s", row);
            /* the oracle has no measured rates: no floor; a GPU's prefill floor needs its
             * chip's published peak (lavapipe has none), decode only the measured bandwidth */
            if (i == 0 || (tests[j][0] == 'p' && !gpu_peak_known))
                cr_assert_str_eq(frac, "-", "row: %.200s", row);
            else cr_assert(atof(frac) > 0, "row: %.200s", row);
        }
}

static json_t *parse_json(void) {
    json_error_t je;
    json_t *doc = json_loads(out, 0, &je);
    cr_assert_not_null(doc, "bad JSON at line %d: %s\n%s", je.line, je.text, out);
    return doc;
}

static void check_json_test(json_t *t, const char *want, uint32_t n, bool floor, bool peak) {
    floor = floor && (want[0] == 't' || peak); /* a prefill floor needs the chip's peak */
    cr_assert_str_eq(json_string_value(json_object_get(t, "test")), want);
    cr_assert_eq(json_integer_value(json_object_get(t, "n_tokens")), n);
    cr_assert_str_eq(json_string_value(json_object_get(t, "kind")), want[0] == 'p' ? "pp" : "tg");
    cr_assert(json_real_value(json_object_get(t, "tps_mean")) > 0);
    cr_assert(json_real_value(json_object_get(t, "tps_stddev")) >= 0);
    cr_assert(json_real_value(json_object_get(t, "warmup_tps")) > 0, "the warm-up is reported apart");
    json_t *samples = json_object_get(t, "tps_samples");
    cr_assert_eq(json_array_size(samples), 3, "the warm-up is not among the samples");
    json_t *frac = json_object_get(t, "fraction_of_floor"), *bound = json_object_get(t, "floor_bound");
    if (floor) {
        cr_assert(json_real_value(frac) > 0 && json_real_value(json_object_get(t, "floor_tps")) > 0);
        const char *b = json_string_value(bound);
        cr_assert(b && (want[0] == 't' ? !strcmp(b, "memory") : !strcmp(b, "memory") || !strcmp(b, "compute")));
    } else {
        cr_assert(json_is_null(frac) && json_is_null(json_object_get(t, "floor_tps")) && json_is_null(bound));
    }
}

Test(bench, stories260k_json, .timeout = 120) {
    const char *gpu = gpu_or_skip();
    const char *model = tu_data_file("models/stories260K.gguf");
    int rc = RUN("bench", model, "-p", "16,64", "-n", "8", "-r", "3", "--device", "cpu", "--device", gpu, "--block", "40",
                 "--warm", "0.25", "-o", "json");
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    json_t *doc = parse_json();
    cr_assert_str_eq(json_string_value(json_object_get(doc, "model")), "stories260K.gguf");
    cr_assert_str_eq(json_string_value(json_object_get(doc, "dtype")), "bf16"); /* an F32 file runs in bf16 */
    cr_assert(json_string_length(json_object_get(doc, "kiln_commit")) > 0);
    cr_assert(json_integer_value(json_object_get(doc, "params")) > 0);
    cr_assert_eq(json_integer_value(json_object_get(doc, "repetitions")), 3);
    cr_assert_eq(json_integer_value(json_object_get(doc, "warmup_repetitions")), 1);
    cr_assert_float_eq(json_real_value(json_object_get(doc, "gpu_warm_s")), 0.25, 1e-12);
    json_t *devs = json_object_get(doc, "devices");
    cr_assert_eq(json_array_size(devs), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *d = json_array_get(devs, i);
        bool on_gpu = i == 1;
        cr_assert_str_eq(json_string_value(json_object_get(d, "device")), on_gpu ? gpu : "cpu");
        cr_assert(json_string_length(json_object_get(d, "name")) > 0);
        cr_assert(on_gpu ? json_is_string(json_object_get(d, "driver")) : json_is_null(json_object_get(d, "driver")));
        /* --block 40: blocks of 64 on the GPU (pp64 in one), none on the oracle */
        json_t *nb = json_object_get(d, "n_block");
        cr_assert(on_gpu ? json_integer_value(nb) == 64 : json_is_null(nb), "n_block");
        /* a 16-bit model's weights take 2 bytes a parameter on the device (its f32 norms too) */
        json_t *wb = json_object_get(d, "weight_bytes");
        cr_assert(on_gpu ? json_integer_value(wb) == 2 * json_integer_value(json_object_get(doc, "params"))
                         : json_is_null(wb),
                  "weight_bytes %lld", (long long)json_integer_value(wb));
        cr_assert(json_real_value(json_object_get(d, "load_s")) > 0);
        cr_assert(json_real_value(json_object_get(d, "ttft_s")) >= json_real_value(json_object_get(d, "load_s")));
        json_t *m = json_object_get(d, "measured");
        bool peak = false;
        if (on_gpu) {
            cr_assert(json_real_value(json_object_get(m, "bandwidth_gbps")) > 0);
            cr_assert(json_real_value(json_object_get(m, "matmul_gflops")) > 0);
            double gbps, gflops; /* the peak is the table's for this chip, never kiln's kernel rate */
            measure_peaks(json_string_value(json_object_get(d, "name")), &gbps, &gflops);
            json_t *pk = json_object_get(m, "peak_gflops");
            peak = gflops > 0;
            if (peak) cr_assert_float_eq(json_real_value(pk), gflops, 1e-6);
            else cr_assert(json_is_null(pk));
        } else {
            cr_assert(json_is_null(m));
        }
        json_t *tests = json_object_get(d, "tests");
        cr_assert_eq(json_array_size(tests), 3);
        check_json_test(json_array_get(tests, 0), "pp16", 16, on_gpu, peak);
        check_json_test(json_array_get(tests, 1), "pp64", 64, on_gpu, peak);
        check_json_test(json_array_get(tests, 2), "tg8", 8, on_gpu, peak);
    }
    json_decref(doc);
}

/* The fields of one CSV line (RFC 4180 quoting), NUL-separated in place; their count. */
static int csv_split(char *line, char **fields, int max) {
    int n = 0;
    char *w = line;
    for (char *p = line;;) {
        if (n == max) return -1;
        fields[n++] = w;
        bool quoted = *p == '"';
        if (quoted) p++;
        for (; *p && (quoted || *p != ','); p++) {
            if (quoted && *p == '"') {
                if (p[1] != '"') {
                    quoted = false;
                    continue;
                }
                p++;
            }
            *w++ = *p;
        }
        bool more = *p == ',';
        *w++ = 0;
        if (!more) return n;
        p++;
    }
}

Test(bench, tiny_csv, .timeout = 120) {
    const char *gpu = gpu_or_skip();
    const char *model = tiny_model();
    int rc = RUN("bench", model, "-p", "8", "-n", "4", "-r", "2", "--device", gpu, "--device", "cpu", "-o", "csv");
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    char *save = NULL, *fields[32], *header[32];
    char *line = strtok_r(out, "\n", &save);
    int nh = csv_split(line, header, 32);
    cr_assert_gt(nh, 10);
    cr_assert_str_eq(header[0], "model");
    int col_dev = -1, col_test = -1, col_sd = -1, col_warm = -1;
    for (int i = 0; i < nh; i++) {
        if (!strcmp(header[i], "device")) col_dev = i;
        if (!strcmp(header[i], "test")) col_test = i;
        if (!strcmp(header[i], "tps_stddev")) col_sd = i;
        if (!strcmp(header[i], "warmup_tps")) col_warm = i;
    }
    cr_assert(col_dev >= 0 && col_test >= 0 && col_sd >= 0 && col_warm >= 0);
    const char *want[4][2] = {{gpu, "pp8"}, {gpu, "tg4"}, {"cpu", "pp8"}, {"cpu", "tg4"}};
    int rows = 0;
    while ((line = strtok_r(NULL, "\n", &save))) {
        cr_assert_lt(rows, 4, "extra row: %s", line);
        cr_assert_eq(csv_split(line, fields, 32), nh, "row %d has another field count", rows);
        cr_assert_str_eq(fields[col_dev], want[rows][0]);
        cr_assert_str_eq(fields[col_test], want[rows][1]);
        cr_assert(atof(fields[col_sd]) >= 0 && atof(fields[col_warm]) > 0);
        rows++;
    }
    cr_assert_eq(rows, 4);
}

Test(bench, plot_writes_an_svg) {
    const char *model = tiny_model(), *svg = tu_tmp("bench.svg");
    int rc = RUN("bench", model, "-p", "8", "-n", "4", "-r", "1", "--device", "cpu", "--plot", svg);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    FILE *fp = fopen(svg, "r");
    cr_assert_not_null(fp);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = 0;
    cr_assert(!strncmp(text, "<svg", 4), "%s", text);
    while (n && text[n - 1] == '\n') text[--n] = 0;
    cr_assert(n > 6 && !strcmp(text + n - 6, "</svg>"), "%s", text);
    cr_assert(strstr(text, ">pp8<") && strstr(text, ">tg4<") && strstr(text, ">cpu<"), "%s", text);
    /* every element closed: as many opening tags as closing ones and self-closed ones */
    int open = 0, close = 0;
    for (const char *p = text; (p = strchr(p, '<')); p++) {
        if (p[1] == '/') close++;
        else open++;
        const char *end = strchr(p, '>');
        cr_assert_not_null(end);
        if (end[-1] == '/') close++;
    }
    cr_assert_eq(open, close, "%s", text);
}

/* Bad input: the status and a message naming the problem on stderr's first line. */
static void expect(int rc, int status, const char *want) {
    cr_assert_eq(rc, status, "exit %d (want %d), stderr: %s", rc, status, err);
    cr_assert(!strncmp(err, "kiln: ", 6), "stderr: %s", err);
    char first[1024];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(err, "\n"), err);
    cr_assert(strstr(first, want), "first line of '%s' lacks '%s'", err, want);
    if (status == 2) cr_assert(strstr(err, "usage: kiln bench"), "no usage in: %s", err);
}

Test(bench, bad_input) {
    expect(RUN("bench"), 2, "no model given");
    const char *model = tiny_model();
    expect(RUN("bench", model, "-p", "8,x"), 2, "-p: '8,x'");
    expect(RUN("bench", model, "-p", "8,,16"), 2, "-p: '8,,16'");
    expect(RUN("bench", model, "-p", ""), 2, "-p: ''");
    expect(RUN("bench", model, "-p", "0", "-n", "0"), 2, "nothing to measure");
    expect(RUN("bench", model, "-n", "-1"), 2, "-n: '-1'");
    expect(RUN("bench", model, "-r", "0"), 2, "-r: '0'");
    expect(RUN("bench", model, "-r"), 2, "-r needs a value");
    expect(RUN("bench", model, "--warm", "-1"), 2, "--warm: '-1'");
    expect(RUN("bench", model, "--warm", "61"), 2, "--warm: '61'");
    expect(RUN("bench", model, "--warm", "1s"), 2, "--warm: '1s'");
    expect(RUN("bench", model, "--device", "gpu:0"), 2, "--device gpu:0");
    expect(RUN("bench", model, "--device", "auto"), 2, "--device auto");
    expect(RUN("bench", model, "-o", "xml"), 2, "-o: 'xml'");
    expect(RUN("bench", model, "--plot", tu_tmp("chart.png")), 2, "is not a .svg file");
    expect(RUN("bench", model, "--temp", "0.7"), 2, "sampling flags do not apply");
    expect(RUN("bench", model, "--caps", "no-such-cap"), 2, "--caps");
    expect(RUN("bench", model, "--block", "0"), 2, "--block: bad value '0'");
    expect(RUN("bench", model, "--block", "70000"), 2, "--block: bad value '70000'");
    expect(RUN("bench", model, "--frobnicate"), 2, "unknown flag '--frobnicate'");
    expect(RUN("bench", model, model), 2, "more than one model");
    expect(RUN("bench", tu_tmp("absent.gguf"), "--device", "cpu"), 1, "absent.gguf");
    expect(RUN("bench", model, "--device", "cpu", "--ctx", "16", "-p", "32", "-n", "4"), 1,
           "the context holds 16 positions but the largest test needs 32");
    expect(RUN("bench", model, "--device", "cpu", "--ctx", "16", "-p", "8", "-n", "16"), 1, "needs 17");
    expect(RUN("bench", model, "--device", "vulkan:63", "-p", "8", "-n", "4"), 1, "no Vulkan device vulkan:63");
    /* one device failing leaves the others' results: reported, and exit 1 */
    expect(RUN("bench", model, "--device", "cpu", "--device", "vulkan:63", "-p", "8", "-n", "4", "-r", "1"), 1,
           "no Vulkan device vulkan:63");
    cr_assert(strstr(out, "| cpu | pp8 |") && strstr(out, "| cpu | tg4 |") && !strstr(out, "vulkan:63"), "%s", out);
    cr_assert_eq(RUN("bench", "--help"), 0);
    cr_assert(strstr(out, "usage: kiln bench"));
}

/* ---- kiln probe --measure ------------------------------------------------------------ */

Test(bench, probe_measure, .timeout = 120) {
    gpu_or_skip();
    int rc = RUN("probe", "--measure");
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    double gbps = 0, gflops = 0;
    const char *bw = strstr(out, "measured bandwidth: "), *mx = strstr(out, "kernel rate: ");
    cr_assert(bw && mx && strstr(out, "matrix peak: "), "%s", out);
    cr_assert(sscanf(bw, "measured bandwidth: %lf GB/s", &gbps) == 1 && gbps > 0, "%s", bw);
    cr_assert(sscanf(mx, "kernel rate: %lf GFLOP/s", &gflops) == 1 && gflops > 0, "%s", mx);

    cr_assert_eq(RUN("probe", "--measure", "--json"), 0, "%s", err);
    json_t *doc = parse_json();
    size_t i, gpus = 0;
    json_t *d;
    json_array_foreach(doc, i, d) {
        json_t *m = json_object_get(d, "measured");
        if (!strcmp(json_string_value(json_object_get(d, "backend")), "cpu")) {
            cr_assert_null(m, "the oracle is not measured");
            continue;
        }
        gpus++;
        cr_assert(json_real_value(json_object_get(m, "bandwidth_gbps")) > 0);
        cr_assert(json_real_value(json_object_get(m, "matmul_gflops")) > 0);
        cr_assert(json_integer_value(json_object_get(m, "copy_bytes")) > 0);
        cr_assert(json_is_string(json_object_get(m, "matmul_dtype")));
        cr_assert_not_null(json_object_get(m, "peak_gflops"), "the peak is there, null when unknown");
    }
    cr_assert_gt(gpus, 0);
    json_decref(doc);
}
