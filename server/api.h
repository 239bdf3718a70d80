/* The OpenAI-compatible API's request side: a request body (JSON bytes) parsed and
 * validated into a C struct, and errors in OpenAI's shape. Pure functions: the HTTP
 * layer hands bytes in and sends the text out. */
#ifndef KILN_SERVER_API_H
#define KILN_SERVER_API_H

#include "generate/sampler.h"
#include "text/chat.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_MAX_STOP 4
#define SRV_MAX_TOP_LOGPROBS 20
#define SRV_MAX_LEGACY_LOGPROBS 5 /* /v1/completions' integer logprobs */

/* ---- errors ------------------------------------------------------------------------------- */

/* OpenAI's error object. OpenAI itself types every 4xx (401 and 404 included)
 * "invalid_request_error" and tells them apart by code ("invalid_api_key",
 * "model_not_found"), and every 5xx "server_error"; its client maps classes by status. */
typedef struct srv_error {
    int status;          /* HTTP status */
    const char *type;    /* "invalid_request_error" or "server_error" */
    const char *code;    /* static string, or NULL for JSON null */
    char param[64];      /* the offending field, "" for JSON null */
    char message[256];
} srv_error;

/* Fills e; type follows from status. param and code may be NULL. */
void srv_error_set(srv_error *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* {"error":{"message","type","param","code"}} as malloc'ed text; NULL when out of memory. */
char *srv_error_json(const srv_error *e);

/* ---- requests ----------------------------------------------------------------------------- */

typedef enum srv_endpoint { SRV_CHAT, SRV_COMPLETION } srv_endpoint;

/* What the server allows; the parser checks requests against it. */
typedef struct srv_limits {
    uint32_t max_tokens;         /* largest max_tokens accepted (the context size) */
    uint32_t default_max_tokens; /* when the request names none (<= max_tokens) */
    const samp_params *defaults; /* the server's sampling defaults; NULL: samp_params_default */
} srv_limits;

typedef enum srv_tool_choice { SRV_TOOLS_AUTO, SRV_TOOLS_NONE, SRV_TOOLS_REQUIRED, SRV_TOOLS_NAMED } srv_tool_choice;

typedef struct srv_request {
    srv_endpoint endpoint;
    char *model;              /* NULL when not given */
    chat_msg *messages;       /* chat: roles are static strings, contents malloc'ed */
    size_t n_messages;
    char *prompt;             /* completions */
    uint32_t max_tokens;
    samp_params samp;
    char *stop[SRV_MAX_STOP];
    size_t n_stop;
    bool stream, include_usage;
    bool logprobs;
    uint32_t top_logprobs;    /* alternatives per token (0 with logprobs: the chosen one only) */
    /* constrained decoding: GBNF text (response_format, or tool_choice required/named) */
    char *grammar;
    bool grammar_given;       /* grammar is the request's own "grammar" field */
    /* tools: each tool's JSON ({"type":"function","function":{...}}) as the templates write
     * it, and its function's name and parameters schema (NULL: none given) */
    char **tools;
    char **tool_names;
    size_t n_tools;
    srv_tool_choice tool_choice;
    char *tool_named;         /* SRV_TOOLS_NAMED: the function */
    bool parallel_tool_calls; /* default true */
    bool no_thinking;         /* chat_template_kwargs.enable_thinking: false */
} srv_request;

/* Parses body[len] (any bytes) for the endpoint into r. 0, or -1 with e filled (a 4xx,
 * or 500 when out of memory) and r left empty. Unknown fields are ignored, null means
 * absent; known fields of the wrong type or range name themselves in e->param. Sampling
 * starts from lim->defaults; as with kiln's CLI flags, naming any sampling field without
 * temperature samples at 0.8 when the defaults are greedy. */
int srv_request_parse(srv_request *r, srv_endpoint endpoint, const char *body, size_t len, const srv_limits *lim,
                      srv_error *e);
/* The tool-call grammar of a request whose tool_choice is required or named, for the
 * template family (the call syntax each family's models were trained on); kept in
 * r->grammar. 0, or -1 with e (a 400 naming an unsupported schema keyword). */
int srv_tools_grammar(srv_request *r, chat_family f, srv_error *e);
void srv_request_free(srv_request *r);

#endif
