/* Qwen3.5's Gated DeltaNet kernels (kernels/deltanet.c) on the device (lavapipe in CI, or
 * KILN_TEST_DEVICE) against a plain C reference written as the oracle computes it
 * (oracle/deltanet.c: libm exp/log, sums in order), at odd sizes, with outputs poisoned and
 * guard regions past them, tokens past n left alone, and the state carried from one
 * launch to the next.
 *
 * Tolerances: the convolution differs from the reference only where kn_exp's last bit
 * does (one 16-bit ulp after rounding). The delta rule also takes softplus's log from the
 * device (IR log: a few ulps on Vulkan), which moves the decay and, through the state,
 * every later token a little: y within 2^-12 of its magnitude plus one 16-bit ulp, the
 * state within 2^-14 of (1 + |S|). */
#include "base/error.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "tests/util/testutil_ptx.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64

static void run(rt_device *d, ir_kernel *k, const uint32_t g[2], const rt_arg *args, uint32_t n) {
    rt_kernel *ck = tu_vk_compile(d, k);
    tu_vk_run(d, ck, g[0], g[1], args, n);
    d->ops->release_kernel(d, ck);
}

static rt_buffer *poisoned16(rt_device *d, ir_scalar t, size_t n) { return tu_vk_poisoned16(d, t, n, GUARD); }

/* f32 values followed by a NaN guard */
static rt_buffer *upload_f32_guarded(rt_device *d, const float *v, size_t n) {
    float *p = malloc((n + GUARD) * 4);
    memcpy(p, v, n * 4);
    for (size_t i = n; i < n + GUARD; i++) p[i] = NAN;
    rt_buffer *b = tu_vk_upload(d, p, (n + GUARD) * 4);
    free(p);
    return b;
}

static float *download_f32_guarded(rt_device *d, rt_buffer *b, size_t n, const char *what) {
    float *p = malloc((n + GUARD) * 4);
    tu_vk_download(d, b, p, (n + GUARD) * 4);
    for (size_t i = n; i < n + GUARD; i++) cr_assert(isnan(p[i]), "%s: wrote past the end at %zu", what, i);
    return p;
}

static float silu_ref(float s) { return s / (1.0f + expf(-s)); }
static float round16(ir_scalar t, float v) { return tu_from16(t, tu_to16(t, v)); }

/* ---- the convolution ---------------------------------------------------------------------- */

