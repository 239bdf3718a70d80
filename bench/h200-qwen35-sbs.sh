#!/usr/bin/env bash
# Issue 15 on the H200: the Qwen3.5 suites on cuda:0 and qwen35-tiny through kiln run
# (h200-qwen35-check.sh), then llama.cpp built in the same call and the side-by-side on
# qwen3.5-0.8b and qwen3.5-4b (kiln cuda:0 and vulkan:0, llama-bench -fa 1; pp24, pp512,
# pp4096, tg32, medians of 3), and a 512-token profile of each (the 0.8b's on vulkan:0 too).
# Binaries in devrun/.
# Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
start=$(date +%s)
stamp() { echo "$1 at $(( $(date +%s) - start )) s" >> $out/times.txt; }
(bash .peers/build-llamacpp-cuda.sh > $out/llbuild.txt 2>&1) &
bpid=$!
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j4 --filter 'kernels_deltanet/*' > $out/kern-dn.txt 2>&1; echo "rc=$?" >> $out/kern-dn.txt
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j4 --filter 'plan_qwen35/*' --verbose > $out/plan-q35.txt 2>&1
echo "rc=$?" >> $out/plan-q35.txt
timeout 60 $K run devrun/data/models/qwen35-tiny.gguf -p "Once upon a time" -n 16 --ids --device cuda:0 \
  > $out/run-q35.txt 2>&1; echo "rc=$?" >> $out/run-q35.txt
timeout 60 $K diverge devrun/data/models/qwen35-tiny.gguf --device cuda:0 --device vulkan:0 > $out/diverge-tiny.txt 2>&1
echo "rc=$?" >> $out/diverge-tiny.txt
stamp checks
synth qwen3.5-0.8b qwen3.5-4b
for p in qwen3.5-0.8b qwen3.5-4b; do
  timeout 90 $K run $dir/$p.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens 512 \
    > /dev/null 2> $out/prof-$p.txt
done
timeout 90 $K run $dir/qwen3.5-0.8b.gguf -p "$prompt" -n 2 --device vulkan:0 --no-echo --profile-tokens 512 \
  > /dev/null 2> $out/prof-qwen3.5-0.8b-vulkan.txt
stamp profiles
tar cf $out.tar -C $(dirname $out) $(basename $out)
wait $bpid
stamp llbuild
for p in qwen3.5-0.8b qwen3.5-4b; do
  KILN=$K MODELS="$dir/$p.gguf" P=${P:-24,512,4096} N=32 R=3 DEVICES="cuda:0 vulkan:0" timeout 240 \
    bash .peers/side-by-side.sh > $out/sbs-$p.md 2>&1
  stamp "sbs $p"
  tar cf $out.tar -C $(dirname $out) $(basename $out)
done
