#!/usr/bin/env bash
# Issue 18, the mma decode's shapes (one call, under 10 minutes): the quantized kernel suite
# on cuda:0; qwen3-8b Q4_K_M synthesized; kiln run --profile (a decode step) under each
# KILN_MATVEC_Q_MMA=warps,unroll,occupancy,chains,row_tiles ($SWEEP), after kiln bench tg64
# under the default.
# Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
m8=$dir/qwen3-8b-Q4_K_M.gguf
( timeout 300 $K synth --preset qwen3-8b --quant Q4_K_M -o $m8 > $out/synth-8b.txt 2>&1; stamp synth8 ) &
s8=$!
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter 'kernels_quant/*' > $out/kern-q.txt 2>&1; echo "rc=$?" >> $out/kern-q.txt
KILN_MATVEC_Q_MMA=8,1,0,3,3 KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter 'kernels_quant/*' > $out/kern-q2.txt 2>&1
echo "rc=$?" >> $out/kern-q2.txt
stamp kern; tarball
wait $s8
prof() { # name env...: a decode step's profile
  env "${@:2}" timeout 60 $K run $m8 -p "$prompt" -n 16 --device cuda:0 --no-echo --profile --profile-tokens 24 \
    > $out/prof-$1.txt 2>&1
  stamp "prof $1"; tarball
}
prof default X=1
timeout 100 $K bench $m8 -p 512 -n 64 -r 2 --device cuda:0 > $out/bench-8b-default.md 2>&1; stamp bench; tarball
for v in ${SWEEP:-8.1.0.1.1 8.1.0.4.1 8.1.0.2.2 8.1.0.2.3 8.1.0.2.6 16.1.0.2.1 4.1.0.2.1 8.2.0.2.1 16.1.0.2.3}; do
  [ $(( $(date +%s) - start )) -lt 540 ] || break
  prof w$v KILN_MATVEC_Q_MMA=${v//./,}
done
tarball
