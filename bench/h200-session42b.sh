#!/usr/bin/env bash
# The second machine of session 42 (two calls, each under 10 minutes):
#   a  llama.cpp built while qwen3-30b-a3b (bf16) is synthesized; the MoE (fragments
#      included), paged-KV and batch suites on cuda:0; kiln bench of the 30B resident
#      (its prefill now on the grouped fragment products) and its profile; the squeeze
#      (bench/h200-issue20-cache.sh's stage, --token-log now a line a token); llama-bench
#      of the 30B resident last;
#   b  issue 17: kiln serve --parallel 32 (the slots' caches one pool of pages, --ctx
#      131072) on qwen3-0.6b and qwen3-8b, cuda:0, 1/8/32 streams and the mixed prompts.
# Binaries in devrun/, llama.cpp from .peers. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
L=/opt/peer/llama.cpp/build/bin/llama-bench
m=$dir/qwen3-30b-a3b.gguf
case $1 in
*a)
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv > $out/gpu.txt 2>&1
  llama_build
  ( [ -f $m ] || timeout 300 $K synth --preset qwen3-30b-a3b -o $m > $out/synth.txt 2>&1; stamp synth30 ) &
  for f in 'kernels_moe*/*' 'plan_moe*/*' 'plan_pages/*' 'kernels_paged/*' 'plan_batch/*'; do
    echo "== $f" >> $out/tests.txt
    KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter "$f" >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
  done
  stamp tests; tarball
  while ! grep -q synth30 $out/times.txt; do sleep 2; done
  timeout 120 $K bench $m -p 512 -n 64 -r 2 --device cuda:0 > $out/resident-kiln.md 2>&1; stamp resident-kiln; tarball
  timeout 80 $K run $m -p "$prompt" -n 16 --device cuda:0 --no-echo --profile > $out/resident-prof.txt 2>&1
  stamp resident-prof; tarball
  STAGES=squeeze timeout 150 bash bench/h200-issue20-cache.sh $out/squeeze; stamp squeeze; tarball
  # issue 17 in brief while llama.cpp builds: qwen3-0.6b through the paged pool, 1/8/32 streams
  MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8 32" SUITES=0 timeout 150 bash bench/h200-batch.sh $out/batch
  stamp batch; tarball
  llama_wait
  timeout 90 $L -m $m -ngl 99 -fa 1 -p 512 -n 64 -r 2 > $out/resident-llama.md 2>&1; stamp resident-llama; tarball ;;
*)
  rm -f $m
  MODELS="qwen3-0.6b qwen3-8b" DEVICES=cuda:0 STREAMS="1 8 32" SUITES=0 timeout 560 bash bench/h200-batch.sh $out/batch
  stamp batch; tarball ;;
esac
