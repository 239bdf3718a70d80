/* Qwen3.5 through the kiln command: `kiln run --device cpu` gives llama.cpp's greedy ids
 * on qwen35-tiny (the f32 golden's first case), the GPU paths (`kiln dump`, a Vulkan or
 * CUDA device) refuse it by name, and `kiln synth` will not write it. */
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#define BIG (1 << 20)
static char out[BIG], err[BIG];

#define RUN(...) tu_run_kiln((const char *const[]){__VA_ARGS__, NULL}, out, sizeof out, err, sizeof err)

Test(cli, qwen35_runs_on_the_oracle_and_gpu_paths_refuse_it, .timeout = 120) {
    const char *m = tu_data_file("models/qwen35-tiny.gguf");
    int rc = RUN("run", m, "-p", "Once upon a time", "-n", "12", "--ids", "--device", "cpu", "--oracle-mode", "f32");
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    /* llama.cpp 34af94cd, qwen35-tiny.f32dequant-kvf32-nofa.llamacpp.json, case 0 */
    cr_assert(strstr(out, "ids: 378 378 378 188 286 457 457 186 411 411 467 415\n"), "stdout: %s", out);
    rc = RUN("run", m, "-p", "The sun", "-n", "4", "--device", "cpu");
    cr_assert_eq(rc, 0, "contract mode: exit %d: %s", rc, err);

    rc = RUN("dump", m, "--spirv", tu_tmp("qwen35-dump"));
    cr_assert_neq(rc, 0);
    cr_assert(strstr(err, "architecture 'qwen35'"), "stderr: %s", err);
    rc = RUN("synth", "--preset", "tiny", "--arch", "qwen35", "-o", tu_tmp("q35.gguf"));
    cr_assert_eq(rc, 2);
    cr_assert(strstr(err, "cannot write 'qwen35'"), "stderr: %s", err);
    /* a GPU device: refused by name where one exists, else the missing device is named */
    rc = RUN("run", m, "-p", "hi", "-n", "2", "--device", "vulkan:0");
    cr_assert_neq(rc, 0);
    cr_assert(strstr(err, "architecture 'qwen35'") || strstr(err, "vulkan"), "stderr: %s", err);
}
