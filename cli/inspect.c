/* kiln inspect FILE.gguf [--json]: what a GGUF holds, read from its header alone
 * (no weight byte is touched, so it answers at once on any size). */
#include "base/error.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "model/arch.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] = "usage: kiln inspect FILE.gguf [--json]\n";

#define ARRAY_HEAD 8    /* array elements shown before "... (N more)" */
#define STR_SHOWN 72    /* string bytes shown in text before "... (N bytes)" */

/* ---- text ------------------------------------------------------------------------------ */

static void print_escaped(const char *p, uint64_t len, uint64_t limit) {
    uint64_t n = len < limit ? len : limit;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\n') fputs("\\n", stdout);
        else if (ch == '\t') fputs("\\t", stdout);
        else if (ch == '\r') fputs("\\r", stdout);
        else if (ch == '\\' || ch == '\'') printf("\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f) printf("\\x%02x", ch);
        else putchar(ch);
    }
    if (len > limit) printf("... (%llu bytes)", (unsigned long long)len);
}

static void print_scalar(const gguf_value *v) {
    switch (v->type) {
    case GGUF_VT_U8: case GGUF_VT_U16: case GGUF_VT_U32: case GGUF_VT_U64:
        printf("%llu", (unsigned long long)v->v.u);
        break;
    case GGUF_VT_I8: case GGUF_VT_I16: case GGUF_VT_I32: case GGUF_VT_I64:
        printf("%lld", (long long)v->v.i);
        break;
    case GGUF_VT_F32: printf("%.9g", v->v.f); break;
    case GGUF_VT_F64: printf("%.17g", v->v.f); break;
    case GGUF_VT_BOOL: fputs(v->v.b ? "true" : "false", stdout); break;
    case GGUF_VT_STR:
        putchar('\'');
        print_escaped(v->v.str.ptr, v->v.str.len, STR_SHOWN);
        putchar('\'');
        break;
    default: break;
    }
}

static void print_value(const gguf_value *v) {
    if (v->type != GGUF_VT_ARR) {
        print_scalar(v);
        return;
    }
    const gguf_array *a = &v->v.arr;
    putchar('[');
    uint64_t shown = a->n < ARRAY_HEAD ? a->n : ARRAY_HEAD;
    for (uint64_t i = 0; i < shown; i++) {
        gguf_value e = gguf_arr_at(a, i);
        if (i) fputs(", ", stdout);
        print_value(&e);
    }
    if (a->n > shown) printf(", ... (%llu more)", (unsigned long long)(a->n - shown));
    putchar(']');
}

static void type_label(const gguf_value *v, char *buf, size_t n) {
    if (v->type == GGUF_VT_ARR)
        snprintf(buf, n, "arr[%s,%llu]", gguf_vtype_name(v->v.arr.type), (unsigned long long)v->v.arr.n);
    else snprintf(buf, n, "%s", gguf_vtype_name(v->type));
}

static void shape_str(const gguf_tensor *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (uint32_t d = 0; d < t->n_dims && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%llu", d ? ", " : "", (unsigned long long)t->ne[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static void human(uint64_t bytes, char *buf, size_t n) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", v, units[u]);
}

typedef struct type_total { uint64_t tensors, params, bytes; } type_total;

static void totals(const gguf_file *g, type_total *by_type, type_total *all) {
    memset(all, 0, sizeof *all);
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        type_total *tt = &by_type[t->type];
        tt->tensors++, all->tensors++;
        tt->params += gguf_tensor_nelements(t), all->params += gguf_tensor_nelements(t);
        tt->bytes += t->nbytes, all->bytes += t->nbytes;
    }
}

