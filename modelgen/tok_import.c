/* Hugging Face tokenizer.json -> tokenizer.ggml.* keys, as llama.cpp's converter fills them.
 * Sources studied (not copied): convert_hf_to_gguf.py (get_vocab_base, _set_vocab_gpt2,
 * does_token_look_special), gguf-py vocab.py (SpecialVocab), constants.py, gguf_writer.py,
 * and llama-vocab.cpp (what the loader requires and which pre names it knows). */
#include "modelgen/tok_import.h"

#include "base/error.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* Integers past int64 (tokenizer_config's model_max_length is 1e30 in Llama 3) make
 * jansson give up; then the file is read again with every number as a double, which
 * still holds every id exactly (see json_int). */
static json_t *load_json(const char *path, kiln_err *err) {
    json_error_t je;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!j && json_error_code(&je) == json_error_numeric_overflow)
        j = json_load_file(path, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
    if (!j) {
        if (je.line < 0) kiln_fail(err, KILN_ERR_INVALID, "%s", je.text); /* "unable to open PATH: reason" */
        else
            kiln_fail(err, KILN_ERR_INVALID, "%s: invalid JSON at line %d, column %d: %s", path, je.line, je.column,
                      je.text);
    }
    return j;
}

/* An integer, or a double holding one (files read with JSON_DECODE_INT_AS_REAL). */
static bool json_int(const json_t *j, int64_t *out) {
    if (json_is_integer(j)) {
        *out = json_integer_value(j);
        return true;
    }
    if (json_is_real(j)) {
        double d = json_real_value(j);
        if (d >= -9.0e15 && d <= 9.0e15 && d == (double)(int64_t)d) {
            *out = (int64_t)d;
            return true;
        }
    }
    return false;
}

/* Python's truthiness, which SpecialVocab's checks rely on. */
static bool truthy(const json_t *j) {
    if (!j) return false;
    switch (json_typeof(j)) {
    case JSON_OBJECT: return json_object_size(j) > 0;
    case JSON_ARRAY: return json_array_size(j) > 0;
    case JSON_STRING: return json_string_length(j) > 0;
    case JSON_INTEGER: return json_integer_value(j) != 0;
    case JSON_REAL: return json_real_value(j) != 0.0;
    case JSON_TRUE: return true;
    default: return false;
    }
}

/* Python's `json_value == s` for a str s: dicts (AddedToken objects) never compare equal. */
static bool eq_str(const json_t *j, const char *s) {
    return s && json_is_string(j) && strcmp(json_string_value(j), s) == 0;
}

/* x.get(key, {}).get('id') for TemplateProcessing entries; NULL unless a non-empty string. */
static const char *tp_id(const json_t *entry, const char *key) {
    const json_t *o = json_object_get(entry, key);
    const char *s = json_string_value(json_object_get(o, "id"));
    return s && *s ? s : NULL;
}

/* Whole file; 1 if absent, 0 read, -1 error. */
static int read_whole(const char *path, char **out, kiln_err *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return 1;
        return kiln_fail(err, KILN_ERR_UNAVAILABLE, "cannot open %s: %s", path, strerror(errno));
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (len + 1 < cap) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    bool bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return kiln_fail(err, KILN_ERR_UNAVAILABLE, "cannot read %s", path);
    }
    buf[len] = 0;
    *out = buf;
    return 0;
}

/* ---- the vocabulary (get_vocab_base) ------------------------------------------------- */

typedef struct added_tok {
    int64_t id;
    gguf_str content; /* into the JSON document */
    bool special;
} added_tok;

typedef struct importer {
    const char *path; /* tokenizer.json, for messages */
    json_t *root;
    added_tok *added;
    gguf_str *added_keys; /* contents of added, for the index */
    size_t n_added;
    kiln_err *err;
} importer;

static bool has_prefix(const char *p, size_t n, const char *pre) {
    size_t k = strlen(pre);
    return n >= k && memcmp(p, pre, k) == 0;
}

static bool has_suffix(const char *p, size_t n, const char *suf) {
    size_t k = strlen(suf);
    return n >= k && memcmp(p + n - k, suf, k) == 0;
}

static bool bytes_eq(const char *p, size_t n, const char *s) {
    return strlen(s) == n && memcmp(p, s, n) == 0;
}

/* The converter's does_token_look_special: some models leave control tokens unmarked. */
static bool looks_special(const char *p, size_t n) {
    if (bytes_eq(p, n, "<pad>") || bytes_eq(p, n, "<mask>") || bytes_eq(p, n, "<2mass>") ||
        bytes_eq(p, n, "[@BOS@]"))
        return true;
    if (has_prefix(p, n, "<|") && has_suffix(p, n, "|>")) return true;
    if (has_prefix(p, n, "<\xEF\xBD\x9C") && has_suffix(p, n, "\xEF\xBD\x9C>")) return true; /* <｜ ｜> */
    return has_prefix(p, n, "<unused") && has_suffix(p, n, ">");
}

