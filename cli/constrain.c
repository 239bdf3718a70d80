/* --json-schema FILE and --grammar FILE for kiln run and kiln chat: the file compiled to a
 * grammar (a schema through server/schema.h) and a matcher over the model's vocabulary. */
#include "cli/cli.h"
#include "server/schema.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n;
    char *b = cli_read_all(f, &n);
    fclose(f);
    return b;
}

int cli_constraint_open(const char *schema_path, const char *grammar_path, const tokenizer *t, cli_constraint *c) {
    memset(c, 0, sizeof *c);
    if (!schema_path && !grammar_path) return 0;
    const char *path = schema_path ? schema_path : grammar_path;
    char *text = read_file(path), *gbnf = NULL;
    if (!text) return cli_fail("%s: cannot read it", path);
    if (schema_path) {
        json_error_t je;
        json_t *s = json_loads(text, JSON_DECODE_ANY, &je);
        char why[256];
        if (!s) {
            free(text);
            return cli_fail("%s: line %d: %s", path, je.line, je.text);
        }
        gbnf = srv_schema_gbnf(s, why);
        json_decref(s);
        free(text);
        if (!gbnf) return cli_fail("%s: %s", path, why);
    } else {
        gbnf = text;
    }
    kiln_err err = {0};
    c->g = gram_parse(gbnf, &err);
    free(gbnf);
    if (!c->g || !(c->v = gram_vocab_create(t, &err)) || !(c->m = gram_match_create(c->g, c->v, &err))) {
        cli_constraint_close(c);
        return cli_fail("%s: %s", path, err.msg);
    }
    return 0;
}

void cli_constraint_close(cli_constraint *c) {
    gram_match_free(c->m);
    gram_vocab_free(c->v);
    gram_free(c->g);
    memset(c, 0, sizeof *c);
}
