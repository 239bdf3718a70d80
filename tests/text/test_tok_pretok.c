/* Pre-tokenizers (tok_pretok): hand-checked splits per family, the golden splits of every
 * test-vector input and of extra inputs for every family, llama.cpp's name aliases, bad
 * input, and speed.
 *
 * tests/data/pretok_golden.json was made by a Python script (Python's `regex` module, which
 * implements \p{..} and \s as Hugging Face's engines do) that runs llama.cpp's regex list of
 * each family (src/llama-vocab.cpp) the way llama.cpp's unicode_regex_split applies them:
 * each regex, in order, splits every piece the previous left, matches and the gaps between
 * them both becoming pieces; non-ASCII White_Space is seen as U+000B by the regexes without
 * \p{..} (llama.cpp's std::wregex fallback), which only DeepSeek's literal classes notice.
 * "vocab" holds the pieces (as byte lengths) of the 46 inputs of the tokenizer test vectors
 * (testdata/tokenizer/ *.inp, all the same text), "extra" those of "extra_inputs". The same
 * script cross-checked against Hugging Face `tokenizers` 0.23 pre-tokenizers: gpt-2,
 * llama-bpe, qwen2 and starcoder agree on every input. */
#include "base/error.h"
#include "tests/util/testutil.h"
#include "text/tok_pretok.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <jansson.h>

#ifndef KILN_SOURCE_DIR
#define KILN_SOURCE_DIR "."
#endif

/* One name per regex list; the golden file is keyed by these. */
static const char *const FAMS[] = {"gpt-2",          "default", "llama-bpe", "qwen2", "deepseek-llm",
                                   "deepseek-coder", "falcon",  "starcoder"};
#define N_FAMS (sizeof FAMS / sizeof FAMS[0])

/* ---- helpers --------------------------------------------------------------------------- */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *p = malloc(cap);
    size_t k;
    while (p && (k = fread(p + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *q = realloc(p, cap *= 2);
            if (!q) { free(p); p = NULL; }
            else p = q;
        }
    }
    fclose(f);
    *len = n;
    return p;
}

/* First occurrence of pat in p[0..n), or NULL (memmem is not C11). */
static const char *find_bytes(const char *p, size_t n, const char *pat, size_t m) {
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(p + i, pat, m) == 0) return p + i;
    return NULL;
}

static json_t *golden(void) {
    json_error_t je;
    json_t *g = json_load_file(KILN_SOURCE_DIR "/tests/text/data/pretok_golden.json", 0, &je);
    cr_assert_not_null(g, "tests/data/pretok_golden.json: %s (line %d)", je.text, je.line);
    return g;
}

/* Splits and checks the spans tile the text: in order, no gaps, none empty. */
static size_t split_ok(const char *pre, const char *text, size_t len, tok_span **sp) {
    size_t n = 99;
    kiln_err err = {0};
    int rc = tok_pretok_split(pre, text, len, sp, &n, &err);
    cr_assert_eq(rc, 0, "%s: %s", pre, err.msg);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq((*sp)[i].start, at, "%s: span %zu starts at %zu, expected %zu", pre, i, (*sp)[i].start, at);
        cr_assert_gt((*sp)[i].len, 0, "%s: span %zu is empty", pre, i);
        at += (*sp)[i].len;
    }
    cr_assert_eq(at, len, "%s: spans cover %zu of %zu bytes", pre, at, len);
    return n;
}

/* The pieces as "[a][b]..." for messages. */
static char *show(const char *text, const tok_span *sp, size_t n) {
    size_t cap = 16;
    for (size_t i = 0; i < n; i++) cap += sp[i].len + 2;
    char *s = malloc(cap), *w = s;
    for (size_t i = 0; i < n; i++) {
        *w++ = '[';
        memcpy(w, text + sp[i].start, sp[i].len);
        w += sp[i].len;
        *w++ = ']';
    }
    *w = 0;
    return s;
}

/* Checks the split of text into exactly the NULL-terminated pieces. */
static void expect_pieces(const char *pre, const char *text, size_t len, const char *const *want) {
    tok_span *sp = NULL;
    size_t n = split_ok(pre, text, len, &sp);
    size_t nw = 0;
    while (want[nw]) nw++;
    bool same = n == nw;
    for (size_t i = 0; same && i < n; i++)
        same = strlen(want[i]) == sp[i].len && memcmp(want[i], text + sp[i].start, sp[i].len) == 0;
    if (!same) {
        char *got = show(text, sp, n);
        size_t cap = 16;
        for (size_t i = 0; i < nw; i++) cap += strlen(want[i]) + 2;
        char *exp = malloc(cap), *w = exp;
        for (size_t i = 0; i < nw; i++) w += sprintf(w, "[%s]", want[i]);
        cr_expect_fail("%s: split of \"%s\"\n  got  %s\n  want %s", pre, text, got, exp);
        free(got);
        free(exp);
    }
    free(sp);
}

