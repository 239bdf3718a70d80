#!/usr/bin/env bash
# Session 50's third call: the product tile by the grid (matmul_coop2.c) is the default on
# Vulkan now: kernels_matmul/* and plan/* on vulkan:0, and where qwen3-0.6b's 512-token
# block goes with it.
set -u
out=$1
source bench/h200-common.sh
synth qwen3-0.6b
KILN_TEST_DEVICE=vulkan:0 timeout 100 $T -j8 --filter 'kernels_matmul/*' > $out/kmm-vk.txt 2>&1; echo "rc=$?" >> $out/kmm-vk.txt
tarball
KILN_TEST_DEVICE=vulkan:0 timeout 150 $T -j8 --filter 'plan/*' > $out/plan-vk.txt 2>&1; echo "rc=$?" >> $out/plan-vk.txt
tarball
timeout 60 $K run $dir/qwen3-0.6b.gguf --device vulkan:0 -p "$prompt" -n 2 --no-echo --profile-tokens 512 > /dev/null 2> $out/prof-06b-vk.txt
tarball
