#!/usr/bin/env bash
# The H200 after the Vulkan skinny products (16-byte fragment loads), the strided matvec
# with several rows a subgroup, the 8-token convolution, the subgroup DeltaNet norm and
# the blocked skinny beta/alpha product. PHASE 1: the matmul and DeltaNet suites on
# vulkan:0 and cuda:0, the 24-token block profiled on vulkan:0 (qwen3.5-0.8b with forced
# KILN_SKINNY configurations and chunks, and 4b) and on cuda:0 (4b, with four row
# fragments forced; and its 512-token block). PHASE 2: kiln bench on vulkan:0 (0.8b, 4b)
# and the plan suite on cuda:0 and vulkan:0. Writes OUTDIR.tar.
set -u
out=$1 phase=$2
source bench/h200-common.sh
synth qwen3.5-0.8b qwen3.5-4b
suite() { # name device filter timeout
  KILN_TEST_DEVICE=$2 timeout $4 $T -j8 --filter "$3" > $out/$1.txt 2>&1; echo "rc=$?" >> $out/$1.txt
}
prof() { # name model device tokens [env...]
  local name=$1 m=$2 d=$3 n=$4; shift 4
  env "$@" timeout 90 $K run $dir/$m.gguf -p "$prompt" -n 2 --device $d --no-echo --profile-tokens $n \
    > /dev/null 2> $out/prof-$name.txt
}
if [ "$phase" = 1 ]; then
  suite vk-matmul vulkan:0 'kernels_matmul/*' 150
  suite cu-matmul cuda:0 'kernels_matmul/*' 150
  suite vk-dn vulkan:0 'kernels_deltanet/*' 100
  suite cu-dn cuda:0 'kernels_deltanet/*' 100
  suite vk-kernels vulkan:0 'kernels/*' 100
  stamp suites
  tarball
  prof vk-08 qwen3.5-0.8b vulkan:0 24
  prof vk-4b qwen3.5-4b vulkan:0 24
  for cfg in 1,16,0,2 2,16,0,2 4,4,0,2; do prof vk-08-$cfg qwen3.5-0.8b vulkan:0 24 KILN_SKINNY=$cfg; done
  prof vk-08-c16 qwen3.5-0.8b vulkan:0 24 KILN_DN_SHORT_CHUNK=16
  stamp vk-profiles
  tarball
  prof cu-4b qwen3.5-4b cuda:0 24
  prof cu-4b-444 qwen3.5-4b cuda:0 24 KILN_SKINNY=4,4,0,2
  prof cu-4b-484 qwen3.5-4b cuda:0 24 KILN_SKINNY=4,8,0,2
  prof cu-4b-512 qwen3.5-4b cuda:0 512
  stamp cu-profiles
  tarball
else
  for m in qwen3.5-0.8b qwen3.5-4b; do
    timeout 100 $K bench $dir/$m.gguf -p 24,512 -n 16 -r 3 --device vulkan:0 -o md > $out/b-vk-$m.md 2>&1
  done
  stamp bench
  tarball
  suite cu-plan cuda:0 'plan*/*' 200
  suite vk-plan vulkan:0 'plan*/*' 200
  stamp plan
  tarball
fi
