#!/usr/bin/env bash
# Issue 14 on the H200: the side-by-side only, three presets (llama.cpp built first in the
# same call, then kiln bench and llama-bench -fa 1, pp24/pp512/pp2048/tg32, medians of 3).
# Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
start=$(date +%s)
stamp() { echo "$1 at $(( $(date +%s) - start )) s" >> $out/times.txt; }
(bash .peers/build-llamacpp-cuda.sh > $out/llbuild.txt 2>&1) &
bpid=$!
synth qwen3-8b qwen3-4b qwen3-0.6b
wait $bpid
stamp llbuild
for p in qwen3-8b qwen3-4b qwen3-0.6b; do
  KILN=$K MODELS="$dir/$p.gguf" P=24,512,2048 N=32 R=3 DEVICES=cuda:0 timeout 200 bash .peers/side-by-side.sh \
    > $out/sbs-$p.md 2>&1
  stamp "sbs $p"
  tar cf $out.tar -C $(dirname $out) $(basename $out)
done
