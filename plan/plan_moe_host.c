/* The experts the device cache lacks, computed by the host's threads from the model's
 * mapped weights (plan_moe_cache.c calls it between a layer's two recorded segments): for
 * each miss, choice c of token t on expert e,
 *   act[r] = round(silu(round(gate_e[r] . h_t)) * round(up_e[r] . h_t))
 *   out[c][r] = round(down_e[r] . act)
 * with the device's rounding points (kn_moe_gate_up, kn_moe_down_g), so the device's
 * weighted sum (kn_moe_down, kn_moe_combine) takes the host's product where it would take
 * its own. Products in f32 of the weights as the device holds them (the plan's 16-bit
 * type: read in the file where it has that type, else converted a row at a time into the
 * worker's scratch). The misses come
 * grouped by expert, so each expert's rows are read once for all the tokens that chose it;
 * the threads split (expert, row chunk) items, several experts at once. */
#include "base/error.h"
#include "base/pool.h"
#include "gguf/half.h"
#include "plan/plan_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#define CHUNK 16 /* rows an item; also the rows a worker dequantizes at once */

typedef struct host_job {
    const plan_moe_host *mh;
    const model_layer *ml; /* the layer: its experts' 3-D tensors (and a shared expert's, model_expert_matrix) */
    uint32_t n_embd, n_ff;
    bool bf16;                /* the plan's 16-bit type */
    bool exact;               /* the weights' exact f32 values (the device holds the file's blocks) */
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

/* Row `row` of t as the device holds it (the plan's 16-bit type): in the file where the
 * file has that type, else converted into tmp (cols values). NULL where t cannot be read. */
static const uint16_t *row16(const gguf_tensor *t, uint64_t row, bool bf16, uint16_t *tmp) {
    uint64_t cols = t->ne[0];
    if (t->type == (bf16 ? GGUF_T_BF16 : GGUF_T_F16)) return (const uint16_t *)t->data + row * cols;
    kiln_err ignored;
    return (bf16 ? gguf_tensor_rows_bf16(t, row, 1, tmp, &ignored) : gguf_tensor_rows_f16(t, row, 1, tmp, &ignored))
               ? NULL
               : tmp;
}

/* The dot products in f32 of a 16-bit row with f32 values, in vectors of running sums:
 * bf16's built for each x86-64 level (AVX-512, AVX2 with FMA, the baseline) and chosen
 * where the program loads (GCC's function clones), f16's on F16C where the CPU has it;
 * other machines take plain loops. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define HOST_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HOST_CLONES
#endif
#define SUMS 16
typedef float vf __attribute__((vector_size(SUMS * 4)));
typedef uint32_t vu __attribute__((vector_size(SUMS * 4)));
typedef uint16_t vh __attribute__((vector_size(SUMS * 2)));

static float fold(const vf *s) {
    float t = 0;
    for (int i = 0; i < SUMS; i++) t += (*s)[i];
    return t;
}

HOST_CLONES static float dot_bf16(const uint16_t *w, const float *x, uint32_t n) {
    vf s = {0};
    uint32_t c = 0;
    for (; c + SUMS <= n; c += SUMS) {
        vh hw;
        vf f, xv;
        memcpy(&hw, w + c, sizeof hw);
        vu bits = __builtin_convertvector(hw, vu) << 16; /* bf16 is f32's upper half */
        memcpy(&f, &bits, sizeof f);
        memcpy(&xv, x + c, sizeof xv);
        s += f * xv;
    }
    float t = fold(&s);
    for (; c < n; c++) t += gguf_bf16_to_f32(w[c]) * x[c];
    return t;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* f16 to f32 by the F16C instructions (the clones above do not reach them from C) */
__attribute__((target("avx2,fma,f16c"))) static float dot_f16_f16c(const uint16_t *w, const float *x, uint32_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    uint32_t c = 0;
    for (; c + 16 <= n; c += 16) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + c)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + c + 8)));
        s0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + c), s0);
        s1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + c + 8), s1);
    }
    float lanes[8], t = 0;
    _mm256_storeu_ps(lanes, _mm256_add_ps(s0, s1));
    for (int i = 0; i < 8; i++) t += lanes[i];
    for (; c < n; c++) t += gguf_f16_to_f32(w[c]) * x[c];
    return t;
}

static bool have_f16c(void) {
    static int known = -1; /* the same answer in every thread: a race writes it twice */
    if (known < 0)
        known = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    return known;
}
#endif

