#!/usr/bin/env bash
# Builds kiln and runs the whole test suite (Criterion). With KILN_SANITIZE=1 it
# builds into build-asan/ with AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
if [ "${KILN_SANITIZE:-0}" = 1 ]; then
  dir=build-asan
  bash scripts/build.sh "$dir" -DKILN_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
else
  dir=build
  bash scripts/build.sh "$dir"
fi
# Criterion runs each test in its own process; -j2 matches the 2-core machines.
"./$dir/kiln-tests" -j"$(nproc)" --verbose=0 "$@"
