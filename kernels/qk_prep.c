/* Everything between the qkv projection and prefill attention in one launch: per-head
 * q/k RMSNorm (qwen3), rope, and the KV-cache store, for a block of tokens.
 *
 * Workgroup (x, token t) takes heads j = x, x + groups_x, x + 2 groups_x, .. of the fused
 * qkv row (groups_x = the grid's width, from one per head down to kn_qk_prep_groups'
 * count for long blocks). Every branch and loop below depends only on the group ids, the
 * grid and info[], so the whole workgroup takes it together and the barriers stay in
 * uniform control flow:
 *   - t >= n, or a position p = info[0] + t at or past n_ctx (or wrapped past 2^32):
 *     the workgroup writes nothing at all, q included (attention reads no such token);
 *   - first the token's rope angles: cos and sin of each pair i < n_rot / 2 into
 *     workgroup memory, once for all the workgroup's heads (the angle chain below is the
 *     launch's main arithmetic: one head a workgroup computed it 48 times a token on
 *     qwen3-8b);
 *   - v heads: a bit-for-bit copy of the head into vcache row p;
 *   - q and k heads: pass 1 (with qk_norm) is kn_rms_scale, the same f32 sum of squares
 *     and scale as kn_rmsnorm_heads; pass 2 gives each invocation rope pairs i = lid,
 *     lid + wg, ..: it loads x[a], x[b], norms them ((x * scale) * w, rounded to dtype,
 *     the oracle's rounding point), rotates in f32 with the table's cos and sin and stores
 *     the pair rounded, in place for q, to kcache row p for k. Dims past n_rot are normed
 *     (or, for k, copied) by a third strided loop. An element is read and written by one
 *     invocation, and pass 1's reads all precede the barrier, so rewriting q in place races
 *     with nothing; a barrier ends each head (the next one reuses the sum's array).
 * Angles are kn_rope's, step for step: theta_0 = p, theta_{i+1} = theta_i * theta_scale
 * by repeated f32 multiplication (each invocation carries its chain from one pair to its
 * next, so it never multiplies more than n_rot / 2 times), then the oracle's options,
 * angle = freq_scale * (theta / factor_i) (the factor first; each one f32 rounding), then
 * kn_sincos (reduction by pi/2 in four parts, f32 polynomials: about an ulp). The divide is the
 * device's: Vulkan allows 2.5 ulp, where the oracle's is correctly rounded.
 * Indices are u32: n_max * (n_head + 2 * n_head_kv) * head_dim must stay below 2^32 (the
 * caller's block size; not known here), n_ctx * kv_dim is checked. */
#include "base/error.h"
#include "kernels/kn_common.h"
#include "kernels/kn_qk.h"

#include <math.h>

typedef struct qk_build {
    kx k;
    uint32_t wg, head_dim, n_rot;
    bool neox, qk_norm, factors;
    float eps, theta_scale, freq_scale;
    ir_scalar dtype;
    ir_buf qkv, freqs;
    ir_shm cos_t, sin_t; /* the token's rope table: n_rot / 2 pairs */
    uint32_t sg;         /* lanes of a subgroup with a head of its own (head_sg), 0 otherwise */
    ir_val p;            /* the token's position (u32) */
    ir_shm out_s;        /* head()'s results into this workgroup array (f32) instead of dst */
    bool to_shm;
} qk_build;

/* A head's element: dst[at] (dtype), or the workgroup array's f32 of it. */
static void put(const qk_build *b, ir_buf dst, ir_val at, ir_val y) {
    if (b->to_shm) kx_shm_store(b->k, b->out_s, at, kx_as(b->k, y, IR_F32));
    else kx_store(b->k, dst, at, y);
}

/* x[src + d] as f32, normed and rounded to dtype with qk_norm. */
static ir_val load_normed(const qk_build *b, ir_val src, ir_val d, ir_buf w, ir_val scale) {
    kx k = b->k;
    ir_val x = kx_as(k, kx_load(k, b->qkv, kx_add(k, src, d), 1), IR_F32);
    if (!b->qk_norm) return x;
    ir_val wd = kx_as(k, kx_load(k, w, d, 1), IR_F32);
    ir_val y = kx_mul(k, kx_mul(k, x, scale), wd);
    return kx_as(k, kx_as(k, y, b->dtype), IR_F32);
}

