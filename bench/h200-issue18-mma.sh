#!/usr/bin/env bash
# Issue 18, quantized prefill on the matrix units (one call, under 10 minutes): llama.cpp built
# in the background; the quantized kernel suite on cuda:0; a 512-token profile of qwen3-0.6b
# Q4_K_M for kn_matmul_q_mma's shapes (KILN_MATMUL_Q_MMA) and the general-purpose kernel
# (=0); qwen3-8b Q4_K_M synthesized, profiled, its plan suite; then the side-by-side (kiln
# bench and llama-bench -fa 1 on the same files, pp24/pp512/tg32, medians of 3, cuda:0).
# Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
llama_build
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j8 --filter 'kernels_quant/*' > $out/kern-q.txt 2>&1; echo "rc=$?" >> $out/kern-q.txt
stamp kern
[ -f $dir/qwen3-0.6b-Q4_K_M.gguf ] || timeout 60 $K synth --preset qwen3-0.6b --quant Q4_K_M -o $dir/qwen3-0.6b-Q4_K_M.gguf > $out/synth-06b.txt 2>&1
[ -f $dir/qwen3-8b-Q4_K_M.gguf ] || timeout 200 $K synth --preset qwen3-8b --quant Q4_K_M -o $dir/qwen3-8b-Q4_K_M.gguf > $out/synth-8b.txt 2>&1
stamp synth8
prof() { # name env...: a 512-token profile of the 8b
  env "${@:2}" timeout 90 $K run $dir/qwen3-8b-Q4_K_M.gguf -p "$prompt" -n 4 --device cuda:0 --no-echo \
    --profile-tokens 512 > /dev/null 2> $out/prof-8b-$1.txt
  stamp "prof $1"
  tarball
}
prof default X=1
prof 2228 KILN_MATMUL_Q_MMA=2,2,2,8,4
llama_wait
for m in qwen3-8b-Q4_K_M qwen3-0.6b-Q4_K_M; do
  left=$(( 540 - ($(date +%s) - start) ))
  [ $left -gt 30 ] || break
  KILN=$K MODELS="$dir/$m.gguf" P=24,512 N=32 R=3 DEVICES="cuda:0" timeout $left bash .peers/side-by-side.sh \
    > $out/sbs-$m.md 2>&1
  stamp "sbs $m"
  tarball
done
left=$(( 580 - ($(date +%s) - start) ))
[ $left -gt 20 ] && KILN_TEST_DEVICE=cuda:0 timeout $left $T -j8 --filter 'plan_quant/*' > $out/plan-q.txt 2>&1; echo "rc=$?" >> $out/plan-q.txt
tarball
