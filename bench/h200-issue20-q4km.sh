#!/usr/bin/env bash
# Issue 20 with quantized experts (one call, under 10 minutes, llama.cpp already built by an
# earlier call on the warm machine, else SBS=0): qwen3-30b-a3b synthesized in Q4_K_M (every
# expert kept in its blocks on the device, kernels/moe_q.c), then kiln bench pp512/tg64 on
# cuda:0 beside llama.cpp's llama-bench on the same file (medians of 2), and kiln run's
# profile of a decode step. Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
m=$dir/qwen3-30b-a3b-Q4_K_M.gguf
rm -f $dir/qwen3-30b-a3b.gguf $dir/qwen3-8b*.gguf
[ -f $m ] || timeout 480 $K synth --preset qwen3-30b-a3b --quant Q4_K_M -o $m > $out/synth.txt 2>&1
stamp synth; tarball
timeout 150 $K bench $m -p 512 -n 64 -r 2 --device cuda:0 > $out/kiln.md 2>&1; stamp kiln; tarball
if [ -x /opt/peer/llama.cpp/build/bin/llama-bench ]; then
  timeout 150 /opt/peer/llama.cpp/build/bin/llama-bench -m $m -ngl 99 -fa 1 -p 512 -n 64 -r 2 > $out/llama.md 2>&1
  stamp llama; tarball
fi
timeout 100 $K run $m -p "$prompt" -n 16 --device cuda:0 --no-echo --profile > $out/prof.txt 2>&1
stamp prof; tarball
