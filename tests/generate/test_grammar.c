/* The grammar engine: GBNF parsing and its refusals, strings accepted and rejected, the
 * token mask against brute force on small random vocabularies, JSON Schema grammars,
 * and the mask's time per token on Qwen3's 151k-token vocabulary. */
#include "base/error.h"
#include "base/rng.h"
#include "generate/grammar.h"
#include "gguf/gguf.h"
#include "server/schema.h"
#include "text/tok.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A one-byte-per-token vocabulary of all 256 bytes, for matching strings. */
static gram_vocab *bytes_vocab(void) {
    static char b[256];
    const char *p[256];
    size_t len[256];
    for (int i = 0; i < 256; i++) b[i] = (char)i, p[i] = &b[i], len[i] = 1;
    kiln_err e = {0};
    gram_vocab *v = gram_vocab_from_pieces(p, len, 256, &e);
    cr_assert_not_null(v, "%s", e.msg);
    return v;
}

static gram *parse_ok(const char *text) {
    kiln_err e = {0};
    gram *g = gram_parse(text, &e);
    cr_assert_not_null(g, "%s\n%s", e.msg, text);
    return g;
}

/* Whether the whole of s is a sentence of the grammar (1), a prefix of one (0), or
 * neither (-1). */
static int judge(const gram *g, const gram_vocab *v, const char *s) {
    kiln_err e = {0};
    gram_match *m = gram_match_create(g, v, &e);
    cr_assert_not_null(m, "%s", e.msg);
    int r = gram_match_bytes(m, s, strlen(s)) ? -1 : gram_match_accepting(m) ? 1 : 0;
    gram_match_free(m);
    return r;
}

Test(grammar, accepts_and_rejects) {
    gram_vocab *v = bytes_vocab();
    gram *g = parse_ok("# a comment\n"
                       "root ::= greeting (\" \" name)? \"!\"{1,3}\n"
                       "greeting ::= \"hi\" | \"hello\"\n"
                       "name ::= [A-Z] [a-z]*\n");
    cr_assert_eq(judge(g, v, "hi!"), 1);
    cr_assert_eq(judge(g, v, "hello Bob!!!"), 1);
    cr_assert_eq(judge(g, v, "hello Bob"), 0);
    cr_assert_eq(judge(g, v, "hello Bob!!!!"), -1);
    cr_assert_eq(judge(g, v, "hello bob!"), -1);
    cr_assert_eq(judge(g, v, "hey"), -1);
    cr_assert_eq(judge(g, v, ""), 0);
    gram_free(g);

    /* classes over code points: UTF-8 sequences, negation, escapes, '.' */
    g = parse_ok("root ::= [^a-c\\n]+ \"\\x41\" . \"\\u00e9\"");
    cr_assert_eq(judge(g, v, "déjà vuA€é"), 1);
    cr_assert_eq(judge(g, v, "xbA€é"), -1);
    cr_assert_eq(judge(g, v, "x\nA€é"), -1);
    cr_assert_eq(judge(g, v, "\xff"), -1); /* not UTF-8 */
    cr_assert_eq(judge(g, v, "\xed\xa0\x80"), -1); /* a surrogate */
    gram_free(g);

    /* recursion (not left), alternatives over lines, groups */
    g = parse_ok("root ::= list\nlist ::= \"[\" ( item ( \",\" item )* )? \"]\"\n"
                 "item ::= list\n  | [0-9]+\n");
    cr_assert_eq(judge(g, v, "[1,[2,[]],34]"), 1);
    cr_assert_eq(judge(g, v, "[1,[2,[]],34"), 0);
    cr_assert_eq(judge(g, v, "[1,,2]"), -1);
    gram_free(g);
    gram_vocab_free(v);
}

static void refused(const char *text, const char *what) {
    kiln_err e = {0};
    gram *g = gram_parse(text, &e);
    cr_assert_null(g, "accepted: %s", text);
    cr_assert_eq(e.code, KILN_ERR_INVALID);
    cr_assert(strstr(e.msg, what), "'%s' does not say '%s'", e.msg, what);
}

