#include "base/rng.h"

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

/* Ziggurat of 128 layers of equal area V under f(x) = exp(-x^2/2), in Marsaglia &
 * Tsang's integer form: a signed 32-bit draw hz and a layer iz from other bits of the
 * same 64-bit word (never the same bits: Doornik's fix). Layer 0 is the base strip
 * with the tail beyond R; kn[] holds each layer's core bound scaled by 2^31, so ~99%
 * of draws cost one compare and one multiply. */
#define ZN 128
static const double ZR = 3.442619855899, ZV = 9.91256303526217e-3;
static uint32_t kn[ZN];
static double wn[ZN], fn[ZN];
static pthread_once_t zonce = PTHREAD_ONCE_INIT;

static void zinit(void) {
    const double m1 = 2147483648.0;
    double dn = ZR, tn = dn, q = ZV / exp(-0.5 * dn * dn);
    kn[0] = (uint32_t)((dn / q) * m1);
    kn[1] = 0;
    wn[0] = q / m1;
    wn[ZN - 1] = dn / m1;
    fn[0] = 1.0;
    fn[ZN - 1] = exp(-0.5 * dn * dn);
    for (int i = ZN - 2; i >= 1; i--) {
        dn = sqrt(-2.0 * log(ZV / dn + exp(-0.5 * dn * dn)));
        kn[i + 1] = (uint32_t)((dn / tn) * m1);
        tn = dn;
        fn[i] = exp(-0.5 * dn * dn);
        wn[i] = dn / m1;
    }
}

static void zinit_once(void) { pthread_once(&zonce, zinit); }

static double normal_slow(rng *r, int32_t hz, uint32_t iz) {
    for (;;) {
        double x = hz * wn[iz];
        if (iz == 0) { /* the tail beyond R */
            double a, b;
            do {
                a = -log(1.0 - rng_uniform(r)) / ZR;
                b = -log(1.0 - rng_uniform(r));
            } while (b + b < a * a);
            return hz > 0 ? ZR + a : -ZR - a;
        }
        if (fn[iz] + rng_uniform(r) * (fn[iz - 1] - fn[iz]) < exp(-0.5 * x * x)) return x;
        uint64_t u = rng_next(r);
        hz = (int32_t)(uint32_t)(u >> 32);
        iz = (uint32_t)u & (ZN - 1);
        if ((uint32_t)(hz < 0 ? -(int64_t)hz : hz) < kn[iz]) return hz * wn[iz];
    }
}

static inline double normal(rng *r) {
    uint64_t u = rng_next(r);
    int32_t hz = (int32_t)(uint32_t)(u >> 32);
    uint32_t iz = (uint32_t)u & (ZN - 1);
    if ((uint32_t)(hz < 0 ? -(int64_t)hz : hz) < kn[iz]) return hz * wn[iz];
    return normal_slow(r, hz, iz);
}

double rng_normal(rng *r) { return normal(r); }

void rng_normal_fill(rng *r, float *out, uint64_t n, float mean, float std) {
    for (uint64_t i = 0; i < n; i++) out[i] = (float)(mean + std * normal(r));
}
