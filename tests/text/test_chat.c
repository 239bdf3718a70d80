/* Chat templates: family detection from real templates' markers, and rendering compared
 * byte for byte with what each model's own Jinja template renders.
 *
 * Ground truth: shared/testdata/tokenizers/{qwen3,llama3}/chat_example.json (rendered by
 * the JavaScript Jinja renderers noted in those files). For the other families the
 * goldens table below was produced by Python's jinja2 3.1.6 set up as transformers'
 * apply_chat_template sets it up (ImmutableSandboxedEnvironment, trim_blocks,
 * lstrip_blocks, raise_exception), rendering each model's tokenizer_config.json template:
 *   chatml             teknium/OpenHermes-2.5-Mistral-7B
 *   qwen2, qwen2.5     Qwen/Qwen2-7B-Instruct, Qwen/Qwen2.5-7B-Instruct
 *   smollm2            HuggingFaceTB/SmolLM2-1.7B-Instruct
 *   qwen3              shared/testdata/tokenizers/qwen3 (Qwen3)
 *   llama3             meta-llama/Meta-Llama-3-8B-Instruct (revision with add_generation_prompt)
 *   llama3-always-gen  shared/testdata/tokenizers/llama3 (Meta-Llama-3-8B-Instruct's first)
 *   llama3.1           meta-llama/Llama-3.3-70B-Instruct (= Llama-3.1-8B-Instruct's)
 *   llama2             meta-llama/Llama-2-7b-chat-hf
 *   mistral            mistralai/Mistral-7B-Instruct-v0.2 (first revision)
 *   mistral-v1         mistralai/Mistral-7B-Instruct-v0.2 (later revision)
 *   mistral-v3         mistralai/Mistral-Large-Instruct-2407
 *   mistral-v3-tekken  mistralai/Mistral-Nemo-Instruct-2407
 *   mistral-v7         mistralai/Mistral-Large-Instruct-2411 (as Mistral documents v7)
 *   mistral-v7-tekken  mistralai/Mistral-Small-24B-Instruct-2501 (without its dated default
 *                      system prompt)
 *   gemma, gemma3      google/gemma-2-2b-it, google/gemma-3-4b-it
 *   phi3               microsoft/Phi-3.5-mini-instruct
 * with each model's BOS and EOS texts. A NULL expectation is a conversation the template
 * refuses (raise_exception). The template excerpts in the detection tests are quoted from
 * the same files. */
#include "tests/util/testutil.h"
#include "text/chat.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <jansson.h>


/* ---- helpers --------------------------------------------------------------------------- */



/* Where two renderings first differ, for failure messages. */
static size_t first_diff(const char *a, const char *b) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    return i;
}

static void expect_same(const char *got, const char *want, const char *what) {
    cr_expect_str_eq(got, want, "%s: differs at byte %zu\n got: [%s]\nwant: [%s]", what, first_diff(got, want), got,
                     want);
}

/* Renders and asserts success. */
static char *render(chat_family f, const chat_msg *m, size_t n, bool gen, const char *bos) {
    char err[256] = "";
    char *s = chat_render(f, m, n, gen, bos, err, sizeof err);
    cr_assert_not_null(s, "%s: %s", chat_family_name(f), err);
    return s;
}

/* Asserts that rendering fails with a message containing `needle`. */
static void expect_refused(chat_family f, const chat_msg *m, size_t n, const char *needle) {
    char err[256] = "";
    char *s = chat_render(f, m, n, true, "<s>", err, sizeof err);
    cr_expect_null(s, "%s: rendered [%s] where an error was expected", chat_family_name(f), s ? s : "");
    free(s);
    cr_expect(strstr(err, needle) != NULL, "%s: error [%s] lacks [%s]", chat_family_name(f), err, needle);
}

#define N(a) (sizeof(a) / sizeof(a)[0])

/* ---- ground truth from shared/testdata ------------------------------------------------- */

/* Detects the family from the file's template, renders every example and compares byte
 * for byte; tokenizer_config.json's template must be detected the same. */
static void check_chat_example(const char *dir, chat_family want) {
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizers/%s/chat_example.json", dir);
    const char *path = tu_data_file(rel);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    cr_assert_not_null(root, "%s: %s", path, je.text);
    const char *tmpl = json_string_value(json_object_get(root, "chat_template"));
    cr_assert_not_null(tmpl, "%s: no chat_template", path);
    cr_assert_eq(chat_detect(tmpl), (int)want, "%s: detected %d (%s)", path, chat_detect(tmpl),
                 chat_family_name((chat_family)chat_detect(tmpl)));
    const char *bos = json_string_value(json_object_get(root, "bos_token")); /* null: no BOS */
    json_t *examples = json_object_get(root, "examples");
    cr_assert(json_is_array(examples) && json_array_size(examples) > 0, "%s: no examples", path);

    size_t i;
    json_t *ex;
    json_array_foreach(examples, i, ex) {
        const char *name = json_string_value(json_object_get(ex, "name"));
        const char *want_text = json_string_value(json_object_get(ex, "rendered"));
        json_t *msgs = json_object_get(ex, "messages");
        json_t *agp = json_object_get(ex, "add_generation_prompt");
        cr_assert(name && want_text && json_is_array(msgs) && json_is_boolean(agp), "%s: example %zu malformed", path,
                  i);
        size_t n = json_array_size(msgs);
        chat_msg *m = calloc(n ? n : 1, sizeof *m);
        cr_assert_not_null(m);
        for (size_t k = 0; k < n; k++) {
            json_t *jm = json_array_get(msgs, k);
            m[k].role = json_string_value(json_object_get(jm, "role"));
            m[k].content = json_string_value(json_object_get(jm, "content"));
        }
        char what[256];
        snprintf(what, sizeof what, "%s example %s", dir, name);
        char *got = render(want, m, n, json_is_true(agp), bos ? bos : "");
        expect_same(got, want_text, what);
        free(got);
        free(m);
    }
    json_decref(root);

    snprintf(rel, sizeof rel, "tokenizers/%s/tokenizer_config.json", dir);
    path = tu_data_file(rel);
    root = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je); /* model_max_length can exceed int64 */
    cr_assert_not_null(root, "%s: %s", path, je.text);
    tmpl = json_string_value(json_object_get(root, "chat_template"));
    cr_assert_not_null(tmpl, "%s: no chat_template", path);
    cr_expect_eq(chat_detect(tmpl), (int)want, "%s: detected %d", path, chat_detect(tmpl));
    char *def = (char *)1, err[128] = "";
    cr_expect_eq(chat_default_system(tmpl, &def, err, sizeof err), 0, "%s", err);
    cr_expect_null(def, "%s has no default system message, found [%s]", path, def ? def : "");
    free(def);
    json_decref(root);
}

Test(chat, qwen3_testdata_renders_byte_exact) { check_chat_example("qwen3", CHAT_QWEN3); }

/* This Llama 3 template writes the assistant header even without add_generation_prompt
 * (its user_only_no_genprompt example shows it). */
Test(chat, llama3_testdata_renders_byte_exact) { check_chat_example("llama3", CHAT_LLAMA3_ALWAYS_GEN); }

/* ---- goldens rendered by jinja2 -------------------------------------------------------- */

typedef enum gen_flag { GEN_YES, GEN_NO, GEN_BOTH } gen_flag; /* BOTH: the flag changes nothing */

typedef struct golden {
    const char *tmpl; /* the reference template's name (see the top of this file) */
    chat_family f;
    const char *conv;
    const chat_msg *m;
    size_t n;
    gen_flag gen;
    const char *bos;
    const char *default_system; /* the template's default, prepended when m[0] is not a system message */
    const char *want;           /* NULL: the template refuses the conversation */
} golden;

/* ---- generated by a jinja2 script: do not edit by hand (see the comment above) ---- */
static const chat_msg conv_user[] = {
    {"user", "Hi"},
};
static const chat_msg conv_sys_user[] = {
    {"system", "You are a helpful assistant."},
    {"user", "Hello! How are you?"},
};
static const chat_msg conv_multi[] = {
    {"system", "You are terse."},
    {"user", "What is 2+2?"},
    {"assistant", "4"},
    {"user", "And 3+3?"},
};
static const chat_msg conv_multi_nosys[] = {
    {"user", "What is 2+2?"},
    {"assistant", "4"},
    {"user", "And 3+3?"},
};
static const chat_msg conv_ends_assistant[] = {
    {"system", "Be kind."},
    {"user", "Hi there"},
    {"assistant", "Hello! How can I help?"},
};
static const chat_msg conv_spaces[] = {
    {"system", "  Be brief.\n"},
    {"user", "\n  Hello there  \n"},
    {"assistant", "  Hi!  \n\n"},
    {"user", "\tBye\302\240\342\200\212\343\200\200"},
};
static const chat_msg conv_blank[] = {
    {"system", ""},
    {"user", " "},
    {"assistant", ""},
    {"user", "\034\302\205\342\200\203x\341\232\200\342\200\251 "},
};
static const chat_msg conv_unicode[] = {
    {"user", "Gr\303\274\303\237 dich, \344\270\226\347\225\214 \360\237\214\215"},
    {"assistant", "\320\237\321\200\320\270\320\262\320\265\321\202!"},
    {"user", "e\314\201\342\200\213"},
};
static const chat_msg conv_sys_only[] = {
    {"system", "Only a system message."},
};
static const chat_msg conv_two_sys[] = {
    {"system", "First."},
    {"system", "Second."},
    {"user", "Hi"},
};
static const chat_msg conv_sys_later[] = {
    {"user", "Hi"},
    {"assistant", "Hello"},
    {"system", "Now be formal."},
    {"user", "Greetings"},
};
static const chat_msg conv_sys_odd[] = {
    {"user", "Hi"},
    {"system", "Be formal."},
    {"user", "Greetings"},
};
static const chat_msg conv_user_user[] = {
    {"user", "one"},
    {"user", "two"},
};
static const chat_msg conv_assistant_first[] = {
    {"assistant", "I speak first"},
    {"user", "ok"},
};
static const chat_msg conv_think_history[] = {
    {"user", "q1"},
    {"assistant", "<think>\nstep one\n</think>\n\nanswer one"},
    {"user", "q2"},
};
static const chat_msg conv_think_last[] = {
    {"system", "sys"},
    {"user", "q1"},
    {"assistant", "<think>\nr1\n</think>\n\na1"},
    {"user", "q2"},
    {"assistant", "<think>\n\nr2\n\n</think>\n\n\na2"},
};
static const chat_msg conv_think_after_query[] = {
    {"user", "q"},
    {"assistant", "<think>r</think>a"},
    {"assistant", "plain"},
};
static const chat_msg conv_think_odd[] = {
    {"user", "q"},
    {"assistant", "pre<think>x<think>\ny\n</think>mid</think>\nend"},
};
static const chat_msg conv_tool_response_user[] = {
    {"user", "real question"},
    {"assistant", "<think>t</think>ok"},
    {"user", "<tool_response>42</tool_response>"},
    {"assistant", "done"},
};
static const chat_msg conv_no_query[] = {
    {"system", "s"},
    {"assistant", "<think>t</think>a"},
};

