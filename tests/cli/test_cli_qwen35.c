/* Qwen3.5 through the kiln command: `kiln run --device cpu` gives llama.cpp's greedy ids
 * on qwen35-tiny (the f32 golden's first case), `kiln dump` writes its kernels and a
 * Vulkan device runs it; `kiln synth` writes it from the qwen3.5 presets only (a dense
 * preset cannot be turned into one with --arch, nor a qwen3.5 preset into a dense one),
 * at the published widths, and the oracle runs what it writes. */
#include "gguf/gguf.h"
#include "model/arch.h"
#include "tests/util/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BIG (1 << 20)
static char out[BIG], err[BIG];

#define RUN(...) tu_run_kiln((const char *const[]){__VA_ARGS__, NULL}, out, sizeof out, err, sizeof err)

Test(cli, qwen35_runs_on_the_oracle_and_the_gpu, .timeout = 120) {
    const char *m = tu_data_file("models/qwen35-tiny.gguf");
    int rc = RUN("run", m, "-p", "Once upon a time", "-n", "12", "--ids", "--device", "cpu", "--oracle-mode", "f32");
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    /* llama.cpp 34af94cd, qwen35-tiny.f32dequant-kvf32-nofa.llamacpp.json, case 0 */
    cr_assert(strstr(out, "ids: 378 378 378 188 286 457 457 186 411 411 467 415\n"), "stdout: %s", out);
    rc = RUN("run", m, "-p", "The sun", "-n", "4", "--device", "cpu");
    cr_assert_eq(rc, 0, "contract mode: exit %d: %s", rc, err);

    rc = RUN("dump", m, "--spirv", tu_tmp("qwen35-dump"));
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err); /* the DeltaNet kernels among them */
    cr_assert(strstr(out, "deltanet") && strstr(out, "ssm_conv") && strstr(out, "attn_gate"), "stdout: %s", out);
    rc = RUN("synth", "--preset", "tiny", "--arch", "qwen35", "-o", tu_tmp("q35.gguf"));
    cr_assert_eq(rc, 2);
    cr_assert(strstr(err, "--arch qwen35: preset 'tiny' is a qwen3 model") && strstr(err, "their own presets"),
              "stderr: %s", err);
    rc = RUN("synth", "--preset", "qwen3.5-tiny-odd", "--arch", "qwen3", "-o", tu_tmp("q35.gguf"));
    cr_assert_eq(rc, 2);
    cr_assert(strstr(err, "is a qwen35 model"), "stderr: %s", err);
    rc = RUN("synth", "--preset", "qwen35moe-tiny-odd", "--arch", "qwen35", "-o", tu_tmp("q35.gguf"));
    cr_assert_eq(rc, 2);
    cr_assert(strstr(err, "is a qwen35moe model"), "stderr: %s", err);
    rc = RUN("synth", "--preset", "qwen3.5-tiny-odd", "--experts", "4", "-o", tu_tmp("q35.gguf"));
    cr_assert_eq(rc, 2);
    cr_assert(strstr(err, "has no experts"), "stderr: %s", err);
    /* a GPU device: lavapipe in CI (tests/plan/test_plan_qwen35.c checks its numbers) */
    rc = RUN("run", m, "-p", "hi", "-n", "2", "--ids", "--device", "vulkan:0");
    cr_assert(rc == 0 ? strstr(out, "ids: ") != NULL : strstr(err, "vulkan") != NULL, "exit %d: %s %s", rc, out, err);
}

Test(cli, synth_qwen35_tiny_odd_runs_and_inspects, .timeout = 60) {
    cr_assert_eq(RUN("synth", "--help"), 0);
    cr_assert(strstr(out, "qwen3.5-0.8b") && strstr(out, "qwen3.5-4b") && strstr(out, "qwen3.5-tiny-odd"), "%s", out);
    const char *p = tu_tmp("odd.gguf");
    int rc = RUN("synth", "--preset", "qwen3.5-tiny-odd", "--seed", "3", "-o", p);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(out, "qwen35, 6 layers"), "%s", out);
    cr_assert_eq(RUN("inspect", p), 0, "%s", err);
    cr_assert(strstr(out, "hyperparameters (qwen35)"), "%s", out);
    cr_assert(strstr(out, "Gated DeltaNet in 4 of 6 layers (full attention in 2 5)"), "%s", out);
    rc = RUN("run", p, "-p", "Once upon a time", "-n", "6", "--ids", "--device", "cpu");
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(out, "ids: "), "%s", out);
    char first[256];
    snprintf(first, sizeof first, "%s", strstr(out, "ids: "));
    rc = RUN("run", p, "-p", "Once upon a time", "-n", "6", "--ids", "--device", "cpu");
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(out, first), "a second run gave %s, the first %s", out, first);
    /* overrides: --untied writes output.weight, --head-dim moves the rope to a quarter of it */
    rc = RUN("synth", "--preset", "qwen3.5-tiny-odd", "--untied", "--head-dim", "64", "--layers", "3", "--dtype", "f16",
             "-o", p);
    cr_assert_eq(rc, 0, "%s", err);
    kiln_err e;
    gguf_file *g = gguf_open(p, &e);
    cr_assert_not_null(g, "%s", e.msg);
    arch_hparams hp;
    cr_assert_eq(arch_read_hparams(g, &hp, &e), 0, "%s", e.msg);
    cr_assert(!hp.tied_output && hp.head_dim_k == 64 && hp.n_rot == 16 && hp.n_layer == 3 && hp.n_recurrent == 2);
    cr_assert(hp.rope_sections[0] == 3 && hp.rope_sections[1] == 3 && hp.rope_sections[2] == 2);
    const gguf_tensor *t = gguf_find_tensor(g, "output.weight");
    cr_assert(t && t->type == GGUF_T_F16);
    t = gguf_find_tensor(g, "blk.2.attn_q.weight");
    cr_assert(t && t->ne[0] == 200 && t->ne[1] == 2 * 5 * 64);
    gguf_close(g);
    rc = RUN("synth", "--preset", "qwen3.5-tiny-odd", "--head-dim", "6", "-o", p);
    cr_assert_eq(rc, 2);
    cr_assert(strstr(err, "--head-dim must be at least 8"), "%s", err);
}

