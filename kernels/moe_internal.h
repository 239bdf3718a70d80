/* What the experts' kernels (moe.c, moe_mma.c, moe_q.c) share about an expert cache. */
#ifndef KILN_KERNELS_MOE_INTERNAL_H
#define KILN_KERNELS_MOE_INTERNAL_H

#include "kernels/kn_common.h"

/* Cached: buffer "slots" (u32, one word, the last parameter) holds the slots the weights'
 * buffers hold now, written by the plan at each resize, so that one compiled kernel serves
 * every slot count (the 16-bit weights then declare one expert's extent: the plan binds
 * them with `slots` experts). */
static inline ir_buf moe_slots_param(kx k) { return kx_buffer(k, "slots", IR_U32, IR_READ, 1); }

/* The slots held now, at least one. */
static inline ir_val moe_slots_now(kx k, ir_buf slots) { return kx_max_c(k, kx_load_c(k, slots, 0), 1); }

/* Slot s clamped below the slots held now and below n_expert (the bound compiled in), so
 * that no read leaves the weights' buffers whatever sel holds. */
static inline ir_val moe_clamp_slot(kx k, ir_buf slots, ir_val s, uint32_t n_expert) {
    return kx_min(k, kx_min_c(k, s, n_expert - 1), kx_sub_c(k, moe_slots_now(k, slots), 1));
}

#endif
