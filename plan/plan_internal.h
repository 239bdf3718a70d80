/* plan/ — what the plan's files share (not part of plan.h): the kernels by role, the
 * shape they are built from, and the engine's state. */
#ifndef KILN_PLAN_PLAN_INTERNAL_H
#define KILN_PLAN_PLAN_INTERNAL_H

#include "base/error.h"
#include "base/pool.h"
#include "base/progress.h"
#include "kernels/kernels.h"
#include "plan/plan.h"
#include "plan/plan_bind.h"

#include <stdbool.h>
#include <stdint.h>

/* The kernels of a plan, by role. */
enum {
    K_EMBED, K_NORM, K_MV_QKV, K_QK_PREP, K_ATTN, K_MV_O, K_MV_FFN, K_MV_DOWN, K_MV_OUT,
    K_MM_QKV, K_ATTN_PREFILL, K_MM_O, K_MM_FF, K_MM_DOWN, K_SWIGLU, K_TAKE_LAST, K_ATTN_MERGE, K_STAGE, K_ARGMAX,
    /* qwen35 only (plan_role_used): the attention output gate's product and kernel, and the
     * Gated DeltaNet layers' products (decode: qkv, z, beta and alpha in one; a block: qkv,
     * z, beta with alpha; out), convolution and recurrence, each for decode and for a block */
    K_MV_AGATE, K_GATE, K_MV_DN_IN, K_MV_DN_OUT, K_CONV, K_DELTANET,
    K_MM_AGATE, K_GATE_BLOCK, K_MM_DN_QKV, K_MM_DN_Z, K_MM_DN_BA, K_MM_DN_OUT, K_CONV_BLOCK, K_DELTANET_BLOCK,
    K_COPY_STATE, K_ZERO_STATE, /* every DeltaNet layer's state into a snapshot and back, or zeroed (plan_state.c) */
    /* a block's convolution is token-parallel (K_CONV_BLOCK) and moves its window after
     * (K_CONV_STATE); its delta rule is chunked: K_DN_PREP, then K_DELTANET_BLOCK (the
     * scan over the chunks), then K_DN_NORM (kernels/deltanet_chunk.c) */
    K_CONV_STATE, K_DN_PREP, K_DN_NORM,
    K_DN_NORM_DECODE, /* decode's gated norm of the delta rule's output (kn_deltanet writes o) */
    /* a step of several slots' tokens only (plan_batch.c): its inputs (tokens and each one's
     * position and slot), the cache stores and attention over the pool, the logits head of
     * every row (f32) and each row's argmax */
    K_STAGE_BATCH, K_QK_PREP_BATCH, K_ATTN_BATCH, K_ATTN_MERGE_BATCH, K_MM_OUT, K_ARGMAX_BATCH,
    /* qwen3moe only: the feed-forward's router, its chosen experts' gate and up products,
     * and their down products' weighted sum (kernels/moe.c), for decode and blocks alike
     * (grid y: the tokens) */
    K_MOE_ROUTE, K_MOE_GATE_UP, K_MOE_DOWN,
    /* a prefill block's experts: its choices grouped by expert, each expert's products over
     * its tokens, the weighted sums (kernels/moe.c) */
    K_MOE_GROUP, K_MOE_GATE_UP_G, K_MOE_DOWN_G, K_MOE_COMBINE,
    K_MOE_SCORES, /* the router's scores, before K_MOE_ROUTE's choice */
    K_MOE_H_COPY, /* an expert cache's decode step: the layer's normed input to host-mapped memory */
    K_COUNT
};
/* Each role's name ("embed", "decode_qkv", ...), for dumps and profiles. */
extern const char *const plan_role[K_COUNT];