Test(grammar, refusals) {
    refused("root ::= a\na ::= a \"x\" | \"y\"", "left recursion");
    refused("root ::= b? root \"x\"\nb ::= \"y\"", "left recursion");
    refused("root ::= undefined", "'undefined' is used but not defined");
    refused("start ::= \"x\"", "no 'root'");
    refused("root ::= \"x\"\nroot ::= \"y\"", "defined twice");
    refused("root ::= \"unterminated", "unterminated");
    refused("root ::= [z-a]", "backwards");
    refused("root ::= \"x\"{5,2}", "n < m");
    refused("root ::= \"x\"{99999}", "over 1000");
    refused("root ::= ( \"x\"", "expected ')'");
    refused("root ::= \"\\u12\"", "\\u escape");
    char deep[400] = "root ::= ";
    for (int i = 0; i < 100; i++) strcat(deep, "(");
    refused(deep, "nested deeper");

    /* parses, but following it would take a million stacks a step: refused, not crawled */
    gram *g = parse_ok("root ::= ( ( \"a\"? ){1000} ){1000}");
    gram_vocab *v = bytes_vocab();
    kiln_err e = {0};
    cr_assert_null(gram_match_create(g, v, &e));
    cr_assert(strstr(e.msg, "too complex"), "%s", e.msg);
    gram_vocab_free(v);
    gram_free(g);
}

/* The mask against brute force: random grammars' states after random prefixes, on
 * random vocabularies over a small alphabet (multi-byte pieces, duplicates, one piece a
 * prefix of another). */
Test(grammar, mask_matches_brute_force) {
    static const char *const grammars[] = {
        "root ::= ( \"ab\" | \"a\" [bc]* \"d\" )+ \"e\"?",
        "root ::= obj\nobj ::= \"{\" ( kv ( \",\" kv )* )? \"}\"\nkv ::= [a-c]+ \":\" ( obj | [0-9]{1,2} )",
        "root ::= [^\"]{0,5} \"\\\"\" ( \"a\" | \"b\" \"c\"? )*",
    };
    const char alpha[] = "abcde{}:,0159\"";
    rng r;
    rng_seed(&r, 7, 1, 2);
    for (size_t gi = 0; gi < sizeof grammars / sizeof *grammars; gi++) {
        gram *g = parse_ok(grammars[gi]);
        enum { N = 300 };
        char store[N][5];
        const char *p[N];
        size_t len[N];
        for (int i = 0; i < N; i++) {
            len[i] = i < 3 ? 0 : 1 + rng_next(&r) % 4; /* three control tokens */
            for (size_t k = 0; k < len[i]; k++) store[i][k] = alpha[rng_next(&r) % (sizeof alpha - 1)];
            p[i] = store[i];
        }
        kiln_err e = {0};
        gram_vocab *v = gram_vocab_from_pieces(p, len, N, &e);
        cr_assert_not_null(v, "%s", e.msg);
        gram_match *m = gram_match_create(g, v, &e), *probe = gram_match_create(g, v, &e);
        cr_assert(m && probe, "%s", e.msg);
        for (int walk = 0; walk < 40; walk++) {
            gram_match_reset(m);
            char prefix[64];
            size_t pn = 0;
            for (int step = 0; step < 12; step++) {
                const uint64_t *mask = gram_match_mask(m);
                cr_assert_not_null(mask);
                int allowed[N], n_allowed = 0;
                for (int t = 0; t < N; t++) {
                    gram_match_reset(probe);
                    bool ok = len[t] && gram_match_bytes(probe, prefix, pn) == 0 &&
                              gram_match_bytes(probe, p[t], len[t]) == 0;
                    bool bit = mask[t / 64] >> (t % 64) & 1;
                    cr_assert_eq(bit, ok, "grammar %zu, prefix '%.*s', token %d '%.*s': mask %d, brute force %d", gi,
                                 (int)pn, prefix, t, (int)len[t], p[t], bit, ok);
                    if (ok && pn + len[t] < sizeof prefix) allowed[n_allowed++] = t;
                }
                if (!n_allowed) break;
                int t = allowed[rng_next(&r) % (uint64_t)n_allowed];
                cr_assert_eq(gram_match_token(m, t), 0);
                memcpy(prefix + pn, p[t], len[t]);
                pn += len[t];
            }
        }
        gram_match_free(m);
        gram_match_free(probe);
        gram_vocab_free(v);
        gram_free(g);
    }
}

