#!/usr/bin/env bash
# Issue 20's measures on the GPU: qwen3-30b-a3b synthesized in bf16 (57 GiB; kept in /dev/shm
# while the machine stays warm), each stage under 10 minutes; STAGES picks them, in order:
#   prep      the model written while the MoE suites run on cuda:0 (and llama.cpp builds);
#   resident  kiln bench pp512/tg64, every expert on the device, beside llama-bench -ngl 99;
#   limit     --mem-limit 24GiB: kiln bench pp512/tg64 and kiln run -n 128 (slots, hit rate),
#             beside llama-bench with the experts of 28, 30 or 32 layers on the CPU (-ncmoe);
#   squeeze   another program (bench/hold_memory.py) leaves the card 24 GiB free; kiln
#             run -n 450 (no limit: its cache sized from the free memory) logs each token's
#             time; at token 150 (the cache warm) the holder takes 2 GiB more (as kiln gives
#             them back), at token 300 it returns them; the speed per 25 tokens in squeeze-speed.md.
# Binaries in devrun/, llama.cpp from .peers. Writes OUTDIR.tar.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
L=/opt/peer/llama.cpp/build/bin/llama-bench
m=$dir/qwen3-30b-a3b.gguf
for stage in ${STAGES:-prep resident}; do
  case $stage in
  prep)
    nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv > $out/gpu.txt 2>&1
    rm -f $dir/qwen3-8b*.gguf $dir/qwen3-30b-a3b-Q4_K_M.gguf
    llama_build
    ( [ -f $m ] || timeout 420 $K synth --preset qwen3-30b-a3b -o $m > $out/synth.txt 2>&1; stamp synth ) &
    sp=$!
    KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter '*moe*/*' > $out/moe-tests.txt 2>&1
    echo "rc=$?" >> $out/moe-tests.txt
    timeout 60 $T --filter 'cuda/*' > $out/cuda-tests.txt 2>&1; echo "rc=$?" >> $out/cuda-tests.txt
    stamp tests; tarball
    wait $sp; llama_wait; tarball ;;
  resident)
    timeout 200 $K bench $m -p 512 -n 64 -r 2 --device cuda:0 > $out/resident-kiln.md 2>&1
    timeout 200 $L -m $m -ngl 99 -fa 1 -p 512 -n 64 -r 2 > $out/resident-llama.md 2>&1
    stamp resident; tarball ;;
  limit)
    timeout 200 $K bench $m -p 512 -n 64 -r 2 --device cuda:0 --mem-limit 24GiB > $out/limit-kiln.md 2>&1
    timeout 150 $K run $m -p "$prompt" -n 128 --device cuda:0 --no-echo --mem-limit 24GiB > $out/limit-run.txt 2>&1
    stamp limit-kiln; tarball
    timeout 300 $L -m $m -ngl 99 -fa 1 -ncmoe 28,30,32 -p 512 -n 64 -r 2 > $out/limit-llama.md 2>&1
    stamp limit-llama; tarball ;;
  squeeze)
    log=$out/squeeze-tokens.log; : > $log
    nvidia-smi --query-gpu=memory.used,memory.free --format=csv > $out/squeeze-smi.txt 2>&1
    python3 bench/hold_memory.py --log $log --leave 24 0:0 150:2 300:0 --until 450 > $out/squeeze-holder.txt 2>&1 &
    hp=$!
    while ! grep -q 'base hold' $out/squeeze-holder.txt 2>/dev/null && kill -0 $hp 2>/dev/null; do sleep 0.5; done
    nvidia-smi --query-gpu=memory.used,memory.free --format=csv >> $out/squeeze-smi.txt 2>&1
    timeout 300 $K run $m -p "$prompt" -n 450 --device cuda:0 --no-echo --token-log $log > $out/squeeze-run.txt 2>&1
    kill $hp 2>/dev/null; wait $hp 2>/dev/null
    python3 - $log > $out/squeeze-speed.md <<'PY'
import sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
print('| tokens | seconds | tok/s |\n|---|---:|---:|')
for i in range(25, len(rows), 25):
    (t0, _), (t1, k) = rows[i - 25], rows[i]
    print(f'| {int(rows[i - 25][1])}-{int(k)} | {t1:.2f} | {25 / (t1 - t0):.1f} |')
PY
    stamp squeeze; tarball ;;
  esac
done
