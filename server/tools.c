/* Tool calls per template family: the grammar that makes the model call a tool
 * (tool_choice required or named) and the parser that reads calls from its output. */
#include "server/api.h"
#include "server/schema.h"
#include "server/tools.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum syntax { HERMES, LLAMA31, MISTRAL } syntax;

static syntax syntax_of(chat_family f) {
    if (f == CHAT_LLAMA31) return LLAMA31;
    if (f == CHAT_MISTRAL_V3 || f == CHAT_MISTRAL_V3_TEKKEN || f == CHAT_MISTRAL_V7 || f == CHAT_MISTRAL_V7_TEKKEN)
        return MISTRAL;
    return HERMES;
}

const char *srv_calls_tag(chat_family f) { return syntax_of(f) == HERMES ? "<tool_call>" : NULL; }

/* ---- the grammar -------------------------------------------------------------------------- */

#define MAX_PARALLEL_CALLS 4 /* calls a forced reply may hold when parallel calls are allowed */

int srv_tools_grammar(srv_request *r, chat_family f, srv_error *e) {
    if (r->tool_choice < SRV_TOOLS_REQUIRED) return 0;
    if (!chat_has_tools(f))
        return srv_error_set(e, 400, "tools", NULL, "this model's chat template (%s) has no tool calls",
                             chat_family_name(f)), -1;
    syntax sx = syntax_of(f);
    srv_gbnf *b = srv_gbnf_new();
    if (!b) return srv_error_set(e, 500, NULL, NULL, "out of memory"), -1;
    char *call = NULL;
    size_t call_n = 0;
    int rc = -1;
    for (size_t i = 0; i < r->n_tools; i++) {
        if (r->tool_choice == SRV_TOOLS_NAMED && strcmp(r->tool_names[i], r->tool_named)) continue;
        json_t *tool = json_loads(r->tools[i], 0, NULL);
        json_t *params = json_object_get(json_object_get(tool, "function"), "parameters");
        char args[32] = "object", why[256], param[48];
        snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
        if (!tool) {
            srv_error_set(e, 500, NULL, NULL, "out of memory");
            goto out;
        }
        if (params && srv_gbnf_schema(b, params, params, args, why)) {
            json_decref(tool);
            srv_error_set(e, 400, param, NULL, "'%s': %s", param, why);
            goto out;
        }
        json_decref(tool);
        /* "{\"name\": \"NAME\", \"arguments\": " ARGS "}" in the family's key */
        char head[200], *lit;
        snprintf(head, sizeof head, "{\"name\": \"%s\", \"%s\": ", r->tool_names[i],
                 sx == LLAMA31 ? "parameters" : "arguments");
        if (!(lit = srv_gbnf_literal(head))) goto oom;
        size_t need = call_n + strlen(lit) + strlen(args) + 16;
        char *grown = realloc(call, need);
        if (!grown) {
            free(lit);
            goto oom;
        }
        call = grown;
        call_n += (size_t)snprintf(call + call_n, need - call_n, "%s%s %s \"}\"", call_n ? " | " : "", lit, args);
        free(lit);
    }
    if (srv_gbnf_rule(b, "call", call)) goto oom;
    int more = r->parallel_tool_calls ? MAX_PARALLEL_CALLS - 1 : 0;
    char root[200];
    if (sx == HERMES)
        snprintf(root, sizeof root, "\"<tool_call>\\n\" call \"\\n</tool_call>\" ( \"\\n<tool_call>\\n\" call "
                                    "\"\\n</tool_call>\" ){0,%d}", more);
    else if (sx == LLAMA31) snprintf(root, sizeof root, "call");
    else snprintf(root, sizeof root, "\"[\" call ( \", \" call ){0,%d} \"]\"", more);
    if (srv_gbnf_rule(b, "root", root)) goto oom;
    free(r->grammar);
    r->grammar = srv_gbnf_finish(b);
    b = NULL;
    if (!r->grammar) goto oom;
    rc = 0;
    goto out;
oom:
    srv_error_set(e, 500, NULL, NULL, "out of memory");
out:
    srv_gbnf_free(b);
    free(call);
    return rc;
}

/* ---- the parser --------------------------------------------------------------------------- */

