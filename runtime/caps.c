/* The capability probe's common part: per-backend minimums, the CPU oracle's entry,
 * `--caps` overrides and the text `kiln probe` prints. */
#include "runtime/caps.h"

#include "base/error.h"
#include "ir/ir.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- defaults ---------------------------------------------------------------------------- */

static void set_str(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* MemAvailable counts reclaimable page cache, which _SC_AVPHYS_PAGES does not; 0 if unreadable. */
static uint64_t meminfo_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    fclose(f);
    return (uint64_t)kib * 1024;
}

static void cpu_oracle(rt_caps *c) {
    set_str(c->vendor, sizeof c->vendor, "kiln");
    set_str(c->name, sizeof c->name, "cpu (oracle)");
    /* The oracle runs plain f32 loops, no kernels: one lane, no workgroup memory. */
    c->subgroup_size = c->subgroup_min = c->subgroup_max = 1;
    c->max_workgroup = 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    c->compute_units = cores > 0 ? (uint32_t)cores : 0;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) c->memory_bytes = (uint64_t)pages * (uint64_t)page;
    c->free_bytes = meminfo_available();
    if (!c->free_bytes) {
        long avail = sysconf(_SC_AVPHYS_PAGES);
        if (avail > 0 && page > 0) c->free_bytes = (uint64_t)avail * (uint64_t)page;
    }
    if (c->free_bytes > c->memory_bytes) c->free_bytes = c->memory_bytes;
}

void rt_caps_limit_memory(rt_caps *c, uint64_t limit) {
    if (!limit) return;
    if (!c->memory_bytes || c->memory_bytes > limit) c->memory_bytes = limit, c->memory_limited = true;
    if (!c->free_bytes || c->free_bytes > limit) c->free_bytes = limit, c->memory_limited = true;
}

void rt_caps_default(rt_caps *c, rt_backend b) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->backend = b;
    switch (b) {
    case RT_CPU:
        cpu_oracle(c);
        break;
    case RT_CUDA:
        /* What every CUDA device kiln can target has (sm_50+ through the driver API):
         * 32-lane warps with shuffles, 16-bit loads, f32 atomicAdd, 48 KiB static shared
         * memory, 1024 threads. f16/bf16/int8 arithmetic depend on the architecture. */
        c->subgroup_size = c->subgroup_min = c->subgroup_max = 32;
        c->subgroup_arith = c->subgroup_shuffle = true;
        c->storage16 = true;
        c->atomic_f32_add = true;
        c->shared_bytes = 48 * 1024;
        c->max_workgroup = 1024;
        break;
    case RT_VULKAN:
    default:
        /* Vulkan 1.3's required limits (subgroup size is kiln's floor: the spec allows 1). */
        c->subgroup_size = c->subgroup_min = c->subgroup_max = 4;
        c->shared_bytes = 16 * 1024;
        c->max_workgroup = 128;
        c->max_buffer_bytes = 1u << 27;
        break;
    }
}

/* ---- overrides --------------------------------------------------------------------------- */

/* Whole-string decimal, no sign, no spaces, within uint32_t. */
static bool parse_u32(const char *s, size_t n, uint32_t *out) {
    if (n == 0 || n > 10) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

/* A fragment needs its element types: without f16 (or bf16) arithmetic the shapes built on
 * it go too, so kernel builders never see an MMA they could not emit. */
static void drop_shapes_of(rt_mma_shape *s, uint32_t *n, uint32_t type) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < *n && i < RT_MAX_MMA_SHAPES; i++)
        if (s[i].ab_type != type && s[i].acc_type != type) s[k++] = s[i];
    memset(&s[k], 0, (RT_MAX_MMA_SHAPES - k) * sizeof s[0]);
    *n = k;
}

static void drop_mma_of(rt_caps *c, uint32_t type) {
    drop_shapes_of(c->mma, &c->n_mma, type);
    drop_shapes_of(c->wg_mma, &c->n_wg_mma, type);
}

/* Workgroup-scope matrices build on the subgroup ones: no-coopmat takes both. */
static void drop_wg_mma(rt_caps *c) {
    c->n_wg_mma = 0;
    memset(c->wg_mma, 0, sizeof c->wg_mma);
}

static const struct {
    const char *name;
    size_t off;
} flag_items[] = {
    {"no-coopmat", 0},
    {"no-coopmat2", 0},
    {"no-f16", offsetof(rt_caps, f16_arith)},
    {"no-bf16", offsetof(rt_caps, bf16_arith)},
    {"no-storage16", offsetof(rt_caps, storage16)},
    {"no-subgroup-arith", offsetof(rt_caps, subgroup_arith)},
    {"no-subgroup-shuffle", offsetof(rt_caps, subgroup_shuffle)},
    {"no-atomic-f32", offsetof(rt_caps, atomic_f32_add)},
    {"no-async-copy", offsetof(rt_caps, async_copy)},
    {"no-wgmma", offsetof(rt_caps, wgmma)},
    {"no-grid-dep", offsetof(rt_caps, grid_dep)},
    {"no-tma", offsetof(rt_caps, tma)},
};

