#!/usr/bin/env bash
# The H200, this session's last call: the plan suite (whole-model gates) on cuda:0 and
# vulkan:0, then kiln bench on vulkan:0 and cuda:0 for qwen3.5-0.8b (pp24, pp512, tg16),
# and the 24- and 512-token blocks of qwen3.5-4b profiled on cuda:0. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
synth qwen3.5-0.8b qwen3.5-4b
suite() { KILN_TEST_DEVICE=$2 timeout $4 $T -j12 --filter "$3" > $out/$1.txt 2>&1; echo "rc=$?" >> $out/$1.txt; }
suite cu-plan cuda:0 'plan*/*' 170
stamp cu-plan
tarball
suite vk-plan vulkan:0 'plan*/*' 120
stamp vk-plan
tarball
for d in vulkan:0 cuda:0; do
  timeout 60 $K bench $dir/qwen3.5-0.8b.gguf -p 24,512 -n 16 -r 3 --device $d -o md > $out/b-08-${d%:0}.md 2>&1
done
stamp bench
tarball
timeout 60 $K run $dir/qwen3.5-4b.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens 24 > /dev/null 2> $out/prof-cu-4b-24.txt
stamp prof
tarball
