#!/usr/bin/env bash
# Vulkan on the H200: the skinny products of short blocks on cooperative matrices loaded
# whole from the buffers. The matmul suite and the plan suite on vulkan:0, then the
# 24-token block profiled (qwen3.5-0.8b and 4b) and kiln bench pp24/pp512/tg16 on vulkan:0
# and cuda:0 (0.8b). Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
KILN_TEST_DEVICE=vulkan:0 timeout 150 $T -j8 --filter 'kernels_matmul/*' > $out/vk-matmul.txt 2>&1; echo "rc=$?" >> $out/vk-matmul.txt
stamp matmul
tarball
synth qwen3.5-0.8b qwen3.5-4b
stamp synth
for m in qwen3.5-0.8b qwen3.5-4b; do
  timeout 90 $K run $dir/$m.gguf -p "$prompt" -n 2 --device vulkan:0 --no-echo --profile-tokens 24 > /dev/null \
    2> $out/prof-vk-$m-24.txt
done
stamp profiles
tarball
for d in vulkan:0 cuda:0; do
  timeout 100 $K bench $dir/qwen3.5-0.8b.gguf -p 24,512 -n 16 -r 3 --device $d -o md > $out/b-08-${d%:0}.md 2>&1
done
stamp bench
tarball
KILN_TEST_DEVICE=vulkan:0 timeout 200 $T -j8 --filter 'plan*/*' > $out/vk-plan.txt 2>&1; echo "rc=$?" >> $out/vk-plan.txt
stamp plan
tarball
