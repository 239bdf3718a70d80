/* Chat templates read: each family detected from its real templates' markers (the
 * excerpts are quoted from the reference templates listed in test_chat_goldens.c), the
 * families' names and end-of-turn texts, and the default system message a template
 * writes when a conversation has none. */
#include "base/error.h"
#include "text/chat.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#define N(a) (sizeof(a) / sizeof(a)[0])

/* ---- detection ------------------------------------------------------------------------- */

/* Excerpts of the reference templates (see test_chat_goldens.c), enough to carry each
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
        {"{{- \"<|im_start|>system\\n\" -}}\n{{- \"## Metadata\\n\\n\" -}}\n{{- \"Knowledge Cutoff Date: June "
         "2025\\n\" -}}",
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
    char *got = (char *)1;
    kiln_err err = {0};
    cr_assert_eq(chat_default_system(tmpl, &got, &err), 0, "%s", err.msg);
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
    cr_expect_eq(chat_default_system("x", NULL, NULL), 0);
}

