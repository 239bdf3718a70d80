#!/usr/bin/env bash
# Issue 14's diagnosis on the H200, one call: where a prefill block's time goes on cuda:0
# (kiln run --profile, a full block and a 24-token one) for qwen3-8b and qwen3-0.6b, and
# the peer rates for the same shapes (cuBLAS and SDPA through torch). Binaries as
# bench/h200-issue13.sh (devrun/). Writes to $OUT.
set -u
out=${OUT:-h200-out}; mkdir -p "$out"; out=$(cd "$out" && pwd)
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/devrun/lib KILN_CACHE_DIR=/tmp/kiln-cache KILN_NO_PROGRESS=1
K=$PWD/devrun/kiln dir=/dev/shm/kiln-bench
mkdir -p $dir
for p in qwen3-0.6b qwen3-8b; do
  [ -f $dir/$p.gguf ] || timeout 150 $K synth --preset $p -o $dir/$p.gguf > /dev/null
done
timeout 60 $K probe --measure > "$out/probe.txt" 2>&1
prompt="The quick brown fox jumps over the lazy dog, and then it runs away into the woods behind the old"
for p in qwen3-8b qwen3-0.6b; do
  for n in 0 24; do
    timeout 90 $K run $dir/$p.gguf -p "$prompt" -n 8 --device cuda:0 --no-echo --profile-tokens ${n/#0/512} \
      > /dev/null 2> "$out/profile-$p-$n.txt"
  done
done
timeout 120 python3 bench/torch_shapes.py 4096 4096 1024 12288 32 8 128 24 512 2048 > "$out/torch-8b.txt" 2>&1
