/* The tokenizer against llama.cpp's test vectors (tokenizer/ggml-vocab-*.gguf + .inp/.out),
 * the llama-bpe/qwen2 vectors and the npm goldens through GGUFs that `kiln synth` makes
 * from the Llama 3 and Qwen3 tokenizer.json files, detokenization (pieces and the stream),
 * speed on 100 kB, and bad input. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "tests/util/testutil.h"
#include "text/tok.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include <utf8proc.h>

#ifndef KILN_BIN
#define KILN_BIN "build/kiln"
#endif

/* ---- helpers --------------------------------------------------------------------------- */



static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    cr_assert(n >= 0);
    rewind(f);
    char *p = malloc((size_t)n + 1);
    cr_assert_not_null(p);
    cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    p[n] = 0;
    *len = (size_t)n;
    return p;
}

typedef struct {
    gguf_file *g;
    tokenizer *t;
    char dir[64]; /* mkdtemp dir of a synthesized GGUF, or "" */
    char path[128];
} vocab;

static void vocab_open(vocab *v, const char *path) {
    kiln_err ge;
    v->g = gguf_open(path, &ge);
    cr_assert_not_null(v->g, "%s: %s", path, ge.msg);
    kiln_err err = {0};
    v->t = tok_load(v->g, &err);
    cr_assert_not_null(v->t, "%s: %s", path, err.msg);
}

/* A small model whose tokenizer comes from tokenizers/<name>/tokenizer.json, written by
 * `kiln synth` into a fresh temporary folder. */
