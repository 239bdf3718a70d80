/* Hugging Face tokenizer import: real Qwen3 and Llama 3 files, kiln's byte-level default,
 * padding, the GGUF keys as llama.cpp's converter writes them, and bad input. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "modelgen/tok_import.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>


/* ---- helpers --------------------------------------------------------------------------- */



#define QWEN3_JSON tu_data_file("tokenizers/qwen3/tokenizer.json")
#define QWEN3_CFG tu_data_file("tokenizers/qwen3/tokenizer_config.json")
#define LLAMA3_JSON tu_data_file("tokenizers/llama3/tokenizer.json")
#define LLAMA3_CFG tu_data_file("tokenizers/llama3/tokenizer_config.json")

/* A temporary file holding text; the caller unlinks and frees the path. */
static char *tmp_file(const char *text) {
    char *path = strdup("/tmp/kiln-tok-XXXXXX");
    cr_assert_not_null(path);
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    size_t n = strlen(text);
    cr_assert_eq(write(fd, text, n), (ssize_t)n);
    close(fd);
    return path;
}

static void rm_file(char *path) {
    unlink(path);
    free(path);
}

static bool tok_is(const tok_vocab *v, uint64_t id, const char *s) {
    return id < v->n_tokens && v->tokens[id].len == strlen(s) && memcmp(v->tokens[id].ptr, s, strlen(s)) == 0;
}

/* A tiny byte-level BPE tokenizer.json with the given pre_tokenizer, added_tokens and
 * post_processor (JSON fragments; "null" for none). */
static char *mini_tokenizer(const char *pre, const char *added, const char *post) {
    char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"version\":\"1.0\",\"added_tokens\":%s,\"normalizer\":null,\"pre_tokenizer\":%s,"
             "\"post_processor\":%s,\"decoder\":{\"type\":\"ByteLevel\"},"
             "\"model\":{\"type\":\"BPE\",\"byte_fallback\":false,"
             "\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"\\u0120\":3,\"\\u0120a\":4},"
             "\"merges\":[\"a b\",\"\\u0120 a\"]}}",
             added, pre, post);
    return tmp_file(buf);
}

#define PRE_GPT2 "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true}"
#define ADDED_BOS_EOS                                                                              \
    "[{\"id\":5,\"content\":\"<s>\",\"special\":true},{\"id\":6,\"content\":\"</s>\",\"special\":true}," \
    "{\"id\":7,\"content\":\"<|eot|>\",\"special\":true}]"

static tok_vocab import_ok(const char *json, const char *cfg, const char *pre) {
    tok_vocab v;
    kiln_err err = {0};
    int r = tok_import_hf(json, cfg, pre, &v, &err);
    cr_assert_eq(r, 0, "import failed: %s", err.msg);
    return v;
}

static void import_fails(const char *json, const char *cfg, const char *pre, const char *needle) {
    tok_vocab v;
    kiln_err err = {0};
    int r = tok_import_hf(json, cfg, pre, &v, &err);
    cr_assert_eq(r, -1, "import should fail (wanted \"%s\")", needle);
    cr_assert(strstr(err.msg, needle) != NULL, "error \"%s\" does not mention \"%s\"", err.msg, needle);
    cr_assert_eq(v.n_tokens, 0);
    cr_assert_null(v.tokens);
    tok_vocab_free(&v);
}

/* ---- real tokenizers -------------------------------------------------------------------- */

Test(tok_import, qwen3) {
    tok_vocab v = import_ok(QWEN3_JSON, QWEN3_CFG, NULL);
    cr_assert_eq(v.n_tokens, 151669);
    cr_assert_str_eq(v.model, "gpt2");
    cr_assert_str_eq(v.pre, "qwen2");
    cr_assert(tok_is(&v, 0, "!"));
    cr_assert_eq(v.types[0], TOK_TYPE_NORMAL);
    cr_assert_eq(tok_vocab_find(&v, "<|im_end|>"), 151645);
    cr_assert_eq(v.types[151645], TOK_TYPE_CONTROL);
    cr_assert_eq(tok_vocab_find(&v, "<|endoftext|>"), 151643);
    cr_assert_eq(v.types[151643], TOK_TYPE_CONTROL);
    cr_assert_eq(tok_vocab_find(&v, "<think>"), 151667);
    cr_assert_eq(v.types[151667], TOK_TYPE_USER_DEFINED);
    cr_assert_eq(v.types[tok_vocab_find(&v, "<tool_call>")], TOK_TYPE_USER_DEFINED);
    /* not marked special, but looks it: the converter makes it control */
    cr_assert_eq(v.types[tok_vocab_find(&v, "<|fim_prefix|>")], TOK_TYPE_CONTROL);
    /* merges came as [a, b] pairs */
    cr_assert_eq(v.n_merges, 151387);
    cr_assert_str_eq(v.merges[0], "\xC4\xA0 \xC4\xA0");
    cr_assert_str_eq(v.merges[2], "i n");
    /* special tokens: eos and pad from tokenizer_config.json; bos is null there */
    cr_assert_eq(v.eos_id, 151645);
    cr_assert_eq(v.pad_id, 151643);
    cr_assert_eq(v.bos_id, -1);
    cr_assert_eq(v.unk_id, -1);
    cr_assert_eq(v.add_bos, 0);
    cr_assert_eq(v.add_eos, -1);
    cr_assert_eq(v.eot_id, 151645);
    cr_assert_eq(v.write_eot, 0);
    cr_assert_not_null(v.chat_template);
    cr_assert(strstr(v.chat_template, "<|im_start|>") != NULL);
    tok_vocab_free(&v);
}