/* cos and sin of pair i's angle for every pair, into the workgroup's table */
static void rope_table(const qk_build *b) {
    kx k = b->k;
    /* pairs lid, lid + wg, ..; carried: theta_at and at, the chain's last step */
    ir_val init[2] = {kx_as(k, b->p, IR_F32), kx_u32(k, 0)};
    ir_val step = kx_u32(k, b->wg);
    ir_for *l = ir_for_begin(k.ir, kx_local(k), kx_u32(k, b->n_rot / 2), step, 2, init);
    ir_val i = ir_for_iv(l);
    ir_val th = kn_rope_theta(k, ir_for_arg(l, 0), ir_for_arg(l, 1), i, b->theta_scale);
    ir_val ang = th;
    if (b->factors) ang = kn_fdiv(k, ang, kx_as(k, kx_load(k, b->freqs, i, 1), IR_F32));
    if (b->freq_scale != 1.0f) ang = kx_mul(k, kx_f32(k, b->freq_scale), ang);
    ir_val cs, sn;
    kn_sincos(k, ang, &sn, &cs);
    kx_shm_store(k, b->cos_t, i, cs);
    kx_shm_store(k, b->sin_t, i, sn);
    ir_val next[2] = {th, i};
    ir_for_end(k.ir, l, next);
    kx_barrier(k);
}

/* One q or k head at qkv[src ..]: norm (with w), rope, stored at dst[dst_base ..]. */
static void head(const qk_build *b, ir_val src, ir_buf dst, ir_val dst_base, ir_buf w, bool in_place,
                 const char *shm) {
    kx k = b->k;
    uint32_t half = b->n_rot / 2;
    ir_val lid = kx_local(k);
    ir_val scale = b->qk_norm ? kn_rms_scale(k, b->wg, b->qkv, src, b->head_dim, b->eps, shm) : IR_NONE;

    ir_val step = kx_u32(k, b->wg), i;
    ir_for *l = kx_for(k, lid, kx_u32(k, half), step, &i);
    ir_val cs = kx_shm_load(k, b->cos_t, i, 1), sn = kx_shm_load(k, b->sin_t, i, 1);
    ir_val ia = b->neox ? i : kx_mul_c(k, i, 2);
    ir_val ib = kx_add_c(k, ia, b->neox ? half : 1);
    ir_val x0 = load_normed(b, src, ia, w, scale), x1 = load_normed(b, src, ib, w, scale);
    ir_val o0, o1;
    kn_rotate(k, x0, x1, cs, sn, &o0, &o1);
    put(b, dst, kx_add(k, dst_base, ia), kx_as(k, o0, b->dtype));
    put(b, dst, kx_add(k, dst_base, ib), kx_as(k, o1, b->dtype));
    kx_end_for(k, l);

    /* dims past n_rot: normed, or copied to the cache; q without a norm keeps them as they are */
    if (b->n_rot == b->head_dim || (in_place && !b->qk_norm)) return;
    ir_val step2 = kx_u32(k, b->wg), end = kx_u32(k, b->head_dim), d;
    ir_for *tl = kx_for(k, kx_add_c(k, lid, b->n_rot), end, step2, &d);
    ir_val y = b->qk_norm ? kx_as(k, load_normed(b, src, d, w, scale), b->dtype)
                          : kx_load(k, b->qkv, kx_add(k, src, d), 1);
    put(b, dst, kx_add(k, dst_base, d), y);
    kx_end_for(k, tl);
}

/* Subgroups of their own heads where the caps have subgroup sums and a head is few values
 * a lane: the subgroups a workgroup holds (4), 0 for one head a workgroup at a time. */
#define SG_VALUES 32 /* a lane's values of a head at most */
static uint32_t sg_slots(const rt_caps *c, uint32_t head_dim, uint32_t n_rot) {
    uint32_t sg = c ? c->subgroup_size : 0;
    if (!c || !c->subgroup_arith || sg < 4) return 0;
    uint32_t per_lane = (n_rot / 2 + sg - 1) / sg * 2 + (head_dim - n_rot + sg - 1) / sg;
    uint32_t wg = kn_workgroup(c, 4 * sg);
    return per_lane <= SG_VALUES && wg >= sg && wg % sg == 0 ? wg / sg : 0;
}

