/* JSON Schema to GBNF. Each schema node becomes a rule "sN"; $refs become one rule per
 * target (so recursive schemas are recursive rules). The generated language is a subset
 * of what the schema accepts: objects have only their declared properties, in declared
 * order (a property that is not required may be left out), which is always valid
 * whatever additionalProperties says. */
#include "server/schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_BOUND 1000 /* minItems/maxItems/minLength/maxLength the grammar spells out */
#define MAX_REFS 256

struct srv_gbnf {
    char *p;
    size_t n, cap;
    bool oom;
    unsigned next;
    char *ref_path[MAX_REFS];
    char ref_rule[MAX_REFS][32];
    unsigned n_refs;
};

static void add(srv_gbnf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void addf(srv_gbnf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void addf(srv_gbnf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) return add(b, tmp, (size_t)k);
    char *big = malloc((size_t)k + 1);
    if (!big) return (void)(b->oom = true);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    add(b, big, (size_t)k);
    free(big);
}

/* JSON's own rules; "ws" between tokens is at most one space or a newline and a short
 * indent, so whitespace cannot run on. */
static const char prelude[] =
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,12}\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "member ::= string ws \":\" ws value ws\n"
    "object ::= \"{\" ws ( member ( \",\" ws member )* )? \"}\"\n"
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "number ::= integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n";

srv_gbnf *srv_gbnf_new(void) {
    srv_gbnf *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    add(b, prelude, sizeof prelude - 1);
    if (b->oom) return srv_gbnf_free(b), NULL;
    return b;
}

void srv_gbnf_free(srv_gbnf *b) {
    if (!b) return;
    for (unsigned i = 0; i < b->n_refs; i++) free(b->ref_path[i]);
    free(b->p);
    free(b);
}

char *srv_gbnf_finish(srv_gbnf *b) {
    if (!b) return NULL;
    char *p = b->oom ? NULL : b->p;
    if (!p) free(b->p);
    b->p = NULL;
    srv_gbnf_free(b);
    return p;
}

int srv_gbnf_rule(srv_gbnf *b, const char *name, const char *body) {
    add(b, name, strlen(name));
    add(b, " ::= ", 5);
    add(b, body, strlen(body));
    add(b, "\n", 1);
    return b->oom ? -1 : 0;
}

char *srv_gbnf_literal(const char *s) {
    size_t n = strlen(s);
    char *o = malloc(4 * n + 3), *q = o;
    if (!o) return NULL;
    *q++ = '"';
    for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
        if (*u == '"' || *u == '\\') *q++ = '\\', *q++ = (char)*u;
        else if (*u < 0x20 || *u == 0x7f) q += sprintf(q, "\\x%02x", *u);
        else *q++ = (char)*u;
    }
    *q++ = '"';
    *q = 0;
    return o;
}

/* ---- the compiler ---------------------------------------------------------------------- */

typedef struct cc {
    srv_gbnf *b;
    json_t *doc;
    char *why;
    char path[200];
} cc;

static int bad(cc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(cc *c, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->path[0]) snprintf(c->why, 256, "%.100s: %.150s", c->path, msg);
    else snprintf(c->why, 256, "%.200s", msg);
    return -1;
}

static void new_name(cc *c, char out[32]) { snprintf(out, 32, "s%u", c->b->next++); }

/* The literal of a JSON value's compact text, as a GBNF literal; NULL when out of memory. */
static char *value_literal(json_t *v) {
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return NULL;
    char *lit = srv_gbnf_literal(text);
    free(text);
    return lit;
}

static int compile(cc *c, json_t *s, int depth, char name[32]);

/* A child schema at path + suffix. */
static int child(cc *c, json_t *s, int depth, const char *suffix, char name[32]) {
    size_t len = strlen(c->path);
    snprintf(c->path + len, sizeof c->path - len, "%s%s", len ? "." : "", suffix);
    int rc = compile(c, s, depth + 1, name);
    if (rc == 0) c->path[len] = 0;
    return rc;
}

static const char *const annotations[] = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", "strict", NULL};
static const char *const handled[] = {"type", "enum", "const", "properties", "required", "additionalProperties",
                                      "items", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref",
                                      "minLength", "maxLength", NULL};

