/* kiln dump --spirv / --ptx: every kernel of a model's plan written (module, disassembly,
 * IR; or LLVM IR and PTX), each SPIR-V module valid, for the spec-minimum caps and for the
 * Vulkan device when there is one, the PTX assembled by ptxas where it exists; bad flags
 * refused with the usage status. */
#include "backend-spirv/spv_emit.h"
#include "tests/util/testutil.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static size_t file_size(const char *dir, const char *role, const char *ext) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s.%s", dir, role, ext);
    struct stat st;
    return stat(p, &st) ? 0 : (size_t)st.st_size;
}

/* The module on disk passes SPIRV-Tools (or, for one Debian's is too old to read, the
 * newer spirv-val of $KILN_SPIRV_VAL when set). */
static void module_valid(const char *dir, const char *role) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s.spv", dir, role);
    FILE *f = fopen(p, "rb");
    cr_assert_not_null(f, "%s", p);
    spv_module m = {malloc(1 << 22), 0};
    m.n = fread(m.words, 4, 1 << 20, f);
    fclose(f);
    cr_assert_gt(m.n, 5, "%s", p);
    cr_assert_eq(m.words[0], 0x07230203u, "%s: not a SPIR-V module", p);
    tu_spv_validate(&m, p);
    free(m.words);
}

static void dump_and_check(const char *model, const char *dir, const char *const *extra) {
    const char *args[16] = {"dump", model, "--spirv", dir};
    int n = 4;
    for (int i = 0; extra && extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;
    static char out[1 << 16], e[1 << 14];
    int rc = tu_run_kiln(args, out, sizeof out, e, sizeof e);
    cr_assert_eq(rc, 0, "kiln dump: %s %s", out, e);
    static const char *const roles[] = {"embed", "rmsnorm", "decode_qkv", "qk_prep", "attn_decode", "decode_o",
                                        "decode_gate_up_swiglu", "decode_down", "logits", "prefill_qkv",
                                        "attn_prefill", "prefill_o", "prefill_gate_up", "prefill_down",
                                        "prefill_swiglu", "take_last", "stage_inputs", "argmax"};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        cr_assert_gt(file_size(dir, roles[i], "spv"), 20, "%s: no %s.spv", dir, roles[i]);
        cr_assert_gt(file_size(dir, roles[i], "spvasm"), 20, "%s: no %s.spvasm", dir, roles[i]);
        cr_assert_gt(file_size(dir, roles[i], "ir"), 20, "%s: no %s.ir", dir, roles[i]);
        cr_assert_gt(file_size(dir, roles[i], "lowered.ir"), 20, "%s: no %s.lowered.ir", dir, roles[i]);
        module_valid(dir, roles[i]);
    }
    /* no attn_merge: on Vulkan the decode attention merges its runs in its own launch */
    cr_assert(strstr(out, "18 kernels written"), "%s", out);
    cr_assert_eq(file_size(dir, "attn_merge", "spv"), 0, "%s: an attn_merge.spv", dir);
}

