#!/usr/bin/env bash
# Prepared in session 52 (no device lent then) for the next call. Issue 18 on Vulkan: the
# quantized prefill on cooperative matrices (kernels/matmul_q_coop.c, new, never run on a
# GPU): first its kernel suite and the plan gate on vulkan:0 (stride-0 fragment loads and
# frag.mul_add are new to NVIDIA's driver), then qwen3-0.6b and qwen3-8b Q4_K_M pp24 /
# pp512 / tg32 on vulkan:0 with it and with KILN_MATMUL_Q_COOP=0 (the tiled SIMT kernel),
# beside cuda:0; the 8B's 512-token block profile on vulkan:0. Then issue 17's serve run
# (bench/h200-session52a.sh's first stage). Writes OUTDIR.tar as it goes.
set -u
out=$1
source bench/h200-common.sh
# the new kernel is opt-in on a GPU (KILN_MATMUL_Q_COOP=1) until this call shows it right
timeout 120 $T --filter 'kernels_quant/matmul_q_cooperative*' > $out/kq-coop.txt 2>&1; echo "rc=$?" >> $out/kq-coop.txt
timeout 120 $T --filter 'kernels_matmul/*' > $out/kmm-vk.txt 2>&1; echo "rc=$?" >> $out/kmm-vk.txt
KILN_MATMUL_Q_COOP=1 timeout 200 $T --filter 'plan_quant/*' > $out/plan-quant-vk.txt 2>&1; echo "rc=$?" >> $out/plan-quant-vk.txt
stamp suites; tarball
for m in qwen3-0.6b qwen3-8b; do
  [ -f $dir/$m-q4km.gguf ] || timeout 200 $K synth --preset $m --quant Q4_K_M -o $dir/$m-q4km.gguf > /dev/null
  KILN_MATMUL_Q_COOP=1 timeout 120 $K bench $dir/$m-q4km.gguf -p 24,512 -n 32 -r 3 --device vulkan:0 --device cuda:0 \
    > $out/q4km-$m.md 2>&1
  timeout 120 $K bench $dir/$m-q4km.gguf -p 512 -n 0 -r 3 --device vulkan:0 > $out/q4km-$m-tiled.md 2>&1
  stamp "q4km $m"; tarball
done
KILN_MATMUL_Q_COOP=1 timeout 90 $K run $dir/qwen3-8b-q4km.gguf --device vulkan:0 -p "$prompt" -n 2 --no-echo --profile-tokens 512 \
  > /dev/null 2> $out/prof512-8b-q4km-vk.txt
stamp prof; tarball
synth qwen3-0.6b qwen3-8b
MODELS="qwen3-0.6b qwen3-8b" DEVICES=cuda:0 STREAMS="1 8 32" SUITES=0 MIXED=0 timeout 200 bash bench/h200-batch.sh $out/serve-cuda
stamp serve-cuda; tarball
