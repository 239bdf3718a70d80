/* The execution plan on a device: weights uploaded once (q, k and v fused into one matrix
 * per layer, so one product serves all three), every buffer allocated once for a block of
 * n_block tokens, and two recordings replayed through a small input buffer info =
 * {position, token count} and the token ids:
 *   decode   one token: qkv matvec (+bias) with the attention norm in front of it,
 *            qk_prep (q/k norm, rope, cache store), attention (runs of the positions
 *            in parallel, then their merge), o matvec + residual, gate/up matvec with
 *            the ffn norm in front and SwiGLU behind, down matvec + residual: 7
 *            launches per layer (9 where the norms do not fit in the products'
 *            workgroup memory);
 *   prefill  a block of up to n_block tokens: the same with matrix products, prefill
 *            attention, separate gate/up products and SwiGLU; the block's last row goes
 *            to the logits head;
 *   short    where the device has them, the prefill of a block of up to
 *            PLAN_SHORT_BLOCK tokens with products that read each weight once for all of
 *            them (kn_matmul_skinny; the gate and up products and SwiGLU in one; on
 *            CUDA the norms before qkv and gate/up inside those products,
 *            plan_skinny_norm): a short prompt, or a long one's last block;
 *   mid      where n_block is larger (the default's PLAN_LONG_BLOCK), a block of
 *            PLAN_MID_BLOCK tokens with the tiles that suit that many: a prompt runs
 *            through the smallest block that holds what is left of it.
 * Each kernel's numbers follow the oracle's contract rounding points (oracle/forward.c):
 * the fused epilogues round where the oracle rounds. */
#include "base/error.h"
#include "plan/plan_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Smaller block i (plan_sub_block): its own kernels for the roles whose shape follows the
 * block, the full block's for the others (with their tuned grids). */
static int build_sub(plan_engine *p, int bi, kiln_err *err) {
    plan_prefill *b = &p->sub[bi];
    plan_shape s = p->s;
    if (!(s.n_block = plan_sub_block(&p->s, &p->d->caps, bi))) return 0;
    for (int i = 0; i < K_COUNT; i++) {
        if (!plan_role_used(&p->s, i)) continue;
        if (!plan_block_role(i)) {
            b->kern[i] = p->kern[i], b->sig[i] = p->sig[i];
            b->grid[i][0] = p->grid[i][0], b->grid[i][1] = p->grid[i][1];
            continue;
        }
        if (!(b->kern[i] = plan_compile_kernel(p->d, &s, i, b->grid[i], &b->sig[i], err))) return -1;
        p->n_kern++;
        progress_update(&p->prog, p->s.hp.n_layer + p->n_kern);
    }
    b->n = s.n_block;
    return 0;
}

/* Launches [first, first + n) recorded (cut into segments where experts are cached). */
static rt_recording *record_range(plan_engine *p, uint32_t first, uint32_t n, kiln_err *err) {
    return p->mc ? plan_moe_record(p, first, n, err) : p->d->ops->record(p->d, p->launch + first, n, err);
}

/* The recordings of the decode step, the full block and the smaller blocks; tune: the
 * decode step's products on their fastest grids first. */
static int record_all(plan_engine *p, bool tune, kiln_err *err) {
    if (plan_record_decode(p, err)) return -1;
    p->n_decode_launch = p->n_launch;
    if (tune && plan_tune_products(p, err)) return -1;
    if (!(p->decode = record_range(p, 0, p->n_launch, err))) return -1;
    if (plan_record_prefill(p, NULL, err)) return -1;
    p->n_prefill_launch = p->n_launch - p->n_decode_launch;
    if (!(p->prefill = record_range(p, p->n_decode_launch, p->n_prefill_launch, err))) return -1;
    for (int bi = 0; bi < PLAN_SUBS; bi++) {
        plan_prefill *b = &p->sub[bi];
        if (!b->n) continue;
        b->first_launch = p->n_launch;
        if (plan_record_prefill(p, b, err)) return -1;
        b->n_launch = p->n_launch - b->first_launch;
        if (!(b->rec = record_range(p, b->first_launch, b->n_launch, err))) return -1;
    }
    return 0;
}

int plan_record_all(plan_engine *p, kiln_err *err) { return record_all(p, false, err); }

