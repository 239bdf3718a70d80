/* Reproducible random numbers: xoshiro256** seeded through splitmix64, and normal
 * deviates by the ziggurat method (Marsaglia & Tsang, with independent layer bits). */
#ifndef KILN_BASE_RNG_H
#define KILN_BASE_RNG_H

#include <stdint.h>

typedef struct rng { uint64_t s[4]; } rng;

/* A stream from a seed and any number of extra words (e.g. tensor index, chunk index):
 * the same words always give the same stream, whatever thread draws it. */
void rng_seed(rng *r, uint64_t seed, uint64_t a, uint64_t b);
uint64_t rng_next(rng *r);
double rng_uniform(rng *r);  /* [0, 1) with 53 bits */
double rng_normal(rng *r);   /* mean 0, std 1 */
void rng_normal_fill(rng *r, float *out, uint64_t n, float mean, float std);

#endif
