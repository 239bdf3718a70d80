#!/usr/bin/env bash
# Issue 14 on the H200, one call of under 10 minutes: llama.cpp's llama-bench built in
# the background (../shared/peers copied to .peers/) while the CUDA kernel, plan and
# device suites run on cuda:0, the profiles of a 512-token block and kiln diverge on
# qwen3-0.6b; then the side-by-side (kiln bench and llama-bench -fa 1 on the same files,
# pp24/pp512/pp2048/tg32, medians of 3) on qwen3-0.6b and qwen3-8b. Binaries in devrun/.
# Writes OUTDIR.tar (one file comes back).
set -u
out=$1
source bench/h200-common.sh
start=$(date +%s)
(bash .peers/build-llamacpp-cuda.sh > $out/llbuild.txt 2>&1; echo "rc=$? at $(( $(date +%s) - start )) s" >> $out/llbuild.txt) &
bpid=$!
synth qwen3-0.6b qwen3-8b
suites 6 120
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