/* x as f32, normed and rounded to dtype with qk_norm (dim d's weight of w) */
static ir_val norm_val(const qk_build *b, ir_val x, ir_val d, ir_buf w, ir_val scale) {
    kx k = b->k;
    if (!b->qk_norm) return x;
    ir_val y = kx_mul(k, kx_mul(k, x, scale), kx_as(k, kx_load(k, w, d, 1), IR_F32));
    return kx_as(k, kx_as(k, y, b->dtype), IR_F32);
}

/* One q or k head by one subgroup: every lane loads its pairs (i = lane, lane + sg, ..) and
 * dims past n_rot at once, the sum of squares is the subgroup's, then the same norm, rope
 * and stores as head(); lanes past the head's end load a clamped element and count 0. */
static void head_sg(const qk_build *b, ir_val src, ir_buf dst, ir_val dst_base, ir_buf w, bool in_place) {
    kx k = b->k;
    uint32_t half = b->n_rot / 2, sg = b->sg, hd = b->head_dim;
    uint32_t np = (half + sg - 1) / sg, ne = (hd - b->n_rot + sg - 1) / sg;
    bool extras = b->n_rot < hd && !(in_place && !b->qk_norm);
    ir_val lane = kx_sg_lane(k), zero = kx_f32(k, 0.0f), ss = zero;
    ir_val pi[SG_VALUES], pa[SG_VALUES], pb[SG_VALUES], x0[SG_VALUES], x1[SG_VALUES], ok[SG_VALUES];
    ir_val ed[SG_VALUES], xe[SG_VALUES], eok[SG_VALUES];
    for (uint32_t m = 0; m < np; m++) {
        ir_val i = kx_add_c(k, lane, m * sg);
        ok[m] = (m + 1) * sg <= half ? IR_NONE : kx_lt_c(k, i, half);
        pi[m] = ok[m] ? kx_min_c(k, i, half - 1) : i;
        pa[m] = b->neox ? pi[m] : kx_mul_c(k, pi[m], 2);
        pb[m] = kx_add_c(k, pa[m], b->neox ? half : 1);
        x0[m] = kx_as(k, kx_load(k, b->qkv, kx_add(k, src, pa[m]), 1), IR_F32);
        x1[m] = kx_as(k, kx_load(k, b->qkv, kx_add(k, src, pb[m]), 1), IR_F32);
    }
    for (uint32_t m = 0; m < ne && (extras || b->qk_norm); m++) {
        ir_val d = kx_add_c(k, lane, b->n_rot + m * sg);
        eok[m] = b->n_rot + (m + 1) * sg <= hd ? IR_NONE : kx_lt_c(k, d, hd);
        ed[m] = eok[m] ? kx_min_c(k, d, hd - 1) : d;
        xe[m] = kx_as(k, kx_load(k, b->qkv, kx_add(k, src, ed[m]), 1), IR_F32);
    }
    ir_val scale = IR_NONE;
    if (b->qk_norm) {
        for (uint32_t m = 0; m < np; m++) {
            ir_val q = kx_fma(k, x1[m], x1[m], kx_mul(k, x0[m], x0[m]));
            ss = kx_add(k, ss, ok[m] ? kx_select(k, ok[m], q, zero) : q);
        }
        for (uint32_t m = 0; m < ne; m++) {
            ir_val q = kx_mul(k, xe[m], xe[m]);
            ss = kx_add(k, ss, eok[m] ? kx_select(k, eok[m], q, zero) : q);
        }
        scale = kn_rms_of_sum(k, kx_sg_sum(k, ss), hd, b->eps);
    }
    for (uint32_t m = 0; m < np; m++) {
        ir_if *f = ok[m] ? kx_if(k, ok[m]) : NULL;
        ir_val cs = kx_shm_load(k, b->cos_t, pi[m], 1), sn = kx_shm_load(k, b->sin_t, pi[m], 1);
        ir_val o0, o1;
        kn_rotate(k, norm_val(b, x0[m], pa[m], w, scale), norm_val(b, x1[m], pb[m], w, scale), cs, sn, &o0, &o1);
        put(b, dst, kx_add(k, dst_base, pa[m]), kx_as(k, o0, b->dtype));
        put(b, dst, kx_add(k, dst_base, pb[m]), kx_as(k, o1, b->dtype));
        if (f) kx_end_if(k, f);
    }
    for (uint32_t m = 0; m < ne && extras; m++) {
        ir_if *f = eok[m] ? kx_if(k, eok[m]) : NULL;
        put(b, dst, kx_add(k, dst_base, ed[m]), kx_as(k, norm_val(b, xe[m], ed[m], w, scale), b->dtype));
        if (f) kx_end_if(k, f);
    }
}