/* block: the prefill's pair (kn_ssm_conv_block, then kn_ssm_conv_state), else kn_ssm_conv */
static void conv_case(rt_device *d, uint32_t C, uint32_t K, uint32_t n_max, const uint32_t *ns, size_t n_ns,
                      ir_scalar t, bool block) {
    kiln_err err = {0};
    uint32_t g[2], g2[2];
    ir_kernel *k = (block ? kn_ssm_conv_block : kn_ssm_conv)(&d->caps, C, K, n_max, t, g, &err), *k2 = NULL;
    cr_assert_not_null(k, "%s", err.msg);
    if (block) cr_assert_not_null(k2 = kn_ssm_conv_state(&d->caps, C, K, n_max, t, g2, &err), "%s", err.msg);
    float *w = malloc((size_t)C * K * 4), *st = malloc((size_t)(K - 1) * C * 4);
    for (size_t i = 0; i < (size_t)C * K; i++) w[i] = tu_urand(-1, 1);
    for (size_t i = 0; i < (size_t)(K - 1) * C; i++) st[i] = round16(t, tu_urand(-2, 2));
    rt_buffer *bw = tu_vk_upload(d, w, (size_t)C * K * 4), *bs = upload_f32_guarded(d, st, (size_t)(K - 1) * C);
    uint32_t info[2] = {0, 0};
    rt_buffer *bi = tu_vk_upload(d, info, sizeof info);
    for (size_t c = 0; c < n_ns; c++) { /* consecutive blocks: the state carries */
        uint32_t n = ns[c];
        char what[96];
        snprintf(what, sizeof what, "ssm_conv%s C=%u K=%u n=%u/%u %s", block ? " (block)" : "", C, K, n, n_max,
                 tu_dname(t));
        float *qf;
        uint16_t *qkv = tu_rand16(t, (size_t)n_max * C, -2, 2, &qf);
        rt_buffer *bq = tu_vk_upload(d, qkv, (size_t)n_max * C * 2), *bx = poisoned16(d, t, (size_t)n_max * C);
        info[1] = n;
        tu_vk_reupload(d, bi, info, sizeof info);
        rt_arg args[5] = {{bq, 0}, {bw, 0}, {bs, 0}, {bx, 0}, {bi, 0}}, sargs[3] = {{bq, 0}, {bs, 0}, {bi, 0}};
        run(d, k, g, args, 5);
        if (block) run(d, k2, g2, sargs, 3);
        uint16_t *x = malloc(((size_t)n_max * C + GUARD) * 2);
        tu_vk_download(d, bx, x, ((size_t)n_max * C + GUARD) * 2);
        for (uint32_t ti = 0; ti < n; ti++)
            for (uint32_t ch = 0; ch < C; ch++) {
                float s = 0;
                for (uint32_t i = 0; i < K; i++) {
                    uint32_t r = ti + i; /* row r of [state ; block] */
                    float in = r < K - 1 ? st[(size_t)r * C + ch] : qf[(size_t)(r - (K - 1)) * C + ch];
                    s += in * w[(size_t)ch * K + i];
                }
                double want = round16(t, silu_ref(s)), got = tu_from16(t, x[(size_t)ti * C + ch]);
                cr_assert(fabs(got - want) <= tu_ulp16(t, fabs(want)), "%s: x[%u][%u] %.8g != %.8g", what, ti, ch,
                          got, want);
            }
        for (size_t i = (size_t)n * C; i < (size_t)n_max * C + GUARD; i++)
            cr_assert_eq(x[i], tu_nan16(t), "%s: wrote x at %zu past its %u tokens", what, i, n);
        for (uint32_t r = 0; r + 1 < K; r++) /* the new state: the latest K-1 inputs */
            for (uint32_t ch = 0; ch < C; ch++) {
                uint32_t src = n + r;
                float *dst = &st[(size_t)r * C + ch];
                *dst = src < K - 1 ? st[(size_t)src * C + ch] : qf[(size_t)(src - (K - 1)) * C + ch];
            }
        float *got = download_f32_guarded(d, bs, (size_t)(K - 1) * C, what);
        for (size_t i = 0; i < (size_t)(K - 1) * C; i++)
            cr_assert_eq(got[i], st[i], "%s: state[%zu] %g != %g", what, i, got[i], st[i]);
        free(got), free(x), free(qkv), free(qf);
        d->ops->release(d, bq), d->ops->release(d, bx);
    }
    d->ops->release(d, bw), d->ops->release(d, bs), d->ops->release(d, bi);
    free(w), free(st);
    ir_kernel_destroy(k), ir_kernel_destroy(k2);
}

Test(kernels_deltanet, conv_odd_sizes_with_state, .timeout = 120) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(151);
    static const uint32_t ns[] = {1, 5, 0, 9, 2};
    for (int block = 0; block < 2; block++) {
        conv_case(d, 37, 4, 9, ns, 5, IR_BF16, block);
        conv_case(d, 300, 2, 9, ns, 5, IR_F16, block);
        conv_case(d, 1, 8, 9, ns, 5, IR_BF16, block);
        /* groups of 8 tokens: whole, partial and past n; channel pairs */
        static const uint32_t ns24[] = {24, 17, 8, 1, 23};
        conv_case(d, 130, 4, 24, ns24, 5, IR_BF16, block);
        static const uint32_t ns17[] = {17, 9, 1, 16};
        conv_case(d, 66, 3, 17, ns17, 4, IR_F16, block);
        static const uint32_t ns80[] = {80, 33, 1, 65}; /* 8 tokens an invocation past 64 */
        conv_case(d, 130, 4, 80, ns80, 4, IR_BF16, block);
    }
    d->ops->destroy(d);
}

/* ---- the gated delta rule ------------------------------------------------------------------ */

typedef struct dn_in {
    kn_deltanet_shape s;
    ir_scalar t;
    float eps;
    float *dt_bias, *ssm_a, *norm; /* norm: 16-bit values as f32 */
} dn_in;

/* The oracle's recurrence and gated norm for n tokens (inputs as f32 of their 16-bit
 * values); S updated, y (rows of v_heads state) written. */
