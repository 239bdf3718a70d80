#!/usr/bin/env bash
# Issue 18's closing measure (one call, under 10 minutes; run it on the H200 where one can
# be had): the quantized suites on cuda:0 (kernels and the whole-model plan gates); qwen3-8b
# Q4_K_M and Q8_0 and qwen3-0.6b Q4_K_M synthesized while llama.cpp builds (both on the
# CPU at once: the 8B's synthesis then takes ~170 s, the build ~420); kiln diverge on
# testdata's dense-Q4_K_M on cuda:0 and vulkan:0; the side-by-side on cuda:0 (pp24, pp512,
# tg32, medians of 3), then kiln bench on vulkan:0 (one repetition). Binaries in devrun/.
# Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $out/gpu.txt 2>&1
m8=$dir/qwen3-8b-Q4_K_M.gguf m8q8=$dir/qwen3-8b-Q8_0.gguf m06=$dir/qwen3-0.6b-Q4_K_M.gguf
llama_build
( timeout 300 $K synth --preset qwen3-8b --quant Q4_K_M -o $m8 > $out/synth-8b.txt 2>&1
  timeout 100 $K synth --preset qwen3-8b --quant Q8_0 -o $m8q8 > $out/synth-8bq8.txt 2>&1
  timeout 60 $K synth --preset qwen3-0.6b --quant Q4_K_M -o $m06 > $out/synth-06.txt 2>&1; stamp synth ) &
sp=$!
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j8 --filter 'kernels_quant/*' > $out/kern-q.txt 2>&1; echo "rc=$?" >> $out/kern-q.txt
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j8 --filter 'plan_quant*/*' > $out/plan-q.txt 2>&1; echo "rc=$?" >> $out/plan-q.txt
stamp tests; tarball
for dev in cuda:0 vulkan:0; do
  timeout 60 $K diverge $KILN_TESTDATA/models/dense-Q4_K_M.gguf --device $dev -n 16 > $out/diverge-${dev%:0}.md 2>&1
done
stamp diverge; tarball
wait $sp
llama_wait; tarball
KILN=$K MODELS="$m8 $m8q8 $m06" P=24,512 N=32 R=3 DEVICES="cuda:0" timeout 150 bash .peers/side-by-side.sh \
  > $out/sbs.md 2>&1
stamp sbs; tarball
for m in $m06 $m8; do
  timeout 60 $K bench $m -p 24,512 -n 32 -r 1 --device vulkan:0 > $out/vk-$(basename $m .gguf).md 2>&1
done
stamp vulkan; tarball
