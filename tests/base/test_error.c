/* The one error type: codes and messages set, context prefixed (cut, never overrun),
 * NULL errors accepted everywhere. */
#include "base/error.h"

#include <criterion/criterion.h>
#include <string.h>

Test(error, fail_sets_code_and_message) {
    kiln_err e;
    kiln_err_clear(&e);
    cr_assert_eq(e.code, KILN_OK);
    cr_assert_str_eq(e.msg, "");
    cr_assert_eq(kiln_fail(&e, KILN_ERR_INVALID, "bad %s %d", "shape", 3), -1);
    cr_assert_eq(e.code, KILN_ERR_INVALID);
    cr_assert_str_eq(e.msg, "bad shape 3");
    cr_assert_eq(kiln_fail_oom(&e, "converting 'w'"), -1);
    cr_assert_eq(e.code, KILN_ERR_NOMEM);
    cr_assert_str_eq(e.msg, "out of memory converting 'w'");
    kiln_fail_oom(&e, NULL);
    cr_assert_str_eq(e.msg, "out of memory");
}

Test(error, prefix_keeps_the_code) {
    kiln_err e;
    kiln_fail(&e, KILN_ERR_DEVICE, "cuLaunchKernel failed");
    cr_assert_eq(kiln_err_prefix(&e, "%s", "cuda:0"), -1);
    cr_assert_eq(kiln_err_prefix(&e, "model.gguf"), -1);
    cr_assert_str_eq(e.msg, "model.gguf: cuda:0: cuLaunchKernel failed");
    cr_assert_eq(e.code, KILN_ERR_DEVICE);
}

Test(error, long_messages_are_cut_not_overrun) {
    kiln_err e;
    char big[2 * KILN_ERR_MSG];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    kiln_fail(&e, KILN_ERR_INVALID, "%s", big);
    cr_assert_eq(strlen(e.msg), KILN_ERR_MSG - 1);
    kiln_err_prefix(&e, "ctx");
    cr_assert_eq(strlen(e.msg), KILN_ERR_MSG - 1);
    cr_assert_eq(strncmp(e.msg, "ctx: xxx", 8), 0);
    kiln_fail(&e, KILN_ERR_INVALID, "end");
    kiln_err_prefix(&e, "%s", big); /* a context longer than the whole message */
    cr_assert_eq(strlen(e.msg), KILN_ERR_MSG - 1);
    cr_assert_eq(e.msg[0], 'x');
}

Test(error, null_is_accepted) {
    cr_assert_eq(kiln_fail(NULL, KILN_ERR_INTERNAL, "x"), -1);
    cr_assert_eq(kiln_fail_oom(NULL, NULL), -1);
    cr_assert_eq(kiln_err_prefix(NULL, "x"), -1);
    kiln_err_clear(NULL);
}

Test(error, every_code_has_a_name) {
    for (int c = 0; c < KILN_CODE_COUNT; c++) cr_assert_neq(strcmp(kiln_code_name((kiln_code)c), "unknown error"), 0);
    cr_assert_str_eq(kiln_code_name(KILN_CODE_COUNT), "unknown error");
    cr_assert_str_eq(kiln_code_name(KILN_ERR_NOMEM), "out of memory");
}
