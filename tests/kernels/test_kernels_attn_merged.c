/* kn_attn_decode_merged (kernels/attention.c): the decode attention that merges its runs in
 * the same launch, the last workgroup of a head to count in doing the merge. Its output
 * must equal the two-launch pair's (kn_attn_decode then kn_attn_merge) bit for bit: the
 * same partials, combined by the same code. Checked on the device under test (lavapipe in
 * CI; KILN_TEST_DEVICE=cuda:0 on a GPU) at every position class (first, short, long, last,
 * past the context), one token and a step's batch, with outputs poisoned and guarded, the
 * counts checked back at zero after every launch (the next replay's start), and each
 * launch repeated (a recorded step replays). The pair itself is checked against the
 * oracle's attend in test_kernels_attn.c. */
#include "base/error.h"
#include "ir/ir.h"
#include "kernels/kernels.h"
#include "tests/util/testutil_ptx.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64

typedef struct mshape {
    uint32_t n_head, n_head_kv, hd, n_ctx, n_split, batch, n_seq; /* batch 0: one token */
    ir_scalar t;
} mshape;

/* Both forms on the same inputs: the merged launch (twice, the counts checked zero after
 * each) and the pair; the outputs compared bit for bit, guards intact. tokpos: pos (one
 * token) or the batch's (position, sequence) pairs. */