void plan_release_recordings(plan_engine *p) {
    rt_device *d = p->d;
    rt_recording **r[2 + PLAN_SUBS] = {&p->decode, &p->prefill};
    for (int bi = 0; bi < PLAN_SUBS; bi++) r[2 + bi] = &p->sub[bi].rec;
    for (int i = 0; i < 2 + PLAN_SUBS; i++)
        if (*r[i]) d->ops->release_recording(d, *r[i]), *r[i] = NULL;
    for (uint32_t i = 0; i < p->n_launch; i++) free((void *)p->launch[i].args);
    p->n_launch = p->n_decode_launch = p->n_prefill_launch = 0;
}

static int build(plan_engine *p, kiln_err *err) {
    for (int i = 0; i < K_COUNT; i++) {
        if (!plan_role_used(&p->s, i)) continue;
        if (!(p->kern[i] = plan_compile_kernel(p->d, &p->s, i, p->grid[i], &p->sig[i], err))) return -1;
        p->n_kern++;
        progress_update(&p->prog, p->s.hp.n_layer + p->n_kern);
    }
    for (int bi = 0; bi < PLAN_SUBS; bi++)
        if (build_sub(p, bi, err)) return -1;
    return record_all(p, true, err) || plan_batch_build(p, err) ? -1 : 0;
}

/* ---- the engine ------------------------------------------------------------------------- */

const plan_prefill *plan_sub_for(const plan_engine *p, uint32_t n) {
    const plan_prefill *b = NULL;
    for (int bi = PLAN_SUBS - 1; bi >= 0; bi--)
        if (p->sub[bi].rec && n <= p->sub[bi].n) b = &p->sub[bi];
    return b;
}

/* Runs one recording for tokens [0, n) at pos (n <= n_block; decode: n == 1). */
static int step(plan_engine *p, rt_recording *rec, const int32_t *tokens, uint32_t n, uint32_t pos, kiln_err *err) {
    rt_device *d = p->d;
    uint32_t info[2] = {pos, n};
    if (d->ops->upload(d, p->tok_h, 0, tokens, (size_t)n * 4, err) ||
        d->ops->upload(d, p->info_h, 0, info, sizeof info, err))
        return -1;
    return p->mc ? plan_moe_replay(p, rec, n, err) : d->ops->replay(d, rec, err);
}

/* Evaluates tokens through the recordings; the last step's logits (and their argmax)
 * stay on the device for the caller to read. all: a decode step per token, each token's
 * logits copied to logits[t] as it goes. */
static int run_tokens(plan_engine *p, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits, bool all,
                      kiln_err *err) {
    engine *base = &p->base;
    if (n == 0) return kiln_fail(err, KILN_ERR_INVALID, "no tokens to evaluate");
    if (pos > base->n_past)
        return kiln_fail(err, KILN_ERR_INVALID, "position %u is past the %u cached positions", pos, base->n_past);
    if ((uint64_t)pos + n > base->n_ctx)
        return kiln_fail(err, KILN_ERR_INVALID, "%u tokens at position %u exceed the context of %u", n, pos,
                         base->n_ctx);
    for (uint32_t t = 0; t < n; t++)
        if (tokens[t] < 0 || (uint32_t)tokens[t] >= p->s.hp.n_vocab)
            return kiln_fail(err, KILN_ERR_INVALID, "token id %d is outside the vocabulary of %u", tokens[t],
                             p->s.hp.n_vocab);
    /* a paged cache: pages up to pos + n (taken from idle slots' tails where none is free) */
    if (plan_pages_ready(p, pos + n, err)) return -1;
    base->n_past = pos;
    /* a recurrent state: back to pos, a snapshot where plan_state.c takes one */
    if (p->s.hp.n_recurrent && plan_state_before_eval(p, pos, n, err)) return -1;
    return plan_run_blocks(p, tokens, n, pos, logits, all, err);
}