static void print_hparams(const gguf_file *g) {
    arch_hparams hp;
    kiln_err err;
    if (arch_read_hparams(g, &hp, &err)) {
        printf("\nhyperparameters: not available: %s\n", err.msg);
        return;
    }
    printf("\nhyperparameters (%s):\n", arch_name(hp.arch));
    printf("  layers %u, embedding %u, feed-forward %u, vocab %u, context %u\n", hp.n_layer, hp.n_embd, hp.n_ff,
           hp.n_vocab, hp.n_ctx_train);
    printf("  heads %u, kv heads %u (GQA %u), head dim k %u / v %u\n", hp.n_head, hp.n_head_kv,
           hp.n_head / hp.n_head_kv, hp.head_dim_k, hp.head_dim_v);
    static const char *const scaling[] = {"none", "linear", "yarn", "llama3"};
    printf("  rope: base %.9g, %u dims, %s pairing, scaling %s", hp.rope_base, hp.n_rot,
           hp.rope_neox ? "neox" : "normal", scaling[hp.rope_scaling]);
    if (hp.rope_scale_factor) printf(" x%.9g", hp.rope_scale_factor);
    if (hp.rope_orig_ctx) printf(" (original context %u)", hp.rope_orig_ctx);
    if (hp.has_rope_freqs) printf(", rope_freqs.weight");
    printf("\n  rms epsilon %.9g", hp.rms_eps);
    if (gguf_n_tensors(g)) printf(", output %s", hp.tied_output ? "tied to token_embd" : "separate");
    if (hp.qkv_bias) printf(", q/k/v biases");
    if (hp.qk_norm) printf(", q/k RMSNorm");
    putchar('\n');
    if (arch_is_qwen35(hp.arch)) {
        printf("  Gated DeltaNet in %u of %u layers (full attention in", hp.n_recurrent, hp.n_layer);
        for (uint32_t l = 0; l < hp.n_layer; l++)
            if (!hp.recurrent[l]) printf(" %u", l);
        printf("); k heads %u, v heads %u, state %u, conv kernel %u\n", hp.ssm_k_heads, hp.ssm_v_heads,
               hp.ssm_state, hp.ssm_conv_kernel);
        printf("  IMROPE sections [%u, %u, %u, %u], gated attention output", hp.rope_sections[0], hp.rope_sections[1],
               hp.rope_sections[2], hp.rope_sections[3]);
        if (hp.n_nextn) printf(", %u nextn (MTP) blocks not run", hp.n_nextn);
        putchar('\n');
    }
    if (hp.n_expert) {
        printf("  experts %u of %u wide, %u a token (softmax, top-k renormalised)", hp.n_expert, hp.n_ff_exp,
               hp.n_expert_used);
        if (hp.n_ff_shexp) printf(", and a shared expert %u wide (sigmoid gate)", hp.n_ff_shexp);
        putchar('\n');
    }
}

static int inspect_text(const char *path, const gguf_file *g) {
    char hs[32];
    human(gguf_file_size(g), hs, sizeof hs);
    printf("%s: GGUF v%u, %llu bytes (%s), alignment %u, data at byte %llu\n", path, gguf_version(g),
           (unsigned long long)gguf_file_size(g), hs, gguf_alignment(g), (unsigned long long)gguf_data_offset(g));

    printf("\nmetadata (%llu):\n", (unsigned long long)gguf_n_kv(g));
    size_t kw = 0;
    for (uint64_t i = 0; i < gguf_n_kv(g); i++)
        if (strlen(gguf_kv_key(g, i)) > kw) kw = strlen(gguf_kv_key(g, i));
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        char tl[48];
        type_label(gguf_kv_value(g, i), tl, sizeof tl);
        printf("  %-*s %-18s ", (int)kw, gguf_kv_key(g, i), tl);
        print_value(gguf_kv_value(g, i));
        putchar('\n');
    }

    printf("\ntensors (%llu):\n", (unsigned long long)gguf_n_tensors(g));
    if (gguf_n_tensors(g)) {
        size_t nw = 4;
        for (uint64_t i = 0; i < gguf_n_tensors(g); i++)
            if (strlen(gguf_tensor_at(g, i)->name) > nw) nw = strlen(gguf_tensor_at(g, i)->name);
        printf("  %5s  %-*s %-7s %-26s %14s %14s\n", "#", (int)nw, "name", "type", "shape", "offset", "bytes");
        for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            char sh[96];
            shape_str(t, sh, sizeof sh);
            printf("  %5llu  %-*s %-7s %-26s %14llu %14llu\n", (unsigned long long)i, (int)nw, t->name,
                   gguf_type_info_of(t->type)->name, sh, (unsigned long long)t->offset,
                   (unsigned long long)t->nbytes);
        }
    }

    type_total by_type[GGUF_T_COUNT] = {0}, all;
    totals(g, by_type, &all);
    if (all.tensors) {
        printf("\ntotals by type:\n");
        for (int t = 0; t < GGUF_T_COUNT; t++) {
            if (!by_type[t].tensors) continue;
            human(by_type[t].bytes, hs, sizeof hs);
            printf("  %-7s %5llu tensors %15llu params %15llu bytes (%s)\n", gguf_type_info_of((uint32_t)t)->name,
                   (unsigned long long)by_type[t].tensors, (unsigned long long)by_type[t].params,
                   (unsigned long long)by_type[t].bytes, hs);
        }
        human(all.bytes, hs, sizeof hs);
        printf("  %-7s %5llu tensors %15llu params %15llu bytes (%s)\n", "all", (unsigned long long)all.tensors,
               (unsigned long long)all.params, (unsigned long long)all.bytes, hs);
    }
    print_hparams(g);
    return 0;
}