static void merged_case(rt_device *d, const mshape *s, const uint32_t *tokpos) {
    kiln_err err = {0};
    uint32_t nb = s->batch ? s->batch : 1, qn = s->n_head * s->hd, kv_dim = s->n_head_kv * s->hd;
    uint32_t q_stride = s->batch ? qn + 8 : qn, n_seq = s->batch ? s->n_seq : 1;
    uint32_t g[2], gp[2], gm = 0;
    kn_attn_more more = {.n_seq = s->n_seq, .batch = s->batch, .q_stride = q_stride};
    ir_kernel *km = kn_attn_decode_merged(&d->caps, s->n_head, s->n_head_kv, s->hd, s->n_ctx, s->n_split, &more, s->t,
                                          g, &err);
    cr_assert_not_null(km, "%s", err.msg);
    ir_kernel *kd = s->batch ? kn_attn_decode_batch(&d->caps, s->n_head, s->n_head_kv, s->hd, s->n_ctx, s->n_split,
                                                    s->n_seq, s->batch, q_stride, s->t, gp, &err)
                             : kn_attn_decode(&d->caps, s->n_head, s->n_head_kv, s->hd, s->n_ctx, s->n_split, s->t, gp,
                                              &err);
    cr_assert_not_null(kd, "%s", err.msg);
    ir_kernel *kg = s->batch ? kn_attn_merge_batch(&d->caps, s->n_head, s->hd, s->n_ctx, s->n_split, s->n_seq,
                                                   s->batch, s->t, &gm, &err)
                             : kn_attn_merge(&d->caps, s->n_head, s->hd, s->n_ctx, s->n_split, s->t, &gm, &err);
    cr_assert_not_null(kg, "%s", err.msg);
    cr_assert(g[0] == gp[0] && g[1] == gp[1]);
    cr_assert_str_eq(ir_kernel_name(km), s->batch ? "kn_attn_decode_batch_merged" : "kn_attn_decode_merged");
    rt_kernel *cmk = tu_vk_compile(d, km), *cdk = tu_vk_compile(d, kd), *cgk = tu_vk_compile(d, kg);
    size_t nc = (size_t)n_seq * s->n_ctx * kv_dim, np = (size_t)nb * s->n_head * s->n_split * (s->hd + 2);
    size_t no = (size_t)nb * qn, nq = (size_t)nb * q_stride, ncnt = (size_t)nb * s->n_head;
    uint16_t *q = tu_rand16(s->t, nq, -4, 4, NULL), *kc = tu_rand16(s->t, nc, -1, 1, NULL);
    uint16_t *vc = tu_rand16(s->t, nc, -2, 2, NULL), *poison = malloc((no + GUARD) * 2);
    uint16_t *o1 = malloc((no + GUARD) * 2), *o2 = malloc((no + GUARD) * 2);
    uint32_t *pp = malloc((np + GUARD) * 4), *cnt = calloc(ncnt + GUARD, 4);
    cr_assert(poison && o1 && o2 && pp && cnt);
    for (size_t i = 0; i < no + GUARD; i++) poison[i] = tu_nan16(s->t);
    for (size_t i = 0; i < np + GUARD; i++) pp[i] = 0x7fc00000u;
    for (size_t i = ncnt; i < ncnt + GUARD; i++) cnt[i] = 0xdeadbeefu; /* the guard after the counts */
    rt_buffer *bq = tu_vk_upload(d, q, nq * 2), *bk = tu_vk_upload(d, kc, nc * 2), *bv = tu_vk_upload(d, vc, nc * 2);
    rt_buffer *bp = tu_vk_upload(d, tokpos, (s->batch ? 2 * nb : 1) * 4);
    rt_buffer *bpart = tu_vk_upload(d, pp, (np + GUARD) * 4), *bcnt = tu_vk_upload(d, cnt, (ncnt + GUARD) * 4);
    rt_buffer *bo = tu_vk_upload(d, poison, (no + GUARD) * 2);
    char what[160];
    snprintf(what, sizeof what, "heads %u/%u hd %u n_ctx %u splits %u batch %u %s pos %u", s->n_head, s->n_head_kv,
             s->hd, s->n_ctx, s->n_split, s->batch, tu_dname(s->t), tokpos[0]);
    /* the merged launch, twice (as a replay) */
    rt_arg margs[7] = {{bq, 0}, {bk, 0}, {bv, 0}, {bpart, 0}, {bp, 0}, {bcnt, 0}, {bo, 0}};
    for (int rep = 0; rep < 2; rep++) {
        tu_vk_reupload(d, bo, poison, (no + GUARD) * 2);
        tu_vk_run(d, cmk, g[0], g[1], margs, 7);
        tu_vk_download(d, bcnt, cnt, (ncnt + GUARD) * 4);
        for (size_t i = 0; i < ncnt; i++) cr_assert_eq(cnt[i], 0u, "%s: count %zu left at %u", what, i, cnt[i]);
        for (size_t i = ncnt; i < ncnt + GUARD; i++) cr_assert_eq(cnt[i], 0xdeadbeefu, "%s: count guard %zu", what, i);
        tu_vk_download(d, bo, rep ? o2 : o1, (no + GUARD) * 2);
    }
    cr_assert(!memcmp(o1, o2, (no + GUARD) * 2), "%s: a second launch differs", what);
    /* the pair on fresh partials */
    tu_vk_reupload(d, bpart, pp, (np + GUARD) * 4);
    tu_vk_reupload(d, bo, poison, (no + GUARD) * 2);
    rt_arg dargs[5] = {{bq, 0}, {bk, 0}, {bv, 0}, {bpart, 0}, {bp, 0}}, gargs[3] = {{bpart, 0}, {bo, 0}, {bp, 0}};
    tu_vk_run(d, cdk, gp[0], gp[1], dargs, 5);
    tu_vk_run(d, cgk, gm, nb, gargs, 3);
    tu_vk_download(d, bo, o2, (no + GUARD) * 2);
    for (size_t i = no; i < no + GUARD; i++) cr_assert_eq(o1[i], tu_nan16(s->t), "%s: wrote past the end", what);
    for (size_t i = 0; i < no; i++)
        cr_assert_eq(o1[i], o2[i], "%s: [%zu] merged %04x, pair %04x", what, i, o1[i], o2[i]);
    d->ops->release(d, bq), d->ops->release(d, bk), d->ops->release(d, bv), d->ops->release(d, bp);
    d->ops->release(d, bpart), d->ops->release(d, bcnt), d->ops->release(d, bo);
    d->ops->release_kernel(d, cmk), d->ops->release_kernel(d, cdk), d->ops->release_kernel(d, cgk);
    free(q), free(kc), free(vc), free(poison), free(o1), free(o2), free(pp), free(cnt);
    ir_kernel_destroy(km), ir_kernel_destroy(kd), ir_kernel_destroy(kg);
}

