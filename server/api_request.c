/* Request parsing: jansson does the syntax (it rejects invalid UTF-8, \u0000 in
 * strings and nesting deeper than JSON_PARSER_MAX_DEPTH without recursing further),
 * this file the fields' types and ranges. */
#include "base/error.h"
#include "server/api.h"
#include "server/schema.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BAD(e, param, ...) (srv_error_set((e), 400, (param), NULL, __VA_ARGS__), -1)
#define OOM(e) (srv_error_set((e), 500, NULL, NULL, "out of memory"), -1)

/* A field's value; JSON null counts as absent (clients send null for "default"). */
static json_t *field(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

static char *dup_string(json_t *s) {
    size_t n = json_string_length(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, json_string_value(s), n + 1);
    return d;
}

/* A number in [lo, hi] (lo excluded when lo_open); 1 when given, 0 when absent, -1. */
static int number(json_t *root, const char *key, double lo, bool lo_open, double hi, double *out, srv_error *e) {
    json_t *v = field(root, key);
    if (!v) return 0;
    if (!json_is_number(v)) return BAD(e, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
        return BAD(e, key, "'%s' must be in %c%g, %g] (got %g)", key, lo_open ? '(' : '[', lo, hi, x);
    *out = x;
    return 1;
}

static int integer(json_t *root, const char *key, json_int_t lo, json_int_t hi, json_int_t *out, srv_error *e) {
    json_t *v = field(root, key);
    if (!v) return 0;
    if (!json_is_integer(v)) return BAD(e, key, "'%s' must be an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) return BAD(e, key, "'%s' must be in [%lld, %lld] (got %lld)", key, lo, hi, x);
    *out = x;
    return 1;
}

static int boolean(json_t *root, const char *key, bool *out, srv_error *e) {
    json_t *v = field(root, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return BAD(e, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 1;
}

/* ---- messages and prompt ------------------------------------------------------------------ */

static const char *role_of(const char *s) {
    if (!strcmp(s, "system") || !strcmp(s, "developer")) return "system";
    if (!strcmp(s, "user")) return "user";
    if (!strcmp(s, "assistant")) return "assistant";
    if (!strcmp(s, "tool")) return "tool";
    return NULL;
}

/* A content part list: only text parts, concatenated. */
static int content_parts(json_t *parts, size_t i, char **out, srv_error *e) {
    char param[64];
    size_t total = 0, j;
    json_t *part;
    json_array_foreach(parts, j, part) {
        snprintf(param, sizeof param, "messages[%zu].content[%zu]", i, j);
        if (!json_is_object(part)) return BAD(e, param, "'%s' must be an object", param);
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text"))
            return BAD(e, param, "'%s': only parts of type \"text\" are supported", param);
        if (!json_is_string(text)) return BAD(e, param, "'%s.text' must be a string", param);
        total += json_string_length(text);
    }
    char *s = malloc(total + 1), *o = s;
    if (!s) return OOM(e);
    json_array_foreach(parts, j, part) {
        json_t *text = json_object_get(part, "text");
        memcpy(o, json_string_value(text), json_string_length(text));
        o += json_string_length(text);
    }
    *o = '\0';
    *out = s;
    return 0;
}

/* An assistant's tool_calls ([{id, type: "function", function: {name, arguments}}]) and a
 * tool result's tool_call_id. */
static int tool_fields(json_t *m, size_t i, chat_msg *out, srv_error *e) {
    char param[80];
    json_t *calls = field(m, "tool_calls"), *id = field(m, "tool_call_id");
    if (!strcmp(out->role, "tool")) {
        snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
        if (id && !json_is_string(id)) return BAD(e, param, "'%s' must be a string", param);
        if (id && !(out->tool_call_id = dup_string(id))) return OOM(e);
    }
    if (!calls) return 0;
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (strcmp(out->role, "assistant") || !json_is_array(calls))
        return BAD(e, param, "'%s' must be an array, in an assistant message", param);
    size_t n = json_array_size(calls), k;
    chat_tool_call *tc = calloc(n ? n : 1, sizeof *tc);
    if (!tc) return OOM(e);
    out->tool_calls = tc;
    json_t *c;
    json_array_foreach(calls, k, c) {
        snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", i, k);
        json_t *fn = json_object_get(c, "function"), *cid = json_object_get(c, "id");
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        if (!json_is_string(name) || !json_is_string(args) || (cid && !json_is_string(cid)))
            return BAD(e, param, "'%s' must have function.name and function.arguments as strings", param);
        json_t *parsed = json_loads(json_string_value(args), 0, NULL);
        bool object = json_is_object(parsed);
        json_decref(parsed);
        if (!object) return BAD(e, param, "'%s.function.arguments' must be a JSON object's text", param);
        out->n_tool_calls = k + 1;
        if (!(tc[k].name = dup_string(name)) || !(tc[k].arguments = dup_string(args)) ||
            (cid && !(tc[k].id = dup_string(cid))))
            return OOM(e);
    }
    return 0;
}

static int message(json_t *m, size_t i, chat_msg *out, srv_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(m)) return BAD(e, param, "'%s' must be an object", param);
    json_t *role = field(m, "role"), *content = field(m, "content");
    snprintf(param, sizeof param, "messages[%zu].role", i);
    if (!json_is_string(role)) return BAD(e, param, "'%s' must be a string", param);
    out->role = role_of(json_string_value(role));
    if (!out->role)
        return BAD(e, param, "'%s': unknown role (expected system, developer, user, assistant or tool)", param);
    if (tool_fields(m, i, out, e)) return -1;
    snprintf(param, sizeof param, "messages[%zu].content", i);
    char *text;
    if (!content && out->n_tool_calls) { /* an assistant's calls without text */
        if (!(text = calloc(1, 1))) return OOM(e);
    } else if (json_is_string(content)) {
        if (!(text = dup_string(content))) return OOM(e);
    } else if (json_is_array(content)) {
        if (content_parts(content, i, &text, e)) return -1;
    } else {
        return BAD(e, param, content ? "'%s' must be a string or an array of text parts" : "'%s' is missing",
                   param);
    }
    out->content = text;
    return 0;
}

static int messages(srv_request *r, json_t *root, srv_error *e) {
    json_t *ms = field(root, "messages");
    if (!ms) return BAD(e, "messages", "'messages' is missing");
    if (!json_is_array(ms)) return BAD(e, "messages", "'messages' must be an array");
    if (!json_array_size(ms)) return BAD(e, "messages", "'messages' must not be empty");
    r->messages = calloc(json_array_size(ms), sizeof *r->messages);
    if (!r->messages) return OOM(e);
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m) {
        r->n_messages = i + 1; /* freed by srv_request_free even when half parsed */
        if (message(m, i, &r->messages[i], e)) return -1;
    }
    return 0;
}

/* A string, or an array of one string (more would ask for several choices). */
static int prompt(srv_request *r, json_t *root, srv_error *e) {
    json_t *p = field(root, "prompt");
    if (!p) return BAD(e, "prompt", "'prompt' is missing");
    if (json_is_array(p)) {
        if (json_array_size(p) != 1) return BAD(e, "prompt", "'prompt' must be a string or an array of one string");
        p = json_array_get(p, 0);
    }
    if (!json_is_string(p)) return BAD(e, "prompt", "'prompt' must be a string or an array of one string");
    if (!(r->prompt = dup_string(p))) return OOM(e);
    return 0;
}

/* ---- generation fields -------------------------------------------------------------------- */

static int max_tokens(srv_request *r, json_t *root, const srv_limits *lim, srv_error *e) {
    r->max_tokens = lim->default_max_tokens;
    static const char *const keys[] = {"max_tokens", "max_completion_tokens"}; /* the newer name wins */
    for (int k = 0; k < 2; k++) {
        json_int_t v;
        int got = integer(root, keys[k], 1, INT64_MAX, &v, e);
        if (got < 0) return -1;
        if (got && v > lim->max_tokens)
            return BAD(e, keys[k], "'%s' is %lld, more than this server's limit of %u", keys[k], v, lim->max_tokens);
        if (got) r->max_tokens = (uint32_t)v;
    }
    return 0;
}

static int stop(srv_request *r, json_t *root, srv_error *e) {
    json_t *s = field(root, "stop");
    if (!s) return 0;
    if (json_is_string(s)) {
        if (!json_string_length(s)) return BAD(e, "stop", "'stop' must not be empty");
        if (!(r->stop[0] = dup_string(s))) return OOM(e);
        r->n_stop = 1;
        return 0;
    }
    if (!json_is_array(s)) return BAD(e, "stop", "'stop' must be a string or an array of strings");
    if (json_array_size(s) > SRV_MAX_STOP) return BAD(e, "stop", "'stop' takes at most %d strings", SRV_MAX_STOP);
    size_t i;
    json_t *v;
    json_array_foreach(s, i, v) {
        if (!json_is_string(v) || !json_string_length(v))
            return BAD(e, "stop", "'stop' must hold non-empty strings (item %zu is not one)", i);
        if (!(r->stop[i] = dup_string(v))) return OOM(e);
        r->n_stop = i + 1;
    }
    return 0;
}

static int streaming(srv_request *r, json_t *root, srv_error *e) {
    if (boolean(root, "stream", &r->stream, e) < 0) return -1;
    json_t *so = field(root, "stream_options");
    if (!so) return 0;
    if (!json_is_object(so)) return BAD(e, "stream_options", "'stream_options' must be an object");
    if (!r->stream) return BAD(e, "stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (boolean(so, "include_usage", &r->include_usage, e) < 0)
        return BAD(e, "stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
    return 0;
}

/* Chat: logprobs (bool) and top_logprobs (0..20, only with logprobs). Completions: the
 * legacy integer logprobs (0..5), the number of alternatives. */
static int logprobs(srv_request *r, json_t *root, srv_error *e) {
    json_int_t top = 0;
    if (r->endpoint == SRV_COMPLETION) {
        int got = integer(root, "logprobs", 0, SRV_MAX_LEGACY_LOGPROBS, &top, e);
        if (got < 0) return -1;
        r->logprobs = got;
    } else {
        if (boolean(root, "logprobs", &r->logprobs, e) < 0) return -1;
        int got = integer(root, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &top, e);
        if (got < 0) return -1;
        if (got && !r->logprobs) return BAD(e, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    }
    r->top_logprobs = (uint32_t)top;
    return 0;
}

/* The sampling fields, mapped as kiln's CLI maps its flags (repetition_penalty is
 * --repeat-penalty), then samp_params_check for what the ranges above leave. */
static int sampling(srv_request *r, json_t *root, const srv_limits *lim, srv_error *e) {
    if (lim->defaults) r->samp = *lim->defaults;
    else samp_params_default(&r->samp);
    double x;
    json_int_t i;
    int got, set = 0, temp;
    if ((temp = number(root, "temperature", 0, false, 2, &x, e)) < 0) return -1;
    if (temp) r->samp.temperature = (float)x;
    if ((got = number(root, "top_p", 0, false, 1, &x, e)) < 0) return -1;
    /* OpenAI takes 0: the smallest nucleus, the top token alone (the sampler's cut keeps
     * at least one token; its own range is (0, 1]) */
    if (got) r->samp.top_p = x > 0 ? (float)x : FLT_MIN, set = 1;
    if ((got = integer(root, "top_k", 0, INT32_MAX, &i, e)) < 0) return -1;
    if (got) r->samp.top_k = (int32_t)i, set = 1;
    if ((got = number(root, "min_p", 0, false, 1, &x, e)) < 0) return -1;
    if (got) r->samp.min_p = (float)x, set = 1;
    if ((got = number(root, "presence_penalty", -2, false, 2, &x, e)) < 0) return -1;
    if (got) r->samp.presence_penalty = (float)x, set = 1;
    if ((got = number(root, "frequency_penalty", -2, false, 2, &x, e)) < 0) return -1;
    if (got) r->samp.frequency_penalty = (float)x, set = 1;
    if ((got = number(root, "repetition_penalty", 0, true, HUGE_VAL, &x, e)) < 0) return -1;
    if (got) r->samp.repeat_penalty = (float)x, set = 1;
    if ((got = integer(root, "seed", INT64_MIN, INT64_MAX, &i, e)) < 0) return -1;
    if (got) r->samp.seed = (uint64_t)i, set = 1;
    if (set && !temp && r->samp.temperature == 0.0f) r->samp.temperature = 0.8f;
    kiln_err msg = {0};
    if (samp_params_check(&r->samp, &msg)) return BAD(e, NULL, "%s", msg.msg);
    return 0;
}

/* response_format: text, json_object, or json_schema {name, schema, strict} compiled to a
 * grammar; a schema kiln cannot enforce is refused. */
static int response_format(srv_request *r, json_t *root, srv_error *e) {
    json_t *rf = field(root, "response_format"), *g = field(root, "grammar");
    if (g) { /* kiln's (and llama.cpp's) extension: GBNF text */
        if (!json_is_string(g) || !json_string_length(g)) return BAD(e, "grammar", "'grammar' must be GBNF text");
        if (rf) return BAD(e, "grammar", "'grammar' and 'response_format' cannot both be given");
        r->grammar_given = true;
        return (r->grammar = dup_string(g)) ? 0 : OOM(e);
    }
    if (!rf) return 0;
    json_t *type = json_object_get(rf, "type");
    if (!json_is_object(rf) || !json_is_string(type))
        return BAD(e, "response_format", "'response_format' must be an object with a 'type'");
    const char *t = json_string_value(type);
    if (!strcmp(t, "text")) return 0;
    json_t *schema;
    char why[256];
    if (!strcmp(t, "json_object")) {
        schema = json_pack("{s:s}", "type", "object");
        if (!schema) return OOM(e);
        r->grammar = srv_schema_gbnf(schema, why);
        json_decref(schema);
        return r->grammar ? 0 : OOM(e);
    }
    if (strcmp(t, "json_schema"))
        return BAD(e, "response_format.type",
                   "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js)) return BAD(e, "response_format.json_schema", "'response_format.json_schema' must be an object");
    json_t *name = json_object_get(js, "name");
    if (name && !json_is_string(name))
        return BAD(e, "response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
    schema = json_object_get(js, "schema");
    if (!schema) return BAD(e, "response_format.json_schema.schema", "'response_format.json_schema.schema' is missing");
    r->grammar = srv_schema_gbnf(schema, why);
    if (!r->grammar)
        return BAD(e, "response_format.json_schema.schema", "'response_format.json_schema.schema': %s", why);
    return 0;
}

/* tools, tool_choice, parallel_tool_calls; the tools' JSON kept as the templates write it. */
static int tools(srv_request *r, json_t *root, srv_error *e) {
    json_t *ts = field(root, "tools"), *choice = field(root, "tool_choice");
    r->parallel_tool_calls = true;
    if (boolean(root, "parallel_tool_calls", &r->parallel_tool_calls, e) < 0) return -1;
    if (ts && !json_is_array(ts)) return BAD(e, "tools", "'tools' must be an array");
    size_t n = ts ? json_array_size(ts) : 0, i;
    if (n) {
        r->tools = calloc(n, sizeof *r->tools);
        r->tool_names = calloc(n, sizeof *r->tool_names);
        if (!r->tools || !r->tool_names) return OOM(e);
    }
    json_t *t;
    json_array_foreach(ts, i, t) {
        char param[48];
        snprintf(param, sizeof param, "tools[%zu]", i);
        json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
        json_t *name = json_object_get(fn, "name"), *params = json_object_get(fn, "parameters");
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") || !json_is_object(fn))
            return BAD(e, param, "'%s' must be {\"type\": \"function\", \"function\": {...}}", param);
        if (!json_is_string(name) || !json_string_length(name))
            return BAD(e, param, "'%s.function.name' must be a non-empty string", param);
        if (params && !json_is_object(params))
            return BAD(e, param, "'%s.function.parameters' must be an object", param);
        for (const char *c = json_string_value(name); *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
                  *c == '-' || *c == '.'))
                return BAD(e, param, "'%s.function.name' may hold only letters, digits, '_', '-' and '.'", param);
        if (!(r->tools[i] = json_dumps(t, JSON_ENCODE_ANY)) || !(r->tool_names[i] = dup_string(name))) return OOM(e);
        r->n_tools = i + 1;
    }
    r->tool_choice = SRV_TOOLS_AUTO;
    if (!choice) return 0;
    if (json_is_string(choice)) {
        const char *c = json_string_value(choice);
        if (!strcmp(c, "none")) r->tool_choice = SRV_TOOLS_NONE;
        else if (!strcmp(c, "required")) r->tool_choice = SRV_TOOLS_REQUIRED;
        else if (strcmp(c, "auto"))
            return BAD(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a function");
    } else {
        json_t *name = json_object_get(json_object_get(choice, "function"), "name");
        if (!json_is_string(name))
            return BAD(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                         "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        r->tool_choice = SRV_TOOLS_NAMED;
        if (!(r->tool_named = dup_string(name))) return OOM(e);
        for (i = 0; i < r->n_tools && strcmp(r->tool_names[i], r->tool_named); i++) {}
        if (i == r->n_tools) return BAD(e, "tool_choice", "'tool_choice' names '%.60s', which is not in 'tools'", r->tool_named);
    }
    if (r->tool_choice >= SRV_TOOLS_REQUIRED && !r->n_tools)
        return BAD(e, "tool_choice", "'tool_choice' requires a tool call but 'tools' is empty");
    if (r->tool_choice >= SRV_TOOLS_REQUIRED && r->grammar)
        return BAD(e, "tool_choice", "'tool_choice' %s cannot be combined with 'response_format'",
                   r->tool_choice == SRV_TOOLS_NAMED ? "naming a function" : "\"required\"");
    return 0;
}

static int template_kwargs(srv_request *r, json_t *root, srv_error *e) {
    json_t *k = field(root, "chat_template_kwargs");
    if (!k) return 0;
    if (!json_is_object(k)) return BAD(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    json_t *think = json_object_get(k, "enable_thinking");
    if (think && !json_is_boolean(think))
        return BAD(e, "chat_template_kwargs.enable_thinking", "'chat_template_kwargs.enable_thinking' must be a boolean");
    r->no_thinking = think && json_is_false(think);
    return 0;
}

static int fields(srv_request *r, json_t *root, const srv_limits *lim, srv_error *e) {
    json_t *model = field(root, "model");
    if (model && !json_is_string(model)) return BAD(e, "model", "'model' must be a string");
    if (model && !(r->model = dup_string(model))) return OOM(e);
    if (r->endpoint == SRV_CHAT ? messages(r, root, e) : prompt(r, root, e)) return -1;
    json_int_t n = 1;
    if (integer(root, "n", INT64_MIN, INT64_MAX, &n, e) < 0) return -1;
    if (field(root, "n") && n != 1) return BAD(e, "n", "'n' must be 1 (got %lld): one choice per request", n);
    if (max_tokens(r, root, lim, e) || stop(r, root, e) || streaming(r, root, e) || logprobs(r, root, e) ||
        response_format(r, root, e))
        return -1;
    if (r->endpoint == SRV_CHAT && (tools(r, root, e) || template_kwargs(r, root, e))) return -1;
    static const char *const legacy[] = {"functions", "function_call"}; /* answering without them would mislead */
    for (int k = 0; k < 2; k++)
        if (field(root, legacy[k]))
            return BAD(e, legacy[k], "'%s' is not supported (OpenAI's deprecated form): use 'tools' and 'tool_choice'",
                       legacy[k]);
    return sampling(r, root, lim, e);
}

int srv_request_parse(srv_request *r, srv_endpoint endpoint, const char *body, size_t len, const srv_limits *lim,
                      srv_error *e) {
    memset(r, 0, sizeof *r);
    r->endpoint = endpoint;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!root) return BAD(e, NULL, "invalid JSON body: %s (at byte %d)", jerr.text, jerr.position);
    int rc = json_is_object(root) ? fields(r, root, lim, e) : BAD(e, NULL, "the request body must be a JSON object");
    json_decref(root);
    if (rc) srv_request_free(r);
    return rc;
}

void srv_request_free(srv_request *r) {
    if (!r) return;
    free(r->model);
    for (size_t i = 0; i < r->n_messages; i++) {
        chat_msg *m = &r->messages[i];
        free((char *)m->content);
        free((char *)m->tool_call_id);
        for (size_t k = 0; k < m->n_tool_calls; k++)
            free((char *)m->tool_calls[k].id), free((char *)m->tool_calls[k].name),
                free((char *)m->tool_calls[k].arguments);
        free((chat_tool_call *)m->tool_calls);
    }
    for (size_t i = 0; i < r->n_tools; i++) free(r->tools[i]), free(r->tool_names[i]);
    free(r->tools);
    free(r->tool_names);
    free(r->tool_named);
    free(r->grammar);
    free(r->messages);
    free(r->prompt);
    for (size_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}
