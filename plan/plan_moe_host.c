/* The experts the device cache lacks, computed by the host's threads from the model's
 * mapped weights (plan_moe_cache.c calls it between a layer's two recorded segments): for
 * each miss, choice c of token t on expert e,
 *   act[r] = round(silu(round(gate_e[r] . h_t)) * round(up_e[r] . h_t))
 *   out[c][r] = round(down_e[r] . act)
 * with the device's rounding points (kn_moe_gate_up, kn_moe_down_g), so the device's
 * weighted sum (kn_moe_down, kn_moe_combine) takes the host's product where it would take
 * its own. Products in f32; the weights are read in their file type (16-bit directly, any
 * other type dequantized a few rows at a time into the worker's scratch). The misses come
 * grouped by expert, so each expert's rows are read once for all the tokens that chose it;
 * the threads split (expert, row chunk) items, several experts at once. */
#include "base/error.h"
#include "base/pool.h"
#include "gguf/half.h"
#include "plan/plan_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 16 /* rows an item; also the rows a worker dequantizes at once */

typedef struct host_job {
    const plan_moe_host *mh;
    const gguf_tensor *w[3];  /* gate, up, down (the layer's 3-D tensors) */
    uint32_t n_embd, n_ff;
    bool bf16;                /* the plan's 16-bit type */
    const float *h;           /* the block's normed inputs, f32 [n x n_embd] */
    const uint32_t *group;    /* [n_groups + 1]: each expert's misses in order[group[i] .. group[i + 1]) */
    const uint32_t *order;    /* the misses (indices into choice/expert) grouped by expert */
    const uint32_t *choice, *expert;
    uint32_t n_groups, k_used;
    int phase;                /* 0: gate and up into act; 1: down into out */
    float *act;               /* [misses x n_ff] (rounded values, as f32) */
    uint16_t *out;            /* [n x k x n_embd] */
    uint32_t chunks;          /* row chunks a group, this phase */
    int rc;
} host_job;

static float round16(bool bf16, float x) {
    return bf16 ? gguf_bf16_to_f32(gguf_f32_to_bf16(x)) : gguf_f16_to_f32(gguf_f32_to_f16(x));
}

/* Row `row` of t as the device holds it (the plan's 16-bit type: bf16 or not), as f32 in
 * dst[cols]: a file in that type read directly, any other converted (rounded to it). 0, or -1. */
static int row_f32(const gguf_tensor *t, uint64_t row, bool bf16, float *dst) {
    uint64_t cols = t->ne[0];
    if (t->type == (bf16 ? GGUF_T_BF16 : GGUF_T_F16)) {
        const uint16_t *w = (const uint16_t *)t->data + row * cols;
        if (bf16)
            for (uint64_t c = 0; c < cols; c++) dst[c] = gguf_bf16_to_f32(w[c]);
        else
            for (uint64_t c = 0; c < cols; c++) dst[c] = gguf_f16_to_f32(w[c]);
        return 0;
    }
    kiln_err ignored;
    uint16_t *w = (uint16_t *)dst + cols; /* the upper half of dst, read before it is written */
    if (bf16 ? gguf_tensor_rows_bf16(t, row, 1, w, &ignored) : gguf_tensor_rows_f16(t, row, 1, w, &ignored)) return -1;
    if (bf16)
        for (uint64_t c = 0; c < cols; c++) dst[c] = gguf_bf16_to_f32(w[c]);
    else
        for (uint64_t c = 0; c < cols; c++) dst[c] = gguf_f16_to_f32(w[c]);
    return 0;
}

