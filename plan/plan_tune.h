/* The plan's grid tuning: for kernels whose result does not depend on the grid (rows
 * strided over the workgroups launched), the fastest grid measured on the device. */
#ifndef KILN_PLAN_PLAN_TUNE_H
#define KILN_PLAN_PLAN_TUNE_H

#include "base/error.h"
#include "runtime/device.h"

#include <stdint.h>

/* For each kernel in kerns, times its launches in l[0..n) at their recorded grid (the
 * most workgroups it can use) and at 1, 2, 3, 4, 6 and 8 workgroups per compute unit
 * below that, and sets every launch of it in l to the fastest (the recorded one unless
 * another is at least 3% faster), kept only where the whole step l[0..n), recorded and
 * replayed, is faster with it too; chosen[k] gets kernel k's grid (0: not launched). The
 * launches run for real: the step's inputs must be valid (a token, a position), and its
 * outputs are scratch until the next step rewrites them. Nothing changes where the caps
 * do not know the compute units. 0, or -1 with err. */
int plan_tune_grids(rt_device *d, rt_launch *l, uint32_t n, rt_kernel *const *kerns, uint32_t n_kerns,
                    uint32_t *chosen, kiln_err *err);

#endif
