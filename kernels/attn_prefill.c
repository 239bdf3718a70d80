/* Prefill attention: causal attention of a block of query tokens over the KV cache, in
 * the style of flash attention, with f32 SIMT arithmetic (no cooperative matrices).
 *
 * A workgroup takes a tile of query rows: heads_per_tile query heads of one GQA group
 * (they share the kv head, so one K/V tile in workgroup memory serves all of them) times
 * tokens_per_tile consecutive tokens. Its q rows are staged once in workgroup memory. It
 * then walks the keys 0 .. (its last token's position) in tiles of keys_per_tile
 * positions, each tile in four steps separated by barriers:
 *   1. stage the K tile;
 *   2. scores: each invocation owns score_rows rows x score_keys keys and sums q . k over
 *      d in order (products of two 16-bit values are exact, so this is the oracle's sum
 *      bit for bit), times scale; keys past a row's position get -inf;
 *   3. the V tile overwrites the K tile while softmax_invs invocations per row run the
 *      online softmax on the row's keys_per_tile scores: m_new = max(m, tile max), alpha =
 *      exp(m - m_new) (0 on the first tile), e = exp(s - m_new) written back, l = l *
 *      alpha + sum e; the partial maxima and sums meet through subgroup shuffles
 *      (softmax_invs = 1 without);
 *   4. output: each invocation owns out_rows rows x out_words words of the rows x
 *      head_dim accumulator and does acc = acc * alpha + sum_k e_k v_k[d], keys in order.
 * At the end out = acc / l, rounded to dtype once. This is kn_attn_decode's arithmetic
 * (f32 scores, max subtracted, f32 sums, one division) with the rescale applied before
 * the tile's terms are added; tests/test_kernels_attn_prefill.c bounds the difference
 * from the oracle.
 *
 * The q and K/V tiles hold the 16-bit values two to a u32 word (a workgroup array of
 * bf16 would take 4 bytes an element without native bf16), unpacked with a shift or a
 * mask (bf16) or a conversion (f16, where the caps have f16 arithmetic; f32 tiles
 * otherwise): half the workgroup memory and half the shared-memory loads of f32 tiles,
 * which bound the inner loops. Tile rows are padded by one word so strided reads hit
 * distinct banks.
 *
 * Balance: the work of a token block grows with its position, so a workgroup takes two
 * blocks, b and nb - 1 - b (the longer first), and all workgroups do about the same work.
 * Tokens past n (or at positions at or past n_ctx) produce no output; a workgroup whose
 * tokens all do returns before any barrier. Keys are staged only below the block's last
 * valid position + 1, so nothing past the causal limit (or the cache) is read.
 *
 * Sizes: 32 rows and 32 keys per tile, 256 invocations where the caps allow: per
 * invocation 2 x 2 scores, 4 rows x 8 dims of output (head_dim 128), a row's softmax on
 * 8 invocations; the tiles take 8.1 (q) + 8.1 (K/V) + 4.1 (scores) KiB. Fewer rows, keys
 * or invocations where caps.shared_bytes or the workgroup limit ask for it (spec
 * minimum, head_dim 128: 32 rows, 16 keys, 128 invocations).
 *
 * Measured on the H200 (Vulkan, bf16, 512 tokens from position 0, qwen3-0.6b's 16 / 8
 * heads of 128): 67 us a layer, 1.9 ms for its 28 layers; qwen3-8b's 32 / 8: 114 us a
 * layer. f16 takes ~30% longer (its unpacking converts). Tried and slower: 64 keys per
 * tile (as fast for 0.6b, 15% slower for 8b), 128 invocations (20%), 16 or 64 rows
 * (40-70%), f32 tiles (~12%, at 128 invocations), one token block per workgroup (3%). */
#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/kn_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_S 64     /* scores per invocation */
#define MAX_O 256    /* output accumulators per invocation */
#define MAX_STAGE 64 /* staged vectors per invocation */

typedef struct cfg {
    uint32_t invocations;     /* per workgroup */
    uint32_t rows;            /* query rows of the tile: heads_per_tile x tokens_per_tile */
    uint32_t keys_per_tile;   /* keys (positions) of one K/V tile */
    uint32_t heads_per_tile;  /* query heads of the tile (of one kv head) */
    uint32_t tokens_per_tile; /* consecutive tokens of the tile (a token block) */
    /* scores: invocations across keys and across rows, and the keys and rows each takes */
    uint32_t score_key_invs, score_row_invs, score_keys, score_rows;
    /* output: invocations across a row's words and across rows, and the words and rows each takes */
    uint32_t out_word_invs, out_row_invs, out_words, out_rows;
    uint32_t softmax_invs;                   /* softmax invocations per row */
    uint32_t per_word;                       /* elements per tile word (2: packed 16-bit pairs, 1: f32) */
    uint32_t row_words;                      /* words per row of head_dim */
    uint32_t q_pitch, kv_pitch, score_pitch; /* row strides (words) of the q, K/V and score tiles */
    uint32_t load_lanes;                     /* elements per global load */
    uint32_t step_words;                     /* words per step of the score loop */
} cfg;

