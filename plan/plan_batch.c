/* Steps of several slots' tokens (kiln serve --parallel): the plans of one
 * plan_create_slots keep their KV caches in one pool of pages a layer, so one recording
 * can evaluate every decoding slot's next token at once, each at its own position of its
 * own slot's pages (the tables of every slot, plan_pages.c): the products read every weight once for the whole step (the short
 * block's skinny products, or the tiled products over a block of 64 where the device has
 * no skinny ones), kn_qk_prep_batch and the batched attention reach each token's rows of
 * the pool, and the logits head and argmax run over every row.
 *
 * A step may also carry short prompts' tokens: a slot's several items at consecutive
 * positions, in order (its rows' keys and values are in the pool before the attention
 * reads them, so each row attends to the ones before it); a step past the largest bucket
 * replays it on the items in order.
 *
 * The owner holds the recordings, one per bucket of 8, 16, 32 and 64 tokens (up to the
 * smallest that holds every slot, and the largest), and the few buffers of its own (the staged inputs, the
 * attention's partials, every row's logits and argmax); the activations are the owner's
 * prefill buffers, free while a step runs because the slots never evaluate at the same
 * time (model/engine_batch.h). A step's rows past its tokens are padding: slot n_slots
 * (past the pool) so the cache stores and attention skip them, the products do not store
 * them (info = {0, n}). */
#include "base/error.h"
#include "plan/plan_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const uint32_t bucket_tokens[PLAN_BUCKETS] = {8, 16, 32, PLAN_BATCH_MAX};

bool plan_batch_role(int i) {
    switch (i) {
    case K_STAGE_BATCH: case K_QK_PREP_BATCH: case K_ATTN_BATCH: case K_ATTN_MERGE_BATCH: case K_MM_OUT:
    case K_ARGMAX_BATCH: case K_MM_QKV: case K_MM_O: case K_MM_FF: case K_MM_DOWN: case K_SWIGLU:
        return true;
    default: return false;
    }
}

uint32_t plan_batch_splits(const plan_shape *s, const rt_caps *c, uint32_t nb) {
    return kn_attn_splits(c, s->hp.n_head * nb, s->n_ctx);
}

/* A bucket of nb tokens works where its products do: the skinny ones at that size (the
 * logits head's too), or the tiled ones over a whole tile of 64 tokens. */
static bool bucket_ok(const plan_shape *s, const rt_caps *c, uint32_t nb) {
    if (nb % 64 == 0) return true;
    return plan_short_block_ok(s, c, nb) && kn_matmul_skinny_ok(c, s->hp.n_vocab, s->hp.n_embd, nb, s->dt);
}

uint32_t plan_batch_size(const plan_shape *s, const rt_caps *c, int i) {
    /* the slots share a pool of caches (plan.c's pooled, checked where the owner is made);
     * qwen35's recurrent state has no batched kernels; a planted fault is the decode head's */
    if (i < 0 || i >= PLAN_BUCKETS || s->n_slots < 2 || arch_is_qwen35(s->hp.arch) || s->fault_logits ||
        s->n_block < PLAN_BATCH_MAX)
        return 0;
    uint32_t nb = bucket_tokens[i];
    /* none past the smallest that holds every slot's next token, but the largest: short
     * prompts' tokens join a step's (model/engine_batch.c) */
    for (int j = 0; j < i && i < PLAN_BUCKETS - 1; j++)
        if (bucket_tokens[j] >= s->n_slots && bucket_ok(s, c, bucket_tokens[j])) return 0;
    return bucket_ok(s, c, nb) ? nb : 0;
}

/* Bytes of the buffers of the largest bucket: staged inputs, partials, logits, argmax. */
static void batch_sizes(const plan_shape *s, const rt_caps *c, uint64_t *part, uint64_t *logits, uint32_t *max_nb) {
    *part = *logits = 0, *max_nb = 0;
    for (int i = 0; i < PLAN_BUCKETS; i++) {
        uint32_t nb = plan_batch_size(s, c, i);
        if (!nb) continue;
        uint64_t pb = 4ull * nb * s->hp.n_head * plan_batch_splits(s, c, nb) * (s->hp.head_dim_k + 2);
        if (pb > *part) *part = pb;
        *max_nb = nb;
    }
    *logits = 4ull * *max_nb * s->hp.n_vocab;
}

