#!/usr/bin/env bash
# kiln's main job: synthesize the `tiny` model, inspect it, and run it on every device
# found: the CPU oracle, each Vulkan device (lavapipe here), each CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh build
out=${KILN_OUT:-build/tiny.gguf}
./build/kiln synth --preset tiny -o "$out"
./build/kiln inspect "$out"
# every device `kiln probe` lists runs the model (its labels are the unindented lines)
for dev in $(./build/kiln probe 2>/dev/null | grep -E '^(cpu|vulkan:[0-9]+|cuda:[0-9]+)$'); do
  echo "== $dev"
  ./build/kiln run "$out" -p "Hello" -n 16 --device "$dev"
done
