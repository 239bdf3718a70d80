/* Token sampler, in the order of llama.cpp's default chain (common/sampling.cpp):
 *
 *   penalties -> top-k -> top-p -> min-p -> temperature -> draw
 *
 * (its dry, top-n-sigma, typical and xtc stages are off by default and not offered here).
 * As there, top-p and min-p look at the probabilities at temperature 1 (temperature comes
 * last), and temperature 0 keeps only the largest logit *after* the penalties, so greedy
 * decoding is penalized too when penalties are set.
 *
 * Never sorting the vocabulary. Every truncation keeps an upper set of the logits: the
 * tokens above a cut value v, plus the tokens equal to v up to some id (ties go to the
 * lowest ids; llama.cpp leaves their order to std::partial_sort), so no stage needs an
 * order, only the cut:
 *  - top-k: one pass against a rising threshold, buffering the few tokens above it and
 *    cutting the buffer back to k when it fills;
 *  - top-p over the whole vocabulary: one vectorized exp pass for the total mass (as
 *    llama.cpp's softmax), then the mass is binned by distance to the max (64 bins per
 *    logit) over the last 8 logits first, skipping 16-token blocks wholly below; wider
 *    only when that mass falls short of p (flat logits);
 *  - inside the cut's bin (or a small list: top-p after top-k, the top-k buffer) an
 *    exact radix select on the float's ordered bits (11, 11, 10) finds v;
 *  - min-p is the cut v = max + log(min_p);
 *  - the draw sums exp((logit - max) / T) by blocks of 1024 and walks the block sums;
 *    a small kept set is gathered first, a large one is masked in place.
 * On 151936 tokens that is a few passes over 600 KB (see tests/test_sampler.c for times).
 *
 * Non-finite logits: NaN counts as -inf; a -inf token is never chosen; if any logit is
 * +inf the draw is uniform over the +inf tokens; if no token is finite or +inf,
 * samp_sample (and samp_argmax) returns -1. A temperature below FLT_MIN acts as 0.
 *
 * Penalties see a window of the last penalty_last_n accepted tokens (all of them for
 * -1): per-token counts in an array of n_vocab updated as tokens enter and leave a ring,
 * plus the list of distinct tokens in the window, so a sample costs O(distinct tokens),
 * never a scan of the vocabulary. */
#include "generate/sampler.h"

#include "base/error.h"
#include "base/rng.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAMP_BLOCK 1024 /* weights are summed per block for the draw's walk */
#define SAMP_BINS 2048  /* top-p's distance bins: 64 per logit over 32 (+1 for the rest) */
#define SAMP_HIST (SAMP_BINS + 1)
/* Histograms are kept in 4 interleaved copies where many tokens may fall into one bin
 * (ties, flat logits): one copy would chain every add on the previous one's latency. */
#define SAMP_HCOPIES 4

struct sampler {
    samp_params p;
    uint32_t n;
    rng rng;
    const float *w;    /* this call's logits: the caller's, or wbuf when they needed changes */
    float *wbuf;       /* penalized logits, NaN -> -inf */
    float *e;          /* exp weights (by id for top-p, by position for the draw) */
    float *cw;         /* logits of the final candidates, contiguous for the draw */
    uint32_t *ca, *cb; /* candidate ids, ascending; stages alternate between them */
    uint32_t *sub;     /* radix-select scratch */
    double *bsum;      /* per-block weight sums */
    double *hist;      /* SAMP_HCOPIES x SAMP_HIST histogram scratch */

    bool pen;          /* penalties set: history is kept */
    int32_t *count;    /* occurrences of each token in the window */
    uint32_t *upos;    /* index of a token in uniq (valid while count > 0) */
    uint32_t *uniq, n_uniq;
    int32_t *ring;     /* the window, oldest at head (penalty_last_n > 0) */
    uint32_t ring_cap, ring_len, ring_head;
};

/* ---- parameters ----------------------------------------------------------------------- */

void samp_params_default(samp_params *p) {
    if (!p) return;
    p->temperature = 0.0f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->frequency_penalty = 0.0f;
    p->presence_penalty = 0.0f;
    p->penalty_last_n = 64;
    p->seed = 0xC0FFEE;
}

