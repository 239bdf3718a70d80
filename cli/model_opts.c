#include "cli/model_opts.h"

#include "base/error.h"
#include "cli/cli.h"
#include "devices/devices.h"
#include "model/engine_batch.h"
#include "plan/plan.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void model_opts_init(model_opts *o) {
    memset(o, 0, sizeof *o);
    o->device = "cpu";
    o->orc.mode = ORC_CONTRACT;
    samp_params_default(&o->samp);
}

int model_opts_parse(model_opts *o, int argc, char **argv, int *i, const char *usage) {
    const char *a = argv[*i];
    static const char *const flags[] = {"--device",
                                        "--caps",
                                        "--oracle-mode",
                                        "--dtype",
                                        "--ctx",
                                        "--threads",
                                        "--temp",
                                        "--top-k",
                                        "--top-p",
                                        "--min-p",
                                        "--seed",
                                        "--repeat-penalty",
                                        "--repeat-last-n",
                                        "--frequency-penalty",
                                        "--presence-penalty",
                                        "--block",
                                        "--mem-limit"};
    size_t k = 0;
    while (k < sizeof flags / sizeof flags[0] && strcmp(a, flags[k])) k++;
    if (k == sizeof flags / sizeof flags[0]) return 0;
    const char *v = cli_flag_value(argc, argv, i);
    if (!v) return cli_usage_error(usage, "%s needs a value", a), -1;
    uint64_t u;
    float f;
    bool ok = true;
    switch (k) {
    case 0: o->device = v; break;
    case 1: o->caps = v; break;
    case 2:
        if (!strcmp(v, "contract"))
            o->orc.mode = ORC_CONTRACT;
        else if (!strcmp(v, "f32"))
            o->orc.mode = ORC_F32;
        else
            ok = false;
        break;
    case 3:
        if (!strcmp(v, "bf16"))
            o->orc.dtype = GGUF_T_BF16;
        else if (!strcmp(v, "f16"))
            o->orc.dtype = GGUF_T_F16;
        else
            ok = false;
        break;
    case 4: ok = cli_parse_u64(v, 2, 1u << 24, &u), o->orc.n_ctx = (uint32_t)u; break;
    case 5: ok = cli_parse_u64(v, 1, 256, &u), o->orc.threads = (int)u; break;
    case 6: ok = cli_parse_f32(v, -1e9f, 1e9f, &o->samp.temperature); break;
    case 7: ok = cli_parse_u64(v, 0, 1u << 30, &u), o->samp.top_k = (int32_t)u; break;
    case 8: ok = cli_parse_f32(v, -1e9f, 1e9f, &o->samp.top_p); break;
    case 9: ok = cli_parse_f32(v, -1e9f, 1e9f, &o->samp.min_p); break;
    case 10: ok = cli_parse_u64(v, 0, UINT64_MAX, &o->samp.seed); break;
    case 11: ok = cli_parse_f32(v, -1e9f, 1e9f, &o->samp.repeat_penalty); break;
    case 12:
        if (!strcmp(v, "-1"))
            o->samp.penalty_last_n = -1;
        else
            ok = cli_parse_u64(v, 0, 1u << 30, &u), o->samp.penalty_last_n = (int32_t)u;
        break;
    case 13: ok = cli_parse_f32(v, -1e9f, 1e9f, &f), o->samp.frequency_penalty = f; break;
    case 14: ok = cli_parse_f32(v, -1e9f, 1e9f, &f), o->samp.presence_penalty = f; break;
    case 15: ok = cli_parse_u64(v, 1, 1u << 16, &u), o->n_block = (uint32_t)u; break;
    case 16: ok = cli_parse_bytes(v, &o->mem_limit); break;
    }
    if (!ok) return cli_usage_error(usage, "%s: bad value '%s'", a, v), -1;
    if (k >= 6 && k <= 14) o->sampling_set = true;
    if (k == 6) o->temp_set = true;
    return 1;
}

