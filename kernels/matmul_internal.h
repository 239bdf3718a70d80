/* What the prefill product's variants share (matmul.c: the staged cooperative-matrix and
 * tiled kernels; matmul_pipe.c: the multi-stage pipeline of asynchronous copies). */
#ifndef KILN_KERNELS_MATMUL_INTERNAL_H
#define KILN_KERNELS_MATMUL_INTERNAL_H

#include "kernels/kn_common.h"
#include "kernels/kn_quant.h"

typedef struct mm {
    kx k;
    uint32_t rows, cols, n_max;
    uint32_t invocations; /* per workgroup */
    ir_scalar dtype;
    unsigned epi;
    ir_buf w, x, y, info, b, res, wu; /* wu: the up's weights (KN_EPI_SWIGLU) */
    ir_val lid, n; /* n = min(info[1], n_max) */
} mm;

/* The product's parameters (W, X, Y, info, then b and res as the epilogue asks), lid and n:
 * every variant's, in one order. */
void mm_params(mm *m);
/* The same for block-quantized W (kn_quant.h): its stacked parts' planes as u32 buffers
 * W, W1, W2 into w, then X, Y, info, b and res, a grid wait, lid and n. */
void mm_params_q(mm *m, const kn_qlayout *L, uint32_t n_parts, ir_buf w[KN_Q_PARTS]);
/* A variant's kernel named name: its mm made, its parameters declared, built by build
 * (with the variant's cfg), verified; groups from the build. NULL with err. */
typedef void (*mm_build_fn)(mm *m, const void *cfg, uint32_t groups[2]);
ir_kernel *mm_make(const char *name, const rt_caps *c, uint32_t rows, uint32_t cols, uint32_t n_max, ir_scalar dtype,
                   unsigned epi, mm_build_fn build, const void *cfg, uint32_t groups[2], kiln_err *err);
/* A shape every variant takes: rows, cols and n_max nonzero, n_max a multiple of 64, and
 * the u32 indices n_max * cols, n_max * rows and rows * cols below 2^32. */
bool mm_shape_ok(uint32_t rows, uint32_t cols, uint32_t n_max);
/* t < n and r < rows: an output that exists */
ir_val mm_exists(const mm *m, ir_val t, ir_val r);
/* Y[t][r .. r + lanes) = the epilogue of sum[0..lanes), one vector store when lanes > 1
 * (t * rows + r is then a multiple of lanes: lanes divides rows and r). */
void mm_store_y(const mm *m, ir_val t, ir_val r, const ir_val *sum, uint32_t lanes);
/* Work item i = lid + j * invocations for i < count (unrolled when there are few per
 * invocation); body gets i. */
typedef void (*mm_item_fn)(const mm *m, ir_val i, const void *arg);
void mm_for_items(const mm *m, uint32_t count, mm_item_fn body, const void *arg);

/* ---- matmul.c: chunks of X and W staged in workgroup memory (the cooperative-matrix and
 * tiled variants) ---- */
/* One chunk of X or W into workgroup memory: `tile` rows from first_row (clamped to
 * last_row), columns first_col .. first_col + n_cols in vectors of `lanes`; columns past
 * cols read zero when masked. Element (row, col) lands at row * row_stride + col *
 * col_stride; the values are stored as the array's type (f32 converts). */
typedef struct stage_arg {
    ir_buf src;
    ir_shm dst;
    ir_val first_row, first_col;
    uint32_t last_row, n_cols, lanes, row_stride, col_stride;
    bool masked, to_f32;
} stage_arg;

/* How a variant walks cols: the X and W chunks it stages (x_tile tokens, w_tile rows;
 * first_col, n_cols and masked are set per chunk), and its math on a staged chunk of
 * n_cols columns (the tail is zero-padded to a multiple of col_step); pipelined or not. */
typedef struct mm_w_stager mm_w_stager;
typedef struct chunker {
    stage_arg sx, sw;
    const mm_w_stager *wq;   /* W staged by this instead of sw (never pipelined), or NULL */
    uint32_t x_tile, w_tile; /* tokens and rows staged per chunk */
    uint32_t cols_per_chunk;
    uint32_t col_step; /* columns the math takes at a time */
    uint32_t n_acc;    /* accumulators carried through the chunks */
    bool pipelined;
    void (*math)(const mm *m, const void *q, ir_val *acc, uint32_t n_cols);
    const void *q;
} chunker;

/* acc = the math over all of cols: full chunks in a loop (pipelined: the next chunk's loads
 * in flight during the math), then the zero-padded tail. */
void mm_run_chunks(const mm *m, chunker *ch, ir_val *acc);

