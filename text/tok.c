/* The tokenizer kiln runs, as llama.cpp's llama_vocab (src/llama-vocab.cpp) loads and uses
 * it: token attributes from tokenizer.ggml.token_type plus the same name-based fix-ups
 * (eot/eom/fim/eog detection, phi-3's rstrip), special-token partitioning of the text,
 * then SentencePiece (tok_spm.c) or byte-level BPE (tok_bpe.c) on the plain fragments. */
#include "base/error.h"
#include "text/tok_internal.h"
#include "text/tok_pretok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tok_ids_push(tok_ids *o, int32_t id) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 256;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) return -1;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return 0;
}

/* ---- UTF-8 ------------------------------------------------------------------------------ */

/* How a sequence starting with lead byte c goes on: total length k (0: c cannot start
 * one) and the range of the second byte (excluding overlongs, surrogates, > U+10FFFF). */
static size_t utf8_lead(unsigned char c, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80, *hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c == 0xE0) return *lo = 0xA0, 3;
    if (c == 0xED) return *hi = 0x9F, 3;
    if (c >= 0xE1 && c <= 0xEF) return 3;
    if (c == 0xF0) return *lo = 0x90, 4;
    if (c == 0xF4) return *hi = 0x8F, 4;
    if (c >= 0xF1 && c <= 0xF3) return 4;
    return 0;
}

/* At s[0..n): 1..4 = a whole valid character of that length; 0 = a valid but unfinished
 * start (n bytes); negative = -(bytes of the maximal invalid part, at least 1). */
static int utf8_step(const unsigned char *s, size_t n) {
    unsigned char lo, hi;
    size_t k = utf8_lead(s[0], &lo, &hi);
    if (k == 0) return -1;
    for (size_t j = 1; j < k; j++) {
        if (j >= n) return 0;
        unsigned char a = j == 1 ? lo : 0x80, b = j == 1 ? hi : 0xBF;
        if (s[j] < a || s[j] > b) return -(int)j;
    }
    return (int)k;
}

size_t tok_utf8_invalid_at(const char *text, size_t len) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        unsigned char lo, hi;
        size_t k = utf8_lead(s[i], &lo, &hi);
        if (k == 0) return i + 1;
        for (size_t j = 1; j < k; j++) {
            if (i + j >= len) return i + 1; /* the text ends inside this character */
            unsigned char a = j == 1 ? lo : 0x80, b = j == 1 ? hi : 0xBF;
            if (s[i + j] < a || s[i + j] > b) return i + j + 1;
        }
        i += k;
    }
    return 0;
}

/* ---- loading ---------------------------------------------------------------------------- */

/* An optional bool key; a value of another type is an error, as in llama.cpp. */
static int opt_bool(const gguf_file *g, const char *key, bool *out, kiln_err *err) {
    const gguf_value *v = gguf_find(g, key);
    if (!v) return 0;
    if (v->type != GGUF_VT_BOOL)
        return kiln_fail(err, KILN_ERR_INVALID, "%s has type %s, expected bool", key, gguf_vtype_name(v->type));
    *out = v->v.b;
    return 0;
}

/* An optional token-id key: an id outside the vocab keeps the default, as llama.cpp does. */
static int opt_id(const gguf_file *g, const char *key, uint32_t n, int32_t *id, kiln_err *err) {
    const gguf_value *v = gguf_find(g, key);
    if (!v) return 0;
    int64_t x;
    switch (v->type) {
    case GGUF_VT_U8: case GGUF_VT_U16: case GGUF_VT_U32: case GGUF_VT_U64:
        x = v->v.u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v->v.u;
        break;
    case GGUF_VT_I8: case GGUF_VT_I16: case GGUF_VT_I32: case GGUF_VT_I64:
        x = v->v.i;
        break;
    default:
        return kiln_fail(err, KILN_ERR_INVALID, "%s has type %s, expected an integer", key, gguf_vtype_name(v->type));
    }
    if (x >= 0 && x < (int64_t)n) *id = (int32_t)x;
    return 0;
}

static int32_t find_id(const tokenizer *t, const char *s) {
    return (int32_t)tok_lookup(t, s, strlen(s));
}

/* llama.cpp's name-based detections iterate a hash map, so which of several candidates wins
 * is unspecified there; kiln takes the first in the list order. */
static void detect(tokenizer *t, int32_t *slot, const char *const *names) {
    if (*slot >= 0) return;
    for (size_t i = 0; names[i]; i++) {
        int32_t id = find_id(t, names[i]);
        if (id >= 0) {
            *slot = id;
            t->attr[id] |= TOK_ATTR_CONTROL;
            return;
        }
    }
}

