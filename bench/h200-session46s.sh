#!/usr/bin/env bash
# Session 46's short call (little device time left): the one-launch decode attention's
# suites on cuda:0 and vulkan:0, then kiln bench tg64 (as built, and KILN_ATTN_MERGED=0:
# the three launches) and pp24 on qwen3-0.6b (bf16, Q4_K_M) and qwen3-8b, with llama-bench
# pp24 + tg64 on the same files in the same call. Binaries in devrun/, llama.cpp from
# .peers. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
llama_build
synth qwen3-0.6b; stamp synth06
[ -f $dir/q06.gguf ] || timeout 100 $K synth --preset qwen3-0.6b --quant Q4_K_M -o $dir/q06.gguf > /dev/null 2>&1
(synth qwen3-8b) & synth8=$!
echo "== *attn_merged/* on cuda:0" >> $out/tests.txt
KILN_TEST_DEVICE=cuda:0 timeout 60 $T -j8 --filter '*attn_merged/*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
echo "== *attn_merged/* on vulkan:0" >> $out/tests.txt
timeout 60 $T -j8 --filter '*attn_merged/*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
stamp tests; tarball
for p in qwen3-0.6b q06; do
  timeout 40 $K bench $dir/$p.gguf -p 24 -n 64 -r 3 --device cuda:0 > $out/k-$p.md 2>&1
  KILN_ATTN_MERGED=0 timeout 40 $K bench $dir/$p.gguf -p 24 -n 64 -r 3 --device cuda:0 > $out/k-$p-pair.md 2>&1
  tarball
done
wait $synth8; stamp synth8
timeout 60 $K bench $dir/qwen3-8b.gguf -p 24 -n 64 -r 3 --device cuda:0 > $out/k-qwen3-8b.md 2>&1
KILN_ATTN_MERGED=0 timeout 60 $K bench $dir/qwen3-8b.gguf -p 24 -n 64 -r 3 --device cuda:0 > $out/k-qwen3-8b-pair.md 2>&1
stamp kiln; tarball
llama_wait
for p in qwen3-0.6b q06 qwen3-8b; do
  timeout 40 $L -m $dir/$p.gguf -ngl 99 -fa 1 -p 24 -n 64 -r 3 > $out/llama-$p.md 2>&1
  tarball
done
stamp llama; tarball
