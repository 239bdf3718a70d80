/* The expert cache: a mixture of experts whose experts do not all fit the device keeps
 * every other weight resident and, per layer, s.moe_slots experts in the slots of its
 * gate_exps, up_exps and down_exps buffers; the host's map says which expert each slot
 * holds. Every recording is cut after each layer's router (plan_moe_cut); between the
 * segments the host reads the layer's choice, translates it into slots (moe_csel, a miss
 * KN_MOE_MISS), computes the misses from the mapped file (plan_moe_host.c) into moe_miss,
 * and the next segment's experts' kernels take the slots' products and the host's alike
 * (kernels/moe.c's cached variants: the same weighted sum in the same order).
 *
 * A block's missing experts chosen often enough that an upload costs less than the host's
 * threads (both costs measured as they run) are uploaded into the slots after the block's
 * first pass over its resident experts, a group of slots' worth at a time, each group's
 * choices run through the pass's recording again; the host computes the rest.
 *
 * Upkeep after each eval: every expert's use decays and counts its choices; the most used
 * missing expert takes the least used slot where it is clearly more used (one a layer). Every PLAN_MOE_RECHECK evals the slots
 * follow the memory: the device's free bytes (or --mem-limit less what the plan holds)
 * less a margin; fewer slots at once where that falls short, more where it allows at least
 * an eighth more (the buffers and recordings made again for the new count; the kernels
 * read it from moe_nslots). */
#include "base/clock.h"
#include "base/error.h"
#include "gguf/half.h"
#include "plan/plan_internal.h"
#include "plan/plan_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DECAY 0.95f /* each eval's weight on the uses before it */

typedef struct segs {
    rt_recording **rec; /* rec[0] is the plan's (decode, prefill, a smaller block's) */
    uint32_t *layer;    /* the layer whose router (or a block's experts' pass) ends segment i (i < n - 1) */
    uint8_t *kind;      /* PLAN_CUT_ROUTE or PLAN_CUT_PASS */
    uint32_t n;
} segs;

struct plan_moe_cache {
    uint32_t ne, k;
    int32_t *slot_of; /* [layer][expert]: its slot, or -1 */
    int32_t *held;    /* [layer][slot]: its expert, or -1 */
    float *score;     /* [layer][expert]: decayed uses */
    uint32_t *sel, *csel, *choice, *expert; /* a block's choices, their slots, its misses */
    uint16_t *h, *out;                      /* the block's inputs, the misses' products */
    segs seg[2 + PLAN_SUBS];
    uint32_t n_seg;
    uint32_t *cut, *cut_layer, n_cut, cap_cut; /* launches after which a segment ends */
    uint8_t *cut_kind;
    /* a block's layer: the experts it uploads for passes on the device (up[0..n_up)), each
     * expert's choices, and which choices the device computed */
    uint32_t *up, n_up, *count;
    uint8_t *on_device;
    /* the two ways a missing expert can go, as measured: seconds to upload one, seconds of
     * the host's a choice (both 0 until measured) */
    double upload_s, host_s;
    uint32_t *pack; /* blocks: one expert's planes (the largest matrix's words) */
    uint64_t pack_words;
    engine_expert_stats st;
    plan_moe_host host;
    kiln_err broken; /* a resize that failed: every later eval fails with it */
};

static uint64_t expert_bytes(const plan_shape *s) { return 3ull * s->hp.n_ff_exp * s->hp.n_embd * 2; }

/* What the plan may use now: what the device has free (the driver's count now, every
 * process's allocations; else the probe's) plus what the plan holds (held bytes), or
 * --mem-limit's bytes where those are fewer. The margin left: a 16th of the device's room
 * (for other programs' next allocations; their failure would be theirs, not kiln's), a
 * 32nd of a limit. */
static uint64_t room(const rt_device *d, uint64_t held, uint64_t *margin) {
    uint64_t free_now = 0, dev;
    if (d->ops->free_memory && !d->ops->free_memory((rt_device *)d, &free_now)) dev = free_now + held;
    else dev = d->caps.free_bytes ? d->caps.free_bytes : d->caps.memory_bytes;
    if (d->caps.memory_limited && d->caps.memory_bytes <= dev) {
        *margin = d->caps.memory_bytes / 32;
        return d->caps.memory_bytes;
    }
    *margin = dev / 16;
    return dev;
}

