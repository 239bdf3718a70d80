/* The plan's profile: where a decode step's and a prefill block's time goes, by kernel
 * role, with the bandwidth or FLOP rate of the kernels that bound it. */
#include "base/clock.h"
#include "base/error.h"
#include "plan/plan_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* Weight (or cache) bytes one launch of kernel i reads in a decode step at position pos:
 * what bounds it, for the profile's bandwidth column (0: not a streaming kernel). */
static uint64_t decode_bytes(const plan_shape *s, int i, uint32_t pos) {
    const arch_hparams *hp = &s->hp;
    uint64_t d = hp->n_embd, e = 2; /* bf16/f16 */
    switch (i) {
    case K_MV_QKV: return e * s->qkv_dim * d;
    case K_MV_O: return e * d * s->q_dim;
    case K_MV_FFN: return 2 * e * hp->n_ff * d;
    case K_MV_DOWN: return e * d * hp->n_ff;
    case K_MV_OUT: return e * hp->n_vocab * d;
    case K_ATTN: return 2 * e * (uint64_t)(pos + 1) * s->kv_dim;
    case K_MOE_SCORES: return 4ull * hp->n_expert * d; /* the f32 router */
    case K_MOE_GATE_UP: return 2 * e * hp->n_expert_used * (uint64_t)hp->n_ff_exp * d;
    case K_MOE_DOWN: return e * hp->n_expert_used * (uint64_t)hp->n_ff_exp * d;
    default: return 0;
    }
}

/* FLOPs one launch of prefill kernel i does for a full block (0: not a matrix kernel):
 * for the profile's rate column. */
static uint64_t prefill_flops(const plan_shape *s, int i, uint32_t n, bool ff_swiglu) {
    const arch_hparams *hp = &s->hp;
    uint64_t d = hp->n_embd, nb = n;
    switch (i) {
    case K_MM_QKV: return 2 * nb * s->qkv_dim * d;
    case K_MM_O: return 2 * nb * d * s->q_dim;
    case K_MM_FF: return (ff_swiglu ? 4 : 2) * nb * hp->n_ff * d; /* the gate and the up in one launch */
    case K_MM_DOWN: return 2 * nb * d * hp->n_ff;
    case K_ATTN_PREFILL: return 2ull * 2 * hp->n_head * hp->head_dim_k * (nb * (nb + 1) / 2); /* causal, from 0 */
    default: return 0;
    }
}

/* Weight bytes one launch of a step's kernel i reads (its products; 0: not one). */
static uint64_t step_bytes(const plan_shape *s, int i, bool ff_swiglu) {
    const arch_hparams *hp = &s->hp;
    uint64_t d = hp->n_embd, e = 2;
    switch (i) {
    case K_MM_QKV: return e * s->qkv_dim * d;
    case K_MM_O: return e * d * s->q_dim;
    case K_MM_FF: return (ff_swiglu ? 2 : 1) * e * hp->n_ff * d;
    case K_MM_DOWN: return e * d * hp->n_ff;
    case K_MM_OUT: return e * hp->n_vocab * d;
    default: return 0;
    }
}

/* Times the recording rec (launches [first, first + count) of p->launch) replayed reps
 * times, then each launch run reps times back to back, and prints them by role. */