static float dot_f16(const uint16_t *w, const float *x, uint32_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (have_f16c()) return dot_f16_f16c(w, x, n);
#endif
    float s[4] = {0};
    uint32_t c = 0;
    for (; c + 4 <= n; c += 4)
        for (int i = 0; i < 4; i++) s[i] += gguf_f16_to_f32(w[c + i]) * x[c + i];
    for (; c < n; c++) s[0] += gguf_f16_to_f32(w[c]) * x[c];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

static float dot16(bool bf16, const uint16_t *w, const float *x, uint32_t n) {
    return bf16 ? dot_bf16(w, x, n) : dot_f16(w, x, n);
}

HOST_CLONES static float dot_f32(const float *w, const float *x, uint32_t n) {
    vf s = {0};
    uint32_t c = 0;
    for (; c + SUMS <= n; c += SUMS) {
        vf wv, xv;
        memcpy(&wv, w + c, sizeof wv);
        memcpy(&xv, x + c, sizeof xv);
        s += wv * xv;
    }
    float t = fold(&s);
    for (; c < n; c++) t += w[c] * x[c];
    return t;
}

/* A row of weights for the dot products: 16-bit (row16) or exact f32 (a quantized file's
 * dequantized values, into tmp's cols floats); NULL where t cannot be read. */
typedef struct wrow {
    const uint16_t *h;
    const float *f;
} wrow;

static bool row_of(const host_job *J, const gguf_tensor *t, uint64_t row, void *tmp, wrow *w) {
    kiln_err ignored;
    if (!J->exact) return (w->h = row16(t, row, J->bf16, tmp)) != NULL;
    w->f = tmp;
    return !gguf_tensor_rows_f32(t, row, 1, tmp, &ignored);
}

static float dot_row(const host_job *J, const wrow *w, const float *x, uint32_t n) {
    return J->exact ? dot_f32(w->f, x, n) : dot16(J->bf16, w->h, x, n);
}

static void run_items(void *ctx, uint64_t begin, uint64_t end, int worker) {
    host_job *J = ctx;
    const plan_moe_host *mh = J->mh;
    uint32_t cols = J->phase ? J->n_ff : J->n_embd, rows = J->phase ? J->n_embd : J->n_ff;
    float *wtmp = mh->scratch + (size_t)worker * mh->scratch_per_worker, *utmp = wtmp + cols;
    for (uint64_t it = begin; it < end; it++) {
        uint32_t gi = (uint32_t)(it / J->chunks), r0 = (uint32_t)(it % J->chunks) * CHUNK;
        uint32_t r1 = r0 + CHUNK < rows ? r0 + CHUNK : rows, first = J->group[gi], last = J->group[gi + 1];
        uint32_t e = J->expert[J->order[first]];
        uint64_t base;
        const gguf_tensor *w0 = model_expert_matrix(J->ml, J->phase ? 2 : 0, e, &base);
        const gguf_tensor *w1 = J->phase ? NULL : model_expert_matrix(J->ml, 1, e, &base);
        for (uint32_t r = r0; r < r1; r++) {
            uint64_t row = base + r;
            if (J->phase == 0) {
                wrow wg = {0}, wu = {0};
                if (!row_of(J, w0, row, wtmp, &wg) || !row_of(J, w1, row, utmp, &wu)) {
                    J->rc = -1;
                    return;
                }
                for (uint32_t i = first; i < last; i++) {
                    const float *x = J->h + (size_t)(J->choice[J->order[i]] / J->k_used) * J->n_embd;
                    float g = round16(J->bf16, dot_row(J, &wg, x, cols));
                    float u = round16(J->bf16, dot_row(J, &wu, x, cols));
                    J->act[(size_t)i * J->n_ff + r] = round16(J->bf16, g / (1.0f + expf(-g)) * u);
                }
            } else {
                wrow wd = {0};
                if (!row_of(J, w0, row, wtmp, &wd)) {
                    J->rc = -1;
                    return;
                }
                for (uint32_t i = first; i < last; i++) {
                    float y = dot_row(J, &wd, J->act + (size_t)i * J->n_ff, cols);
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

int plan_moe_host_run(plan_moe_host *mh, const model_layer *ml, const arch_hparams *hp, bool bf16, bool exact,
                      const uint16_t *h, uint32_t n, const uint32_t *choice, const uint32_t *expert, uint32_t n_miss,
                      uint16_t *out, kiln_err *err) {
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
    host_job J = {mh,     ml,     hp->n_embd, hp->n_ff_exp,      bf16, exact,   mh->h, mh->group, mh->order,
                  choice, expert, n_groups,   hp->n_expert_used, 0,    mh->act, out,   0,         0};
    J.chunks = (hp->n_ff_exp + CHUNK - 1) / CHUNK;
    pool_run(mh->pool, run_items, &J, (uint64_t)n_groups * J.chunks);
    if (!J.rc) {
        J.phase = 1;
        J.chunks = (hp->n_embd + CHUNK - 1) / CHUNK;
        pool_run(mh->pool, run_items, &J, (uint64_t)n_groups * J.chunks);
    }
    return J.rc ? kiln_fail(err, KILN_ERR_INVALID, "an expert's weights could not be read on the host (their type)") : 0;
}
