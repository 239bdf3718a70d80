/* Block-quantized weights for the device (plan_quant.c): ggml's types mapped to the
 * kernels' (kernels/kn_quant.h) and their blocks repacked into the kernels' planes. */
#ifndef KILN_PLAN_PLAN_QUANT_H
#define KILN_PLAN_PLAN_QUANT_H

#include "base/error.h"
#include "gguf/gguf.h"
#include "kernels/kn_quant.h"

/* The kernels' type for a ggml type, or -1 where they have none. */
int plan_qtype(uint32_t gguf_type);
/* Rows [t_row0, t_row0 + n_rows) of t (of L's type, L->cols columns) into rows [row0, ..)
 * of the planes of layout L in words (L->words, zeroed before the first call: fields are
 * or'ed in). 0, or -1 with err where t does not fit L. */
int plan_quant_pack(const gguf_tensor *t, uint64_t t_row0, uint32_t n_rows, const kn_qlayout *L, uint32_t row0,
                    uint32_t *words, kiln_err *err);
/* plan_quant_pack of all of t's rows into rows 0.. of L, split over up to `threads` threads
 * (<= 0: one a core, at most 16) in pieces starting on even rows: a word of a plane
 * holds at most two f16 units, whose pair an even row never splits, so no two pieces
 * write one word. */
int plan_quant_pack_all(const gguf_tensor *t, const kn_qlayout *L, uint32_t *words, int threads, kiln_err *err);

#endif
