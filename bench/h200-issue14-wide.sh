#!/usr/bin/env bash
# Issue 14 on the H200: the skinny products' steps of 64 columns (KILN_SKINNY's fourth
# field, wide 2: each lane's two 16-byte loads of a row side by side). The matmul suite on
# cuda:0 (forced wide configurations included); where a 24-token block goes (`kiln run
# --profile-tokens 24`) on qwen3-8b-shaped layers for the default and forced
# configurations; kiln bench pp24 on qwen3-8b and -4b for the default and the best guesses.
# Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
start=$(date +%s)
stamp() { echo "$1 at $(( $(date +%s) - start )) s" >> $out/times.txt; }
timeout 100 $K synth --preset qwen3-8b --layers 2 -o $dir/q8-2.gguf > /dev/null
(synth qwen3-8b qwen3-4b) &
spid=$!
KILN_TEST_DEVICE=cuda:0 timeout 200 $T -j8 --filter 'kernels_matmul/skinny*' > $out/kern-matmul.txt 2>&1
echo "rc=$?" >> $out/kern-matmul.txt
stamp suite
prof() { # name [env...]
  local name=$1; shift
  env "$@" timeout 60 $K run $dir/q8-2.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens 24 \
    > /dev/null 2> $out/prof-$name.txt
}
prof default
for c in 2,8,0,2 2,8,1,2 2,4,0,2 2,4,1,2 1,8,1,2 2,16,1,2 2,8,2,1; do prof "f$c" KILN_SKINNY=$c; done
stamp prof
wait $spid
stamp synth
tar cf $out.tar -C $(dirname $out) $(basename $out)
for p in qwen3-8b qwen3-4b; do
  for c in default 2,8,1,2 2,4,1,2; do
    e=; [ $c = default ] || e=KILN_SKINNY=$c
    env $e timeout 60 $K bench $dir/$p.gguf -p 24 -n 0 -r 5 --device cuda:0 -o md > $out/b-$p-$c.md 2>&1
  done
  stamp "bench $p"
done
tar cf $out.tar -C $(dirname $out) $(basename $out)
