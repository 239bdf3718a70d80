#!/usr/bin/env bash
# Session 50's call: the serve run issue 17 needs on an idle host, then issue 16's new
# prefill attention on cooperative matrices (kernels/attn_prefill_coop.c) on vulkan:0:
#   issue 17: kiln serve --parallel 32, qwen3-0.6b at 1 / 8 streams (cuda:0), nothing else
#     running on the host;
#   issue 16: kernels_attn_prefill/* on vulkan:0 (the cooperative variant against the C
#     reference on every shape, and with scores that keep growing); pp512 of qwen3-0.6b
#     and qwen3-8b on vulkan:0 with it and without (KILN_ATTN_COOP=0); where a 512-token
#     block goes (kiln run --profile-tokens 512) on vulkan:0 both ways and on cuda:0;
#     the workgroup-scope product's tilings (KILN_COOP2) by the probe's rate;
#     plan/* on vulkan:0 (the whole-model checks) with what time is left.
# Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
synth qwen3-0.6b
stamp synth06
MODELS=qwen3-0.6b DEVICES=cuda:0 STREAMS="1 8" SUITES=0 timeout 90 bash bench/h200-batch.sh $out/serve06
stamp serve06; tarball
( synth qwen3-8b; stamp synth8b ) &
timeout 30 $K probe > $out/probe.txt 2>&1
KILN_TEST_DEVICE=vulkan:0 timeout 200 $T -j8 --filter 'kernels_attn_prefill/*' > $out/attn-tests.txt 2>&1
echo "rc=$?" >> $out/attn-tests.txt
stamp attn-tests; tarball
b() { timeout 40 $K bench $dir/$1.gguf -p 512 -n 0 -r 3 --device $2 > $out/pp512-$1-${2%:0}-$3.md 2>&1; }
b qwen3-0.6b vulkan:0 coop
KILN_ATTN_COOP=0 b qwen3-0.6b vulkan:0 simt
p() { timeout 60 $K run $dir/$1.gguf --device $2 -p "$prompt" -n 2 --no-echo --profile-tokens 512 > /dev/null 2> $out/prof-$1-${2%:0}-$3.txt; }
p qwen3-0.6b vulkan:0 coop
KILN_ATTN_COOP=0 p qwen3-0.6b vulkan:0 simt
p qwen3-0.6b cuda:0 mma
stamp prof06; tarball
while ! grep -q synth8b $out/times.txt; do sleep 2; done
b qwen3-8b vulkan:0 coop
KILN_ATTN_COOP=0 b qwen3-8b vulkan:0 simt
p qwen3-8b vulkan:0 coop
stamp 8b; tarball
# the workgroup-scope product's tilings (kernels/matmul_coop2.c, KILN_COOP2): the probe's rate
for t in 64,128,2,1,32 64,128,2,1,64 64,128,2,2,32 64,128,4,1,32 64,128,2,2,64 64,64,2,2,32 32,128,4,1,32 \
    64,128,1,2,32 64,128,1,1,32; do
  echo "== KILN_COOP2=$t" >> $out/coop2-sweep.txt
  KILN_COOP2=$t timeout 40 $K probe --measure >> $out/coop2-sweep.txt 2>&1
done
stamp sweep; tarball
KILN_TEST_DEVICE=vulkan:0 timeout 200 $T -j8 --filter 'plan/*' > $out/plan-vk.txt 2>&1; echo "rc=$?" >> $out/plan-vk.txt
stamp done; tarball