/* User-defined tokens are stored pre-normalized: SentencePiece's ▁ becomes a space. */
static char *dup_user_defined(const char *p, size_t n, size_t *out_len) {
    char *s = malloc(n + 1);
    if (!s) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(p + i, "\xE2\x96\x81", 3) == 0) {
            s[o++] = ' ';
            i += 3;
        } else {
            s[o++] = p[i++];
        }
    }
    s[o] = 0;
    *out_len = o;
    return s;
}

static int id_of(importer *im, const json_t *j, const char *what, int64_t *out) {
    int64_t id;
    if (!json_int(j, &id)) return kiln_fail(im->err, KILN_ERR_INVALID, "%s: %s has no integer id", im->path, what);
    if (id < 0 || id >= (int64_t)TOK_MAX_VOCAB)
        return kiln_fail(im->err, KILN_ERR_INVALID, "%s: %s has id %lld, outside 0..%u", im->path, what, (long long)id,
                         TOK_MAX_VOCAB - 1);
    *out = id;
    return 0;
}

static int read_added(importer *im) {
    const json_t *arr = json_object_get(im->root, "added_tokens");
    if (!arr || json_is_null(arr)) return 0;
    if (!json_is_array(arr))
        return kiln_fail(im->err, KILN_ERR_INVALID, "%s: \"added_tokens\" is not a list", im->path);
    size_t n = json_array_size(arr);
    im->added = calloc(n ? n : 1, sizeof *im->added);
    im->added_keys = calloc(n ? n : 1, sizeof *im->added_keys);
    if (!im->added || !im->added_keys) return kiln_fail(im->err, KILN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *a = json_array_get(arr, i);
        const json_t *c = json_object_get(a, "content");
        char what[48];
        snprintf(what, sizeof what, "added token %zu", i);
        if (!json_is_string(c))
            return kiln_fail(im->err, KILN_ERR_INVALID, "%s: %s has no string content", im->path, what);
        added_tok *t = &im->added[i];
        if (id_of(im, json_object_get(a, "id"), what, &t->id)) return -1;
        t->content = (gguf_str){json_string_value(c), json_string_length(c)};
        t->special = json_is_true(json_object_get(a, "special"));
        im->added_keys[i] = t->content;
    }
    im->n_added = n;
    return 0;
}