int plan_run_blocks(plan_engine *p, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits, bool all,
                    kiln_err *err) {
    engine *base = &p->base;
    rt_device *d = p->d;
    size_t row = (size_t)p->s.hp.n_vocab * 4;
    for (uint32_t t = 0; t < n;) {
        /* logits of every token need a decode step each; otherwise blocks of the prompt */
        uint32_t m = all || n - t == 1 ? 1 : n - t < p->s.n_block ? n - t : p->s.n_block;
        const plan_prefill *b = plan_sub_for(p, m);
        rt_recording *rec = m == 1 ? p->decode : b ? b->rec : p->prefill;
        if (step(p, rec, tokens + t, m, pos + t, err)) return -1;
        if (p->hist) { /* the recurrent state now covers these tokens */
            memmove(p->hist + pos + t, tokens + t, (size_t)m * sizeof *tokens);
            p->rs_pos = pos + t + m;
        }
        t += m;
        base->n_past = pos + t;
        if (all && d->ops->download(d, p->logits, 0, logits + (size_t)(t - 1) * p->s.hp.n_vocab, row, err))
            return -1;
    }
    return 0;
}

static int plan_eval(engine *base, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits, bool all,
                     kiln_err *err) {
    plan_engine *p = (plan_engine *)base;
    if (run_tokens(p, tokens, n, pos, logits, all, err)) return -1;
    return all ? 0 : p->d->ops->download(p->d, p->logits, 0, logits, (size_t)p->s.hp.n_vocab * 4, err);
}

/* The argmax mask for the replays that follow: allow's n_vocab bits, or (NULL) all set,
 * uploaded only where it changes. 0, or -1 with err. */
int plan_set_allow(plan_engine *p, const uint32_t *allow, kiln_err *err) {
    if (!allow && !p->allow_custom) return 0;
    size_t bytes = (size_t)plan_allow_words(&p->s) * 4;
    uint32_t *ones = allow ? NULL : malloc(bytes);
    if (!allow && !ones) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    if (ones) memset(ones, 0xff, bytes);
    int rc = p->d->ops->upload(p->d, p->allow, 0, allow ? allow : ones, bytes, err);
    free(ones);
    if (!rc) p->allow_custom = allow != NULL;
    return rc;
}

static int argmax_of(engine *base, const int32_t *tokens, uint32_t n, uint32_t pos, const uint32_t *allow,
                     int32_t *best, kiln_err *err) {
    plan_engine *p = (plan_engine *)base;
    uint32_t out[2];
    if (plan_set_allow(p, allow, err) || run_tokens(p, tokens, n, pos, NULL, false, err) ||
        p->d->ops->download(p->d, p->best, 0, out, sizeof out, err))
        return -1;
    float mx;
    memcpy(&mx, &out[1], 4);
    *best = mx == -INFINITY || out[0] >= p->s.hp.n_vocab ? -1 : (int32_t)out[0];
    return 0;
}

static int plan_eval_argmax(engine *base, const int32_t *tokens, uint32_t n, uint32_t pos, int32_t *best,
                            kiln_err *err) {
    return argmax_of(base, tokens, n, pos, NULL, best, err);
}

static int plan_eval_argmax_masked(engine *base, const int32_t *tokens, uint32_t n, uint32_t pos,
                                   const uint32_t *allow, int32_t *best, kiln_err *err) {
    if (!allow) return kiln_fail(err, KILN_ERR_INVALID, "no mask"), -1;
    return argmax_of(base, tokens, n, pos, allow, best, err);
}


