#!/usr/bin/env bash
# Issue 14: argmax with eight 16-byte vectors in flight per invocation (was four): the
# argmax suite on cuda:0, qwen3-0.6b's decode step and 24-token block (kiln run
# --profile-tokens 24) and kiln bench pp24 / tg32 on qwen3-0.6b and qwen3-8b. Binaries in
# devrun/. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
synth qwen3-0.6b qwen3-8b
KILN_TEST_DEVICE=cuda:0 timeout 100 $T --filter 'kernels/argmax*' > $out/argmax.txt 2>&1; echo "rc=$?" >> $out/argmax.txt
timeout 60 $K run $dir/qwen3-0.6b.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens 24 \
  > /dev/null 2> $out/prof-06-24.txt
for p in qwen3-0.6b qwen3-8b; do
  timeout 60 $K bench $dir/$p.gguf -p 24 -n 32 -r 3 --device cuda:0 -o md > $out/b-$p.md 2>&1
done
tar cf $out.tar -C $(dirname $out) $(basename $out)