static void vocab_synth(vocab *v, const char *name) {
    char rel[128];
    snprintf(rel, sizeof rel, "tokenizers/%s/tokenizer.json", name);
    char json[1024], cfg[1024];
    snprintf(json, sizeof json, "%s", tu_data_file(rel));
    snprintf(rel, sizeof rel, "tokenizers/%s/tokenizer_config.json", name);
    snprintf(cfg, sizeof cfg, "%s", tu_data_file(rel));
    snprintf(v->dir, sizeof v->dir, "/tmp/kiln-tok-XXXXXX");
    cr_assert_not_null(mkdtemp(v->dir));
    snprintf(v->path, sizeof v->path, "%s/%s.gguf", v->dir, name);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        FILE *null = freopen("/dev/null", "w", stdout);
        (void)null;
        execl(KILN_BIN, KILN_BIN, "synth", "--preset", "tiny", "--layers", "1", "--hidden", "64", "--heads", "1",
              "--kv-heads", "1", "--head-dim", "64", "--ffn", "64", "--tied", "--tokenizer", json,
              "--tokenizer-config", cfg, "-o", v->path, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    pid_t w = waitpid(pid, &status, 0);
    /* Open, then remove at once: the mapping outlives the name, and a failing assertion
     * later leaves nothing behind in /tmp. */
    kiln_err ge = {.msg = "synth did not finish"};
    v->g = w == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? gguf_open(v->path, &ge) : NULL;
    unlink(v->path);
    rmdir(v->dir);
    v->dir[0] = 0;
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s synth failed (status %d)", KILN_BIN, status);
    cr_assert_not_null(v->g, "%s: %s", v->path, ge.msg);
    kiln_err err = {0};
    v->t = tok_load(v->g, &err);
    cr_assert_not_null(v->t, "%s: %s", v->path, err.msg);
}

static void vocab_close(vocab *v) {
    tok_free(v->t);
    gguf_close(v->g);
    if (v->dir[0]) {
        unlink(v->path);
        rmdir(v->dir);
    }
}

static int64_t encode(const tokenizer *t, const char *s, size_t n, bool add_special, bool parse_special,
                      int32_t **ids) {
    kiln_err err = {0};
    int64_t k = tok_encode(t, s, n, add_special, parse_special, NULL, 0, &err);
    cr_assert(k >= 0, "encode failed: %s", err.msg);
    *ids = malloc(((size_t)k + 1) * sizeof **ids);
    cr_assert_not_null(*ids);
    int64_t k2 = tok_encode(t, s, n, add_special, parse_special, *ids, (size_t)k, &err);
    cr_assert_eq(k2, k);
    return k;
}

/* Concatenated pieces of ids; *n gets the length. */
static char *pieces(const tokenizer *t, const int32_t *ids, size_t n_ids, bool special, size_t *n) {
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    cr_assert_not_null(out);
    for (size_t i = 0; i < n_ids; i++) {
        int64_t k = tok_piece(t, ids[i], special, NULL, 0);
        cr_assert(k >= 0, "tok_piece(%d) failed", ids[i]);
        while (len + (size_t)k + 1 > cap) cap *= 2;
        out = realloc(out, cap);
        cr_assert_not_null(out);
        cr_assert_eq(tok_piece(t, ids[i], special, out + len, (size_t)k), k);
        len += (size_t)k;
    }
    out[len] = 0;
    *n = len;
    return out;
}

/* Streams ids through tok_stream and checks every push gives whole UTF-8 characters;
 * returns the text (which must equal want[0..wn)). */
static void check_stream(const tokenizer *t, const int32_t *ids, size_t n, const char *want, size_t wn,
                         const char *what) {
    tok_stream s;
    tok_stream_init(&s, t);
    size_t cap = wn * 3 + 64, len = 0;
    char *out = malloc(cap), chunk[4096];
    cr_assert_not_null(out);
    for (size_t i = 0; i < n; i++) {
        size_t k = tok_stream_push(&s, ids[i], chunk, sizeof chunk);
        cr_assert_eq(tok_utf8_invalid_at(chunk, k), 0, "%s: stream emitted part of a character at token %zu", what, i);
        cr_assert(len + k <= cap);
        memcpy(out + len, chunk, k);
        len += k;
    }
    size_t k = tok_stream_flush(&s, chunk, sizeof chunk);
    cr_assert_eq(k, 0, "%s: stream held bytes at the end", what);
    cr_assert(len == wn && memcmp(out, want, wn) == 0, "%s: stream gave \"%.*s\", want \"%.*s\"", what, (int)len, out,
              (int)wn, want);
    free(out);
}

/* ---- llama.cpp's vectors ---------------------------------------------------------------- */

#define SEP "\n__ggml_vocab_test__\n"

/* Encodes every input of <vectors>.inp and compares with <vectors>.out; checks the pieces
 * and the stream reproduce the input. Returns the number of inputs that matched. */
static int run_vectors(const tokenizer *t, const char *vectors, bool spm, int *total) {
    char rel[256];
    size_t in_len, out_len;
    snprintf(rel, sizeof rel, "tokenizer/%s.inp", vectors);
    char *inp = slurp(tu_data_file(rel), &in_len);
    snprintf(rel, sizeof rel, "tokenizer/%s.out", vectors);
    char *outs = slurp(tu_data_file(rel), &out_len);
    int n = 0, pass = 0;
    char *line = outs;
    for (const char *p = inp;;) {
        const char *sep = strstr(p, SEP);
        if (!sep) break; /* the last piece (after the final separator) is not a test */
        size_t len = (size_t)(sep - p);
        char *nl = strchr(line, '\n');
        cr_assert_not_null(nl, "%s: fewer .out lines than inputs", vectors);
        *nl = 0;
        int32_t want[512];
        size_t nw = 0;
        for (char *q = line, *end; *q; q = end) {
            long v = strtol(q, &end, 10);
            if (end == q) break;
            cr_assert(nw < 512);
            want[nw++] = (int32_t)v;
        }
        line = nl + 1;
        int32_t *got;
        int64_t ng = encode(t, p, len, false, false, &got);
        bool ok = (size_t)ng == nw && memcmp(got, want, nw * sizeof *want) == 0;
        if (ok) {
            pass++;
        } else {
            char g[2048] = "", w[2048] = "";
            for (int64_t i = 0, o = 0; i < ng && o < 2000; i++)
                o += snprintf(g + o, sizeof g - (size_t)o, " %d", got[i]);
            for (size_t i = 0, o = 0; i < nw && o < 2000; i++)
                o += (size_t)snprintf(w + o, sizeof w - o, " %d", want[i]);
            cr_log_error("%s #%d \"%.*s\":\n  got %s\n  want%s", vectors, n, (int)len, p, g, w);
        }
        /* Pieces give the text back; SPM's dummy prefix adds one leading space. */
        size_t pl;
        char *text = pieces(t, got, (size_t)ng, false, &pl);
        size_t extra = spm && len > 0 ? 1 : 0;
        cr_expect(pl == len + extra && memcmp(text + extra, p, len) == 0 && (!extra || text[0] == ' '),
                  "%s #%d: pieces give \"%s\"", vectors, n, text);
        check_stream(t, got, (size_t)ng, p, len, vectors);
        free(text);
        free(got);
        n++;
        p = sep + strlen(SEP);
    }
    free(inp);
    free(outs);
    *total = n;
    return pass;
}

static void vectors_of(const char *name, bool spm) {
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizer/ggml-vocab-%s.gguf", name);
    vocab v = {0};
    vocab_open(&v, tu_data_file(rel));
    snprintf(rel, sizeof rel, "ggml-vocab-%s.gguf", name);
    int total = 0, pass = run_vectors(v.t, rel, spm, &total);
    cr_log_info("%s: %d/%d vectors match", name, pass, total);
    cr_assert_eq(total, 46, "%s: %d inputs", name, total);
    cr_assert_eq(pass, total, "%s: %d/%d vectors match", name, pass, total);
    vocab_close(&v);
}

Test(tok, vectors_llama_spm) { vectors_of("llama-spm", true); }
Test(tok, vectors_phi_3) { vectors_of("phi-3", true); }
Test(tok, vectors_gpt_2) { vectors_of("gpt-2", false); }
Test(tok, vectors_falcon) { vectors_of("falcon", false); }
Test(tok, vectors_mpt) { vectors_of("mpt", false); }
Test(tok, vectors_starcoder) { vectors_of("starcoder", false); }
Test(tok, vectors_refact) { vectors_of("refact", false); }
Test(tok, vectors_deepseek_llm) { vectors_of("deepseek-llm", false); }
Test(tok, vectors_deepseek_coder) { vectors_of("deepseek-coder", false); }

Test(tok, vectors_bert_bge) {
    cr_skip_test("bert-bge: WordPiece (tokenizer.ggml.model 'bert') is out of scope; tok_load refuses it");
}

/* llama-bpe and qwen2 vectors have no GGUF here: they pair with the tokenizer.json files. */
static void vectors_synth(const char *model, const char *const *sets) {
    vocab v = {0};
    vocab_synth(&v, model);
    for (size_t i = 0; sets[i]; i++) {
        int total = 0, pass = run_vectors(v.t, sets[i], false, &total);
        cr_log_info("%s through %s: %d/%d vectors match", sets[i], model, pass, total);
        cr_expect_eq(total, 46);
        cr_expect_eq(pass, total, "%s: %d/%d vectors match", sets[i], pass, total);
    }
    vocab_close(&v);
}

Test(tok, vectors_llama_bpe, .timeout = 120) {
    vectors_synth("llama3", (const char *const[]){"ggml-vocab-llama-bpe.gguf", NULL});
}

Test(tok, vectors_qwen2, .timeout = 120) {
    vectors_synth("qwen3", (const char *const[]){"ggml-vocab-qwen2.gguf", "ggml-vocab-deepseek-r1-qwen.gguf", NULL});
}

/* ---- npm goldens: add_special_tokens=false, special-token text matched ---------------- */

static void golden(const char *model) {
    vocab v = {0};
    vocab_synth(&v, model);
    char rel[128];
    snprintf(rel, sizeof rel, "tokenizers/%s/golden.jsonl", model);
    size_t len;
    char *all = slurp(tu_data_file(rel), &len);
    int n = 0, pass = 0;
    for (char *line = all, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) nl = line + strlen(line);
        char save = *nl;
        *nl = 0;
        if (*line) {
            json_error_t je;
            json_t *o = json_loads(line, JSON_ALLOW_NUL, &je);
            cr_assert_not_null(o, "%s line %d: %s", model, n + 1, je.text);
            json_t *jt = json_object_get(o, "text"), *ji = json_object_get(o, "ids");
            const char *text = json_string_value(jt);
            size_t tl = json_string_length(jt), nw = json_array_size(ji);
            int32_t *want = malloc((nw + 1) * sizeof *want);
            for (size_t i = 0; i < nw; i++) want[i] = (int32_t)json_integer_value(json_array_get(ji, i));
            int32_t *got;
            int64_t ng = encode(v.t, text, tl, false, true, &got);
            bool ok = (size_t)ng == nw && memcmp(got, want, nw * sizeof *want) == 0;
            bool roundtrip = json_is_true(json_object_get(o, "roundtrip"));
            if (!ok && !roundtrip) {
                /* HF's NFC normalizer (qwen3) composed this text first; llama.cpp normalizes
                 * nothing, and neither does kiln: the NFC form must give the golden ids. */
                utf8proc_uint8_t *nfc = utf8proc_NFC((const utf8proc_uint8_t *)text);
                cr_assert_not_null(nfc);
                int32_t *g2;
                int64_t n2 = encode(v.t, (const char *)nfc, strlen((const char *)nfc), false, true, &g2);
                ok = (size_t)n2 == nw && memcmp(g2, want, nw * sizeof *want) == 0;
                cr_log_info("%s golden #%d: \"%s\" differs by NFC; its NFC form %s", model, n + 1, text,
                            ok ? "matches" : "does not match");
                free(g2);
                free(nfc);
            }
            if (ok) pass++;
            else
                cr_log_error("%s golden #%d \"%s\": ids differ (%lld vs %zu tokens)", model, n + 1, text, (long long)ng,
                             nw);
            /* Pieces with special=true give the text back, special-token text included. */
            size_t pl;
            char *back = pieces(v.t, got, (size_t)ng, true, &pl);
            cr_expect(pl == tl && memcmp(back, text, tl) == 0, "%s golden #%d: pieces give \"%s\"", model, n + 1, back);
            free(back);
            free(got);
            free(want);
            json_decref(o);
            n++;
        }
        *nl = save;
        if (!save) break;
    }
    cr_log_info("%s: %d/%d goldens match", model, pass, n);
    cr_assert_eq(n, 50);
    cr_assert_eq(pass, n, "%s: %d/%d goldens match", model, pass, n);
    free(all);
    vocab_close(&v);
}