uint64_t plan_batch_bytes(const plan_shape *s, const rt_caps *c) {
    uint64_t part, logits;
    uint32_t nb;
    batch_sizes(s, c, &part, &logits, &nb);
    return nb ? part + logits + 8ull * nb + 4ull * nb * s->hp.n_head + 2ull * 4 * PLAN_BATCH_WORDS : 0;
}

static int stage(plan_engine *o, engine_step *const *it, uint32_t n, kiln_err *err);

/* Bucket bi: its own kernels for the roles that follow its size, the plan's for the rest,
 * and its recording. */
static int build_bucket(plan_engine *p, int bi, uint32_t nb, kiln_err *err) {
    plan_prefill *b = &p->batch[bi];
    plan_shape s = p->s;
    s.n_block = nb;
    bool ff_swiglu = plan_ff_swiglu(&s, &p->d->caps), q_ffn = false;
    for (uint32_t l = 0; l < s.hp.n_layer; l++) q_ffn |= p->L[l].qt_gate >= 0;
    for (int i = 0; i < K_COUNT; i++) {
        if (!plan_batch_role(i)) {
            b->kern[i] = p->kern[i], b->sig[i] = p->sig[i];
            b->grid[i][0] = p->grid[i][0], b->grid[i][1] = p->grid[i][1];
            continue;
        }
        /* the gate and up product applies it, unless they are kept in blocks (two products
         * and kn_swiglu, plan_record.c's add_block_ffn) */
        if (i == K_SWIGLU && ff_swiglu && !q_ffn) continue;
        if (s.hp.n_expert && (i == K_MM_FF || i == K_MM_DOWN || i == K_SWIGLU)) continue; /* the experts' instead */
        if (i == K_ATTN_MERGE_BATCH && s.attn_merged) continue; /* the attention's launch merges */
        if (!(b->kern[i] = plan_compile_kernel(p->d, &s, i, b->grid[i], &b->sig[i], err))) return -1;
        p->n_kern++;
    }
    b->n = nb;
    b->first_launch = p->n_launch;
    if (plan_record_batch(p, b, false, err)) return -1;
    b->n_launch = p->n_launch - b->first_launch;
    if (!(b->rec = p->d->ops->record(p->d, p->launch + b->first_launch, b->n_launch, err))) return -1;
    if (!plan_attn_prep(&s, &p->d->caps)) return 0;
    /* the steps whose slots have a token each: the attention's prep form, no kn_qk_prep_batch */
    s.batch_prep = true;
    if (!(b->attn_prep = plan_compile_kernel(p->d, &s, K_ATTN_BATCH, b->grid_prep, &b->sig_prep, err))) return -1;
    p->n_kern++;
    b->first_prep = p->n_launch;
    if (plan_record_batch(p, b, true, err)) return -1;
    b->n_prep = p->n_launch - b->first_prep;
    b->rec_prep = p->d->ops->record(p->d, p->launch + b->first_prep, b->n_prep, err);
    return b->rec_prep ? 0 : -1;
}

