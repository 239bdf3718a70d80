/* ir/lower.h — the target rewrites both emitters share, as IR passes run on a copy of a
 * verified kernel (ir_kernel_clone) before emission, so an emitter holds its target's
 * instructions only. A backend fills the options from its caps (plain flags: ir/ knows
 * no device); ir_print shows the result (kiln dump writes it as ROLE.lowered.ir).
 *
 * Masked accesses (lower_mask.c): load.masked / store.masked become an if on "every lane
 * in bounds" around the plain access of the whole vector, else lane by lane, each lane
 * its own if around a scalar access (a load's skipped lanes yield the fallback), so no
 * element at or past the limit is touched and no address past it is formed on a taken
 * path. */
#ifndef KILN_IR_LOWER_H
#define KILN_IR_LOWER_H

#include "ir/ir.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct ir_lower_opts {
    bool masked; /* load.masked / store.masked -> in-bounds vector or lane-by-lane forms */
} ir_lower_opts;

/* Rewrites k (which must verify) in place with the passes o asks for, then verifies it
 * again. 0, or -1 with a one-line err (the kernel is then to be discarded). */
int ir_lower(ir_kernel *k, const ir_lower_opts *o, char *err, size_t errlen);

#endif
