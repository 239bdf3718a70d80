#!/usr/bin/env bash
# Issue 14 on the H200, one call of under 10 minutes: llama.cpp's llama-bench built in
# the background (../shared/peers copied to .peers/) while the CUDA kernel, plan and
# device suites run on cuda:0, the profiles of a 512-token block and kiln diverge on
# qwen3-0.6b; then the side-by-side (kiln bench and llama-bench -fa 1 on the same files,
# pp24/pp512/pp2048/tg32, medians of 3) on qwen3-0.6b and qwen3-8b. Binaries in devrun/.
# Writes OUTDIR.tar (one file comes back).
set -u
out=$1; mkdir -p "$out"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/devrun/lib KILN_CACHE_DIR=/tmp/kiln-cache KILN_NO_PROGRESS=1
export KILN_BIN=$PWD/devrun/kiln KILN_TESTDATA=$PWD/devrun/data
K=$PWD/devrun/kiln T=$PWD/devrun/kiln-tests dir=/dev/shm/kiln-bench; mkdir -p $dir
start=$(date +%s)
(bash .peers/build-llamacpp-cuda.sh > $out/llbuild.txt 2>&1; echo "rc=$? at $(( $(date +%s) - start )) s" >> $out/llbuild.txt) &
bpid=$!
for p in qwen3-0.6b qwen3-8b; do [ -f $dir/$p.gguf ] || timeout 150 $K synth --preset $p -o $dir/$p.gguf > /dev/null; done
KILN_TEST_DEVICE=cuda:0 timeout 200 $T -j6 --filter 'kernels*/*' > $out/kern.txt 2>&1; echo "rc=$?" >> $out/kern.txt
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j6 --filter 'plan*/*' > $out/plan.txt 2>&1; echo "rc=$?" >> $out/plan.txt
timeout 60 $T --filter 'cuda/*' > $out/cuda.txt 2>&1; echo "rc=$?" >> $out/cuda.txt
prompt="The quick brown fox jumps over the lazy dog, and then it runs away into the woods behind the old"
for p in qwen3-8b qwen3-0.6b; do
  timeout 60 $K run $dir/$p.gguf -p "$prompt" -n 4 --device cuda:0 --no-echo --profile-tokens 512 > /dev/null 2> $out/prof-$p.txt
done
timeout 90 $K diverge $dir/qwen3-0.6b.gguf --device cuda:0 -n 16 > $out/div-0.6b.md 2>&1; echo "rc=$?" >> $out/div-0.6b.md
echo "suites done at $(( $(date +%s) - start )) s" >> $out/times.txt
tar cf $out-suites.tar -C $(dirname $out) $(basename $out) # in case the rest runs out of time
wait $bpid
KILN=$K MODELS="$dir/qwen3-0.6b.gguf $dir/qwen3-8b.gguf" P=24,512,2048 N=32 R=3 DEVICES=cuda:0 \
  timeout $(( 570 - ($(date +%s) - start) )) bash .peers/side-by-side.sh > $out/side-by-side.md 2>&1
echo "side-by-side done at $(( $(date +%s) - start )) s" >> $out/times.txt
tar cf $out.tar -C $(dirname $out) $(basename $out)
