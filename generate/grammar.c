/* The grammar matcher and the token mask (see grammar.h for the design).
 *
 * A node is a parse stack: (position, parent), position an index into the grammar's
 * symbols, parent the node to continue with when the position's alternative ends; node 0
 * is the empty stack (the grammar is complete). A state is an interned, sorted set of
 * nodes whose positions are byte classes (or node 0). A rule called in tail position
 * pushes nothing, so repetitions keep the same nodes. */
#include "generate/grammar_internal.h"

#include "base/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define UNKNOWN (-2) /* a transition not computed yet */
#define DEAD (-1)
#define MAX_MASKS 512 /* cached masks kept before the cache is emptied */
/* Stacks one step may visit, and stacks a matcher may hold: a grammar that needs more
 * (nested optional repetitions, deep ambiguity) is refused rather than followed slowly. */
#define MAX_CLOSURE 100000
#define MAX_NODES (1u << 23)

/* ---- the vocabulary's prefix tree ------------------------------------------------------- */

/* Nodes in preorder: node i's subtree is [i, end[i]); the tokens whose bytes end at node i
 * are tok[first[i] .. first[i + 1]). Node 0 is the root (no byte). */
struct gram_vocab {
    uint32_t n_vocab;
    char *bytes;        /* every token's bytes */
    uint32_t *off;      /* [n_vocab + 1] */
    uint32_t n_nodes;
    uint8_t *byte;
    uint16_t *depth;
    uint32_t *end, *first, *tok;
    uint16_t max_depth;
};

static const gram_vocab *sort_vocab; /* qsort's context (vocabularies are built one at a time) */

static int cmp_tok(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const gram_vocab *v = sort_vocab;
    uint32_t nx = v->off[x + 1] - v->off[x], ny = v->off[y + 1] - v->off[y];
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], nx < ny ? nx : ny);
    if (c) return c;
    return nx != ny ? (nx < ny ? -1 : 1) : (x < y ? -1 : x > y);
}

static int build_trie(gram_vocab *v) {
    uint32_t n = 0, total = 0;
    for (uint32_t i = 0; i < v->n_vocab; i++)
        if (v->off[i + 1] > v->off[i]) n++, total += v->off[i + 1] - v->off[i];
    uint32_t *order = malloc(((size_t)n + 1) * sizeof *order);
    size_t cap = (size_t)total + 2;
    v->byte = malloc(cap);
    v->depth = malloc(cap * sizeof *v->depth);
    v->end = malloc(cap * sizeof *v->end);
    v->first = malloc((cap + 1) * sizeof *v->first);
    v->tok = malloc(((size_t)n + 1) * sizeof *v->tok);
    uint32_t *path = malloc((cap + 1) * sizeof *path);
    if (!order || !v->byte || !v->depth || !v->end || !v->first || !v->tok || !path) {
        free(order), free(path);
        return -1;
    }
    n = 0;
    for (uint32_t i = 0; i < v->n_vocab; i++)
        if (v->off[i + 1] > v->off[i]) order[n++] = i;
    sort_vocab = v;
    qsort(order, n, sizeof *order, cmp_tok);
    /* sorted, each token shares its longest common prefix with the one before */
    uint32_t nodes = 1, depth = 0, n_tok = 0;
    v->byte[0] = 0, v->depth[0] = 0, v->first[0] = 0;
    path[0] = 0;
    const char *prev = NULL;
    uint32_t prev_n = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t id = order[k], len = v->off[id + 1] - v->off[id];
        const char *s = v->bytes + v->off[id];
        uint32_t lcp = 0;
        while (prev && lcp < len && lcp < prev_n && s[lcp] == prev[lcp]) lcp++;
        while (depth > lcp) v->end[path[depth--]] = nodes; /* close what this token leaves */
        for (uint32_t d = lcp; d < len; d++) {
            v->byte[nodes] = (uint8_t)s[d];
            v->depth[nodes] = (uint16_t)(d + 1 > 65535 ? 65535 : d + 1);
            v->first[nodes] = n_tok;
            path[++depth] = nodes++;
        }
        if (len > v->max_depth) v->max_depth = (uint16_t)(len > 65535 ? 65535 : len);
        v->tok[n_tok++] = id; /* at path[depth]: tokens ending at a node are adjacent */
        prev = s, prev_n = len;
    }
    while (depth > 0) v->end[path[depth--]] = nodes;
    v->end[0] = nodes;
    /* first[i]..first[i + 1]: tokens are appended in preorder of their node */
    v->first[nodes] = n_tok;
    for (uint32_t i = nodes; i-- > 1;)
        if (v->first[i] > v->first[i + 1]) v->first[i] = v->first[i + 1];
    v->first[0] = 0;
    v->n_nodes = nodes;
    free(order);
    free(path);
    return 0;
}