uint32_t plan_moe_slots_fit(const model *m, const plan_shape *s0, const rt_device *d, uint64_t held) {
    plan_shape s = *s0;
    uint32_t ne = s.hp.n_expert;
    if (!ne) return 0;
    s.moe_slots = 0;
    uint64_t margin, have = room(d, held, &margin), all = plan_bytes_of(m, &s, d);
    if (all + margin <= have || (d->caps.memory_limited && all <= have && have == d->caps.memory_bytes)) return 0;
    s.moe_slots = 1;
    uint64_t one = plan_bytes_of(m, &s, d);
    s.moe_slots = 2;
    uint64_t per = plan_bytes_of(m, &s, d) - one; /* a slot in every layer: 16 bits or blocks */
    if (one + margin > have || !per) return 1; /* plan_check_fit says what does not fit */
    uint64_t n = 1 + (have - margin - one) / per;
    if (d->caps.max_buffer_bytes) { /* a layer's slots in one buffer a matrix */
        uint64_t most = d->caps.max_buffer_bytes / (expert_bytes(&s) / 3);
        if (n > most) n = most;
    }
    return n >= ne ? ne - 1 : (uint32_t)n;
}

int plan_moe_cache_init(plan_engine *p, kiln_err *err) {
    const arch_hparams *hp = &p->s.hp;
    plan_moe_cache *mc = calloc(1, sizeof *mc);
    if (!(p->mc = mc)) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    size_t nl = hp->n_layer, ne = hp->n_expert, nk = (size_t)p->s.n_block * hp->n_expert_used;
    mc->ne = hp->n_expert, mc->k = hp->n_expert_used;
    mc->slot_of = malloc(nl * ne * 4), mc->held = malloc(nl * ne * 4), mc->score = calloc(nl * ne, 4);
    mc->sel = malloc(nk * 4), mc->csel = malloc(nk * 4), mc->choice = malloc(nk * 4), mc->expert = malloc(nk * 4);
    mc->h = malloc((size_t)p->s.n_block * hp->n_embd * 2), mc->out = malloc(nk * hp->n_embd * 2);
    mc->up = malloc(ne * 4), mc->count = malloc(ne * 4), mc->on_device = malloc(nk);
    if (!mc->slot_of || !mc->held || !mc->score || !mc->sel || !mc->csel || !mc->choice || !mc->expert || !mc->h ||
        !mc->out || !mc->up || !mc->count || !mc->on_device)
        return kiln_fail(err, KILN_ERR_NOMEM, "out of memory (the expert cache)");
    memset(mc->slot_of, 0xff, nl * ne * 4), memset(mc->held, 0xff, nl * ne * 4);
    mc->st.slots = p->s.moe_slots, mc->st.experts = hp->n_expert;
    return plan_moe_host_init(&mc->host, hp, p->s.n_block, err);
}

static void release_segs(plan_engine *p) {
    plan_moe_cache *mc = p->mc;
    for (uint32_t i = 0; i < mc->n_seg; i++) {
        for (uint32_t j = 1; j < mc->seg[i].n; j++) p->d->ops->release_recording(p->d, mc->seg[i].rec[j]);
        free(mc->seg[i].rec), free(mc->seg[i].layer), free(mc->seg[i].kind);
        mc->seg[i] = (segs){0};
    }
    mc->n_seg = 0;
    mc->n_cut = 0;
}

void plan_moe_cache_free(plan_engine *p) {
    plan_moe_cache *mc = p->mc;
    if (!mc) return;
    release_segs(p);
    plan_moe_host_free(&mc->host);
    free(mc->slot_of), free(mc->held), free(mc->score), free(mc->sel), free(mc->csel), free(mc->choice);
    free(mc->expert), free(mc->h), free(mc->out), free(mc->cut), free(mc->cut_layer), free(mc->cut_kind);
    free(mc->up), free(mc->count), free(mc->on_device), free(mc->pack);
    free(mc);
    p->mc = NULL;
}

/* The words each plane (lo, hi, d, dm, sc, mn: kn_quant.h) of rows x cols elements of
 * type q takes, or false where one is not whole words (two experts would share a word). */
static bool plane_words(kn_qtype q, uint64_t rows, uint64_t cols, uint64_t w[6]) {
    const kn_qformat *f = kn_qformat_of(q);
    uint64_t e = rows * cols, units = e / f->unit, subs = e / f->sub;
    uint64_t bits[6] = {e * f->lo_bits,        e * f->hi_bits, units * 16, f->has_min ? units * 16 : 0,
                        f->k_quant ? subs * 8 : 0, f->k_quant && f->has_min ? subs * 8 : 0};
    for (int i = 0; i < 6; i++) {
        if (bits[i] % 32) return false;
        w[i] = bits[i] / 32;
    }
    return true;
}

static const uint64_t *plane_at(const kn_qlayout *L, int i) {
    const uint64_t *at[6] = {&L->lo, &L->hi, &L->d, &L->dm, &L->sc, &L->mn};
    return at[i];
}

/* An expert's matrix of t (rows x cols each) as the cache's slots hold it. */
static bool matrix_blocks_ok(const gguf_tensor *t, uint64_t rows) {
    uint64_t w[6];
    int q = plan_qtype(t->type);
    return q >= 0 && plane_words((kn_qtype)q, rows, t->ne[0], w);
}

