/* Server API layer (server/): request parsing field by field, hostile bodies (invalid
 * UTF-8, NULs, truncation, deep nesting, 10,000+ mutations), errors in OpenAI's shape,
 * response and stream builders parsed back, and the log-softmax helper against a plain
 * f64 reference. */
#include "base/rng.h"
#include "server/api.h"
#include "server/api_response.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const srv_limits LIM = {.max_tokens = 4096, .default_max_tokens = 256};

static int parse(srv_request *r, srv_endpoint ep, const char *body, srv_error *e) {
    return srv_request_parse(r, ep, body, strlen(body), &LIM, e);
}

static void ok_chat(srv_request *r, const char *body) {
    srv_error e;
    cr_assert_eq(parse(r, SRV_CHAT, body, &e), 0, "%s: %s", body, e.message);
}

/* A chat body with the extra fields `extra` ("" or ", ...") fails naming param. */
static void bad_chat(const char *extra, const char *param) {
    char body[512];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]%s}", extra);
    srv_request r;
    srv_error e;
    cr_assert_eq(parse(&r, SRV_CHAT, body, &e), -1, "%s accepted", body);
    cr_assert_eq(e.status, 400, "%s", body);
    cr_assert_str_eq(e.type, "invalid_request_error");
    cr_assert_str_eq(e.param, param, "%s: param '%s'", body, e.param);
    cr_assert_gt(strlen(e.message), 0);
    cr_assert_null(r.messages);
}

static void ok_extra(const char *extra, srv_request *r) {
    char body[512];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]%s}", extra);
    ok_chat(r, body);
}

/* ---- requests ----------------------------------------------------------------------------- */

Test(api, chat_minimal_defaults) {
    srv_request r;
    ok_chat(&r, "{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}");
    samp_params d;
    samp_params_default(&d);
    cr_assert_eq(r.endpoint, SRV_CHAT);
    cr_assert_null(r.model);
    cr_assert_eq(r.n_messages, 1);
    cr_assert_str_eq(r.messages[0].role, "user");
    cr_assert_str_eq(r.messages[0].content, "hello");
    cr_assert_eq(r.max_tokens, 256);
    cr_assert_eq(memcmp(&r.samp, &d, sizeof d), 0, "greedy defaults expected");
    cr_assert(!r.stream && !r.include_usage && !r.logprobs && r.n_stop == 0);
    srv_request_free(&r);
}

Test(api, chat_every_field) {
    srv_request r;
    ok_chat(&r, "{\"model\":\"m1\",\"messages\":[{\"role\":\"developer\",\"content\":\"sys\"},"
                "{\"role\":\"system\",\"content\":\"s2\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                "\"text\":\"a\"},{\"type\":\"text\",\"text\":\"\\u00e9b\"}]},{\"role\":\"assistant\",\"content\":"
                "\"x\"}],\"max_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":3,\"min_p\":0.1,"
                "\"presence_penalty\":-2,\"frequency_penalty\":2,\"repetition_penalty\":1.1,\"seed\":-1,"
                "\"stop\":[\"a\",\"bc\"],\"n\":1,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                "\"logprobs\":true,\"top_logprobs\":20,\"user\":\"ignored\",\"tools\":[]}");
    cr_assert_str_eq(r.model, "m1");
    cr_assert_eq(r.n_messages, 4);
    cr_assert_str_eq(r.messages[0].role, "system");
    cr_assert_str_eq(r.messages[1].role, "system");
    cr_assert_str_eq(r.messages[2].content, "a\xc3\xa9"
                                            "b");
    cr_assert_str_eq(r.messages[3].role, "assistant");
    cr_assert_eq(r.max_tokens, 7);
    cr_assert_float_eq(r.samp.temperature, 0.5f, 0);
    cr_assert_float_eq(r.samp.top_p, 0.9f, 0);
    cr_assert_eq(r.samp.top_k, 3);
    cr_assert_float_eq(r.samp.min_p, 0.1f, 0);
    cr_assert_float_eq(r.samp.presence_penalty, -2.0f, 0);
    cr_assert_float_eq(r.samp.frequency_penalty, 2.0f, 0);
    cr_assert_float_eq(r.samp.repeat_penalty, 1.1f, 0);
    cr_assert_eq(r.samp.seed, UINT64_MAX);
    cr_assert_eq(r.n_stop, 2);
    cr_assert_str_eq(r.stop[1], "bc");
    cr_assert(r.stream && r.include_usage && r.logprobs);
    cr_assert_eq(r.top_logprobs, 20);
    srv_request_free(&r);
    cr_assert_null(r.messages);
}