/* n_seq 0: a block of tokens at info[0] + t in one cache; else a step's tokens, token t at
 * position tokpos[2t] of sequence tokpos[2t + 1]'s cache in a pool of n_seq. */
static ir_kernel *build(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                        const kn_rope_opts *rope, bool qk_norm, float eps, uint32_t n_ctx, uint32_t n_seq,
                        const kn_pages *pg, ir_scalar dtype, kiln_err *err) {
    kiln_err why = {0};
    if (kn_check_dtype(c, dtype, &why)) {
        kiln_err_wrap(err, &why, "kn_qk_prep");
        return NULL;
    }
    if (!rope) {
        kiln_fail(err, KILN_ERR_INVALID, "kn_qk_prep: no rope options");
        return NULL;
    }
    uint32_t n_rot = rope->n_rot;
    uint64_t kv_dim = (uint64_t)n_head_kv * head_dim, row = ((uint64_t)n_head + 2ull * n_head_kv) * head_dim;
    if (n_head == 0 || n_head_kv == 0 || head_dim == 0 || n_ctx == 0 || n_head % n_head_kv || n_rot == 0 ||
        n_rot % 2 || n_rot > head_dim || !(rope->base > 0.0f) || !isfinite(rope->base) ||
        !(rope->freq_scale > 0.0f) || !isfinite(rope->freq_scale) || (qk_norm && (!(eps >= 0.0f) || !isfinite(eps))) ||
        row > UINT32_MAX || (!pg && (uint64_t)n_ctx * kv_dim * (n_seq ? n_seq : 1) > UINT32_MAX) ||
        (pg && (uint64_t)pg->stride * (n_seq ? n_seq : 1) > UINT32_MAX)) {
        kiln_fail(err, KILN_ERR_INVALID,
                  "kn_qk_prep: bad shape (heads %u / %u kv, head_dim %u, n_rot %u, base %g, freq_scale %g, eps %g, "
                  "n_ctx %u, %u sequences; n_head a multiple of n_head_kv, n_rot even and <= head_dim, u32 indices: "
                  "the caches' n_ctx * kv_dim < 2^32)",
                  n_head, n_head_kv, head_dim, n_rot, (double)rope->base, (double)rope->freq_scale, (double)eps, n_ctx,
                  n_seq);
        return NULL;
    }
    kx k = {kn_create(n_seq ? "kn_qk_prep_batch" : "kn_qk_prep", err), c};
    if (!k.ir) return NULL;
    kn_launch_early(k); /* a short kernel: the next may start (kn_early.c) */
    qk_build b = {.k = k, .head_dim = head_dim, .n_rot = n_rot, .neox = rope->neox, .qk_norm = qk_norm,
                  .factors = rope->freq_factors, .eps = eps, .freq_scale = rope->freq_scale,
                  .theta_scale = powf(rope->base, -2.0f / (float)n_rot), .dtype = dtype};
    b.qkv = kx_buffer_per_group(k, "qkv", dtype, IR_READ | IR_WRITE, 1, row); /* token t is grid row y */
    if (kn_pages_check(pg, kv_dim, "kn_qk_prep", err)) {
        ir_kernel_destroy(k.ir);
        return NULL;
    }
    uint64_t cache = pg ? (uint64_t)pg->rows * pg->n_pages * kv_dim : (uint64_t)n_ctx * kv_dim * (n_seq ? n_seq : 1);
    ir_buf kc = kx_buffer(k, "kcache", dtype, IR_WRITE, cache);
    ir_buf vc = kx_buffer(k, "vcache", dtype, IR_WRITE, cache);
    ir_buf info = n_seq ? kx_buffer_per_group(k, "tokpos", IR_U32, IR_READ, 1, 2) : kx_buffer(k, "info", IR_U32, IR_READ, 2);
    ir_buf qn = 0, kn = 0;
    if (qk_norm) {
        qn = kx_buffer(k, "q_norm", dtype, IR_READ, head_dim);
        kn = kx_buffer(k, "k_norm", dtype, IR_READ, head_dim);
    }
    if (b.factors) b.freqs = kx_buffer(k, "freqs", dtype, IR_READ, n_rot / 2);
    ir_buf tab = pg ? kx_buffer(k, "pages", IR_U32, IR_READ, (uint64_t)pg->stride * (n_seq ? n_seq : 1)) : 0;

    /* a subgroup a head (sg_slots); or one head a workgroup at a time: about one pair
     * (plus the dims past n_rot, or one vector of a v head) per invocation, at least a
     * subgroup, the smallest power of two covering that */
    uint32_t v = kn_vec_width(head_dim), items = n_rot / 2 + (head_dim - n_rot);
    uint32_t slots = sg_slots(c, head_dim, n_rot);
    if (head_dim / v > items) items = head_dim / v;
    if (items < c->subgroup_size) items = c->subgroup_size;
    if (items > 256) items = 256;
    b.sg = slots ? c->subgroup_size : 0;
    b.wg = slots ? slots * b.sg : kn_workgroup(c, 2 * items - 1);
    kx_workgroup(k, b.wg);

    /* workgroup (x, token t) at position p = info[0] + t (batched: tokpos[2t], its
     * sequence's rows of the pool from seq * n_ctx) */
    ir_val t = kx_group(k, 1), live_c, row0 = IR_NONE, tab0 = kx_u32(k, 0);
    if (n_seq) {
        ir_val at = kx_mul_c(k, t, 2);
        b.p = kx_load(k, info, at, 1);
        ir_val seq = kx_load(k, info, kx_add_c(k, at, 1), 1);
        ir_val seq_ok = kx_lt_c(k, seq, n_seq);
        live_c = kx_and(k, kx_lt_c(k, b.p, n_ctx), seq_ok);
        row0 = kx_mul_c(k, kx_select(k, seq_ok, seq, kx_u32(k, 0)), n_ctx);
        if (pg) tab0 = kx_mul_c(k, kx_select(k, seq_ok, seq, kx_u32(k, 0)), pg->stride);
    } else {
        ir_val p0 = kx_load_c(k, info, 0), n = kx_load_c(k, info, 1);
        b.p = kx_add(k, p0, t);
        /* per workgroup: a token of the block at a position inside the cache (p < p0: wrapped) */
        ir_val below_end = kx_lt_c(k, b.p, n_ctx);
        ir_val in_cache = kx_and(k, kx_ge(k, b.p, p0), below_end);
        live_c = kx_and(k, kx_lt(k, t, n), in_cache);
    }
    /* paged: the position's page (read only for a live token: the table ends at the
     * context), a page past the pool a dead token */
    ir_if *live = kx_if(k, live_c), *paged = NULL;
    ir_val page = IR_NONE;
    if (pg) {
        page = kn_page_of(k, pg, tab, tab0, b.p);
        paged = kx_if(k, kx_lt_c(k, page, pg->n_pages));
    }
    b.cos_t = kx_shared(k, "rope_cos", IR_F32, n_rot / 2);
    b.sin_t = kx_shared(k, "rope_sin", IR_F32, n_rot / 2);
    rope_table(&b);
    ir_val hd = kx_u32(k, head_dim);
    ir_val prow = pg ? kn_page_row(k, pg, page, b.p) : n_seq ? kx_add(k, row0, b.p) : b.p;
    ir_val cache_row = kx_mul_c(k, prow, (uint32_t)kv_dim);
    /* heads j = x slots + s, stepping by the grid's slots: s the subgroup (a head each), or
     * 0 with one slot (the whole workgroup's head; uniform) */
    ir_val j, s0 = slots ? kx_add(k, kx_mul_c(k, kx_group(k, 0), slots), kx_sg_id(k)) : kx_group(k, 0);
    ir_val jstep = slots ? kx_mul_c(k, kx_n_groups(k), slots) : kx_n_groups(k);
    ir_for *heads = kx_for(k, s0, kx_u32(k, n_head + 2 * n_head_kv), jstep, &j);
    ir_val src = kx_idx(k, t, (uint32_t)row, kx_mul(k, j, hd));
    ir_if *is_q = kx_if(k, kx_lt_c(k, j, n_head));
    if (slots) head_sg(&b, src, b.qkv, src, qn, true);
    else head(&b, src, b.qkv, src, qn, true, "ss_q");
    kx_else(k, is_q);
    ir_val kvh = kx_sub_c(k, j, n_head);
    ir_if *is_k = kx_if(k, kx_lt_c(k, kvh, n_head_kv));
    ir_val kdst = kx_add(k, cache_row, kx_mul(k, kvh, hd));
    if (slots) head_sg(&b, src, kc, kdst, kn, false);
    else head(&b, src, kc, kdst, kn, false, "ss_k");
    kx_else(k, is_k);
    /* v head: vectors copied as they are (by the head's subgroup, or the workgroup) */
    ir_val vh = kx_sub_c(k, kvh, n_head_kv);
    ir_val vdst = kx_add(k, cache_row, kx_mul(k, vh, hd));
    ir_val step = kx_u32(k, (slots ? b.sg : b.wg) * v), col;
    ir_val first = slots ? kx_mul_c(k, kx_sg_lane(k), v) : kx_local_times(k, v);
    ir_for *cp = kx_for(k, first, hd, step, &col);
    ir_val val = kx_load(k, b.qkv, kx_add(k, src, col), v);
    kx_store(k, vc, kx_add(k, vdst, col), val);
    kx_end_for(k, cp);
    kx_end_if(k, is_k);
    kx_end_if(k, is_q);
    if (!slots) kx_barrier(k); /* the next head's sum reuses the workgroup arrays */
    kx_end_for(k, heads);
    if (paged) kx_end_if(k, paged);
    kx_end_if(k, live);
    return kn_finish(k.ir, err);
}

