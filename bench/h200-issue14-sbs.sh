#!/usr/bin/env bash
# Issue 14 on the H200: only the side-by-side (llama.cpp built first, then kiln bench and
# llama-bench -fa 1 on qwen3-8b and -4b, pp24/pp512/pp2048/tg32, medians of 3), and a
# 2048-token profile of qwen3-8b-shaped layers. Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
start=$(date +%s)
stamp() { echo "$1 at $(( $(date +%s) - start )) s" >> $out/times.txt; }
(bash .peers/build-llamacpp-cuda.sh > $out/llbuild.txt 2>&1) &
bpid=$!
synth qwen3-8b qwen3-4b
timeout 100 $K synth --preset qwen3-8b --layers 2 -o $dir/q8-2.gguf > /dev/null
timeout 90 $K run $dir/q8-2.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens 2048 \
  > /dev/null 2> $out/prof-q8-2048.txt
wait $bpid
stamp llbuild
for p in qwen3-8b qwen3-4b; do
  KILN=$K MODELS="$dir/$p.gguf" P=24,512,2048 N=32 R=3 DEVICES=cuda:0 timeout 200 bash .peers/side-by-side.sh \
    > $out/sbs-$p.md 2>&1
  stamp "sbs $p"
done
tar cf $out.tar -C $(dirname $out) $(basename $out)