/* What the kernels are built from. */
typedef struct plan_shape {
    arch_hparams hp;
    ir_scalar dt;
    uint32_t q_dim, kv_dim, qkv_dim, n_ctx, n_block;
    bool bias, freqs;
    bool fuse_norm; /* the decode step's norms inside the products after them (kn_matvec_norm) */
    /* a short block's and a step's norms inside their skinny products where they apply
     * (plan_skinny_norm; opt-in, KILN_SKINNY_NORM=1: measured slower) */
    bool skinny_norm;
    /* the decode attention merges its runs in its own launch (kn_attn_decode_merged;
     * plan_attn_merged_on) */
    bool attn_merged;
    bool batch_prep; /* building a step's attention in the prep form (plan_batch.c's second recording) */
    uint32_t n_slots; /* plans that will share one upload of the weights (for the memory check) */
    /* more than one slot: the slots' KV caches in one pool of pages (kn_pages: PLAN_PAGE_ROWS
     * rows a page, enough pages for n_ctx positions, each slot's table stride entries, a
     * multiple of RT_VIEW_ALIGN bytes); rows 0: each plan's own cache of n_ctx rows */
    kn_pages pages;
    bool fault_logits; /* rt_debug's planted error in the logits head (KN_EPI_FAULT) */
    /* qwen35: the DeltaNet layers' convolution channels (q, k and v heads) and value width;
     * the rows of their stacked input weight where z and beta begin, and in all
     * (plan_dn_rows: each part starting on a view's alignment) */
    uint32_t conv_dim, dn_v_dim, dn_z_row, dn_ba_row, dn_in_rows;
    /* qwen3moe where not every expert fits: the device cache's experts a layer (slots;
     * plan_moe_cache.c), the others computed by the host. 0: every expert on the device */
    uint32_t moe_slots;
    bool moe_blocks; /* the cache's slots hold the experts in their quantized blocks (else 16 bits) */
} plan_shape;

typedef struct plan_layer {
    rt_buffer *attn_norm, *wqkv, *bqkv, *q_norm, *k_norm, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
    /* qwen35: a full-attention layer's output gate rows (taken out of attn_q, whose
     * query rows go to wqkv); a DeltaNet layer's weights (conv, dt_bias, ssm_a in f32) */
    rt_buffer *w_agate, *dn_out, *dn_conv, *dn_dt_bias, *dn_a, *dn_norm;
    /* a DeltaNet layer's input products stacked in one weight (plan_dn_rows): the rows of
     * qkv, z, beta, then alpha (a decode step's one product); the blocks' products read
     * the views dn_qkv, dn_z and dn_ba (beta's rows with alpha's) */
    rt_buffer *dn_in, *dn_qkv, *dn_z, *dn_ba;
    /* the buffers above are shared by sibling plans; those below are each plan's */
    rt_buffer *kc, *vc;        /* a full-attention layer's KV cache */
    rt_buffer *conv_state, *S; /* a DeltaNet layer's recurrent state (f32): views of plan_engine.state */
    /* block-quantized products (model_layer's q_* groups): the kernels' type of each part
     * (kn_qtype; -1: the 16-bit weight above), q, k and v each in a buffer of its own
     * (qkv_part; wqkv NULL), the others in wo, w_gate, w_up and w_down as kn_quant.h's words */
    rt_buffer *qkv_part[3];
    /* qwen3moe: the router (f32) and the experts' 3-D weights (16-bit, or in their blocks
     * as kn_quant.h's words where qt_exps says so; w_gate, w_up and w_down NULL) */
    rt_buffer *router, *gate_exps, *up_exps, *down_exps;
    int8_t qt_qkv[3], qt_o, qt_gate, qt_up, qt_down, qt_dn_out;
    int8_t qt_exps[3]; /* the experts' gate, up and down where kept in their blocks (every expert resident) */
} plan_layer;
#define PLAN_SNAPSHOTS 2
/* A decode step takes a snapshot where the latest is this many positions back (or there is
 * none): a rewind into decoded tokens replays at most one short block (plan_state.c). */
#define PLAN_SNAP_EVERY 64

/* Prompts, or a prompt's last block, of at most this many tokens run through the short
 * block: products that read each weight once for all its tokens (kn_matmul_skinny). */
#define PLAN_SHORT_BLOCK 64
/* The block a plan takes without --block (where it fits: 512 otherwise): the products'
 * large tiles fill the device at 2048 tokens where they do not at 512 (the H200: qwen3-8b's
 * products 566-679 TFLOP/s at 2048 against 418-603 at 512). Prompts of at most
 * PLAN_MID_BLOCK tokens run through a block of that size with its own tiles. */
#define PLAN_LONG_BLOCK 2048
#define PLAN_MID_BLOCK 512
#define PLAN_SUBS 2 /* the smaller blocks: short, mid */

/* A step of several slots' decoding tokens runs through the recording of the smallest of
 * up to PLAN_BUCKETS sizes (8, 16, 32, 64 tokens; plan_batch_size) that holds them. */
#define PLAN_BUCKETS 4
#define PLAN_BATCH_MAX 64
/* A step's staged inputs: PLAN_BATCH_MAX token ids, then (position, slot) for each
 * (the tokens' view ends on RT_VIEW_ALIGN, where the pairs' begins) */
#define PLAN_BATCH_WORDS (3 * PLAN_BATCH_MAX)

