/* The decode step's attention: the KV-cache store and one token's attention over the
 * cached positions 0..pos.
 *
 * kn_kv_store copies the token's k and v rows into row pos of the layer's caches, bit
 * for bit (no conversion: the values are already the dtype the contract stores).
 *
 * Decode attention runs in two launches (flash decoding), so that a step's few heads
 * still fill a large GPU: kn_attn_decode's workgroup (h, s) takes query head h and the
 * s-th of n_split equal runs of the positions 0..pos, and walks its run in blocks of
 * keys_per_block (the workgroup size) with an online softmax, so any n_ctx works with
 * 2 * keys_per_block floats of workgroup memory:
 *   phase 1: invocation i scores position blk + i, s = (q . k) * scale in f32 (products of
 *            two 16-bit values are exact, so only the summation order can differ from the
 *            oracle's loop); every invocation then reads the block's scores and takes
 *            their max in the same order, so all agree on m_new bit for bit without a
 *            reduction tree; e_i = exp(s_i - m_new) is written back (0 past the run);
 *   phase 2: every invocation sums the block's e_j in order into l, and, for the dims of
 *            head_dim it owns, acc_d = acc_d * alpha + sum_j e_j * v[blk + j][d], where
 *            alpha = exp(m_old - m_new) rescales what earlier blocks summed.
 * It leaves (m, l, acc) of its run in f32. kn_attn_merge then takes, per head, the runs'
 * maximum M and out_d = sum_s acc_s,d * exp(m_s - M) / sum_s l_s * exp(m_s - M), rounded
 * to dtype once (with one run, exactly acc_d / l). The oracle instead normalises each
 * weight (e_p / sum) before the product; the two differ by a few f32 roundings per term
 * (see tests/test_kernels_attn.c for the bound).
 *
 * The batched pair (kn_attn_decode_batch, kn_attn_merge_batch) does the same for a step's
 * tokens of several sequences at once: token b's query is row b of q (q_stride apart), its
 * position and sequence are tokpos[2b], tokpos[2b + 1], and its keys are rows seq * n_ctx
 * + 0..pos of one pool of n_seq caches; grid y takes the token (decode: b * n_split + s).
 *
 * kn_attn_decode_merged is either decode in one launch: after its partials each workgroup
 * fences and counts itself in (an atomic per head and token); the last of a head's n_split
 * merges them with kn_attn_merge's code (merge_runs) and sets the count back to zero. Its
 * prep form also does kn_qk_prep's work for the token (kn_qk.h): each workgroup norms and
 * ropes its q head and kv head into workgroup memory, scores the token's own position
 * from there (its cache row is this launch's to write: one workgroup per kv head, the one
 * whose run holds the position, stores it). Measured faster on Vulkan, slower on CUDA
 * (plan/plan_kernels.c's plan_attn_merged_on). */
#include "base/error.h"
#include "kernels/kn_common.h"
#include "kernels/kn_qk.h"

#include <math.h>

ir_kernel *kn_kv_store(const rt_caps *c, uint32_t kv_dim, uint32_t n_ctx, ir_scalar dtype, uint32_t *groups_x,
                       kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (kv_dim == 0 || n_ctx == 0 || (uint64_t)n_ctx * kv_dim > UINT32_MAX) {
        kiln_fail(err, KILN_ERR_INVALID,
                  "kn_kv_store: bad shape (kv_dim %u, n_ctx %u; u32 indices: n_ctx * kv_dim < 2^32)", kv_dim, n_ctx);
        return NULL;
    }
    kx k = {kn_create("kn_kv_store", err), c};
    if (!k.ir) return NULL;
    /* token t of the launch is grid row y */
    ir_buf kb = kx_buffer_per_group(k, "k", dtype, IR_READ, 1, kv_dim);
    ir_buf vb = kx_buffer_per_group(k, "v", dtype, IR_READ, 1, kv_dim);
    ir_buf kc = kx_buffer(k, "kcache", dtype, IR_WRITE, (uint64_t)n_ctx * kv_dim);
    ir_buf vc = kx_buffer(k, "vcache", dtype, IR_WRITE, (uint64_t)n_ctx * kv_dim);
    ir_buf pb = kx_buffer(k, "pos", IR_U32, IR_READ, 1);
    uint32_t wg = kn_workgroup(c, 256), v = kn_vec_width(kv_dim), n_vec = kv_dim / v;
    kx_workgroup(k, wg);

    /* invocation i copies the i-th vector of the row; token t of the launch (group y) goes
     * to row pos[0] + t. A position that wrapped past 2^32 or lies at or past n_ctx writes
     * nothing (rows * kv_dim would otherwise land inside the cache). */
    ir_val i = kx_global(k), t = kx_group(k, 1);
    ir_val p0 = kx_load_c(k, pb, 0), p = kx_add(k, p0, t);
    ir_val in_cache = kn_in_cache(k, p, p0, n_ctx);
    ir_if *in = kx_if(k, kx_and(k, kx_lt_c(k, i, n_vec), in_cache));
    ir_val col = kx_mul_c(k, i, v), kvd = kx_u32(k, kv_dim);
    ir_val src = kx_add(k, kx_mul(k, t, kvd), col);
    ir_val dst = kx_add(k, kx_mul(k, p, kvd), col);
    kx_store(k, kc, dst, kx_load(k, kb, src, v));
    kx_store(k, vc, dst, kx_load(k, vb, src, v));
    kx_end_if(k, in);
    if (groups_x) *groups_x = (n_vec + wg - 1) / wg;
    return kn_finish(k.ir, err);
}

