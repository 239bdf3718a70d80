#!/usr/bin/env bash
# Issue 14, item 3: the pipeline's shapes on the H200, one call. kiln run --profile on a
# 512-token block of qwen3-8b-shaped layers (2 layers: per-launch times are per layer)
# for each KILN_MATMUL_PIPE shape (warps_t,warps_r,frags_m,frags_n,kc,stages) and
# without the pipeline (--caps no-async-copy), the same on qwen3-0.6b, and cuBLAS on the
# same shapes. Binaries in devrun/. Writes OUTDIR.tar (one file comes back).
set -u
out=$1
source bench/h200-common.sh
timeout 100 $K synth --preset qwen3-8b --layers 2 -o $dir/q8-2.gguf > /dev/null
timeout 100 $K synth --preset qwen3-0.6b --layers 4 -o $dir/q06-4.gguf > /dev/null
for m in q8-2 q06-4; do
  for cfg in default off 2.2.4.8.32.3 2.2.4.8.64.3 2.4.4.8.32.4 4.2.4.8.32.4 2.4.4.4.32.4 2.2.4.8.32.6 2.4.4.8.64.3 4.2.4.8.64.3; do
    caps=""; envv=""
    [ $cfg = off ] && caps="--caps no-async-copy"
    [ $cfg != off ] && [ $cfg != default ] && envv="KILN_MATMUL_PIPE=${cfg//./,}"
    env $envv timeout 60 $K run $dir/$m.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens 512 $caps \
      > /dev/null 2> $out/prof-$m-$cfg.txt
  done
done
timeout 120 python3 bench/torch_shapes.py 4096 4096 1024 12288 32 8 128 512 2048 > $out/torch-8b.txt 2>&1
timeout 60 python3 bench/torch_shapes.py 1024 2048 1024 3072 16 8 128 512 2048 > $out/torch-06b.txt 2>&1
tar cf $out.tar -C $(dirname $out) $(basename $out)
