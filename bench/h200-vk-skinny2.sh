#!/usr/bin/env bash
# Vulkan on the H200: the skinny products loading fragments 16 bytes a lane
# (ir_frag_load_aligned). The matmul suite on vulkan:0; the 24-token block profiled on
# qwen3.5-0.8b with the default configuration and forced ones (KILN_SKINNY), and on 4b;
# qwen3.5-4b's on cuda:0 with four row fragments forced;
# kiln bench pp24 on vulkan:0 for both. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
KILN_TEST_DEVICE=vulkan:0 timeout 150 $T -j8 --filter 'kernels_matmul/*' > $out/vk-matmul.txt 2>&1; echo "rc=$?" >> $out/vk-matmul.txt
KILN_TEST_DEVICE=vulkan:0 timeout 100 $T -j8 --filter "kernels/*" > $out/vk-kernels.txt 2>&1; echo "rc=$?" >> $out/vk-kernels.txt
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter 'kernels_matmul/*' > $out/cu-matmul.txt 2>&1; echo "rc=$?" >> $out/cu-matmul.txt
stamp matmul
tarball
synth qwen3.5-0.8b qwen3.5-4b
prof() { # name model [env...]
  local name=$1 m=$2; shift 2
  env "$@" timeout 90 $K run $dir/$m.gguf -p "$prompt" -n 2 --device vulkan:0 --no-echo --profile-tokens 24 \
    > /dev/null 2> $out/prof-$name.txt
}
prof 08 qwen3.5-0.8b
prof 4b qwen3.5-4b
for cfg in 1,16,0,2 2,16,0,2 1,8,4,2; do prof 08-$cfg qwen3.5-0.8b KILN_SKINNY=$cfg; done
prof 08-c16 qwen3.5-0.8b KILN_DN_SHORT_CHUNK=16
prof 08-c8 qwen3.5-0.8b KILN_DN_SHORT_CHUNK=8
cprof() { # name [env...]: qwen3.5-4b's 24-token block on cuda:0
  local name=$1; shift
  env "$@" timeout 90 $K run $dir/qwen3.5-4b.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens 24 \
    > /dev/null 2> $out/cprof-$name.txt
}
cprof 4b
cprof 4b-444 KILN_SKINNY=4,4,0,2
cprof 4b-484 KILN_SKINNY=4,8,0,2
stamp profiles
tarball
for m in qwen3.5-0.8b qwen3.5-4b; do
  timeout 100 $K bench $dir/$m.gguf -p 24,512 -n 16 -r 3 --device vulkan:0 -o md > $out/b-$m.md 2>&1
done
stamp bench
tarball