Test(api, sampling_without_temperature_follows_the_cli) {
    srv_request r;
    ok_extra(", \"top_k\":5", &r);
    cr_assert_float_eq(r.samp.temperature, 0.8f, 0, "as kiln's CLI: a sampling flag without --temp samples at 0.8");
    srv_request_free(&r);
    ok_extra(", \"top_k\":5, \"temperature\":0", &r);
    cr_assert_eq(r.samp.temperature, 0.0f);
    srv_request_free(&r);
    samp_params d;
    samp_params_default(&d);
    d.temperature = 0.3f;
    srv_limits lim = LIM;
    lim.defaults = &d;
    srv_error e;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"seed\":9}";
    cr_assert_eq(srv_request_parse(&r, SRV_CHAT, body, strlen(body), &lim, &e), 0);
    cr_assert_float_eq(r.samp.temperature, 0.3f, 0, "the server's defaults stand");
    cr_assert_eq(r.samp.seed, 9);
    srv_request_free(&r);
}

Test(api, nulls_are_absent_and_ranges_inclusive) {
    srv_request r;
    ok_extra(", \"stop\":null, \"seed\":null, \"temperature\":null, \"n\":null, \"model\":null", &r);
    cr_assert_null(r.model);
    srv_request_free(&r);
    ok_extra(", \"temperature\":2, \"top_p\":1, \"min_p\":0, \"presence_penalty\":2, \"top_k\":0, "
             "\"max_completion_tokens\":4096, \"max_tokens\":1, \"stop\":\"x\", \"top_logprobs\":0, "
             "\"logprobs\":true",
             &r);
    cr_assert_eq(r.max_tokens, 4096, "max_completion_tokens wins");
    cr_assert_eq(r.n_stop, 1);
    cr_assert_eq(r.samp.top_k, 0);
    srv_request_free(&r);
    ok_extra(", \"stop\":[]", &r);
    cr_assert_eq(r.n_stop, 0);
    srv_request_free(&r);
    ok_extra(", \"top_p\":0, \"temperature\":1", &r); /* OpenAI's 0: the top token alone */
    cr_assert(r.samp.top_p > 0 && r.samp.top_p < 1e-30f, "top_p %g", (double)r.samp.top_p);
    srv_request_free(&r);
}

Test(api, field_types_and_ranges) {
    static const struct { const char *extra, *param; } cases[] = {
        {", \"model\":3", "model"},
        {", \"max_tokens\":0", "max_tokens"},
        {", \"max_tokens\":-5", "max_tokens"},
        {", \"max_tokens\":4097", "max_tokens"},
        {", \"max_tokens\":1e30", "max_tokens"},
        {", \"max_tokens\":\"5\"", "max_tokens"},
        {", \"max_tokens\":2.0", "max_tokens"},
        {", \"max_completion_tokens\":9999999999999", "max_completion_tokens"},
        {", \"temperature\":2.01", "temperature"},
        {", \"temperature\":-0.1", "temperature"},
        {", \"temperature\":\"1\"", "temperature"},
        {", \"temperature\":true", "temperature"},
        {", \"top_p\":-0.01", "top_p"},
        {", \"top_p\":1.5", "top_p"},
        {", \"top_k\":-1", "top_k"},
        {", \"top_k\":1.5", "top_k"},
        {", \"top_k\":3000000000", "top_k"},
        {", \"min_p\":1.01", "min_p"},
        {", \"min_p\":[]", "min_p"},
        {", \"presence_penalty\":-2.5", "presence_penalty"},
        {", \"frequency_penalty\":2.5", "frequency_penalty"},
        {", \"frequency_penalty\":{}", "frequency_penalty"},
        {", \"repetition_penalty\":0", "repetition_penalty"},
        {", \"repetition_penalty\":-1", "repetition_penalty"},
        {", \"seed\":1.5", "seed"},
        {", \"seed\":\"7\"", "seed"},
        {", \"stop\":\"\"", "stop"},
        {", \"stop\":[\"a\",\"\"]", "stop"},
        {", \"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]", "stop"},
        {", \"stop\":[1]", "stop"},
        {", \"stop\":5", "stop"},
        {", \"n\":2", "n"},
        {", \"n\":0", "n"},
        {", \"n\":\"1\"", "n"},
        {", \"stream\":1", "stream"},
        {", \"stream\":\"true\"", "stream"},
        {", \"stream_options\":{\"include_usage\":true}", "stream_options"},
        {", \"stream\":true, \"stream_options\":[]", "stream_options"},
        {", \"stream\":true, \"stream_options\":{\"include_usage\":1}", "stream_options.include_usage"},
        {", \"logprobs\":1", "logprobs"},
        {", \"top_logprobs\":3", "top_logprobs"},
        {", \"logprobs\":false, \"top_logprobs\":3", "top_logprobs"},
        {", \"logprobs\":true, \"top_logprobs\":21", "top_logprobs"},
        {", \"logprobs\":true, \"top_logprobs\":-1", "top_logprobs"},
        {", \"logprobs\":true, \"top_logprobs\":1.0", "top_logprobs"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) bad_chat(cases[i].extra, cases[i].param);
}

static void bad_body(srv_endpoint ep, const char *body, const char *param) {
    srv_request r;
    srv_error e;
    cr_assert_eq(parse(&r, ep, body, &e), -1, "%s accepted", body);
    cr_assert_eq(e.status, 400);
    cr_assert_str_eq(e.param, param, "%s: param '%s' (%s)", body, e.param, e.message);
}

Test(api, messages_rejected) {
    bad_body(SRV_CHAT, "{}", "messages");
    bad_body(SRV_CHAT, "{\"messages\":[]}", "messages");
    bad_body(SRV_CHAT, "{\"messages\":{}}", "messages");
    bad_body(SRV_CHAT, "{\"messages\":\"hi\"}", "messages");
    bad_body(SRV_CHAT, "{\"messages\":[1]}", "messages[0]");
    bad_body(SRV_CHAT, "{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", "messages[0].role");
    bad_body(SRV_CHAT, "{\"messages\":[{\"role\":\"User\",\"content\":\"x\"}]}", "messages[0].role");
    bad_body(SRV_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role");
    bad_body(SRV_CHAT, "{\"messages\":[{\"role\":5,\"content\":\"x\"}]}", "messages[0].role");
    bad_body(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\"}]}",
             "messages[1].content");
    bad_body(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", "messages[0].content");
    bad_body(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":7}]}", "messages[0].content");
    bad_body(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":{}}]}", "messages[0].content");
    bad_body(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[\"a\"]}]}", "messages[0].content[0]");
    bad_body(SRV_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":"
             "\"image_url\",\"image_url\":{}}]}]}",
             "messages[0].content[1]");
    bad_body(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":3}]}]}",
             "messages[0].content[0]");
    bad_body(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]}]}",
             "messages[0].content[0]");
}

