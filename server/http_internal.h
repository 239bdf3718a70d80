/* What the files behind srv_serve share (internal to server/): the server and its slots
 * (slots.c), a request's job and its generation (job*.c), the libmicrohttpd replies and
 * routes (http_*.c). Locks: the server's mu guards the slots' hand-over, the queue and the
 * counters; a job's mu guards its done flag and its stream's bytes. */
#ifndef KILN_SERVER_HTTP_INTERNAL_H
#define KILN_SERVER_HTTP_INTERNAL_H

#include "base/error.h"
#include "generate/generate.h"
#include "server/api.h"
#include "server/api_response.h"
#include "server/http.h"
#include "server/tools.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- bytes (buf.c) ------------------------------------------------------------------------ */

/* A growable byte string, kept NUL-terminated. */
typedef struct buf { char *p; size_t n, cap; } buf;

/* Appends p[n]; false when out of memory (b unchanged). */
bool srv_buf_add(buf *b, const char *p, size_t n);

/* ---- the server and its slots (slots.c) --------------------------------------------------- */

typedef struct job job;
typedef struct server server;

typedef struct slot {
    server *srv;
    engine *engine;
    gen_session *session; /* kept between requests for prefix reuse */
    pthread_t worker;
    bool started;
    /* under srv->mu */
    bool busy;            /* a request holds the slot */
    uint64_t last_used;   /* when it last took a request: ties go to the least recent */
    job *job;             /* handed to the worker, not yet taken */
} slot;

struct server {
    const srv_config *cfg;
    slot *slots;
    uint32_t n_slots;
    char bos[128];
    int32_t end_turn;
    gram_vocab *gvocab;   /* the vocabulary's prefix tree for constrained decoding */
    pthread_mutex_t mu;
    pthread_cond_t cv;    /* a slot freed, a job handed to a worker, stopping */
    uint32_t busy, waiting;
    uint64_t ticket_next, ticket_serving; /* waiting requests take slots in arrival order */
    uint64_t uses;
    bool quit;            /* the workers end (after the daemon stopped) */
    atomic_bool stopping;
    atomic_uint_fast64_t next_id;
    /* for /metrics, under mu */
    uint64_t requests, prompt_tokens, cached_tokens, completion_tokens;
    double generate_s;
};

typedef enum { SLOT_OK, SLOT_FULL, SLOT_STOPPING } slot_status;

/* The slots' sessions; their workers start later (srv_slots_start), once the signals are
 * blocked. 0, or -1 when out of memory. */
int srv_slots_create(server *s);
int srv_slots_start(server *s);
/* Ends the workers (every job is finished: the daemon has stopped) and frees the slots. */
void srv_slots_free(server *s);

/* Waits in the fair queue for a free slot and takes the one that suits prompt ids[n]
 * best: SLOT_OK with *out, SLOT_FULL when the queue is full, SLOT_STOPPING. */
slot_status srv_slot_acquire(server *s, const int32_t *ids, uint32_t n, slot **out);
void srv_slot_release(slot *sl);
/* Hands the job to the slot's worker (the caller holds the slot). */
void srv_slot_dispatch(slot *sl, job *j);

/* ---- a request's job (job.c, job_prompt.c, job_logprobs.c, job_stream.c) ------------------ */

/* A request's log-probabilities: one entry per generated token, reported in the order
 * the text that holds them goes out. */
typedef struct lp_state {
    bool on;
    uint32_t k;          /* alternatives per token */
    tok_stream mirror;   /* the loop's detokenizer, fed the same tokens: where each text ends */
    size_t produced;     /* bytes the mirror produced */
    size_t emitted;      /* bytes emitted (streaming) */
    size_t head;         /* entries [0, head) are reported (streaming) */
    size_t raw;          /* token bytes of the reported entries (legacy text_offset) */
    size_t base;         /* the legacy text_offset of the first token: the prompt's bytes */
    srv_token_logprob *lp;
    srv_token_span *span; /* where each entry's text lies in the output */
    char **text;          /* each entry's token and alternatives' bytes (its texts point here) */
    size_t n, cap;
    bool failed;         /* out of memory */
} lp_state;

