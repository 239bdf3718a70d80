#!/usr/bin/env bash
# Issue 18, where the quantized prefill's time goes (one call, under 10 minutes): qwen3-8b
# Q4_K_M synthesized; kiln run --profile of a full 512-token block and of a 24-token one
# under each KILN_MATMUL_Q_MMA=warps_t,warps_r,frags_t,frags_r,stages ($SWEEP; "d" the
# default); a kiln bench pp512/tg64 at the end. Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
m8=$dir/qwen3-8b-Q4_K_M.gguf
timeout 300 $K synth --preset qwen3-8b --quant Q4_K_M -o $m8 > $out/synth-8b.txt 2>&1; stamp synth8
prof() { # name tokens env...
  env "${@:3}" timeout 60 $K run $m8 -p "$prompt" -n 4 --device cuda:0 --no-echo --profile-tokens $2 \
    > $out/prof-$1-$2.txt 2>&1
  stamp "prof $1 $2"; tarball
}
for v in ${SWEEP:-d 2.2.4.4.6 2.2.2.4.4 1.4.2.2.4 1.2.4.2.4 1.4.4.2.4}; do
  [ $(( $(date +%s) - start )) -lt 480 ] || break
  e=X=1; [ $v = d ] || e=KILN_MATMUL_Q_MMA=${v//./,}
  prof $v 24 $e
  prof $v 512 $e
done
timeout 60 $K bench $m8 -p 512 -n 64 -r 2 --device cuda:0 > $out/bench-8b.md 2>&1; stamp bench
tarball
