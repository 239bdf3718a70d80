#!/usr/bin/env bash
# Session 53: issue 18 on Vulkan, the quantized prefill on cooperative matrices
# (kernels/matmul_q_coop.c, never run on a GPU before): its suites and the plan gate on
# vulkan:0 with KILN_MATMUL_Q_COOP=1, then Q4_K_M pp24 / pp512 with it beside cuda:0 and
# without it (the tiled SIMT kernel), the 8B's 512-token block profile. Run from
# h200-session53b.sh or 53c.sh (whichever reaches it first on a warm machine; a marker in
# the models' folder says it ran).
set -u
out=$1
source bench/h200-common.sh
f=$dir/qwen3-8b-q4km.gguf
[ -f $dir/vk-done ] && exit 0
timeout 120 $T -j4 --filter 'kernels_quant/matmul_q_cooperative*' > $out/kq-coop.txt 2>&1; echo "rc=$?" >> $out/kq-coop.txt
KILN_MATMUL_Q_COOP=1 timeout 150 $T -j4 --filter 'plan_quant/*' > $out/plan-quant-vk.txt 2>&1; echo "rc=$?" >> $out/plan-quant-vk.txt
stamp vk-suites; tarball
for m in qwen3-0.6b qwen3-8b; do
  KILN_MATMUL_Q_COOP=1 timeout 100 $K bench $dir/$m-q4km.gguf -p 24,512 -n 0 -r 3 --device vulkan:0 --device cuda:0 \
    > $out/q4km-$m.md 2>&1
  KILN_MATMUL_Q_COOP=0 timeout 60 $K bench $dir/$m-q4km.gguf -p 512 -n 0 -r 3 --device vulkan:0 > $out/q4km-$m-tiled.md 2>&1
  stamp "q4km $m"; tarball
done
KILN_MATMUL_Q_COOP=1 timeout 60 $K run $f --device vulkan:0 -p "$prompt" -n 2 --no-echo --profile-tokens 512 \
  > /dev/null 2> $out/prof512-8b-q4km-vk.txt
stamp prof-vk; tarball
touch $dir/vk-done
