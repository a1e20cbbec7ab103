#!/usr/bin/env bash
# lucent against llama.cpp on a random-weight file of a real model's shape (the issue's
# "Qwen3-0.6B-shaped Q4_K_M" benchmark): prefill and decode tok/s, same prompt ids, same
# threads, interleaved rounds (scripts/bench-generate-peer.sh does the measuring).
#
#   scripts/bench-shape-peer.sh                                  # qwen3-0.6b, Q4_K_M
#   SHAPE=qwen3moe-a3b-8 QUANT=Q4_K_M REPEATS=5 scripts/bench-shape-peer.sh
#
# The file is made once into ${LUCENT_SHAPES:-$HOME/.cache/lucent/shapes}:
# scripts/make_gguf_shape.py writes the shape with Q8_0 matrices, llama.cpp's own
# llama-quantize (built by scripts/build-llama-server.sh from the llama-cpp-python 0.3.36
# sources) makes the QUANT mix. Speed depends on shapes and block types only, so random
# weights measure what the real file would. THREADS, REPEATS, PROMPT, GEN as in
# bench-generate-peer.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SHAPE="${SHAPE:-qwen3-0.6b}"
QUANT="${QUANT:-Q4_K_M}"
DIR="${LUCENT_SHAPES:-$HOME/.cache/lucent/shapes}"
FILE="$DIR/$SHAPE-$QUANT.gguf"
mkdir -p "$DIR"
if [ ! -s "$FILE" ]; then
    # make_gguf_shape.py borrows make_gguf_families.py's tables, which imports llama_cpp.
    VENV="$(bash "$ROOT/scripts/bench-venv-llama.sh")"
    QUANTIZE="$(bash "$ROOT/scripts/build-llama-server.sh" llama-quantize)"
    echo "writing $SHAPE (Q8_0) and quantising it to $QUANT with $QUANTIZE ..." >&2
    # The Q8_0 source under its own name, so that QUANT=Q8_0 does not remove its result.
    SOURCE="$DIR/$SHAPE-source-Q8_0.gguf"
    "$VENV/bin/python" "$ROOT/scripts/make_gguf_shape.py" "$SHAPE" "$SOURCE"
    "$QUANTIZE" --allow-requantize "$SOURCE" "$FILE.part" "$QUANT" >&2
    mv "$FILE.part" "$FILE"
    rm -f "$SOURCE"
fi
MODEL="$FILE" exec bash "$ROOT/scripts/bench-generate-peer.sh"
