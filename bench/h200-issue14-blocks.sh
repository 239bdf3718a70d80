#!/usr/bin/env bash
# Issue 14 on the H200 (2026-12-02, fourth session): the long default block (2048 tokens,
# with a 512-token block beside it), the gate/up/SwiGLU in one warpgroup launch, qk_prep's
# shared angle table. llama.cpp built in the background while the CUDA suites run on
# cuda:0; where 24-, 512- and 2048-token blocks of qwen3-8b-shaped layers go (kiln run
# --profile-tokens); cuBLAS/SDPA on the 8B's shapes; then the side-by-side (kiln bench and
# llama-bench -fa 1, pp24/pp512/pp2048/tg32, medians of 3) on qwen3-8b, -4b and -0.6b.
# Binaries in devrun/. Writes OUTDIR.tar (a partial one first).
set -u
out=$1
source bench/h200-common.sh
start=$(date +%s)
stamp() { echo "$1 at $(( $(date +%s) - start )) s" >> $out/times.txt; }
(bash .peers/build-llamacpp-cuda.sh > $out/llbuild.txt 2>&1; echo "rc=$? at $(( $(date +%s) - start )) s" >> $out/llbuild.txt) &
bpid=$!
synth qwen3-8b qwen3-0.6b qwen3-4b
timeout 100 $K synth --preset qwen3-8b --layers 2 -o $dir/q8-2.gguf > /dev/null
stamp synth
suites 8 240
stamp suites
for n in 24 512 2048; do
  timeout 90 $K run $dir/q8-2.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens $n \
    > /dev/null 2> $out/prof-q8-$n.txt
done
stamp prof
timeout 60 python3 bench/torch_shapes.py 4096 4096 1024 12288 32 8 128 512 2048 > $out/torch-8b.txt 2>&1
tar cf $out-part.tar -C $(dirname $out) $(basename $out)
wait $bpid
stamp llbuild
for p in qwen3-8b qwen3-4b qwen3-0.6b; do
  left=$(( 570 - ($(date +%s) - start) ))
  [ $left -gt 30 ] || break
  KILN=$K MODELS="$dir/$p.gguf" P=24,512,2048 N=32 R=3 DEVICES=cuda:0 timeout $left bash .peers/side-by-side.sh \
    > $out/sbs-$p.md 2>&1
  stamp "sbs $p"
done
stamp end
tar cf $out.tar -C $(dirname $out) $(basename $out)