bool plan_moe_blocks_ok(const model *m) {
    const arch_hparams *hp = &m->hp;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const model_layer *ml = &m->layers[l];
        if (!ml->q_exps || !matrix_blocks_ok(ml->ffn_gate_exps, hp->n_ff_exp) ||
            !matrix_blocks_ok(ml->ffn_up_exps, hp->n_ff_exp) || !matrix_blocks_ok(ml->ffn_down_exps, hp->n_embd))
            return false;
    }
    return hp->n_layer > 0;
}

/* Rows [r0, r0 + rows) of t (one expert's matrix) into slot s of b (the cache's planes of
 * `slots` experts), in blocks: packed into one expert's planes, each plane's words then
 * uploaded to its place in b's. */
static int fill_blocks(plan_engine *p, rt_buffer *b, uint32_t slots, uint32_t s, const gguf_tensor *t, uint64_t r0,
                       uint32_t rows, kiln_err *err) {
    plan_moe_cache *mc = p->mc;
    kn_qtype q = (kn_qtype)plan_qtype(t->type);
    kn_qlayout Le, Lc;
    uint64_t w[6];
    if (kn_qlayout_of(q, rows, (uint32_t)t->ne[0], &Le, err) ||
        kn_qlayout_of(q, slots * rows, (uint32_t)t->ne[0], &Lc, err))
        return -1;
    if (!plane_words(q, rows, t->ne[0], w)) return kiln_fail(err, KILN_ERR_INTERNAL, "'%s': an expert's planes", t->name);
    if (Le.words > mc->pack_words) {
        free(mc->pack);
        mc->pack_words = (mc->pack = malloc(Le.words * 4)) ? Le.words : 0;
        if (!mc->pack) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    }
    memset(mc->pack, 0, Le.words * 4);
    if (plan_quant_pack(t, r0, rows, &Le, 0, mc->pack, err)) return -1;
    for (int i = 0; i < 6; i++)
        if (w[i] && p->d->ops->upload(p->d, b, (*plane_at(&Lc, i) + s * w[i]) * 4, mc->pack + *plane_at(&Le, i),
                                      w[i] * 4, err))
            return -1;
    return 0;
}

/* Expert e of layer l into slot s (the map follows). */
static int fill(plan_engine *p, uint32_t l, uint32_t s, uint32_t e, kiln_err *err) {
    plan_moe_cache *mc = p->mc;
    const model_layer *ml = &p->m->layers[l];
    plan_layer *L = &p->L[l];
    uint64_t f = p->s.hp.n_ff_exp, d = p->s.hp.n_embd, at = (uint64_t)s * f * d;
    uint32_t slots = p->s.moe_slots;
    double t0 = clock_now_s();
    rt_buffer *b[3] = {L->gate_exps, L->up_exps, L->down_exps};
    for (int i = 0; i < 3; i++) { /* expert e's matrices (the shared expert's own tensors past the last) */
        uint64_t r0, rows = i == 2 ? d : f;
        const gguf_tensor *t = model_expert_matrix(ml, i, e, &r0);
        if (p->s.moe_blocks ? fill_blocks(p, b[i], slots, s, t, r0, (uint32_t)rows, err)
                            : plan_upload_rows(p, b[i], at, t, r0, rows, err))
            return -1;
    }
    double t = clock_now_s() - t0; /* the upload's cost, a running mean */
    mc->upload_s = mc->upload_s > 0 ? 0.8 * mc->upload_s + 0.2 * t : t;
    int32_t old = mc->held[(size_t)l * mc->ne + s];
    if (old >= 0) mc->slot_of[(size_t)l * mc->ne + old] = -1;
    mc->held[(size_t)l * mc->ne + s] = (int32_t)e;
    mc->slot_of[(size_t)l * mc->ne + e] = (int32_t)s;
    return 0;
}

/* The bytes of a matrix's buffer of `slots` experts of t: 16 bits, or the slots' planes in
 * the file's types (*qt that type, else -1). */
static int slot_buffer_bytes(const plan_engine *p, const gguf_tensor *t, uint32_t slots, size_t *bytes, int8_t *qt,
                             kiln_err *err) {
    *bytes = (size_t)slots * p->s.hp.n_ff_exp * p->s.hp.n_embd * 2;
    *qt = -1;
    if (!p->s.moe_blocks) return 0;
    kn_qlayout Lc;
    *qt = (int8_t)plan_qtype(t->type);
    if (kn_qlayout_of((kn_qtype)*qt, slots * (uint32_t)(t->ne[1]), (uint32_t)t->ne[0], &Lc, err)) return -1;
    *bytes = Lc.words * 4;
    return 0;
}