static uint32_t floor_pow2(uint32_t x) {
    uint32_t p = 1;
    while (p * 2 <= x) p *= 2;
    return p;
}

/* Fills g for tiles of `rows` rows and `keys` keys on at most max_inv invocations, for
 * group_size query heads per kv head; false when the caps cannot hold it. */
static bool plan(const rt_caps *c, uint32_t group_size, uint32_t hd, uint32_t lanes, uint32_t per_word, uint32_t rows,
                 uint32_t keys, uint32_t max_inv, cfg *g) {
    *g = (cfg){0};
    g->rows = rows, g->keys_per_tile = keys, g->load_lanes = lanes;
    g->per_word = per_word, g->row_words = hd / per_word;
    g->q_pitch = g->row_words + 1, g->kv_pitch = g->row_words + 1, g->score_pitch = keys + 1;
    g->step_words = per_word == 2 ? (g->row_words % 2 == 0 ? 2 : 1) : lanes;
    uint64_t words =
        (uint64_t)rows * g->q_pitch + (uint64_t)keys * g->kv_pitch + (uint64_t)rows * g->score_pitch + 2ull * rows;
    if (c->shared_bytes && 4 * words > c->shared_bytes) return false;
    uint32_t inv = kn_workgroup(c, max_inv);
    if (inv > rows * keys) inv = rows * keys;
    g->invocations = inv;
    /* heads sharing the tile: the largest power of two dividing the group, at most rows */
    g->heads_per_tile = 1;
    while (g->heads_per_tile * 2 <= rows && group_size % (g->heads_per_tile * 2) == 0) g->heads_per_tile *= 2;
    g->tokens_per_tile = rows / g->heads_per_tile;
    /* scores: about square micro-tiles */
    uint32_t per_inv = rows * keys / inv;
    g->score_keys = 1;
    while (g->score_keys * g->score_keys * 4 <= per_inv) g->score_keys *= 2;
    if (g->score_keys > keys) g->score_keys = keys;
    g->score_rows = per_inv / g->score_keys;
    if (g->score_rows > rows) g->score_rows = rows, g->score_keys = per_inv / rows;
    g->score_key_invs = keys / g->score_keys, g->score_row_invs = rows / g->score_rows;
    if (g->score_key_invs * g->score_row_invs != inv || g->score_rows * g->score_keys > MAX_S) return false;
    /* output: the widest word_invs (<= 32) that wastes at most 1/8 of the words, else the least waste */
    uint32_t rw = g->row_words, best = 0, best_cost = UINT32_MAX;
    for (uint32_t dx = 1; dx <= inv; dx *= 2) {
        if (inv / dx > rows) continue;
        uint32_t cost = dx * ((rw + dx - 1) / dx);
        if (dx <= 32 && cost * 8 <= rw * 9)
            best = dx, best_cost = 0;
        else if (best_cost && cost < best_cost)
            best = dx, best_cost = cost;
    }
    if (!best) return false;
    g->out_word_invs = best, g->out_row_invs = inv / best, g->out_words = (rw + best - 1) / best;
    g->out_rows = rows / g->out_row_invs;
    if (g->out_rows * g->out_words * per_word > MAX_O) return false;
    /* softmax: invocations per row within one subgroup, meeting through shuffles */
    g->softmax_invs = 1;
    if (c->subgroup_shuffle && c->subgroup_min > 1) {
        uint32_t wr = inv / rows;
        if (wr > c->subgroup_min) wr = c->subgroup_min;
        if (wr > keys) wr = keys;
        g->softmax_invs = floor_pow2(wr);
    }
    uint32_t stage = (rows > keys ? rows : keys) * (hd / lanes);
    return (stage + inv - 1) / inv <= MAX_STAGE;
}

/* The workgroups of tiles of `rows` rows over n_max tokens: heads_per_tile as plan() takes
 * it, two token blocks a workgroup. */
static uint32_t grid_of(uint32_t rows, uint32_t n_head, uint32_t group_size, uint32_t n_max) {
    uint32_t hpt = 1;
    while (hpt * 2 <= rows && group_size % (hpt * 2) == 0) hpt *= 2;
    uint32_t tpt = rows / hpt, nb = (n_max + tpt - 1) / tpt;
    return n_head / hpt * ((nb + 1) / 2);
}

/* The most rows a tile may take: 32, or for a short block (at most 64 tokens) fewer, until
 * the grid covers the compute units. A short block's 32-row tiles leave most of them idle
 * (qwen3-8b, 24 tokens: 24 workgroups on the H200's 132), and each invocation's chain of
 * score and output sums is as long as its rows. KILN_ATTN_SHORT=0 keeps 32 (measuring). */
