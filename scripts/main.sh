#!/usr/bin/env bash
# kiln's main job: synthesize the `tiny` model, inspect it, and run it on every device
# found (today the CPU oracle; the GPU backends join as they land).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh build
out=${KILN_OUT:-build/tiny.gguf}
./build/kiln synth --preset tiny -o "$out"
./build/kiln inspect "$out"
# every device found (today: the CPU oracle) runs the model
./build/kiln run "$out" -p "Hello" -n 16 --device cpu