static int read_vocab(importer *im, tok_vocab *v) {
    const char *path = im->path;
    kiln_err *err = im->err;
    const json_t *model = json_object_get(im->root, "model");
    if (!json_is_object(model)) return kiln_fail(err, KILN_ERR_INVALID, "%s: no \"model\" object", path);
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type) return kiln_fail(err, KILN_ERR_INVALID, "%s: model has no \"type\"", path);
    if (strcmp(type, "BPE") != 0)
        return kiln_fail(err, KILN_ERR_UNSUPPORTED,
                         "%s: model type \"%s\" is not supported: only byte-level BPE can be imported "
                         "(WordPiece and Unigram are not yet)",
                         path, type);
    /* byte_fallback marks a SentencePiece-style BPE: llama.cpp's "llama" model, not "gpt2". */
    if (json_is_true(json_object_get(model, "byte_fallback")))
        return kiln_fail(err, KILN_ERR_INVALID,
                         "%s: BPE with byte_fallback is SentencePiece-style (llama.cpp model \"llama\"), "
                         "not byte-level; not supported yet",
                         path);
    const json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return kiln_fail(err, KILN_ERR_INVALID, "%s: model has no \"vocab\" object", path);
    if (read_added(im)) return -1;

    int64_t max_id = -1;
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)vocab, key, val) {
        int64_t id = -1;
        char what[80];
        snprintf(what, sizeof what, "vocab entry \"%.40s\"", key);
        if (id_of(im, val, what, &id)) return -1;
        if (id > max_id) max_id = id;
    }
    for (size_t i = 0; i < im->n_added; i++)
        if (im->added[i].id > max_id) max_id = im->added[i].id;
    if (max_id < 0) return kiln_fail(err, KILN_ERR_INVALID, "%s: the vocabulary is empty", path);

    uint64_t n = (uint64_t)max_id + 1;
    v->tokens = calloc(n, sizeof *v->tokens);
    v->types = calloc(n, sizeof *v->types);
    if (!v->tokens || !v->types) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    v->n_tokens = n;

    tok_index added_ix = {0};
    if (tok_index_init(&added_ix, im->n_added)) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    int rc = -1;
    for (size_t i = 0; i < im->n_added; i++) {
        if (tok_index_put(&added_ix, im->added_keys, (uint32_t)i) >= 0) {
            kiln_fail(err, KILN_ERR_INVALID, "%s: added token \"%.60s\" is listed twice", path,
                      im->added[i].content.ptr);
            goto out;
        }
    }

    /* Model vocab first; a string that is also an added token goes where added_tokens
     * puts it (transformers' get_vocab lets added tokens win). */
    void *it;
    for (it = json_object_iter((json_t *)vocab); it; it = json_object_iter_next((json_t *)vocab, it)) {
        const char *k = json_object_iter_key(it);
        size_t klen = json_object_iter_key_len(it);
        int64_t id = 0;
        json_int(json_object_iter_value(it), &id); /* checked above */
        if (tok_index_get(&added_ix, im->added_keys, k, klen) >= 0) continue;
        if (v->tokens[id].ptr) {
            kiln_fail(err, KILN_ERR_INVALID, "%s: id %lld is given to both \"%.40s\" and \"%.40s\"", path,
                      (long long)id, v->tokens[id].ptr, k);
            goto out;
        }
        char *s = tok_dup_bytes(k, klen);
        if (!s) {
            kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
            goto out;
        }
        v->tokens[id] = (gguf_str){s, klen};
        v->types[id] = TOK_TYPE_NORMAL;
    }
    for (size_t i = 0; i < im->n_added; i++) {
        const added_tok *a = &im->added[i];
        if (v->tokens[a->id].ptr) {
            kiln_fail(err, KILN_ERR_INVALID, "%s: id %lld is given to both \"%.40s\" and added token \"%.40s\"", path,
                      (long long)a->id, v->tokens[a->id].ptr, a->content.ptr);
            goto out;
        }
        char *s;
        size_t len = a->content.len;
        if (a->special || looks_special(a->content.ptr, a->content.len)) {
            s = tok_dup_bytes(a->content.ptr, len);
            v->types[a->id] = TOK_TYPE_CONTROL;
        } else {
            s = dup_user_defined(a->content.ptr, a->content.len, &len);
            v->types[a->id] = TOK_TYPE_USER_DEFINED;
        }
        if (!s) {
            kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
            goto out;
        }
        v->tokens[a->id] = (gguf_str){s, len};
    }
    /* Gaps in the ids get llama.cpp's placeholder. */
    for (uint64_t i = 0; i < n; i++) {
        if (v->tokens[i].ptr) continue;
        char buf[32];
        int len = snprintf(buf, sizeof buf, "[PAD%llu]", (unsigned long long)i);
        char *s = tok_dup_bytes(buf, (size_t)len);
        if (!s) {
            kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
            goto out;
        }
        v->tokens[i] = (gguf_str){s, (size_t)len};
        v->types[i] = TOK_TYPE_UNUSED;
    }
    rc = 0;
out:
    tok_index_free(&added_ix);
    return rc;
}

/* "a b" strings as they are (Llama 3); [a, b] pairs (transformers >= 4.45, Qwen3) joined
 * with a space after spelling spaces inside a part as U+0120, as SpecialVocab does. */
static int read_merges(importer *im, tok_vocab *v) {
    const json_t *merges = json_object_get(json_object_get(im->root, "model"), "merges");
    if (!merges || json_is_null(merges)) return 0;
    if (!json_is_array(merges)) return kiln_fail(im->err, KILN_ERR_INVALID, "%s: model.merges is not a list", im->path);
    size_t n = json_array_size(merges);
    if (!n) return 0;
    bool pairs = !json_is_string(json_array_get(merges, 0));
    v->merges = calloc(n, sizeof *v->merges);
    if (!v->merges) return kiln_fail(im->err, KILN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(merges, i);
        char *s = NULL;
        if (!pairs) {
            if (!json_is_string(m) || strlen(json_string_value(m)) != json_string_length(m))
                return kiln_fail(im->err, KILN_ERR_INVALID, "%s: merge %zu is not a string like the first one",
                                 im->path, i);
            s = tok_dup_bytes(json_string_value(m), json_string_length(m));
        } else {
            const json_t *a = json_array_get(m, 0), *b = json_array_get(m, 1);
            if (!json_is_array(m) || json_array_size(m) != 2 || !json_is_string(a) || !json_is_string(b))
                return kiln_fail(im->err, KILN_ERR_INVALID,
                                 "%s: unknown merges format at merge %zu (expected \"a b\" strings or [a, b] pairs)",
                                 im->path, i);
            size_t la = json_string_length(a), lb = json_string_length(b);
            const char *parts[2] = {json_string_value(a), json_string_value(b)};
            size_t lens[2] = {la, lb};
            s = malloc(2 * (la + lb) + 2); /* a space grows to two bytes */
            if (s) {
                size_t o = 0;
                for (int p = 0; p < 2; p++) {
                    if (p) s[o++] = ' ';
                    for (size_t k = 0; k < lens[p]; k++) {
                        char c = parts[p][k];
                        if (c == ' ') {
                            s[o++] = (char)0xC4;
                            s[o++] = (char)0xA0;
                        } else if (c == 0) {
                            free(s);
                            return kiln_fail(im->err, KILN_ERR_INVALID, "%s: merge %zu holds a NUL byte", im->path, i);
                        } else {
                            s[o++] = c;
                        }
                    }
                }
                s[o] = 0;
            }
        }
        if (!s) return kiln_fail(im->err, KILN_ERR_NOMEM, "out of memory");
        v->merges[i] = s;
        v->n_merges = i + 1;
    }
    return 0;
}