static uint32_t short_rows(const rt_caps *c, uint32_t n_head, uint32_t group_size, uint32_t n_max) {
    uint32_t rows = 32;
    const char *e = getenv("KILN_ATTN_SHORT");
    if (n_max > 64 || !c->compute_units || (e && e[0] == '0' && !e[1])) return rows;
    while (rows > 4 && grid_of(rows, n_head, group_size, n_max) < c->compute_units) rows /= 2;
    return rows;
}

/* The builder's state. */
typedef struct kb {
    kx k;
    const cfg *g;
    ir_scalar dtype;
    uint32_t hd, q_stride, kv_dim, n_head;
    float scale;
    ir_buf qb, kc, vc, ob;
    ir_shm q_tile, kv_tile, score_tile;
    ir_shm alpha_tile, l_tile; /* each row's rescale alpha and, at the end, its sum l */
    ir_val lid, u0, f0, ninf;
    ir_val pos0, n_valid; /* the block's first position; tokens t < n_valid are stored */
    ir_val head0, kv_off; /* the workgroup's first query head; its kv head's offset in a cache row */
    const kn_pages *pg;   /* or NULL: unpaged */
    ir_buf tab;           /* paged: the sequence's page table */
} kb;

/* The per_word f32 values of a tile word. */
static void unpack(const kb *b, ir_val w, ir_val *out) {
    kx k = b->k;
    ir_type f32 = kx_t(k, IR_F32, 1);
    if (b->g->per_word == 1) {
        out[0] = w;
    } else if (b->dtype == IR_BF16) { /* a bf16 is the top half of its f32 */
        out[0] = kx_bitcast(k, kx_shl_c(k, w, 16), f32);
        out[1] = kx_bitcast(k, kx_and_c(k, w, 0xffff0000u), f32);
    } else {
        ir_val h2 = kx_bitcast(k, w, kx_t(k, IR_F16, 2));
        ir_val f2 = kx_convert(k, h2, kx_t(k, IR_F32, 2));
        out[0] = kx_lane(k, f2, 0), out[1] = kx_lane(k, f2, 1);
    }
}

/* The block's first token, and a K/V tile's first position and end (the rows of q and
 * K/V tiles are found from them). */
typedef struct rows {
    ir_val t0, b0, n_keys;
} rows;

/* Copies n_rows rows of hd values into a tile with row stride `pitch` words: vector i
 * (load_lanes elements; row i / (hd / load_lanes)) from buf at base(row) + column when
 * ok(row), else 0. */
typedef struct src {
    ir_buf buf;
    ir_val (*base)(const kb *b, const rows *w, ir_val row);
    ir_val (*ok)(const kb *b, const rows *w, ir_val row);
    const rows *w;
} src;

static void stage(const kb *b, ir_shm dst, uint32_t n_rows, uint32_t pitch, const src *s) {
    kx k = b->k;
    const cfg *g = b->g;
    uint32_t lanes = g->load_lanes, per_row = b->hd / lanes, n_vec = n_rows * per_row;
    uint32_t inv = g->invocations, reps = (n_vec + inv - 1) / inv;
    uint32_t words = lanes / g->per_word; /* per vector */
    ir_scalar ws = g->per_word == 2 ? IR_U32 : IR_F32;
    ir_type wv = kx_t(k, ws, words);
    ir_val zero = kx_splat(k, g->per_word == 2 ? b->u0 : b->f0, words);
    for (uint32_t c = 0; c < reps; c++) {
        ir_val idx = kx_add_c(k, b->lid, c * inv);
        ir_if *in = NULL;
        if ((c + 1) * inv > n_vec) in = kx_if(k, kx_lt_c(k, idx, n_vec));
        ir_val row = kx_div_c(k, idx, per_row);
        ir_val vcol = kx_rem_c(k, idx, per_row);
        ir_if *ld = ir_if_begin(k.ir, s->ok(b, s->w, row), 1);
        ir_val col = kx_mul_c(k, vcol, lanes);
        ir_val v = kx_load(k, s->buf, kx_add(k, s->base(b, s->w, row), col), lanes);
        v = g->per_word == 2 ? kx_bitcast(k, v, wv) : kx_convert(k, v, wv); /* 16-bit pairs as words, or f32 */
        ir_if_else(k.ir, ld, &v);
        ir_if_end(k.ir, ld, &zero);
        kx_shm_store(k, dst, kx_idx(k, row, pitch, kx_mul_c(k, vcol, words)), ir_if_result(ld, 0));
        if (in) kx_end_if(k, in);
    }
}

/* q row r: head head0 + r / tokens_per_tile of token t0 + r % tokens_per_tile; K/V tile row
 * j: position b0 + j */
static ir_val row_token(const kb *b, ir_val t0, ir_val r) {
    return kx_add(b->k, t0, kx_rem_c(b->k, r, b->g->tokens_per_tile));
}
static ir_val row_head(const kb *b, ir_val r) {
    return kx_add(b->k, b->head0, kx_div_c(b->k, r, b->g->tokens_per_tile));
}

