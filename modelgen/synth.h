/* `kiln synth`: models with random weights and exactly llama.cpp's tensor names, shapes
 * and metadata keys, so one file runs in kiln and in llama.cpp. Weights are streamed
 * to disk as they are drawn; the same seed gives the same file on any machine and any
 * number of threads. */
#ifndef KILN_MODELGEN_SYNTH_H
#define KILN_MODELGEN_SYNTH_H

#include "base/error.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "modelgen/vocab.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct synth_config {
    const char *name;       /* general.name */
    arch_id arch;
    uint32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    bool tied;              /* no output.weight */
    float rope_base, rms_eps;
    bool llama3_rope;       /* write rope_freqs.weight as Llama 3.x's converter does */
    float rope_factor, rope_low_freq, rope_high_freq;
    uint32_t rope_orig_ctx;
    uint32_t dtype;         /* GGUF_T_BF16 or GGUF_T_F16 for matrices; 1-D tensors stay F32 */
    uint64_t seed;
    int threads;            /* 0 = one per core */
} synth_config;

extern const char *const synth_preset_names[]; /* NULL-terminated */

/* Fills c from a preset; -1 if the name is unknown. */
int synth_preset(const char *name, synth_config *c);
/* Checks the sizes are consistent (e.g. heads divisible by kv heads); message in err. */
int synth_check(const synth_config *c, kiln_err *err);
/* Writes the model. The tokenizer is vocab (n_tokens must equal c->n_vocab) or, when
 * vocab_from is given, the tokenizer.* keys of that file. */
typedef struct synth_stats { uint64_t bytes, params; double seconds; } synth_stats;
int synth_write(const synth_config *c, const tok_vocab *vocab, const gguf_file *vocab_from, const char *path,
                synth_stats *stats, kiln_err *err);

#endif