static const char *const eot_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
    "_<EOT>", "[EOT]", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "<end_of_utterance>", NULL};
static const char *const eom_names[] = {"<|eom_id|>", NULL};
static const char *const fim_pre_names[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
    "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const fim_suf_names[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>",
    "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const fim_mid_names[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
    "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const fim_pad_names[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const fim_rep_names[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
static const char *const fim_sep_names[] = {"<|file_sep|>", NULL};
/* Tokens that end generation, by name (llama.cpp's special_eog_ids). */
static const char *const eog_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[", NULL};

static bool in_eog(const tokenizer *t, int32_t id) {
    return id >= 0 && (t->attr[id] & TOK_ATTR_EOG);
}

static void set_eog(tokenizer *t, int32_t id) {
    if (id >= 0) t->attr[id] |= TOK_ATTR_EOG;
}

static void build_eog(tokenizer *t) {
    set_eog(t, t->fim_pad);
    set_eog(t, t->fim_rep);
    set_eog(t, t->fim_sep);
    for (size_t i = 0; eog_names[i]; i++) {
        int32_t id = find_id(t, eog_names[i]);
        /* Deliberate difference: llama.cpp (since its paddleocr change) also promotes a
         * "</s>" the file types as normal text, e.g. Qwen's BPE token 128247, which then
         * stops generation and is cut out of text as a special token, unlike Hugging Face.
         * kiln keeps such a "</s>" ordinary. */
        if (id >= 0 && strcmp(eog_names[i], "</s>") == 0 && t->attr[id] == TOK_ATTR_NORMAL) continue;
        if (id >= 0) t->attr[id] |= TOK_ATTR_EOG | TOK_ATTR_CONTROL;
    }
    /* gpt-oss: these always render, so they are user-defined whatever the file says */
    static const char *const shown[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++) {
        int32_t id = find_id(t, shown[i]);
        if (id >= 0) t->attr[id] = TOK_ATTR_USER_DEFINED | (t->attr[id] & TOK_ATTR_EOG);
    }
    set_eog(t, t->eos);
    set_eog(t, t->eot);
    set_eog(t, t->eom);
    /* o200k_harmony / solar-open: "<|end|>" ends a message there, not the generation */
    int32_t end = find_id(t, "<|end|>");
    bool ret = in_eog(t, find_id(t, "<|return|>"));
    bool call = in_eog(t, find_id(t, "<|call|>")) || in_eog(t, find_id(t, "<|calls|>"));
    bool flush = in_eog(t, find_id(t, "<|flush|>"));
    if (in_eog(t, end) && ((ret && call) || (call && flush))) t->attr[end] = TOK_ATTR_USER_DEFINED;
    /* gemma4 / paddleocr: "</s>" is ordinary text when "<|tool_response>" exists */
    int32_t s = find_id(t, "</s>");
    if (in_eog(t, s) && in_eog(t, find_id(t, "<|tool_response>"))) t->attr[s] = TOK_ATTR_NORMAL;
}

typedef struct {
    uint64_t len;
    int32_t id;
} by_len;

static int longer_first(const void *a, const void *b) {
    const by_len *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* llama.cpp's cache_special_tokens: control, user-defined and unknown tokens, longest text
 * first (its std::sort leaves equal lengths in no set order; kiln orders them by id). */
static int build_special(tokenizer *t) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n; i++)
        if (t->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN)) n++;
    by_len *v = malloc((n ? n : 1) * sizeof *v);
    t->special = malloc((n ? n : 1) * sizeof *t->special);
    if (!v || !t->special) {
        free(v);
        return -1;
    }
    for (uint32_t i = 0, k = 0; i < t->n; i++)
        if (t->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN))
            v[k++] = (by_len){t->text[i].len, (int32_t)i};
    qsort(v, n, sizeof *v, longer_first);
    for (uint32_t i = 0; i < n; i++) t->special[i] = v[i].id;
    t->n_special = n;
    free(v);
    return 0;
}