static void deltanet_ref(const dn_in *p, const float *x, const float *a, const float *b, const float *z, uint32_t n,
                         float *S, float *y) {
    uint32_t nk = p->s.k_heads, nv = p->s.v_heads, dk = p->s.state, C = 2 * nk * dk + nv * dk;
    float *qn = malloc(dk * 4), *kn = malloc(dk * 4), *o = malloc(dk * 4);
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t j = 0; j < nv; j++) {
            const float *xr = x + (size_t)t * C;
            uint32_t kh = j % nk;
            float sq = 0, sk = 0;
            for (uint32_t i = 0; i < dk; i++) sq += xr[kh * dk + i] * xr[kh * dk + i];
            for (uint32_t i = 0; i < dk; i++) sk += xr[(nk + kh) * dk + i] * xr[(nk + kh) * dk + i];
            float iq = 1.0f / fmaxf(sqrtf(sq), p->eps), ik = 1.0f / fmaxf(sqrtf(sk), p->eps);
            for (uint32_t i = 0; i < dk; i++) qn[i] = xr[kh * dk + i] * iq, kn[i] = xr[(nk + kh) * dk + i] * ik;
            float sp = a[t * nv + j] + p->dt_bias[j];
            sp = sp > 20.0f ? sp : logf(1.0f + expf(sp));
            float decay = expf(sp * p->ssm_a[j]), beta = 1.0f / (1.0f + expf(-b[t * nv + j]));
            float *M = S + (size_t)j * dk * dk;
            for (uint32_t c = 0; c < dk; c++) {
                float dot = 0;
                for (uint32_t i = 0; i < dk; i++) M[i * dk + c] *= decay;
                for (uint32_t i = 0; i < dk; i++) dot += M[i * dk + c] * kn[i];
                float dd = (xr[2 * nk * dk + j * dk + c] - dot) * beta, oq = 0;
                for (uint32_t i = 0; i < dk; i++) M[i * dk + c] += kn[i] * dd;
                for (uint32_t i = 0; i < dk; i++) oq += M[i * dk + c] * qn[i];
                o[c] = oq * (1.0f / sqrtf((float)dk));
            }
            float ss = 0;
            for (uint32_t c = 0; c < dk; c++) ss += o[c] * o[c];
            float scale = 1.0f / sqrtf(ss / (float)dk + p->eps);
            for (uint32_t c = 0; c < dk; c++) {
                size_t at = (size_t)t * nv * dk + j * dk + c;
                y[at] = (o[c] * scale) * p->norm[c] * silu_ref(z[at]);
            }
        }
    free(qn), free(kn), free(o);
}

/* The kernels under test: the token recurrence (kn_deltanet), or, where chunked, its three
 * chunked launches with their f32 scratch (poisoned: every element they read is written
 * first by the launch before). */
typedef struct dn_kernels {
    bool chunked;
    ir_kernel *k[3];
    uint32_t g[3][2];
    kn_deltanet_scratch sz;
    rt_buffer *scratch[5]; /* qk, uw, p, gl, o */
} dn_kernels;

static dn_kernels dn_build(rt_device *d, const kn_deltanet_shape *s, ir_scalar t, float eps, bool chunked) {
    kiln_err err = {0};
    dn_kernels K = {.chunked = chunked};
    if (!chunked) { /* the step writes o (f32 scratch), the gated norm y from it */
        K.k[0] = kn_deltanet(&d->caps, s, t, eps, K.g[0], &err);
        cr_assert_not_null(K.k[0], "%s", err.msg);
        cr_assert_eq(K.g[0][0], s->v_heads);
        K.k[2] = kn_deltanet_norm(&d->caps, s, t, eps, K.g[2], &err);
        cr_assert_not_null(K.k[2], "%s", err.msg);
        uint64_t n = (uint64_t)s->n_max * s->v_heads * s->state;
        float *v = malloc(n * 4);
        for (uint64_t e = 0; e < n; e++) v[e] = NAN;
        K.scratch[4] = upload_f32_guarded(d, v, n);
        free(v);
        return K;
    }
    cr_assert_eq(kn_deltanet_scratch_of(&d->caps, s, &K.sz, &err), 0, "%s", err.msg);
    if (s->chunk) cr_assert_eq(K.sz.chunk, s->chunk);
    K.k[0] = kn_deltanet_prep(&d->caps, s, t, eps, K.g[0], &err);
    cr_assert_not_null(K.k[0], "%s", err.msg);
    K.k[1] = kn_deltanet_scan(&d->caps, s, K.g[1], &err);
    cr_assert_not_null(K.k[1], "%s", err.msg);
    K.k[2] = kn_deltanet_norm(&d->caps, s, t, eps, K.g[2], &err);
    cr_assert_not_null(K.k[2], "%s", err.msg);
    uint64_t n[5] = {K.sz.qk, K.sz.uw, K.sz.p, K.sz.gl, K.sz.o};
    for (int i = 0; i < 5; i++) {
        float *v = malloc(n[i] * 4);
        for (uint64_t e = 0; e < n[i]; e++) v[e] = NAN;
        K.scratch[i] = upload_f32_guarded(d, v, n[i]);
        free(v);
    }
    return K;
}

