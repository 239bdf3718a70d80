#!/usr/bin/env bash
# Prepared in session 50 for the next device call: why the cooperative-matrix prefill
# attention (kernels/attn_prefill_coop.c) is wrong on NVIDIA's Vulkan, and the suites the
# product tile by the grid still needs there.
#   kernels_async/* on vulkan:0 (the async copy's lowering has never run on a Vulkan GPU);
#   the dump test's modes (KILN_ATTN_COOP_DBG: 32 unfoldable K/V offsets, 64 plain staging,
#     256 the flag array 16 bytes, 512 the flag array declared first,
#     128 V in its own array, and their sums);
#   kernels_matmul/* and plan/* on vulkan:0 (the staged workgroup-scope product among them);
#   the staged workgroup-scope product's rate (KILN_COOP2_STAGED=1, matmul_coop2.c) by tiling.
set -u
out=$1
source bench/h200-common.sh
# the fragment rate (kn_frag_rate: the matrix units through each backend) beside the product's
timeout 60 $K probe --measure > $out/probe-measure.txt 2>&1
KILN_TEST_DEVICE=vulkan:0 timeout 30 $T --filter 'kernels_frag_rate/*' > $out/frag-vk.txt 2>&1; echo "rc=$?" >> $out/frag-vk.txt
KILN_TEST_DEVICE=cuda:0 timeout 30 $T --filter 'kernels_frag_rate/*' > $out/frag-cuda.txt 2>&1; echo "rc=$?" >> $out/frag-cuda.txt
KILN_TEST_DEVICE=vulkan:0 timeout 60 $T -j8 --filter 'kernels_async/*' > $out/async-vk.txt 2>&1; echo "rc=$?" >> $out/async-vk.txt
KILN_ATTN_COOP_DBG_TEST=1 timeout 100 $T --filter 'kernels_attn_prefill/cooperative_debug_dump' > $out/dbg.txt 2>&1
echo "rc=$?" >> $out/dbg.txt
tarball
KILN_TEST_DEVICE=vulkan:0 timeout 100 $T -j8 --filter 'kernels_matmul/*' > $out/kmm-vk.txt 2>&1; echo "rc=$?" >> $out/kmm-vk.txt
KILN_TEST_DEVICE=vulkan:0 timeout 150 $T -j8 --filter 'plan/*' > $out/plan-vk.txt 2>&1; echo "rc=$?" >> $out/plan-vk.txt
tarball
for t in 32,128,4,1,32 64,64,2,2,32 32,64,4,2,32 32,128,2,1,32 32,64,2,2,32; do
  echo "== KILN_COOP2_STAGED=1 KILN_COOP2=$t" >> $out/staged-sweep.txt
  KILN_COOP2_STAGED=1 KILN_COOP2=$t timeout 40 $K probe --measure >> $out/staged-sweep.txt 2>&1
done
tarball
# the staged workgroup-scope product on a model: qwen3-0.6b and 8b pp512 on vulkan:0
synth qwen3-0.6b qwen3-8b
for m in qwen3-0.6b qwen3-8b; do
  timeout 60 $K bench $dir/$m.gguf -p 512 -n 0 -r 3 --device vulkan:0 > $out/pp512-$m.md 2>&1
  KILN_COOP2_STAGED=1 timeout 60 $K bench $dir/$m.gguf -p 512 -n 0 -r 3 --device vulkan:0 > $out/pp512-$m-staged.md 2>&1
  tarball
done