static bool in(const char *const *list, const char *k) {
    for (; *list; list++)
        if (!strcmp(*list, k)) return true;
    return false;
}

/* Which JSON types a value of this (checked) schema can take: bits of object, array,
 * string, number, boolean, null; enum and const by their values. */
enum { T_OBJ = 1, T_ARR = 2, T_STR = 4, T_NUM = 8, T_BOOL = 16, T_NULL = 32, T_ALL = 63 };

static unsigned type_bit(const char *t) {
    if (!strcmp(t, "object")) return T_OBJ;
    if (!strcmp(t, "array")) return T_ARR;
    if (!strcmp(t, "string")) return T_STR;
    if (!strcmp(t, "number") || !strcmp(t, "integer")) return T_NUM;
    if (!strcmp(t, "boolean")) return T_BOOL;
    if (!strcmp(t, "null")) return T_NULL;
    return 0;
}

static unsigned value_bit(json_t *v) {
    return json_is_object(v) ? T_OBJ : json_is_array(v) ? T_ARR : json_is_string(v) ? T_STR
         : json_is_number(v) ? T_NUM : json_is_boolean(v) ? T_BOOL : T_NULL;
}

static unsigned types_of(json_t *s) {
    if (!json_is_object(s)) return T_ALL;
    json_t *t = json_object_get(s, "type"), *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
    if (k) return value_bit(k);
    if (json_is_array(e)) {
        unsigned m = 0;
        size_t i;
        json_t *v;
        json_array_foreach(e, i, v) m |= value_bit(v);
        return m;
    }
    if (json_is_string(t)) return type_bit(json_string_value(t));
    if (json_is_array(t)) {
        unsigned m = 0;
        size_t i;
        json_t *v;
        json_array_foreach(t, i, v) m |= json_is_string(v) ? type_bit(json_string_value(v)) : 0;
        return m;
    }
    return T_ALL;
}

/* Whether v matches s's "type" (absent: anything); for enum and const values. */
static bool type_allows(json_t *s, json_t *v) {
    json_t *t = json_object_get(s, "type");
    if (!t) return true;
    bool integer_ok = json_is_integer(v) || (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v));
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *ti = json_is_array(t) ? json_array_get(t, i) : t;
        if (!json_is_string(ti)) continue;
        const char *ts = json_string_value(ti);
        if (!strcmp(ts, "integer") ? json_is_number(v) && integer_ok : type_bit(ts) == value_bit(v)) return true;
    }
    return false;
}

static int enum_rule(cc *c, json_t *s, json_t *values, char name[32]) {
    new_name(c, name);
    addf(c->b, "%s ::= ", name);
    size_t i, kept = 0;
    json_t *v;
    json_array_foreach(values, i, v) {
        if (!type_allows(s, v)) continue;
        char *lit = value_literal(v);
        if (!lit) return bad(c, "out of memory");
        addf(c->b, "%s%s", kept++ ? " | " : "", lit);
        free(lit);
    }
    if (!kept) return bad(c, "'enum' has no value of the schema's type");
    add(c->b, "\n", 1);
    return 0;
}

static int bound(cc *c, json_t *s, const char *key, long *out) {
    json_t *v = json_object_get(s, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) return bad(c, "'%s' must be a non-negative integer", key);
    if (json_integer_value(v) > MAX_BOUND) return bad(c, "'%s' over %d is not supported", key, MAX_BOUND);
    *out = (long)json_integer_value(v);
    return 0;
}

/* x repeated min..max times (max < 0: unbounded), joined by sep; into the open rule. */
static void repeat_body(cc *c, const char *x, const char *sep, long min, long max) {
    if (max == 0) return;
    if (min == 0) add(c->b, "( ", 2);
    addf(c->b, "%s ( %s %s )", x, sep, x);
    long lo = min > 0 ? min - 1 : 0;
    if (max < 0) addf(c->b, "{%ld,}", lo);
    else addf(c->b, "{%ld,%ld}", lo, max - 1);
    if (min == 0) add(c->b, " )?", 3);
}

