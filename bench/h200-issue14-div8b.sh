#!/usr/bin/env bash
# Issue 14: kiln diverge on qwen3-8b (cuda:0 against the contract oracle), the six built-in
# prompts at 8 greedy steps: what fits the device time left (the CPU oracle on the 8B takes
# about half a minute a prompt). Binaries in devrun/. Writes OUTDIR.tar.
set -u
out=$1
source bench/h200-common.sh
synth qwen3-8b
timeout 170 $K diverge $dir/qwen3-8b.gguf --device cuda:0 -n 8 > $out/div-qwen3-8b.md 2>&1; echo "rc=$?" >> $out/div-qwen3-8b.md
tar cf $out.tar -C $(dirname $out) $(basename $out)
