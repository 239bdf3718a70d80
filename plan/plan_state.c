/* qwen35's recurrent state on the device: each DeltaNet layer's convolution state and
 * delta-rule state S (f32), all of them in one buffer (the layers' views), the tokens they
 * have absorbed (hist, rs_pos), and a ring of PLAN_SNAPSHOTS copies of that buffer: a
 * snapshot or a restore is one kn_copy launch (qwen3.5-0.8b: 19 MB, qwen3.5-4b: 50 MB),
 * a reset one kn_zero launch. A recurrence cannot step back: an eval at pos < rs_pos
 * restores the latest snapshot at or before pos, else zeroes the state, evaluates the
 * remembered tokens from there to pos again (in prefill blocks: the KV entries of the
 * attention layers they rewrite come out as the first pass wrote them, up to the blocks'
 * summation order), and takes a snapshot at pos.
 *
 * Where snapshots are taken (plan_state_before_eval): at the start of every eval past 0
 * of more than one token, and of a single token's where the latest snapshot is
 * PLAN_SNAP_EVERY or more positions back (or there is none): a decode step pays one
 * copy every 64 steps instead of one each, and a rewind into generated tokens replays at
 * most 63 of them, one short block. A prompt is evaluated whole (one block), not split
 * before its last token: re-evaluating the last token of a fully cached prompt (how
 * generate gets its logits) replays the prompt from the snapshot at its start once, and
 * the snapshot taken after that replay serves every later time. */
#include "base/error.h"
#include "plan/plan_internal.h"

#include <stdlib.h>

void plan_state_sizes(const plan_shape *s, size_t *conv, size_t *S) {
    const arch_hparams *hp = &s->hp;
    *conv = hp->ssm_conv_kernel ? (size_t)(hp->ssm_conv_kernel - 1) * s->conv_dim * 4 : 0;
    *S = (size_t)hp->ssm_v_heads * hp->ssm_state * hp->ssm_state * 4;
}

size_t plan_state_layout(const plan_shape *s, size_t *s_at, size_t *stride) {
    size_t conv, S;
    plan_state_sizes(s, &conv, &S);
    *s_at = (conv + RT_VIEW_ALIGN - 1) / RT_VIEW_ALIGN * RT_VIEW_ALIGN;
    *stride = (*s_at + S + RT_VIEW_ALIGN - 1) / RT_VIEW_ALIGN * RT_VIEW_ALIGN;
    return (size_t)s->hp.n_recurrent * *stride;
}

int plan_state_reset(plan_engine *p, kiln_err *err) {
    rt_arg a = {p->state, 0};
    rt_launch l = {p->kern[K_ZERO_STATE], {p->grid[K_ZERO_STATE][0], 1, 1}, &a, 1};
    if (p->d->ops->run(p->d, &l, 1, err)) return -1;
    p->rs_pos = 0;
    return 0;
}

/* The state copied into snapshot i (to_snap) or back from it. */
static int copy_states(plan_engine *p, int i, bool to_snap, kiln_err *err) {
    rt_arg a[2] = {{to_snap ? p->state : p->snap[i], 0}, {to_snap ? p->snap[i] : p->state, 0}};
    rt_launch l = {p->kern[K_COPY_STATE], {p->grid[K_COPY_STATE][0], 1, 1}, a, 2};
    return p->d->ops->run(p->d, &l, 1, err);
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
    p->snapshots++;
    return 0;
}

int plan_state_before_eval(plan_engine *p, uint32_t pos, uint32_t n, kiln_err *err) {
    if (plan_state_rewind(p, pos, err)) return -1;
    if (!pos) return 0;
    bool recent = false;
    for (int i = 0; i < PLAN_SNAPSHOTS; i++) recent |= p->snap_ok[i] && pos - p->snap_pos[i] < PLAN_SNAP_EVERY;
    return n > 1 || !recent ? plan_state_snapshot(p, err) : 0;
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
    return pos > from ? plan_state_snapshot(p, err) : 0;
}
