/* kiln tokenize MODEL [-p TEXT | -f FILE] [--special] [--json]: ids and pieces of a text,
 * like llama-tokenize. */
#include "base/error.h"
#include "cli/cli.h"
#include "text/tok.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kiln tokenize MODEL.gguf (-p TEXT | -f FILE) [--special] [--json]\n"
    "  -p TEXT    the text ('-' reads stdin)     -f FILE  read the text from a file\n"
    "  --special  add BOS/EOS as the model does and match special tokens written in the text\n"
    "  --json     one object: {\"ids\": [...], \"pieces\": [...]}\n";

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 4096, n = 0, k;
    char *b = malloc(cap);
    while (b && (k = fread(b + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    *len = n;
    return b;
}

int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *text = NULL, *file = NULL;
    bool special = false, json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "-p") || !strcmp(a, "-f")) {
            const char *v = cli_flag_value(argc, argv, &i);
            if (!v) return cli_usage_error(usage, "%s needs a value", a);
            *(a[1] == 'p' ? &text : &file) = v;
        } else if (!strcmp(a, "--special")) special = true;
        else if (!strcmp(a, "--json")) json = true;
        else if (a[0] == '-' && a[1]) return cli_usage_error(usage, "unknown flag '%s'", a);
        else if (path) return cli_usage_error(usage, "more than one model given");
        else path = a;
    }
    if (!path) return cli_usage_error(usage, "no model given");
    if (!text == !file) return cli_usage_error(usage, "give exactly one of -p TEXT and -f FILE");

    size_t len = 0;
    char *owned = NULL;
    if (file || !strcmp(text, "-")) {
        FILE *f = file ? fopen(file, "rb") : stdin;
        if (!f) return cli_fail("%s: cannot open", file);
        owned = read_all(f, &len);
        if (file) fclose(f);
        if (!owned) return cli_fail("cannot read the text");
        text = owned;
    } else {
        len = strlen(text);
    }
    int rc = 0;
    kiln_err err = {0};
    tokenizer *t = NULL;
    int32_t *ids = NULL;
    kiln_err ge;
    gguf_file *g = gguf_open(path, &ge); /* vocab-only files tokenize too: no tensors needed */
    if (!g) {
        rc = cli_fail("%s: %s", path, ge.msg);
        goto out;
    }
    t = tok_load(g, &err);
    if (!t) {
        rc = cli_fail("%s: %s", path, err.msg);
        goto out;
    }
    size_t bad = tok_utf8_invalid_at(text, len);
    if (bad) {
        rc = cli_fail("the text is not valid UTF-8 (byte %zu)", bad - 1);
        goto out;
    }
    int64_t n = tok_encode(t, text, len, special, special, NULL, 0, &err);
    ids = n >= 0 ? malloc(((size_t)n + 1) * sizeof *ids) : NULL;
    if (n < 0 || !ids || tok_encode(t, text, len, special, special, ids, (size_t)n + 1, &err) != n) {
        rc = cli_fail("%s", n < 0 ? err.msg : "out of memory");
        goto out;
    }
    json_t *jids = json ? json_array() : NULL, *jpieces = json ? json_array() : NULL;
    for (int64_t i = 0; i < n; i++) {
        char piece[512];
        int64_t k = tok_piece(t, ids[i], true, piece, sizeof piece);
        size_t pl = k < 0 ? 0 : (size_t)k < sizeof piece ? (size_t)k : sizeof piece;
        if (json) {
            json_array_append_new(jids, json_integer(ids[i]));
            json_t *ps = json_stringn(piece, pl); /* a piece may be part of a UTF-8 character */
            json_array_append_new(jpieces, ps ? ps : json_null());
        } else {
            printf("%6d -> '", ids[i]);
            fwrite(piece, 1, pl, stdout);
            printf("'\n");
        }
    }
    if (json) {
        json_t *root = json_pack("{s:o,s:o}", "ids", jids, "pieces", jpieces);
        json_dumpf(root, stdout, JSON_COMPACT);
        putchar('\n');
        json_decref(root);
    }
out:
    free(ids);
    free(owned);
    tok_free(t);
    gguf_close(g);
    return rc;
}
