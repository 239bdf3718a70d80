/* What each kernel builder chooses on a device: the kernels of a qwen3-0.6b-shaped
 * model built for the caps, each summarised from its IR (workgroup size, workgroup
 * memory, subgroup operations, cooperative-matrix shapes), so `kiln probe` shows the
 * variants a device gets without a model file. Read off the kernels themselves, not
 * from a second copy of the builders' rules. */
#include "base/error.h"
#include "kernels/kn_common.h"

#include <stdio.h>
#include <string.h>

typedef struct summary {
    bool sg_reduce, sg_shuffle, atomics, async_copy, frag_elems, wg_sw128, wg_async, tma, mbar;
    uint32_t frag_m, frag_n, frag_k;
    ir_scalar frag_t;
    uint32_t wg_n; /* a warpgroup product's n (m64 x n x k16), 0 none */
} summary;

static void scan(const ir_kernel *k, const ir_region *r, summary *s) {
    for (uint32_t i = 0; i < r->n; i++) {
        const ir_inst *in = r->inst[i];
        if (in->op == IR_OP_SG_REDUCE) s->sg_reduce = true;
        if (in->op == IR_OP_SG_SHUFFLE || in->op == IR_OP_SG_SHUFFLE_XOR || in->op == IR_OP_SG_BROADCAST)
            s->sg_shuffle = true;
        if (in->op == IR_OP_ATOMIC) s->atomics = true;
        if (in->op == IR_OP_ASYNC_COPY) s->async_copy = true;
        if (in->op == IR_OP_FRAG_ELEMS) s->frag_elems = true;
        if (in->op == IR_OP_TMA_LOAD) s->tma = true;
        if (in->op == IR_OP_MBAR_WAIT) s->mbar = true;
        if (in->op == IR_OP_WG_MMA) {
            const ir_type_desc *a = ir_type_get(k, in->type);
            if (a) s->wg_n = a->n;
            s->wg_sw128 |= (in->imm[2] & IR_WG_MMA_SW128) != 0;
            s->wg_async |= (in->imm[2] & IR_WG_MMA_ASYNC) != 0;
        }
        if (in->op == IR_OP_FRAG_MMA) {
            const ir_type_desc *a = ir_type_get(k, ir_type_of(k, in->operand[0]));
            if (a) s->frag_m = a->m, s->frag_n = a->n, s->frag_k = a->k, s->frag_t = a->elem;
        }
        for (uint32_t j = 0; j < in->n_region; j++) scan(k, &in->region[j], s);
    }
}

static size_t line(char *buf, size_t cap, size_t at, const char *role, const ir_kernel *k, const char *err) {
    char text[256];
    if (!k) {
        snprintf(text, sizeof text, "%s: not built: %s\n", role, err);
    } else {
        summary s = {0};
        scan(k, ir_kernel_body(k), &s);
        uint32_t wg[3];
        ir_val spec;
        ir_workgroup(k, wg, &spec);
        uint32_t shm = 0;
        for (uint32_t i = 0; i < ir_n_shared(k); i++) {
            const ir_shared_decl *d = ir_shared_at(k, i);
            if (d->overlays) continue;
            shm += d->count * (d->elem == IR_F16 || d->elem == IR_BF16  ? 2
                               : d->elem == IR_I64 || d->elem == IR_U64 ? 8
                                                                        : 4);
        }
        int n = snprintf(text, sizeof text, "%s: workgroup %u", role, wg[0] * wg[1] * wg[2]);
        if (shm) n += snprintf(text + n, sizeof text - n, ", %u B workgroup memory", shm);
        if (s.sg_reduce) n += snprintf(text + n, sizeof text - n, ", subgroup reduce");
        if (s.sg_shuffle) n += snprintf(text + n, sizeof text - n, ", subgroup shuffle");
        if (s.frag_m)
            n += snprintf(text + n, sizeof text - n, ", cooperative matrices %ux%ux%u %s", s.frag_m, s.frag_n, s.frag_k,
                          ir_scalar_name(s.frag_t));
        if (s.wg_n)
            n += snprintf(text + n, sizeof text - n, ", warpgroup products m64n%uk16%s%s", s.wg_n,
                          s.wg_sw128 ? " swizzled" : "", s.wg_async ? " in flight" : "");
        if (s.frag_elems) n += snprintf(text + n, sizeof text - n, ", softmax in registers");
        if (s.async_copy) n += snprintf(text + n, sizeof text - n, ", asynchronous copies");
        if (s.tma) n += snprintf(text + n, sizeof text - n, ", tensor-map copies");
        if (s.mbar) n += snprintf(text + n, sizeof text - n, ", memory barriers");
        if (ir_cluster(k) > 1) n += snprintf(text + n, sizeof text - n, ", clusters of %u", ir_cluster(k));
        snprintf(text + n, sizeof text - n, "\n");
    }
    size_t len = strlen(text);
    if (at < cap) snprintf(buf + at, cap - at, "%s", text);
    return at + len;
}

size_t kn_describe(const rt_caps *c, char *buf, size_t cap) {
    /* qwen3-0.6b: 1024 wide, 16 q / 8 kv heads of 128, vocab 151936 */
    const uint32_t d = 1024, nh = 16, nkv = 8, hd = 128, nv = 151936, ctx = 4096, nb = 512;
    const uint32_t qkv = (nh + 2 * nkv) * hd;
    const ir_scalar t = IR_BF16;
    kiln_err err = {0};
    uint32_t g[2];
    kn_rope_opts rope = {hd, true, 1e6f, 1.0f, false};
    static const char *const roles[] = {"rmsnorm", "matvec (decode)", "matmul (prefill)", "qk_prep",
                                        "attention (decode)", "attention (prefill)", "logits head"};
    size_t at = 0;
    for (int i = 0; i < 7; i++) {
        err.msg[0] = 0;
        ir_kernel *k = i == 0 ? kn_rmsnorm(c, d, t, 1e-6f, &err)
                       : i == 1 ? kn_matvec(c, qkv, d, t, t, KN_EPI_NONE, g, &err)
                       : i == 2 ? kn_matmul(c, qkv, d, nb, t, KN_EPI_NONE, g, &err)
                       : i == 3 ? kn_qk_prep(c, nh, nkv, hd, &rope, true, 1e-6f, ctx, t, &err)
                       : i == 4 ? kn_attn_decode(c, nh, nkv, hd, ctx, kn_attn_splits(c, nh, ctx), t, g, &err)
                       : i == 5 ? kn_attn_prefill(c, nh, nkv, hd, qkv, ctx, nb, t, g, &err)
                                : kn_matvec(c, nv, d, t, IR_F32, KN_EPI_NONE, g, &err);
        at = line(buf, cap, at, roles[i], k, err.msg);
        ir_kernel_destroy(k);
    }
    return at;
}
