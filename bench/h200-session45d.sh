#!/usr/bin/env bash
# Session 45's last-chance call (most of the device budget went to refused starts): the
# fused-norm skinny products and the short attention tiles checked on cuda:0 and timed
# (kiln bench pp24 on qwen3-8b / 4b / 0.6b as built, KILN_SKINNY_NORM=0, KILN_ATTN_SHORT=0),
# qwen3-0.6b's serve at 1 and 8 streams (--parallel 32 against 1), llama-bench pp24 in the
# same call (LLAMA=0: without llama.cpp; SERVE=0: without the serve runs, for a short call).
# Binaries in devrun/, llama.cpp from .peers. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
L=/opt/peer/llama.cpp/build/bin/llama-bench
nvidia-smi --query-gpu=name,memory.total --format=csv > $out/gpu.txt 2>&1
[ "${LLAMA:-1}" = 1 ] && llama_build
synth qwen3-0.6b qwen3-4b qwen3-8b; stamp synth
for f in 'kernels_skinny_norm/*' 'kernels_attn_prefill/short*'; do
  echo "== $f" >> $out/tests.txt
  KILN_TEST_DEVICE=cuda:0 timeout 45 $T -j8 --filter "$f" >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
done
stamp tests; tarball
b() { timeout 45 $K bench $dir/$1.gguf -p 24 -n 0 -r 4 --device cuda:0 > $out/pp24-$1$2.md 2>&1; tarball; }
b qwen3-8b ""; KILN_SKINNY_NORM=0 b qwen3-8b -unfused; KILN_ATTN_SHORT=0 b qwen3-8b -attn32
b qwen3-4b ""; KILN_SKINNY_NORM=0 b qwen3-4b -unfused; b qwen3-0.6b ""
stamp kiln-pp24
if [ "${SERVE:-1}" = 1 ]; then
  MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8" SUITES=0 timeout 90 bash bench/h200-batch.sh $out/serve06
  stamp serve06; tarball
fi
[ "${LLAMA:-1}" = 1 ] || exit 0
llama_wait
for p in qwen3-8b qwen3-4b qwen3-0.6b; do
  timeout 30 $L -m $dir/$p.gguf -ngl 99 -fa 1 -p 24 -n 0 -r 4 > $out/pp24-$p-llama.md 2>&1
done
stamp llama-pp24; tarball