static float dot(const float *a, const float *b, uint32_t n) {
    float s[8] = {0};
    uint32_t c = 0;
    for (; c + 8 <= n; c += 8)
        for (int i = 0; i < 8; i++) s[i] += a[c + i] * b[c + i];
    for (; c < n; c++) s[0] += a[c] * b[c];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static void run_items(void *ctx, uint64_t begin, uint64_t end, int worker) {
    host_job *J = ctx;
    const plan_moe_host *mh = J->mh;
    uint32_t cols = J->phase ? J->n_ff : J->n_embd, rows = J->phase ? J->n_embd : J->n_ff;
    float *wrow = mh->scratch + (size_t)worker * mh->scratch_per_worker, *urow = wrow + cols;
    for (uint64_t it = begin; it < end; it++) {
        uint32_t gi = (uint32_t)(it / J->chunks), r0 = (uint32_t)(it % J->chunks) * CHUNK;
        uint32_t r1 = r0 + CHUNK < rows ? r0 + CHUNK : rows, first = J->group[gi], last = J->group[gi + 1];
        uint32_t e = J->expert[J->order[first]];
        for (uint32_t r = r0; r < r1; r++) {
            uint64_t row = (uint64_t)e * rows + r;
            if (J->phase == 0) {
                if (row_f32(J->w[0], row, J->bf16, wrow) || row_f32(J->w[1], row, J->bf16, urow)) {
                    J->rc = -1;
                    return;
                }
                for (uint32_t i = first; i < last; i++) {
                    const float *x = J->h + (size_t)(J->choice[J->order[i]] / J->k_used) * J->n_embd;
                    float g = round16(J->bf16, dot(wrow, x, cols)), u = round16(J->bf16, dot(urow, x, cols));
                    J->act[(size_t)i * J->n_ff + r] = round16(J->bf16, g / (1.0f + expf(-g)) * u);
                }
            } else {
                if (row_f32(J->w[2], row, J->bf16, wrow)) {
                    J->rc = -1;
                    return;
                }
                for (uint32_t i = first; i < last; i++) {
                    float y = dot(wrow, J->act + (size_t)i * J->n_ff, cols);
                    uint16_t v = J->bf16 ? gguf_f32_to_bf16(y) : gguf_f32_to_f16(y);
                    J->out[(size_t)J->choice[J->order[i]] * J->n_embd + r] = v;
                }
            }
        }
    }
}

int plan_moe_host_init(plan_moe_host *mh, const arch_hparams *hp, uint32_t n_block, kiln_err *err) {
    memset(mh, 0, sizeof *mh);
    if (!(mh->pool = pool_create(0))) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory (the host's threads)");
    size_t nk = (size_t)n_block * hp->n_expert_used, widest = hp->n_embd > hp->n_ff_exp ? hp->n_embd : hp->n_ff_exp;
    mh->scratch_per_worker = 2 * widest;
    mh->scratch = malloc((size_t)pool_threads(mh->pool) * mh->scratch_per_worker * 4);
    mh->h = malloc((size_t)n_block * hp->n_embd * 4);
    mh->act = malloc(nk * hp->n_ff_exp * 4);
    mh->order = malloc(nk * 4), mh->group = malloc((nk + 1) * 4);
    if (!mh->scratch || !mh->h || !mh->act || !mh->order || !mh->group) {
        plan_moe_host_free(mh);
        return kiln_fail(err, KILN_ERR_NOMEM, "out of memory (the host's experts)");
    }
    return 0;
}

void plan_moe_host_free(plan_moe_host *mh) {
    if (mh->pool) pool_destroy(mh->pool);
    free(mh->scratch), free(mh->h), free(mh->act), free(mh->order), free(mh->group);
    memset(mh, 0, sizeof *mh);
}

int plan_moe_host_run(plan_moe_host *mh, const model_layer *ml, const arch_hparams *hp, bool bf16, const uint16_t *h,
                      uint32_t n, const uint32_t *choice, const uint32_t *expert, uint32_t n_miss, uint16_t *out,
                      kiln_err *err) {
    if (!n_miss) return 0;
    for (size_t i = 0; i < (size_t)n * hp->n_embd; i++)
        mh->h[i] = bf16 ? gguf_bf16_to_f32(h[i]) : gguf_f16_to_f32(h[i]);
    /* the misses grouped by expert (a counting sort would need n_expert words; misses are few) */
    uint32_t n_groups = 0;
    for (uint32_t i = 0; i < n_miss; i++) mh->order[i] = i;
    for (uint32_t i = 1; i < n_miss; i++) /* insertion sort by expert, stable */
        for (uint32_t j = i; j > 0 && expert[mh->order[j - 1]] > expert[mh->order[j]]; j--) {
            uint32_t x = mh->order[j];
            mh->order[j] = mh->order[j - 1], mh->order[j - 1] = x;
        }
    for (uint32_t i = 0; i < n_miss; i++)
        if (!i || expert[mh->order[i]] != expert[mh->order[i - 1]]) mh->group[n_groups++] = i;
    mh->group[n_groups] = n_miss;
    host_job J = {mh, {ml->ffn_gate_exps, ml->ffn_up_exps, ml->ffn_down_exps}, hp->n_embd, hp->n_ff_exp, bf16,
                  mh->h, mh->group, mh->order, choice, expert, n_groups, hp->n_expert_used, 0, mh->act, out, 0, 0};
    J.chunks = (hp->n_ff_exp + CHUNK - 1) / CHUNK;
    pool_run(mh->pool, run_items, &J, (uint64_t)n_groups * J.chunks);
    if (!J.rc) {
        J.phase = 1;
        J.chunks = (hp->n_embd + CHUNK - 1) / CHUNK;
        pool_run(mh->pool, run_items, &J, (uint64_t)n_groups * J.chunks);
    }
    return J.rc ? kiln_fail(err, KILN_ERR_INVALID, "an expert's weights could not be read on the host (their type)") : 0;
}