uint32_t kn_attn_splits(const rt_caps *c, uint32_t n_head, uint32_t n_ctx) {
    uint32_t want = c && c->compute_units ? 2 * c->compute_units : 1, sp = 1;
    while (sp < 64 && (uint64_t)sp * n_head < want && sp * 16u < n_ctx) sp *= 2;
    return sp;
}

/* The run of positions split s covers: [start, end) of 0..n_keys, chunk = ceil(n_keys /
 * n_split) (so the runs in use are the first ceil(n_keys / chunk)). */
static ir_val run_chunk(kx k, ir_val n_keys, uint32_t n_split) {
    ir_val splits = kx_u32(k, n_split);
    return kx_div(k, kx_add_c(k, n_keys, n_split - 1), splits);
}

/* Where a launch's token b finds its query, keys and partials: the single-token kernels'
 * (batch 0: pos[0], one cache) or the batched ones' (tokpos, a pool of n_seq caches). */
typedef struct attn_rows {
    uint32_t batch, n_seq, q_stride; /* batch 0: one token */
    const kn_pages *pg;              /* or NULL: unpaged */
    bool merged;                     /* the decode merges its runs itself (kn_attn_decode_merged) */
    const kn_attn_more *prep;        /* and prepares its token's heads (more->rope), or NULL */
} attn_rows;

typedef struct token_at {
    ir_val b;        /* the token (0 for one token) */
    ir_val pos;      /* its position as loaded */
    ir_val row0;     /* its sequence's first cache row (seq * n_ctx; unpaged) */
    ir_val tab0;     /* its sequence's first page table entry (seq * stride; paged) */
    ir_val pos_ok;   /* it has keys: its position (and sequence) inside the cache */
    ir_val n_keys;   /* keys 0..pos, 0 without */
} token_at;

/* keys 0..pos of token b (none when pos is past the cache, or the sequence past the pool:
 * then nothing is written) */
static token_at token_of(kx k, ir_buf pb, const attn_rows *r, uint32_t n_ctx, ir_val b) {
    token_at t = {.b = b};
    ir_val none = kx_u32(k, 0);
    if (!r->batch) {
        ir_val pos = kx_load_c(k, pb, 0);
        t.pos = pos;
        t.tab0 = none;
        t.pos_ok = kx_lt_c(k, pos, n_ctx);
        t.row0 = none;
        t.n_keys = kx_select(k, t.pos_ok, kx_add_c(k, pos, 1), none);
        return t;
    }
    ir_val at = kx_mul_c(k, b, 2);
    ir_val pos = kx_load(k, pb, at, 1);
    ir_val seq = kx_load(k, pb, kx_add_c(k, at, 1), 1);
    t.pos = pos;
    ir_val seq_ok = kx_lt_c(k, seq, r->n_seq);
    t.pos_ok = kx_and(k, kx_lt_c(k, pos, n_ctx), seq_ok);
    t.row0 = kx_select(k, seq_ok, kx_mul_c(k, seq, n_ctx), none);
    if (r->pg) t.tab0 = kx_select(k, seq_ok, kx_mul_c(k, seq, r->pg->stride), none);
    t.n_keys = kx_select(k, t.pos_ok, kx_add_c(k, pos, 1), none);
    return t;
}

static int attn_shape_ok(const char *who, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t n_ctx,
                         uint32_t n_split, kiln_err *err) {
    if (n_head == 0 || n_head_kv == 0 || n_head % n_head_kv || head_dim == 0 || n_ctx == 0 || n_split == 0 ||
        n_split > 1024 || (uint64_t)n_ctx * n_head_kv * head_dim > UINT32_MAX ||
        (uint64_t)n_head * n_split * (head_dim + 2) > UINT32_MAX) {
        kiln_fail(err, KILN_ERR_INVALID,
                  "%s: bad shape (heads %u / %u kv, head_dim %u, n_ctx %u, %u splits; n_head a multiple of n_head_kv, "
                  "1..1024 splits, u32 indices: n_ctx * kv_dim < 2^32)",
                  who, n_head, n_head_kv, head_dim, n_ctx, n_split);
        return -1;
    }
    return 0;
}

/* Rows of the caches a kernel reaches: one cache, or the pool. */
static uint64_t cache_rows(const attn_rows *r, uint32_t n_ctx) {
    if (r->pg) return (uint64_t)r->pg->rows * r->pg->n_pages;
    return (uint64_t)n_ctx * (r->batch ? r->n_seq : 1);
}

/* cache: the kernel reads the caches (the decode launch; the merge reads only partials) */
static int rows_ok(const char *who, const attn_rows *r, uint32_t n_head, uint32_t head_dim, uint32_t n_ctx,
                   uint32_t n_split, bool cache, kiln_err *err) {
    if (!r->batch) return 0;
    uint64_t q_dim = (uint64_t)n_head * head_dim;
    if (r->n_seq == 0 || r->q_stride < q_dim || r->batch > 65535 ||
        (uint64_t)r->batch * r->q_stride > UINT32_MAX ||
        (cache && !r->pg && (uint64_t)r->n_seq * n_ctx * head_dim * n_head > UINT32_MAX) ||
        (r->pg && (uint64_t)r->n_seq * r->pg->stride > UINT32_MAX) ||
        (uint64_t)r->batch * n_head * n_split * (head_dim + 2) > UINT32_MAX)
        return kiln_fail(err, KILN_ERR_INVALID,
                         "%s: bad batch (%u tokens of %u sequences, q_stride %u; q_stride >= n_head * head_dim, u32 "
                         "indices)",
                         who, r->batch, r->n_seq, r->q_stride);
    return 0;
}

