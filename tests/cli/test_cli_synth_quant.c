/* kiln synth --quant through the real binary: the names (any case, llama-quantize's
 * aliases), usage errors for others, and a model whose rows no type of the mix fits
 * refused with a message and no file. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BIG (1 << 16)
static char out[BIG], err[BIG];

#define RUN(...) tu_run_kiln((const char *const[]){__VA_ARGS__, NULL}, out, sizeof out, err, sizeof err)

static void expect_usage(int rc, const char *want) {
    cr_assert_eq(rc, 2, "exit %d, stderr: %s", rc, err);
    char first[1024];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(err, "\n"), err);
    cr_assert(strstr(first, want), "first line of '%s' lacks '%s'", err, want);
    cr_assert(strstr(err, "usage: kiln synth"), "no usage in: %s", err);
}

Test(cli_quant, bad_names_are_usage_errors) {
    expect_usage(RUN("synth", "--preset", "tiny", "--quant", "q9", "-o", tu_tmp("x.gguf")),
                 "--quant: 'q9' is not a quantization kiln writes");
    expect_usage(RUN("synth", "--preset", "tiny", "--quant", "IQ4_XS", "-o", tu_tmp("x.gguf")), "Q4_K(_M)");
    expect_usage(RUN("synth", "--preset", "tiny", "--quant"), "--quant needs a value");
    cr_assert_neq(access(tu_tmp("x.gguf"), F_OK), 0);
    cr_assert_eq(RUN("synth", "--help"), 0);
    cr_assert(strstr(out, "--quant MIX") && strstr(out, "Q4_K_M"), "%s", out);
}

Test(cli_quant, writes_the_mix) {
    const char *p = tu_tmp("q.gguf");
    int rc = RUN("synth", "--preset", "tiny", "--hidden", "256", "--heads", "4", "--kv-heads", "2", "--head-dim", "64",
                 "--ffn", "768", "--quant", "q4_k", "--seed", "3", "-o", p);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert(strstr(out, "qwen3 Q4_K_M"), "%s", out);
    kiln_err e = {0};
    gguf_file *g = gguf_open(p, &e);
    cr_assert_not_null(g, "%s", e.msg);
    uint32_t ft = 0;
    cr_assert_eq(gguf_get_u32(g, "general.file_type", &ft, &e), 0);
    cr_assert_eq(ft, 15);
    cr_assert_eq(gguf_find_tensor(g, "blk.0.attn_q.weight")->type, GGUF_T_Q4_K);
    cr_assert_eq(gguf_find_tensor(g, "blk.2.attn_v.weight")->type, GGUF_T_Q6_K);
    cr_assert_eq(gguf_find_tensor(g, "output.weight")->type, GGUF_T_Q6_K);
    cr_assert_eq(gguf_find_tensor(g, "blk.0.attn_norm.weight")->type, GGUF_T_F32);
    gguf_close(g);
}

/* the tiny preset's width of 200 is not a whole number of 32s */
Test(cli_quant, rows_no_type_fits) {
    const char *p = tu_tmp("tiny-q8.gguf");
    cr_assert_eq(RUN("synth", "--preset", "tiny", "--quant", "Q8_0", "-o", p), 1, "%s", err);
    cr_assert(strstr(err, "--quant Q8_0: token_embd.weight: rows of 200") && strstr(err, "llama-quantize refuses"),
              "%s", err);
    cr_assert_eq(strchr(err, '\n'), strrchr(err, '\n'), "one line: %s", err);
    cr_assert_neq(access(p, F_OK), 0, "no file is left");
}
