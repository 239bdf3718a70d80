#!/usr/bin/env bash
# Issue 14 on the H200: the tma product's shapes (KILN_MATMUL_TMA=tile_r,cluster) beside the
# cp.async warpgroup product (KILN_MATMUL_TMA=0) on a 2-layer qwen3-8b at 512 and 2048
# tokens (kiln run --profile-tokens; CFGS names the shapes, wg the cp.async product), and the tma product's SASS (kiln dump for the device,
# the toolkit's ptxas and cuobjdump where the image has them). Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
m=$dir/q8-2l.gguf
[ -n "${SUITE:-}" ] && { KILN_TEST_DEVICE=cuda:0 timeout 200 $T -j4 --filter "$SUITE" > $out/suite.txt 2>&1; echo "rc=$?" >> $out/suite.txt; }
[ -n "${PLAN:-}" ] && { KILN_TEST_DEVICE=cuda:0 timeout 200 $T -j8 --filter 'plan*/*' > $out/plan.txt 2>&1; echo "rc=$?" >> $out/plan.txt; }
[ -n "${TORCH:-}" ] && timeout 100 python3 bench/torch_shapes.py 4096 4096 1024 12288 32 8 128 512 2048 > $out/torch.md 2>&1
[ -f $m ] || timeout 100 $K synth --preset qwen3-8b --layers 2 --vocab 32000 -o $m > /dev/null
stamp synth
prof() { # name tokens [env...]
  local name=$1 n=$2; shift 2
  env "$@" timeout 60 $K run $m -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens $n 2>&1 \
    | sed -n '/^prefill block/,$p' | grep -E "prefill_(qkv|o|gate_up|down|swiglu)|replayed" > $out/p-$name.txt
}
CFGS=${CFGS:-wg 128,1 192,1 256,1 128,2 192,2 256,2}
for n in 512 2048; do
  for c in $CFGS; do
    case $c in
      wg) prof wg-$n $n KILN_MATMUL_TMA=0 ;;
      default) prof default-$n $n ;;
      apart) prof apart-$n $n KILN_FF_SWIGLU=0 ;;
      *) prof tma-${c/,/-}-$n $n KILN_MATMUL_TMA=$c ;;
    esac
  done
  stamp "sweep $n"
  tarball
done
timeout 60 $K dump $m --ptx /tmp/d --device cuda:0 > /dev/null 2>&1
P=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
C=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
for r in prefill_o prefill_qkv; do
  $P -arch=sm_90a -v /tmp/d/$r.ptx -o /tmp/d/$r.cubin > $out/ptxas-$r.txt 2>&1
  [ -x $C ] && $C -sass /tmp/d/$r.cubin > $out/sass-$r.txt 2>&1
done
cp /tmp/d/prefill_o.ptx $out/ 2>/dev/null
stamp sass
tarball