/* A kernel for block-quantized weights (plan_qkernels.c): role's at a block of nb tokens
 * (0: decode and the embedding) for the parts' types qt (-1 past the last part), compiled
 * where a launch first asks for it. */
typedef struct plan_qvar {
    int role;
    uint32_t nb;
    uint32_t slots; /* the expert cache's slots it was built for (plan_shape.moe_slots) */
    int8_t qt[KN_Q_PARTS];
    rt_kernel *k;
    plan_sig sig;
    uint32_t grid[2];
    uint64_t wbytes; /* the weight bytes a launch reads (the products; 0 for the embedding) */
} plan_qvar;

/* The kernels one prefill block's size calls for: the full block's are the plan's own; a
 * smaller block rebuilds those whose shape depends on the block (plan_block_role), the
 * others are the full block's (not owned). */
typedef struct plan_prefill {
    uint32_t n; /* tokens it holds (0: no such block) */
    rt_kernel *kern[K_COUNT];
    plan_sig sig[K_COUNT];
    uint32_t grid[K_COUNT][2];
    rt_recording *rec;
    uint32_t first_launch, n_launch; /* its launches in plan_engine.launch */
    /* a step's bucket where no slot has two of its tokens: the attention in the prep form
     * (plan_attn_prep), kn_qk_prep_batch's launch gone; NULL where the caps have none */
    rt_kernel *attn_prep;
    plan_sig sig_prep;
    uint32_t grid_prep[2];
    rt_recording *rec_prep;
    uint32_t first_prep, n_prep;
} plan_prefill;

/* The host's part of an expert cache (plan_moe_host.c): its threads and scratch. */
typedef struct plan_moe_host {
    pool *pool;
    float *scratch; /* a worker's rows, scratch_per_worker floats each */
    size_t scratch_per_worker;
    float *h, *act;          /* the block's inputs in f32; the misses' SwiGLU rows */
    uint32_t *order, *group; /* the misses grouped by expert */
} plan_moe_host;
typedef struct plan_moe_cache plan_moe_cache; /* plan_moe_cache.c */

/* A paged KV pool's books (plan_pages.c): the owner's, shared by its slots' plans. Pages
 * of PLAN_PAGE_ROWS positions; a table entry PLAN_PAGE_NONE holds none. */
#define PLAN_PAGE_ROWS 64
#define PLAN_PAGE_NONE 0xffffffffu
typedef struct plan_pages plan_pages;