static void plan_destroy(engine *base) {
    plan_engine *p = (plan_engine *)base;
    rt_device *d = p->d;
    if (p->mc) plan_moe_cache_free(p); /* its segments' recordings but the first of each */
    if (p->decode) d->ops->release_recording(d, p->decode);
    if (p->prefill) d->ops->release_recording(d, p->prefill);
    for (int bi = 0; bi < PLAN_SUBS; bi++) {
        plan_prefill *b = &p->sub[bi];
        if (b->rec) d->ops->release_recording(d, b->rec);
        for (int i = 0; i < K_COUNT; i++)
            if (plan_block_role(i)) { /* the others are the full block's */
                if (b->kern[i]) d->ops->release_kernel(d, b->kern[i]);
                plan_sig_free(&b->sig[i]);
            }
    }
    plan_batch_release(p);
    plan_qvar_release(p);
    for (uint32_t i = 0; i < p->n_launch; i++) free((void *)p->launch[i].args);
    free(p->launch);
    for (int i = 0; i < K_COUNT; i++) {
        if (p->kern[i]) d->ops->release_kernel(d, p->kern[i]);
        plan_sig_free(&p->sig[i]);
    }
    bool own = !p->owner; /* borrowed weights stay with their owner */
    rt_buffer *bufs[] = {own ? p->tok_embd : NULL, own && p->output != p->tok_embd ? p->output : NULL,
                         own ? p->output_norm : NULL, own ? p->freqs : NULL, p->xa,
                         p->xb, p->h, p->qkv, p->att, p->g, p->u, p->act, p->last, p->hl, p->logits, p->tok, p->info,
                         p->part, p->attn_count, p->tok_h, p->info_h, p->best, p->allow, p->agate, p->gated, p->dn_qkv, p->dn_z, p->dn_ba,
                         p->dn_x, p->dn_y, p->dn_qk, p->dn_uw, p->dn_p, p->dn_gl, p->dn_o,
                         p->dn_in1_qkv, p->dn_in1_z, p->dn_in1_ba, p->dn_in1, p->moe_sel, p->moe_wt,
                         p->moe_act, p->moe_rank, p->moe_off, p->moe_list, p->moe_yc,
                         p->moe_scores, p->moe_csel, p->moe_miss, p->moe_sel_host,
                         p->moe_h_host, p->moe_nslots}; /* views before their buffer */
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) d->ops->release(d, bufs[i]);
    for (uint32_t l = 0; p->L && l < p->s.hp.n_layer; l++) {
        plan_layer *L = &p->L[l];
        rt_buffer *weights[] = {L->attn_norm, L->wqkv,   L->bqkv,   L->q_norm, L->k_norm,  L->wo,
                                L->ffn_norm,  L->w_gate, L->w_up,   L->w_down, L->w_agate, L->dn_qkv,
                                L->dn_z,      L->dn_ba,  L->dn_in,  L->dn_out, L->dn_conv, L->dn_dt_bias,
                                L->dn_a,      L->dn_norm,  L->qkv_part[0], L->qkv_part[1],
                                L->qkv_part[2], L->router, L->gate_exps, L->up_exps,
                                L->down_exps}; /* views before their buffer */
        rt_buffer *own_bufs[] = {L->kc, L->vc, L->conv_state, L->S}; /* the states: views, before their buffer */
        for (size_t i = 0; own && i < sizeof weights / sizeof weights[0]; i++)
            if (weights[i]) d->ops->release(d, weights[i]);
        for (size_t i = 0; i < sizeof own_bufs / sizeof own_bufs[0]; i++)
            if (own_bufs[i]) d->ops->release(d, own_bufs[i]);
    }
    if (p->pp || (p->owner && p->owner->pp)) plan_pages_detach(p->owner ? p->owner->pp : p->pp, p->slot);
    if (p->pages) d->ops->release(d, p->pages);
    if (p->pages_dev) d->ops->release(d, p->pages_dev); /* after its view */
    plan_pages_destroy(p->pp);
    for (uint32_t l = 0; p->kpool && l < p->s.hp.n_layer; l++) { /* after every layer's views */
        if (p->kpool[l]) d->ops->release(d, p->kpool[l]);
        if (p->vpool[l]) d->ops->release(d, p->vpool[l]);
    }
    free(p->kpool);
    free(p->vpool);
    if (p->state) d->ops->release(d, p->state);
    for (int i = 0; i < PLAN_SNAPSHOTS; i++)
        if (p->snap[i]) d->ops->release(d, p->snap[i]);
    free(p->L);
    free(p->hist);
    free(p->scratch);
    free(p);
}

/* A paged plan's slot: busy while a request is served (its pages are not taken), and the
 * positions it could hold now. */
static void plan_set_busy(engine *base, bool busy) { plan_pages_set_busy((plan_engine *)base, busy); }

static uint32_t plan_room(engine *base) { return plan_pages_room_of((plan_engine *)base); }

const engine_ops plan_ops = {plan_eval,      plan_destroy, plan_eval_argmax, plan_eval_step, plan_eval_argmax_masked,
                             plan_moe_stats, plan_set_busy, plan_room};


void plan_counts(const engine *e, uint32_t *n_kernels, uint32_t *n_launches) {
    const plan_engine *p = (const plan_engine *)e;
    *n_kernels = p->n_kern;
    *n_launches = p->n_decode_launch;
}

uint32_t plan_block(const engine *e) { return ((const plan_engine *)e)->s.n_block; }

/* A plan of shape s0 (checked to fit); owner: the plan whose weight buffers it borrows,
 * or NULL to upload its own. */
/* Layer l's caches: a cache of its own (one slot), or views of the whole of the owner's
 * pools of pages (the owner allocates them). 0, or -1 with err. */
