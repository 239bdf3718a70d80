#!/usr/bin/env bash
# Issues 14 and 15 on the H200, one call, after the DeltaNet scan on matrix fragments and
# PTX's bf16 rounding by cvt.rn.bf16.f32: llama.cpp built in the background while every
# kernel and plan suite runs on cuda:0 and blocks are profiled (qwen3.5-4b at 24 and 512
# tokens, the 24 with chunks of 16; qwen3.5-0.8b at 512; qwen3-4b at 24); then side by
# side with llama-bench -fa 1: qwen3.5-4b and 0.8b (pp24, pp512, pp4096, tg32; cuda:0, the
# 0.8b also vulkan:0), qwen3-4b and qwen3-8b (pp24, pp512, tg32; cuda:0). Medians of 3.
# Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
llama_build
KILN_TEST_DEVICE=cuda:0 timeout 170 $T -j8 --filter 'kernels*/*' > $out/kern.txt 2>&1; echo "rc=$?" >> $out/kern.txt
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter 'plan*/*' > $out/plan.txt 2>&1; echo "rc=$?" >> $out/plan.txt
timeout 60 $T --filter 'cuda/*' > $out/cuda.txt 2>&1; echo "rc=$?" >> $out/cuda.txt
stamp suites
tarball
synth qwen3.5-0.8b qwen3.5-4b qwen3-4b qwen3-8b
stamp synth
prof() { # name model tokens [env...]
  local name=$1 m=$2 n=$3; shift 3
  env "$@" timeout 90 $K run $m -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens $n > /dev/null \
    2> $out/prof-$name.txt
}
prof q35-4-24 $dir/qwen3.5-4b.gguf 24
prof q35-4-24-c16 $dir/qwen3.5-4b.gguf 24 KILN_DN_SHORT_CHUNK=16
prof q35-4-512 $dir/qwen3.5-4b.gguf 512
prof q35-08-512 $dir/qwen3.5-0.8b.gguf 512
prof q3-4-24 $dir/qwen3-4b.gguf 24
KILN_DN_SHORT_CHUNK=16 timeout 60 $K bench $dir/qwen3.5-4b.gguf -p 24 -n 0 -r 3 --device cuda:0 -o md \
  > $out/b-q35-4-c16.md 2>&1
stamp profiles
tarball
llama_wait
sbs q35-4 24,512,4096 "cuda:0" qwen3.5-4b
sbs q35-08 24,512,4096 "cuda:0 vulkan:0" qwen3.5-0.8b
sbs q3 24,512 "cuda:0" qwen3-4b qwen3-8b
