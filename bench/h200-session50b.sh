#!/usr/bin/env bash
# Session 50's second call: the cooperative-matrix prefill attention gave zeros on the
# H100's Vulkan (call a): its intermediate values under KILN_ATTN_COOP_DBG's modes
# (the temporary kernels_attn_prefill/cooperative_debug_dump), then its two suites.
set -u
out=$1
source bench/h200-common.sh
KILN_ATTN_COOP_DBG_TEST=1 timeout 100 $T --filter 'kernels_attn_prefill/cooperative_debug_dump' > $out/dbg.txt 2>&1
echo "rc=$?" >> $out/dbg.txt
tarball
KILN_TEST_DEVICE=vulkan:0 timeout 100 $T -j8 --filter 'kernels_attn_prefill/cooperative_matrices*' > $out/coop-tests.txt 2>&1
echo "rc=$?" >> $out/coop-tests.txt
tarball
# the product tile by the grid (matmul_coop2.c: the workgroup scope only where its grid
# fills half the device): qwen3-0.6b pp512 on vulkan:0, then with the old choice forced
synth qwen3-0.6b
timeout 40 $K bench $dir/qwen3-0.6b.gguf -p 512 -n 0 -r 3 --device vulkan:0 > $out/pp512-06b-grid.md 2>&1
KILN_COOP2=64,128,2,1,32 timeout 40 $K bench $dir/qwen3-0.6b.gguf -p 512 -n 0 -r 3 --device vulkan:0 > $out/pp512-06b-wg.md 2>&1
tarball
