#!/usr/bin/env bash
# kiln serve on the H200 (issue 7's figures): for qwen3-0.6b synth on cuda:0 and vulkan:0,
# time to first token and tokens/s streamed through the server with a 24-token and a
# 2000-token prompt (bench/serve_probe.py), then a wrk load run on loopback against
# cuda:0 (requests/s, errors, the server's RSS before and after).
# Run: source .device-runtime/env.sh && bash bench/h200-serve.sh (Release build in build-dev,
# wrk and its libluajit copied into build-dev/ and build-dev/lib)
set -u
out=${OUT:-h200-out}; mkdir -p "$out"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/build-dev/lib KILN_CACHE_DIR=/tmp/kiln-cache
K=build-dev/kiln m=/tmp/kiln-bench/qwen3-0.6b.gguf
mkdir -p /tmp/kiln-bench
[ -f $m ] || $K synth --preset qwen3-0.6b -o $m > /dev/null
rss() { awk '/VmRSS/ {print $2 " kB"}' /proc/$1/status; }
start() { # device -> sets pid, port
  $K serve $m --device $1 --listen 127.0.0.1:0 --ctx 4096 > /tmp/serve.out 2> /tmp/serve-$1.err &
  pid=$!
  for i in $(seq 1 600); do grep -q listening /tmp/serve.out 2>/dev/null && break; sleep 0.1; done
  port=$(sed -n 's/.*127.0.0.1:\([0-9]*\).*/\1/p' /tmp/serve.out | head -1)
}
for dev in cuda:0 vulkan:0; do
  start $dev
  echo "== $dev (port $port)"
  for n in 24 2000; do
    python3 bench/serve_probe.py $port $n 128 > /dev/null  # warm: kernels, caches
    for r in 1 2 3; do echo "prompt~$n: $(python3 bench/serve_probe.py $port $n 128)"; done
  done
  if [ $dev = cuda:0 ] && [ -z "${NO_WRK:-}" ]; then
    cat > /tmp/post.lua <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"m","messages":[{"role":"user","content":"Say something short."}],"max_tokens":16,"temperature":0}'
LUA
    echo "rss before: $(rss $pid)"
    build-dev/wrk -t2 -c8 -d20s --latency -s /tmp/post.lua http://127.0.0.1:$port/v1/chat/completions
    echo "rss after: $(rss $pid)"
    curl -s http://127.0.0.1:$port/metrics | grep -v '^#' | head -20
  fi
  kill -TERM $pid; wait $pid; echo "exit $?"
  tail -3 /tmp/serve-$dev.err
done
