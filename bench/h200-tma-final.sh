#!/usr/bin/env bash
# Issue 14 on the H200, the tma session's last call: llama.cpp built in the background
# (.peers, its Vulkan binary left out) while the plan and device suites run on cuda:0 and a
# 512-token block of qwen3-8b is profiled; cuBLAS and SDPA (torch); then the side-by-side
# (kiln bench and llama-bench -fa 1 on the same files, pp24/pp512/pp2048/tg32, medians of
# 3) on qwen3-8b, -4b and -0.6b, one model at a time; kiln diverge on qwen3-0.6b with the
# time left. Binaries in devrun/ (bench/devrun.sh). Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
llama_build
synth qwen3-8b qwen3-4b qwen3-0.6b
stamp synth
KILN_TEST_DEVICE=cuda:0 timeout 170 $T -j6 --filter 'plan*/*' > $out/plan.txt 2>&1; echo "rc=$?" >> $out/plan.txt
timeout 60 $T --filter 'cuda/*' > $out/cuda.txt 2>&1; echo "rc=$?" >> $out/cuda.txt
stamp suites
for n in 24 512; do
  timeout 60 $K run $dir/qwen3-8b.gguf -p "$prompt" -n 2 --device cuda:0 --no-echo --profile-tokens $n \
    > /dev/null 2> $out/prof-8b-$n.txt
done
timeout 100 python3 bench/torch_shapes.py 4096 4096 1024 12288 32 8 128 512 2048 > $out/torch.md 2>&1
stamp profiles
tarball
llama_wait
for m in qwen3-8b qwen3-4b qwen3-0.6b; do sbs $m 24,512,2048 cuda:0 $m; done
timeout 100 $K diverge $dir/qwen3-0.6b.gguf --device cuda:0 -n 16 > $out/div-qwen3-0.6b.md 2>&1; echo "rc=$?" >> $out/div-qwen3-0.6b.md
stamp diverge
tarball
