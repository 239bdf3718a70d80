#!/usr/bin/env bash
# Issue 20, the first measure of the mixture of experts on the GPU (one call, under 10
# minutes): the MoE suites on cuda:0 (kernels and plans); qwen3-30b-a3b synthesized in bf16
# (57 GiB in /dev/shm); kiln run --profile (a decode step, a 64-token block) and kiln bench
# pp512/tg64 on cuda:0. llama.cpp beside it in a second call (SBS=1, after .peers' build).
# Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
m=$dir/qwen3-30b-a3b.gguf
rm -f $dir/qwen3-8b*.gguf  # /dev/shm holds half the host memory: the 57 GiB model alone
( timeout 400 $K synth --preset qwen3-30b-a3b -o $m > $out/synth.txt 2>&1; stamp synth ) &
sp=$!
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j8 --filter 'kernels_moe/*' > $out/kern.txt 2>&1; echo "rc=$?" >> $out/kern.txt
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j4 --filter 'plan_moe/*' > $out/plan.txt 2>&1; echo "rc=$?" >> $out/plan.txt
stamp tests; tarball
wait $sp
df -h /dev/shm > $out/shm.txt
timeout 120 $K run $m -p "$prompt" -n 16 --device cuda:0 --no-echo --profile --profile-tokens 64 > $out/prof.txt 2>&1
stamp prof; tarball
timeout 150 $K bench $m -p 512 -n 64 -r 2 --device cuda:0 > $out/bench.md 2>&1; stamp bench; tarball
if [ "${SBS:-0}" = 1 ]; then
  llama_build; llama_wait
  KILN=$K MODELS="$m" P=512 N=64 R=2 DEVICES="cuda:0" timeout 200 bash .peers/side-by-side.sh > $out/sbs.md 2>&1
  stamp sbs; tarball
fi
