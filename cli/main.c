/* kiln: portable LLM inference with kernels written at startup. */
#include "base/progress.h"
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

#ifndef KILN_COMMIT
#define KILN_COMMIT "unknown"
#endif

static const char usage[] =
    "usage: kiln COMMAND [ARGS]\n"
    "commands:\n"
    "  inspect FILE.gguf [--json]        metadata, tensor table, totals, hyperparameters\n"
    "  synth --preset NAME -o FILE.gguf  write a model with random weights (kiln synth --help)\n"
    "  run MODEL -p TEXT [-n N]          generate text (kiln run --help)\n"
    "  chat MODEL                        interactive chat through the model's template\n"
    "  tokenize MODEL -p TEXT            the ids and pieces of a text\n"
    "  probe [--caps LIST] [--json]      every device and what it offers kernels\n"
    "  dump MODEL --spirv|--ptx DIR      each kernel of the model's plan as SPIR-V or PTX (kiln dump --help)\n"
    "  bench MODEL [-p 128,512] [-n 128] prompt and generation speed per device (kiln bench --help)\n"
    "  diverge MODEL [--device D ...]    every device's results against the oracle and each other\n"
    "  serve MODEL [--listen HOST:PORT]  an OpenAI-compatible HTTP server (kiln serve --help)\n"
    "  version                           print kiln's version\n"
    "  help                              this text\n";

int main(int argc, char **argv) {
    if (argc < 2) return cli_usage_error(usage, "no command given");
    progress_enable(true);
    const char *cmd = argv[1];
    if (strcmp(cmd, "inspect") == 0) return cmd_inspect(argc - 1, argv + 1);
    if (strcmp(cmd, "synth") == 0) return cmd_synth(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0) return cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "chat") == 0) return cmd_chat(argc - 1, argv + 1);
    if (strcmp(cmd, "tokenize") == 0) return cmd_tokenize(argc - 1, argv + 1);
    if (strcmp(cmd, "probe") == 0) return cmd_probe(argc - 1, argv + 1);
    if (strcmp(cmd, "dump") == 0) return cmd_dump(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "diverge") == 0) return cmd_diverge(argc - 1, argv + 1);
    if (strcmp(cmd, "serve") == 0) return cmd_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("kiln %s\n", KILN_COMMIT);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    return cli_usage_error(usage, "unknown command '%s'", cmd);
}
