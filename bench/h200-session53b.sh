#!/usr/bin/env bash
# Session 53, first call. Issue 18's decode on cuda:0: the quantized matrix-vector products
# with the magic float's offset folded into the sub-block sums (KILN_MATVEC_Q_FOLD, on in
# bf16 by default) and the streamed form (KILN_MATVEC_Q_STREAM=depth[,per_cu], off by
# default): the kernel suite and the quantized plan gate on cuda:0 (streamed), qwen3-8b
# Q4_K_M tg128 A/B/A, decode profiles, then kiln beside llama-bench (built in the
# background) on that file. Then the Vulkan stage (h200-session53-vk.sh) as far as it gets.
# Writes OUTDIR.tar as it goes.
set -u
out=$1
source bench/h200-common.sh
llama_build
f=$dir/qwen3-8b-q4km.gguf
[ -f $f ] || (timeout 420 $K synth --preset qwen3-8b --quant Q4_K_M -o $f > $out/synth8b.txt 2>&1) & synth_pid=$!
KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j4 --filter 'kernels_quant/*' > $out/kq-cuda.txt 2>&1; echo "rc=$?" >> $out/kq-cuda.txt
stamp kq-cuda; tarball
KILN_MATVEC_Q_STREAM=3 KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j4 --filter 'plan_quant/*' > $out/plan-quant-cuda.txt 2>&1
echo "rc=$?" >> $out/plan-quant-cuda.txt
stamp plan-quant-cuda; tarball
wait $synth_pid; stamp synth8b
for v in base fold0 s3 s2 s4 w16s2 base s3; do
  case $v in base) e="";; fold0) e="KILN_MATVEC_Q_FOLD=0";; s*) e="KILN_MATVEC_Q_STREAM=${v#s}";;
    w16s2) e="KILN_MATVEC_Q_MMA=16,1 KILN_MATVEC_Q_STREAM=2";; esac
  echo "## $v" >> $out/tg-8b.md
  env $e timeout 60 $K bench $f -p 0 -n 128 -r 3 --device cuda:0 >> $out/tg-8b.md 2>&1
done
stamp tg-8b; tarball
for v in base s3; do
  e=""; [ $v = s3 ] && e="KILN_MATVEC_Q_STREAM=3"
  env $e timeout 60 $K run $f --device cuda:0 -p "$prompt" -n 8 --no-echo --profile > /dev/null 2> $out/prof-8b-$v.txt
done
stamp prof; tarball
llama_wait
KILN=$K MODELS="$f" P=24,512 N=128 R=3 DEVICES="cuda:0" timeout 150 bash .peers/side-by-side.sh > $out/sbs-8b-q4km.md 2>&1
stamp sbs; tarball
bash bench/h200-session53-vk.sh $out
