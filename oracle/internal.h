/* The oracle engine's insides, shared by forward.c (the engine, embeddings, attention,
 * FFN, logits) and deltanet.c (Qwen3.5's Gated DeltaNet layers). Not an interface. */
#ifndef KILN_ORACLE_INTERNAL_H
#define KILN_ORACLE_INTERNAL_H

#include "oracle/oracle.h"
#include "base/pool.h"
#include "oracle/weights.h"

typedef struct orc_layer {
    orc_weight wq, wk, wv, wo, w_gate, w_up, w_down;
    float *attn_norm, *ffn_norm, *bq, *bk, *bv, *q_norm, *k_norm; /* NULL when absent */
    /* a Gated DeltaNet layer (qwen35) */
    orc_weight ssm_qkv, ssm_z, ssm_beta, ssm_alpha, ssm_out;
    float *ssm_conv, *ssm_dt_bias, *ssm_a, *ssm_norm; /* conv, dt_bias and a stay f32 in both modes */
    /* a mixture of experts (qwen3moe): the router (f32 in both modes) and every expert's
     * matrices, expert x's rows at x * (its rows) of each */
    orc_weight router, gate_exps, up_exps, down_exps;
    /* qwen35moe's shared expert: its gate's row (f32 in both modes) and its matrices */
    orc_weight shexp_gate_inp, gate_shexp, up_shexp, down_shexp;
} orc_layer;

/* A copy of every DeltaNet state at a position (see orc_snapshot_take). */
#define ORC_SNAPSHOTS 8
typedef struct orc_snapshot {
    bool valid;
    uint32_t pos;
    float *conv, *S;
} orc_snapshot;

typedef struct orc_engine {
    engine base;
    const model *m;
    arch_hparams hp;
    orc_mode mode;
    uint32_t dtype; /* the 16-bit type of contract mode */
    char name[96];
    orc_weight tok_embd, output;
    float *output_norm, *rope_freqs;
    orc_layer *layers;
    uint32_t q_dim, kv_dim, v_dim, o_dim;
    uint32_t *kv_slot;        /* per layer: its index in the KV cache (attention layers only) */
    uint32_t n_attn;          /* attention layers (all layers but DeltaNet ones) */
    float *k_cache, *v_cache; /* [attention layer][position][kv_dim or v_dim] */
    pool *pool;
    float *scores; /* attention scores: n_ctx per pool worker */
    /* activations for up to cap tokens */
    uint32_t cap;
    float *x, *h, *q, *k, *v, *att, *o, *g, *u;
    float *qg, *gate; /* qwen35 attention: the 2x-wide q projection, the output gates */

    /* Gated DeltaNet (qwen35): the recurrent state, kept for one sequence beside the KV
     * cache. rs_pos is how many positions it has absorbed; hist the tokens at those
     * positions, so a rewind to pos < rs_pos restores the latest snapshot at or before
     * pos (else the zero state) and replays hist from there to pos. */
    uint32_t conv_dim, ssm_vdim; /* 2 k-head blocks + the v heads; v heads x state */
    uint32_t *rs_slot;           /* per layer: its index in the states (DeltaNet layers only) */
    float *conv_state;           /* [DeltaNet layer][conv_kernel - 1][conv_dim]: the last inputs, oldest first */
    float *ssm_S;                /* [DeltaNet layer][v head][v dim][k dim]: S transposed, rows over k */
    int32_t *hist;               /* [n_ctx] */
    uint32_t rs_pos;
    uint64_t replayed;           /* positions re-evaluated by rewinds (tests read it) */
    orc_snapshot snap[ORC_SNAPSHOTS]; /* a ring: the state at the start of recent evals, before their last tokens */
    uint32_t snap_next;
    float *dn_qkv, *dn_x, *dn_z, *dn_b, *dn_a, *dn_o; /* per token: conv_dim, conv_dim, ssm_vdim, v heads x2, ssm_vdim */

    /* a mixture of experts (moe.c), per token: the router's probabilities (n_expert), the
     * chosen experts and their weights (n_expert_used), their outputs (n_expert_used x
     * n_embd); per expert's tokens: the gathered rows (n_embd), gate and up (n_ff_exp),
     * and each row's choice (token * n_expert_used + j) */
    float *moe_p, *moe_w, *moe_y, *moe_in, *moe_g, *moe_u;
    uint32_t *moe_sel, *moe_at;
} orc_engine;

/* Rounds x[0, n) to the contract's 16-bit type (nothing in f32 mode). */
void orc_round16(const orc_engine *e, float *x, uint64_t n);
/* out = x / rms(x) * w over n values, f32 sums. */
void orc_rmsnorm(float *out, const float *x, const float *w, uint32_t n, float eps);
/* out[t] = W in[t] (+ bias) for n tokens, rounded. */
void orc_matmul(orc_engine *e, const orc_weight *w, const float *bias, const float *in, float *out, uint32_t n);

/* A weight vector (every row of t) as f32, rounded to the 16-bit type when round is set
 * and the mode is contract; NULL for t == NULL (and with err on failure). */
float *orc_load_vector(const orc_engine *e, const gguf_tensor *t, bool round, kiln_err *err);

/* deltanet.c: a DeltaNet layer's mixer for n tokens: e->h (the normed input) to e->o
 * (after ssm_out), advancing layer l's state. */
void orc_deltanet(orc_engine *e, uint32_t l, uint32_t n);
/* Zeroes every DeltaNet state (the state before position 0). */
void orc_deltanet_reset(orc_engine *e);
/* Snapshots: take saves the state (at rs_pos) over the ring's oldest, unless one already
 * holds rs_pos (or memory for it is lacking: a snapshot is an optimization only);
 * drop_after forgets those past pos (their tokens are about to change); restore puts back
 * the latest at or before pos, else zeroes the state, and gives the position it holds. */
void orc_snapshot_take(orc_engine *e);
void orc_snapshot_drop_after(orc_engine *e, uint32_t pos);
uint32_t orc_snapshot_restore(orc_engine *e, uint32_t pos);
void orc_snapshot_free(orc_engine *e);
/* moe.c: layer l's mixture of experts for n tokens, e->h to e->o; its weights loaded and freed. */
void orc_moe(orc_engine *e, uint32_t l, uint32_t n);
int orc_moe_load(orc_engine *e, uint32_t l, kiln_err *err);
void orc_moe_free(orc_layer *L);
/* Loads / frees layer l's DeltaNet weights. */
int orc_deltanet_load(orc_engine *e, uint32_t l, kiln_err *err);
void orc_deltanet_free(orc_layer *L);

#endif
