/* Helpers for the chat template tests (tests/text/test_chat*.c). */
#ifndef KILN_TESTS_TESTUTIL_CHAT_H
#define KILN_TESTS_TESTUTIL_CHAT_H

/* Expects got == want, naming `what` and the first byte where they differ. */
void tu_expect_same_text(const char *got, const char *want, const char *what);

#endif