/* The published widths, four layers (three DeltaNet, one attention) and a small vocab so
 * CI stays fast: the file loads and has the real layer shapes. */
Test(cli, synth_qwen35_presets_at_real_widths, .timeout = 600) {
    const struct { const char *name; uint64_t d, ff, q, kv, ks, vs; } want[] = {
        {"qwen3.5-0.8b", 1024, 3584, 8 * 256, 2 * 256, 16 * 128, 16 * 128},
        {"qwen3.5-4b", 2560, 9216, 16 * 256, 4 * 256, 16 * 128, 32 * 128}};
    for (size_t i = 0; i < 2; i++) {
        const char *p = tu_tmp("q35-real.gguf");
        int rc = RUN("synth", "--preset", want[i].name, "--layers", "4", "--vocab", "1000", "-o", p);
        cr_assert_eq(rc, 0, "%s: %s", want[i].name, err);
        kiln_err e;
        gguf_file *g = gguf_open(p, &e);
        cr_assert_not_null(g, "%s", e.msg);
        arch_hparams hp;
        cr_assert_eq(arch_read_hparams(g, &hp, &e), 0, "%s", e.msg);
        cr_assert(hp.n_recurrent == 3 && !hp.recurrent[3] && hp.head_dim_k == 256 && hp.n_rot == 64, "%s",
                  want[i].name);
        const struct { const char *n; uint64_t a, b; uint32_t type; } ts[] = {
            {"blk.0.attn_qkv.weight", want[i].d, 2 * want[i].ks + want[i].vs, GGUF_T_BF16},
            {"blk.1.attn_gate.weight", want[i].d, want[i].vs, GGUF_T_BF16},
            {"blk.2.ssm_conv1d.weight", 4, 2 * want[i].ks + want[i].vs, GGUF_T_F32},
            {"blk.0.ssm_a", want[i].vs / 128, 1, GGUF_T_F32},
            {"blk.0.ssm_out.weight", want[i].vs, want[i].d, GGUF_T_BF16},
            {"blk.3.attn_q.weight", want[i].d, 2 * want[i].q, GGUF_T_BF16},
            {"blk.3.attn_k.weight", want[i].d, want[i].kv, GGUF_T_BF16},
            {"blk.3.attn_output.weight", want[i].q, want[i].d, GGUF_T_BF16},
            {"blk.3.ffn_down.weight", want[i].ff, want[i].d, GGUF_T_BF16},
        };
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
            const gguf_tensor *t = gguf_find_tensor(g, ts[k].n);
            cr_assert_not_null(t, "%s: %s", want[i].name, ts[k].n);
            cr_assert(t->ne[0] == ts[k].a && t->ne[1] == ts[k].b && t->type == ts[k].type, "%s: %s", want[i].name,
                      ts[k].n);
        }
        cr_assert_null(gguf_find_tensor(g, "output.weight"));
        gguf_close(g);
        cr_assert_eq(RUN("inspect", p), 0, "%s", err);
        unlink(p);
    }
}

/* qwen35moe (experts and a shared expert in Qwen3.5's layers): synth, inspect, run on the
 * oracle twice (the same tokens) and on the GPU path (lavapipe in CI; its numbers:
 * tests/plan/test_plan_moe.c) */
Test(cli, qwen35moe_synth_inspect_run, .timeout = 120) {
    cr_assert_eq(RUN("synth", "--help"), 0);
    cr_assert(strstr(out, "qwen3.5-35b-a3b") && strstr(out, "qwen35moe-tiny-odd"), "%s", out);
    const char *p = tu_tmp("q35moe-cli.gguf");
    int rc = RUN("synth", "--preset", "qwen35moe-tiny-odd", "-o", p);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(out, "qwen35moe, 4 layers"), "%s", out);
    cr_assert_eq(RUN("inspect", p), 0, "%s", err);
    cr_assert(strstr(out, "experts 6 of 72 wide, 2 a token") && strstr(out, "a shared expert 72 wide"), "%s", out);
    rc = RUN("run", p, "-p", "Once upon a time", "-n", "6", "--ids", "--device", "cpu");
    cr_assert_eq(rc, 0, "%s", err);
    char first[256];
    cr_assert(strstr(out, "ids: "), "%s", out);
    snprintf(first, sizeof first, "%s", strstr(out, "ids: "));
    cr_assert_eq(RUN("run", p, "-p", "Once upon a time", "-n", "6", "--ids", "--device", "cpu"), 0, "%s", err);
    cr_assert(strstr(out, first), "a second run gave %s, the first %s", out, first);
    rc = RUN("run", p, "-p", "Once upon a time", "-n", "6", "--ids", "--device", "vulkan:0");
    cr_assert(rc == 0 ? strstr(out, "ids: ") != NULL : strstr(err, "vulkan") != NULL, "exit %d: %s %s", rc, out, err);
}
