/* The tokenizer vocabulary as GGUF holds it: kiln's default byte-level vocab, padding,
 * writing the tokenizer.ggml.* keys as llama.cpp's converter does. */
#include "modelgen/vocab.h"

#include "base/error.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tok_vocab_init(tok_vocab *v) {
    memset(v, 0, sizeof *v);
    v->bos_id = v->eos_id = v->pad_id = v->unk_id = v->eot_id = -1;
    v->sep_id = v->cls_id = v->mask_id = -1;
    v->add_bos = v->add_eos = v->add_sep = -1;
}

void tok_vocab_free(tok_vocab *v) {
    if (!v) return;
    free(v->model);
    free(v->pre);
    if (v->tokens)
        for (uint64_t i = 0; i < v->n_tokens; i++) free((void *)v->tokens[i].ptr);
    free(v->tokens);
    free(v->types);
    if (v->merges)
        for (uint64_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->merges);
    free(v->chat_template);
    tok_vocab_init(v);
}

int64_t tok_vocab_find(const tok_vocab *v, const char *s) {
    size_t n = strlen(s);
    for (uint64_t i = 0; i < v->n_tokens; i++)
        if (v->tokens[i].len == n && memcmp(v->tokens[i].ptr, s, n) == 0) return (int64_t)i;
    return -1;
}

/* ---- kiln's default byte-level vocab ------------------------------------------------- */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes keep their code point, the others
 * take 256, 257, ... in byte order. */