Test(api, completions_prompt_and_legacy_logprobs) {
    srv_request r;
    srv_error e;
    cr_assert_eq(parse(&r, SRV_COMPLETION, "{\"prompt\":\"Once\",\"logprobs\":3,\"max_tokens\":2}", &e), 0);
    cr_assert_str_eq(r.prompt, "Once");
    cr_assert(r.logprobs);
    cr_assert_eq(r.top_logprobs, 3);
    cr_assert_null(r.messages);
    srv_request_free(&r);
    cr_assert_eq(parse(&r, SRV_COMPLETION, "{\"prompt\":[\"x\"],\"logprobs\":0}", &e), 0);
    cr_assert_str_eq(r.prompt, "x");
    cr_assert(r.logprobs);
    cr_assert_eq(r.top_logprobs, 0);
    srv_request_free(&r);
    bad_body(SRV_COMPLETION, "{}", "prompt");
    bad_body(SRV_COMPLETION, "{\"prompt\":[]}", "prompt");
    bad_body(SRV_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", "prompt");
    bad_body(SRV_COMPLETION, "{\"prompt\":[1,2,3]}", "prompt");
    bad_body(SRV_COMPLETION, "{\"prompt\":5}", "prompt");
    bad_body(SRV_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":true}", "logprobs");
    bad_body(SRV_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":6}", "logprobs");
    bad_body(SRV_COMPLETION, "{\"prompt\":\"a\",\"n\":3}", "n");
}

static void bad_bytes(const char *body, size_t len) {
    srv_request r;
    srv_error e;
    cr_assert_eq(srv_request_parse(&r, SRV_CHAT, body, len, &LIM, &e), -1);
    cr_assert_eq(e.status, 400);
    cr_assert_gt(strlen(e.message), 0);
    cr_assert_str_empty(e.param);
    char *json = srv_error_json(&e);
    cr_assert_not_null(json, "the error for these bytes must encode");
    json_t *j = json_loads(json, 0, NULL);
    cr_assert_not_null(j);
    json_decref(j);
    free(json);
}

Test(api, hostile_bytes) {
    /* invalid UTF-8: a lone continuation byte, an overlong '/', a surrogate, a cut sequence */
    static const char *const bad[] = {
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\x80z\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc0\xaf\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"\xe2\x82\"}]}",
        "{\"model\":\"\xff\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", /* NUL inside a string */
        "{\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}",   /* lone surrogate escape */
        "", "   ", "null", "[]", "\"x\"", "42", "{", "{\"messages\":", "{\"messages\":[{\"role\":\"us",
        "{\"messages\":[]} trailing", "{'messages':[]}", "{\"max_tokens\":1e999}",
        "{\"max_tokens\":123456789012345678901234567890}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) bad_bytes(bad[i], strlen(bad[i]));
    static const char nul[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}\0junk";
    bad_bytes(nul, sizeof nul - 1);
    static const char nul2[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\0b\"}]}";
    bad_bytes(nul2, sizeof nul2 - 1);
    bad_bytes("{\"a\":1}", 3); /* the length, not a NUL, ends the body */
}

/* jansson stops at JSON_PARSER_MAX_DEPTH (2048) nested arrays or objects, so a body of
 * 100,000 '[' fails early instead of recursing through the stack. */
Test(api, deep_nesting) {
    size_t n = 100000;
    char *body = malloc(2 * n + 1);
    memset(body, '[', n);
    memset(body + n, ']', n);
    bad_bytes(body, 2 * n);
    for (size_t i = 0; i < n; i++) memcpy(body + 5 * i % (2 * n - 5), "{\"a\":", 5);
    bad_bytes(body, 2 * n);
    free(body);
    char shallow[64];
    snprintf(shallow, sizeof shallow, "{\"x\":[[[[[[[[[[]]]]]]]]]],\"prompt\":\"p\"}");
    srv_request r;
    srv_error e;
    cr_assert_eq(parse(&r, SRV_COMPLETION, shallow, &e), 0, "%s", e.message);
    srv_request_free(&r);
}

Test(api, mutated_bodies_never_crash) {
    static const char *const seeds[] = {
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\","
        "\"content\":[{\"type\":\"text\",\"text\":\"h\\u00e9llo\"}]}],\"max_tokens\":16,\"temperature\":0.7,"
        "\"top_p\":0.9,\"stop\":[\"\\n\",\"END\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"logprobs\":true,\"top_logprobs\":2,\"seed\":4,\"n\":1}",
        "{\"prompt\":[\"Once upon\"],\"max_tokens\":8,\"logprobs\":2,\"repetition_penalty\":1.1,\"stop\":\"x\"}",
    };
    rng g;
    rng_seed(&g, 12345, 0, 0);
    size_t ok = 0, failed = 0;
    for (int it = 0; it < 12000; it++) {
        const char *s = seeds[it & 1];
        size_t n = strlen(s);
        char buf[1024];
        memcpy(buf, s, n);
        int kind = (int)((uint32_t)rng_next(&g) % 4);
        int edits = 1 + (int)((uint32_t)rng_next(&g) % 4);
        for (int k = 0; k < edits; k++) {
            size_t at = (uint32_t)rng_next(&g) % n;
            if (kind == 0) buf[at] ^= (char)(1u << ((uint32_t)rng_next(&g) % 8));     /* bit flip */
            else if (kind == 1) buf[at] = (char)(uint32_t)rng_next(&g);               /* random byte */
            else if (kind == 2) n = at;                                    /* truncation */
            else buf[at] = "{}[]\",:0-e\\ntu"[(uint32_t)rng_next(&g) % 14];           /* syntax bytes */
            if (!n) break;
        }
        srv_request r;
        srv_error e;
        memset(&e, 0, sizeof e);
        if (srv_request_parse(&r, (it & 1) ? SRV_COMPLETION : SRV_CHAT, buf, n, &LIM, &e) == 0) {
            ok++;
            srv_request_free(&r);
            continue;
        }
        failed++;
        cr_assert(e.status >= 400 && e.status < 500, "status %d", e.status);
        cr_assert_gt(strlen(e.message), 0);
        cr_assert_null(r.messages);
        cr_assert_null(r.prompt);
        char *json = srv_error_json(&e);
        cr_assert_not_null(json);
        free(json);
    }
    cr_assert_eq(ok + failed, 12000);
    cr_assert_gt(failed, 6000, "mutations should mostly fail (%zu did)", failed);
    cr_assert_gt(ok, 100, "some mutations should still parse (%zu did)", ok);
}

/* ---- errors ------------------------------------------------------------------------------- */

Test(api, error_json_exact) {
    srv_error e;
    srv_error_set(&e, 400, "n", NULL, "'n' must be 1 (got %d)", 2);
    char *s = srv_error_json(&e);
    cr_assert_str_eq(s, "{\"error\":{\"message\":\"'n' must be 1 (got 2)\",\"type\":\"invalid_request_error\","
                        "\"param\":\"n\",\"code\":null}}");
    free(s);
    srv_error_set(&e, 401, NULL, "invalid_api_key", "Incorrect API key provided");
    s = srv_error_json(&e);
    cr_assert_str_eq(s, "{\"error\":{\"message\":\"Incorrect API key provided\",\"type\":\"invalid_request_error\","
                        "\"param\":null,\"code\":\"invalid_api_key\"}}");
    free(s);
    srv_error_set(&e, 503, NULL, NULL, "The server is overloaded");
    cr_assert_eq(e.status, 503);
    s = srv_error_json(&e);
    cr_assert_str_eq(s, "{\"error\":{\"message\":\"The server is overloaded\",\"type\":\"server_error\","
                        "\"param\":null,\"code\":null}}");
    free(s);
    srv_error_set(&e, 400, NULL, NULL, "bad \"quote\" \xff\n");
    s = srv_error_json(&e);
    cr_assert_str_eq(s, "{\"error\":{\"message\":\"bad \\\"quote\\\" \xef\xbf\xbd\\n\",\"type\":"
                        "\"invalid_request_error\",\"param\":null,\"code\":null}}");
    free(s);
}

/* A failed generation's error as the stream's event: the same object, framed as SSE. */
Test(api, error_chunk_exact) {
    srv_error e;
    srv_error_set(&e, 500, NULL, NULL, "device lost \xff");
    char *s = srv_error_chunk(&e);
    cr_assert_str_eq(s, "data: {\"error\":{\"message\":\"device lost \xef\xbf\xbd\",\"type\":\"server_error\","
                        "\"param\":null,\"code\":null}}\n\n");
    free(s);
}

/* ---- responses ---------------------------------------------------------------------------- */

static json_t *load(char *text) {
    cr_assert_not_null(text);
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    cr_assert_not_null(j, "%s: %s", text, je.text);
    free(text);
    return j;
}

static json_t *path(json_t *j, const char *keys) { /* "a.b.0.c" */
    char buf[128], *save;
    snprintf(buf, sizeof buf, "%s", keys);
    for (char *k = strtok_r(buf, ".", &save); k && j; k = strtok_r(NULL, ".", &save))
        j = json_is_array(j) ? json_array_get(j, strtoul(k, NULL, 10)) : json_object_get(j, k);
    cr_assert_not_null(j, "no %s", keys);
    return j;
}
#define STR(j, k) json_string_value(path(j, k))
#define INT(j, k) json_integer_value(path(j, k))

static const srv_token_logprob LPS[2] = {
    {.tok = {"He", 2, -0.5}, .top = {{"He", 2, -0.5}, {"\xe2\x82", 2, -1.25}}, .n_top = 2},
    {.tok = {"llo", 3, -INFINITY}, .n_top = 0},
};

Test(api, chat_response) {
    srv_completion c = {.id = "chatcmpl-1", .created = 1700000000, .model = "tiny", .text = "Hello", .text_len = 5,
                         .finish_reason = srv_finish_reason(GEN_EOG), .usage = {10, 5, 4}};
    json_t *j = load(srv_chat_response(&c));
    cr_assert_str_eq(STR(j, "id"), "chatcmpl-1");
    cr_assert_str_eq(STR(j, "object"), "chat.completion");
    cr_assert_eq(INT(j, "created"), 1700000000);
    cr_assert_str_eq(STR(j, "model"), "tiny");
    cr_assert_eq(json_array_size(path(j, "choices")), 1);
    cr_assert_eq(INT(j, "choices.0.index"), 0);
    cr_assert_str_eq(STR(j, "choices.0.message.role"), "assistant");
    cr_assert_str_eq(STR(j, "choices.0.message.content"), "Hello");
    cr_assert(json_is_null(path(j, "choices.0.logprobs")));
    cr_assert_str_eq(STR(j, "choices.0.finish_reason"), "stop");
    cr_assert_eq(INT(j, "usage.prompt_tokens"), 10);
    cr_assert_eq(INT(j, "usage.completion_tokens"), 5);
    cr_assert_eq(INT(j, "usage.total_tokens"), 15);
    cr_assert_eq(INT(j, "usage.prompt_tokens_details.cached_tokens"), 4);
    json_decref(j);

    c.logprobs = LPS, c.n_logprobs = 2, c.finish_reason = srv_finish_reason(GEN_LENGTH);
    c.text = "bad \xff", c.text_len = 5;
    j = load(srv_chat_response(&c));
    cr_assert_str_eq(STR(j, "choices.0.finish_reason"), "length");
    cr_assert_str_eq(STR(j, "choices.0.message.content"), "bad \xef\xbf\xbd");
    json_t *lp = path(j, "choices.0.logprobs.content");
    cr_assert_eq(json_array_size(lp), 2);
    cr_assert_str_eq(STR(lp, "0.token"), "He");
    cr_assert_eq(json_real_value(path(lp, "0.logprob")), -0.5);
    cr_assert_eq(INT(lp, "0.bytes.1"), 'e');
    cr_assert_eq(json_array_size(path(lp, "0.top_logprobs")), 2);
    cr_assert_str_eq(STR(lp, "0.top_logprobs.1.token"), "\xef\xbf\xbd\xef\xbf\xbd", "cut UTF-8 in token text");
    cr_assert_eq(INT(lp, "0.top_logprobs.1.bytes.0"), 0xe2, "bytes keep the exact token");
    cr_assert_eq(INT(lp, "0.top_logprobs.1.bytes.1"), 0x82);
    cr_assert_eq(json_real_value(path(lp, "0.top_logprobs.1.logprob")), -1.25);
    cr_assert_eq(json_real_value(path(lp, "1.logprob")), -9999.0, "-inf written as OpenAI's floor");
    cr_assert_eq(json_array_size(path(lp, "1.top_logprobs")), 0);
    json_decref(j);
    cr_assert_str_eq(srv_finish_reason(GEN_STOP_STRING), "stop");
    cr_assert_str_eq(srv_finish_reason(GEN_CONTEXT), "length");
}

Test(api, text_response_and_legacy_logprobs) {
    srv_completion c = {.id = "cmpl-7", .created = 5, .model = "tiny", .text = "Hello", .text_len = 5,
                        .finish_reason = "length", .logprobs = LPS, .n_logprobs = 2, .text_offset = 4,
                        .usage = {3, 2, 0}};
    json_t *j = load(srv_text_response(&c));
    cr_assert_str_eq(STR(j, "object"), "text_completion");
    cr_assert_str_eq(STR(j, "choices.0.text"), "Hello");
    cr_assert_eq(INT(j, "choices.0.index"), 0);
    cr_assert_str_eq(STR(j, "choices.0.finish_reason"), "length");
    cr_assert_eq(INT(j, "usage.total_tokens"), 5);
    json_t *lp = path(j, "choices.0.logprobs");
    cr_assert_str_eq(STR(lp, "tokens.1"), "llo");
    cr_assert_eq(json_real_value(path(lp, "token_logprobs.0")), -0.5);
    cr_assert_eq(json_real_value(path(lp, "token_logprobs.1")), -9999.0);
    cr_assert_eq(json_real_value(path(lp, "top_logprobs.0.He")), -0.5);
    cr_assert_eq(json_object_size(path(lp, "top_logprobs.0")), 2);
    cr_assert_eq(json_object_size(path(lp, "top_logprobs.1")), 0);
    cr_assert_eq(INT(lp, "text_offset.0"), 4);
    cr_assert_eq(INT(lp, "text_offset.1"), 6);
    json_decref(j);
}

Test(api, models_list) {
    const char *ids[] = {"tiny", "qwen3"};
    char *s = srv_models_response(ids, 2, 42);
    cr_assert_str_eq(s, "{\"object\":\"list\",\"data\":[{\"id\":\"tiny\",\"object\":\"model\",\"created\":42,"
                        "\"owned_by\":\"kiln\"},{\"id\":\"qwen3\",\"object\":\"model\",\"created\":42,"
                        "\"owned_by\":\"kiln\"}]}");
    free(s);
}

/* Strips the SSE framing exactly: "data: " + JSON + "\n\n". */
static json_t *event(char *ev) {
    cr_assert_not_null(ev);
    size_t n = strlen(ev);
    cr_assert(n > 8 && !strncmp(ev, "data: ", 6) && !strcmp(ev + n - 2, "\n\n"), "framing: %s", ev);
    cr_assert_null(memchr(ev, '\n', n - 2), "a newline inside the event");
    ev[n - 2] = '\0';
    json_t *j = json_loads(ev + 6, 0, NULL);
    cr_assert_not_null(j, "%s", ev);
    free(ev);
    return j;
}

Test(api, chat_stream) {
    srv_chunk c = {.id = "chatcmpl-9", .created = 3, .model = "tiny", .role = true};
    char *raw = srv_chat_chunk(&c);
    cr_assert_str_eq(raw, "data: {\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":3,\"model\":"
                          "\"tiny\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
                          "\"logprobs\":null,\"finish_reason\":null}]}\n\n");
    free(raw);
    c.role = false, c.text = "a\nb", c.text_len = 3, c.include_usage = true;
    json_t *j = event(srv_chat_chunk(&c));
    cr_assert_str_eq(STR(j, "choices.0.delta.content"), "a\nb");
    cr_assert_null(json_object_get(path(j, "choices.0.delta"), "role"));
    cr_assert(json_is_null(path(j, "usage")));
    cr_assert(json_is_null(path(j, "choices.0.finish_reason")));
    json_decref(j);
    c.logprobs = LPS, c.n_logprobs = 1;
    j = event(srv_chat_chunk(&c));
    cr_assert_str_eq(STR(j, "choices.0.logprobs.content.0.token"), "He");
    json_decref(j);
    c.text = NULL, c.logprobs = NULL, c.finish_reason = "stop";
    j = event(srv_chat_chunk(&c));
    cr_assert_eq(json_object_size(path(j, "choices.0.delta")), 0);
    cr_assert_str_eq(STR(j, "choices.0.finish_reason"), "stop");
    json_decref(j);
    srv_usage u = {7, 2, 5};
    raw = srv_usage_chunk(true, "chatcmpl-9", 3, "tiny", &u);
    cr_assert_str_eq(raw, "data: {\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":3,\"model\":"
                          "\"tiny\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,"
                          "\"total_tokens\":9,\"prompt_tokens_details\":{\"cached_tokens\":5}}}\n\n");
    free(raw);
    cr_assert_str_eq(SRV_SSE_DONE, "data: [DONE]\n\n");
}

Test(api, text_stream) {
    srv_chunk c = {.id = "cmpl-2", .created = 1, .model = "tiny", .text = "Once", .text_len = 4};
    json_t *j = event(srv_text_chunk(&c));
    cr_assert_str_eq(STR(j, "object"), "text_completion");
    cr_assert_str_eq(STR(j, "choices.0.text"), "Once");
    cr_assert(json_is_null(path(j, "choices.0.finish_reason")));
    cr_assert(json_is_null(path(j, "choices.0.logprobs")));
    cr_assert_null(json_object_get(j, "usage"));
    json_decref(j);
    c.text = NULL, c.finish_reason = "length", c.logprobs = LPS + 1, c.n_logprobs = 1, c.text_offset = 9;
    j = event(srv_text_chunk(&c));
    cr_assert_str_eq(STR(j, "choices.0.text"), "");
    cr_assert_str_eq(STR(j, "choices.0.finish_reason"), "length");
    cr_assert_eq(INT(j, "choices.0.logprobs.text_offset.0"), 9);
    json_decref(j);
    srv_usage u = {1, 2, 0};
    j = event(srv_usage_chunk(false, "cmpl-2", 1, "tiny", &u));
    cr_assert_str_eq(STR(j, "object"), "text_completion");
    cr_assert_eq(json_array_size(path(j, "choices")), 0);
    cr_assert_eq(INT(j, "usage.total_tokens"), 3);
    json_decref(j);
}

/* ---- log-softmax -------------------------------------------------------------------------- */

/* The plain reference: every finite logit, f64 sums, a full sort by selection. */
static double ref_lse(const float *l, uint32_t n) {
    double m = -INFINITY, s = 0;
    for (uint32_t i = 0; i < n; i++)
        if (isfinite(l[i]) && l[i] > m) m = l[i];
    for (uint32_t i = 0; i < n; i++)
        if (isfinite(l[i])) s += exp((double)l[i] - m);
    return m + log(s);
}

static void check_row(const float *l, uint32_t n, int32_t chosen, uint32_t k) {
    double lp, top_lps[SRV_MAX_TOP_LOGPROBS];
    int32_t ids[SRV_MAX_TOP_LOGPROBS];
    uint32_t nt;
    cr_assert_eq(srv_logprobs(l, n, chosen, k, &lp, ids, top_lps, &nt), 0);
    double lse = ref_lse(l, n);
    if (isfinite(l[chosen])) cr_assert_float_eq(lp, (double)l[chosen] - lse, 1e-12);
    else cr_assert(lp == -INFINITY);
    uint32_t finite = 0;
    for (uint32_t i = 0; i < n; i++) finite += isfinite(l[i]) != 0;
    cr_assert_eq(nt, k < finite ? k : finite);
    char *used = calloc(n, 1);
    for (uint32_t j = 0; j < nt; j++) {
        /* the reference's j-th: the best unused finite logit, lowest id on ties */
        int32_t best = -1;
        for (uint32_t i = 0; i < n; i++)
            if (isfinite(l[i]) && !used[i] && (best < 0 || l[i] > l[best])) best = (int32_t)i;
        used[best] = 1;
        cr_assert_eq(ids[j], best, "rank %u", j);
        cr_assert_float_eq(top_lps[j], (double)l[best] - lse, 1e-12);
    }
    free(used);
}

Test(api, logprobs_against_reference) {
    rng g;
    rng_seed(&g, 7, 0, 0);
    uint32_t n = 5000;
    float *l = malloc(n * sizeof *l);
    for (int round = 0; round < 4; round++) {
        for (uint32_t i = 0; i < n; i++) l[i] = (float)(rng_normal(&g) * 4.0);
        if (round >= 1) l[17] = l[4000] = 30.0f; /* a tie at the top */
        if (round >= 2) l[3] = NAN, l[9] = -INFINITY, l[10] = INFINITY, l[11] = NAN;
        if (round == 3)
            for (uint32_t i = 0; i < n; i += 2) l[i] = -INFINITY;
        check_row(l, n, 17, 20);
        check_row(l, n, 3, 5);
        check_row(l, n, 1, 0);
        check_row(l, n, (int32_t)n - 1, 1);
    }
    free(l);
}

Test(api, logprobs_edges) {
    double lp, tl[SRV_MAX_TOP_LOGPROBS];
    int32_t ids[SRV_MAX_TOP_LOGPROBS];
    uint32_t nt;
    float one[1] = {3.0f};
    cr_assert_eq(srv_logprobs(one, 1, 0, 20, &lp, ids, tl, &nt), 0);
    cr_assert_eq(lp, 0.0);
    cr_assert_eq(nt, 1);
    float none[3] = {NAN, -INFINITY, INFINITY};
    cr_assert_eq(srv_logprobs(none, 3, 0, 2, &lp, ids, tl, &nt), -1);
    cr_assert_eq(nt, 0);
    cr_assert_eq(srv_logprobs(one, 1, 1, 2, &lp, ids, tl, &nt), -1);
    cr_assert_eq(srv_logprobs(one, 1, -1, 2, &lp, ids, tl, &nt), -1);
    float big[4] = {1000.0f, -1000.0f, 1000.0f, 0.0f}; /* exp(1000) overflows f64: shifted by the max */
    cr_assert_eq(srv_logprobs(big, 4, 2, 4, &lp, ids, tl, &nt), 0);
    cr_assert_float_eq(lp, -log(2.0), 1e-12);
    cr_assert_eq(ids[0], 0);
    cr_assert_eq(ids[1], 2);
    cr_assert_eq(ids[2], 3);
    cr_assert_eq(nt, 4);
    cr_assert_float_eq(tl[2], -1000.0 - log(2.0), 1e-9);
    cr_assert_float_eq(tl[3], -2000.0 - log(2.0), 1e-9);
}

/* Which tokens' log-probabilities go with a streamed piece of text. Tokens: "a" [0,1),
 * the first byte of "é" [1,1) (nothing of its own until the character is whole), its
 * second byte [1,3), " b" [3,5), "c" [5,6). */
Test(api, token_spans_follow_the_emitted_text) {
    const srv_token_span sp[5] = {{0, 1}, {1, 1}, {1, 3}, {3, 5}, {5, 6}};
    cr_assert_eq(srv_spans_ready(sp, 5, 0), 0);
    cr_assert_eq(srv_spans_ready(sp, 5, 1), 1, "the half character waits for its other half");
    cr_assert_eq(srv_spans_ready(sp + 1, 4, 1), 0);
    cr_assert_eq(srv_spans_ready(sp + 1, 4, 3), 2, "both halves go with the whole character");
    cr_assert_eq(srv_spans_ready(sp + 3, 2, 4), 0, "a token whose text is partly held back waits");
    cr_assert_eq(srv_spans_ready(sp + 3, 2, 6), 2);
    cr_assert_eq(srv_spans_ready(sp, 5, 6), 5);
    cr_assert_eq(srv_spans_ready(NULL, 0, 6), 0);
    /* the end: everything left, unless a stop string cut the output */
    cr_assert_eq(srv_spans_rest(sp + 1, 4, false, 1), 4, "a character never completed is still reported");
    cr_assert_eq(srv_spans_rest(sp + 3, 2, true, 4), 1, "a token partly before the stop string is reported");
    cr_assert_eq(srv_spans_rest(sp + 3, 2, true, 3), 0, "tokens of the stop string are not");
    cr_assert_eq(srv_spans_rest(sp + 1, 4, true, 1), 0);
    cr_assert_eq(srv_spans_rest(NULL, 0, true, 1), 0);
}
