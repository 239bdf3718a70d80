#!/usr/bin/env bash
# Prepared in session 51 for the next call. Issue 17: kiln serve with each greedy stream's
# next token queued before its own work (engine_ops.submit_argmax, built in session 51 after
# its last call): qwen3-0.6b and 8b on cuda:0 at 1 / 8 / 32 streams, then vulkan:0 at 1 / 8
# (h200-batch.sh, without the mixed prompts). Issue 16 item 3: where Vulkan's 24-token
# block goes (the skinny products' fragment loads straight from buffers) beside CUDA's, and
# pp24 on both. Writes OUTDIR.tar as it goes.
set -u
out=$1
source bench/h200-common.sh
synth qwen3-0.6b qwen3-8b
MODELS="qwen3-0.6b qwen3-8b" DEVICES=cuda:0 STREAMS="1 8 32" SUITES=0 MIXED=0 timeout 200 bash bench/h200-batch.sh $out/serve-cuda
stamp serve-cuda; tarball
MODELS=qwen3-0.6b DEVICES=vulkan:0 STREAMS="1 8" SUITES=0 MIXED=0 timeout 80 bash bench/h200-batch.sh $out/serve-vk
stamp serve-vk; tarball
for m in qwen3-0.6b qwen3-8b; do
  for dev in vulkan:0 cuda:0; do
    timeout 60 $K run $dir/$m.gguf --device $dev -p "$prompt" -n 2 --no-echo --profile-tokens 24 > /dev/null \
      2> $out/prof24-$m-${dev%:0}.txt
  done
  timeout 60 $K bench $dir/$m.gguf -p 24 -n 0 -r 5 --device vulkan:0 --device cuda:0 > $out/pp24-$m.md 2>&1
  tarball
done
stamp done; tarball
