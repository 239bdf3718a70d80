/* Streaming chunks, each framed as one Server-Sent Event. */
#include "server/api_json.h"

#include <stdlib.h>
#include <string.h>

/* "data: " + the JSON + a blank line; JSON text never holds a raw newline. */
static char *sse(json_t *j) {
    char *text = srv_json_dump(j);
    if (!text) return NULL;
    size_t n = strlen(text);
    char *ev = malloc(n + 9);
    if (ev) memcpy(ev, "data: ", 6), memcpy(ev + 6, text, n), memcpy(ev + 6 + n, "\n\n", 3);
    free(text);
    return ev;
}

static json_t *nullable(const char *s) { return s ? json_string(s) : json_null(); }

static char *chunk(const srv_chunk *c, const char *object, json_t *choice) {
    json_t *root = json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", c->id, "object", object, "created",
                             (json_int_t)c->created, "model", c->model ? c->model : "", "choices", choice);
    if (root && c->include_usage) json_object_set_new(root, "usage", json_null());
    return sse(root);
}

char *srv_chat_chunk(const srv_chunk *c) {
    json_t *delta = json_object();
    if (delta && c->role) {
        json_object_set_new(delta, "role", json_string("assistant"));
        json_object_set_new(delta, "content", json_string(""));
    } else if (delta && c->text) {
        json_object_set_new(delta, "content", srv_json_text(c->text, c->text_len));
    } else if (delta && c->reasoning) {
        json_object_set_new(delta, "reasoning_content", srv_json_text(c->reasoning, c->reasoning_len));
    } else if (delta && c->call) { /* as OpenAI streams a call: id, type and name first, then the arguments */
        json_t *tc = c->call_head ? srv_json_call(c->call, c->call_index, true, "", 0)
                                  : json_pack("{s:I,s:{s:o}}", "index", (json_int_t)c->call_index, "function",
                                              "arguments", srv_json_text(c->call_args, c->call_args_len));
        json_object_set_new(delta, "tool_calls", json_pack("[o]", tc));
    }
    json_t *choice = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "delta", delta, "logprobs",
                               srv_json_logprobs_chat(c->logprobs, c->n_logprobs), "finish_reason",
                               nullable(c->finish_reason));
    return chunk(c, "chat.completion.chunk", choice);
}

char *srv_text_chunk(const srv_chunk *c) {
    json_t *choice = json_pack("{s:o,s:i,s:o,s:o}", "text", srv_json_text(c->text, c->text_len), "index", 0,
                               "logprobs", srv_json_logprobs_legacy(c->logprobs, c->n_logprobs, c->text_offset),
                               "finish_reason", nullable(c->finish_reason));
    return chunk(c, "text_completion", choice);
}

char *srv_usage_chunk(bool chat, const char *id, int64_t created, const char *model, const srv_usage *u) {
    return sse(json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", id, "object",
                         chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)created, "model",
                         model ? model : "", "choices", "usage", srv_json_usage(u)));
}

char *srv_error_chunk(const srv_error *e) { return sse(srv_json_error(e)); }
