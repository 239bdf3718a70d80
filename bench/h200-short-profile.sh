#!/usr/bin/env bash
# Issues 14 and 15 on the H200: where a 24-token prompt goes. kiln run --profile-tokens 24 on
# qwen3.5-0.8b, qwen3.5-4b, qwen3-4b and a 2-layer qwen3-8b (cuda:0), the 0.8b on vulkan:0,
# and kiln bench pp24 / tg32 on the Qwen3.5 presets. Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
synth qwen3.5-0.8b qwen3.5-4b qwen3-4b
[ -f $dir/q8-2.gguf ] || timeout 100 $K synth --preset qwen3-8b --layers 2 -o $dir/q8-2.gguf > /dev/null
stamp synth
prof() { # name model tokens device [env...]
  local name=$1 m=$2 n=$3 d=$4; shift 4
  env "$@" timeout 90 $K run $m -p "$prompt" -n 2 --device $d --no-echo --profile-tokens $n \
    > /dev/null 2> $out/prof-$name.txt
}
for p in qwen3.5-0.8b qwen3.5-4b qwen3-4b; do prof $p-24 $dir/$p.gguf 24 cuda:0; done
prof q8-2-24 $dir/q8-2.gguf 24 cuda:0
prof qwen3.5-0.8b-24-vk $dir/qwen3.5-0.8b.gguf 24 vulkan:0
stamp prof
tarball
for p in qwen3.5-0.8b qwen3.5-4b; do
  timeout 60 $K bench $dir/$p.gguf -p 24 -n 32 -r 3 --device cuda:0 -o md > $out/b-$p.md 2>&1
done
stamp bench
tarball