Test(tok_import, llama3) {
    tok_vocab v = import_ok(LLAMA3_JSON, LLAMA3_CFG, NULL);
    cr_assert_eq(v.n_tokens, 128256);
    cr_assert_str_eq(v.pre, "llama-bpe");
    cr_assert(tok_is(&v, 128000, "<|begin_of_text|>"));
    cr_assert_eq(v.types[128000], TOK_TYPE_CONTROL);
    cr_assert_eq(v.bos_id, 128000);
    cr_assert_eq(v.eos_id, 128001);
    cr_assert_eq(v.eot_id, 128009);
    cr_assert(tok_is(&v, 128009, "<|eot_id|>"));
    cr_assert_eq(v.write_eot, 0);
    cr_assert_eq(v.types[128255], TOK_TYPE_CONTROL);
    cr_assert_eq(v.types[1000], TOK_TYPE_NORMAL);
    /* this tokenizer.json's post_processor is plain ByteLevel and the config names no
     * add_bos_token: the converter writes no flag (llama.cpp then defaults to true) */
    cr_assert_eq(v.add_bos, -1);
    cr_assert_eq(v.n_merges, 280147);
    cr_assert_str_eq(v.merges[0], "\xC4\xA0 \xC4\xA0");
    cr_assert_str_eq(v.merges[4], "i n");
    cr_assert_not_null(v.chat_template);
    cr_assert(strstr(v.chat_template, "<|start_header_id|>") != NULL);
    tok_vocab_free(&v);
}