/* out[t * row_len + h * hd] for row r's token t and head h */
static ir_val out_base(const kb *b, ir_val t, ir_val r, uint32_t row_len) {
    kx k = b->k;
    ir_val hd = kx_u32(k, b->hd);
    ir_val head_at = kx_mul(k, row_head(b, r), hd);
    ir_val len = kx_u32(k, row_len);
    return kx_add(k, kx_mul(k, t, len), head_at);
}

/* q[t * q_stride + h * hd] for row r's token t and head h (the head's index built first) */
static ir_val q_base(const kb *b, const rows *w, ir_val r) {
    kx k = b->k;
    ir_val hd = kx_u32(k, b->hd);
    ir_val head_at = kx_mul(k, row_head(b, r), hd);
    ir_val len = kx_u32(k, b->q_stride);
    return kx_add(k, kx_mul(k, row_token(b, w->t0, r), len), head_at);
}
static ir_val q_ok(const kb *b, const rows *w, ir_val r) { return kx_lt(b->k, row_token(b, w->t0, r), b->n_valid); }
static ir_val kv_base(const kb *b, const rows *w, ir_val j) {
    kx k = b->k;
    ir_val kvd = kx_u32(k, b->kv_dim);
    ir_val row = kn_cache_row(k, b->pg, b->tab, b->u0, IR_NONE, kx_add(k, w->b0, j));
    return kx_add(k, kx_mul(k, row, kvd), b->kv_off);
}
static ir_val kv_ok(const kb *b, const rows *w, ir_val j) { return kx_lt(b->k, kx_add(b->k, w->b0, j), w->n_keys); }

/* The invocation's parts of a block: what it reads and writes in each step. */
typedef struct parts {
    /* scores: rows ry + i * score_row_invs (at q_row[i] in the q tile, their last keys
     * last_key[i], their scores at score_at[i]), keys kx + j * score_key_invs (key[j], at
     * k_row[j] in the K tile) */
    ir_val q_row[MAX_S], last_key[MAX_S], score_at[MAX_S], key[MAX_S], k_row[MAX_S];
    /* softmax: row sm_row, its part sm_part of the scores, at sm_at; sm_active for
     * invocations with a row */
    ir_val sm_row, sm_part, sm_at, sm_active;
    /* output: rows out_row[i] (scores at out_p_row[i]), words out_word[j] (read clamped
     * to the row: out_load_word[j]) */
    ir_val out_row[MAX_O], out_p_row[MAX_O], out_word[MAX_O], out_load_word[MAX_O];
} parts;

static void plan_parts(const kb *b, ir_val t0, parts *p) {
    kx k = b->k;
    const cfg *g = b->g;
    /* scores: a row's last key is its position (0 for rows without a valid token, which
     * are never stored) */
    ir_val kx = kx_rem_c(k, b->lid, g->score_key_invs), ry = kx_div_c(k, b->lid, g->score_key_invs);
    for (uint32_t i = 0; i < g->score_rows; i++) {
        ir_val r = kx_add_c(k, ry, i * g->score_row_invs), t = row_token(b, t0, r);
        p->q_row[i] = kx_mul_c(k, r, g->q_pitch);
        ir_val pos = kx_add(k, b->pos0, t);
        p->last_key[i] = kx_select(k, kx_lt(k, t, b->n_valid), pos, b->u0);
        p->score_at[i] = kx_mul_c(k, r, g->score_pitch);
    }
    for (uint32_t j = 0; j < g->score_keys; j++) {
        p->key[j] = kx_add_c(k, kx, j * g->score_key_invs);
        p->k_row[j] = kx_mul_c(k, p->key[j], g->kv_pitch);
    }
    /* softmax: row vid / softmax_invs, part vid % softmax_invs, vid the invocation's place
     * in its subgroup when softmax_invs > 1 (so the shuffles stay within the row) */
    ir_val vid = b->lid;
    if (g->softmax_invs > 1) {
        ir_val lane = kx_sg_lane(k), size = kx_sg_size(k);
        vid = kx_add(k, kx_mul(k, kx_sg_id(k), size), lane);
    }
    p->sm_row = kx_div_c(k, vid, g->softmax_invs), p->sm_part = kx_rem_c(k, vid, g->softmax_invs);
    uint32_t sm_n = g->keys_per_tile / g->softmax_invs;
    p->sm_at = kx_idx(k, p->sm_row, g->score_pitch, kx_mul_c(k, p->sm_part, sm_n));
    p->sm_active = kx_lt_c(k, vid, g->rows * g->softmax_invs);
    /* output: rows ry2 + i * out_row_invs, words dx + j * out_word_invs */
    ir_val dx = kx_rem_c(k, b->lid, g->out_word_invs), ry2 = kx_div_c(k, b->lid, g->out_word_invs);
    for (uint32_t i = 0; i < g->out_rows; i++) {
        p->out_row[i] = kx_add_c(k, ry2, i * g->out_row_invs);
        p->out_p_row[i] = kx_mul_c(k, p->out_row[i], g->score_pitch);
    }
    for (uint32_t j = 0; j < g->out_words; j++) {
        p->out_word[j] = kx_add_c(k, dx, j * g->out_word_invs);
        bool past = (j + 1) * g->out_word_invs > g->row_words;
        p->out_load_word[j] = past ? kx_min_c(k, p->out_word[j], g->row_words - 1) : p->out_word[j];
    }
}

