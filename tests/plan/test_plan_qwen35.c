/* A GPU plan refuses Qwen3.5 (qwen35) by name until its DeltaNet kernels exist: no
 * device is touched (the refusal comes from the plan's shape, before any upload). */
#include "base/error.h"
#include "model/model.h"
#include "plan/plan.h"
#include "plan/plan_internal.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

Test(plan, qwen35_is_refused_by_name) {
    kiln_err err = {0};
    model *m = model_load(tu_data_file("models/qwen35-tiny.gguf"), &err);
    cr_assert_not_null(m, "%s", err.msg);
    plan_shape s;
    cr_assert_eq(plan_shape_of(m, 0, 0, 0, &s, &err), -1);
    cr_assert(strstr(err.msg, "architecture 'qwen35'") && strstr(err.msg, "--device cpu"), "%s", err.msg);
    rt_device d = {0};
    snprintf(d.label, sizeof d.label, "vulkan:7");
    cr_assert_null(plan_create(m, &d, 0, 0, 0, &err));
    cr_assert(strstr(err.msg, "vulkan:7") && strstr(err.msg, "architecture 'qwen35'"), "%s", err.msg);
    model_free(m);
}