/* What the merge of a head's runs reads and writes: the partials, the output, the token,
 * the head's (b * n_head + h), the shapes, and its workgroup arrays (n_split floats each). */
typedef struct merge_io {
    ir_buf pa, ob;
    token_at tk;
    ir_val bh;
    uint32_t n_split, head_dim, wg, per;
    ir_scalar dtype;
    ir_shm sh_m, sh_a, sh_l;
    ir_val gate; /* a bool: this workgroup merges (IR_NONE: always) */
} merge_io;

/* Combines the runs of head bh into out (kn_attn_merge's body; the merged decode's tail,
 * where a workgroup without the gate walks no runs and stores nothing, but still meets the
 * barriers, which stay in uniform control flow). */
static void merge_runs(kx k, const merge_io *m) {
    uint32_t n_split = m->n_split, head_dim = m->head_dim, wg = m->wg, per = m->per;
    ir_val u0 = kx_u32(k, 0), u1 = kx_u32(k, 1), f0 = kx_f32(k, 0.0f);
    ir_val lid = kx_local(k), stride = kx_u32(k, head_dim + 2);
    ir_val pos_ok = m->tk.pos_ok, n_keys = m->tk.n_keys;
    /* runs in use: ceil(n_keys / chunk) (none without keys; chunk kept >= 1 for the divide) */
    ir_val chunk = kx_max(k, run_chunk(k, n_keys, n_split), u1);
    ir_val used = kx_div(k, kx_add(k, n_keys, kx_sub(k, chunk, u1)), chunk);
    if (m->gate != IR_NONE) {
        used = kx_select(k, m->gate, used, u0);
        pos_ok = kx_and(k, pos_ok, m->gate);
    }
    ir_val hbase = kx_mul_c(k, m->bh, n_split * (head_dim + 2));
    ir_val wgc = kx_u32(k, wg), s;
    ir_shm sh_m = m->sh_m, sh_a = m->sh_a, sh_l = m->sh_l;
    ir_buf pa = m->pa;

    ir_for *fm = kx_for(k, lid, used, wgc, &s);
    ir_val rb = kx_add(k, hbase, kx_mul(k, s, stride));
    kx_shm_store(k, sh_m, s, kx_load(k, pa, rb, 1));
    kx_shm_store(k, sh_l, s, kx_load(k, pa, kx_add(k, rb, u1), 1));
    kx_end_for(k, fm);
    kx_barrier(k);
    /* M, read in one order by all (max is exact) */
    ir_val ninf = kx_f32(k, -INFINITY);
    ir_for *ml = ir_for_begin(k.ir, u0, used, u1, 1, &ninf);
    ir_val mx = kx_max(k, ir_for_arg(ml, 0), kx_shm_load(k, sh_m, ir_for_iv(ml), 1));
    ir_for_end(k.ir, ml, &mx);
    ir_val M = ir_for_result(ml, 0);
    ir_for *fa = kx_for(k, lid, used, wgc, &s);
    kx_shm_store(k, sh_a, s, kn_exp(k, kx_sub(k, kx_shm_load(k, sh_m, s, 1), M)));
    kx_end_for(k, fa);
    kx_barrier(k);
    /* L = sum_s l_s * a_s, runs in order */
    ir_for *fl = ir_for_begin(k.ir, u0, used, u1, 1, &f0);
    s = ir_for_iv(fl);
    ir_val a_s = kx_shm_load(k, sh_a, s, 1);
    ir_val ls = kx_fma(k, kx_shm_load(k, sh_l, s, 1), a_s, ir_for_arg(fl, 0));
    ir_for_end(k.ir, fl, &ls);
    ir_val l = ir_for_result(fl, 0);
    /* acc_d = sum_s acc_s,d * a_s, runs in order, four runs' loads in flight at a time: a
     * step past the last run reads the last again with weight 0 (acc + x * 0 == acc) */
    ir_val dim[64], ldim[64], init[64];
    for (uint32_t r = 0; r < per; r++) {
        dim[r] = kx_add_c(k, lid, r * wg);
        ir_val two = kx_u32(k, 2); /* acc_s,d at 2 + d of the run's part */
        ldim[r] = kx_add(k, kx_min_c(k, dim[r], head_dim - 1), two);
        init[r] = f0;
    }
    ir_val last = kx_sub(k, kx_max(k, used, u1), u1);
    ir_for *sl = ir_for_begin(k.ir, u0, used, kx_u32(k, 4), per, init);
    ir_val nx[64], wv[4], rbs[4];
    for (uint32_t u = 0; u < 4; u++) {
        ir_val run = kx_add_c(k, ir_for_iv(sl), u);
        ir_val in = kx_lt(k, run, used), clamped = kx_min(k, run, last);
        wv[u] = kx_select(k, in, kx_shm_load(k, sh_a, clamped, 1), f0);
        rbs[u] = kx_add(k, hbase, kx_mul(k, clamped, stride));
    }
    for (uint32_t r = 0; r < per; r++) {
        ir_val av[4];
        for (uint32_t u = 0; u < 4; u++) av[u] = kx_load(k, pa, kx_add(k, rbs[u], ldim[r]), 1);
        ir_val acc = ir_for_arg(sl, r);
        for (uint32_t u = 0; u < 4; u++) acc = kx_fma(k, av[u], wv[u], acc);
        nx[r] = acc;
    }
    ir_for_end(k.ir, sl, nx);
    /* out_d = acc_d / L, rounded once */
    for (uint32_t r = 0; r < per; r++) {
        ir_if *f = kx_if(k, kx_and(k, pos_ok, kx_lt_c(k, dim[r], head_dim)));
        ir_val o = kx_as(k, kn_fdiv(k, ir_for_result(sl, r), l), m->dtype);
        kx_store(k, m->ob, kx_idx(k, m->bh, head_dim, dim[r]), o);
        kx_end_if(k, f);
    }
}