#define EXPECT(pre, text, ...) \
    expect_pieces(pre, text, sizeof(text) - 1, (const char *const[]){__VA_ARGS__, NULL})

/* Compares the split of text with a golden list of piece byte lengths. */
static void expect_golden(const char *pre, const char *text, size_t len, json_t *lens, const char *what) {
    tok_span *sp = NULL;
    size_t n = split_ok(pre, text, len, &sp);
    bool same = n == json_array_size(lens);
    for (size_t i = 0; same && i < n; i++) same = sp[i].len == (size_t)json_integer_value(json_array_get(lens, i));
    if (!same) {
        char *got = show(text, sp, n);
        tok_span *ws = calloc(json_array_size(lens) + 1, sizeof *ws);
        size_t at = 0, nw = json_array_size(lens);
        for (size_t i = 0; i < nw; i++) {
            size_t l = (size_t)json_integer_value(json_array_get(lens, i));
            if (at + l > len) { nw = i; break; }
            ws[i].start = at;
            ws[i].len = l;
            at += l;
        }
        char *exp = show(text, ws, nw);
        cr_expect_fail("%s, %s:\n  got  %s\n  want %s", pre, what, got, exp);
        free(got);
        free(exp);
        free(ws);
    }
    free(sp);
}

/* ---- hand-checked splits --------------------------------------------------------------- */

Test(tok_pretok, gpt2) {
    EXPECT("gpt-2", "Hello world", "Hello", " world");
    EXPECT("gpt-2", "Hello, world!", "Hello", ",", " world", "!");
    /* contractions are lower case only; 'RE is punctuation then letters */
    EXPECT("gpt-2", "I'm can't WE'RE you'll", "I", "'m", " can", "'t", " WE", "'", "RE", " you", "'ll");
    EXPECT("gpt-2", "1 12 123 1234 12345", "1", " 12", " 123", " 1234", " 12345");
    /* \s+(?!\S): a run before a word leaves its last space to the word */
    EXPECT("gpt-2", "a    b", "a", "   ", " b");
    EXPECT("gpt-2", "a\t\tb", "a", "\t", "\t", "b");
    EXPECT("gpt-2", "x \n y", "x", " \n", " y");
    EXPECT("gpt-2", "hello   ", "hello", "   ");
    EXPECT("gpt-2", "\n\n\n", "\n\n\n");
    EXPECT("gpt-2", " (", " (");
    EXPECT("gpt-2", "!!!!!! ...??", "!!!!!!", " ...??");
    EXPECT("gpt-2", "我想在apple工作", "我想在apple工作");
    EXPECT("gpt-2", "Führer café", "Führer", " café");
    /* combining marks are \p{M}: neither letters nor numbers */
    EXPECT("gpt-2", "cafe\xcc\x81 x", "cafe", "\xcc\x81", " x");
    EXPECT("gpt-2", " this is 🦙.cpp", " this", " is", " 🦙.", "cpp");
    EXPECT("gpt-2", "🚀 (normal)", "🚀", " (", "normal", ")");
}

Test(tok_pretok, llama3) {
    EXPECT("llama-bpe", "I'm WE'RE you'D 'Ve", "I", "'m", " WE", "'RE", " you", "'D", " '", "Ve");
    EXPECT("llama-bpe", "1 12 123 1234 12345", "1", " ", "12", " ", "123", " ", "123", "4", " ", "123", "45");
    EXPECT("llama-bpe", "a\n\nb", "a", "\n\n", "b");
    EXPECT("llama-bpe", "  \n  x", "  \n", " ", " x");
    EXPECT("llama-bpe", "x!!\n\ny", "x", "!!\n\n", "y");
    /* one non-letter, non-digit, non-newline may lead letters */
    EXPECT("llama-bpe", "Hello\tworld (x) a(b)", "Hello", "\tworld", " (", "x", ")", " a", "(b", ")");
    EXPECT("llama-bpe", "\t\tx", "\t", "\tx");
    EXPECT("llama-bpe", "a    ", "a", "    ");
    EXPECT("llama-bpe", "x33333y", "x", "333", "33", "y");
    EXPECT("llama-bpe", "нещо на Български", "нещо", " на", " Български");
    EXPECT("llama3", "Cửa Việt", "Cửa", " Việt");
}