gram_vocab *gram_vocab_from_pieces(const char *const *pieces, const size_t *lens, uint32_t n, kiln_err *err) {
    gram_vocab *v = calloc(1, sizeof *v);
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) total += lens[i] > 65535 ? 0 : lens[i];
    if (total >= UINT32_MAX / 2) return free(v), kiln_fail(err, KILN_ERR_INVALID, "grammar: vocabulary too large"), NULL;
    if (v) {
        v->n_vocab = n;
        v->bytes = malloc(total + 1);
        v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    }
    if (!v || !v->bytes || !v->off) {
        gram_vocab_free(v);
        return kiln_fail(err, KILN_ERR_NOMEM, "grammar: out of memory"), NULL;
    }
    uint32_t o = 0;
    for (uint32_t i = 0; i < n; i++) {
        v->off[i] = o;
        if (lens[i] && lens[i] <= 65535) memcpy(v->bytes + o, pieces[i], lens[i]), o += (uint32_t)lens[i];
    }
    v->off[n] = o;
    if (build_trie(v)) {
        gram_vocab_free(v);
        return kiln_fail(err, KILN_ERR_NOMEM, "grammar: out of memory"), NULL;
    }
    return v;
}

gram_vocab *gram_vocab_create(const tokenizer *t, kiln_err *err) {
    uint32_t n = tok_n_vocab(t);
    char **p = calloc(n ? n : 1, sizeof *p);
    size_t *len = calloc(n ? n : 1, sizeof *len);
    gram_vocab *v = NULL;
    if (!p || !len) goto out;
    for (uint32_t i = 0; i < n; i++) {
        char buf[256];
        int64_t k = tok_piece(t, (int32_t)i, false, buf, sizeof buf);
        if (k <= 0) continue;
        if (!(p[i] = malloc((size_t)k))) goto out;
        if ((size_t)k > sizeof buf) tok_piece(t, (int32_t)i, false, p[i], (size_t)k);
        else memcpy(p[i], buf, (size_t)k);
        len[i] = (size_t)k;
    }
    v = gram_vocab_from_pieces((const char *const *)p, len, n, err);
out:
    if (!v && (!p || !len)) kiln_fail(err, KILN_ERR_NOMEM, "grammar: out of memory");
    for (uint32_t i = 0; p && i < n; i++) free(p[i]);
    free(p);
    free(len);
    return v;
}

void gram_vocab_free(gram_vocab *v) {
    if (!v) return;
    free(v->bytes), free(v->off), free(v->byte), free(v->depth), free(v->end), free(v->first), free(v->tok);
    free(v);
}

uint32_t gram_vocab_size(const gram_vocab *v) { return v->n_vocab; }

/* ---- interning --------------------------------------------------------------------------- */

/* Open addressing over keys of 64 bits; values are indices (+1; 0 = empty). */
typedef struct htab {
    uint64_t *key;
    uint32_t *val;
    uint32_t cap, n;
} htab;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static int ht_grow(htab *h) {
    uint32_t cap = h->cap ? h->cap * 2 : 1024;
    uint64_t *k = calloc(cap, sizeof *k);
    uint32_t *v = calloc(cap, sizeof *v);
    if (!k || !v) return free(k), free(v), -1;
    for (uint32_t i = 0; i < h->cap; i++)
        if (h->val[i]) {
            uint32_t j = (uint32_t)mix(h->key[i]) & (cap - 1);
            while (v[j]) j = (j + 1) & (cap - 1);
            k[j] = h->key[i], v[j] = h->val[i];
        }
    free(h->key), free(h->val);
    h->key = k, h->val = v, h->cap = cap;
    return 0;
}

/* The slot of key: its value, or 0 (the slot where it would go in *slot). */
static uint32_t ht_find(const htab *h, uint64_t key, uint32_t *slot) {
    uint32_t j = (uint32_t)mix(key) & (h->cap - 1);
    while (h->val[j] && h->key[j] != key) j = (j + 1) & (h->cap - 1);
    *slot = j;
    return h->val[j];
}