/* A W that is not plain dtype rows (block-quantized weights): its own code stages each
 * chunk into the tiled kernel's f32 array, transposed (element (row, col) of the chunk at
 * col * stride + row), tile rows from r0 (rows past the product's clamped to its last) and
 * n_cols columns from first_col. */
struct mm_w_stager {
    void (*stage)(const mm *m, const mm_w_stager *q, ir_shm ws, uint32_t stride, ir_val r0, uint32_t tile,
                  ir_val first_col, uint32_t n_cols);
    const void *arg;
    uint32_t kc_unit; /* chunks (and cols) are whole multiples of it */
};
/* The tiled kernel (matmul.c): each invocation a block of outputs in f32 registers over
 * chunks staged transposed in f32; W from m->w, or from wq where given. false where no
 * chunk fits caps.shared_bytes (or, with wq, none of kc_unit's multiples does). */
bool mm_build_simt(mm *m, const mm_w_stager *wq, uint32_t groups[2]);

/* ---- matmul_coop.c: cooperative matrices staged through workgroup memory ---- */
typedef struct coop_tile coop_tile;
/* A block-quantized W for the cooperative-matrix kernel (matmul_q_coop.c): its stager
 * writes each chunk's codes less their offset (small integers, exact in the 16-bit type)
 * row-major at w_stride a row into the staged W, and each sub-step's scale and min (f32,
 * [sub-step][row], the min 0 for types without one) into ss and ms, which mm_build_coop
 * declares (with w_stride) before the chunks are staged. */
typedef struct mm_coop_q {
    const mm_w_stager *wq;
    uint32_t step; /* columns a sub-step: 16 or 32 (whole sub-blocks of every part) */
    bool has_min;  /* some part has mins */
    ir_shm ss, ms;
    uint32_t w_stride;
} mm_coop_q;
typedef struct mm_coop_cfg {
    const rt_mma_shape *shape; /* the fragments' */
    const coop_tile *tile;     /* 64 x 64 or 128 x 128 */
    uint32_t kc;               /* columns per chunk */
    uint32_t band;             /* tokens of a subgroup's sums stored a round */
    mm_coop_q *q;              /* a quantized W (set by its caller), or NULL */
} mm_coop_cfg;
/* The variant's fragments, tile and chunk for this product, or false (then the tiled
 * kernel runs): a dtype x dtype -> f32 shape with M and N dividing 32 and K dividing 64,
 * the tile's subgroups within the workgroup limit, its staging within caps.shared_bytes. */
bool mm_coop_pick(const rt_caps *c, ir_scalar dt, uint32_t rows, uint32_t n_max, mm_coop_cfg *cfg);
/* The same for a quantized W of q_step-column sub-steps (16 or 32; 0: plain W): 16x16x16
 * fragments and chunks of 32 columns at least, the scales' arrays within the memory. */
bool mm_coop_pick_q(const rt_caps *c, ir_scalar dt, uint32_t rows, uint32_t n_max, uint32_t q_step,
                    mm_coop_cfg *cfg);
void mm_build_coop(mm *m, const mm_coop_cfg *cfg, uint32_t groups[2]);

/* ---- matmul_coop2.c: workgroup-scope cooperative matrices, tensor-addressed loads ---- */
typedef struct mm_coop2_cfg {
    const rt_mma_shape *shape; /* the caps.wg_mma entry: granularities and the workgroup's size */
    uint32_t acc_t, acc_r;     /* an accumulator's tokens and rows */
    uint32_t n_t, n_r;         /* accumulators along tokens and rows: the tile */
    uint32_t kc;               /* columns a step */
    bool staged;               /* X and W staged through workgroup memory by the invocations
                                * (the next chunk's loads in flight), fragments loaded from
                                * there; else tensor-addressed loads from the buffers */
} mm_coop2_cfg;
/* The variant for this dtype, or false: caps.wg_mma has a dtype x dtype -> f32 entry whose
 * granularities divide the fragments (64 x 128 accumulators, two along tokens, 32 columns a
 * step; KILN_COOP2=acc_t,acc_r,n_t,n_r,kc another tiling and KILN_COOP2_STAGED=1 the staged
 * loads, for measuring: 32 x 128 accumulators, four along tokens, by default there), its workgroup
 * within the limits, an accumulator's staged sums within caps.shared_bytes less what the
 * compiler keeps, a grid of at least half the compute units; and KILN_MATMUL_COOP is not
 * small or large (those force matmul_coop.c's
 * tiles). */
bool mm_coop2_pick(const rt_caps *c, ir_scalar dt, uint32_t rows, uint32_t n_max, mm_coop2_cfg *cfg);
void mm_build_coop2(mm *m, const mm_coop2_cfg *cfg, uint32_t groups[2]);