/* 2. scores s = (q . k) * scale of the K tile at b0, d in order; masked past each row's
 * position; into the score tile */
static void scores(const kb *b, const parts *p, ir_val b0) {
    kx k = b->k;
    const cfg *g = b->g;
    uint32_t n = g->score_rows * g->score_keys, sk = g->score_keys;
    ir_val si[MAX_S];
    for (uint32_t i = 0; i < n; i++) si[i] = b->f0;
    ir_val step = kx_u32(k, g->step_words);
    ir_for *dl = ir_for_begin(k.ir, b->u0, kx_u32(k, g->row_words), step, n, si);
    ir_val w = ir_for_iv(dl), acc[MAX_S];
    for (uint32_t i = 0; i < n; i++) acc[i] = ir_for_arg(dl, i);
    for (uint32_t e = 0; e < g->step_words; e++) {
        ir_val we = e ? kx_add_c(k, w, e) : w, qv[MAX_S][2], kv[MAX_S][2];
        for (uint32_t i = 0; i < g->score_rows; i++)
            unpack(b, kx_shm_load(k, b->q_tile, kx_add(k, p->q_row[i], we), 1), qv[i]);
        for (uint32_t j = 0; j < sk; j++) unpack(b, kx_shm_load(k, b->kv_tile, kx_add(k, p->k_row[j], we), 1), kv[j]);
        for (uint32_t h = 0; h < g->per_word; h++)
            for (uint32_t i = 0; i < g->score_rows; i++)
                for (uint32_t j = 0; j < sk; j++) acc[i * sk + j] = kx_fma(k, qv[i][h], kv[j][h], acc[i * sk + j]);
    }
    ir_for_end(k.ir, dl, acc);
    ir_val sc = kx_f32(k, b->scale);
    for (uint32_t j = 0; j < sk; j++) {
        ir_val pos = kx_add(k, b0, p->key[j]);
        for (uint32_t i = 0; i < g->score_rows; i++) {
            ir_val s = kx_mul(k, ir_for_result(dl, i * sk + j), sc);
            s = kx_select(k, kx_le(k, pos, p->last_key[i]), s, b->ninf);
            kx_shm_store(k, b->score_tile, kx_add(k, p->score_at[i], p->key[j]), s);
        }
    }
}

/* 3. the online softmax of the invocation's row over the score tile at b0: e = exp(s -
 * m_new) written back, alpha = exp(m_old - m_new) to the alpha array; (m, l) updated */
static void softmax(const kb *b, const parts *p, ir_val b0, ir_val m_old, ir_val l_old, ir_val *m_new, ir_val *l_new) {
    kx k = b->k;
    const cfg *g = b->g;
    uint32_t sm_n = g->keys_per_tile / g->softmax_invs;
    ir_if *act = ir_if_begin(k.ir, p->sm_active, 2);
    ir_val s[MAX_S], mx = b->ninf;
    for (uint32_t c = 0; c < sm_n; c++) {
        s[c] = kx_shm_load(k, b->score_tile, kx_add_c(k, p->sm_at, c), 1);
        mx = kx_max(k, mx, s[c]);
    }
    for (uint32_t x = 1; x < g->softmax_invs; x *= 2) mx = kx_max(k, mx, kx_sg_xor(k, mx, x));
    ir_val mn = kx_max(k, m_old, mx); /* finite: key 0 is in every row's first tile */
    /* the first tile has nothing to rescale (and exp(-inf) is left to no device) */
    ir_val first = kx_eq(k, b0, b->u0);
    ir_val alpha = kx_select(k, first, b->f0, kn_exp(k, kx_sub(k, kx_select(k, first, mn, m_old), mn)));
    ir_val sum = b->f0;
    for (uint32_t c = 0; c < sm_n; c++) {
        ir_val live = kx_gt(k, s[c], b->ninf);
        ir_val e = kn_exp(k, kx_select(k, live, kx_sub(k, s[c], mn), b->f0));
        e = kx_select(k, live, e, b->f0);
        kx_shm_store(k, b->score_tile, kx_add_c(k, p->sm_at, c), e);
        sum = kx_add(k, sum, e);
    }
    for (uint32_t x = 1; x < g->softmax_invs; x *= 2) sum = kx_add(k, sum, kx_sg_xor(k, sum, x));
    ir_val ln = kx_fma(k, l_old, alpha, sum);
    ir_if *p0 = kx_if(k, kx_eq(k, p->sm_part, b->u0));
    kx_shm_store(k, b->alpha_tile, p->sm_row, alpha);
    kx_end_if(k, p0);
    ir_val y[2] = {mn, ln}, keep[2] = {m_old, l_old};
    ir_if_else(k.ir, act, y);
    ir_if_end(k.ir, act, keep);
    *m_new = ir_if_result(act, 0), *l_new = ir_if_result(act, 1);
}

