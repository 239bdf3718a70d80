#!/usr/bin/env bash
# Session 53, first call. llama.cpp built in the background for the second call
# (h200-session53c.sh). Issue 18 on Vulkan: the quantized prefill on cooperative matrices
# (kernels/matmul_q_coop.c, never run on a GPU before): its kernel suite, the product suite
# and the quantized plan gate on vulkan:0 with KILN_MATMUL_Q_COOP=1, then Q4_K_M pp24 /
# pp512 on both models with it, with the tiled SIMT kernel (=0), beside cuda:0; the 8B's
# 512-token block profile on vulkan:0. Writes OUTDIR.tar as it goes.
set -u
out=$1
source bench/h200-common.sh
llama_build
export KILN_TEST_J=4
# issue 18's decode: the bf16 quantized matrix-vector products with the magic float's offset
# folded into the sub-block sums (KILN_MATVEC_Q_FOLD, new): right on cuda:0, then tg64 A/B
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j4 --filter 'kernels_quant/*' > $out/kq-cuda.txt 2>&1; echo "rc=$?" >> $out/kq-cuda.txt
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j4 --filter 'plan_quant/*' > $out/plan-quant-cuda.txt 2>&1; echo "rc=$?" >> $out/plan-quant-cuda.txt
stamp kq-cuda; tarball
timeout 120 $T -j4 --filter 'kernels_quant/matmul_q_cooperative*' > $out/kq-coop.txt 2>&1; echo "rc=$?" >> $out/kq-coop.txt
stamp kq-coop; tarball
KILN_MATMUL_Q_COOP=1 timeout 150 $T -j4 --filter 'plan_quant/*' > $out/plan-quant-vk.txt 2>&1; echo "rc=$?" >> $out/plan-quant-vk.txt
stamp plan-quant; tarball
for m in qwen3-0.6b qwen3-8b; do
  [ -f $dir/$m-q4km.gguf ] || timeout 200 $K synth --preset $m --quant Q4_K_M -o $dir/$m-q4km.gguf > /dev/null
  stamp "synth $m"
  KILN_MATMUL_Q_COOP=1 timeout 100 $K bench $dir/$m-q4km.gguf -p 24,512 -n 0 -r 3 --device vulkan:0 --device cuda:0 \
    > $out/q4km-$m.md 2>&1
  KILN_MATMUL_Q_COOP=0 timeout 60 $K bench $dir/$m-q4km.gguf -p 512 -n 0 -r 3 --device vulkan:0 > $out/q4km-$m-tiled.md 2>&1
  for fold in 1 0 1; do
    KILN_MATVEC_Q_FOLD=$fold timeout 60 $K bench $dir/$m-q4km.gguf -p 0 -n 64 -r 3 --device cuda:0 >> $out/tg-fold-$m.md 2>&1
  done
  stamp "q4km $m"; tarball
done
for fold in 1 0; do
  KILN_MATVEC_Q_FOLD=$fold timeout 60 $K run $dir/qwen3-8b-q4km.gguf --device cuda:0 -p "$prompt" -n 8 --no-echo --profile \
    > /dev/null 2> $out/prof-decode-8b-q4km-fold$fold.txt
done
KILN_MATMUL_Q_COOP=1 timeout 60 $K run $dir/qwen3-8b-q4km.gguf --device vulkan:0 -p "$prompt" -n 2 --no-echo --profile-tokens 512 \
  > /dev/null 2> $out/prof512-8b-q4km-vk.txt
stamp prof; tarball
timeout 100 $T -j4 --filter 'kernels_matmul/*' > $out/kmm-vk.txt 2>&1; echo "rc=$?" >> $out/kmm-vk.txt
stamp kmm; tarball
