#include "base/progress.h"

#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static bool enabled;

void progress_enable(bool on) {
    const char *off = getenv("KILN_NO_PROGRESS");
    enabled = on && !(off && *off && strcmp(off, "0"));
}

static void draw(const progress *p) {
    const int width = 30;
    double f = p->total ? (double)p->done / (double)p->total : 1.0;
    if (f > 1) f = 1;
    int fill = (int)(f * width + 0.5);
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : ' ';
    bar[width] = 0;
    fprintf(stderr, "\r%s [%s] %3d%% %.1f s", p->what, bar, (int)(f * 100 + 0.5), clock_now_s() - p->t0);
    fflush(stderr);
}

void progress_begin(progress *p, const char *what, uint64_t total) {
    memset(p, 0, sizeof *p);
    p->on = enabled;
    if (!p->on) return;
    snprintf(p->what, sizeof p->what, "%s", what);
    p->total = total;
    p->tty = isatty(STDERR_FILENO) == 1;
    p->t0 = p->drawn = clock_now_s();
    if (p->tty) draw(p);
}

void progress_update(progress *p, uint64_t done) {
    if (!p->on) return;
    p->done = done;
    double t = clock_now_s();
    if (p->tty && t - p->drawn >= 0.1) {
        p->drawn = t;
        draw(p);
    }
}

void progress_end(progress *p, bool ok) {
    if (!p->on) return;
    double s = clock_now_s() - p->t0;
    if (p->tty) {
        p->done = p->total;
        draw(p);
        fputc('\n', stderr);
    } else if (ok && s >= PROGRESS_PLAIN_S) {
        fprintf(stderr, "kiln: %s: done in %.1f s\n", p->what, s);
    }
    p->on = false;
}
