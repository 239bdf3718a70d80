/* GET /metrics: the server's counters in Prometheus' text format. */
#include "server/http_internal.h"

#include <stdio.h>
#include <stdlib.h>

char *srv_metrics_text(server *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t req = s->requests, pt = s->prompt_tokens, ct = s->cached_tokens, gt = s->completion_tokens;
    double gs = s->generate_s;
    uint32_t waiting = s->waiting, busy = s->busy;
    pthread_mutex_unlock(&s->mu);
    size_t cap = 2048;
    char *out = malloc(cap);
    if (!out) return NULL;
    int n = snprintf(out, cap,
                     "# HELP kiln_requests_total Completion requests received.\n"
                     "# TYPE kiln_requests_total counter\nkiln_requests_total %llu\n"
                     "# HELP kiln_prompt_tokens_total Prompt tokens of finished requests.\n"
                     "# TYPE kiln_prompt_tokens_total counter\nkiln_prompt_tokens_total %llu\n"
                     "# HELP kiln_prompt_tokens_cached_total Prompt tokens reused from the slot's cache.\n"
                     "# TYPE kiln_prompt_tokens_cached_total counter\nkiln_prompt_tokens_cached_total %llu\n"
                     "# HELP kiln_completion_tokens_total Tokens generated.\n"
                     "# TYPE kiln_completion_tokens_total counter\nkiln_completion_tokens_total %llu\n"
                     "# HELP kiln_generate_seconds_total Time spent generating (after the prompt).\n"
                     "# TYPE kiln_generate_seconds_total counter\nkiln_generate_seconds_total %.6f\n"
                     "# HELP kiln_tokens_per_second Generated tokens per second of generation, overall.\n"
                     "# TYPE kiln_tokens_per_second gauge\nkiln_tokens_per_second %.3f\n"
                     "# HELP kiln_queue_depth Requests waiting for a slot.\n"
                     "# TYPE kiln_queue_depth gauge\nkiln_queue_depth %u\n"
                     "# HELP kiln_slots_busy Slots generating.\n"
                     "# TYPE kiln_slots_busy gauge\nkiln_slots_busy %u\n",
                     (unsigned long long)req, (unsigned long long)pt, (unsigned long long)ct, (unsigned long long)gt,
                     gs, gs > 0 ? (double)gt / gs : 0.0, waiting, busy);
    if (n < 0 || (size_t)n >= cap) {
        free(out);
        return NULL;
    }
    return out;
}
