/* JSON helpers shared by the server's builders (internal to server/). */
#ifndef KILN_SERVER_API_JSON_H
#define KILN_SERVER_API_JSON_H

#include "server/api_response.h"

#include <jansson.h>
#include <stddef.h>

/* A JSON string of s[n]: bytes that are not valid UTF-8 (a token cut inside a
 * character, a message quoting request bytes) become U+FFFD, so a reply never fails to
 * encode. NULL only when out of memory. */
json_t *srv_json_text(const char *s, size_t n);
/* Compact text of j (NULL-safe), then j's reference dropped. */
char *srv_json_dump(json_t *j);

/* A tool call {id, type, function {name, arguments}} (with "index" for stream deltas). */
json_t *srv_json_call(const srv_call *call, uint32_t index, bool with_index, const char *args, size_t args_len);
/* OpenAI's error object, {"error":{"message","type","param","code"}}. */
json_t *srv_json_error(const srv_error *e);
/* {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details {cached_tokens}} */
json_t *srv_json_usage(const srv_usage *u);
/* Chat's {content: [{token, logprob, bytes, top_logprobs}]}, or null when lp is NULL. */
json_t *srv_json_logprobs_chat(const srv_token_logprob *lp, size_t n);
/* Completions' legacy {tokens, token_logprobs, top_logprobs, text_offset}, or null. */
json_t *srv_json_logprobs_legacy(const srv_token_logprob *lp, size_t n, size_t text_offset);

#endif
