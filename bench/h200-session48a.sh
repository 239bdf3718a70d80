#!/usr/bin/env bash
# Session 48's first call (issues 14 and 18): the short-prompt work of sessions 44-45 (fused
# skinny norms, short attention tiles) and the quantized prefill's short tiles measured
# whole. Suites on cuda:0 (skinny norms, short attention, quantized products, batch plan);
# kiln pp24 on qwen3-8b as built, KILN_SKINNY_NORM=0 and KILN_ATTN_SHORT=0; then side by
# side with llama-bench (pp24, pp512, tg32, medians of 3, same call): qwen3-0.6b, 4b, 8b
# bf16, and qwen3-0.6b / 8b Q4_K_M. Binaries in devrun/, llama.cpp from .peers. Writes
# OUTDIR.tar. Issue 16: kernels_matmul on vulkan:0 (the 128 x 128 cooperative tile forced on
# every shape, and the 64 x 64 one), then vulkan:0 pp512 with each tile on 0.6b and 8b.
set -u
out=$1
source bench/h200-common.sh
llama_build
synth qwen3-0.6b; stamp synth06
( synth qwen3-8b; stamp synth8
  [ -f $dir/q8b.gguf ] || timeout 200 $K synth --preset qwen3-8b --quant Q4_K_M -o $dir/q8b.gguf > /dev/null 2>&1
  stamp synthq8; synth qwen3-4b; stamp synth4 ) &
synths=$!
[ -f $dir/q06.gguf ] || timeout 100 $K synth --preset qwen3-0.6b --quant Q4_K_M -o $dir/q06.gguf > /dev/null 2>&1
for f in 'kernels_skinny_norm/*' 'kernels_attn_prefill/*' 'kernels_matmul_q*/*' 'plan_batch/*' 'plan_quant*/*'; do
  echo "== $f" >> $out/tests.txt
  KILN_TEST_DEVICE=cuda:0 timeout 60 $T -j8 --filter "$f" >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
done
echo "== kernels_matmul on vulkan:0" >> $out/tests.txt
timeout 120 $T -j8 --filter 'kernels_matmul/*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
stamp tests; tarball
while ! grep -q synth8 $out/times.txt; do sleep 2; done
timeout 40 $K bench $dir/qwen3-8b.gguf -p 24 -n 0 -r 5 --device cuda:0 > $out/pp24-8b.md 2>&1
KILN_SKINNY_NORM=0 timeout 40 $K bench $dir/qwen3-8b.gguf -p 24 -n 0 -r 5 --device cuda:0 > $out/pp24-8b-unfused.md 2>&1
KILN_ATTN_SHORT=0 timeout 40 $K bench $dir/qwen3-8b.gguf -p 24 -n 0 -r 5 --device cuda:0 > $out/pp24-8b-attn32.md 2>&1
stamp kiln-pp24; tarball
timeout 40 $K run $dir/qwen3-8b.gguf --device cuda:0 -p "$prompt" -n 8 --profile-tokens 24 > /dev/null 2> $out/prof-8b-24.txt
stamp profile; tarball
for t in default large small; do # default: the large tile where its grid fills the SMs
  for p in qwen3-8b qwen3-0.6b; do
    KILN_MATMUL_COOP=$t timeout 40 $K bench $dir/$p.gguf -p 512,2048 -n 0 -r 3 --device vulkan:0 > $out/vk-pp-$p-$t.md 2>&1
  done
done
KILN_MATMUL_COOP=large timeout 40 $K run $dir/qwen3-8b.gguf --device vulkan:0 -p "$prompt" -n 4 --profile-tokens 512 > /dev/null 2> $out/prof-vk-8b-512.txt
stamp vulkan; tarball
llama_wait
sbs bf16 24,512 cuda:0 qwen3-8b qwen3-0.6b
wait $synths
sbs quant 24,512 cuda:0 q8b q06
sbs 4b 24,512 cuda:0 qwen3-4b
