#!/usr/bin/env bash
# Issue 18, this session's last measure (one call, about 4 minutes): the quantized kernel
# suite on cuda:0; qwen3-8b and qwen3-0.6b Q4_K_M synthesized; kiln bench pp24/pp512/tg64
# on each, and a 24-token block's profile of the 8b. Binaries in devrun/.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
m8=$dir/qwen3-8b-Q4_K_M.gguf m06=$dir/qwen3-0.6b-Q4_K_M.gguf
( timeout 200 $K synth --preset qwen3-8b --quant Q4_K_M -o $m8 > $out/synth-8b.txt 2>&1
  timeout 100 $K synth --preset qwen3-0.6b --quant Q4_K_M -o $m06 > $out/synth-06.txt 2>&1; stamp synth ) &
s8=$!
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter 'kernels_quant/*' > $out/kern-q.txt 2>&1; echo "rc=$?" >> $out/kern-q.txt
stamp kern; tarball
wait $s8
timeout 60 $K bench $m8 -p 24,512 -n 64 -r 3 --device cuda:0 > $out/bench-8b.md 2>&1; stamp bench8; tarball
timeout 40 $K bench $m06 -p 24,512 -n 64 -r 3 --device cuda:0 > $out/bench-06.md 2>&1; stamp bench06; tarball
timeout 40 $K run $m8 -p "$prompt" -n 4 --device cuda:0 --no-echo --profile-tokens 24 > $out/prof-8b-24.txt 2>&1
stamp prof; tarball
