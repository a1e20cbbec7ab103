#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the sources inside the llama-cpp-python 0.3.36
# sdist (the version the golden references came from), outside the repository, for
# scripts/bench-serve-peer.sh:
#   - a venv with cmake, ninja and scikit-build-core from PyPI;
#   - `pip download --no-deps --no-binary :all: --no-build-isolation llama-cpp-python==0.3.36`;
#   - cmake -DLLAMA_CURL=OFF -DGGML_NATIVE=ON, AMX off (-mno-amx-*: AMX crashes on this
#     machine), --target llama-server.
# Prints the path of the binary. Re-running reuses what is there. An argument names another
# llama.cpp tool to build the same way (`scripts/build-llama-server.sh llama-quantize`).
set -euo pipefail
ROOT="${LUCENT_LLAMA_DIR:-$HOME/.cache/lucent/llama-server-0.3.36}"
TARGET="${1:-llama-server}"
BIN="$ROOT/build/bin/$TARGET"
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$ROOT"
cd "$ROOT"
if [ ! -x venv/bin/cmake ]; then
  python3 -m venv venv
  venv/bin/pip install -q --disable-pip-version-check cmake ninja scikit-build-core >&2
fi
if [ ! -d src ]; then
  venv/bin/pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
    --no-build-isolation llama-cpp-python==0.3.36 -d dl >&2
  mkdir -p src && tar -xzf dl/llama_cpp_python-0.3.36.tar.gz -C src --strip-components 1
fi
NOAMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
PATH="$ROOT/venv/bin:$PATH" cmake -S src/vendor/llama.cpp -B build -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON \
  -DCMAKE_C_FLAGS="$NOAMX" -DCMAKE_CXX_FLAGS="$NOAMX" >&2
PATH="$ROOT/venv/bin:$PATH" nice -n 10 cmake --build build --target "$TARGET" -j "${LUCENT_BUILD_JOBS:-2}" >&2
echo "$BIN"