/* ---- the pre-tokenizer family ---------------------------------------------------------- */

/* One step of a pre_tokenizer Sequence, reduced to what decides the splitting. */
typedef struct pt_step {
    char kind;      /* 'S' Split (regex exact), 's' Split (regex prefix), 'B' ByteLevel, 'D' Digits,
                       'P' Punctuation; 0 ends a list */
    int flag;       /* B: use_regex; D: individual_digits; P: behavior is Contiguous */
    const char *re; /* S/s: regex with CR and LF spelled \r and \n */
} pt_step;

typedef struct pt_family {
    const char *name;
    pt_step steps[8];
} pt_family;

#define RE_LLAMA3                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                   \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O                                                                                   \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"          \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"          \
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"      \
    "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_TEKKEN                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"         \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}|"  \
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_DS3                                                                                     \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|" \
    " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_CJK                                                                                                         \
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE0\xA0\x80-\xE4\xB8\x80\xEA\xB0\x80-\xED\x9F\xBF]+" /* [一-龥ࠀ-一가-퟿]+ */
#define RE_DS3_CJK                                                                                                     \
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+" /* [一-龥぀-ゟ゠-ヿ]+ */
/* deepseek-llm's letter class is ~500 bytes of ranges; its head identifies it. */
#define RE_DSLLM_LETTERS_HEAD "\\s?[A-Za-z\xC2\xB5\xC3\x80-\xC3\x96\xC3\x98-\xC3\xB6\xC3\xB8-\xC6\xBA" /* µÀ-ÖØ-öø-ƺ */
#define RE_DSLLM_PUNCT                                                                             \
    "\\s?[!-/:-~\xEF\xBC\x81-\xEF\xBC\x8F\xEF\xBC\x9A-\xEF\xBD\x9E\xE2\x80\x98-\xE2\x80\x9F\xE3\x80\x80-" \
    "\xE3\x80\x82]+" /* \s?[!-/:-~！-／：-～‘-‟　-。]+ */

/* Families whose tokenizer.json pre_tokenizer is known exactly, with llama.cpp's name.
 * Several llama.cpp names share one rule (gpt-2/mpt/olmo/phi-2; starcoder/refact/smollm/
 * command-r; qwen2/stablelm2/grok-2); the first is used, since they split identically. */
static const pt_family pt_families[] = {
    {"llama-bpe", {{'S', 0, RE_LLAMA3}, {'B', 0, NULL}}},
    {"qwen2", {{'S', 0, RE_QWEN2}, {'B', 0, NULL}}},
    {"gpt-2", {{'B', 1, NULL}}},
    {"starcoder", {{'D', 1, NULL}, {'B', 1, NULL}}},
    {"falcon", {{'P', 1, NULL}, {'B', 1, NULL}, {'D', 0, NULL}, {'S', 0, "[0-9][0-9][0-9]"}}},
    {"deepseek-coder",
     {{'S', 0, "[\\r\\n]"}, {'S', 0, "\\s?\\p{L}+"}, {'S', 0, "\\s?\\p{P}+"}, {'S', 0, RE_CJK}, {'D', 1, NULL},
      {'B', 0, NULL}}},
    {"deepseek-llm",
     {{'S', 0, "[\\r\\n]"}, {'s', 0, RE_DSLLM_LETTERS_HEAD}, {'S', 0, RE_DSLLM_PUNCT}, {'S', 0, "\\s+$"},
      {'S', 0, RE_CJK}, {'D', 1, NULL}, {'B', 0, NULL}}},
    {"deepseek-v3", {{'S', 0, "\\p{N}{1,3}"}, {'S', 0, RE_DS3_CJK}, {'S', 0, RE_DS3}, {'B', 0, NULL}}},
    {"gpt-4o", {{'S', 0, RE_GPT4O}, {'B', 0, NULL}}},
    {"tekken", {{'S', 0, RE_TEKKEN}, {'B', 0, NULL}}},
};

#define PT_MAX_STEPS 16

typedef struct pt_seen {
    char kind;
    int flag;
    char *re; /* owned, canonical */
} pt_seen;

/* CR/LF may be literal or escaped in tokenizer.json; compare one spelling. */
static char *canon_regex(const char *s) {
    size_t n = strlen(s), extra = 0;
    for (size_t i = 0; i < n; i++) extra += s[i] == '\r' || s[i] == '\n';
    char *o = malloc(n + extra + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r' || s[i] == '\n') {
            o[k++] = '\\';
            o[k++] = s[i] == '\r' ? 'r' : 'n';
        } else {
            o[k++] = s[i];
        }
    }
    o[k] = 0;
    return o;
}

