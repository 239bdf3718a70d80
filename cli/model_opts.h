/* Flags shared by the commands that run a model (run, chat): the device and engine
 * options and the sampling options, parsed one way everywhere. */
#ifndef KILN_CLI_MODEL_OPTS_H
#define KILN_CLI_MODEL_OPTS_H

#include "generate/sampler.h"
#include "model/engine_batch.h"
#include "model/engine.h"
#include "model/model.h"
#include "oracle/oracle.h"
#include "text/tok.h"

typedef struct model_opts {
    const char *device;    /* "cpu" (default), "cuda:N", "vulkan:N", "auto" */
    const char *caps;      /* --caps overrides for a GPU device */
    struct rt_device *dev; /* opened by model_opts_open */
    orc_options orc;
    samp_params samp;
    bool sampling_set; /* any sampling flag given: otherwise greedy */
    bool temp_set;     /* sampling flags without --temp sample at 0.8, as llama.cpp */
    uint32_t n_block;  /* --block: prompt tokens per prefill block on a GPU (0: the plan's 512) */
    uint64_t mem_limit; /* --mem-limit: the device memory kiln may use (0: the device's) */
    uint32_t slots;    /* a GPU plan made for this many slots even where fewer engines are opened
                        * (kiln run --profile-step: the steps of several slots' tokens); 0: the engines' */
    engine_batch_opts batch; /* several engines' steps (kiln serve --parallel: --batch-tokens) */
} model_opts;

#define MODEL_OPTS_USAGE                                                                                               \
    "  --device D               cpu (the oracle, default) | cuda:N | vulkan:N | auto (cuda:0, else\n"                  \
    "                           vulkan:0, else cpu)\n"                                                                 \
    "  --caps LIST              take device capabilities away (kiln probe --help lists them)\n"                        \
    "  --oracle-mode M          contract (16-bit rounding as a GPU plan; default) | f32\n"                             \
    "  --dtype T                bf16 | f16: the 16-bit type of contract mode (default: the file's)\n"                  \
    "  --ctx N                  context length (default: cpu min(model's, 4096); a GPU the model's, halved\n"          \
    "                           until it fits)  --threads N\n"                                                         \
    "  --block N                prompt tokens per prefill block on a GPU (rounded up to a multiple\n"                  \
    "                           of 64, at most the context; default 512)\n"                                            \
    "  --mem-limit BYTES        device memory kiln may use (e.g. 24GiB, 500M; default: the device's)\n"             \
    "  --temp F --top-k N --top-p F --min-p F --seed N\n"                                                              \
    "  --repeat-penalty F --repeat-last-n N --frequency-penalty F --presence-penalty F\n"

void model_opts_init(model_opts *o);
/* Consumes argv[*i] (and its value) when it is one of the shared flags: returns 1;
 * 0 when it is not; -1 after printing a usage error (exit status 2). */
int model_opts_parse(model_opts *o, int argc, char **argv, int *i, const char *usage);
/* Validates the combination (prints and returns 2 on a bad one). */
int model_opts_check(model_opts *o, const char *usage);

/* Loads the model, its tokenizer and an engine on the chosen device; 0 or 1 (printed). */
int model_opts_open(model_opts *o, const char *path, model **m, tokenizer **t, engine **e);
/* Releases what model_opts_open made (any of them may be NULL). */
void model_opts_close(model_opts *o, model *m, tokenizer *t, engine *e);

/* As model_opts_open with n (1..64) engines over the one loaded model in e[0..n), each
 * with its own KV cache, for serving n requests at once: oracles share the model's
 * mapping (weights the oracle converts are converted per engine); GPU plans share one
 * upload of the weights (plan_create_slots), the device's memory check counting a cache
 * per engine. With n > 1 the engines evaluate one call at a time, in turn
 * (engine_serialize). 0 or 1 (printed); on failure every e[i] is NULL. */
int model_opts_open_n(model_opts *o, const char *path, uint32_t n, model **m, tokenizer **t, engine **e);
/* Releases what model_opts_open_n made (NULL entries allowed). */
void model_opts_close_n(model_opts *o, model *m, tokenizer *t, engine **e, uint32_t n);

#endif