/* One request's generation, shared by the connection thread and the slot's worker. */
struct job {
    server *srv;
    srv_request req;
    int32_t *ids;
    uint32_t n_ids;
    char id[48];
    int64_t created;
    lp_state lps;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;           /* the worker is finished with the job (under mu) */
    /* streaming: the queue of SSE bytes, guarded by mu */
    buf q;
    size_t q_off;
    bool failed;
    atomic_bool cancel;
    /* constrained decoding (req.grammar) */
    gram *gram;
    gram_match *match;
    /* chat output split into reasoning, content and tool calls */
    bool think_opened;   /* the prompt ends inside a think block */
    bool split_think;    /* reasoning_content is separated */
    bool tools_on;       /* tool calls are parsed */
    srv_think think;
    buf calls;           /* streaming: text held as a possible tool call */
    bool in_call;        /* streaming: a call's tag was seen */
    size_t lp_ready;     /* streaming: log-probability entries ready to go with the next chunk */
    /* plain: the whole answer and how it went */
    buf text;
    gen_result res;
    int rc;
    kiln_err err;
};

/* A job for the request body[len] at the endpoint, parsed and its prompt tokenized; NULL
 * with e filled (a 4xx, or 500 when out of memory). */
job *srv_job_create(server *s, srv_endpoint ep, const char *body, size_t len, srv_error *e);
void srv_job_wait(job *j);
void srv_job_free(job *j);
/* Runs the generation on the slot's session (the job holds the slot). */
int srv_job_generate(slot *sl, job *j, gen_emit emit, gen_result *res, kiln_err *err);
srv_usage srv_job_usage(const gen_result *r);
/* A plain request on the slot: the whole answer into the job, then done. */
void srv_job_run_plain(slot *sl, job *j);
/* A finished plain job's answer: the completion's JSON (NULL when out of memory). */
char *srv_job_answer(const job *j);

/* The prompt's ids: chat messages through the template (the template writes BOS), a
 * completion's text with the model's BOS. 0, or -1 with e filled. */
int srv_prompt_ids(server *s, const srv_request *r, int32_t **ids, uint32_t *n, bool *think_opened, srv_error *e);
/* Chat output after generation: reasoning and content split, tool calls parsed. */
typedef struct srv_split {
    buf reasoning, content;
    bool has_reasoning;
    srv_calls calls;
} srv_split;
/* Splits text[n] for job j; 0, or -1 when out of memory. */
int srv_split_output(const job *j, const char *text, size_t n, srv_split *out);
void srv_split_free(srv_split *s);

/* gen_on_token for a job (ctx): records the token's log-probabilities. */
int srv_lp_on_token(void *ctx, int32_t id, const float *logits, uint32_t n_vocab);
void srv_lp_free(lp_state *L);

/* A streamed request on the slot: SSE events into the job's queue, [DONE] last. */
void srv_stream_run(slot *sl, job *j);
/* The response of a streamed request on slot sl: it reads what the worker queues. */
enum MHD_Result srv_stream_start(struct MHD_Connection *c, slot *sl, job *j);

/* ---- HTTP (http_reply.c, http_metrics.c, http_routes.c) ----------------------------------- */

/* Queues text (malloc'ed; NULL: a 500 out-of-memory error instead) with its content type. */
enum MHD_Result srv_send_text(struct MHD_Connection *c, unsigned status, char *text, const char *type);
/* An OpenAI error object; with a header (name: value) where the status calls for one
 * (405's Allow, 401's WWW-Authenticate; NULL: none). */
enum MHD_Result srv_send_error(struct MHD_Connection *c, const srv_error *e, const char *hdr, const char *value);
enum MHD_Result srv_fail(struct MHD_Connection *c, int status, const char *param, const char *code, const char *fmt,
                         ...) __attribute__((format(printf, 5, 6)));

/* GET /metrics: Prometheus' text format (NULL when out of memory). */
char *srv_metrics_text(server *s);

/* libmicrohttpd's access handler (cls: the server) and its request-completed callback. */
enum MHD_Result srv_handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                           const char *version, const char *upload, size_t *upload_size, void **con_cls);
void srv_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe);

#endif
