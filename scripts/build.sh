#!/usr/bin/env bash
# Configures and builds kiln into a build folder (default build/). Extra args go to cmake.
#   scripts/build.sh [BUILD_DIR] [-DKILN_SANITIZE=ON ...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -DKILN_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