/* 4. acc = acc * alpha + sum_k e_k v_k over the V tile, keys in order, from the tile
 * loop's carried accumulators (from 2) into nx[0..); acc[(i * out_words + j) * per_word +
 * h] is row i, dim per_word * word_j + h */
static void accumulate(const kb *b, const parts *p, const ir_for *tl, ir_val *nx) {
    kx k = b->k;
    const cfg *g = b->g;
    uint32_t E = g->per_word, n = g->out_rows * g->out_words * E;
    ir_val ai[MAX_O], a0[MAX_O];
    for (uint32_t i = 0; i < g->out_rows; i++) ai[i] = kx_shm_load(k, b->alpha_tile, p->out_row[i], 1);
    for (uint32_t i = 0; i < n; i++) a0[i] = kx_mul(k, ir_for_arg(tl, 2 + i), ai[i / (g->out_words * E)]);
    uint32_t unroll = g->keys_per_tile >= 4 ? 4 : g->keys_per_tile;
    ir_val step = kx_u32(k, unroll);
    ir_for *kl = ir_for_begin(k.ir, b->u0, kx_u32(k, g->keys_per_tile), step, n, a0);
    ir_val kk = ir_for_iv(kl), acc[MAX_O];
    for (uint32_t i = 0; i < n; i++) acc[i] = ir_for_arg(kl, i);
    for (uint32_t e = 0; e < unroll; e++) {
        ir_val key = e ? kx_add_c(k, kk, e) : kk, pv[MAX_O], vv[MAX_O][2];
        ir_val vrow = kx_mul_c(k, key, g->kv_pitch);
        for (uint32_t i = 0; i < g->out_rows; i++)
            pv[i] = kx_shm_load(k, b->score_tile, kx_add(k, p->out_p_row[i], key), 1);
        for (uint32_t j = 0; j < g->out_words; j++)
            unpack(b, kx_shm_load(k, b->kv_tile, kx_add(k, vrow, p->out_load_word[j]), 1), vv[j]);
        for (uint32_t i = 0; i < g->out_rows; i++)
            for (uint32_t j = 0; j < g->out_words; j++)
                for (uint32_t h = 0; h < E; h++) {
                    uint32_t a = (i * g->out_words + j) * E + h;
                    acc[a] = kx_fma(k, pv[i], vv[j][h], acc[a]);
                }
    }
    ir_for_end(k.ir, kl, acc);
    for (uint32_t i = 0; i < n; i++) nx[i] = ir_for_result(kl, i);
}

/* out = acc / l, rounded once; rows of valid tokens only */
static void store_out(const kb *b, const parts *p, ir_val t0, const ir_for *tl) {
    kx k = b->k;
    const cfg *g = b->g;
    uint32_t E = g->per_word;
    ir_if *lw = kx_if(k, kx_and(k, p->sm_active, kx_eq(k, p->sm_part, b->u0)));
    kx_shm_store(k, b->l_tile, p->sm_row, ir_for_result(tl, 1));
    kx_end_if(k, lw);
    kx_barrier(k);
    ir_type ot = kx_t(k, b->dtype, E);
    for (uint32_t i = 0; i < g->out_rows; i++) {
        ir_val r = p->out_row[i], t = row_token(b, t0, r);
        ir_val base = out_base(b, t, r, b->n_head * b->hd);
        ir_val l = kx_shm_load(k, b->l_tile, r, 1);
        ir_if *tv = kx_if(k, kx_lt(k, t, b->n_valid));
        for (uint32_t j = 0; j < g->out_words; j++) {
            ir_if *dv = NULL;
            if ((j + 1) * g->out_word_invs > g->row_words) dv = kx_if(k, kx_lt_c(k, p->out_word[j], g->row_words));
            ir_val o[2];
            for (uint32_t h = 0; h < E; h++)
                o[h] = kn_fdiv(k, ir_for_result(tl, 2 + (i * g->out_words + j) * E + h), l);
            ir_val ov = kx_convert(k, E == 1 ? o[0] : kx_vec(k, o, E), ot);
            kx_store(k, b->ob, kx_add(k, base, kx_mul_c(k, p->out_word[j], E)), ov);
            if (dv) kx_end_if(k, dv);
        }
        kx_end_if(k, tv);
    }
}

/* One block of tokens_per_tile tokens from t0 (< n_valid): everything from staging q to the
 * stores. */
