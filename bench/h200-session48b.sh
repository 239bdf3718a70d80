#!/usr/bin/env bash
# Session 48's second call (issue 20): the MoE suites on cuda:0 and vulkan:0 (qwen35moe
# against the oracle and llama.cpp's golden among them); qwen3-30b-a3b's squeeze (session
# 44's resizes) and --mem-limit 24GiB beside llama-bench -ncmoe 28; qwen3.5-35b-a3b's widths
# cut to 8 of 40 layers beside llama-bench (pp512, tg64). Binaries in devrun/, llama.cpp
# from .peers (built here unless a warm machine has it). Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
m=$dir/qwen3-30b-a3b.gguf m35=$dir/q35moe-8l.gguf
[ -x $L ] || llama_build
( [ -f $m ] || timeout 300 $K synth --preset qwen3-30b-a3b -o $m > $out/synth.txt 2>&1; stamp synth30
  [ -f $m35 ] || timeout 200 $K synth --preset qwen3.5-35b-a3b --layers 8 -o $m35 > $out/synth35.txt 2>&1
  stamp synth35 ) &
for dev in cuda:0 vulkan:0; do
  echo "== MoE suites on $dev" >> $out/tests.txt
  KILN_TEST_DEVICE=$dev timeout 120 $T -j8 --filter '*moe*/*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
  tarball
done
stamp tests
while ! grep -q synth30 $out/times.txt; do sleep 2; done
STAGES=squeeze timeout 120 bash bench/h200-issue20-cache.sh $out/squeeze; stamp squeeze; tarball
timeout 60 $K bench $m -p 0 -n 64 -r 3 --device cuda:0 --mem-limit 24GiB > $out/limit-kiln.md 2>&1; stamp limit-kiln; tarball
while ! grep -q synth35 $out/times.txt; do sleep 2; done
for dev in cuda:0 vulkan:0; do
  timeout 60 $K bench $m35 -p 512 -n 64 -r 3 --device $dev > $out/k-q35moe-$dev.md 2>&1
  tarball
done
timeout 40 $K run $m35 -p "$prompt" -n 32 --device cuda:0 --profile-tokens 24 > /dev/null 2> $out/prof-q35moe.txt
stamp kiln35; tarball
[ -n "${llama_pid:-}" ] && llama_wait
timeout 60 $L -m $m -ngl 99 -fa 1 -ncmoe 28 -p 0 -n 64 -r 3 > $out/limit-llama.md 2>&1; stamp limit-llama; tarball
timeout 60 $L -m $m35 -ngl 99 -fa 1 -p 512 -n 64 -r 3 > $out/llama-q35moe.md 2>&1; stamp llama35; tarball
