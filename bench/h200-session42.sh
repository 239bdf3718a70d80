#!/usr/bin/env bash
# Issues 20 and 18 measured in one warm machine's three calls (each under 10 minutes), STAGE
# a, b or c in order, the machine kept warm between them:
#   a  llama.cpp built while qwen3-30b-a3b (bf16, /dev/shm) and qwen3-8b Q4_K_M / Q8_0 (/tmp)
#      are synthesized; meanwhile the MoE and quantized suites on cuda:0; then kiln bench of
#      the 30B with every expert resident, its decode profile, kiln diverge on dense-Q4_K_M;
#   b  llama-bench of the 30B resident; --mem-limit 24GiB kiln bench and run (slots, hit
#      rate) beside llama-bench -ncmoe 28,30,32; the squeeze (as bench/h200-issue20-cache.sh);
#   c  the side-by-side of the 8B Q4_K_M and Q8_0 on cuda:0, then kiln bench on vulkan:0.
# Binaries in devrun/, llama.cpp from .peers. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
L=/opt/peer/llama.cpp/build/bin/llama-bench
m=$dir/qwen3-30b-a3b.gguf q=/tmp/kiln-q; mkdir -p $q
m8=$q/qwen3-8b-Q4_K_M.gguf m8q8=$q/qwen3-8b-Q8_0.gguf
case $1 in *a) stage=a ;; *b) stage=b ;; *) stage=c ;; esac
case $stage in
a)
  nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.max.sm,clocks.max.mem --format=csv > $out/gpu.txt 2>&1
  df -h /dev/shm /tmp >> $out/gpu.txt 2>&1
  llama_build
  ( [ -f $m ] || timeout 400 $K synth --preset qwen3-30b-a3b -o $m > $out/synth.txt 2>&1; stamp synth30
    timeout 300 $K synth --preset qwen3-8b --quant Q4_K_M -o $m8 > $out/synth-8b.txt 2>&1 && touch $q/ok8; stamp synth8
    timeout 150 $K synth --preset qwen3-8b --quant Q8_0 -o $m8q8 > $out/synth-8bq8.txt 2>&1 && touch $q/ok8q8; stamp synth8q8 ) &
  KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter '*moe*/*' > $out/moe-tests.txt 2>&1
  echo "rc=$?" >> $out/moe-tests.txt; stamp moe-tests; tarball
  KILN_TEST_DEVICE=cuda:0 timeout 100 $T -j8 --filter 'kernels_quant/*' > $out/kern-q.txt 2>&1; echo "rc=$?" >> $out/kern-q.txt
  KILN_TEST_DEVICE=cuda:0 timeout 100 $T -j8 --filter 'plan_quant*/*' > $out/plan-q.txt 2>&1; echo "rc=$?" >> $out/plan-q.txt
  timeout 40 $T --filter 'cuda/*' > $out/cuda-tests.txt 2>&1; echo "rc=$?" >> $out/cuda-tests.txt
  for f in 'plan_pages/*' 'kernels_paged/*'; do
    KILN_TEST_DEVICE=cuda:0 timeout 60 $T -j4 --filter "$f" >> $out/paged-tests.txt 2>&1; echo "rc=$?" >> $out/paged-tests.txt
  done
  stamp tests; tarball
  for dev in cuda:0 vulkan:0; do
    timeout 40 $K diverge $KILN_TESTDATA/models/dense-Q4_K_M.gguf --device $dev -n 16 > $out/diverge-${dev%:0}.md 2>&1
  done
  stamp diverge; tarball
  while [ ! -f $m ] || ! grep -q synth30 $out/times.txt; do sleep 2; done
  timeout 150 $K bench $m -p 512 -n 64 -r 2 --device cuda:0 > $out/resident-kiln.md 2>&1; stamp resident-kiln; tarball
  timeout 80 $K run $m -p "$prompt" -n 32 --device cuda:0 --no-echo --profile > $out/resident-prof.txt 2>&1
  stamp resident-prof; tarball
  llama_wait; tarball ;;
b)
  timeout 120 $L -m $m -ngl 99 -fa 1 -p 512 -n 64 -r 2 > $out/resident-llama.md 2>&1; stamp resident-llama; tarball
  timeout 150 $K bench $m -p 512 -n 64 -r 2 --device cuda:0 --mem-limit 24GiB > $out/limit-kiln.md 2>&1
  timeout 100 $K run $m -p "$prompt" -n 128 --device cuda:0 --no-echo --mem-limit 24GiB > $out/limit-run.txt 2>&1
  stamp limit-kiln; tarball
  timeout 200 $L -m $m -ngl 99 -fa 1 -ncmoe 28,30,32 -p 512 -n 64 -r 2 > $out/limit-llama.md 2>&1
  stamp limit-llama; tarball
  STAGES=squeeze timeout 220 bash bench/h200-issue20-cache.sh $out/squeeze; stamp squeeze; tarball ;;
c)
  [ -f $q/ok8 ] || timeout 200 $K synth --preset qwen3-8b --quant Q4_K_M -o $m8 > $out/synth-8b.txt 2>&1 && touch $q/ok8
  [ -f $q/ok8q8 ] || timeout 100 $K synth --preset qwen3-8b --quant Q8_0 -o $m8q8 > $out/synth-8bq8.txt 2>&1 && touch $q/ok8q8
  stamp synth
  KILN=$K MODELS="$m8 $m8q8" P=24,512 N=32 R=3 DEVICES="cuda:0" timeout 200 bash .peers/side-by-side.sh \
    > $out/sbs.md 2>&1
  stamp sbs; tarball
  timeout 80 $K bench $m8 -p 24,512 -n 32 -r 1 --device vulkan:0 > $out/vk-8b.md 2>&1
  stamp vulkan; tarball ;;
esac