/* ---- JSON ------------------------------------------------------------------------------ */

/* JSON strings must be UTF-8; token strings need not be, so invalid bytes become U+FFFD. */
static json_t *json_bytes(const char *p, uint64_t len) {
    json_t *s = json_stringn(p, len);
    if (s) return s;
    char *buf = malloc(len * 3 + 1);
    if (!buf) return json_null();
    size_t k = 0;
    for (uint64_t i = 0; i < len;) {
        unsigned char c = (unsigned char)p[i];
        int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = n > 0 && c != 0 && i + (uint64_t)n <= len;
        for (int j = 1; ok && j < n; j++) ok = ((unsigned char)p[i + j] >> 6) == 2;
        if (ok && n > 1) { /* let jansson judge overlongs and surrogates */
            json_t *one = json_stringn(p + i, (size_t)n);
            ok = one != NULL;
            json_decref(one);
        }
        if (ok) {
            memcpy(buf + k, p + i, (size_t)n);
            k += (size_t)n;
            i += (uint64_t)n;
        } else {
            memcpy(buf + k, "\xef\xbf\xbd", 3);
            k += 3;
            i++;
        }
    }
    s = json_stringn(buf, k);
    free(buf);
    return s ? s : json_null();
}

static json_t *json_value(const gguf_value *v, bool top) {
    switch (v->type) {
    case GGUF_VT_U8: case GGUF_VT_U16: case GGUF_VT_U32: case GGUF_VT_U64:
        return v->v.u > (uint64_t)INT64_MAX ? json_real((double)v->v.u) : json_integer((json_int_t)v->v.u);
    case GGUF_VT_I8: case GGUF_VT_I16: case GGUF_VT_I32: case GGUF_VT_I64: return json_integer(v->v.i);
    case GGUF_VT_F32: case GGUF_VT_F64: return isfinite(v->v.f) ? json_real(v->v.f) : json_null(); /* JSON has no NaN */
    case GGUF_VT_BOOL: return json_boolean(v->v.b);
    case GGUF_VT_STR: return json_bytes(v->v.str.ptr, v->v.str.len);
    case GGUF_VT_ARR: {
        json_t *arr = json_array();
        uint64_t shown = top && v->v.arr.n > ARRAY_HEAD * 2 ? ARRAY_HEAD * 2 : v->v.arr.n;
        for (uint64_t i = 0; i < shown; i++) {
            gguf_value e = gguf_arr_at(&v->v.arr, i);
            json_array_append_new(arr, json_value(&e, false));
        }
        return arr;
    }
    default: return json_null();
    }
}

