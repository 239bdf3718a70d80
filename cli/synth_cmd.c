/* kiln synth: random-weight models with llama.cpp's names, shapes and keys. */
#include "base/error.h"
#include "cli/cli.h"
#include "model/arch.h"
#include "modelgen/quant_mix.h"
#include "modelgen/synth.h"
#include "modelgen/tok_import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kiln synth --preset NAME [flags] -o FILE.gguf\n"
    "  --preset NAME            tiny | qwen3-0.6b | qwen3-4b | qwen3-8b | llama-3.2-1b\n"
    "                           | qwen3.5-0.8b | qwen3.5-4b | qwen3.5-tiny-odd  (Qwen3.5: arch qwen35,\n"
    "                           Gated DeltaNet layers with a gated full-attention layer every 4th, 3rd for\n"
    "                           tiny-odd; --heads/--kv-heads/--head-dim size the attention layers)\n"
    "                           | qwen3-30b-a3b | qwen3moe-tiny-odd  (arch qwen3moe: every layer's\n"
    "                           feed-forward a mixture of experts)\n"
    "                           | qwen3.5-35b-a3b | qwen35moe-tiny-odd  (arch qwen35moe: Qwen3.5's layers,\n"
    "                           experts and a shared expert for the feed-forward)\n"
    "  --arch A                 llama | qwen2 | qwen3 (dense presets); the others come with their presets\n"
    "  --hidden N --layers N --heads N --kv-heads N --head-dim N --ffn N --vocab N --ctx N\n"
    "  --experts N --experts-used N --expert-ffn N   (presets with experts; a shared expert takes\n"
    "                           --expert-ffn too)\n"
    "  --tied | --untied        output shares token_embd (no output.weight) or not\n"
    "  --dtype bf16|f16         type of the matrices (1-D tensors stay F32), default bf16\n"
    "  --quant MIX              quantize the matrices as llama-quantize MIX does the --dtype model (same\n"
    "                           per-tensor types, bytes and general.file_type): Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0\n"
    "                           | Q2_K | Q3_K_M | Q4_K_M | Q5_K_M | Q6_K (Q3_K, Q4_K, Q5_K: the _M mixes;\n"
    "                           any case); Q4_0..Q8_0 need rows of 32s, the K mixes fall back per tensor\n"
    "  --seed N                 default 42; the same seed gives the same file\n"
    "  --rope-base F --rms-eps F --name S --threads N\n"
    "  --tokenizer tokenizer.json [--tokenizer-config tokenizer_config.json] [--pre NAME]\n"
    "                           import a Hugging Face tokenizer (vocab size = the tokenizer's)\n"
    "  --vocab-from FILE.gguf   copy the tokenizer of an existing GGUF\n"
    "  (no tokenizer: a byte-level BPE vocab padded to the vocab size)\n";

typedef struct u32_flag { const char *flag; uint32_t *dst; uint64_t max; bool set; } u32_flag;

