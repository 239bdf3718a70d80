#!/usr/bin/env bash
# Session 43's third call (issue 20, about 3 minutes): the MoE suites on cuda:0 while the 30B
# is synthesized, then the squeeze (bench/h200-issue20-cache.sh's stage) with the resizes'
# kernels compiled on several threads. Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
m=$dir/qwen3-30b-a3b.gguf
( [ -f $m ] || timeout 200 $K synth --preset qwen3-30b-a3b -o $m > $out/synth.txt 2>&1; stamp synth30 ) &
for f in 'kernels_moe*/*' 'plan_moe*/*'; do
  echo "== $f" >> $out/tests.txt
  KILN_TEST_DEVICE=cuda:0 timeout 100 $T -j8 --filter "$f" >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
done
stamp tests; tarball
while ! grep -q synth30 $out/times.txt; do sleep 2; done
STAGES=squeeze timeout 120 bash bench/h200-issue20-cache.sh $out/squeeze; stamp squeeze; tarball