/* After a workgroup's partials: true in the last of head bh's n_split workgroups to count
 * in, which then sees every run's partials (each invocation fences its stores before the
 * count, the last fences again before its loads) and leaves the count zero for the next
 * launch. One atomic a workgroup; the answer reaches all its invocations through
 * workgroup memory. */
static ir_val last_to_count(kx k, ir_buf cnt, ir_val bh, uint32_t n_split) {
    ir_shm flag = kx_shared(k, "last", IR_U32, 1);
    ir_val u0 = kx_u32(k, 0);
    ir_fence(k.ir);
    kx_barrier(k);
    ir_if *one = kx_if(k, kx_eq(k, kx_local(k), u0));
    ir_val last = kx_eq_c(k, ir_atomic(k.ir, IR_ATOMIC_ADD, false, cnt, bh, kx_u32(k, 1)), n_split - 1);
    kx_shm_store(k, flag, u0, kx_select(k, last, kx_u32(k, 1), u0));
    ir_if *reset = kx_if(k, last);
    ir_atomic(k.ir, IR_ATOMIC_XCHG, false, cnt, bh, u0);
    kx_end_if(k, reset);
    kx_end_if(k, one);
    kx_barrier(k);
    ir_val gate = kx_ne(k, kx_shm_load(k, flag, u0, 1), u0);
    ir_fence(k.ir);
    return gate;
}

/* Where a score's operand comes from: buf[at + d] (dtype) or the workgroup array shm's
 * f32 (shm nonzero: q_s, k_s of the prepared heads). */
typedef struct score_src {
    ir_buf buf;
    ir_val at;
    ir_shm shm;
} score_src;

static ir_val score_load(kx k, const score_src *s, ir_val d, uint32_t v) {
    if (s->shm) return kx_shm_load(k, s->shm, d, v);
    return kx_convert(k, kx_load(k, s->buf, kx_add(k, s->at, d), v), kx_t(k, IR_F32, v));
}

/* (q . key) * scale in f32, v dims a step (products of two 16-bit values are exact) */
static ir_val score(kx k, const score_src *q, const score_src *key, uint32_t head_dim, uint32_t v, float scale) {
    ir_val z[4], f0 = kx_f32(k, 0.0f);
    for (uint32_t i = 0; i < v; i++) z[i] = f0;
    ir_val zero = v == 1 ? f0 : kx_vec(k, z, v);
    ir_for *dl = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, head_dim), kx_u32(k, v), 1, &zero);
    ir_val d = ir_for_iv(dl);
    ir_val acc = kx_fma(k, score_load(k, q, d, v), score_load(k, key, d, v), ir_for_arg(dl, 0)); /* fma == mul + add */
    ir_for_end(k.ir, dl, &acc);
    return kx_mul(k, kn_lane_sum(k, ir_for_result(dl, 0), v), kx_f32(k, scale));
}

/* The prepared token's k and v heads (k_s, v_s) into its cache row, by the one workgroup
 * that `writer` names (the kv head's first q head, the run holding the position); nothing
 * for a token without keys or (paged) a page past the pool, as kn_qk_prep. */
static void store_new_kv(kx k, const kn_pages *pg, ir_buf tab, const token_at *tk, ir_buf kc, ir_buf vc, ir_shm k_s,
                         ir_shm v_s, ir_val kvbase, uint32_t kv_dim, uint32_t head_dim, uint32_t wg, ir_scalar dt,
                         ir_val writer) {
    ir_val ok = kx_and(k, writer, tk->pos_ok), row;
    if (pg) {
        ir_val page = kn_page_of(k, pg, tab, tk->tab0, kx_select(k, tk->pos_ok, tk->pos, kx_u32(k, 0)));
        ok = kx_and(k, ok, kx_lt_c(k, page, pg->n_pages));
        row = kn_page_row(k, pg, page, tk->pos);
    } else {
        row = tk->pos;
    }
    ir_if *w = kx_if(k, ok);
    ir_val base = kx_add(k, kx_mul_c(k, row, kv_dim), kvbase), d;
    ir_for *l = kx_for(k, kx_local(k), kx_u32(k, head_dim), kx_u32(k, wg), &d);
    ir_val at = kx_add(k, base, d);
    kx_store(k, kc, at, kx_as(k, kx_shm_load(k, k_s, d, 1), dt));
    kx_store(k, vc, at, kx_as(k, kx_shm_load(k, v_s, d, 1), dt));
    kx_end_for(k, l);
    kx_end_if(k, w);
}

/* about one invocation per dim of the head (so phase 2 keeps them busy), at least 64
 * positions per block of keys_per_block = wg */
static uint32_t decode_wg(const rt_caps *c, uint32_t head_dim) { return kn_workgroup(c, head_dim > 64 ? head_dim : 64); }

