#!/usr/bin/env bash
# Issue 14 on the H200: the skinny products with 16-byte loads of both operands on a
# shared column permutation and the next steps' weights in flight (kernels/matmul_skinny.c).
# The kernel suite's products on cuda:0; where a 24-token block goes (`kiln run
# --profile-tokens 24`, the plan's short block of 64) on qwen3-8b-shaped layers for the
# new default, forced configurations (KILN_SKINNY=row_frags,slices,depth) and the previous
# kernel (devrun/kiln-old, main before the change); the same for the whole qwen3-0.6b; then
# kiln bench pp24 on the three presets, new and old. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
O=$PWD/devrun/kiln-old
start=$(date +%s)
stamp() { echo "$1 at $(( $(date +%s) - start )) s" >> $out/times.txt; }
synth qwen3-0.6b qwen3-4b qwen3-8b
timeout 100 $K synth --preset qwen3-8b --layers 2 -o $dir/q8-2.gguf > /dev/null
stamp synth
KILN_TEST_DEVICE=cuda:0 timeout 200 $T -j8 --filter 'kernels_matmul/*' > $out/kern-matmul.txt 2>&1
echo "rc=$?" >> $out/kern-matmul.txt
stamp suite
prof() { # name binary model [env...]
  local name=$1 bin=$2 m=$3; shift 3
  env "$@" timeout 60 $bin run $m -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens 24 \
    > /dev/null 2> $out/prof-$name.txt
}
prof new $K $dir/q8-2.gguf
prof old $O $dir/q8-2.gguf
for c in 1,8,0 2,8,0 2,4,0 2,16,0 1,8,2 2,8,1 2,8,2 2,8,3 2,4,4; do prof "f$c" $K $dir/q8-2.gguf KILN_SKINNY=$c; done
prof 06-new $K $dir/qwen3-0.6b.gguf
prof 06-old $O $dir/qwen3-0.6b.gguf
stamp prof
tar cf $out-part.tar -C $(dirname $out) $(basename $out)
for p in qwen3-8b qwen3-4b qwen3-0.6b; do
  timeout 60 $K bench $dir/$p.gguf -p 24 -n 0 -r 5 --device cuda:0 -o md > $out/b-$p.md 2>&1
  timeout 60 $O bench $dir/$p.gguf -p 24 -n 0 -r 5 --device cuda:0 -o md > $out/b-$p-old.md 2>&1
  stamp "bench $p"
done
tar cf $out.tar -C $(dirname $out) $(basename $out)
