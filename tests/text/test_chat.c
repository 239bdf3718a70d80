/* Chat templates rendered: the ground truth from shared/testdata (tokenizers/{qwen3,llama3}/
 * chat_example.json, rendered by the JavaScript Jinja renderers noted in those files),
 * Qwen3's reasoning spelled out, the conversations a template refuses and where BOS goes.
 * The other families' renderings against jinja2 are in test_chat_goldens.c, detection in
 * test_chat_detect.c. */
#include "base/error.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_chat.h"
#include "text/chat.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

/* ---- helpers --------------------------------------------------------------------------- */

/* Renders and asserts success. */
static char *render(chat_family f, const chat_msg *m, size_t n, bool gen, const char *bos) {
    kiln_err err = {0};
    char *s = chat_render(f, m, n, gen, bos, &err);
    cr_assert_not_null(s, "%s: %s", chat_family_name(f), err.msg);
    return s;
}

/* Asserts that rendering fails with a message containing `needle`. */
static void expect_refused(chat_family f, const chat_msg *m, size_t n, const char *needle) {
    kiln_err err = {0};
    char *s = chat_render(f, m, n, true, "<s>", &err);
    cr_expect_null(s, "%s: rendered [%s] where an error was expected", chat_family_name(f), s ? s : "");
    free(s);
    cr_expect(strstr(err.msg, needle) != NULL, "%s: error [%s] lacks [%s]", chat_family_name(f), err.msg, needle);
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
        tu_expect_same_text(got, want_text, what);
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
    char *def = (char *)1;
    kiln_err err = {0};
    cr_expect_eq(chat_default_system(tmpl, &def, &err), 0, "%s", err.msg);
    cr_expect_null(def, "%s has no default system message, found [%s]", path, def ? def : "");
    free(def);
    json_decref(root);
}

Test(chat, qwen3_testdata_renders_byte_exact) { check_chat_example("qwen3", CHAT_QWEN3); }

/* This Llama 3 template writes the assistant header even without add_generation_prompt
 * (its user_only_no_genprompt example shows it). */
Test(chat, llama3_testdata_renders_byte_exact) { check_chat_example("llama3", CHAT_LLAMA3_ALWAYS_GEN); }

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
    tu_expect_same_text(s,
                "<|im_start|>user\nq1<|im_end|>\n"
                "<|im_start|>assistant\nanswer one<|im_end|>\n"
                "<|im_start|>user\nq2<|im_end|>\n"
                "<|im_start|>assistant\n<think>\nnew thoughts\n</think>\n\nanswer two<|im_end|>\n",
                "qwen3 reasoning");
    free(s);
    s = render(CHAT_QWEN3, m, 3, true, NULL);
    tu_expect_same_text(s,
                "<|im_start|>user\nq1<|im_end|>\n"
                "<|im_start|>assistant\nanswer one<|im_end|>\n"
                "<|im_start|>user\nq2<|im_end|>\n"
                "<|im_start|>assistant\n",
                "qwen3 generation prompt");
    free(s);
}

/* ---- errors ---------------------------------------------------------------------------- */

Test(chat, refuses_empty_and_malformed_conversations) {
    const chat_msg ok[] = {{"user", "hi"}};
    kiln_err err = {0};
    for (int f = 0; f < CHAT_COUNT; f++) {
        err.msg[0] = 0;
        cr_expect_null(chat_render((chat_family)f, ok, 0, true, "", &err));
        cr_expect(strstr(err.msg, "no messages") != NULL, "%s: [%s]", chat_family_name((chat_family)f), err.msg);
        err.msg[0] = 0;
        cr_expect_null(chat_render((chat_family)f, NULL, 3, true, "", &err));
        cr_expect(strstr(err.msg, "no messages") != NULL, "[%s]", err.msg);

        /* tool results: only in the families trained with tools (tests/server/test_tools.c renders them) */
        const chat_msg tool[] = {{"user", "hi"}, {"tool", "42"}};
        if (!chat_has_tools((chat_family)f)) expect_refused((chat_family)f, tool, N(tool), "no tool role");
        const chat_msg function[] = {{"user", "hi"}, {"function", "42"}};
        expect_refused((chat_family)f, function, N(function), "unknown role 'function'");
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

/* Errors come back coded in the caller's kiln_err, and a NULL one is not written. */
Test(chat, error_buffer_handling) {
    const chat_msg bad[] = {{"narrator", "once upon a time"}};
    kiln_err e;
    memset(&e, 'x', sizeof e);
    cr_expect_null(chat_render(CHAT_CHATML, bad, 1, true, "", &e));
    cr_expect_eq(e.code, KILN_ERR_INVALID);
    cr_expect(strstr(e.msg, "'narrator'"), "%s", e.msg);
    cr_expect_lt(strlen(e.msg), sizeof e.msg);
    cr_expect_null(chat_render(CHAT_CHATML, bad, 1, true, "", NULL));
}

/* bos is written only where the template writes bos_token; NULL is "". A template may
 * render nothing at all (Llama 2 given only a system message): an empty string, not NULL. */
Test(chat, bos_placement_and_empty_output) {
    const chat_msg m[] = {{"user", "hi"}};
    static const struct {
        chat_family f;
        bool writes_bos;
    } cases[] = {
        {CHAT_CHATML, false},    {CHAT_QWEN3, false},
        {CHAT_LLAMA3, true},     {CHAT_LLAMA3_ALWAYS_GEN, true},
        {CHAT_LLAMA31, true},    {CHAT_LLAMA2, true},
        {CHAT_MISTRAL, true},    {CHAT_MISTRAL_V1, true},
        {CHAT_MISTRAL_V3, true}, {CHAT_MISTRAL_V3_TEKKEN, true},
        {CHAT_MISTRAL_V7, true}, {CHAT_MISTRAL_V7_TEKKEN, true},
        {CHAT_GEMMA, true},      {CHAT_GEMMA3, true},
        {CHAT_PHI3, false},
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
