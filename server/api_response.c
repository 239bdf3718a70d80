/* Whole (non-streaming) responses and the models list. */
#include "server/api_json.h"

#include <string.h>

const char *srv_finish_reason(gen_finish f) {
    return f == GEN_LENGTH || f == GEN_CONTEXT ? "length" : "stop";
}

json_t *srv_json_usage(const srv_usage *u) {
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt_tokens, "completion_tokens",
                     (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)u->prompt_tokens + (json_int_t)u->completion_tokens, "prompt_tokens_details",
                     "cached_tokens", (json_int_t)u->cached_tokens);
}

/* The fields every response and chunk opens with. */
static json_t *head(const char *id, const char *object, int64_t created, const char *model) {
    return json_pack("{s:s,s:s,s:I,s:s}", "id", id, "object", object, "created", (json_int_t)created, "model",
                     model ? model : "");
}

static char *finish(json_t *root, json_t *choice, const srv_usage *u) {
    if (root && choice) {
        json_object_set_new(root, "choices", json_pack("[o]", choice));
        if (u) json_object_set_new(root, "usage", srv_json_usage(u));
        return srv_json_dump(root);
    }
    json_decref(root);
    json_decref(choice);
    return NULL;
}

json_t *srv_json_call(const srv_call *call, uint32_t index, bool with_index, const char *args, size_t args_len) {
    json_t *o = json_pack("{s:s,s:s,s:{s:s,s:o}}", "id", call->id, "type", "function", "function", "name", call->name,
                          "arguments", srv_json_text(args, args_len));
    if (o && with_index) json_object_set_new(o, "index", json_integer(index));
    return o;
}

char *srv_chat_response(const srv_completion *c) {
    json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                            c->n_calls && !c->text_len ? json_null() : srv_json_text(c->text, c->text_len));
    if (msg && c->reasoning) json_object_set_new(msg, "reasoning_content", srv_json_text(c->reasoning, c->reasoning_len));
    if (msg && c->n_calls) {
        json_t *calls = json_array();
        for (size_t i = 0; calls && i < c->n_calls; i++)
            json_array_append_new(calls, srv_json_call(&c->calls[i], 0, false, c->calls[i].arguments,
                                                       strlen(c->calls[i].arguments)));
        json_object_set_new(msg, "tool_calls", calls);
    }
    json_t *choice = json_pack("{s:i,s:o,s:o,s:s}", "index", 0, "message", msg, "logprobs",
                               srv_json_logprobs_chat(c->logprobs, c->n_logprobs), "finish_reason", c->finish_reason);
    return finish(head(c->id, "chat.completion", c->created, c->model), choice, &c->usage);
}

char *srv_text_response(const srv_completion *c) {
    json_t *choice =
        json_pack("{s:o,s:i,s:o,s:s}", "text", srv_json_text(c->text, c->text_len), "index", 0, "logprobs",
                  srv_json_logprobs_legacy(c->logprobs, c->n_logprobs, c->text_offset), "finish_reason",
                  c->finish_reason);
    return finish(head(c->id, "text_completion", c->created, c->model), choice, &c->usage);
}

static json_t *model_object(const char *id, int64_t created) {
    return json_pack("{s:s,s:s,s:I,s:s}", "id", id, "object", "model", "created", (json_int_t)created, "owned_by",
                     "kiln");
}

char *srv_models_response(const char *const *ids, size_t n, int64_t created) {
    json_t *data = json_array();
    for (size_t i = 0; data && i < n; i++)
        if (json_array_append_new(data, model_object(ids[i], created))) return json_decref(data), NULL;
    return srv_json_dump(json_pack("{s:s,s:o}", "object", "list", "data", data));
}

char *srv_model_response(const char *id, int64_t created) { return srv_json_dump(model_object(id, created)); }