/* ---- matmul_stage.c: a chunk of X or W into workgroup memory by asynchronous copies ---- */
#define MM_COPY 8 /* elements per copy (16 bytes) */
typedef enum mm_layout {
    MM_ROWS,  /* row-major, `pitch` elements a row */
    MM_CORE,  /* 8x8 core matrices (wg.mma's plain layout): (r, k) at (r / 8) kc 8 + (k / 8) 64 +
               * (r % 8) 8 + k % 8, so a core matrix is 128 bytes */
    MM_SW128, /* wg.mma's 128-byte swizzle (IR_WG_MMA_SW128): (r, k) at (r / 8) 512 +
               * (k / 64) tile 64 + (r % 8) 64 + ((k / 8 ^ r) % 8) 8 + k % 8 */
} mm_layout;
typedef struct mm_stage {
    ir_buf src;
    ir_shm dst;
    uint32_t tile;        /* rows staged (tokens of X, rows of W) */
    uint32_t last_row;    /* rows past it are clamped to it (they reach no stored output) */
    uint32_t stage_elems; /* of one ring slot */
    uint32_t kc;          /* columns per chunk */
    uint32_t pitch;       /* MM_ROWS: elements per staged row */
    mm_layout layout;
    ir_val first_row;
    uint32_t offset; /* elements from a slot's start to this operand's (both in one ring) */
} mm_stage;
/* Issues the copies of chunk (columns chunk * kc ..) into ring slot slot: each invocation a
 * few 16-byte copies, columns past cols zero-filled. */
void mm_issue_stage(const mm *m, const mm_stage *s, ir_val chunk, ir_val slot);

/* ---- matmul_wg.c: the warpgroup (wgmma) variant ---- */
typedef struct mm_wg_cfg {
    uint32_t tile_r; /* rows of Y per workgroup (128, 192 or 256): each warpgroup's m64 x tile_r */
    uint32_t kc;     /* columns per chunk (64 or 128: whole swizzled rows) */
    uint32_t stages; /* ring slots (3..8 async, 2..8 not) */
    bool async;      /* products left in flight one chunk (wg.mma.async) */
} mm_wg_cfg;
/* The warpgroup variant's shape for this product and epilogue, or false: caps.wgmma and
 * asynchronous copies, a 16-bit dtype, cols a multiple of 8, the ring within
 * caps.shared_bytes (SwiGLU: 64-column chunks). */
bool mm_wg_pick(const rt_caps *c, ir_scalar dtype, uint32_t rows, uint32_t cols, uint32_t n_max, unsigned epi,
                mm_wg_cfg *cfg);
void mm_build_wg(mm *m, const mm_wg_cfg *cfg, uint32_t groups[2]);
/* Workgroups of the variant's grid for the shape */
uint64_t mm_wg_grid(const mm_wg_cfg *cfg, uint32_t rows, uint32_t n_max, unsigned epi);
/* KILN_MATMUL_WG names a shape: kn_matmul then takes it whatever its grid */
bool mm_wg_forced(void);
/* The epilogue of a 128-token tile of two warpgroups' m64 x tile_r accumulators, through
 * workgroup memory: mm_tile_sums stores warpgroup wg's (0, 1) sums into cs (f32,
 * mm_tile_sums_elems of them: free memory, an overlay of a ring no one reads any more);
 * mm_tile_out, reached by the whole workgroup (a barrier, then every invocation's share),
 * writes Y's tokens t0.. x rows r0.. (out_r: tile_r, or half with KN_EPI_SWIGLU) in
 * vectors with the epilogue applied. */
void mm_tile_sums(const mm *m, ir_val acc, ir_val wg, ir_shm cs, uint32_t tile_r);
void mm_tile_out(const mm *m, ir_shm cs, ir_val t0, ir_val r0, uint32_t tile_r, uint32_t out_r);
uint32_t mm_tile_sums_elems(uint32_t tile_r);

/* ---- matmul_tma.c: the tensor copy engine feeding warpgroup products ---- */
typedef struct mm_tma_cfg {
    uint32_t tile_r;  /* rows of W per workgroup (128, 192 or 256): each consumer's m64 x tile_r */
    uint32_t cluster; /* workgroups a cluster sharing W's tile (1 or 2) */
    uint32_t stages;  /* ring slots (3..8, as many as the workgroup memory holds) */
} mm_tma_cfg;
/* The variant's shape for this product, or false: caps.tma and caps.wgmma, a 16-bit dtype,
 * cols a multiple of 8, rows of 2, 288 invocations a workgroup, 3 slots at least. */
bool mm_tma_pick(const rt_caps *c, ir_scalar dtype, uint32_t rows, uint32_t cols, uint32_t n_max, unsigned epi,
                 mm_tma_cfg *cfg);
