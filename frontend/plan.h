/* The execution plan: for a model and a device, every kernel built from IR and compiled,
 * every buffer allocated once, the decode step recorded once and replayed per token
 * (only the token and position change, through two small buffers). Implements the
 * engine interface, so the generation loop runs on a GPU exactly as on the oracle. */
#ifndef KILN_FRONTEND_PLAN_H
#define KILN_FRONTEND_PLAN_H

#include "device.h"
#include "engine.h"
#include "model.h"

/* dtype: GGUF_T_BF16 or GGUF_T_F16 (0: the file's, bf16 for F32/quantized files).
 * n_ctx: KV cache positions (0: min(the model's context, 4096)). The model and the
 * device must outlive the engine. NULL with err: a model or context that does not fit
 * the device (with the sizes), a feature the GPU path lacks, a compile failure. */
engine *plan_create(const model *m, rt_device *d, uint32_t dtype, uint32_t n_ctx, char *err, size_t errlen);

/* Kernels and launches per decode step (for reports). */
void plan_counts(const engine *e, uint32_t *n_kernels, uint32_t *n_launches);

#endif