static void dn_release(rt_device *d, dn_kernels *K) {
    for (int i = 0; i < 3; i++) ir_kernel_destroy(K->k[i]);
    for (int i = 0; i < 5; i++)
        if (K->scratch[i]) d->ops->release(d, K->scratch[i]);
}

/* in: x, ba, z, dt_bias, ssm_a, norm, S, y, info */
static void dn_run(rt_device *d, const dn_kernels *K, rt_buffer *const in[9]) {
    rt_buffer *const *sc = K->scratch;
    rt_arg norm[5] = {{sc[4], 0}, {in[2], 0}, {in[5], 0}, {in[7], 0}, {in[8], 0}};
    if (!K->chunked) {
        rt_arg step[7] = {{in[0], 0}, {in[1], 0}, {in[3], 0}, {in[4], 0}, {in[6], 0}, {sc[4], 0}, {in[8], 0}};
        run(d, K->k[0], K->g[0], step, 7);
        run(d, K->k[2], K->g[2], norm, 5);
        return;
    }
    rt_arg prep[9] = {{in[0], 0}, {in[1], 0}, {in[3], 0}, {in[4], 0}, {sc[0], 0},
                      {sc[1], 0}, {sc[2], 0}, {sc[3], 0}, {in[8], 0}};
    rt_arg scan[7] = {{sc[0], 0}, {sc[1], 0}, {sc[2], 0}, {sc[3], 0}, {in[6], 0}, {sc[4], 0}, {in[8], 0}};
    run(d, K->k[0], K->g[0], prep, 9);
    run(d, K->k[1], K->g[1], scan, 7);
    run(d, K->k[2], K->g[2], norm, 5);
}

