/* Everything between the qkv projection and prefill attention in one launch: per-head
 * q/k RMSNorm (qwen3), rope, and the KV-cache store, for a block of tokens.
 *
 * One workgroup per (head j, token t) of the fused qkv row; every branch below depends
 * only on the group ids and on info[], so the whole workgroup takes it together and the
 * norm's barriers stay in uniform control flow:
 *   - t >= n, or a position p = info[0] + t at or past n_ctx (or wrapped past 2^32):
 *     the workgroup writes nothing at all, q included (attention reads no such token);
 *   - v heads: a bit-for-bit copy of the head into vcache row p;
 *   - q and k heads: pass 1 (with qk_norm) is kn_rms_scale, the same f32 sum of squares
 *     and scale as kn_rmsnorm_heads; pass 2 gives each invocation rope pairs i = lid,
 *     lid + wg, ..: it loads x[a], x[b], norms them ((x * scale) * w, rounded to dtype,
 *     the oracle's rounding point), rotates in f32 and stores the pair rounded, in place
 *     for q, to kcache row p for k. Dims past n_rot are normed (or, for k, copied) by a
 *     third strided loop. An element is read and written by one invocation, and pass 1's
 *     reads all precede the barrier, so rewriting q in place races with nothing.
 * Angles are kn_rope's, step for step: theta_0 = p, theta_{i+1} = theta_i * theta_scale
 * by repeated f32 multiplication (each invocation carries its chain from one pair to its
 * next, so it never multiplies more than n_rot / 2 times), then the oracle's options,
 * angle = freq_scale * (theta / factor_i) (the factor first; each one f32 rounding), then
 * kn_sincos (reduction by pi/2 in four parts, f32 polynomials: about an ulp). The divide is the
 * device's: Vulkan allows 2.5 ulp, where the oracle's is correctly rounded.
 * Indices are u32: n_max * (n_head + 2 * n_head_kv) * head_dim must stay below 2^32 (the
 * caller's block size; not known here), n_ctx * kv_dim is checked. */
#include "kernels/kn_common.h"

#include <math.h>

typedef struct qk_build {
    ir_kernel *k;
    const rt_caps *c;
    uint32_t wg, head_dim, n_rot;
    bool neox, qk_norm, factors;
    float eps, theta_scale, freq_scale;
    ir_buf qkv, freqs;
    ir_type f32, dt;
    ir_val p; /* the token's position (u32) */
} qk_build;

/* x[src + d] as f32, normed and rounded to dtype with qk_norm. */
static ir_val load_normed(const qk_build *b, ir_val src, ir_val d, ir_buf w, ir_val scale) {
    ir_kernel *k = b->k;
    ir_val x = ir_convert(k, ir_load(k, b->qkv, ir_bin(k, IR_OP_ADD, src, d), 1), b->f32);
    if (!b->qk_norm) return x;
    ir_val y = ir_bin(k, IR_OP_MUL, ir_bin(k, IR_OP_MUL, x, scale), ir_convert(k, ir_load(k, w, d, 1), b->f32));
    return ir_convert(k, ir_convert(k, y, b->dt), b->f32);
}

