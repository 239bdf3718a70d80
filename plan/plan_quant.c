/* ggml's quantized blocks repacked into the device's planes (kernels/kn_quant.h): codes
 * and scales from gguf_block_unpack, written where the quantized kernels read them. */
#include "base/error.h"
#include "plan/plan_quant.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

int plan_qtype(uint32_t gguf_type) {
    switch (gguf_type) {
    case GGUF_T_Q4_0: return KN_Q4_0;
    case GGUF_T_Q4_1: return KN_Q4_1;
    case GGUF_T_Q5_0: return KN_Q5_0;
    case GGUF_T_Q5_1: return KN_Q5_1;
    case GGUF_T_Q8_0: return KN_Q8_0;
    case GGUF_T_Q2_K: return KN_Q2_K;
    case GGUF_T_Q3_K: return KN_Q3_K;
    case GGUF_T_Q4_K: return KN_Q4_K;
    case GGUF_T_Q5_K: return KN_Q5_K;
    case GGUF_T_Q6_K: return KN_Q6_K;
    default: return -1;
    }
}

/* bits-bit field v into the plane at word `at`, entry i (entries packed from bit 0). */
static void put(uint32_t *w, uint64_t at, uint32_t bits, uint64_t i, uint32_t v) {
    uint64_t bit = i * bits;
    w[at + bit / 32] |= v << (bit % 32);
}

int plan_quant_pack(const gguf_tensor *t, uint64_t t_row0, uint32_t n_rows, const kn_qlayout *L, uint32_t row0,
                    uint32_t *words, kiln_err *err) {
    const gguf_type_info *ti = gguf_type_info_of(t->type);
    const kn_qformat *f = kn_qformat_of(L->type);
    if (plan_qtype(t->type) != (int)L->type || t->ne[0] != L->cols || row0 + (uint64_t)n_rows > L->rows ||
        t_row0 + n_rows > gguf_tensor_nrows(t))
        return kiln_fail(err, KILN_ERR_INVALID, "'%s' (%s, %llu columns) does not fit a %s layout of %u x %u", t->name,
                         ti ? ti->name : "?", (unsigned long long)t->ne[0], f->name, L->rows, L->cols);
    uint32_t per_row = L->cols / ti->block, lo_mask = (1u << f->lo_bits) - 1;
    uint64_t row_bytes = (uint64_t)per_row * ti->block_bytes;
    gguf_qblock qb;
    for (uint32_t r = 0; r < n_rows; r++) {
        const uint8_t *src = t->data + (t_row0 + r) * row_bytes;
        for (uint32_t bk = 0; bk < per_row; bk++) {
            gguf_block_unpack(t->type, src + (uint64_t)bk * ti->block_bytes, &qb);
            uint64_t e0 = (uint64_t)(row0 + r) * L->cols + (uint64_t)bk * ti->block;
            for (uint32_t j = 0; j < ti->block; j++) {
                put(words, L->lo, f->lo_bits, e0 + j, qb.code[j] & lo_mask);
                if (f->hi_bits) put(words, L->hi, f->hi_bits, e0 + j, (uint32_t)qb.code[j] >> f->lo_bits);
            }
            uint64_t u = e0 / f->unit; /* a block is one unit */
            put(words, L->d, 16, u, qb.d);
            if (f->has_min) put(words, L->dm, 16, u, qb.dm);
            for (uint32_t s = 0; f->k_quant && s < ti->block / f->sub; s++) {
                put(words, L->sc, 8, e0 / f->sub + s, (uint8_t)qb.sc[s]);
                if (f->has_min) put(words, L->mn, 8, e0 / f->sub + s, qb.mn[s]);
            }
        }
    }
    return 0;
}

typedef struct pack_piece {
    const gguf_tensor *t;
    const kn_qlayout *L;
    uint32_t *words;
    uint32_t row0, rows;
    kiln_err err;
    int rc;
} pack_piece;

static void *pack_piece_run(void *arg) {
    pack_piece *p = arg;
    p->rc = plan_quant_pack(p->t, p->row0, p->rows, p->L, p->row0, p->words, &p->err);
    return NULL;
}

int plan_quant_pack_all(const gguf_tensor *t, const kn_qlayout *L, uint32_t *words, int threads, kiln_err *err) {
    enum { MAX_THREADS = 16 };
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    uint32_t pairs = (L->rows + 1) / 2, per = (pairs + (uint32_t)threads - 1) / (uint32_t)threads;
    if ((uint64_t)L->rows * L->cols < (1u << 20) || per == 0) /* small: not worth the threads */
        return plan_quant_pack(t, 0, L->rows, L, 0, words, err);
    pack_piece piece[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    int n = 0;
    for (uint32_t r = 0; r < L->rows && n < threads; r += 2 * per, n++) {
        uint32_t rows = L->rows - r < 2 * per ? L->rows - r : 2 * per;
        piece[n] = (pack_piece){t, L, words, r, rows, {0}, 0};
        started[n] = pthread_create(&th[n], NULL, pack_piece_run, &piece[n]) == 0;
        if (!started[n]) pack_piece_run(&piece[n]); /* no thread: this one does it */
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        if (piece[i].rc && !rc) rc = -1, *err = piece[i].err;
    }
    return rc;
}
