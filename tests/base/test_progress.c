/* Progress lines (base/progress.c): nothing unless enabled or when KILN_NO_PROGRESS
 * is set; where stderr is not a terminal, one plain line for a step that took long, none
 * for a quick one or a failed one. (The bar on a terminal is drawn with '\r'.) */
#include "base/progress.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Runs fn with stderr sent to a file; returns what it wrote (static buffer). */
static const char *captured(void (*fn)(void)) {
    static char buf[1024];
    const char *path = tu_tmp("progress.txt");
    fflush(stderr);
    int saved = dup(STDERR_FILENO), fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    cr_assert(saved >= 0 && fd >= 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    fn();
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    FILE *f = fopen(path, "r");
    cr_assert(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void quick(void) {
    progress p;
    progress_begin(&p, "quick step", 10);
    for (int i = 1; i <= 10; i++) progress_update(&p, (uint64_t)i);
    progress_end(&p, true);
}

static void slow(void) { /* as if it had started 3 s ago */
    progress p;
    progress_begin(&p, "slow step", 4);
    p.t0 -= 3.0;
    progress_update(&p, 4);
    progress_end(&p, true);
}

static void slow_failed(void) {
    progress p;
    progress_begin(&p, "failed step", 4);
    p.t0 -= 3.0;
    progress_end(&p, false);
}

Test(progress, plain_lines_off_a_terminal) {
    unsetenv("KILN_NO_PROGRESS");
    progress_enable(false);
    cr_assert_str_empty(captured(slow), "disabled, yet wrote");
    progress_enable(true);
    cr_assert_str_empty(captured(quick), "a quick step needs no line");
    const char *s = captured(slow);
    cr_assert(!strncmp(s, "kiln: slow step: done in 3.", 27) && !strchr(s, '\r'), "%s", s);
    cr_assert_str_empty(captured(slow_failed), "a failed step leaves no 'done' line");
    setenv("KILN_NO_PROGRESS", "1", 1);
    progress_enable(true);
    cr_assert_str_empty(captured(slow), "KILN_NO_PROGRESS=1, yet wrote");
    unsetenv("KILN_NO_PROGRESS");
    progress_enable(false);
}