static int layer_caches(plan_engine *p, plan_engine *owner, uint32_t l, kiln_err *err) {
    rt_device *d = p->d;
    plan_layer *L = &p->L[l];
    const plan_shape *s = &p->s;
    if (!s->pages.rows) {
        size_t cache = (size_t)s->n_ctx * s->kv_dim * 2;
        return !(L->kc = plan_alloc(p, cache, err)) || !(L->vc = plan_alloc(p, cache, err)) ? -1 : 0;
    }
    size_t pool = (size_t)s->pages.n_pages * s->pages.rows * s->kv_dim * 2;
    plan_engine *o = owner ? owner : p;
    if (!owner && (!(p->kpool[l] = plan_alloc(p, pool, err)) || !(p->vpool[l] = plan_alloc(p, pool, err)))) return -1;
    return !(L->kc = d->ops->view(d, o->kpool[l], 0, pool, err)) || !(L->vc = d->ops->view(d, o->vpool[l], 0, pool, err))
               ? -1
               : 0;
}

/* A paged plan's tables: the owner's books and device tables (every entry none), and each
 * plan's row of them. 0, or -1 with err. */
static int page_tables(plan_engine *p, plan_engine *owner, kiln_err *err) {
    const kn_pages *pg = &p->s.pages;
    size_t row = (size_t)pg->stride * 4;
    plan_engine *o = owner ? owner : p;
    if (!owner) {
        if (!(p->pp = plan_pages_create(pg->n_pages, pg->stride, p->s.n_slots)))
            return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        if (!(p->pages_dev = plan_alloc(p, row * p->s.n_slots, err)) || plan_pages_sync(p->pp, p->d, p->pages_dev, err))
            return -1;
    }
    if (!(p->pages = p->d->ops->view(p->d, o->pages_dev, p->slot * row, row, err))) return -1;
    plan_pages_attach(o->pp, p->slot, p);
    return 0;
}