static int string_rule(cc *c, json_t *s, char name[32]) {
    long min = 0, max = -1;
    if (bound(c, s, "minLength", &min) || bound(c, s, "maxLength", &max)) return -1;
    if (max >= 0 && max < min) return bad(c, "'maxLength' is below 'minLength'");
    new_name(c, name);
    if (max < 0) addf(c->b, "%s ::= \"\\\"\" char{%ld,} \"\\\"\"\n", name, min);
    else addf(c->b, "%s ::= \"\\\"\" char{%ld,%ld} \"\\\"\"\n", name, min, max);
    return 0;
}

static int array_rule(cc *c, json_t *s, int depth, char name[32]) {
    long min = 0, max = -1;
    if (bound(c, s, "minItems", &min) || bound(c, s, "maxItems", &max)) return -1;
    if (max >= 0 && max < min) return bad(c, "'maxItems' is below 'minItems'");
    json_t *items = json_object_get(s, "items");
    char item[32] = "value", elem[40];
    if (items && child(c, items, depth, "items", item)) return -1;
    snprintf(elem, sizeof elem, "%s ws", item);
    new_name(c, name);
    addf(c->b, "%s ::= \"[\" ws ", name);
    repeat_body(c, elem, "\",\" ws", min, max);
    add(c->b, " \"]\"\n", 5);
    return 0;
}

static int object_rule(cc *c, json_t *s, int depth, char name[32]) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"),
           *extra = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return bad(c, "'properties' must be an object");
    if (req && !json_is_array(req)) return bad(c, "'required' must be an array of strings");
    if (extra && !json_is_boolean(extra) && !json_is_object(extra))
        return bad(c, "'additionalProperties' must be a boolean or a schema");
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) if (!json_is_string(v)) return bad(c, "'required' must be an array of strings");
    /* the keys: declared properties, then required ones not declared (any value) */
    size_t n = (props ? json_object_size(props) : 0) + (req ? json_array_size(req) : 0);
    const char **keys = calloc(n + 1, sizeof *keys);
    char (*rules)[32] = calloc(n + 1, sizeof *rules);
    bool *must = calloc(n + 1, 1);
    int rc = -1;
    if (!keys || !rules || !must) {
        bad(c, "out of memory");
        goto out;
    }
    size_t k = 0;
    const char *key;
    json_object_foreach(props, key, v) {
        char sub[200];
        snprintf(sub, sizeof sub, "properties.%s", key);
        keys[k] = key;
        if (child(c, v, depth, sub, rules[k])) goto out;
        k++;
    }
    json_array_foreach(req, i, v) {
        size_t j = 0;
        while (j < k && strcmp(keys[j], json_string_value(v))) j++;
        if (j == k) keys[k] = json_string_value(v), snprintf(rules[k], 32, "value"), k++;
        must[j] = true;
    }
    new_name(c, name);
    if (!props && !req && extra != json_false()) { /* a map: any keys, values of one schema */
        char val[32] = "value", elem[80];
        if (json_is_object(extra) && child(c, extra, depth, "additionalProperties", val)) goto out;
        snprintf(elem, sizeof elem, "string ws \":\" ws %s ws", val);
        addf(c->b, "%s ::= \"{\" ws ", name);
        repeat_body(c, elem, "\",\" ws", 0, -1);
        add(c->b, " \"}\"\n", 5);
        rc = 0;
        goto out;
    }
    /* a_i: the properties from i on after one was written (each opens with a comma),
     * b_i: the same before any was written */
    for (size_t j = k + 1; j-- > 0;) {
        if (j == k) {
            addf(c->b, "%s-a%zu ::= \n%s-b%zu ::= \n", name, j, name, j);
            continue;
        }
        json_t *ks = json_string(keys[j]);
        char *quoted = ks ? value_literal(ks) : NULL;
        json_decref(ks);
        if (!quoted) {
            bad(c, "out of memory");
            goto out;
        }
        char kv[160];
        snprintf(kv, sizeof kv, "ws \":\" ws %s ws %s-a%zu", rules[j], name, j + 1);
        addf(c->b, "%s-a%zu ::= \",\" ws %s %s", name, j, quoted, kv);
        if (!must[j]) addf(c->b, " | %s-a%zu", name, j + 1);
        addf(c->b, "\n%s-b%zu ::= %s %s", name, j, quoted, kv);
        if (!must[j]) addf(c->b, " | %s-b%zu", name, j + 1);
        add(c->b, "\n", 1);
        free(quoted);
    }
    addf(c->b, "%s ::= \"{\" ws %s-b0 \"}\"\n", name, name);
    rc = 0;