struct gram_match {
    const gram *g;
    const gram_vocab *v;
    uint32_t words;      /* of a mask */
    /* nodes */
    uint32_t *npos, *npar, n_nodes, cap_nodes;
    htab nodes;
    /* states: sets of nodes in pool[soff[s] .. soff[s + 1]) */
    uint32_t *pool, n_pool, cap_pool;
    uint32_t *soff, n_sets, cap_sets;
    uint64_t *shash;
    htab sets;
    int32_t **trans;     /* [n_sets]: 256 next states each, allocated on first use */
    uint64_t **mask;     /* [n_sets]: cached masks */
    uint32_t n_masks;
    uint32_t cur, start;
    /* scratch */
    uint32_t *work, cap_work, *out, n_out, cap_out, *seen, epoch;
    int32_t *walk;       /* [max_depth + 1] states along the prefix tree walk */
    bool oom;
    bool too_complex;    /* a limit above was passed (oom is set too) */
};

static bool grow32(uint32_t **p, uint32_t *cap, uint32_t need) {
    if (need <= *cap) return true;
    uint32_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    uint32_t *q = realloc(*p, (size_t)c * sizeof *q);
    if (!q) return false;
    *p = q, *cap = c;
    return true;
}

static uint32_t node(gram_match *m, uint32_t pos, uint32_t parent) {
    uint64_t key = (uint64_t)pos << 32 | parent;
    if (m->nodes.n * 2 >= m->nodes.cap && ht_grow(&m->nodes)) return m->oom = true, 0;
    uint32_t slot, got = ht_find(&m->nodes, key, &slot);
    if (got) return got - 1;
    uint32_t cap = m->cap_nodes;
    if (!grow32(&m->npos, &cap, m->n_nodes + 1) || !grow32(&m->npar, &m->cap_nodes, m->n_nodes + 1))
        return m->oom = true, 0;
    uint32_t *seen = realloc(m->seen, (size_t)m->cap_nodes * sizeof *seen);
    if (!seen) return m->oom = true, 0;
    m->seen = seen;
    m->seen[m->n_nodes] = 0;
    m->npos[m->n_nodes] = pos, m->npar[m->n_nodes] = parent;
    m->nodes.key[slot] = key, m->nodes.val[slot] = m->n_nodes + 1, m->nodes.n++;
    return m->n_nodes++;
}

/* Adds to out the nodes reached from (pos, parent) without consuming a byte: calls
 * expanded, finished alternatives returned from. */