Test(tok_pretok, qwen2_single_digits) {
    EXPECT("qwen2", "x12345 y", "x", "1", "2", "3", "4", "5", " y");
    EXPECT("qwen2", "I'M here", "I", "'M", " here");
    EXPECT("qwen2", "a\r\n\r\nb", "a", "\r\n\r\n", "b");
}

Test(tok_pretok, starcoder_digits_alone) {
    /* \p{N} first, so a space never joins a number */
    EXPECT("starcoder", "ab12 34", "ab", "1", "2", " ", "3", "4");
    EXPECT("refact", "x = 42;", "x", " =", " ", "4", "2", ";");
}

Test(tok_pretok, falcon_and_default) {
    EXPECT("falcon", "x 12345 (y)", "x", " ", "123", "45", " ", "(", "y", ")");
    EXPECT("falcon", " `x`", " ", "`", "x", "`");
    EXPECT("default", "x 12345 (y)", "x", " ", "123", "45", " ", "(", "y", ")");
    EXPECT("default", " `x`", " `", "x", "`");
}

Test(tok_pretok, deepseek) {
    EXPECT("deepseek-coder", "abc 123 déjà\n中文x", "abc", " ", "1", "2", "3", " déjà", "\n", "中文", "x");
    EXPECT("deepseek-llm", "Hello, 世界 123\n", "Hello", ",", " ", "世界", " ", "123", "\n");
    EXPECT("deepseek-llm", "ab  ", "ab", "  ");
}

/* Every name llama.cpp maps to a list splits as that list's first name. */
Test(tok_pretok, aliases) {
    static const char *const alias[][2] = {
        {"mpt", "gpt-2"},          {"olmo", "gpt-2"},          {"gpt-neox", "gpt-2"},
        {"jais", "gpt-2"},         {"llama3", "llama-bpe"},    {"dbrx", "llama-bpe"},
        {"smaug-bpe", "llama-bpe"}, {"chatglm-bpe", "llama-bpe"}, {"deepseek-r1-qwen", "qwen2"},
        {"stablelm2", "qwen2"},    {"megrez", "qwen2"},        {"refact", "starcoder"},
        {"command-r", "starcoder"}, {"smollm", "starcoder"},    {"codeshell", "starcoder"},
    };
    json_t *g = golden();
    json_t *extra = json_object_get(g, "extra_inputs");
    for (size_t a = 0; a < sizeof alias / sizeof alias[0]; a++) {
        cr_assert(tok_pretok_known(alias[a][0]), "%s", alias[a][0]);
        json_t *lens = json_object_get(json_object_get(g, "extra"), alias[a][1]);
        for (size_t i = 0; i < json_array_size(extra); i++) {
            json_t *s = json_array_get(extra, i);
            char what[64];
            snprintf(what, sizeof what, "extra input %zu", i);
            expect_golden(alias[a][0], json_string_value(s), json_string_length(s), json_array_get(lens, i), what);
        }
    }
    json_decref(g);
}

/* ---- golden splits --------------------------------------------------------------------- */

Test(tok_pretok, golden_extra_inputs) {
    json_t *g = golden();
    json_t *extra = json_object_get(g, "extra_inputs");
    cr_assert(json_array_size(extra) > 0);
    for (size_t f = 0; f < N_FAMS; f++) {
        cr_assert(tok_pretok_known(FAMS[f]), "%s", FAMS[f]);
        json_t *all = json_object_get(json_object_get(g, "extra"), FAMS[f]);
        cr_assert_eq(json_array_size(all), json_array_size(extra), "golden lacks %s", FAMS[f]);
        for (size_t i = 0; i < json_array_size(extra); i++) {
            json_t *s = json_array_get(extra, i);
            char what[64];
            snprintf(what, sizeof what, "extra input %zu", i);
            expect_golden(FAMS[f], json_string_value(s), json_string_length(s), json_array_get(all, i), what);
        }
    }
    json_decref(g);
}