static json_t *json_hparams(const gguf_file *g) {
    arch_hparams hp;
    kiln_err err;
    if (arch_read_hparams(g, &hp, &err)) return json_pack("{s:s}", "error", err.msg);
    static const char *const scaling[] = {"none", "linear", "yarn", "llama3"};
    return json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:b,s:s,s:f,s:i,s:b,s:f,s:b,s:b,s:b}",
                     "arch", arch_name(hp.arch), "n_layer", (json_int_t)hp.n_layer, "n_embd", (json_int_t)hp.n_embd,
                     "n_head", (json_int_t)hp.n_head, "n_head_kv", (json_int_t)hp.n_head_kv, "head_dim_k",
                     (json_int_t)hp.head_dim_k, "head_dim_v", (json_int_t)hp.head_dim_v, "n_ff",
                     (json_int_t)hp.n_ff, "n_vocab", (json_int_t)hp.n_vocab, "n_ctx_train",
                     (json_int_t)hp.n_ctx_train, "n_rot", (json_int_t)hp.n_rot, "rope_base", (double)hp.rope_base,
                     "rope_neox", hp.rope_neox, "rope_scaling", scaling[hp.rope_scaling], "rope_scale_factor",
                     (double)hp.rope_scale_factor, "rope_orig_ctx", (json_int_t)hp.rope_orig_ctx,
                     "rope_freqs_tensor", hp.has_rope_freqs, "rms_eps", (double)hp.rms_eps, "tied_output",
                     hp.tied_output, "qkv_bias", hp.qkv_bias, "qk_norm", hp.qk_norm);
}

static int inspect_json(const char *path, const gguf_file *g) {
    json_t *root = json_object();
    json_object_set_new(root, "file", json_bytes(path, strlen(path)));
    json_object_set_new(root, "version", json_integer(gguf_version(g)));
    json_object_set_new(root, "size", json_integer((json_int_t)gguf_file_size(g)));
    json_object_set_new(root, "alignment", json_integer(gguf_alignment(g)));
    json_object_set_new(root, "data_offset", json_integer((json_int_t)gguf_data_offset(g)));

    json_t *meta = json_array();
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        const gguf_value *v = gguf_kv_value(g, i);
        json_t *e = json_pack("{s:o,s:s}", "key", json_bytes(gguf_kv_key(g, i), strlen(gguf_kv_key(g, i))),
                              "type", gguf_vtype_name(v->type));
        if (v->type == GGUF_VT_ARR) {
            json_object_set_new(e, "elem_type", json_string(gguf_vtype_name(v->v.arr.type)));
            json_object_set_new(e, "count", json_integer((json_int_t)v->v.arr.n));
            json_object_set_new(e, v->v.arr.n > ARRAY_HEAD * 2 ? "head" : "value", json_value(v, true));
        } else {
            json_object_set_new(e, "value", json_value(v, true));
        }
        json_array_append_new(meta, e);
    }
    json_object_set_new(root, "metadata", meta);

    json_t *tens = json_array();
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer((json_int_t)t->ne[d]));
        json_array_append_new(tens, json_pack("{s:s,s:s,s:o,s:I,s:I}", "name", t->name, "type",
                                              gguf_type_info_of(t->type)->name, "shape", shape, "offset",
                                              (json_int_t)t->offset, "bytes", (json_int_t)t->nbytes));
    }
    json_object_set_new(root, "tensors", tens);

    type_total by_type[GGUF_T_COUNT] = {0}, all;
    totals(g, by_type, &all);
    json_t *tot = json_object();
    for (int t = 0; t < GGUF_T_COUNT; t++)
        if (by_type[t].tensors)
            json_object_set_new(tot, gguf_type_info_of((uint32_t)t)->name,
                                json_pack("{s:I,s:I,s:I}", "tensors", (json_int_t)by_type[t].tensors, "params",
                                          (json_int_t)by_type[t].params, "bytes", (json_int_t)by_type[t].bytes));
    json_object_set_new(root, "totals_by_type", tot);
    json_object_set_new(root, "total", json_pack("{s:I,s:I,s:I}", "tensors", (json_int_t)all.tensors, "params",
                                                 (json_int_t)all.params, "bytes", (json_int_t)all.bytes));
    json_object_set_new(root, "hparams", json_hparams(g));
    int rc = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    putchar('\n');
    json_decref(root);
    return rc ? cli_fail("cannot write JSON") : 0;
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = true;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error(usage, "unknown flag '%s'", argv[i]);
        else if (path) return cli_usage_error(usage, "more than one file given");
        else path = argv[i];
    }
    if (!path) return cli_usage_error(usage, "no file given");
    kiln_err err;
    gguf_file *g = gguf_open(path, &err);
    if (!g) return cli_fail("%s: %s", path, err.msg);
    int rc = json ? inspect_json(path, g) : inspect_text(path, g);
    gguf_close(g);
    return rc;
}
