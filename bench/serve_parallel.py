#!/usr/bin/env python3
"""N concurrent clients against `kiln serve` (issue 17's figures). Each thread asks for its
prompt's first token alone (a 1-token completion: its time is the first-token latency under
the others' load), then streams MAX_TOKENS greedy tokens of the same prompt (its prefix
cached) over a raw socket until the server closes it. Timing chunks as they arrive does not
work on the synthesized models: their random tokens often end in an incomplete UTF-8
character, which the server holds back, so whole streams arrive at once.

usage: serve_parallel.py PORT STREAMS MAX_TOKENS PROMPT_TOKENS[,PROMPT_TOKENS...]
  the prompt lengths are dealt to the streams in turn (e.g. 24,2000 mixes short and long)
-> one JSON line: aggregate tokens/s (every stream's generated tokens over the time from
   the first request to the last stream's end), per-stream tokens/s of the streamed part
   (median, min), first-token latency p50/p99 (by prompt length too), HTTP statuses."""
import json, random, socket, statistics, sys, threading, time, http.client

port, streams, max_tokens = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
lengths = [int(x) for x in sys.argv[4].split(",")]
words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly "
         "bake bread near old stone bridges under grey autumn skies").split()
text = lambda n: " ".join(words[i % len(words)] for i in range(n))


def prompt_tokens(n_words):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps({"model": "m", "prompt": text(n_words), "max_tokens": 1}),
              {"Content-Type": "application/json"})
    return json.loads(c.getresponse().read())["usage"]["prompt_tokens"]


# words per token measured once; each length's word count corrected near its target
ratio = 64 / prompt_tokens(64)
n_words = {n: max(1, int(n * ratio)) for n in lengths}
results = [None] * streams
start = threading.Barrier(streams + 1)


def client(i):
    n = lengths[i % len(lengths)]
    # a first word of its own: no prefix reuse between streams or runs
    nonce = "".join(random.choice("bcdfghjklmnpqrstvwxz") for _ in range(8))
    prompt = nonce + " " + text(n_words[n])
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "stream": True, "stream_options": {"include_usage": True}})
    req = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
           "Content-Length: %d\r\n\r\n" % len(body)).encode() + body.encode()
    one = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    start.wait()
    t0 = time.monotonic()
    one.request("POST", "/v1/completions", json.dumps({"model": "m", "prompt": prompt, "max_tokens": 1,
                                                       "temperature": 0}), {"Content-Type": "application/json"})
    r1 = one.getresponse()
    r1.read()
    first = time.monotonic()
    sock = socket.create_connection(("127.0.0.1", port), timeout=600)
    sock.sendall(req)
    raw = b""
    while True:
        got = sock.recv(65536)
        if not got:
            break
        raw += got
    t1 = time.monotonic()
    status = int(raw.split(b" ", 2)[1]) if raw else 0
    usage = None
    for line in raw.split(b"\n"):
        line = line.strip()
        if line.startswith(b"data: {"):
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
    gen = usage["completion_tokens"] if usage else 0
    results[i] = {"status": status, "status1": r1.status, "t0": t0, "first": first, "t1": t1, "gen": gen, "prompt": n,
                  "prompt_tokens": usage and usage["prompt_tokens"]}


threads = [threading.Thread(target=client, args=(i,)) for i in range(streams)]
for t in threads:
    t.start()
start.wait()
for t in threads:
    t.join()
r = [x for x in results if x]
t_begin, t_end = min(x["t0"] for x in r), max(x["t1"] for x in r)
ttft = sorted(x["first"] - x["t0"] for x in r if x["first"])
per = [x["gen"] / (x["t1"] - x["first"]) for x in r if x["gen"] and x["t1"] > x["first"]]
pct = lambda v, q: v[min(len(v) - 1, int(q * len(v)))] if v else None
by_len = {}
for x in r:
    if x["first"]:
        by_len.setdefault(x["prompt"], []).append(x["first"] - x["t0"])
print(json.dumps({
    "streams": streams, "statuses": sorted(set(x["status"] for x in r) | set(x["status1"] for x in r)),
    "generated": sum(x["gen"] for x in r), "wall_s": t_end - t_begin,
    "aggregate_tok_s": sum(x["gen"] for x in r) / (t_end - t_begin),
    "per_stream_tok_s_median": statistics.median(per) if per else None, "per_stream_tok_s_min": min(per) if per else None,
    "ttft_p50_s": pct(ttft, 0.5), "ttft_p99_s": pct(ttft, 0.99),
    "ttft_by_prompt": {str(k): {"p50": pct(sorted(v), 0.5), "p99": pct(sorted(v), 0.99)} for k, v in by_len.items()},
    "prompt_tokens": sorted(set(x["prompt_tokens"] for x in r if x["prompt_tokens"]))}))