/* llama.cpp sets lstrip/rstrip for a few models by name (no GGUF key carries them). */
static void strip_rules(tokenizer *t, const gguf_file *g) {
    gguf_str name = {0}, arch = {0};
    const gguf_value *v = gguf_find(g, "general.name");
    if (v && v->type == GGUF_VT_STR) name = v->v.str;
    v = gguf_find(g, "general.architecture");
    if (v && v->type == GGUF_VT_STR) arch = v->v.str;
    char lname[256];
    size_t ln = name.len < sizeof lname - 1 ? (size_t)name.len : sizeof lname - 1;
    for (size_t i = 0; i < ln; i++) {
        char c = name.ptr[i];
        lname[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    lname[ln] = 0;
    char larch[128];
    size_t la = arch.len < sizeof larch - 1 ? (size_t)arch.len : sizeof larch - 1;
    if (la) memcpy(larch, arch.ptr, la);
    larch[la] = 0;
    const char *pre = t->pre ? t->pre : "";
    if (strstr(pre, "jina-v2-de") || strstr(pre, "jina-v2-es") || strstr(pre, "jina-v2-code") ||
        strstr(larch, "nomic-bert-moe") || strstr(larch, "jina-bert-v3")) {
        int32_t id = find_id(t, "<mask>");
        if (id >= 0) t->attr[id] |= TOK_ATTR_LSTRIP;
    } else if (strstr(lname, "phi-3") || strstr(lname, "phi3")) {
        for (uint32_t i = 0; i < t->n_special; i++) t->attr[t->special[i]] |= TOK_ATTR_RSTRIP;
        int32_t id = find_id(t, "</s>");
        if (id >= 0) t->attr[id] |= TOK_ATTR_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t i = 0; i < 3; i++)
            if ((id = find_id(t, keep[i])) >= 0) t->attr[id] &= ~(uint32_t)TOK_ATTR_RSTRIP;
    } else if (strstr(lname, "modern-bert")) {
        int32_t id = find_id(t, "[MASK]");
        if (id >= 0) t->attr[id] |= TOK_ATTR_LSTRIP;
    }
}

static uint32_t attr_of_type(int64_t type) {
    switch (type) {
    case TOK_TYPE_NORMAL: return TOK_ATTR_NORMAL;
    case TOK_TYPE_UNKNOWN: return TOK_ATTR_UNKNOWN;
    case TOK_TYPE_CONTROL: return TOK_ATTR_CONTROL;
    case TOK_TYPE_USER_DEFINED: return TOK_ATTR_USER_DEFINED;
    case TOK_TYPE_UNUSED: return TOK_ATTR_UNUSED;
    case TOK_TYPE_BYTE: return TOK_ATTR_BYTE;
    default: return 0; /* undefined: never rendered, never matched */
    }
}

/* The pre-tokenizer names llama.cpp gives flags beyond its regex (add_bos, ignore_merges,
 * no bos). */
static void pre_flags(tokenizer *t) {
    static const char *const llama3[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                                         "midm-2.0", "lfm2", "jina-v5-nano", NULL};
    for (size_t i = 0; llama3[i]; i++)
        if (strcmp(t->pre, llama3[i]) == 0) t->ignore_merges = t->add_bos = true;
    if (strcmp(t->pre, "tekken") == 0) t->ignore_merges = t->add_bos = true;
    if (strcmp(t->pre, "chameleon") == 0) t->add_bos = true;
    if (!strcmp(t->pre, "minicpm5") || !strcmp(t->pre, "youtu") || !strcmp(t->pre, "granite-embed-multi-97m"))
        t->ignore_merges = true;
    if (!strcmp(t->pre, "glm4") || !strcmp(t->pre, "chatglm-bpe")) t->bos = -1;
}

static const gguf_array *str_array(const gguf_file *g, const char *key, bool required, kiln_err *err,
                                   int *rc) {
    *rc = 0;
    const gguf_value *v = gguf_find(g, key);
    if (!v) {
        if (required) *rc = kiln_fail(err, KILN_ERR_INVALID, "%s is missing", key);
        return NULL;
    }
    if (v->type != GGUF_VT_ARR || v->v.arr.type != GGUF_VT_STR) {
        *rc = kiln_fail(err, KILN_ERR_INVALID, "%s is not an array of strings", key);
        return NULL;
    }
    return &v->v.arr;
}

tokenizer *tok_load(const gguf_file *g, kiln_err *err) {
    if (!g) {
        kiln_fail(err, KILN_ERR_INVALID, "tokenizer: no GGUF file");
        return NULL;
    }
    const gguf_value *mv = gguf_find(g, "tokenizer.ggml.model");
    if (!mv) {
        kiln_fail(err, KILN_ERR_INVALID, "this GGUF has no tokenizer (tokenizer.ggml.model is missing)");
        return NULL;
    }
    if (mv->type != GGUF_VT_STR) {
        kiln_fail(err, KILN_ERR_INVALID, "tokenizer.ggml.model has type %s, expected str", gguf_vtype_name(mv->type));
        return NULL;
    }
    gguf_str model = mv->v.str;
    tok_kind kind;
    if (gguf_str_eq(model, "llama")) {
        kind = TOK_KIND_SPM;
    } else if (gguf_str_eq(model, "gpt2")) {
        kind = TOK_KIND_BPE;
    } else {
        const char *what = gguf_str_eq(model, "bert") ? " (WordPiece)"
                           : gguf_str_eq(model, "t5") ? " (Unigram)"
                           : gguf_str_eq(model, "rwkv") ? " (RWKV)"
                           : gguf_str_eq(model, "no_vocab") || gguf_str_eq(model, "none") ? " (no vocabulary)"
                                                                              : "";
        kiln_fail(err, KILN_ERR_UNSUPPORTED,
                  "tokenizer.ggml.model '%.*s'%s is not supported: kiln runs 'llama' (SentencePiece) and 'gpt2' "
                  "(byte-level BPE) tokenizers",
                  (int)(model.len > 64 ? 64 : model.len), model.ptr, what);
        return NULL;
    }

    int rc;
    const gguf_array *toks = str_array(g, "tokenizer.ggml.tokens", true, err, &rc);
    if (!toks) return NULL;
    if (toks->n == 0 || toks->n > TOK_MAX_VOCAB) {
        kiln_fail(err, KILN_ERR_INVALID, "tokenizer.ggml.tokens has %llu entries (1 to %u expected)",
                  (unsigned long long)toks->n, TOK_MAX_VOCAB);
        return NULL;
    }
    uint32_t n = (uint32_t)toks->n;
    const gguf_array *merges = NULL;
    if (kind == TOK_KIND_BPE) {
        merges = str_array(g, "tokenizer.ggml.merges", true, err, &rc);
        if (!merges) return NULL;
        if (merges->n > UINT32_MAX - 1) {
            kiln_fail(err, KILN_ERR_INVALID, "tokenizer.ggml.merges has too many entries");
            return NULL;
        }
    }
    const gguf_value *sv = gguf_find(g, "tokenizer.ggml.scores");
    if (sv && (sv->type != GGUF_VT_ARR || (sv->v.arr.type != GGUF_VT_F32 && sv->v.arr.type != GGUF_VT_I32))) {
        kiln_fail(err, KILN_ERR_INVALID, "tokenizer.ggml.scores is not an array of f32 or i32");
        return NULL;
    }
    if (sv && sv->v.arr.n < n) {
        kiln_fail(err, KILN_ERR_INVALID, "tokenizer.ggml.scores has %llu entries for %u tokens",
                  (unsigned long long)sv->v.arr.n, n);
        return NULL;
    }
    const gguf_value *tv = gguf_find(g, "tokenizer.ggml.token_type");
    if (tv && (tv->type != GGUF_VT_ARR || tv->v.arr.type != GGUF_VT_I32)) {
        kiln_fail(err, KILN_ERR_INVALID, "tokenizer.ggml.token_type is not an array of i32");
        return NULL;
    }
    if (tv && tv->v.arr.n < n) {
        kiln_fail(err, KILN_ERR_INVALID, "tokenizer.ggml.token_type has %llu entries for %u tokens",
                  (unsigned long long)tv->v.arr.n, n);
        return NULL;
    }
    const gguf_value *pv = gguf_find(g, "tokenizer.ggml.pre");
    if (pv && pv->type != GGUF_VT_STR) {
        kiln_fail(err, KILN_ERR_INVALID, "tokenizer.ggml.pre has type %s, expected str", gguf_vtype_name(pv->type));
        return NULL;
    }

    tokenizer *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->kind = kind;
    t->n = n;
    t->model = tok_dup_bytes(model.ptr, model.len);
    if (pv && pv->v.str.len) t->pre = tok_dup_bytes(pv->v.str.ptr, pv->v.str.len);
    else t->pre = tok_dup_bytes("default", 7); /* llama.cpp: a missing pre is "default" */
    if (!t->model || !t->pre) goto oom;
    if (kind == TOK_KIND_BPE && !tok_pretok_known(t->pre)) {
        kiln_fail(err, KILN_ERR_UNSUPPORTED, "tokenizer.ggml.pre '%s' names a pre-tokenizer kiln does not have",
                  t->pre);
        tok_free(t);
        return NULL;
    }

    /* Token and merge bytes in one arena; empty tokens get llama.cpp's "[EMPTY_i]". */
    const gguf_str *src = toks->data;
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) total += src[i].len ? src[i].len : 24;
    const gguf_str *msrc = merges ? merges->data : NULL;
    uint64_t n_merges = merges ? merges->n : 0;
    for (uint64_t i = 0; i < n_merges; i++) total += msrc[i].len;
    t->arena = malloc(total ? total : 1);
    t->text = malloc(n * sizeof *t->text);
    t->attr = malloc(n * sizeof *t->attr);
    t->score = malloc(n * sizeof *t->score);
    if (n_merges) t->merges = malloc(n_merges * sizeof *t->merges);
    if (!t->arena || !t->text || !t->attr || !t->score || (n_merges && !t->merges)) goto oom;
    char *p = t->arena;
    for (uint32_t i = 0; i < n; i++) {
        size_t len = src[i].len;
        if (len) memcpy(p, src[i].ptr, len);
        else len = (size_t)snprintf(p, 24, "[EMPTY_%u]", i);
        t->text[i] = (gguf_str){p, len};
        p += len;
        t->attr[i] = tv ? attr_of_type(gguf_arr_at(&tv->v.arr, i).v.i) : TOK_ATTR_NORMAL;
        if (!sv) t->score[i] = 0.0f;
        else {
            gguf_value s = gguf_arr_at(&sv->v.arr, i);
            t->score[i] = sv->v.arr.type == GGUF_VT_F32 ? (float)s.v.f : (float)s.v.i;
        }
    }
    for (uint64_t i = 0; i < n_merges; i++) {
        if (msrc[i].len) memcpy(p, msrc[i].ptr, msrc[i].len);
        t->merges[i] = (gguf_str){p, msrc[i].len};
        p += msrc[i].len;
    }
    t->n_merges = n_merges;
    if (tok_index_init(&t->ix, n)) goto oom;
    for (uint32_t i = 0; i < n; i++) {
        int64_t j = tok_index_put(&t->ix, t->text, i);
        if (j >= 0) {
            kiln_fail(err, KILN_ERR_INVALID, "duplicate token in tokenizer.ggml.tokens: '%.*s' has ids %lld and %u",
                      (int)(t->text[i].len > 60 ? 60 : t->text[i].len), t->text[i].ptr, (long long)j, i);
            tok_free(t);
            return NULL;
        }
    }

    /* Defaults per model type, then the file's keys (llama_vocab::impl::load). */
    t->eot = t->eom = t->sep = t->pad = -1;
    t->fim_pre = t->fim_suf = t->fim_mid = t->fim_pad = t->fim_rep = t->fim_sep = -1;
    if (kind == TOK_KIND_SPM) {
        t->bos = 1, t->eos = 2, t->unk = 0;
        t->add_space_prefix = true;
        t->add_bos = true;
    } else {
        t->bos = 11, t->eos = 11, t->unk = -1;
        pre_flags(t);
    }
    if (t->bos >= (int32_t)n) t->bos = -1;
    if (t->eos >= (int32_t)n) t->eos = -1;
    if (t->unk >= (int32_t)n) t->unk = -1;
    if (opt_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err)) goto fail;
    struct { const char *key; int32_t *id; } ids[] = {
        {"tokenizer.ggml.bos_token_id", &t->bos},         {"tokenizer.ggml.eos_token_id", &t->eos},
        {"tokenizer.ggml.eot_token_id", &t->eot},         {"tokenizer.ggml.eom_token_id", &t->eom},
        {"tokenizer.ggml.unknown_token_id", &t->unk},     {"tokenizer.ggml.seperator_token_id", &t->sep},
        {"tokenizer.ggml.padding_token_id", &t->pad},     {"tokenizer.ggml.fim_pre_token_id", &t->fim_pre},
        {"tokenizer.ggml.fim_suf_token_id", &t->fim_suf}, {"tokenizer.ggml.fim_mid_token_id", &t->fim_mid},
        {"tokenizer.ggml.fim_pad_token_id", &t->fim_pad}, {"tokenizer.ggml.fim_rep_token_id", &t->fim_rep},
        {"tokenizer.ggml.fim_sep_token_id", &t->fim_sep}, {"tokenizer.ggml.prefix_token_id", &t->fim_pre},
        {"tokenizer.ggml.suffix_token_id", &t->fim_suf},  {"tokenizer.ggml.middle_token_id", &t->fim_mid},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (opt_id(g, ids[i].key, n, ids[i].id, err)) goto fail;
    if (opt_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err) ||
        opt_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err))
        goto fail;
    if (t->add_bos && t->bos < 0) {
        kiln_fail(err, KILN_ERR_INVALID,
                  "tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
        goto fail;
    }
    if (t->add_eos && t->eos < 0) {
        kiln_fail(err, KILN_ERR_INVALID,
                  "tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");
        goto fail;
    }

    detect(t, &t->eot, eot_names);
    detect(t, &t->eom, eom_names);
    detect(t, &t->fim_pre, fim_pre_names);
    detect(t, &t->fim_suf, fim_suf_names);
    detect(t, &t->fim_mid, fim_mid_names);
    detect(t, &t->fim_pad, fim_pad_names);
    detect(t, &t->fim_rep, fim_rep_names);
    detect(t, &t->fim_sep, fim_sep_names);
    build_eog(t);
    if (build_special(t)) goto oom;
    strip_rules(t, g);

    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int64_t id = tok_lookup(t, hex, 6);
        if (id < 0) {
            char c = (char)b;
            id = tok_lookup(t, &c, 1);
        }
        t->spm_byte[b] = (int32_t)id;
    }
    if (kind == TOK_KIND_BPE && tok_bpe_init(t, err)) goto fail;
    return t;