Test(tok, golden_llama3, .timeout = 120) { golden("llama3"); }
Test(tok, golden_qwen3, .timeout = 120) { golden("qwen3"); }

/* ---- special tokens, BOS/EOS, eot/eog ---------------------------------------------------- */

Test(tok, specials_llama3, .timeout = 120) {
    vocab v = {0};
    vocab_synth(&v, "llama3");
    const tokenizer *t = v.t;
    cr_assert_eq(tok_n_vocab(t), 128256);
    cr_assert_eq(tok_bos(t), 128000);
    cr_assert_eq(tok_eos(t), 128001);
    cr_assert_eq(tok_eot(t), 128009); /* <|eot_id|> */
    cr_assert(tok_add_bos(t));        /* pre llama-bpe: add_bos by default */
    cr_assert(tok_is_eog(t, 128001) && tok_is_eog(t, 128009));
    cr_assert(!tok_is_eog(t, 128000) && !tok_is_eog(t, 9906) && !tok_is_eog(t, -1) && !tok_is_eog(t, 1 << 30));
    cr_assert_eq(tok_find(t, "<|start_header_id|>"), 128006);
    const char *s = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>";
    int32_t *ids;
    int64_t n = encode(t, s, strlen(s), true, true, &ids);
    cr_assert(n == 7 && ids[0] == 128000 && ids[1] == 128006 && ids[3] == 128007 && ids[6] == 128009);
    free(ids);
    n = encode(t, s, strlen(s), false, false, &ids); /* written text, not tokens */
    cr_assert(n > 7 && ids[0] != 128000);
    for (int64_t i = 0; i < n; i++) cr_assert(ids[i] < 128000);
    free(ids);
    char buf[64];
    cr_assert_eq(tok_piece(t, 128009, false, buf, sizeof buf), 0);
    cr_assert_eq(tok_piece(t, 128009, true, buf, sizeof buf), 10);
    cr_assert(memcmp(buf, "<|eot_id|>", 10) == 0);
    vocab_close(&v);
}

