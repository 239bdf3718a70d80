#!/usr/bin/env bash
# Session 45's second call (issue 17): the batched steps with the short block's norms inside
# their products (kn_matmul_skinny_norm, session 44), callers polling a running step, graphs
# uploaded when recorded (a cold slot's first token), the page tables' changed spans
# uploaded alone, short prompts in the decoding step (session 45): kiln serve --parallel 32 against
# --parallel 1 on qwen3-0.6b and qwen3-8b (cuda:0, 1 / 8 / 32 streams, the mixed prompts),
# then qwen3-0.6b on vulkan:0 (1 / 8 streams), and where a step of 8 tokens goes on cuda:0
# with the fused norms and without (KILN_SKINNY_NORM=0). Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
synth qwen3-0.6b qwen3-8b; stamp synth
for fused in 1 0; do
  KILN_SKINNY_NORM=$fused timeout 60 $K run $dir/qwen3-0.6b.gguf --device cuda:0 -p "$prompt" -n 4 --profile-tokens 24 \
    --profile-step 8 > /dev/null 2> $out/prof-0.6b-step8-norm$fused.txt
done
stamp profiles; tarball
MODELS="qwen3-0.6b qwen3-8b" DEVICES=cuda:0 STREAMS="1 8 32" SUITES=0 timeout 300 bash bench/h200-batch.sh $out/cuda
stamp batch-cuda; tarball
MODELS=qwen3-0.6b DEVICES=vulkan:0 STREAMS="1 8" SUITES=0 timeout 150 bash bench/h200-batch.sh $out/vulkan
stamp batch-vulkan; tarball