Test(tok_import, load_time) {
    const char *q = QWEN3_JSON, *qc = QWEN3_CFG;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    tok_vocab v = import_ok(q, qc, NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
#if defined(__SANITIZE_ADDRESS__)
    double limit = 10.0;
#else
    double limit = 2.0;
#endif
    cr_assert(s < limit, "importing qwen3 took %.2f s", s);
    tok_vocab_free(&v);
}

Test(tok_import, without_config_and_with_pre_override) {
    tok_vocab v = import_ok(QWEN3_JSON, NULL, "deepseek-r1-qwen");
    cr_assert_str_eq(v.pre, "deepseek-r1-qwen");
    cr_assert_eq(v.n_tokens, 151669);
    cr_assert_eq(v.eos_id, -1);
    cr_assert_eq(v.pad_id, -1);
    cr_assert_eq(v.add_bos, -1);
    cr_assert_null(v.chat_template);
    cr_assert_eq(v.eot_id, 151645); /* found by name, for kiln's use */
    tok_vocab_free(&v);
}

Test(tok_import, pad_real_vocab_to_model_size) {
    tok_vocab v = import_ok(QWEN3_JSON, QWEN3_CFG, NULL);
    kiln_err err = {0};
    cr_assert_eq(tok_vocab_pad(&v, 151936, &err), 0, "%s", err.msg);
    cr_assert_eq(v.n_tokens, 151936);
    cr_assert(tok_is(&v, 151669, "[PAD151669]"));
    cr_assert(tok_is(&v, 151935, "[PAD151935]"));
    cr_assert_eq(v.types[151935], TOK_TYPE_UNUSED);
    cr_assert_eq(tok_vocab_pad(&v, 151000, &err), -1);
    cr_assert_eq(v.n_tokens, 151936);
    tok_vocab_free(&v);
}

/* ---- kiln's byte-level default ------------------------------------------------------------ */

/* Every merge joins two tokens into a third, all in the vocab. */
static void check_merges_closed(const tok_vocab *v) {
    for (uint64_t i = 0; i < v->n_merges; i++) {
        const char *m = v->merges[i], *sp = strchr(m, ' ');
        cr_assert_not_null(sp);
        char a[16] = {0}, b[16] = {0}, ab[32] = {0};
        memcpy(a, m, (size_t)(sp - m));
        strcpy(b, sp + 1);
        snprintf(ab, sizeof ab, "%s%s", a, b);
        cr_assert_geq(tok_vocab_find(v, a), 0, "merge %s: left part missing", m);
        cr_assert_geq(tok_vocab_find(v, b), 0, "merge %s: right part missing", m);
        cr_assert_geq(tok_vocab_find(v, ab), 0, "merge %s: result missing", m);
    }
}

Test(tok_import, bytelevel_1000) {
    tok_vocab v;
    kiln_err err = {0};
    cr_assert_eq(tok_vocab_bytelevel(1000, &v, &err), 0, "%s", err.msg);
    cr_assert_eq(v.n_tokens, 1000);
    cr_assert_str_eq(v.model, "gpt2");
    cr_assert_str_eq(v.pre, "default");
    cr_assert(tok_is(&v, 0, "\xC4\x80"));   /* byte 0 -> U+0100 */
    cr_assert(tok_is(&v, 10, "\xC4\x8A"));  /* '\n' -> Ċ */
    cr_assert(tok_is(&v, 32, "\xC4\xA0"));  /* ' ' -> Ġ */
    cr_assert(tok_is(&v, 'a', "a"));
    cr_assert(tok_is(&v, 127, "\xC4\xA1")); /* DEL -> ġ */
    cr_assert(tok_is(&v, 173, "\xC5\x83")); /* soft hyphen -> Ń */
    cr_assert(tok_is(&v, 255, "\xC3\xBF")); /* ÿ stays */
    for (int i = 0; i < 256; i++) cr_assert_eq(v.types[i], TOK_TYPE_NORMAL);
    cr_assert(tok_is(&v, 256, "<|begin_of_text|>"));
    cr_assert(tok_is(&v, 257, "<|end_of_text|>"));
    cr_assert_eq(v.types[256], TOK_TYPE_CONTROL);
    cr_assert_eq(v.types[257], TOK_TYPE_CONTROL);
    cr_assert_eq(v.bos_id, 256);
    cr_assert_eq(v.eos_id, 257);
    cr_assert_eq(v.add_bos, 1);
    cr_assert_eq(v.add_eos, 0);
    cr_assert(tok_is(&v, 258, "\xC4\xA0" "a"));
    cr_assert_str_eq(v.merges[0], "\xC4\xA0 a");
    cr_assert(tok_is(&v, 284, "aa"));
    cr_assert_eq(v.n_merges, 728);
    cr_assert(tok_is(&v, 986, "[PAD986]"));
    cr_assert_eq(v.types[999], TOK_TYPE_UNUSED);
    check_merges_closed(&v);
    tok_vocab_free(&v);
}

Test(tok_import, bytelevel_300_and_limits) {
    tok_vocab v;
    kiln_err err = {0};
    cr_assert_eq(tok_vocab_bytelevel(300, &v, &err), 0, "%s", err.msg);
    cr_assert_eq(v.n_tokens, 300);
    cr_assert_eq(v.n_merges, 42);
    cr_assert(tok_is(&v, 299, "ap"));
    check_merges_closed(&v);
    tok_vocab_free(&v);

    cr_assert_eq(tok_vocab_bytelevel(258, &v, &err), 0, "%s", err.msg);
    cr_assert_eq(v.n_merges, 0);
    tok_vocab_free(&v);

    cr_assert_eq(tok_vocab_bytelevel(257, &v, &err), -1);
    cr_assert(strstr(err.msg, "258") != NULL, "%s", err.msg);
    cr_assert_null(v.tokens);
    cr_assert_eq(tok_vocab_bytelevel(0, &v, &err), -1);
    cr_assert_eq(tok_vocab_bytelevel((uint64_t)TOK_MAX_VOCAB + 1, &v, &err), -1);
}

Test(tok_import, pad) {
    tok_vocab v;
    kiln_err err = {0};
    cr_assert_eq(tok_vocab_bytelevel(300, &v, &err), 0, "%s", err.msg);
    cr_assert_eq(tok_vocab_pad(&v, 300, &err), 0, "%s", err.msg);
    cr_assert_eq(v.n_tokens, 300);
    cr_assert_eq(tok_vocab_pad(&v, 310, &err), 0, "%s", err.msg);
    cr_assert_eq(v.n_tokens, 310);
    cr_assert(tok_is(&v, 300, "[PAD300]"));
    cr_assert(tok_is(&v, 309, "[PAD309]"));
    cr_assert_eq(v.types[309], TOK_TYPE_UNUSED);
    cr_assert_eq(tok_vocab_pad(&v, 299, &err), -1);
    cr_assert(strstr(err.msg, "310") != NULL, "%s", err.msg);
    tok_vocab_free(&v);
    tok_vocab_free(&v); /* freeing twice is harmless */
}

/* ---- converter rules on small files ------------------------------------------------------- */

Test(tok_import, id_gaps_and_added_types) {
    char *j = tmp_file(
        "{\"added_tokens\":[{\"id\":6,\"content\":\"<|x|>\",\"special\":false},"
        "{\"id\":7,\"content\":\"\\u2581hi\",\"special\":false},{\"id\":8,\"content\":\"<s>\",\"special\":true}],"
        "\"pre_tokenizer\":" PRE_GPT2 ",\"post_processor\":null,"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":3},\"merges\":[[\"a\",\"b\"],[\"a "
        "b\",\"c\"]]}}");
    tok_vocab v = import_ok(j, NULL, NULL);
    cr_assert_str_eq(v.pre, "gpt-2");
    cr_assert_eq(v.n_tokens, 9);
    cr_assert(tok_is(&v, 2, "[PAD2]"));
    cr_assert_eq(v.types[2], TOK_TYPE_UNUSED);
    cr_assert(tok_is(&v, 5, "[PAD5]"));
    cr_assert_eq(v.types[6], TOK_TYPE_CONTROL);      /* looks special */
    cr_assert(tok_is(&v, 7, " hi"));                 /* ▁ pre-normalized to a space */
    cr_assert_eq(v.types[7], TOK_TYPE_USER_DEFINED);
    cr_assert_eq(v.types[8], TOK_TYPE_CONTROL);
    cr_assert_eq(v.n_merges, 2);
    cr_assert_str_eq(v.merges[0], "a b");
    cr_assert_str_eq(v.merges[1], "a\xC4\xA0" "b c"); /* a space inside a part is spelled Ġ */
    rm_file(j);
    tok_vocab_free(&v);
}

Test(tok_import, template_processing_sets_add_bos) {
    /* Llama 3's original post_processor: bos, then the sequence */
    char *j = mini_tokenizer(
        PRE_GPT2, ADDED_BOS_EOS,
        "{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\"},"
        "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
        "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
        "{\"Sequence\":{\"id\":\"A\"}},{\"SpecialToken\":{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":\"B\"}}]}]}");
    char *c = tmp_file("{\"bos_token\":\"<s>\",\"eos_token\":{\"content\":\"</s>\",\"lstrip\":false},"
                       "\"pad_token\":null,\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"T\"},"
                       "{\"name\":\"default\",\"template\":\"D\"}]}");
    tok_vocab v = import_ok(j, c, NULL);
    cr_assert_eq(v.bos_id, 5);
    cr_assert_eq(v.eos_id, 6);   /* {"content": ...} form */
    cr_assert_eq(v.pad_id, -1);  /* null means absent */
    cr_assert_eq(v.add_bos, 1);
    cr_assert_eq(v.add_eos, -1);
    cr_assert_eq(v.add_sep, 0);  /* <s> between A and B is neither sep nor eos */
    cr_assert_eq(v.write_eot, 0);
    cr_assert_str_eq(v.chat_template, "D");
    tok_vocab_free(&v);
    rm_file(c);

    /* add_bos_token in the config wins over the template */
    c = tmp_file("{\"bos_token\":\"<s>\",\"add_bos_token\":false,\"add_eos_token\":true}");
    v = import_ok(j, c, NULL);
    cr_assert_eq(v.add_bos, 0);
    cr_assert_eq(v.add_eos, 1);
    tok_vocab_free(&v);
    rm_file(c);
    rm_file(j);
}

Test(tok_import, template_processing_moves_eos_to_eot) {
    /* the template ends with a token other than the config's eos: that one becomes eot */
    char *j = mini_tokenizer(PRE_GPT2, ADDED_BOS_EOS,
                             "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
                             "{\"Sequence\":{\"id\":\"A\"}},{\"SpecialToken\":{\"id\":\"</s>\"}}],\"pair\":[]}");
    char *c = tmp_file("{\"bos_token\":\"<s>\",\"eos_token\":\"<|eot|>\"}");
    tok_vocab v = import_ok(j, c, NULL);
    cr_assert_eq(v.bos_id, 5);
    cr_assert_eq(v.eos_id, 6);
    cr_assert_eq(v.eot_id, 7);
    cr_assert_eq(v.write_eot, 1);
    cr_assert_eq(v.add_bos, 1);
    cr_assert_eq(v.add_eos, 1);
    tok_vocab_free(&v);
    rm_file(c);
    rm_file(j);
}

Test(tok_import, roberta_processing) {
    char *j = mini_tokenizer(PRE_GPT2, ADDED_BOS_EOS,
                             "{\"type\":\"RobertaProcessing\",\"sep\":[\"</s>\",6],\"cls\":[\"<s>\",5]}");
    char *c = tmp_file("{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}");
    tok_vocab v = import_ok(j, c, NULL);
    cr_assert_eq(v.add_bos, 1);
    cr_assert_eq(v.add_eos, 1);
    cr_assert_eq(v.add_sep, 1);
    cr_assert_eq(v.cls_id, 5);
    cr_assert_eq(v.sep_id, 6);
    tok_vocab_free(&v);
    rm_file(c);
    rm_file(j);
}

Test(tok_import, chat_template_jinja_beside_config) {
    char dir[] = "/tmp/kiln-tokdir-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char cfg[256], jinja[256];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", dir);
    FILE *f = fopen(cfg, "w");
    fputs("{\"eos_token\":\"</s>\"}", f);
    fclose(f);
    f = fopen(jinja, "w");
    fputs("{{ messages }}", f);
    fclose(f);
    char *j = mini_tokenizer(PRE_GPT2, ADDED_BOS_EOS, "null");
    tok_vocab v = import_ok(j, cfg, NULL);
    cr_assert_str_eq(v.chat_template, "{{ messages }}");
    cr_assert_eq(v.eos_id, 6);
    tok_vocab_free(&v);
    rm_file(j);
    unlink(cfg);
    unlink(jinja);
    rmdir(dir);
}