static ir_kernel *decode(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t n_ctx,
                         uint32_t n_split, const attn_rows *rows, ir_scalar dtype, uint32_t groups[2], kiln_err *err) {
    const char *name = rows->merged ? (rows->batch ? "kn_attn_decode_batch_merged" : "kn_attn_decode_merged")
                                    : (rows->batch ? "kn_attn_decode_batch" : "kn_attn_decode");
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (attn_shape_ok(name, n_head, n_head_kv, head_dim, n_ctx, n_split, err) ||
        rows_ok(name, rows, n_head, head_dim, n_ctx, n_split, true, err) ||
        kn_pages_check(rows->pg, (uint64_t)n_head_kv * head_dim, name, err))
        return NULL;
    kx k = {kn_create(name, err), c};
    if (!k.ir) return NULL;
    kn_launch_early(k); /* a short kernel: the next may start (kn_early.c) */
    const kn_pages *pg = rows->pg;
    uint32_t nb = rows->batch ? rows->batch : 1;
    uint64_t cache_len = cache_rows(rows, n_ctx) * n_head_kv * head_dim;
    const kn_attn_more *prep = rows->prep;
    uint64_t row = (uint64_t)(n_head + 2 * n_head_kv) * head_dim; /* a raw qkv row (prep) */
    uint64_t q_len = rows->batch ? (uint64_t)rows->batch * rows->q_stride : prep ? row : (uint64_t)n_head * head_dim;
    ir_buf qb = kx_buffer(k, prep ? "qkv" : "q", dtype, IR_READ, q_len);
    ir_buf kc = kx_buffer(k, "kcache", dtype, prep ? IR_READ | IR_WRITE : IR_READ, cache_len);
    ir_buf vc = kx_buffer(k, "vcache", dtype, prep ? IR_READ | IR_WRITE : IR_READ, cache_len);
    ir_buf ob = kx_buffer(k, "part", IR_F32, rows->merged ? IR_READ | IR_WRITE : IR_WRITE,
                          (uint64_t)nb * n_head * n_split * (head_dim + 2));
    ir_buf pb = rows->batch ? kx_buffer(k, "tokpos", IR_U32, IR_READ, 2ull * nb) : kx_buffer(k, "pos", IR_U32, IR_READ, 1);
    ir_buf tab = pg ? kx_buffer(k, "pages", IR_U32, IR_READ, (uint64_t)pg->stride * (rows->batch ? rows->n_seq : 1)) : 0;
    kn_qk_token qt = {0};
    if (prep) {
        qt = (kn_qk_token){prep->rope, prep->qk_norm, prep->eps, n_head, n_head_kv, head_dim, 0, dtype, qb};
        if (prep->qk_norm) {
            qt.qn = kx_buffer(k, "q_norm", dtype, IR_READ, head_dim);
            qt.kn = kx_buffer(k, "k_norm", dtype, IR_READ, head_dim);
        }
        if (prep->rope->freq_factors) qt.freqs = kx_buffer(k, "freqs", dtype, IR_READ, prep->rope->n_rot / 2);
    }
    uint32_t wg = decode_wg(c, head_dim), keys_per_block = wg;
    uint32_t per = (head_dim + wg - 1) / wg; /* dims each invocation owns in phase 2 */
    kx_workgroup(k, wg);
    if (per > 64) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "kn_attn_decode: head_dim %u too large for a workgroup of %u", head_dim,
                  wg);
        ir_kernel_destroy(k.ir);
        return NULL;
    }
    ir_shm sh_s = kx_shared(k, "scores", IR_F32, keys_per_block);
    ir_shm sh_e = kx_shared(k, "weights", IR_F32, keys_per_block);
    ir_shm sh_r = pg ? kx_shared(k, "rows", IR_U32, keys_per_block) : 0; /* the block's cache rows (paged) */
    uint32_t v = kn_vec_width(head_dim), kv_dim = n_head_kv * head_dim;
    float scale = 1.0f / sqrtf((float)head_dim); /* the oracle's, computed the same way */

    ir_val u0 = kx_u32(k, 0), u1 = kx_u32(k, 1), f0 = kx_f32(k, 0.0f);
    ir_val ninf = kx_f32(k, -INFINITY);
    /* workgroup (h, s): query head h, split s (batched: (h, b * n_split + s), token b); kv head kvh */
    ir_val lid = kx_local(k), h = kx_group(k, 0), gy = kx_group(k, 1);
    ir_val b = rows->batch ? kx_div_c(k, gy, n_split) : kx_u32(k, 0);
    ir_val sp = rows->batch ? kx_rem_c(k, gy, n_split) : gy;
    token_at tk = token_of(k, pb, rows, n_ctx, b);
    ir_val kvh = kx_div_c(k, h, n_head / n_head_kv);
    ir_val qbase = kx_mul_c(k, h, head_dim), kvd = kx_u32(k, kv_dim), kvbase = kx_mul_c(k, kvh, head_dim);
    if (rows->batch) { /* token b's row of q; its sequence's rows of the pool */
        qbase = kx_add(k, kx_mul_c(k, b, rows->q_stride), qbase);
        if (!pg) kvbase = kx_add(k, kx_mul(k, tk.row0, kvd), kvbase);
    }
    ir_val n_keys = tk.n_keys;
    ir_val chunk = run_chunk(k, n_keys, n_split);
    ir_val start = kx_mul(k, sp, chunk);
    ir_val end = kx_min(k, n_keys, kx_add(k, start, chunk));
    ir_shm q_s = 0, k_s = 0, v_s = 0;
    if (prep) { /* the token's q head h and kv head kvh, as kn_qk_prep makes them */
        qt.wg = wg;
        q_s = kx_shared(k, "q_head", IR_F32, head_dim), k_s = kx_shared(k, "k_head", IR_F32, head_dim);
        v_s = kx_shared(k, "v_head", IR_F32, head_dim);
        ir_val src = rows->batch ? kx_mul_c(k, b, rows->q_stride) : u0;
        kn_qk_token_heads(k, &qt, tk.pos, src, h, kvh, q_s, k_s, v_s);
        store_new_kv(k, pg, tab, &tk, kc, vc, k_s, v_s, kvbase, kv_dim, head_dim, wg, dtype,
                     kx_and(k, kx_eq_c(k, kx_rem_c(k, h, n_head / n_head_kv), 0),
                            kx_and(k, kx_ge(k, tk.pos, start), kx_lt(k, tk.pos, end))));
    }

    /* the dims this invocation owns: d_r = lid + r * wg, clamped for the loads so an
     * invocation past head_dim reads valid memory and only skips its store */
    ir_val dim[64], ldim[64];
    for (uint32_t r = 0; r < per; r++) {
        dim[r] = kx_add_c(k, lid, r * wg);
        ldim[r] = kx_add(k, kvbase, kx_min_c(k, dim[r], head_dim - 1));
    }

    /* carried over blocks: m, l, acc[per] */
    ir_val init[2 + 64];
    init[0] = ninf, init[1] = f0;
    for (uint32_t r = 0; r < per; r++) init[2 + r] = f0;
    ir_for *blk = ir_for_begin(k.ir, start, end, kx_u32(k, keys_per_block), 2 + per, init);
    ir_val b0 = ir_for_iv(blk), m_old = ir_for_arg(blk, 0), l_old = ir_for_arg(blk, 1);

    /* phase 1: this invocation's score s = (q . k_p) * scale, -inf past the run */
    ir_val p = kx_add(k, b0, lid);
    ir_val valid = kx_lt(k, p, end);
    /* its cache row (paged: of the run's last position past the run, so the table is read
     * inside the context; stored with the weights for phase 2, after the barrier that ends
     * the previous block's reads) */
    ir_val prow = pg ? kn_cache_row(k, pg, tab, tk.tab0, IR_NONE, kx_min(k, p, kx_sub(k, end, u1))) : p;
    ir_if *sc = ir_if_begin(k.ir, valid, 1);
    {
        ir_val krow = kx_add(k, kx_mul(k, prow, kvd), kvbase), s;
        score_src q = {qb, qbase, q_s}, key = {kc, krow, 0};
        if (prep) { /* the token's own key from k_s: its cache row is this launch's to write */
            ir_if *own = ir_if_begin(k.ir, kx_eq(k, p, tk.pos), 1);
            score_src mine = {0, u0, k_s};
            s = score(k, &q, &mine, head_dim, v, scale);
            ir_if_else(k.ir, own, &s);
            s = score(k, &q, &key, head_dim, v, scale);
            ir_if_end(k.ir, own, &s);
            s = ir_if_result(own, 0);
        } else {
            s = score(k, &q, &key, head_dim, v, scale);
        }
        ir_if_else(k.ir, sc, &s);
    }
    ir_if_end(k.ir, sc, &ninf);
    ir_val s = ir_if_result(sc, 0);
    kx_shm_store(k, sh_s, lid, s);
    kx_barrier(k);

    /* the block's max, read in one order by all (max is exact, so any order agrees) */
    ir_for *ml = ir_for_begin(k.ir, u0, kx_u32(k, keys_per_block), u1, 1, &m_old);
    ir_val m_new = kx_max(k, ir_for_arg(ml, 0), kx_shm_load(k, sh_s, ir_for_iv(ml), 1));
    ir_for_end(k.ir, ml, &m_new);
    m_new = ir_for_result(ml, 0); /* finite: the block holds at least one key */
    /* alpha = exp(m_old - m_new); the first block has nothing to rescale (and exp(-inf)
     * is left to no device) */
    ir_val first = kx_eq(k, b0, start);
    ir_val alpha = kx_select(k, first, f0, kn_exp(k, kx_sub(k, kx_select(k, first, m_new, m_old), m_new)));
    ir_if *ev = ir_if_begin(k.ir, valid, 1);
    ir_val e = kn_exp(k, kx_sub(k, s, m_new));
    ir_if_else(k.ir, ev, &e);
    ir_if_end(k.ir, ev, &f0);
    kx_shm_store(k, sh_e, lid, ir_if_result(ev, 0));
    if (pg) kx_shm_store(k, sh_r, lid, prow);
    kx_barrier(k);

    /* phase 2: the block's sum l += e_j and the weighted v rows acc_d += e_j v_j[d],
     * positions in order */
    ir_val cnt = kx_min_c(k, kx_sub(k, end, b0), keys_per_block);
    ir_val init2[1 + 64];
    init2[0] = f0;
    for (uint32_t r = 0; r < per; r++) init2[1 + r] = f0;
    ir_for *pl = ir_for_begin(k.ir, u0, cnt, u1, 1 + per, init2);
    ir_val j = ir_for_iv(pl), w = kx_shm_load(k, sh_e, j, 1);
    ir_val vrow = kx_mul(k, pg ? kx_shm_load(k, sh_r, j, 1) : kx_add(k, b0, j), kvd);
    ir_val nx2[1 + 64], vv[64];
    nx2[0] = kx_add(k, ir_for_arg(pl, 0), w);
    ir_if *own = prep ? ir_if_begin(k.ir, kx_eq(k, kx_add(k, b0, j), tk.pos), per) : NULL;
    if (own) { /* the token's own value from v_s (uniform: j is every invocation's) */
        for (uint32_t r = 0; r < per; r++) vv[r] = kx_shm_load(k, v_s, kx_min_c(k, dim[r], head_dim - 1), 1);
        ir_if_else(k.ir, own, vv);
    }
    for (uint32_t r = 0; r < per; r++) vv[r] = kx_as(k, kx_load(k, vc, kx_add(k, vrow, ldim[r]), 1), IR_F32);
    if (own) {
        ir_if_end(k.ir, own, vv);
        for (uint32_t r = 0; r < per; r++) vv[r] = ir_if_result(own, r);
    }
    for (uint32_t r = 0; r < per; r++) nx2[1 + r] = kx_fma(k, w, vv[r], ir_for_arg(pl, 1 + r));
    ir_for_end(k.ir, pl, nx2);

    /* what earlier blocks summed, rescaled: l = l * alpha + block sum, acc likewise */
    ir_val nx[2 + 64];
    nx[0] = m_new;
    nx[1] = kx_fma(k, l_old, alpha, ir_for_result(pl, 0));
    for (uint32_t r = 0; r < per; r++) nx[2 + r] = kx_fma(k, ir_for_arg(blk, 2 + r), alpha, ir_for_result(pl, 1 + r));
    ir_for_end(k.ir, blk, nx);

    /* the run's (m, l, acc) at part[((b * n_head + h) * n_split + s) * (head_dim + 2)];
     * nothing for an empty run (the merge skips it) */
    ir_val part_len = kx_u32(k, head_dim + 2);
    ir_val bh = kx_add(k, kx_mul_c(k, b, n_head), h);
    ir_val base = kx_mul(k, kx_idx(k, bh, n_split, sp), part_len);
    ir_val live = kx_lt(k, start, end);
    ir_if *w0 = kx_if(k, kx_and(k, live, kx_eq(k, lid, u0)));
    kx_store(k, ob, base, ir_for_result(blk, 0));
    kx_store(k, ob, kx_add(k, base, u1), ir_for_result(blk, 1));
    kx_end_if(k, w0);
    for (uint32_t r = 0; r < per; r++) {
        ir_if *f = kx_if(k, kx_and(k, live, kx_lt_c(k, dim[r], head_dim)));
        kx_store(k, ob, kx_add(k, base, kx_add_c(k, dim[r], 2)), ir_for_result(blk, 2 + r));
        kx_end_if(k, f);
    }
    if (rows->merged) {
        merge_io m = {.pa = ob, .tk = tk, .bh = bh, .n_split = n_split, .head_dim = head_dim, .wg = wg, .per = per,
                      .dtype = dtype};
        ir_buf cnt = kx_buffer(k, "count", IR_U32, IR_READ | IR_WRITE, (uint64_t)nb * n_head);
        m.ob = kx_buffer(k, "out", dtype, IR_WRITE, (uint64_t)nb * n_head * head_dim);
        m.sh_m = kx_shared(k, "run_max", IR_F32, n_split), m.sh_a = kx_shared(k, "run_w", IR_F32, n_split);
        m.sh_l = kx_shared(k, "run_sum", IR_F32, n_split);
        m.gate = last_to_count(k, cnt, bh, n_split);
        merge_runs(k, &m);
    }
    groups[0] = n_head, groups[1] = n_split * nb;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_attn_decode_paged(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                                const kn_pages *pg, uint32_t n_split, ir_scalar dtype, uint32_t groups[2],
                                kiln_err *err) {
    if (!pg) return kiln_fail(err, KILN_ERR_INVALID, "kn_attn_decode_paged: no paging"), NULL;
    if (kn_pages_check(pg, (uint64_t)n_head_kv * head_dim, "kn_attn_decode_paged", err)) return NULL;
    attn_rows one = {.pg = pg};
    return decode(c, n_head, n_head_kv, head_dim, pg->rows * pg->stride, n_split, &one, dtype, groups, err);
}

