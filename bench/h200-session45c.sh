#!/usr/bin/env bash
# Session 45's third call (issue 20): session 44's resizes that compile nothing (the experts'
# kernels read the cache's slot count from a buffer) under the squeeze; the MoE suites on
# cuda:0; --mem-limit 24GiB: kiln run -n 256 and kiln bench tg64 beside llama-bench -ncmoe 28
# in the same call. Binaries in devrun/, llama.cpp from .peers. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
m=$dir/qwen3-30b-a3b.gguf
[ -x $L ] || llama_build
( [ -f $m ] || timeout 300 $K synth --preset qwen3-30b-a3b -o $m > $out/synth.txt 2>&1; stamp synth30 ) &
for f in 'kernels_moe*/*' 'plan_moe*/*'; do
  echo "== $f" >> $out/tests.txt
  KILN_TEST_DEVICE=cuda:0 timeout 100 $T -j8 --filter "$f" >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
done
stamp tests; tarball
while ! grep -q synth30 $out/times.txt; do sleep 2; done
STAGES=squeeze timeout 150 bash bench/h200-issue20-cache.sh $out/squeeze; stamp squeeze; tarball
timeout 60 $K run $m -p "$prompt" -n 256 --device cuda:0 --no-echo --mem-limit 24GiB > $out/limit-run.txt 2>&1
stamp limit-run; tarball
timeout 90 $K bench $m -p 0 -n 64 -r 3 --device cuda:0 --mem-limit 24GiB > $out/limit-kiln.md 2>&1; stamp limit-kiln; tarball
[ -n "${llama_pid:-}" ] && llama_wait
timeout 90 $L -m $m -ngl 99 -fa 1 -ncmoe 28 -p 0 -n 64 -r 3 > $out/limit-llama.md 2>&1; stamp limit-llama; tarball
