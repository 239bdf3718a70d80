#!/usr/bin/env bash
# kiln's main job, a one-screen answer to "does this machine run kiln, and how well":
# build, then on a model (the `tiny` synth model, written on the fly, unless a GGUF path
# is given) on every device found (the CPU oracle, each Vulkan device, each CUDA device):
# the probe summary, each device's divergence verdict against the oracle, and speed.
#   bash scripts/main.sh [MODEL.gguf]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh build >/dev/null
K=./build/kiln
model=${1:-}
if [ -z "$model" ]; then
  model=${KILN_OUT:-build/tiny.gguf}
  $K synth --preset tiny -o "$model" >/dev/null
fi
[ -f "$model" ] || { echo "main.sh: no such model: $model" >&2; exit 1; }

echo "== devices (kiln probe --measure)"
$K probe --measure 2>/dev/null | grep -E '^(cpu|vulkan:[0-9]+|cuda:[0-9]+)$|^  (name|driver|measured [a-z ]+):' || true

echo
echo "== divergence from the oracle (kiln diverge, greedy, 16 tokens per prompt)"
rc=0
$K diverge "$model" -n 16 2>/dev/null > build/main-diverge.md || rc=$?
sed -n '/^## Verdicts/,/^## /p' build/main-diverge.md | grep '^- ' || true
case $rc in
  0) echo "every divergence explained (full report: build/main-diverge.md)" ;;
  3) echo "SOME DIVERGENCE IS NOT EXPLAINED: see build/main-diverge.md" ;;
  *) echo "kiln diverge failed (exit $rc)" ;;
esac

echo
echo "== speed (kiln bench, tokens/s)"
$K bench "$model" -p 128 -n 64 -r 2 2>/dev/null | grep -vE '^kiln |^$' || echo "kiln bench failed"
[ "$rc" -eq 0 ]