static void deltanet_case(rt_device *d, kn_deltanet_shape s, ir_scalar t, const uint32_t *ns, size_t n_ns,
                          bool chunked) {
    uint32_t nk = s.k_heads, nv = s.v_heads, dk = s.state, C = 2 * nk * dk + nv * dk, V = nv * dk;
    dn_in p = {.s = s, .t = t, .eps = 1e-6f};
    dn_kernels K = dn_build(d, &s, t, p.eps, chunked);
    p.dt_bias = malloc(nv * 4), p.ssm_a = malloc(nv * 4);
    for (uint32_t j = 0; j < nv; j++) p.dt_bias[j] = tu_urand(-1, 1), p.ssm_a[j] = -expf(tu_urand(-1, 1));
    uint16_t *norm = tu_rand16(t, dk, 0.5f, 1.5f, &p.norm);
    size_t ns_S = (size_t)nv * dk * dk;
    float *S = malloc(ns_S * 4);
    for (size_t i = 0; i < ns_S; i++) S[i] = tu_urand(-0.1f, 0.1f);
    rt_buffer *bdt = tu_vk_upload(d, p.dt_bias, nv * 4), *ba_ = tu_vk_upload(d, p.ssm_a, nv * 4);
    rt_buffer *bn = tu_vk_upload(d, norm, dk * 2), *bS = upload_f32_guarded(d, S, ns_S);
    uint32_t info[2] = {0, 0};
    rt_buffer *bi = tu_vk_upload(d, info, sizeof info);
    for (size_t ci = 0; ci < n_ns; ci++) { /* consecutive blocks: the state carries */
        uint32_t n = ns[ci], m = s.n_max;
        char what[128];
        snprintf(what, sizeof what, "deltanet%s k=%u v=%u state=%u n=%u/%u chunk %u %s", chunked ? " (chunked)" : "",
                 nk, nv, dk, n, m, K.sz.chunk, tu_dname(t));
        float *xf, *af, *bf, *zf;
        uint16_t *x = tu_rand16(t, (size_t)m * C, -1, 1, &xf), *a = tu_rand16(t, (size_t)m * nv, -3, 1, &af);
        uint16_t *b = tu_rand16(t, (size_t)m * nv, -2, 2, &bf), *z = tu_rand16(t, (size_t)m * V, -2, 2, &zf);
        uint16_t *ba = malloc((size_t)m * 2 * nv * 2); /* per token: beta's row, then alpha's */
        for (size_t i = 0; i < (size_t)m * nv; i++) {
            size_t tok = i / nv, j = i % nv;
            ba[tok * 2 * nv + j] = b[i], ba[tok * 2 * nv + nv + j] = a[i];
        }
        rt_buffer *bx = tu_vk_upload(d, x, (size_t)m * C * 2), *bBA = tu_vk_upload(d, ba, (size_t)m * 2 * nv * 2);
        rt_buffer *bz = tu_vk_upload(d, z, (size_t)m * V * 2);
        rt_buffer *by = poisoned16(d, t, (size_t)m * V);
        info[1] = n;
        tu_vk_reupload(d, bi, info, sizeof info);
        rt_buffer *const in[9] = {bx, bBA, bz, bdt, ba_, bn, bS, by, bi};
        dn_run(d, &K, in);
        float *want = malloc(((size_t)m * V + 1) * 4);
        deltanet_ref(&p, xf, af, bf, zf, n, S, want);
        uint16_t *y = malloc(((size_t)m * V + GUARD) * 2);
        tu_vk_download(d, by, y, ((size_t)m * V + GUARD) * 2);
        for (size_t i = 0; i < (size_t)n * V; i++) {
            /* o is RMS-normed: its rounding error is relative to unit scale, not to o_c,
             * which a cancelling sum can leave small (FMA contraction moves it then) */
            double gv = tu_from16(t, y[i]), wv = want[i], unit = p.norm[i % dk] * silu_ref(zf[i]);
            double tol = ldexp(fabs(wv) + fabs(unit), -12) + tu_ulp16(t, fmax(fabs(gv), fabs(wv)));
            cr_assert(fabs(gv - wv) <= tol, "%s: y[%zu] %.8g != %.8g", what, i, gv, wv);
        }
        for (size_t i = (size_t)n * V; i < (size_t)m * V + GUARD; i++)
            cr_assert_eq(y[i], tu_nan16(t), "%s: wrote y at %zu past its %u tokens", what, i, n);
        float *gS = download_f32_guarded(d, bS, ns_S, what);
        for (size_t i = 0; i < ns_S; i++)
            cr_assert(fabs(gS[i] - S[i]) <= ldexp(1.0 + fabs(S[i]), -14), "%s: S[%zu] %.8g != %.8g", what, i, gS[i],
                      S[i]);
        free(gS), free(y), free(want), free(x), free(a), free(b), free(ba), free(z), free(xf), free(af), free(bf), free(zf);
        d->ops->release(d, bx), d->ops->release(d, bBA), d->ops->release(d, bz);
        d->ops->release(d, by);
    }
    d->ops->release(d, bdt), d->ops->release(d, ba_), d->ops->release(d, bn), d->ops->release(d, bS);
    d->ops->release(d, bi);
    free(p.dt_bias), free(p.ssm_a), free(p.norm), free(norm), free(S);
    dn_release(d, &K);
}

Test(kernels_deltanet, delta_rule_odd_sizes_state_carried, .timeout = 300) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(152);
    static const uint32_t ns[] = {1, 7, 0, 13};
    deltanet_case(d, (kn_deltanet_shape){1, 1, 16, 13}, IR_BF16, ns, 4, false);
    deltanet_case(d, (kn_deltanet_shape){2, 6, 24, 13}, IR_F16, ns, 4, false);  /* v head j on k head j % 2 */
    deltanet_case(d, (kn_deltanet_shape){2, 3, 40, 13}, IR_BF16, ns, 4, false); /* heads that do not divide */
    static const uint32_t ns128[] = {3, 2};
    deltanet_case(d, (kn_deltanet_shape){2, 4, 128, 4}, IR_BF16, ns128, 2, false); /* Qwen3.5's state */
    d->ops->destroy(d);
}

/* The chunked form against the same token recurrence: blocks of one token, of a chunk
 * less one, a chunk, a chunk and one, several chunks and a part, at the smallest chunk and
 * the one the device's workgroup memory gives, the state carried across blocks. */
