#!/usr/bin/env bash
# Issue 14's short-block check on the H200, one call: the CUDA kernel and plan suites, a
# 24-token block's profile on qwen3-8b, kiln bench pp24/pp128/pp512/tg32 on qwen3-0.6b and
# qwen3-8b (cuda:0), kiln diverge on qwen3-0.6b. Binaries as bench/h200-issue13.sh
# (devrun/). Usage: bash bench/h200-issue14-short.sh OUTDIR
set -u
out=$1; export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/devrun/lib KILN_CACHE_DIR=/tmp/kiln-cache KILN_NO_PROGRESS=1
export KILN_BIN=$PWD/devrun/kiln KILN_TESTDATA=$PWD/devrun/data
K=$PWD/devrun/kiln T=$PWD/devrun/kiln-tests dir=/dev/shm/kiln-bench; mkdir -p $dir
for p in qwen3-0.6b qwen3-8b; do [ -f $dir/$p.gguf ] || timeout 150 $K synth --preset $p -o $dir/$p.gguf > /dev/null; done
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j8 --filter 'kernels_matmul/*' > $out/kmm.txt 2>&1; echo "rc=$?" >> $out/kmm.txt
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j8 --filter 'plan*/*' > $out/plan.txt 2>&1; echo "rc=$?" >> $out/plan.txt
prompt="The quick brown fox jumps over the lazy dog, and then it runs away into the woods behind the old"
timeout 90 $K run $dir/qwen3-8b.gguf -p "$prompt" -n 8 --device cuda:0 --no-echo --profile-tokens 24 > /dev/null 2> $out/prof8b24.txt
for p in qwen3-0.6b qwen3-8b; do
  timeout 100 $K bench $dir/$p.gguf -p 24,128,512 -n 32 -r 3 --device cuda:0 -o md > $out/b-$p.md 2>&1
done
timeout 60 $K diverge $dir/qwen3-0.6b.gguf --device cuda:0 -n 16 > $out/div.md 2>&1; echo "rc=$?" >> $out/div.md
