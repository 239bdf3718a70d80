#!/usr/bin/env bash
# Session 53, first call. llama.cpp built in the background for the second call
# (h200-session53c.sh). Issue 18's decode on cuda:0: the quantized matrix-vector products
# with the magic float's offset folded into the sub-block sums (KILN_MATVEC_Q_FOLD, on in
# bf16 by default) and the streamed form (KILN_MATVEC_Q_STREAM=depth[,per_cu], off by
# default): the kernel suites and the quantized plan gate on cuda:0, then qwen3-8b Q4_K_M
# tg64 A/B/A and decode profiles. Then issue 18 on Vulkan: the quantized prefill on
# cooperative matrices (kernels/matmul_q_coop.c, never run on a GPU before): its suites and
# the plan gate on vulkan:0 with KILN_MATMUL_Q_COOP=1, pp24 / pp512 with it and without.
# Writes OUTDIR.tar as it goes.
set -u
out=$1
source bench/h200-common.sh
llama_build
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j4 --filter 'kernels_quant/*' > $out/kq-cuda.txt 2>&1; echo "rc=$?" >> $out/kq-cuda.txt
KILN_MATVEC_Q_STREAM=3 KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j4 --filter 'plan_quant/*' > $out/plan-quant-cuda.txt 2>&1
echo "rc=$?" >> $out/plan-quant-cuda.txt
stamp kq-cuda; tarball
for m in qwen3-0.6b qwen3-8b; do
  [ -f $dir/$m-q4km.gguf ] || timeout 200 $K synth --preset $m --quant Q4_K_M -o $dir/$m-q4km.gguf > /dev/null
  stamp "synth $m"
done
f=$dir/qwen3-8b-q4km.gguf
for v in base fold0 s3 s2,2 s4 s3,2 base s3; do
  case $v in base) e="";; fold0) e="KILN_MATVEC_Q_FOLD=0";; s*) e="KILN_MATVEC_Q_STREAM=${v#s}";; esac
  echo "## $v" >> $out/tg-8b.md
  env $e timeout 60 $K bench $f -p 0 -n 64 -r 3 --device cuda:0 >> $out/tg-8b.md 2>&1
done
stamp tg-8b; tarball
for v in base s3; do
  e=""; [ $v = s3 ] && e="KILN_MATVEC_Q_STREAM=3"
  env $e timeout 60 $K run $f --device cuda:0 -p "$prompt" -n 8 --no-echo --profile > /dev/null 2> $out/prof-8b-$v.txt
done
for v in base s3; do
  e=""; [ $v = s3 ] && e="KILN_MATVEC_Q_STREAM=3"
  echo "## $v" >> $out/tg-06b.md
  env $e timeout 60 $K bench $dir/qwen3-0.6b-q4km.gguf -p 0 -n 128 -r 3 --device cuda:0 >> $out/tg-06b.md 2>&1
done
stamp prof; tarball
bash bench/h200-session53-vk.sh $out
