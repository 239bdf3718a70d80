#!/usr/bin/env bash
# Issue 17 on the H200: whether programmatic dependent launches (KILN_EARLY=1, kn_early.c)
# shorten a step of several slots' tokens, which is launch-bound on small models: kiln run
# --profile-step N with and without, per model.
# Run: source .device-runtime/env.sh && bash bench/h200-batch-early.sh OUT
set -u
out=${1:-h200-out}
source bench/h200-common.sh
MODELS=${MODELS:-"qwen3-0.6b qwen3-8b"}
synth $MODELS
for m in $MODELS; do
  for n in 8 32; do
    for e in 0 1; do
      KILN_EARLY=$e timeout 120 $K run $dir/$m.gguf --device cuda:0 -p "$prompt" -n 4 --profile-tokens 24 \
        --profile-step $n > /dev/null 2> $out/prof-$m-step$n-early$e.txt
    done
  done
  stamp "$m"
done
grep -H "recorded" $out/prof-*.txt > $out/summary.txt
tarball