Test(kernels_attn_merged, one_token_equals_the_pair, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(61);
    const mshape shapes[] = {
        {8, 4, 64, 1031, 7, 0, 0, IR_BF16},  {5, 1, 40, 300, 64, 0, 0, IR_F16}, {32, 8, 128, 1024, 16, 0, 0, IR_BF16},
        {2, 2, 8, 100, 1, 0, 0, IR_F16},     {16, 8, 128, 2048, 32, 0, 0, IR_BF16},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const uint32_t n = shapes[i].n_ctx, pos[] = {0, 5, 70, n / 2 + 3, n - 1, n};
        for (size_t p = 0; p < sizeof pos / sizeof pos[0]; p++) merged_case(d, &shapes[i], &pos[p]);
    }
    d->ops->destroy(d);
}

Test(kernels_attn_merged, batch_equals_the_pair, .timeout = 300) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(62);
    /* (position, sequence): one past the context, one past the pool, a sequence twice */
    static const uint32_t tokpos[12] = {7, 2, 130, 0, 40, 1, 131, 2, 5, 3, 3, 1};
    const mshape shapes[] = {{8, 4, 64, 131, 3, 6, 3, IR_BF16}, {5, 1, 40, 131, 1, 6, 3, IR_F16},
                             {4, 4, 128, 131, 16, 6, 3, IR_BF16}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) merged_case(d, &shapes[i], tokpos);
    d->ops->destroy(d);
}

/* Emitted for the minimal and H200 Vulkan caps and assembled by ptxas for sm_80 / sm_90,
 * paged and batched included; refused where the pair is. */
Test(kernels_attn_merged, variants_build_and_refuse) {
    rt_caps vk[2];
    tu_caps_min(&vk[0]);
    tu_caps_h200(&vk[1]);
    kiln_err err = {0};
    uint32_t g[2];
    kn_pages pg = {.rows = 16, .stride = 64, .n_pages = 100};
    kn_rope_opts rope = {.n_rot = 128, .neox = true, .base = 1e6f, .freq_scale = 1.0f};
    kn_attn_more paged = {.pg = &pg, .n_seq = 8, .batch = 32, .q_stride = 6144};
    kn_attn_more prep = {.pg = &pg, .n_seq = 8, .batch = 32, .q_stride = 4096, .rope = &rope, .qk_norm = true,
                         .eps = 1e-6f};
    for (int ci = 0; ci < 2; ci++) {
        tu_emit_ok(kn_attn_decode_merged(&vk[ci], 32, 8, 128, 4096, 16, NULL, IR_BF16, g, &err), &vk[ci], err.msg,
                   "merged");
        tu_emit_ok(kn_attn_decode_merged(&vk[ci], 16, 8, 128, 0, 8, &paged, IR_F16, g, &err), &vk[ci], err.msg,
                   "merged batch paged");
        if (vk[ci].subgroup_arith)
            tu_emit_ok(kn_attn_decode_merged(&vk[ci], 16, 8, 128, 0, 8, &prep, IR_F16, g, &err), &vk[ci], err.msg,
                       "merged batch paged prep");
    }
    for (unsigned cc = 80; cc <= 90; cc += 10) {
        rt_caps c = tu_cuda_caps(cc);
        const kn_attn_more *m[3] = {NULL, &paged, &prep};
        for (int i = 0; i < 3; i++) {
            ir_kernel *k = kn_attn_decode_merged(&c, 16, 8, 128, 4096, 8, m[i], IR_BF16, g, &err);
            cr_assert_not_null(k, "%s", err.msg);
            tu_ptx_assembles(k, &c, "merged");
            ir_kernel_destroy(k);
        }
    }
    cr_assert_null(kn_attn_decode_merged(&vk[1], 32, 8, 128, 4096, 0, NULL, IR_BF16, g, &err));
    kn_attn_more narrow = {.n_seq = 8, .batch = 4, .q_stride = 100};
    cr_assert_null(kn_attn_decode_merged(&vk[1], 32, 8, 128, 4096, 8, &narrow, IR_BF16, g, &err));
    cr_assert(strstr(err.msg, "q_stride"), "%s", err.msg);
    prep.q_stride = 3000; /* under the raw row's 4096 */
    cr_assert_null(kn_attn_decode_merged(&vk[1], 16, 8, 128, 0, 8, &prep, IR_BF16, g, &err));
    cr_assert(strstr(err.msg, "q_stride"), "%s", err.msg);
    prep.q_stride = 4096, rope.n_rot = 129;
    cr_assert_null(kn_attn_decode_merged(&vk[1], 16, 8, 128, 0, 8, &prep, IR_BF16, g, &err));
    rt_caps plain = vk[1];
    plain.subgroup_arith = false, rope.n_rot = 128; /* kn_qk_prep's numbers need its subgroup form */
    cr_assert_null(kn_attn_decode_merged(&plain, 16, 8, 128, 0, 8, &prep, IR_BF16, g, &err));
    cr_assert(strstr(err.msg, "subgroup"), "%s", err.msg);
}