typedef struct plan_engine {
    engine base;
    const model *m;
    rt_device *d;
    plan_shape s;
    char name[200];
    const struct plan_engine *owner; /* NULL: the weight buffers are this plan's; else owner's, borrowed */
    /* the KV caches of every slot's plan in one pool a layer (kpool[l], vpool[l]: the
     * owner's, NULL where the slots keep caches of their own or the layer has none), so a
     * step's kernels reach every sequence's cache (kn_attn_decode_batch); this plan's caches
     * are views of slot `slot`'s rows; slots_taken: the owner's count of slots given out */
    rt_buffer **kpool, **vpool;
    uint32_t slot, slots_taken;
    /* paged (s.pages.rows): the books of the pool's pages (the owner's), the device's tables
     * (the owner's, n_slots rows of s.pages.stride entries) and this slot's row of them */
    plan_pages *pp;
    rt_buffer *pages_dev, *pages;
    uint64_t dev_bytes; /* device buffers this plan allocated (plan_alloc) */
    rt_buffer *tok_embd, *output, *output_norm, *freqs;
    int8_t qt_embd, qt_out; /* tok_embd's and output's kn_qtype where kept in blocks, else -1 */
    plan_layer *L;
    uint16_t *scratch; /* host copy of a converted tensor while the weights load */
    uint64_t scratch_n;
    /* activations for n_block tokens (decode uses row 0); the residual stream x
     * ping-pongs between xa and xb through the fused residual adds */
    rt_buffer *xa, *xb, *h, *qkv, *att, *g, *u, *act, *last, *hl, *logits, *tok, *info;
    rt_buffer *tok_h, *info_h; /* what the host writes (host-mapped); tok and info are their device copies */
    rt_buffer *best;           /* the logits' argmax and max (host-mapped), for greedy decoding */
    /* the argmax's mask (device memory, n_vocab bits): all set, or a grammar's for one
     * eval_argmax_masked (allow_custom: written since, to be set back before an unmasked one) */
    rt_buffer *allow;
    bool allow_custom;
    rt_buffer *part; /* the decode attention's per-run softmax partials (f32) */
    rt_buffer *attn_count; /* kn_attn_decode_merged's counts (u32 a head, zero between launches) */
    /* qwen35: the attention gate's product and the gated output; the DeltaNet layers'
     * projections, convolution output and gated-norm output */
    rt_buffer *agate, *gated, *dn_qkv, *dn_z, *dn_ba, *dn_x, *dn_y;
    rt_buffer *dn_in1, *dn_in1_qkv, *dn_in1_z, *dn_in1_ba; /* a decode step's stacked product, and its views */
    rt_buffer *dn_qk, *dn_uw, *dn_p, *dn_gl, *dn_o; /* the chunked delta rule's f32 scratch (plan_dn_scratch) */
    rt_buffer *moe_sel, *moe_wt, *moe_act; /* qwen3moe: each token's chosen experts, weights, SwiGLU rows */
    rt_buffer *moe_rank, *moe_off, *moe_list, *moe_yc; /* a block's choices grouped by expert, their down rows */
    rt_buffer *moe_scores; /* every token's router scores (f32) */
    /* an expert cache (s.moe_slots): each choice's slot or KN_MOE_MISS (host-mapped, the
     * host's translation of moe_sel), the misses' products (host-mapped), its state */
    rt_buffer *moe_csel, *moe_miss;
    /* the slots each layer's experts' buffers hold now (u32, on the device: the cached
     * kernels read it, so a resize compiles nothing; plan_moe_set_slots writes it) */
    rt_buffer *moe_nslots;
    /* and a decode step's choice and normed input, written by the device straight into
     * host-mapped memory for the host to read without a copy */
    rt_buffer *moe_sel_host, *moe_h_host;
    plan_moe_cache *mc;
    /* qwen35's recurrent state covers positions [0, rs_pos) of the tokens in hist (the
     * state cannot step back: an eval before rs_pos zeroes it and replays hist) */
    int32_t *hist;
    uint32_t rs_pos, replayed, snapshots; /* snapshots taken (tests count them) */
    rt_buffer *state, *snap[PLAN_SNAPSHOTS]; /* every DeltaNet layer's state in one buffer, and its copies */
    uint32_t snap_pos[PLAN_SNAPSHOTS], snap_next; /* where each snapshot stands */
    bool snap_ok[PLAN_SNAPSHOTS];
    rt_kernel *kern[K_COUNT];
    plan_sig sig[K_COUNT]; /* each kernel's parameters, kept from its IR to bind launches by name */
    uint32_t grid[K_COUNT][2];
    uint32_t n_kern;
    rt_launch *launch;
    uint32_t n_launch, cap_launch, n_decode_launch, n_prefill_launch; /* decode's, then the full block's */
    rt_recording *decode, *prefill;
    /* blocks smaller than n_block, ascending, each where it applies (n == 0 otherwise):
     * [0] the short block (the skinny products; not where the device lacks them), [1] the
     * mid block (where n_block is larger) */
    plan_prefill sub[PLAN_SUBS];
    /* the owner's steps of several slots' tokens, by bucket (n == 0: none; plan_batch.c),
     * and their buffers: the host's tokens with each one's position and slot (btok_h; its
     * device copy btok, read through the views btok_tok and btok_pos), the attention's
     * partials, every row's logits and argmax (the other activations are the owner's) */
    plan_prefill batch[PLAN_BUCKETS];
    rt_buffer *btok_h, *btok, *btok_tok, *btok_pos, *bpart, *blogits, *bbest;
    rt_buffer *bcount; /* the step's merged attention's counts (zero between launches) */
    rt_buffer *ballow;          /* every row's argmax mask, as allow */
    uint64_t ballow_custom;     /* rows of ballow not all set (bit t: row t) */
    uint32_t *allow_rows;       /* the host's copy of ballow's rows (the largest bucket's) */
    plan_qvar *qvar; /* the quantized products' kernels, one per role, block and types */
    uint32_t n_qvar, cap_qvar;
    progress prog; /* while the plan is made: layers uploaded, then kernels compiled */
} plan_engine;

extern const engine_ops plan_ops;
/* The smallest of the plan's smaller blocks that holds n tokens, or NULL: the full block. */
const plan_prefill *plan_sub_for(const plan_engine *p, uint32_t n);

/* Formats err; returns -1. */

/* ---- kernel choice (plan_kernels.c) ---- */
/* The shape of a plan for the model: dtype 0 the file's; n_ctx 0 the model's; n_block 0:
 * PLAN_LONG_BLOCK (each within the context). */