Test(tok, specials_qwen3, .timeout = 120) {
    vocab v = {0};
    vocab_synth(&v, "qwen3");
    const tokenizer *t = v.t;
    cr_assert(!tok_add_bos(t)); /* add_bos_token false in the file */
    cr_assert_eq(tok_eos(t), 151645);
    cr_assert_eq(tok_eot(t), 151645); /* <|im_end|> */
    cr_assert(tok_is_eog(t, 151643) && tok_is_eog(t, 151645)); /* <|endoftext|>, <|im_end|> */
    int32_t think = tok_find(t, "<think>");
    cr_assert(think > 0);
    /* <think> is user-defined: matched even without parse_special, rendered without special */
    int32_t *ids;
    int64_t n = encode(t, "<think>x", 8, true, false, &ids);
    cr_assert(n == 2 && ids[0] == think);
    free(ids);
    char buf[16];
    cr_assert_eq(tok_piece(t, think, false, buf, sizeof buf), 7);
    vocab_close(&v);
}

Test(tok, specials_spm) {
    vocab v = {0};
    vocab_open(&v, tu_data_file("tokenizer/ggml-vocab-llama-spm.gguf"));
    const tokenizer *t = v.t;
    cr_assert(tok_bos(t) == 1 && tok_eos(t) == 2 && tok_add_bos(t) && tok_eot(t) == -1);
    cr_assert(tok_is_eog(t, 2) && !tok_is_eog(t, 1));
    int32_t *ids;
    int64_t n = encode(t, "Hello", 5, true, false, &ids);
    cr_assert(n == 2 && ids[0] == 1 && ids[1] == 15043);
    free(ids);
    /* the dummy prefix also follows a special token */
    n = encode(t, "<s>Hello", 8, false, true, &ids);
    cr_assert(n == 2 && ids[0] == 1 && ids[1] == 15043, "got %lld ids", (long long)n);
    free(ids);
    n = encode(t, "<s>Hello", 8, false, false, &ids);
    cr_assert(n > 2 && ids[0] != 1);
    free(ids);
    n = encode(t, "", 0, true, false, &ids); /* '' with BOS gives [BOS] */
    cr_assert(n == 1 && ids[0] == 1);
    free(ids);
    char buf[8];
    cr_assert_eq(tok_piece(t, 1, false, buf, sizeof buf), 0);
    cr_assert_eq(tok_piece(t, 1, true, buf, sizeof buf), 3);
    cr_assert_eq(tok_piece(t, 13, false, buf, sizeof buf), 1); /* <0x0A> */
    cr_assert_eq(buf[0], '\n');
    cr_assert_eq(tok_piece(t, 15043, false, buf, sizeof buf), 6); /* "▁Hello" */
    cr_assert(memcmp(buf, " Hello", 6) == 0);
    cr_assert_eq(tok_piece(t, 15043, false, buf, 2), 6); /* length past cap */
    cr_assert_eq(tok_piece(t, -1, false, buf, sizeof buf), -1);
    cr_assert_eq(tok_piece(t, 32000, false, buf, sizeof buf), -1);
    /* the stream drops the dummy prefix after BOS */
    tok_stream s;
    tok_stream_init(&s, t);
    cr_assert_eq(tok_stream_push(&s, 1, buf, sizeof buf), 0);
    cr_assert_eq(tok_stream_push(&s, 15043, buf, sizeof buf), 5);
    cr_assert(memcmp(buf, "Hello", 5) == 0);
    vocab_close(&v);
}