/* Items of rt_debug, not of the caps: accepted, applied by rt_debug_from_list. */
static const char *const debug_items[] = {"debug-fault", "debug-alloc-kib", "debug-emulate-coopmat"};

/* The workgroup memory the emulated fragments' scratch takes: a subgroup's A and B of
 * 16x16x16 in f16 (1 KiB), for up to 8 subgroups. */
#define EMULATED_SCRATCH 8192u

/* debug-emulate-coopmat: f16 fragments of 16x16x16 on a Vulkan device that has none, the
 * 16-bit types fragments need, and room for the scratch. */
static void emulate_coopmat(rt_caps *c) {
    if (c->backend != RT_VULKAN || c->n_mma || c->mma_emulated || !c->f16_arith || !c->storage16 ||
        c->subgroup_size < 4 || 256 % c->subgroup_size || c->shared_bytes < 2 * EMULATED_SCRATCH)
        return;
    c->mma[0] = (rt_mma_shape){16, 16, 16, IR_F16, IR_F32, 0};
    c->n_mma = 1;
    c->mma_emulated = true;
    c->mma_emulated_shared = EMULATED_SCRATCH;
    c->shared_bytes -= EMULATED_SCRATCH;
}

static bool key_is(const char *key, size_t n, const char *name) { return strlen(name) == n && !memcmp(key, name, n); }

/* One item (not empty, spaces trimmed) applied to c; 0, or -1 with err naming it. */
static int apply_item(rt_caps *c, const char *it, size_t n, kiln_err *err) {
    const char *eq = memchr(it, '=', n);
    size_t kn = eq ? (size_t)(eq - it) : n;
    for (size_t i = 0; i < sizeof flag_items / sizeof flag_items[0]; i++) {
        if (!key_is(it, kn, flag_items[i].name)) continue;
        if (eq) return kiln_fail(err, KILN_ERR_INVALID, "caps item '%.*s': takes no value", (int)n, it), -1;
        if (i == 0) {
            c->n_mma = 0;
            c->mma_emulated = false;
            memset(c->mma, 0, sizeof c->mma);
            drop_wg_mma(c);
        } else if (i == 1) {
            drop_wg_mma(c);
        } else {
            *(bool *)((char *)c + flag_items[i].off) = false;
            if (flag_items[i].off == offsetof(rt_caps, f16_arith)) drop_mma_of(c, IR_F16);
            if (flag_items[i].off == offsetof(rt_caps, bf16_arith)) drop_mma_of(c, IR_BF16);
        }
        return 0;
    }
    uint32_t v;
    for (size_t i = 0; i < sizeof debug_items / sizeof debug_items[0]; i++) {
        if (!key_is(it, kn, debug_items[i])) continue;
        if (i != 1) {
            if (eq) return kiln_fail(err, KILN_ERR_INVALID, "caps item '%.*s': takes no value", (int)n, it), -1;
            if (i == 2) emulate_coopmat(c);
            return 0;
        }
        if (!eq || !parse_u32(eq + 1, n - kn - 1, &v) || !v)
            return kiln_fail(err, KILN_ERR_INVALID, "caps item '%.*s': needs =N, a number of KiB", (int)n, it), -1;
        return 0;
    }
    bool sg = key_is(it, kn, "subgroup"), sh = key_is(it, kn, "shared"), wg = key_is(it, kn, "workgroup");
    if (!sg && !sh && !wg) return kiln_fail(err, KILN_ERR_INVALID, "unknown caps item '%.*s'", (int)n, it), -1;
    if (!eq) return kiln_fail(err, KILN_ERR_INVALID, "caps item '%.*s': needs =N", (int)n, it), -1;
    if (!parse_u32(eq + 1, n - kn - 1, &v))
        return kiln_fail(err, KILN_ERR_INVALID, "caps item '%.*s': '%.*s' is not a decimal number", (int)n, it,
                         (int)(n - kn - 1), eq + 1),
               -1;
    if (sg) {
        if (v == 0 || (v & (v - 1)))
            return kiln_fail(err, KILN_ERR_INVALID, "caps item '%.*s': %u is not a power of two", (int)n, it, v), -1;
        if (v < c->subgroup_min || v > c->subgroup_max)
            return kiln_fail(err, KILN_ERR_INVALID, "caps item '%.*s': the device's subgroup sizes are %u..%u", (int)n,
                             it, c->subgroup_min, c->subgroup_max),
                   -1;
        /* Kernels are built for v; min/max stay what the device can be asked for, so the
         * backend still knows it must request v explicitly when v is not its default. */
        c->subgroup_size = v;
    } else if (sh) {
        if (v > c->shared_bytes)
            return kiln_fail(err, KILN_ERR_INVALID, "caps item '%.*s': the device offers %u bytes", (int)n, it,
                             c->shared_bytes),
                   -1;
        c->shared_bytes = v;
    } else {
        if (v == 0)
            return kiln_fail(err, KILN_ERR_INVALID, "caps item '%.*s': a workgroup needs at least 1 invocation", (int)n,
                             it),
                   -1;
        if (v > c->max_workgroup)
            return kiln_fail(err, KILN_ERR_INVALID, "caps item '%.*s': the device allows %u invocations", (int)n, it,
                             c->max_workgroup),
                   -1;
        c->max_workgroup = v;
    }
    return 0;
}

