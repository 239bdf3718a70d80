/* The prefill products' staging by asynchronous copies (matmul_internal.h): a chunk of kc
 * columns of `tile` rows, 16 bytes a copy. Row-major and swizzled slots take copy i as row
 * i / (kc / 8), columns (i % (kc / 8)) * 8, so 8 neighbouring invocations read 128
 * contiguous bytes of a row (the swizzle permutes where its 16-byte pieces land: distinct
 * banks); core-matrix slots take the 8 rows of a core matrix first (copy i: row
 * (i / kc) * 8 + i % 8, columns ((i / 8) % (kc / 8)) * 8), so the 8 copies of neighbouring
 * invocations fill one 128-byte core matrix. */
#include "kernels/matmul_internal.h"

void mm_issue_stage(const mm *m, const mm_stage *s, ir_val chunk, ir_val slot) {
    kx k = m->k;
    uint32_t per_row = s->kc / MM_COPY, n = s->tile * per_row, wg = m->invocations;
    ir_val col0 = kx_mul_c(k, chunk, s->kc), dst0 = kx_add_c(k, kx_mul_c(k, slot, s->stage_elems), s->offset);
    for (uint32_t j = 0; j * wg < n; j++) {
        ir_val i = kx_add_c(k, m->lid, j * wg);
        ir_if *f = (j + 1) * wg <= n ? NULL : kx_if(k, kx_lt_c(k, i, n));
        ir_val row, c8, group = IR_NONE, kb = IR_NONE;
        if (s->layout == MM_CORE) {
            group = kx_div_c(k, i, 8 * per_row); /* 8 rows of kc columns each */
            row = kx_add(k, kx_mul_c(k, group, 8), kx_and_c(k, i, 7));
            kb = kx_rem_c(k, kx_shr_c(k, i, 3), per_row);
            c8 = kx_mul_c(k, kb, MM_COPY);
        } else {
            row = kx_div_c(k, i, per_row), c8 = kx_mul_c(k, kx_rem_c(k, i, per_row), MM_COPY);
        }
        ir_val src_row = kx_min_c(k, kx_add(k, s->first_row, row), s->last_row);
        ir_val base = kx_mul_c(k, src_row, m->cols);
        ir_val src = kx_add(k, base, kx_add(k, col0, c8)), limit = kx_add_c(k, base, m->cols);
        ir_val dst;
        if (s->layout == MM_CORE) {
            dst = kx_add(k, kx_mul_c(k, group, 8 * s->kc),
                         kx_add(k, kx_mul_c(k, kb, 64), kx_mul_c(k, kx_and_c(k, i, 7), 8)));
        } else if (s->layout == MM_SW128) {
            ir_val piece = kx_rem_c(k, i, per_row), r8 = kx_and_c(k, row, 7);
            ir_val atom = kx_add(k, kx_mul_c(k, kx_shr_c(k, row, 3), 512), kx_mul_c(k, kx_shr_c(k, piece, 3), s->tile * 64));
            ir_val sw = kx_xor(k, kx_and_c(k, piece, 7), r8);
            dst = kx_add(k, atom, kx_add(k, kx_mul_c(k, r8, 64), kx_mul_c(k, sw, 8)));
        } else {
            dst = kx_idx(k, row, s->pitch, c8);
        }
        ir_async_copy(k.ir, s->dst, kx_add(k, dst0, dst), s->src, src, MM_COPY, limit);
        if (f) kx_end_if(k, f);
    }
}
