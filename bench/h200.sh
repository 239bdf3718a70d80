#!/usr/bin/env bash
# The H200 measurements behind bench/results: run on the device machine from the repo
# root, with a Release build in build-dev (see ../shared/device/README.md for the
# runtime). Prints each `kiln run` summary line and a per-kernel profile of a decode
# step; nothing here is a test.
#   bench/h200.sh [MODEL_DIR]     (DEVICES="vulkan:0 cuda:0", MODELS="qwen3-0.6b qwen3-8b")
set -u
K=build-dev/kiln
dir=${1:-/tmp/kiln-bench}
mkdir -p "$dir"
export KILN_CACHE_DIR=$dir/cache
models=${MODELS:-qwen3-0.6b qwen3-8b}
for p in $models; do
    [ -f "$dir/$p.gguf" ] || $K synth --preset $p -o "$dir/$p.gguf" >/dev/null || exit 1
done
# N prompt tokens: digits and spaces are one token per byte in the synthesized byte-level
# vocabulary (checked with kiln tokenize; the summary line prints the count, +1 for BOS)
prompt() { seq 0 9999 | tr "\n" " " | head -c "$1"; }
summary() { grep -E 'generated|first token|kiln:'; }
for p in $models; do
    m=$dir/$p.gguf
    for dev in ${DEVICES:-vulkan:0 cuda:0}; do
        echo "== $p on $dev"
        rm -rf "$KILN_CACHE_DIR"
        echo "-- time to first token: empty caches, then warm"
        $K run "$m" -p "Hello" -n 1 --device $dev --no-echo 2>&1 >/dev/null | grep -E 'first token|kiln:'
        $K run "$m" -p "Hello" -n 1 --device $dev --no-echo 2>&1 >/dev/null | grep -E 'first token|kiln:'
        echo "-- decode (256 tokens), with a profile of the step at its end"
        $K run "$m" -p "Hello" -n 256 --device $dev --no-echo --profile 2>&1 >/dev/null | grep -vE 'first token|^$'
        sizes=512
        [ "$p" = qwen3-0.6b ] && sizes="127 511 2047"
        for n in $sizes; do
            echo "-- prefill of $((n + 1)) tokens"
            $K run "$m" -p "$(prompt $n)" -n 1 --device $dev --no-echo 2>&1 >/dev/null | summary
        done
    done
done
