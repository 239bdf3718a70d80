#!/usr/bin/env bash
# Issue 18, where the quantized decode step's time goes (one call, under 10 minutes, no
# llama.cpp: its figures on the same card come from an earlier call): qwen3-8b Q4_K_M and
# Q8_0 and qwen3-0.6b Q4_K_M synthesized in the background; kiln run --profile (a decode
# step, a 24-token block) on each; kiln bench tg64 with the kernels launched early
# (KILN_EARLY=1) and without. Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $out/gpu.txt 2>&1
m8=$dir/qwen3-8b-Q4_K_M.gguf m8q8=$dir/qwen3-8b-Q8_0.gguf m06=$dir/qwen3-0.6b-Q4_K_M.gguf
( timeout 300 $K synth --preset qwen3-8b --quant Q4_K_M -o $m8 > $out/synth-8b.txt 2>&1; stamp synth8 ) &
s8=$!
( timeout 300 $K synth --preset qwen3-0.6b --quant Q4_K_M -o $m06 > $out/synth-06.txt 2>&1
  timeout 300 $K synth --preset qwen3-8b --quant Q8_0 -o $m8q8 > $out/synth-8bq8.txt 2>&1; stamp synthq8 ) &
s2=$!
timeout 60 $K probe --measure > $out/probe.txt 2>&1
stamp probe
prof() { # name model [dtype]: a decode step's and a 24-token block's profile
  env "${@:4}" timeout 120 $K run $2 -p "$prompt" -n 16 --device cuda:0 --no-echo --profile --profile-tokens 24 ${3:+--dtype $3} \
    > $out/prof-$1.txt 2>&1
  stamp "prof $1"; tarball
}
tg() { # name model dtype env...: tg64 and pp512
  env "${@:4}" timeout 100 $K bench $2 -p 512 -n 64 -r 2 --device cuda:0 ${3:+--dtype $3} > $out/bench-$1.md 2>&1
  stamp "bench $1"; tarball
}
wait $s8
prof 8b $m8 ""
tg 8b-default $m8 ""
tg 8b-early $m8 "" KILN_EARLY=1
prof 8b-simt $m8 "" KILN_MATVEC_Q_MMA=0
wait $s2
prof 06 $m06 ""
tg 06-default $m06 ""
prof 8bq8-f16 $m8q8 f16
tg 8bq8-f16 $m8q8 f16
tg 8bq8-bf16 $m8q8 ""
tarball