static engine *make(const model *m, rt_device *d, const plan_shape *s0, plan_engine *owner, kiln_err *err) {
    plan_shape s = *s0;
    const arch_hparams *hp = &s.hp;
    plan_engine *p = calloc(1, sizeof *p);
    if (!p || !(p->L = calloc(hp->n_layer, sizeof *p->L))) {
        free(p);
        return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), NULL;
    }
    p->m = m;
    p->d = d;
    p->owner = owner;
    s.fuse_norm = plan_can_fuse_norm(&s, &d->caps);
    s.skinny_norm = plan_skinny_norm_on();
    s.attn_merged = plan_attn_merged_on(&d->caps);
    p->s = s;
    p->base.ops = &plan_ops;
    p->base.n_vocab = hp->n_vocab;
    p->base.n_ctx = s.n_ctx;
    snprintf(p->name, sizeof p->name, "%s (%s, %s)", d->label, d->caps.name, s.dt == IR_BF16 ? "bf16" : "f16");
    p->base.name = p->name;
    char what[96];
    snprintf(what, sizeof what, "%s: %s", d->label, owner ? "another slot's cache and kernels" : "weights and kernels");
    uint64_t n_kernels = 0;
    for (int i = 0; i < K_COUNT; i++) n_kernels += plan_role_used(&s, i);
    for (int bi = 0; bi < PLAN_SUBS; bi++)
        for (int i = 0; i < K_COUNT && plan_sub_block(&s, &d->caps, bi); i++)
            n_kernels += plan_block_role(i) && plan_role_used(&s, i);
    for (int bi = 0; bi < PLAN_BUCKETS && !owner && s.pages.rows; bi++)
        for (int i = 0; i < K_COUNT && plan_batch_size(&s, &d->caps, bi); i++) n_kernels += plan_batch_role(i);
    progress_begin(&p->prog, what, (uint64_t)hp->n_layer + n_kernels);
    int bad = s.moe_slots && plan_moe_cache_init(p, err);
    bad = bad || (owner ? plan_borrow_weights(p, owner) : plan_upload_weights(p, err));
    if (!owner && s.pages.rows && (!(p->kpool = calloc(hp->n_layer, sizeof *p->kpool)) ||
                                           !(p->vpool = calloc(hp->n_layer, sizeof *p->vpool)))) {
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        bad = 1;
    }
    if (!bad && owner && owner->kpool) { /* the next slot of the owner's pool */
        if (owner->slots_taken + 1 >= s.n_slots) {
            kiln_fail(err, KILN_ERR_INVALID, "%s: more plans than the %u slots the first was made for", d->label,
                      s.n_slots);
            bad = 1;
        } else {
            p->slot = ++owner->slots_taken;
        }
    }
    if (!bad && s.pages.rows) bad = page_tables(p, owner, err) != 0;
    bool q35 = arch_is_qwen35(hp->arch);
    /* the DeltaNet layers' states in one buffer (zeroed before the first eval), its snapshots */
    size_t conv, S, s_at, stride, state = q35 ? plan_state_layout(&s, &s_at, &stride) : 0;
    plan_state_sizes(&s, &conv, &S);
    if (!bad && state) {
        bad = !(p->state = plan_alloc(p, state, err));
        for (int i = 0; i < PLAN_SNAPSHOTS && !bad; i++) bad = !(p->snap[i] = plan_alloc(p, state, err));
    }
    for (uint32_t l = 0, j = 0; l < hp->n_layer && !bad; l++) {
        if (q35 && hp->recurrent[l]) {
            plan_layer *L = &p->L[l];
            bad = !(L->conv_state = d->ops->view(d, p->state, j * stride, conv, err)) ||
                  !(L->S = d->ops->view(d, p->state, j * stride + s_at, S, err));
            j++;
        } else {
            bad = layer_caches(p, owner, l, err) != 0;
        }
    }
    if (!bad && hp->n_recurrent && !(p->hist = malloc((size_t)s.n_ctx * sizeof *p->hist))) {
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        bad = 1;
    }
    free(p->scratch);
    p->scratch = NULL;
    p->scratch_n = 0; /* the expert cache converts again later */
    size_t nb = s.n_block;
    kn_deltanet_scratch dns = {0};
    if (!bad && hp->n_recurrent && plan_dn_scratch(&s, &d->caps, &dns, err)) bad = 1;
    struct { rt_buffer **b; size_t bytes; } acts[] = {
        {&p->xa, nb * hp->n_embd * 2}, {&p->xb, nb * hp->n_embd * 2}, {&p->h, nb * hp->n_embd * 2},
        {&p->qkv, nb * s.qkv_dim * 2}, {&p->att, nb * s.q_dim * 2}, {&p->g, nb * hp->n_ff * 2},
        {&p->u, nb * hp->n_ff * 2}, {&p->act, nb * hp->n_ff * 2}, {&p->last, hp->n_embd * 2},
        {&p->hl, hp->n_embd * 2}, {&p->logits, (size_t)hp->n_vocab * 4}, {&p->tok, nb * 4}, {&p->info, 8},
        {&p->tok_h, nb * 4}, {&p->info_h, 8}, {&p->best, 8}, {&p->allow, (size_t)plan_allow_words(&s) * 4},
        {&p->part, (size_t)hp->n_head * kn_attn_splits(&d->caps, hp->n_head, s.n_ctx) * (hp->head_dim_k + 2) * 4},
        {&p->attn_count, s.attn_merged ? (size_t)hp->n_head * 4 : 0},
        /* qwen35 only (0 bytes: no buffer) */
        {&p->agate, q35 ? nb * s.q_dim * 2 : 0}, {&p->gated, q35 ? nb * s.q_dim * 2 : 0},
        {&p->dn_qkv, hp->n_recurrent ? nb * s.conv_dim * 2 : 0}, {&p->dn_x, hp->n_recurrent ? nb * s.conv_dim * 2 : 0},
        {&p->dn_z, hp->n_recurrent ? nb * s.dn_v_dim * 2 : 0}, {&p->dn_y, hp->n_recurrent ? nb * s.dn_v_dim * 2 : 0},
        {&p->dn_ba, hp->n_recurrent ? nb * hp->ssm_v_heads * 4 : 0},
        {&p->dn_in1, hp->n_recurrent ? (size_t)s.dn_in_rows * 2 : 0}, {&p->dn_qk, dns.qk * 4},
        {&p->dn_uw, dns.uw * 4}, {&p->dn_p, dns.p * 4}, {&p->dn_gl, dns.gl * 4}, {&p->dn_o, dns.o * 4},
        /* qwen3moe only */
        {&p->moe_sel, nb * hp->n_expert_used * 4}, {&p->moe_wt, nb * hp->n_expert_used * 4},
        {&p->moe_act, nb * hp->n_expert_used * hp->n_ff_exp * 2}, {&p->moe_rank, nb * hp->n_expert_used * 4},
        {&p->moe_off, hp->n_expert ? (hp->n_expert + 2) * 4 : 0}, {&p->moe_list, nb * hp->n_expert_used * 4},
        {&p->moe_yc, nb * hp->n_expert_used * hp->n_embd * 2}, {&p->moe_scores, nb * hp->n_expert * 4},
        /* an expert cache's (host-mapped: the host writes them between segments) */
        {&p->moe_csel, s.moe_slots ? nb * hp->n_expert_used * 4 : 0},
        {&p->moe_miss, s.moe_slots ? nb * hp->n_expert_used * hp->n_embd * 2 : 0},
        {&p->moe_sel_host, s.moe_slots ? hp->n_expert_used * 4 : 0},
        {&p->moe_h_host, s.moe_slots ? plan_moe_h_words(&s) * 4 : 0}, {&p->moe_nslots, s.moe_slots ? 4 : 0}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0] && !bad; i++) {
        if (!acts[i].bytes) continue;
        /* what the host writes or reads each step lives in host memory; not the logits:
         * the argmax reads them on the device (19 us a token over the bus from host
         * memory on the H100, session 43's profile), the host copies them when it wants them */
        bool host = acts[i].b == &p->tok_h || acts[i].b == &p->info_h ||
                    acts[i].b == &p->best || acts[i].b == &p->moe_csel || acts[i].b == &p->moe_miss ||
                    acts[i].b == &p->moe_sel_host || acts[i].b == &p->moe_h_host;
        if (!(*acts[i].b = (host ? d->ops->alloc_host : d->ops->alloc)(d, acts[i].bytes, err))) bad = 1;
    }
    if (!bad && hp->n_recurrent) /* a decode step's stacked input product, read through views */
        bad = !(p->dn_in1_qkv = d->ops->view(d, p->dn_in1, 0, (size_t)s.conv_dim * 2, err)) ||
              !(p->dn_in1_z = d->ops->view(d, p->dn_in1, (size_t)s.dn_z_row * 2, (size_t)s.dn_v_dim * 2, err)) ||
              !(p->dn_in1_ba = d->ops->view(d, p->dn_in1, (size_t)s.dn_ba_row * 2, (size_t)hp->ssm_v_heads * 4, err));
    for (int i = 0; i < 2 && !bad && s.moe_slots; i++) /* the cache's inputs zeroed: slot 0, no misses */
        bad = plan_zero(d, i ? p->moe_miss : p->moe_csel, err);
    if (!bad && p->attn_count) bad = plan_zero(d, p->attn_count, err); /* the merged attention's counts start at 0 */
    if (!bad && s.moe_slots) bad = plan_moe_set_slots(p, s.moe_slots, err);
    if (!bad) { /* every token allowed until a masked argmax */
        p->allow_custom = true;
        bad = plan_set_allow(p, NULL, err) != 0;
    }
    /* One replay of each recording now, so the driver's first-use work (final pipeline
     * compiles, page mappings) lands in load time, not in the first prompt: the prefill
     * for no tokens (every product and attention tile returns at once), a decode step at
     * position 0 (its cache row is rewritten by the first real token). */
    int32_t tok0 = 0;
    bad = bad || build(p, err) || step(p, p->prefill, &tok0, 0, 0, err);
    for (int bi = 0; bi < PLAN_SUBS && !bad; bi++) bad = p->sub[bi].rec && step(p, p->sub[bi].rec, &tok0, 0, 0, err);
    for (int bi = 0; bi < PLAN_BUCKETS && !bad; bi++) /* a step of no tokens: every row is padding */
        bad = p->batch[bi].rec && step(p, p->batch[bi].rec, &tok0, 0, 0, err);
    /* the warm-up step went through the recurrent state: back to zero */
    if (bad || step(p, p->decode, &tok0, 1, 0, err) || (hp->n_recurrent && plan_state_reset(p, err))) {
        progress_end(&p->prog, false);
        plan_destroy(&p->base);
        return NULL;
    }
    progress_end(&p->prog, true);
    return &p->base;
}