oom:
    kiln_fail(err, KILN_ERR_NOMEM, "out of memory loading the tokenizer");
fail:
    tok_free(t);
    return NULL;
}

void tok_free(tokenizer *t) {
    if (!t) return;
    if (t->kind == TOK_KIND_BPE) tok_bpe_free(t);
    tok_index_free(&t->ix);
    free(t->model);
    free(t->pre);
    free(t->text);
    free(t->attr);
    free(t->score);
    free(t->arena);
    free(t->special);
    free(t->merges);
    free(t);
}

uint32_t tok_n_vocab(const tokenizer *t) {
    return t ? t->n : 0;
}
int32_t tok_bos(const tokenizer *t) {
    return t ? t->bos : -1;
}
int32_t tok_eos(const tokenizer *t) {
    return t ? t->eos : -1;
}
int32_t tok_eot(const tokenizer *t) {
    return t ? t->eot : -1;
}
bool tok_add_bos(const tokenizer *t) {
    return t && t->add_bos;
}
bool tok_space_prefix(const tokenizer *t) {
    return t && t->add_space_prefix;
}
bool tok_is_eog(const tokenizer *t, int32_t id) {
    return t && id >= 0 && (uint32_t)id < t->n && (t->attr[id] & TOK_ATTR_EOG);
}
int32_t tok_find(const tokenizer *t, const char *s) {
    return t && s ? find_id(t, s) : -1;
}

