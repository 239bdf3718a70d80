/* Shared pieces of the kiln command: usage errors and strict flag-value parsing. */
#ifndef KILN_CLI_CLI_H
#define KILN_CLI_CLI_H

#include "generate/grammar.h"
#include "text/tok.h"

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;

#define EXIT_USAGE 2 /* a bad command, flag or value */
#define EXIT_BADFILE 1 /* a file that fails validation, or a failed run */

/* Prints "kiln: <message>" and the command's usage to stderr; returns EXIT_USAGE. */
int cli_usage_error(const char *usage, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "kiln: <message>" to stderr; returns EXIT_BADFILE. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whole-string decimal parses with range checks: false on any junk. */
bool cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
bool cli_parse_f32(const char *s, float min, float max, float *out);
/* A byte count: a whole number with an optional unit, K M G T (powers of 1000) or KiB MiB
 * GiB TiB (powers of 1024), B for bytes; at least 1 and below 2^63. */
bool cli_parse_bytes(const char *s, uint64_t *out);

/* Tokenizes a prompt as llama.cpp's tools do (special tokens matched; BOS when
 * add_special and the model adds one), after checking it is UTF-8. 0, or 1 (printed). */
int cli_tokenize_prompt(const struct tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids,
                        uint32_t *n);

/* Fetches the value of flag argv[*i] (advancing *i); NULL when it is missing. */
const char *cli_flag_value(int argc, char **argv, int *i);

int cmd_inspect(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_diverge(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* All of f's bytes, NUL-terminated (*len without the NUL); NULL when out of memory. */
char *cli_read_all(FILE *f, size_t *len);
/* A --json-schema or --grammar file's matcher (constrain.c); all NULL without one. */
typedef struct cli_constraint {
    gram *g;
    gram_vocab *v;
    gram_match *m;
} cli_constraint;
/* Opens the one given (at most one of the paths is not NULL). 0, or EXIT_BADFILE after
 * printing why (an unreadable file, bad JSON, a schema or grammar kiln refuses). */
int cli_constraint_open(const char *schema_path, const char *grammar_path, const tokenizer *t, cli_constraint *c);
void cli_constraint_close(cli_constraint *c);
#define CLI_CONSTRAINT_USAGE \
    "  --json-schema FILE       constrain the output to JSON that validates against the schema in FILE\n" \
    "  --grammar FILE           constrain the output to a GBNF grammar (docs/grammar.md)\n"

#endif