/* pos: the decode step's position, or the prefill block's token count. */
static int profile_span(plan_engine *p, rt_recording *rec, uint32_t first, uint32_t count, uint32_t reps, bool prefill,
                        uint32_t pos, FILE *out, kiln_err *err) {
    rt_device *d = p->d;
    rt_launch *l = malloc(reps * sizeof *l);
    if (!l) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    double t_role[K_COUNT] = {0};
    uint32_t n_role[K_COUNT] = {0}, grid_role[K_COUNT] = {0};
    uint64_t qbytes_role[K_COUNT] = {0}; /* the weight bytes of the role's quantized launches */
    uint32_t nq_role[K_COUNT] = {0};
    double t0 = clock_now_s();
    for (uint32_t r = 0; r < reps; r++)
        if (d->ops->replay(d, rec, err)) return free(l), -1;
    double t_step = (clock_now_s() - t0) / reps;
    for (uint32_t i = first; i < first + count; i++) {
        int k = 0;
        while (k < K_COUNT && !plan_owns_kernel(p, k, p->launch[i].kernel)) k++;
        if (k == K_COUNT) return free(l), kiln_fail(err, KILN_ERR_INTERNAL, "a launch of no role's kernel");
        const plan_qvar *qv = plan_qvar_of(p, p->launch[i].kernel);
        if (qv) qbytes_role[k] += qv->wbytes, nq_role[k]++;
        for (uint32_t r = 0; r < reps; r++) l[r] = p->launch[i];
        if (d->ops->run(d, l, 1, err)) return free(l), -1; /* warm */
        t0 = clock_now_s();
        if (d->ops->run(d, l, reps, err)) return free(l), -1;
        t_role[k] += (clock_now_s() - t0) / reps;
        n_role[k]++;
        grid_role[k] = p->launch[i].groups[0] * p->launch[i].groups[1];
    }
    free(l);
    double sum = 0;
    plan_shape sb = p->s; /* the block the recording is of */
    bool step = false;
    for (int bi = 0; bi < PLAN_SUBS; bi++)
        if (rec == p->sub[bi].rec) sb.n_block = p->sub[bi].n;
    for (int bi = 0; bi < PLAN_BUCKETS; bi++)
        if (rec == p->batch[bi].rec) sb.n_block = p->batch[bi].n, step = true;
    bool ff_swiglu = prefill && plan_ff_swiglu(&sb, &d->caps);
    bool flops = prefill && !step; /* a step's products stream their weights: GB/s */
    if (step)
        fprintf(out, "step of %u slots' tokens (bucket %u) on %s, each launch run %u times back to back:\n", pos,
                sb.n_block, d->label, reps);
    else if (prefill)
        fprintf(out, "prefill block of %u tokens (of %u) on %s, each launch run %u times back to back:\n", pos,
                sb.n_block,
                d->label, reps);
    else
        fprintf(out, "decode step on %s at position %u, each launch run %u times back to back:\n", d->label, pos, reps);
    fprintf(out, "  %-24s %8s %8s %10s %10s %9s\n", "kernel", "launches", "grid", "us each", "us/step",
            flops ? "TFLOP/s" : "GB/s");
    for (int k = 0; k < K_COUNT; k++) {
        if (!n_role[k]) continue;
        double each = t_role[k] / n_role[k];
        uint64_t b = step      ? step_bytes(&p->s, k, ff_swiglu)
                     : prefill ? prefill_flops(&p->s, k, pos, ff_swiglu)
                               : decode_bytes(&p->s, k, pos);
        /* quantized products read their blocks (a launch's own bytes; a role's layers may
         * differ in type): the mean over the role's launches */
        if (nq_role[k] && !flops) b = (qbytes_role[k] + (uint64_t)(n_role[k] - nq_role[k]) * b) / n_role[k];
        fprintf(out, "  %-24s %8u %8u %10.2f %10.1f", plan_role[k], n_role[k], grid_role[k], each * 1e6,
                t_role[k] * 1e6);
        if (b) fprintf(out, flops ? " %9.2f" : " %9.1f", b / each * (flops ? 1e-12 : 1e-9));
        fputc('\n', out);
        sum += t_role[k];
    }
    if (prefill)
        fprintf(out, "  sum of launches %.1f us; the recorded %s replayed: %.1f us (%.0f tok/s)\n", sum * 1e6,
                step ? "step" : "block", t_step * 1e6, pos / t_step);
    else
        fprintf(out, "  sum of launches %.1f us; the recorded step replayed: %.1f us (%.1f tok/s)\n", sum * 1e6,
                t_step * 1e6, 1.0 / t_step);
    return 0;
}


int plan_profile(engine *e, uint32_t reps, uint32_t n_prefill, uint32_t n_step, FILE *out, kiln_err *err) {
    if (e->ops != &plan_ops)
        return kiln_fail(err, KILN_ERR_UNSUPPORTED, "a profile needs a GPU device (the oracle runs no kernels)");
    plan_engine *p = (plan_engine *)e;
    if (reps == 0) reps = 1;
    uint32_t pos = e->n_past ? e->n_past - 1 : 0;
    if (profile_span(p, p->decode, 0, p->n_decode_launch, reps, false, pos, out, err)) return -1;
    /* a prefill block of n_prefill tokens (0: a full block) from position 0 (token 0
     * throughout), fewer repeats: each launch is a block's worth of work */
    uint32_t nb = p->s.n_block, n = n_prefill && n_prefill < nb ? n_prefill : nb, info[2] = {0, n};
    const plan_prefill *b = plan_sub_for(p, n); /* what a block of n tokens runs */
    int32_t *zeros = calloc(nb, sizeof *zeros);
    if (!zeros) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    rt_device *d = p->d;
    int rc = plan_pages_ready(p, n > n_step ? n : n_step, err) || d->ops->upload(d, p->tok_h, 0, zeros, (size_t)nb * 4, err) ||
                     d->ops->upload(d, p->info_h, 0, info, sizeof info, err) ||
                     (b ? profile_span(p, b->rec, b->first_launch, b->n_launch, reps < 10 ? reps : 10, true, n, out,
                                       err)
                                  : profile_span(p, p->prefill, p->n_decode_launch, p->n_prefill_launch,
                                                 reps < 10 ? reps : 10, true, n, out, err))
                 ? -1
                 : 0;
    free(zeros);
    e->n_past = 0; /* the cache now holds the profile's block, not the run's tokens */
    if (!rc && n_step > 1) {
        const plan_prefill *sb = NULL;
        for (int bi = PLAN_BUCKETS - 1; bi >= 0; bi--)
            if (p->batch[bi].rec && n_step <= p->batch[bi].n) sb = &p->batch[bi];
        if (!sb) return kiln_fail(err, KILN_ERR_UNSUPPORTED, "no step of %u slots' tokens on this plan", n_step);
        if (plan_batch_stage_profile(p, n_step, err)) return -1;
        rc = profile_span(p, sb->rec, sb->first_launch, sb->n_launch, reps, true, n_step, out, err);
        e->n_past = 0;
    }
    return rc;
}
