#!/usr/bin/env bash
# Issue 14 on the H200, the session's last call (no llama.cpp build: its figures are the
# previous call's, bench/h200-issue14-fa.sh): the CUDA kernel, plan and device suites on
# cuda:0 (the attention suite again at KILN_ATTN_OCC=3); where a 512- and a 2048-token
# block of qwen3-8b-shaped layers goes with and without asking for three attention
# workgroups an SM (KILN_ATTN_OCC=3: 168 registers); kiln bench on qwen3-8b, -4b and -0.6b
# (pp24/pp512/pp2048/tg32, medians of 3), and pp512/pp2048 again at KILN_ATTN_OCC=3.
# Binaries in devrun/. Writes OUTDIR.tar (one file comes back; a partial one first).
set -u
out=$1
source bench/h200-common.sh
start=$(date +%s)
stamp() { echo "$1 at $(( $(date +%s) - start )) s" >> $out/times.txt; }
synth qwen3-8b qwen3-4b qwen3-0.6b
timeout 100 $K synth --preset qwen3-8b --layers 2 -o $dir/q8-2.gguf > /dev/null
stamp synth
suites 8 150
KILN_ATTN_OCC=3 KILN_TEST_DEVICE=cuda:0 timeout 120 $T -j8 --filter 'kernels_attn_prefill/*' > $out/attn-occ3.txt 2>&1
echo "rc=$?" >> $out/attn-occ3.txt
stamp suites
prof() { # name tokens [env...]
  local name=$1 n=$2; shift 2
  env "$@" timeout 60 $K run $dir/q8-2.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens $n --block $n \
    > /dev/null 2> $out/prof-$name-$n.txt
}
for n in 512 2048; do prof default $n; prof occ3 $n KILN_ATTN_OCC=3; done
stamp prof
tar cf $out-part.tar -C $(dirname $out) $(basename $out)
for p in qwen3-8b qwen3-4b qwen3-0.6b; do
  timeout 90 $K bench $dir/$p.gguf -p 24,512,2048 -n 32 -r 3 --device cuda:0 -o md > $out/b-$p.md 2>&1
  stamp "bench $p"
done
for p in qwen3-8b qwen3-4b qwen3-0.6b; do
  left=$(( 560 - ($(date +%s) - start) ))
  [ $left -gt 20 ] || break
  KILN_ATTN_OCC=3 timeout $left $K bench $dir/$p.gguf -p 512,2048 -n 0 -r 3 --device cuda:0 -o md > $out/b-$p-occ3.md 2>&1
  stamp "bench occ3 $p"
done
tar cf $out.tar -C $(dirname $out) $(basename $out)
