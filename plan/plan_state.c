/* qwen35's recurrent state on the device: each DeltaNet layer's convolution state and
 * delta-rule state S (f32), the tokens they have absorbed (hist, rs_pos), and a ring of
 * PLAN_SNAPSHOTS copies of them. A recurrence cannot step back: an eval at pos < rs_pos
 * restores the latest snapshot at or before pos, else zeroes the state, and evaluates
 * the remembered tokens from there to pos again (in prefill blocks: the KV entries of the
 * attention layers they rewrite come out as the first pass wrote them, up to the blocks'
 * summation order). plan.c takes a snapshot at the start of every eval past 0 and, where
 * only the last token's logits are wanted, before that token: so re-evaluating the last
 * token (how generate gets the logits of a fully cached prompt) or going back into the
 * last eval copies a state back instead of replaying; anything older costs a prefill of
 * what lies between the snapshot (or 0) and pos. A snapshot is one kn_copy launch a state
 * buffer (qwen3.5-0.8b: 18 layers, 19 MB). */
#include "base/error.h"
#include "plan/plan_internal.h"

#include <stdlib.h>

void plan_state_sizes(const plan_shape *s, size_t *conv, size_t *S) {
    const arch_hparams *hp = &s->hp;
    *conv = hp->ssm_conv_kernel ? (size_t)(hp->ssm_conv_kernel - 1) * s->conv_dim * 4 : 0;
    *S = (size_t)hp->ssm_v_heads * hp->ssm_state * hp->ssm_state * 4;
}

int plan_state_reset(plan_engine *p, kiln_err *err) {
    const arch_hparams *hp = &p->s.hp;
    size_t conv, S;
    plan_state_sizes(&p->s, &conv, &S);
    size_t big = conv > S ? conv : S;
    void *zero = calloc(1, big);
    if (!zero) return kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    int rc = 0;
    for (uint32_t l = 0; l < hp->n_layer && !rc; l++)
        if (p->L[l].S)
            rc = p->d->ops->upload(p->d, p->L[l].conv_state, 0, zero, conv, err) ||
                 p->d->ops->upload(p->d, p->L[l].S, 0, zero, S, err);
    free(zero);
    if (!rc) p->rs_pos = 0;
    return rc ? -1 : 0;
}

/* Every DeltaNet layer's state copied into snapshot i (to_snap) or back from it. */
static int copy_states(plan_engine *p, int i, bool to_snap, kiln_err *err) {
    const arch_hparams *hp = &p->s.hp;
    rt_launch *l = calloc(2 * (size_t)hp->n_recurrent, sizeof *l);
    rt_arg *a = calloc(4 * (size_t)hp->n_recurrent, sizeof *a);
    if (!l || !a) return free(l), free(a), kiln_fail(err, KILN_ERR_NOMEM, "out of memory");
    uint32_t n = 0;
    for (uint32_t layer = 0; layer < hp->n_layer; layer++) {
        plan_layer *L = &p->L[layer];
        if (!L->S) continue;
        rt_buffer *state[2] = {L->conv_state, L->S};
        for (int b = 0; b < 2; b++) {
            int k = b ? K_COPY_S : K_COPY_CONV;
            a[2 * n] = (rt_arg){to_snap ? state[b] : L->snap[i][b], 0};
            a[2 * n + 1] = (rt_arg){to_snap ? L->snap[i][b] : state[b], 0};
            l[n] = (rt_launch){p->kern[k], {p->grid[k][0], 1, 1}, &a[2 * n], 2};
            n++;
        }
    }
    int rc = n ? p->d->ops->run(p->d, l, n, err) : 0;
    free(l), free(a);
    return rc;
}

int plan_state_snapshot(plan_engine *p, kiln_err *err) {
    for (int i = 0; i < PLAN_SNAPSHOTS; i++)
        if (p->snap_ok[i] && p->snap_pos[i] == p->rs_pos) return 0;
    int i = (int)p->snap_next;
    p->snap_ok[i] = false;
    if (copy_states(p, i, true, err)) return -1;
    p->snap_pos[i] = p->rs_pos;
    p->snap_ok[i] = true;
    p->snap_next = (p->snap_next + 1) % PLAN_SNAPSHOTS;
    return 0;
}

int plan_state_rewind(plan_engine *p, uint32_t pos, kiln_err *err) {
    if (pos > p->rs_pos)
        return kiln_fail(err, KILN_ERR_INVALID, "position %u is past the %u positions of the recurrent state", pos,
                         p->rs_pos);
    for (int i = 0; i < PLAN_SNAPSHOTS; i++)
        if (p->snap_pos[i] > pos) p->snap_ok[i] = false;
    if (pos == p->rs_pos) return 0;
    int best = -1;
    for (int i = 0; i < PLAN_SNAPSHOTS; i++)
        if (p->snap_ok[i] && (best < 0 || p->snap_pos[i] > p->snap_pos[best])) best = i;
    if (best >= 0 ? copy_states(p, best, false, err) : plan_state_reset(p, err)) return -1;
    uint32_t from = best >= 0 ? p->snap_pos[best] : 0;
    p->rs_pos = from;
    if (pos > from && plan_run_blocks(p, p->hist + from, pos - from, from, NULL, false, err)) return -1;
    p->replayed += pos - from;
    return 0;
}
