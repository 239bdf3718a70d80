/* A fixed pool of threads that split a range of rows: run(fn, ctx, n) calls fn on
 * disjoint [begin, end) pieces of [0, n) and returns when all are done. Each call names its
 * worker (0 .. threads - 1; no two calls at once share one), so fn can use scratch memory
 * set aside per worker. */
#ifndef KILN_BASE_POOL_H
#define KILN_BASE_POOL_H

#include <stdint.h>

typedef void (*pool_range_fn)(void *ctx, uint64_t begin, uint64_t end, int worker);
typedef struct pool pool;

pool *pool_create(int threads); /* threads <= 0: one per core */
void pool_destroy(pool *p);
int pool_threads(const pool *p);
void pool_run(pool *p, pool_range_fn fn, void *ctx, uint64_t n);

#endif
