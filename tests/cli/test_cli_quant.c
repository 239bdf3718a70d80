/* Quantized files through the kiln command: `kiln run` on a Vulkan device (lavapipe in
 * CI) keeps llama.cpp's Q4_K_M file in its blocks and gives llama.cpp's greedy ids (its
 * exact-math golden's first case; the gaps of its top two there are 0.1 nats or more), and
 * its summary gives the bytes the weights take on the device. Matrices of quantized types
 * with no quantized kernel for their product (Qwen3.5's q/k/v and DeltaNet inputs, which
 * the plan stacks in 16 bits) are converted at load, said once. */
#include "tests/util/testutil.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#define BIG (1 << 20)
static char out[BIG], err[BIG];

#define RUN(...) tu_run_kiln((const char *const[]){__VA_ARGS__, NULL}, out, sizeof out, err, sizeof err)

Test(cli, quantized_file_runs_in_its_blocks_on_the_gpu, .timeout = 120) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    d->ops->destroy(d);
    const char *m = tu_data_file("models/dense-Q4_K_M.gguf");
    int rc = RUN("run", m, "-p", "Once upon a time", "-n", "16", "--ids", "--device", "vulkan:0", "--dtype", "f16");
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    /* llama.cpp 34af94cd, dense-Q4_K_M.f32dequant-kvf32-nofa.llamacpp.json, case 0 */
    cr_assert(strstr(out, "ids: 490 442 253 324 388 358 219 324 271 358 219 324 271 358 219 139\n"), "stdout: %s", out);
    /* 1,606,400 bytes: the file's blocks repacked, its norms in 16 bits */
    cr_assert(strstr(err, "weights on the device: 1.5 MiB"), "stderr: %s", err);
    cr_assert_null(strstr(err, "converted"), "nothing of this file is converted: %s", err);
}

Test(cli, quantized_matrices_converted_are_said_once, .timeout = 120) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    d->ops->destroy(d);
    const char *m = tu_tmp("q35-q4km.gguf");
    int rc = RUN("synth", "--preset", "qwen3.5-tiny-odd", "--hidden", "256", "--heads", "4", "--kv-heads", "2",
                 "--head-dim", "64", "--ffn", "512", "--vocab", "512", "--quant", "Q4_K_M", "-o", m);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    const char *devs[2] = {"cpu", "vulkan:0"};
    char ids[2][256];
    for (int i = 0; i < 2; i++) {
        rc = RUN("run", m, "-p", "Once upon a time", "-n", "8", "--ids", "--device", devs[i]);
        cr_assert_eq(rc, 0, "%s: exit %d: %s", devs[i], rc, err);
        const char *said = strstr(err, "matrices of block-quantized types converted to 16 bits at load");
        cr_assert(said, "%s: stderr: %s", devs[i], err);
        cr_assert_null(strstr(said + 1, "matrices of block-quantized"), "said twice: %s", err);
        cr_assert(strstr(out, "ids: "), "%s", out);
        snprintf(ids[i], sizeof ids[i], "%.*s", (int)strcspn(strstr(out, "ids: "), "\n"), strstr(out, "ids: "));
    }
    cr_assert_str_eq(ids[0], ids[1], "the device and the oracle convert alike");
}
