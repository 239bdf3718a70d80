#!/usr/bin/env bash
# One device session's measurements for issues 4-6 on the H200, written to $OUT (or
# ./h200-out): tests on both backends, kiln probe --measure, kiln bench for the
# synthesized qwen3-0.6b/4b/8b on vulkan:0 and cuda:0, kiln diverge across both backends.
# Run from the repo root with a Release build in build-dev (../shared/device/README.md):
#   source .device-runtime/env.sh && PART=1 bash bench/h200-all.sh   (tests, probe, diverge)
#   source .device-runtime/env.sh && PART=2 bash bench/h200-all.sh   (synth, bench, profile)
# Each part fits one 10-minute device call (no PART: both); each step has its own time
# limit so one hang cannot eat the rest.
set -u
out=${OUT:-h200-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/build-dev/lib
export KILN_BIN=$PWD/build-dev/kiln KILN_TESTDATA=$PWD/build-dev/data KILN_CACHE_DIR=/tmp/kiln-cache
export KILN_REQUIRE_VULKAN=1
K=build-dev/kiln T=build-dev/kiln-tests dir=/tmp/kiln-bench
mkdir -p $dir
part=${PART:-all}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/smi.txt" 2>&1
if [ "$part" != 2 ]; then
timeout 60 $T -j8 --filter 'cuda/*' > "$out/cuda-suite.txt" 2>&1; echo "rc=$?" >> "$out/cuda-suite.txt"
KILN_TEST_DEVICE=cuda:0 timeout 60 $T -j8 --filter 'kernels*/*' > "$out/kernels-cuda.txt" 2>&1; echo "rc=$?" >> "$out/kernels-cuda.txt"
timeout 100 $T -j8 --filter 'plan/*' --verbose > "$out/plan-vk.txt" 2>&1; echo "rc=$?" >> "$out/plan-vk.txt"
KILN_TEST_DEVICE=cuda:0 timeout 100 $T -j8 --filter 'plan/*' --verbose > "$out/plan-cuda.txt" 2>&1; echo "rc=$?" >> "$out/plan-cuda.txt"
timeout 60 $K probe --measure > "$out/probe.txt" 2>&1
[ -f $dir/qwen3-0.6b.gguf ] || timeout 60 $K synth --preset qwen3-0.6b -o $dir/qwen3-0.6b.gguf > /dev/null
timeout 60 $K diverge build-dev/data/models/stories260K.gguf --device cuda:0 --device vulkan:0 -n 32 \
  --json "$out/diverge-stories.json" > "$out/diverge-stories.md" 2>&1; echo "rc=$?" >> "$out/diverge-stories.md"
timeout 90 $K diverge $dir/qwen3-0.6b.gguf --device cuda:0 --device vulkan:0 -n 16 \
  --json "$out/diverge-q06.json" > "$out/diverge-q06.md" 2>&1; echo "rc=$?" >> "$out/diverge-q06.md"
fi
[ "$part" = 1 ] && exit 0
for p in qwen3-0.6b qwen3-4b qwen3-8b; do
  [ -f $dir/$p.gguf ] || timeout 120 $K synth --preset $p -o $dir/$p.gguf > /dev/null
done
for p in qwen3-0.6b qwen3-4b qwen3-8b; do
  timeout 100 $K bench $dir/$p.gguf -p 128,512,2048 -n 128 -r 3 --device vulkan:0 --device cuda:0 \
    -o json > "$out/bench-$p.json" 2> "$out/bench-$p.err"
done
# where a decode step's and a prefill block's time goes, per kernel (kiln run --profile)
for dev in vulkan:0 cuda:0; do
  timeout 60 $K run $dir/qwen3-8b.gguf -p Hello -n 128 --device $dev --no-echo --profile > /dev/null \
    2> "$out/profile-8b-${dev%%:*}.txt"
done