static size_t byte_spelling(unsigned b, char out[4]) {
    unsigned cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = b;
    } else {
        unsigned k = 0;
        for (unsigned x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static int put_token(tok_vocab *v, const char *p, size_t n, int32_t type) {
    char *s = tok_dup_bytes(p, n);
    if (!s) return -1;
    v->tokens[v->n_tokens] = (gguf_str){s, n};
    v->types[v->n_tokens] = type;
    v->n_tokens++;
    return 0;
}

/* Adds token a+b and the merge "a b" (a, b spelled). */
static int put_merged(tok_vocab *v, const char *a, size_t na, const char *b, size_t nb) {
    char tok[8], mer[9];
    memcpy(tok, a, na);
    memcpy(tok + na, b, nb);
    memcpy(mer, a, na);
    mer[na] = ' ';
    memcpy(mer + na + 1, b, nb);
    mer[na + 1 + nb] = 0;
    char *m = tok_dup_bytes(mer, na + 1 + nb);
    if (!m || put_token(v, tok, na + nb, TOK_TYPE_NORMAL)) {
        free(m);
        return -1;
    }
    v->merges[v->n_merges++] = m;
    return 0;
}

#define BYTELEVEL_MIN 258u /* 256 bytes + bos + eos */
#define BYTELEVEL_MERGED (26u + 26u * 26u + 26u)

int tok_vocab_bytelevel(uint64_t vocab_size, tok_vocab *out, kiln_err *err) {
    tok_vocab_init(out);
    if (vocab_size < BYTELEVEL_MIN)
        return kiln_fail(err, KILN_ERR_INVALID,
                         "vocab size %llu is too small: the byte-level vocab needs %u tokens "
                         "(256 bytes, bos, eos)",
                         (unsigned long long)vocab_size, BYTELEVEL_MIN);
    if (vocab_size > TOK_MAX_VOCAB)
        return kiln_fail(err, KILN_ERR_INVALID, "vocab size %llu is larger than %u", (unsigned long long)vocab_size,
                         TOK_MAX_VOCAB);
    tok_vocab v;
    tok_vocab_init(&v);
    uint64_t n_merged = vocab_size - BYTELEVEL_MIN;
    if (n_merged > BYTELEVEL_MERGED) n_merged = BYTELEVEL_MERGED;
    v.model = strdup("gpt2");
    v.pre = strdup("default");
    v.tokens = calloc(BYTELEVEL_MIN + n_merged, sizeof *v.tokens);
    v.types = calloc(BYTELEVEL_MIN + n_merged, sizeof *v.types);
    v.merges = calloc(n_merged ? n_merged : 1, sizeof *v.merges);
    if (!v.model || !v.pre || !v.tokens || !v.types || !v.merges) goto oom;
    char sp[256][4];
    size_t sl[256];
    for (unsigned b = 0; b < 256; b++) {
        sl[b] = byte_spelling(b, sp[b]);
        if (put_token(&v, sp[b], sl[b], TOK_TYPE_NORMAL)) goto oom;
    }
    v.bos_id = (int64_t)v.n_tokens;
    if (put_token(&v, "<|begin_of_text|>", 17, TOK_TYPE_CONTROL)) goto oom;
    v.eos_id = (int64_t)v.n_tokens;
    if (put_token(&v, "<|end_of_text|>", 15, TOK_TYPE_CONTROL)) goto oom;
    /* "Ġ"+lowercase, lowercase pairs, "Ġ"+uppercase: enough to make merges real */
    for (unsigned c = 0; c < 26 && v.n_merges < n_merged; c++)
        if (put_merged(&v, sp[' '], sl[' '], sp['a' + c], 1)) goto oom;
    for (unsigned c = 0; c < 26 * 26 && v.n_merges < n_merged; c++)
        if (put_merged(&v, sp['a' + c / 26], 1, sp['a' + c % 26], 1)) goto oom;
    for (unsigned c = 0; c < 26 && v.n_merges < n_merged; c++)
        if (put_merged(&v, sp[' '], sl[' '], sp['A' + c], 1)) goto oom;
    /* a synthetic model starts every prompt with bos, in kiln and in llama.cpp alike */
    v.add_bos = 1;
    v.add_eos = 0;
    if (tok_vocab_pad(&v, vocab_size, err)) {
        tok_vocab_free(&v);
        return -1;
    }
    *out = v;
    return 0;
oom:
    tok_vocab_free(&v);
    return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
}

int tok_vocab_pad(tok_vocab *v, uint64_t vocab_size, kiln_err *err) {
    if (v->n_tokens > vocab_size)
        return kiln_fail(err, KILN_ERR_INVALID, "the vocab has %llu tokens, more than the %llu asked for",
                         (unsigned long long)v->n_tokens, (unsigned long long)vocab_size);
    if (vocab_size > TOK_MAX_VOCAB)
        return kiln_fail(err, KILN_ERR_INVALID, "vocab size %llu is larger than %u", (unsigned long long)vocab_size,
                         TOK_MAX_VOCAB);
    if (v->n_tokens == vocab_size) return 0;
    gguf_str *t = realloc(v->tokens, vocab_size * sizeof *t);
    if (t) v->tokens = t;
    int32_t *ty = realloc(v->types, vocab_size * sizeof *ty);
    if (ty) v->types = ty;
    if (!t || !ty) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    while (v->n_tokens < vocab_size) {
        char buf[32];
        int len = snprintf(buf, sizeof buf, "[PAD%llu]", (unsigned long long)v->n_tokens);
        if (put_token(v, buf, (size_t)len, TOK_TYPE_UNUSED)) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    }
    return 0;
}

/* ---- writing ------------------------------------------------------------------------ */

int tok_vocab_write(const tok_vocab *v, gguf_writer *w, kiln_err *err) {
    if (!v->model || !v->n_tokens || !v->tokens || !v->types)
        return kiln_fail(err, KILN_ERR_INVALID, "tokenizer: the vocab is empty");
    if (v->n_tokens > TOK_MAX_VOCAB)
        return kiln_fail(err, KILN_ERR_INVALID, "tokenizer: %llu tokens is too many", (unsigned long long)v->n_tokens);
    /* llama.cpp asserts that every token string is distinct */
    tok_index ix;
    if (tok_index_init(&ix, v->n_tokens)) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < v->n_tokens; i++) {
        int64_t j = tok_index_put(&ix, v->tokens, (uint32_t)i);
        if (j >= 0) {
            tok_index_free(&ix);
            return kiln_fail(err, KILN_ERR_INVALID,
                             "tokenizer: tokens %lld and %llu are both \"%.*s\"; llama.cpp needs distinct tokens",
                             (long long)j, (unsigned long long)i, (int)(v->tokens[i].len > 60 ? 60 : v->tokens[i].len),
                             v->tokens[i].ptr);
        }
    }
    tok_index_free(&ix);
    struct { const char *key; int64_t id; bool write; } ids[] = {
        {"tokenizer.ggml.bos_token_id", v->bos_id, true},
        {"tokenizer.ggml.eos_token_id", v->eos_id, true},
        {"tokenizer.ggml.unknown_token_id", v->unk_id, true},
        {"tokenizer.ggml.seperator_token_id", v->sep_id, true}, /* sic: llama.cpp's spelling */
        {"tokenizer.ggml.padding_token_id", v->pad_id, true},
        {"tokenizer.ggml.mask_token_id", v->mask_id, true},
        {"tokenizer.ggml.eot_token_id", v->eot_id, v->write_eot != 0},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i].write && ids[i].id >= (int64_t)v->n_tokens)
            return kiln_fail(err, KILN_ERR_INVALID, "tokenizer: %s %lld is outside the %llu tokens", ids[i].key,
                             (long long)ids[i].id, (unsigned long long)v->n_tokens);

    if (gguf_writer_add_str(w, "tokenizer.ggml.model", v->model, err)) return -1;
    if (v->pre && gguf_writer_add_str(w, "tokenizer.ggml.pre", v->pre, err)) return -1;
    if (gguf_writer_add_arr_gstr(w, "tokenizer.ggml.tokens", v->tokens, v->n_tokens, err)) return -1;
    if (gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VT_I32, v->types, v->n_tokens, err)) return -1;
    /* llama.cpp refuses a gpt2 vocab without the merges key, even when there are none */
    if ((v->n_merges || strcmp(v->model, "gpt2") == 0) &&
        gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, v->n_merges, err))
        return -1;
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i].write && ids[i].id >= 0 && gguf_writer_add_u32(w, ids[i].key, (uint32_t)ids[i].id, err))
            return -1;
    if (v->add_bos >= 0 && gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos != 0, err)) return -1;
    if (v->add_eos >= 0 && gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos != 0, err)) return -1;
    if (v->add_sep >= 0 && gguf_writer_add_bool(w, "tokenizer.ggml.add_sep_token", v->add_sep != 0, err)) return -1;
    if (v->chat_template && gguf_writer_add_str(w, "tokenizer.chat_template", v->chat_template, err)) return -1;
    return 0;
}

/* tokenizer.ggml.pre names llama-vocab.cpp accepts (others load as "default", warned). */
static const char *const known_pre[] = {
    "default", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
    "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon", "mpt", "starcoder", "gpt-2", "phi-2",
    "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum", "jina-v1-en",
    "jina-v2-code", "roberta-bpe", "refact", "command-r", "qwen2", "deepseek-r1-qwen", "kormo",
    "stablelm2", "olmo", "dbrx", "smaug-bpe", "poro-chat", "glm4", "chatglm-bpe", "viking", "jais",
    "tekken", "smollm", "codeshell", "bloom", "gpt3-finnish", "exaone", "exaone4", "chameleon",
    "minerva-7b", "megrez", "gpt-4o", "llama4", "superbpe", "trillion", "granite-docling", "bailingmoe",
    "bailingmoe2", "llada-moe", "seed-coder", "hunyuan", "hunyuan-dense", "kimi-k2", "grok-2", "afmoe",
    "minimax-m2",
};

int tok_pre_known(const char *name) {
    for (size_t i = 0; name && i < sizeof known_pre / sizeof known_pre[0]; i++)
        if (strcmp(name, known_pre[i]) == 0) return 1;
    return 0;
}

