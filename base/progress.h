/* Progress of long steps (loading weights to a device, compiling kernels) on stderr, for
 * the kiln command: a bar redrawn in place on a terminal; where stderr is not one, one
 * plain line when a step ends that took PROGRESS_PLAIN_S or longer. Off until
 * progress_enable(true), so library users and tests see nothing; KILN_NO_PROGRESS=1 in
 * the environment keeps it off. */
#ifndef KILN_BASE_PROGRESS_H
#define KILN_BASE_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#define PROGRESS_PLAIN_S 2.0

void progress_enable(bool on);

typedef struct progress {
    char what[96];
    uint64_t total, done;
    double t0, drawn; /* start, last redraw (seconds) */
    bool on, tty;
} progress;

/* A step of `total` units named what ("vulkan:0: weights and kernels"). */
void progress_begin(progress *p, const char *what, uint64_t total);
/* done units of total so far; redraws at most ten times a second. */
void progress_update(progress *p, uint64_t done);
/* The step is over (ok: it succeeded; a failure leaves no plain line). */
void progress_end(progress *p, bool ok);

#endif
