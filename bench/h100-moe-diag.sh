#!/usr/bin/env bash
# Session 42's diagnosis (one short call): plan_moe's odd-size test on cuda:0 with the
# grouped expert products on fragments and without (KILN_MOE_MMA=0), and plan_batch's
# quantized step. Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
for mma in 1 0; do
  KILN_MOE_MMA=$mma KILN_TEST_DEVICE=cuda:0 timeout 60 $T --verbose --filter 'plan_moe/synth_odd*' > $out/odd-mma$mma.txt 2>&1
  echo "rc=$?" >> $out/odd-mma$mma.txt
done
KILN_TEST_DEVICE=cuda:0 timeout 60 $T --verbose --filter 'plan_batch/quantized*' > $out/batch-q.txt 2>&1; echo "rc=$?" >> $out/batch-q.txt
tarball
