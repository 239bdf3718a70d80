/* kiln serve with a mixture of experts whose experts do not all fit (--mem-limit): it
 * answers with an expert cache, and /metrics exports the cache's slots, hits and misses.
 * Skipped by name without Vulkan. */
#include "runtime/device.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_serve.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ts_server srv = {.pid = -1};

static void fini(void) { ts_kill(&srv); }

/* The value of metric name in a Prometheus text page (-1: absent). */
static double metric(const char *page, const char *name) {
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = strstr(page, key);
    return at ? strtod(at + strlen(key), NULL) : -1;
}

Test(serve_moe, expert_cache_metrics, .fini = fini, .timeout = 240) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    d->ops->destroy(d);
    const char *extra[] = {"--device", "vulkan:0", "--ctx", "256", "--mem-limit", "2600000", NULL};
    ts_start(&srv, tu_data_file("models/qwen3moe-tiny.gguf"), extra, NULL);
    ts_resp r = ts_request(&srv, "POST", "/v1/completions", TS_KEY,
                           "{\"prompt\": \"Once upon a time\", \"max_tokens\": 12, \"temperature\": 0}");
    cr_assert_eq(r.status, 200, "%s", r.raw);
    ts_resp_free(&r);
    r = ts_request(&srv, "GET", "/metrics", NULL, NULL);
    cr_assert_eq(r.status, 200, "%s", r.raw);
    cr_assert_eq(metric(r.body, "kiln_expert_cache_slots"), 1, "%s", r.body);
    cr_assert_eq(metric(r.body, "kiln_expert_cache_experts"), 8, "%s", r.body);
    double hits = metric(r.body, "kiln_expert_cache_hits_total"), misses = metric(r.body, "kiln_expert_cache_misses_total");
    cr_assert(hits > 0 && misses > 0, "hits %g, misses %g: %s", hits, misses, r.body);
    cr_assert_geq(metric(r.body, "kiln_expert_cache_swaps_total"), 0, "%s", r.body);
    ts_resp_free(&r);
}
