/* The decode step's attention: the KV-cache store and one token's attention over the
 * cached positions 0..pos.
 *
 * kn_kv_store copies the token's k and v rows into row pos of the layer's caches, bit
 * for bit (no conversion: the values are already the dtype the contract stores).
 *
 * Decode attention runs in two launches (flash decoding), so that a step's few heads
 * still fill a large GPU: kn_attn_decode's workgroup (h, s) takes query head h and the
 * s-th of n_split equal runs of the positions 0..pos, and walks its run in blocks of B
 * (the workgroup size) with an online softmax, so any n_ctx works with B floats of
 * workgroup memory:
 *   phase 1: invocation i scores position blk + i, s = (q . k) * scale in f32 (products of
 *            two 16-bit values are exact, so only the summation order can differ from the
 *            oracle's loop); every invocation then reads the block's B scores and takes
 *            their max in the same order, so all agree on m_new bit for bit without a
 *            reduction tree; e_i = exp(s_i - m_new) is written back (0 past the run);
 *   phase 2: every invocation sums the block's e_j in order into l, and, for the dims of
 *            head_dim it owns, acc_d = acc_d * alpha + sum_j e_j * v[blk + j][d], where
 *            alpha = exp(m_old - m_new) rescales what earlier blocks summed.
 * It leaves (m, l, acc) of its run in f32. kn_attn_merge then takes, per head, the runs'
 * maximum M and out_d = sum_s acc_s,d * exp(m_s - M) / sum_s l_s * exp(m_s - M), rounded
 * to dtype once (with one run, exactly acc_d / l). The oracle instead normalises each
 * weight (e_p / sum) before the product; the two differ by a few f32 roundings per term
 * (see tests/test_kernels_attn.c for the bound). */
#include "kernels/kn_common.h"

#include <math.h>

ir_kernel *kn_kv_store(const rt_caps *c, uint32_t kv_dim, uint32_t n_ctx, ir_scalar dtype, uint32_t *groups_x,
                       char *err, size_t errlen) {
    if (kn_check_dtype(c, dtype, err, errlen)) return NULL;
    if (kv_dim == 0 || n_ctx == 0 || (uint64_t)n_ctx * kv_dim > UINT32_MAX) {
        kn_fail(err, errlen, "kn_kv_store: bad shape (kv_dim %u, n_ctx %u; u32 indices: n_ctx * kv_dim < 2^32)",
                kv_dim, n_ctx);
        return NULL;
    }
    ir_kernel *k = kn_create("kn_kv_store", err, errlen);
    if (!k) return NULL;
    ir_buf kb = ir_param_buffer(k, "k", dtype, IR_READ), vb = ir_param_buffer(k, "v", dtype, IR_READ);
    ir_buf kc = ir_param_buffer(k, "kcache", dtype, IR_WRITE), vc = ir_param_buffer(k, "vcache", dtype, IR_WRITE);
    ir_buf pb = ir_param_buffer(k, "pos", IR_U32, IR_READ);
    ir_buffer_extent_per_group(k, kb, 1, kv_dim); /* token t of the launch is grid row y */
    ir_buffer_extent_per_group(k, vb, 1, kv_dim);
    ir_buffer_extent(k, kc, (uint64_t)n_ctx * kv_dim);
    ir_buffer_extent(k, vc, (uint64_t)n_ctx * kv_dim);
    ir_buffer_extent(k, pb, 1);
    uint32_t wg = kn_workgroup(c, 256), v = kn_vec_width(kv_dim), nvec = kv_dim / v;
    ir_set_workgroup(k, wg, 1, 1);

    /* invocation i copies the i-th vector of the row; token t of the launch (group y) goes
     * to row pos[0] + t. A position that wrapped past 2^32 or lies at or past n_ctx writes
     * nothing (rows * kv_dim would otherwise land inside the cache). */
    ir_val i = ir_id(k, IR_ID_GLOBAL, 0), t = ir_id(k, IR_ID_GROUP, 1);
    ir_val p0 = ir_load(k, pb, ir_const_u32(k, 0), 1), p = ir_bin(k, IR_OP_ADD, p0, t);
    ir_val ok = ir_bin(k, IR_OP_AND, ir_compare(k, IR_LT, i, ir_const_u32(k, nvec)),
                       ir_bin(k, IR_OP_AND, ir_compare(k, IR_GE, p, p0), ir_compare(k, IR_LT, p, ir_const_u32(k, n_ctx))));
    ir_if *in = ir_if_begin(k, ok, 0);
    ir_val col = ir_bin(k, IR_OP_MUL, i, ir_const_u32(k, v)), kvd = ir_const_u32(k, kv_dim);
    ir_val src = ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_MUL, t, kvd), col);
    ir_val dst = ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_MUL, p, kvd), col);
    ir_store(k, kc, dst, ir_load(k, kb, src, v));
    ir_store(k, vc, dst, ir_load(k, vb, src, v));
    ir_if_end(k, in, NULL);
    if (groups_x) *groups_x = (nvec + wg - 1) / wg;
    return kn_finish(k, err, errlen);
}

