#!/usr/bin/env bash
# Issue 20's expert cache on the GPU (one call, under 10 minutes; the model stays in /dev/shm
# while the machine is warm): qwen3-30b-a3b synthesized in bf16 (57 GiB); then
#   resident   kiln bench tg64, every expert on the device (the reference);
#   limit      --mem-limit 24 GiB: kiln bench tg64 and kiln run -n 128 (slots, hit rate);
#   free       another program (bench/hold_memory.py) holds all but ~26 GiB of the card:
#              kiln run -n 256 sizes its cache from the free memory; 40 s in, the holder
#              takes 1 GiB more, 80 s in it gives it back (the run's resizes printed);
#   llama      SBS=1: llama.cpp's llama-bench tg64 with the experts of 28 layers on the CPU
#              (-ncmoe 28: about the same device memory), after .peers' build.
# The MoE suites on cuda:0 while the model is written. STAGE=resident|limit|free runs one
# stage. Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv > $out/gpu.txt 2>&1
m=$dir/qwen3-30b-a3b.gguf
rm -f $dir/qwen3-8b*.gguf
[ "${SBS:-0}" = 1 ] && llama_build
( [ -f $m ] || timeout 420 $K synth --preset qwen3-30b-a3b -o $m > $out/synth.txt 2>&1; stamp synth ) &
sp=$!
# the MoE suites on cuda:0 meanwhile (kernels with the cache's variants, plans with the cache)
KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j8 --filter 'kernels_moe*/*' > $out/kern.txt 2>&1; echo "rc=$?" >> $out/kern.txt
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j4 --filter 'plan_moe*/*' > $out/plan.txt 2>&1; echo "rc=$?" >> $out/plan.txt
stamp tests; tarball
wait $sp
[ "${STAGE:-all}" = all ] || [ "${STAGE:-all}" = resident ] && {
  timeout 150 $K bench $m -p 0 -n 64 -r 2 --device cuda:0 > $out/resident.md 2>&1; stamp resident; tarball; }
[ "${STAGE:-all}" = all ] || [ "${STAGE:-all}" = limit ] && {
  timeout 150 $K bench $m -p 0 -n 64 -r 2 --device cuda:0 --mem-limit 24GiB > $out/limit.md 2>&1
  timeout 150 $K run $m -p "$prompt" -n 128 --device cuda:0 --no-echo --mem-limit 24GiB > $out/limit-run.txt 2>&1
  stamp limit; tarball; }
[ "${STAGE:-all}" = all ] || [ "${STAGE:-all}" = free ] && {
  total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)  # MiB
  hold=$(( total / 1024 - 26 ))
  python3 bench/hold_memory.py 0:$hold 40:$((hold + 1)) 80:$hold 200:0 > $out/holder.txt 2>&1 &
  hp=$!
  sleep 8
  timeout 180 $K run $m -p "$prompt" -n 256 --device cuda:0 --no-echo > $out/free-run.txt 2>&1
  kill $hp 2>/dev/null; wait $hp 2>/dev/null
  stamp free; tarball; }
if [ "${SBS:-0}" = 1 ]; then
  llama_wait
  timeout 200 /opt/peer/llama.cpp/build/bin/llama-bench -m $m -ngl 99 -fa 1 -ncmoe 28 -p 0 -n 64 -r 2 \
    > $out/llama-ncmoe.md 2>&1
  stamp llama; tarball
fi