ir_kernel *kn_attn_decode_batch_paged(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                                      const kn_pages *pg, uint32_t n_split, uint32_t n_seq, uint32_t batch,
                                      uint32_t q_stride, ir_scalar dtype, uint32_t groups[2], kiln_err *err) {
    if (!pg || !batch) return kiln_fail(err, KILN_ERR_INVALID, "kn_attn_decode_batch_paged: no paging or tokens"), NULL;
    if (kn_pages_check(pg, (uint64_t)n_head_kv * head_dim, "kn_attn_decode_batch_paged", err)) return NULL;
    attn_rows r = {batch, n_seq, q_stride, pg};
    return decode(c, n_head, n_head_kv, head_dim, pg->rows * pg->stride, n_split, &r, dtype, groups, err);
}

ir_kernel *kn_attn_decode(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t n_ctx,
                          uint32_t n_split, ir_scalar dtype, uint32_t groups[2], kiln_err *err) {
    attn_rows one = {0};
    return decode(c, n_head, n_head_kv, head_dim, n_ctx, n_split, &one, dtype, groups, err);
}

ir_kernel *kn_attn_decode_batch(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                                uint32_t n_ctx, uint32_t n_split, uint32_t n_seq, uint32_t batch, uint32_t q_stride,
                                ir_scalar dtype, uint32_t groups[2], kiln_err *err) {
    attn_rows r = {batch, n_seq, q_stride};
    if (!batch) return kiln_fail(err, KILN_ERR_INVALID, "kn_attn_decode_batch: no tokens"), NULL;
    return decode(c, n_head, n_head_kv, head_dim, n_ctx, n_split, &r, dtype, groups, err);
}