uint32_t kn_attn_splits(const rt_caps *c, uint32_t n_head, uint32_t n_ctx) {
    uint32_t want = c && c->compute_units ? 2 * c->compute_units : 1, sp = 1;
    while (sp < 64 && (uint64_t)sp * n_head < want && sp * 16u < n_ctx) sp *= 2;
    return sp;
}

/* The run of positions split s covers: [start, end) of 0..n_keys, chunk = ceil(n_keys /
 * n_split) (so the runs in use are the first ceil(n_keys / chunk)). */
static ir_val run_chunk(ir_kernel *k, ir_val n_keys, uint32_t n_split) {
    return ir_bin(k, IR_OP_DIV, ir_bin(k, IR_OP_ADD, n_keys, ir_const_u32(k, n_split - 1)), ir_const_u32(k, n_split));
}

/* keys 0..pos (none when pos is past the cache: then nothing is written) */
static ir_val keys_of(ir_kernel *k, ir_buf pb, uint32_t n_ctx, ir_val *pos_ok) {
    ir_val pos = ir_load(k, pb, ir_const_u32(k, 0), 1);
    *pos_ok = ir_compare(k, IR_LT, pos, ir_const_u32(k, n_ctx));
    return ir_select(k, *pos_ok, ir_bin(k, IR_OP_ADD, pos, ir_const_u32(k, 1)), ir_const_u32(k, 0));
}

static int attn_shape_ok(const char *who, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t n_ctx,
                         uint32_t n_split, char *err, size_t errlen) {
    if (n_head == 0 || n_head_kv == 0 || n_head % n_head_kv || head_dim == 0 || n_ctx == 0 || n_split == 0 ||
        n_split > 1024 || (uint64_t)n_ctx * n_head_kv * head_dim > UINT32_MAX ||
        (uint64_t)n_head * n_split * (head_dim + 2) > UINT32_MAX) {
        kn_fail(err, errlen,
                "%s: bad shape (heads %u / %u kv, head_dim %u, n_ctx %u, %u splits; n_head a multiple of n_head_kv, "
                "1..1024 splits, u32 indices: n_ctx * kv_dim < 2^32)",
                who, n_head, n_head_kv, head_dim, n_ctx, n_split);
        return -1;
    }
    return 0;
}

