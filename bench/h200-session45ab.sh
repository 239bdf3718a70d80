#!/usr/bin/env bash
# Session 45's call for issues 14 and 17 together (the device came too rarely for one call
# each): the pp24 variants (the short block's norms inside its skinny products, its
# attention in tiles of fewer rows) beside llama-bench pp24, then h200-session45b.sh's
# serve runs on cuda:0 (qwen3-0.6b: 1 / 8 streams; qwen3-8b: 1 / 8 / 32; each against a
# --parallel 1 server), the 8B's 24-token block profile, the plan suites.
# Binaries in devrun/, llama.cpp from .peers. Writes OUTDIR.tar.
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
  KILN_TEST_DEVICE=cuda:0 timeout 60 $T -j8 --filter "$f" >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
done
stamp tests; tarball
for p in qwen3-8b qwen3-4b; do
  timeout 50 $K bench $dir/$p.gguf -p 24 -n 0 -r 4 --device cuda:0 > $out/pp24-$p.md 2>&1
  KILN_SKINNY_NORM=0 timeout 50 $K bench $dir/$p.gguf -p 24 -n 0 -r 4 --device cuda:0 > $out/pp24-$p-unfused.md 2>&1
  KILN_ATTN_SHORT=0 timeout 50 $K bench $dir/$p.gguf -p 24 -n 0 -r 4 --device cuda:0 > $out/pp24-$p-attn32.md 2>&1
  tarball
done
timeout 50 $K bench $dir/qwen3-0.6b.gguf -p 24 -n 0 -r 4 --device cuda:0 > $out/pp24-qwen3-0.6b.md 2>&1
stamp kiln-pp24; tarball
MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8" SUITES=0 timeout 100 bash bench/h200-batch.sh $out/serve06
stamp serve06; tarball
MODELS=qwen3-8b DEVICES=cuda:0 STREAMS="1 8 32" SUITES=0 timeout 120 bash bench/h200-batch.sh $out/serve8
stamp serve8; tarball
llama_wait
for p in qwen3-8b qwen3-4b qwen3-0.6b; do
  timeout 40 $L -m $dir/$p.gguf -ngl 99 -fa 1 -p 24 -n 0 -r 4 > $out/pp24-$p-llama.md 2>&1
done
stamp llama-pp24; tarball
timeout 40 $K run $dir/qwen3-8b.gguf --device cuda:0 -p "$prompt" -n 2 --profile-tokens 24 > /dev/null 2> $out/prof-8b-24.txt
stamp profile; tarball
echo "== plan/* on cuda:0" >> $out/tests.txt
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j8 --filter 'plan/*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
stamp plan-tests; tarball