Test(tok_import, model_config_fills_absent_ids) {
    tok_vocab v = import_ok(QWEN3_JSON, QWEN3_CFG, NULL);
    char *c = tmp_file("{\"bos_token_id\":151643,\"eos_token_id\":151645,\"vocab_size\":151936}");
    kiln_err err = {0};
    cr_assert_eq(tok_import_hf_model_config(c, &v, &err), 0, "%s", err.msg);
    cr_assert_eq(v.bos_id, 151643);
    cr_assert_eq(v.eos_id, 151645);
    tok_vocab_free(&v);
    rm_file(c);
}

Test(tok_import, pre_families) {
    static const struct { const char *pre, *name;
    } cases[] = {
        {"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
         "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}]}",
         "starcoder"},
        {"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Punctuation\",\"behavior\":\"Contiguous\"},"
         "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
         "{\"type\":\"Digits\",\"individual_digits\":false},{\"type\":\"Split\",\"pattern\":{\"Regex\":"
         "\"[0-9][0-9][0-9]\"},\"behavior\":\"Isolated\",\"invert\":false}]}",
         "falcon"},
        {"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[\\r\\n]\"},"
         "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s?\\\\p{L}+\"},"
         "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s?\\\\p{P}+\"},"
         "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"Split\",\"pattern\":{\"Regex\":"
         "\"[\xE4\xB8\x80-\xE9\xBE\xA5\xE0\xA0\x80-\xE4\xB8\x80\xEA\xB0\x80-\xED\x9F\xBF]+\"},\"behavior\":"
         "\"Isolated\","
         "\"invert\":false},{\"type\":\"Digits\",\"individual_digits\":true},{\"type\":\"ByteLevel\","
         "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}",
         "deepseek-coder"},
        {"{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}", "gpt-2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *j = mini_tokenizer(cases[i].pre, "[]", "null");
        tok_vocab v = import_ok(j, NULL, NULL);
        cr_assert_str_eq(v.pre, cases[i].name);
        tok_vocab_free(&v);
        rm_file(j);
    }
}

/* A Sequence of isolated regex Splits, then Digits(individual) if digits, then ByteLevel;
 * built with jansson so the regexes need one level of C escaping only. */
static char *split_seq_tokenizer(const char *const *res, size_t n, bool digits) {
    json_t *steps = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(steps, json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex",
                                               res[i], "behavior", "Isolated", "invert", 0));
    if (digits) json_array_append_new(steps, json_pack("{s:s, s:b}", "type", "Digits", "individual_digits", 1));
    json_array_append_new(steps, json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                                           "trim_offsets", 1, "use_regex", 0));
    json_t *pre = json_pack("{s:s, s:o}", "type", "Sequence", "pretokenizers", steps);
    char *text = json_dumps(pre, 0);
    json_decref(pre);
    char *path = mini_tokenizer(text, "[]", "null");
    free(text);
    return path;
}

