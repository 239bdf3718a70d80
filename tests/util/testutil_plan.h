/* Whole-model checks shared by the plan tests of every GPU backend. */
#ifndef KILN_TESTS_TESTUTIL_PLAN_H
#define KILN_TESTS_TESTUTIL_PLAN_H

#include "runtime/device.h"

#include <stdbool.h>
#include <stdint.h>

/* Greedy decoding on the contract oracle and a plan on device d (opened by the caller,
 * caps naming its --caps for the log), teacher-forced on the oracle's tokens after a
 * divergence so logits stay comparable: the prompt runs through the plan's prefill
 * blocks of n_block (0: the default), then `steps` decode steps. The first differing
 * token must be a near-tie (the oracle's top two within 2 quanta of the 16-bit type);
 * returns the worst logits relative error, for the caller to assert. With f32_worst, the
 * f32-mode oracle runs beside on the same tokens and *f32_worst gets its worst distance
 * from the contract oracle: how far the contract's own roundings move the logits; a first
 * divergence is then also accepted where that distance, at that step, covers the contract
 * oracle's margin of its pick over the GPU's (deep random models, whose logits crowd). */
double tu_plan_compare(rt_device *d, const char *caps, const char *path, uint32_t dtype, uint32_t steps,
                       const int32_t *prompt, uint32_t n_prompt, uint32_t n_block, double *f32_worst);

/* The ids of a short story in the model's tokenizer (with BOS): about 200 tokens in a BPE
 * vocabulary, more in a byte-level one (at most cap). */
uint32_t tu_story_ids(const char *path, int32_t *ids, uint32_t cap);

/* kiln synth's qwen3moe-tiny-odd written to a temporary file named file (returned), in
 * bf16 or, with mix, quantized by that llama-quantize mix; wide: K-quant widths (hidden,
 * heads of 64 and experts of 256 where the preset's are odd). *n_vocab gets its vocabulary. */
const char *tu_synth_moe(const char *file, const char *mix, bool wide, uint32_t *n_vocab);
/* The same from another preset with experts (qwen35moe-tiny-odd). */
const char *tu_synth_preset_file(const char *preset, const char *file, const char *mix, bool wide, uint32_t *n_vocab);

#endif
