#!/usr/bin/env bash
# Issue 14 on the H200, one call: the CUDA kernel, plan and device suites on cuda:0; where
# a 512-token block goes (kiln run --profile) on qwen3-8b and qwen3-0.6b; kiln bench
# pp24/pp512/pp2048/tg32 on both; kiln diverge on both against the oracle. Binaries in
# devrun/. Writes OUTDIR.tar (one file comes back).
set -u
out=$1; mkdir -p "$out"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/devrun/lib KILN_CACHE_DIR=/tmp/kiln-cache KILN_NO_PROGRESS=1
export KILN_BIN=$PWD/devrun/kiln KILN_TESTDATA=$PWD/devrun/data
K=$PWD/devrun/kiln T=$PWD/devrun/kiln-tests dir=/dev/shm/kiln-bench; mkdir -p $dir
for p in qwen3-0.6b qwen3-8b; do [ -f $dir/$p.gguf ] || timeout 150 $K synth --preset $p -o $dir/$p.gguf > /dev/null; done
KILN_TEST_DEVICE=cuda:0 timeout 200 $T -j8 --filter 'kernels*/*' > $out/kern.txt 2>&1; echo "rc=$?" >> $out/kern.txt
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter 'plan*/*' > $out/plan.txt 2>&1; echo "rc=$?" >> $out/plan.txt
timeout 60 $T --filter 'cuda/*' > $out/cuda.txt 2>&1; echo "rc=$?" >> $out/cuda.txt
prompt="The quick brown fox jumps over the lazy dog, and then it runs away into the woods behind the old"
for p in qwen3-8b qwen3-0.6b; do
  timeout 90 $K run $dir/$p.gguf -p "$prompt" -n 4 --device cuda:0 --no-echo --profile-tokens 512 > /dev/null 2> $out/prof-$p.txt
  timeout 150 $K bench $dir/$p.gguf -p 24,512,2048 -n 32 -r 3 --device cuda:0 -o md > $out/b-$p.md 2>&1
done
timeout 100 $K diverge $dir/qwen3-0.6b.gguf --device cuda:0 -n 16 > $out/div-0.6b.md 2>&1; echo "rc=$?" >> $out/div-0.6b.md
timeout 200 $K diverge $dir/qwen3-8b.gguf --device cuda:0 -n 8 > $out/div-8b.md 2>&1; echo "rc=$?" >> $out/div-8b.md
tar cf $out.tar -C $(dirname $out) $(basename $out)
