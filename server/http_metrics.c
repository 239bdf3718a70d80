/* GET /metrics: the server's counters in Prometheus' text format, and the slots' steps
 * (model/engine_batch.h) as histograms of their calls and their time. */
#include "server/http_internal.h"

#include "model/engine_batch.h"

#include <stdio.h>
#include <stdlib.h>

char *srv_metrics_text(server *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t req = s->requests, pt = s->prompt_tokens, ct = s->cached_tokens, gt = s->completion_tokens;
    double gs = s->generate_s;
    uint32_t waiting = s->waiting, busy = s->busy;
    pthread_mutex_unlock(&s->mu);
    size_t cap = 8192;
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
    engine_batch_stats st;
    if (n >= 0 && (size_t)n < cap && s->n_slots && engine_batch_stats_of(s->slots[0].engine, &st)) {
        static const char *const calls_le[ENGINE_BATCH_BUCKETS] = {"1", "2", "4", "8", "16", "32", "64", "+Inf"};
        static const char *const ms_le[ENGINE_BATCH_BUCKETS] = {"0.001", "0.002", "0.004", "0.008",
                                                                "0.016", "0.032", "0.064", "+Inf"};
        n += snprintf(out + n, cap - (size_t)n,
                      "# HELP kiln_step_prompt_chunks_total Prompt chunks cut by --batch-tokens.\n"
                      "# TYPE kiln_step_prompt_chunks_total counter\nkiln_step_prompt_chunks_total %llu\n"
                      "# HELP kiln_step_tokens_total Tokens evaluated in steps.\n"
                      "# TYPE kiln_step_tokens_total counter\nkiln_step_tokens_total %llu\n"
                      "# HELP kiln_step_tokens_together_total Decoding tokens evaluated together with others "
                      "(one pass over the weights).\n"
                      "# TYPE kiln_step_tokens_together_total counter\nkiln_step_tokens_together_total %llu\n"
                      "# HELP kiln_step_batch_size Slots' calls a step took.\n# TYPE kiln_step_batch_size histogram\n",
                      (unsigned long long)st.chunks, (unsigned long long)st.tokens, (unsigned long long)st.together);
        uint64_t cum = 0;
        for (int i = 0; i < ENGINE_BATCH_BUCKETS && n >= 0 && (size_t)n < cap; i++)
            cum += st.by_calls[i],
                n += snprintf(out + n, cap - (size_t)n, "kiln_step_batch_size_bucket{le=\"%s\"} %llu\n", calls_le[i],
                              (unsigned long long)cum);
        if (n >= 0 && (size_t)n < cap)
            n += snprintf(out + n, cap - (size_t)n,
                          "kiln_step_batch_size_sum %llu\nkiln_step_batch_size_count %llu\n"
                          "# HELP kiln_step_seconds Time a step took.\n# TYPE kiln_step_seconds histogram\n",
                          (unsigned long long)st.calls, (unsigned long long)st.steps);
        cum = 0;
        for (int i = 0; i < ENGINE_BATCH_BUCKETS && n >= 0 && (size_t)n < cap; i++)
            cum += st.by_ms[i], n += snprintf(out + n, cap - (size_t)n, "kiln_step_seconds_bucket{le=\"%s\"} %llu\n",
                                              ms_le[i], (unsigned long long)cum);
        if (n >= 0 && (size_t)n < cap)
            n += snprintf(out + n, cap - (size_t)n, "kiln_step_seconds_sum %.6f\nkiln_step_seconds_count %llu\n",
                          st.busy_s, (unsigned long long)st.steps);
    }
    engine_expert_stats xs;
    if (n >= 0 && (size_t)n < cap && s->n_slots && engine_expert_stats_of(s->slots[0].engine, &xs))
        n += snprintf(out + n, cap - (size_t)n,
                      "# HELP kiln_expert_cache_slots Experts a layer the device's expert cache holds.\n"
                      "# TYPE kiln_expert_cache_slots gauge\nkiln_expert_cache_slots %u\n"
                      "# HELP kiln_expert_cache_experts Experts a layer of the model.\n"
                      "# TYPE kiln_expert_cache_experts gauge\nkiln_expert_cache_experts %u\n"
                      "# HELP kiln_expert_cache_hits_total Expert choices computed on the device.\n"
                      "# TYPE kiln_expert_cache_hits_total counter\nkiln_expert_cache_hits_total %llu\n"
                      "# HELP kiln_expert_cache_misses_total Expert choices computed on the host.\n"
                      "# TYPE kiln_expert_cache_misses_total counter\nkiln_expert_cache_misses_total %llu\n"
                      "# HELP kiln_expert_cache_swaps_total Experts copied into the cache.\n"
                      "# TYPE kiln_expert_cache_swaps_total counter\nkiln_expert_cache_swaps_total %llu\n"
                      "# HELP kiln_expert_cache_resizes_total Times the cache followed the device's memory.\n"
                      "# TYPE kiln_expert_cache_resizes_total counter\nkiln_expert_cache_resizes_total %llu\n",
                      xs.slots, xs.experts, (unsigned long long)xs.hits, (unsigned long long)xs.misses,
                      (unsigned long long)xs.swaps, (unsigned long long)xs.resizes);
    if (n < 0 || (size_t)n >= cap) {
        free(out);
        return NULL;
    }
    return out;
}
