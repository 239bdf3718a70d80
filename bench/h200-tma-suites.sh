#!/usr/bin/env bash
# Every kernel, plan and device suite on cuda:0 with the session's last binaries
# (bench/devrun.sh), and kiln bench on qwen3-4b at 24 and 512 tokens. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
suites 8 200
stamp suites
tarball
synth qwen3-4b
timeout 90 $K bench $dir/qwen3-4b.gguf --device cuda:0 -p 24,512 -n 32 -r 3 -o md > $out/bench-4b.md 2>&1
stamp bench
tarball
