/* The checks every backend runs before a launch and a view (runtime/device.h). */
#include "base/error.h"
#include "runtime/device.h"

#include <stdio.h>

int rt_check_launch(const rt_launch *l, uint32_t n_params, const bool *is_buffer, kiln_err *err) {
    if (l->n_args != n_params || (l->n_args && !l->args)) {
        kiln_fail(err, KILN_ERR_INVALID, "launch with %u arguments for a kernel of %u parameters", l->n_args, n_params);
        return -1;
    }
    for (uint32_t i = 0; i < l->n_args; i++)
        if (is_buffer[i] && !l->args[i].buf) {
            kiln_fail(err, KILN_ERR_INVALID, "launch argument %u is a buffer parameter without a buffer", i);
            return -1;
        }
    return 0;
}

int rt_check_view(size_t parent_bytes, size_t offset, size_t bytes, kiln_err *err) {
    if (bytes && offset % RT_VIEW_ALIGN == 0 && offset <= parent_bytes && bytes <= parent_bytes - offset) return 0;
    kiln_fail(err, KILN_ERR_INVALID,
              "a view of %zu bytes at %zu: empty, outside the %zu-byte buffer or not %u-byte aligned", bytes, offset,
              parent_bytes, RT_VIEW_ALIGN);
    return -1;
}