ir_kernel *kn_attn_decode(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t n_ctx,
                          uint32_t n_split, ir_scalar dtype, uint32_t groups[2], char *err, size_t errlen) {
    if (kn_check_dtype(c, dtype, err, errlen)) return NULL;
    if (attn_shape_ok("kn_attn_decode", n_head, n_head_kv, head_dim, n_ctx, n_split, err, errlen)) return NULL;
    ir_kernel *k = kn_create("kn_attn_decode", err, errlen);
    if (!k) return NULL;
    ir_buf qb = ir_param_buffer(k, "q", dtype, IR_READ), kc = ir_param_buffer(k, "kcache", dtype, IR_READ);
    ir_buf vc = ir_param_buffer(k, "vcache", dtype, IR_READ), ob = ir_param_buffer(k, "part", IR_F32, IR_WRITE);
    ir_buf pb = ir_param_buffer(k, "pos", IR_U32, IR_READ);
    ir_buffer_extent(k, qb, (uint64_t)n_head * head_dim);
    ir_buffer_extent(k, kc, (uint64_t)n_ctx * n_head_kv * head_dim);
    ir_buffer_extent(k, vc, (uint64_t)n_ctx * n_head_kv * head_dim);
    ir_buffer_extent(k, ob, (uint64_t)n_head * n_split * (head_dim + 2));
    ir_buffer_extent(k, pb, 1);
    /* about one invocation per dim of the head (so phase 2 keeps them busy), at least 64
     * positions per block; B = wg */
    uint32_t wg = kn_workgroup(c, head_dim > 64 ? head_dim : 64), B = wg;
    uint32_t per = (head_dim + wg - 1) / wg; /* dims each invocation owns in phase 2 */
    ir_set_workgroup(k, wg, 1, 1);
    if (per > 64) {
        kn_fail(err, errlen, "kn_attn_decode: head_dim %u too large for a workgroup of %u", head_dim, wg);
        ir_kernel_destroy(k);
        return NULL;
    }
    ir_shm sh_s = ir_shared_array(k, "scores", IR_F32, B), sh_e = ir_shared_array(k, "weights", IR_F32, B);
    uint32_t v = kn_vec_width(head_dim), kv_dim = n_head_kv * head_dim;
    ir_type f32 = ir_t_scalar(k, IR_F32), fv = v == 1 ? f32 : ir_t_vector(k, IR_F32, v);
    float scale = 1.0f / sqrtf((float)head_dim); /* the oracle's, computed the same way */

    ir_val u0 = ir_const_u32(k, 0), u1 = ir_const_u32(k, 1), f0 = ir_const_f32(k, 0.0f);
    ir_val ninf = ir_const_f32(k, -INFINITY);
    ir_val lid = ir_id(k, IR_ID_LOCAL, 0), h = ir_id(k, IR_ID_GROUP, 0), sp = ir_id(k, IR_ID_GROUP, 1);
    ir_val kvh = ir_bin(k, IR_OP_DIV, h, ir_const_u32(k, n_head / n_head_kv));
    ir_val qbase = ir_bin(k, IR_OP_MUL, h, ir_const_u32(k, head_dim));
    ir_val kvbase = ir_bin(k, IR_OP_MUL, kvh, ir_const_u32(k, head_dim));
    ir_val kvd = ir_const_u32(k, kv_dim);
    ir_val pos_ok, n_keys = keys_of(k, pb, n_ctx, &pos_ok);
    ir_val chunk = run_chunk(k, n_keys, n_split);
    ir_val start = ir_bin(k, IR_OP_MUL, sp, chunk);
    ir_val end = ir_bin(k, IR_OP_MIN, n_keys, ir_bin(k, IR_OP_ADD, start, chunk));

    /* the dims this invocation owns: d_r = lid + r * wg, clamped for the loads so an
     * invocation past head_dim reads valid memory and only skips its store */
    ir_val dim[64], ldim[64];
    for (uint32_t r = 0; r < per; r++) {
        dim[r] = ir_bin(k, IR_OP_ADD, lid, ir_const_u32(k, r * wg));
        ldim[r] = ir_bin(k, IR_OP_ADD, kvbase, ir_bin(k, IR_OP_MIN, dim[r], ir_const_u32(k, head_dim - 1)));
    }

    /* carried over blocks: m, l, acc[per] */
    ir_val init[2 + 64];
    init[0] = ninf, init[1] = f0;
    for (uint32_t r = 0; r < per; r++) init[2 + r] = f0;
    ir_for *blk = ir_for_begin(k, start, end, ir_const_u32(k, B), 2 + per, init);
    ir_val b0 = ir_for_iv(blk), m_old = ir_for_arg(blk, 0), l_old = ir_for_arg(blk, 1);

    /* phase 1: this invocation's score */
    ir_val p = ir_bin(k, IR_OP_ADD, b0, lid);
    ir_val valid = ir_compare(k, IR_LT, p, end);
    ir_if *sc = ir_if_begin(k, valid, 1);
    {
        ir_val z[4];
        for (uint32_t i = 0; i < v; i++) z[i] = f0;
        ir_val zero = v == 1 ? f0 : ir_vec(k, z, v);
        ir_val krow = ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_MUL, p, kvd), kvbase);
        ir_for *dl = ir_for_begin(k, u0, ir_const_u32(k, head_dim), ir_const_u32(k, v), 1, &zero);
        ir_val d = ir_for_iv(dl);
        ir_val qv = ir_convert(k, ir_load(k, qb, ir_bin(k, IR_OP_ADD, qbase, d), v), fv);
        ir_val kv = ir_convert(k, ir_load(k, kc, ir_bin(k, IR_OP_ADD, krow, d), v), fv);
        ir_val acc = ir_fma(k, qv, kv, ir_for_arg(dl, 0)); /* exact product: fma == mul + add */
        ir_for_end(k, dl, &acc);
        ir_val s = ir_bin(k, IR_OP_MUL, kn_lane_sum(k, ir_for_result(dl, 0), v), ir_const_f32(k, scale));
        ir_if_else(k, sc, &s);
    }
    ir_if_end(k, sc, &ninf);
    ir_val s = ir_if_result(sc, 0);
    ir_shm_store(k, sh_s, lid, s);
    ir_barrier(k);

    /* the block's max, read in one order by all (max is exact, so any order agrees) */
    ir_for *ml = ir_for_begin(k, u0, ir_const_u32(k, B), u1, 1, &m_old);
    ir_val m_new = ir_bin(k, IR_OP_MAX, ir_for_arg(ml, 0), ir_shm_load(k, sh_s, ir_for_iv(ml), 1));
    ir_for_end(k, ml, &m_new);
    m_new = ir_for_result(ml, 0); /* finite: the block holds at least one key */
    /* the first block has nothing to rescale (and exp(-inf) is left to no device) */
    ir_val first = ir_compare(k, IR_EQ, b0, start);
    ir_val alpha = ir_select(k, first, f0, kn_exp(k, ir_bin(k, IR_OP_SUB, ir_select(k, first, m_new, m_old), m_new)));
    ir_if *ev = ir_if_begin(k, valid, 1);
    ir_val e = kn_exp(k, ir_bin(k, IR_OP_SUB, s, m_new));
    ir_if_else(k, ev, &e);
    ir_if_end(k, ev, &f0);
    ir_shm_store(k, sh_e, lid, ir_if_result(ev, 0));
    ir_barrier(k);

    /* phase 2: the block's sum and the weighted v rows, positions in order */
    ir_val rem = ir_bin(k, IR_OP_SUB, end, b0);
    ir_val cnt = ir_bin(k, IR_OP_MIN, rem, ir_const_u32(k, B));
    ir_val init2[1 + 64];
    init2[0] = f0;
    for (uint32_t r = 0; r < per; r++) init2[1 + r] = f0;
    ir_for *pl = ir_for_begin(k, u0, cnt, u1, 1 + per, init2);
    ir_val j = ir_for_iv(pl), w = ir_shm_load(k, sh_e, j, 1);
    ir_val vrow = ir_bin(k, IR_OP_MUL, ir_bin(k, IR_OP_ADD, b0, j), kvd);
    ir_val nx2[1 + 64];
    nx2[0] = ir_bin(k, IR_OP_ADD, ir_for_arg(pl, 0), w);
    for (uint32_t r = 0; r < per; r++) {
        ir_val vv = ir_convert(k, ir_load(k, vc, ir_bin(k, IR_OP_ADD, vrow, ldim[r]), 1), f32);
        nx2[1 + r] = ir_fma(k, w, vv, ir_for_arg(pl, 1 + r));
    }
    ir_for_end(k, pl, nx2);

    ir_val nx[2 + 64];
    nx[0] = m_new;
    nx[1] = ir_fma(k, l_old, alpha, ir_for_result(pl, 0));
    for (uint32_t r = 0; r < per; r++) nx[2 + r] = ir_fma(k, ir_for_arg(blk, 2 + r), alpha, ir_for_result(pl, 1 + r));
    ir_for_end(k, blk, nx);

    /* the run's (m, l, acc) at part[(h * n_split + s) * (head_dim + 2)]; nothing for an
     * empty run (the merge skips it) */
    ir_val base = ir_bin(k, IR_OP_MUL, ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_MUL, h, ir_const_u32(k, n_split)), sp),
                         ir_const_u32(k, head_dim + 2));
    ir_val live = ir_compare(k, IR_LT, start, end);
    ir_if *w0 = ir_if_begin(k, ir_bin(k, IR_OP_AND, live, ir_compare(k, IR_EQ, lid, u0)), 0);
    ir_store(k, ob, base, ir_for_result(blk, 0));
    ir_store(k, ob, ir_bin(k, IR_OP_ADD, base, u1), ir_for_result(blk, 1));
    ir_if_end(k, w0, NULL);
    for (uint32_t r = 0; r < per; r++) {
        ir_val st = ir_bin(k, IR_OP_AND, live, ir_compare(k, IR_LT, dim[r], ir_const_u32(k, head_dim)));
        ir_if *f = ir_if_begin(k, st, 0);
        ir_store(k, ob, ir_bin(k, IR_OP_ADD, base, ir_bin(k, IR_OP_ADD, dim[r], ir_const_u32(k, 2))),
                 ir_for_result(blk, 2 + r));
        ir_if_end(k, f, NULL);
    }
    groups[0] = n_head, groups[1] = n_split;
    return kn_finish(k, err, errlen);
}