/* ---- encoding --------------------------------------------------------------------------- */

/* A piece of the text: raw bytes [off, off+len) when id < 0, else a special token. */
typedef struct {
    int32_t id;
    size_t off, len;
} frag;

typedef struct {
    frag *v;
    size_t n, cap;
} frags;

static int frag_push(frags *f, frag x) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        frag *v = realloc(f->v, cap * sizeof *v);
        if (!v) return -1;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = x;
    return 0;
}

static bool ascii_space(char c) { /* C-locale isspace, as llama.cpp's strip rules use */
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0 || nn > hn) return NULL;
    const char *end = h + (hn - nn) + 1;
    for (const char *p = h; p < end;) {
        p = memchr(p, (unsigned char)nd[0], (size_t)(end - p));
        if (!p) return NULL;
        if (memcmp(p, nd, nn) == 0) return p;
        p++;
    }
    return NULL;
}

/* llama.cpp's tokenizer_st_partition: for each special token, longest first, split every
 * raw fragment at each occurrence; control and unknown tokens only when parse_special,
 * user-defined ones always. lstrip/rstrip tokens eat the whitespace beside them. */
static int partition(const tokenizer *t, const char *text, size_t len, bool parse_special, frags *out) {
    frags a = {0}, b = {0};
    int rc = -1;
    if (frag_push(&a, (frag){-1, 0, len})) goto done;
    /* Which byte pairs occur, to skip most special tokens without scanning the text. */
    uint8_t *pairs = calloc(65536 / 8, 1);
    if (!pairs) goto done;
    bool bytes[256] = {0};
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        bytes[c] = true;
        if (i + 1 < len) {
            unsigned k = (unsigned)c << 8 | (unsigned char)text[i + 1];
            pairs[k >> 3] |= (uint8_t)(1u << (k & 7));
        }
    }
    for (uint32_t s = 0; s < t->n_special; s++) {
        int32_t id = t->special[s];
        uint32_t attr = t->attr[id];
        if (!parse_special && (attr & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) continue;
        const char *tx = t->text[id].ptr;
        size_t tl = t->text[id].len;
        if (tl > len) continue;
        if (tl == 1 && !bytes[(unsigned char)tx[0]]) continue;
        if (tl >= 2) {
            unsigned k = (unsigned)(unsigned char)tx[0] << 8 | (unsigned char)tx[1];
            if (!(pairs[k >> 3] & (1u << (k & 7)))) continue;
        }
        b.n = 0;
        bool hit = false;
        for (size_t i = 0; i < a.n; i++) {
            frag f = a.v[i];
            if (f.id >= 0) {
                if (frag_push(&b, f)) goto done_pairs;
                continue;
            }
            size_t off = f.off, rem = f.len;
            while (rem > 0) {
                const char *m = find_bytes(text + off, rem, tx, tl);
                if (!m) {
                    if (frag_push(&b, (frag){-1, off, rem})) goto done_pairs;
                    break;
                }
                hit = true;
                size_t at = (size_t)(m - text), left = at - off;
                if (attr & TOK_ATTR_LSTRIP)
                    while (left > 0 && ascii_space(text[off + left - 1])) left--;
                if (left > 0 && frag_push(&b, (frag){-1, off, left})) goto done_pairs;
                if (frag_push(&b, (frag){id, at, tl})) goto done_pairs;
                size_t roff = at + tl, rlen = off + rem - roff;
                if (attr & TOK_ATTR_RSTRIP)
                    while (rlen > 0 && ascii_space(text[roff])) roff++, rlen--;
                off = roff;
                rem = rlen;
            }
        }
        if (hit) {
            frags tmp = a;
            a = b;
            b = tmp;
        }
    }
    *out = a;
    a.v = NULL;
    rc = 0;
done_pairs:
    free(pairs);
done:
    free(a.v);
    free(b.v);
    return rc;
}

