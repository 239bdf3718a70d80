/* Emitted PTX kept on disk (ptx_emit.h, ptx_emit_cached). */
#include "backend-ptx/ptx_emit.h"
#include "base/error.h"
#include "runtime/cache_dir.h"

#include <llvm-c/Core.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bump when the emitter's output for the same IR and caps changes. */
#define PTX_EMITTER_VERSION 3

typedef struct hash2 { uint64_t a, b; } hash2;

/* two FNV-1a streams with different offsets: 128 bits of key */
static void mix(hash2 *h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h->a = (h->a ^ s[i]) * 0x100000001b3ull;
        h->b = (h->b ^ s[i]) * 0x100000001b3ull;
    }
}
static void mix_u32(hash2 *h, uint32_t v) { mix(h, &v, sizeof v); }

/* the caps fields the emitter (and the kernels' use of them) reads: not memory sizes,
 * names or free bytes, which change between runs without changing a kernel */
static void mix_caps(hash2 *h, const rt_caps *c) {
    const char *arch = ptx_target_arch(c);
    mix(h, arch ? arch : "-", arch ? strlen(arch) : 1);
    uint32_t f[] = {c->subgroup_size, c->subgroup_arith, c->subgroup_shuffle, c->f16_arith, c->bf16_arith,
                    c->int8_arith, c->storage16, c->atomic_f32_add, c->async_copy, c->wgmma, c->grid_dep, c->tma, c->shared_bytes, c->max_workgroup, c->n_mma};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) mix_u32(h, f[i]);
    for (uint32_t i = 0; i < c->n_mma && i < RT_MAX_MMA_SHAPES; i++) {
        const rt_mma_shape *s = &c->mma[i];
        uint32_t m[] = {s->m, s->n, s->k, s->ab_type, s->acc_type};
        mix(h, m, sizeof m);
    }
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (len > 0 && len < (64L << 20) && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len + 1))) {
        *n = fread(buf, 1, (size_t)len, f);
        buf[*n] = 0;
    }
    fclose(f);
    return buf;
}

int ptx_emit_cached(const ir_kernel *k, const rt_caps *c, char **ptx, bool *hit, kiln_err *err) {
    if (hit) *hit = false;
    if (ptx) *ptx = NULL;
    char dir[600];
    char *text = k && c ? ir_print(k) : NULL;
    if (!text || rt_cache_dir(dir, sizeof dir)) {
        free(text);
        return ptx_emit(k, c, ptx, NULL, err);
    }
    hash2 h = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull};
    mix(&h, text, strlen(text));
    free(text);
    mix_caps(&h, c);
    unsigned maj, min, pat;
    LLVMGetVersion(&maj, &min, &pat);
    uint32_t v[] = {PTX_EMITTER_VERSION, maj, min, pat};
    mix(&h, v, sizeof v);
    char key[80], path[800];
    snprintf(key, sizeof key, "// kiln ptx cache %016llx%016llx\n", (unsigned long long)h.a, (unsigned long long)h.b);
    snprintf(path, sizeof path, "%s/ptx-%016llx%016llx.ptx", dir, (unsigned long long)h.a, (unsigned long long)h.b);
    size_t n = 0, kl = strlen(key);
    char *got = read_file(path, &n);
    if (got && n > kl && !memcmp(got, key, kl)) {
        *ptx = got;
        if (hit) *hit = true;
        return 0;
    }
    free(got);
    char *fresh = NULL;
    if (ptx_emit(k, c, &fresh, NULL, err)) return -1;
    size_t fl = strlen(fresh);
    char *file = malloc(kl + fl + 1);
    if (file) {
        memcpy(file, key, kl);
        memcpy(file + kl, fresh, fl + 1);
        rt_cache_write(path, file, kl + fl); /* a cache that cannot be written is no error */
        free(file);
    }
    *ptx = fresh;
    return 0;
}
