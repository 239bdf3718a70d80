#!/usr/bin/env bash
# Issue 14 on the H200, first call after the tensor-copy-engine product and the early
# launches (bench/devrun.sh's binaries in devrun/): the product and device suites on cuda:0
# (a hang is cut by its timeout), then qwen3-8b: where 24-, 512- and 2048-token blocks go
# (kiln run --profile-tokens) with the tma product and without (KILN_MATMUL_TMA=0), kiln
# bench with and without the early launches (KILN_EARLY=0), cuBLAS and SDPA on the same
# shapes (torch). Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
KILN_TEST_DEVICE=cuda:0 timeout 240 $T -j4 --filter 'kernels_matmul/*' > $out/kmm.txt 2>&1; echo "rc=$?" >> $out/kmm.txt
timeout 60 $T --filter 'cuda/*' > $out/cuda.txt 2>&1; echo "rc=$?" >> $out/cuda.txt
stamp suites
tarball
synth qwen3-8b
stamp synth
prof() { # name tokens [env...]
  local name=$1 n=$2; shift 2
  env "$@" timeout 90 $K run $dir/qwen3-8b.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens $n \
    > /dev/null 2> $out/prof-$name.txt
}
prof tma-512 512
prof tma-2048 2048
prof wg-512 512 KILN_MATMUL_TMA=0
prof early-24 24
prof late-24 24 KILN_EARLY=0
stamp profiles
tarball
b() { # name [VAR=value...] bench-args...
  local name=$1 envs=(); shift
  while [[ ${1:-} == *=* ]]; do envs+=("$1"); shift; done
  env "${envs[@]}" timeout 120 $K bench $dir/qwen3-8b.gguf --device cuda:0 -r 3 -o md "$@" > $out/bench-$name.md 2>&1
}
b default -p 24,512,2048 -n 32
b late KILN_EARLY=0 -p 24 -n 32
b wg KILN_MATMUL_TMA=0 -p 512,2048 -n 0
stamp bench
tarball
timeout 120 python3 bench/torch_shapes.py 4096 4096 1024 12288 32 8 128 24 512 2048 > $out/torch.md 2>&1
stamp torch
tarball