/* phi-3: llama.cpp gives its special tokens rstrip (by model name), except <s>, <unk> and
 * <|endoftext|>: the spaces after <|user|> go, those after <s> stay. */
Test(tok, specials_phi3_rstrip) {
    vocab v = {0};
    vocab_open(&v, tu_data_file("tokenizer/ggml-vocab-phi-3.gguf"));
    const char *s = "<|user|>  hi<s> y";
    int32_t *ids;
    int64_t n = encode(v.t, s, strlen(s), false, true, &ids);
    cr_assert(n == 5 && ids[0] == 32010 && ids[1] == 7251 && ids[2] == 1 && ids[3] == 29871 && ids[4] == 343,
              "got %lld ids", (long long)n);
    free(ids);
    cr_assert_eq(tok_eot(v.t), 32007); /* <|end|> */
    cr_assert(tok_is_eog(v.t, 32000) && tok_is_eog(v.t, 32007));
    vocab_close(&v);
}

/* Random text (ASCII, Latin, Cyrillic, CJK, emoji, controls, spaces) comes back from the
 * pieces on a SentencePiece and a byte-level vocab. */
Test(tok, random_roundtrip) {
    static const uint32_t ranges[][2] = {{0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0x17F}, {0x400, 0x44F},
                                         {0x4E00, 0x4E80}, {0x1F600, 0x1F64F}, {0x20, 0x20}, {0x0, 0x1F}};
    static const char *const files[] = {"llama-spm", "gpt-2", "mpt"};
    uint64_t seed = 12345;
    for (size_t f = 0; f < 3; f++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tokenizer/ggml-vocab-%s.gguf", files[f]);
        vocab v = {0};
        vocab_open(&v, tu_data_file(rel));
        bool spm = f == 0;
        for (int round = 0; round < 200; round++) {
            char text[600];
            size_t len = 0;
            int nc = (int)(seed >> 33) % 120;
            for (int c = 0; c < nc; c++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                const uint32_t *r = ranges[(seed >> 40) % 8];
                uint32_t cp = r[0] + (uint32_t)((seed >> 20) % (r[1] - r[0] + 1));
                len += (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)text + len);
            }
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            int32_t *ids;
            int64_t n = encode(v.t, text, len, false, false, &ids);
            size_t pl;
            char *back = pieces(v.t, ids, (size_t)n, false, &pl);
            size_t extra = spm && len ? 1 : 0;
            cr_assert(pl == len + extra && memcmp(back + extra, text, len) == 0, "%s round %d", files[f], round);
            check_stream(v.t, ids, (size_t)n, text, len, files[f]);
            free(back);
            free(ids);
        }
        vocab_close(&v);
    }
}