static void closure(gram_match *m, uint32_t pos, uint32_t parent) {
    const gram *g = m->g;
    uint32_t nw = 0, visited = 0;
    if (!grow32(&m->work, &m->cap_work, 2)) return (void)(m->oom = true);
    m->work[nw++] = pos, m->work[nw++] = parent;
    while (nw && !m->oom) {
        parent = m->work[--nw], pos = m->work[--nw];
        uint32_t id = node(m, pos, parent);
        if (m->oom || m->seen[id] == m->epoch) continue;
        m->seen[id] = m->epoch;
        if (++visited > MAX_CLOSURE || m->n_nodes > MAX_NODES) {
            m->oom = m->too_complex = true;
            return;
        }
        int32_t s = g->sym[pos];
        if (s == GRAM_END) {
            if (parent == 0) {
                if (!grow32(&m->out, &m->cap_out, m->n_out + 1)) return (void)(m->oom = true);
                m->out[m->n_out++] = 0;
            } else {
                if (!grow32(&m->work, &m->cap_work, nw + 2)) return (void)(m->oom = true);
                m->work[nw++] = m->npos[parent], m->work[nw++] = m->npar[parent];
            }
        } else if (s < 0) {
            if (!grow32(&m->out, &m->cap_out, m->n_out + 1)) return (void)(m->oom = true);
            m->out[m->n_out++] = id;
        } else {
            uint32_t ret = pos + 1;
            uint32_t np = g->sym[ret] == GRAM_END ? parent : node(m, ret, parent); /* a tail call pushes nothing */
            uint32_t a0 = g->rule_alt[s], a1 = g->rule_alt[s + 1];
            if (!grow32(&m->work, &m->cap_work, nw + 2 * (a1 - a0))) return (void)(m->oom = true);
            for (uint32_t a = a1; a-- > a0;) m->work[nw++] = g->alt[a], m->work[nw++] = np;
        }
    }
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The state of m->out's nodes (sorted and made unique here); DEAD when empty. */
static int32_t intern_out(gram_match *m) {
    if (m->oom) return DEAD;
    if (!m->n_out) return DEAD;
    qsort(m->out, m->n_out, sizeof *m->out, cmp_u32);
    uint32_t n = 1;
    for (uint32_t i = 1; i < m->n_out; i++)
        if (m->out[i] != m->out[n - 1]) m->out[n++] = m->out[i];
    m->n_out = n;
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint32_t i = 0; i < n; i++) h = mix(h ^ m->out[i]) + i;
    if (m->sets.n * 2 >= m->sets.cap && ht_grow(&m->sets)) return m->oom = true, DEAD;
    uint32_t slot = (uint32_t)mix(h) & (m->sets.cap - 1);
    for (; m->sets.val[slot]; slot = (slot + 1) & (m->sets.cap - 1)) {
        uint32_t s = m->sets.val[slot] - 1;
        if (m->sets.key[slot] == h && m->soff[s + 1] - m->soff[s] == n &&
            !memcmp(m->pool + m->soff[s], m->out, n * sizeof *m->out))
            return (int32_t)s;
    }
    uint32_t cap = m->cap_sets;
    if (!grow32(&m->pool, &m->cap_pool, m->n_pool + n) || !grow32(&m->soff, &cap, m->n_sets + 2))
        return m->oom = true, DEAD;
    if (cap != m->cap_sets) {
        int32_t **t = realloc(m->trans, (size_t)cap * sizeof *t);
        if (t) m->trans = t;
        uint64_t **k = t ? realloc(m->mask, (size_t)cap * sizeof *k) : NULL;
        if (k) m->mask = k;
        if (!t || !k) return m->oom = true, DEAD;
        m->cap_sets = cap;
    }
    memcpy(m->pool + m->n_pool, m->out, n * sizeof *m->out);
    uint32_t s = m->n_sets++;
    m->soff[s] = m->n_pool;
    m->n_pool += n;
    m->soff[s + 1] = m->n_pool;
    m->trans[s] = NULL;
    m->mask[s] = NULL;
    m->sets.key[slot] = h, m->sets.val[slot] = s + 1, m->sets.n++;
    return (int32_t)s;
}

static int32_t step_slow(gram_match *m, uint32_t s, uint8_t byte) {
    if (!m->trans[s]) {
        int32_t *t = malloc(256 * sizeof *t);
        if (!t) return m->oom = true, DEAD;
        for (int i = 0; i < 256; i++) t[i] = UNKNOWN;
        m->trans[s] = t;
    }
    m->n_out = 0;
    m->epoch++;
    for (uint32_t i = m->soff[s]; i < m->soff[s + 1]; i++) {
        uint32_t id = m->pool[i];
        if (id == 0) continue; /* the grammar is complete: no byte follows */
        uint32_t pos = m->npos[id];
        if (gram_cls_has(m->g->cls[-m->g->sym[pos] - 1], byte)) closure(m, pos + 1, m->npar[id]);
    }
    int32_t next = intern_out(m);
    if (m->oom) return DEAD; /* not cached: an allocation failed */
    m->trans[s][byte] = next;
    return next;
}

static inline int32_t step(gram_match *m, uint32_t s, uint8_t byte) {
    int32_t *t = m->trans[s];
    int32_t next = t ? t[byte] : UNKNOWN;
    return next != UNKNOWN ? next : step_slow(m, s, byte);
}

/* ---- matcher ----------------------------------------------------------------------------- */

gram_match *gram_match_create(const gram *g, const gram_vocab *v, kiln_err *err) {
    gram_match *m = calloc(1, sizeof *m);
    if (!m) return kiln_fail(err, KILN_ERR_NOMEM, "grammar: out of memory"), NULL;
    m->g = g, m->v = v;
    m->words = (v->n_vocab + 63) / 64;
    m->walk = malloc(((size_t)v->max_depth + 2) * sizeof *m->walk);
    node(m, UINT32_MAX, 0); /* node 0: the empty stack (its position is never read) */
    m->epoch = 1;
    m->n_out = 0;
    const uint32_t a0 = g->rule_alt[g->root], a1 = g->rule_alt[g->root + 1];
    for (uint32_t a = a0; a < a1; a++) closure(m, g->alt[a], 0);
    int32_t s = intern_out(m);
    if (m->oom || !m->walk || s < 0) {
        if (m->too_complex) kiln_fail(err, KILN_ERR_INVALID, "grammar: too complex to follow (over %d stacks a step)", MAX_CLOSURE);
        else if (m->oom || !m->walk) kiln_fail(err, KILN_ERR_NOMEM, "grammar: out of memory");
        else kiln_fail(err, KILN_ERR_INVALID, "grammar: it matches nothing");
        gram_match_free(m);
        return NULL;
    }
    m->cur = m->start = (uint32_t)s;
    return m;
}

