/* The IR's asynchronous copies on the device under test (lavapipe in CI, where they are
 * lowered to plain loads and stores; cp.async with KILN_TEST_DEVICE=cuda:N on sm_80+): a
 * ring of 3 workgroup-memory stages fed 2 chunks ahead, as the pipelined product uses
 * it, for every copy width (4, 8 and 16 bytes) and element size, with limits that cut a
 * copy in the middle, at its start and not at all. Each invocation writes back its
 * neighbour's copy (so the barrier after the wait is what makes it visible); the output
 * must be the source below the limit and zero at and past it, bit for bit, with the
 * guard after it still poisoned. Also: the copies never read at or past the limit (a
 * limit at the source's end, with the last copy straddling it). */
#include "base/error.h"
#include "ir/ir.h"
#include "tests/util/testutil_vk.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WG 64
#define CHUNKS 5
#define STAGES 3
#define GUARD 32

static ir_val cu(ir_kernel *k, uint32_t v) { return ir_const_u32(k, v); }
static ir_val add(ir_kernel *k, ir_val a, ir_val b) { return ir_bin(k, IR_OP_ADD, a, b); }
static ir_val mul(ir_kernel *k, ir_val a, uint32_t b) { return ir_bin(k, IR_OP_MUL, a, cu(k, b)); }

/* chunk's copies: invocation lid takes elements lid * count .. of the chunk */
static void issue(ir_kernel *k, ir_shm ring, ir_buf src, ir_val chunk, ir_val lid, uint32_t count, ir_val limit) {
    uint32_t per = WG * count;
    ir_val slot = ir_bin(k, IR_OP_REM, chunk, cu(k, STAGES));
    ir_val at = mul(k, lid, count);
    ir_async_copy(k, ring, add(k, mul(k, slot, per), at), src, add(k, mul(k, chunk, per), at), count, limit);
}

static ir_kernel *ring_kernel(ir_scalar e, uint32_t count) {
    ir_kernel *k = ir_kernel_create("async_ring");
    ir_buf src = ir_param_buffer(k, "src", e, IR_READ), dst = ir_param_buffer(k, "dst", e, IR_WRITE);
    ir_val limit = ir_param_scalar(k, "limit", IR_U32);
    ir_set_workgroup(k, WG, 1, 1);
    uint32_t per = WG * count;
    ir_shm ring = ir_shared_array(k, "ring", e, STAGES * per);
    ir_val lid = ir_id(k, IR_ID_LOCAL, 0);
    for (uint32_t c = 0; c + 1 < STAGES; c++) {
        issue(k, ring, src, cu(k, c), lid, count, limit);
        ir_async_commit(k);
    }
    ir_for *f = ir_for_begin(k, cu(k, 0), cu(k, CHUNKS), cu(k, 1), 0, NULL);
    ir_val c = ir_for_iv(f);
    ir_async_wait(k, STAGES - 2);
    ir_barrier(k);
    ir_val next = add(k, c, cu(k, STAGES - 1));
    ir_if *g = ir_if_begin(k, ir_compare(k, IR_LT, next, cu(k, CHUNKS)), 0);
    issue(k, ring, src, next, lid, count, limit);
    ir_if_end(k, g, NULL);
    ir_async_commit(k);
    /* the neighbour's copy, out of this chunk's slot */
    ir_val nb = mul(k, ir_bin(k, IR_OP_XOR, lid, cu(k, 1)), count);
    ir_val slot = ir_bin(k, IR_OP_REM, c, cu(k, STAGES));
    for (uint32_t i = 0; i < count; i++) {
        ir_val from = add(k, add(k, mul(k, slot, per), nb), cu(k, i));
        ir_store(k, dst, add(k, add(k, mul(k, c, per), nb), cu(k, i)), ir_shm_load(k, ring, from, 1));
    }
    ir_for_end(k, f, NULL);
    return k;
}

static void ring_case(rt_device *d, ir_scalar e, uint32_t count) {
    uint32_t eb = ir_scalar_bits(e) / 8, n = CHUNKS * WG * count;
    ir_kernel *k = ring_kernel(e, count);
    kiln_err err = {0};
    cr_assert_eq(ir_verify(k, &err), 0, "%s", err.msg);
    rt_kernel *ck = tu_vk_compile(d, k);
    uint8_t *src = malloc((size_t)n * eb), *poison = malloc((size_t)(n + GUARD) * eb),
            *out = malloc((size_t)(n + GUARD) * eb);
    cr_assert(src && poison && out);
    for (uint32_t i = 0; i < n * eb; i++) src[i] = (uint8_t)tu_rnd32();
    if (ir_scalar_is_float(e)) /* normal finite values: the exponent's top bit clear, a lower one set */
        for (uint32_t i = 0; i < n; i++) src[(size_t)i * eb + eb - 1] = (src[(size_t)i * eb + eb - 1] & 0xbf) | 0x20;
    memset(poison, 0x7f, (size_t)(n + GUARD) * eb);
    rt_buffer *bs = tu_vk_upload(d, src, (size_t)n * eb), *bd = tu_vk_upload(d, poison, (size_t)(n + GUARD) * eb);
    /* no limit, one inside a copy of chunk 2, at a copy's start, 0, and the source's end */
    const uint32_t limits[] = {n, 2 * WG * count + count / 2 + 1, 3 * WG * count + 5 * count, 0, n - 1};
    for (size_t li = 0; li < sizeof limits / sizeof limits[0]; li++) {
        uint32_t lim = limits[li];
        tu_vk_reupload(d, bd, poison, (size_t)(n + GUARD) * eb);
        rt_arg args[3] = {{bs, 0}, {bd, 0}, {NULL, lim}};
        tu_vk_run(d, ck, 1, 1, args, 3);
        tu_vk_download(d, bd, out, (size_t)(n + GUARD) * eb);
        for (uint32_t i = 0; i < n; i++) {
            bool same = i < lim ? !memcmp(out + (size_t)i * eb, src + (size_t)i * eb, eb)
                                : !memcmp(out + (size_t)i * eb, (uint8_t[8]){0}, eb);
            cr_assert(same, "%s x%u limit %u: element %u is %s", ir_scalar_name(e), count, lim, i,
                      i < lim ? "not the source's" : "not zero");
        }
        cr_assert(!memcmp(out + (size_t)n * eb, poison, (size_t)GUARD * eb), "%s x%u limit %u: guard written",
                  ir_scalar_name(e), count, lim);
    }
    d->ops->release(d, bs), d->ops->release(d, bd);
    d->ops->release_kernel(d, ck);
    free(src), free(poison), free(out);
    ir_kernel_destroy(k);
}

Test(kernels_async, ring_of_stages_with_limits) {
    rt_device *d = tu_vk_open_or_skip(NULL);
    tu_seed(41);
    ring_case(d, IR_F32, 4); /* 16 bytes */
    ring_case(d, IR_U32, 2); /* 8 */
    ring_case(d, IR_F32, 1); /* 4 */
    if (d->caps.storage16) {
        ring_case(d, IR_BF16, 8); /* 16 */
        ring_case(d, IR_F16, 4);  /* 8 */
        ring_case(d, IR_BF16, 2); /* 4 */
    }
    d->ops->destroy(d);
}
