/* The builder's calls for ordering with other kernels and workgroups and for the tensor
 * copy engine (ir.h's "ordering and the tensor copy engine"): grid.wait, prefetch,
 * clusters, memory barriers, tensor maps and tma.load. Their rules are the verifier's
 * (ir_check_op, run by ir_build), so a misuse is caught here, where it happens. */
#include "ir/ir_internal.h"

void ir_grid_wait(ir_kernel *k) {
    if (k)
        ir_build(k, "ir_grid_wait", IR_OP_GRID_WAIT, 0, NULL, 0, 0, 0, 0);
}

void ir_set_launch_early(ir_kernel *k, bool early) {
    if (k)
        k->launch_early = early;
}

bool ir_launch_early(const ir_kernel *k) { return k && k->launch_early; }

void ir_prefetch(ir_kernel *k, ir_buf b, ir_val index, uint32_t bytes) {
    if (k && ir_use_ok(k, "ir_prefetch", index))
        ir_build(k, "ir_prefetch", IR_OP_PREFETCH, 0, &index, 1, b, bytes, 0);
}

void ir_set_cluster(ir_kernel *k, uint32_t n) {
    if (!k)
        return;
    if (n != 1 && n != 2 && n != 4 && n != 8) {
        ir_fail(k, "ir_set_cluster: clusters of 1, 2, 4 or 8 workgroups, not %u", n);
        return;
    }
    k->cluster = n;
}

uint32_t ir_cluster(const ir_kernel *k) { return k && k->cluster > 1 ? k->cluster : 1; }

void ir_cluster_sync(ir_kernel *k) {
    if (k)
        ir_build(k, "ir_cluster_sync", IR_OP_CLUSTER_SYNC, 0, NULL, 0, 0, 0, 0);
}

static void mbar2(ir_kernel *k, const char *fn, ir_op op, ir_shm bars, ir_val index, ir_val b) {
    ir_val ops[2] = { index, b };
    if (k && ir_uses_ok(k, fn, ops, 2))
        ir_build(k, fn, op, 0, ops, 2, bars, 0, 0);
}

void ir_mbar_init(ir_kernel *k, ir_shm bars, ir_val index, ir_val count) {
    mbar2(k, "ir_mbar_init", IR_OP_MBAR_INIT, bars, index, count);
}

void ir_mbar_expect(ir_kernel *k, ir_shm bars, ir_val index, ir_val bytes) {
    mbar2(k, "ir_mbar_expect", IR_OP_MBAR_EXPECT, bars, index, bytes);
}

void ir_mbar_wait(ir_kernel *k, ir_shm bars, ir_val index, ir_val parity) {
    mbar2(k, "ir_mbar_wait", IR_OP_MBAR_WAIT, bars, index, parity);
}

void ir_mbar_arrive(ir_kernel *k, ir_shm bars, ir_val index, ir_val cta) {
    ir_val ops[2] = { index, cta };
    uint32_t n = cta ? 2 : 1;
    if (k && ir_uses_ok(k, "ir_mbar_arrive", ops, n))
        ir_build(k, "ir_mbar_arrive", IR_OP_MBAR_ARRIVE, 0, ops, n, bars, cta ? 1 : 0, 0);
}

uint32_t ir_tensor_map(ir_kernel *k, ir_buf b, uint32_t inner, uint32_t outer, uint32_t box_inner,
                       uint32_t box_outer) {
    if (!k)
        return 0;
    if (b >= k->n_buffers) {
        ir_fail(k, "ir_tensor_map: buffer %u does not exist", b);
        return 0;
    }
    const ir_param *p = &k->params[k->buffers[b]];
    uint32_t esz = ir_scalar_bits(p->elem) / 8;
    if (esz != 2 || !(p->access & IR_READ)) {
        ir_fail(k, "ir_tensor_map: @%s must be a readable buffer of a 16-bit type", p->name);
        return 0;
    }
    if (!inner || inner % 8 || !outer || box_inner * esz != 128 || !box_outer || box_outer > 256) {
        ir_fail(k, "ir_tensor_map: @%s: %u rows of %u (a multiple of 8) in boxes of %u rows (1..256) of %u "
                   "(128 bytes)", p->name, outer, inner, box_outer, box_inner);
        return 0;
    }
    if (p->extent && !p->extent_per_group && (uint64_t)inner * outer > p->extent) {
        ir_fail(k, "ir_tensor_map: @%s: %u x %u elements pass its extent %llu", p->name, outer, inner,
                (unsigned long long)p->extent);
        return 0;
    }
    if (k->n_tmaps >= IR_MAX_TENSOR_MAPS) {
        ir_fail(k, "ir_tensor_map: at most %u tensor maps a kernel", IR_MAX_TENSOR_MAPS);
        return 0;
    }
    k->tmaps[k->n_tmaps] = (ir_tensor_map_decl){ b, inner, outer, box_inner, box_outer };
    return k->n_tmaps++;
}

uint32_t ir_n_tensor_maps(const ir_kernel *k) { return k ? k->n_tmaps : 0; }

const ir_tensor_map_decl *ir_tensor_map_at(const ir_kernel *k, uint32_t i) {
    return k && i < k->n_tmaps ? &k->tmaps[i] : NULL;
}

void ir_tma_load(ir_kernel *k, ir_shm dst, ir_val dst_index, uint32_t map, ir_val c_inner, ir_val c_outer,
                 ir_shm bars, ir_val bar_index, ir_val cta_mask) {
    ir_val ops[5] = { dst_index, c_inner, c_outer, bar_index, cta_mask };
    uint32_t n = cta_mask ? 5 : 4;
    if (k && ir_uses_ok(k, "ir_tma_load", ops, n))
        ir_build(k, "ir_tma_load", IR_OP_TMA_LOAD, 0, ops, n, dst, map, bars);
}