ir_kernel *kn_qk_prep(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                      const kn_rope_opts *rope, bool qk_norm, float eps, uint32_t n_ctx, ir_scalar dtype,
                      kiln_err *err) {
    return build(c, n_head, n_head_kv, head_dim, rope, qk_norm, eps, n_ctx, 0, NULL, dtype, err);
}

ir_kernel *kn_qk_prep_batch(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                            const kn_rope_opts *rope, bool qk_norm, float eps, uint32_t n_ctx, uint32_t n_seq,
                            ir_scalar dtype, kiln_err *err) {
    if (!n_seq) return kiln_fail(err, KILN_ERR_INVALID, "kn_qk_prep_batch: no sequences"), NULL;
    return build(c, n_head, n_head_kv, head_dim, rope, qk_norm, eps, n_ctx, n_seq, NULL, dtype, err);
}

/* n_ctx = stride * rows, from the paging once it is checked */
static uint32_t paged_ctx(const kn_pages *pg, uint32_t n_head_kv, uint32_t head_dim, kiln_err *err) {
    if (!pg) return kiln_fail(err, KILN_ERR_INVALID, "kn_qk_prep: no paging"), 0;
    return kn_pages_check(pg, (uint64_t)n_head_kv * head_dim, "kn_qk_prep", err) ? 0 : pg->rows * pg->stride;
}