out:
    free(keys);
    free(rules);
    free(must);
    return rc;
}

/* #/$defs/NAME or #/definitions/NAME (JSON pointer escapes ~0 ~1). */
static int ref_rule(cc *c, const char *ref, int depth, char name[32]) {
    for (unsigned i = 0; i < c->b->n_refs; i++)
        if (!strcmp(c->b->ref_path[i], ref)) return snprintf(name, 32, "%s", c->b->ref_rule[i]), 0;
    const char *p = NULL;
    json_t *defs = NULL;
    if (!strncmp(ref, "#/$defs/", 8)) p = ref + 8, defs = json_object_get(c->doc, "$defs");
    else if (!strncmp(ref, "#/definitions/", 14)) p = ref + 14, defs = json_object_get(c->doc, "definitions");
    else if (!strcmp(ref, "#")) p = NULL;
    else return bad(c, "'$ref' %.80s is not supported (only #, #/$defs/NAME and #/definitions/NAME)", ref);
    char key[200];
    size_t k = 0;
    for (; p && *p && k + 1 < sizeof key; p++) {
        if (*p == '/') return bad(c, "'$ref' %.80s: nested pointers are not supported", ref);
        if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) key[k++] = p[1] == '0' ? '~' : '/', p++;
        else key[k++] = *p;
    }
    key[k] = 0;
    json_t *target = p || strcmp(ref, "#") ? json_object_get(defs, key) : c->doc;
    if (!target) return bad(c, "'$ref' %.80s points at nothing", ref);
    if (c->b->n_refs == MAX_REFS) return bad(c, "more than %d distinct '$ref' targets", MAX_REFS);
    unsigned slot = c->b->n_refs++;
    if (!(c->b->ref_path[slot] = strdup(ref))) return bad(c, "out of memory");
    new_name(c, c->b->ref_rule[slot]); /* named before compiling, so a recursive ref finds it */
    snprintf(name, 32, "%s", c->b->ref_rule[slot]);
    char inner[32];
    if (child(c, target, depth, ref, inner)) return -1;
    addf(c->b, "%s ::= %s\n", name, inner);
    return 0;
}

/* name ::= names[0] | names[1] | ... */
static void alt_rule(cc *c, char name[32], char (*names)[32], size_t n) {
    new_name(c, name);
    addf(c->b, "%s ::= ", name);
    for (size_t i = 0; i < n; i++) addf(c->b, "%s%s", i ? " | " : "", names[i]);
    add(c->b, "\n", 1);
}

