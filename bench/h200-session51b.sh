#!/usr/bin/env bash
# Session 51's issue 17 call: qwen3-0.6b's 8-stream steps are launch-bound (9 launches a
# layer against decode's 7: the two norms apart from the products). Whether the norms
# inside the skinny products (KILN_SKINNY_NORM=1, slower at 24 rows in session 49) pay at
# 8: where a step of 8 goes both ways (kiln run --profile-step 8), then kiln serve at 1 and
# 8 streams on cuda:0 both ways, then vulkan:0 at 1 and 8 streams (default).
set -u
out=$1
source bench/h200-common.sh
synth qwen3-0.6b
for nm in 0 1; do
  KILN_SKINNY_NORM=$nm timeout 60 $K run $dir/qwen3-0.6b.gguf --device cuda:0 -p "$prompt" -n 4 --profile-tokens 24 \
    --profile-step 8 > /dev/null 2> $out/prof-step8-norm$nm.txt
done
tarball
KILN_SKINNY_NORM=0 MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8 8" SUITES=0 timeout 100 bash bench/h200-batch.sh $out/serve-norm0
tarball
KILN_SKINNY_NORM=1 MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8 8" SUITES=0 timeout 100 bash bench/h200-batch.sh $out/serve-norm1
tarball
MODELS=qwen3-0.6b DEVICES=vulkan:0 STREAMS="1 8 8" SUITES=0 timeout 100 bash bench/h200-batch.sh $out/serve-vk
tarball
