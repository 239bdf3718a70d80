/* A block's grouped expert products on matrix fragments (tensor cores / cooperative
 * matrices): the same results as kn_moe_gate_up_g and kn_moe_down_g (moe.c) up to the
 * order of f32 sums, for a prefill block whose tokens the SIMT kernels would read each
 * expert's rows once per token for.
 *
 * Workgroup (x, y): expert e = x / row_tiles, rows r0 = (x % row_tiles) * 64 of its
 * matrices, and the y-th run of 64 entries of e's list (kn_moe_group's choices c = t k + j
 * grouped by expert); a run past the list's end returns at once (uniform), so the grid is
 * n_expert x row_tiles x ceil(nb / 64) and most of it exits when the choices spread. Four
 * subgroups, each 32 choices x 32 rows as fragments; the columns in chunks of 32 staged in
 * workgroup memory (X rows gathered through the list: h's row t = c / k for gate/up, act's
 * row c for down; W rows of expert e), rows padded by 8 elements against bank conflicts.
 * At the end the f32 sums go through workgroup memory (overlaying the staging) so every
 * invocation applies the epilogue to its share: gate/up act[c][r] = round(silu(round(g))
 * * round(u)) (kn_mv_store_row's SwiGLU), down yc[c][r] = round(sum). Entries past a run's
 * end read a valid list entry and are never stored; columns past cols read zero. */
#include "base/error.h"
#include "kernels/kn_common.h"
#include "kernels/matvec_internal.h"
#include "kernels/moe_internal.h"

#include <stdlib.h>
#include <string.h>

#define T 64       /* choices and rows per workgroup */
#define SUB 32     /* per subgroup */
#define KC 32      /* columns per staged chunk */
#define PAD 8      /* elements after each staged row */
#define PITCH (KC + PAD)
#define CS (T + 4) /* f32 stride of the sums in workgroup memory */

/* The fragment shape: dtype x dtype -> f32, M and N dividing 32, K dividing KC, 16x16x16
 * first; NULL where there is none or four subgroups do not fit a workgroup. */
static const rt_mma_shape *pick(const rt_caps *c, ir_scalar dt) {
    uint32_t sg = c->subgroup_size;
    if (!c->n_mma || !sg || (c->max_workgroup && 4 * sg > c->max_workgroup) || 4 * sg > 1024) return NULL;
    const rt_mma_shape *best = NULL;
    for (uint32_t i = 0; i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->mma[i];
        if (s->ab_type != (uint32_t)dt || s->acc_type != IR_F32 || s->m < 8 || s->n < 8 || s->k < 8 || SUB % s->m ||
            SUB % s->n || KC % s->k)
            continue;
        if (s->m == 16 && s->n == 16 && s->k == 16) return s;
        if (!best) best = s;
    }
    return best;
}

/* Workgroup memory: the f32 sums (two arrays for gate/up) and the staging (two or three
 * operands of T x PITCH 16-bit elements), which overlays the sums where the backend lets
 * it (PTX) and takes memory of its own where not (SPIR-V): both counted. */
static uint32_t shared_bytes(bool swiglu) { return (swiglu ? 2u : 1u) * T * CS * 4u + (swiglu ? 3u : 2u) * T * PITCH * 2u; }

bool kn_moe_g_mma_ok(const rt_caps *c, ir_scalar dtype, uint32_t n_in, bool swiglu) {
    const char *off = getenv("KILN_MOE_MMA"); /* "0": the SIMT grouped kernels (for comparing on a device) */
    if (off && strcmp(off, "0") == 0) return false;
    return pick(c, dtype) && n_in % 4 == 0 && (!c->shared_bytes || shared_bytes(swiglu) <= c->shared_bytes);
}

typedef struct gm {
    kx k;
    const rt_mma_shape *s;
    ir_scalar dt;
    uint32_t n_in, n_out, k_used, n_c;
    bool swiglu;         /* gate/up (X = h, rows t = c / k) or down (X = act, rows c) */
    ir_buf x, w[2], off, list, y;
    ir_shm st; /* the staging: X at 0, W (gate, up) at (1 + o) T PITCH */
    ir_type ta, tb, tc;
    ir_val lid, e, r0, first, run0, count; /* count: the run's live entries (<= 64) */
    ir_val sub_t0, sub_r0;
    uint32_t inv;
} gm;

