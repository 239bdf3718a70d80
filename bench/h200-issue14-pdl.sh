#!/usr/bin/env bash
# Issue 14 on the H200: programmatic dependent launch (caps.grid_dep: every kernel waits for
# the one before it in a griddepcontrol prologue and is launched with programmatic stream
# serialization) and the skinny products' 64-column steps by default. The CUDA, matmul and
# plan suites on cuda:0; a 24-token and a 512-token profile of qwen3-8b-shaped layers with
# and without the overlap (--caps no-grid-dep); kiln bench pp24/pp512/tg32 both ways on the
# three presets (the side-by-side with llama.cpp: h200-issue14-sbs.sh). Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
start=$(date +%s)
stamp() { echo "$1 at $(( $(date +%s) - start )) s" >> $out/times.txt; }
timeout 100 $K synth --preset qwen3-8b --layers 2 -o $dir/q8-2.gguf > /dev/null
(synth qwen3-8b qwen3-4b qwen3-0.6b) &
spid=$!
timeout 60 $T --filter 'cuda/*' > $out/cuda.txt 2>&1; echo "rc=$?" >> $out/cuda.txt
KILN_TEST_DEVICE=cuda:0 timeout 200 $T -j8 --filter 'kernels_matmul/*' > $out/kern-matmul.txt 2>&1
echo "rc=$?" >> $out/kern-matmul.txt
KILN_TEST_DEVICE=cuda:0 timeout 300 $T -j8 --filter 'plan*/*' > $out/plan.txt 2>&1; echo "rc=$?" >> $out/plan.txt
stamp suites
for n in 24 512; do
  for c in dep nodep; do
    caps=; [ $c = nodep ] && caps="--caps no-grid-dep"
    timeout 60 $K run $dir/q8-2.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens $n $caps \
      > /dev/null 2> $out/prof-$n-$c.txt
  done
done
stamp prof
wait $spid
stamp synth
for p in qwen3-8b qwen3-4b qwen3-0.6b; do
  timeout 90 $K bench $dir/$p.gguf -p 24,512 -n 32 -r 3 --device cuda:0 -o md > $out/b-$p-dep.md 2>&1
  timeout 90 $K bench $dir/$p.gguf -p 24,512 -n 32 -r 3 --device cuda:0 --caps no-grid-dep -o md \
    > $out/b-$p-nodep.md 2>&1
  stamp "bench $p"
done
tar cf $out.tar -C $(dirname $out) $(basename $out)
