/* Whole-model checks shared by the plan tests of every GPU backend. */
#ifndef KILN_TESTUTIL_PLAN_H
#define KILN_TESTUTIL_PLAN_H

#include "device.h"

#include <stdint.h>

/* Greedy decoding on the contract oracle and a plan on device d (opened by the caller,
 * caps naming its --caps for the log), teacher-forced on the oracle's tokens after a
 * divergence so logits stay comparable: the prompt runs through the plan's prefill
 * blocks of n_block (0: the default), then `steps` decode steps. The first differing
 * token must be a near-tie (the oracle's top two within 2 quanta of the 16-bit type);
 * returns the worst logits relative error, for the caller to assert. */
double tu_plan_compare(rt_device *d, const char *caps, const char *path, uint32_t dtype, uint32_t steps,
                       const int32_t *prompt, uint32_t n_prompt, uint32_t n_block);

/* The ids of a short story of about 200 tokens in the model's tokenizer (with BOS). */
uint32_t tu_story_ids(const char *path, int32_t *ids, uint32_t cap);

#endif