int plan_batch_build(plan_engine *p, kiln_err *err) {
    rt_device *d = p->d;
    uint64_t part, logits;
    uint32_t max_nb;
    if (p->owner || !p->kpool) return 0;
    batch_sizes(&p->s, &d->caps, &part, &logits, &max_nb);
    if (!max_nb) return 0;
    size_t tok_bytes = (size_t)PLAN_BATCH_MAX * 4;
    if (!(p->btok_h = d->ops->alloc_host(d, 4 * PLAN_BATCH_WORDS, err)) ||
        !(p->btok = d->ops->alloc(d, 4 * PLAN_BATCH_WORDS, err)) ||
        !(p->btok_tok = d->ops->view(d, p->btok, 0, tok_bytes, err)) ||
        !(p->btok_pos = d->ops->view(d, p->btok, tok_bytes, 2 * tok_bytes, err)) ||
        !(p->bpart = d->ops->alloc(d, part, err)) || !(p->blogits = d->ops->alloc(d, logits, err)) ||
        !(p->bcount = plan_alloc_zeroed(d, 4ull * max_nb * p->s.hp.n_head, err)) ||
        !(p->bbest = d->ops->alloc_host(d, 8ull * max_nb, err)) || stage(p, NULL, 0, err))
        return -1;
    size_t words = plan_allow_words(&p->s);
    if (!(p->ballow = d->ops->alloc(d, words * 4 * max_nb, err))) return -1;
    if (!(p->allow_rows = malloc(words * 4 * max_nb))) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    memset(p->allow_rows, 0xff, words * 4 * max_nb);
    if (d->ops->upload(d, p->ballow, 0, p->allow_rows, words * 4 * max_nb, err)) return -1;
    for (int bi = 0; bi < PLAN_BUCKETS; bi++) {
        uint32_t nb = plan_batch_size(&p->s, &d->caps, bi);
        if (nb && build_bucket(p, bi, nb, err)) return -1;
    }
    return 0;
}

void plan_batch_release(plan_engine *p) {
    rt_device *d = p->d;
    for (int bi = 0; bi < PLAN_BUCKETS; bi++) {
        plan_prefill *b = &p->batch[bi];
        if (b->rec) d->ops->release_recording(d, b->rec);
        if (b->rec_prep) d->ops->release_recording(d, b->rec_prep);
        if (b->attn_prep) d->ops->release_kernel(d, b->attn_prep);
        plan_sig_free(&b->sig_prep);
        for (int i = 0; i < K_COUNT; i++)
            if (plan_batch_role(i)) { /* the others are the plan's */
                if (b->kern[i]) d->ops->release_kernel(d, b->kern[i]);
                plan_sig_free(&b->sig[i]);
            }
    }
    rt_buffer *bufs[] = {p->btok_tok, p->btok_pos, p->btok, p->btok_h, p->bpart,
                         p->bcount, p->blogits, p->bbest, p->ballow};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) d->ops->release(d, bufs[i]);
    free(p->allow_rows);
}

/* ---- a step -------------------------------------------------------------------------- */

static plan_engine *as_plan(engine *e) { return e && e->ops == &plan_ops ? (plan_engine *)e : NULL; }

/* What eval would refuse for the item's token, or 0 (as plan.c's run_tokens); prev: the
 * step's item before it on the same slot (its position the one before), or NULL. */
static int check_item(engine_step *it, const engine_step *prev) {
    plan_engine *p = (plan_engine *)it->e;
    engine *base = &p->base;
    if (prev && prev->rc) return kiln_fail(&it->err, KILN_ERR_INVALID, "%s", prev->err.msg);
    if (!prev && it->pos > base->n_past)
        return kiln_fail(&it->err, KILN_ERR_INVALID, "position %u is past the %u cached positions", it->pos,
                         base->n_past);
    if ((uint64_t)it->pos + 1 > base->n_ctx)
        return kiln_fail(&it->err, KILN_ERR_INVALID, "a token at position %u exceeds the context of %u", it->pos,
                         base->n_ctx);
    if (it->token < 0 || (uint32_t)it->token >= p->s.hp.n_vocab)
        return kiln_fail(&it->err, KILN_ERR_INVALID, "token id %d is outside the vocabulary of %u", it->token,
                         p->s.hp.n_vocab);
    return 0;
}

/* The smallest bucket holding n tokens (n <= the largest's). */
static const plan_prefill *bucket_for(const plan_engine *o, uint32_t n) {
    for (int bi = 0; bi < PLAN_BUCKETS; bi++)
        if (o->batch[bi].rec && n <= o->batch[bi].n) return &o->batch[bi];
    return NULL;
}

