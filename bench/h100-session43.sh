#!/usr/bin/env bash
# Session 43, one call under 10 minutes (issue 20 on whatever card is lent): llama.cpp built
# and qwen3-30b-a3b (bf16) synthesized in the background while the MoE suites run on
# cuda:0; then kiln alone on the card: the 30B resident (bench and profile: the router in
# one subgroup, the expert rows four loads ahead), --mem-limit 24GiB (bench, run -n 128),
# the squeeze (bench/h200-issue20-cache.sh's stage); then llama-bench resident and with the
# experts of 28 layers on the CPU (last session's best -ncmoe at 24 GiB).
# Binaries in devrun/, llama.cpp from .peers. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
L=/opt/peer/llama.cpp/build/bin/llama-bench
m=$dir/qwen3-30b-a3b.gguf
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv > $out/gpu.txt 2>&1
llama_build
( [ -f $m ] || timeout 300 $K synth --preset qwen3-30b-a3b -o $m > $out/synth.txt 2>&1; stamp synth30 ) &
for f in 'kernels_moe*/*' 'plan_moe*/*'; do
  echo "== $f" >> $out/tests.txt
  KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter "$f" >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
done
stamp tests; tarball
while ! grep -q synth30 $out/times.txt; do sleep 2; done
timeout 100 $K bench $m -p 512 -n 64 -r 2 --device cuda:0 > $out/resident-kiln.md 2>&1; stamp resident-kiln; tarball
timeout 70 $K run $m -p "$prompt" -n 16 --device cuda:0 --no-echo --profile > $out/resident-prof.txt 2>&1
stamp resident-prof; tarball
STAGES=squeeze timeout 150 bash bench/h200-issue20-cache.sh $out/squeeze; stamp squeeze; tarball
timeout 100 $K bench $m -p 512 -n 64 -r 2 --device cuda:0 --mem-limit 24GiB > $out/limit-kiln.md 2>&1
timeout 60 $K run $m -p "$prompt" -n 128 --device cuda:0 --no-echo --mem-limit 24GiB > $out/limit-run.txt 2>&1
stamp limit-kiln; tarball
llama_wait
timeout 60 $L -m $m -ngl 99 -fa 1 -p 512 -n 64 -r 2 > $out/resident-llama.md 2>&1; stamp resident-llama; tarball
timeout 120 $L -m $m -ngl 99 -fa 1 -ncmoe 28 -p 512 -n 64 -r 2 > $out/limit-llama.md 2>&1; stamp limit-llama; tarball