static bool is_space(char ch) { return ch == ' ' || ch == '\t'; }

int rt_caps_override(rt_caps *c, const char *list, kiln_err *err) {
    kiln_err_clear(err);
    if (!c) return kiln_fail(err, KILN_ERR_INVALID, "no caps to override"), -1;
    if (!list) return 0;
    const char *p = list;
    while (is_space(*p)) p++;
    if (!*p) return 0; /* an empty list overrides nothing */
    rt_caps t = *c; /* all or nothing: c changes only when every item applies */
    for (unsigned pos = 1;; pos++) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *a = p, *b = end;
        while (a < b && is_space(*a)) a++;
        while (b > a && is_space(b[-1])) b--;
        if (a == b) return kiln_fail(err, KILN_ERR_INVALID, "empty caps item (number %u) in '%s'", pos, list), -1;
        if (apply_item(&t, a, (size_t)(b - a), err)) return -1;
        if (!*end) break;
        p = end + 1;
    }
    *c = t;
    return 0;
}

int rt_caps_override_check(const char *list, kiln_err *err) {
    /* Every syntactically good item applies to a device that offers everything. */
    rt_caps any;
    memset(&any, 0, sizeof any);
    any.subgroup_min = 1;
    any.subgroup_size = any.subgroup_max = 1u << 31;
    any.shared_bytes = any.max_workgroup = UINT32_MAX;
    return rt_caps_override(&any, list, err);
}

void rt_debug_from_list(rt_debug *d, const char *list) {
    for (const char *p = list; p && *p;) {
        size_t n = strcspn(p, ",");
        const char *a = p, *b = p + n;
        while (a < b && is_space(*a)) a++;
        while (b > a && is_space(b[-1])) b--;
        if (key_is(a, (size_t)(b - a), "debug-fault")) d->fault_logits = true;
        const char *eq = memchr(a, '=', (size_t)(b - a));
        uint32_t v;
        if (eq && key_is(a, (size_t)(eq - a), "debug-alloc-kib") && parse_u32(eq + 1, (size_t)(b - eq - 1), &v))
            d->alloc_kib = v;
        p += n + (p[n] == ',');
    }
}

/* ---- description ------------------------------------------------------------------------- */

typedef struct out {
    char *buf;
    size_t cap, len;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->len < o->cap ? o->buf + o->len : NULL, o->len < o->cap ? o->cap - o->len : 0, fmt, ap);
    va_end(ap);
    if (k > 0) o->len += (size_t)k;
}

/* A fixed-size text field, NUL or not, on one line ("-" when empty). */
static void put_field(out *o, const char *key, const char *s, size_t cap) {
    size_t n = strnlen(s, cap);
    put(o, "%s: ", key);
    if (!n) put(o, "-");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        put(o, "%c", ch < 0x20 || ch == 0x7f ? '?' : (char)ch);
    }
    put(o, "\n");
}

static const char *scalar_name(uint32_t t) {
    static const char *const names[] = {[IR_BOOL] = "bool", [IR_I32] = "i32", [IR_U32] = "u32", [IR_I64] = "i64",
                                        [IR_U64] = "u64",   [IR_F16] = "f16", [IR_BF16] = "bf16", [IR_F32] = "f32"};
    return t < IR_SCALAR_COUNT ? names[t] : "?";
}