ir_kernel *kn_qk_prep_paged(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                            const kn_rope_opts *rope, bool qk_norm, float eps, const kn_pages *pg, ir_scalar dtype,
                            kiln_err *err) {
    uint32_t n_ctx = paged_ctx(pg, n_head_kv, head_dim, err);
    return n_ctx ? build(c, n_head, n_head_kv, head_dim, rope, qk_norm, eps, n_ctx, 0, pg, dtype, err) : NULL;
}

ir_kernel *kn_qk_prep_batch_paged(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                                  const kn_rope_opts *rope, bool qk_norm, float eps, const kn_pages *pg,
                                  uint32_t n_seq, ir_scalar dtype, kiln_err *err) {
    if (!n_seq) return kiln_fail(err, KILN_ERR_INVALID, "kn_qk_prep_batch: no sequences"), NULL;
    uint32_t n_ctx = paged_ctx(pg, n_head_kv, head_dim, err);
    return n_ctx ? build(c, n_head, n_head_kv, head_dim, rope, qk_norm, eps, n_ctx, n_seq, pg, dtype, err) : NULL;
}

uint32_t kn_qk_prep_groups(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t n_rot,
                           uint32_t n_max) {
    uint32_t heads = n_head + 2 * n_head_kv, units = c && c->compute_units ? c->compute_units : 16;
    uint32_t slots = n_rot && n_rot <= head_dim ? sg_slots(c, head_dim, n_rot) : 0;
    if (!slots) slots = 1;
    /* a head a slot until the grid passes 8 workgroups an SM, then up to 4 a slot share
     * one token's angle table */
    uint64_t per = (uint64_t)heads * n_max / ((uint64_t)slots * units * 8);
    if (per < 1) per = 1;
    if (per > 4) per = 4;
    uint32_t at_once = slots * (uint32_t)per;
    return (heads + at_once - 1) / at_once;
}