int plan_shape_of(const model *m, uint32_t dtype, uint32_t n_ctx, uint32_t n_block, plan_shape *s, kiln_err *err);
bool plan_can_fuse_norm(const plan_shape *s, const rt_caps *c);
/* plan_shape.skinny_norm for a plan: on where KILN_SKINNY_NORM=1 (measured slower than
 * the norms apart: plan_kernels.c). */
bool plan_skinny_norm_on(void);
/* plan_shape.attn_merged: on Vulkan, off on CUDA (measured: plan_kernels.c);
 * KILN_ATTN_MERGED=1 or 0 forces it. */
bool plan_attn_merged_on(const rt_caps *c);
/* The decode step's attention also does kn_qk_prep's work (kn_attn_more.rope): where it
 * merges, the caps take the prep form, and KILN_ATTN_PREP is not 0. (A batched step's
 * only where its slots have a token each: plan_batch.c's second recording.) */
bool plan_attn_prep(const plan_shape *s, const rt_caps *c);
/* The rope options of s's model (kn_qk_prep's). */
kn_rope_opts plan_rope(const plan_shape *s);
/* Whether role i of a block of s->n_block tokens takes the norm before it inside its
 * product (kn_matmul_skinny_norm, X the un-normalized activations and wn the norm's
 * weight; no K_NORM launch): where s->skinny_norm, a short block's skinny product where
 * kn_matmul_skinny_norm_ok, for K_MM_QKV (not qwen35's: its gate product reads the same
 * h) and K_MM_FF with SwiGLU (dense models: the experts keep their norm). A layer whose
 * weight is in blocks still takes K_NORM and its quantized product (plan_record.c). */
bool plan_skinny_norm(const plan_shape *s, const rt_caps *c, int i);
/* The rows of a DeltaNet layer's stacked input weight (plan_shape's dn_*_row, dn_in_rows). */
void plan_dn_rows(plan_shape *s);
/* Builds kernel i for the shape; its grid (x, y) where it follows from the shape. The
 * prefill products are kn_matmul_skinny where the block is short enough and the caps allow
 * (plan_short_block_ok), kn_matmul otherwise. */
ir_kernel *plan_build_kernel(const plan_shape *s, const rt_caps *c, int i, uint32_t g[2], kiln_err *err);
/* Kernel i for the shape, compiled on d, its parameters in *sig and its grid in g; where
 * the device refuses it as unsupported and takes a capability out of its caps meanwhile
 * (rt_device's fallback), built and compiled once more from the caps as they are now. */
rt_kernel *plan_compile_kernel(rt_device *d, const plan_shape *s, int i, uint32_t g[2], plan_sig *sig, kiln_err *err);
/* The same for block-quantized weights whose parts have types qt (plan_build_qkernel). */
rt_kernel *plan_compile_qkernel(rt_device *d, const plan_shape *s, int i, const int8_t qt[KN_Q_PARTS], uint32_t g[2],
                                plan_sig *sig, kiln_err *err);

/* ---- block-quantized products (plan_qkernels.c) ---- */
/* Role i's kernel on block-quantized weights of types qt (q, k, v for the qkv products;
 * gate, up for decode's SwiGLU product; one part elsewhere) at s->n_block tokens, its grid
 * in g. The roles: K_EMBED, K_MV_QKV, K_MV_O, K_MV_FFN, K_MV_DOWN, K_MV_OUT, K_MM_QKV,
 * K_MM_O, K_MM_FF (one of gate or up: no SwiGLU epilogue), K_MM_DOWN, K_MM_OUT. */
ir_kernel *plan_build_qkernel(const plan_shape *s, const rt_caps *c, int i, const int8_t qt[KN_Q_PARTS], uint32_t g[2],
                              kiln_err *err);
/* p's variant for role i at a block of nb tokens and types qt, compiled on first use;
 * NULL with err. */
const plan_qvar *plan_qvariant(plan_engine *p, int i, uint32_t nb, const int8_t qt[KN_Q_PARTS], kiln_err *err);
void plan_qvar_release(plan_engine *p);
/* The variant whose kernel is k, or NULL. */
const plan_qvar *plan_qvar_of(const plan_engine *p, const rt_kernel *k);
/* Whether role i's kernel depends on the prefill block's size. */
bool plan_block_role(int i);
/* Whether a plan of shape s has role i at all (the qwen35 roles only for qwen35). */
bool plan_role_used(const plan_shape *s, int i);
/* Whether qwen35's IMROPE leaves rotary pair i unturned for text (the GPU refuses such sections). */
bool plan_imrope_pair_still(const uint32_t sections[4], uint32_t i);
/* Whether a short block of n tokens takes the skinny products for every projection of the
 * shape on caps c. */
