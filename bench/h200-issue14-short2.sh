#!/usr/bin/env bash
# Issue 14 on the H200: the short block with the feed-forward's gate, up and SwiGLU in one
# skinny product, the argmax scan with 16-byte loads and matrix-vector subgroups that take
# up to four short rows (qwen3-0.6b's logits head). The kernel and plan suites on cuda:0;
# where 8-, 24- and 64-token blocks of qwen3-8b-shaped layers go (and forced skinny
# configurations at 24), the decode step and a 24-token block of the whole qwen3-0.6b;
# kiln bench pp24 / tg32 on the three presets beside devrun/kiln-old (main at 4d11fe5).
# Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
O=$PWD/devrun/kiln-old
start=$(date +%s)
stamp() { echo "$1 at $(( $(date +%s) - start )) s" >> $out/times.txt; }
synth qwen3-0.6b qwen3-4b qwen3-8b
timeout 100 $K synth --preset qwen3-8b --layers 2 -o $dir/q8-2.gguf > /dev/null
stamp synth
suites 8 200
stamp suites
prof() { # name binary model tokens [env...]
  local name=$1 bin=$2 m=$3 n=$4; shift 4
  env "$@" timeout 60 $bin run $m -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens $n \
    > /dev/null 2> $out/prof-$name.txt
}
for n in 8 24 64; do prof q8-$n $K $dir/q8-2.gguf $n; done
for c in 2,4,0 2,8,1 2,16,1; do prof "q8-24-f$c" $K $dir/q8-2.gguf 24 KILN_SKINNY=$c; done
prof 06-24 $K $dir/qwen3-0.6b.gguf 24
stamp prof
tar cf $out-part.tar -C $(dirname $out) $(basename $out)
for p in qwen3-8b qwen3-4b qwen3-0.6b; do
  timeout 60 $K bench $dir/$p.gguf -p 24 -n 32 -r 5 --device cuda:0 -o md > $out/b-$p.md 2>&1
  timeout 60 $O bench $dir/$p.gguf -p 24 -n 32 -r 5 --device cuda:0 -o md > $out/b-$p-old.md 2>&1
  stamp "bench $p"
done
tar cf $out.tar -C $(dirname $out) $(basename $out)
