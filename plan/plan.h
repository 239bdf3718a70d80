/* The execution plan: for a model and a device, every kernel built from IR and compiled,
 * every buffer allocated once, a decode step and a prefill block recorded once and
 * replayed (only the tokens, position and count change, through two small buffers).
 * Implements the engine interface, so the generation loop runs on a GPU exactly as on
 * the oracle. */
#ifndef KILN_PLAN_PLAN_H
#define KILN_PLAN_PLAN_H

#include "base/error.h"
#include "model/engine.h"
#include "model/model.h"
#include "runtime/device.h"

#include <stdbool.h>
#include <stdio.h>

/* dtype: GGUF_T_BF16 or GGUF_T_F16 (0: the file's, bf16 for F32/quantized files).
 * n_ctx: KV cache positions (0: the model's context, halved while the plan does not fit
 * the device's memory or its largest buffer, down to 256). n_block: prompt tokens
 * per prefill block (0: 512), rounded up to a multiple of 64 and capped by the context.
 * The model and the device must outlive the engine. NULL with err: a model or context
 * that does not fit the device (with the sizes), a feature the GPU path lacks, a
 * compile failure. */
engine *plan_create(const model *m, rt_device *d, uint32_t dtype, uint32_t n_ctx, uint32_t n_block, kiln_err *err);

/* Plans for n_slots requests at once on one device (kiln serve --parallel): this makes
 * the first, exactly as plan_create, except that with more than one slot n_ctx positions
 * are a pool of pages the slots share (each slot's sequence may grow to all of them: pages
 * are handed out as it grows, and taken back from the tails of idle slots' caches when
 * none is free), and the memory check (and the context chosen without n_ctx) counts the
 * weights and the pool once and the activations n_slots times; plan_create_sibling makes
 * the others. */
engine *plan_create_slots(const model *m, rt_device *d, uint32_t dtype, uint32_t n_ctx, uint32_t n_block,
                          uint32_t n_slots, kiln_err *err);
/* Another plan of first's shape on its device that borrows its weight buffers (only
 * read by every kernel): the next slot of first's pool of pages, its own activations,
 * kernels and recordings. first must outlive it; the two must not
 * evaluate at the same time (model/engine_batch.h). NULL with err (the device's allocation
 * fails, more plans than first's slots, not a plan). */
engine *plan_create_sibling(engine *first, kiln_err *err);

/* Kernels compiled, and launches per decode step (for reports). */
void plan_counts(const engine *e, uint32_t *n_kernels, uint32_t *n_launches);
/* Where a decode step's and a prefill block's time goes: each recording replayed, then
 * each of its launches run reps times back to back in one submission (a block's at most
 * 10), summed by kernel role, with the bytes per second of the decode kernels that stream
 * weights or the cache and the FLOP rate of the prefill products and attention, written
 * to out; the prefill block holds n_prefill tokens (0 or more than a block: a full one).
 * n_step > 1: also the step of n_step slots' tokens (the plan made for that many slots;
 * its tokens at positions 0..n_step-1 of slot 0's cache).
 * The launches rewrite the activations and the cache (the engine's cache is empty
 * afterwards): for the end of a run. 0, or -1 with err. */
int plan_profile(engine *e, uint32_t reps, uint32_t n_prefill, uint32_t n_step, FILE *out, kiln_err *err);
/* Bytes the model's weights take on the plan's device (shared by its sibling plans):
 * block-quantized ones in their blocks where kept so, the others in 16 bits. */
uint64_t plan_weight_bytes(const engine *e);
/* The memory the plan's device may give kiln from now on, as --mem-limit would have set
 * it (an expert cache follows it at its next recheck): for tests of a shrinking card. */
void plan_limit_memory(engine *e, uint64_t bytes);
/* Tokens per prefill block (a prompt runs in blocks of this many). */
uint32_t plan_block(const engine *e);

/* Builds every kernel a plan would compile for the model on a device with caps c (the
 * same choices plan_create makes), handing each verified kernel to fn with its role
 * ("embed", "decode_qkv", "attn_prefill", ...); the kernel is destroyed after fn
 * returns (n_ctx 0: the model's context; dbg: the test switches, NULL for none). For
 * `kiln dump`. 0, or -1 with err. */
int plan_each_kernel(const model *m, const rt_caps *c, const rt_debug *dbg, uint32_t dtype, uint32_t n_ctx,
                     void (*fn)(void *ctx, const char *role, const ir_kernel *k), void *ctx, kiln_err *err);

#endif
