/* ir/lower.h — the target rewrites both emitters share, as IR passes run on a copy of a
 * verified kernel (ir_kernel_clone) before emission, so an emitter holds its target's
 * instructions only. A backend fills the options from its caps (plain flags: ir/ knows
 * no device); ir_print shows the result (kiln dump writes it as ROLE.lowered.ir). Two
 * forms exist only in lowered kernels: vector constants (every lane the same) and
 * convert.exact (f32 -> f16/bf16 of a value the type holds exactly: nothing rounds).
 *
 * Masked accesses (lower_mask.c): load.masked / store.masked become an if on "every lane
 * in bounds" around the plain access of the whole vector, else lane by lane, each lane
 * its own if around a scalar access (a load's skipped lanes yield the fallback), so no
 * element at or past the limit is touched and no address past it is formed on a taken
 * path.
 *
 * Asynchronous copies (lower_async.c), for targets without them: async.copy becomes
 * load.masked (fallback zero) and shm.store per vector of up to 4 elements, done when it
 * returns; async.commit and async.wait are dropped. It runs before the masked lowering.
 *
 * 16-bit floats (lower_half.c): for a type held in f32 registers, arithmetic becomes f32
 * arithmetic and a conversion back; where the type's rounding is asked in the IR, f32 -> it
 * becomes round-to-nearest-even written out in IR ops and convert.exact. */
#ifndef KILN_IR_LOWER_H
#define KILN_IR_LOWER_H

#include "base/error.h"
#include "ir/ir.h"

#include <stdbool.h>
#include <stddef.h>

/* How a target holds one 16-bit float type (lower_half.c). */
typedef struct ir_lower_16 {
    bool in_f32; /* its values live in f32 registers */
    bool arith;  /* arithmetic on it is allowed: held in f32, it becomes f32 arithmetic and a
                  * conversion back (else it is left, and the emitter refuses it) */
    bool round;  /* f32 -> it rounds in the IR (bf16 with integer ops, f16 with f32 ops),
                  * else by the target's conversion instruction */
} ir_lower_16;

typedef struct ir_lower_opts {
    bool async_sync; /* async.copy -> a masked load and a workgroup store; commit/wait dropped */
    bool masked; /* load.masked / store.masked -> in-bounds vector or lane-by-lane forms */
    ir_lower_16 bf16, f16;
} ir_lower_opts;

/* Rewrites k (which must verify) in place with the passes o asks for, then verifies it
 * again. 0, or -1 with a one-line err (the kernel is then to be discarded). */
int ir_lower(ir_kernel *k, const ir_lower_opts *o, kiln_err *err);

#endif