Test(tok_import, pre_families_from_regexes) {
    static const char *const deepseek_llm[] = {
        "[\r\n]",
        "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-"
        "Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-"
        "Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
        "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
        "\\s+$",
        "[一-龥ࠀ-一가-퟿]+",
    };
    /* literal CR/LF inside the class, as DeepSeek-V3's file has them */
    static const char *const deepseek_v3[] = {
        "\\p{N}{1,3}",
        "[一-龥぀-ゟ゠-ヿ]+",
        ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
         " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
    };
    static const char *const gpt4o[] = {
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
        "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
        "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    };
    static const char *const llama3[] = {
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
        "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    };
    static const struct { const char *const *res; size_t n; bool digits; const char *name; } cases[] = {
        {deepseek_llm, 5, true, "deepseek-llm"},
        {deepseek_v3, 3, false, "deepseek-v3"},
        {gpt4o, 1, false, "gpt-4o"},
        {llama3, 1, false, "llama-bpe"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *j = split_seq_tokenizer(cases[i].res, cases[i].n, cases[i].digits);
        tok_vocab v = import_ok(j, NULL, NULL);
        cr_assert_str_eq(v.pre, cases[i].name);
        tok_vocab_free(&v);
        rm_file(j);
    }
    /* one step off is not the family */
    char *j = split_seq_tokenizer(deepseek_llm, 4, true);
    import_fails(j, NULL, NULL, "--pre");
    rm_file(j);
    j = split_seq_tokenizer(llama3, 1, true);
    import_fails(j, NULL, NULL, "--pre");
    rm_file(j);
}

/* ---- bad input ---------------------------------------------------------------------------- */

Test(tok_import, missing_file) {
    import_fails("/nonexistent/kiln/tokenizer.json", NULL, NULL, "/nonexistent/kiln/tokenizer.json");
    char *j = mini_tokenizer(PRE_GPT2, "[]", "null");
    import_fails(j, "/nonexistent/kiln/tokenizer_config.json", NULL, "tokenizer_config.json");
    rm_file(j);
}

Test(tok_import, invalid_json) {
    char *j = tmp_file("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,}");
    import_fails(j, NULL, NULL, "invalid JSON");
    rm_file(j);
    j = tmp_file("[1, 2, 3]");
    import_fails(j, NULL, NULL, "not a JSON object");
    rm_file(j);
    j = tmp_file("");
    import_fails(j, NULL, NULL, "invalid JSON");
    rm_file(j);
}

Test(tok_import, model_not_bpe) {
    char *j = tmp_file("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"[UNK]\":0}}}");
    import_fails(j, NULL, NULL, "WordPiece");
    rm_file(j);
    j = tmp_file("{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0.0]]}}");
    import_fails(j, NULL, NULL, "Unigram");
    rm_file(j);
    j = tmp_file("{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"a\":0},\"merges\":[]}}");
    import_fails(j, NULL, NULL, "byte_fallback");
    rm_file(j);
    j = tmp_file("{\"model\":{\"vocab\":{\"a\":0}}}");
    import_fails(j, NULL, NULL, "type");
    rm_file(j);
}

Test(tok_import, unknown_pre_needs_override) {
    const char *pre = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
                      "\"\\\\p{L}+|\\\\p{N}\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
                      "\"add_prefix_space\":false,\"use_regex\":false}]}";
    char *j = mini_tokenizer(pre, "[]", "null");
    import_fails(j, NULL, NULL, "--pre");
    tok_vocab v = import_ok(j, NULL, "gpt-2");
    cr_assert_str_eq(v.pre, "gpt-2");
    tok_vocab_free(&v);
    rm_file(j);
    j = mini_tokenizer("{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\"}", "[]", "null");
    import_fails(j, NULL, NULL, "--pre");
    rm_file(j);
    j = mini_tokenizer("null", "[]", "null");
    import_fails(j, NULL, NULL, "--pre");
    rm_file(j);
}

Test(tok_import, bad_vocab_and_merges) {
    static const char *const bad[][2] = {
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0}}}", "id 0"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1}}}", "outside"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999999}}}", "outside"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"x\"}}}", "integer id"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{}}}", "empty"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":[]}}", "vocab"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[[\"a\"]]}}", "merges format"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\", 3]}}", "merge 1"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":{}}}", "merges"},
        {"{\"added_tokens\":[{\"id\":0,\"content\":\"x\"}],\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}", "id 0"},
        {"{\"added_tokens\":[{\"content\":\"x\"}],\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}", "integer id"},
        {"{\"added_tokens\":[{\"id\":1,\"content\":\"x\"},{\"id\":2,\"content\":\"x\"}],"
         "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}", "twice"},
        {"{\"added_tokens\":{},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}", "added_tokens"},
        {"{\"model\":3}", "model"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *j = tmp_file(bad[i][0]);
        import_fails(j, NULL, "gpt-2", bad[i][1]);
        rm_file(j);
    }
}