/* A character split over byte tokens: the stream holds the bytes until it is whole. */
Test(tok, stream_split_character) {
    vocab v = {0};
    vocab_open(&v, tu_data_file("tokenizer/ggml-vocab-llama-spm.gguf"));
    const tokenizer *t = v.t;
    const char *llama = "\xf0\x9f\xa6\x99"; /* 🦙: no token, four <0xNN> */
    int32_t *ids;
    int64_t n = encode(t, llama, 4, false, false, &ids);
    cr_assert_eq(n, 5); /* "▁" + 4 bytes */
    tok_stream s;
    tok_stream_init(&s, t);
    char out[64];
    cr_assert_eq(tok_stream_push(&s, ids[0], out, sizeof out), 0); /* the dummy space, dropped */
    for (int i = 1; i < 4; i++) cr_assert_eq(tok_stream_push(&s, ids[i], out, sizeof out), 0);
    cr_assert_eq(tok_stream_push(&s, ids[4], out, sizeof out), 4);
    cr_assert(memcmp(out, llama, 4) == 0);
    /* an unfinished character at the end flushes as one U+FFFD */
    tok_stream_init(&s, t);
    cr_assert_eq(tok_stream_push(&s, ids[1], out, sizeof out), 0);
    cr_assert_eq(tok_stream_push(&s, ids[2], out, sizeof out), 0);
    cr_assert_eq(tok_stream_flush(&s, out, sizeof out), 3);
    cr_assert(memcmp(out, "\xef\xbf\xbd", 3) == 0);
    /* a byte that cannot start a character is replaced at once */
    tok_stream_init(&s, t);
    cr_assert_eq(tok_stream_push(&s, ids[2], out, sizeof out), 3); /* 0x9F alone */
    cr_assert_eq(tok_stream_push(&s, tok_find(t, "<0x41>"), out, sizeof out), 1);
    cr_assert_eq(out[0], 'A');
    /* no room: nothing partial is written */
    tok_stream_init(&s, t);
    for (int i = 1; i < 4; i++) tok_stream_push(&s, ids[i], out, sizeof out);
    cr_assert_eq(tok_stream_push(&s, ids[4], out, 3), 0);
    free(ids);
    vocab_close(&v);

    /* gpt-2: 🦙 is several byte-level tokens, some ending mid-character */
    vocab_open(&v, tu_data_file("tokenizer/ggml-vocab-gpt-2.gguf"));
    const char *text = " this is \xf0\x9f\xa6\x99.cpp \xe6\x88\x91\xe6\x83\xb3";
    n = encode(v.t, text, strlen(text), false, false, &ids);
    check_stream(v.t, ids, (size_t)n, text, strlen(text), "gpt-2 split");
    int partial = 0;
    for (int64_t i = 0; i < n; i++) {
        char p[64];
        int64_t k = tok_piece(v.t, ids[i], false, p, sizeof p);
        if (tok_utf8_invalid_at(p, (size_t)k)) partial++;
    }
    cr_assert(partial > 0, "want a piece that ends mid-character");
    free(ids);
    vocab_close(&v);
}

