#!/usr/bin/env bash
# Issues 14 and 15 on the H200, one call: llama.cpp built in the background while the
# matmul, DeltaNet and Qwen3.5 plan suites run on cuda:0 and a 24-token block is profiled
# (qwen3.5-4b, qwen3-4b; the 4-layer qwen3.5-4b under two more skinny slice counts); then
# side by side with llama-bench -fa 1: qwen3.5-0.8b and 4b (pp24, pp512, pp4096, tg32;
# cuda:0 and vulkan:0), qwen3-4b and qwen3-8b (pp24, pp512, tg32; cuda:0). Medians of 3.
# Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
llama_build
for f in 'kernels_matmul/*' 'kernels_deltanet/*' 'plan_qwen35/*'; do
  KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter "$f" >> $out/suites.txt 2>&1; echo "rc=$? ($f)" >> $out/suites.txt
done
timeout 60 $T --filter 'cuda/*' >> $out/suites.txt 2>&1; echo "rc=$? (cuda)" >> $out/suites.txt
stamp suites
synth qwen3.5-0.8b qwen3.5-4b qwen3-4b qwen3-8b
[ -f $dir/q354-l4.gguf ] || timeout 100 $K synth --preset qwen3.5-4b --layers 4 -o $dir/q354-l4.gguf > /dev/null
stamp synth
prof() { # name model [env...]
  local name=$1 m=$2; shift 2
  env "$@" timeout 90 $K run $m -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens 24 > /dev/null \
    2> $out/prof-$name.txt
}
prof qwen3.5-4b $dir/qwen3.5-4b.gguf
prof qwen3-4b $dir/qwen3-4b.gguf
prof l4-s2 $dir/q354-l4.gguf KILN_SKINNY=2,2,0,2
prof l4-s1 $dir/q354-l4.gguf KILN_SKINNY=2,1,0,2
stamp profiles
tarball
llama_wait
sbs q35-08 24,512,4096 "cuda:0 vulkan:0" qwen3.5-0.8b
sbs q35-4 24,512,4096 "cuda:0 vulkan:0" qwen3.5-4b
sbs q3 24,512 "cuda:0" qwen3-4b qwen3-8b
