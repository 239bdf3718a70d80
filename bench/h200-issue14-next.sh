#!/usr/bin/env bash
# Issue 14, the next device call (written before it could run): the warpgroup product
# kernels_matmul/warpgroup_variant_on_the_device and the other kernel suites on cuda:0,
# then prefill blocks of 512, 1024 and 2048 tokens (--block) on qwen3-0.6b and qwen3-8b
# (pp2048, pp512), and pp24 with the SIMT attention back on short blocks. Binaries in
# devrun/. Writes OUTDIR.tar (one file comes back).
set -u
out=$1
source bench/h200-common.sh
synth qwen3-0.6b qwen3-8b
KILN_TEST_DEVICE=cuda:0 timeout 200 $T -j8 --filter 'kernels_matmul/*' > $out/kmm.txt 2>&1; echo "rc=$?" >> $out/kmm.txt
for p in qwen3-0.6b qwen3-8b; do
  for b in 512 1024 2048; do
    timeout 120 $K bench $dir/$p.gguf -p 512,2048 -n 0 -r 3 --device cuda:0 --block $b -o md > $out/b-$p-$b.md 2>&1
  done
  timeout 60 $K bench $dir/$p.gguf -p 24 -n 16 -r 3 --device cuda:0 -o md > $out/b-$p-24.md 2>&1
done
tar cf $out.tar -C $(dirname $out) $(basename $out)
