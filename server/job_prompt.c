/* A request's prompt as token ids, checked against what the server takes. */
#include "base/error.h"
#include "server/http_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* The tools as Llama 3.1 writes them (tojson(indent=4)); NULL entries when out of memory. */
static char **indented(const srv_request *r) {
    char **out = calloc(r->n_tools ? r->n_tools : 1, sizeof *out);
    for (size_t i = 0; out && i < r->n_tools; i++) {
        json_t *t = json_loads(r->tools[i], 0, NULL);
        out[i] = t ? json_dumps(t, JSON_INDENT(4)) : NULL;
        json_decref(t);
        if (!out[i]) {
            for (size_t k = 0; k < i; k++) free(out[k]);
            free(out);
            return NULL;
        }
    }
    return out;
}

int srv_prompt_ids(server *s, const srv_request *r, int32_t **ids, uint32_t *n, bool *think_opened, srv_error *e) {
    const srv_config *cfg = s->cfg;
    const char *field = r->endpoint == SRV_CHAT ? "messages" : "prompt"; /* what an error names */
    kiln_err err = {0};
    char *text = NULL;
    const char *p;
    size_t len;
    bool add_special;
    *ids = NULL;
    if (r->endpoint == SRV_CHAT) {
        chat_msg *msgs = (chat_msg *)r->messages;
        chat_msg *owned = NULL;
        size_t nm = r->n_messages;
        if (cfg->default_system && (nm == 0 || strcmp(msgs[0].role, "system"))) {
            owned = malloc((nm + 1) * sizeof *owned);
            if (!owned) return srv_error_set(e, 500, NULL, NULL, "out of memory"), -1;
            owned[0] = (chat_msg){"system", cfg->default_system};
            memcpy(owned + 1, msgs, nm * sizeof *msgs);
            msgs = owned;
            nm++;
        }
        char **ind = cfg->family == CHAT_LLAMA31 && r->n_tools ? indented(r) : NULL;
        chat_opts o = {.tools = (const char *const *)r->tools, .tools_indented = (const char *const *)ind,
                       .n_tools = r->n_tools, .no_thinking = r->no_thinking};
        text = cfg->family == CHAT_LLAMA31 && r->n_tools && !ind ? NULL
                                                                 : chat_render_opts(cfg->family, msgs, nm, true, s->bos, &o, &err);
        if (!text && !err.msg[0]) kiln_fail(&err, KILN_ERR_NOMEM, "out of memory");
        for (size_t i = 0; ind && i < r->n_tools; i++) free(ind[i]);
        free(ind);
        free(owned);
        if (text) *think_opened = srv_think_opened(text);
        if (!text)
            return srv_error_set(e, err.code == KILN_ERR_NOMEM ? 500 : 400, "messages", NULL, "%s", err.msg), -1;
        p = text;
        len = strlen(text);
        add_special = false;
    } else {
        p = r->prompt;
        len = strlen(p);
        add_special = true;
    }
    int rc = -1;
    if (tok_utf8_invalid_at(p, len)) {
        srv_error_set(e, 400, field, NULL, "the prompt is not valid UTF-8");
        goto out;
    }
    int64_t k = tok_encode(cfg->tok, p, len, add_special, true, NULL, 0, &err);
    if (k < 0) {
        srv_error_set(e, 400, NULL, NULL, "%s", err.msg);
        goto out;
    }
    *ids = malloc(((size_t)k + 1) * sizeof **ids);
    if (!*ids) {
        srv_error_set(e, 500, NULL, NULL, "out of memory");
        goto out;
    }
    k = tok_encode(cfg->tok, p, len, add_special, true, *ids, (size_t)k + 1, &err);
    if (k < 0) {
        srv_error_set(e, 400, NULL, NULL, "%s", err.msg);
        goto out;
    }
    *n = (uint32_t)k;
    if (*n == 0) {
        srv_error_set(e, 400, field, NULL, "the prompt is empty and this model adds no BOS token");
        goto out;
    }
    if (*n >= cfg->engines[0]->n_ctx) {
        srv_error_set(e, 400, field, "context_length_exceeded",
                      "the prompt has %u tokens but the context holds %u", *n, cfg->engines[0]->n_ctx);
        goto out;
    }
    rc = 0;
out:
    if (rc) {
        free(*ids);
        *ids = NULL;
    }
    free(text);
    return rc;
}