static int64_t encode_all(const tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                          tok_ids *out, kiln_err *err) {
    frags f = {0};
    if (len && partition(t, text, len, parse_special, &f)) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    int rc = 0;
    char *buf = NULL;
    if (add_special && t->add_bos && tok_ids_push(out, t->bos)) goto oom;
    if (t->kind == TOK_KIND_SPM) {
        /* The dummy prefix goes before the first text and after every special token; spaces
         * become "▁" (3 bytes), so a fragment needs at most 3 * (len + 1) bytes. */
        bool prev_special = true;
        for (size_t i = 0; i < f.n && rc == 0; i++) {
            if (f.v[i].id >= 0) {
                if (tok_ids_push(out, f.v[i].id)) goto oom;
                prev_special = true;
                continue;
            }
            size_t fl = f.v[i].len, k = 0;
            char *nb = realloc(buf, 3 * (fl + 1));
            if (!nb) goto oom;
            buf = nb;
            if (t->add_space_prefix && prev_special) memcpy(buf, "\xe2\x96\x81", 3), k = 3;
            for (size_t j = 0; j < fl; j++) {
                char c = text[f.v[i].off + j];
                if (c == ' ') memcpy(buf + k, "\xe2\x96\x81", 3), k += 3;
                else buf[k++] = c;
            }
            rc = tok_spm_encode(t, buf, k, out, err);
            prev_special = false;
        }
    } else {
        for (size_t i = 0; i < f.n && rc == 0; i++) {
            if (f.v[i].id >= 0) {
                if (tok_ids_push(out, f.v[i].id)) goto oom;
                continue;
            }
            rc = tok_bpe_encode(t, text + f.v[i].off, f.v[i].len, out, err);
        }
    }
    if (rc == 0 && add_special && t->add_eos && tok_ids_push(out, t->eos)) goto oom;
    free(buf);
    free(f.v);
    return rc;
oom:
    free(buf);
    free(f.v);
    return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
}

