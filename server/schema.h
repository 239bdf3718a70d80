/* JSON Schema (the subset docs/grammar.md lists) compiled to the GBNF grammar of
 * generate/grammar.h, for response_format, tool arguments and `kiln run --json-schema`.
 * What the grammar generates always validates against the schema: objects carry only
 * their declared properties, in order; a keyword kiln cannot enforce is refused, naming
 * itself, never ignored. */
#ifndef KILN_SERVER_SCHEMA_H
#define KILN_SERVER_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>

typedef struct srv_gbnf srv_gbnf;

/* A grammar being built: the JSON rules (value, object, array, string, number, ws) are
 * there from the start. NULL when out of memory. */
srv_gbnf *srv_gbnf_new(void);
void srv_gbnf_free(srv_gbnf *b);
/* Adds the rules for a schema (root_doc: the document its $refs point into) and writes
 * the name of its rule to name[32]. 0, or -1 with why[256] (the keyword at fault and
 * where, e.g. "properties.age: 'minimum' is not supported"). */
int srv_gbnf_schema(srv_gbnf *b, json_t *schema, json_t *root_doc, char name[32], char why[256]);
/* Adds "name ::= body" as given. 0, or -1 when out of memory. */
int srv_gbnf_rule(srv_gbnf *b, const char *name, const char *body);
/* A GBNF string literal for the bytes s (quotes included), malloc'ed. */
char *srv_gbnf_literal(const char *s);
/* The grammar's text (the caller frees); NULL when out of memory. b is freed. */
char *srv_gbnf_finish(srv_gbnf *b);

/* The whole grammar for one schema: root is its value. NULL with why. */
char *srv_schema_gbnf(json_t *schema, char why[256]);

#endif