/* ---- JSON Schema ------------------------------------------------------------------------ */

static gram *schema_gram(const char *schema_text) {
    json_error_t je;
    json_t *s = json_loads(schema_text, 0, &je);
    cr_assert_not_null(s, "%s", je.text);
    char why[256];
    char *text = srv_schema_gbnf(s, why);
    json_decref(s);
    cr_assert_not_null(text, "%s: %s", schema_text, why);
    gram *g = parse_ok(text);
    free(text);
    return g;
}

static void schema_refused(const char *schema_text, const char *what) {
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, NULL);
    cr_assert_not_null(s);
    char why[256];
    char *text = srv_schema_gbnf(s, why);
    json_decref(s);
    cr_assert_null(text, "accepted: %s", schema_text);
    cr_assert(strstr(why, what), "'%s' does not say '%s'", why, what);
}

Test(grammar, json_schema) {
    gram_vocab *v = bytes_vocab();
    gram *g = schema_gram("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
                          "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",1,null]},"
                          "\"minItems\":1,\"maxItems\":2},\"ok\":{\"type\":[\"boolean\",\"null\"]}},"
                          "\"required\":[\"name\",\"tags\"],\"additionalProperties\":false}");
    cr_assert_eq(judge(g, v, "{\"name\":\"bob\",\"tags\":[\"a\"]}"), 1);
    cr_assert_eq(judge(g, v, "{ \"name\": \"bob\", \"age\": -12, \"tags\": [1, null], \"ok\": true}"), 1);
    cr_assert_eq(judge(g, v, "{\"name\":\"bob\",\"tags\":[\"a\"],\"ok\":null}"), 1);
    cr_assert_eq(judge(g, v, "{\"name\":\"bobby!\",\"tags\":[\"a\"]}"), -1);   /* maxLength */
    cr_assert_eq(judge(g, v, "{\"tags\":[\"a\"]}"), -1);                      /* required name */
    cr_assert_eq(judge(g, v, "{\"name\":\"b\",\"tags\":[]}"), -1);            /* minItems */
    cr_assert_eq(judge(g, v, "{\"name\":\"b\",\"tags\":[1,1,1]}"), -1);       /* maxItems */
    cr_assert_eq(judge(g, v, "{\"name\":\"b\",\"tags\":[2]}"), -1);           /* enum */
    cr_assert_eq(judge(g, v, "{\"name\":\"b\",\"tags\":[1],\"x\":1}"), -1);   /* no other keys */
    cr_assert_eq(judge(g, v, "{\"name\":\"b\",\"age\":1.5,\"tags\":[1]}"), -1); /* integer */
    cr_assert_eq(judge(g, v, "{\"name\":\"b\\u00e9\\n\",\"tags\":[1]}"), 1);
    gram_free(g);

    g = schema_gram("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"const\":3},"
                    "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},"
                    "\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/node\"}");
    cr_assert_eq(judge(g, v, "{\"v\":3,\"next\":{\"v\":3,\"next\":null}}"), 1);
    cr_assert_eq(judge(g, v, "{\"v\":4,\"next\":null}"), -1);
    gram_free(g);

    g = schema_gram("{}");
    cr_assert_eq(judge(g, v, "[1, {\"a\": [true, -0.5e+3]}, \"x\"]"), 1);
    cr_assert_eq(judge(g, v, "[01]"), -1);
    gram_free(g);
    gram_vocab_free(v);

    schema_refused("{\"type\":\"string\",\"pattern\":\"^a\"}", "'pattern' is not supported");
    schema_refused("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":1}}}",
                   "properties.a: 'minimum' is not supported");
    schema_refused("{\"type\":\"strin\"}", "unknown type");
    schema_refused("{\"$ref\":\"http://x/y\"}", "'$ref'");
    schema_refused("{\"$ref\":\"#/$defs/missing\"}", "points at nothing");
    schema_refused("{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "may both match");
    schema_refused("{\"type\":\"array\",\"maxItems\":5000}", "over 1000");
    schema_refused("{\"type\":\"string\",\"format\":\"date-time\"}", "'format' is not supported");
    schema_refused("false", "a schema must be an object");
}

