#include "rng.h"

#include <math.h>
#include <pthread.h>

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void zinit_once(void);

void rng_seed(rng *r, uint64_t seed, uint64_t a, uint64_t b) {
    zinit_once(); /* here, not per draw: rng_normal is the hot path */
    uint64_t x = seed;
    x = splitmix(&x) ^ a;
    x = splitmix(&x) ^ b;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double rng_uniform(rng *r) { return (double)(int64_t)(rng_next(r) >> 11) * 0x1.0p-53; }

/* Ziggurat of 128 layers of equal area V under f(x) = exp(-x^2/2); R is the base
 * layer's right edge. zx[i] is layer i's right edge (zx[0] the base strip's virtual
 * width V/f(R)), zf[i] = f(zx[i]). */
#define ZN 128
static const double ZR = 3.442619855899, ZV = 9.91256303526217e-3;
static double zx[ZN + 1], zf[ZN + 1];
static pthread_once_t zonce = PTHREAD_ONCE_INIT;

static void zinit(void) {
    zf[0] = exp(-0.5 * ZR * ZR);
    zx[0] = ZV / zf[0];
    zx[1] = ZR;
    zf[1] = zf[0];
    for (int i = 2; i < ZN; i++) {
        zx[i] = sqrt(-2.0 * log(ZV / zx[i - 1] + zf[i - 1]));
        zf[i] = exp(-0.5 * zx[i] * zx[i]);
    }
    zx[ZN] = 0.0;
    zf[ZN] = 1.0;
}

static void zinit_once(void) { pthread_once(&zonce, zinit); }

static inline double normal(rng *r) {
    for (;;) {
        uint64_t u = rng_next(r);
        int i = (int)(u & (ZN - 1));
        int neg = (int)((u >> 7) & 1);
        double x = (double)(int64_t)(u >> 11) * 0x1.0p-53 * zx[i];
        if (x < zx[i + 1]) return neg ? -x : x; /* inside the layer's rectangle core */
        if (i == 0) {                           /* the tail beyond R */
            double a, b;
            do {
                a = -log(1.0 - rng_uniform(r)) / ZR;
                b = -log(1.0 - rng_uniform(r));
            } while (b + b < a * a);
            return neg ? -(ZR + a) : ZR + a;
        }
        if (zf[i] + rng_uniform(r) * (zf[i + 1] - zf[i]) < exp(-0.5 * x * x)) return neg ? -x : x;
    }
}

double rng_normal(rng *r) { return normal(r); }

void rng_normal_fill(rng *r, float *out, uint64_t n, float mean, float std) {
    for (uint64_t i = 0; i < n; i++) out[i] = (float)(mean + std * normal(r));
}