/* The staged inputs of items it[0..n) into the host's buffer: token ids, then (position,
 * slot) pairs; the rows past n padding at slot n_slots, past the pool, so nothing stores. */
static int stage(plan_engine *o, engine_step *const *it, uint32_t n, kiln_err *err) {
    uint32_t in[PLAN_BATCH_WORDS] = {0};
    for (uint32_t t = 0; t < PLAN_BATCH_MAX; t++) {
        engine_step *i = t < n ? it[t] : NULL;
        in[t] = i ? (uint32_t)i->token : 0;
        in[PLAN_BATCH_MAX + 2 * t] = i ? i->pos : 0;
        in[PLAN_BATCH_MAX + 2 * t + 1] = i ? ((plan_engine *)i->e)->slot : o->s.n_slots;
    }
    return o->d->ops->upload(o->d, o->btok_h, 0, in, sizeof in, err);
}

/* The argmax masks of rows [0, n): each item's, or all set; uploaded in one copy where any
 * row's changes (ballow_custom: the rows left not all set). */
static int stage_allow(plan_engine *o, engine_step *const *it, uint32_t n, kiln_err *err) {
    uint64_t want = 0, rows = n >= 64 ? ~0ull : (1ull << n) - 1;
    for (uint32_t t = 0; t < n; t++)
        if (it[t]->best && it[t]->allow) want |= 1ull << t;
    if (!want && !(o->ballow_custom & rows)) return 0;
    size_t words = plan_allow_words(&o->s);
    for (uint32_t t = 0; t < n; t++) {
        const uint32_t *src = want >> t & 1 ? it[t]->allow : NULL;
        uint32_t *row = o->allow_rows + (size_t)t * words;
        if (src) memcpy(row, src, words * 4);
        else if (o->ballow_custom >> t & 1) memset(row, 0xff, words * 4);
    }
    if (o->d->ops->upload(o->d, o->ballow, 0, o->allow_rows, (size_t)n * words * 4, err)) return -1;
    o->ballow_custom = (o->ballow_custom & ~rows) | want;
    return 0;
}

/* Items it[0..n) (checked, n within the largest bucket) in one replay; each item's
 * result read back. 0, or -1 with err (the device failed: every item fails with it). */
static int run_bucket(plan_engine *o, engine_step **it, uint32_t n, kiln_err *err) {
    rt_device *d = o->d;
    const plan_prefill *b = bucket_for(o, n);
    uint32_t info[2] = {0, n}, best[2 * PLAN_BATCH_MAX];
    size_t row = (size_t)o->s.hp.n_vocab * 4;
    /* the prep form where no slot has two of the step's tokens (each would read keys the
     * other stores in the same launch) */
    bool one_each = b->rec_prep != NULL;
    for (uint32_t t = 1; t < n && one_each; t++)
        for (uint32_t u = 0; u < t && one_each; u++) one_each = it[t]->e != it[u]->e;
    if (stage(o, it, n, err) || stage_allow(o, it, n, err) || d->ops->upload(d, o->info_h, 0, info, sizeof info, err) ||
        d->ops->replay(d, one_each ? b->rec_prep : b->rec, err) ||
        d->ops->download(d, o->bbest, 0, best, (size_t)n * 8, err))
        return -1;
    for (uint32_t t = 0; t < n; t++) {
        plan_engine *p = (plan_engine *)it[t]->e;
        p->base.n_past = it[t]->pos + 1;
        if (it[t]->logits && d->ops->download(d, o->blogits, t * row, it[t]->logits, row, err)) return -1;
        if (it[t]->best) {
            float mx;
            memcpy(&mx, &best[2 * t + 1], 4);
            *it[t]->best = mx == -INFINITY || best[2 * t] >= o->s.hp.n_vocab ? -1 : (int32_t)best[2 * t];
        }
    }
    return 0;
}