void mm_build_tma(mm *m, const mm_tma_cfg *cfg, uint32_t groups[2]);
uint64_t mm_tma_grid(const mm_tma_cfg *cfg, uint32_t rows, uint32_t n_max, unsigned epi);
/* Whether kn_matmul takes the variant (its shape in cfg): where it fits and its grid covers
 * half the SMs, as the warpgroup variant's (a tiny model's products stay on the pipeline or
 * the tiled kernel), or where KILN_MATMUL_TMA names a shape. */
bool mm_tma_takes(const rt_caps *c, ir_scalar dtype, uint32_t rows, uint32_t cols, uint32_t n_max, unsigned epi,
                  mm_tma_cfg *cfg);

/* ---- matmul_pipe.c ---- */
typedef struct mm_pipe_cfg {
    uint32_t warps_t, warps_r; /* subgroups across tokens and rows */
    uint32_t frags_m, frags_n; /* 16x8 accumulators per subgroup along tokens and rows */
    uint32_t kc;               /* columns per stage (a multiple of 16) */
    uint32_t stages;           /* chunks in flight (2..8) */
} mm_pipe_cfg;
/* The pipeline's shape for this device and product, or false (then matmul.c's variants
 * run): asynchronous copies, mma m16n8k16 of dtype, 32-lane subgroups, cols a multiple of
 * 8 (16-byte copies) and the stages within caps.shared_bytes. */
bool mm_pipe_pick(const rt_caps *c, ir_scalar dtype, uint32_t rows, uint32_t cols, uint32_t n_max, mm_pipe_cfg *cfg);
void mm_build_pipe(mm *m, const mm_pipe_cfg *cfg, uint32_t groups[2]);

/* ---- matmul_q_mma.c: block-quantized weights on the matrix units (kn_matmul_q's variant) ---- */
typedef struct qm_cfg {
    uint32_t warps_t, warps_r; /* subgroups along tokens and rows */
    uint32_t frags_t, frags_r; /* 16-token and 8-row fragments per subgroup */
    uint32_t stages;           /* chunks in flight (2..6) */
} qm_cfg;
/* The variant's shape (the largest tile whose grid fills the device), or false: CUDA's 16x8x16 fragments of dt with their elements exposed,
 * asynchronous copies, cols a multiple of 64, every part but the last whole tiles of rows,
 * the ring within caps.shared_bytes; KILN_MATMUL_Q_MMA=0 refuses it. */
bool kn_matmul_q_mma_pick(const rt_caps *c, const kn_qlayout *L, uint32_t n_parts, uint32_t rows, uint32_t cols,
                          uint32_t n_max, ir_scalar dt, qm_cfg *cfg);
ir_kernel *kn_matmul_q_mma(const rt_caps *c, const kn_qlayout *L, uint32_t n_parts, uint32_t rows, uint32_t cols,
                           uint32_t n_max, ir_scalar dtype, unsigned epi, const qm_cfg *cfg, uint32_t groups[2],
                           kiln_err *err);

/* ---- matmul_q_coop.c: block-quantized weights on cooperative matrices (matmul_coop.c's tiles) ---- */
/* The variant's tile for this product, or false: not CUDA (its own variant exposes the
 * fragments' elements), 16x16x16 fragments of dt, the tile and the scales within
 * caps.shared_bytes; emulated fragments, or KILN_MATMUL_Q_COOP=1 on a GPU (opt-in until
 * it has run right on one); KILN_MATMUL_Q_COOP=0 refuses it. */
bool kn_matmul_q_coop_pick(const rt_caps *c, const kn_qlayout *L, uint32_t n_parts, uint32_t rows, uint32_t n_max,
                           ir_scalar dt, mm_coop_cfg *cfg);
ir_kernel *kn_matmul_q_coop(const rt_caps *c, const kn_qlayout *L, uint32_t n_parts, uint32_t rows, uint32_t cols,
                            uint32_t n_max, ir_scalar dtype, unsigned epi, mm_coop_cfg *cfg, uint32_t groups[2],
                            kiln_err *err);

/* ---- matmul_q_tiled.c: block-quantized weights decoded into the tiled kernel's chunks ---- */
/* kn_matmul_q as the tiled kernel, W's chunks decoded to their exact f32 values. NULL with
 * err untouched where the device's workgroup memory holds no chunk of whole sub-blocks
 * (the per-row kernel then serves), NULL with err set on a failure. */
ir_kernel *kn_matmul_q_tiled(const rt_caps *c, const kn_qlayout *L, uint32_t n_parts, uint32_t rows, uint32_t cols,
                             uint32_t n_max, ir_scalar dtype, unsigned epi, uint32_t groups[2], kiln_err *err);

#endif
