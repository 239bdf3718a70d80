#!/usr/bin/env bash
# Issue 18 on the H200 (one call, under 10 minutes): llama.cpp built in the background; kiln
# synth --quant writes qwen3-8b as Q4_K_M and Q8_0 and qwen3-0.6b as Q4_K_M (kiln's quantizer:
# llama-quantize's bytes for the same f16/bf16 values); the quantized kernel and plan suites on
# cuda:0; kiln diverge on the 0.6b Q4_K_M (cuda:0, vulkan:0); a decode and 512-token profile of
# the 8B Q4_K_M on cuda:0; then the side-by-side (kiln bench and llama-bench -fa 1 on the same
# files, pp24/pp512/tg32, medians of 3). Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun  # lib/, kiln, kiln-tests: packed to fit the carry
source bench/h200-common.sh
llama_build
for q in Q4_K_M Q8_0; do
  [ -f $dir/qwen3-8b-$q.gguf ] || timeout 200 $K synth --preset qwen3-8b --quant $q -o $dir/qwen3-8b-$q.gguf > $out/synth-8b-$q.txt 2>&1
done
timeout 60 $K synth --preset qwen3-0.6b --quant Q4_K_M -o $dir/qwen3-0.6b-Q4_K_M.gguf > $out/synth-06b.txt 2>&1
stamp synth
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter 'kernels_quant/*' > $out/kern-q.txt 2>&1; echo "rc=$?" >> $out/kern-q.txt
KILN_TEST_DEVICE=cuda:0 timeout 200 $T -j8 --filter 'plan_quant/*' --verbose > $out/plan-q.txt 2>&1; echo "rc=$?" >> $out/plan-q.txt
stamp suites
timeout 90 $K diverge $dir/qwen3-0.6b-Q4_K_M.gguf --device cuda:0 --device vulkan:0 -n 16 > $out/div-06b-q4km.md 2>&1
echo "rc=$?" >> $out/div-06b-q4km.md
timeout 90 $K run $dir/qwen3-8b-Q4_K_M.gguf -p "$prompt" -n 8 --device cuda:0 --no-echo --profile-tokens 512 \
  > /dev/null 2> $out/prof-8b-q4km.txt
stamp checks
tarball
llama_wait
for m in qwen3-8b-Q4_K_M qwen3-8b-Q8_0 qwen3-0.6b-Q4_K_M; do
  left=$(( 560 - ($(date +%s) - start) ))
  [ $left -gt 30 ] || break
  KILN=$K MODELS="$dir/$m.gguf" P=24,512 N=32 R=3 DEVICES="cuda:0 vulkan:0" timeout $left bash .peers/side-by-side.sh \
    > $out/sbs-$m.md 2>&1
  stamp "sbs $m"
  tarball
done
tarball
