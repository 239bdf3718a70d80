#!/usr/bin/env bash
# Issue 13's device check on the H200, in two calls of under 10 minutes (PART=1: 3, the
# bench; PART=2: 1 and 2 on qwen3-0.6b): the restructured kiln beside the kiln of
# 0ec9abd (before), on the same synthesized files, in one run:
#   1. both binaries' kernels for this H200's caps (kiln dump --ptx --device cuda:0,
#      --spirv --device vulkan:0), diffed: what the restructuring changed in the code the
#      GPU runs (the .ir files also differ by the extents the IR now prints);
#   2. the CUDA kernel and plan suites of the new build on cuda:0 (the lowered kernels run
#      for real);
#   3. kiln bench, before and after interleaved, qwen3-0.6b and qwen3-8b on vulkan:0 and
#      cuda:0.
# Expects, relative to the repo root, devrun/: kiln and kiln-tests (the new Release build),
# kiln-old (0ec9abd, Release), data/models/stories260K.gguf, lib/ (the shared libraries the
# image lacks: libjansson, libutf8proc, libmicrohttpd, libcriterion and its own); and the
# device runtime (source .device-runtime/env.sh first). Writes to $OUT.
set -u
out=${OUT:-h200-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/devrun/lib
export KILN_CACHE_DIR=/tmp/kiln-cache KILN_REQUIRE_VULKAN=1 KILN_NO_PROGRESS=1
NEW=$PWD/devrun/kiln OLD=$PWD/devrun/kiln-old T=$PWD/devrun/kiln-tests dir=/dev/shm/kiln-bench
export KILN_BIN=$NEW KILN_TESTDATA=$PWD/devrun/data
mkdir -p $dir
t0=$(date +%s)
stamp() { echo "$(( $(date +%s) - t0 ))s $*" >> "$out/log.txt"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/smi.txt" 2>&1
{ ldd $NEW | grep 'not found'; ldd $OLD | grep 'not found'; ldd $T | grep 'not found'; } > "$out/ldd-missing.txt"
$NEW --version > "$out/versions.txt" 2>&1; $OLD --version >> "$out/versions.txt" 2>&1
part=${PART:-1}
models="qwen3-0.6b qwen3-8b"; [ "$part" = 2 ] && models=qwen3-0.6b
for p in $models; do
  [ -f $dir/$p.gguf ] || timeout 150 $NEW synth --preset $p -o $dir/$p.gguf > /dev/null 2>> "$out/log.txt"
  stamp "synth $p rc=$?"
done
if [ "$part" = 2 ]; then
# 1. kernels for this device, before and after
for who in old new; do
  K=$OLD; [ $who = new ] && K=$NEW
  mkdir -p /tmp/dump-$who
  for m in $models; do
    timeout 60 $K dump $dir/$m.gguf --ptx /tmp/dump-$who/$m-cuda --device cuda:0 > /dev/null 2>> "$out/log.txt"
    timeout 60 $K dump $dir/$m.gguf --spirv /tmp/dump-$who/$m-vk --device vulkan:0 > /dev/null 2>> "$out/log.txt"
  done
done
stamp "dumps"
( cd /tmp && diff -rq dump-old dump-new | grep -v '\.ir differ' > "$out/dump-diff.txt";
  for f in $(cd dump-old && find . -name '*.ptx' -o -name '*.spvasm'); do
    cmp -s dump-old/$f dump-new/$f || diff dump-old/$f dump-new/$f | head -40; done > "$out/dump-diff-detail.txt" )
[ -n "${DUMPS_ONLY:-}" ] && exit 0
# 2. the new build's CUDA suites
KILN_TEST_DEVICE=cuda:0 timeout 90 $T -j8 --filter 'kernels*/*' > "$out/kernels-cuda.txt" 2>&1; echo "rc=$?" >> "$out/kernels-cuda.txt"
KILN_TEST_DEVICE=cuda:0 timeout 90 $T -j8 --filter 'plan*/*' > "$out/plan-cuda.txt" 2>&1; echo "rc=$?" >> "$out/plan-cuda.txt"
timeout 60 $T -j8 --filter 'cuda/*' > "$out/cuda-suite.txt" 2>&1; echo "rc=$?" >> "$out/cuda-suite.txt"
stamp "suites"
exit 0
fi
# 3. bench, interleaved: before, after, before, after
for m in qwen3-0.6b qwen3-8b; do
  for who in old new; do
    K=$OLD; [ $who = new ] && K=$NEW
    lim=75; [ $m = qwen3-8b ] && lim=140
    timeout $lim $K bench $dir/$m.gguf -p 128,512,2048 -n 128 -r 3 --device vulkan:0 --device cuda:0 -o json \
      > "$out/bench-$m-$who.json" 2> "$out/bench-$m-$who.err"
    stamp "bench $m $who rc=$?"
  done
done