/* Reduces one step; 0 ok, 1 a step kind or option we do not match on. */
static int pt_reduce(const json_t *st, pt_seen *out, kiln_err *why) {
    const char *type = json_string_value(json_object_get(st, "type"));
    if (!type) {
        kiln_fail(why, KILN_ERR_INVALID, "a step without a type");
        return 1;
    }
    if (strcmp(type, "Split") == 0) {
        const char *re = json_string_value(json_object_get(json_object_get(st, "pattern"), "Regex"));
        const char *beh = json_string_value(json_object_get(st, "behavior"));
        if (!re || (beh && strcmp(beh, "Isolated") != 0) || json_is_true(json_object_get(st, "invert"))) {
            kiln_fail(why, KILN_ERR_INVALID, "a Split that is not an isolated regex");
            return 1;
        }
        out->kind = 'S';
        out->re = canon_regex(re);
        return out->re ? 0 : -1;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        if (json_is_true(json_object_get(st, "add_prefix_space"))) {
            kiln_fail(why, KILN_ERR_INVALID, "ByteLevel with add_prefix_space");
            return 1;
        }
        const json_t *ur = json_object_get(st, "use_regex");
        out->kind = 'B';
        out->flag = ur ? json_is_true(ur) : 1; /* tokenizers' default is true */
        return 0;
    }
    if (strcmp(type, "Digits") == 0) {
        out->kind = 'D';
        out->flag = json_is_true(json_object_get(st, "individual_digits"));
        return 0;
    }
    if (strcmp(type, "Punctuation") == 0) {
        const char *beh = json_string_value(json_object_get(st, "behavior"));
        out->kind = 'P';
        out->flag = beh && strcmp(beh, "Contiguous") == 0;
        return 0;
    }
    kiln_fail(why, KILN_ERR_INVALID, "a %s step", type);
    return 1;
}

static bool pt_matches(const pt_family *f, const pt_seen *seen, size_t n) {
    size_t k = 0;
    for (; k < 8 && f->steps[k].kind; k++) {
        const pt_step *s = &f->steps[k];
        if (k >= n) return false;
        char want = s->kind == 's' ? 'S' : s->kind;
        if (seen[k].kind != want) return false;
        if (s->kind == 'S' && strcmp(seen[k].re, s->re) != 0) return false;
        if (s->kind == 's' && strncmp(seen[k].re, s->re, strlen(s->re)) != 0) return false;
        if ((s->kind == 'B' || s->kind == 'D' || s->kind == 'P') && seen[k].flag != s->flag) return false;
    }
    return k == n;
}

static void pt_describe(const pt_seen *seen, size_t n, char *buf, size_t len) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "%s", n == 1 ? "" : "Sequence[");
    for (size_t i = 0; i < n && o < len; i++) {
        const char *sep = i ? ", " : "";
        switch (seen[i].kind) {
        case 'S': o += (size_t)snprintf(buf + o, len - o, "%sSplit \"%.48s%s\"", sep, seen[i].re,
                                        strlen(seen[i].re) > 48 ? "..." : ""); break;
        case 'B': o += (size_t)snprintf(buf + o, len - o, "%sByteLevel(use_regex=%s)", sep,
                                        seen[i].flag ? "true" : "false"); break;
        case 'D': o += (size_t)snprintf(buf + o, len - o, "%sDigits(individual=%s)", sep,
                                        seen[i].flag ? "true" : "false"); break;
        default: o += (size_t)snprintf(buf + o, len - o, "%sPunctuation", sep); break;
        }
    }
    if (n != 1 && o < len) snprintf(buf + o, len - o, "]");
}

