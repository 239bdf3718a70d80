#!/usr/bin/env bash
# Issue 19's cost figure on the H200: decode tokens/s of greedy chat completions through
# kiln serve (one slot, cuda:0), unconstrained and under a typical JSON schema
# (bench/serve_constrained.py), for each model in MODELS.
# Run: source .device-runtime/env.sh && bash bench/h200-constrained.sh OUT
set -u
out=${1:-h200-out}
source bench/h200-common.sh
MODELS=${MODELS:-"qwen3-0.6b qwen3-8b"}
synth $MODELS
for m in $MODELS; do
  $K serve $dir/$m.gguf --device cuda:0 --listen 127.0.0.1:0 > $out/serve.out 2> $out/serve-$m.err &
  pid=$!
  for i in $(seq 1 900); do grep -q listening $out/serve.out 2>/dev/null && break; sleep 0.1; done
  port=$(sed -n 's/.*127.0.0.1:\([0-9]*\).*/\1/p' $out/serve.out | head -1)
  timeout 200 python3 bench/serve_constrained.py $port 256 3 > $out/constrained-$m.jsonl 2>&1
  kill -TERM $pid; wait $pid
  stamp "$m"
  tarball
done