/* entry i (< 64) of the run: its choice c, clamped to a live one */
static ir_val choice(const gm *g, ir_val i) {
    kx k = g->k;
    ir_val at = kx_add(k, kx_add(k, g->first, g->run0), kx_min(k, i, kx_sub_c(k, g->count, 1)));
    return kx_min_c(k, kx_load(k, g->list, at, 1), g->n_c - 1);
}

/* Chunk [c0, c0 + KC) of the run's X rows and expert e's W rows into workgroup memory,
 * vectors of v elements, columns past n_in zero. */
static void stage(const gm *g, ir_val c0, uint32_t v, bool masked) {
    kx k = g->k;
    uint32_t per_row = KC / v, n_vec = T * per_row, ops = g->swiglu ? 3 : 2;
    ir_val zero = kx_as(k, kx_f32(k, 0.0f), g->dt);
    for (uint32_t op = 0; op < ops; op++)
        for (uint32_t j = 0; j * g->inv < n_vec; j++) {
            ir_val i = kx_add_c(k, g->lid, j * g->inv);
            ir_if *in = (j + 1) * g->inv > n_vec ? kx_if(k, kx_lt_c(k, i, n_vec)) : NULL;
            ir_val row = kx_div_c(k, i, per_row), col = kx_mul_c(k, kx_rem_c(k, i, per_row), v);
            ir_val src_row;
            ir_buf src;
            if (op == 0) { /* X: the gathered rows */
                ir_val c = choice(g, row);
                src_row = g->swiglu ? kx_div_c(k, c, g->k_used) : c;
                src = g->x;
            } else { /* W: expert e's rows r0 .. (clamped) */
                ir_val r = kx_min_c(k, kx_add(k, g->r0, row), g->n_out - 1);
                src_row = kx_add(k, kx_mul_c(k, g->e, g->n_out), r);
                src = g->w[op - 1];
            }
            ir_val base = kx_mul_c(k, src_row, g->n_in), at = kx_add(k, base, kx_add(k, c0, col));
            ir_val val = masked ? kx_load_masked(k, src, at, v, kx_add_c(k, base, g->n_in), zero) : kx_load(k, src, at, v);
            kx_shm_store(k, g->st, kx_add_c(k, kx_idx(k, row, PITCH, col), op * T * PITCH), val);
            if (in) kx_end_if(k, in);
        }
}

/* the subgroup's fragments over a staged chunk: acc[o][i][j] += A_i x B_oj */
static void math(const gm *g, ir_val *acc, uint32_t fm, uint32_t fn) {
    kx k = g->k;
    ir_val st = kx_u32(k, PITCH);
    for (uint32_t kk = 0; kk < KC; kk += g->s->k) {
        ir_val a[4], b[2][4], col = kx_u32(k, kk);
        for (uint32_t i = 0; i < fm; i++)
            a[i] = ir_frag_load(k.ir, g->ta, true, g->st, kx_add(k, kx_mul(k, kx_add_c(k, g->sub_t0, i * g->s->m), st), col),
                                st, true);
        for (uint32_t o = 0; o < (g->swiglu ? 2u : 1u); o++)
            for (uint32_t j = 0; j < fn; j++)
                b[o][j] = ir_frag_load(k.ir, g->tb, true, g->st,
                                       kx_add_c(k, kx_add(k, kx_mul(k, kx_add_c(k, g->sub_r0, j * g->s->n), st), col),
                                                (1 + o) * T * PITCH),
                                       st, false);
        for (uint32_t o = 0; o < (g->swiglu ? 2u : 1u); o++)
            for (uint32_t i = 0; i < fm; i++)
                for (uint32_t j = 0; j < fn; j++) {
                    ir_val *c = &acc[(o * fm + i) * fn + j];
                    *c = ir_frag_mma(k.ir, a[i], b[o][j], *c);
                }
    }
}

