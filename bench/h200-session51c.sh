#!/usr/bin/env bash
# Session 51's one call (the device budget went to refused starts): the parts of 51a and 51b
# that decide the next changes, most needed first, each tarballed as it ends.
set -u
out=$1
source bench/h200-common.sh
timeout 60 $K probe --measure > $out/probe-measure.txt 2>&1
KILN_ATTN_COOP_DBG_TEST=1 timeout 100 $T --filter 'kernels_attn_prefill/cooperative_debug_dump' > $out/dbg.txt 2>&1
echo "rc=$?" >> $out/dbg.txt
KILN_TEST_DEVICE=vulkan:0 timeout 60 $T -j8 --filter 'kernels_async/*' > $out/async-vk.txt 2>&1; echo "rc=$?" >> $out/async-vk.txt
KILN_TEST_DEVICE=vulkan:0 timeout 30 $T --filter 'kernels_frag_rate/*' > $out/frag-vk.txt 2>&1; echo "rc=$?" >> $out/frag-vk.txt
KILN_TEST_DEVICE=cuda:0 timeout 30 $T --filter 'kernels_frag_rate/*' > $out/frag-cuda.txt 2>&1; echo "rc=$?" >> $out/frag-cuda.txt
stamp first; tarball
synth qwen3-0.6b
for v in "0 0" "1 0" "0 1" "1 1"; do
  set -- $v
  KILN_SKINNY_NORM=$1 KILN_ATTN_MERGED=$2 timeout 60 $K run $dir/qwen3-0.6b.gguf --device cuda:0 -p "$prompt" -n 4 \
    --profile-tokens 24 --profile-step 8 > /dev/null 2> $out/prof-step8-norm$1-merged$2.txt
done
for sm in 64 16; do
  KILN_SKINNY_MAX=$sm timeout 60 $K run $dir/qwen3-0.6b.gguf --device cuda:0 -p "$prompt" -n 4 \
    --profile-tokens 24 --profile-step 64 > /dev/null 2> $out/prof-step64-skinny$sm.txt
  KILN_SKINNY_MAX=$sm timeout 60 $K bench $dir/qwen3-0.6b.gguf -p 24,64 -n 0 -r 5 --device cuda:0 > $out/pp-06b-skinny$sm.md 2>&1
done
stamp profiles; tarball
for nm in 0 1; do
  KILN_SKINNY_NORM=$nm MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8" SUITES=0 MIXED=0 timeout 60 bash bench/h200-batch.sh $out/serve-norm$nm
  stamp serve$nm; tarball
done
KILN_TEST_DEVICE=vulkan:0 timeout 100 $T -j8 --filter 'kernels_matmul/*' > $out/kmm-vk.txt 2>&1; echo "rc=$?" >> $out/kmm-vk.txt
stamp suites; tarball
for t in 32,128,4,1,32 64,64,2,2,32 32,64,4,2,32; do
  echo "== KILN_COOP2_STAGED=1 KILN_COOP2=$t" >> $out/staged-sweep.txt
  KILN_COOP2_STAGED=1 KILN_COOP2=$t timeout 40 $K probe --measure >> $out/staged-sweep.txt 2>&1
done
stamp sweep; tarball
