#!/usr/bin/env bash
# Issue 14 on the H200, one call: the CUDA kernel, plan and device suites on cuda:0; where
# a 512-token block goes (kiln run --profile) on qwen3-8b and qwen3-0.6b; kiln bench
# pp24/pp512/pp2048/tg32 on both; kiln diverge on both against the oracle. Binaries in
# devrun/. Writes OUTDIR.tar (one file comes back).
set -u
out=$1
source bench/h200-common.sh
synth qwen3-0.6b qwen3-8b
suites 8 150
for p in qwen3-8b qwen3-0.6b; do
  timeout 90 $K run $dir/$p.gguf -p "$prompt" -n 4 --device cuda:0 --no-echo --profile-tokens 512 > /dev/null 2> $out/prof-$p.txt
  timeout 150 $K bench $dir/$p.gguf -p 24,512,2048 -n 32 -r 3 --device cuda:0 -o md > $out/b-$p.md 2>&1
done
timeout 100 $K diverge $dir/qwen3-0.6b.gguf --device cuda:0 -n 16 > $out/div-0.6b.md 2>&1; echo "rc=$?" >> $out/div-0.6b.md
timeout 200 $K diverge $dir/qwen3-8b.gguf --device cuda:0 -n 8 > $out/div-8b.md 2>&1; echo "rc=$?" >> $out/div-8b.md
tar cf $out.tar -C $(dirname $out) $(basename $out)