static ir_kernel *build(const rt_caps *c, const char *name, bool swiglu, uint32_t n_in, uint32_t n_out,
                        uint32_t n_expert, uint32_t k_used, uint32_t nb, ir_scalar dt, bool cached, uint32_t groups[2],
                        kiln_err *err) {
    if (kn_check_dtype(c, dt, err)) return NULL;
    uint64_t n_c = (uint64_t)nb * k_used;
    if (!n_in || !n_out || !n_expert || n_expert > 1024 || !k_used || k_used > 64 || !nb ||
        (uint64_t)n_expert * n_in * n_out > UINT32_MAX || n_c * (n_in > n_out ? n_in : n_out) > UINT32_MAX)
        return kiln_fail(err, KILN_ERR_INVALID, "%s: %u experts of %u x %u, %u a token, %u tokens (u32 indices)", name,
                         n_expert, n_out, n_in, k_used, nb),
               NULL;
    if (!kn_moe_g_mma_ok(c, dt, n_in, swiglu))
        return kiln_fail(err, KILN_ERR_UNSUPPORTED, "%s: no matrix fragments for %s, %u columns not a multiple of 4, or too "
                         "little workgroup memory",
                         name, dt == IR_BF16 ? "bf16" : "f16", n_in),
               NULL;
    const rt_mma_shape *s = pick(c, dt);
    gm g = {.k = {kn_create(name, err), c}, .s = s, .dt = dt, .n_in = n_in, .n_out = n_out, .k_used = k_used,
            .n_c = (uint32_t)n_c, .swiglu = swiglu};
    kx k = g.k;
    if (!k.ir) return NULL;
    uint64_t w_elems = (uint64_t)(cached ? 1 : n_expert) * n_out * n_in;
    /* the SIMT kernels' parameters, in their order */
    if (swiglu) {
        g.x = kx_buffer(k, "h", dt, IR_READ, (uint64_t)nb * n_in);
        g.w[0] = kx_buffer(k, "gate", dt, IR_READ, w_elems), g.w[1] = kx_buffer(k, "up", dt, IR_READ, w_elems);
    } else {
        g.x = kx_buffer(k, "act", dt, IR_READ, n_c * n_in);
        g.w[0] = kx_buffer(k, "down", dt, IR_READ, w_elems);
    }
    g.off = kx_buffer(k, "off", IR_U32, IR_READ, n_expert + 1);
    g.list = kx_buffer(k, "list", IR_U32, IR_READ, n_c);
    g.y = kx_buffer(k, swiglu ? "act" : "yc", dt, IR_WRITE, n_c * n_out);
    ir_buf slots = cached ? moe_slots_param(k) : (ir_buf){0};
    g.inv = 4 * c->subgroup_size;
    kx_workgroup(k, g.inv);
    uint32_t ops = swiglu ? 3 : 2;
    ir_shm sums = kx_shared(k, "sums", IR_F32, (ops - 1) * T * CS);
    g.st = ir_shared_overlay(k.ir, "stage", dt, ops * T * PITCH, sums);
    g.ta = ir_t_frag(k.ir, IR_FRAG_A, dt, s->m, s->n, s->k);
    g.tb = ir_t_frag(k.ir, IR_FRAG_B, dt, s->m, s->n, s->k);
    g.tc = ir_t_frag(k.ir, IR_FRAG_ACC, IR_F32, s->m, s->n, s->k);
    g.lid = kx_local(k);
    uint32_t row_tiles = (n_out + T - 1) / T;
    ir_val gx = kx_group(k, 0);
    g.e = kx_div_c(k, gx, row_tiles);
    g.r0 = kx_mul_c(k, kx_rem_c(k, gx, row_tiles), T);
    g.first = kx_load(k, g.off, g.e, 1);
    ir_val end = kx_min_c(k, kx_load(k, g.off, kx_add_c(k, g.e, 1), 1), g.n_c);
    if (cached) end = kx_select(k, kx_lt(k, g.e, moe_slots_now(k, slots)), end, g.first); /* a slot not held */
    g.run0 = kx_group_times(k, 1, T);
    ir_val len = kx_select(k, kx_lt(k, g.first, end), kx_sub(k, end, g.first), kx_u32(k, 0));
    ir_val sid = kx_sg_id(k);
    g.sub_t0 = kx_mul_c(k, kx_shr_c(k, sid, 1), SUB);
    g.sub_r0 = kx_mul_c(k, kx_and_c(k, sid, 1), SUB);
    /* a run past the list's end does nothing (uniform: group ids and loaded values) */
    ir_if *live = kx_if(k, kx_lt(k, g.run0, len));
    g.count = kx_min_c(k, kx_sub(k, len, g.run0), T);
    uint32_t fm = SUB / s->m, fn = SUB / s->n, n_acc = ops - 1 == 2 ? 2 * fm * fn : fm * fn;
    ir_val init[32], zero = ir_frag_fill(k.ir, g.tc, kx_f32(k, 0.0f));
    for (uint32_t i = 0; i < n_acc; i++) init[i] = zero;
    uint32_t v = kn_vec_width(n_in), full = n_in / KC * KC;
    ir_val acc[32];
    for (uint32_t i = 0; i < n_acc; i++) acc[i] = init[i];
    if (full) {
        ir_for *l = ir_for_begin(k.ir, kx_u32(k, 0), kx_u32(k, full), kx_u32(k, KC), n_acc, init);
        for (uint32_t i = 0; i < n_acc; i++) acc[i] = ir_for_arg(l, i);
        kx_barrier(k);
        stage(&g, ir_for_iv(l), v, false);
        kx_barrier(k);
        math(&g, acc, fm, fn);
        ir_for_end(k.ir, l, acc);
        for (uint32_t i = 0; i < n_acc; i++) acc[i] = ir_for_result(l, i);
    }
    if (full < n_in) { /* the tail, zero-padded to a whole chunk */
        kx_barrier(k);
        stage(&g, kx_u32(k, full), v, true);
        kx_barrier(k);
        math(&g, acc, fm, fn);
    }
    /* the sums through workgroup memory (where the staging was), then the epilogue by all */
    kx_barrier(k);
    for (uint32_t o = 0; o < ops - 1; o++)
        for (uint32_t i = 0; i < fm; i++)
            for (uint32_t j = 0; j < fn; j++) {
                ir_val at = kx_add(k, kx_mul_c(k, kx_add_c(k, g.sub_t0, i * s->m), CS), kx_add_c(k, g.sub_r0, j * s->n));
                ir_frag_store(k.ir, acc[(o * fm + i) * fn + j], true, sums, kx_add_c(k, at, o * T * CS), kx_u32(k, CS),
                              true);
            }
    kx_barrier(k);
    ir_val idx;
    ir_for *out = kx_for(k, g.lid, kx_u32(k, T * T), kx_u32(k, g.inv), &idx);
    ir_val tl = kx_div_c(k, idx, T), rl = kx_rem_c(k, idx, T), r = kx_add(k, g.r0, rl);
    ir_if *f = kx_if(k, kx_and(k, kx_lt(k, tl, g.count), kx_lt_c(k, r, n_out)));
    ir_val cj = choice(&g, tl), at = kx_add(k, kx_mul_c(k, cj, n_out), r), sat = kx_idx(k, tl, CS, rl);
    ir_val sum = kx_shm_load(k, sums, sat, 1);
    if (swiglu)
        kn_mv_store_row(k, KN_EPI_SWIGLU, g.y, 0, 0, at, sum, kx_shm_load(k, sums, kx_add_c(k, sat, T * CS), 1), dt, dt);
    else
        kx_store(k, g.y, at, kx_as(k, sum, dt));
    kx_end_if(k, f);
    kx_end_for(k, out);
    kx_end_if(k, live);
    groups[0] = n_expert * row_tiles, groups[1] = (nb + T - 1) / T;
    return kn_finish(k.ir, err);
}

ir_kernel *kn_moe_gate_up_g_mma(const rt_caps *c, uint32_t n_embd, uint32_t n_ff, uint32_t n_expert, uint32_t k_used,
                                uint32_t nb, ir_scalar dtype, bool cached, uint32_t groups[2], kiln_err *err) {
    return build(c, "kn_moe_gate_up_g_mma", true, n_embd, n_ff, n_expert, k_used, nb, dtype, cached, groups, err);
}

ir_kernel *kn_moe_down_g_mma(const rt_caps *c, uint32_t n_ff, uint32_t n_embd, uint32_t n_expert, uint32_t k_used,
                             uint32_t nb, ir_scalar dtype, bool cached, uint32_t groups[2], kiln_err *err) {
    return build(c, "kn_moe_down_g_mma", false, n_ff, n_embd, n_expert, k_used, nb, dtype, cached, groups, err);
}