int plan_batch_stage_profile(plan_engine *p, uint32_t n, kiln_err *err) {
    engine_step it[PLAN_BATCH_MAX], *go[PLAN_BATCH_MAX];
    uint32_t info[2] = {0, n};
    for (uint32_t t = 0; t < n && t < PLAN_BATCH_MAX; t++)
        it[t] = (engine_step){.e = &p->base, .token = 0, .pos = t}, go[t] = &it[t];
    return stage(p, go, n, err) || p->d->ops->upload(p->d, p->info_h, 0, info, sizeof info, err) ? -1 : 0;
}

bool plan_owns_kernel(const plan_engine *p, int i, const rt_kernel *k) {
    if (p->kern[i] == k) return true;
    for (int bi = 0; bi < PLAN_SUBS; bi++)
        if (p->sub[bi].kern[i] == k) return true;
    for (int bi = 0; bi < PLAN_BUCKETS; bi++)
        if (p->batch[bi].kern[i] == k || (i == K_ATTN_BATCH && p->batch[bi].attn_prep == k)) return true;
    const plan_qvar *v = plan_qvar_of(p, k);
    return v && v->role == i;
}

int plan_eval_step(engine_step *items, uint32_t n) {
    plan_engine *first = n ? as_plan(items[0].e) : NULL;
    plan_engine *o = first ? first->owner ? (plan_engine *)first->owner : first : NULL;
    if (!o || !bucket_for(o, 1)) return -1;
    /* siblings of one owner; a slot's items (a prompt's tokens) at consecutive positions in
     * order: prev[i], the item before i on its slot, or -1 */
    uint32_t slots = o->s.n_slots;
    int32_t *last = malloc(((size_t)slots + n) * sizeof *last), *prev = last + slots;
    if (!last) return -1;
    for (uint32_t s = 0; s < slots; s++) last[s] = -1;
    for (uint32_t i = 0; i < n; i++) {
        plan_engine *p = as_plan(items[i].e);
        if (!p || (p->owner ? p->owner : p) != o || p->slot >= slots) return free(last), -1;
        prev[i] = last[p->slot];
        if (prev[i] >= 0 && items[i].pos != items[prev[i]].pos + 1) return free(last), -1;
        last[p->slot] = (int32_t)i;
    }
    /* each item's page for its position, none taken from another item of the step */
    for (uint32_t i = 0; i < n && o->pp; i++) plan_pages_pin(o->pp, ((plan_engine *)items[i].e)->slot, true);
    for (uint32_t i = 0; i < n; i++) {
        engine_step *it = &items[i];
        kiln_err_clear(&it->err);
        if ((it->rc = check_item(it, prev[i] >= 0 ? &items[prev[i]] : NULL)) == 0 && o->pp)
            it->rc = plan_pages_reserve(o->pp, ((plan_engine *)it->e)->slot, it->pos + 1, &it->err);
    }
    free(last);
    for (uint32_t i = 0; i < n && o->pp; i++) plan_pages_pin(o->pp, ((plan_engine *)items[i].e)->slot, false);
    kiln_err sync = {0};
    if (o->pp && plan_pages_sync(o->pp, o->d, o->pages_dev, &sync))
        for (uint32_t i = 0; i < n; i++)
            if (items[i].rc == 0) items[i].rc = -1, items[i].err = sync;
    engine_step *go[PLAN_BATCH_MAX];
    uint32_t max_nb = 0, taken = 0;
    for (int bi = 0; bi < PLAN_BUCKETS; bi++)
        if (o->batch[bi].rec) max_nb = o->batch[bi].n;
    for (uint32_t i = 0; i <= n; i++) {
        if (i < n) {
            engine_step *it = &items[i];
            if (it->rc) continue;
            go[taken++] = it;
        }
        if (taken && (taken == max_nb || i == n)) {
            kiln_err err = {0};
            if (run_bucket(o, go, taken, &err))
                for (uint32_t t = 0; t < taken; t++) go[t]->rc = -1, go[t]->err = err;
            taken = 0;
        }
    }
    return 0;
}