int model_opts_check(model_opts *o, const char *usage) {
    kiln_err msg = {0};
    if (o->sampling_set && !o->temp_set) o->samp.temperature = 0.8f;
    if (samp_params_check(&o->samp, &msg)) return cli_usage_error(usage, "%s", msg.msg);
    dev_label l;
    if (!dev_parse(o->device, true, &l))
        return cli_usage_error(usage, "--device %s: expected cpu, cuda:N, vulkan:N or auto", o->device);
    if (o->caps && rt_caps_override_check(o->caps, &msg)) return cli_usage_error(usage, "--caps: %s", msg.msg);
    return 0;
}

/* Engines e[1..n) like e[0]: plans borrowing its weights, or more oracles. */
static int open_more(model_opts *o, const model *m, uint32_t n, engine **e, kiln_err *err) {
    for (uint32_t i = 1; i < n; i++) {
        kiln_err why = {0};
        e[i] = o->dev ? plan_create_sibling(e[0], &why) : orc_create(m, &o->orc, &why);
        if (!e[i]) return kiln_err_wrap(err, &why, "slot %u of %u", i + 1, n);
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (o->dev && !o->dev->host_cores && cpus > 1) o->batch.spin_busy = (uint32_t)(cpus / 2); /* a GPU's steps */
    return n > 1 ? engine_batch_group(e, n, &o->batch, err) : 0;
}

int model_opts_open_n(model_opts *o, const char *path, uint32_t n, model **m, tokenizer **t, engine **e) {
    kiln_err err = {0};
    *t = NULL;
    for (uint32_t i = 0; i < n; i++) e[i] = NULL;
    *m = model_load(path, &err);
    if (!*m) return cli_fail("%s", err.msg);
    if ((*m)->n_converted) /* once, where the model is opened */
        fprintf(stderr, "kiln: %u matrices of block-quantized types converted to 16 bits at load (no quantized kernel "
                        "for their products: another type in the same product, or the architecture's)\n",
                (*m)->n_converted);
    *t = tok_load((*m)->file, &err);
    if (!*t) return cli_fail("%s: %s", path, err.msg);
    if (tok_n_vocab(*t) != (*m)->hp.n_vocab)
        return cli_fail("%s: the tokenizer has %u tokens but the model's vocab is %u", path, tok_n_vocab(*t),
                        (*m)->hp.n_vocab);
    dev_label l = {DEV_CPU, 0};
    dev_parse(o->device, true, &l); /* checked by model_opts_check */
    l = dev_resolve(l);
    if (l.kind != DEV_CPU) {
        if (!(o->dev = dev_open(l, o->caps, &err))) return cli_fail("%s", err.msg);
        rt_caps_limit_memory(&o->dev->caps, o->mem_limit);
        e[0] = plan_create_slots(*m, o->dev, o->orc.dtype, o->orc.n_ctx, o->n_block, o->slots > n ? o->slots : n, &err);
    } else {
        e[0] = orc_create(*m, &o->orc, &err);
    }
    if (!e[0]) return cli_fail("%s: %s", path, err.msg);
    if (open_more(o, *m, n, e, &err)) {
        for (uint32_t i = n; i-- > 0;) engine_destroy(e[i]), e[i] = NULL; /* siblings before the first */
        return cli_fail("%s: %s", path, err.msg);
    }
    return 0;
}

int model_opts_open(model_opts *o, const char *path, model **m, tokenizer **t, engine **e) {
    return model_opts_open_n(o, path, 1, m, t, e);
}

void model_opts_close_n(model_opts *o, model *m, tokenizer *t, engine **e, uint32_t n) {
    for (uint32_t i = n; i-- > 1;) engine_destroy(e[i]); /* plans that borrow the first's weights go first */
    model_opts_close(o, m, t, n ? e[0] : NULL);
}

void model_opts_close(model_opts *o, model *m, tokenizer *t, engine *e) {
    engine_destroy(e);
    if (o->dev) o->dev->ops->destroy(o->dev);
    o->dev = NULL;
    tok_free(t);
    model_free(m);
}
