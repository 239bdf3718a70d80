#!/usr/bin/env bash
# Session 45's first call (issues 14 and 17): the short block's norms inside its skinny
# products (kn_matmul_skinny_norm, session 44) and its attention in tiles of fewer rows
# (session 45) checked on cuda:0 and timed: kiln bench pp24 on qwen3-0.6b/4b/8b as built,
# with KILN_SKINNY_NORM=0 and with KILN_ATTN_SHORT=0, beside llama-bench pp24 in the same
# call; where the 8B's 24-token block goes (kiln run --profile-tokens 24); the plan suites
# on cuda:0. Binaries in devrun/, llama.cpp from .peers. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
L=/opt/peer/llama.cpp/build/bin/llama-bench
nvidia-smi --query-gpu=name,memory.total --format=csv > $out/gpu.txt 2>&1
llama_build
synth qwen3-0.6b qwen3-4b qwen3-8b; stamp synth
for f in 'kernels_skinny_norm/*' 'kernels_attn_prefill/short*' 'plan_batch/*'; do
  echo "== $f" >> $out/tests.txt
  KILN_TEST_DEVICE=cuda:0 timeout 100 $T -j8 --filter "$f" >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
done
stamp tests; tarball
for p in qwen3-8b qwen3-4b qwen3-0.6b; do
  timeout 60 $K bench $dir/$p.gguf -p 24 -n 0 -r 5 --device cuda:0 > $out/pp24-$p.md 2>&1
  KILN_SKINNY_NORM=0 timeout 60 $K bench $dir/$p.gguf -p 24 -n 0 -r 5 --device cuda:0 > $out/pp24-$p-unfused.md 2>&1
  KILN_ATTN_SHORT=0 timeout 60 $K bench $dir/$p.gguf -p 24 -n 0 -r 5 --device cuda:0 > $out/pp24-$p-attn32.md 2>&1
  tarball
done
stamp kiln-pp24
timeout 60 $K run $dir/qwen3-8b.gguf --device cuda:0 -p "$prompt" -n 2 --profile-tokens 24 > /dev/null 2> $out/prof-8b-24.txt
stamp profile; tarball
echo "== plan/* on cuda:0" >> $out/tests.txt
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j8 --filter 'plan/*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
stamp plan-tests; tarball
llama_wait
for p in qwen3-8b qwen3-4b qwen3-0.6b; do
  timeout 40 $L -m $dir/$p.gguf -ngl 99 -fa 1 -p 24 -n 0 -r 5 > $out/pp24-$p-llama.md 2>&1
done
stamp llama-pp24; tarball