static const golden goldens[] = {
    {"chatml", CHAT_CHATML, "user", conv_user, 1, GEN_YES, "", NULL,
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", CHAT_CHATML, "user", conv_user, 1, GEN_NO, "", NULL,
     "<|im_start|>user\nHi<|im_end|>\n"},
    {"chatml", CHAT_CHATML, "sys_user", conv_sys_user, 2, GEN_YES, "", NULL,
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello! How are you?<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", CHAT_CHATML, "sys_user", conv_sys_user, 2, GEN_NO, "", NULL,
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello! How are you?<|im_end|>\n"},
    {"chatml", CHAT_CHATML, "multi", conv_multi, 4, GEN_YES, "", NULL,
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", CHAT_CHATML, "multi", conv_multi, 4, GEN_NO, "", NULL,
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n"},
    {"chatml", CHAT_CHATML, "multi_nosys", conv_multi_nosys, 3, GEN_YES, "", NULL,
     "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", CHAT_CHATML, "multi_nosys", conv_multi_nosys, 3, GEN_NO, "", NULL,
     "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n"},
    {"chatml", CHAT_CHATML, "ends_assistant", conv_ends_assistant, 3, GEN_YES, "", NULL,
     "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", CHAT_CHATML, "ends_assistant", conv_ends_assistant, 3, GEN_NO, "", NULL,
     "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"},
    {"chatml", CHAT_CHATML, "spaces", conv_spaces, 4, GEN_YES, "", NULL,
     "<|im_start|>system\n  Be brief.\n<|im_end|>\n<|im_start|>user\n\n  Hello there  \n<|im_end|>\n<|im_start|>assistant\n  Hi!  \n\n<|im_end|>\n<|im_start|>user\n\tBye\302\240\342\200\212\343\200\200<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", CHAT_CHATML, "spaces", conv_spaces, 4, GEN_NO, "", NULL,
     "<|im_start|>system\n  Be brief.\n<|im_end|>\n<|im_start|>user\n\n  Hello there  \n<|im_end|>\n<|im_start|>assistant\n  Hi!  \n\n<|im_end|>\n<|im_start|>user\n\tBye\302\240\342\200\212\343\200\200<|im_end|>\n"},
    {"chatml", CHAT_CHATML, "blank", conv_blank, 4, GEN_YES, "", NULL,
     "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n <|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\n\034\302\205\342\200\203x\341\232\200\342\200\251 <|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", CHAT_CHATML, "blank", conv_blank, 4, GEN_NO, "", NULL,
     "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n <|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\n\034\302\205\342\200\203x\341\232\200\342\200\251 <|im_end|>\n"},
    {"chatml", CHAT_CHATML, "unicode", conv_unicode, 3, GEN_YES, "", NULL,
     "<|im_start|>user\nGr\303\274\303\237 dich, \344\270\226\347\225\214 \360\237\214\215<|im_end|>\n<|im_start|>assistant\n\320\237\321\200\320\270\320\262\320\265\321\202!<|im_end|>\n<|im_start|>user\ne\314\201\342\200\213<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", CHAT_CHATML, "unicode", conv_unicode, 3, GEN_NO, "", NULL,
     "<|im_start|>user\nGr\303\274\303\237 dich, \344\270\226\347\225\214 \360\237\214\215<|im_end|>\n<|im_start|>assistant\n\320\237\321\200\320\270\320\262\320\265\321\202!<|im_end|>\n<|im_start|>user\ne\314\201\342\200\213<|im_end|>\n"},
    {"chatml", CHAT_CHATML, "sys_only", conv_sys_only, 1, GEN_YES, "", NULL,
     "<|im_start|>system\nOnly a system message.<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", CHAT_CHATML, "sys_only", conv_sys_only, 1, GEN_NO, "", NULL,
     "<|im_start|>system\nOnly a system message.<|im_end|>\n"},
    {"chatml", CHAT_CHATML, "two_sys", conv_two_sys, 3, GEN_YES, "", NULL,
     "<|im_start|>system\nFirst.<|im_end|>\n<|im_start|>system\nSecond.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", CHAT_CHATML, "two_sys", conv_two_sys, 3, GEN_NO, "", NULL,
     "<|im_start|>system\nFirst.<|im_end|>\n<|im_start|>system\nSecond.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"},
    {"chatml", CHAT_CHATML, "sys_later", conv_sys_later, 4, GEN_YES, "", NULL,
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>system\nNow be formal.<|im_end|>\n<|im_start|>user\nGreetings<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", CHAT_CHATML, "sys_later", conv_sys_later, 4, GEN_NO, "", NULL,
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>system\nNow be formal.<|im_end|>\n<|im_start|>user\nGreetings<|im_end|>\n"},
    {"chatml", CHAT_CHATML, "sys_odd", conv_sys_odd, 3, GEN_YES, "", NULL,
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nBe formal.<|im_end|>\n<|im_start|>user\nGreetings<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", CHAT_CHATML, "sys_odd", conv_sys_odd, 3, GEN_NO, "", NULL,
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nBe formal.<|im_end|>\n<|im_start|>user\nGreetings<|im_end|>\n"},
    {"chatml", CHAT_CHATML, "user_user", conv_user_user, 2, GEN_YES, "", NULL,
     "<|im_start|>user\none<|im_end|>\n<|im_start|>user\ntwo<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", CHAT_CHATML, "user_user", conv_user_user, 2, GEN_NO, "", NULL,
     "<|im_start|>user\none<|im_end|>\n<|im_start|>user\ntwo<|im_end|>\n"},
    {"chatml", CHAT_CHATML, "assistant_first", conv_assistant_first, 2, GEN_YES, "", NULL,
     "<|im_start|>assistant\nI speak first<|im_end|>\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n"},
    {"chatml", CHAT_CHATML, "assistant_first", conv_assistant_first, 2, GEN_NO, "", NULL,
     "<|im_start|>assistant\nI speak first<|im_end|>\n<|im_start|>user\nok<|im_end|>\n"},
    {"qwen2", CHAT_CHATML, "user", conv_user, 1, GEN_YES, "", "You are a helpful assistant.",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2", CHAT_CHATML, "user", conv_user, 1, GEN_NO, "", "You are a helpful assistant.",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"},
    {"qwen2", CHAT_CHATML, "sys_user", conv_sys_user, 2, GEN_YES, "", "You are a helpful assistant.",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello! How are you?<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2", CHAT_CHATML, "sys_user", conv_sys_user, 2, GEN_NO, "", "You are a helpful assistant.",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello! How are you?<|im_end|>\n"},
    {"qwen2", CHAT_CHATML, "multi_nosys", conv_multi_nosys, 3, GEN_YES, "", "You are a helpful assistant.",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2", CHAT_CHATML, "multi_nosys", conv_multi_nosys, 3, GEN_NO, "", "You are a helpful assistant.",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n"},
    {"smollm2", CHAT_CHATML, "user", conv_user, 1, GEN_YES, "", "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
     "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    {"smollm2", CHAT_CHATML, "user", conv_user, 1, GEN_NO, "", "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
     "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"},
    {"smollm2", CHAT_CHATML, "sys_user", conv_sys_user, 2, GEN_YES, "", "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello! How are you?<|im_end|>\n<|im_start|>assistant\n"},
    {"smollm2", CHAT_CHATML, "sys_user", conv_sys_user, 2, GEN_NO, "", "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello! How are you?<|im_end|>\n"},
    {"smollm2", CHAT_CHATML, "multi_nosys", conv_multi_nosys, 3, GEN_YES, "", "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
     "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"},
    {"smollm2", CHAT_CHATML, "multi_nosys", conv_multi_nosys, 3, GEN_NO, "", "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
     "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n"},
    {"qwen2.5", CHAT_CHATML, "user", conv_user, 1, GEN_YES, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2.5", CHAT_CHATML, "user", conv_user, 1, GEN_NO, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"},
    {"qwen2.5", CHAT_CHATML, "sys_user", conv_sys_user, 2, GEN_YES, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello! How are you?<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2.5", CHAT_CHATML, "sys_user", conv_sys_user, 2, GEN_NO, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello! How are you?<|im_end|>\n"},
    {"qwen2.5", CHAT_CHATML, "multi", conv_multi, 4, GEN_YES, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2.5", CHAT_CHATML, "multi", conv_multi, 4, GEN_NO, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n"},
    {"qwen2.5", CHAT_CHATML, "multi_nosys", conv_multi_nosys, 3, GEN_YES, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2.5", CHAT_CHATML, "multi_nosys", conv_multi_nosys, 3, GEN_NO, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n"},
    {"qwen2.5", CHAT_CHATML, "ends_assistant", conv_ends_assistant, 3, GEN_YES, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2.5", CHAT_CHATML, "ends_assistant", conv_ends_assistant, 3, GEN_NO, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"},
    {"qwen2.5", CHAT_CHATML, "spaces", conv_spaces, 4, GEN_YES, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\n  Be brief.\n<|im_end|>\n<|im_start|>user\n\n  Hello there  \n<|im_end|>\n<|im_start|>assistant\n  Hi!  \n\n<|im_end|>\n<|im_start|>user\n\tBye\302\240\342\200\212\343\200\200<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2.5", CHAT_CHATML, "spaces", conv_spaces, 4, GEN_NO, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\n  Be brief.\n<|im_end|>\n<|im_start|>user\n\n  Hello there  \n<|im_end|>\n<|im_start|>assistant\n  Hi!  \n\n<|im_end|>\n<|im_start|>user\n\tBye\302\240\342\200\212\343\200\200<|im_end|>\n"},
    {"qwen2.5", CHAT_CHATML, "blank", conv_blank, 4, GEN_YES, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n <|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\n\034\302\205\342\200\203x\341\232\200\342\200\251 <|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2.5", CHAT_CHATML, "blank", conv_blank, 4, GEN_NO, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n <|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\n\034\302\205\342\200\203x\341\232\200\342\200\251 <|im_end|>\n"},
    {"qwen2.5", CHAT_CHATML, "sys_only", conv_sys_only, 1, GEN_YES, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nOnly a system message.<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2.5", CHAT_CHATML, "sys_only", conv_sys_only, 1, GEN_NO, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nOnly a system message.<|im_end|>\n"},
    {"qwen2.5", CHAT_CHATML, "two_sys", conv_two_sys, 3, GEN_YES, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nFirst.<|im_end|>\n<|im_start|>system\nSecond.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2.5", CHAT_CHATML, "two_sys", conv_two_sys, 3, GEN_NO, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nFirst.<|im_end|>\n<|im_start|>system\nSecond.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"},
    {"qwen2.5", CHAT_CHATML, "sys_later", conv_sys_later, 4, GEN_YES, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>system\nNow be formal.<|im_end|>\n<|im_start|>user\nGreetings<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2.5", CHAT_CHATML, "sys_later", conv_sys_later, 4, GEN_NO, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>system\nNow be formal.<|im_end|>\n<|im_start|>user\nGreetings<|im_end|>\n"},
    {"qwen2.5", CHAT_CHATML, "sys_odd", conv_sys_odd, 3, GEN_YES, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nBe formal.<|im_end|>\n<|im_start|>user\nGreetings<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2.5", CHAT_CHATML, "sys_odd", conv_sys_odd, 3, GEN_NO, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nBe formal.<|im_end|>\n<|im_start|>user\nGreetings<|im_end|>\n"},
    {"qwen2.5", CHAT_CHATML, "user_user", conv_user_user, 2, GEN_YES, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\none<|im_end|>\n<|im_start|>user\ntwo<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2.5", CHAT_CHATML, "user_user", conv_user_user, 2, GEN_NO, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\none<|im_end|>\n<|im_start|>user\ntwo<|im_end|>\n"},
    {"qwen2.5", CHAT_CHATML, "assistant_first", conv_assistant_first, 2, GEN_YES, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>assistant\nI speak first<|im_end|>\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen2.5", CHAT_CHATML, "assistant_first", conv_assistant_first, 2, GEN_NO, "", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>assistant\nI speak first<|im_end|>\n<|im_start|>user\nok<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "user", conv_user, 1, GEN_YES, "", NULL,
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "user", conv_user, 1, GEN_NO, "", NULL,
     "<|im_start|>user\nHi<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "sys_user", conv_sys_user, 2, GEN_YES, "", NULL,
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello! How are you?<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "sys_user", conv_sys_user, 2, GEN_NO, "", NULL,
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello! How are you?<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "multi", conv_multi, 4, GEN_YES, "", NULL,
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "multi", conv_multi, 4, GEN_NO, "", NULL,
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "multi_nosys", conv_multi_nosys, 3, GEN_YES, "", NULL,
     "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "multi_nosys", conv_multi_nosys, 3, GEN_NO, "", NULL,
     "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "ends_assistant", conv_ends_assistant, 3, GEN_YES, "", NULL,
     "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello! How can I help?<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "ends_assistant", conv_ends_assistant, 3, GEN_NO, "", NULL,
     "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello! How can I help?<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "spaces", conv_spaces, 4, GEN_YES, "", NULL,
     "<|im_start|>system\n  Be brief.\n<|im_end|>\n<|im_start|>user\n\n  Hello there  \n<|im_end|>\n<|im_start|>assistant\n  Hi!  \n\n<|im_end|>\n<|im_start|>user\n\tBye\302\240\342\200\212\343\200\200<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "spaces", conv_spaces, 4, GEN_NO, "", NULL,
     "<|im_start|>system\n  Be brief.\n<|im_end|>\n<|im_start|>user\n\n  Hello there  \n<|im_end|>\n<|im_start|>assistant\n  Hi!  \n\n<|im_end|>\n<|im_start|>user\n\tBye\302\240\342\200\212\343\200\200<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "blank", conv_blank, 4, GEN_YES, "", NULL,
     "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n <|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\n\034\302\205\342\200\203x\341\232\200\342\200\251 <|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "blank", conv_blank, 4, GEN_NO, "", NULL,
     "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n <|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\n\034\302\205\342\200\203x\341\232\200\342\200\251 <|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "sys_only", conv_sys_only, 1, GEN_YES, "", NULL,
     "<|im_start|>system\nOnly a system message.<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "sys_only", conv_sys_only, 1, GEN_NO, "", NULL,
     "<|im_start|>system\nOnly a system message.<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "two_sys", conv_two_sys, 3, GEN_YES, "", NULL,
     "<|im_start|>system\nFirst.<|im_end|>\n<|im_start|>system\nSecond.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "two_sys", conv_two_sys, 3, GEN_NO, "", NULL,
     "<|im_start|>system\nFirst.<|im_end|>\n<|im_start|>system\nSecond.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "sys_later", conv_sys_later, 4, GEN_YES, "", NULL,
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>system\nNow be formal.<|im_end|>\n<|im_start|>user\nGreetings<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "sys_later", conv_sys_later, 4, GEN_NO, "", NULL,
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>system\nNow be formal.<|im_end|>\n<|im_start|>user\nGreetings<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "sys_odd", conv_sys_odd, 3, GEN_YES, "", NULL,
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nBe formal.<|im_end|>\n<|im_start|>user\nGreetings<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "sys_odd", conv_sys_odd, 3, GEN_NO, "", NULL,
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nBe formal.<|im_end|>\n<|im_start|>user\nGreetings<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "user_user", conv_user_user, 2, GEN_YES, "", NULL,
     "<|im_start|>user\none<|im_end|>\n<|im_start|>user\ntwo<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "user_user", conv_user_user, 2, GEN_NO, "", NULL,
     "<|im_start|>user\none<|im_end|>\n<|im_start|>user\ntwo<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "assistant_first", conv_assistant_first, 2, GEN_YES, "", NULL,
     "<|im_start|>assistant\nI speak first<|im_end|>\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "assistant_first", conv_assistant_first, 2, GEN_NO, "", NULL,
     "<|im_start|>assistant\nI speak first<|im_end|>\n<|im_start|>user\nok<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "think_history", conv_think_history, 3, GEN_YES, "", NULL,
     "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\nanswer one<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "think_history", conv_think_history, 3, GEN_NO, "", NULL,
     "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\nanswer one<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "think_last", conv_think_last, 5, GEN_YES, "", NULL,
     "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "think_last", conv_think_last, 5, GEN_NO, "", NULL,
     "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "think_after_query", conv_think_after_query, 3, GEN_YES, "", NULL,
     "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\na<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nplain<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "think_after_query", conv_think_after_query, 3, GEN_NO, "", NULL,
     "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\na<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nplain<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "think_odd", conv_think_odd, 2, GEN_YES, "", NULL,
     "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\ny\n</think>\n\nend<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "think_odd", conv_think_odd, 2, GEN_NO, "", NULL,
     "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\ny\n</think>\n\nend<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "tool_response_user", conv_tool_response_user, 4, GEN_YES, "", NULL,
     "<|im_start|>user\nreal question<|im_end|>\n<|im_start|>assistant\n<think>\nt\n</think>\n\nok<|im_end|>\n<|im_start|>user\n<tool_response>42</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\ndone<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "tool_response_user", conv_tool_response_user, 4, GEN_NO, "", NULL,
     "<|im_start|>user\nreal question<|im_end|>\n<|im_start|>assistant\n<think>\nt\n</think>\n\nok<|im_end|>\n<|im_start|>user\n<tool_response>42</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\ndone<|im_end|>\n"},
    {"qwen3", CHAT_QWEN3, "no_query", conv_no_query, 2, GEN_YES, "", NULL,
     "<|im_start|>system\ns<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n<|im_start|>assistant\n"},
    {"qwen3", CHAT_QWEN3, "no_query", conv_no_query, 2, GEN_NO, "", NULL,
     "<|im_start|>system\ns<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n"},
    {"llama3-always-gen", CHAT_LLAMA3_ALWAYS_GEN, "user", conv_user, 1, GEN_BOTH, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3-always-gen", CHAT_LLAMA3_ALWAYS_GEN, "sys_user", conv_sys_user, 2, GEN_BOTH, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello! How are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3-always-gen", CHAT_LLAMA3_ALWAYS_GEN, "ends_assistant", conv_ends_assistant, 3, GEN_BOTH, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe kind.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", CHAT_LLAMA3, "user", conv_user, 1, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", CHAT_LLAMA3, "user", conv_user, 1, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"},
    {"llama3", CHAT_LLAMA3, "sys_user", conv_sys_user, 2, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello! How are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", CHAT_LLAMA3, "sys_user", conv_sys_user, 2, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello! How are you?<|eot_id|>"},
    {"llama3", CHAT_LLAMA3, "multi", conv_multi, 4, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", CHAT_LLAMA3, "multi", conv_multi, 4, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>"},
    {"llama3", CHAT_LLAMA3, "multi_nosys", conv_multi_nosys, 3, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", CHAT_LLAMA3, "multi_nosys", conv_multi_nosys, 3, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>"},
    {"llama3", CHAT_LLAMA3, "ends_assistant", conv_ends_assistant, 3, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe kind.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", CHAT_LLAMA3, "ends_assistant", conv_ends_assistant, 3, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe kind.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|>"},
    {"llama3", CHAT_LLAMA3, "spaces", conv_spaces, 4, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", CHAT_LLAMA3, "spaces", conv_spaces, 4, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"},
    {"llama3", CHAT_LLAMA3, "blank", conv_blank, 4, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", CHAT_LLAMA3, "blank", conv_blank, 4, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>"},
    {"llama3", CHAT_LLAMA3, "sys_only", conv_sys_only, 1, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nOnly a system message.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", CHAT_LLAMA3, "sys_only", conv_sys_only, 1, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nOnly a system message.<|eot_id|>"},
    {"llama3", CHAT_LLAMA3, "two_sys", conv_two_sys, 3, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nFirst.<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nSecond.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", CHAT_LLAMA3, "two_sys", conv_two_sys, 3, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nFirst.<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nSecond.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"},
    {"llama3", CHAT_LLAMA3, "sys_later", conv_sys_later, 4, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nNow be formal.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGreetings<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", CHAT_LLAMA3, "sys_later", conv_sys_later, 4, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nNow be formal.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGreetings<|eot_id|>"},
    {"llama3", CHAT_LLAMA3, "sys_odd", conv_sys_odd, 3, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nBe formal.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGreetings<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", CHAT_LLAMA3, "sys_odd", conv_sys_odd, 3, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nBe formal.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGreetings<|eot_id|>"},
    {"llama3", CHAT_LLAMA3, "user_user", conv_user_user, 2, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\none<|eot_id|><|start_header_id|>user<|end_header_id|>\n\ntwo<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", CHAT_LLAMA3, "user_user", conv_user_user, 2, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\none<|eot_id|><|start_header_id|>user<|end_header_id|>\n\ntwo<|eot_id|>"},
    {"llama3", CHAT_LLAMA3, "assistant_first", conv_assistant_first, 2, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>assistant<|end_header_id|>\n\nI speak first<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nok<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3", CHAT_LLAMA3, "assistant_first", conv_assistant_first, 2, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>assistant<|end_header_id|>\n\nI speak first<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nok<|eot_id|>"},
    {"llama3.1", CHAT_LLAMA31, "user", conv_user, 1, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", CHAT_LLAMA31, "user", conv_user, 1, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"},
    {"llama3.1", CHAT_LLAMA31, "sys_user", conv_sys_user, 2, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello! How are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", CHAT_LLAMA31, "sys_user", conv_sys_user, 2, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello! How are you?<|eot_id|>"},
    {"llama3.1", CHAT_LLAMA31, "multi", conv_multi, 4, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", CHAT_LLAMA31, "multi", conv_multi, 4, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>"},
    {"llama3.1", CHAT_LLAMA31, "multi_nosys", conv_multi_nosys, 3, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", CHAT_LLAMA31, "multi_nosys", conv_multi_nosys, 3, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>"},
    {"llama3.1", CHAT_LLAMA31, "ends_assistant", conv_ends_assistant, 3, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe kind.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", CHAT_LLAMA31, "ends_assistant", conv_ends_assistant, 3, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe kind.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|>"},
    {"llama3.1", CHAT_LLAMA31, "spaces", conv_spaces, 4, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", CHAT_LLAMA31, "spaces", conv_spaces, 4, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"},
    {"llama3.1", CHAT_LLAMA31, "blank", conv_blank, 4, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", CHAT_LLAMA31, "blank", conv_blank, 4, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>"},
    {"llama3.1", CHAT_LLAMA31, "sys_only", conv_sys_only, 1, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nOnly a system message.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", CHAT_LLAMA31, "sys_only", conv_sys_only, 1, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nOnly a system message.<|eot_id|>"},
    {"llama3.1", CHAT_LLAMA31, "two_sys", conv_two_sys, 3, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nFirst.<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nSecond.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", CHAT_LLAMA31, "two_sys", conv_two_sys, 3, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nFirst.<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nSecond.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"},
    {"llama3.1", CHAT_LLAMA31, "sys_later", conv_sys_later, 4, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nNow be formal.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGreetings<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", CHAT_LLAMA31, "sys_later", conv_sys_later, 4, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nNow be formal.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGreetings<|eot_id|>"},
    {"llama3.1", CHAT_LLAMA31, "sys_odd", conv_sys_odd, 3, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nBe formal.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGreetings<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", CHAT_LLAMA31, "sys_odd", conv_sys_odd, 3, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nBe formal.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGreetings<|eot_id|>"},
    {"llama3.1", CHAT_LLAMA31, "user_user", conv_user_user, 2, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\none<|eot_id|><|start_header_id|>user<|end_header_id|>\n\ntwo<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", CHAT_LLAMA31, "user_user", conv_user_user, 2, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\none<|eot_id|><|start_header_id|>user<|end_header_id|>\n\ntwo<|eot_id|>"},
    {"llama3.1", CHAT_LLAMA31, "assistant_first", conv_assistant_first, 2, GEN_YES, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI speak first<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nok<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"llama3.1", CHAT_LLAMA31, "assistant_first", conv_assistant_first, 2, GEN_NO, "<|begin_of_text|>", NULL,
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI speak first<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nok<|eot_id|>"},
    {"llama2", CHAT_LLAMA2, "user", conv_user, 1, GEN_BOTH, "<s>", NULL,
     "<s>[INST] Hi [/INST]"},
    {"llama2", CHAT_LLAMA2, "sys_user", conv_sys_user, 2, GEN_BOTH, "<s>", NULL,
     "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! How are you? [/INST]"},
    {"llama2", CHAT_LLAMA2, "multi", conv_multi, 4, GEN_BOTH, "<s>", NULL,
     "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nWhat is 2+2? [/INST] 4 </s><s>[INST] And 3+3? [/INST]"},
    {"llama2", CHAT_LLAMA2, "multi_nosys", conv_multi_nosys, 3, GEN_BOTH, "<s>", NULL,
     "<s>[INST] What is 2+2? [/INST] 4 </s><s>[INST] And 3+3? [/INST]"},
    {"llama2", CHAT_LLAMA2, "ends_assistant", conv_ends_assistant, 3, GEN_BOTH, "<s>", NULL,
     "<s>[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nHi there [/INST] Hello! How can I help? </s>"},
    {"llama2", CHAT_LLAMA2, "spaces", conv_spaces, 4, GEN_BOTH, "<s>", NULL,
     "<s>[INST] <<SYS>>\n  Be brief.\n\n<</SYS>>\n\n\n  Hello there [/INST] Hi! </s><s>[INST] Bye [/INST]"},
    {"llama2", CHAT_LLAMA2, "blank", conv_blank, 4, GEN_BOTH, "<s>", NULL,
     "<s>[INST] <<SYS>>\n\n<</SYS>> [/INST]  </s><s>[INST] x [/INST]"},
    {"llama2", CHAT_LLAMA2, "sys_only", conv_sys_only, 1, GEN_BOTH, "<s>", NULL,
     ""},
    {"llama2", CHAT_LLAMA2, "two_sys", conv_two_sys, 3, GEN_BOTH, "<s>", NULL,
     NULL},
    {"llama2", CHAT_LLAMA2, "sys_later", conv_sys_later, 4, GEN_BOTH, "<s>", NULL,
     NULL},
    {"llama2", CHAT_LLAMA2, "user_user", conv_user_user, 2, GEN_BOTH, "<s>", NULL,
     NULL},
    {"llama2", CHAT_LLAMA2, "assistant_first", conv_assistant_first, 2, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral", CHAT_MISTRAL, "user", conv_user, 1, GEN_BOTH, "<s>", NULL,
     "<s>[INST] Hi [/INST]"},
    {"mistral", CHAT_MISTRAL, "sys_user", conv_sys_user, 2, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral", CHAT_MISTRAL, "multi", conv_multi, 4, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral", CHAT_MISTRAL, "multi_nosys", conv_multi_nosys, 3, GEN_BOTH, "<s>", NULL,
     "<s>[INST] What is 2+2? [/INST]4</s>[INST] And 3+3? [/INST]"},
    {"mistral", CHAT_MISTRAL, "ends_assistant", conv_ends_assistant, 3, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral", CHAT_MISTRAL, "spaces", conv_spaces, 4, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral", CHAT_MISTRAL, "blank", conv_blank, 4, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral", CHAT_MISTRAL, "sys_only", conv_sys_only, 1, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral", CHAT_MISTRAL, "two_sys", conv_two_sys, 3, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral", CHAT_MISTRAL, "sys_later", conv_sys_later, 4, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral", CHAT_MISTRAL, "sys_odd", conv_sys_odd, 3, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral", CHAT_MISTRAL, "user_user", conv_user_user, 2, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral", CHAT_MISTRAL, "assistant_first", conv_assistant_first, 2, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v1", CHAT_MISTRAL_V1, "user", conv_user, 1, GEN_BOTH, "<s>", NULL,
     "<s> [INST] Hi [/INST]"},
    {"mistral-v1", CHAT_MISTRAL_V1, "sys_user", conv_sys_user, 2, GEN_BOTH, "<s>", NULL,
     "<s> [INST] You are a helpful assistant.\n\nHello! How are you? [/INST]"},
    {"mistral-v1", CHAT_MISTRAL_V1, "multi", conv_multi, 4, GEN_BOTH, "<s>", NULL,
     "<s> [INST] You are terse.\n\nWhat is 2+2? [/INST] 4</s> [INST] And 3+3? [/INST]"},
    {"mistral-v1", CHAT_MISTRAL_V1, "multi_nosys", conv_multi_nosys, 3, GEN_BOTH, "<s>", NULL,
     "<s> [INST] What is 2+2? [/INST] 4</s> [INST] And 3+3? [/INST]"},
    {"mistral-v1", CHAT_MISTRAL_V1, "ends_assistant", conv_ends_assistant, 3, GEN_BOTH, "<s>", NULL,
     "<s> [INST] Be kind.\n\nHi there [/INST] Hello! How can I help?</s>"},
    {"mistral-v1", CHAT_MISTRAL_V1, "spaces", conv_spaces, 4, GEN_BOTH, "<s>", NULL,
     "<s> [INST]   Be brief.\n\n\n\n  Hello there  \n [/INST]   Hi!  \n\n</s> [INST] \tBye\302\240\342\200\212\343\200\200 [/INST]"},
    {"mistral-v1", CHAT_MISTRAL_V1, "blank", conv_blank, 4, GEN_BOTH, "<s>", NULL,
     "<s> [INST] \n\n  [/INST] </s> [INST] \034\302\205\342\200\203x\341\232\200\342\200\251  [/INST]"},
    {"mistral-v1", CHAT_MISTRAL_V1, "sys_only", conv_sys_only, 1, GEN_BOTH, "<s>", NULL,
     "<s>"},
    {"mistral-v1", CHAT_MISTRAL_V1, "two_sys", conv_two_sys, 3, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v1", CHAT_MISTRAL_V1, "sys_later", conv_sys_later, 4, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v1", CHAT_MISTRAL_V1, "sys_odd", conv_sys_odd, 3, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v1", CHAT_MISTRAL_V1, "user_user", conv_user_user, 2, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v1", CHAT_MISTRAL_V1, "assistant_first", conv_assistant_first, 2, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v3", CHAT_MISTRAL_V3, "user", conv_user, 1, GEN_BOTH, "<s>", NULL,
     "<s>[INST] Hi[/INST]"},
    {"mistral-v3", CHAT_MISTRAL_V3, "sys_user", conv_sys_user, 2, GEN_BOTH, "<s>", NULL,
     "<s>[INST] You are a helpful assistant.\n\nHello! How are you?[/INST]"},
    {"mistral-v3", CHAT_MISTRAL_V3, "multi", conv_multi, 4, GEN_BOTH, "<s>", NULL,
     "<s>[INST] What is 2+2?[/INST] 4</s>[INST] You are terse.\n\nAnd 3+3?[/INST]"},
    {"mistral-v3", CHAT_MISTRAL_V3, "multi_nosys", conv_multi_nosys, 3, GEN_BOTH, "<s>", NULL,
     "<s>[INST] What is 2+2?[/INST] 4</s>[INST] And 3+3?[/INST]"},
    {"mistral-v3", CHAT_MISTRAL_V3, "ends_assistant", conv_ends_assistant, 3, GEN_BOTH, "<s>", NULL,
     "<s>[INST] Hi there[/INST] Hello! How can I help?</s>"},
    {"mistral-v3", CHAT_MISTRAL_V3, "spaces", conv_spaces, 4, GEN_BOTH, "<s>", NULL,
     "<s>[INST] \n  Hello there  \n[/INST] Hi!</s>[INST]   Be brief.\n\n\n\tBye\302\240\342\200\212\343\200\200[/INST]"},
    {"mistral-v3", CHAT_MISTRAL_V3, "blank", conv_blank, 4, GEN_BOTH, "<s>", NULL,
     "<s>[INST]  [/INST] </s>[INST] \n\n\034\302\205\342\200\203x\341\232\200\342\200\251 [/INST]"},
    {"mistral-v3", CHAT_MISTRAL_V3, "sys_only", conv_sys_only, 1, GEN_BOTH, "<s>", NULL,
     "<s>"},
    {"mistral-v3", CHAT_MISTRAL_V3, "two_sys", conv_two_sys, 3, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v3", CHAT_MISTRAL_V3, "sys_later", conv_sys_later, 4, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v3", CHAT_MISTRAL_V3, "sys_odd", conv_sys_odd, 3, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v3", CHAT_MISTRAL_V3, "user_user", conv_user_user, 2, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v3", CHAT_MISTRAL_V3, "assistant_first", conv_assistant_first, 2, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v3-tekken", CHAT_MISTRAL_V3_TEKKEN, "user", conv_user, 1, GEN_BOTH, "<s>", NULL,
     "<s>[INST]Hi[/INST]"},
    {"mistral-v3-tekken", CHAT_MISTRAL_V3_TEKKEN, "sys_user", conv_sys_user, 2, GEN_BOTH, "<s>", NULL,
     "<s>[INST]You are a helpful assistant.\n\nHello! How are you?[/INST]"},
    {"mistral-v3-tekken", CHAT_MISTRAL_V3_TEKKEN, "multi", conv_multi, 4, GEN_BOTH, "<s>", NULL,
     "<s>[INST]What is 2+2?[/INST]4</s>[INST]You are terse.\n\nAnd 3+3?[/INST]"},
    {"mistral-v3-tekken", CHAT_MISTRAL_V3_TEKKEN, "multi_nosys", conv_multi_nosys, 3, GEN_BOTH, "<s>", NULL,
     "<s>[INST]What is 2+2?[/INST]4</s>[INST]And 3+3?[/INST]"},
    {"mistral-v3-tekken", CHAT_MISTRAL_V3_TEKKEN, "ends_assistant", conv_ends_assistant, 3, GEN_BOTH, "<s>", NULL,
     "<s>[INST]Hi there[/INST]Hello! How can I help?</s>"},
    {"mistral-v3-tekken", CHAT_MISTRAL_V3_TEKKEN, "spaces", conv_spaces, 4, GEN_BOTH, "<s>", NULL,
     "<s>[INST]\n  Hello there  \n[/INST]  Hi!  \n\n</s>[INST]  Be brief.\n\n\n\tBye\302\240\342\200\212\343\200\200[/INST]"},
    {"mistral-v3-tekken", CHAT_MISTRAL_V3_TEKKEN, "blank", conv_blank, 4, GEN_BOTH, "<s>", NULL,
     "<s>[INST] [/INST]</s>[INST]\n\n\034\302\205\342\200\203x\341\232\200\342\200\251 [/INST]"},
    {"mistral-v3-tekken", CHAT_MISTRAL_V3_TEKKEN, "sys_only", conv_sys_only, 1, GEN_BOTH, "<s>", NULL,
     "<s>"},
    {"mistral-v3-tekken", CHAT_MISTRAL_V3_TEKKEN, "two_sys", conv_two_sys, 3, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v3-tekken", CHAT_MISTRAL_V3_TEKKEN, "sys_later", conv_sys_later, 4, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v3-tekken", CHAT_MISTRAL_V3_TEKKEN, "sys_odd", conv_sys_odd, 3, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v3-tekken", CHAT_MISTRAL_V3_TEKKEN, "user_user", conv_user_user, 2, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v3-tekken", CHAT_MISTRAL_V3_TEKKEN, "assistant_first", conv_assistant_first, 2, GEN_BOTH, "<s>", NULL,
     NULL},
    {"mistral-v7", CHAT_MISTRAL_V7, "user", conv_user, 1, GEN_BOTH, "<s>", NULL,
     "<s>[INST] Hi[/INST]"},
    {"mistral-v7", CHAT_MISTRAL_V7, "sys_user", conv_sys_user, 2, GEN_BOTH, "<s>", NULL,
     "<s>[SYSTEM_PROMPT] You are a helpful assistant.[/SYSTEM_PROMPT][INST] Hello! How are you?[/INST]"},
    {"mistral-v7", CHAT_MISTRAL_V7, "multi", conv_multi, 4, GEN_BOTH, "<s>", NULL,
     "<s>[SYSTEM_PROMPT] You are terse.[/SYSTEM_PROMPT][INST] What is 2+2?[/INST] 4</s>[INST] And 3+3?[/INST]"},
    {"mistral-v7", CHAT_MISTRAL_V7, "multi_nosys", conv_multi_nosys, 3, GEN_BOTH, "<s>", NULL,
     "<s>[INST] What is 2+2?[/INST] 4</s>[INST] And 3+3?[/INST]"},
    {"mistral-v7", CHAT_MISTRAL_V7, "ends_assistant", conv_ends_assistant, 3, GEN_BOTH, "<s>", NULL,
     "<s>[SYSTEM_PROMPT] Be kind.[/SYSTEM_PROMPT][INST] Hi there[/INST] Hello! How can I help?</s>"},
    {"mistral-v7", CHAT_MISTRAL_V7, "spaces", conv_spaces, 4, GEN_BOTH, "<s>", NULL,
     "<s>[SYSTEM_PROMPT]   Be brief.\n[/SYSTEM_PROMPT][INST] \n  Hello there  \n[/INST]   Hi!  \n\n</s>[INST] \tBye\302\240\342\200\212\343\200\200[/INST]"},
    {"mistral-v7", CHAT_MISTRAL_V7, "blank", conv_blank, 4, GEN_BOTH, "<s>", NULL,
     "<s>[SYSTEM_PROMPT] [/SYSTEM_PROMPT][INST]  [/INST] </s>[INST] \034\302\205\342\200\203x\341\232\200\342\200\251 [/INST]"},
    {"mistral-v7", CHAT_MISTRAL_V7, "sys_only", conv_sys_only, 1, GEN_BOTH, "<s>", NULL,
     "<s>[SYSTEM_PROMPT] Only a system message.[/SYSTEM_PROMPT]"},
    {"mistral-v7", CHAT_MISTRAL_V7, "two_sys", conv_two_sys, 3, GEN_BOTH, "<s>", NULL,
     "<s>[SYSTEM_PROMPT] First.[/SYSTEM_PROMPT][SYSTEM_PROMPT] Second.[/SYSTEM_PROMPT][INST] Hi[/INST]"},
    {"mistral-v7", CHAT_MISTRAL_V7, "sys_later", conv_sys_later, 4, GEN_BOTH, "<s>", NULL,
     "<s>[INST] Hi[/INST] Hello</s>[SYSTEM_PROMPT] Now be formal.[/SYSTEM_PROMPT][INST] Greetings[/INST]"},
    {"mistral-v7", CHAT_MISTRAL_V7, "sys_odd", conv_sys_odd, 3, GEN_BOTH, "<s>", NULL,
     "<s>[INST] Hi[/INST][SYSTEM_PROMPT] Be formal.[/SYSTEM_PROMPT][INST] Greetings[/INST]"},
    {"mistral-v7", CHAT_MISTRAL_V7, "user_user", conv_user_user, 2, GEN_BOTH, "<s>", NULL,
     "<s>[INST] one[/INST][INST] two[/INST]"},
    {"mistral-v7", CHAT_MISTRAL_V7, "assistant_first", conv_assistant_first, 2, GEN_BOTH, "<s>", NULL,
     "<s> I speak first</s>[INST] ok[/INST]"},
    {"mistral-v7-tekken", CHAT_MISTRAL_V7_TEKKEN, "user", conv_user, 1, GEN_BOTH, "<s>", NULL,
     "<s>[INST]Hi[/INST]"},
    {"mistral-v7-tekken", CHAT_MISTRAL_V7_TEKKEN, "sys_user", conv_sys_user, 2, GEN_BOTH, "<s>", NULL,
     "<s>[SYSTEM_PROMPT]You are a helpful assistant.[/SYSTEM_PROMPT][INST]Hello! How are you?[/INST]"},
    {"mistral-v7-tekken", CHAT_MISTRAL_V7_TEKKEN, "multi", conv_multi, 4, GEN_BOTH, "<s>", NULL,
     "<s>[SYSTEM_PROMPT]You are terse.[/SYSTEM_PROMPT][INST]What is 2+2?[/INST]4</s>[INST]And 3+3?[/INST]"},
    {"mistral-v7-tekken", CHAT_MISTRAL_V7_TEKKEN, "multi_nosys", conv_multi_nosys, 3, GEN_BOTH, "<s>", NULL,
     "<s>[INST]What is 2+2?[/INST]4</s>[INST]And 3+3?[/INST]"},
    {"mistral-v7-tekken", CHAT_MISTRAL_V7_TEKKEN, "ends_assistant", conv_ends_assistant, 3, GEN_BOTH, "<s>", NULL,
     "<s>[SYSTEM_PROMPT]Be kind.[/SYSTEM_PROMPT][INST]Hi there[/INST]Hello! How can I help?</s>"},
    {"mistral-v7-tekken", CHAT_MISTRAL_V7_TEKKEN, "spaces", conv_spaces, 4, GEN_BOTH, "<s>", NULL,
     "<s>[SYSTEM_PROMPT]  Be brief.\n[/SYSTEM_PROMPT][INST]\n  Hello there  \n[/INST]  Hi!  \n\n</s>[INST]\tBye\302\240\342\200\212\343\200\200[/INST]"},
    {"mistral-v7-tekken", CHAT_MISTRAL_V7_TEKKEN, "blank", conv_blank, 4, GEN_BOTH, "<s>", NULL,
     "<s>[SYSTEM_PROMPT][/SYSTEM_PROMPT][INST] [/INST]</s>[INST]\034\302\205\342\200\203x\341\232\200\342\200\251 [/INST]"},
    {"mistral-v7-tekken", CHAT_MISTRAL_V7_TEKKEN, "sys_only", conv_sys_only, 1, GEN_BOTH, "<s>", NULL,
     "<s>[SYSTEM_PROMPT]Only a system message.[/SYSTEM_PROMPT]"},
    {"mistral-v7-tekken", CHAT_MISTRAL_V7_TEKKEN, "two_sys", conv_two_sys, 3, GEN_BOTH, "<s>", NULL,
     "<s>[SYSTEM_PROMPT]First.[/SYSTEM_PROMPT][SYSTEM_PROMPT]Second.[/SYSTEM_PROMPT][INST]Hi[/INST]"},
    {"mistral-v7-tekken", CHAT_MISTRAL_V7_TEKKEN, "sys_later", conv_sys_later, 4, GEN_BOTH, "<s>", NULL,
     "<s>[INST]Hi[/INST]Hello</s>[SYSTEM_PROMPT]Now be formal.[/SYSTEM_PROMPT][INST]Greetings[/INST]"},
    {"mistral-v7-tekken", CHAT_MISTRAL_V7_TEKKEN, "sys_odd", conv_sys_odd, 3, GEN_BOTH, "<s>", NULL,
     "<s>[INST]Hi[/INST][SYSTEM_PROMPT]Be formal.[/SYSTEM_PROMPT][INST]Greetings[/INST]"},
    {"mistral-v7-tekken", CHAT_MISTRAL_V7_TEKKEN, "user_user", conv_user_user, 2, GEN_BOTH, "<s>", NULL,
     "<s>[INST]one[/INST][INST]two[/INST]"},
    {"mistral-v7-tekken", CHAT_MISTRAL_V7_TEKKEN, "assistant_first", conv_assistant_first, 2, GEN_BOTH, "<s>", NULL,
     "<s>I speak first</s>[INST]ok[/INST]"},
    {"gemma", CHAT_GEMMA, "user", conv_user, 1, GEN_YES, "<bos>", NULL,
     "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"},
    {"gemma", CHAT_GEMMA, "user", conv_user, 1, GEN_NO, "<bos>", NULL,
     "<bos><start_of_turn>user\nHi<end_of_turn>\n"},
    {"gemma", CHAT_GEMMA, "sys_user", conv_sys_user, 2, GEN_BOTH, "<bos>", NULL,
     NULL},
    {"gemma", CHAT_GEMMA, "multi", conv_multi, 4, GEN_BOTH, "<bos>", NULL,
     NULL},
    {"gemma", CHAT_GEMMA, "multi_nosys", conv_multi_nosys, 3, GEN_YES, "<bos>", NULL,
     "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n"},
    {"gemma", CHAT_GEMMA, "multi_nosys", conv_multi_nosys, 3, GEN_NO, "<bos>", NULL,
     "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n<start_of_turn>user\nAnd 3+3?<end_of_turn>\n"},
    {"gemma", CHAT_GEMMA, "ends_assistant", conv_ends_assistant, 3, GEN_BOTH, "<bos>", NULL,
     NULL},
    {"gemma", CHAT_GEMMA, "spaces", conv_spaces, 4, GEN_BOTH, "<bos>", NULL,
     NULL},
    {"gemma", CHAT_GEMMA, "blank", conv_blank, 4, GEN_BOTH, "<bos>", NULL,
     NULL},
    {"gemma", CHAT_GEMMA, "sys_only", conv_sys_only, 1, GEN_BOTH, "<bos>", NULL,
     NULL},
    {"gemma", CHAT_GEMMA, "two_sys", conv_two_sys, 3, GEN_BOTH, "<bos>", NULL,
     NULL},
    {"gemma", CHAT_GEMMA, "sys_later", conv_sys_later, 4, GEN_BOTH, "<bos>", NULL,
     NULL},
    {"gemma", CHAT_GEMMA, "user_user", conv_user_user, 2, GEN_BOTH, "<bos>", NULL,
     NULL},
    {"gemma", CHAT_GEMMA, "assistant_first", conv_assistant_first, 2, GEN_BOTH, "<bos>", NULL,
     NULL},
    {"gemma3", CHAT_GEMMA3, "user", conv_user, 1, GEN_YES, "<bos>", NULL,
     "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"},
    {"gemma3", CHAT_GEMMA3, "user", conv_user, 1, GEN_NO, "<bos>", NULL,
     "<bos><start_of_turn>user\nHi<end_of_turn>\n"},
    {"gemma3", CHAT_GEMMA3, "sys_user", conv_sys_user, 2, GEN_YES, "<bos>", NULL,
     "<bos><start_of_turn>user\nYou are a helpful assistant.\n\nHello! How are you?<end_of_turn>\n<start_of_turn>model\n"},
    {"gemma3", CHAT_GEMMA3, "sys_user", conv_sys_user, 2, GEN_NO, "<bos>", NULL,
     "<bos><start_of_turn>user\nYou are a helpful assistant.\n\nHello! How are you?<end_of_turn>\n"},
    {"gemma3", CHAT_GEMMA3, "multi", conv_multi, 4, GEN_YES, "<bos>", NULL,
     "<bos><start_of_turn>user\nYou are terse.\n\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n"},
    {"gemma3", CHAT_GEMMA3, "multi", conv_multi, 4, GEN_NO, "<bos>", NULL,
     "<bos><start_of_turn>user\nYou are terse.\n\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n<start_of_turn>user\nAnd 3+3?<end_of_turn>\n"},
    {"gemma3", CHAT_GEMMA3, "multi_nosys", conv_multi_nosys, 3, GEN_YES, "<bos>", NULL,
     "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n"},
    {"gemma3", CHAT_GEMMA3, "multi_nosys", conv_multi_nosys, 3, GEN_NO, "<bos>", NULL,
     "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n<start_of_turn>user\nAnd 3+3?<end_of_turn>\n"},
    {"gemma3", CHAT_GEMMA3, "ends_assistant", conv_ends_assistant, 3, GEN_YES, "<bos>", NULL,
     "<bos><start_of_turn>user\nBe kind.\n\nHi there<end_of_turn>\n<start_of_turn>model\nHello! How can I help?<end_of_turn>\n<start_of_turn>model\n"},
    {"gemma3", CHAT_GEMMA3, "ends_assistant", conv_ends_assistant, 3, GEN_NO, "<bos>", NULL,
     "<bos><start_of_turn>user\nBe kind.\n\nHi there<end_of_turn>\n<start_of_turn>model\nHello! How can I help?<end_of_turn>\n"},
    {"gemma3", CHAT_GEMMA3, "spaces", conv_spaces, 4, GEN_YES, "<bos>", NULL,
     "<bos><start_of_turn>user\n  Be brief.\n\n\nHello there<end_of_turn>\n<start_of_turn>model\nHi!<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"},
    {"gemma3", CHAT_GEMMA3, "spaces", conv_spaces, 4, GEN_NO, "<bos>", NULL,
     "<bos><start_of_turn>user\n  Be brief.\n\n\nHello there<end_of_turn>\n<start_of_turn>model\nHi!<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n"},
    {"gemma3", CHAT_GEMMA3, "blank", conv_blank, 4, GEN_YES, "<bos>", NULL,
     "<bos><start_of_turn>user\n\n\n<end_of_turn>\n<start_of_turn>model\n<end_of_turn>\n<start_of_turn>user\nx<end_of_turn>\n<start_of_turn>model\n"},
    {"gemma3", CHAT_GEMMA3, "blank", conv_blank, 4, GEN_NO, "<bos>", NULL,
     "<bos><start_of_turn>user\n\n\n<end_of_turn>\n<start_of_turn>model\n<end_of_turn>\n<start_of_turn>user\nx<end_of_turn>\n"},
    {"gemma3", CHAT_GEMMA3, "sys_only", conv_sys_only, 1, GEN_YES, "<bos>", NULL,
     "<bos><start_of_turn>model\n"},
    {"gemma3", CHAT_GEMMA3, "sys_only", conv_sys_only, 1, GEN_NO, "<bos>", NULL,
     "<bos>"},
    {"gemma3", CHAT_GEMMA3, "two_sys", conv_two_sys, 3, GEN_BOTH, "<bos>", NULL,
     NULL},
    {"gemma3", CHAT_GEMMA3, "sys_later", conv_sys_later, 4, GEN_BOTH, "<bos>", NULL,
     NULL},
    {"gemma3", CHAT_GEMMA3, "user_user", conv_user_user, 2, GEN_BOTH, "<bos>", NULL,
     NULL},
    {"gemma3", CHAT_GEMMA3, "assistant_first", conv_assistant_first, 2, GEN_BOTH, "<bos>", NULL,
     NULL},
    {"phi3", CHAT_PHI3, "user", conv_user, 1, GEN_YES, "<s>", NULL,
     "<|user|>\nHi<|end|>\n<|assistant|>\n"},
    {"phi3", CHAT_PHI3, "user", conv_user, 1, GEN_NO, "<s>", NULL,
     "<|user|>\nHi<|end|>\n<|endoftext|>"},
    {"phi3", CHAT_PHI3, "sys_user", conv_sys_user, 2, GEN_YES, "<s>", NULL,
     "<|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nHello! How are you?<|end|>\n<|assistant|>\n"},
    {"phi3", CHAT_PHI3, "sys_user", conv_sys_user, 2, GEN_NO, "<s>", NULL,
     "<|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nHello! How are you?<|end|>\n<|endoftext|>"},
    {"phi3", CHAT_PHI3, "multi", conv_multi, 4, GEN_YES, "<s>", NULL,
     "<|system|>\nYou are terse.<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n4<|end|>\n<|user|>\nAnd 3+3?<|end|>\n<|assistant|>\n"},
    {"phi3", CHAT_PHI3, "multi", conv_multi, 4, GEN_NO, "<s>", NULL,
     "<|system|>\nYou are terse.<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n4<|end|>\n<|user|>\nAnd 3+3?<|end|>\n<|endoftext|>"},
    {"phi3", CHAT_PHI3, "multi_nosys", conv_multi_nosys, 3, GEN_YES, "<s>", NULL,
     "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n4<|end|>\n<|user|>\nAnd 3+3?<|end|>\n<|assistant|>\n"},
    {"phi3", CHAT_PHI3, "multi_nosys", conv_multi_nosys, 3, GEN_NO, "<s>", NULL,
     "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n4<|end|>\n<|user|>\nAnd 3+3?<|end|>\n<|endoftext|>"},
    {"phi3", CHAT_PHI3, "ends_assistant", conv_ends_assistant, 3, GEN_YES, "<s>", NULL,
     "<|system|>\nBe kind.<|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\nHello! How can I help?<|end|>\n<|assistant|>\n"},
    {"phi3", CHAT_PHI3, "ends_assistant", conv_ends_assistant, 3, GEN_NO, "<s>", NULL,
     "<|system|>\nBe kind.<|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\nHello! How can I help?<|end|>\n<|endoftext|>"},
    {"phi3", CHAT_PHI3, "spaces", conv_spaces, 4, GEN_YES, "<s>", NULL,
     "<|system|>\n  Be brief.\n<|end|>\n<|user|>\n\n  Hello there  \n<|end|>\n<|assistant|>\n  Hi!  \n\n<|end|>\n<|user|>\n\tBye\302\240\342\200\212\343\200\200<|end|>\n<|assistant|>\n"},
    {"phi3", CHAT_PHI3, "spaces", conv_spaces, 4, GEN_NO, "<s>", NULL,
     "<|system|>\n  Be brief.\n<|end|>\n<|user|>\n\n  Hello there  \n<|end|>\n<|assistant|>\n  Hi!  \n\n<|end|>\n<|user|>\n\tBye\302\240\342\200\212\343\200\200<|end|>\n<|endoftext|>"},
    {"phi3", CHAT_PHI3, "blank", conv_blank, 4, GEN_YES, "<s>", NULL,
     "<|user|>\n <|end|>\n<|assistant|>\n<|end|>\n<|user|>\n\034\302\205\342\200\203x\341\232\200\342\200\251 <|end|>\n<|assistant|>\n"},
    {"phi3", CHAT_PHI3, "blank", conv_blank, 4, GEN_NO, "<s>", NULL,
     "<|user|>\n <|end|>\n<|assistant|>\n<|end|>\n<|user|>\n\034\302\205\342\200\203x\341\232\200\342\200\251 <|end|>\n<|endoftext|>"},
    {"phi3", CHAT_PHI3, "sys_only", conv_sys_only, 1, GEN_YES, "<s>", NULL,
     "<|system|>\nOnly a system message.<|end|>\n<|assistant|>\n"},
    {"phi3", CHAT_PHI3, "sys_only", conv_sys_only, 1, GEN_NO, "<s>", NULL,
     "<|system|>\nOnly a system message.<|end|>\n<|endoftext|>"},
    {"phi3", CHAT_PHI3, "two_sys", conv_two_sys, 3, GEN_YES, "<s>", NULL,
     "<|system|>\nFirst.<|end|>\n<|system|>\nSecond.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n"},
    {"phi3", CHAT_PHI3, "two_sys", conv_two_sys, 3, GEN_NO, "<s>", NULL,
     "<|system|>\nFirst.<|end|>\n<|system|>\nSecond.<|end|>\n<|user|>\nHi<|end|>\n<|endoftext|>"},
    {"phi3", CHAT_PHI3, "sys_later", conv_sys_later, 4, GEN_YES, "<s>", NULL,
     "<|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n<|system|>\nNow be formal.<|end|>\n<|user|>\nGreetings<|end|>\n<|assistant|>\n"},
    {"phi3", CHAT_PHI3, "sys_later", conv_sys_later, 4, GEN_NO, "<s>", NULL,
     "<|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n<|system|>\nNow be formal.<|end|>\n<|user|>\nGreetings<|end|>\n<|endoftext|>"},
    {"phi3", CHAT_PHI3, "sys_odd", conv_sys_odd, 3, GEN_YES, "<s>", NULL,
     "<|user|>\nHi<|end|>\n<|system|>\nBe formal.<|end|>\n<|user|>\nGreetings<|end|>\n<|assistant|>\n"},
    {"phi3", CHAT_PHI3, "sys_odd", conv_sys_odd, 3, GEN_NO, "<s>", NULL,
     "<|user|>\nHi<|end|>\n<|system|>\nBe formal.<|end|>\n<|user|>\nGreetings<|end|>\n<|endoftext|>"},
    {"phi3", CHAT_PHI3, "user_user", conv_user_user, 2, GEN_YES, "<s>", NULL,
     "<|user|>\none<|end|>\n<|user|>\ntwo<|end|>\n<|assistant|>\n"},
    {"phi3", CHAT_PHI3, "user_user", conv_user_user, 2, GEN_NO, "<s>", NULL,
     "<|user|>\none<|end|>\n<|user|>\ntwo<|end|>\n<|endoftext|>"},
    {"phi3", CHAT_PHI3, "assistant_first", conv_assistant_first, 2, GEN_YES, "<s>", NULL,
     "<|assistant|>\nI speak first<|end|>\n<|user|>\nok<|end|>\n<|assistant|>\n"},
    {"phi3", CHAT_PHI3, "assistant_first", conv_assistant_first, 2, GEN_NO, "<s>", NULL,
     "<|assistant|>\nI speak first<|end|>\n<|user|>\nok<|end|>\n<|endoftext|>"},
};

/* Renders every golden of one reference template; returns how many ran. */
static int run_goldens(const char *tmpl) {
    int ran = 0;
    for (size_t i = 0; i < N(goldens); i++) {
        const golden *g = &goldens[i];
        if (strcmp(g->tmpl, tmpl)) continue;
        chat_msg m[16];
        size_t n = 0;
        cr_assert(g->n < N(m));
        if (g->default_system && strcmp(g->m[0].role, "system")) m[n++] = (chat_msg){"system", g->default_system};
        for (size_t k = 0; k < g->n; k++) m[n++] = g->m[k];
        for (int pass = 0; pass < 2; pass++) {
            if (g->gen != GEN_BOTH && pass) break;
            bool gen = g->gen == GEN_BOTH ? pass == 0 : g->gen == GEN_YES;
            char what[160], err[256] = "";
            snprintf(what, sizeof what, "%s, conversation %s, add_generation_prompt=%d", tmpl, g->conv, gen);
            char *got = chat_render(g->f, m, n, gen, g->bos, err, sizeof err);
            if (g->want) {
                cr_expect_not_null(got, "%s: %s", what, err);
                if (got) expect_same(got, g->want, what);
            } else {
                cr_expect_null(got, "%s: rendered [%s] where the template refuses", what, got ? got : "");
                cr_expect(err[0] != 0, "%s: no error message", what);
            }
            free(got);
            ran++;
        }
    }
    cr_assert_gt(ran, 0, "no goldens for %s", tmpl);
    return ran;
}

Test(chat, golden_chatml) { run_goldens("chatml"); }
Test(chat, golden_qwen2) { run_goldens("qwen2"); }
Test(chat, golden_qwen2_5) { run_goldens("qwen2.5"); }
Test(chat, golden_smollm2) { run_goldens("smollm2"); }
Test(chat, golden_qwen3) { run_goldens("qwen3"); }
Test(chat, golden_llama3) { run_goldens("llama3"); }
Test(chat, golden_llama3_always_gen) { run_goldens("llama3-always-gen"); }
Test(chat, golden_llama3_1) { run_goldens("llama3.1"); }
Test(chat, golden_llama2) { run_goldens("llama2"); }
Test(chat, golden_mistral) { run_goldens("mistral"); }
Test(chat, golden_mistral_v1) { run_goldens("mistral-v1"); }
Test(chat, golden_mistral_v3) { run_goldens("mistral-v3"); }
Test(chat, golden_mistral_v3_tekken) { run_goldens("mistral-v3-tekken"); }
Test(chat, golden_mistral_v7) { run_goldens("mistral-v7"); }
Test(chat, golden_mistral_v7_tekken) { run_goldens("mistral-v7-tekken"); }
Test(chat, golden_gemma) { run_goldens("gemma"); }
Test(chat, golden_gemma3) { run_goldens("gemma3"); }
Test(chat, golden_phi3) { run_goldens("phi3"); }

/* Every golden belongs to one of the tests above. */
Test(chat, goldens_all_covered) {
    static const char *const names[] = {"chatml",     "qwen2",      "qwen2.5",           "smollm2",    "qwen3",
                                        "llama3",     "llama3-always-gen", "llama3.1", "llama2",     "mistral",
                                        "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken",
                                        "gemma",      "gemma3",     "phi3"};
    for (size_t i = 0; i < N(goldens); i++) {
        bool known = false;
        for (size_t k = 0; k < N(names); k++) known |= !strcmp(goldens[i].tmpl, names[k]);
        cr_expect(known, "golden %zu names template %s, which no test runs", i, goldens[i].tmpl);
    }
}

/* ---- Qwen3's reasoning, spelled out ---------------------------------------------------- */

/* The reasoning of assistant turns before the last user query is dropped; the final
 * assistant turn keeps it in a <think> block; the generation prompt is only the header. */
Test(chat, qwen3_strips_earlier_reasoning) {
    const chat_msg m[] = {
        {"user", "q1"},
        {"assistant", "<think>\nold thoughts\n</think>\n\nanswer one"},
        {"user", "q2"},
        {"assistant", "<think>\nnew thoughts\n</think>\n\nanswer two"},
    };
    char *s = render(CHAT_QWEN3, m, N(m), false, NULL);
    expect_same(s,
                "<|im_start|>user\nq1<|im_end|>\n"
                "<|im_start|>assistant\nanswer one<|im_end|>\n"
                "<|im_start|>user\nq2<|im_end|>\n"
                "<|im_start|>assistant\n<think>\nnew thoughts\n</think>\n\nanswer two<|im_end|>\n",
                "qwen3 reasoning");
    free(s);
    s = render(CHAT_QWEN3, m, 3, true, NULL);
    expect_same(s,
                "<|im_start|>user\nq1<|im_end|>\n"
                "<|im_start|>assistant\nanswer one<|im_end|>\n"
                "<|im_start|>user\nq2<|im_end|>\n"
                "<|im_start|>assistant\n",
                "qwen3 generation prompt");
    free(s);
}

/* ---- detection ------------------------------------------------------------------------- */

/* Excerpts of the reference templates (see the top of this file), enough to carry each
 * family's markers. */
Test(chat, detects_each_family) {
    static const struct {
        const char *src;
        int want;
    } cases[] = {
        /* teknium/OpenHermes-2.5-Mistral-7B (whole) */
        {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
         "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
         CHAT_CHATML},
        /* Qwen3 */
        {"{%- if '</think>' in message.content %}{%- set content = message.content.split('</think>')[-1] %}"
         "{{- '<|im_start|>' + message.role + '\\n<think>\\n' }}",
         CHAT_QWEN3},
        /* meta-llama/Meta-Llama-3-8B-Instruct, later revision (whole) */
        {"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
         "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
         "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
         "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
         "{% endif %}",
         CHAT_LLAMA3},
        /* the same, first revision */
        {"{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + "
         "'<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{{ content }}{% endfor %}"
         "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}",
         CHAT_LLAMA3_ALWAYS_GEN},
        /* meta-llama/Llama-3.3-70B-Instruct */
        {"{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{{- \"Cutting Knowledge Date: December "
         "2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n{%- if add_generation_prompt %}",
         CHAT_LLAMA31},
        /* meta-llama/Llama-2-7b-chat-hf */
        {"{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
         "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}",
         CHAT_LLAMA2},
        /* mistralai/Mistral-7B-Instruct-v0.2, first revision */
        {"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
         "message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + "
         "eos_token}}{% endif %}{% endfor %}",
         CHAT_MISTRAL},
        /* its later revision: Mistral's v1 */
        {"{%- if loop.first and system_message is defined %}\n{{- ' [INST] ' + system_message + '\\n\\n' + "
         "message['content'] + ' [/INST]' }}",
         CHAT_MISTRAL_V1},
        /* mistralai/Mistral-Large-Instruct-2407: v3 */
        {"{{- \"[AVAILABLE_TOOLS] [\" }}\n{{- \"[INST] \" + system_message + \"\\n\\n\" + message[\"content\"] + "
         "\"[/INST]\" }}",
         CHAT_MISTRAL_V3},
        /* mistralai/Mistral-Nemo-Instruct-2407: v3-tekken */
        {"{{- \"[AVAILABLE_TOOLS][\" }}\n{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}",
         CHAT_MISTRAL_V3_TEKKEN},
        /* mistralai/Mistral-Large-Instruct-2411: v7 */
        {"{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + '[/INST]' }}{% elif "
         "message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}",
         CHAT_MISTRAL_V7},
        /* mistralai/Mistral-Small-3.2-24B-Instruct-2506: v7-tekken */
        {"{{- '[SYSTEM_PROMPT]' + system_prompt + '[/SYSTEM_PROMPT]' }}\n{{- '[INST]' }}", CHAT_MISTRAL_V7_TEKKEN},
        /* google/gemma-2-2b-it */
        {"{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
         "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}",
         CHAT_GEMMA},
        /* google/gemma-3-4b-it */
        {"{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n{{ '<start_of_turn>' + role + '\\n' + "
         "(first_user_prefix if loop.first else \"\") }}",
         CHAT_GEMMA3},
        /* microsoft/Phi-3.5-mini-instruct (whole) */
        {"{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}{{'<|system|>\n' + "
         "message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + "
         "'<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + "
         "'<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}"
         "{{ eos_token }}{% endif %}",
         CHAT_PHI3},
        /* microsoft/Phi-3-small-8k-instruct: the role from the message */
        {"{{'<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n' }}{% endfor %}"
         "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}",
         CHAT_PHI3},
        /* not supported: Phi-4 (<|im_sep|>), Phi-4-mini (<|tool|>), SmolVLM, SmolLM3, Llama 4, DeepSeek,
         * Jinja without any known marker */
        {"{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}", -1},
        {"{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + message['tools'] + '<|/tool|>' + "
         "'<|end|>' }}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}",
         -1},
        {"<|im_start|>{% for message in messages %}User:{{ content }}<end_of_utterance>\n{% endfor %}", -1},
        /* HuggingFaceTB/SmolLM3-3B */
        {"{{- \"<|im_start|>system\\n\" -}}\n{{- \"## Metadata\\n\\n\" -}}\n{{- \"Knowledge Cutoff Date: June 2025\\n\" -}}",
         -1},
        {"{{- '<|header_start|>' + message['role'] + '<|header_end|>\\n\\n' }}", -1},
        {"{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + message['content']}}", -1},
        {"{% for message in messages %}{{ message['content'] }}{% endfor %}", -1},
        {"", -1},
    };
    for (size_t i = 0; i < N(cases); i++)
        cr_expect_eq(chat_detect(cases[i].src), cases[i].want, "case %zu: detected %d, want %d", i,
                     chat_detect(cases[i].src), cases[i].want);
    cr_expect_eq(chat_detect(NULL), -1);
}

/* A family's own name stands for its template, as llama.cpp accepts. */
Test(chat, detects_family_names) {
    for (int f = 0; f < CHAT_COUNT; f++) cr_expect_eq(chat_detect(chat_family_name((chat_family)f)), f);
}

/* ---- names and end of turn -------------------------------------------------------------- */

Test(chat, family_names_round_trip) {
    for (int f = 0; f < CHAT_COUNT; f++) {
        const char *name = chat_family_name((chat_family)f);
        cr_assert_not_null(name);
        cr_expect_eq(chat_family_from_name(name), f, "%s", name);
        for (int g = 0; g < f; g++) cr_expect_str_neq(name, chat_family_name((chat_family)g));
    }
    cr_expect_str_eq(chat_family_name(CHAT_CHATML), "chatml");
    cr_expect_str_eq(chat_family_name(CHAT_QWEN3), "qwen3");
    cr_expect_str_eq(chat_family_name(CHAT_LLAMA3), "llama3");
    cr_expect_str_eq(chat_family_name(CHAT_LLAMA2), "llama2");
    cr_expect_str_eq(chat_family_name(CHAT_MISTRAL), "mistral");
    cr_expect_str_eq(chat_family_name(CHAT_GEMMA), "gemma");
    cr_expect_str_eq(chat_family_name(CHAT_PHI3), "phi3");
    cr_expect_eq(chat_family_from_name("vicuna"), -1);
    cr_expect_eq(chat_family_from_name("ChatML"), -1);
    cr_expect_eq(chat_family_from_name(""), -1);
    cr_expect_eq(chat_family_from_name(NULL), -1);
    cr_expect_str_eq(chat_family_name(CHAT_COUNT), "unknown");
    cr_expect_str_eq(chat_family_name((chat_family)-1), "unknown");
}

Test(chat, end_of_turn_per_family) {
    static const struct {
        chat_family f;
        const char *eot;
    } cases[] = {
        {CHAT_CHATML, "<|im_end|>"},        {CHAT_QWEN3, "<|im_end|>"},         {CHAT_LLAMA3, "<|eot_id|>"},
        {CHAT_LLAMA3_ALWAYS_GEN, "<|eot_id|>"}, {CHAT_LLAMA31, "<|eot_id|>"},   {CHAT_LLAMA2, "</s>"},
        {CHAT_MISTRAL, "</s>"},             {CHAT_MISTRAL_V1, "</s>"},          {CHAT_MISTRAL_V3, "</s>"},
        {CHAT_MISTRAL_V3_TEKKEN, "</s>"},   {CHAT_MISTRAL_V7, "</s>"},          {CHAT_MISTRAL_V7_TEKKEN, "</s>"},
        {CHAT_GEMMA, "<end_of_turn>"},      {CHAT_GEMMA3, "<end_of_turn>"},     {CHAT_PHI3, "<|end|>"},
    };
    cr_assert_eq(N(cases), (size_t)CHAT_COUNT, "a family has no end-of-turn case");
    for (size_t i = 0; i < N(cases); i++) {
        const char *e = chat_end_of_turn(cases[i].f);
        cr_assert_not_null(e, "%s", chat_family_name(cases[i].f));
        cr_expect_str_eq(e, cases[i].eot, "%s", chat_family_name(cases[i].f));
    }
    cr_expect_null(chat_end_of_turn(CHAT_COUNT));
    cr_expect_null(chat_end_of_turn((chat_family)-1));
}

/* ---- default system messages ----------------------------------------------------------- */

static void expect_default(const char *tmpl, const char *want) {
    char *got = (char *)1, err[128] = "";
    cr_assert_eq(chat_default_system(tmpl, &got, err, sizeof err), 0, "%s", err);
    if (want) {
        cr_assert_not_null(got, "no default found in [%s]", tmpl);
        cr_expect_str_eq(got, want);
    } else {
        cr_expect_null(got, "found [%s] in [%s]", got ? got : "", tmpl);
    }
    free(got);
}

Test(chat, default_system_messages) {
    /* Qwen/Qwen2-7B-Instruct (whole) */
    expect_default("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                   "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
                   "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
                   "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
                   "You are a helpful assistant.");
    /* HuggingFaceTB/SmolLM2-1.7B-Instruct, where the literal holds real newlines */
    expect_default("{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a "
                   "helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}",
                   "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    /* Qwen/Qwen2.5-7B-Instruct: the tools branch opens the turn without the text */
    expect_default("{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' "
                   "%}\n        {{- messages[0]['content'] }}\n    {%- else %}\n        {{- 'You are Qwen, created by "
                   "Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n{%- else %}\n    {%- if "
                   "messages[0]['role'] == 'system' %}\n        {{- '<|im_start|>system\\n' + messages[0]['content'] + "
                   "'<|im_end|>\\n' }}\n    {%- else %}\n        {{- '<|im_start|>system\\nYou are Qwen, created by "
                   "Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}",
                   "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    /* escapes in the literal, and a default written as template text between tags */
    expect_default("{{ \"<|im_start|>system\\nIt\\'s \\\"caf\\u00e9\\\"\\tok<|im_end|>\\n\" }}",
                   "It's \"caf\xc3\xa9\"\tok");
    expect_default("{{ '<|im_start|>system\\n\\x41\\101\\q\\\nZ<|im_end|>' }}", "AA\\qZ"); /* \q stays */
    expect_default("{% if messages[0]['role'] != 'system' %}<|im_start|>system\nBe nice.<|im_end|>\n{% endif %}",
                   "Be nice.");
    /* none: plain ChatML, Qwen3's system turn, a system turn written from the message */
    expect_default("{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}", NULL);
    expect_default("{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}", NULL);
    expect_default("<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n", NULL);
    expect_default("{{ '<|im_start|>system\\n<|im_end|>' }}", NULL);
    expect_default("{{ '<|im_start|>system\\nunterminated", NULL);
    expect_default("", NULL);
    expect_default(NULL, NULL);
    cr_expect_eq(chat_default_system("x", NULL, NULL, 0), 0);
}

/* ---- errors ---------------------------------------------------------------------------- */

Test(chat, refuses_empty_and_malformed_conversations) {
    const chat_msg ok[] = {{"user", "hi"}};
    char err[256] = "";
    for (int f = 0; f < CHAT_COUNT; f++) {
        err[0] = 0;
        cr_expect_null(chat_render((chat_family)f, ok, 0, true, "", err, sizeof err));
        cr_expect(strstr(err, "no messages") != NULL, "%s: [%s]", chat_family_name((chat_family)f), err);
        err[0] = 0;
        cr_expect_null(chat_render((chat_family)f, NULL, 3, true, "", err, sizeof err));
        cr_expect(strstr(err, "no messages") != NULL, "[%s]", err);

        const chat_msg tool[] = {{"user", "hi"}, {"tool", "42"}};
        expect_refused((chat_family)f, tool, N(tool), "unknown role 'tool'");
        const chat_msg upper[] = {{"User", "hi"}};
        expect_refused((chat_family)f, upper, N(upper), "unknown role 'User'");
        const chat_msg no_role[] = {{NULL, "hi"}};
        expect_refused((chat_family)f, no_role, N(no_role), "message 0 has no role");
        const chat_msg no_content[] = {{"user", "hi"}, {"assistant", NULL}};
        expect_refused((chat_family)f, no_content, N(no_content), "message 1 (assistant) has no content");
    }
    expect_refused(CHAT_COUNT, ok, 1, "unknown chat template family");
    expect_refused((chat_family)-5, ok, 1, "unknown chat template family");
}

/* Llama 2, Mistral (but v7) and Gemma require user/assistant turns alternating from a
 * user turn, after an optional system message where the template has one. */
Test(chat, refuses_role_orders_the_template_refuses) {
    const chat_msg sys_user[] = {{"system", "s"}, {"user", "u"}};
    const chat_msg assistant_first[] = {{"assistant", "a"}, {"user", "u"}};
    const chat_msg two_users[] = {{"system", "s"}, {"user", "u1"}, {"user", "u2"}};
    const chat_msg two_systems[] = {{"system", "s1"}, {"system", "s2"}, {"user", "u"}};
    /* Llama 2 silently drops, and Gemma writes as a "system" turn, a system message at an
     * odd position; kiln refuses it rather than lose or invent a turn. */
    const chat_msg sys_odd[] = {{"user", "u1"}, {"system", "s"}, {"user", "u2"}};
    static const chat_family strict[] = {CHAT_LLAMA2,     CHAT_MISTRAL,           CHAT_MISTRAL_V1, CHAT_MISTRAL_V3,
                                         CHAT_MISTRAL_V3_TEKKEN, CHAT_GEMMA,      CHAT_GEMMA3};
    for (size_t i = 0; i < N(strict); i++) {
        chat_family f = strict[i];
        expect_refused(f, assistant_first, N(assistant_first), "must alternate");
        bool no_system = f == CHAT_MISTRAL || f == CHAT_GEMMA;
        expect_refused(f, sys_odd, N(sys_odd), no_system ? "no system role" : "only as the first");
        if (no_system) {
            expect_refused(f, sys_user, N(sys_user), "no system role");
        } else {
            expect_refused(f, two_users, N(two_users), "must alternate");
            expect_refused(f, two_systems, N(two_systems), "only as the first");
        }
    }
    /* the others take any order */
    static const chat_family lenient[] = {CHAT_CHATML, CHAT_QWEN3,      CHAT_LLAMA3,           CHAT_LLAMA3_ALWAYS_GEN,
                                          CHAT_LLAMA31, CHAT_MISTRAL_V7, CHAT_MISTRAL_V7_TEKKEN, CHAT_PHI3};
    for (size_t i = 0; i < N(lenient); i++) {
        free(render(lenient[i], assistant_first, N(assistant_first), true, "<s>"));
        free(render(lenient[i], sys_odd, N(sys_odd), true, "<s>"));
        free(render(lenient[i], two_systems, N(two_systems), false, "<s>"));
    }
}

/* Errors fit the caller's buffer, and a NULL or empty one is not written. */
Test(chat, error_buffer_handling) {
    const chat_msg bad[] = {{"narrator", "once upon a time"}};
    char small[12];
    memset(small, 'x', sizeof small);
    cr_expect_null(chat_render(CHAT_CHATML, bad, 1, true, "", small, sizeof small));
    cr_expect_eq(strlen(small), sizeof small - 1);
    cr_expect_null(chat_render(CHAT_CHATML, bad, 1, true, "", NULL, 0));
    char one = 'x';
    cr_expect_null(chat_render(CHAT_CHATML, bad, 1, true, "", &one, 0));
    cr_expect_eq(one, 'x');
}

/* bos is written only where the template writes bos_token; NULL is "". A template may
 * render nothing at all (Llama 2 given only a system message): an empty string, not NULL. */
Test(chat, bos_placement_and_empty_output) {
    const chat_msg m[] = {{"user", "hi"}};
    static const struct {
        chat_family f;
        bool writes_bos;
    } cases[] = {
        {CHAT_CHATML, false},    {CHAT_QWEN3, false},     {CHAT_LLAMA3, true},          {CHAT_LLAMA3_ALWAYS_GEN, true},
        {CHAT_LLAMA31, true},    {CHAT_LLAMA2, true},     {CHAT_MISTRAL, true},         {CHAT_MISTRAL_V1, true},
        {CHAT_MISTRAL_V3, true}, {CHAT_MISTRAL_V3_TEKKEN, true}, {CHAT_MISTRAL_V7, true}, {CHAT_MISTRAL_V7_TEKKEN, true},
        {CHAT_GEMMA, true},      {CHAT_GEMMA3, true},     {CHAT_PHI3, false},
    };
    for (size_t i = 0; i < N(cases); i++) {
        char *with = render(cases[i].f, m, 1, true, "<BOS>");
        char *without = render(cases[i].f, m, 1, true, NULL);
        cr_expect_eq(strncmp(with, "<BOS>", 5) == 0, cases[i].writes_bos, "%s: [%s]", chat_family_name(cases[i].f),
                     with);
        cr_expect(strstr(without, "<BOS>") == NULL);
        if (cases[i].writes_bos) cr_expect_str_eq(with + 5, without, "%s", chat_family_name(cases[i].f));
        free(with);
        free(without);
    }
    const chat_msg sys[] = {{"system", "s"}};
    char *s = render(CHAT_LLAMA2, sys, 1, true, "<s>");
    cr_expect_str_eq(s, "");
    free(s);
}