static bool hp_experts(const plan_shape *s) { return s->hp.n_expert > 0; }

engine *plan_create_slots(const model *m, rt_device *d, uint32_t dtype, uint32_t n_ctx, uint32_t n_block,
                          uint32_t n_slots, kiln_err *err) {
    plan_shape s;
    kiln_err why = {0};
    if (plan_shape_of(m, dtype, n_ctx, n_block, &s, &why))
        return kiln_err_wrap(err, &why, "%s", d->label), NULL;
    s.n_slots = n_slots ? n_slots : 1;
    s.fault_logits = d->debug.fault_logits;
    /* a mixture of experts that does not fit whole: an expert cache (at least a slot a
     * layer while the context and block are chosen, then as many as fit) */
    bool cache = hp_experts(&s) && plan_moe_slots_fit(m, &s, d, 0) > 0;
    if (cache && s.n_slots > 1)
        return kiln_fail(err, KILN_ERR_UNSUPPORTED,
                         "%s: the model's experts do not all fit, and an expert cache serves one slot (try --parallel 1)",
                         d->label),
               NULL;
    if (cache) s.moe_slots = 1, s.moe_blocks = plan_moe_blocks_ok(m);
    plan_shape first = s;
    for (;;) {
        /* no --ctx: the model's context, halved until it fits (down to 256 positions) */
        while (!n_ctx && s.n_ctx > 256 && plan_check_fit(m, &s, d, &why)) {
            s.n_ctx = s.n_ctx / 2 > 256 ? s.n_ctx / 2 : 256;
            if (s.n_block > (s.n_ctx + 63) / 64 * 64) s.n_block = (s.n_ctx + 63) / 64 * 64;
        }
        /* no --block: the long block, or where even that does not fit, blocks of 512 */
        if (n_block || s.n_block <= PLAN_MID_BLOCK || !plan_check_fit(m, &s, d, &why)) break;
        s = first;
        s.n_block = PLAN_MID_BLOCK;
    }
    if (plan_check_fit(m, &s, d, err)) return NULL;
    if (cache) s.moe_slots = plan_moe_slots_fit(m, &s, d, 0);
    if (s.n_slots > 1) { /* the slots' caches: one pool of pages, a table of them a slot */
        s.pages.rows = PLAN_PAGE_ROWS;
        s.pages.n_pages = (s.n_ctx + PLAN_PAGE_ROWS - 1) / PLAN_PAGE_ROWS;
        uint32_t per_view = RT_VIEW_ALIGN / 4; /* each slot's row of the tables starts on a view's alignment */
        s.pages.stride = (s.pages.n_pages + per_view - 1) / per_view * per_view;
    }
    /* an expert cache sized from the driver's free memory: where the device then refuses an
     * allocation (kiln's buffers take more than their bytes, another program took memory
     * meanwhile), half the slots, down to one */
    kiln_err last = {0};
    engine *e = make(m, d, &s, NULL, &last);
    /* every expert resident, refused: the driver's free count promised more than the
     * device gives (another program's allocations since, memory the count does not show):
     * a cache of all but one expert a layer, halved from there */
    if (!e && hp_experts(&s) && !s.moe_slots && s.n_slots == 1 && last.code == KILN_ERR_NOMEM) {
        s.moe_slots = s.hp.n_expert - 1, s.moe_blocks = plan_moe_blocks_ok(m);
        kiln_err_clear(&last);
        e = make(m, d, &s, NULL, &last);
    }
    while (!e && s.moe_slots > 1 && last.code == KILN_ERR_NOMEM) {
        s.moe_slots /= 2;
        kiln_err_clear(&last);
        e = make(m, d, &s, NULL, &last);
    }
    if (!e && err) *err = last;
    return e;
}


engine *plan_create(const model *m, rt_device *d, uint32_t dtype, uint32_t n_ctx, uint32_t n_block, kiln_err *err) {
    return plan_create_slots(m, d, dtype, n_ctx, n_block, 1, err);
}


engine *plan_create_sibling(engine *first, kiln_err *err) {
    if (!first || first->ops != &plan_ops) return kiln_fail(err, KILN_ERR_INVALID, "not a plan"), NULL;
    plan_engine *o = (plan_engine *)first;
    if (o->owner) o = (plan_engine *)o->owner; /* its owner is a plan made here, not a constant */
    return make(o->m, o->d, &o->s, o, err);
}