int plan_moe_upload(plan_engine *p, uint32_t l, kiln_err *err) {
    plan_moe_cache *mc = p->mc;
    uint32_t slots = p->s.moe_slots, ne = mc->ne;
    plan_layer *L = &p->L[l];
    const model_layer *ml = &p->m->layers[l];
    const gguf_tensor *t[3] = {ml->ffn_gate_exps, ml->ffn_up_exps, ml->ffn_down_exps};
    rt_buffer **b[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    for (int i = 0; i < 3; i++) {
        size_t bytes;
        if (slot_buffer_bytes(p, t[i], slots, &bytes, &L->qt_exps[i], err) || !(*b[i] = plan_alloc(p, bytes, err)))
            return -1;
    }
    float *sc = mc->score + (size_t)l * ne;
    for (uint32_t e = 0; e < ne; e++) mc->slot_of[(size_t)l * ne + e] = -1;
    for (uint32_t s = 0; s < ne; s++) mc->held[(size_t)l * ne + s] = -1;
    for (uint32_t s = 0; s < slots; s++) { /* the most used experts not placed yet (ties: the lower) */
        uint32_t best = UINT32_MAX;
        for (uint32_t e = 0; e < ne; e++)
            if (mc->slot_of[(size_t)l * ne + e] < 0 && (best == UINT32_MAX || sc[e] > sc[best])) best = e;
        if (fill(p, l, s, best, err)) return -1;
    }
    return 0;
}

int plan_moe_cut(plan_engine *p, uint32_t l, int kind, kiln_err *err) {
    plan_moe_cache *mc = p->mc;
    if (mc->n_cut == mc->cap_cut) {
        uint32_t cap = mc->cap_cut ? 2 * mc->cap_cut : 64;
        uint32_t *c = realloc(mc->cut, cap * 4), *cl = c ? realloc(mc->cut_layer, cap * 4) : NULL;
        uint8_t *ck = cl ? realloc(mc->cut_kind, cap) : NULL;
        if (c) mc->cut = c;
        if (cl) mc->cut_layer = cl;
        if (ck) mc->cut_kind = ck;
        if (!c || !cl || !ck) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        mc->cap_cut = cap;
    }
    mc->cut[mc->n_cut] = p->n_launch, mc->cut_layer[mc->n_cut] = l, mc->cut_kind[mc->n_cut++] = (uint8_t)kind;
    return 0;
}

rt_recording *plan_moe_record(plan_engine *p, uint32_t first, uint32_t n, kiln_err *err) {
    plan_moe_cache *mc = p->mc;
    rt_device *d = p->d;
    uint32_t cuts = 0, end = first + n;
    for (uint32_t i = 0; i < mc->n_cut; i++) cuts += mc->cut[i] > first && mc->cut[i] < end;
    if (mc->n_seg == sizeof mc->seg / sizeof mc->seg[0])
        return kiln_fail(err, KILN_ERR_INTERNAL, "more segmented recordings than the plan has"), NULL;
    segs *S = &mc->seg[mc->n_seg];
    S->rec = calloc(cuts + 1, sizeof *S->rec), S->layer = calloc(cuts + 1, 4), S->kind = calloc(cuts + 1, 1);
    if (!S->rec || !S->layer || !S->kind) {
        free(S->rec), free(S->layer), free(S->kind);
        *S = (segs){0};
        return kiln_fail(err, KILN_ERR_NOMEM, "out of memory"), NULL;
    }
    mc->n_seg++;
    uint32_t at = first;
    for (uint32_t i = 0; i < mc->n_cut; i++) {
        if (mc->cut[i] <= first || mc->cut[i] >= end) continue;
        if (!(S->rec[S->n] = d->ops->record(d, p->launch + at, mc->cut[i] - at, err))) return NULL;
        S->layer[S->n] = mc->cut_layer[i], S->kind[S->n++] = mc->cut_kind[i];
        at = mc->cut[i];
    }
    if (!(S->rec[S->n] = d->ops->record(d, p->launch + at, end - at, err))) return NULL;
    S->n++;
    return S->rec[0];
}

/* Whether a missing expert chosen `count` times in a block goes to the device (an upload,
 * then a pass of the block's experts' kernels) rather than to the host's threads: what the
 * two cost as measured so far (before either is measured: four choices or more). */
static bool worth_upload(const plan_moe_cache *mc, uint32_t count) {
    return mc->upload_s > 0 && mc->host_s > 0 ? count * mc->host_s > mc->upload_s : count >= 4;
}

/* The host's choices: their products into moe_miss (the running cost of one measured);
 * the input rows from moe_h_host (a decode step: host memory, no copy) or h (a block). */
static int host_misses(plan_engine *p, uint32_t l, uint32_t n, uint32_t n_miss, bool block, kiln_err *err) {
    plan_moe_cache *mc = p->mc;
    rt_device *d = p->d;
    const arch_hparams *hp = &p->s.hp;
    if (!n_miss) return 0;
    size_t row = (size_t)hp->n_embd * 2;
    double t0 = clock_now_s();
    if (d->ops->download(d, block ? p->h : p->moe_h_host, 0, mc->h, n * row, err) ||
        plan_moe_host_run(&mc->host, &p->m->layers[l], hp, p->s.dt == IR_BF16, p->s.moe_blocks, mc->h, n, mc->choice,
                          mc->expert, n_miss, mc->out, err))
        return -1;
    for (uint32_t i = 0; i < n_miss; i++) {
        size_t c = mc->choice[i];
        if (d->ops->upload(d, p->moe_miss, c * row, mc->out + c * hp->n_embd, row, err)) return -1;
    }
    double t = (clock_now_s() - t0) / n_miss;
    mc->host_s = mc->host_s > 0 ? 0.8 * mc->host_s + 0.2 * t : t;
    return 0;
}

/* After layer l's router, for the block's n tokens: the choice read, each choice's slot (or
 * KN_MOE_MISS) into moe_csel. A decode step's misses go to the host at once; a block's
 * (block: a pass of its experts' kernels follows) are sorted first: the experts worth an
 * upload wait for passes_layer, the others for the host. */
static int route_layer(plan_engine *p, uint32_t l, uint32_t n, bool block, kiln_err *err) {
    plan_moe_cache *mc = p->mc;
    rt_device *d = p->d;
    uint32_t nk = n * mc->k, n_miss = 0, ne = mc->ne;
    mc->n_up = 0;
    if (!n) return 0;
    if (d->ops->download(d, block ? p->moe_sel : p->moe_sel_host, 0, mc->sel, (size_t)nk * 4, err)) return -1;
    float *sc = mc->score + (size_t)l * ne;
    const int32_t *slot_of = mc->slot_of + (size_t)l * ne;
    memset(mc->count, 0, ne * 4);
    for (uint32_t c = 0; c < nk; c++) {
        if (mc->sel[c] >= ne) mc->sel[c] = ne - 1; /* the router writes none past the last */
        sc[mc->sel[c]] += 1, mc->count[mc->sel[c]]++;
    }
    for (uint32_t e = 0; block && e < ne; e++)
        if (mc->count[e] && slot_of[e] < 0 && worth_upload(mc, mc->count[e])) mc->up[mc->n_up++] = e, mc->count[e] = 0;
    for (uint32_t c = 0; c < nk; c++) {
        uint32_t e = mc->sel[c];
        int32_t s = slot_of[e];
        bool later = s < 0 && block && !mc->count[e]; /* an upload's pass computes it */
        mc->csel[c] = s >= 0 ? (uint32_t)s : KN_MOE_MISS;
        mc->on_device[c] = s >= 0 || later;
        if (!mc->on_device[c]) mc->choice[n_miss] = c, mc->expert[n_miss++] = e;
    }
    mc->st.hits += nk - n_miss, mc->st.misses += n_miss;
    if (d->ops->upload(d, p->moe_csel, 0, mc->csel, (size_t)nk * 4, err)) return -1;
    return block ? 0 : host_misses(p, l, n, n_miss, false, err);
}

/* After a block's first pass of layer l's experts (the slots' choices): the experts worth
 * an upload, as many at a time as there are slots, each group uploaded and its choices run
 * through the pass again (rec: the pass's recording; yc keeps earlier passes' rows); then
 * every choice the device computed marked so for the weighted sum, the rest the host's. */
static int passes_layer(plan_engine *p, uint32_t l, uint32_t n, rt_recording *rec, kiln_err *err) {
    plan_moe_cache *mc = p->mc;
    rt_device *d = p->d;
    uint32_t nk = n * mc->k, slots = p->s.moe_slots, ne = mc->ne, n_miss = 0;
    if (!n) return 0;
    for (uint32_t i = 0; i < mc->n_up; i += slots) {
        uint32_t m = mc->n_up - i < slots ? mc->n_up - i : slots;
        for (uint32_t j = 0; j < m; j++)
            if (fill(p, l, j, mc->up[i + j], err)) return -1;
        mc->st.swaps += m;
        for (uint32_t c = 0; c < nk; c++) {
            int32_t s = mc->slot_of[(size_t)l * ne + mc->sel[c]];
            bool now = s >= 0 && (uint32_t)s < m && mc->held[(size_t)l * ne + s] == (int32_t)mc->up[i + s];
            mc->csel[c] = now ? (uint32_t)s : KN_MOE_MISS;
        }
        if (d->ops->upload(d, p->moe_csel, 0, mc->csel, (size_t)nk * 4, err) || d->ops->replay(d, rec, err)) return -1;
    }
    for (uint32_t c = 0; c < nk; c++) {
        mc->csel[c] = mc->on_device[c] ? 0 : KN_MOE_MISS;
        if (!mc->on_device[c]) mc->choice[n_miss] = c, mc->expert[n_miss++] = mc->sel[c];
    }
    if (d->ops->upload(d, p->moe_csel, 0, mc->csel, (size_t)nk * 4, err)) return -1;
    return host_misses(p, l, n, n_miss, true, err);
}

/* The most used missing experts into the least used slots: at most `most` a layer. */
static int swap_in(plan_engine *p, uint32_t most, kiln_err *err) {
    plan_moe_cache *mc = p->mc;
    uint32_t ne = mc->ne, slots = p->s.moe_slots;
    for (uint32_t l = 0; l < p->s.hp.n_layer; l++) {
        float *sc = mc->score + (size_t)l * ne;
        for (uint32_t i = 0; i < most; i++) {
            uint32_t in = UINT32_MAX, out = UINT32_MAX;
            for (uint32_t e = 0; e < ne; e++)
                if (mc->slot_of[(size_t)l * ne + e] < 0 && (in == UINT32_MAX || sc[e] > sc[in])) in = e;
            float out_sc = INFINITY; /* an empty slot's: -inf (a grown cache's, filled as experts are chosen) */
            for (uint32_t s = 0; s < slots; s++) {
                int32_t e = mc->held[(size_t)l * ne + s];
                float v = e < 0 ? -INFINITY : sc[e];
                if (out == UINT32_MAX || v < out_sc) out = s, out_sc = v;
            }
            if (in == UINT32_MAX || out == UINT32_MAX || !(sc[in] > out_sc + 1.0f)) break;
            if (fill(p, l, out, in, err)) return -1;
            mc->st.swaps++;
        }
        for (uint32_t e = 0; e < ne; e++) sc[e] *= DECAY;
    }
    return 0;
}

/* The slots the memory allows now, against the cache's present count: fewer at once, more
 * only by an eighth or more. */
static uint32_t slots_now(const plan_engine *p) {
    plan_shape s = p->s;
    uint32_t cur = s.moe_slots, want = plan_moe_slots_fit(p->m, &s, p->d, plan_bytes_of(p->m, &s, p->d));
    if (!want) want = s.hp.n_expert - 1 > cur ? s.hp.n_expert - 1 : cur; /* all would fit: the most a cache holds */
    if (want < cur) return want;
    uint32_t step = cur / 8 ? cur / 8 : 1;
    return want >= cur + step ? want : cur;
}

/* ---- resizing: the kept slots copied on the device -------------------------------------- */

#define COPY_SIZES 8
#define MOE_CACHE_MAX 1024 /* slots a layer at most (kernels/moe.c: experts <= 1024) */

/* kn_copy kernels by word count, made as a resize needs them. */
typedef struct copier {
    uint32_t used, n[COPY_SIZES], gx[COPY_SIZES];
    rt_kernel *k[COPY_SIZES];
} copier;

/* Words [src_w, src_w + n) of src into [dst_w, ..) of dst, one kn_copy launch on views: 0,
 * 1 where that cannot be (offsets that are not a view's, too many sizes; the caller fills
 * from the host instead), -1 with err. */
static int copy_words(plan_engine *p, copier *c, rt_buffer *src, uint64_t src_w, rt_buffer *dst, uint64_t dst_w,
                      uint64_t n, kiln_err *err) {
    rt_device *d = p->d;
    if ((src_w * 4) % RT_VIEW_ALIGN || (dst_w * 4) % RT_VIEW_ALIGN || !n || n > UINT32_MAX) return 1;
    uint32_t i = 0;
    while (i < c->used && c->n[i] != n) i++;
    if (i == c->used) {
        if (c->used == COPY_SIZES) return 1;
        ir_kernel *ik = kn_copy(&d->caps, (uint32_t)n, &c->gx[i], err);
        rt_kernel *k = ik ? d->ops->compile(d, ik, NULL, err) : NULL;
        if (ik) ir_kernel_destroy(ik);
        if (!k) return -1;
        c->n[i] = (uint32_t)n, c->k[i] = k, c->used++;
    }
    rt_buffer *vs = d->ops->view(d, src, src_w * 4, n * 4, err);
    rt_buffer *vd = vs ? d->ops->view(d, dst, dst_w * 4, n * 4, err) : NULL;
    int rc = -1;
    if (vd) {
        rt_arg args[2] = {{vs, 0}, {vd, 0}};
        rt_launch l = {c->k[i], {c->gx[i], 1, 1}, args, 2};
        rc = d->ops->run(d, &l, 1, err) ? -1 : 0;
    }
    if (vd) d->ops->release(d, vd);
    if (vs) d->ops->release(d, vs);
    return rc;
}

/* Slot s of a buffer of `slots` experts of t (rows each) as regions of words: off[i], n[i]
 * for i < the count returned (one for 16 bits, a plane's each for blocks); 0 where they
 * cannot be named. */
static int slot_regions(const plan_engine *p, const gguf_tensor *t, uint32_t rows, uint32_t slots, uint32_t s,
                        uint64_t off[6], uint64_t n[6]) {
    uint64_t cols = t->ne[0], e = rows * cols;
    if (!p->s.moe_blocks) {
        if (e % 2) return 0;
        off[0] = s * e / 2, n[0] = e / 2;
        return 1;
    }
    kn_qtype q = (kn_qtype)plan_qtype(t->type);
    kn_qlayout Lc;
    uint64_t w[6];
    kiln_err ignored = {0};
    if (!plane_words(q, rows, cols, w) || kn_qlayout_of(q, slots * rows, (uint32_t)cols, &Lc, &ignored)) return 0;
    int m = 0;
    for (int i = 0; i < 6; i++)
        if (w[i]) off[m] = *plane_at(&Lc, i) + s * w[i], n[m++] = w[i];
    return m;
}

static void free_slots(plan_engine *p, rt_buffer **b) {
    for (int i = 0; i < 3; i++)
        if (b[i]) plan_release(p, b[i]), b[i] = NULL;
}

/* Layer l from `from` slots to `to`: the min(from, to) slots whose experts were used most
 * kept, copied on the device into slots 0.., most used first (a slot the copy cannot
 * reach filled from the host); a grown layer's new slots left empty for swap_in. Where
 * the new buffers cannot be had while the old are held (a shrink under pressure), the old
 * go first and the kept experts come from the host. p->s.moe_slots must be `to`. */
static int reslot_layer(plan_engine *p, copier *cp, uint32_t l, uint32_t from, uint32_t to, kiln_err *err) {
    plan_moe_cache *mc = p->mc;
    plan_layer *L = &p->L[l];
    const model_layer *ml = &p->m->layers[l];
    uint32_t ne = mc->ne, keep = from < to ? from : to;
    const gguf_tensor *t[3] = {ml->ffn_gate_exps, ml->ffn_up_exps, ml->ffn_down_exps};
    uint32_t rows[3] = {p->s.hp.n_ff_exp, p->s.hp.n_ff_exp, p->s.hp.n_embd};
    rt_buffer **cur[3] = {&L->gate_exps, &L->up_exps, &L->down_exps}, *nb[3] = {0}, *old[3] = {0};
    int32_t *held = mc->held + (size_t)l * ne, *slot_of = mc->slot_of + (size_t)l * ne;
    const float *sc = mc->score + (size_t)l * ne;
    int32_t src[MOE_CACHE_MAX], expert[MOE_CACHE_MAX]; /* new slot j: old slot src[j], its expert */
    bool taken[MOE_CACHE_MAX] = {0};
    for (uint32_t j = 0; j < keep; j++) {
        int32_t best = -1;
        for (uint32_t s = 0; s < from; s++) {
            if (taken[s] || held[s] < 0) continue;
            if (best < 0 || sc[held[s]] > sc[held[best]]) best = (int32_t)s;
        }
        src[j] = best, expert[j] = best >= 0 ? held[best] : -1;
        if (best >= 0) taken[best] = true;
    }
    /* a layer whose old buffers went in an attempt that failed after (the resize then tries
     * fewer slots) has its kept experts only on the host */
    bool from_host = !*cur[0] || !*cur[1] || !*cur[2];
    if (from_host)
        for (int j = 0; j < 3; j++) plan_release(p, *cur[j]), *cur[j] = NULL;
    for (int i = 0; i < 3; i++) {
        size_t bytes;
        if (slot_buffer_bytes(p, t[i], to, &bytes, &L->qt_exps[i], err)) return free_slots(p, nb), -1;
        kiln_err why = {0};
        if ((nb[i] = plan_alloc(p, bytes, &why))) continue;
        if (why.code != KILN_ERR_NOMEM || from_host || to >= from) {
            free_slots(p, nb);
            *err = why;
            return -1;
        }
        from_host = true; /* the old buffers go first; the experts kept come from the host */
        for (int j = 0; j < 3; j++) plan_release(p, *cur[j]), *cur[j] = NULL;
        i--;
    }
    bool fill_j[MOE_CACHE_MAX] = {0};
    for (uint32_t j = 0; j < keep; j++) {
        if (src[j] < 0) continue;
        fill_j[j] = from_host;
        for (int i = 0; i < 3 && !fill_j[j]; i++) {
            uint64_t so[6], sn[6], dof[6], dn[6];
            int m = slot_regions(p, t[i], rows[i], from, (uint32_t)src[j], so, sn);
            if (!m || slot_regions(p, t[i], rows[i], to, j, dof, dn) != m) {
                fill_j[j] = true;
                break;
            }
            for (int r = 0; r < m && !fill_j[j]; r++) {
                int rc = copy_words(p, cp, *cur[i], so[r], nb[i], dof[r], sn[r], err);
                if (rc < 0) return free_slots(p, nb), -1;
                fill_j[j] = rc > 0;
            }
        }
    }
    for (int i = 0; i < 3; i++) old[i] = *cur[i], *cur[i] = nb[i];
    free_slots(p, old);
    for (uint32_t e = 0; e < ne; e++) slot_of[e] = -1;
    for (uint32_t s = 0; s < ne; s++) held[s] = -1;
    for (uint32_t j = 0; j < keep; j++)
        if (expert[j] >= 0) held[j] = expert[j], slot_of[expert[j]] = (int32_t)j;
    for (uint32_t j = 0; j < keep; j++) {
        if (expert[j] >= 0 && !fill_j[j]) mc->st.kept++;
        if (fill_j[j] && fill(p, l, j, (uint32_t)expert[j], err)) return -1;
    }
    return 0;
}

/* The cache made again with `slots` slots a layer, each layer's kept experts copied on the
 * device (resizing by uploads stalled a decode 21 s on the H100 when 89 slots a layer came
 * back): where the device refuses that much (another program took the memory meanwhile),
 * half as many, down to one, the layers already done made again at the smaller count. */
static int resize(plan_engine *p, uint32_t slots, kiln_err *err) {
    double t0 = clock_now_s();
    uint32_t nl = p->s.hp.n_layer, *at = malloc(nl * sizeof *at);
    if (!at) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    plan_release_recordings(p);
    release_segs(p);
    for (uint32_t l = 0; l < nl; l++) at[l] = p->s.moe_slots;
    copier cp = {0};
    int rc = 0;
    for (uint32_t l = 0; l < nl && !rc;) {
        p->s.moe_slots = slots;
        kiln_err why = {0};
        if (at[l] == slots || !reslot_layer(p, &cp, l, at[l], slots, &why)) {
            at[l++] = slots;
            continue;
        }
        if (slots == 1 || why.code != KILN_ERR_NOMEM) {
            *err = why, rc = -1;
            break;
        }
        slots /= 2, l = 0;
    }
    for (uint32_t i = 0; i < cp.used; i++) p->d->ops->release_kernel(p->d, cp.k[i]);
    free(at);
    if (rc) return -1;
    p->mc->st.slots = slots;
    p->mc->st.resizes++;
    /* the kernels read the count (a quantized cache's, laid out by it, are built again
     * as the recording asks for them: plan_qvariant) */
    double t1 = clock_now_s();
    rc = plan_moe_set_slots(p, slots, err) || plan_record_all(p, err) ? -1 : 0;
    double t2 = clock_now_s();
    p->mc->st.resize_s += t2 - t0, p->mc->st.resize_record_s += t2 - t1;
    return rc;
}

int plan_moe_set_slots(plan_engine *p, uint32_t slots, kiln_err *err) {
    return p->d->ops->upload(p->d, p->moe_nslots, 0, &slots, sizeof slots, err);
}

int plan_moe_replay(plan_engine *p, rt_recording *rec, uint32_t n, kiln_err *err) {
    plan_moe_cache *mc = p->mc;
    rt_device *d = p->d;
    const segs *S = NULL;
    for (uint32_t i = 0; i < mc->n_seg && !S; i++)
        if (mc->seg[i].rec[0] == rec) S = &mc->seg[i];
    if (mc->broken.code) return *err = mc->broken, -1;
    if (!S) return kiln_fail(err, KILN_ERR_INTERNAL, "a recording the expert cache did not cut");
    for (uint32_t i = 0; i < S->n; i++) {
        if (d->ops->replay(d, S->rec[i], err)) return -1;
        if (i + 1 == S->n) break;
        bool block = i + 2 < S->n && S->kind[i + 1] == PLAN_CUT_PASS && S->layer[i + 1] == S->layer[i];
        if (S->kind[i] == PLAN_CUT_ROUTE ? route_layer(p, S->layer[i], n, block, err)
                                         : passes_layer(p, S->layer[i], n, S->rec[i], err))
            return -1;
    }
    if (!n) return 0;
    mc->st.evals++;
    if (swap_in(p, 1, err)) return -1;
    if (mc->st.evals % PLAN_MOE_RECHECK) return 0;
    uint32_t slots = slots_now(p);
    if (slots == p->s.moe_slots || !resize(p, slots, err)) return 0;
    kiln_fail(&mc->broken, err->code, "the expert cache could not follow the device's memory: %s", err->msg);
    *err = mc->broken;
    return -1;
}

void plan_limit_memory(engine *e, uint64_t bytes) {
    if (!e || e->ops != &plan_ops || !bytes) return;
    rt_caps *c = &((plan_engine *)e)->d->caps;
    c->memory_bytes = c->free_bytes = bytes;
    c->memory_limited = true;
}

bool plan_moe_stats(const engine *e, engine_expert_stats *st) {
    const plan_engine *p = (const plan_engine *)e;
    if (!p->mc) return false;
    *st = p->mc->st;
    return true;
}
