/* plan/ — launches bound by name: what the plan keeps of a kernel's parameters once its
 * IR is gone (names, element types, extents), and the binding of a launch's buffers to
 * them by parameter name, checked against what the kernel reads and writes at the
 * launch's grid, turned once into the positional arguments rt_launch takes. */
#ifndef KILN_PLAN_PLAN_BIND_H
#define KILN_PLAN_PLAN_BIND_H

#include "base/error.h"
#include "ir/ir.h"
#include "runtime/device.h"

#include <stddef.h>
#include <stdint.h>

/* A compiled kernel's parameters, in declaration order (the order of rt_launch.args). */
typedef struct plan_sig {
    const char *role;   /* what the plan uses it for ("decode_o"), for messages; not owned */
    const char *kernel; /* the IR's name ("kn_matvec") */
    ir_param *param;    /* copies; names point into the same allocation */
    uint32_t n_params;
} plan_sig;

/* One buffer of a launch, by the name of the parameter it binds ("W", "x", "res"). */
typedef struct plan_arg {
    const char *name;
    rt_buffer *buf;
} plan_arg;

/* Copies k's parameters into sig (role is kept as a pointer). 0, or -1 with err (out of
 * memory). */
int plan_sig_capture(const ir_kernel *k, const char *role, plan_sig *sig, kiln_err *err);
void plan_sig_free(plan_sig *sig);

/* The positional arguments of a launch of sig's kernel on groups, from args[0..n_args)
 * by name: every parameter bound exactly once, by a known name, to a buffer of d (its
 * size from d->ops->size) that holds the parameter's extent at that grid. *out is
 * malloc'ed, sig->n_params long. 0, or -1 with err naming the role, the kernel and the
 * parameter: an unknown name, a name bound twice, a parameter left unbound, bound to no
 * buffer, a buffer too small, a buffer parameter with no declared extent, a scalar
 * parameter (the plan binds none). */
int plan_bind(rt_device *d, const plan_sig *sig, const uint32_t groups[3], const plan_arg *args, uint32_t n_args,
              rt_arg **out, kiln_err *err);

#endif
