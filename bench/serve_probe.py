#!/usr/bin/env python3
"""Time to first token and tokens/s through `kiln serve`, streamed (bench/h200-serve.sh).
usage: serve_probe.py PORT PROMPT_TOKENS MAX_TOKENS  -> one JSON line"""
import http.client, json, random, socket, sys, time

port, n_prompt, max_tokens = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
# a prompt of about n_prompt tokens: varied words, so the tokenizer does not merge them away
words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly "
         "bake bread near old stone bridges under grey autumn skies").split()
text = lambda n: " ".join(words[i % len(words)] for i in range(n))
c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)


def prompt_tokens(n_words):
    """the server's count of a prompt of n_words words (a 1-token completion's usage)"""
    c.request("POST", "/v1/completions", json.dumps({"model": "m", "prompt": text(n_words), "max_tokens": 1}),
              {"Content-Type": "application/json"})
    return json.loads(c.getresponse().read())["usage"]["prompt_tokens"]


# the tokenizer's words-to-tokens ratio, measured, then corrected once more near the target
n_words = max(1, n_prompt * 64 // prompt_tokens(64))
n_words = max(1, n_words * n_prompt // prompt_tokens(n_words))
# a first word of its own, so the server's prefix reuse (which the calibration and earlier
# runs would feed) leaves the whole prompt to evaluate: a cold time to first token
nonce = "".join(random.choice("bcdfghjklmnpqrstvwxz") for _ in range(6))
body = json.dumps({"model": "m", "prompt": nonce + " " + text(n_words), "max_tokens": max_tokens, "temperature": 0,
                   "stream": True, "stream_options": {"include_usage": True}})
# the streamed request over a raw socket, each chunk timed as it arrives (no client buffering)
sock = socket.create_connection(("127.0.0.1", port), timeout=600)
req = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
       "Content-Length: %d\r\n\r\n" % len(body)).encode() + body.encode()
t0 = time.monotonic()
sock.sendall(req)
first, usage, raw = None, None, b""
while True:
    got = sock.recv(65536)
    if not got:
        break
    if first is None and b'"choices":[{' in got:
        first = time.monotonic()
    raw += got
t1 = time.monotonic()
status = int(raw.split(b" ", 2)[1])
for line in raw.split(b"\n"):
    line = line.strip()
    if line.startswith(b"data: {"):
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
# the time to first token without any streaming: a 1-token completion of a fresh prompt
nonce2 = "".join(random.choice("bcdfghjklmnpqrstvwxz") for _ in range(6))
t2 = time.monotonic()
c.request("POST", "/v1/completions", json.dumps({"model": "m", "prompt": nonce2 + " " + text(n_words), "max_tokens": 1}),
          {"Content-Type": "application/json"})
c.getresponse().read()
ttft_plain = time.monotonic() - t2
gen = usage["completion_tokens"] if usage else None
cached = usage and (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
print(json.dumps({"status": status, "ttft_1token_s": ttft_plain, "prompt_tokens": usage and usage["prompt_tokens"], "cached_tokens": cached, "completion_tokens": gen,
                  "ttft_s": first and first - t0, "decode_tok_s": gen and first and (gen - 1) / (t1 - first),
                  "total_s": t1 - t0}))
