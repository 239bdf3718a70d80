#!/usr/bin/env bash
# Session 46's call (issues 14, 17, 18): the decode attention in one launch (its runs merged
# by the last workgroup, kn_qk_prep's work done in it; KILN_ATTN_PREP=0 keeps kn_qk_prep's
# launch, KILN_ATTN_MERGED=0 all three): its suites on cuda:0 first, then tg64 of qwen3-0.6b
# (bf16 and Q4_K_M) and 8b each way beside llama-bench tg64 in the same call; pp24 on 8b as
# built, KILN_SKINNY_NORM=0, KILN_ATTN_SHORT=0, and 0.6b / 4b beside llama-bench pp24;
# serve (0.6b 1/8, 8b 1/8/32 streams); the profiles. Binaries in devrun/, llama.cpp from
# .peers. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
llama_build
synth qwen3-0.6b qwen3-8b; stamp synth
for f in 'kernels_attn_merged/*' 'plan_attn_merged/*' 'kernels_skinny_norm/*' 'kernels_attn_prefill/short*' 'plan_batch/*'; do
  echo "== $f" >> $out/tests.txt
  KILN_TEST_DEVICE=cuda:0 timeout 60 $T -j8 --filter "$f" >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
done
echo "== kernels_attn_merged and plan_attn_merged on vulkan:0" >> $out/tests.txt
timeout 90 $T -j8 --filter '*attn_merged/*' >> $out/tests.txt 2>&1; echo "rc=$?" >> $out/tests.txt
stamp tests; tarball
[ -f $dir/q06.gguf ] || timeout 100 $K synth --preset qwen3-0.6b --quant Q4_K_M -o $dir/q06.gguf > /dev/null 2>&1
for p in qwen3-0.6b q06 qwen3-8b; do
  timeout 50 $K bench $dir/$p.gguf -p 0 -n 64 -r 3 --device cuda:0 > $out/tg-$p.md 2>&1
  KILN_ATTN_PREP=0 timeout 50 $K bench $dir/$p.gguf -p 0 -n 64 -r 3 --device cuda:0 > $out/tg-$p-noprep.md 2>&1
  KILN_ATTN_MERGED=0 timeout 50 $K bench $dir/$p.gguf -p 0 -n 64 -r 3 --device cuda:0 > $out/tg-$p-pair.md 2>&1
  tarball
done
for p in qwen3-8b qwen3-0.6b; do
  timeout 50 $K bench $dir/$p.gguf -p 24 -n 0 -r 4 --device cuda:0 > $out/pp24-$p.md 2>&1
done
KILN_SKINNY_NORM=0 timeout 50 $K bench $dir/qwen3-8b.gguf -p 24 -n 0 -r 4 --device cuda:0 > $out/pp24-8b-unfused.md 2>&1
KILN_ATTN_SHORT=0 timeout 50 $K bench $dir/qwen3-8b.gguf -p 24 -n 0 -r 4 --device cuda:0 > $out/pp24-8b-attn32.md 2>&1
stamp kiln-pp24; tarball
llama_wait
for p in qwen3-8b qwen3-0.6b q06; do
  timeout 40 $L -m $dir/$p.gguf -ngl 99 -fa 1 -p 24 -n 64 -r 4 > $out/llama-$p.md 2>&1
done
stamp llama; tarball
timeout 40 $K run $dir/qwen3-8b.gguf --device cuda:0 -p "$prompt" -n 16 --profile-tokens 24 > /dev/null 2> $out/prof-8b.txt
timeout 40 $K run $dir/qwen3-0.6b.gguf --device cuda:0 -p "$prompt" -n 16 --profile-tokens 24 > /dev/null 2> $out/prof-06.txt
stamp profile; tarball
MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8" SUITES=0 timeout 100 bash bench/h200-batch.sh $out/serve06
stamp serve06; tarball
MODELS=qwen3-8b DEVICES=cuda:0 STREAMS="1 8 32" SUITES=0 timeout 120 bash bench/h200-batch.sh $out/serve8
stamp serve8; tarball
synth qwen3-4b; timeout 50 $K bench $dir/qwen3-4b.gguf -p 24 -n 0 -r 4 --device cuda:0 > $out/pp24-qwen3-4b.md 2>&1
timeout 40 $L -m $dir/qwen3-4b.gguf -ngl 99 -fa 1 -p 24 -n 0 -r 4 > $out/llama-qwen3-4b.md 2>&1
stamp 4b; tarball