bool plan_short_block_ok(const plan_shape *s, const rt_caps *c, uint32_t n);
/* The tokens of smaller block i (0 short, 1 mid) a plan of shape s builds on caps c, or 0
 * where it builds none; plan_sub_prefix[i] names its kernels in dumps ("short_", "mid_"). */
uint32_t plan_sub_block(const plan_shape *s, const rt_caps *c, int i);
extern const char *const plan_sub_prefix[PLAN_SUBS];
/* Whether a block of s->n_block tokens computes the gate and up products and SwiGLU in
 * one launch (W the gate, Wu the up, Y the activation: the skinny products of a short
 * block, the tma product of a long one), with no K_SWIGLU launch. */
bool plan_ff_swiglu(const plan_shape *s, const rt_caps *c);
/* The chunked delta rule's shape for a block of nb tokens (its chunk: plan_kernels.c). */
kn_deltanet_shape plan_dn_shape(const plan_shape *s, const rt_caps *c, uint32_t nb);
/* The chunked delta rule's scratch for the largest of the plan's blocks (elements of
 * each f32 buffer; every smaller block's fits in it). 0, or -1 with err. */
int plan_dn_scratch(const plan_shape *s, const rt_caps *c, kn_deltanet_scratch *out, kiln_err *err);

/* ---- weights and memory (plan_weights.c) ---- */
rt_buffer *plan_alloc(plan_engine *p, size_t bytes, kiln_err *err);
/* b's bytes set to zero (an upload); 0, or -1 with err. */
int plan_zero(rt_device *d, rt_buffer *b, kiln_err *err);
/* A device buffer of bytes, zeroed; NULL with err. */
rt_buffer *plan_alloc_zeroed(rt_device *d, size_t bytes, kiln_err *err);
/* A buffer of plan_alloc's released, its bytes no longer counted. */
void plan_release(plan_engine *p, rt_buffer *b);
/* Rows [r0, r0 + n) of t, converted to the plan's 16-bit type, into b at element at. */
int plan_upload_rows(plan_engine *p, rt_buffer *b, uint64_t at, const gguf_tensor *t, uint64_t r0, uint64_t n,
                     kiln_err *err);
/* The device bytes a plan of shape s takes (the expert cache's slots where s has them). */
uint64_t plan_bytes_of(const model *m, const plan_shape *s, const rt_device *d);
/* Every weight converted and uploaded (q, k, v fused), progress per layer. 0 or -1. */
int plan_upload_weights(plan_engine *p, kiln_err *err);
/* The owner's weight buffers, read-only in every kernel, so plans can share them. */
int plan_borrow_weights(plan_engine *p, const plan_engine *o);
/* What the device refuses, or 0: the whole plan past its memory, or one buffer past what
 * a kernel may bind. */
int plan_check_fit(const model *m, const plan_shape *s, const rt_device *d, kiln_err *err);

/* ---- the recordings (plan_record.c) ---- */
/* Appends the launches of a decode step / a prefill block to p->launch, each bound by
 * name (plan_bind); 0, or -1 with err (a binding the kernel refuses, out of memory). */
int plan_record_decode(plan_engine *p, kiln_err *err);
/* A prefill block of b's size with b's kernels (the full block: b NULL). */
int plan_record_prefill(plan_engine *p, const plan_prefill *b, kiln_err *err);

/* ---- the recurrent state (plan_state.c) ---- */
/* The bytes of one DeltaNet layer's convolution state and of its S (f32). */
void plan_state_sizes(const plan_shape *s, size_t *conv, size_t *S);
/* The bytes of every DeltaNet layer's state in one buffer: layer j (j-th recurrent layer)
 * has its convolution state at j * *stride, its S at j * *stride + *s_at (view-aligned). */
size_t plan_state_layout(const plan_shape *s, size_t *s_at, size_t *stride);
/* Where the plan takes snapshots: at an eval's start past 0; a single token's only where
 * the latest snapshot is PLAN_SNAP_EVERY or more positions back. */
int plan_state_before_eval(plan_engine *p, uint32_t pos, uint32_t n, kiln_err *err);
/* Every DeltaNet layer's state to zero (position 0). */
int plan_state_reset(plan_engine *p, kiln_err *err);
/* A snapshot of the state at rs_pos (none where one is there already), in the ring of
 * PLAN_SNAPSHOTS. */