static int infer_pre(importer *im, char **out) {
    const json_t *pt = json_object_get(im->root, "pre_tokenizer");
    const char *hint = "pass --pre NAME with llama.cpp's tokenizer.ggml.pre name for it "
                       "(e.g. llama-bpe, qwen2, gpt-2, starcoder, deepseek-llm)";
    if (!json_is_object(pt))
        return kiln_fail(im->err, KILN_ERR_UNSUPPORTED, "%s: no pre_tokenizer to recognize; %s", im->path, hint);
    const json_t *list = NULL;
    size_t n = 1;
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (type && strcmp(type, "Sequence") == 0) {
        list = json_object_get(pt, "pretokenizers");
        n = json_array_size(list);
    }
    pt_seen seen[PT_MAX_STEPS] = {{0}};
    kiln_err why = {0};
    int rc = 0;
    size_t got = 0;
    if (n == 0 || n > PT_MAX_STEPS) {
        kiln_fail(&why, KILN_ERR_INVALID, "a Sequence of %zu steps", n);
        rc = 1;
    }
    for (; rc == 0 && got < n; got++) {
        rc = pt_reduce(list ? json_array_get(list, got) : pt, &seen[got], &why);
        if (rc < 0) rc = kiln_fail(im->err, KILN_ERR_NOMEM, "out of memory");
    }
    if (rc == 0) {
        rc = 1;
        for (size_t f = 0; f < sizeof pt_families / sizeof pt_families[0]; f++) {
            if (pt_matches(&pt_families[f], seen, n)) {
                *out = strdup(pt_families[f].name);
                rc = *out ? 0 : kiln_fail(im->err, KILN_ERR_NOMEM, "out of memory");
                break;
            }
        }
        if (rc == 1) {
            char desc[200];
            pt_describe(seen, n, desc, sizeof desc);
            kiln_fail(im->err, KILN_ERR_UNSUPPORTED, "%s: pre-tokenizer not recognized: %s; %s", im->path, desc, hint);
            rc = -1;
        }
    } else if (rc == 1) {
        kiln_fail(im->err, KILN_ERR_UNSUPPORTED, "%s: pre-tokenizer not recognized: %s; %s", im->path, why.msg, hint);
        rc = -1;
    }
    for (size_t i = 0; i < PT_MAX_STEPS; i++) free(seen[i].re);
    return rc;
}

/* ---- special tokens, add flags, chat template (SpecialVocab) ------------------------------- */

enum { SP_BOS, SP_EOS, SP_UNK, SP_SEP, SP_PAD, SP_CLS, SP_MASK, SP_EOT, SP_N };
static const char *const sp_names[SP_N] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask", "eot"};

typedef struct special_state {
    json_t *cfg;      /* tokenizer_config (owned; edited as SpecialVocab edits its dict) */
    json_t *keep;     /* owns strings the special_* pointers may point at */
    int add[SP_N];    /* -1 unset */
    int64_t ids[SP_N];
    bool with_eot;    /* 'eot' joined the special token types */
} special_state;

/* A value that outlives later edits of cfg: SpecialVocab holds Python references. */
static json_t *held(special_state *s, json_t *j) {
    if (!j) return NULL;
    json_array_append(s->keep, j);
    return j;
}

static json_t *cfg_get(special_state *s, const char *key) {
    return s->cfg ? held(s, json_object_get(s->cfg, key)) : NULL;
}

/* tokenizer_config[key] = val (None when val is NULL). */
static int cfg_set(special_state *s, const char *key, json_t *val) {
    return json_object_set(s->cfg, key, val ? val : json_null());
}

static json_t *str_held(special_state *s, const char *str) {
    json_t *j = json_string(str);
    if (!j) return NULL;
    json_array_append_new(s->keep, j);
    return j;
}

/* The post_processor pass: RobertaProcessing and (crudely, as upstream) TemplateProcessing
 * decide add_bos/add_eos/add_sep and may move eos to the template's last token. */