static void block(const kb *b, ir_val t0) {
    kx k = b->k;
    const cfg *g = b->g;
    /* keys 0 .. the last valid token's position */
    ir_val n_keys = kx_add(k, b->pos0, kx_min(k, kx_add_c(k, t0, g->tokens_per_tile), b->n_valid));
    rows rw = {t0, IR_NONE, n_keys};
    src qsrc = {b->qb, q_base, q_ok, &rw};
    stage(b, b->q_tile, g->rows, g->q_pitch, &qsrc);
    parts p;
    plan_parts(b, t0, &p);

    /* the key tiles; carried: the softmax row's m and l, then the accumulators */
    uint32_t n_acc = g->out_rows * g->out_words * g->per_word;
    ir_val init[2 + MAX_O];
    init[0] = b->ninf, init[1] = b->f0;
    for (uint32_t i = 0; i < n_acc; i++) init[2 + i] = b->f0;
    ir_for *tl = ir_for_begin(k.ir, b->u0, n_keys, kx_u32(k, g->keys_per_tile), 2 + n_acc, init);
    ir_val b0 = ir_for_iv(tl), m_old = ir_for_arg(tl, 0), l_old = ir_for_arg(tl, 1);
    rw.b0 = b0;
    src ksrc = {b->kc, kv_base, kv_ok, &rw}, vsrc = {b->vc, kv_base, kv_ok, &rw};
    kx_barrier(k); /* the last tile's output step is done with the tiles (the first: q staged) */
    stage(b, b->kv_tile, g->keys_per_tile, g->kv_pitch, &ksrc);
    kx_barrier(k);
    scores(b, &p, b0);
    kx_barrier(k);
    /* the V tile over the K tile, and the online softmax of each row */
    stage(b, b->kv_tile, g->keys_per_tile, g->kv_pitch, &vsrc);
    ir_val nx[2 + MAX_O];
    softmax(b, &p, b0, m_old, l_old, &nx[0], &nx[1]);
    kx_barrier(k);
    accumulate(b, &p, tl, &nx[2]);
    ir_for_end(k.ir, tl, nx);
    store_out(b, &p, t0, tl);
}

/* KILN_ATTN_COOP=1: the cooperative-matrix variant where it serves. Opt-in: on an H100's
 * Vulkan (NVIDIA 580.159.04) it wrote zeros (bench/results/2026-12-07-session50.md), so the
 * SIMT kernel stays the default until it is right on a device. */
static bool coop_wanted(void) {
    const char *e = getenv("KILN_ATTN_COOP");
    return e && !strcmp(e, "1");
}

