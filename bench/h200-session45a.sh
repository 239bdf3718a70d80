#!/usr/bin/env bash
# Session 45's first call (issues 20, 14, 17): session 44b's stages (the MoE suites, the
# squeeze, --mem-limit 24GiB beside llama-bench -ncmoe 28), then the fused-norm skinny
# products (kn_matmul_skinny_norm) checked on cuda:0 and timed: kiln bench pp24 on
# qwen3-4b and qwen3-8b with and without KILN_SKINNY_NORM=0 and with the short block's
# attention in 32-row tiles (KILN_ATTN_SHORT=0), beside llama-bench pp24; llama-bench
# -ncmoe 28 on the 30B where llama.cpp is built by then.
# Binaries in devrun/, llama.cpp from .peers. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
L=/opt/peer/llama.cpp/build/bin/llama-bench
m=$dir/qwen3-30b-a3b.gguf
nvidia-smi --query-gpu=name,memory.total --format=csv > $out/gpu.txt 2>&1
llama_build
( [ -f $m ] || timeout 300 $K synth --preset qwen3-30b-a3b -o $m > $out/synth.txt 2>&1; stamp synth30 ) &
for f in 'kernels_moe*/*' 'plan_moe*/*' 'kernels_skinny_norm/*' 'kernels_attn_prefill/short*'; do
  echo "== $f" >> $out/tests.txt
  KILN_TEST_DEVICE=cuda:0 timeout 100 $T -j8 --filter "$f" >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
done
stamp tests; tarball
while ! grep -q synth30 $out/times.txt; do sleep 2; done
STAGES=squeeze timeout 150 bash bench/h200-issue20-cache.sh $out/squeeze; stamp squeeze; tarball
timeout 60 $K run $m -p "$prompt" -n 256 --device cuda:0 --no-echo --mem-limit 24GiB > $out/limit-run.txt 2>&1
stamp limit-kiln; tarball
if ! kill -0 $llama_pid 2>/dev/null; then
  timeout 90 $L -m $m -ngl 99 -fa 1 -ncmoe 28 -p 0 -n 64 -r 3 > $out/limit-llama.md 2>&1; stamp limit-llama; tarball
fi
rm -f $m
synth qwen3-4b qwen3-8b; stamp synth
for p in qwen3-4b qwen3-8b; do
  timeout 60 $K bench $dir/$p.gguf -p 24 -n 0 -r 4 --device cuda:0 > $out/pp24-$p-fused.md 2>&1
  KILN_SKINNY_NORM=0 timeout 60 $K bench $dir/$p.gguf -p 24 -n 0 -r 4 --device cuda:0 > $out/pp24-$p-unfused.md 2>&1
  KILN_ATTN_SHORT=0 timeout 60 $K bench $dir/$p.gguf -p 24 -n 0 -r 4 --device cuda:0 > $out/pp24-$p-attn32.md 2>&1
  tarball
done
stamp kiln-pp24
echo "== plan/* on cuda:0" >> $out/tests.txt
KILN_TEST_DEVICE=cuda:0 timeout 80 $T -j8 --filter 'plan/*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
stamp plan-tests; tarball
llama_wait
for p in qwen3-4b qwen3-8b; do
  timeout 40 $L -m $dir/$p.gguf -ngl 99 -fa 1 -p 24 -n 0 -r 4 > $out/pp24-$p-llama.md 2>&1
done
stamp llama-pp24; tarball
