#!/usr/bin/env bash
# Issue 15 on the H200: the recurrent state's bookkeeping and the stacked DeltaNet products.
# The DeltaNet kernel, view and copy suites and the Qwen3.5 plan suite on cuda:0; kiln bench
# pp24 / pp512 / tg32 on qwen3.5-0.8b and 4b (cuda:0); where a 24-token block and a decode
# step go (kiln run --profile-tokens 24). Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
synth qwen3.5-0.8b qwen3.5-4b
for f in 'kernels_deltanet/*' 'plan_qwen35/*'; do
  KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter "$f" >> $out/suites.txt 2>&1; echo "rc=$?" >> $out/suites.txt
done
KILN_TEST_DEVICE=cuda:0 timeout 60 $T --filter 'kernels/copy*' >> $out/suites.txt 2>&1; echo "rc=$?" >> $out/suites.txt
timeout 60 $T --filter 'cuda/*' >> $out/suites.txt 2>&1; echo "rc=$?" >> $out/suites.txt
stamp suites
for p in qwen3.5-0.8b qwen3.5-4b; do
  timeout 90 $K run $dir/$p.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens 24 \
    > /dev/null 2> $out/prof-$p-24.txt
  timeout 120 $K bench $dir/$p.gguf -p 24,512 -n 32 -r 3 --device cuda:0 -o md > $out/b-$p.md 2>&1
  stamp "$p"
  tarball
done