/* ---- the prep form: kn_qk_prep's work done in the attention's launch ------------------ */

typedef struct pshape {
    mshape m;
    kn_rope_opts rope;
    bool qk_norm;
} pshape;

/* The prep form against kn_qk_prep, then the pair (three launches), on the same raw qkv
 * rows and caches: the outputs and both whole caches (guards included) bit for bit. The
 * caches hold random values up to each token's position and NaN from it on (the row the
 * launch writes included: the prep form must use its own k and v, not read them back). */
static void prep_case(rt_device *d, const pshape *ps, const uint32_t *tokpos) {
    const mshape *s = &ps->m;
    kiln_err err = {0};
    uint32_t nb = s->batch ? s->batch : 1, n_seq = s->batch ? s->n_seq : 1, hd = s->hd;
    uint32_t qn = s->n_head * hd, kv_dim = s->n_head_kv * hd, row = qn + 2 * kv_dim;
    kn_attn_more more = {.n_seq = s->n_seq, .batch = s->batch, .q_stride = row, .rope = &ps->rope,
                         .qk_norm = ps->qk_norm, .eps = 1e-6f};
    uint32_t g[2], gp[2], gm = 0, gq = kn_qk_prep_groups(&d->caps, s->n_head, s->n_head_kv, hd, ps->rope.n_rot, nb);
    ir_kernel *km = kn_attn_decode_merged(&d->caps, s->n_head, s->n_head_kv, hd, s->n_ctx, s->n_split, &more, s->t, g,
                                          &err);
    cr_assert_not_null(km, "%s", err.msg);
    ir_kernel *kq = s->batch ? kn_qk_prep_batch(&d->caps, s->n_head, s->n_head_kv, hd, &ps->rope, ps->qk_norm, 1e-6f,
                                                s->n_ctx, s->n_seq, s->t, &err)
                             : kn_qk_prep(&d->caps, s->n_head, s->n_head_kv, hd, &ps->rope, ps->qk_norm, 1e-6f,
                                          s->n_ctx, s->t, &err);
    cr_assert_not_null(kq, "%s", err.msg);
    ir_kernel *kd = s->batch ? kn_attn_decode_batch(&d->caps, s->n_head, s->n_head_kv, hd, s->n_ctx, s->n_split,
                                                    s->n_seq, s->batch, row, s->t, gp, &err)
                             : kn_attn_decode(&d->caps, s->n_head, s->n_head_kv, hd, s->n_ctx, s->n_split, s->t, gp,
                                              &err);
    cr_assert_not_null(kd, "%s", err.msg);
    ir_kernel *kg = s->batch ? kn_attn_merge_batch(&d->caps, s->n_head, hd, s->n_ctx, s->n_split, s->n_seq, s->batch,
                                                   s->t, &gm, &err)
                             : kn_attn_merge(&d->caps, s->n_head, hd, s->n_ctx, s->n_split, s->t, &gm, &err);
    cr_assert_not_null(kg, "%s", err.msg);
    rt_kernel *cmk = tu_vk_compile(d, km), *cqk = tu_vk_compile(d, kq), *cdk = tu_vk_compile(d, kd);
    rt_kernel *cgk = tu_vk_compile(d, kg);
    size_t nc = (size_t)n_seq * s->n_ctx * kv_dim + GUARD, np = (size_t)nb * s->n_head * s->n_split * (hd + 2);
    size_t no = (size_t)nb * qn + GUARD, nq = (size_t)nb * row;
    uint16_t *qkv = tu_rand16(s->t, nq, -2, 2, NULL), *kc = tu_rand16(s->t, nc, -1, 1, NULL);
    uint16_t *vc = tu_rand16(s->t, nc, -2, 2, NULL), *nw = tu_rand16(s->t, hd, 0.5f, 1.5f, NULL);
    uint16_t *kw = tu_rand16(s->t, hd, 0.5f, 1.5f, NULL), *fr = tu_rand16(s->t, ps->rope.n_rot / 2, 1, 8, NULL);
    for (uint32_t b = 0; b < nb; b++) { /* rows from each token's position on: NaN */
        uint32_t pos = tokpos[s->batch ? 2 * b : 0], sq = s->batch ? tokpos[2 * b + 1] : 0;
        for (uint32_t r = pos; sq < n_seq && r < s->n_ctx; r++)
            for (uint32_t i = 0; i < kv_dim; i++) {
                size_t at = ((size_t)sq * s->n_ctx + r) * kv_dim + i;
                kc[at] = vc[at] = tu_nan16(s->t);
            }
    }
    uint16_t *poison = malloc(no * 2), *o[2] = {malloc(no * 2), malloc(no * 2)};
    uint16_t *kg_[2] = {malloc(nc * 2), malloc(nc * 2)}, *vg[2] = {malloc(nc * 2), malloc(nc * 2)};
    uint32_t *pp = malloc(np * 4), *cnt = calloc((size_t)nb * s->n_head, 4), info[2] = {tokpos[0], 1};
    for (size_t i = 0; i < no; i++) poison[i] = tu_nan16(s->t);
    for (size_t i = 0; i < np; i++) pp[i] = 0x7fc00000u;
    rt_buffer *bp = s->batch ? tu_vk_upload(d, tokpos, 8 * nb) : tu_vk_upload(d, info, 8);
    rt_buffer *bnw = tu_vk_upload(d, nw, hd * 2), *bkw = tu_vk_upload(d, kw, hd * 2);
    rt_buffer *bfr = tu_vk_upload(d, fr, ps->rope.n_rot), *bcnt = tu_vk_upload(d, cnt, (size_t)nb * s->n_head * 4);
    char what[200];
    snprintf(what, sizeof what, "prep heads %u/%u hd %u n_rot %u%s%s%s n_ctx %u splits %u batch %u %s pos %u",
             s->n_head, s->n_head_kv, hd, ps->rope.n_rot, ps->rope.neox ? " neox" : "", ps->qk_norm ? " norm" : "",
             ps->rope.freq_factors ? " factors" : "", s->n_ctx, s->n_split, s->batch, tu_dname(s->t), tokpos[0]);
    for (int form = 0; form < 2; form++) { /* 0: the prep form, 1: kn_qk_prep and the pair */
        rt_buffer *bq = tu_vk_upload(d, qkv, nq * 2), *bk = tu_vk_upload(d, kc, nc * 2);
        rt_buffer *bv = tu_vk_upload(d, vc, nc * 2), *bo = tu_vk_upload(d, poison, no * 2);
        rt_buffer *bpart = tu_vk_upload(d, pp, np * 4);
        rt_arg a[12];
        uint32_t n = 0;
        if (form == 0) {
            a[n++] = (rt_arg){bq, 0}, a[n++] = (rt_arg){bk, 0}, a[n++] = (rt_arg){bv, 0}, a[n++] = (rt_arg){bpart, 0};
            a[n++] = (rt_arg){bp, 0};
            if (ps->qk_norm) a[n++] = (rt_arg){bnw, 0}, a[n++] = (rt_arg){bkw, 0};
            if (ps->rope.freq_factors) a[n++] = (rt_arg){bfr, 0};
            a[n++] = (rt_arg){bcnt, 0}, a[n++] = (rt_arg){bo, 0};
            tu_vk_run(d, cmk, g[0], g[1], a, n);
            tu_vk_download(d, bcnt, cnt, (size_t)nb * s->n_head * 4);
            for (size_t i = 0; i < (size_t)nb * s->n_head; i++) cr_assert_eq(cnt[i], 0u, "%s: count left", what);
        } else {
            a[n++] = (rt_arg){bq, 0}, a[n++] = (rt_arg){bk, 0}, a[n++] = (rt_arg){bv, 0}, a[n++] = (rt_arg){bp, 0};
            if (ps->qk_norm) a[n++] = (rt_arg){bnw, 0}, a[n++] = (rt_arg){bkw, 0};
            if (ps->rope.freq_factors) a[n++] = (rt_arg){bfr, 0};
            tu_vk_run(d, cqk, gq, nb, a, n);
            rt_arg da[5] = {{bq, 0}, {bk, 0}, {bv, 0}, {bpart, 0}, {bp, 0}}, ga[3] = {{bpart, 0}, {bo, 0}, {bp, 0}};
            tu_vk_run(d, cdk, gp[0], gp[1], da, 5);
            tu_vk_run(d, cgk, gm, nb, ga, 3);
        }
        tu_vk_download(d, bo, o[form], no * 2);
        tu_vk_download(d, bk, kg_[form], nc * 2), tu_vk_download(d, bv, vg[form], nc * 2);
        d->ops->release(d, bq), d->ops->release(d, bk), d->ops->release(d, bv), d->ops->release(d, bo);
        d->ops->release(d, bpart);
    }
    for (size_t i = 0; i < no; i++)
        cr_assert_eq(o[0][i], o[1][i], "%s: out[%zu] prep %04x, separate %04x", what, i, o[0][i], o[1][i]);
    for (size_t i = 0; i < nc; i++) {
        cr_assert_eq(kg_[0][i], kg_[1][i], "%s: kcache[%zu] prep %04x, separate %04x", what, i, kg_[0][i], kg_[1][i]);
        cr_assert_eq(vg[0][i], vg[1][i], "%s: vcache[%zu] prep %04x, separate %04x", what, i, vg[0][i], vg[1][i]);
    }
    d->ops->release(d, bp), d->ops->release(d, bnw), d->ops->release(d, bkw), d->ops->release(d, bfr);
    d->ops->release(d, bcnt);
    d->ops->release_kernel(d, cmk), d->ops->release_kernel(d, cqk), d->ops->release_kernel(d, cdk);
    d->ops->release_kernel(d, cgk);
    free(qkv), free(kc), free(vc), free(nw), free(kw), free(fr), free(poison), free(o[0]), free(o[1]);
    free(kg_[0]), free(kg_[1]), free(vg[0]), free(vg[1]), free(pp), free(cnt);
    ir_kernel_destroy(km), ir_kernel_destroy(kq), ir_kernel_destroy(kd), ir_kernel_destroy(kg);
}

