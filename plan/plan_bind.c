/* Launches bound by name (plan/plan_bind.h): a swapped pair of buffers of one type, or a
 * buffer that is short for the launch's grid, fails plan creation with the kernel and the
 * parameter named, instead of showing only as a divergence. */
#include "plan/plan_bind.h"

#include "base/error.h"
#include "plan/plan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int plan_sig_capture(const ir_kernel *k, const char *role, plan_sig *sig, kiln_err *err) {
    uint32_t n = ir_n_params(k);
    size_t names = strlen(ir_kernel_name(k)) + 1;
    for (uint32_t i = 0; i < n; i++) names += strlen(ir_param_at(k, i)->name) + 1;
    /* one block: the parameters, then every name after them */
    char *block = malloc(n * sizeof(ir_param) + names);
    if (!block) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    ir_param *param = (ir_param *)block;
    char *at = block + n * sizeof(ir_param);
    for (uint32_t i = 0; i < n; i++) {
        param[i] = *ir_param_at(k, i);
        size_t len = strlen(param[i].name) + 1;
        param[i].name = memcpy(at, param[i].name, len);
        at += len;
    }
    *sig = (plan_sig){role, memcpy(at, ir_kernel_name(k), strlen(ir_kernel_name(k)) + 1), param, n};
    return 0;
}

void plan_sig_free(plan_sig *sig) {
    free(sig->param);
    *sig = (plan_sig){0};
}

/* Bytes of one element of a buffer of s. */
static uint32_t elem_bytes(ir_scalar s) {
    switch (s) {
    case IR_F16: case IR_BF16: return 2;
    case IR_I32: case IR_U32: case IR_F32: return 4;
    case IR_I64: case IR_U64: return 8;
    default: return 0; /* bool: never a buffer's element */
    }
}

/* The index of the parameter named name, or n_params. */
static uint32_t find_param(const plan_sig *sig, const char *name) {
    uint32_t i = 0;
    while (i < sig->n_params && strcmp(sig->param[i].name, name)) i++;
    return i;
}

/* The buffer bound to p holds what a launch of groups reaches through it. */
static int check_size(rt_device *d, const plan_sig *sig, const ir_param *p, rt_buffer *b, const uint32_t groups[3],
                      kiln_err *err) {
    uint32_t esize = elem_bytes(p->elem);
    if (!p->extent || !esize)
        return kiln_fail(err, KILN_ERR_INVALID, "%s (%s): parameter '%s' declares no extent", sig->role, sig->kernel,
                         p->name);
    size_t bytes = d->ops->size(d, b);
    /* elements a launch of groups needs, saturated where a per-group extent times the grid
     * would pass what 64 bits of bytes count */
    uint64_t times = p->extent_per_group ? groups[p->extent_dim] : 1, cap = UINT64_MAX / esize;
    uint64_t need = times && p->extent > cap / times ? cap : ir_param_extent(p, groups);
    if (need <= bytes / esize) return 0;
    const char *how = p->access == (IR_READ | IR_WRITE) ? "reads and writes"
                      : p->access == IR_WRITE           ? "writes"
                                                        : "reads";
    return kiln_fail(err, KILN_ERR_INVALID,
                     "%s (%s): the buffer bound to '%s' holds %zu bytes; a launch of %ux%ux%u workgroups %s %llu %s "
                     "(%llu bytes)",
                     sig->role, sig->kernel, p->name, bytes, groups[0], groups[1], groups[2], how,
                     (unsigned long long)need, ir_scalar_name(p->elem), (unsigned long long)(need * esize));
}

/* Every argument names a parameter, none twice; which argument binds each parameter. */
static int match_names(const plan_sig *sig, const plan_arg *args, uint32_t n_args, uint32_t *arg_of, kiln_err *err) {
    for (uint32_t i = 0; i < sig->n_params; i++) arg_of[i] = n_args;
    for (uint32_t j = 0; j < n_args; j++) {
        uint32_t i = find_param(sig, args[j].name);
        if (i < sig->n_params && arg_of[i] == n_args) {
            arg_of[i] = j;
            continue;
        }
        if (i < sig->n_params)
            return kiln_fail(err, KILN_ERR_INVALID, "%s (%s): parameter '%s' is bound twice", sig->role, sig->kernel,
                             args[j].name);
        char names[KILN_ERR_MSG] = "";
        size_t used = 0;
        for (uint32_t k = 0; k < sig->n_params && used < sizeof names; k++)
            used += (size_t)snprintf(names + used, sizeof names - used, " %s", sig->param[k].name);
        return kiln_fail(err, KILN_ERR_INVALID, "%s (%s): no parameter named '%s' (it has%s)", sig->role, sig->kernel,
                         args[j].name, names);
    }
    return 0;
}

int plan_bind(rt_device *d, const plan_sig *sig, const uint32_t groups[3], const plan_arg *args, uint32_t n_args,
              rt_arg **out, kiln_err *err) {
    *out = NULL;
    uint32_t *arg_of = malloc((sig->n_params ? sig->n_params : 1) * sizeof *arg_of);
    rt_arg *a = calloc(sig->n_params ? sig->n_params : 1, sizeof *a);
    if (!arg_of || !a) return free(arg_of), free(a), kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    int rc = match_names(sig, args, n_args, arg_of, err);
    for (uint32_t i = 0; i < sig->n_params && !rc; i++) {
        const ir_param *p = &sig->param[i];
        const char *role = sig->role, *kern = sig->kernel;
        if (!p->is_buffer)
            rc = kiln_fail(err, KILN_ERR_INVALID, "%s (%s): scalar parameter '%s': the plan binds buffers only", role,
                           kern, p->name);
        else if (arg_of[i] == n_args)
            rc = kiln_fail(err, KILN_ERR_INVALID, "%s (%s): parameter '%s' is left unbound", role, kern, p->name);
        else if (!args[arg_of[i]].buf)
            rc = kiln_fail(err, KILN_ERR_INVALID, "%s (%s): parameter '%s' is bound to no buffer", role, kern, p->name);
        else if (!(rc = check_size(d, sig, p, args[arg_of[i]].buf, groups, err)))
            a[i] = (rt_arg){args[arg_of[i]].buf, 0};
    }
    free(arg_of);
    if (rc) return free(a), -1;
    *out = a;
    return 0;
}
