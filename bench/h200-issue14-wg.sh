#!/usr/bin/env bash
# Issue 14, the warpgroup product's first device call: the kernel suites on cuda:0 (the
# wgmma variant's device test among them), where a 512- and a 2048-token block of
# qwen3-8b-shaped layers goes (kiln run --profile) with kn_matmul's default (wgmma where
# its tiles fill the SMs), with other warpgroup shapes (KILN_MATMUL_WG=tile_r,kc,stages,
# async; named, it is taken whatever the grid) and without it (KILN_MATMUL_WG=0: the
# mma.sync pipeline), cuBLAS on the same
# shapes, the plan suites, and kiln bench with and without it. Binaries in devrun/.
# Writes OUTDIR.tar (one file comes back; a partial one first).
set -u
out=$1
source bench/h200-common.sh
start=$(date +%s)
stamp() { echo "$1 at $(( $(date +%s) - start )) s" >> $out/times.txt; }
KILN_TEST_DEVICE=cuda:0 timeout 240 $T -j8 --filter 'kernels_matmul/*' > $out/kmm.txt 2>&1; echo "rc=$?" >> $out/kmm.txt
stamp kmm
timeout 100 $K synth --preset qwen3-8b --layers 2 -o $dir/q8-2.gguf > /dev/null
prof() { # name tokens [env...]
  local name=$1 n=$2; shift 2
  env "$@" timeout 60 $K run $dir/q8-2.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens $n --block $n \
    > /dev/null 2> $out/prof-$name-$n.txt
}
for n in 512 2048; do
  prof default $n
  prof off $n KILN_MATMUL_WG=0
done
for cfg in 256,64,4,1 192,64,4,1 128,64,4,1 128,64,3,1 256,64,3,1 256,64,4,0 256,128,2,0 128,128,3,1; do
  prof wg-${cfg//,/.} 512 KILN_MATMUL_WG=$cfg
done
prof wg-256.64.4.1 2048 KILN_MATMUL_WG=256,64,4,1
stamp prof
timeout 120 python3 bench/torch_shapes.py 4096 4096 1024 12288 32 8 128 512 2048 > $out/torch-8b.txt 2>&1
stamp torch
tar cf $out-part.tar -C $(dirname $out) $(basename $out)
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter 'plan*/*' > $out/plan.txt 2>&1; echo "rc=$?" >> $out/plan.txt
stamp plan
synth qwen3-0.6b qwen3-8b
for p in qwen3-0.6b qwen3-8b; do
  timeout 100 $K bench $dir/$p.gguf -p 512,2048 -n 0 -r 3 --device cuda:0 -o md > $out/b-$p.md 2>&1
  KILN_MATMUL_WG=0 timeout 100 $K bench $dir/$p.gguf -p 512,2048 -n 0 -r 3 --device cuda:0 -o md > $out/b-$p-off.md 2>&1
done
stamp bench
tar cf $out.tar -C $(dirname $out) $(basename $out)