Test(kernels_deltanet, chunked_delta_rule_odd_sizes_state_carried, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(153);
    static const uint32_t ns8[] = {1, 7, 8, 9, 0, 29};
    deltanet_case(d, (kn_deltanet_shape){1, 1, 16, 29, 8}, IR_BF16, ns8, 6, true);
    deltanet_case(d, (kn_deltanet_shape){2, 6, 24, 29, 8}, IR_F16, ns8, 6, true); /* v head j on k head j % 2 */
    deltanet_case(d, (kn_deltanet_shape){2, 3, 40, 29, 16}, IR_BF16, ns8, 6, true); /* 3 column blocks, 1 partial */
    static const uint32_t ns128[] = {5, 70};
    deltanet_case(d, (kn_deltanet_shape){2, 4, 128, 70, 0}, IR_BF16, ns128, 2, true); /* Qwen3.5's state */
    /* shapes CUDA takes on fragments (kn_deltanet_scan_mma_ok): chunks of 16 and 32 */
    static const uint32_t ns16[] = {1, 15, 16, 17, 0, 37};
    deltanet_case(d, (kn_deltanet_shape){1, 3, 32, 37, 16}, IR_BF16, ns16, 6, true);
    static const uint32_t ns32[] = {31, 33, 3};
    deltanet_case(d, (kn_deltanet_shape){2, 2, 48, 67, 32}, IR_F16, ns32, 3, true);
    d->ops->destroy(d);
}

/* CUDA's caps (sm_80, sm_90) give the scan on matrix fragments where the state is a
 * multiple of 16 and chunks hold 16 tokens or more, the SIMT scan elsewhere; each assembles. */
Test(kernels_deltanet, chunked_scan_on_fragments_on_cuda_caps) {
    kiln_err err = {0};
    static const struct {
        kn_deltanet_shape s;
        bool frag;
        uint32_t g1;
    } cases[] = {{{16, 32, 128, 512, 0}, true, 8},  /* qwen3.5-4b */
                 {{2, 4, 128, 24, 32}, true, 8},    /* a short block */
                 {{1, 3, 48, 37, 16}, true, 3},     /* 3 slices of 16 */
                 {{2, 4, 128, 70, 8}, false, 8},    /* chunks of 8 */
                 {{2, 3, 40, 29, 16}, false, 3}};   /* a state of 40 */
    for (uint32_t cc = 80; cc <= 90; cc += 10) {
        rt_caps c = tu_cuda_caps(cc);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            uint32_t g[2];
            cr_assert_eq(kn_deltanet_scan_mma_ok(&c, &cases[i].s), cases[i].frag, "case %zu", i);
            ir_kernel *k = kn_deltanet_scan(&c, &cases[i].s, g, &err);
            cr_assert_not_null(k, "%s", err.msg);
            char *text = ir_print(k);
            cr_assert_eq(strstr(text, "frag.mma") != NULL, cases[i].frag, "case %zu", i);
            cr_assert(g[0] == cases[i].s.v_heads && g[1] == cases[i].g1, "case %zu: grid %u x %u", i, g[0], g[1]);
            free(text);
            tu_ptx_assembles(k, &c, "deltanet scan");
            ir_kernel_destroy(k);
        }
        rt_caps v = c;
        v.backend = RT_VULKAN;
        cr_assert(!kn_deltanet_scan_mma_ok(&v, &cases[0].s), "Vulkan has no fragment elements");
        cr_assert_null(kn_deltanet_scan_mma(&v, &cases[0].s, NULL, &err));
        cr_assert(strstr(err.msg, "fragments"), "%s", err.msg);
    }
}

/* ---- the attention output gate --------------------------------------------------------- */

