#!/usr/bin/env python3
"""What constrained decoding costs (issue 19): decode tokens/s of greedy chat completions
through `kiln serve`, unconstrained and under a JSON schema (response_format), measured
as (tokens - 1) / (time of the request - time of a 1-token request of the same prompt).

usage: serve_constrained.py PORT MAX_TOKENS REPS -> one JSON line per mode, then the ratio"""
import http.client, json, statistics, sys, time

port, max_tokens, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
# a typical structured answer: an object with a few typed fields and a list of strings
schema = {"type": "object", "properties": {
    "title": {"type": "string"}, "year": {"type": "integer"}, "rating": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}}, "done": {"type": "boolean"}},
    "required": ["title", "year", "rating", "tags", "done"], "additionalProperties": False}


def ask(n, constrained, tag):
    body = {"model": "m", "messages": [{"role": "user", "content": "Describe a film %s as JSON." % tag}],
            "max_tokens": n, "temperature": 0}
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "film", "schema": schema}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    j = json.loads(r.read())
    dt = time.monotonic() - t0
    if r.status != 200:
        raise SystemExit("status %d: %s" % (r.status, j))
    return dt, j["usage"]["completion_tokens"], j["choices"][0]["message"].get("content"), j["choices"][0]["finish_reason"]


out = {}
for constrained in (False, True):
    rates, finishes, valid, lengths = [], [], 0, []
    for i in range(reps):
        tag = "%s-%d" % ("c" if constrained else "u", i)
        ask(1, constrained, tag)  # the prompt into a slot's cache
        t1, _, _, _ = ask(1, constrained, tag)  # the first token, the prompt cached
        tn, n, content, fin = ask(max_tokens, constrained, tag)  # the same, then the decode
        rates.append((n - 1) / max(tn - t1, 1e-9))
        lengths.append(n)
        finishes.append(fin)
        if constrained and fin == "stop":
            json.loads(content)  # a finished constrained answer parses
            valid += 1
    out["constrained" if constrained else "free"] = {"tok_s_median": statistics.median(rates), "tok_s": rates,
                                                    "finish": finishes, "parsed": valid, "tokens": lengths}
    print(json.dumps({"mode": "constrained" if constrained else "free", **out["constrained" if constrained else "free"]}))
print(json.dumps({"cost": 1 - out["constrained"]["tok_s_median"] / out["free"]["tok_s_median"]}))
