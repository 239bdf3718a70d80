#!/usr/bin/env bash
# Issue 15 on the H200: the chunked DeltaNet scan on matrix fragments. The DeltaNet kernel
# suite and the Qwen3.5 plan suite on cuda:0 (the fragment scan against the token
# recurrence); where a 512- and a 24-token block go (kiln run --profile-tokens) on
# qwen3.5-0.8b and 4b; kiln bench pp24 / pp512 / pp4096 / tg32 (cuda:0), and pp512 with
# three bf16 parts (KILN_DN_PARTS=3). Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
synth qwen3.5-0.8b qwen3.5-4b
stamp synth
for f in 'kernels_deltanet/*' 'plan_qwen35/*'; do
  KILN_TEST_DEVICE=cuda:0 timeout 150 $T -j8 --filter "$f" >> $out/suites.txt 2>&1; echo "rc=$?" >> $out/suites.txt
done
stamp suites
tarball
prof() { # name model tokens device [env...]
  local name=$1 m=$2 n=$3 d=$4; shift 4
  env "$@" timeout 90 $K run $m -p "$prompt" -n 2 --device $d --no-echo --profile-tokens $n \
    > /dev/null 2> $out/prof-$name.txt
}
for p in qwen3.5-0.8b qwen3.5-4b; do
  prof $p-512 $dir/$p.gguf 512 cuda:0
  prof $p-24 $dir/$p.gguf 24 cuda:0
done
stamp prof
tarball
for p in qwen3.5-0.8b qwen3.5-4b; do
  timeout 150 $K bench $dir/$p.gguf -p 24,512,4096 -n 32 -r 3 --device cuda:0 -o md > $out/b-$p.md 2>&1
  KILN_DN_PARTS=3 timeout 60 $K bench $dir/$p.gguf -p 512 -n 0 -r 3 --device cuda:0 -o md > $out/b3-$p.md 2>&1
  stamp "$p"
  tarball
done