static ir_kernel *prefill(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t q_stride,
                          uint32_t n_ctx, const kn_pages *pg, uint32_t n_max, ir_scalar dtype, uint32_t groups[2],
                          kiln_err *err) {
    if (kn_check_dtype(c, dtype, err)) return NULL;
    uint32_t hd = head_dim;
    uint64_t q_dim = (uint64_t)n_head * hd, kv_dim64 = (uint64_t)n_head_kv * hd;
    if (n_head == 0 || n_head_kv == 0 || n_head % n_head_kv || hd == 0 || n_ctx == 0 || n_max == 0 ||
        q_stride < q_dim || (uint64_t)n_ctx * kv_dim64 > UINT32_MAX || (uint64_t)n_max * q_stride > UINT32_MAX ||
        n_ctx > (1u << 31)) {
        kiln_fail(
            err, KILN_ERR_INVALID,
            "kn_attn_prefill: bad shape (heads %u / %u kv, head_dim %u, q_stride %u, n_ctx %u, n_max %u; n_head a "
            "multiple of n_head_kv, q_stride >= n_head * head_dim, u32 indices: n_ctx * kv_dim, n_max * q_stride "
            "< 2^32, n_ctx <= 2^31)",
            n_head, n_head_kv, hd, q_stride, n_ctx, n_max);
        return NULL;
    }
    uint32_t group_size = n_head / n_head_kv;
    /* matrix fragments where the caps have them (q rows and heads at 16-byte copies) */
    if (q_stride % 8 == 0 && kn_attn_prefill_mma_ok(c, dtype, n_head, n_head_kv, hd, n_max))
        return kn_attn_prefill_mma(c, n_head, n_head_kv, hd, q_stride, n_ctx, pg, n_max, dtype, groups, err);
    if (q_stride % 8 == 0 && coop_wanted() && kn_attn_prefill_coop_ok(c, dtype, n_head, n_head_kv, hd, n_max))
        return kn_attn_prefill_coop(c, n_head, n_head_kv, hd, q_stride, n_ctx, pg, n_max, dtype, groups, err);
    /* vector loads start at multiples of their width: head starts and q rows */
    uint32_t lanes = kn_vec_width(hd);
    while (q_stride % lanes) lanes /= 2;
    /* 16-bit pairs in the tiles where they can be unpacked (f16 needs f16 arithmetic) */
    uint32_t per_word = lanes % 2 == 0 && (dtype == IR_BF16 || c->f16_arith) ? 2 : 1;
    cfg g;
    bool ok = false;
    /* the most rows that fit (they share each K/V tile), then the most keys */
    for (uint32_t rows = short_rows(c, n_head, group_size, n_max); rows >= 1 && !ok; rows /= 2)
        for (uint32_t keys = 32; keys >= 4 && !ok; keys /= 2)
            ok = plan(c, group_size, hd, lanes, per_word, rows, keys, 256, &g);
    if (!ok) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED,
                  "kn_attn_prefill: head_dim %u does not fit the caps (%u bytes of workgroup memory, %u invocations)",
                  hd, c->shared_bytes, c->max_workgroup);
        return NULL;
    }
    kx k = {kn_create("kn_attn_prefill", err), c};
    if (!k.ir) return NULL;
    if (n_max <= 64) kn_launch_early(k); /* a short block's: the output product may start */
    kb b = {.k = k,
            .g = &g,
            .dtype = dtype,
            .hd = hd,
            .q_stride = q_stride,
            .kv_dim = (uint32_t)kv_dim64,
            .n_head = n_head,
            .pg = pg};
    b.scale = 1.0f / sqrtf((float)hd); /* the oracle's, computed the same way */
    kn_attn_bufs bufs;
    kn_attn_prefill_bufs(k, dtype, n_max, q_stride, n_head, hd, kv_dim64, n_ctx, pg, &bufs);
    b.qb = bufs.q, b.kc = bufs.kc, b.vc = bufs.vc, b.ob = bufs.out, b.tab = bufs.pages;
    ir_buf ib = bufs.info;
    kx_workgroup(k, g.invocations);
    ir_scalar tile = per_word == 2 ? IR_U32 : IR_F32;
    b.q_tile = kx_shared(k, "q_tile", tile, g.rows * g.q_pitch);
    b.kv_tile = kx_shared(k, "kv_tile", tile, g.keys_per_tile * g.kv_pitch);
    b.score_tile = kx_shared(k, "scores", IR_F32, g.rows * g.score_pitch);
    b.alpha_tile = kx_shared(k, "alpha", IR_F32, g.rows), b.l_tile = kx_shared(k, "lsum", IR_F32, g.rows);
    b.lid = kx_local(k), b.u0 = kx_u32(k, 0), b.f0 = kx_f32(k, 0.0f);
    b.ninf = kx_f32(k, -INFINITY);

    /* group x: heads_per_tile heads of one kv head; group y: token blocks */
    b.head0 = kx_group_times(k, 0, g.heads_per_tile);
    ir_val hd_c = kx_u32(k, hd);
    b.kv_off = kx_mul(k, kx_div_c(k, b.head0, group_size), hd_c);
    /* valid tokens: t < n, t < n_max, and pos0 + t < n_ctx (computed without wrapping) */
    b.pos0 = kx_load(k, ib, b.u0, 1);
    ir_val n = kx_load_c(k, ib, 1);
    ir_val room = kx_sub(k, kx_u32(k, n_ctx), b.pos0);
    room = kx_select(k, kx_lt_c(k, b.pos0, n_ctx), room, b.u0);
    b.n_valid = kx_min(k, kx_min_c(k, n, n_max), room);
    uint32_t nb = (n_max + g.tokens_per_tile - 1) / g.tokens_per_tile, gy_n = (nb + 1) / 2;
    ir_val gy = kx_group(k, 1);
    ir_val heavy = kx_sub(k, kx_u32(k, nb - 1), gy); /* the longer block first */
    /* blocks nb - 1 - y, then y (unless they are one) */
    ir_val step = kx_u32(k, 1), which;
    ir_for *two = kx_for(k, b.u0, kx_u32(k, 2), step, &which);
    ir_val second = kx_eq_c(k, which, 1);
    ir_val tokens = kx_u32(k, g.tokens_per_tile);
    ir_val t0 = kx_mul(k, kx_select(k, second, gy, heavy), tokens);
    ir_val distinct = kx_lt(k, gy, heavy);
    ir_val not_again = kx_or(k, kx_not(k, second), distinct);
    ir_if *live = kx_if(k, kx_and(k, kx_lt(k, t0, b.n_valid), not_again));
    block(&b, t0);
    kx_end_if(k, live);
    kx_end_for(k, two);
    if (groups) groups[0] = n_head / g.heads_per_tile, groups[1] = gy_n;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_attn_prefill(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t q_stride,
                           uint32_t n_ctx, uint32_t n_max, ir_scalar dtype, uint32_t groups[2], kiln_err *err) {
    return prefill(c, n_head, n_head_kv, head_dim, q_stride, n_ctx, NULL, n_max, dtype, groups, err);
}

ir_kernel *kn_attn_prefill_paged(const rt_caps *c, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                                 uint32_t q_stride, const kn_pages *pg, uint32_t n_max, ir_scalar dtype,
                                 uint32_t groups[2], kiln_err *err) {
    if (!pg) return kiln_fail(err, KILN_ERR_INVALID, "kn_attn_prefill_paged: no paging"), NULL;
    if (kn_pages_check(pg, (uint64_t)n_head_kv * head_dim, "kn_attn_prefill", err)) return NULL;
    return prefill(c, n_head, n_head_kv, head_dim, q_stride, pg->rows * pg->stride, pg, n_max, dtype, groups, err);
}