/* ---- writing ---------------------------------------------------------------------------- */

static char *tmp_gguf_path(void) {
    char *p = tmp_file("");
    return p;
}

static gguf_file *write_and_open(const tok_vocab *v, const char *path) {
    kiln_err e = {0};
    gguf_writer *w = gguf_writer_create(path, &e);
    cr_assert_not_null(w, "%s", e.msg);
    cr_assert_eq(tok_vocab_write(v, w, &e), 0, "%s", e.msg);
    cr_assert_eq(gguf_writer_begin_data(w, &e), 0, "%s", e.msg);
    cr_assert_eq(gguf_writer_finish(w, &e), 0, "%s", e.msg);
    gguf_writer_destroy(w);
    gguf_file *g = gguf_open(path, &e);
    cr_assert_not_null(g, "%s", e.msg);
    return g;
}

Test(tok_import, write_qwen3_reads_back) {
    tok_vocab v = import_ok(QWEN3_JSON, QWEN3_CFG, NULL);
    char *path = tmp_gguf_path();
    gguf_file *g = write_and_open(&v, path);
    kiln_err e;
    gguf_str s;
    cr_assert_eq(gguf_get_str(g, "tokenizer.ggml.model", &s, &e), 0, "%s", e.msg);
    cr_assert(gguf_str_eq(s, "gpt2"));
    cr_assert_eq(gguf_get_str(g, "tokenizer.ggml.pre", &s, &e), 0, "%s", e.msg);
    cr_assert(gguf_str_eq(s, "qwen2"));
    const gguf_array *a;
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STR, &a, &e), 0, "%s", e.msg);
    cr_assert_eq(a->n, 151669);
    cr_assert(gguf_str_eq(gguf_arr_at(a, 151645).v.str, "<|im_end|>"));
    cr_assert(gguf_str_eq(gguf_arr_at(a, 0).v.str, "!"));
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_VT_I32, &a, &e), 0, "%s", e.msg);
    cr_assert_eq(a->n, 151669);
    cr_assert_eq(gguf_arr_at(a, 151645).v.i, TOK_TYPE_CONTROL);
    cr_assert_eq(gguf_arr_at(a, 151667).v.i, TOK_TYPE_USER_DEFINED);
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_VT_STR, &a, &e), 0, "%s", e.msg);
    cr_assert_eq(a->n, 151387);
    cr_assert(gguf_str_eq(gguf_arr_at(a, 0).v.str, "\xC4\xA0 \xC4\xA0"));
    uint32_t u;
    cr_assert_eq(gguf_find(g, "tokenizer.ggml.eos_token_id")->type, GGUF_VT_U32);
    cr_assert_eq(gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u, &e), 0, "%s", e.msg);
    cr_assert_eq(u, 151645);
    cr_assert_eq(gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &u, &e), 0, "%s", e.msg);
    cr_assert_eq(u, 151643);
    cr_assert_null(gguf_find(g, "tokenizer.ggml.bos_token_id"));
    cr_assert_null(gguf_find(g, "tokenizer.ggml.eot_token_id")); /* the converter does not write it */
    cr_assert_null(gguf_find(g, "tokenizer.ggml.scores"));      /* nor scores, for gpt2 */
    bool b = true;
    cr_assert_eq(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, &e), 0, "%s", e.msg);
    cr_assert_eq(b, false);
    cr_assert_null(gguf_find(g, "tokenizer.ggml.add_eos_token"));
    cr_assert_eq(gguf_get_str(g, "tokenizer.chat_template", &s, &e), 0, "%s", e.msg);
    cr_assert_eq(s.len, strlen(v.chat_template));
    cr_assert_eq(gguf_n_kv(g), 9);
    gguf_close(g);
    rm_file(path);
    tok_vocab_free(&v);
}

