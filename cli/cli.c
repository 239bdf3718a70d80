#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_usage_error(const char *usage, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("kiln: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n%s", usage);
    return EXIT_USAGE;
}

int cli_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("kiln: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return EXIT_BADFILE;
}

bool cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max) return false;
    *out = v;
    return true;
}

bool cli_parse_bytes(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return false;
    static const struct { const char *unit; uint64_t scale; } units[] = {
        {"", 1}, {"B", 1}, {"K", 1000ull}, {"M", 1000000ull}, {"G", 1000000000ull}, {"T", 1000000000000ull},
        {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {"TiB", 1ull << 40}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(end, units[i].unit)) {
            if (!v || v > (UINT64_MAX >> 1) / units[i].scale) return false;
            *out = v * units[i].scale;
            return true;
        }
    return false;
}

bool cli_parse_f32(const char *s, float min, float max, float *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    float v = strtof(s, &end);
    if (errno || *end || !isfinite(v) || v < min || v > max) return false;
    *out = v;
    return true;
}

const char *cli_flag_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) return NULL;
    return argv[++*i];
}