Test(kernels_deltanet, sigmoid_gate_odd_sizes_with_guards) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(153);
    static const uint32_t sizes[] = {1, 7, 4097, 3 * 2048 + 2};
    static const ir_scalar ts[] = {IR_BF16, IR_F16};
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            ir_scalar t = ts[ti];
            uint32_t n = sizes[si], g[2] = {0, 1};
            kiln_err err = {0};
            ir_kernel *k = kn_sigmoid_gate(&d->caps, n, t, &g[0], &err);
            cr_assert_not_null(k, "%s", err.msg);
            float *xf, *gf;
            uint16_t *x = tu_rand16(t, n, -4, 4, &xf), *gt = tu_rand16(t, n, -9, 9, &gf);
            rt_buffer *bx = tu_vk_upload(d, x, (size_t)n * 2), *bg = tu_vk_upload(d, gt, (size_t)n * 2);
            rt_buffer *bo = poisoned16(d, t, n);
            rt_arg args[3] = {{bx, 0}, {bg, 0}, {bo, 0}};
            run(d, k, g, args, 3);
            uint16_t *o = malloc(((size_t)n + GUARD) * 2);
            tu_vk_download(d, bo, o, ((size_t)n + GUARD) * 2);
            for (uint32_t i = 0; i < n; i++) {
                double want = round16(t, xf[i] * (1.0f / (1.0f + expf(-gf[i])))), got = tu_from16(t, o[i]);
                cr_assert(fabs(got - want) <= tu_ulp16(t, fabs(want)), "gate n=%u %s: [%u] %.8g != %.8g", n,
                          tu_dname(t), i, got, want);
            }
            for (size_t i = n; i < (size_t)n + GUARD; i++) cr_assert_eq(o[i], tu_nan16(t), "gate: wrote past n");
            d->ops->release(d, bx), d->ops->release(d, bg), d->ops->release(d, bo);
            free(x), free(gt), free(xf), free(gf), free(o);
            ir_kernel_destroy(k);
        }
    d->ops->destroy(d);
}

Test(kernels_deltanet, bad_shapes_are_refused) {
    rt_caps c;
    tu_caps_h200(&c);
    kiln_err err = {0};
    cr_assert_null(kn_ssm_conv(&c, 16, 1, 8, IR_BF16, NULL, &err));
    cr_assert(strstr(err.msg, "kn_ssm_conv"), "%s", err.msg);
    cr_assert_null(kn_ssm_conv(&c, 0, 4, 8, IR_BF16, NULL, &err));
    cr_assert_null(kn_ssm_conv(&c, 16, 9, 8, IR_BF16, NULL, &err));
    cr_assert_null(kn_deltanet(&c, &(kn_deltanet_shape){2, 4, 256, 8}, IR_BF16, 1e-6f, NULL, &err));
    cr_assert(strstr(err.msg, "kn_deltanet"), "%s", err.msg);
    cr_assert_null(kn_deltanet(&c, &(kn_deltanet_shape){0, 4, 64, 8}, IR_BF16, 1e-6f, NULL, &err));
    cr_assert_null(kn_deltanet(&c, NULL, IR_BF16, 1e-6f, NULL, &err));
    cr_assert_null(kn_deltanet(&c, &(kn_deltanet_shape){1, 1, 64, 8}, IR_BF16, NAN, NULL, &err));
    cr_assert_null(kn_ssm_conv_block(&c, 16, 9, 8, IR_BF16, NULL, &err));
    cr_assert(strstr(err.msg, "kn_ssm_conv_block"), "%s", err.msg);
    cr_assert_null(kn_ssm_conv_state(&c, 16, 1, 8, IR_BF16, NULL, &err));
    cr_assert_null(kn_ssm_conv_block(&c, 16, 4, 0, IR_BF16, NULL, &err));
    /* the chunked kernels: states past 128, chunks not a power of two in 8..64, eps */
    cr_assert_null(kn_deltanet_prep(&c, &(kn_deltanet_shape){2, 4, 256, 8}, IR_BF16, 1e-6f, NULL, &err));
    cr_assert(strstr(err.msg, "chunked"), "%s", err.msg);
    cr_assert_null(kn_deltanet_scan(&c, &(kn_deltanet_shape){2, 4, 64, 8, 12}, NULL, &err));
    cr_assert_null(kn_deltanet_scan(&c, &(kn_deltanet_shape){2, 4, 64, 8, 128}, NULL, &err));
    cr_assert_null(kn_deltanet_norm(&c, NULL, IR_BF16, 1e-6f, NULL, &err));
    cr_assert_null(kn_deltanet_prep(&c, &(kn_deltanet_shape){1, 1, 64, 8}, IR_BF16, NAN, NULL, &err));
    /* workgroup memory that holds not even chunks of 8 */
    c.shared_bytes = 4096;
    cr_assert_null(kn_deltanet_prep(&c, &(kn_deltanet_shape){2, 4, 128, 8}, IR_BF16, 1e-6f, NULL, &err));
    cr_assert_eq(err.code, KILN_ERR_UNSUPPORTED, "%s", err.msg);
    cr_assert(strstr(err.msg, "workgroup memory"), "%s", err.msg);
}
