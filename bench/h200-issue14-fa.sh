#!/usr/bin/env bash
# Issue 14 on the H200, one call of under 10 minutes, after the warpgroup products and the
# register-resident prefill attention: llama.cpp's llama-bench built in the background
# (../shared/peers copied to .peers/) while the CUDA kernel, plan and device suites run on
# cuda:0; where a 512- and a 2048-token block of qwen3-8b-shaped layers goes (kiln run
# --profile), also with two bf16 parts of e (KILN_ATTN_PARTS=2); kiln diverge on
# qwen3-0.6b and qwen3-8b; cuBLAS and SDPA on the 8B's shapes; then the side-by-side (kiln
# bench and llama-bench -fa 1 on the same files, pp24/pp512/pp2048/tg32, medians of 3) on
# qwen3-8b, qwen3-0.6b and qwen3-4b, one model at a time. Binaries in devrun/.
# Writes OUTDIR.tar (one file comes back; a partial one first).
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
suites 8 150
stamp suites
prof() { # name tokens [env...]
  local name=$1 n=$2; shift 2
  env "$@" timeout 60 $K run $dir/q8-2.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens $n --block $n \
    > /dev/null 2> $out/prof-$name-$n.txt
}
prof default 512
prof default 2048
prof parts2 2048 KILN_ATTN_PARTS=2
stamp prof
for p in qwen3-0.6b qwen3-8b; do
  timeout 100 $K diverge $dir/$p.gguf --device cuda:0 -n 16 > $out/div-$p.md 2>&1; echo "rc=$?" >> $out/div-$p.md
done
stamp diverge
timeout 60 python3 bench/torch_shapes.py 4096 4096 1024 12288 32 8 128 512 2048 > $out/torch-8b.txt 2>&1
tar cf $out-part.tar -C $(dirname $out) $(basename $out)
wait $bpid
stamp llbuild
for p in qwen3-8b qwen3-0.6b qwen3-4b; do
  left=$(( 575 - ($(date +%s) - start) ))
  [ $left -gt 30 ] || break
  KILN=$K MODELS="$dir/$p.gguf" P=24,512,2048 N=32 R=3 DEVICES=cuda:0 timeout $left bash .peers/side-by-side.sh \
    > $out/sbs-$p.md 2>&1
  stamp "sbs $p"
done
tar cf $out.tar -C $(dirname $out) $(basename $out)
