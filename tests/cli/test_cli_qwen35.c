/* Qwen3.5 through the kiln command: `kiln run --device cpu` gives llama.cpp's greedy ids
 * on qwen35-tiny (the f32 golden's first case), `kiln dump` writes its kernels and a
 * Vulkan device runs it, and `kiln synth` will not write it. */
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#define BIG (1 << 20)
static char out[BIG], err[BIG];

#define RUN(...) tu_run_kiln((const char *const[]){__VA_ARGS__, NULL}, out, sizeof out, err, sizeof err)

Test(cli, qwen35_runs_on_the_oracle_and_the_gpu, .timeout = 120) {
    const char *m = tu_data_file("models/qwen35-tiny.gguf");
    int rc = RUN("run", m, "-p", "Once upon a time", "-n", "12", "--ids", "--device", "cpu", "--oracle-mode", "f32");
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    /* llama.cpp 34af94cd, qwen35-tiny.f32dequant-kvf32-nofa.llamacpp.json, case 0 */
    cr_assert(strstr(out, "ids: 378 378 378 188 286 457 457 186 411 411 467 415\n"), "stdout: %s", out);
    rc = RUN("run", m, "-p", "The sun", "-n", "4", "--device", "cpu");
    cr_assert_eq(rc, 0, "contract mode: exit %d: %s", rc, err);

    rc = RUN("dump", m, "--spirv", tu_tmp("qwen35-dump"));
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err); /* the DeltaNet kernels among them */
    cr_assert(strstr(out, "deltanet") && strstr(out, "ssm_conv") && strstr(out, "attn_gate"), "stdout: %s", out);
    rc = RUN("synth", "--preset", "tiny", "--arch", "qwen35", "-o", tu_tmp("q35.gguf"));
    cr_assert_eq(rc, 2);
    cr_assert(strstr(err, "cannot write 'qwen35'"), "stderr: %s", err);
    /* a GPU device: lavapipe in CI (tests/plan/test_plan_qwen35.c checks its numbers) */
    rc = RUN("run", m, "-p", "hi", "-n", "2", "--ids", "--device", "vulkan:0");
    cr_assert(rc == 0 ? strstr(out, "ids: ") != NULL : strstr(err, "vulkan") != NULL, "exit %d: %s %s", rc, out, err);
}