/* ---- speed ------------------------------------------------------------------------------ */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ~100 kB of mixed text (all llama.cpp inputs: scripts, emoji, code-like runs, spaces). */
static char *big_text(size_t *n) {
    size_t len;
    char *inp = slurp(tu_data_file("tokenizer/ggml-vocab-gpt-2.gguf.inp"), &len);
    for (char *p; (p = strstr(inp, SEP));) { /* each separator becomes one space */
        *p = ' ';
        memmove(p + 1, p + strlen(SEP), strlen(p + strlen(SEP)) + 1);
    }
    len = strlen(inp);
    size_t cap = 100 * 1000;
    char *out = malloc(cap + len + 1);
    cr_assert_not_null(out);
    size_t k = 0;
    while (k < cap) memcpy(out + k, inp, len), k += len;
    out[k] = 0;
    free(inp);
    *n = k;
    return out;
}

#if defined(__SANITIZE_ADDRESS__)
#define SPEED_LIMIT 20.0 /* sanitizers slow everything several times */
#else
#define SPEED_LIMIT 2.0
#endif

static void time_encode(const tokenizer *t, const char *name, const char *text, size_t n) {
    double t0 = now();
    kiln_err err = {0};
    int64_t k = tok_encode(t, text, n, true, true, NULL, 0, &err);
    double dt = now() - t0;
    cr_assert(k > 0, "%s: %s", name, err.msg);
    fprintf(stderr, "tok speed: %s: %zu bytes -> %lld tokens in %.1f ms\n", name, n, (long long)k, dt * 1e3);
    cr_log_info("%s: %zu bytes -> %lld tokens in %.1f ms", name, n, (long long)k, dt * 1e3);
    cr_assert(dt < SPEED_LIMIT, "%s: %.2f s for %zu bytes", name, dt, n);
}

Test(tok, speed_100k, .timeout = 240) {
    size_t n;
    char *text = big_text(&n);
    cr_assert(n >= 100000);
    static const char *const files[] = {"llama-spm", "gpt-2", "deepseek-llm", "falcon"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tokenizer/ggml-vocab-%s.gguf", files[i]);
        vocab v = {0};
        vocab_open(&v, tu_data_file(rel));
        time_encode(v.t, files[i], text, n);
        vocab_close(&v);
    }
    static const char *const models[] = {"llama3", "qwen3"};
    for (size_t i = 0; i < 2; i++) {
        vocab v = {0};
        vocab_synth(&v, models[i]);
        time_encode(v.t, models[i], text, n);
        vocab_close(&v);
    }
    free(text);
}

/* ---- bad input --------------------------------------------------------------------------- */

Test(tok, invalid_utf8) {
    vocab v = {0};
    vocab_open(&v, tu_data_file("tokenizer/ggml-vocab-gpt-2.gguf"));
    static const struct { const char *s; size_t at; } bad[] = {
        {"ab\xff", 3},         {"\x80", 1},           {"a\xc3", 2},     {"\xc3(", 2},
        {"\xe2\x82", 1},       {"\xed\xa0\x80", 2},   {"\xc0\xaf", 1},  {"\xf4\x90\x80\x80", 2},
        {"x\xf0\x9f\xa6", 2},  {"ok \xe6\x88\x91\xfe", 7},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t len = strlen(bad[i].s);
        cr_assert_eq(tok_utf8_invalid_at(bad[i].s, len), bad[i].at, "case %zu", i);
        kiln_err err = {0};
        int32_t ids[16];
        cr_assert_eq(tok_encode(v.t, bad[i].s, len, false, false, ids, 16, &err), -1);
        cr_assert(strstr(err.msg, "UTF-8"), "message: %s", err.msg);
    }
    cr_assert_eq(tok_utf8_invalid_at("", 0), 0);
    cr_assert_eq(tok_utf8_invalid_at("\xf4\x8f\xbf\xbf \xef\xbf\xbd", 8), 0);
    /* NUL is a character like any other */
    int32_t *ids;
    int64_t n = encode(v.t, "a\0b", 3, false, false, &ids);
    cr_assert(n >= 2);
    free(ids);
    vocab_close(&v);
}

