#!/usr/bin/env bash
# The llama.cpp peer's virtual environment, outside the repository, for
# scripts/bench-generate-peer.sh and scripts/bench-shape-peer.sh: llama-cpp-python==0.3.36
# (the version the golden references and scripts/build-llama-server.sh use) built from
# source for this CPU (GGML_NATIVE=ON with AMX off; 10-30 minutes on 2 cores the first
# time), numpy and gguf. Prints the venv's path; later runs reuse it.
#
#   VENV="$(bash scripts/bench-venv-llama.sh)"
#
# ${LUCENT_BENCH_VENV:-$HOME/.cache/lucent/bench-venv-llama} is the place. LLAMA_CMAKE_ARGS
# replaces the build flags, REBUILD=1 forces a rebuild. AMX is left out by default: on a
# CPU with AMX whose kernel (or VM) does not grant AMX tile state, a native build crashes
# in `ldtilecfg` on the first evaluation (the -mno-amx-* flags change nothing on a CPU
# without AMX).
set -euo pipefail
VENV="${LUCENT_BENCH_VENV:-$HOME/.cache/lucent/bench-venv-llama}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" >&2
fi
if [ -n "${REBUILD:-}" ] || ! "$VENV/bin/python" -c "import llama_cpp" 2>/dev/null; then
    echo "building llama-cpp-python 0.3.36 into $VENV (10-30 minutes the first time)..." >&2
    NOAMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    CMAKE_ARGS="${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=ON -DCMAKE_C_FLAGS='$NOAMX' -DCMAKE_CXX_FLAGS='$NOAMX'}" \
        "$VENV/bin/python" -m pip install --quiet --force-reinstall --no-cache-dir \
        llama-cpp-python==0.3.36 numpy >&2
fi
"$VENV/bin/python" -c "import numpy, gguf" 2>/dev/null \
    || "$VENV/bin/python" -m pip install --quiet numpy gguf >&2
echo "$VENV"