int plan_state_snapshot(plan_engine *p, kiln_err *err);
/* The state at pos <= rs_pos: snapshots past pos dropped (their tokens change now), the
 * latest at or before pos restored (else zero), the remembered tokens from there to pos
 * evaluated again, and a snapshot taken at pos after such a replay. */
int plan_state_rewind(plan_engine *p, uint32_t pos, kiln_err *err);
/* Evaluates tokens at pos through the recordings (plan.c), the history and rs_pos kept. */
int plan_run_blocks(plan_engine *p, const int32_t *tokens, uint32_t n, uint32_t pos, float *logits, bool all,
                    kiln_err *err);

/* ---- steps of several slots' tokens (plan_batch.c) ---- */
/* Whether role i is one a step's bucket builds for its own size (the others it takes
 * from the plan). */
bool plan_batch_role(int i);
/* The tokens of bucket i (ascending) a plan of shape s builds on caps c, or 0: none (one
 * slot, a recurrent model, a planted logits fault, or no products at that size). */
uint32_t plan_batch_size(const plan_shape *s, const rt_caps *c, int i);
/* The attention's runs per head in a step of nb tokens (kn_attn_splits over nb heads' worth). */
uint32_t plan_batch_splits(const plan_shape *s, const rt_caps *c, uint32_t nb);
/* The device bytes the buckets add to the owner (0 where it builds none). */
uint64_t plan_batch_bytes(const plan_shape *s, const rt_caps *c);
/* The owner's buckets: buffers, kernels and recordings. 0, or -1 with err. */
int plan_batch_build(plan_engine *p, kiln_err *err);
void plan_batch_release(plan_engine *p);
/* The step of items (engine_ops.eval_step). */
int plan_eval_step(engine_step *items, uint32_t n);
/* The argmax mask of the plan's own recordings (plan.c): allow's bits, or all (NULL). */
int plan_set_allow(plan_engine *p, const uint32_t *allow, kiln_err *err);
/* The words of an argmax mask (n_vocab bits). */
static inline uint32_t plan_allow_words(const plan_shape *s) { return (s->hp.n_vocab + 31) / 32; }
/* Stages a step of n tokens (token 0 at positions 0..n-1 of the plan's slot) for a profile. */
int plan_batch_stage_profile(plan_engine *p, uint32_t n, kiln_err *err);
/* Whether kernel k is role i's in the plan, one of its smaller blocks or its buckets. */
bool plan_owns_kernel(const plan_engine *p, int i, const rt_kernel *k);
/* A bucket's launches (plan_record.c). */
int plan_record_batch(plan_engine *p, const plan_prefill *b, bool prep, kiln_err *err);

/* ---- the expert cache (plan_moe_cache.c) and the host's experts (plan_moe_host.c) ---- */
/* Where not every expert fits the device: each layer's experts in s.moe_slots slots of
 * its gate_exps, up_exps and down_exps (the cache), a slot map on the host. A recording
 * is cut after each layer's router: between the segments the host reads the choice,
 * translates it into slots (moe_csel), computes the misses (plan_moe_host_run) into
 * moe_miss; after an eval the most used missing experts take the least used slots, and
 * every PLAN_MOE_RECHECK evals the cache follows the device's free memory (or
 * --mem-limit), shrinking or growing. */
#define PLAN_MOE_RECHECK 16
/* The slots a plan of shape s (moe_slots set to anything) may give its cache on d: the
 * most that fit what the device has free (or --mem-limit) less a margin, at least 1, at
 * most n_expert - 1; 0 where every expert fits. held: the bytes the plan holds on the
 * device now (0 before it allocates). */
uint32_t plan_moe_slots_fit(const model *m, const plan_shape *s, const rt_device *d, uint64_t held);
/* Whether a cache of m's experts can hold them in their blocks: every layer's kept so
 * (model_layer.q_exps) and one expert's rows whole words of every plane. */
bool plan_moe_blocks_ok(const model *m);
/* The u32 words of a decode step's normed input row (K_MOE_H_COPY's copy, moe_h_host). */
static inline uint32_t plan_moe_h_words(const plan_shape *s) { return (s->hp.n_embd * 2 + 3) / 4; }
/* moe_nslots := slots (the cached kernels' bound on the slots they read). */
int plan_moe_set_slots(plan_engine *p, uint32_t slots, kiln_err *err);
/* The cache's state for the plan (its weight buffers are uploaded by plan_moe_upload). */
int plan_moe_cache_init(plan_engine *p, kiln_err *err);
void plan_moe_cache_free(plan_engine *p);
/* Layer l's cache buffers allocated and filled (experts by score, else 0, 1, ...). */
int plan_moe_upload(plan_engine *p, uint32_t l, kiln_err *err);
/* A cut after the launch just added (the recorder's): after layer l's router
 * (PLAN_CUT_ROUTE), or after a block's pass of its experts' kernels (PLAN_CUT_PASS, which
 * the host may replay with other experts in the slots). 0, or -1 with err. */