static int post_processor_pass(importer *im, special_state *s) {
    bool have_cfg = truthy(s->cfg);
    json_t *bos = cfg_get(s, "bos_token"), *cls = cfg_get(s, "cls_token");
    json_t *eos = cfg_get(s, "eos_token"), *sep = cfg_get(s, "sep_token");
    if (!truthy(bos) && truthy(cls) && have_cfg) {
        cfg_set(s, "bos_token", cls);
        bos = cls;
    }
    if (!truthy(eos) && truthy(sep) && have_cfg) {
        cfg_set(s, "eos_token", sep);
        eos = sep;
    }
    json_t *pp = json_object_get(im->root, "post_processor");
    if (!truthy(pp) || !json_is_object(pp)) return 0;
    json_t *procs = json_object_get(pp, "processors");
    size_t n = procs ? json_array_size(procs) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *p = procs ? json_array_get(procs, i) : pp;
        const char *type = json_string_value(json_object_get(p, "type"));
        if (!type) continue;
        if (strcmp(type, "RobertaProcessing") == 0) {
            s->add[SP_BOS] = s->add[SP_EOS] = s->add[SP_SEP] = 1;
            if (!truthy(cls) && have_cfg) {
                json_t *c = json_object_get(p, "cls");
                cls = held(s, c ? json_array_get(c, 0) : bos);
                cfg_set(s, "cls_token", cls);
            }
            if (!truthy(sep) && have_cfg) {
                json_t *c = json_object_get(p, "sep");
                sep = held(s, c ? json_array_get(c, 0) : eos);
                cfg_set(s, "sep_token", sep);
            }
            continue;
        }
        if (strcmp(type, "TemplateProcessing") != 0) continue;
        json_t *single = json_object_get(p, "single"), *pair = json_object_get(p, "pair");
        size_t ns = json_array_size(single), np = json_array_size(pair);
        const char *first = NULL, *last = NULL;
        if (ns > 1) {
            first = tp_id(json_array_get(single, 0), "SpecialToken");
            if (first) {
                if (!have_cfg) bos = str_held(s, first);
                s->add[SP_BOS] = eq_str(bos, first) || eq_str(cls, first);
            }
            last = tp_id(json_array_get(single, ns - 1), "SpecialToken");
            if (last) {
                if (!have_cfg) {
                    eos = str_held(s, last);
                } else if (!eq_str(eos, last)) {
                    /* the template ends with another token: the config's eos becomes eot */
                    if (!s->with_eot) {
                        s->with_eot = true;
                        cfg_set(s, "eot_token", eos);
                    }
                    eos = str_held(s, last);
                    cfg_set(s, "eos_token", eos);
                }
                s->add[SP_EOS] = eq_str(eos, last);
            }
        }
        if (np) {
            size_t start =
                first && eq_str(json_object_get(json_object_get(json_array_get(pair, 0), "SpecialToken"), "id"), first);
            size_t stop = np;
            if (last &&
                eq_str(json_object_get(json_object_get(json_array_get(pair, np - 1), "SpecialToken"), "id"), last))
                stop = np - 1;
            if (stop > start) {
                const char *a =
                    json_string_value(json_object_get(json_object_get(json_array_get(pair, start), "Sequence"), "id"));
                const char *b = json_string_value(
                    json_object_get(json_object_get(json_array_get(pair, stop - 1), "Sequence"), "id"));
                /* A [sep] [eos] B: what sits between the sequences says whether sep is added */
                if (a && b && strcmp(a, "A") == 0 && strcmp(b, "B") == 0 && stop - start > 2) {
                    size_t m0 = start + 1, nm = stop - start - 2;
                    bool add_sep = false;
                    const char *e = tp_id(json_array_get(pair, m0), "SpecialToken");
                    if (e && (eq_str(sep, e) || eq_str(eos, e)) && !last) add_sep = true;
                    if (nm == 2) {
                        e = tp_id(json_array_get(pair, m0 + 1), "SpecialToken");
                        if (e && (eq_str(sep, e) || eq_str(eos, e))) add_sep = true;
                    }
                    s->add[SP_SEP] = add_sep;
                    if (add_sep && !truthy(sep) && have_cfg) cfg_set(s, "sep_token", eos);
                }
            }
        }
    }
    return 0;
}

static int set_template(importer *im, const json_t *ct, tok_vocab *v) {
    const char *t = NULL;
    if (json_is_string(ct)) {
        t = json_string_value(ct);
    } else if (json_is_array(ct)) {
        /* named templates: tokenizer.chat_template is the one named "default" */
        size_t i;
        const json_t *e;
        json_array_foreach(ct, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            const char *tmpl = json_string_value(json_object_get(e, "template"));
            if (name && tmpl && strcmp(name, "default") == 0) t = tmpl;
        }
    }
    if (!t) return 0;
    v->chat_template = strdup(t);
    return v->chat_template ? 0 : kiln_fail(im->err, KILN_ERR_NOMEM, "out of memory");
}

/* chat_template.jinja, else chat_template.json, beside tokenizer_config.json. */
static int template_from_files(importer *im, const char *config_path, tok_vocab *v) {
    const char *slash = strrchr(config_path, '/');
    size_t dlen = slash ? (size_t)(slash - config_path) + 1 : 0;
    char *p = malloc(dlen + 32);
    if (!p) return kiln_fail(im->err, KILN_ERR_NOMEM, "out of memory");
    memcpy(p, config_path, dlen);
    strcpy(p + dlen, "chat_template.jinja");
    char *text;
    int r = read_whole(p, &text, im->err);
    if (r == 0) {
        v->chat_template = text;
    } else if (r == 1) {
        strcpy(p + dlen, "chat_template.json");
        FILE *f = fopen(p, "rb");
        r = 0;
        if (f) {
            fclose(f);
            json_t *j = load_json(p, im->err);
            r = j ? set_template(im, json_object_get(j, "chat_template"), v) : -1;
            json_decref(j);
        }
    }
    free(p);
    return r < 0 ? -1 : 0;
}

