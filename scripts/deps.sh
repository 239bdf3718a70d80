#!/usr/bin/env bash
# Installs, idempotently, the Debian 12 packages kiln needs to build, test and run.
# Safe to call on every run: it only touches apt when a package is missing.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git ca-certificates
  clang-14 libclang-rt-14-dev          # libFuzzer + sanitizer runtimes
  llvm-19-dev                          # PTX emitter (LLVM-C API, NVPTX)
  libvulkan-dev mesa-vulkan-drivers    # Vulkan loader + lavapipe
  spirv-tools spirv-headers            # SPIR-V validator/disassembler, headers
  libcriterion-dev                     # tests
  libjansson-dev                       # JSON (inspect --json, tokenizer.json, server)
  libutf8proc-dev                      # Unicode categories for the pre-tokenizers
  libmicrohttpd-dev                    # HTTP for kiln serve
  curl                                 # tests: kiln serve's clients
  haproxy                              # tests: replicas behind a balancer (docs/replicas.md)
  python3
  python3-jsonschema                   # tests: kiln diverge --json against docs/diverge.schema.json
  python3-venv                         # tests: a venv for the pinned openai client (pulls python3.11-venv,
                                       # python3-pip-whl and python3-setuptools-whl: ensurepip's wheels)
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
