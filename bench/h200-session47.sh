#!/usr/bin/env bash
# Session 47's call: qwen35moe (Qwen3.5's layers with experts and a shared expert) on the
# device for the first time. The MoE suites on cuda:0 and vulkan:0 (qwen35moe against the
# oracle and llama.cpp's golden, through the cache), then qwen3.5-35b-a3b's published
# widths cut to 8 of its 40 layers (bf16, about 14 GB: the whole model's 70 GB fits neither
# /dev/shm nor the disk) beside llama-bench on the same file: pp512 and tg64, kiln cuda:0
# and vulkan:0. Binaries in devrun/, llama.cpp from .peers. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
llama_build
m=$dir/q35moe-8l.gguf
[ -f $m ] || (timeout 200 $K synth --preset qwen3.5-35b-a3b --layers 8 -o $m > $out/synth.txt 2>&1) &
synth_pid=$!
for dev in cuda:0 vulkan:0; do
  echo "== MoE suites on $dev" >> $out/tests.txt
  KILN_TEST_DEVICE=$dev timeout 120 $T -j8 --filter '*moe*/*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
  tarball
done
stamp tests
wait $synth_pid; stamp synth
for dev in cuda:0 vulkan:0; do
  timeout 90 $K bench $m -p 512 -n 64 -r 3 --device $dev > $out/k-q35moe-$dev.md 2>&1
  tarball
done
timeout 60 $K run $m -p "$prompt" -n 32 --device cuda:0 --profile --profile-tokens 24 > $out/prof-q35moe.txt 2>&1
stamp kiln; tarball
llama_wait
timeout 90 $L -m $m -ngl 99 -fa 1 -p 512 -n 64 -r 3 > $out/llama-q35moe.md 2>&1
stamp llama; tarball