Test(tok_import, write_bytelevel_and_eot) {
    tok_vocab v;
    kiln_err err = {0};
    cr_assert_eq(tok_vocab_bytelevel(512, &v, &err), 0, "%s", err.msg);
    char *path = tmp_gguf_path();
    gguf_file *g = write_and_open(&v, path);
    kiln_err e;
    uint32_t u;
    bool b;
    cr_assert_eq(gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u, &e), 0, "%s", e.msg);
    cr_assert_eq(u, 256);
    cr_assert_eq(gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u, &e), 0, "%s", e.msg);
    cr_assert_eq(u, 257);
    cr_assert_eq(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, &e), 0, "%s", e.msg);
    cr_assert(b);
    cr_assert_eq(gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b, &e), 0, "%s", e.msg);
    cr_assert(!b);
    const gguf_array *a;
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STR, &a, &e), 0, "%s", e.msg);
    cr_assert_eq(a->n, 512);
    cr_assert_null(gguf_find(g, "tokenizer.chat_template"));
    gguf_close(g);
    rm_file(path);
    tok_vocab_free(&v);

    /* eot is written only when the converter would (TemplateProcessing moved eos) */
    char *j = mini_tokenizer(PRE_GPT2, ADDED_BOS_EOS,
                             "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
                             "{\"Sequence\":{\"id\":\"A\"}},{\"SpecialToken\":{\"id\":\"</s>\"}}]}");
    char *c = tmp_file("{\"bos_token\":\"<s>\",\"eos_token\":\"<|eot|>\"}");
    v = import_ok(j, c, NULL);
    path = tmp_gguf_path();
    g = write_and_open(&v, path);
    cr_assert_eq(gguf_get_u32(g, "tokenizer.ggml.eot_token_id", &u, &e), 0, "%s", e.msg);
    cr_assert_eq(u, 7);
    cr_assert_eq(gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u, &e), 0, "%s", e.msg);
    cr_assert_eq(u, 6);
    gguf_close(g);
    rm_file(path);
    rm_file(c);
    rm_file(j);
    tok_vocab_free(&v);
}

