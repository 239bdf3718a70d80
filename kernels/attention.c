/* The decode step's attention: the KV-cache store and one token's attention over the
 * cached positions 0..pos.
 *
 * kn_kv_store copies the token's k and v rows into row pos of the layer's caches, bit
 * for bit (no conversion: the values are already the dtype the contract stores).
 *
 * kn_attn_decode, one workgroup per query head, walks the positions in blocks of B (the
 * workgroup size) with an online softmax, so any n_ctx works with B floats of workgroup
 * memory:
 *   phase 1: invocation i scores position blk + i, s = (q . k) * scale in f32 (products of
 *            two 16-bit values are exact, so only the summation order can differ from the
 *            oracle's loop); every invocation then reads the block's B scores and takes
 *            their max in the same order, so all agree on m_new bit for bit without a
 *            reduction tree; e_i = exp(s_i - m_new) is written back (0 past the last key);
 *   phase 2: every invocation sums the block's e_j in order into l, and, for the dims of
 *            head_dim it owns, acc_d = acc_d * alpha + sum_j e_j * v[blk + j][d], where
 *            alpha = exp(m_old - m_new) rescales what earlier blocks summed.
 * At the end out_d = acc_d / l, rounded to dtype once. The oracle instead normalises each
 * weight (e_p / sum) before the product; the two differ by a few f32 roundings per term
 * (see tests/test_kernels_attn.c for the bound). */
#include "kn_common.h"

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

ir_kernel *kn_attn_decode(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t n_ctx,
                          ir_scalar dtype, uint32_t *groups_x, char *err, size_t errlen) {
    if (kn_check_dtype(c, dtype, err, errlen)) return NULL;
    if (n_head == 0 || n_head_kv == 0 || n_head % n_head_kv || head_dim == 0 || n_ctx == 0 ||
        (uint64_t)n_ctx * n_head_kv * head_dim > UINT32_MAX || (uint64_t)n_head * head_dim > UINT32_MAX) {
        kn_fail(err, errlen,
                "kn_attn_decode: bad shape (heads %u / %u kv, head_dim %u, n_ctx %u; n_head a multiple of n_head_kv, "
                "u32 indices: n_ctx * kv_dim < 2^32)",
                n_head, n_head_kv, head_dim, n_ctx);
        return NULL;
    }
    ir_kernel *k = kn_create("kn_attn_decode", err, errlen);
    if (!k) return NULL;
    ir_buf qb = ir_param_buffer(k, "q", dtype, IR_READ), kc = ir_param_buffer(k, "kcache", dtype, IR_READ);
    ir_buf vc = ir_param_buffer(k, "vcache", dtype, IR_READ), ob = ir_param_buffer(k, "out", dtype, IR_WRITE);
    ir_buf pb = ir_param_buffer(k, "pos", IR_U32, IR_READ);
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
    ir_type f32 = ir_t_scalar(k, IR_F32), fv = v == 1 ? f32 : ir_t_vector(k, IR_F32, v), dt = ir_t_scalar(k, dtype);
    float scale = 1.0f / sqrtf((float)head_dim); /* the oracle's, computed the same way */

    ir_val u0 = ir_const_u32(k, 0), u1 = ir_const_u32(k, 1), f0 = ir_const_f32(k, 0.0f);
    ir_val ninf = ir_const_f32(k, -INFINITY);
    ir_val lid = ir_id(k, IR_ID_LOCAL, 0), h = ir_id(k, IR_ID_GROUP, 0);
    ir_val kvh = ir_bin(k, IR_OP_DIV, h, ir_const_u32(k, n_head / n_head_kv));
    ir_val qbase = ir_bin(k, IR_OP_MUL, h, ir_const_u32(k, head_dim));
    ir_val kvbase = ir_bin(k, IR_OP_MUL, kvh, ir_const_u32(k, head_dim));
    ir_val kvd = ir_const_u32(k, kv_dim);
    /* keys 0..pos; none when pos is past the cache (then nothing is written) */
    ir_val pos = ir_load(k, pb, u0, 1);
    ir_val pos_ok = ir_compare(k, IR_LT, pos, ir_const_u32(k, n_ctx));
    ir_val n_keys = ir_select(k, pos_ok, ir_bin(k, IR_OP_ADD, pos, u1), u0);

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
    ir_for *blk = ir_for_begin(k, u0, n_keys, ir_const_u32(k, B), 2 + per, init);
    ir_val b0 = ir_for_iv(blk), m_old = ir_for_arg(blk, 0), l_old = ir_for_arg(blk, 1);

    /* phase 1: this invocation's score */
    ir_val p = ir_bin(k, IR_OP_ADD, b0, lid);
    ir_val valid = ir_compare(k, IR_LT, p, n_keys);
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
    ir_val first = ir_compare(k, IR_EQ, b0, u0);
    ir_val alpha = ir_select(k, first, f0, kn_exp(k, ir_bin(k, IR_OP_SUB, ir_select(k, first, m_new, m_old), m_new)));
    ir_if *ev = ir_if_begin(k, valid, 1);
    ir_val e = kn_exp(k, ir_bin(k, IR_OP_SUB, s, m_new));
    ir_if_else(k, ev, &e);
    ir_if_end(k, ev, &f0);
    ir_shm_store(k, sh_e, lid, ir_if_result(ev, 0));
    ir_barrier(k);

    /* phase 2: the block's sum and the weighted v rows, positions in order */
    ir_val rem = ir_bin(k, IR_OP_SUB, n_keys, b0);
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

    /* out = acc / l, once rounded; nothing when there were no keys */
    ir_val l = ir_for_result(blk, 1);
    for (uint32_t r = 0; r < per; r++) {
        ir_val st = ir_bin(k, IR_OP_AND, pos_ok, ir_compare(k, IR_LT, dim[r], ir_const_u32(k, head_dim)));
        ir_if *f = ir_if_begin(k, st, 0);
        ir_val o = kn_fdiv(k, ir_for_result(blk, 2 + r), l);
        ir_store(k, ob, ir_bin(k, IR_OP_ADD, qbase, dim[r]), ir_convert(k, o, dt));
        ir_if_end(k, f, NULL);
    }
    if (groups_x) *groups_x = n_head;
    return kn_finish(k, err, errlen);
}