bool kn_attn_prep_ok(const rt_caps *c, uint32_t head_dim, const kn_rope_opts *rope, bool qk_norm, float eps) {
    kn_qk_token t = {rope, qk_norm, eps, 1, 1, head_dim, decode_wg(c, head_dim), IR_BF16, 0};
    return c && head_dim && kn_qk_token_ok(c, &t);
}

ir_kernel *kn_attn_decode_merged(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                                 uint32_t n_ctx, uint32_t n_split, const kn_attn_more *more, ir_scalar dtype,
                                 uint32_t groups[2], kiln_err *err) {
    kn_attn_more none = {0};
    if (!more) more = &none;
    const kn_pages *pg = more->pg;
    attn_rows r = {more->batch, more->n_seq, more->q_stride, pg, true, more->rope ? more : NULL};
    if (pg && kn_pages_check(pg, (uint64_t)n_head_kv * head_dim, "kn_attn_decode_merged", err)) return NULL;
    if (r.prep) {
        kn_qk_token t = {more->rope, more->qk_norm, more->eps, n_head, n_head_kv, head_dim, decode_wg(c, head_dim),
                         dtype, 0};
        uint64_t row = ((uint64_t)n_head + 2ull * n_head_kv) * head_dim;
        if (!kn_qk_token_ok(c, &t) || (more->batch && more->q_stride < row) || row > UINT32_MAX)
            return kiln_fail(err, KILN_ERR_INVALID,
                             "kn_attn_decode_merged: no subgroup sums, or bad rope or norm (n_rot %u of head_dim %u, "
                             "base %g, freq_scale %g, eps %g) or q_stride %u under the qkv row %llu",
                             more->rope->n_rot, head_dim, (double)more->rope->base, (double)more->rope->freq_scale,
                             (double)more->eps, more->q_stride, (unsigned long long)row),
                   NULL;
    }
    return decode(c, n_head, n_head_kv, head_dim, pg ? pg->rows * pg->stride : n_ctx, n_split, &r, dtype, groups,
                  err);
}