int64_t tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                   int32_t *ids, size_t cap, kiln_err *err) {
    if (!t) return kiln_fail(err, KILN_ERR_INVALID, "no tokenizer");
    if (!text && len) return kiln_fail(err, KILN_ERR_INVALID, "no text");
    size_t bad = tok_utf8_invalid_at(text, len);
    if (bad)
        return kiln_fail(err, KILN_ERR_INVALID, "text is not valid UTF-8 (byte %zu: 0x%02X)", bad - 1,
                         (unsigned char)text[bad - 1]);
    tok_ids out = {0};
    if (encode_all(t, text, len, add_special, parse_special, &out, err)) {
        free(out.v);
        return -1;
    }
    if (ids && cap) memcpy(ids, out.v, (out.n < cap ? out.n : cap) * sizeof *ids);
    int64_t n = (int64_t)out.n;
    free(out.v);
    return n;
}

/* ---- pieces ----------------------------------------------------------------------------- */

static int64_t copy_out(char *buf, size_t cap, const char *p, size_t n) {
    if (buf && cap) memcpy(buf, p, n < cap ? n : cap);
    return (int64_t)n;
}

static int hexval(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

int64_t tok_piece(const tokenizer *t, int32_t id, bool special, char *buf, size_t cap) {
    if (!t || id < 0 || (uint32_t)id >= t->n) return -1;
    uint32_t attr = t->attr[id];
    const char *s = t->text[id].ptr;
    size_t n = t->text[id].len;
    if (attr & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL)) return special ? copy_out(buf, cap, s, n) : 0;
    if (attr & TOK_ATTR_USER_DEFINED) return copy_out(buf, cap, s, n);
    if (attr & TOK_ATTR_NORMAL) {
        if (t->kind == TOK_KIND_BPE) return (int64_t)tok_bpe_unmap(s, n, buf, cap);
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (i + 2 < n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                if (buf && k < cap) buf[k] = ' ';
                k++;
                i += 2;
            } else {
                if (buf && k < cap) buf[k] = s[i];
                k++;
            }
        }
        return (int64_t)k;
    }
    if (attr & TOK_ATTR_BYTE) {
        /* "<0xNN>": llama.cpp reads the two characters after "<0x" as hex */
        int v = 0;
        for (size_t i = 3; i < 5 && i < n && hexval(s[i]) >= 0; i++) v = v * 16 + hexval(s[i]);
        char c = (char)v;
        return n >= 3 ? copy_out(buf, cap, &c, 1) : 0;
    }
    return 0; /* unused and undefined tokens render as nothing */
}

