#!/usr/bin/env bash
# Vulkan on the H200, qwen3.5-0.8b: why kiln bench's pp24 (825 tok/s on 12-03) is three
# times slower than the 24-token block its profile replays. Bench pp24/pp512 on vulkan:0
# and cuda:0, the prompt through kiln run, and the block profiles. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
synth qwen3.5-0.8b
m=$dir/qwen3.5-0.8b.gguf
stamp synth
for d in vulkan:0 cuda:0; do
  timeout 120 $K bench $m -p 24,512 -n 16 -r 5 --device $d -o md > $out/b-$d.md 2>&1
done
stamp bench
timeout 90 $K run $m -p "$prompt" -n 2 --device vulkan:0 --no-echo --profile-tokens 24 > /dev/null 2> $out/prof-vk-24.txt
timeout 90 $K run $m -p "$prompt" -n 2 --device vulkan:0 --no-echo --profile-tokens 512 > /dev/null 2> $out/prof-vk-512.txt
stamp profiles
tarball