static ir_kernel *merge(const rt_caps *c, uint32_t n_head, uint32_t head_dim, uint32_t n_ctx, uint32_t n_split,
                        const attn_rows *rows, ir_scalar dtype, uint32_t *groups_x, kiln_err *err) {
    const char *name = rows->batch ? "kn_attn_merge_batch" : "kn_attn_merge";
    if (kn_check_dtype(c, dtype, err)) return NULL;
    if (attn_shape_ok(name, n_head, 1, head_dim, n_ctx, n_split, err) ||
        rows_ok(name, rows, n_head, head_dim, n_ctx, n_split, false, err))
        return NULL;
    kx k = {kn_create(name, err), c};
    if (!k.ir) return NULL;
    kn_launch_early(k); /* a short kernel: the next may start (kn_early.c) */
    uint32_t nb = rows->batch ? rows->batch : 1;
    ir_buf pa = kx_buffer(k, "part", IR_F32, IR_READ, (uint64_t)nb * n_head * n_split * (head_dim + 2));
    ir_buf ob = kx_buffer(k, "out", dtype, IR_WRITE, (uint64_t)nb * n_head * head_dim);
    ir_buf pb = rows->batch ? kx_buffer(k, "tokpos", IR_U32, IR_READ, 2ull * nb) : kx_buffer(k, "pos", IR_U32, IR_READ, 1);
    uint32_t wg = kn_workgroup(c, head_dim > 32 ? head_dim : 32), per = (head_dim + wg - 1) / wg;
    kx_workgroup(k, wg);
    if (per > 64) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "kn_attn_merge: head_dim %u too large for a workgroup of %u", head_dim,
                  wg);
        ir_kernel_destroy(k.ir);
        return NULL;
    }
    /* the runs' maxima, then their weights exp(m_s - M) and sums l_s, in workgroup memory */
    merge_io m = {.pa = pa, .ob = ob, .n_split = n_split, .head_dim = head_dim, .wg = wg, .per = per, .dtype = dtype,
                  .gate = IR_NONE};
    m.sh_m = kx_shared(k, "run_max", IR_F32, n_split), m.sh_a = kx_shared(k, "run_w", IR_F32, n_split);
    m.sh_l = kx_shared(k, "run_sum", IR_F32, n_split);
    ir_val h = kx_group(k, 0);
    ir_val b = rows->batch ? kx_group(k, 1) : kx_u32(k, 0); /* the token: grid y */
    m.tk = token_of(k, pb, rows, n_ctx, b);
    m.bh = kx_add(k, kx_mul_c(k, b, n_head), h);
    merge_runs(k, &m);
    if (groups_x) *groups_x = n_head;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_attn_merge(const rt_caps *c, uint32_t n_head, uint32_t head_dim, uint32_t n_ctx, uint32_t n_split,
                         ir_scalar dtype, uint32_t *groups_x, kiln_err *err) {
    attn_rows one = {0};
    return merge(c, n_head, head_dim, n_ctx, n_split, &one, dtype, groups_x, err);
}

ir_kernel *kn_attn_merge_batch(const rt_caps *c, uint32_t n_head, uint32_t head_dim, uint32_t n_ctx, uint32_t n_split,
                               uint32_t n_seq, uint32_t batch, ir_scalar dtype, uint32_t *groups_x, kiln_err *err) {
    attn_rows r = {batch, n_seq, n_head * head_dim};
    if (!batch) return kiln_fail(err, KILN_ERR_INVALID, "kn_attn_merge_batch: no tokens"), NULL;
    return merge(c, n_head, head_dim, n_ctx, n_split, &r, dtype, groups_x, err);
}