Test(dump, every_kernel_of_the_plan_validates) {
    const char *model = tu_tmp("dump-tiny.gguf");
    char e[4096];
    cr_assert_eq(tu_run_kiln((const char *const[]){"synth", "--preset", "tiny", "--arch", "qwen2", "-o", model, NULL},
                             NULL, 0, e, sizeof e),
                 0, "%s", e);
    dump_and_check(model, tu_tmp("dump-min"), NULL);
    dump_and_check(model, tu_tmp("dump-min-f16"),
                   (const char *const[]){"--dtype", "f16", "--caps", "workgroup=64", NULL});
    /* the device's own variants, where there is a Vulkan device */
    char out[4096];
    if (tu_run_kiln((const char *const[]){"probe", NULL}, out, sizeof out, e, sizeof e) == 0 && strstr(out, "vulkan:0"))
        dump_and_check(model, tu_tmp("dump-dev"), (const char *const[]){"--device", "vulkan:0", NULL});
    /* PTX for sm_80 and sm_90: written for every kernel, and each assembles where ptxas is */
    const char *ptxas = access("/usr/local/cuda/bin/ptxas", X_OK) == 0 ? "/usr/local/cuda/bin/ptxas" : NULL;
    for (int sm = 0; sm < 2; sm++) {
        /* sm_90's products are warpgroup ones: PTX for the architecture-specific sm_90a */
        const char *arch = sm ? "sm_90" : "sm_80", *as = sm ? "sm_90a" : "sm_80", *dir = tu_tmp(sm ? "dump-ptx90" : "dump-ptx80");
        static char out[1 << 16];
        cr_assert_eq(tu_run_kiln((const char *const[]){"dump", model, "--ptx", dir, "--sm", arch, NULL}, out,
                                 sizeof out, e, sizeof e),
                     0, "%s", e);
        /* CUDA keeps the merge's launch (plan_attn_merged_on) */
        cr_assert(strstr(out, "19 kernels written"), "%s", out);
        cr_assert_gt(file_size(dir, "attn_merge", "ptx"), 100, "%s: no attn_merge.ptx", dir);
        static const char *const some[] = {"decode_qkv", "attn_prefill", "prefill_qkv", "qk_prep", "logits"};
        for (size_t i = 0; i < sizeof some / sizeof some[0]; i++) {
            cr_assert_gt(file_size(dir, some[i], "ptx"), 100, "%s/%s.ptx", dir, some[i]);
            cr_assert_gt(file_size(dir, some[i], "ll"), 100, "%s/%s.ll", dir, some[i]);
            if (!ptxas) continue;
            char cmd[2048];
            snprintf(cmd, sizeof cmd, "'%s' -arch=%s '%s/%s.ptx' -o /dev/null 2>&1", ptxas, as, dir, some[i]);
            cr_assert_eq(system(cmd), 0, "ptxas refused %s/%s.ptx", dir, some[i]);
        }
    }
    /* refusals: usage errors (2), and a file that is no model (1) */
    const char *bad[][10] = {{"dump", model, NULL},
                            {"dump", model, "--ptx", "/tmp/x", "--device", "vulkan:0", NULL},
                            {"dump", model, "--ptx", "/tmp/x", "--device", "cuda:0", "--sm", "sm_90", NULL},
                            {"dump", "--spirv", "/tmp", NULL},
                            {"dump", model, "--spirv", "/tmp/x", "--device", "cuda:0", NULL},
                            {"dump", model, "--spirv", "/tmp/x", "--caps", "no-such-cap", NULL},
                            {"dump", model, "--spirv", "/tmp/x", "--dtype", "f32", NULL},
                            {"dump", model, "--ptx", "/tmp/x", "--sm", "sm_9", NULL},
                            {"dump", model, "--spirv", "/tmp/x", "--sm", "sm_90", NULL},
                            {"dump", model, "--spirv", "/tmp/x", "--ptx", "/tmp/y", NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(tu_run_kiln(bad[i], NULL, 0, e, sizeof e), 2, "case %zu: %s", i, e);
    cr_assert_eq(tu_run_kiln((const char *const[]){"dump", "/nonexistent.gguf", "--spirv", tu_tmp("dump-x"), NULL},
                             NULL, 0, e, sizeof e),
                 1, "%s", e);
    /* a CUDA device that is not there: a message and 1, not a crash */
    cr_assert_eq(
        tu_run_kiln((const char *const[]){"dump", model, "--ptx", tu_tmp("dump-c"), "--device", "cuda:9", NULL}, NULL,
                    0, e, sizeof e),
        1, "%s", e);
    cr_assert(strstr(e, "cuda"), "%s", e);
}

/* A model whose prefill block has a short block (qwen3-0.6b's shapes, one layer): the
 * short block's own kernels are dumped too, and their PTX assembles for sm_90a. */
/* The short and mid blocks' own kernels (a 2048-token default block: both apply) beside
 * the full block's, each assembled for sm_90a. */
Test(dump, the_smaller_blocks_kernels) {
    const char *model = tu_tmp("dump-q06.gguf"), *dir = tu_tmp("dump-short");
    char e[4096];
    static char out[1 << 16];
    cr_assert_eq(tu_run_kiln((const char *const[]){"synth", "--preset", "qwen3-0.6b", "--layers", "1", "--vocab",
                                                   "512", "-o", model, NULL},
                             NULL, 0, e, sizeof e),
                 0, "%s", e);
    cr_assert_eq(tu_run_kiln((const char *const[]){"dump", model, "--ptx", dir, "--sm", "sm_90", NULL}, out, sizeof out,
                             e, sizeof e),
                 0, "%s", e);
    cr_assert(strstr(out, "35 kernels written"), "%s", out); /* 19 roles, 8 of them again for each smaller block */
    const char *ptxas = access("/usr/local/cuda/bin/ptxas", X_OK) == 0 ? "/usr/local/cuda/bin/ptxas" : NULL;
    static const char *const roles[] = {"short_prefill_qkv", "short_prefill_o", "short_prefill_gate_up",
                                        "short_prefill_down", "mid_prefill_qkv", "mid_prefill_gate_up",
                                        "mid_attn_prefill", "prefill_gate_up", "prefill_swiglu"};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        cr_assert_gt(file_size(dir, roles[i], "ptx"), 100, "%s/%s.ptx", dir, roles[i]);
        if (!ptxas) continue;
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "'%s' -arch=sm_90a '%s/%s.ptx' -o /dev/null 2>&1", ptxas, dir, roles[i]);
        cr_assert_eq(system(cmd), 0, "ptxas refused %s/%s.ptx", dir, roles[i]);
    }
}
