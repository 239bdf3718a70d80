/* base/clock — the one clock kiln times with: monotonic seconds (for rates, timeouts and
 * progress; never the time of day). */
#ifndef KILN_BASE_CLOCK_H
#define KILN_BASE_CLOCK_H

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC), to the nanosecond. */
double clock_now_s(void);

#endif
