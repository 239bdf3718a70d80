#!/usr/bin/env bash
# The short block's skinny products at qwen3.5-4b's widths (2560 rows of the down, o and
# DeltaNet out products: 160 workgroups of 16 rows on 132 SMs): a 4-layer qwen3.5-4b,
# kiln run --profile-tokens 24 under forced KILN_SKINNY configurations. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
[ -f $dir/q354-l4.gguf ] || timeout 100 $K synth --preset qwen3.5-4b --layers 4 -o $dir/q354-l4.gguf > /dev/null
for c in default 1,16,0,2 1,16,0,1 1,8,2,2 1,8,4,2 1,4,0,2 2,8,0,2 2,16,0,2 1,8,1,1; do
  if [ $c = default ]; then e=(); else e=(KILN_SKINNY=$c); fi
  env "${e[@]}" timeout 60 $K run $dir/q354-l4.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens 24 \
    > /dev/null 2> $out/prof-$c.txt
done
tar cf $out.tar -C $(dirname $out) $(basename $out)