static int special_vocab(importer *im, json_t *cfg, const char *config_path, tok_vocab *v) {
    special_state s = {.cfg = cfg, .keep = json_array(), .with_eot = false};
    for (int t = 0; t < SP_N; t++) {
        s.add[t] = -1;
        s.ids[t] = -1;
    }
    if (!s.keep) return kiln_fail(im->err, KILN_ERR_NOMEM, "out of memory");
    int rc = post_processor_pass(im, &s);
    if (rc == 0 && truthy(cfg)) {
        json_t *ct = json_object_get(cfg, "chat_template");
        rc = ct ? set_template(im, ct, v) : template_from_files(im, config_path, v);
        for (int t = 0; rc == 0 && t < SP_N; t++) {
            if (t == SP_EOT && !s.with_eot) continue;
            char key[32];
            snprintf(key, sizeof key, "add_%s_token", sp_names[t]);
            json_t *add = json_object_get(cfg, key);
            if (json_is_boolean(add)) s.add[t] = json_is_true(add);
            snprintf(key, sizeof key, "%s_token", sp_names[t]);
            json_t *entry = json_object_get(cfg, key);
            if (json_is_object(entry)) entry = json_object_get(entry, "content");
            if (!json_is_string(entry)) continue;
            /* only added_tokens are searched, first match wins */
            for (size_t i = 0; i < im->n_added; i++) {
                const gguf_str *c = &im->added[i].content;
                if (c->len == json_string_length(entry) && memcmp(c->ptr, json_string_value(entry), c->len) == 0) {
                    if (s.ids[t] < 0) s.ids[t] = im->added[i].id;
                    break;
                }
            }
        }
    }
    json_decref(s.keep);
    if (rc) return rc;
    v->bos_id = s.ids[SP_BOS];
    v->eos_id = s.ids[SP_EOS];
    v->unk_id = s.ids[SP_UNK];
    v->sep_id = s.ids[SP_SEP];
    v->pad_id = s.ids[SP_PAD];
    v->cls_id = s.ids[SP_CLS];
    v->mask_id = s.ids[SP_MASK];
    v->add_bos = s.add[SP_BOS];
    v->add_eos = s.add[SP_EOS];
    v->add_sep = s.add[SP_SEP];
    if (s.ids[SP_EOT] >= 0) {
        v->eot_id = s.ids[SP_EOT];
        v->write_eot = 1;
    }
    return 0;
}

int tok_import_hf(const char *tokenizer_json, const char *tokenizer_config, const char *pre_override,
                  tok_vocab *out, kiln_err *err) {
    tok_vocab_init(out);
    if (!tokenizer_json) return kiln_fail(err, KILN_ERR_INVALID, "no tokenizer.json given");
    tok_vocab v;
    tok_vocab_init(&v);
    importer im = {.path = tokenizer_json, .err = err};
    json_t *cfg = NULL;
    int rc = -1;
    im.root = load_json(tokenizer_json, err);
    if (!im.root) goto done;
    if (!json_is_object(im.root)) {
        kiln_fail(err, KILN_ERR_INVALID, "%s: not a JSON object", tokenizer_json);
        goto done;
    }
    if (tokenizer_config) {
        cfg = load_json(tokenizer_config, err);
        if (!cfg) goto done;
        if (!json_is_object(cfg)) {
            kiln_fail(err, KILN_ERR_INVALID, "%s: not a JSON object", tokenizer_config);
            goto done;
        }
    }
    if (read_vocab(&im, &v) || read_merges(&im, &v)) goto done;
    if (pre_override && *pre_override) {
        v.pre = strdup(pre_override);
        if (!v.pre) {
            kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
            goto done;
        }
    } else if (infer_pre(&im, &v.pre)) {
        goto done;
    }
    v.model = strdup("gpt2");
    if (!v.model) {
        kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (special_vocab(&im, cfg, tokenizer_config, &v)) goto done;
    /* llama.cpp detects eot by name at load; kiln keeps it without writing it */
    if (v.eot_id < 0) v.eot_id = tok_vocab_find(&v, "<|eot_id|>");
    if (v.eot_id < 0) v.eot_id = tok_vocab_find(&v, "<|im_end|>");
    *out = v;
    tok_vocab_init(&v);
    rc = 0;
done:
    json_decref(im.root);
    json_decref(cfg);
    free(im.added);
    free(im.added_keys);
    tok_vocab_free(&v);
    return rc;
}

int tok_import_hf_model_config(const char *config_json, tok_vocab *v, kiln_err *err) {
    json_t *cfg = load_json(config_json, err);
    if (!cfg) return -1;
    int rc = 0;
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return kiln_fail(err, KILN_ERR_INVALID, "%s: not a JSON object", config_json);
    }
    int64_t *ids[] = {&v->bos_id, &v->eos_id, &v->unk_id, &v->sep_id, &v->pad_id, &v->cls_id, &v->mask_id};
    json_t *text = json_object_get(cfg, "text_config"); /* multimodal models keep them there */
    for (int t = 0; t < SP_EOT; t++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", sp_names[t]);
        json_t *id = json_object_get(cfg, key);
        if ((!id || json_is_null(id)) && json_is_object(text)) id = json_object_get(text, key);
        int64_t x;
        if (!json_int(id, &x)) continue; /* a list (several eos ids) is skipped too */
        if (x < 0) {
            rc = kiln_fail(err, KILN_ERR_INVALID, "%s: invalid value for %s: %lld", config_json, key, (long long)x);
            break;
        }
        if (*ids[t] < 0) *ids[t] = x;
    }
    json_decref(cfg);
    return rc;
}