Test(tok, refuses_files_without_a_usable_tokenizer) {
    /* a GGUF with no tokenizer keys */
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln-tok-%d.gguf", (int)getpid());
    kiln_err ge;
    gguf_writer *w = gguf_writer_create(path, &ge);
    cr_assert_not_null(w, "%s", ge.msg);
    cr_assert_eq(gguf_writer_add_str(w, "general.architecture", "llama", &ge), 0);
    cr_assert_eq(gguf_writer_begin_data(w, &ge), 0);
    cr_assert_eq(gguf_writer_finish(w, &ge), 0, "%s", ge.msg);
    gguf_writer_destroy(w);
    gguf_file *g = gguf_open(path, &ge);
    cr_assert_not_null(g, "%s", ge.msg);
    kiln_err err = {0};
    cr_assert_null(tok_load(g, &err));
    cr_assert(strstr(err.msg, "tokenizer.ggml.model"), "message: %s", err.msg);
    gguf_close(g);
    unlink(path);

    /* WordPiece */
    g = gguf_open(tu_data_file("tokenizer/ggml-vocab-bert-bge.gguf"), &ge);
    cr_assert_not_null(g, "%s", ge.msg);
    err.msg[0] = 0;
    cr_assert_null(tok_load(g, &err));
    cr_assert(strstr(err.msg, "'bert'") && strstr(err.msg, "not supported"), "message: %s", err.msg);
    gguf_close(g);

    /* a gpt2 model without merges, and tokens of the wrong type */
    w = gguf_writer_create(path, &ge);
    cr_assert_not_null(w);
    gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2", &ge);
    const char *toks[] = {"a", "b"};
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, 2, &ge);
    gguf_writer_begin_data(w, &ge);
    cr_assert_eq(gguf_writer_finish(w, &ge), 0, "%s", ge.msg);
    gguf_writer_destroy(w);
    g = gguf_open(path, &ge);
    cr_assert_not_null(g);
    cr_assert_null(tok_load(g, &err));
    cr_assert(strstr(err.msg, "tokenizer.ggml.merges"), "message: %s", err.msg);
    gguf_close(g);
    unlink(path);

    w = gguf_writer_create(path, &ge);
    gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", &ge);
    gguf_writer_add_str(w, "tokenizer.ggml.tokens", "a", &ge);
    gguf_writer_begin_data(w, &ge);
    cr_assert_eq(gguf_writer_finish(w, &ge), 0, "%s", ge.msg);
    gguf_writer_destroy(w);
    g = gguf_open(path, &ge);
    cr_assert_not_null(g);
    cr_assert_null(tok_load(g, &err));
    cr_assert(strstr(err.msg, "tokenizer.ggml.tokens"), "message: %s", err.msg);
    gguf_close(g);
    unlink(path);
    cr_assert_null(tok_load(NULL, &err));
}

/* stories260K's SPM vocab (512 tokens) loads and round-trips. */
Test(tok, stories260k) {
    vocab v = {0};
    vocab_open(&v, tu_data_file("models/stories260K.gguf"));
    cr_assert_eq(tok_n_vocab(v.t), 512);
    const char *s = "Once upon a time, there was a little girl named Lily.";
    int32_t *ids;
    int64_t n = encode(v.t, s, strlen(s), true, false, &ids);
    cr_assert(n > 1 && ids[0] == tok_bos(v.t));
    size_t pl;
    char *back = pieces(v.t, ids + 1, (size_t)n - 1, false, &pl);
    cr_assert(pl == strlen(s) + 1 && strcmp(back + 1, s) == 0, "got \"%s\"", back);
    free(back);
    free(ids);
    vocab_close(&v);
}
