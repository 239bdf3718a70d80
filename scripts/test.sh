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
# Vulkan pipeline caches go to the build folder, not the user's ~/.cache.
export KILN_CACHE_DIR="${KILN_CACHE_DIR:-$PWD/$dir/cache}"
# Criterion runs each test in its own process; -j2 matches the 2-core machines.
if [ "${KILN_SANITIZE:-0}" != 1 ]; then
  exec "./$dir/kiln-tests" -j"$(nproc)" --verbose=0 "$@"
fi
# Under LeakSanitizer, Criterion's own runner leaks a few bytes at exit (a report whose
# stack is all libcriterion), and a leak inside a test's worker process does not fail
# that test. So leaks only print (exitcode=0), and a report whose stack passes through
# kiln's own sources fails the run.
export LSAN_OPTIONS="exitcode=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
"./$dir/kiln-tests" -j"$(nproc)" --verbose=0 "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
if awk -v root="$PWD/" '
    /ERROR: LeakSanitizer/ { inb = 1; next }
    inb && index($0, root) && /\.[ch]:[0-9]+/ { ours = 1 } # a frame with a kiln source line, not
                                                          # a JIT frame symbolized into the binary
    inb && /^SUMMARY: AddressSanitizer/ { inb = 0 }
    END { exit ours ? 0 : 1 }' "$log"; then
  echo "test.sh: memory leaked in kiln's code (LeakSanitizer report above)" >&2
  exit 1
fi
grep -a "Synthesis:" "$log" | tail -n 1 # the runner's verdict last, after any report of its own leak
exit "$rc"
