/* Shared pieces of the kiln command: usage errors and strict flag-value parsing. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <stdbool.h>
#include <stdint.h>

#define EXIT_USAGE 2 /* a bad command, flag or value */
#define EXIT_BADFILE 1 /* a file that fails validation, or a failed run */

/* Prints "kiln: <message>" and the command's usage to stderr; returns EXIT_USAGE. */
int cli_usage_error(const char *usage, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "kiln: <message>" to stderr; returns EXIT_BADFILE. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whole-string decimal parses with range checks: false on any junk. */
bool cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
bool cli_parse_f32(const char *s, float min, float max, float *out);

/* Fetches the value of flag argv[*i] (advancing *i); NULL when it is missing. */
const char *cli_flag_value(int argc, char **argv, int *i);

int cmd_inspect(int argc, char **argv);
int cmd_synth(int argc, char **argv);

#endif
