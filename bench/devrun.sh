#!/usr/bin/env bash
# Fills devrun/ (git-ignored) for the H200 scripts (bench/h200-common.sh): a Release build
# of kiln and kiln-tests, the shared libraries the device's image lacks (Criterion and its
# dependencies, jansson, utf8proc, libmicrohttpd; libLLVM, libz3 and libvulkan come from
# .device-runtime), and the small test models. Run here, then carry devrun with
# .device-runtime.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh build-rel -DCMAKE_BUILD_TYPE=Release >/dev/null
rm -rf devrun && mkdir -p devrun/lib devrun/data/models
cp build-rel/kiln build-rel/kiln-tests devrun/
# every library the binaries load but libc's, the compiler's, LLVM's and Vulkan's (and
# ICU's, which LLVM's libxml2 takes from the image)
ldd build-rel/kiln-tests build-rel/kiln | awk '/=>/ {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++*|libgcc_s*|libLLVM*|libz3*|libvulkan*|libicu*|libxml2*|libz.so*|libzstd*|libffi*|libedit*|libtinfo*|liblzma*|libbsd*|libmd.so*) ;;
    *) cp -L "$lib" devrun/lib/ ;;
  esac
done
grep -q '^/devrun/$' .git/info/exclude 2>/dev/null || echo /devrun/ >> .git/info/exclude
for f in stories260K.gguf stories260K.greedy.json qwen35-tiny.gguf qwen35-tiny.llamacpp.json dense-F16.gguf \
    dense-Q*.gguf dense-Q*.f32dequant-kvf32-nofa.llamacpp.json qwen3moe-tiny*; do
  for g in ../shared/testdata/models/$f; do [ -f "$g" ] && cp "$g" devrun/data/models/; done
done
du -sh devrun