/* ---- streaming -------------------------------------------------------------------------- */

void tok_stream_init(tok_stream *s, const tokenizer *t) {
    memset(s, 0, sizeof *s);
    s->t = t;
    s->first = true;
}

void tok_stream_init_after(tok_stream *s, const tokenizer *t, const int32_t *prompt, size_t n) {
    tok_stream_init(s, t);
    char one[8];
    for (size_t i = 0; i < n && s->first; i++)
        if (tok_piece(t, prompt[i], false, one, sizeof one) > 0) s->first = false;
}

/* Appends whole characters to out while they fit; once one does not, nothing after it is
 * written either (so the output never has a hole or half a character). */
static void emit(char *out, size_t cap, size_t *w, bool *full, const void *p, size_t n) {
    if (*full || !out || *w + n > cap) {
        *full = true;
        return;
    }
    memcpy(out + *w, p, n);
    *w += n;
}

/* Emits the complete characters of held + piece, keeps an unfinished last one, and turns
 * bytes that cannot be UTF-8 into U+FFFD so the output is always valid UTF-8. Pieces are
 * rendered with special = false: control tokens give nothing, user-defined ones their text.
 * Returns the bytes written; text that does not fit in cap is dropped at a character
 * boundary (3 * (longest piece + 4) bytes always suffice). */
size_t tok_stream_push(tok_stream *s, int32_t id, char *out, size_t cap) {
    if (!s || !s->t) return 0;
    char small[512], *piece = small;
    int64_t n = tok_piece(s->t, id, false, small, sizeof small);
    if (n < 0) n = 0;
    if ((size_t)n > sizeof small) {
        piece = malloc((size_t)n);
        if (!piece) return 0;
        tok_piece(s->t, id, false, piece, (size_t)n);
    }
    const char *p = piece;
    size_t pn = (size_t)n;
    if (s->first && pn > 0) {
        /* SentencePiece's dummy prefix: encoding put the first text's leading space there */
        if (s->t->add_space_prefix && p[0] == ' ') p++, pn--;
        s->first = false;
    }
    size_t w = 0, total = s->n_held + pn, i = 0;
    bool full = false;
    unsigned char seq[4];
    while (i < total) { /* over held + p, without copying the piece */
        size_t avail = total - i < 4 ? total - i : 4;
        for (size_t j = 0; j < avail; j++) {
            size_t at = i + j;
            seq[j] = (unsigned char)(at < s->n_held ? s->held[at] : p[at - s->n_held]);
        }
        int step = utf8_step(seq, avail);
        if (step == 0) break; /* an unfinished character at the end: hold it */
        if (step > 0) {
            emit(out, cap, &w, &full, seq, (size_t)step);
            i += (size_t)step;
        } else {
            emit(out, cap, &w, &full, "\xef\xbf\xbd", 3);
            i += (size_t)(-step);
        }
    }
    char keep[sizeof s->held];
    size_t nk = 0; /* at most 3 bytes: an unfinished character */
    for (size_t at = i; at < total && nk < sizeof keep; at++)
        keep[nk++] = at < s->n_held ? s->held[at] : p[at - s->n_held];
    memcpy(s->held, keep, nk);
    s->n_held = nk;
    if (piece != small) free(piece);
    return w;
}

size_t tok_stream_flush(tok_stream *s, char *out, size_t cap) {
    if (!s || s->n_held == 0) return 0;
    s->n_held = 0; /* an unfinished character is one maximal bad sequence: one U+FFFD */
    size_t w = 0;
    bool full = false;
    emit(out, cap, &w, &full, "\xef\xbf\xbd", 3);
    return w;
}