enum { PLAN_CUT_ROUTE, PLAN_CUT_PASS };
int plan_moe_cut(plan_engine *p, uint32_t l, int kind, kiln_err *err);
/* Launches [first, first + n) recorded as segments at the cuts among them; the first
 * segment's recording returned (the plan keeps it where it keeps any recording). */
rt_recording *plan_moe_record(plan_engine *p, uint32_t first, uint32_t n, kiln_err *err);
/* Replays rec's segments for n tokens, the host's part between them, then the cache's
 * upkeep. */
int plan_moe_replay(plan_engine *p, rt_recording *rec, uint32_t n, kiln_err *err);
/* engine_ops.expert_stats: false where the plan keeps every expert on the device. */
bool plan_moe_stats(const engine *e, engine_expert_stats *st);
int plan_moe_host_init(plan_moe_host *mh, const arch_hparams *hp, uint32_t n_block, kiln_err *err);
void plan_moe_host_free(plan_moe_host *mh);
/* The n_miss misses (choice c = t k + j of expert e: choice[i], expert[i]) of layer ml for
 * the block's n normed inputs h (the plan's 16-bit type): each one's rounded product into
 * out[c][0..n_embd), the weights as the device holds them (exact: a quantized file's
 * dequantized f32 values, else rounded to the plan's 16-bit type). 0, or -1 with err. */
int plan_moe_host_run(plan_moe_host *mh, const model_layer *ml, const arch_hparams *hp, bool bf16, bool exact,
                      const uint16_t *h, uint32_t n, const uint32_t *choice, const uint32_t *expert, uint32_t n_miss,
                      uint16_t *out, kiln_err *err);
/* Every recording released and the launches dropped (plan.c). */
void plan_release_recordings(plan_engine *p);
/* The launches and recordings of the decode step, the full block and the smaller blocks
 * from the kernels as they are (plan.c; the expert cache's recordings cut). 0 or -1. */
int plan_record_all(plan_engine *p, kiln_err *err);

/* ---- grid tuning (plan_tune.c) ---- */
/* The decode step's products on the grids measured fastest on the device. 0 or -1. */
int plan_tune_products(plan_engine *p, kiln_err *err);

/* ---- the paged KV pool (plan_pages.c) ---- */
plan_pages *plan_pages_create(uint32_t n_pages, uint32_t stride, uint32_t n_slots);
void plan_pages_destroy(plan_pages *pp);
/* slot s's plan (for truncating its cache when its pages are taken), or gone: its pages freed */
void plan_pages_attach(plan_pages *pp, uint32_t s, plan_engine *p);
void plan_pages_detach(plan_pages *pp, uint32_t s);
/* a busy slot (a request served) or a pinned one (in the step being staged) gives no pages */
void plan_pages_busy(plan_pages *pp, uint32_t s, bool busy);
void plan_pages_pin(plan_pages *pp, uint32_t s, bool pinned);
/* Pages for slot s's positions [0, positions): 0, or -1 with err (KILN_ERR_FULL: every other
 * page held by busy or pinned slots). */
int plan_pages_reserve(plan_pages *pp, uint32_t s, uint32_t positions, kiln_err *err);
/* Positions slot s could hold now (its pages, the free ones and what idle slots hold). */
uint32_t plan_pages_room(plan_pages *pp, uint32_t s);
/* The tables uploaded to dev where they changed. */
int plan_pages_sync(plan_pages *pp, rt_device *d, rt_buffer *dev, kiln_err *err);
/* p's pages for positions [0, positions), the device's tables brought up to date (nothing
 * for an unpaged plan). 0, or -1 with err. */
int plan_pages_ready(plan_engine *p, uint32_t positions, kiln_err *err);
/* engine_ops.set_busy and room of a plan: its slot in the owner's books (no-ops, and n_ctx,
 * for an unpaged plan) */
void plan_pages_set_busy(plan_engine *p, bool busy);
uint32_t plan_pages_room_of(plan_engine *p);

#endif
