#!/usr/bin/env bash
# Session 48's one call where the device budget allows only one: what could close issues,
# most decisive first, each step's files kept as it ends.
#   issue 20: qwen3-30b-a3b under the squeeze (session 44's resizes that compile nothing),
#     --mem-limit 24GiB tg64 kiln beside llama-bench -ncmoe 28; the MoE suites on cuda:0
#     (qwen35moe against the oracle and llama.cpp's golden among them);
#   issue 14: pp24 on qwen3-8b, 4b and 0.6b beside llama-bench pp24 (fused skinny norms,
#     short attention tiles; KILN_SKINNY_NORM=0 and KILN_ATTN_SHORT=0 on 8b);
#   issue 17: kiln serve --parallel 32, qwen3-0.6b at 1 / 8 streams (cuda:0);
#   issue 16: on vulkan:0 the product suite (both cooperative tiles, and the workgroup-scope
#     variant of VK_NV_cooperative_matrix2) and the tiled quantized product's test, then pp512
#     with the workgroup-scope variant, the 128 x 128 cooperative tile and the 64 x 64 one.
# The 30B (57 GiB) takes /dev/shm; the dense models go to the disk. Binaries in devrun/,
# llama.cpp from .peers. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
m=$dir/qwen3-30b-a3b.gguf d2=/tmp/kb
mkdir -p $d2
llama_build
synth qwen3-0.6b
[ -f $m ] || timeout 300 $K synth --preset qwen3-30b-a3b -o $m > $out/synth.txt 2>&1; stamp synth30; tarball
( for p in qwen3-8b qwen3-4b; do [ -f $d2/$p.gguf ] || timeout 150 $K synth --preset $p -o $d2/$p.gguf > /dev/null; done
  stamp synth-dense ) &
STAGES=squeeze timeout 130 bash bench/h200-issue20-cache.sh $out/squeeze; stamp squeeze; tarball
timeout 60 $K bench $m -p 0 -n 64 -r 3 --device cuda:0 --mem-limit 24GiB > $out/limit-kiln.md 2>&1; stamp limit-kiln; tarball
echo "== MoE suites on cuda:0" >> $out/tests.txt
KILN_TEST_DEVICE=cuda:0 timeout 80 $T -j8 --filter '*moe*/*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
stamp tests; tarball
while ! grep -q synth-dense $out/times.txt; do sleep 2; done
for p in $d2/qwen3-8b $d2/qwen3-4b $dir/qwen3-0.6b; do
  timeout 40 $K bench $p.gguf -p 24 -n 0 -r 5 --device cuda:0 > $out/pp24-$(basename $p).md 2>&1
done
KILN_SKINNY_NORM=0 timeout 40 $K bench $d2/qwen3-8b.gguf -p 24 -n 0 -r 5 --device cuda:0 > $out/pp24-8b-unfused.md 2>&1
KILN_ATTN_SHORT=0 timeout 40 $K bench $d2/qwen3-8b.gguf -p 24 -n 0 -r 5 --device cuda:0 > $out/pp24-8b-attn32.md 2>&1
stamp kiln-pp24; tarball
llama_wait
for p in $d2/qwen3-8b $d2/qwen3-4b $dir/qwen3-0.6b; do
  timeout 40 $L -m $p.gguf -ngl 99 -fa 1 -p 24 -n 0 -r 5 > $out/llama-pp24-$(basename $p).md 2>&1
done
stamp llama-pp24; tarball
timeout 60 $L -m $m -ngl 99 -fa 1 -ncmoe 28 -p 0 -n 64 -r 3 > $out/limit-llama.md 2>&1; stamp limit-llama; tarball
MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8" SUITES=0 timeout 80 bash bench/h200-batch.sh $out/serve06
stamp serve06; tarball
echo "== on vulkan:0: kernels_matmul (both cooperative tiles forced on every shape), the tiled quantized product" >> $out/tests.txt
timeout 70 $T -j8 --filter 'kernels_matmul/*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
timeout 30 $T --filter 'kernels_quant/matmul_q_tiled*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
tarball
timeout 30 $K probe > $out/probe.txt 2>&1
for t in wg large small; do
  KILN_MATMUL_COOP=$t timeout 30 $K bench $d2/qwen3-8b.gguf -p 512 -n 0 -r 3 --device vulkan:0 > $out/vk-pp512-8b-$t.md 2>&1
  tarball
done
echo "== on vulkan:0 with KILN_MATMUL_COOP=wg: the whole-model checks (plan)" >> $out/tests.txt
KILN_MATMUL_COOP=wg timeout 60 $T -j8 --filter 'plan/*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
stamp vulkan; tarball