Test(tok_import, write_refuses_what_llama_cpp_cannot_load) {
    tok_vocab v;
    kiln_err err = {0};
    kiln_err e = {0};
    char *path = tmp_gguf_path();

    cr_assert_eq(tok_vocab_bytelevel(300, &v, &err), 0, "%s", err.msg);
    free((void *)v.tokens[299].ptr);
    v.tokens[299] = (gguf_str){strdup("ab"), 2}; /* already token 284+1 */
    gguf_writer *w = gguf_writer_create(path, &e);
    cr_assert_not_null(w);
    cr_assert_eq(tok_vocab_write(&v, w, &e), -1);
    cr_assert(strstr(e.msg, "distinct") != NULL, "%s", e.msg);
    gguf_writer_destroy(w);
    tok_vocab_free(&v);

    cr_assert_eq(tok_vocab_bytelevel(300, &v, &err), 0, "%s", err.msg);
    v.pad_id = 300;
    w = gguf_writer_create(path, &e);
    cr_assert_eq(tok_vocab_write(&v, w, &e), -1);
    cr_assert(strstr(e.msg, "padding_token_id") != NULL, "%s", e.msg);
    gguf_writer_destroy(w);
    tok_vocab_free(&v);

    tok_vocab_init(&v);
    w = gguf_writer_create(path, &e);
    cr_assert_eq(tok_vocab_write(&v, w, &e), -1);
    gguf_writer_destroy(w);

    /* a gpt2 vocab with no merges still gets the (empty) merges key llama.cpp requires */
    cr_assert_eq(tok_vocab_bytelevel(258, &v, &err), 0, "%s", err.msg);
    gguf_file *g = write_and_open(&v, path);
    const gguf_array *a;
    cr_assert_eq(gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_VT_STR, &a, &e), 0, "%s", e.msg);
    cr_assert_eq(a->n, 0);
    gguf_close(g);
    tok_vocab_free(&v);
    rm_file(path);
}

Test(tok_import, pre_names_known) {
    cr_assert(tok_pre_known("llama-bpe"));
    cr_assert(tok_pre_known("qwen2"));
    cr_assert(tok_pre_known("default"));
    cr_assert(!tok_pre_known("gpt-neox"));
    cr_assert(!tok_pre_known(NULL));
}
