#!/usr/bin/env bash
# Session 49's short call (the device budget left about 450 s): what one run can still
# settle, the longest waits in the background.
#   issue 17: kiln serve --parallel 32, qwen3-0.6b at 1 / 8 streams (cuda:0);
#   issue 16: kiln probe (caps.wg_mma), the product suite on vulkan:0 (both KHR tiles and
#     the workgroup-scope variant against the C reference), pp512 on qwen3-0.6b with each;
#   issue 14: pp24 on qwen3-8b, 4b and 0.6b beside llama-bench pp24 (the fused skinny norms
#     and short attention tiles A/B on 8b);
#   issue 20: the MoE suites on cuda:0 if time is left.
# Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
llama_build
synth qwen3-0.6b
( synth qwen3-8b qwen3-4b; stamp synth-dense ) &
MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8" SUITES=0 timeout 80 bash bench/h200-batch.sh $out/serve06
stamp serve06; tarball
timeout 30 $K probe > $out/probe.txt 2>&1
echo "== on vulkan:0: kernels_matmul (both cooperative tiles forced, the workgroup-scope variant)" >> $out/tests.txt
timeout 70 $T -j8 --filter 'kernels_matmul/*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
tarball
for t in wg large small; do
  KILN_MATMUL_COOP=$t timeout 25 $K bench $dir/qwen3-0.6b.gguf -p 512 -n 0 -r 3 --device vulkan:0 > $out/vk-pp512-06b-$t.md 2>&1
done
stamp vulkan; tarball
while ! grep -q synth-dense $out/times.txt; do sleep 2; done
for p in qwen3-8b qwen3-4b qwen3-0.6b; do
  timeout 30 $K bench $dir/$p.gguf -p 24 -n 0 -r 5 --device cuda:0 > $out/pp24-$p.md 2>&1
done
KILN_SKINNY_NORM=0 timeout 30 $K bench $dir/qwen3-8b.gguf -p 24 -n 0 -r 5 --device cuda:0 > $out/pp24-8b-unfused.md 2>&1
KILN_ATTN_SHORT=0 timeout 30 $K bench $dir/qwen3-8b.gguf -p 24 -n 0 -r 5 --device cuda:0 > $out/pp24-8b-attn32.md 2>&1
stamp kiln-pp24; tarball
llama_wait
for p in qwen3-8b qwen3-4b qwen3-0.6b; do
  timeout 30 $L -m $dir/$p.gguf -ngl 99 -fa 1 -p 24 -n 0 -r 5 > $out/llama-pp24-$p.md 2>&1
done
stamp llama-pp24; tarball
echo "== MoE suites on cuda:0" >> $out/tests.txt
KILN_TEST_DEVICE=cuda:0 timeout 80 $T -j8 --filter '*moe*/*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
stamp tests; tarball
