#!/usr/bin/env bash
# qwen3.5-0.8b's prefill on vulkan:0 against the binary before this session's state and
# product changes (devrun/kiln-old, main at 5dbc844): kiln bench pp24 / pp512 (-r 5) new,
# old, new, and where a 24-token block goes now. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
O=$PWD/devrun/kiln-old
synth qwen3.5-0.8b
for b in new old new2; do
  bin=$K; [ $b = old ] && bin=$O
  timeout 100 $bin bench $dir/qwen3.5-0.8b.gguf -p 24,512 -n 0 -r 5 --device vulkan:0 -o md > $out/b-$b.md 2>&1
done
timeout 90 $K run $dir/qwen3.5-0.8b.gguf -p "$prompt" -n 2 --device vulkan:0 --no-echo --profile-tokens 24 \
  > /dev/null 2> $out/prof-vk-24.txt
tar cf $out.tar -C $(dirname $out) $(basename $out)
