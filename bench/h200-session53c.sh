#!/usr/bin/env bash
# Session 53, second call (after h200-session53b.sh on the same warm machine, whose
# background build left llama-bench in /opt/peer). Issue 18's side-by-side: Q4_K_M
# qwen3-0.6b and qwen3-8b, then Q8_0 qwen3-8b, kiln on cuda:0 and vulkan:0 beside
# llama-bench -fa 1 on CUDA and on Vulkan (pp24, pp512, tg128, medians of 3). Then issue
# 17's serve run on cuda:0. First the Vulkan stage if 53b did not reach it. Q_COOP (0/1) sets
# KILN_MATMUL_Q_COOP, STREAM KILN_MATVEC_Q_STREAM. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
export KILN_MATMUL_Q_COOP=${Q_COOP:-0} KILN_MATVEC_Q_STREAM=${STREAM:-}
bash bench/h200-session53-vk.sh $out
for i in $(seq 1 120); do [ -x $L ] && break; sleep 2; done
stamp "llama-bench there: $([ -x $L ] && echo yes || echo no)"
sbsq() { # name models...: side-by-side on the files, CUDA and Vulkan peers
  local name=$1; shift; local ms=""; for m in "$@"; do ms="$ms $dir/$m.gguf"; done
  VK=1 KILN=$K MODELS="$ms" P=24,512 N=128 R=3 DEVICES="cuda:0 vulkan:0" timeout 240 bash .peers/side-by-side.sh \
    > $out/sbs-$name.md 2>&1
  stamp "sbs $name"; tarball
}
sbsq q4km qwen3-0.6b-q4km qwen3-8b-q4km
[ -f $dir/qwen3-8b-q8_0.gguf ] || timeout 200 $K synth --preset qwen3-8b --quant Q8_0 -o $dir/qwen3-8b-q8_0.gguf > /dev/null
stamp "synth q8"
sbsq q8 qwen3-8b-q8_0
unset KILN_MATMUL_Q_COOP KILN_MATVEC_Q_STREAM
synth qwen3-0.6b qwen3-8b
MODELS="qwen3-0.6b qwen3-8b" DEVICES=cuda:0 STREAMS="1 8 32" SUITES=0 MIXED=0 timeout 150 bash bench/h200-batch.sh $out/serve-cuda
stamp serve-cuda; tarball