static int alternatives(cc *c, json_t *list, const char *key, int depth, char name[32]) {
    if (!json_is_array(list) || !json_array_size(list)) return bad(c, "'%s' must be a non-empty array", key);
    size_t n = json_array_size(list), i;
    json_t *v;
    if (!strcmp(key, "oneOf")) /* "exactly one": kiln enforces it only where the branches cannot overlap */
        for (i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                if (types_of(json_array_get(list, i)) & types_of(json_array_get(list, j)))
                    return bad(c, "'oneOf' branches %zu and %zu may both match; kiln enforces 'oneOf' only over "
                                  "branches of different types (use 'anyOf')", i, j);
    char (*names)[32] = calloc(n, sizeof *names);
    if (!names) return bad(c, "out of memory");
    json_array_foreach(list, i, v) {
        char sub[32];
        snprintf(sub, sizeof sub, "%s[%zu]", key, i);
        if (child(c, v, depth, sub, names[i])) return free(names), -1;
    }
    alt_rule(c, name, names, n);
    free(names);
    return 0;
}

static int one_type(cc *c, json_t *s, const char *t, int depth, char name[32]) {
    if (!strcmp(t, "object")) return object_rule(c, s, depth, name);
    if (!strcmp(t, "array")) return array_rule(c, s, depth, name);
    if (!strcmp(t, "string")) return string_rule(c, s, name);
    if (!strcmp(t, "number") || !strcmp(t, "integer") || !strcmp(t, "boolean") || !strcmp(t, "null"))
        return snprintf(name, 32, "%s", t), 0;
    return bad(c, "unknown type '%.40s'", t);
}

static int compile(cc *c, json_t *s, int depth, char name[32]) {
    if (depth > MAX_DEPTH) return bad(c, "the schema is nested deeper than %d", MAX_DEPTH);
    if (json_is_true(s)) return snprintf(name, 32, "value"), 0;
    if (!json_is_object(s)) return bad(c, "a schema must be an object or true");
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) {
        if (in(annotations, key)) continue;
        if (!in(handled, key)) return bad(c, "'%.60s' is not supported", key);
    }
    json_t *ref = json_object_get(s, "$ref"), *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf"),
           *all = json_object_get(s, "allOf"), *en = json_object_get(s, "enum"), *k = json_object_get(s, "const"),
           *type = json_object_get(s, "type");
    size_t n_keys = 0;
    json_object_foreach(s, key, v) n_keys += !in(annotations, key);
    if ((ref || any || one || all) && n_keys > 1)
        return bad(c, "'%s' beside other keywords is not supported", ref ? "$ref" : any ? "anyOf" : one ? "oneOf" : "allOf");
    if (ref) {
        if (!json_is_string(ref)) return bad(c, "'$ref' must be a string");
        return ref_rule(c, json_string_value(ref), depth, name);
    }
    if (any) return alternatives(c, any, "anyOf", depth, name);
    if (one) return alternatives(c, one, "oneOf", depth, name);
    if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1)
            return bad(c, "'allOf' is supported only with one schema");
        return child(c, json_array_get(all, 0), depth, "allOf[0]", name);
    }
    if (k) {
        json_t *one_value = json_pack("[O]", k);
        int rc = one_value ? enum_rule(c, s, one_value, name) : bad(c, "out of memory");
        json_decref(one_value);
        return rc;
    }
    if (en) {
        if (!json_is_array(en) || !json_array_size(en)) return bad(c, "'enum' must be a non-empty array");
        return enum_rule(c, s, en, name);
    }
    if (!type) {
        /* no type: the keywords say which (properties: an object, items: an array) */
        if (json_object_get(s, "properties") || json_object_get(s, "required") || json_object_get(s, "additionalProperties"))
            return object_rule(c, s, depth, name);
        if (json_object_get(s, "items") || json_object_get(s, "minItems") || json_object_get(s, "maxItems"))
            return array_rule(c, s, depth, name);
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength")) return string_rule(c, s, name);
        return snprintf(name, 32, "value"), 0;
    }
    if (json_is_string(type)) return one_type(c, s, json_string_value(type), depth, name);
    if (!json_is_array(type) || !json_array_size(type)) return bad(c, "'type' must be a string or an array of strings");
    size_t n = json_array_size(type), i;
    char (*names)[32] = calloc(n, sizeof *names);
    if (!names) return bad(c, "out of memory");
    json_array_foreach(type, i, v) {
        if (!json_is_string(v) || one_type(c, s, json_string_value(v), depth, names[i])) {
            if (!json_is_string(v)) bad(c, "'type' must be a string or an array of strings");
            free(names);
            return -1;
        }
    }
    alt_rule(c, name, names, n);
    free(names);
    return 0;
}

int srv_gbnf_schema(srv_gbnf *b, json_t *schema, json_t *root_doc, char name[32], char why[256]) {
    cc c = {.b = b, .doc = root_doc ? root_doc : schema, .why = why};
    why[0] = 0;
    if (compile(&c, schema, 0, name)) return -1;
    if (b->oom) return snprintf(why, 256, "out of memory"), -1;
    return 0;
}

char *srv_schema_gbnf(json_t *schema, char why[256]) {
    srv_gbnf *b = srv_gbnf_new();
    char name[32];
    if (!b) return snprintf(why, 256, "out of memory"), NULL;
    if (srv_gbnf_schema(b, schema, schema, name, why)) return srv_gbnf_free(b), NULL;
    char body[40];
    snprintf(body, sizeof body, "%s", name);
    if (srv_gbnf_rule(b, "root", body)) return srv_gbnf_free(b), snprintf(why, 256, "out of memory"), NULL;
    return srv_gbnf_finish(b);
}
