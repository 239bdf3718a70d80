#!/usr/bin/env bash
# Session 51's second call: the cooperative-matrix prefill attention with every workgroup array
# a whole number of 16-byte words (spv_emit.c; call c's dump: the flag's 16 bytes fixed it):
# its suites on vulkan:0, then pp512 with it (KILN_ATTN_COOP=1) and without on qwen3-0.6b
# and 8b, and the whole-model checks with it.
set -u
out=$1
source bench/h200-common.sh
KILN_ATTN_COOP=1 KILN_TEST_DEVICE=vulkan:0 timeout 100 $T -j8 --filter 'kernels_attn_prefill/*' > $out/attn-vk.txt 2>&1
echo "rc=$?" >> $out/attn-vk.txt
tarball
synth qwen3-0.6b qwen3-8b
for m in qwen3-0.6b qwen3-8b; do
  for co in 0 1; do
    KILN_ATTN_COOP=$co timeout 40 $K bench $dir/$m.gguf -p 512 -n 0 -r 3 --device vulkan:0 > $out/pp512-$m-coop$co.md 2>&1
  done
  tarball
done
KILN_ATTN_COOP=1 timeout 40 $K run $dir/qwen3-8b.gguf --device vulkan:0 -p "$prompt" -n 2 --no-echo --profile-tokens 512 \
  > /dev/null 2> $out/prof512-8b-coop.txt
tarball
KILN_ATTN_COOP=1 KILN_TEST_DEVICE=vulkan:0 timeout 120 $T -j8 --filter 'plan/*' > $out/plan-vk-coop.txt 2>&1
echo "rc=$?" >> $out/plan-vk-coop.txt
tarball