/* ---- time per token on a real vocabulary ---------------------------------------------- */

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Qwen3's tokenizer (151k tokens) from a synth model; a JSON document tokenized and fed
 * token by token, the mask computed before each token. Reports the first pass (every
 * state new: prefix-tree walks) and a second pass over the same states (cached), per
 * token; the target is 0.2 ms per token on one core. */
Test(grammar, mask_time_qwen3, .timeout = 300) {
    const char *tj = tu_data_file("tokenizers/qwen3/tokenizer.json");
    const char *tc = tu_data_file("tokenizers/qwen3/tokenizer_config.json");
    const char *path = tu_tmp("gram_qwen3.gguf");
    static char out[1 << 14], err[1 << 14];
    cr_assert_eq(tu_run_kiln((const char *const[]){"synth", "--preset", "tiny", "--layers", "1", "--hidden", "64",
                                                   "--heads", "2", "--kv-heads", "1", "--ffn", "96", "--tokenizer", tj,
                                                   "--tokenizer-config", tc, "-o", path, NULL},
                             out, sizeof out, err, sizeof err),
                 0, "%s", err);
    kiln_err e = {0};
    gguf_file *gf = gguf_open(path, &e);
    cr_assert_not_null(gf, "%s", e.msg);
    tokenizer *t = tok_load(gf, &e);
    cr_assert_not_null(t, "%s", e.msg);
    double t0 = cpu_s();
    gram_vocab *v = gram_vocab_create(t, &e);
    double t_vocab = cpu_s() - t0;
    cr_assert_not_null(v, "%s", e.msg);
    gram *g = schema_gram("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                          "\"age\":{\"type\":\"integer\"},\"email\":{\"type\":\"string\"},"
                          "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
                          "\"active\":{\"type\":\"boolean\"},\"score\":{\"type\":\"number\"}},"
                          "\"required\":[\"name\",\"age\",\"tags\",\"active\"],\"additionalProperties\":false}");
    const char *doc = "{\"name\": \"Ada Lovelace, Countess of Lovelace\", \"age\": 36, "
                      "\"email\": \"ada@analytical-engine.org\", \"tags\": [\"mathematics\", \"poetry of science\", "
                      "\"first programmer\", \"notes on the engine\"], \"active\": false, \"score\": 98.25}";
    int32_t ids[512];
    int64_t n = tok_encode(t, doc, strlen(doc), false, false, ids, 512, &e);
    cr_assert_gt(n, 20, "%s", e.msg);
    gram_match *m = gram_match_create(g, v, &e);
    cr_assert_not_null(m, "%s", e.msg);
    double pass[2];
    for (int k = 0; k < 2; k++) {
        gram_match_reset(m);
        t0 = cpu_s();
        for (int64_t i = 0; i < n; i++) {
            const uint64_t *mask = gram_match_mask(m);
            cr_assert_not_null(mask);
            cr_assert(mask[ids[i] / 64] >> (ids[i] % 64) & 1, "token %lld (%d) masked out", (long long)i, ids[i]);
            cr_assert_eq(gram_match_token(m, ids[i]), 0);
        }
        pass[k] = (cpu_s() - t0) / (double)n * 1e3;
    }
    cr_assert(gram_match_accepting(m));
    cr_log_info("grammar mask, vocab %u, %lld tokens: first pass %.3f ms/token, cached %.4f ms/token; "
                "prefix tree built in %.0f ms",
                gram_vocab_size(v), (long long)n, pass[0], pass[1], t_vocab * 1e3);
    fprintf(stderr, "grammar mask, vocab %u, %lld tokens: first pass %.3f ms/token, cached %.4f ms/token; "
                    "prefix tree built in %.0f ms\n",
            gram_vocab_size(v), (long long)n, pass[0], pass[1], t_vocab * 1e3);
#ifndef KILN_SANITIZED
    cr_expect_leq(pass[1], 0.2, "cached mask %.3f ms/token over the 0.2 ms target", pass[1]);
#endif
    gram_match_free(m);
    gram_free(g);
    gram_vocab_free(v);
    tok_free(t);
    gguf_close(gf);
}
