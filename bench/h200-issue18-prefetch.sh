#!/usr/bin/env bash
# Issue 18, the mma decode with its workgroups' weight planes prefetched into L2 (one call,
# under 10 minutes): the quantized kernel suite on cuda:0; qwen3-8b Q4_K_M (and Q8_0,
# qwen3-0.6b Q4_K_M) synthesized; kiln run --profile with the prefetch and without
# (KILN_MATVEC_Q_PREFETCH=0); kiln bench pp512/tg64 of each model. Binaries in devrun/.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
m8=$dir/qwen3-8b-Q4_K_M.gguf m8q8=$dir/qwen3-8b-Q8_0.gguf m06=$dir/qwen3-0.6b-Q4_K_M.gguf
( timeout 300 $K synth --preset qwen3-8b --quant Q4_K_M -o $m8 > $out/synth-8b.txt 2>&1; stamp synth8 ) &
s8=$!
( timeout 300 $K synth --preset qwen3-0.6b --quant Q4_K_M -o $m06 > $out/synth-06.txt 2>&1
  timeout 300 $K synth --preset qwen3-8b --quant Q8_0 -o $m8q8 > $out/synth-8bq8.txt 2>&1; stamp synthq8 ) &
s2=$!
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter 'kernels_quant/*' > $out/kern-q.txt 2>&1; echo "rc=$?" >> $out/kern-q.txt
stamp kern; tarball
prof() { # name model dtype env...: a decode step's profile
  env "${@:4}" timeout 60 $K run $2 -p "$prompt" -n 16 --device cuda:0 --no-echo --profile --profile-tokens 24 \
    ${3:+--dtype $3} > $out/prof-$1.txt 2>&1
  stamp "prof $1"; tarball
}
tg() { # name model dtype env...: pp512 and tg64
  env "${@:4}" timeout 100 $K bench $2 -p 512 -n 64 -r 2 --device cuda:0 ${3:+--dtype $3} > $out/bench-$1.md 2>&1
  stamp "bench $1"; tarball
}
wait $s2
prof 06 $m06 ""
prof 06-nopf $m06 "" KILN_MATVEC_Q_PREFETCH=0
tg 06 $m06 ""
prof 8bq8 $m8q8 f16
tg 8bq8 $m8q8 f16
wait $s8
prof 8b $m8 ""
prof 8b-nopf $m8 "" KILN_MATVEC_Q_PREFETCH=0
tg 8b $m8 ""
tarball
