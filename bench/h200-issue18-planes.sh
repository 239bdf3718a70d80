#!/usr/bin/env bash
# Issue 18: is the mma decode of Q4_K bound by its instructions a code, or by its five
# planes a tile (lo codes, d, dmin, scales, mins: ten streams a workgroup)? Q4_0 has the
# same 4-bit codes and the same decode a code with two planes (lo, d); Q8_0 two planes and
# twice the bytes. One call, under 5 minutes: qwen3-8b as Q4_0, Q4_K_M and Q8_0 synthesized
# one after the other; kiln run --profile (a decode step) of each (Q8_0 in f16, its mma
# form). If Q4_0's gate+up streams near Q8_0's 86% where Q4_K_M's is at 60%, the planes are
# it (next: a tile-interleaved layout); if Q4_0 is as slow as Q4_K, the instructions are.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
for q in Q4_0 Q8_0 Q4_K_M; do
  m=$dir/qwen3-8b-$q.gguf
  timeout 200 $K synth --preset qwen3-8b --quant $q -o $m > $out/synth-$q.txt 2>&1; stamp "synth $q"
  dt=; [ $q = Q8_0 ] && dt="--dtype f16"
  timeout 60 $K run $m -p "$prompt" -n 16 --device cuda:0 --no-echo --profile --profile-tokens 24 $dt \
    > $out/prof-$q.txt 2>&1
  stamp "prof $q"; tarball
  rm -f $m
done
