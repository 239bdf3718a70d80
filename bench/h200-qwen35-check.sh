#!/usr/bin/env bash
# Issue 15 on the H200: the Qwen3.5 kernels and plan on cuda:0 (the DeltaNet kernel suite,
# the qwen35 whole-model plan tests against the oracle) and qwen35-tiny through kiln run.
# Binaries and data in devrun/. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j4 --filter 'kernels_deltanet/*' > $out/kern-dn.txt 2>&1; echo "rc=$?" >> $out/kern-dn.txt
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j4 --filter 'plan_qwen35/*' --verbose > $out/plan-q35.txt 2>&1
echo "rc=$?" >> $out/plan-q35.txt
timeout 60 $K run devrun/data/models/qwen35-tiny.gguf -p "Once upon a time" -n 16 --ids --device cuda:0 \
  > $out/run-q35.txt 2>&1; echo "rc=$?" >> $out/run-q35.txt
tar cf $out.tar -C $(dirname $out) $(basename $out)
# a first measure of the token-by-token DeltaNet path (no peer in this call)
timeout 60 $K synth --preset qwen3.5-0.8b -o $dir/q35-08.gguf > $out/synth.txt 2>&1
timeout 90 $K bench $dir/q35-08.gguf -p 24,512 -n 32 -r 3 --device cuda:0 -o md > $out/b-q35-08.md 2>&1
timeout 90 $K run $dir/q35-08.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens 512 \
  > /dev/null 2> $out/prof-q35-08.txt
tar cf $out.tar -C $(dirname $out) $(basename $out)
