#!/usr/bin/env bash
# Issue 18, quantized decode on the matrix units (kn_matvec_q_mma) and the prefill's cheaper
# code pairs (one call, under 10 minutes): llama.cpp built in the background; the quantized
# kernel suite on cuda:0; qwen3-8b Q4_K_M synthesized; kiln bench (pp512, tg64, a decode and
# prefill profile) with the mma decode, then with it off (KILN_MATVEC_Q_MMA=0) and other
# shapes; the side-by-side beside llama-bench -fa 1 (pp24/pp512/tg32, medians of 3).
# Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
llama_build
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $out/gpu.txt 2>&1
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter 'kernels_quant/*' > $out/kern-q.txt 2>&1; echo "rc=$?" >> $out/kern-q.txt
stamp kern
tarball
m8=$dir/qwen3-8b-Q4_K_M.gguf
[ -f $m8 ] || timeout 200 $K synth --preset qwen3-8b --quant Q4_K_M -o $m8 > $out/synth-8b.txt 2>&1
stamp synth8
bench() { # name env...: kiln bench of the 8b under env
  env "${@:2}" timeout 100 $K bench $m8 -p 512 -n 64 -r 2 --device cuda:0 $prof > $out/bench-8b-$1.md 2>&1
  stamp "bench $1"
  tarball
}
prof=--profile bench default X=1
prof= bench off KILN_MATVEC_Q_MMA=0
llama_wait
left=$(( 560 - ($(date +%s) - start) ))
KILN=$K MODELS="$m8" P=24,512 N=32 R=3 DEVICES="cuda:0" timeout $left bash .peers/side-by-side.sh > $out/sbs-8b.md 2>&1
stamp sbs
tarball
for v in 4,2 8,1 16,1; do
  left=$(( 585 - ($(date +%s) - start) ))
  [ $left -gt 50 ] || break
  prof= bench w$v KILN_MATVEC_Q_MMA=$v
done
tarball