/* One q or k head at qkv[src ..]: norm (with w), rope, stored at dst[dst_base ..]. */
static void head(const qk_build *b, ir_val src, ir_buf dst, ir_val dst_base, ir_buf w, bool in_place,
                 const char *shm) {
    ir_kernel *k = b->k;
    uint32_t half = b->n_rot / 2;
    ir_val lid = ir_id(k, IR_ID_LOCAL, 0), zero = ir_const_u32(k, 0);
    ir_val scale = b->qk_norm ? kn_rms_scale(k, b->c, b->wg, b->qkv, src, b->head_dim, b->eps, shm) : IR_NONE;

    /* pairs lid, lid + wg, ..; carried: theta_at and at, the chain's last step */
    ir_val init[2] = {ir_convert(k, b->p, b->f32), zero};
    ir_for *l = ir_for_begin(k, lid, ir_const_u32(k, half), ir_const_u32(k, b->wg), 2, init);
    ir_val i = ir_for_iv(l);
    ir_val th = kn_rope_theta(k, ir_for_arg(l, 0), ir_for_arg(l, 1), i, b->theta_scale);
    ir_val ang = th;
    if (b->factors) ang = kn_fdiv(k, ang, ir_convert(k, ir_load(k, b->freqs, i, 1), b->f32));
    if (b->freq_scale != 1.0f) ang = ir_bin(k, IR_OP_MUL, ir_const_f32(k, b->freq_scale), ang);
    ir_val cs, sn;
    kn_sincos(k, ang, &sn, &cs);
    ir_val ia = b->neox ? i : ir_bin(k, IR_OP_MUL, i, ir_const_u32(k, 2));
    ir_val ib = ir_bin(k, IR_OP_ADD, ia, ir_const_u32(k, b->neox ? half : 1));
    ir_val x0 = load_normed(b, src, ia, w, scale), x1 = load_normed(b, src, ib, w, scale);
    ir_val o0 = ir_bin(k, IR_OP_SUB, ir_bin(k, IR_OP_MUL, x0, cs), ir_bin(k, IR_OP_MUL, x1, sn));
    ir_val o1 = ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_MUL, x0, sn), ir_bin(k, IR_OP_MUL, x1, cs));
    ir_store(k, dst, ir_bin(k, IR_OP_ADD, dst_base, ia), ir_convert(k, o0, b->dt));
    ir_store(k, dst, ir_bin(k, IR_OP_ADD, dst_base, ib), ir_convert(k, o1, b->dt));
    ir_val next[2] = {th, i};
    ir_for_end(k, l, next);

    /* dims past n_rot: normed, or copied to the cache; q without a norm keeps them as they are */
    if (b->n_rot == b->head_dim || (in_place && !b->qk_norm)) return;
    ir_for *tl = ir_for_begin(k, ir_bin(k, IR_OP_ADD, lid, ir_const_u32(k, b->n_rot)), ir_const_u32(k, b->head_dim),
                              ir_const_u32(k, b->wg), 0, NULL);
    ir_val d = ir_for_iv(tl);
    ir_val y = b->qk_norm ? ir_convert(k, load_normed(b, src, d, w, scale), b->dt)
                          : ir_load(k, b->qkv, ir_bin(k, IR_OP_ADD, src, d), 1);
    ir_store(k, dst, ir_bin(k, IR_OP_ADD, dst_base, d), y);
    ir_for_end(k, tl, NULL);
}