static bool space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static void make_id(char id[16], uint64_t seed, size_t k) {
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + k * 0xbf58476d1ce4e5b9ull + 1;
    for (int i = 0; i < 9; i++) {
        x ^= x >> 31, x *= 0x94d049bb133111ebull, x ^= x >> 29;
        id[i] = al[x % 62];
    }
    id[9] = 0;
}

/* One call object {"name": ..., "arguments"|"parameters": {...}} into out; 0 when it is
 * not one, -1 when out of memory. */
static int add_call(json_t *o, uint64_t seed, srv_calls *out) {
    json_t *name = json_object_get(o, "name"), *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    json_t *parsed = NULL;
    if (json_is_string(args)) args = parsed = json_loads(json_string_value(args), 0, NULL);
    int rc = 0;
    if (json_is_string(name) && json_string_length(name) && json_is_object(args)) {
        srv_call *c = realloc(out->call, (out->n + 1) * sizeof *c);
        if (!c) rc = -1;
        else {
            out->call = c;
            c += out->n;
            memset(c, 0, sizeof *c);
            make_id(c->id, seed, out->n);
            c->name = strdup(json_string_value(name));
            c->arguments = json_dumps(args, JSON_COMPACT);
            out->n++;
            rc = c->name && c->arguments ? 1 : -1;
        }
    }
    json_decref(parsed);
    return rc;
}

static const char *find(const char *s, const char *end, const char *needle) {
    size_t k = strlen(needle);
    for (; s + k <= end; s++)
        if (!memcmp(s, needle, k)) return s;
    return NULL;
}

static int parse_hermes(const char *text, size_t len, uint64_t seed, srv_calls *out) {
    const char *end = text + len, *p = find(text, end, "<tool_call>");
    if (!p) return 0;
    size_t content = (size_t)(p - text);
    while (content && space(text[content - 1])) content--;
    while (p) {
        const char *body = p + strlen("<tool_call>"), *close = find(body, end, "</tool_call>");
        if (!close) return 0;
        json_t *o = json_loadb(body, (size_t)(close - body), 0, NULL);
        int got = o ? add_call(o, seed, out) : 0;
        json_decref(o);
        if (got <= 0) return got;
        p = close + strlen("</tool_call>");
        while (p < end && space(*p)) p++;
        if (p == end) break;
        if ((size_t)(end - p) < strlen("<tool_call>") || memcmp(p, "<tool_call>", strlen("<tool_call>"))) return 0;
    }
    out->content_len = content;
    return 1;
}

/* Llama 3.1's one object (after <|python_tag|>, as its built-in tools write), Mistral's
 * array (after [TOOL_CALLS] where the tag is text). */
static int parse_json(syntax sx, const char *text, size_t len, uint64_t seed, srv_calls *out) {
    const char *p = text, *end = text + len;
    while (p < end && space(*p)) p++;
    const char *tag = sx == LLAMA31 ? "<|python_tag|>" : "[TOOL_CALLS]";
    if ((size_t)(end - p) >= strlen(tag) && !memcmp(p, tag, strlen(tag))) p += strlen(tag);
    json_t *v = json_loadb(p, (size_t)(end - p), 0, NULL);
    int rc = 0;
    if (sx == LLAMA31 && json_is_object(v)) rc = add_call(v, seed, out);
    if (sx == MISTRAL && json_is_array(v) && json_array_size(v)) {
        size_t i;
        json_t *o;
        json_array_foreach(v, i, o) if ((rc = add_call(o, seed, out)) <= 0) break;
    }
    json_decref(v);
    out->content_len = 0;
    return rc;
}

int srv_calls_parse(chat_family f, const char *text, size_t len, uint64_t seed, srv_calls *out) {
    memset(out, 0, sizeof *out);
    syntax sx = syntax_of(f);
    int rc = sx == HERMES ? parse_hermes(text, len, seed, out) : parse_json(sx, text, len, seed, out);
    if (rc <= 0) srv_calls_free(out);
    return rc;
}

void srv_calls_free(srv_calls *c) {
    for (size_t i = 0; i < c->n; i++) free(c->call[i].name), free(c->call[i].arguments);
    free(c->call);
    memset(c, 0, sizeof *c);
}
