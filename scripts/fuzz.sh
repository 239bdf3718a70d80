#!/usr/bin/env bash
# Fuzzes the GGUF reader with libFuzzer for a bounded time (default 60 s), seeded with
# every GGUF in ../shared/testdata, tests/fuzz/seeds and a small synthesized model. A crash is copied to
# tests/fuzz/regressions/ (to commit as a regression test) and fails the run.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
bash scripts/deps.sh
CC=clang-14 cmake -S . -B build-fuzz -DKILN_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz-gguf
bash scripts/build.sh build >/dev/null
corpus=build-fuzz/corpus
mkdir -p "$corpus" build-fuzz/crashes
data=${KILN_TESTDATA:-../shared/testdata}
if [ -d "$data" ]; then
  find "$data" -name '*.gguf' -exec cp -f {} "$corpus/" \;
elif [ "${KILN_REQUIRE_TESTDATA:-0}" = 1 ]; then
  echo "fuzz.sh: test data folder $data is absent and KILN_REQUIRE_TESTDATA=1" >&2
  exit 1
fi
cp -f tests/fuzz/seeds/* "$corpus/"
# a whole valid model small enough for -max_len, so mutations reach the tensor table and data
./build/kiln synth --preset tiny --layers 1 --hidden 16 --heads 2 --kv-heads 1 --ffn 24 --vocab 300 \
  -o "$corpus/tiny-small.gguf" >/dev/null
rc=0
./build-fuzz/fuzz-gguf "$corpus" -max_total_time="$secs" -max_len=262144 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix=build-fuzz/crashes/ -print_final_stats=1 2>build-fuzz/fuzz.log || rc=$?
grep -E "^(stat::|#[0-9]+ +DONE)" build-fuzz/fuzz.log || true
if [ $rc -ne 0 ]; then
  mkdir -p tests/fuzz/regressions
  cp build-fuzz/crashes/* tests/fuzz/regressions/ 2>/dev/null || true
  tail -40 build-fuzz/fuzz.log >&2
  echo "fuzz.sh: the fuzzer found a crash (copied to tests/fuzz/regressions/)" >&2
  exit 1
fi
echo "fuzz.sh: no crash in ${secs} s"
