#include "tests/util/testutil_chat.h"

#include <criterion/criterion.h>
#include <stddef.h>

/* Where two renderings first differ, for failure messages. */
static size_t first_diff(const char *a, const char *b) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    return i;
}

void tu_expect_same_text(const char *got, const char *want, const char *what) {
    cr_expect_str_eq(got, want, "%s: differs at byte %zu\n got: [%s]\nwant: [%s]", what, first_diff(got, want), got,
                     want);
}