ir_kernel *kn_attn_merge(const rt_caps *c, uint32_t n_head, uint32_t head_dim, uint32_t n_ctx, uint32_t n_split,
                         ir_scalar dtype, uint32_t *groups_x, char *err, size_t errlen) {
    if (kn_check_dtype(c, dtype, err, errlen)) return NULL;
    if (attn_shape_ok("kn_attn_merge", n_head, 1, head_dim, n_ctx, n_split, err, errlen)) return NULL;
    ir_kernel *k = kn_create("kn_attn_merge", err, errlen);
    if (!k) return NULL;
    ir_buf pa = ir_param_buffer(k, "part", IR_F32, IR_READ), ob = ir_param_buffer(k, "out", dtype, IR_WRITE);
    ir_buf pb = ir_param_buffer(k, "pos", IR_U32, IR_READ);
    ir_buffer_extent(k, pa, (uint64_t)n_head * n_split * (head_dim + 2));
    ir_buffer_extent(k, ob, (uint64_t)n_head * head_dim);
    ir_buffer_extent(k, pb, 1);
    uint32_t wg = kn_workgroup(c, head_dim > 32 ? head_dim : 32), per = (head_dim + wg - 1) / wg;
    ir_set_workgroup(k, wg, 1, 1);
    if (per > 64) {
        kn_fail(err, errlen, "kn_attn_merge: head_dim %u too large for a workgroup of %u", head_dim, wg);
        ir_kernel_destroy(k);
        return NULL;
    }
    /* the runs' maxima, then their weights exp(m_s - M) and sums l_s, in workgroup memory */
    ir_shm sh_m = ir_shared_array(k, "run_max", IR_F32, n_split), sh_a = ir_shared_array(k, "run_w", IR_F32, n_split);
    ir_shm sh_l = ir_shared_array(k, "run_sum", IR_F32, n_split);
    ir_type dt = ir_t_scalar(k, dtype);
    ir_val u0 = ir_const_u32(k, 0), u1 = ir_const_u32(k, 1), f0 = ir_const_f32(k, 0.0f);
    ir_val lid = ir_id(k, IR_ID_LOCAL, 0), h = ir_id(k, IR_ID_GROUP, 0), stride = ir_const_u32(k, head_dim + 2);
    ir_val pos_ok, n_keys = keys_of(k, pb, n_ctx, &pos_ok);
    /* runs in use: ceil(n_keys / chunk) (none without keys; chunk kept >= 1 for the divide) */
    ir_val chunk = ir_bin(k, IR_OP_MAX, run_chunk(k, n_keys, n_split), u1);
    ir_val used = ir_bin(k, IR_OP_DIV, ir_bin(k, IR_OP_ADD, n_keys, ir_bin(k, IR_OP_SUB, chunk, u1)), chunk);
    ir_val hbase = ir_bin(k, IR_OP_MUL, h, ir_const_u32(k, n_split * (head_dim + 2)));
    ir_val wgc = ir_const_u32(k, wg);

    ir_for *fm = ir_for_begin(k, lid, used, wgc, 0, NULL);
    ir_val rb = ir_bin(k, IR_OP_ADD, hbase, ir_bin(k, IR_OP_MUL, ir_for_iv(fm), stride));
    ir_shm_store(k, sh_m, ir_for_iv(fm), ir_load(k, pa, rb, 1));
    ir_shm_store(k, sh_l, ir_for_iv(fm), ir_load(k, pa, ir_bin(k, IR_OP_ADD, rb, u1), 1));
    ir_for_end(k, fm, NULL);
    ir_barrier(k);
    /* M, read in one order by all (max is exact) */
    ir_val ninf = ir_const_f32(k, -INFINITY);
    ir_for *ml = ir_for_begin(k, u0, used, u1, 1, &ninf);
    ir_val mx = ir_bin(k, IR_OP_MAX, ir_for_arg(ml, 0), ir_shm_load(k, sh_m, ir_for_iv(ml), 1));
    ir_for_end(k, ml, &mx);
    ir_val M = ir_for_result(ml, 0);
    ir_for *fa = ir_for_begin(k, lid, used, wgc, 0, NULL);
    ir_shm_store(k, sh_a, ir_for_iv(fa), kn_exp(k, ir_bin(k, IR_OP_SUB, ir_shm_load(k, sh_m, ir_for_iv(fa), 1), M)));
    ir_for_end(k, fa, NULL);
    ir_barrier(k);
    /* L = sum_s l_s * a_s, runs in order */
    ir_for *fl = ir_for_begin(k, u0, used, u1, 1, &f0);
    ir_val ls = ir_fma(k, ir_shm_load(k, sh_l, ir_for_iv(fl), 1), ir_shm_load(k, sh_a, ir_for_iv(fl), 1),
                       ir_for_arg(fl, 0));
    ir_for_end(k, fl, &ls);
    ir_val l = ir_for_result(fl, 0);
    /* acc_d = sum_s acc_s,d * a_s, runs in order, four runs' loads in flight at a time: a
     * step past the last run reads the last again with weight 0 (acc + x * 0 == acc) */
    ir_val dim[64], ldim[64], init[64];
    for (uint32_t r = 0; r < per; r++) {
        dim[r] = ir_bin(k, IR_OP_ADD, lid, ir_const_u32(k, r * wg));
        ldim[r] = ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_MIN, dim[r], ir_const_u32(k, head_dim - 1)), ir_const_u32(k, 2));
        init[r] = f0;
    }
    ir_val last = ir_bin(k, IR_OP_SUB, ir_bin(k, IR_OP_MAX, used, u1), u1);
    ir_for *sl = ir_for_begin(k, u0, used, ir_const_u32(k, 4), per, init);
    ir_val nx[64], wv[4], rbs[4];
    for (uint32_t u = 0; u < 4; u++) {
        ir_val sidx = ir_bin(k, IR_OP_ADD, ir_for_iv(sl), ir_const_u32(k, u));
        ir_val in = ir_compare(k, IR_LT, sidx, used), sc = ir_bin(k, IR_OP_MIN, sidx, last);
        wv[u] = ir_select(k, in, ir_shm_load(k, sh_a, sc, 1), f0);
        rbs[u] = ir_bin(k, IR_OP_ADD, hbase, ir_bin(k, IR_OP_MUL, sc, stride));
    }
    for (uint32_t r = 0; r < per; r++) {
        ir_val av[4];
        for (uint32_t u = 0; u < 4; u++) av[u] = ir_load(k, pa, ir_bin(k, IR_OP_ADD, rbs[u], ldim[r]), 1);
        ir_val acc = ir_for_arg(sl, r);
        for (uint32_t u = 0; u < 4; u++) acc = ir_fma(k, av[u], wv[u], acc);
        nx[r] = acc;
    }
    ir_for_end(k, sl, nx);
    for (uint32_t r = 0; r < per; r++) {
        ir_val st = ir_bin(k, IR_OP_AND, pos_ok, ir_compare(k, IR_LT, dim[r], ir_const_u32(k, head_dim)));
        ir_if *f = ir_if_begin(k, st, 0);
        ir_val o = kn_fdiv(k, ir_for_result(sl, r), l);
        ir_store(k, ob, ir_bin(k, IR_OP_ADD, ir_bin(k, IR_OP_MUL, h, ir_const_u32(k, head_dim)), dim[r]),
                 ir_convert(k, o, dt));
        ir_if_end(k, f, NULL);
    }
    if (groups_x) *groups_x = n_head;
    return kn_finish(k, err, errlen);
}