/* Every family over the 46 inputs of every tokenizer test-vector file. */
Test(tok_pretok, golden_vocab_inputs) {
    const char *td = tu_testdata();
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tokenizer", td);
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot open %s", dir);
    json_t *g = golden();
    json_t *bytes = json_object_get(g, "vocab_input_bytes");
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    const size_t seplen = sizeof SEP - 1;
    int files = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        if (nl < 4 || strcmp(de->d_name + nl - 4, ".inp") != 0) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        size_t len;
        char *buf = read_file(path, &len);
        cr_assert_not_null(buf, "cannot read %s", path);
        files++;
        /* the file ends with the separator: every input is followed by one */
        size_t at = 0, k = 0;
        for (const char *p; at < len && (p = find_bytes(buf + at, len - at, SEP, seplen)); k++) {
            size_t n = (size_t)(p - (buf + at));
            cr_assert_lt(k, json_array_size(bytes), "%s: more inputs than the golden file knows", path);
            cr_assert_eq(n, (size_t)json_integer_value(json_array_get(bytes, k)),
                         "%s: input %zu changed (%zu bytes); regenerate the golden file", path, k, n);
            for (size_t f = 0; f < N_FAMS; f++) {
                json_t *lens = json_array_get(json_object_get(json_object_get(g, "vocab"), FAMS[f]), k);
                cr_assert_not_null(lens, "golden lacks %s", FAMS[f]);
                char what[1500];
                snprintf(what, sizeof what, "%s input %zu", de->d_name, k);
                expect_golden(FAMS[f], buf + at, n, lens, what);
            }
            at += n + seplen;
        }
        cr_assert_eq(k, json_array_size(bytes), "%s: %zu inputs", path, k);
        free(buf);
    }
    closedir(d);
    cr_assert_gt(files, 0, "no .inp files in %s", dir);
    json_decref(g);
}

/* ---- edges and bad input --------------------------------------------------------------- */

Test(tok_pretok, empty_text) {
    for (size_t f = 0; f < N_FAMS; f++) {
        tok_span *sp = NULL;
        size_t n = 7;
        kiln_err err = {0};
        cr_assert_eq(tok_pretok_split(FAMS[f], "", 0, &sp, &n, &err), 0, "%s", err.msg);
        cr_assert_eq(n, 0);
        cr_assert_eq(tok_pretok_split(FAMS[f], NULL, 0, &sp, &n, &err), 0, "%s", err.msg);
        cr_assert_eq(n, 0);
        free(sp);
    }
}

Test(tok_pretok, unknown_name) {
    tok_span *sp = NULL;
    size_t n = 7;
    kiln_err err = {0};
    cr_assert_not(tok_pretok_known("no-such-pre"));
    cr_assert_not(tok_pretok_known(NULL));
    cr_assert_not(tok_pretok_known(""));
    cr_assert_not(tok_pretok_known("GPT-2"));
    cr_assert_eq(tok_pretok_split("no-such-pre", "abc", 3, &sp, &n, &err), -1);
    cr_assert_eq(n, 0);
    cr_assert(strstr(err.msg, "no-such-pre"), "%s", err.msg);
    cr_assert_eq(tok_pretok_split(NULL, "abc", 3, &sp, &n, &err), -1);
    cr_assert_eq(tok_pretok_split(NULL, "abc", 3, &sp, &n, NULL), -1); /* no room for a message */
    cr_assert_null(sp);
    for (size_t f = 0; f < N_FAMS; f++) cr_assert(tok_pretok_known(FAMS[f]), "%s", FAMS[f]);
}

Test(tok_pretok, bad_arguments) {
    tok_span *sp = NULL;
    size_t n = 7;
    kiln_err err = {0};
    cr_assert_eq(tok_pretok_split("gpt-2", NULL, 3, &sp, &n, &err), -1);
    cr_assert_eq(tok_pretok_split("gpt-2", "abc", 3, NULL, &n, &err), -1);
    cr_assert_eq(tok_pretok_split("gpt-2", "abc", 3, &sp, NULL, &err), -1);
    cr_assert_null(sp);
}

Test(tok_pretok, invalid_utf8) {
    static const struct { const char *s; size_t n; } bad[] = {
        {"\x80", 1},                 /* lone continuation */
        {"ab\xc3", 3},               /* cut short at the end */
        {"\xc3(", 2},                /* continuation missing */
        {"\xc0\x80", 2},             /* overlong NUL */
        {"\xc1\xbf", 2},             /* overlong */
        {"\xe0\x80\x80", 3},         /* overlong 3-byte */
        {"\xed\xa0\x80", 3},         /* surrogate U+D800 */
        {"\xf0\x80\x80\x80", 4},     /* overlong 4-byte */
        {"\xf4\x90\x80\x80", 4},     /* past U+10FFFF */
        {"\xf5\x80\x80\x80", 4},     /* no such lead byte */
        {"\xff", 1},
        {"hello \xe2\x82 world", 14}, /* cut short in the middle */
    };
    for (size_t f = 0; f < N_FAMS; f++)
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            tok_span *sp = NULL;
            size_t n = 7;
            kiln_err err = {0};
            cr_assert_eq(tok_pretok_split(FAMS[f], bad[i].s, bad[i].n, &sp, &n, &err), -1,
                         "%s: bad input %zu accepted", FAMS[f], i);
            cr_assert_eq(n, 0);
            cr_assert(strstr(err.msg, "UTF-8"), "%s", err.msg);
            cr_assert_null(sp);
        }
}