void gram_match_free(gram_match *m) {
    if (!m) return;
    for (uint32_t s = 0; s < m->n_sets; s++) free(m->trans[s]), free(m->mask[s]);
    free(m->trans), free(m->mask);
    free(m->npos), free(m->npar), free(m->nodes.key), free(m->nodes.val);
    free(m->pool), free(m->soff), free(m->sets.key), free(m->sets.val);
    free(m->work), free(m->out), free(m->seen), free(m->walk);
    free(m);
}

void gram_match_reset(gram_match *m) { m->cur = m->start; }

int gram_match_bytes(gram_match *m, const char *s, size_t n) {
    uint32_t cur = m->cur;
    for (size_t i = 0; i < n; i++) {
        int32_t next = step(m, cur, (uint8_t)s[i]);
        if (next < 0) return -1;
        cur = (uint32_t)next;
    }
    m->cur = cur;
    return 0;
}

int gram_match_token(gram_match *m, int32_t id) {
    const gram_vocab *v = m->v;
    if (id < 0 || (uint32_t)id >= v->n_vocab || v->off[id + 1] == v->off[id]) return -1;
    return gram_match_bytes(m, v->bytes + v->off[id], v->off[id + 1] - v->off[id]);
}

bool gram_match_too_complex(const gram_match *m) { return m->too_complex; }

bool gram_match_accepting(const gram_match *m) { return m->pool[m->soff[m->cur]] == 0; }

bool gram_match_done(const gram_match *m) {
    return m->soff[m->cur + 1] - m->soff[m->cur] == 1 && m->pool[m->soff[m->cur]] == 0;
}

/* Every token the state's stacks accept: the prefix tree walked in preorder, a subtree
 * skipped where its prefix leads nowhere. */
static void walk(gram_match *m, uint32_t s, uint64_t *mask) {
    const gram_vocab *v = m->v;
    int32_t *st = m->walk;
    st[0] = (int32_t)s;
    for (uint32_t i = 1; i < v->n_nodes;) {
        uint32_t d = v->depth[i];
        int32_t next = step(m, (uint32_t)st[d - 1], v->byte[i]);
        if (next < 0) {
            i = v->end[i];
            continue;
        }
        st[d] = next;
        for (uint32_t k = v->first[i]; k < v->first[i + 1]; k++) mask[v->tok[k] >> 6] |= 1ull << (v->tok[k] & 63);
        i++;
    }
}

const uint64_t *gram_match_mask(gram_match *m) {
    uint32_t s = m->cur;
    if (m->mask[s]) return m->mask[s];
    if (m->n_masks >= MAX_MASKS) { /* a long, varied generation: start over rather than grow */
        for (uint32_t i = 0; i < m->n_sets; i++) free(m->mask[i]), m->mask[i] = NULL;
        m->n_masks = 0;
    }
    uint64_t *mask = calloc(m->words ? m->words : 1, sizeof *mask);
    if (!mask) return NULL;
    walk(m, s, mask);
    if (m->oom) return free(mask), NULL;
    m->mask[s] = mask;
    m->n_masks++;
    return mask;
}

void gram_apply_mask(const uint64_t *mask, float *logits, uint32_t n_vocab, const int32_t *eog, size_t n_eog,
                     bool allow_eog) {
    float keep[8];
    for (size_t i = 0; i < n_eog && i < 8; i++)
        keep[i] = eog[i] >= 0 && (uint32_t)eog[i] < n_vocab ? logits[eog[i]] : 0.0f;
    for (uint32_t w = 0; w < (n_vocab + 63) / 64; w++) {
        uint64_t bits = mask[w];
        if (bits == ~0ull) continue;
        uint32_t base = w * 64, end = base + 64 < n_vocab ? base + 64 : n_vocab;
        for (uint32_t i = base; i < end; i++)
            if (!(bits >> (i - base) & 1)) logits[i] = -INFINITY;
    }
    for (size_t i = 0; i < n_eog && i < 8; i++)
        if (eog[i] >= 0 && (uint32_t)eog[i] < n_vocab) logits[eog[i]] = allow_eog ? keep[i] : -INFINITY;
}
