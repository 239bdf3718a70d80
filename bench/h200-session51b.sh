#!/usr/bin/env bash
# Session 51's issue 17 call: qwen3-0.6b's 8-stream steps are launch-bound (9 launches a
# layer against decode's 7: the two norms apart from the products). Whether the norms
# inside the skinny products (KILN_SKINNY_NORM=1, slower at 24 rows in session 49) pay at
# 8, and the attention's one launch with its prep (KILN_ATTN_MERGED=1: 5 launches a layer):
# where a step of 8 goes each way (kiln run --profile-step 8), then kiln serve at 1 and 8
# streams on cuda:0 each way, then vulkan:0 at 1 and 8 streams (default).
set -u
out=$1
source bench/h200-common.sh
synth qwen3-0.6b
for nm in 0 1; do
  for am in 0 1; do
    KILN_SKINNY_NORM=$nm KILN_ATTN_MERGED=$am timeout 60 $K run $dir/qwen3-0.6b.gguf --device cuda:0 -p "$prompt" -n 4 \
      --profile-tokens 24 --profile-step 8 > /dev/null 2> $out/prof-step8-norm$nm-merged$am.txt
  done
done
# the tiled (tensor-core) products from 17 rows on (KILN_SKINNY_MAX=16): steps of 32 and 64
# (a ramp's prompts), and pp24 / pp64 of qwen3-0.6b and 8b
for sm in 64 16; do
  for n in 32 64; do
    KILN_SKINNY_MAX=$sm timeout 60 $K run $dir/qwen3-0.6b.gguf --device cuda:0 -p "$prompt" -n 4 \
      --profile-tokens 24 --profile-step $n > /dev/null 2> $out/prof-step$n-skinny$sm.txt
  done
  KILN_SKINNY_MAX=$sm timeout 60 $K bench $dir/qwen3-0.6b.gguf -p 24,64 -n 0 -r 5 --device cuda:0 > $out/pp-06b-skinny$sm.md 2>&1
done
tarball
KILN_SKINNY_NORM=0 MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8 8" SUITES=0 timeout 100 bash bench/h200-batch.sh $out/serve-norm0
tarball
KILN_SKINNY_NORM=1 MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8 8" SUITES=0 timeout 100 bash bench/h200-batch.sh $out/serve-norm1
tarball
KILN_SKINNY_NORM=1 KILN_ATTN_MERGED=1 MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8 8" SUITES=0 timeout 100 bash bench/h200-batch.sh $out/serve-norm1-merged
tarball
KILN_SKINNY_MAX=16 MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8 8" SUITES=0 timeout 100 bash bench/h200-batch.sh $out/serve-skinny16
tarball
MODELS=qwen3-0.6b DEVICES=vulkan:0 STREAMS="1 8 8" SUITES=0 timeout 100 bash bench/h200-batch.sh $out/serve-vk
tarball
# issue 16 item 3: where Vulkan's 24-token block goes (the skinny products' loads straight from
# buffers), qwen3-0.6b and 8b, beside cuda:0's
synth qwen3-8b
for m in qwen3-0.6b qwen3-8b; do
  for dev in vulkan:0 cuda:0; do
    timeout 60 $K run $dir/$m.gguf --device $dev -p "$prompt" -n 2 --no-echo --profile-tokens 24 > /dev/null \
      2> $out/prof24-$m-${dev%:0}.txt
  done
  timeout 60 $K bench $dir/$m.gguf -p 24 -n 0 -r 5 --device vulkan:0 --device cuda:0 > $out/pp24-$m.md 2>&1
done
tarball