ir_kernel *kn_qk_prep(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, const kn_rope_opts *rope,
                      bool qk_norm, float eps, uint32_t n_ctx, ir_scalar dtype, char *err, size_t errlen) {
    char why[256];
    if (kn_check_dtype(c, dtype, why, sizeof why)) {
        kn_fail(err, errlen, "kn_qk_prep: %s", why);
        return NULL;
    }
    if (!rope) {
        kn_fail(err, errlen, "kn_qk_prep: no rope options");
        return NULL;
    }
    uint32_t n_rot = rope->n_rot;
    uint64_t kv_dim = (uint64_t)n_head_kv * head_dim, row = ((uint64_t)n_head + 2ull * n_head_kv) * head_dim;
    if (n_head == 0 || n_head_kv == 0 || head_dim == 0 || n_ctx == 0 || n_head % n_head_kv || n_rot == 0 ||
        n_rot % 2 || n_rot > head_dim || !(rope->base > 0.0f) || !isfinite(rope->base) ||
        !(rope->freq_scale > 0.0f) || !isfinite(rope->freq_scale) || (qk_norm && (!(eps >= 0.0f) || !isfinite(eps))) ||
        row > UINT32_MAX || (uint64_t)n_ctx * kv_dim > UINT32_MAX) {
        kn_fail(err, errlen,
                "kn_qk_prep: bad shape (heads %u / %u kv, head_dim %u, n_rot %u, base %g, freq_scale %g, eps %g, "
                "n_ctx %u; n_head a multiple of n_head_kv, n_rot even and <= head_dim, u32 indices: n_ctx * kv_dim "
                "< 2^32)",
                n_head, n_head_kv, head_dim, n_rot, (double)rope->base, (double)rope->freq_scale, (double)eps, n_ctx);
        return NULL;
    }
    ir_kernel *k = kn_create("kn_qk_prep", err, errlen);
    if (!k) return NULL;
    qk_build b = {.k = k, .c = c, .head_dim = head_dim, .n_rot = n_rot, .neox = rope->neox, .qk_norm = qk_norm,
                  .factors = rope->freq_factors, .eps = eps, .freq_scale = rope->freq_scale,
                  .theta_scale = powf(rope->base, -2.0f / (float)n_rot)};
    b.qkv = ir_param_buffer(k, "qkv", dtype, IR_READ | IR_WRITE);
    ir_buf kc = ir_param_buffer(k, "kcache", dtype, IR_WRITE), vc = ir_param_buffer(k, "vcache", dtype, IR_WRITE);
    ir_buf info = ir_param_buffer(k, "info", IR_U32, IR_READ);
    ir_buf qn = 0, kn = 0;
    if (qk_norm) qn = ir_param_buffer(k, "q_norm", dtype, IR_READ), kn = ir_param_buffer(k, "k_norm", dtype, IR_READ);
    if (b.factors) b.freqs = ir_param_buffer(k, "freqs", dtype, IR_READ);
    ir_buffer_extent_per_group(k, b.qkv, 1, row); /* token t is grid row y */
    ir_buffer_extent(k, kc, n_ctx * kv_dim);
    ir_buffer_extent(k, vc, n_ctx * kv_dim);
    ir_buffer_extent(k, info, 2);
    if (qk_norm) ir_buffer_extent(k, qn, head_dim), ir_buffer_extent(k, kn, head_dim);
    if (b.factors) ir_buffer_extent(k, b.freqs, n_rot / 2);

    /* about one pair (plus the dims past n_rot, or one vector of a v head) per
     * invocation, at least a subgroup: the smallest power of two covering that */
    uint32_t v = kn_vec_width(head_dim), items = n_rot / 2 + (head_dim - n_rot);
    if (head_dim / v > items) items = head_dim / v;
    if (items < c->subgroup_size) items = c->subgroup_size;
    if (items > 256) items = 256;
    b.wg = kn_workgroup(c, 2 * items - 1);
    ir_set_workgroup(k, b.wg, 1, 1);
    b.f32 = ir_t_scalar(k, IR_F32), b.dt = ir_t_scalar(k, dtype);

    ir_val j = ir_id(k, IR_ID_GROUP, 0), t = ir_id(k, IR_ID_GROUP, 1);
    ir_val p0 = ir_load(k, info, ir_const_u32(k, 0), 1), n = ir_load(k, info, ir_const_u32(k, 1), 1);
    b.p = ir_bin(k, IR_OP_ADD, p0, t);
    /* per workgroup: a token of the block at a position inside the cache (p < p0: wrapped) */
    ir_val ok = ir_bin(k, IR_OP_AND, ir_compare(k, IR_LT, t, n),
                       ir_bin(k, IR_OP_AND, ir_compare(k, IR_GE, b.p, p0),
                              ir_compare(k, IR_LT, b.p, ir_const_u32(k, n_ctx))));
    ir_if *live = ir_if_begin(k, ok, 0);
    ir_val hd = ir_const_u32(k, head_dim);
    ir_val src = ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_MUL, t, ir_const_u32(k, (uint32_t)row)),
                        ir_bin(k, IR_OP_MUL, j, hd));
    ir_val cache_row = ir_bin(k, IR_OP_MUL, b.p, ir_const_u32(k, (uint32_t)kv_dim));

    ir_if *is_q = ir_if_begin(k, ir_compare(k, IR_LT, j, ir_const_u32(k, n_head)), 0);
    head(&b, src, b.qkv, src, qn, true, "ss_q");
    ir_if_else(k, is_q, NULL);
    ir_val kvh = ir_bin(k, IR_OP_SUB, j, ir_const_u32(k, n_head));
    ir_if *is_k = ir_if_begin(k, ir_compare(k, IR_LT, kvh, ir_const_u32(k, n_head_kv)), 0);
    head(&b, src, kc, ir_bin(k, IR_OP_ADD, cache_row, ir_bin(k, IR_OP_MUL, kvh, hd)), kn, false, "ss_k");
    ir_if_else(k, is_k, NULL);
    /* v head: vectors copied as they are */
    ir_val vh = ir_bin(k, IR_OP_SUB, kvh, ir_const_u32(k, n_head_kv));
    ir_val vdst = ir_bin(k, IR_OP_ADD, cache_row, ir_bin(k, IR_OP_MUL, vh, hd));
    ir_for *cp = ir_for_begin(k, ir_bin(k, IR_OP_MUL, ir_id(k, IR_ID_LOCAL, 0), ir_const_u32(k, v)), hd,
                              ir_const_u32(k, b.wg * v), 0, NULL);
    ir_val col = ir_for_iv(cp);
    ir_store(k, vc, ir_bin(k, IR_OP_ADD, vdst, col), ir_load(k, b.qkv, ir_bin(k, IR_OP_ADD, src, col), v));
    ir_for_end(k, cp, NULL);
    ir_if_end(k, is_k, NULL);
    ir_if_end(k, is_q, NULL);
    ir_if_end(k, live, NULL);
    return kn_finish(k, err, errlen);
}