int samp_params_check(const samp_params *p, kiln_err *err) {
    if (!p) {
        if (err) kiln_fail(err, KILN_ERR_INVALID, "sampler: no parameters");
        return -1;
    }
    /* written as !(in range) so NaN fails too */
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return kiln_fail(err, KILN_ERR_INVALID, "temperature must be finite and >= 0 (got %g)", p->temperature);
    if (p->top_k < 0) return kiln_fail(err, KILN_ERR_INVALID, "top_k must be >= 0 (got %d)", (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return kiln_fail(err, KILN_ERR_INVALID, "top_p must be in (0, 1] (got %g)", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return kiln_fail(err, KILN_ERR_INVALID, "min_p must be in [0, 1] (got %g)", p->min_p);
    if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty))
        return kiln_fail(err, KILN_ERR_INVALID, "repeat_penalty must be finite and > 0 (got %g)", p->repeat_penalty);
    if (!isfinite(p->frequency_penalty))
        return kiln_fail(err, KILN_ERR_INVALID, "frequency_penalty must be finite (got %g)", p->frequency_penalty);
    if (!isfinite(p->presence_penalty))
        return kiln_fail(err, KILN_ERR_INVALID, "presence_penalty must be finite (got %g)", p->presence_penalty);
    if (p->penalty_last_n < -1)
        return kiln_fail(err, KILN_ERR_INVALID, "penalty_last_n must be >= -1 (got %d)", (int)p->penalty_last_n);
    kiln_err_clear(err);
    return 0;
}

/* ---- kernels ------------------------------------------------------------------------------
 * The passes over the whole vocabulary use GCC/clang vector extensions (4 floats: SSE2 on
 * x86-64, NEON on arm64); gcc -O2 does not vectorize these loops by itself (variable trip
 * counts, float compares under -ftrapping-math). Other compilers (or -DSAMP_NO_VEC) get
 * the scalar loops, which every kernel also runs for its tail. Both compute the same
 * values. */

#if (defined(__GNUC__) || defined(__clang__)) && !defined(SAMP_NO_VEC)
#define SAMP_VEC 1
typedef float vf __attribute__((vector_size(16)));
typedef int32_t vi __attribute__((vector_size(16)));
typedef uint32_t vu __attribute__((vector_size(16)));
static inline vf vload(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }
static inline vf vsplat(float x) { return (vf){x, x, x, x}; }
static inline vu usplat(uint32_t x) { return (vu){x, x, x, x}; }
static inline vf vsel(vi m, vf a, vf b) { return (vf)(((vu)m & (vu)a) | (~(vu)m & (vu)b)); }
static inline bool vany(vi m) { return (m[0] | m[1] | m[2] | m[3]) != 0; }
#else
#define SAMP_VEC 0
#endif

/* exp(x) for x <= 0 (to ~2e-7 relative), 0 below about -87.3 and for -inf: range
 * reduction by ln 2 in two parts (Cody-Waite), a degree-6 polynomial, and the exponent
 * built from the bits of the rounded multiple; integer masks instead of branches. */
#define SAMP_MAGIC 12582912.0f /* 1.5 * 2^23: adding it rounds to an integer */
#define SAMP_MAGIC_BITS 0x4b400000u
#define SAMP_EXP_POLY(q, r)                                                                     \
    q = q * r + 1.0f / 120;                                                                     \
    q = q * r + 1.0f / 24;                                                                      \
    q = q * r + 1.0f / 6;                                                                       \
    q = q * r + 0.5f;                                                                           \
    q = q * r + 1.0f;                                                                           \
    q = q * r + 1.0f;

static inline float samp_exp(float x) {
    float t = x * 1.44269504f + SAMP_MAGIC;
    float n = t - SAMP_MAGIC;
    uint32_t tb;
    memcpy(&tb, &t, 4);
    /* n in [-126, 127] gives a normal scale; anything else (incl. -inf) gives 0 */
    uint32_t keep = 0u - (uint32_t)(tb - (SAMP_MAGIC_BITS - 126u) <= 253u);
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187e-06f;
    float q = 1.0f / 720;
    SAMP_EXP_POLY(q, r)
    uint32_t sb = (tb - SAMP_MAGIC_BITS + 127u) << 23;
    float sc, y;
    memcpy(&sc, &sb, 4);
    y = q * sc;
    uint32_t yb;
    memcpy(&yb, &y, 4);
    yb &= keep;
    memcpy(&y, &yb, 4);
    return y;
}

#if SAMP_VEC
static inline vf samp_expv(vf x) {
    vf t = x * vsplat(1.44269504f) + vsplat(SAMP_MAGIC);
    vf n = t - vsplat(SAMP_MAGIC);
    vu tb = (vu)t;
    vu keep = (vu)(tb - usplat(SAMP_MAGIC_BITS - 126u) <= usplat(253u));
    vf r = x - n * vsplat(0.693145751953125f);
    r = r - n * vsplat(1.428606765330187e-06f);
    vf q = vsplat(1.0f / 720);
    SAMP_EXP_POLY(q, r)
    vu sb = (tb - usplat(SAMP_MAGIC_BITS - 127u)) << 23;
    return (vf)((vu)(q * (vf)sb) & keep);
}
#endif

/* w = x with NaN -> -inf; returns max(w) (-inf when nothing is finite or +inf). */
static float copy_max(const float *restrict x, float *restrict w, uint32_t n) {
    float mx = -INFINITY;
    uint32_t i = 0;
#if SAMP_VEC
    vf ninf = vsplat(-INFINITY), m0 = ninf, m1 = ninf;
    for (; i + 8 <= n; i += 8) {
        vf a = vload(x + i), b = vload(x + i + 4);
        a = vsel(a != a, ninf, a);
        b = vsel(b != b, ninf, b);
        vstore(w + i, a);
        vstore(w + i + 4, b);
        m0 = vsel(a > m0, a, m0);
        m1 = vsel(b > m1, b, m1);
    }
    m0 = vsel(m1 > m0, m1, m0);
    for (int j = 0; j < 4; j++) mx = m0[j] > mx ? m0[j] : mx;
#endif
    for (; i < n; i++) {
        float v = x[i] != x[i] ? -INFINITY : x[i];
        w[i] = v;
        mx = v > mx ? v : mx;
    }
    return mx;
}

/* max(x), NaN ignored (a NaN compares false); *nan, if given, tells whether there was one. */
static float max_of(const float *x, uint32_t n, bool *nan) {
    float mx = -INFINITY;
    uint32_t i = 0;
    bool bad = false;
#if SAMP_VEC
    vf m0 = vsplat(-INFINITY), m1 = m0;
    vi b = {0, 0, 0, 0};
    for (; i + 8 <= n; i += 8) {
        vf a = vload(x + i), c = vload(x + i + 4);
        b |= (a != a) | (c != c);
        m0 = vsel(a > m0, a, m0);
        m1 = vsel(c > m1, c, m1);
    }
    m0 = vsel(m1 > m0, m1, m0);
    for (int j = 0; j < 4; j++) mx = m0[j] > mx ? m0[j] : mx;
    bad = vany(b);
#endif
    for (; i < n; i++) {
        bad |= x[i] != x[i];
        mx = x[i] > mx ? x[i] : mx;
    }
    if (nan) *nan = bad;
    return mx;
}

/* First i with x[i] == v, or -1. */
static int32_t first_eq(const float *x, uint32_t n, float v) {
    uint32_t i = 0;
#if SAMP_VEC
    vf t = vsplat(v);
    for (; i + 16 <= n; i += 16)
        if (vany((vload(x + i) == t) | (vload(x + i + 4) == t) | (vload(x + i + 8) == t) |
                 (vload(x + i + 12) == t)))
            break;
#endif
    for (; i < n; i++)
        if (x[i] == v) return (int32_t)i;
    return -1;
}

/* e[i] = exp((x[i] - M) * invT) for the tokens of the cut (v, last) (x > v, or x == v
 * and i <= last), else 0; per-block sums into bsum; returns the total. */
static double weights(const float *restrict x, float *restrict e, uint32_t n, float M,
                      float invT, float v, uint32_t last, double *restrict bsum) {
    double z = 0.0;
    for (uint32_t b0 = 0; b0 < n; b0 += SAMP_BLOCK) {
        uint32_t end = n - b0 < SAMP_BLOCK ? n : b0 + SAMP_BLOCK, i = b0;
        double s = 0.0;
#if SAMP_VEC
        vf vm = vsplat(M), vt = vsplat(invT), vv = vsplat(v), a0 = vsplat(0.0f), a1 = a0;
        vu vl = usplat(last), iota = {0, 1, 2, 3};
        if (v == -FLT_MAX && last == UINT32_MAX) /* every finite token: exp(-inf) is 0 */
            for (; i + 8 <= end; i += 8) {
                vf p = samp_expv((vload(x + i) - vm) * vt);
                vf q = samp_expv((vload(x + i + 4) - vm) * vt);
                vstore(e + i, p);
                vstore(e + i + 4, q);
                a0 += p;
                a1 += q;
            }
        for (; i + 8 <= end; i += 8) {
            vf xa = vload(x + i), xb = vload(x + i + 4);
            vi ka = (xa > vv) | ((xa == vv) & (vi)(usplat(i) + iota <= vl));
            vi kb = (xb > vv) | ((xb == vv) & (vi)(usplat(i + 4) + iota <= vl));
            vf p = (vf)((vu)samp_expv((xa - vm) * vt) & (vu)ka);
            vf q = (vf)((vu)samp_expv((xb - vm) * vt) & (vu)kb);
            vstore(e + i, p);
            vstore(e + i + 4, q);
            a0 += p;
            a1 += q;
        }
        for (int j = 0; j < 4; j++) s += (double)a0[j] + (double)a1[j];
#endif
        for (; i < end; i++) {
            bool in = x[i] > v || (x[i] == v && i <= last);
            e[i] = in ? samp_exp((x[i] - M) * invT) : 0.0f;
            s += e[i];
        }
        bsum[b0 / SAMP_BLOCK] = s;
        z += s;
    }
    return z;
}

/* ---- selection -------------------------------------------------------------------------- */

/* Order-preserving map of a float to an integer (-0 as +0, so they tie), and back. */
static inline uint32_t fkey(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u = u == 0x80000000u ? 0 : u;
    return u ^ ((0u - (u >> 31)) | 0x80000000u); /* negative: flip all bits */
}

static inline float fkey_inv(uint32_t k) {
    uint32_t u = (k & 0x80000000u) ? k & 0x7fffffffu : ~k;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Whether a token with logit x and id i is kept by the cut (v, last). */
static inline uint32_t in_cut(float x, uint32_t i, float v, uint32_t last) {
    return (uint32_t)(x > v) | ((uint32_t)(x == v) & (uint32_t)(i <= last));
}

/* The cut, in the order (logit descending, id ascending), where the running weight of
 * src[0..sn) (ascending ids; compacted in place) first reaches need; weight is wt[id], or
 * 1 when wt is NULL. A radix select on fkey, 11, 11 and 10 bits at a time over the
 * tokens still tied with the cut; a level whose bits all tokens share (ties, a narrow
 * bin) is skipped. Sets *v and *last; returns how many of src it keeps (all of them
 * when rounding leaves the total short of need). */
static uint32_t refine(const sampler *s, uint32_t *src, uint32_t sn, const float *wt,
                       double need, float *v, uint32_t *last) {
    static const int shift[3] = {21, 10, 0};
    static const uint32_t mask[3] = {2047, 2047, 1023};
    const float *w = s->w;
    double *hist = s->hist;
    uint32_t K = 0, kept = 0, kmin = UINT32_MAX, kmax = 0;
    *last = UINT32_MAX;
    if (sn == 0) { /* nothing to cut: keep every finite token rather than none */
        *v = -FLT_MAX;
        return 0;
    }
    for (uint32_t j = 0; j < sn; j++) {
        uint32_t kj = fkey(w[src[j]]);
        kmin = kj < kmin ? kj : kmin;
        kmax = kj > kmax ? kj : kmax;
    }
    for (int lv = 0; lv < 3 && sn > 0; lv++) {
        if ((kmin >> shift[lv]) == (kmax >> shift[lv])) { /* one bin holds them all */
            K |= kmin & (mask[lv] << shift[lv]);
            continue;
        }
        uint32_t nb = mask[lv] + 1, b = 0, step, k = 0;
        uint32_t copies = sn >= 4096 ? SAMP_HCOPIES : 1; /* small: clearing would dominate */
        memset(hist, 0, sizeof(double) * SAMP_HIST * copies);
        for (uint32_t j = 0; j < sn; j++)
            hist[(j & (copies - 1)) * SAMP_HIST + ((fkey(w[src[j]]) >> shift[lv]) & mask[lv])] +=
                wt ? wt[src[j]] : 1.0;
        for (uint32_t c = 1; c < copies; c++)
            for (uint32_t i = 0; i < nb; i++) hist[i] += hist[c * SAMP_HIST + i];
        double acc = 0.0;
        for (step = 0; step < nb; step++) {
            b = nb - 1 - step;
            if (acc + hist[b] >= need) break;
            acc += hist[b];
        }
        if (step == nb) { /* short: keep all that is left */
            *v = fkey_inv(kmin);
            return kept + sn;
        }
        need -= acc;
        K |= b << shift[lv];
        kmin = UINT32_MAX;
        kmax = 0;
        for (uint32_t j = 0; j < sn; j++) {
            uint32_t id = src[j], kj = fkey(w[id]), bj = (kj >> shift[lv]) & mask[lv];
            src[k] = id;
            k += bj == b;
            kept += bj > b;
            kmin = bj == b && kj < kmin ? kj : kmin;
            kmax = bj == b && kj > kmax ? kj : kmax;
        }
        sn = k;
    }
    /* src now holds the tokens whose key is K, ascending: take them until need is met,
     * 64 at a time first (a long run of ties would chain every add) */
    *v = fkey_inv(K);
    double acc = 0.0;
    uint32_t j = 0;
    for (; j + 64 <= sn; j += 64) {
        double p[4] = {0, 0, 0, 0};
        for (uint32_t i = 0; i < 64; i++) p[i & 3] += wt ? wt[src[j + i]] : 1.0;
        double bs = (p[0] + p[1]) + (p[2] + p[3]);
        if (acc + bs >= need) break;
        acc += bs;
    }
    for (; j < sn; j++) {
        acc += wt ? wt[src[j]] : 1.0;
        if (acc >= need) {
            *last = src[j];
            return kept + j + 1;
        }
    }
    return kept + sn;
}

/* cut_top on a list: the smallest prefix of ids[0..m) (ascending), in the order (logit
 * descending, id ascending), whose weight reaches target, into out (!= ids), ascending. */
static uint32_t cut_list(sampler *s, const uint32_t *ids, uint32_t m, const float *wt,
                         double target, uint32_t *out) {
    float v;
    uint32_t last, k = 0;
    memcpy(s->sub, ids, sizeof(uint32_t) * m);
    refine(s, s->sub, m, wt, target, &v, &last);
    for (uint32_t j = 0; j < m; j++) {
        uint32_t id = ids[j];
        out[k] = id;
        k += in_cut(s->w[id], id, v, last);
    }
    return k;
}

/* The k largest logits of the vocabulary (ties to the lowest ids), ascending, into
 * s->ca or s->cb (returned through *ids). One pass against a rising threshold: tokens
 * above it are buffered; a full buffer is cut back to k, and the k-th value becomes the
 * threshold. Only later ids arrive after a cut, so a token equal to the threshold
 * always loses its tie. The room above k starts at max(k, 1024) and doubles at each
 * cut, so rising logits (every token beats the threshold) cost O(n), not O(n^2 / k). */
static uint32_t top_k(sampler *s, uint32_t k, uint32_t **ids) {
    const float *w = s->w;
    const uint32_t n = s->n;
    uint32_t *buf = s->ca, *alt = s->cb, h = 0, i = 0;
    uint32_t room = k > 1024 ? k : 1024;
    uint32_t cap = room < n - k ? k + room : n;
    float thr = -INFINITY;
    for (;;) {
        uint32_t stop = n;
#if SAMP_VEC
        vf t = vsplat(thr);
        for (; i + 16 <= n; i += 16)
            if (vany((vload(w + i) > t) | (vload(w + i + 4) > t) | (vload(w + i + 8) > t) |
                     (vload(w + i + 12) > t)))
                break;
        stop = i + 16 < n ? i + 16 : n; /* this block by hand, then blocks again */
#endif
        for (; i < stop && h < cap; i++) {
            buf[h] = i;
            h += w[i] > thr;
        }
        if (h == cap) {
            h = cut_list(s, buf, h, NULL, (double)k, alt);
            uint32_t *x = buf;
            buf = alt;
            alt = x;
            room = room < n / 2 ? room * 2 : n;
            cap = room < n - k ? k + room : n;
            thr = INFINITY;
            for (uint32_t j = 0; j < h; j++) thr = w[buf[j]] < thr ? w[buf[j]] : thr;
        }
        if (i >= n) break;
    }
    if (h > k) {
        h = cut_list(s, buf, h, NULL, (double)k, alt);
        buf = alt;
    }
    *ids = buf;
    return h;
}

/* Distance bin of a logit: floor((M - x) * 64) below SAMP_BINS, else SAMP_BINS. The
 * clamp is on the bits (d >= 0 orders as an integer) so that it stays branch-free. */
static inline uint32_t dbin(float M, float x) {
    float d = (M - x) * 64.0f;
    uint32_t u;
    memcpy(&u, &d, 4);
    u &= 0x7fffffffu;                      /* -0 (M = -0, x = +0) is 0 */
    u = u < 0x45000000u ? u : 0x45000000u; /* 2048.0f; +inf (x = -inf) lands there too */
    memcpy(&d, &u, 4);
    return (uint32_t)d;
}

/* Adds e of the tokens whose distance bin is in [lo, hi) to the histogram copies. For
 * hi <= SAMP_BINS, 16-token blocks with none in range are skipped (bin < hi <=>
 * (M - x) * 64 < hi, the same float ops as dbin); the others, and every token when no
 * block can be skipped, go through without branches. */
static void bin_mass(const sampler *s, float M, uint32_t lo, uint32_t hi) {
    const float *w = s->w, *e = s->e;
    const uint32_t n = s->n;
    double *hist = s->hist;
    uint32_t i = 0;
    while (i < n) {
        uint32_t end = n;
#if SAMP_VEC
        if (hi <= SAMP_BINS) {
            vf vm = vsplat(M), vh = vsplat((float)hi), c = vsplat(64.0f);
            for (; i + 16 <= n; i += 16)
                if (vany(((vm - vload(w + i)) * c < vh) | ((vm - vload(w + i + 4)) * c < vh) |
                         ((vm - vload(w + i + 8)) * c < vh) | ((vm - vload(w + i + 12)) * c < vh)))
                    break;
            end = i + 16 < n ? i + 16 : n;
        }
#endif
        for (; i < end; i++) { /* -inf has e = 0: harmless in the last bin */
            uint32_t b = dbin(M, w[i]), eb;
            float ei = e[i];
            memcpy(&eb, &ei, 4);
            eb &= 0u - (uint32_t)(b - lo < hi - lo); /* 0 out of range */
            memcpy(&ei, &eb, 4);
            hist[(i & 3) * SAMP_HIST + b] += ei;
        }
    }
}

/* Top-p over every token: sets the cut (v, last). With e = exp(x - M) for all tokens
 * and their total, the mass is binned by distance to the max, 64 bins per logit (dbin):
 * first the bins [0, 512) (the last 8 logits: a pass that skips the blocks with no
 * token there, which on real logits are most), then, if the cut is further down, all
 * the others in one plain pass; the cut's bin is then refined on the float bits. */
static void top_p_all(sampler *s, float M, float top_p, float *v, uint32_t *last) {
    static const uint32_t stage_end[2] = {512, SAMP_BINS + 1};
    const float *w = s->w;
    const uint32_t n = s->n;
    const double *h = s->hist;
    double acc = 0.0;
    uint32_t lo = 0, cut = UINT32_MAX;
    memset(s->hist, 0, sizeof(double) * SAMP_HIST * SAMP_HCOPIES);
    double target = (double)top_p * weights(w, s->e, n, M, 1.0f, -FLT_MAX, UINT32_MAX, s->bsum);
    for (int st = 0; st < 2 && cut == UINT32_MAX; st++) {
        uint32_t hi = stage_end[st];
        bin_mass(s, M, lo, hi);
        for (uint32_t b = lo; b < hi; b++) {
            double hb = (h[b] + h[SAMP_HIST + b]) + (h[2 * SAMP_HIST + b] + h[3 * SAMP_HIST + b]);
            if (acc + hb >= target) {
                cut = b;
                break;
            }
            acc += hb;
        }
        lo = hi;
    }
    if (cut == UINT32_MAX) { /* short by rounding: keep every finite token */
        *v = -FLT_MAX;
        *last = UINT32_MAX;
        return;
    }
    /* the cut's bin */
    uint32_t sn = 0, i = 0;
    while (i < n) {
        uint32_t end = n;
#if SAMP_VEC
        if (cut < SAMP_BINS) { /* bin == cut <=> cut <= (M - x) * 64 < cut + 1 */
            vf vm = vsplat(M), c = vsplat(64.0f);
            vf vl = vsplat((float)cut), vh = vsplat((float)(cut + 1));
            for (; i + 16 <= n; i += 16) {
                vf d0 = (vm - vload(w + i)) * c, d1 = (vm - vload(w + i + 4)) * c;
                vf d2 = (vm - vload(w + i + 8)) * c, d3 = (vm - vload(w + i + 12)) * c;
                if (vany(((d0 >= vl) & (d0 < vh)) | ((d1 >= vl) & (d1 < vh)) |
                         ((d2 >= vl) & (d2 < vh)) | ((d3 >= vl) & (d3 < vh))))
                    break;
            }
            end = i + 16 < n ? i + 16 : n;
        }
#endif
        for (; i < end; i++) {
            s->sub[sn] = i;
            sn += (uint32_t)(dbin(M, w[i]) == cut) & (uint32_t)(w[i] > -INFINITY);
        }
    }
    refine(s, s->sub, sn, s->e, target - acc, v, last);
}

/* The ids of the cut (v, last), ascending, into out (blocks wholly below v skipped);
 * stops past limit ids, returning limit + 1. */
static uint32_t gather_cut(const sampler *s, float v, uint32_t last, uint32_t limit,
                           uint32_t *out) {
    const float *w = s->w;
    const uint32_t n = s->n;
    uint32_t k = 0, i = 0;
    while (i < n && k <= limit) {
        uint32_t end = n;
#if SAMP_VEC
        vf t = vsplat(v);
        for (; i + 16 <= n; i += 16)
            if (vany((vload(w + i) >= t) | (vload(w + i + 4) >= t) | (vload(w + i + 8) >= t) |
                     (vload(w + i + 12) >= t)))
                break;
        end = i + 16 < n ? i + 16 : n;
#endif
        for (; i < end; i++) {
            out[k] = i;
            k += in_cut(w[i], i, v, last);
        }
    }
    return k <= limit ? k : limit + 1;
}

/* ---- lifecycle and history --------------------------------------------------------------- */

sampler *samp_create(const samp_params *p, uint32_t n_vocab) {
    kiln_err err = {0};
    if (samp_params_check(p, &err) != 0 || n_vocab == 0 || n_vocab > INT32_MAX)
        return NULL;
    sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->n = n_vocab;
    size_t n = n_vocab, nb = n / SAMP_BLOCK + 1;
    s->wbuf = malloc(n * sizeof(float));
    s->e = malloc(n * sizeof(float));
    s->cw = malloc(n * sizeof(float));
    s->ca = malloc(n * sizeof(uint32_t));
    s->cb = malloc(n * sizeof(uint32_t));
    s->sub = malloc(n * sizeof(uint32_t));
    s->bsum = malloc(nb * sizeof(double));
    s->hist = malloc(SAMP_HCOPIES * SAMP_HIST * sizeof(double));
    bool ok = s->wbuf && s->e && s->cw && s->ca && s->cb && s->sub && s->bsum && s->hist;

    s->pen = p->penalty_last_n != 0 && (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f ||
                                         p->presence_penalty != 0.0f);
    if (ok && s->pen) {
        /* the window plus the token entering it before the oldest leaves */
        size_t nu = p->penalty_last_n > 0 && (size_t)p->penalty_last_n + 1 < n
                        ? (size_t)p->penalty_last_n + 1 : n;
        s->count = calloc(n, sizeof(int32_t));
        s->upos = malloc(n * sizeof(uint32_t));
        s->uniq = malloc(nu * sizeof(uint32_t));
        ok = s->count && s->upos && s->uniq;
        if (ok && p->penalty_last_n > 0) {
            /* the ring grows on demand: penalty_last_n may be far above any context */
            s->ring_cap = p->penalty_last_n < 1024 ? (uint32_t)p->penalty_last_n : 1024;
            s->ring = malloc(s->ring_cap * sizeof(int32_t));
            ok = s->ring != NULL;
        }
    }
    if (!ok) {
        samp_free(s);
        return NULL;
    }
    samp_reset(s);
    return s;
}

void samp_free(sampler *s) {
    if (!s) return;
    free(s->wbuf);
    free(s->e);
    free(s->cw);
    free(s->ca);
    free(s->cb);
    free(s->sub);
    free(s->bsum);
    free(s->hist);
    free(s->count);
    free(s->upos);
    free(s->uniq);
    free(s->ring);
    free(s);
}

void samp_reset(sampler *s) {
    if (!s) return;
    for (uint32_t i = 0; i < s->n_uniq; i++) s->count[s->uniq[i]] = 0;
    s->n_uniq = 0;
    s->ring_len = 0;
    s->ring_head = 0;
    rng_seed(&s->rng, s->p.seed, 0x73616d70 /* "samp" */, 0);
}

static void pen_inc(sampler *s, uint32_t t) {
    if (s->count[t] == INT32_MAX) return; /* only reachable with an unbounded window */
    if (s->count[t]++ == 0) {
        s->upos[t] = s->n_uniq;
        s->uniq[s->n_uniq++] = t;
    }
}

static void pen_dec(sampler *s, uint32_t t) {
    if (--s->count[t] == 0) {
        uint32_t i = s->upos[t], moved = s->uniq[--s->n_uniq];
        s->uniq[i] = moved;
        s->upos[moved] = i;
    }
}

static bool ring_grow(sampler *s) {
    uint32_t lim = (uint32_t)s->p.penalty_last_n;
    uint32_t cap = s->ring_cap > lim / 2 ? lim : s->ring_cap * 2;
    int32_t *r = malloc((size_t)cap * sizeof(int32_t));
    if (!r) return false;
    for (uint32_t i = 0; i < s->ring_len; i++) r[i] = s->ring[(s->ring_head + i) % s->ring_cap];
    free(s->ring);
    s->ring = r;
    s->ring_cap = cap;
    s->ring_head = 0;
    return true;
}

void samp_accept(sampler *s, int32_t id) {
    if (!s || !s->pen || id < 0 || (uint32_t)id >= s->n) return;
    uint32_t t = (uint32_t)id;
    pen_inc(s, t); /* before the eviction, as llama.cpp: a token leaving and re-entering stays */
    if (s->p.penalty_last_n < 0) return;
    if (s->ring_len == s->ring_cap &&
        (s->ring_cap == (uint32_t)s->p.penalty_last_n || !ring_grow(s))) {
        /* full (or out of memory to grow: the window stays at what the ring holds) */
        uint32_t old = (uint32_t)s->ring[s->ring_head];
        s->ring[s->ring_head] = id;
        s->ring_head = (s->ring_head + 1) % s->ring_cap;
        pen_dec(s, old);
        return;
    }
    s->ring[(s->ring_head + s->ring_len) % s->ring_cap] = id;
    s->ring_len++;
}

/* ---- sampling ----------------------------------------------------------------------------- */

bool samp_is_greedy(const sampler *s) { return s && s->p.temperature < FLT_MIN && !s->pen; }

int32_t samp_argmax(const float *logits, uint32_t n) {
    if (!logits || n == 0) return -1;
    float m = max_of(logits, n, NULL);
    if (m == -INFINITY) return -1; /* nothing but -inf and NaN */
    return first_eq(logits, n, m);
}

/* Applies the penalties to w (llama.cpp's llama_sampler_penalties_apply, over the
 * distinct tokens of the window); returns the new max given the max before. */
static float apply_penalties(sampler *s, float m) {
    const float rp = s->p.repeat_penalty, fp = s->p.frequency_penalty, pp = s->p.presence_penalty;
    bool hit = false;
    float pm = -INFINITY;
    for (uint32_t i = 0; i < s->n_uniq; i++) {
        uint32_t t = s->uniq[i];
        int32_t c = s->count[t];
        float x = s->wbuf[t];
        hit |= x == m;
        x = x <= 0.0f ? x * rp : x / rp;
        x -= (float)c * fp + (float)(c > 0) * pp;
        s->wbuf[t] = x;
        pm = x > pm ? x : pm;
    }
    /* if a penalized token held the max, another may hold it now: look again */
    if (hit) return max_of(s->wbuf, s->n, NULL);
    return pm > m ? pm : m;
}

/* Draws with weights exp((logit - M) / T) from the list ids[0..m), or, when ids is NULL,
 * from every token of the cut (v, last). A zero weight (-inf, underflow) is never drawn. */
static int32_t draw(sampler *s, const uint32_t *ids, uint32_t m, float M, float invT, float v,
                    uint32_t last) {
    const float *x = s->w;
    uint32_t cnt = s->n;
    if (ids) {
        if (m == 1) return (int32_t)ids[0]; /* no draw, as llama.cpp's dist */
        for (uint32_t j = 0; j < m; j++) s->cw[j] = s->w[ids[j]];
        x = s->cw;
        cnt = m;
        v = -FLT_MAX;
        last = UINT32_MAX;
    }
    double z = weights(x, s->e, cnt, M, invT, v, last, s->bsum);
    if (!(z > 0.0)) return -1; /* cannot happen: the max has weight 1 */
    double target = rng_uniform(&s->rng) * z, cum = 0.0;
    uint32_t nb = (cnt + SAMP_BLOCK - 1) / SAMP_BLOCK, b = 0;
    while (b + 1 < nb && cum + s->bsum[b] <= target) cum += s->bsum[b++];
    uint32_t pick = UINT32_MAX;
    for (uint32_t i = b * SAMP_BLOCK; i < cnt; i++) {
        float wi = s->e[i];
        if (wi > 0.0f) {
            pick = i;
            cum += wi;
            if (cum > target) break;
        }
    }
    if (pick == UINT32_MAX) /* rounding pushed past the last weight: take the last one */
        for (uint32_t i = b * SAMP_BLOCK; i-- > 0;)
            if (s->e[i] > 0.0f) {
                pick = i;
                break;
            }
    if (pick == UINT32_MAX) return -1;
    return ids ? (int32_t)ids[pick] : (int32_t)pick;
}

int32_t samp_sample(sampler *s, const float *logits) {
    if (!s || !logits) return -1;
    const samp_params *p = &s->p;
    const uint32_t n = s->n;
    bool pen = s->pen && s->n_uniq > 0;
    bool greedy = p->temperature < FLT_MIN;
    if (greedy && !pen) return samp_argmax(logits, n);

    /* the caller's logits are used in place unless penalties or NaN need a copy */
    bool nan = false;
    float M = pen ? 0.0f : max_of(logits, n, &nan);
    s->w = logits;
    if (pen || nan || M == INFINITY) {
        M = copy_max(logits, s->wbuf, n);
        if (pen) M = apply_penalties(s, M);
        s->w = s->wbuf;
    }
    if (M == -INFINITY) return -1;
    if (greedy) return first_eq(s->w, n, M); /* top-k/p, min-p all keep the max */
    if (M == INFINITY) { /* the +inf tokens take all the mass, equally */
        for (uint32_t i = 0; i < n; i++) s->wbuf[i] = s->wbuf[i] == INFINITY ? 0.0f : -INFINITY;
        M = 0.0f;
    }

    /* the candidates: a list ids[0..m), or (ids NULL) the cut (v, last) of size m */
    uint32_t *ids = NULL, m = n, last = UINT32_MAX;
    float v = -FLT_MAX;

    if (p->top_k > 0 && (uint32_t)p->top_k < n) m = top_k(s, (uint32_t)p->top_k, &ids);

    if (p->top_p < 1.0f) {
        if (ids) {
            double z = 0.0;
            for (uint32_t j = 0; j < m; j++) {
                float wj = samp_exp(s->w[ids[j]] - M);
                s->e[ids[j]] = wj;
                z += wj;
            }
            uint32_t *out = ids == s->ca ? s->cb : s->ca;
            m = cut_list(s, ids, m, s->e, (double)p->top_p * z, out);
            ids = out;
        } else {
            top_p_all(s, M, p->top_p, &v, &last);
        }
    }

    if (p->min_p > 0.0f) {
        float t = M + logf(p->min_p); /* llama.cpp: keep logit >= max + log(min_p) */
        t = t > -FLT_MAX ? t : -FLT_MAX;
        if (ids) {
            uint32_t k = 0;
            for (uint32_t j = 0; j < m; j++) {
                ids[k] = ids[j];
                k += s->w[ids[j]] >= t;
            }
            m = k;
        } else if (t > v) { /* the stricter of the two cuts */
            v = t;
            last = UINT32_MAX;
        }
    }

    /* a small set is gathered (blocks below v skipped); a large one is masked in place */
    if (!ids && (v > -FLT_MAX || last != UINT32_MAX)) {
        uint32_t limit = n / 16 > 1024 ? n / 16 : 1024;
        m = gather_cut(s, v, last, limit, s->ca);
        if (m <= limit) ids = s->ca;
    }
    return draw(s, ids, m, M, 1.0f / p->temperature, v, last);
}
