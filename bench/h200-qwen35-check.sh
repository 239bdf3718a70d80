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
