/* kiln serve's slots sharing one pool of pages (issue 17): two requests on a GPU whose
 * --ctx holds three pages of 64 positions, both busy and growing, so one of them finds no
 * page: it ends as at the context's end ("length", fewer tokens than asked) while the other
 * goes on (taking the finished one's idle pages), and neither is corrupted: each one's greedy
 * tokens are the same request's served alone up to where the two part, and they part only at
 * a near-tie of the lone run (its two best tokens within 0.1 nats: a step of two sequences
 * sums its products in another order than a lone decode step). Skipped by name without
 * Vulkan. */
#include "runtime/device.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_serve.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ts_server srv = {.pid = -1};

static void fini(void) { ts_kill(&srv); }

typedef struct answer {
    const char *prompt;
    int max;
    int status, prompt_tokens, tokens;
    char finish[16];
    char *text;
    json_t *lp; /* choices[0].logprobs */
} answer;

static void *ask(void *arg) {
    answer *a = arg;
    char body[2048];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"logprobs\":2}", a->prompt,
             a->max);
    ts_resp r = ts_request(&srv, "POST", "/v1/completions", TS_KEY, body);
    a->status = r.status;
    json_t *j = r.status == 200 ? json_loads(r.body, 0, NULL) : NULL;
    json_t *c = j ? json_array_get(json_object_get(j, "choices"), 0) : NULL, *u = j ? json_object_get(j, "usage") : NULL;
    if (c && u) {
        a->text = strdup(json_string_value(json_object_get(c, "text")));
        snprintf(a->finish, sizeof a->finish, "%s", json_string_value(json_object_get(c, "finish_reason")));
        a->prompt_tokens = (int)json_integer_value(json_object_get(u, "prompt_tokens"));
        a->tokens = (int)json_integer_value(json_object_get(u, "completion_tokens"));
        a->lp = json_incref(json_object_get(c, "logprobs"));
    }
    json_decref(j);
    ts_resp_free(&r);
    return NULL;
}

/* got's tokens equal alone's up to where they part, and there alone's two best are within
 * 0.1 nats; the tokens compared (to the part, or the shorter's end) */
static int same_up_to_a_tie(const answer *got, const answer *alone, const char *what) {
    json_t *gt = json_object_get(got->lp, "tokens"), *at = json_object_get(alone->lp, "tokens");
    json_t *tops = json_object_get(alone->lp, "top_logprobs");
    cr_assert(json_is_array(gt) && json_is_array(at) && json_is_array(tops), "%s: no logprobs", what);
    size_t n = json_array_size(gt) < json_array_size(at) ? json_array_size(gt) : json_array_size(at);
    for (size_t i = 0; i < n; i++) {
        const char *g = json_string_value(json_array_get(gt, i)), *a = json_string_value(json_array_get(at, i));
        if (!strcmp(g, a)) continue;
        json_t *top = json_array_get(tops, i), *lg = json_object_get(top, g), *la = json_object_get(top, a);
        cr_assert(lg && la, "%s: token %zu is '%s' where alone it is '%s', not among its two best", what, i, g, a);
        double gap = json_real_value(la) - json_real_value(lg);
        cr_assert(gap <= 0.1, "%s: token %zu is '%s' where alone it is '%s', %.3f nats better", what, i, g, a, gap);
        return (int)i;
    }
    return (int)n;
}

static void repeat(char *out, size_t cap, const char *words, int times) {
    out[0] = 0;
    for (int i = 0; i < times; i++) strncat(out, words, cap - strlen(out) - 1);
}

Test(serve_pages, a_full_pool_ends_a_stream_and_corrupts_none, .fini = fini, .timeout = 300) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    d->ops->destroy(d);
    const char *extra[] = {"--device", "vulkan:0", "--parallel", "2", "--ctx", "192", NULL};
    ts_start(&srv, tu_data_file("models/stories260K.gguf"), extra, NULL);
    char pa[1024], pb[512];
    repeat(pa, sizeof pa, "once upon a time there was a little girl. ", 6);
    repeat(pb, sizeof pb, "the sun was warm. ", 2);
    answer solo[2] = {{.prompt = pa, .max = 180}, {.prompt = pb, .max = 180}};
    for (int i = 0; i < 2; i++) {
        ask(&solo[i]);
        cr_assert_eq(solo[i].status, 200);
        cr_assert_not_null(solo[i].text);
    }
    /* the long prompt takes two pages, the short one one: the pool is full at once */
    cr_assert(solo[0].prompt_tokens > 64 && solo[0].prompt_tokens < 128, "%d prompt tokens", solo[0].prompt_tokens);
    cr_assert(solo[1].prompt_tokens < 64, "%d prompt tokens", solo[1].prompt_tokens);
    answer both[2] = {{.prompt = pa, .max = 180}, {.prompt = pb, .max = 180}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&th[i], NULL, ask, &both[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    bool cut = false;
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(both[i].status, 200, "request %d", i);
        cr_assert_str_eq(both[i].finish, "length");
        cr_assert(both[i].tokens <= solo[i].tokens, "request %d: %d tokens, %d alone", i, both[i].tokens, solo[i].tokens);
        same_up_to_a_tie(&both[i], &solo[i], i ? "the short prompt" : "the long prompt");
        cut |= both[i].tokens < solo[i].tokens;
    }
    cr_assert(cut, "neither was cut short (%d and %d tokens) though together they need %d positions of 192",
              both[0].tokens, both[1].tokens,
              both[0].prompt_tokens + both[0].tokens + both[1].prompt_tokens + both[1].tokens);
    /* and the server serves on */
    answer again = {.prompt = pb, .max = 8};
    ask(&again);
    cr_assert_eq(again.status, 200);
    same_up_to_a_tie(&again, &solo[1], "again");
    cr_assert(ts_alive(&srv), "%s", ts_stderr(&srv));
    for (int i = 0; i < 2; i++) free(solo[i].text), free(both[i].text), json_decref(solo[i].lp), json_decref(both[i].lp);
    free(again.text), json_decref(again.lp);
}