int cmd_synth(int argc, char **argv) {
    const char *preset = NULL, *out = NULL, *tok_json = NULL, *tok_cfg = NULL, *pre = NULL, *vocab_from = NULL;
    const char *arch = NULL, *dtype = NULL, *name = NULL, *quant = NULL;
    int tied = -1;
    uint64_t seed = 42, threads = 0;
    bool seed_set = false;
    float rope_base = 0, rms_eps = 0;
    synth_config c;
    uint32_t v[11] = {0};
    u32_flag nums[] = {{"--hidden", &v[0], 1u << 20, 0}, {"--layers", &v[1], 4096, 0},
                       {"--heads", &v[2], 4096, 0},      {"--kv-heads", &v[3], 4096, 0},
                       {"--head-dim", &v[4], 4096, 0},   {"--ffn", &v[5], 1u << 22, 0},
                       {"--vocab", &v[6], 1u << 24, 0},  {"--ctx", &v[7], 1u << 24, 0},
                       {"--experts", &v[8], ARCH_MAX_EXPERTS, 0}, {"--experts-used", &v[9], ARCH_MAX_EXPERTS, 0},
                       {"--expert-ffn", &v[10], 1u << 22, 0}};
    const size_t n_nums = sizeof nums / sizeof nums[0];

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (strcmp(a, "--tied") == 0 || strcmp(a, "--untied") == 0) {
            tied = strcmp(a, "--tied") == 0;
            continue;
        }
        const char **str_dst = strcmp(a, "--preset") == 0             ? &preset
                               : strcmp(a, "-o") == 0                 ? &out
                               : strcmp(a, "--tokenizer") == 0        ? &tok_json
                               : strcmp(a, "--tokenizer-config") == 0 ? &tok_cfg
                               : strcmp(a, "--pre") == 0              ? &pre
                               : strcmp(a, "--vocab-from") == 0       ? &vocab_from
                               : strcmp(a, "--arch") == 0             ? &arch
                               : strcmp(a, "--dtype") == 0            ? &dtype
                               : strcmp(a, "--quant") == 0            ? &quant
                               : strcmp(a, "--name") == 0             ? &name
                                                                      : NULL;
        u32_flag *num = NULL;
        for (size_t k = 0; k < n_nums; k++)
            if (strcmp(a, nums[k].flag) == 0) num = &nums[k];
        bool is_other = !strcmp(a, "--seed") || !strcmp(a, "--threads") || !strcmp(a, "--rope-base") ||
                        !strcmp(a, "--rms-eps");
        if (!str_dst && !num && !is_other) return cli_usage_error(usage, "unknown flag '%s'", a);
        const char *val = cli_flag_value(argc, argv, &i);
        if (!val) return cli_usage_error(usage, "%s needs a value", a);
        if (str_dst) {
            if (!*val) return cli_usage_error(usage, "%s needs a non-empty value", a);
            *str_dst = val;
        } else if (num) {
            uint64_t x;
            if (!cli_parse_u64(val, 1, num->max, &x))
                return cli_usage_error(usage, "%s: '%s' is not an integer in 1..%llu", a, val,
                                       (unsigned long long)num->max);
            *num->dst = (uint32_t)x;
            num->set = true;
        } else if (!strcmp(a, "--seed")) {
            if (!cli_parse_u64(val, 0, UINT64_MAX, &seed))
                return cli_usage_error(usage, "--seed: '%s' is not an integer", val);
            seed_set = true;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_parse_u64(val, 1, 256, &threads))
                return cli_usage_error(usage, "--threads: '%s' is not in 1..256", val);
        } else if (!strcmp(a, "--rope-base")) {
            if (!cli_parse_f32(val, 1.0f, 1e12f, &rope_base))
                return cli_usage_error(usage, "--rope-base: '%s' is not a number >= 1", val);
        } else if (!cli_parse_f32(val, 1e-12f, 1.0f, &rms_eps)) {
            return cli_usage_error(usage, "--rms-eps: '%s' is not a number in (0, 1]", val);
        }
    }
    if (!preset) return cli_usage_error(usage, "--preset is required");
    if (!out) return cli_usage_error(usage, "-o FILE.gguf is required");
    if (synth_preset(preset, &c)) return cli_usage_error(usage, "unknown preset '%s'", preset);
    if (tok_cfg && !tok_json) return cli_usage_error(usage, "--tokenizer-config needs --tokenizer");
    if (pre && !tok_json) return cli_usage_error(usage, "--pre needs --tokenizer");
    if (tok_json && vocab_from) return cli_usage_error(usage, "--tokenizer and --vocab-from exclude each other");
    if (arch) {
        int id = arch_from_name(arch);
        if (id < 0)
            return cli_usage_error(usage,
                                   "--arch: unknown architecture '%s' (llama, qwen2, qwen3, qwen35, qwen3moe, qwen35moe)",
                                   arch);
        /* qwen35's layers and keys, and the experts, come with their presets: a dense preset
         * cannot become one, nor back */
        bool moe = id == ARCH_QWEN3MOE || id == ARCH_QWEN35MOE, has = c.n_expert > 0;
        if (id != (int)c.arch && (arch_is_qwen35((arch_id)id) || arch_is_qwen35(c.arch) || moe || has))
            return cli_usage_error(usage,
                                   "--arch %s: preset '%s' is a %s model (qwen35, qwen3moe and qwen35moe come with "
                                   "their own presets)",
                                   arch, preset, arch_name(c.arch));
        c.arch = (arch_id)id;
    }
    if (dtype) {
        if (!strcmp(dtype, "bf16")) c.dtype = GGUF_T_BF16;
        else if (!strcmp(dtype, "f16")) c.dtype = GGUF_T_F16;
        else return cli_usage_error(usage, "--dtype: '%s' is not bf16 or f16", dtype);
    }
    kiln_err qerr = {0};
    if (quant && quant_mix_parse(quant, &c.quant, &qerr)) return cli_usage_error(usage, "--quant: %s", qerr.msg);
    uint32_t *fields[] = {&c.n_embd,  &c.n_layer, &c.n_head,   &c.n_head_kv,     &c.head_dim, &c.n_ff,
                          &c.n_vocab, &c.n_ctx,   &c.n_expert, &c.n_expert_used, &c.n_ff_exp};
    for (size_t k = 8; k < n_nums; k++)
        if (nums[k].set && !c.n_expert)
            return cli_usage_error(usage, "%s: preset '%s' has no experts (a qwen3moe or qwen35moe preset has)",
                                   nums[k].flag, preset);
    for (size_t k = 0; k < n_nums; k++)
        if (nums[k].set) *fields[k] = *nums[k].dst;
    if (nums[10].set && c.n_ff_shexp) c.n_ff_shexp = c.n_ff_exp; /* the GPU path takes a shared expert as wide */
    /* A new width or head count without --head-dim means head_dim = hidden / heads
     * (qwen35's head size is its own: 256 on the published sizes, whatever the width). */
    if (arch_is_qwen35(c.arch)) synth_qwen35_rope(&c);
    else if ((nums[0].set || nums[2].set) && !nums[4].set) {
        if (c.n_embd % c.n_head)
            return cli_usage_error(usage, "--hidden %u is not a multiple of --heads %u: give --head-dim", c.n_embd,
                                   c.n_head);
        c.head_dim = c.n_embd / c.n_head;
    }
    if (tied >= 0) c.tied = tied;
    if (seed_set) c.seed = seed;
    c.threads = (int)threads;
    if (rope_base > 0) c.rope_base = rope_base;
    if (rms_eps > 0) c.rms_eps = rms_eps;
    if (name) c.name = name;
    if (c.arch != ARCH_LLAMA) c.llama3_rope = false; /* Llama 3's rope_freqs belongs to llama only */

    kiln_err err = {0};
    if (synth_check(&c, &err)) return cli_usage_error(usage, "%s", err.msg);

    /* The tokenizer decides the vocab size unless --vocab says otherwise. */
    tok_vocab vocab;
    tok_vocab_init(&vocab);
    gguf_file *from = NULL;
    kiln_err msg = {0};
    int rc = EXIT_BADFILE;
    if (tok_json) {
        if (tok_import_hf(tok_json, tok_cfg, pre, &vocab, &msg)) {
            rc = cli_fail("%s", msg.msg);
            goto done;
        }
        if (!nums[6].set) c.n_vocab = (uint32_t)vocab.n_tokens;
        if (tok_vocab_pad(&vocab, c.n_vocab, &msg)) {
            rc = cli_usage_error(usage, "--vocab: %s", msg.msg);
            goto done;
        }
    } else if (vocab_from) {
        from = gguf_open(vocab_from, &err);
        if (!from) {
            rc = cli_fail("%s: %s", vocab_from, err.msg);
            goto done;
        }
        const gguf_array *toks;
        if (gguf_get_arr(from, "tokenizer.ggml.tokens", GGUF_VT_STR, &toks, &err)) {
            rc = cli_fail("%s: %s", vocab_from, err.msg);
            goto done;
        }
        if (!nums[6].set) c.n_vocab = (uint32_t)toks->n;
    } else if (tok_vocab_bytelevel(c.n_vocab, &vocab, &msg)) {
        rc = cli_usage_error(usage, "%s", msg.msg);
        goto done;
    }

    synth_stats st;
    if (synth_write(&c, tok_json || !vocab_from ? &vocab : NULL, from, out, &st, &err)) {
        rc = cli_fail("%s: %s", out, err.msg);
        goto done;
    }
    printf("wrote %s: %s%s%s, %u layers, %llu params, %.3f GB of weights in %.2f s (%.0f MB/s)\n", out,
           arch_name(c.arch), c.quant.ftype ? " " : "", c.quant.ftype ? c.quant.name : "", c.n_layer,
           (unsigned long long)st.params, st.bytes / 1e9, st.seconds,
           st.seconds > 0 ? st.bytes / 1e6 / st.seconds : 0.0);
    rc = 0;
done:
    tok_vocab_free(&vocab);
    gguf_close(from);
    return rc;
}