/* NUL and other controls are text like any other; the span buffer may be reused. */
Test(tok_pretok, nul_bytes_and_buffer_reuse) {
    static const char text[] = "a\0b \x01\x02 \xf4\x8f\xbf\xbf\xef\xbf\xbf";
    tok_span *sp = NULL;
    for (size_t f = 0; f < N_FAMS; f++) {
        split_ok(FAMS[f], text, sizeof text - 1, &sp);
        split_ok(FAMS[f], "Hello world, again and again", 28, &sp);
    }
    free(sp);
}

/* Random text built from characters of every kind: spans always tile it and start on
 * character boundaries. */
Test(tok_pretok, random_text_tiles) {
    static const char *const parts[] = {
        "a", "Z", "é", "\xcc\x81", "中", "한", "🦙", "😶\xe2\x80\x8d🌫️", "0", "7", "½", "٣", " ", "  ",
        "\t", "\n", "\r", "\r\n", "\xc2\xa0", "\xe3\x80\x80", "\xc2\x85", "'", "'s", "'S", "'ll", "!",
        "...", "$", "`", "~", "(", "\xef\xbc\x81", "\xe2\x80\x9c", "\xcd\xb8", "\xee\x80\x80", "\x01",
    };
    const size_t np = sizeof parts / sizeof parts[0];
    uint64_t x = 0x9E3779B97F4A7C15ull;
    char buf[4096];
    tok_span *sp = NULL;
    for (int round = 0; round < 300; round++) {
        size_t len = 0;
        int count = (int)(x % 60);
        for (int k = 0; k < count; k++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            const char *p = parts[x % np];
            size_t l = strlen(p);
            memcpy(buf + len, p, l);
            len += l;
        }
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        for (size_t f = 0; f < N_FAMS; f++) {
            size_t n = split_ok(FAMS[f], buf, len, &sp);
            for (size_t i = 0; i < n; i++)
                cr_assert(((unsigned char)buf[sp[i].start] & 0xC0) != 0x80, "%s: span %zu starts mid-character",
                          FAMS[f], i);
        }
    }
    free(sp);
}

/* ---- speed ----------------------------------------------------------------------------- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

Test(tok_pretok, speed_100k) {
    static const char sample[] =
        "The quick brown fox can't jump over 1234567 lazy dogs; isn't it?\n"
        "    def f(x):\n\t\treturn x**2 + 3.14159  # comment!!!\n\n"
        "Führer, café, naïve — «quotes» “curly” ¿qué? Cửa Việt нещо на Български\n"
        "我想在apple工作1314151天～ 한국어 テキスト ひらがな 🦙🚀😶\u200d🌫️ ✅ ...???\r\n"
        "       many     spaces       here      \n";
    const size_t target = 100 * 1024, sl = sizeof sample - 1;
    char *text = malloc(target + sl);
    size_t len = 0;
    while (len < target) {
        memcpy(text + len, sample, sl);
        len += sl;
    }
    tok_span *sp = NULL;
    for (size_t f = 0; f < N_FAMS; f++) {
        split_ok(FAMS[f], text, len, &sp); /* warm */
        double t0 = now_ms();
        size_t n = split_ok(FAMS[f], text, len, &sp);
        double ms = now_ms() - t0;
        cr_log_info("%-15s %zu bytes -> %zu pieces in %.2f ms", FAMS[f], len, n, ms);
        cr_expect_lt(ms, 100.0, "%s: %.1f ms for %zu bytes", FAMS[f], ms, len);
    }
    /* a pathological run: 100k spaces then a word */
    memset(text, ' ', target);
    memcpy(text + target - 4, "word", 4);
    for (size_t f = 0; f < N_FAMS; f++) {
        double t0 = now_ms();
        split_ok(FAMS[f], text, target, &sp);
        double ms = now_ms() - t0;
        cr_expect_lt(ms, 100.0, "%s: %.1f ms for a long run of spaces", FAMS[f], ms);
    }
    free(sp);
    free(text);
}
