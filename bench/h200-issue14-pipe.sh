#!/usr/bin/env bash
# Issue 14, item 3 (the sm_80+ pipeline) on the H200, one call: the CUDA kernel and plan
# suites; where a 512-token block of qwen3-8b goes (kiln run --profile) with the pipeline
# at its default shape, at other shapes (KILN_MATMUL_PIPE) and without it (--caps
# no-async-copy: the 64 x 64 kernel), beside cuBLAS on the same shapes; kiln bench on
# qwen3-0.6b and qwen3-8b; kiln diverge on qwen3-0.6b. Binaries as bench/h200-issue13.sh
# (devrun/). Usage: bash bench/h200-issue14-pipe.sh OUTDIR
set -u
out=$1
source bench/h200-common.sh
synth qwen3-0.6b qwen3-8b
suites 8 150
prof() { # name, then env/caps
  local name=$1; shift
  env "$@" timeout 90 $K run $dir/qwen3-8b.gguf -p "$prompt" -n 4 --device cuda:0 --no-echo --profile-tokens 512 \
    ${CAPS:+--caps $CAPS} > /dev/null 2> $out/prof-$name.txt
}
prof default
CAPS=no-async-copy prof mma64
for cfg in 2,2,4,8,32,3 2,4,4,4,32,4 2,2,4,8,64,3 4,2,4,4,32,4; do prof pipe-${cfg//,/.} KILN_MATMUL_PIPE=$cfg; done
timeout 120 python3 bench/torch_shapes.py 4096 4096 1024 12288 32 8 128 24 512 2048 > $out/torch-8b.txt 2>&1
for p in qwen3-0.6b qwen3-8b; do
  timeout 150 $K bench $dir/$p.gguf -p 24,512,2048 -n 32 -r 3 --device cuda:0 -o md > $out/b-$p.md 2>&1
done
timeout 90 $K diverge $dir/qwen3-0.6b.gguf --device cuda:0 -n 16 > $out/div.md 2>&1; echo "rc=$?" >> $out/div.md
