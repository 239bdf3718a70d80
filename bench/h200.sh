#!/usr/bin/env bash
# The H200 measurements behind bench/results: run on the device machine from the repo
# root, with a Release build in build-dev (see ../shared/device/README.md for the
# runtime). Prints each `kiln run` summary line; nothing here is a test.
#   bench/h200.sh [MODEL_DIR]
set -u
K=build-dev/kiln
dir=${1:-/tmp/kiln-bench}
mkdir -p "$dir"
export KILN_CACHE_DIR=$dir/cache
for p in qwen3-0.6b qwen3-8b; do
    [ -f "$dir/$p.gguf" ] || $K synth --preset $p -o "$dir/$p.gguf" >/dev/null || exit 1
done
# 512 prompt tokens: digits and spaces are one token per byte in the synthesized
# byte-level vocabulary (checked with kiln tokenize; the summary line prints the count)
p512=$(seq 0 999 | tr "\n" " " | head -c 512)
for p in qwen3-0.6b qwen3-8b; do
    m=$dir/$p.gguf
    echo "== $p"
    rm -rf "$KILN_CACHE_DIR"
    echo "-- time to first token, empty pipeline cache"
    $K run "$m" -p "Hello" -n 1 --device vulkan:0 --no-echo 2>&1 >/dev/null | grep 'first token'
    echo "-- time to first token, warm pipeline cache"
    $K run "$m" -p "Hello" -n 1 --device vulkan:0 --no-echo 2>&1 >/dev/null | grep 'first token'
    echo "-- decode (256 tokens), three runs"
    for i in 1 2 3; do $K run "$m" -p "Hello" -n 256 --device vulkan:0 --no-echo 2>&1 >/dev/null | grep 'generated'; done
    echo "-- prefill of 512 tokens, three runs"
    for i in 1 2 3; do $K run "$m" -p "$p512" -n 1 --device vulkan:0 --no-echo 2>&1 >/dev/null | grep 'generated'; done
done
