/* Token sampling: greedy, temperature, top-k, top-p, min-p, repetition / frequency /
 * presence penalties, seeded. It never sorts the whole vocabulary per token. */
#ifndef KILN_GENERATE_SAMPLER_H
#define KILN_GENERATE_SAMPLER_H

#include "base/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct samp_params {
    float temperature;      /* 0 = greedy (default 0) */
    int32_t top_k;          /* 0 = off */
    float top_p;            /* 1 = off */
    float min_p;            /* 0 = off */
    float repeat_penalty;   /* 1 = off; llama.cpp's: logit/p if > 0 else logit*p */
    float frequency_penalty, presence_penalty; /* 0 = off (OpenAI's) */
    int32_t penalty_last_n; /* how many recent tokens the penalties see (default 64; -1 = all) */
    uint64_t seed;
} samp_params;

void samp_params_default(samp_params *p);
/* Checks ranges (temperature >= 0, top_p in (0,1], min_p in [0,1], top_k >= 0, ...):
 * 0, or -1 with a message naming the bad value. */
int samp_params_check(const samp_params *p, kiln_err *err);

typedef struct sampler sampler;
/* NULL for bad parameters (samp_params_check says why) or out of memory. */
sampler *samp_create(const samp_params *p, uint32_t n_vocab);
void samp_free(sampler *s);
/* Forget the history (for penalties) and reseed. */
void samp_reset(sampler *s);
/* Picks the next token from logits[n_vocab] (not modified); -1 when none can be chosen
 * (every logit NaN or -inf). */
int32_t samp_sample(sampler *s, const float *logits);
/* Whether samp_sample is samp_argmax of the logits whatever the history: temperature 0
 * and no penalties. (A caller may then ask the engine for the argmax alone.) */
bool samp_is_greedy(const sampler *s);
/* Records a token (prompt or generated) in the penalty history. */
void samp_accept(sampler *s, int32_t id);

/* Index of the largest logit; ties go to the lowest index; -1 when none is finite. */
int32_t samp_argmax(const float *logits, uint32_t n);

#endif
