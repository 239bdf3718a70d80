#!/usr/bin/env bash
# Issue 17 on the H200: kiln serve's steps of several slots' tokens. The batch suites on
# cuda:0, then for each model and device a server with --parallel SLOTS and N concurrent
# streaming clients (bench/serve_parallel.py: 128 greedy tokens each, 24-token prompts) at
# N = STREAMS, the mixed 24/2000-token prompts at 8 streams, and one stream against a
# --parallel 1 server (today's path) for the single-stream comparison.
# Run: source .device-runtime/env.sh && bash bench/h200-batch.sh OUT
# (MODELS, DEVICES, STREAMS, SLOTS override the defaults; SUITES=0 skips the suites, MIXED=0 the mixed prompts; CTX: the
# positions of the KV pool the slots share, 131072 by default: as 32 slots of 4096 before)
set -u
out=${1:-h200-out}
source bench/h200-common.sh
MODELS=${MODELS:-"qwen3-0.6b qwen3-8b"} DEVICES=${DEVICES:-"cuda:0 vulkan:0"}
STREAMS=${STREAMS:-"1 2 4 8 16 32"} SLOTS=${SLOTS:-32}
synth $MODELS
stamp synth
if [ "${SUITES:-1}" = 1 ]; then
  KILN_TEST_DEVICE=cuda:0 timeout 200 $T -j4 --filter 'plan_batch/*' > $out/plan-batch.txt 2>&1
  echo "rc=$?" >> $out/plan-batch.txt
  KILN_TEST_DEVICE=cuda:0 timeout 200 $T -j4 --filter 'kernels_matmul/*' > $out/kmm.txt 2>&1; echo "rc=$?" >> $out/kmm.txt
  KILN_TEST_DEVICE=cuda:0 timeout 100 $T --filter 'kernels/argmax*' > $out/argmax.txt 2>&1; echo "rc=$?" >> $out/argmax.txt
  stamp suites
  tarball
fi
# PROFILE="8 32": where a step of that many slots' tokens goes, per model (kiln run --profile-step)
for m in $MODELS; do
  for n in ${PROFILE:-}; do
    timeout 120 $K run $dir/$m.gguf --device cuda:0 -p "$prompt" -n 4 --profile-tokens 24 --profile-step $n \
      > /dev/null 2> $out/prof-$m-step$n.txt
  done
done
stamp profiles
# serve MODEL DEVICE SLOTS: starts a server, sets pid and port
serve() {
  local ctx=${CTX:-131072}; [ $3 = 1 ] && ctx=4096
  $K serve $dir/$1.gguf --device $2 --parallel $3 --listen 127.0.0.1:0 --ctx $ctx --step-log $out/steps-$1-$2-$3.log \
    > $out/serve.out 2> $out/serve-$1-$2-$3.err &
  pid=$!
  for i in $(seq 1 900); do grep -q listening $out/serve.out 2>/dev/null && break; sleep 0.1; done
  port=$(sed -n 's/.*127.0.0.1:\([0-9]*\).*/\1/p' $out/serve.out | head -1)
}
stop() { kill -TERM $pid; wait $pid; echo "exit $?" >> $out/serve-$1.err; }
for m in $MODELS; do
  for dev in $DEVICES; do
    f=$out/par-$m-$dev.jsonl
    serve $m $dev 1
    python3 bench/serve_parallel.py $port 1 16 24 > /dev/null # warm
    echo "{\"slots\": 1, \"run\": $(timeout 120 python3 bench/serve_parallel.py $port 1 128 24)}" >> $f
    stop $m-$dev-1
    serve $m $dev $SLOTS
    python3 bench/serve_parallel.py $port 4 16 24 > /dev/null # warm: every bucket's first replay
    for n in $STREAMS; do
      echo "{\"slots\": $SLOTS, \"run\": $(timeout 120 python3 bench/serve_parallel.py $port $n 128 24)}" >> $f
    done
    [ "${MIXED:-1}" = 1 ] && echo "{\"slots\": $SLOTS, \"mixed\": $(timeout 120 python3 bench/serve_parallel.py $port 8 128 24,2000)}" >> $f
    curl -s http://127.0.0.1:$port/metrics | grep -E '^kiln_step' > $out/metrics-$m-$dev.txt
    stop $m-$dev-$SLOTS
    stamp "$m $dev"
    tarball
  done
done
tarball
