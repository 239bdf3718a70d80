#!/usr/bin/env bash
# kiln's main job, for now: synthesize the `tiny` model and inspect it.
# (Later: run a model on every device found and report how far each is from the oracle.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh build
out=${KILN_OUT:-build/tiny.gguf}
./build/kiln synth --preset tiny -o "$out"
./build/kiln inspect "$out"