void kn_qk_token_heads(kx k, const kn_qk_token *t, ir_val p, ir_val src, ir_val qh, ir_val kvh, ir_shm q_s,
                       ir_shm k_s, ir_shm v_s) {
    const kn_rope_opts *rope = t->rope;
    qk_build b = {.k = k, .wg = t->wg, .head_dim = t->head_dim, .n_rot = rope->n_rot, .neox = rope->neox,
                  .qk_norm = t->qk_norm, .factors = rope->freq_factors, .eps = t->eps,
                  .freq_scale = rope->freq_scale, .theta_scale = powf(rope->base, -2.0f / (float)rope->n_rot),
                  .dtype = t->dtype, .qkv = t->qkv, .freqs = t->freqs, .p = p, .to_shm = true,
                  .sg = k.caps->subgroup_size};
    b.cos_t = kx_shared(k, "rope_cos", IR_F32, rope->n_rot / 2);
    b.sin_t = kx_shared(k, "rope_sin", IR_F32, rope->n_rot / 2);
    rope_table(&b); /* its angles do not depend on the workgroup's size */
    uint32_t hd = t->head_dim, n_sg = t->wg / b.sg;
    ir_val zero = kx_u32(k, 0), sgid = kx_sg_id(k);
    /* a subgroup a head, as kn_qk_prep's (its sums in the same order): the first the q head,
     * the second (or the first again) the k head */
    ir_if *fq = kx_if(k, kx_eq_c(k, sgid, 0));
    b.out_s = q_s;
    head_sg(&b, kx_add(k, src, kx_mul_c(k, qh, hd)), 0, zero, t->qn, false);
    kx_end_if(k, fq);
    ir_if *fk = kx_if(k, kx_eq_c(k, sgid, n_sg > 1 ? 1 : 0));
    b.out_s = k_s;
    head_sg(&b, kx_add(k, src, kx_mul_c(k, kx_add_c(k, kvh, t->n_head), hd)), 0, zero, t->kn, false);
    kx_end_if(k, fk);
    /* the v head as it is (f32 of its dtype values) */
    ir_val vsrc = kx_add(k, src, kx_mul_c(k, kx_add_c(k, kvh, t->n_head + t->n_head_kv), hd)), d;
    ir_for *cp = kx_for(k, kx_local(k), kx_u32(k, hd), kx_u32(k, t->wg), &d);
    kx_shm_store(k, v_s, d, kx_as(k, kx_load(k, t->qkv, kx_add(k, vsrc, d), 1), IR_F32));
    kx_end_for(k, cp);
    kx_barrier(k);
}

bool kn_qk_token_ok(const rt_caps *c, const kn_qk_token *t) {
    const kn_rope_opts *r = t->rope;
    bool shape = r && r->n_rot && r->n_rot % 2 == 0 && r->n_rot <= t->head_dim && r->base > 0.0f &&
                 isfinite(r->base) && r->freq_scale > 0.0f && isfinite(r->freq_scale) &&
                 (!t->qk_norm || (t->eps >= 0.0f && isfinite(t->eps)));
    /* kn_qk_prep's numbers come from head_sg where it has subgroup slots: only there */
    return shape && sg_slots(c, t->head_dim, r->n_rot) && t->wg && t->wg % c->subgroup_size == 0;
}
