#!/usr/bin/env bash
# Session 50's first call: what decides the next work, and the serve run issue 17 needs on
# an idle host.
#   issue 17: kiln serve --parallel 32, qwen3-0.6b at 1 / 8 streams (cuda:0), nothing else
#     running on the host;
#   issue 16: where a 512-token block goes on vulkan:0 (the workgroup-scope product) and on
#     cuda:0, qwen3-0.6b and qwen3-8b (kiln run --profile-tokens 512), kiln bench pp512.
# Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
synth qwen3-0.6b
stamp synth06
MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8" SUITES=0 timeout 90 bash bench/h200-batch.sh $out/serve06
stamp serve06; tarball
synth qwen3-8b; stamp synth8b
timeout 30 $K probe > $out/probe.txt 2>&1
for m in qwen3-0.6b qwen3-8b; do
  for dev in vulkan:0 cuda:0; do
    KILN_MATMUL_COOP=wg timeout 90 $K run $dir/$m.gguf --device $dev -p "$prompt" -n 2 --no-echo \
      --profile-tokens 512 > /dev/null 2> $out/prof-$m-${dev%:0}.txt
    stamp "prof $m $dev"; tarball
  done
  KILN_MATMUL_COOP=wg timeout 40 $K bench $dir/$m.gguf -p 512 -n 0 -r 3 --device vulkan:0 > $out/vk-pp512-$m.md 2>&1
done
stamp done; tarball
