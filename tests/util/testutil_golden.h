/* llama.cpp's greedy goldens (../shared/testdata's *.llamacpp.json) replayed through any
 * engine: per case the prompt, then the golden's tokens one at a time, comparing the
 * engine's log-probabilities with llama.cpp's top 5 and its greedy choice with llama.cpp's
 * (a first difference must come at a near-tie of llama.cpp's: the testdata README's rule). */
#ifndef KILN_TESTS_TESTUTIL_GOLDEN_H
#define KILN_TESTS_TESTUTIL_GOLDEN_H

#include "model/engine.h"

typedef struct tu_golden_result {
    int cases, identical, near_tie_diffs;
    double worst_dlogprob; /* over the shared top-5 entries, up to and including the first difference */
    double worst_tie_gap;  /* llama.cpp's top-1 minus top-2 at a first difference */
} tu_golden_result;

/* Replays every case of the golden at testdata path rel through e (each case evaluates at
 * position 0, rewinding the one before); a first difference at a llama.cpp gap above
 * near_tie fails the test (cr_expect), naming what (the engine, for the log). */
tu_golden_result tu_golden_run(engine *e, const char *rel, double near_tie, const char *what);
/* The same for a golden at path (one of kiln's own, tests/data/). */
tu_golden_result tu_golden_run_file(engine *e, const char *path, double near_tie, const char *what);

#endif
