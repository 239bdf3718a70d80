/* The HTTP side of `kiln serve`: an OpenAI-compatible server on libmicrohttpd over one
 * loaded model. Each slot (an engine with its KV cache, a generation session and a worker
 * thread) generates one request at a time; requests beyond the free slots wait in a
 * bounded queue. A slot keeps its session between requests, so a prompt that starts like
 * one it served evaluates only what is new; a request goes to the free slot holding the
 * longest part of its prompt. */
#ifndef KILN_SERVER_HTTP_H
#define KILN_SERVER_HTTP_H

#include "generate/sampler.h"
#include "model/engine.h"
#include "text/chat.h"
#include "text/tok.h"

#include <stddef.h>
#include <stdint.h>

#define SRV_BODY_LIMIT (1u << 20) /* request bodies over 1 MiB: 413 */
#define SRV_MAX_PARALLEL 64u

typedef struct srv_config {
    const char *host;           /* IPv4 address to bind ("127.0.0.1") */
    uint16_t port;              /* 0: any free port (printed) */
    const char *api_key;        /* NULL: no authentication */
    const char *model_id;       /* the id /v1/models lists and responses name */
    engine *const *engines;     /* [parallel]: one per slot, the same model and n_ctx; safe to evaluate from
                                   one thread each (engine_serialize where they share a device) */
    const tokenizer *tok;
    chat_family family;
    const char *default_system; /* the template's system message when a chat has none; NULL */
    const samp_params *samp;    /* the server's sampling defaults */
    uint32_t parallel;          /* slots, 1..SRV_MAX_PARALLEL */
    uint32_t queue;             /* requests that may wait when every slot is busy; more: 503 */
    bool reasoning_none;        /* --reasoning-format none: think blocks stay in content */
} srv_config;

/* Serves until SIGINT or SIGTERM (blocked in the calling thread and the ones it starts),
 * then stops accepting, cancels in-flight generation and returns 0; 1 after printing why
 * it could not start. Prints "listening on http://HOST:PORT" on stdout first. */
int srv_serve(const srv_config *cfg);

#endif
