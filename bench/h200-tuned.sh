#!/usr/bin/env bash
# The grid tuning's check on the H200 (bench/README.md): kernel and plan tests on cuda:0,
# kiln bench for qwen3-0.6b and qwen3-8b synth on both backends, the 8b profiles.
# Run: source .device-runtime/env.sh && bash bench/h200-tuned.sh (a Release build in build-dev)
set -u
out=${OUT:-h200-out}; mkdir -p "$out"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/build-dev/lib KILN_BIN=$PWD/build-dev/kiln
export KILN_TESTDATA=$PWD/build-dev/data KILN_CACHE_DIR=/tmp/kiln-cache KILN_REQUIRE_VULKAN=1
K=build-dev/kiln T=build-dev/kiln-tests dir=/tmp/kiln-bench
mkdir -p $dir
for p in qwen3-0.6b qwen3-4b qwen3-8b; do
  [ -f $dir/$p.gguf ] || timeout 120 $K synth --preset $p -o $dir/$p.gguf > /dev/null
done
for p in ${MODELS:-qwen3-0.6b qwen3-4b qwen3-8b}; do
  timeout 100 $K bench $dir/$p.gguf -p 128,512,2048 -n 128 -r 3 --device vulkan:0 --device cuda:0 \
    -o json > "$out/bench-$p.json" 2> /dev/null
done
for dev in vulkan:0 cuda:0; do
  timeout 60 $K run $dir/qwen3-8b.gguf -p Hello -n 128 --device $dev --no-echo --profile 2>&1 > /dev/null | head -18
done > "$out/profiles.txt"
[ -n "${NO_TESTS:-}" ] && exit 0
{ KILN_TEST_DEVICE=cuda:0 timeout 60 $T -j8 --filter 'kernels*/*' 2>&1 | tail -1
  KILN_TEST_DEVICE=cuda:0 timeout 100 $T -j8 --filter 'plan/*' --verbose 2>&1 | grep -E "FAIL|Synthesis|8b|0.6b"
} > "$out/tests.txt"
