#!/usr/bin/env bash
# Issue 18: kn_matmul_q_mma's tile shapes and kn_matvec_q's rows and unrolling on qwen3-8b
# Q4_K_M (one call, no peer): for each setting, the quantized product tests on cuda:0 under
# it, then a decode and 512-token profile.
set -u
out=$1
[ -x devrun/kiln ] || tar -xJf devrun/pack.tar.xz -C devrun
source bench/h200-common.sh
[ -f $dir/qwen3-8b-Q4_K_M.gguf ] || timeout 200 $K synth --preset qwen3-8b --quant Q4_K_M -o $dir/qwen3-8b-Q4_K_M.gguf > $out/synth-8b.txt 2>&1
stamp synth8
for cfg in default a b c; do
  case $cfg in
    default) e="X=1" ;;
    a) e="KILN_MATMUL_Q_MMA=2,4,4,4,4 KILN_MATVEC_Q=4,2" ;;
    b) e="KILN_MATMUL_Q_MMA=1,4,8,2,4 KILN_MATVEC_Q=1,4" ;;
    c) e="KILN_MATVEC_Q=2,4" ;;
  esac
  echo "$cfg: $e" >> $out/settings.txt
  env $e KILN_TEST_DEVICE=cuda:0 timeout 60 $T -j8 --filter 'kernels_quant/mat*' > $out/kern-$cfg.txt 2>&1; echo "rc=$?" >> $out/kern-$cfg.txt
  env $e timeout 90 $K run $dir/qwen3-8b-Q4_K_M.gguf -p "$prompt" -n 4 --device cuda:0 --no-echo \
    --profile-tokens 512 > /dev/null 2> $out/prof-8b-$cfg.txt
  stamp "prof $cfg"
  tarball
done