static void put_bytes(out *o, const char *key, uint64_t v, bool zero_unknown) {
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    put(o, "%s: %llu", key, (unsigned long long)v);
    if (!v && zero_unknown) put(o, " (unknown)");
    int u = -1;
    while (u < 3 && v >= 1024ull << (10 * (u + 1))) u++;
    if (u >= 0) {
        uint64_t unit = 1ull << (10 * (u + 1));
        if (v % unit == 0) put(o, " (%llu %s)", (unsigned long long)(v / unit), units[u]);
        else put(o, " (%.2f %s)", (double)v / (double)unit, units[u]);
    }
    put(o, "\n");
}

size_t rt_caps_describe(const rt_caps *c, char *buf, size_t cap) {
    out o = {buf, buf ? cap : 0, 0};
    if (o.cap) buf[0] = '\0';
    if (!c) return 0;
    static const char *const backends[] = {[RT_CPU] = "cpu", [RT_VULKAN] = "vulkan", [RT_CUDA] = "cuda"};
    if ((unsigned)c->backend <= RT_CUDA) put(&o, "backend: %s\n", backends[c->backend]);
    else put(&o, "backend: unknown (%u)\n", (unsigned)c->backend);
    put_field(&o, "vendor", c->vendor, sizeof c->vendor);
    put_field(&o, "name", c->name, sizeof c->name);
    put_field(&o, "driver", c->driver, sizeof c->driver);
    uint32_t v = c->api_version;
    if (!v) put(&o, "api_version: -\n");
    else if (c->backend == RT_CUDA) put(&o, "api_version: %u.%u\n", v / 1000, v % 1000 / 10);
    else put(&o, "api_version: %u.%u.%u\n", v >> 22 & 0x7f, v >> 12 & 0x3ff, v & 0xfff); /* VK_API_VERSION_* */
    if (c->compute_capability)
        put(&o, "compute_capability: %u.%u\n", c->compute_capability / 10, c->compute_capability % 10);
    else put(&o, "compute_capability: -\n");
    put(&o, "subgroup_size: %u\nsubgroup_min: %u\nsubgroup_max: %u\n", c->subgroup_size, c->subgroup_min,
        c->subgroup_max);
#define YN(f) put(&o, #f ": %s\n", c->f ? "yes" : "no")
    YN(subgroup_arith);
    YN(subgroup_shuffle);
    YN(f16_arith);
    YN(bf16_arith);
    YN(int8_arith);
    YN(storage16);
    YN(atomic_f32_add);
    YN(async_copy);
    YN(wgmma);
    YN(grid_dep);
    YN(tma);
#undef YN
    put(&o, "mma: ");
    uint32_t nm = c->n_mma < RT_MAX_MMA_SHAPES ? c->n_mma : RT_MAX_MMA_SHAPES;
    if (!nm) put(&o, "none");
    for (uint32_t i = 0; i < nm; i++) {
        const rt_mma_shape *s = &c->mma[i];
        put(&o, "%s%ux%ux%u %s*%s+%s", i ? ", " : "", s->m, s->n, s->k, scalar_name(s->ab_type),
            scalar_name(s->ab_type), scalar_name(s->acc_type));
    }
    if (nm && c->mma_emulated) put(&o, " (emulated: debug-emulate-coopmat, %u bytes of workgroup memory reserved)",
                                   c->mma_emulated_shared);
    put(&o, "\n");
    put(&o, "wg_mma: ");
    uint32_t nw = c->n_wg_mma < RT_MAX_MMA_SHAPES ? c->n_wg_mma : RT_MAX_MMA_SHAPES;
    if (!nw) put(&o, "none");
    for (uint32_t i = 0; i < nw; i++) {
        const rt_mma_shape *s = &c->wg_mma[i];
        put(&o, "%s%ux%ux%u/%u %s*%s+%s", i ? ", " : "", s->m, s->n, s->k, s->invocations, scalar_name(s->ab_type),
            scalar_name(s->ab_type), scalar_name(s->acc_type));
    }
    if (nw) put(&o, " (granularities / invocations; up to %u, %u bytes of workgroup memory reserved)", c->wg_mma_max_dim,
                c->wg_mma_reserved_shared);
    put(&o, "\n");
    put_bytes(&o, "shared_bytes", c->shared_bytes, false);
    put(&o, "max_workgroup: %u\n", c->max_workgroup);
    if (c->max_buffer_bytes) put_bytes(&o, "max_buffer_bytes", c->max_buffer_bytes, false);
    else put(&o, "max_buffer_bytes: no limit\n");
    put_bytes(&o, "shared_per_cu", c->shared_per_cu, true);
    put_bytes(&o, "l2_bytes", c->l2_bytes, true);
    put(&o, "compute_units: %u%s\n", c->compute_units, c->compute_units ? "" : " (unknown)");
    put_bytes(&o, "memory_bytes", c->memory_bytes, true);
    put_bytes(&o, "free_bytes", c->free_bytes, true);
    return o.len;
}