Test(kernels_attn_merged, prep_equals_qk_prep_and_the_pair, .timeout = 600) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    if (!d->caps.subgroup_arith) {
        d->ops->destroy(d);
        cr_skip_test("no subgroup sums: the prep form is not offered");
    }
    tu_seed(63);
    const pshape shapes[] = {
        {{8, 4, 128, 1031, 7, 0, 0, IR_BF16}, {128, true, 1e6f, 1.0f, false}, true},
        {{5, 1, 64, 300, 64, 0, 0, IR_F16}, {32, false, 1e4f, 0.5f, true}, false},
        {{4, 2, 40, 100, 1, 0, 0, IR_BF16}, {24, true, 5e5f, 1.0f, false}, true},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const uint32_t n = shapes[i].m.n_ctx, pos[] = {0, 5, 70, n / 2 + 3, n - 1, n};
        for (size_t p = 0; p < sizeof pos / sizeof pos[0]; p++) prep_case(d, &shapes[i], &pos[p]);
    }
    static const uint32_t tokpos[12] = {7, 2, 130, 0, 40, 1, 131, 2, 5, 3, 3, 1};
    const pshape batch[] = {{{8, 4, 64, 131, 3, 6, 3, IR_BF16}, {64, true, 1e6f, 1.0f, false}, true},
                            {{4, 4, 128, 131, 16, 6, 3, IR_F16}, {96, false, 1e4f, 1.0f, true}, false}};
    for (size_t i = 0; i < sizeof batch / sizeof batch[0]; i++) prep_case(d, &batch[i], tokpos);
    d->ops->destroy(d);
}
